//! `payhook reconcile`: the payment service's events list against an inbox
//! (or a receiver of any kind), for the events no delivery brought.
//!
//! The command lists every event the service created in `[now − since, now)`
//! (all pages of `GET /v1/events`, newest first, with the secret API key;
//! see [`list`]), then:
//!
//! * with `--database-url`: asks the inbox which of them it lacks
//!   ([`Admin::missing`]), prints how many (`N event(s)`) and their types,
//!   and with `--yes` stores them marked `reconciled`
//!   ([`Admin::store_reconciled`]): a worker of the app handles them;
//! * with `--forward-to URL --secret-file FILE` instead: takes the events no
//!   endpoint acknowledged (`delivery_success=false`) and with `--yes` POSTs
//!   each, signed as the service signs, to the receiver, which deduplicates
//!   them as usual (see [`forward`]).
//!
//! Nothing changes before every page is listed: a failure while listing
//! leaves the inbox (or the receiver) as it was.
//!
//! **The look-back rule.** A receiver remembers a handled event's id for its
//! retention (an inbox's [`DEFAULT_RETENTION`], 7 days, unless its builder
//! says otherwise). An event created longer ago than that may have been
//! handled and forgotten already: storing or sending it again would run it a
//! second time. So `--since` may not reach further back than the retention:
//! the default one, or the one `--retention` names.
//!
//! **Trust.** The list is trusted because it came from `--api-base` over
//! `https://` (plain `http://` on loopback only) in reply to the API key; the
//! key is read from a file, sent only in the `Authorization` header and
//! never printed (a reply that quotes it is shown with the key cut out).
//! Every listed value printed (ids, types, reply bodies) goes through the
//! core's [`Untrusted`] escaping.
//!
//! Exit codes: 0 counted (and stored, or sent with every reply 2xx); 1 a
//! reply of the receiver was not 2xx, or the service answered 429, 5xx or
//! something that is not a page of events; 2 a usage error, an unreadable
//! file, the service refused the key (401/403), or the inbox cannot be
//! opened; 3 the service or the receiver cannot be reached.

mod forward;
mod list;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::Args;
use payhook_api::{ApiKey, Client, EventsQuery, ListedEvent, PAGE_LIMIT};
use payhook_core::defaults::DEFAULT_RETENTION;
use payhook_core::time::{format_utc, now_secs};
use payhook_core::untrusted::Untrusted;
use payhook_inbox::admin::Admin;
use payhook_inbox::reconcile::split_storable;
use url::Url;

use crate::failure::Failure;
use crate::inbox_bulk::shell_word;
use crate::output::say;
use crate::runtime::{self, Threads};

/// Where the inbox's URL is read from when no option names a target.
const DATABASE_URL_ENV: &str = "PAYHOOK_DATABASE_URL";

/// The exit codes and rules, at the end of `payhook reconcile --help`.
pub const AFTER_HELP: &str = "\
Exit codes:
  0  counted (and, with --yes, stored, or sent with every reply 2xx)
  1  a reply of the receiver was not 2xx, or the service answered 429, 5xx or
     something that is not a page of events (nothing was changed)
  2  usage error, an unreadable key or secret file, the service refused the API
     key (401/403), or the inbox cannot be opened
  3  the service (or, with --forward-to, the receiver) could not be reached

The look-back rule: a receiver remembers a handled event's id for its retention
(7 days unless its inbox or receiver builder says otherwise) and then forgets
it; an event older than that would run a second time. So --since may not reach
further back than 7d, or than the retention --retention names.

The API key is read from --api-key-file and never printed. Events created in the
last minute may still be on their way as deliveries: storing or sending them is
harmless (the event id dedupes, they run once).";

