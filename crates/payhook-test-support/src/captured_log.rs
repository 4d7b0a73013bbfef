//! A log written in memory, for tests that read what was logged.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Text written by a log subscriber and read by tests; clones share it.
///
/// Hand a `tracing_subscriber` writer `move || log.clone()`. A test that
/// panics while it reads the log does not poison it for the others: it is
/// written and read whatever a panicking reader left (a whole buffer of
/// bytes), so one failing test cannot make every later log line panic in
/// its neighbours.
#[derive(Debug, Clone, Default)]
pub struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }

    /// The lines written so far for which `keep` holds.
    pub fn lines(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let bytes = self.bytes();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| keep(line))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
