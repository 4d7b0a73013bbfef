//! What the receiver examples share, whatever their framework: the settings
//! read from the environment, logging, and how a failure ends the process.
//!
//! * `PAYHOOK_ADDR`: where to listen (default `127.0.0.1:3000`);
//! * `PAYHOOK_SECRET` (required): the endpoint's signing secret. Without it the
//!   example refuses to start: a fallback secret written in the source would let
//!   anyone who read it forge deliveries. For local tests, make one up and sign
//!   test deliveries with the same value;
//! * `PAYHOOK_SECRET_FILE`: read the secrets from this file instead, one per
//!   line (blank lines and `#` comments ignored), and read it again when the
//!   process gets `SIGHUP`: to roll a secret, rewrite the file (the new secret
//!   beside the old one, later the new one alone) and `kill -HUP` the
//!   process, without a restart. A file that cannot be read or used on a
//!   reload keeps the secrets in force (logged at WARN, never a secret). When
//!   it is set, `PAYHOOK_SECRET` is ignored. With `PAYHOOK_SCHEME=standard`
//!   its lines are `whsec_` secrets and `whpk_` public keys;
//! * `PAYHOOK_REDIS_URL`: keep the dedupe state in Redis, shared by every
//!   replica, instead of in this process's memory;
//! * `PAYHOOK_ALLOWED_IPS`: turn on the source-IP allowlist, with these
//!   networks (comma-separated CIDRs, spaces allowed; a bare address is a /32
//!   or /128). Other sources get `403` before their body is read;
//! * `PAYHOOK_TRUSTED_PROXIES`: the load balancers in front, whose
//!   `X-Forwarded-For` / `Forwarded` are believed (same form; needs
//!   `PAYHOOK_ALLOWED_IPS`). A malformed entry in either (e.g. `10.0.0.0/33`)
//!   stops the example before it listens, naming the variable, the entry and
//!   why;
//! * `PAYHOOK_SCHEME=standard`: receive from a Standard Webhooks sender
//!   (`webhook-id`, `webhook-timestamp`, `webhook-signature`) instead of the
//!   service's `x-service-signature`. `PAYHOOK_SECRET` is then a `whsec_` key
//!   (`v1`), `PAYHOOK_PUBLIC_KEYS` comma-separated `whpk_` keys (`v1a`), and at
//!   least one of the two is required; the `webhook-id` is the event id.
//!   Unset, the examples use the service's scheme and need `PAYHOOK_SECRET`;
//! * `PAYHOOK_API_BASE`, `PAYHOOK_API_KEY` (inbox examples): reconcile with
//!   the service's events list at this API base (`https://…`, or `http://`
//!   on loopback such as the emulator's `http://127.0.0.1:12111`) with this
//!   key, so events no delivery brought are stored and handled too;
//!   `PAYHOOK_RECONCILE_INTERVAL_MS` sets how often (default 60 000). Both
//!   or neither: one without the other stops the example, naming the other;
//! * `RUST_LOG`: what is logged (default `info`), on stdout.
//!
//! Each example includes this file with `mod common;`; cargo builds only the
//! files directly in `examples/` as examples, so this one is not run on its own.
// Each example uses the part of this file it needs.
#![allow(dead_code)]

use std::error::Error;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;

use payhook::redis::RedisStore;
use payhook::signature::StandardWebhooks;
use payhook::source::Networks;
use payhook::{Receiver, ReceiverBuilder, SecretSet};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

const DEFAULT_ADDR: &str = "127.0.0.1:3000";

/// Where to listen and the receiver to verify and deduplicate deliveries with.
pub struct Settings {
    pub addr: SocketAddr,
    pub receiver: Receiver,
}