/// `payhook reconcile`.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The payment service's API: https://…, or http:// on loopback only (the
    /// emulator, e.g. http://127.0.0.1:12111).
    #[arg(long, value_name = "URL", env = "PAYHOOK_API_BASE", hide_env_values = true, value_parser = NonEmptyStringValueParser::new())]
    pub api_base: String,

    /// Read the service's secret API key (sk_…) from this file (one line; a
    /// final line break is ignored). The key is never printed.
    #[arg(long, value_name = "FILE")]
    pub api_key_file: PathBuf,

    /// The inbox to compare with and store into: `sqlite://FILE` or
    /// `postgres://USER@HOST/DB`.
    /// [env: PAYHOOK_DATABASE_URL, used when neither --database-url nor --forward-to is given]
    // Read from the environment by `run`, not by clap: clap would count the
    // variable as the option given, and refuse it beside --forward-to.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "forward_to",
        value_parser = NonEmptyStringValueParser::new()
    )]
    pub database_url: Option<String>,

    /// The namespace the app's inbox stores events under (the inbox builder's
    /// `namespace`). --yes refuses one the database has never seen.
    #[arg(
        long,
        value_name = "NS",
        default_value = payhook_inbox::DEFAULT_NAMESPACE,
        conflicts_with = "forward_to",
        value_parser = NonEmptyStringValueParser::new()
    )]
    pub namespace: String,

    /// Instead of an inbox: the events no endpoint acknowledged
    /// (delivery_success=false) go to this receiver (inline or inbox), signed
    /// with --secret-file as the service signs.
    #[arg(long, value_name = "URL", value_parser = crate::urls::parse_url, requires = "secret_file")]
    pub forward_to: Option<Url>,

    /// The receiver's signing secret (whsec_…), read from this file (one
    /// line). Only with --forward-to.
    #[arg(long, value_name = "FILE", requires = "forward_to")]
    pub secret_file: Option<PathBuf>,

    /// How far back to look: the events created in [now − DURATION, now)
    /// (`90s`, `30m`, `24h`, `7d`). At most the retention.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = crate::inbox::parse_age)]
    pub since: Duration,

    /// The receiver's retention (the inbox builder's `retention`, 7d by
    /// default): how long it remembers a handled event's id. An event older
    /// than that may have been handled and forgotten, and would run again,
    /// so --since may not reach further back. Name it to look back further.
    #[arg(long, value_name = "DURATION", value_parser = crate::inbox::parse_age)]
    pub retention: Option<Duration>,

    /// Store (or send) the events found; without it, only count them.
    #[arg(long)]
    pub yes: bool,

    /// The most pages of the events list to read (up to 100 events each).
    /// A window with more ends the run before anything is stored or sent:
    /// narrow it with --since, or raise this.
    #[arg(
        long,
        value_name = "N",
        default_value_t = payhook_inbox::reconcile::DEFAULT_MAX_PAGES,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_pages: u32,
}

/// The events created in `[since, until)`, in Unix seconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    since: i64,
    until: i64,
    /// `--since` as given, for messages (`24h`).
    span: Duration,
}

impl Window {
    /// What the events list is asked for: the window, and with
    /// `delivery_success` only the events no endpoint acknowledged (or that
    /// one did). The client keeps the events inside the window alone.
    fn query(&self, delivery_success: Option<bool>) -> EventsQuery {
        EventsQuery {
            created_gte: Some(self.since),
            created_lt: Some(self.until),
            delivery_success,
            ..EventsQuery::default()
        }
    }

    /// `in the last 24h (since 2026-11-23 04:00:00 UTC)`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "in the last {} (since {} UTC)",
            duration(self.span),
            format_utc(self.since.saturating_mul(1000))
        )
    }
}

/// How the listing reaches the service: the client and what to say when the
/// key is refused (the key file's name, never the key).
pub(crate) struct Service {
    /// The client cuts the key (as trimmed) out of anything the service says.
    api: Client,
    key_file: PathBuf,
}

/// Runs `payhook reconcile`.
pub fn run(args: &ReconcileArgs) -> Result<(), Failure> {
    // Everything the user typed is checked before the service is asked.
    let window = window(args, now_secs())?;
    let target = match (&args.forward_to, &args.secret_file) {
        (Some(to), Some(secret_file)) => {
            let secret = crate::secret::line_of_file(secret_file, "the secret file")?;
            let secret = payhook_core::Secret::new(&secret).map_err(|err| {
                Failure::usage(format_args!("--secret-file {}: {err}", secret_file.display()))
            })?;
            Target::Receiver(to, secret)
        }
        // clap requires the secret file with --forward-to.
        (Some(_), None) => return Err(Failure::usage("--forward-to needs --secret-file FILE")),
        (None, _) => Target::Inbox(database_url(args)?),
    };
    let key = crate::secret::line_of_file(&args.api_key_file, "the API key file")?;
    let checked = ApiKey::new(&key).map_err(|why| {
        Failure::usage(format_args!(
            "--api-key-file {}: {why}",
            args.api_key_file.display()
        ))
    })?;
    let api = Client::new(&args.api_base, checked)
        .map_err(|why| Failure::usage(format_args!("--api-base: {why}")))?;
    let service = Service {
        api,
        key_file: args.api_key_file.clone(),
    };
    match target {
        Target::Receiver(to, secret) => {
            runtime::block_on(Threads::One, forward::run(&service, window, to, &secret, args))
        }
        Target::Inbox(url) => runtime::block_on(Threads::One, into_inbox(&service, window, &url, args)),
    }
}

