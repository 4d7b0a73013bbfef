//! `payhook inbox`: look into a durable inbox and act on its events.
//!
//! * `list` — events, newest first, filtered by state, type and age;
//! * `stats` — counts by state, the oldest pending event, the last hour's
//!   deliveries and attempts, the backend (what the dashboard's overview shows);
//! * `show ID` — one event: state, source (delivered; reconciled, and when
//!   its delivery came later), attempts, last error, every recorded
//!   attempt, differing copies, the other events of its payment intent, body;
//! * `refused` — the events the inbox was offered and could not take (listed
//!   events that do not parse, are too long, or cannot be stored): id,
//!   reason, how often and when;
//! * `retry ID` / `retry --dead` — make a dead (or waiting) event due now;
//! * `replay --since TIME` — run done events again, explicitly;
//! * `purge --done-before TIME --yes` — delete done events;
//! * `pause TYPE` / `resume TYPE` / `paused` — stop handling an event type
//!   (its deliveries are still stored and acknowledged), start again (its
//!   events run oldest first), list the paused types;
//! * `bulk ACTION [filters] --yes` — retry, replay, purge or pause over a
//!   selection, counted first (see `inbox_bulk`).
//!
//! TIME is an age (`30m`, `2h`, `7d`: that long ago), Unix seconds
//! (`1732264800`), a UTC date (`2026-11-23`, its midnight) or a UTC date and
//! time (`2026-11-23 04:00`, `2026-11-23 04:00:00`, RFC 3339
//! `2026-11-23T04:00:00Z`): the dashboard's replay form takes the same; a date
//! that does not exist (`2026-02-31`) is refused.
//! Exit codes: 0 done, 1 no such event, 2 usage error, unreachable database,
//! a change (retry, replay, purge, pause, resume, bulk) in a namespace the
//! database has never seen (no event, no paused type: the error names the
//! ones it has; a read there only warns), or a purge not confirmed. Every
//! command a hint prints names the `--namespace` it was given (it may stand
//! anywhere after `inbox`).
//!
//! A purge forgets event ids, so their redeliveries are handled again; it is
//! guarded: a `--done-before` in the future is refused (it would purge events
//! done a moment ago, whose redeliveries may still be on their way), and
//! without `--yes` the command only counts what would go and says so. On a
//! terminal it then asks; otherwise (a script, a pipe) it stops there with
//! exit code 2, purging nothing.

use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::{Args, Subcommand};
use payhook_core::time::{format_utc, now_secs, SinceError};
use payhook_core::untrusted::Untrusted;
use payhook_inbox::admin::{Admin, Filter, Source, State, StoredEvent};
use payhook_inbox::InboxError;

use crate::failure::Failure;
use crate::inbox_bulk::shell_word;
use crate::output::{confirmed, say};
use crate::runtime::{self, Threads};

/// `payhook inbox`.
#[derive(Debug, Args)]
pub struct InboxArgs {
    /// The inbox database: `sqlite://FILE` or `postgres://USER@HOST/DB`.
    #[arg(long, env = "PAYHOOK_DATABASE_URL", hide_env_values = true, value_parser = NonEmptyStringValueParser::new())]
    pub database_url: String,

    /// The namespace the receiver stores events under (the inbox builder's
    /// `namespace`). A change in one the database has never seen (no event,
    /// no paused type) is refused, naming the ones it has.
    #[arg(long, global = true, default_value = payhook_inbox::DEFAULT_NAMESPACE, value_parser = NonEmptyStringValueParser::new())]
    pub namespace: String,

    /// What to do.
    #[command(subcommand)]
    pub action: InboxAction,
}

