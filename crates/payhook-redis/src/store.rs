//! [`RedisStore`]: the [`Store`] implementation, its builder, and the three
//! Redis calls behind it.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use payhook_core::store::{Claim, ClaimToken, Completion, Store, MAX_TTL};
use payhook_core::StoreError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, IntoConnectionInfo, RedisError};

use crate::error::{self, BuildError};
use crate::key::event_key;

/// The value of a key whose event was handled. Claim tokens are 32 hex digits,
/// so no token can be mistaken for it.
const DONE: &str = "done";

/// Redis refuses `PX` values that overflow its clock; every store clamps
/// leases and retentions to the same [`MAX_TTL`] (about 100 years).
const MAX_TTL_MS: u64 = MAX_TTL.as_secs() * 1000;

/// Marks the event done if the caller still owns it, or if the caller's lease
/// ran out and nobody claimed the event since (the key is gone): 1. An event
/// already done: 2 (a retry whose first reply was lost lands here). Another
/// owner: 0.
const COMPLETE_SCRIPT: &str = r"
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] or current == false then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if current == ARGV[2] then
  return 2
end
return 0
";

/// Extends the lease only if the caller owns the claim (an expired claim's key
/// is gone, a done event's value is not a token).
const RENEW_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Deletes the claim only if the caller owns it.
const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// A dedupe store in Redis, shared by every replica of an app.
///
/// Cloning is cheap and clones share one connection. See the [crate docs](crate)
/// for the data layout, the failure behaviour and the minimum Redis version.
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    manager_config: ConnectionManagerConfig,
    /// Created on first use, so building a store needs neither a runtime nor a
    /// reachable server.
    manager: OnceLock<ConnectionManager>,
    prefix: String,
    timeout: Duration,
}

impl fmt::Debug for RedisStore {
    // The client's connection info holds the password: keep it out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.shared.prefix)
            .field("timeout", &self.shared.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A builder for a store at `url`, e.g. `redis://127.0.0.1:6379`,
    /// `redis://:password@host:6379/2` or (feature `tls`) `rediss://host:6380`.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            prefix: "payhook".to_owned(),
            timeout: Duration::from_secs(2),
        }
    }

    /// A store at `url` with the default settings, connecting on first use.
    ///
    /// # Errors
    /// [`BuildError::InvalidUrl`] if `url` is not a Redis URL.
    pub fn new(url: impl Into<String>) -> Result<Self, BuildError> {
        Self::builder(url).build()
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// The bound on each store call.
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// Sends `PING`: for readiness probes, and to warm the connection up.
    ///
    /// # Errors
    /// A [`StoreError`] if Redis cannot be reached within the timeout.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.call(|mut conn| async move { redis::cmd("PING").query_async::<()>(&mut conn).await })
            .await
            .map_err(StoreError::from)
    }

    fn manager(&self) -> Result<ConnectionManager, StoreError> {
        if let Some(manager) = self.shared.manager.get() {
            return Ok(manager.clone());
        }
        // Two first calls racing may both create one; the loser's is dropped
        // before it ever connects (the manager connects lazily).
        let manager = ConnectionManager::new_lazy_with_config(
            self.shared.client.clone(),
            self.shared.manager_config.clone(),
        )
        .map_err(|err| error::store_error(&err, self.shared.timeout))?;
        Ok(self.shared.manager.get_or_init(|| manager).clone())
    }

    /// Runs `op` within the timeout, once more if the connection failed (a
    /// restarted server, a dropped socket): the manager has reconnected by then.
    ///
    /// Every operation is safe to repeat: a repeated claim recognises its own
    /// token, and complete and release check the token before writing.
    async fn call<T, F, Fut>(&self, op: F) -> Result<T, Failure>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        // Without a runtime the timer and the connection cannot work; answer
        // instead of panicking (a claim guard may be dropped outside one).
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Failure::not_sent(error::no_runtime()));
        }
        let timeout = self.shared.timeout;
        let failed = |err: RedisError, sent_before: bool| Failure {
            may_have_run: sent_before || err.is_timeout() || err.is_connection_dropped(),
            refused: err.code().is_some(),
            error: error::store_error(&err, timeout),
        };
        let attempt = async {
            match op(self.manager().map_err(Failure::not_sent)?).await {
                Err(err) if error::is_connection_failure(&err) => {
                    let sent = err.is_connection_dropped();
                    let manager = self.manager().map_err(Failure::not_sent)?;
                    op(manager).await.map_err(|err| failed(err, sent))
                }
                other => other.map_err(|err| failed(err, false)),
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Failure {
                error: error::timed_out(timeout),
                may_have_run: true,
                refused: false,
            }),
        }
    }

    /// Gives up a claim whose `SET` may still reach Redis after the caller
    /// stopped waiting for it, so the sender's retry is not refused as in flight
    /// until the lease runs out. Best effort: on the same connection the release
    /// runs after the `SET`; if that fails too, the lease still ends the claim.
    fn release_in_background(&self, namespace: &str, id: &str, token: ClaimToken) {
        let (store, namespace, id) = (self.clone(), namespace.to_owned(), id.to_owned());
        tokio::spawn(async move {
            let _ = store.release(&namespace, &id, token).await;
        });
    }
}

