//! Noticing a SQLite file deleted or replaced under a running app.
//!
//! SQLite keeps writing to the file it opened, even after that file was
//! deleted or another file was moved to its path: acknowledged events would
//! then go where nobody finds them. The inbox remembers which file it opened
//! (device and inode) and compares before each write; a mismatch answers `503`.

use std::path::PathBuf;

/// A file as it was when the inbox opened it.
#[derive(Debug)]
pub(crate) struct FileIdentity {
    path: PathBuf,
    id: (u64, u64),
}

impl FileIdentity {
    /// The file at `path`, the main file of a SQLite pool as SQLite reports
    /// it (the reads' `main_file`); `None` for an in-memory database.
    pub(crate) fn of_path(path: &str) -> Option<Self> {
        if path.is_empty() || path == ":memory:" {
            return None;
        }
        let path = PathBuf::from(path);
        let id = identity(&path)?;
        Some(Self { path, id })
    }

    /// The file's path and identity (device and inode), as opened.
    pub(crate) fn key(&self) -> (&std::path::Path, (u64, u64)) {
        (&self.path, self.id)
    }

    /// `Err` with the kind of failure when the file at the path is no longer
    /// the one opened.
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        match identity(&self.path) {
            None => Err("its SQLite file was deleted"),
            Some(id) if id != self.id => Err("its SQLite file was replaced"),
            Some(_) => Ok(()),
        }
    }
}

#[cfg(unix)]
fn identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn identity(path: &std::path::Path) -> Option<(u64, u64)> {
    // No inode here: only a deleted file is noticed.
    std::fs::metadata(path).ok().map(|_| (0, 0))
}
