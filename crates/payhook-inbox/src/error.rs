//! What can go wrong in the inbox.

use payhook_core::{StoreError, StoreErrorKind};

/// An inbox failure.
///
/// The text never contains the database URL (it may hold a password): database
/// errors are reported by their kind and the server's message only.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError {
    /// The database URL is neither `sqlite:` nor `postgres:`/`postgresql:`, or
    /// names a backend this build was compiled without.
    #[error("unsupported database URL: {0}")]
    UnsupportedUrl(&'static str),
    /// A setting is out of its range; the text says which.
    #[error("invalid setting: {0}")]
    InvalidSetting(&'static str),
    /// The database could not be reached or a statement failed; the
    /// [`StoreError`]'s [`kind`](StoreError::kind) says which
    /// (unreachable, timed out, refused by the server, or an invalid answer).
    #[error("database error: {0}")]
    Database(StoreError),
    /// The event's lease ran out and another worker took it over: this worker's
    /// transaction was rolled back and must not commit anything.
    #[error("the lease on event {0} was lost to another worker; its transaction was rolled back")]
    LeaseLost(String),
    /// The handler already committed this attempt's transaction with
    /// [`Job::commit`](crate::Job::commit).
    #[error("the transaction of event {0} was already committed")]
    Committed(String),
    /// The database holds no inbox (a missing file or table): the read-only
    /// operations never create one.
    #[error("no inbox here: {0}")]
    NoInbox(&'static str),
    /// [`Inbox::wait_idle`](crate::Inbox::wait_idle) timed out with events
    /// still waiting.
    #[error("the inbox still had {0} event(s) waiting when the time ran out")]
    NotIdle(i64),
    /// No event with this id in the namespace.
    #[error("no event {0} in the inbox")]
    NotFound(String),
    /// An event the inbox cannot store (from the service's events list: an
    /// id or type over the bound, a NUL character); the text says which.
    #[error("an event cannot be stored: {0}")]
    InvalidEvent(String),
}

impl InboxError {
    /// What kind of failure this is: for [`Database`](Self::Database) the
    /// database's; a lost lease is [`Refused`](StoreErrorKind::Refused),
    /// [`NotIdle`](Self::NotIdle) [`TimedOut`](StoreErrorKind::TimedOut), and
    /// the rest (bad settings or URLs, no inbox, no such event, a second
    /// commit) [`Invalid`](StoreErrorKind::Invalid). Unavailable and timed-out
    /// failures are worth retrying; refused and invalid ones need a change.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            Self::Database(err) => err.kind(),
            Self::LeaseLost(_) => StoreErrorKind::Refused,
            Self::NotIdle(_) => StoreErrorKind::TimedOut,
            Self::UnsupportedUrl(_)
            | Self::InvalidSetting(_)
            | Self::Committed(_)
            | Self::NoInbox(_)
            | Self::NotFound(_)
            | Self::InvalidEvent(_) => StoreErrorKind::Invalid,
        }
    }
}

impl From<sqlx::Error> for InboxError {
    fn from(err: sqlx::Error) -> Self {
        Self::Database(StoreError::with_kind(error_kind(&err), describe(&err)))
    }
}

/// The [`StoreErrorKind`] of a database error.
pub(crate) fn error_kind(err: &sqlx::Error) -> StoreErrorKind {
    match err {
        _ if is_timeout(err) => StoreErrorKind::TimedOut,
        sqlx::Error::Database(_) => StoreErrorKind::Refused,
        sqlx::Error::PoolTimedOut => StoreErrorKind::TimedOut,
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolClosed => StoreErrorKind::Unavailable,
        sqlx::Error::Configuration(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::RowNotFound
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_) => StoreErrorKind::Invalid,
        _ => StoreErrorKind::Unavailable,
    }
}