/// A failed store call.
struct Failure {
    error: StoreError,
    /// Whether Redis may have run the command although no reply came back.
    may_have_run: bool,
    /// Whether Redis answered, refusing the command (an error reply).
    refused: bool,
}

impl Failure {
    fn not_sent(error: StoreError) -> Self {
        Self {
            error,
            may_have_run: false,
            refused: false,
        }
    }
}

impl From<Failure> for StoreError {
    fn from(failure: Failure) -> Self {
        failure.error
    }
}

/// `EVAL source 1 key`, arguments to follow. The source goes with every call
/// (`EVAL`, not `EVALSHA`): a server that restarted or failed over has no
/// script cache, and `EVALSHA` would then cost a `NOSCRIPT` reply and a load, an
/// extra round trip that a timed-out caller never makes. Redis caches the
/// compiled script, so the only cost is sending ~200 bytes.
fn script(source: &str, key: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(source).arg(1).arg(key);
    cmd
}

/// Milliseconds for `PX`: rounded up (a 1.5 ms lease must not become 1 ms, nor
/// a sub-millisecond one 0, which Redis rejects) and capped at [`MAX_TTL`].
fn ttl_millis(duration: Duration) -> u64 {
    let millis = duration.as_nanos().div_ceil(1_000_000);
    u64::try_from(millis).unwrap_or(u64::MAX).clamp(1, MAX_TTL_MS)
}

/// The three store operations, with the failure details `connect` needs.
impl RedisStore {
    async fn try_claim(&self, namespace: &str, id: &str, lease: Duration) -> Result<Claim, Failure> {
        let key = event_key(&self.shared.prefix, namespace, id);
        let token = ClaimToken::random();
        let token_text = token.to_string();
        // One round trip: take the key if it is free, else read who has it.
        // `SET … NX GET` needs Redis 7.0.
        let mut cmd = redis::cmd("SET");
        cmd.arg(&key)
            .arg(&token_text)
            .arg("NX")
            .arg("PX")
            .arg(ttl_millis(lease))
            .arg("GET");
        let reply = self
            .call(|mut conn| {
                let cmd = &cmd;
                async move { cmd.query_async::<Option<Vec<u8>>>(&mut conn).await }
            })
            .await;
        let previous = reply.inspect_err(|failure| {
            if failure.may_have_run {
                self.release_in_background(namespace, id, token);
            }
        })?;
        Ok(match previous {
            None => Claim::Claimed(token),
            // The first attempt took the key but its reply was lost.
            Some(value) if value == token_text.as_bytes() => Claim::Claimed(token),
            Some(value) if value == DONE.as_bytes() => Claim::Done,
            Some(_) => Claim::InFlight,
        })
    }