/// Where the events the service created and nobody has go.
enum Target<'a> {
    /// An inbox's database URL.
    Inbox(String),
    /// A receiver and its signing secret.
    Receiver(&'a Url, payhook_core::Secret),
}

/// `--database-url`, or else `PAYHOOK_DATABASE_URL` (its value never shown).
fn database_url(args: &ReconcileArgs) -> Result<String, Failure> {
    if let Some(url) = &args.database_url {
        return Ok(url.clone());
    }
    match std::env::var(DATABASE_URL_ENV) {
        Ok(url) if !url.is_empty() => Ok(url),
        Ok(_) => Err(Failure::usage(format_args!(
            "{DATABASE_URL_ENV} is set but empty"
        ))),
        Err(std::env::VarError::NotUnicode(_)) => Err(Failure::usage(format_args!(
            "{DATABASE_URL_ENV} is not valid UTF-8"
        ))),
        Err(std::env::VarError::NotPresent) => Err(Failure::usage(
            "give --database-url URL (the inbox; or set PAYHOOK_DATABASE_URL) \
             or --forward-to URL --secret-file FILE (a receiver)",
        )),
    }
}

/// The window `--since` names, held to the look-back rule.
fn window(args: &ReconcileArgs, now: i64) -> Result<Window, Failure> {
    if args.since.is_zero() {
        return Err(Failure::usage("--since must be longer than 0s"));
    }
    let retention = args.retention.unwrap_or(DEFAULT_RETENTION);
    if args.since > retention {
        let whose = match args.retention {
            Some(_) => format!("the retention --retention names ({})", duration(retention)),
            None => format!(
                "the default retention of an inbox or receiver ({})",
                duration(DEFAULT_RETENTION)
            ),
        };
        return Err(Failure::usage(format_args!(
            "--since {} reaches further back than {whose}: a receiver forgets a handled event's id \
             after its retention, so an older event may have run already and would run again. \
             Only if the receiver keeps ids at least that long (its builder's `retention`), \
             say so: --since {} --retention {}",
            duration(args.since),
            duration(args.since),
            duration(args.since)
        )));
    }
    let span = i64::try_from(args.since.as_secs()).unwrap_or(i64::MAX);
    Ok(Window {
        since: now.saturating_sub(span),
        // `created` is whole seconds: an event of the current second was
        // created before now.
        until: now.saturating_add(1),
        span: args.since,
    })
}

