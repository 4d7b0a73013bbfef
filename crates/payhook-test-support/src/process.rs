//! [`Process`]: a program the tests start (`payhook emulate`, an example
//! receiver), its output read as it comes, killed when the test is done.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the waits below look at the output again.
const POLL: Duration = Duration::from_millis(20);

/// A child process, killed (and reaped) when dropped, even when the test
/// panics before it is done with it. Threads read its stdout line by line
/// and its stderr as text from the start, so that it never blocks on a full
/// pipe; the waits below read what they kept, and every failure shows both.
pub struct Process {
    name: String,
    child: Mutex<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    stdout_ended: Arc<AtomicBool>,
    stderr: Arc<Mutex<String>>,
    /// How many lines [`Process::next_line`] has returned.
    read: AtomicUsize,
}

impl Process {
    /// Starts `command` with stdin empty and stdout and stderr read here;
    /// `name` says which program it is in failure messages. Panics when it
    /// cannot start.
    pub fn spawn(name: &str, command: &mut Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {name}: {err}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout_ended = Arc::new(AtomicBool::new(false));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sink, ended) = (Arc::clone(&lines), Arc::clone(&stdout_ended));
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                lock(&sink).push(line);
            }
            ended.store(true, Ordering::Release);
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("stderr is piped");
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                lock(&sink).push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self {
            name: name.to_owned(),
            child: Mutex::new(child),
            lines,
            stdout_ended,
            stderr,
            read: AtomicUsize::new(0),
        }
    }

    /// The process id (for `kill -HUP` and the like).
    pub fn pid(&self) -> u32 {
        lock(&self.child).id()
    }

    /// Whether the process is still running.
    pub fn running(&self) -> bool {
        matches!(lock(&self.child).try_wait(), Ok(None))
    }

    /// Every line printed on stdout so far.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.lines).clone()
    }

    /// Everything printed on stderr so far.
    pub fn stderr(&self) -> String {
        lock(&self.stderr).clone()
    }

    /// Waits for a stdout line (printed since the start) matching `matches`
    /// and returns the first one; with `|_| true`, the first line printed.
    /// Panics, with the output so far, when none comes within `timeout` or
    /// the process exits first.
    pub fn wait_for_line(&self, timeout: Duration, matches: impl Fn(&str) -> bool) -> String {
        self.wait_for_lines(timeout, 1, matches).remove(0)
    }

    /// Waits until `count` stdout lines (printed since the start) match
    /// `matches`, and returns all that do; panics as
    /// [`wait_for_line`](Self::wait_for_line) does.
    pub fn wait_for_lines(
        &self,
        timeout: Duration,
        count: usize,
        matches: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let found: Vec<String> = self.lines().into_iter().filter(|line| matches(line)).collect();
            if found.len() >= count {
                return found;
            }
            let exited = lock(&self.child).try_wait();
            if let Ok(Some(status)) = exited {
                // The lines it printed before exiting may still be on their
                // way through the reader thread: wait for its end of stdout,
                // then look once more before reporting.
                let drained = Instant::now() + Duration::from_secs(5);
                while !self.stdout_ended.load(Ordering::Acquire) && Instant::now() < drained {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let found: Vec<String> = self.lines().into_iter().filter(|line| matches(line)).collect();
                if found.len() >= count {
                    return found;
                }
                panic!(
                    "{} exited ({status}) before printing the expected line; {}",
                    self.name,
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: expected {count} line(s), {} printed in {timeout:?}; {}",
                self.name,
                found.len(),
                self.output()
            );
            std::thread::sleep(POLL);
        }
    }

    /// The next stdout line not yet returned by this method (the first one
    /// at the first call). Panics, with the output so far, when none comes
    /// within `timeout` or stdout ends first.
    pub fn next_line(&self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.take_line() {
                return line;
            }
            let ended = self.stdout_ended.load(Ordering::Acquire);
            if ended || Instant::now() >= deadline {
                // One more look: the line may have come with the end.
                if let Some(line) = self.take_line() {
                    return line;
                }
                panic!(
                    "{}: no stdout line after {:?} ({}); {}",
                    self.name,
                    timeout,
                    if ended { "stdout ended" } else { "timed out" },
                    self.output()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits until the process exits by itself (it is not killed): its exit
    /// status, or `None` when it still runs after `timeout`.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let exited = lock(&self.child).try_wait();
            if let Ok(Some(status)) = exited {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// The stdout lines [`next_line`](Self::next_line) has not returned, once
    /// stdout has ended (the process exited) or `timeout` has passed.
    pub fn rest_of_stdout(&self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        while !self.stdout_ended.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        let lines = lock(&self.lines);
        let read = self.read.swap(lines.len(), Ordering::AcqRel);
        lines[read.min(lines.len())..].to_vec()
    }

    /// The line after the last one [`next_line`](Self::next_line) returned,
    /// when it has been printed.
    fn take_line(&self) -> Option<String> {
        let lines = lock(&self.lines);
        let read = self.read.load(Ordering::Acquire);
        let line = lines.get(read).cloned()?;
        self.read.store(read + 1, Ordering::Release);
        Some(line)
    }

    /// Stdout and stderr so far, for a failure message.
    fn output(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.lines().join("\n"), self.stderr())
    }
}

/// `payhook emulate` (the `payhook` executable given) on a free loopback port
/// with the API key `key`, delivering every event to `forward_to`: the start
/// of the tests' emulator commands, for [`Process::spawn`] after any further
/// arguments.
pub fn payhook_emulate(payhook: impl AsRef<OsStr>, key: &str, forward_to: &str) -> Command {
    let mut command = Command::new(payhook);
    command.args([
        "emulate",
        "--addr",
        "127.0.0.1:0",
        "--key",
        key,
        "--forward-to",
        forward_to,
    ]);
    command
}

impl Drop for Process {
    fn drop(&mut self) {
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The lock, even when a reader thread panicked holding it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> Process {
        Process::spawn("sh", Command::new("sh").args(["-c", script]))
    }

    #[test]
    fn lines_are_read_in_order_and_the_rest_after_the_exit() {
        let process = shell("echo first; echo ready on 1; echo oops >&2; echo last");
        assert_eq!(
            process.wait_for_line(Duration::from_secs(10), |line| line.starts_with("ready")),
            "ready on 1"
        );
        assert_eq!(process.next_line(Duration::from_secs(10)), "first");
        assert!(process
            .wait_exit(Duration::from_secs(10))
            .expect("exits")
            .success());
        assert_eq!(
            process.rest_of_stdout(Duration::from_secs(10)),
            ["ready on 1", "last"]
        );
        assert_eq!(process.stderr(), "oops\n");
    }

    #[test]
    #[should_panic(expected = "exited")]
    fn a_process_that_exits_before_its_line_fails_the_wait() {
        shell("echo something else").wait_for_line(Duration::from_secs(10), |line| line == "ready");
    }

    #[test]
    fn dropping_kills_it() {
        let process = shell("echo up; exec sleep 60");
        process.next_line(Duration::from_secs(10));
        let pid = process.pid();
        drop(process);
        let alive = Command::new("kill")
            .args(["-0", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(!alive.success(), "process {pid} still runs");
    }
}