    async fn try_complete(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        retention: Duration,
    ) -> Result<Completion, Failure> {
        let key = event_key(&self.shared.prefix, namespace, id);
        let mut cmd = script(COMPLETE_SCRIPT, &key);
        cmd.arg(token.to_string()).arg(DONE).arg(ttl_millis(retention));
        let marked: i64 = self
            .call(|mut conn| {
                let cmd = &cmd;
                async move { cmd.query_async(&mut conn).await }
            })
            .await?;
        Ok(match marked {
            1 => Completion::Completed,
            2 => Completion::AlreadyDone,
            _ => Completion::NotOwner,
        })
    }

    async fn try_renew(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        lease: Duration,
    ) -> Result<bool, Failure> {
        let key = event_key(&self.shared.prefix, namespace, id);
        let mut cmd = script(RENEW_SCRIPT, &key);
        cmd.arg(token.to_string()).arg(ttl_millis(lease));
        let renewed: i64 = self
            .call(|mut conn| {
                let cmd = &cmd;
                async move { cmd.query_async(&mut conn).await }
            })
            .await?;
        Ok(renewed == 1)
    }

    async fn try_release(&self, namespace: &str, id: &str, token: ClaimToken) -> Result<bool, Failure> {
        let key = event_key(&self.shared.prefix, namespace, id);
        let mut cmd = script(RELEASE_SCRIPT, &key);
        cmd.arg(token.to_string());
        let deleted: i64 = self
            .call(|mut conn| {
                let cmd = &cmd;
                async move { cmd.query_async(&mut conn).await }
            })
            .await?;
        Ok(deleted == 1)
    }
}

impl Store for RedisStore {
    async fn claim(&self, namespace: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        Ok(self.try_claim(namespace, id, lease).await?)
    }

    async fn renew(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.try_renew(namespace, id, token, lease).await?)
    }

    async fn complete(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        Ok(self.try_complete(namespace, id, token, retention).await?)
    }

    async fn release(&self, namespace: &str, id: &str, token: ClaimToken) -> Result<bool, StoreError> {
        Ok(self.try_release(namespace, id, token).await?)
    }
}

/// Builder for [`RedisStore`]; start with [`RedisStore::builder`].
#[derive(Clone)]
#[must_use]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    timeout: Duration,
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisStoreBuilder {
    /// The first part of every key (default `payhook`). Keys are
    /// `{prefix}:{namespace}:{event id}`; give each app sharing a Redis
    /// database its own prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The longest any store call may take, connecting included (default 2 s).
    /// A call that runs over returns a [`StoreError`], which the receiver answers
    /// with 503.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Builds the store without connecting: the first store call connects. An
    /// app built this way starts while Redis is down and answers deliveries with
    /// 503 until Redis is reachable. Needs no runtime.
    ///
    /// # Errors
    /// [`BuildError::InvalidUrl`] for a URL the client does not accept (the
    /// message never quotes the URL), [`BuildError::InvalidSetting`] for an empty
    /// prefix or a zero timeout.
    pub fn build(self) -> Result<RedisStore, BuildError> {
        if self.prefix.is_empty() {
            return Err(BuildError::InvalidSetting("prefix must not be empty"));
        }
        if self.timeout.is_zero() {
            return Err(BuildError::InvalidSetting("timeout must be longer than zero"));
        }
        #[cfg(not(feature = "tls"))]
        {
            let scheme = self.url.split(':').next().unwrap_or("").to_ascii_lowercase();
            if scheme == "rediss" || scheme == "valkeys" {
                return Err(BuildError::InvalidUrl(
                    "TLS (rediss://) needs the `tls` feature of payhook-redis".to_owned(),
                ));
            }
        }
        let info = self
            .url
            .as_str()
            .into_connection_info()
            .map_err(|err| error::invalid_url(&err))?;
        #[cfg(feature = "tls")]
        if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            // The redis crate leaves rustls' crypto provider to the app; pick
            // one unless the app already has.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = Client::open(info).map_err(|err| error::invalid_url(&err))?;
        Ok(RedisStore {
            shared: Arc::new(Shared {
                client,
                manager_config: manager_config(self.timeout),
                manager: OnceLock::new(),
                prefix: self.prefix,
                timeout: self.timeout,
            }),
        })
    }

    /// Builds the store and checks the server now: reachable within the timeout,
    /// credentials accepted, and the store's own commands answered (Redis 7.0
    /// or later, a user allowed to run them). It claims and releases one
    /// throwaway id to find out. For apps that would rather not start than
    /// start answering 503.
    ///
    /// # Errors
    /// What [`build`](Self::build) returns, [`BuildError::Unavailable`] if Redis
    /// cannot be reached or refuses the credentials, and
    /// [`BuildError::Unsupported`] if it refuses the store's commands.
    pub async fn connect(self) -> Result<RedisStore, BuildError> {
        let store = self.build()?;
        store.ping().await.map_err(BuildError::Unavailable)?;
        let check = |failure: Failure| {
            if failure.refused {
                BuildError::Unsupported(failure.error.to_string())
            } else {
                BuildError::Unavailable(failure.error)
            }
        };
        // A short lease: if the release is refused, the key is gone a second later.
        let (namespace, id) = ("payhook-connect-check", ClaimToken::random().to_string());
        let token = match store
            .try_claim(namespace, &id, Duration::from_secs(1))
            .await
            .map_err(check)?
        {
            Claim::Claimed(token) => token,
            // A random id cannot be taken already; only a misbehaving server says so.
            other => {
                return Err(BuildError::Unsupported(format!(
                    "a new id was answered as {other:?}"
                )))
            }
        };
        store.try_release(namespace, &id, token).await.map_err(check)?;
        Ok(store)
    }
}

