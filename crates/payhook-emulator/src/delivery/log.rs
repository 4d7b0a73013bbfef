//! The one log line per attempt (`tracing`, target `payhook_emulator::delivery`):
//! its parts written straight into it; no secret is ever in it.

use std::time::Duration;

use crate::model::DeliveryAttempt;

pub(super) fn log_attempt(record: &DeliveryAttempt, next: Option<Duration>) {
    // Formatting costs more than the check: skip it when nobody listens.
    if !tracing::enabled!(target: "payhook_emulator::delivery", tracing::Level::INFO) {
        return;
    }
    tracing::info!(
        target: "payhook_emulator::delivery",
        "{} {} -> {} {} attempt {}{}: {} in {} ms{}",
        record.event,
        record.event_type,
        record.webhook_endpoint,
        record.url,
        record.attempt,
        CopyNote(record.copy, record.resend),
        AttemptResult(record),
        record.duration_ms,
        NextNote(record.succeeded, next),
    );
}

/// ` (resend N)` for a delivery an API resend asked for, ` (duplicate copy
/// N)` for a copy the `duplicates` fault added. The log line's parts are
/// written straight into it, not built as strings first.
struct CopyNote(u32, u64);

impl std::fmt::Display for CopyNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.1 > 0 {
            write!(f, " (resend {})", self.1)?;
        }
        if self.0 > 0 {
            write!(f, " (duplicate copy {})", self.0)?;
        }
        Ok(())
    }
}

/// The status, the error, or both.
struct AttemptResult<'a>(&'a DeliveryAttempt);

impl std::fmt::Display for AttemptResult<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.0.status, &self.0.error) {
            (Some(status), None) => write!(f, "{status}"),
            (Some(status), Some(error)) => write!(f, "{status}, {error}"),
            (None, Some(error)) => f.write_str(error),
            (None, None) => f.write_str("no reply"),
        }
    }
}

/// What happens next: another attempt, nothing more, or nothing (acknowledged).
struct NextNote(bool, Option<Duration>);

impl std::fmt::Display for NextNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(delay) => write!(f, "; next attempt in {:.1} s", delay.as_secs_f64()),
            None if self.0 => Ok(()),
            None => f.write_str("; no more attempts"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_line_parts_say_what_happened() {
        let mut record = DeliveryAttempt {
            duration_ms: 3,
            ..DeliveryAttempt::example("da_x")
        };
        assert_eq!(AttemptResult(&record).to_string(), "200");
        record.error = Some("no reply within 1.0 s (timed out reading the reply)".into());
        assert_eq!(
            AttemptResult(&record).to_string(),
            "200, no reply within 1.0 s (timed out reading the reply)"
        );
        record.status = None;
        record.error = Some("could not connect".into());
        assert_eq!(AttemptResult(&record).to_string(), "could not connect");
        record.error = None;
        assert_eq!(AttemptResult(&record).to_string(), "no reply");
        assert_eq!(CopyNote(0, 0).to_string(), "");
        assert_eq!(CopyNote(1, 0).to_string(), " (duplicate copy 1)");
        assert_eq!(CopyNote(0, 2).to_string(), " (resend 2)");
        assert_eq!(NextNote(true, None).to_string(), "");
        assert_eq!(NextNote(false, None).to_string(), "; no more attempts");
        assert_eq!(
            NextNote(false, Some(Duration::from_millis(1500))).to_string(),
            "; next attempt in 1.5 s"
        );
    }
}
