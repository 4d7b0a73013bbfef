//! A PostgreSQL cluster of one test's own, for tests that stop, freeze or
//! crash the server: the shared one (`PAYHOOK_TEST_DATABASE_URL`) serves
//! other tests running at the same time. Made by `.ci/start-postgres` (a
//! throwaway cluster in a temp dir, on a free loopback port, run as the
//! `postgres` user when the tests run as root), stopped and removed on drop.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A running throwaway cluster; stopped (immediately) and deleted on drop.
pub struct OwnPostgres {
    /// `postgres://payhook@127.0.0.1:PORT/postgres`.
    pub url: String,
    dir: PathBuf,
    bin: PathBuf,
    port: String,
}

impl OwnPostgres {
    /// Starts a new cluster, configured as `.ci/start-postgres` does
    /// (`synchronous_commit = off` among its settings).
    pub fn start() -> Self {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/start-postgres");
        let output = Command::new(&script)
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap_or_else(|err| panic!("run {}: {err}", script.display()));
        assert!(output.status.success(), ".ci/start-postgres failed");
        let exports = String::from_utf8_lossy(&output.stdout);
        let value = |name: &str| {
            exports
                .lines()
                .find_map(|line| line.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("{name} not in the output of .ci/start-postgres: {exports}"))
                .to_owned()
        };
        Self {
            url: value("PAYHOOK_TEST_DATABASE_URL"),
            dir: PathBuf::from(value("PAYHOOK_TEST_PG_DIR")),
            bin: PathBuf::from(value("PAYHOOK_TEST_PG_BIN")),
            port: value("PAYHOOK_TEST_PG_PORT"),
        }
    }

    /// A command run as the cluster's owner (`runuser -u postgres --` as root).
    fn as_owner(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        // PostgreSQL refuses to run as root: `id -u` says whether the tests do.
        let root = Command::new("id")
            .arg("-u")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
            .unwrap_or(false);
        if root {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    /// `pg_ctl stop -m immediate`: every server process quits at once, as in
    /// a crash (what is not yet written to the WAL is lost).
    pub fn stop_immediate(&self) {
        let status = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["stop", "-m", "immediate", "-w"])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run pg_ctl stop");
        assert!(status.success(), "pg_ctl stop failed");
    }

    /// Starts the stopped cluster again, on the same port and settings.
    pub fn restart(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let status = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("postgres.log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run pg_ctl start");
        assert!(status.success(), "pg_ctl start failed");
    }

    /// The process ids of the server: the postmaster (first line of
    /// `postmaster.pid`) and every child of it.
    pub fn pids(&self) -> Vec<u32> {
        let pid_file = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).expect("postmaster.pid");
        let postmaster: u32 = pid_file
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .expect("a pid");
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid …: comm may hold spaces, so read after ')'.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            if parent == Some(postmaster) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Sends `signal` (`STOP`, `CONT`) to every server process.
    pub fn signal(&self, signal: &str) {
        for pid in self.pids() {
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string())
                .status();
        }
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        self.signal("CONT");
        let _ = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["stop", "-m", "immediate"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        std::thread::sleep(Duration::from_millis(100));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