impl Settings {
    /// Reads the `PAYHOOK_*` variables, connecting to Redis when
    /// `PAYHOOK_REDIS_URL` is set; prints which store is in use (never the
    /// secret). Fails when `PAYHOOK_SECRET` is unset or empty.
    pub async fn from_env() -> Result<Self, Box<dyn Error>> {
        let addr = std::env::var("PAYHOOK_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.to_owned());
        let addr: SocketAddr = addr
            .parse()
            .map_err(|err| format!("PAYHOOK_ADDR={addr:?} is not an address like {DEFAULT_ADDR}: {err}"))?;

        let builder = match standard_scheme_from_env()? {
            Some(builder) => builder,
            None => match secret_file_from_env(false)? {
                Some(secrets) => Receiver::builder().secret_set(&secrets),
                None => Receiver::builder().secret(service_secret_from_env()?),
            },
        };
        let mut receiver = allowlist_from_env(builder)?;
        receiver = match std::env::var("PAYHOOK_REDIS_URL") {
            // The URL may hold a password: it is never printed, and the store's
            // errors never quote it.
            Ok(url) => {
                let store = RedisStore::builder(url)
                    .connect()
                    .await
                    .map_err(|err| format!("PAYHOOK_REDIS_URL: {err}"))?;
                println!("dedupe store: Redis");
                // One namespace per endpoint: another app or endpoint using the
                // same Redis cannot mark this endpoint's events done. Every
                // replica of this endpoint uses the same one.
                receiver.store(store).namespace("payments")
            }
            Err(_) => {
                println!("dedupe store: in memory");
                receiver
            }
        };
        Ok(Self {
            addr,
            receiver: receiver.build()?,
        })
    }
}

/// `PAYHOOK_SECRET_FILE`: the secrets read from that file (Standard Webhooks
/// keys when `standard`), reloaded when the process gets `SIGHUP`; `None`
/// when it is unset or empty. Prints how many secrets are active and that
/// `PAYHOOK_SECRET` is ignored beside it (never a secret); a file that cannot
/// be used at start is an error naming the variable, the file and why.
pub fn secret_file_from_env(standard: bool) -> Result<Option<SecretSet>, Box<dyn Error>> {
    let Some(path) = std::env::var_os("PAYHOOK_SECRET_FILE").filter(|path| !path.is_empty()) else {
        return Ok(None);
    };
    let secrets = if standard {
        SecretSet::standard_webhooks_from_file(&path)
    } else {
        SecretSet::from_file(&path)
    }
    .map_err(|err| format!("PAYHOOK_SECRET_FILE: {err}"))?;
    secrets
        .reload_on_sighup()
        .map_err(|err| format!("PAYHOOK_SECRET_FILE: {err}"))?;
    if std::env::var_os("PAYHOOK_SECRET").is_some_and(|secret| !secret.is_empty()) {
        println!("PAYHOOK_SECRET is ignored: the secrets come from PAYHOOK_SECRET_FILE");
    }
    println!(
        "signing secrets: {} from PAYHOOK_SECRET_FILE, reloaded on SIGHUP",
        secrets.count()
    );
    Ok(Some(secrets))
}

/// `PAYHOOK_SECRET` for the service's scheme: required and not empty.
fn service_secret_from_env() -> Result<String, Box<dyn Error>> {
    let secret = match std::env::var("PAYHOOK_SECRET") {
        Ok(secret) if !secret.is_empty() => secret,
        Ok(_) => {
            return Err("PAYHOOK_SECRET is empty: set it to the endpoint's signing secret (whsec_...)".into())
        }
        Err(std::env::VarError::NotPresent) => {
            return Err(
                "PAYHOOK_SECRET is not set: set it to the endpoint's signing secret \
                        (whsec_...), or for local tests to a value of your own, and sign test \
                        deliveries with that same value"
                    .into(),
            )
        }
        Err(std::env::VarError::NotUnicode(_)) => return Err("PAYHOOK_SECRET is not valid UTF-8".into()),
    };
    Ok(secret)
}

/// The receiver builder for `PAYHOOK_SCHEME=standard` (Standard Webhooks, with
/// `PAYHOOK_SECRET` and/or `PAYHOOK_PUBLIC_KEYS`), `None` when `PAYHOOK_SCHEME`
/// is unset or empty. Prints the scheme and how many keys (never a key); a
/// malformed key is an error naming the variable and the key's position.
pub fn standard_scheme_from_env() -> Result<Option<ReceiverBuilder>, Box<dyn Error>> {
    match std::env::var("PAYHOOK_SCHEME") {
        Ok(scheme) if scheme == "standard" => {}
        Ok(scheme) if scheme.is_empty() => return Ok(None),
        Err(std::env::VarError::NotPresent) => return Ok(None),
        Ok(scheme) => {
            return Err(format!(
                "PAYHOOK_SCHEME={} is not a scheme: set it to `standard` for Standard Webhooks, \
                 or leave it unset for the service's x-service-signature",
                payhook::untrusted::Untrusted::value(&scheme)
            )
            .into())
        }
        Err(std::env::VarError::NotUnicode(_)) => return Err("PAYHOOK_SCHEME is not valid UTF-8".into()),
    }
    if let Some(keys) = secret_file_from_env(true)? {
        let scheme = StandardWebhooks::builder().secret_set(&keys).build()?;
        println!("signature scheme: Standard Webhooks (keys from PAYHOOK_SECRET_FILE)");
        return Ok(Some(Receiver::builder().scheme(scheme)));
    }
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.trim().is_empty());
    let secrets: Vec<String> = var("PAYHOOK_SECRET").into_iter().collect();
    let public_keys: Vec<String> = var("PAYHOOK_PUBLIC_KEYS")
        .map(|keys| keys.split(',').map(|key| key.trim().to_owned()).collect())
        .unwrap_or_default();
    if secrets.is_empty() && public_keys.is_empty() {
        return Err("PAYHOOK_SCHEME=standard needs PAYHOOK_SECRET (a whsec_ key) \
                    and/or PAYHOOK_PUBLIC_KEYS (comma-separated whpk_ keys)"
            .into());
    }
    let scheme = StandardWebhooks::builder()
        .secrets(&secrets)
        .public_keys(&public_keys)
        .build()
        .map_err(|err| match err {
            payhook::ConfigError::InvalidKey { kind: "secret", .. } => format!("PAYHOOK_SECRET: {err}"),
            payhook::ConfigError::InvalidKey { .. } => format!("PAYHOOK_PUBLIC_KEYS: {err}"),
            other => other.to_string(),
        })?;
    println!(
        "signature scheme: Standard Webhooks ({} secret(s), {} public key(s))",
        secrets.len(),
        public_keys.len()
    );
    Ok(Some(Receiver::builder().scheme(scheme)))
}

