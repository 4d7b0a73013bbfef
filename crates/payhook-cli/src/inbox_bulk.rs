//! `payhook inbox bulk ACTION [filters]`: retry, replay, purge or pause the
//! events a filter selects, with a count first.
//!
//! ```text
//! payhook inbox bulk retry --type payment_intent.succeeded --older-than 1h
//! payhook inbox bulk retry --type payment_intent.succeeded --older-than 1h --as-of 1764110711000 --yes
//! ```
//!
//! The filter: `--state`, `--type`, `--older-than AGE`, `--newer-than AGE`,
//! `--id-prefix PREFIX`, `--id ID` (repeated, at most 1000). Every run first
//! prints how many events the action selects, by type, and the filter with
//! its ages made times. Without `--yes` it stops there (on a terminal it
//! asks), exit code 2, nothing changed; the line it prints ends with the
//! `--as-of` time of the count. With `--yes` it acts, in short batches, and
//! reports what it did.
//!
//! `--as-of TIME_MS` runs over what was there at that count, with the ages
//! counted back from it too, so the same command with the same `--as-of`
//! finishes a run that was interrupted and touches nothing twice (each action
//! moves an event out of the states it selects; see the inbox's
//! `BulkAction`).

use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::Args;
use payhook_core::time::{format_utc, now_ms};
use payhook_core::untrusted::Untrusted;
use payhook_inbox::admin::{Admin, BulkAction, BulkCount, Selection, State};

use crate::failure::Failure;
use crate::output::{confirmed, say};

/// `payhook inbox bulk`.
#[derive(Debug, Args)]
pub struct BulkArgs {
    /// retry (dead → due now), replay (done → run again), purge (delete done
    /// and dead events; their ids are forgotten) or pause (pause the
    /// selected events' types).
    #[arg(value_parser = parse_action)]
    pub action: BulkAction,
    /// Only events in this state (one the action changes).
    #[arg(long, value_parser = parse_state)]
    pub state: Option<State>,
    /// Only events of this type.
    #[arg(long = "type", value_name = "TYPE", value_parser = NonEmptyStringValueParser::new())]
    pub event_type: Option<String>,
    /// Only events received at least this long ago (`90s`, `30m`, `2h`, `7d`).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub older_than: Option<Duration>,
    /// Only events received at most this long ago.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub newer_than: Option<Duration>,
    /// Only events whose id starts with this.
    #[arg(long, value_name = "PREFIX", value_parser = NonEmptyStringValueParser::new())]
    pub id_prefix: Option<String>,
    /// Only this event (repeat for several, at most 1000).
    #[arg(long = "id", value_name = "ID", value_parser = NonEmptyStringValueParser::new())]
    pub ids: Vec<String>,
    /// The count's time (Unix milliseconds, printed by the count): act on
    /// what was there then, ages counted back from it; to finish an
    /// interrupted run.
    #[arg(long, value_name = "TIME_MS")]
    pub as_of: Option<i64>,
    /// Act without asking.
    #[arg(long)]
    pub yes: bool,
}

/// Runs `payhook inbox bulk`.
pub async fn run(admin: &Admin, args: &BulkArgs) -> Result<(), Failure> {
    let now = now_ms();
    let as_of = args.as_of.unwrap_or(now);
    if as_of > now {
        return Err(Failure::usage(format_args!(
            "--as-of {as_of} is in the future (now is {now})"
        )));
    }
    let back = |age: Duration| as_of.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
    let selection = Selection {
        state: args.state,
        event_type: args.event_type.clone(),
        received_before: args.older_than.map(back),
        received_after: args.newer_than.map(back),
        id_prefix: args.id_prefix.clone(),
        ids: args.ids.clone(),
    };
    let action = args.action;
    let count = admin
        .bulk_count(action, &selection, Some(as_of))
        .await
        .map_err(Failure::usage)?;
    let as_of = count.as_of;
    say!(
        "{action}: {} event(s) selected: {}",
        count.events,
        describe(action, &selection, as_of)
    );
    show_types(&count);
    if count.events == 0 {
        say!("nothing to {action}");
        return Ok(());
    }
    if !args.yes {
        say!("nothing changed yet; to {action} them: the same command with --as-of {as_of} --yes");
        if !confirmed(&format!("{action} them?")).map_err(Failure::usage)? {
            return Err(Failure::usage(format_args!(
                "nothing done: run again with --as-of {as_of} --yes to {action} them"
            )));
        }
    }
    let report = admin.bulk_run(action, &selection, as_of).await.map_err(|err| {
        Failure::usage(format_args!(
            "{err}; the batches before it are done: run again with --as-of {as_of} --yes to finish"
        ))
    })?;
    let done = match action {
        BulkAction::Retry => format!("{} event(s) due now", report.events),
        BulkAction::Replay => format!("{} event(s) due again", report.events),
        BulkAction::Purge => format!("{} event(s) purged", report.events),
        _ => {
            let types: Vec<String> = report
                .paused_types
                .iter()
                .map(|event_type| Untrusted::value(event_type).to_string())
                .collect();
            format!("{} type(s) paused: {}", types.len(), types.join(", "))
        }
    };
    say!(
        "{done}, in {} batch(es), the longest {} ms",
        report.batches,
        report.longest_batch.as_millis()
    );
    Ok(())
}

/// The filter as run, ages made times.
fn describe(action: BulkAction, selection: &Selection, as_of: i64) -> String {
    let mut parts = Vec::new();
    let states: Vec<&str> = match selection.state {
        Some(state) => vec![state.as_str()],
        None => action.states().iter().map(|state| state.as_str()).collect(),
    };
    parts.push(format!("state {}", states.join(" or ")));
    if let Some(event_type) = &selection.event_type {
        parts.push(format!("type {}", Untrusted::value(event_type)));
    }
    if let Some(before) = selection.received_before {
        parts.push(format!("received before {} UTC", format_utc(before)));
    }
    if let Some(after) = selection.received_after {
        parts.push(format!("received after {} UTC", format_utc(after)));
    }
    if let Some(prefix) = &selection.id_prefix {
        parts.push(format!("id starting {}", Untrusted::value(prefix)));
    }
    if !selection.ids.is_empty() {
        parts.push(format!("{} listed id(s)", selection.ids.len()));
    }
    parts.push(format!("present at {} UTC (--as-of {as_of})", format_utc(as_of)));
    parts.join(", ")
}

fn show_types(count: &BulkCount) {
    for (event_type, events) in &count.types {
        say!("  {}\t{events}", Untrusted::value(event_type));
    }
}

fn parse_action(value: &str) -> Result<BulkAction, String> {
    value.parse()
}

fn parse_state(value: &str) -> Result<State, String> {
    value.parse()
}

/// `90s`, `30m`, `2h`, `7d`: the inbox's one form of an age.
fn parse_age(value: &str) -> Result<Duration, String> {
    payhook_inbox::admin::parse_age(value)
        .ok_or_else(|| format!("{value:?} is not an age like 90s, 30m, 2h or 7d"))
}