/// What kind of database failure this was, for a `503` reply: never a table,
/// index, constraint or server message (those go to the log).
pub(crate) fn kind(err: &sqlx::Error) -> &'static str {
    match err {
        _ if is_timeout(err) => "the database did not answer in time",
        _ if is_busy(err) => "the database is locked by another writer",
        sqlx::Error::Database(_) => "the database refused the write",
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) => "the database cannot be reached",
        sqlx::Error::PoolTimedOut => "timed out waiting for a database connection",
        sqlx::Error::PoolClosed => "the inbox is shutting down",
        _ => "the database failed",
    }
}

/// Whether the work was given up at its deadline
/// ([`Database::bounded`](crate::database::Database::bounded)), or the
/// connection itself timed out.
pub(crate) fn is_timeout(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
}

/// Whether SQLite gave up waiting for another connection's lock
/// (`SQLITE_BUSY`, `SQLITE_LOCKED` and their extended codes): the database
/// is busy, not refusing this statement, so the same statement for another
/// row would fail alike.
pub(crate) fn is_busy(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            let primary = db
                .code()
                .and_then(|code| code.parse::<u32>().ok())
                .map(|code| code & 0xff);
            matches!(primary, Some(5 | 6)) && db.message().contains("locked")
        }
        _ => false,
    }
}

/// Event ids come from the sender: cap and escape them before they reach a
/// log line or an error's text (the core's one rule for request-derived text).
pub(crate) fn payhook_escape(text: &str) -> String {
    payhook_core::untrusted::Untrusted::value(text).to_string()
}

/// A database error as text for the log and for operators (escape it before
/// a log line: a server message may quote stored values).
pub(crate) fn describe(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(db) => db.message().to_owned(),
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            "the database did not answer within the deadline".to_owned()
        }
        sqlx::Error::Io(io) => format!("i/o error: {}", io.kind()),
        sqlx::Error::PoolTimedOut => "timed out waiting for a database connection".to_owned(),
        sqlx::Error::PoolClosed => "the connection pool is closed".to_owned(),
        sqlx::Error::Configuration(_) => "invalid database configuration".to_owned(),
        sqlx::Error::Tls(_) => "TLS error talking to the database".to_owned(),
        sqlx::Error::Protocol(message) => format!("protocol error: {message}"),
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_errors_keep_their_kind_and_text() {
        let err = InboxError::from(sqlx::Error::PoolTimedOut);
        assert_eq!(err.kind(), StoreErrorKind::TimedOut);
        assert_eq!(
            err.to_string(),
            "database error: timed out waiting for a database connection"
        );
        let err = InboxError::from(sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into()));
        assert_eq!(err.kind(), StoreErrorKind::Unavailable);
        assert!(matches!(&err, InboxError::Database(db) if db.kind() == StoreErrorKind::Unavailable));
        assert_eq!(
            InboxError::from(sqlx::Error::Configuration("bad".into())).kind(),
            StoreErrorKind::Invalid
        );
        assert_eq!(InboxError::InvalidSetting("x").kind(), StoreErrorKind::Invalid);
        let late = crate::database::timed_out();
        assert_eq!(kind(&late), "the database did not answer in time");
        let err = InboxError::from(late);
        assert_eq!(err.kind(), StoreErrorKind::TimedOut);
        assert_eq!(
            err.to_string(),
            "database error: the database did not answer within the deadline"
        );
        assert_eq!(
            InboxError::LeaseLost("evt_1".into()).kind(),
            StoreErrorKind::Refused
        );
    }

    #[test]
    fn escape_caps_and_escapes() {
        let long = "é\n".repeat(200);
        let escaped = payhook_escape(&long);
        assert!(!escaped.contains('\n'));
        // The core's rule (payhook_core::untrusted): control characters escaped,
        // readable text kept, at most 64 characters shown, then an ellipsis.
        assert!(escaped.starts_with("é\\né\\n"), "{escaped}");
        assert!(escaped.ends_with('…'), "{escaped}");
        assert!(escaped.chars().count() <= 2 * 64 + 1, "{escaped}");
        let forged = payhook_escape("evt_1\n2026-01-01 INFO payhook: forged\u{1b}[2J");
        assert_eq!(forged, r"evt_1\n2026-01-01 INFO payhook: forged\u{1b}[2J");
    }
}