/// Reconnection tuned for the per-call deadline: connection attempts and
/// replies never outlast it, and the backoff stays short so a server that comes
/// back is used again within a fraction of a second.
fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(200))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounds_up_and_is_never_zero() {
        assert_eq!(ttl_millis(Duration::ZERO), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1)), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1500)), 2);
        assert_eq!(ttl_millis(Duration::from_secs(300)), 300_000);
        assert_eq!(ttl_millis(Duration::MAX), MAX_TTL_MS);
    }

    #[test]
    fn building_checks_settings_and_url_without_connecting() {
        assert!(RedisStore::new("redis://127.0.0.1:1/3").is_ok());
        assert_eq!(
            RedisStore::builder("redis://127.0.0.1")
                .prefix("")
                .build()
                .unwrap_err(),
            BuildError::InvalidSetting("prefix must not be empty")
        );
        assert_eq!(
            RedisStore::builder("redis://127.0.0.1")
                .timeout(Duration::ZERO)
                .build()
                .unwrap_err(),
            BuildError::InvalidSetting("timeout must be longer than zero")
        );
        let err = RedisStore::new("redis://:pa55word@127.0.0.1/x").unwrap_err();
        assert_eq!(err.to_string(), "invalid Redis URL: Invalid database number");
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_says_which_feature_it_needs() {
        let err = RedisStore::new("rediss://:pa55word@127.0.0.1:6380").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid Redis URL: TLS (rediss://) needs the `tls` feature of payhook-redis"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn rediss_is_accepted_with_the_tls_feature() {
        assert!(RedisStore::new("rediss://:pa55word@127.0.0.1:6380/1").is_ok());
    }

    #[test]
    fn debug_output_leaves_the_url_out() {
        let store = RedisStore::new("redis://user:pa55word@127.0.0.1:6379/1").unwrap();
        let builder = RedisStore::builder("redis://user:pa55word@127.0.0.1:6379/1");
        for text in [format!("{store:?}"), format!("{builder:?}")] {
            assert!(
                !text.contains("pa55word") && !text.contains("127.0.0.1"),
                "{text}"
            );
        }
    }

    #[test]
    fn calls_outside_a_runtime_fail_instead_of_panicking() {
        let store = RedisStore::new("redis://127.0.0.1:1").unwrap();
        let mut claim = std::pin::pin!(store.claim("ns", "evt_1", Duration::from_secs(1)));
        let poll = claim
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        match poll {
            std::task::Poll::Ready(Err(err)) => {
                assert!(err.to_string().contains("tokio runtime"));
                assert_eq!(err.kind(), payhook_core::StoreErrorKind::Invalid);
            }
            other => panic!("expected an immediate error, got {other:?}"),
        }
    }
}