/// The `payhook inbox` subcommands.
#[derive(Debug, Subcommand)]
pub enum InboxAction {
    /// List events, newest first: id, state, type, attempts, age, source, last error.
    List {
        /// Only events in this state.
        #[arg(long, value_parser = parse_state)]
        state: Option<State>,
        /// Only events of this type.
        #[arg(long = "type", value_name = "TYPE", value_parser = NonEmptyStringValueParser::new())]
        event_type: Option<String>,
        /// Only events received at least this long ago (`90s`, `30m`, `2h`, `7d`).
        #[arg(long, value_name = "AGE", value_parser = parse_age)]
        older_than: Option<Duration>,
        /// Only events received at most this long ago.
        #[arg(long, value_name = "AGE", value_parser = parse_age)]
        newer_than: Option<Duration>,
        /// Only events of this source: `delivered`, or `reconciled` (no
        /// delivery of them arrived; the reconciler stored them).
        #[arg(long, value_parser = parse_source)]
        source: Option<Source>,
        /// At most this many.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        limit: u32,
    },
    /// Counts by state, delivered and recovered events, the age of the
    /// oldest pending event, the last hour's deliveries, handled and failed
    /// attempts, and the database backend.
    Stats,
    /// The events the inbox was offered and could not take, last first:
    /// listed events of the service's events list that do not parse, are
    /// longer than a delivery may be, or cannot be stored (the rest of each
    /// one's page was stored).
    Refused {
        /// At most this many.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
    },
    /// Show one event: its state, attempts, last error, attempt history, the
    /// other events of its payment intent, and its body.
    Show {
        /// The event id (`evt_…`).
        id: String,
    },
    /// Make a dead or waiting event due now (one more attempt), or every dead one.
    Retry {
        /// The event id.
        #[arg(required_unless_present = "dead", conflicts_with = "dead")]
        id: Option<String>,
        /// Every dead event.
        #[arg(long)]
        dead: bool,
    },
    /// Run done events received since TIME again (their handlers run once more).
    Replay {
        /// An age like `2h`, Unix seconds, or a UTC date or time (`2026-11-23 04:00`, RFC 3339).
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        since: i64,
    },
    /// Delete done events marked done before TIME (their ids are then
    /// forgotten: a redelivery runs the handler again). Counts first; purges
    /// only with --yes, or when confirmed on a terminal.
    Purge {
        /// An age like `7d`, Unix seconds, or a UTC date or time (`2026-11-23 04:00`, RFC 3339);
        /// not in the future.
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        done_before: i64,
        /// Purge without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Stop handling an event type: its deliveries are still verified, stored
    /// and acknowledged, but no worker of any replica takes its events until
    /// it is resumed.
    Pause {
        /// The event type (`payment_intent.succeeded`).
        #[arg(value_name = "TYPE", value_parser = NonEmptyStringValueParser::new())]
        event_type: String,
    },
    /// Handle a paused event type again: its waiting events run, oldest first.
    Resume {
        /// The event type.
        #[arg(value_name = "TYPE", value_parser = NonEmptyStringValueParser::new())]
        event_type: String,
    },
    /// List the paused event types, with their waiting events.
    Paused,
    /// Retry, replay, purge or pause the events a filter selects: counts
    /// first, acts only with --yes (or when confirmed on a terminal), in
    /// short batches; safe to run again after an interruption.
    Bulk(crate::inbox_bulk::BulkArgs),
}

/// Runs `payhook inbox`.
pub fn run(args: &InboxArgs) -> Result<(), Failure> {
    runtime::block_on(Threads::One, run_async(args))
}

async fn run_async(args: &InboxArgs) -> Result<(), Failure> {
    // The URL may hold a password: never print it.
    let admin = Admin::connect(&args.database_url, &args.namespace)
        .await
        .map_err(|err| Failure::usage(format!("cannot open the inbox at --database-url: {err}")))?;
    let changes = !matches!(
        args.action,
        InboxAction::List { .. }
            | InboxAction::Stats
            | InboxAction::Show { .. }
            | InboxAction::Paused
            | InboxAction::Refused { .. }
    );
    check_namespace(&admin, changes).await?;
    let namespace = shell_word(&args.namespace);
    match &args.action {
        InboxAction::List {
            state,
            event_type,
            older_than,
            newer_than,
            source,
            limit,
        } => {
            let filter = Filter {
                state: *state,
                event_type: event_type.clone(),
                older_than: *older_than,
                newer_than: *newer_than,
                source: *source,
                limit: Some(*limit),
            };
            let events = admin.list(&filter).await.map_err(failure)?;
            say!("EVENT\tSTATE\tTYPE\tATTEMPTS\tAGE\tSOURCE\tLAST ERROR");
            for event in events {
                say!(
                    "{}\t{}{}\t{}\t{}\t{}\t{}\t{}",
                    Untrusted::value(&event.event_id),
                    event.state,
                    event
                        .lease_until
                        .map_or(String::new(), |until| format!(" ({})", lease(until))),
                    Untrusted::value(&event.event_type),
                    event.attempts,
                    age(event.received_at),
                    event.source_label(),
                    one_line(event.last_error.as_deref().unwrap_or("-"))
                );
            }
        }
        InboxAction::Stats => stats(&admin).await?,
        InboxAction::Refused { limit } => refused(&admin, *limit).await?,
        InboxAction::Show { id } => {
            let event = admin.show(id).await.map_err(failure)?;
            show(&event);
            show_differing(&admin, &event).await;
            show_history(&admin, &event).await;
            // The body last, as before: it is the longest part.
            show_body(&event);
        }
        InboxAction::Retry { id: Some(id), .. } => {
            admin.retry(id).await.map_err(failure)?;
            say!("{} is due now", Untrusted::value(id));
        }
        InboxAction::Retry { id: None, .. } => {
            let count = admin.retry_dead().await.map_err(failure)?;
            say!("{count} dead event(s) due now");
        }
        InboxAction::Replay { since } => {
            let count = admin
                .replay_since(since.saturating_mul(1000))
                .await
                .map_err(failure)?;
            say!("{count} done event(s) due again");
        }
        InboxAction::Purge { done_before, yes } => purge(&admin, &namespace, *done_before, *yes).await?,
        InboxAction::Pause { event_type } => {
            let shown = Untrusted::value(event_type);
            if admin.pause(event_type).await.map_err(failure)? {
                say!(
                    "{shown} paused in namespace {namespace}: its deliveries are stored and acknowledged, \
                     not handled, until `payhook inbox --namespace {namespace} resume {}`",
                    shell_word(event_type)
                );
            } else {
                say!("{shown} was already paused");
            }
        }
        InboxAction::Resume { event_type } => {
            let shown = Untrusted::value(event_type);
            if admin.resume(event_type).await.map_err(failure)? {
                say!("{shown} resumed: its waiting events run, oldest first");
            } else {
                say!("{shown} was not paused");
            }
        }
        InboxAction::Paused => {
            let paused = admin.paused().await.map_err(failure)?;
            say!("TYPE\tPAUSED\tWAITING");
            for paused in paused {
                say!(
                    "{}\t{} ago\t{}",
                    Untrusted::value(&paused.event_type),
                    age(paused.paused_at),
                    paused.waiting
                );
            }
        }
        InboxAction::Bulk(bulk) => crate::inbox_bulk::run(&admin, &args.namespace, bulk).await?,
    }
    Ok(())
}

/// The most namespaces a refusal names.
const NAMESPACES_SHOWN: u32 = 20;

/// Refuses a command that `changes` anything in a namespace the database has
/// never seen (no event, no paused type): most likely not the one the app's
/// inbox uses, where a pause would pause nothing that runs. A read goes on
/// (an inbox whose events were all purged looks the same), after the same
/// words as a warning, so that an empty listing is not taken for an empty
/// inbox.
pub(crate) async fn check_namespace(admin: &Admin, changes: bool) -> Result<(), Failure> {
    if admin.namespace_seen().await.map_err(failure)? {
        return Ok(());
    }
    let known = admin.namespaces(NAMESPACES_SHOWN + 1).await.map_err(failure)?;
    let mut names: Vec<String> = known
        .iter()
        .take(NAMESPACES_SHOWN as usize)
        .map(|name| shell_word(name))
        .collect();
    if known.len() > NAMESPACES_SHOWN as usize {
        names.push("…".to_owned());
    }
    let has = if names.is_empty() {
        "it has none yet (no event stored, no type paused)".to_owned()
    } else {
        format!("it has: {}", names.join(", "))
    };
    let problem = format!(
        "the database has no event and no paused type in namespace {}; {has}. \
         Pass the inbox's namespace with --namespace",
        shell_word(admin.namespace())
    );
    if changes {
        return Err(Failure::usage(format_args!("{problem} (nothing done)")));
    }
    crate::output::note!("warning: {problem}");
    Ok(())
}

/// The most done events counted before a purge; beyond it the count is a
/// lower bound ("at least").
const PURGE_COUNT_LIMIT: u32 = 100_000;

async fn purge(admin: &Admin, namespace: &str, done_before: i64, yes: bool) -> Result<(), Failure> {
    let now = now_secs();
    if done_before > now {
        return Err(Failure::usage(format_args!(
            "--done-before {done_before} is in the future (now is {now}): a purge only forgets \
             events done before a time that has passed, or their redeliveries run again"
        )));
    }
    let before_ms = done_before.saturating_mul(1000);
    // Done at `before_ms` means received no later: narrow the listing to those.
    let received_ago = Duration::from_secs(u64::try_from(now - done_before).unwrap_or(0));
    let done = admin
        .list(&Filter {
            state: Some(State::Done),
            older_than: Some(received_ago),
            limit: Some(PURGE_COUNT_LIMIT),
            ..Filter::default()
        })
        .await
        .map_err(failure)?;
    let listed = done.len();
    let count = done
        .iter()
        .filter(|event| event.done_at.is_some_and(|at| at < before_ms))
        .count();
    if count == 0 {
        say!("0 done event(s) purged");
        return Ok(());
    }
    let shown = if listed >= PURGE_COUNT_LIMIT as usize {
        format!("at least {count}")
    } else {
        count.to_string()
    };
    if !yes {
        say!("{shown} done event(s) marked done before {done_before} would be purged; their ids are then forgotten");
        if !confirmed("purge them?").map_err(Failure::usage)? {
            return Err(Failure::usage(format_args!(
                "nothing purged: run again with --yes to purge them: \
                 payhook inbox --namespace {namespace} purge --done-before {done_before} --yes"
            )));
        }
    }
    let purged = admin.purge_done_before(before_ms).await.map_err(failure)?;
    say!("{} done event(s) purged", purged.events);
    Ok(())
}

pub(crate) fn failure(err: InboxError) -> Failure {
    match err {
        InboxError::NotFound(_) => {
            crate::output::note!("error: {}", Untrusted::message(&err.to_string()));
            Failure::Rejected
        }
        other => Failure::usage(other),
    }
}

fn show(event: &StoredEvent) {
    // The ids and the type come from the delivery: escaped and capped, so
    // they cannot forge a line or drive the terminal.
    say!("event: {}", Untrusted::value(&event.event_id));
    say!("type: {}", Untrusted::value(&event.event_type));
    say!(
        "payment intent: {}",
        Untrusted::value(event.intent_id.as_deref().unwrap_or("-"))
    );
    say!("state: {}", event.state);
    say!("source: {}", source_line(event));
    if let Some(until) = event.lease_until {
        say!("lease: {}", lease(until));
    }
    say!("attempts: {}", event.attempts);
    say!("created: {}", event.created);
    say!("received: {} ago", age(event.received_at));
    if let Some(at) = event.last_attempt_at {
        say!("last attempt: {} ago", age(at));
    }
    say!(
        "last error: {}",
        one_line(event.last_error.as_deref().unwrap_or("-"))
    );
    if let Some(at) = event.done_at {
        say!("done: {} ago", age(at));
    }
}

/// The event's recorded attempts and the other events of its payment intent
/// (an inbox whose schema predates the attempts record has none to show).
/// The duplicates of the event whose content differed, when any arrived (an
/// inbox whose schema predates the record has none to show).
async fn show_differing(admin: &Admin, event: &StoredEvent) {
    if let Ok(Some(differing)) = admin.differing_copies(&event.event_id).await {
        say!(
            "differing copies: {} later cop{} of this id (a delivery, or the service's events list) carried \
             another type or data, the last {} ago; the first body kept",
            differing.copies,
            if differing.copies == 1 { "y" } else { "ies" },
            age(differing.last_at)
        );
    }
}

async fn show_history(admin: &Admin, event: &StoredEvent) {
    // The heading names the source, so that a history read on its own still
    // says whether a delivery brought the event or the reconciler did.
    let heading = match (event.source, event.delivered_at) {
        (Source::Delivered, _) => "attempt history (delivered)".to_owned(),
        (Source::Reconciled, None) => {
            "attempt history (reconciled: no delivery arrived, the reconciler stored it)".to_owned()
        }
        (Source::Reconciled, Some(at)) => format!(
            "attempt history (reconciled at {} UTC, its delivery arrived later, at {} UTC: \
             the reconciler's copy is the one handled)",
            format_utc(event.received_at),
            format_utc(at)
        ),
    };
    match admin.attempts(&event.event_id).await {
        Ok(attempts) if attempts.is_empty() => say!("{heading}: none recorded"),
        Ok(attempts) => {
            say!("{heading}:");
            for attempt in attempts {
                let error = attempt
                    .error
                    .as_deref()
                    .map_or(String::new(), |error| format!(": {}", one_line(error)));
                say!(
                    "  #{} {} ago, {} ms, {}{error}",
                    attempt.attempt,
                    age(attempt.started_at),
                    attempt.duration_ms,
                    Untrusted::value(&attempt.outcome)
                );
            }
        }
        Err(_) => {
            say!("{heading}: not recorded by this inbox's schema (the app adds it when it next starts)")
        }
    }
    if let Some(intent) = &event.intent_id {
        if let Ok(others) = admin.intent_events(intent, 100).await {
            let others: Vec<_> = others
                .into_iter()
                .filter(|other| other.event_id != event.event_id)
                .collect();
            if !others.is_empty() {
                say!("other events of its payment intent:");
                for other in others {
                    say!(
                        "  {}\t{}\t{}",
                        Untrusted::value(&other.event_id),
                        other.state,
                        Untrusted::value(&other.event_type)
                    );
                }
            }
        }
    }
}

/// Where the event came from, for `show`: delivered; reconciled (no
/// delivery of it arrived); or reconciled at T, delivered at T2.
fn source_line(event: &StoredEvent) -> String {
    match (event.source, event.delivered_at) {
        (Source::Delivered, _) => "delivered".to_owned(),
        (Source::Reconciled, None) => {
            "reconciled (no delivery of it arrived: the reconciler stored it from the service's events list)"
                .to_owned()
        }
        (Source::Reconciled, Some(at)) => format!(
            "reconciled at {} UTC, delivered at {} UTC (the reconciler stored it from the service's events \
             list; its delivery arrived later and was acknowledged as a duplicate)",
            format_utc(event.received_at),
            format_utc(at)
        ),
    }
}

/// `payhook inbox refused`: the refused events, last first. Their ids and
/// reasons came from the service: escaped and capped.
async fn refused(admin: &Admin, limit: u32) -> Result<(), Failure> {
    let refused = admin.refused(limit).await.map_err(failure)?;
    say!("EVENT\tSOURCE\tTIMES\tLAST\tBYTES\tREASON");
    for refused in refused {
        say!(
            "{}\t{}\t{}\t{} ago\t{}\t{}",
            Untrusted::value(refused.event_id.as_deref().unwrap_or("-")),
            refused.source,
            refused.times,
            age(refused.last_at),
            refused.bytes,
            one_line(&refused.reason)
        );
    }
    Ok(())
}

/// `payhook inbox stats`: what the dashboard's overview shows.
async fn stats(admin: &Admin) -> Result<(), Failure> {
    let stats = admin.stats().await.map_err(failure)?;
    say!("backend: {}", admin.backend());
    for (state, count) in stats.counts() {
        say!("{state}: {count}");
    }
    say!("delivered: {}", stats.delivered());
    say!(
        "recovered: {} (stored by the reconciler, no delivery of them arrived)",
        stats.recovered()
    );
    say!(
        "oldest pending: {}",
        stats
            .oldest_pending_at
            .map_or_else(|| "none".to_owned(), |at| format!("received {} ago", age(at)))
    );
    match admin.activity(Duration::from_secs(300), 12).await {
        Ok(slots) => {
            let (received, duplicates, handled, failed) =
                slots.iter().fold((0, 0, 0, 0), |(r, d, h, f), slot| {
                    (
                        r + slot.received,
                        d + slot.duplicates,
                        h + slot.handled,
                        f + slot.failed,
                    )
                });
            say!(
                "last hour: {} acknowledged ({received} first deliveries, {duplicates} duplicates), \
                 {handled} handled, {failed} failed attempt(s)",
                received + duplicates
            );
        }
        Err(_) => {
            say!("last hour: not recorded by this inbox's schema (the app adds it when it next starts)")
        }
    }
    Ok(())
}

fn show_body(event: &StoredEvent) {
    // The body is laid out from its JSON tokens with every string escaped,
    // indented under this line: a CR/LF between tokens cannot start a line
    // of its own, and no character reaches the terminal raw.
    say!("body:");
    let shown = payhook_core::untrusted::lay_out_json(event.body.as_deref().unwrap_or(""), "  ");
    say!("{}", shown.text);
    if shown.omitted_bytes > 0 {
        say!(
            "body cut: {} more bytes not shown (the whole body is in the database)",
            shown.omitted_bytes
        );
    }
}

/// Error texts come from handlers and may quote the delivery: one line,
/// escaped and capped by the core's rule for request-derived text.
fn one_line(text: &str) -> String {
    Untrusted::message(text).to_string()
}

/// When a running event's lease runs out: after that, a worker takes it up
/// again (or makes it dead, if that was its last attempt).
fn lease(until_ms: i64) -> String {
    let left = until_ms / 1000 - now_secs();
    if left > 0 {
        format!("expires in {}", span(left))
    } else {
        format!("expired {} ago; taken up again at the next claim", span(-left))
    }
}

/// How long ago a Unix-milliseconds time was, rounded to a readable unit.
fn age(at_ms: i64) -> String {
    span(now_secs().saturating_sub(at_ms / 1000).max(0))
}

/// A number of seconds, rounded to a readable unit.
fn span(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn parse_state(value: &str) -> Result<State, String> {
    value.parse()
}

fn parse_source(value: &str) -> Result<Source, String> {
    value.parse()
}

/// `90s`, `30m`, `2h`, `7d`: the inbox's one form of an age.
pub(crate) fn parse_age(value: &str) -> Result<Duration, String> {
    payhook_inbox::admin::parse_age(value)
        .ok_or_else(|| format!("{value:?} is not an age like 90s, 30m, 2h or 7d"))
}

/// TIME, in the one form every payhook tool takes (the module docs list it),
/// as Unix seconds.
fn parse_time(value: &str) -> Result<i64, String> {
    payhook_core::time::parse_since(value, now_secs().saturating_mul(1000))
        .map(|ms| ms.div_euclid(1000))
        .map_err(|err| match err {
            SinceError::NoSuchDay { year, month, days } => {
                format!("{value:?} is not a date: {year}-{month:02} has {days} days")
            }
            SinceError::NotATime => format!(
                "{value:?} is not a time: use an age like 2h, Unix seconds, 2026-11-23, \
                 2026-11-23 04:00 or 2026-11-23T04:00:00Z"
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_in_every_form() {
        assert_eq!(parse_time("1732264800"), Ok(1_732_264_800));
        assert_eq!(parse_time("2024-11-22T08:40:00Z"), Ok(1_732_264_800));
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_time("2000-03-01T00:00:00.5Z"), Ok(951_868_800));
        assert_eq!(parse_time("2024-02-29T00:00:00Z"), Ok(1_709_164_800));
        assert_eq!(parse_time("2000-02-29T00:00:00Z"), Ok(951_782_400));
        assert_eq!(parse_time("2024-11-22"), Ok(1_732_233_600));
        // The dashboard's forms too: one rule for every tool.
        assert_eq!(parse_time("2024-02-29 12:34"), Ok(1_709_210_040));
        assert_eq!(parse_time("2024-02-29 12:34:56"), Ok(1_709_210_096));
        assert_eq!(
            parse_time("2026-02-31"),
            Err(r#""2026-02-31" is not a date: 2026-02 has 28 days"#.to_owned())
        );
        assert!(parse_time("2026-04-31T10:00:00Z")
            .unwrap_err()
            .contains("has 30 days"));
        assert_eq!(parse_time("2024-02-29T00:00:00Z"), Ok(1_709_164_800));
        assert_eq!(parse_time("2000-02-29T00:00:00Z"), Ok(951_782_400));
        let two_hours_ago = parse_time("2h").unwrap();
        assert!((now_secs() - 7200 - two_hours_ago).abs() <= 1);
        for bad in [
            "",
            "yesterday",
            "2024-13-01T00:00:00Z",
            "2026-02-31T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-02-31",
            "2026-2-3",
            "2026-13-01",
            "2026-02-31T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2024-11-22T08:40:00",
            "5w",
            "99999999999999999999d",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ages_parse() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert!(parse_age("h").is_err());
        assert!(parse_age("-1h").is_err());
        assert!(parse_age("5é").is_err());
    }
}