/// Applies `PAYHOOK_ALLOWED_IPS` and `PAYHOOK_TRUSTED_PROXIES` to `builder`
/// (unset or blank: off) and prints whether the allowlist is on. A malformed
/// entry is an error naming the variable, the entry and why.
pub fn allowlist_from_env(mut builder: ReceiverBuilder) -> Result<ReceiverBuilder, String> {
    let setting = |name: &str| -> Result<Option<(String, usize)>, String> {
        match std::env::var(name) {
            Ok(value) if !value.trim().is_empty() => {
                let networks = Networks::parse(&value).map_err(|err| format!("{name}: {err}"))?;
                Ok(Some((value, networks.len())))
            }
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!("{name} is not valid UTF-8")),
        }
    };
    let allowed = setting("PAYHOOK_ALLOWED_IPS")?;
    let trusted = setting("PAYHOOK_TRUSTED_PROXIES")?;
    match (allowed, trusted) {
        (None, None) => println!("source allowlist: off"),
        (None, Some(_)) => {
            return Err("PAYHOOK_TRUSTED_PROXIES is set without PAYHOOK_ALLOWED_IPS: \
                        trusted proxies only tell the allowlist who the client is"
                .to_owned())
        }
        (Some((allowed, count)), trusted) => {
            builder = builder.allowed_networks([allowed]);
            let proxies = match trusted {
                Some((trusted, proxies)) => {
                    builder = builder.trusted_proxies([trusted]);
                    proxies
                }
                None => 0,
            };
            println!("source allowlist: {count} network(s), {proxies} trusted prox(ies)");
        }
    }
    Ok(builder)
}

/// Logs to stdout at the level `RUST_LOG` asks for (default `info`), in colour
/// only on a terminal; with `OTEL_EXPORTER_OTLP_ENDPOINT` set, also exports
/// the spans there as OTLP over HTTP ([`payhook::otel`]). Keep the returned
/// value until the end of `main`: dropping it flushes the last spans.
pub fn init_logging() -> Option<payhook::otel::Otel> {
    let otel = match payhook::otel::Otel::from_env(env!("CARGO_BIN_NAME")) {
        Ok(otel) => Some(otel),
        Err(error) => {
            eprintln!("OpenTelemetry export off: {error}");
            None
        }
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stdout)
                .with_ansi(std::io::stdout().is_terminal()),
        )
        .with(otel.as_ref().and_then(payhook::otel::Otel::layer))
        .with(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .init();
    otel
}

/// The process's exit status: success, or failure with the error on stderr
/// after the example's name.
pub fn exit_status(example: &str, result: Result<(), Box<dyn Error>>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{example}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The reconciler's settings from `PAYHOOK_API_BASE`, `PAYHOOK_API_KEY` and
/// `PAYHOOK_RECONCILE_INTERVAL_MS`, or `None` when neither of the first two
/// is set. The key is never printed; a bad value names its variable.
pub fn reconcile_from_env() -> Result<Option<payhook::inbox::Reconcile>, Box<dyn Error>> {
    let set = |name| {
        std::env::var(name)
            .ok()
            .filter(|value: &String| !value.trim().is_empty())
    };
    let (base, key) = match (set("PAYHOOK_API_BASE"), set("PAYHOOK_API_KEY")) {
        (None, None) => return Ok(None),
        (Some(base), Some(key)) => (base, key),
        (Some(_), None) => {
            return Err("PAYHOOK_API_BASE is set without PAYHOOK_API_KEY: set both to reconcile".into())
        }
        (None, Some(_)) => {
            return Err("PAYHOOK_API_KEY is set without PAYHOOK_API_BASE: set both to reconcile".into())
        }
    };
    let mut reconcile = payhook::inbox::Reconcile::new(&base, &key)
        .map_err(|err| format!("PAYHOOK_API_BASE / PAYHOOK_API_KEY: {err}"))?;
    if let Some(ms) = set("PAYHOOK_RECONCILE_INTERVAL_MS") {
        let ms: u64 = ms.trim().parse().map_err(|_| {
            format!("PAYHOOK_RECONCILE_INTERVAL_MS={ms:?} is not a whole number of milliseconds")
        })?;
        reconcile = reconcile.interval(std::time::Duration::from_millis(ms));
    }
    println!("reconciling with the events list at {}", reconcile.api().base());
    Ok(Some(reconcile))
}
