//! A [`SecretSet`] read from a file, one secret or key per line: reloaded on
//! request ([`SecretSet::reload`]), on `SIGHUP` ([`SecretSet::reload_on_sighup`],
//! feature `sighup`) or when the file changes ([`SecretSet::watch_file`]).
//!
//! A file that cannot be read or used keeps the set in force; the reason is
//! logged at `WARN` naming the line and what is wrong, never its content.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{collect, Format, Inner, Keys, KeysError, SecretSet};
use crate::error::ConfigError;
use crate::metrics::SECRET_RELOADS_TOTAL;

/// The largest secret file read: a few hundred bytes hold several secrets,
/// so anything this large is the wrong file.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// What the file held when it was last read: the digest of a file that was
/// put in force, or why it could not be, so the watcher acts on (and logs) a
/// change once.
#[derive(PartialEq, Eq)]
pub(super) enum Seen {
    Contents([u8; 32]),
    Failed(String),
}

impl SecretSet {
    /// Reads the service's signing secrets from a file: one `whsec_…` per
    /// line; surrounding whitespace, blank lines and lines starting with `#`
    /// are ignored. The set remembers the file for [`reload`](Self::reload).
    ///
    /// ```
    /// use payhook::{Receiver, SecretSet};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("payhook-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("webhook-secrets");
    /// std::fs::write(&path, "# rolled on 2026-11-29\nwhsec_old\nwhsec_new\n")?;
    /// let secrets = SecretSet::from_file(&path)?;
    /// assert_eq!(secrets.count(), 2);
    /// let receiver = Receiver::builder().secret_set(&secrets).build()?;
    ///
    /// // Once the old secret has expired:
    /// std::fs::write(&path, "whsec_new\n")?;
    /// assert_eq!(secrets.reload()?, 1);
    ///
    /// // A file that cannot be used keeps the set in force (and logs why).
    /// std::fs::write(&path, "")?;
    /// assert!(secrets.reload().is_err());
    /// assert_eq!(secrets.count(), 1);
    /// # let _ = receiver;
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ConfigError::SecretFile`] when the file cannot be read, is larger
    /// than 64 KiB, is not UTF-8, lists no secret, or has a line that is not
    /// a secret (its number and why, never its content).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::open(Format::Service, path.as_ref())
    }

    /// Reads Standard Webhooks keys from a file, one `whsec_` secret or
    /// `whpk_` public key per line (the rules of [`from_file`](Self::from_file)).
    ///
    /// # Errors
    /// As [`from_file`](Self::from_file).
    pub fn standard_webhooks_from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::open(Format::StandardWebhooks, path.as_ref())
    }

    fn open(format: Format, path: &Path) -> Result<Self, ConfigError> {
        let (keys, digest) = read(format, path).map_err(|reason| file_error(path, reason))?;
        let set = Self::with(format, keys, Some(path.to_owned()));
        *set.inner.seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(Seen::Contents(digest));
        Ok(set)
    }

    /// Reads the file again and puts its secrets in force at once; returns
    /// how many are active. Logs the count at `INFO`, or at `WARN` why the
    /// file could not be used (the set in force then stays); counted in
    /// `payhook_secret_reloads_total{result="ok"|"failed"}`.
    ///
    /// # Errors
    /// As [`from_file`](Self::from_file), or [`ConfigError::InvalidSetting`]
    /// for a set that was not read from a file.
    pub fn reload(&self) -> Result<usize, ConfigError> {
        let path = self.file()?;
        let outcome = read(self.inner.format, path);
        match self.settle(path, outcome, true) {
            Ok(count) => Ok(count),
            Err(reason) => Err(file_error(path, reason)),
        }
    }

    /// Reads the file every `every` (a few seconds suit secret managers that
    /// rewrite a mounted file) and reloads it when its contents changed, as
    /// [`reload`](Self::reload) does. A file that cannot be used is logged
    /// once, until it changes again. The watch runs on the current tokio
    /// runtime and ends once every clone of the set is dropped.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), payhook::ConfigError> {
    /// # let dir = std::env::temp_dir().join(format!("payhook-doc-watch-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let path = dir.join("webhook-secrets");
    /// # std::fs::write(&path, "whsec_current\n").unwrap();
    /// let secrets = payhook::SecretSet::from_file(&path)?;
    /// secrets.watch_file(std::time::Duration::from_secs(5))?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ConfigError::InvalidSetting`] for a set that was not read from a
    /// file, a zero interval, or a call outside a tokio runtime.
    pub fn watch_file(&self, every: Duration) -> Result<(), ConfigError> {
        self.file()?;
        if every.is_zero() {
            return Err(ConfigError::InvalidSetting(
                "the secret file's watch interval must be longer than zero",
            ));
        }
        let runtime = runtime()?;
        let set = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(set) = upgrade(&set) else { break };
                set.check_file();
            }
        });
        Ok(())
    }

    /// Reloads the file (as [`reload`](Self::reload)) each time the process
    /// gets `SIGHUP`, which then no longer ends it. Runs on the current tokio
    /// runtime (with its I/O driver on, as `#[tokio::main]` has it) and ends
    /// with it, or at the first signal after every clone of the set is
    /// dropped.
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), payhook::ConfigError> {
    /// let secrets = payhook::SecretSet::from_file("/run/secrets/payhook-webhook")?;
    /// secrets.reload_on_sighup()?; // then `kill -HUP <pid>` after rewriting the file
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ConfigError::InvalidSetting`] for a set that was not read from a
    /// file or a call outside a tokio runtime; [`ConfigError::SecretFile`]
    /// when the signal cannot be listened for.
    #[cfg(all(unix, feature = "sighup"))]
    #[cfg_attr(docsrs, doc(cfg(all(unix, feature = "sighup"))))]
    pub fn reload_on_sighup(&self) -> Result<(), ConfigError> {
        use tokio::signal::unix::{signal, SignalKind};

        let path = self.file()?;
        let runtime = runtime()?;
        let mut hangups = {
            let _entered = runtime.enter();
            signal(SignalKind::hangup())
                .map_err(|error| file_error(path, format!("cannot listen for SIGHUP: {error}")))?
        };
        let set = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            while hangups.recv().await.is_some() {
                let Some(set) = upgrade(&set) else { break };
                // Logged and counted inside; the set in force stays on failure.
                let _ = set.reload();
            }
        });
        Ok(())
    }

    fn file(&self) -> Result<&Path, ConfigError> {
        self.inner.file.as_deref().ok_or(ConfigError::InvalidSetting(
            "this secret set was not read from a file",
        ))
    }

    /// The watcher's look at the file: acts only when it changed.
    fn check_file(&self) {
        let Some(path) = self.inner.file.as_deref() else {
            return;
        };
        let outcome = read(self.inner.format, path);
        let _ = self.settle(path, outcome, false);
    }

    /// Puts a read file in force, or logs why it cannot be; `always` logs and
    /// swaps even when the file is as it was last seen.
    fn settle(
        &self,
        path: &Path,
        outcome: Result<(Keys, [u8; 32]), String>,
        always: bool,
    ) -> Result<usize, String> {
        let mut seen = self.inner.seen.lock().unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok((keys, digest)) => {
                let now = Seen::Contents(digest);
                if !always && seen.as_ref() == Some(&now) {
                    return Ok(self.count());
                }
                let count = self.swap(keys);
                *seen = Some(now);
                drop(seen);
                metrics::counter!(SECRET_RELOADS_TOTAL, "result" => "ok").increment(1);
                tracing::info!(
                    target: "payhook",
                    file = %path.display(),
                    active = count,
                    "secret file reloaded: {count} secret(s) active"
                );
                Ok(count)
            }
            Err(reason) => {
                let now = Seen::Failed(reason.clone());
                if always || seen.as_ref() != Some(&now) {
                    *seen = Some(now);
                    drop(seen);
                    let active = self.count();
                    metrics::counter!(SECRET_RELOADS_TOTAL, "result" => "failed").increment(1);
                    tracing::warn!(
                        target: "payhook",
                        file = %path.display(),
                        active,
                        "secret file not reloaded, the {active} secret(s) in force stay: {reason}"
                    );
                }
                Err(reason)
            }
        }
    }
}

fn upgrade(set: &Weak<Inner>) -> Option<SecretSet> {
    set.upgrade().map(|inner| SecretSet { inner })
}

fn runtime() -> Result<tokio::runtime::Handle, ConfigError> {
    tokio::runtime::Handle::try_current().map_err(|_| {
        ConfigError::InvalidSetting("reloading a secret file needs to be started inside a tokio runtime")
    })
}

fn file_error(path: &Path, reason: String) -> ConfigError {
    ConfigError::SecretFile {
        path: PathBuf::from(path),
        reason,
    }
}

/// The file's keys and the digest of its bytes; `Err` says why it cannot be
/// used, naming a line by its number and never quoting it.
fn read(format: Format, path: &Path) -> Result<(Keys, [u8; 32]), String> {
    let file = std::fs::File::open(path).map_err(|error| format!("cannot be read: {error}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("cannot be read: {error}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err("is larger than 64 KiB: not a file of secrets".to_owned());
    }
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    let text = std::str::from_utf8(&bytes).map_err(|_| "is not UTF-8 text".to_owned())?;
    let lines = text
        .lines()
        .map(str::trim)
        .enumerate()
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'));
    let keys = collect(format, lines).map_err(|error| match error {
        KeysError::None if format == Format::Service => "lists no secret".to_owned(),
        KeysError::None => "lists no key".to_owned(),
        KeysError::Invalid { kind, index, reason } => format!("line {}: the {kind} {reason}", index + 1),
    })?;
    Ok((keys, digest))
}