/// `--database-url`: count the events the inbox lacks; with `--yes`, store them.
async fn into_inbox(
    service: &Service,
    window: Window,
    url: &str,
    args: &ReconcileArgs,
) -> Result<(), Failure> {
    // The URL may hold a password: never print it.
    let admin = Admin::connect(url, &args.namespace)
        .await
        .map_err(|err| Failure::usage(format_args!("cannot open the inbox at --database-url: {err}")))?;
    crate::inbox::check_namespace(&admin, args.yes).await?;
    let mut pages = list::Pager::new(service, window, None, args.max_pages);
    let mut missing: Vec<ListedEvent> = Vec::new();
    while let Some(page) = pages.next().await? {
        if page.is_empty() {
            continue;
        }
        let absent = admin.missing(&page).await.map_err(crate::inbox::failure)?;
        // One the inbox cannot store (too long an id, a NUL) is refused
        // like a listed event that does not parse, so it holds back none.
        let (storable, unstorable) = split_storable(&absent);
        pages.refuse(unstorable);
        missing.extend(storable.into_iter().cloned());
    }
    let namespace = shell_word(&args.namespace);
    say!(
        "{} event(s) the service created {} are not in the inbox (namespace {namespace}; {} listed)",
        missing.len(),
        window.describe(),
        pages.listed()
    );
    print_types(&missing);
    pages.note_outside();
    pages.note_refused();
    if args.yes && !pages.refused().is_empty() {
        let retention = args.retention.unwrap_or(payhook_inbox::DEFAULT_RETENTION);
        let recorded = admin
            .record_refused(pages.refused(), retention)
            .await
            .map_err(crate::inbox::failure)?;
        say!("{recorded} refused event(s) recorded: payhook inbox refused lists them");
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !args.yes {
        say!("nothing changed: run again with --yes to store them (a worker of the app then handles them)");
        return Ok(());
    }
    // Oldest first, as the service created them.
    missing.reverse();
    let mut stored = 0u64;
    // The events of the batches that went through (stored, or delivered
    // meanwhile).
    let mut tried = 0usize;
    for batch in missing.chunks(PAGE_LIMIT as usize) {
        let batch: Vec<&ListedEvent> = batch.iter().collect();
        match admin.store_reconciled(&batch).await {
            Ok(new) => {
                stored += new;
                tried += batch.len();
            }
            Err(err) => {
                // What was stored stays (a worker handles it); say how much,
                // and fail the run.
                say!(
                    "{stored} event(s) stored in the inbox (namespace {namespace}) as reconciled before \
                     the error below; {} not stored: run the command again once it is fixed",
                    missing.len() - tried
                );
                return Err(crate::inbox::failure(err));
            }
        }
    }
    say!(
        "{stored} event(s) stored in the inbox (namespace {namespace}) as reconciled: \
         they are handled when a worker of the app runs"
    );
    let meanwhile = missing.len() as u64 - stored.min(missing.len() as u64);
    if meanwhile > 0 {
        say!("{meanwhile} arrived as deliveries meanwhile and were left as they are");
    }
    Ok(())
}

/// One line per event type, `  TYPE: COUNT`, by type.
fn print_types(events: &[ListedEvent]) {
    let mut types: BTreeMap<&str, u64> = BTreeMap::new();
    for listed in events {
        *types.entry(listed.event.event_type()).or_default() += 1;
    }
    for (event_type, count) in types {
        say!("  {}: {count}", Untrusted::value(event_type));
    }
}

/// A duration in the largest unit that divides it (`7d`, `36h`, `90s`); a
/// single day is `24h`, as `--since` defaults to.
fn duration(value: Duration) -> String {
    let secs = value.as_secs();
    match secs {
        s if s > 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(since: u64, retention: Option<u64>) -> ReconcileArgs {
        ReconcileArgs {
            api_base: "http://127.0.0.1:1".to_owned(),
            api_key_file: PathBuf::from("key"),
            database_url: Some("sqlite://x.db".to_owned()),
            namespace: "payhook".to_owned(),
            forward_to: None,
            secret_file: None,
            since: Duration::from_secs(since),
            retention: retention.map(Duration::from_secs),
            yes: false,
            max_pages: 1000,
        }
    }

    #[test]
    fn the_window_ends_with_the_current_second_and_keeps_to_the_retention() {
        let window = window(&args(3600, None), 10_000).unwrap();
        assert_eq!((window.since, window.until), (6400, 10_001));
        let query = window.query(None);
        assert!(query.contains(Some(10_000)) && query.contains(Some(6400)));
        assert!(!query.contains(Some(6399)) && !query.contains(Some(10_001)) && !query.contains(None));
        assert!(super::window(&args(7 * 86_400, None), 10_000).is_ok());
        assert!(super::window(&args(7 * 86_400 + 1, None), 10_000).is_err());
        assert!(super::window(&args(30 * 86_400, Some(30 * 86_400)), 10_000).is_ok());
        assert!(super::window(&args(31 * 86_400, Some(30 * 86_400)), 10_000).is_err());
        assert!(super::window(&args(0, None), 10_000).is_err());
    }

    #[test]
    fn durations_are_shown_in_their_largest_unit() {
        assert_eq!(duration(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(duration(Duration::from_secs(36 * 3600)), "36h");
        assert_eq!(duration(Duration::from_secs(86_400)), "24h");
        assert_eq!(duration(Duration::from_secs(90)), "90s");
        assert_eq!(duration(Duration::from_secs(1800)), "30m");
        assert_eq!(duration(Duration::ZERO), "0s");
    }
}
