//! `payhook inbox bulk ACTION [filters]`: retry, replay, purge or pause the
//! events a filter selects, with a count first.
//!
//! ```text
//! payhook inbox --namespace kyc bulk retry --type payment_intent.succeeded --older-than 1h
//! payhook inbox --namespace kyc bulk retry --type payment_intent.succeeded --older-than 1h --as-of 1764110711000 --counted 2 --yes
//! ```
//!
//! The filter: `--state`, `--type`, `--older-than AGE`, `--newer-than AGE`,
//! `--id-prefix PREFIX`, `--id ID` (repeated, at most 1000). Every run first
//! prints how many events the action selects, by type, and the filter with
//! its ages made times. Without `--yes` it stops there (on a terminal it
//! asks), exit code 2, nothing changed; it prints the command that acts on
//! what it counted: the same one with `--as-of` (the count's time),
//! `--counted` (how many it counted) and `--yes`. With `--yes` it acts, in
//! short batches, and reports what it did: how many events were selected,
//! how many it acted on, and how many no longer qualified.
//!
//! `--as-of TIME_MS` runs over what the count saw: the events whose last
//! change of state came before that time, with the ages counted back from it
//! too. An event that died, finished, was retried or replayed, or arrived
//! after the count is left alone, so the run never reaches past the count,
//! and the same command finishes a run that was interrupted and touches
//! nothing twice (see the inbox's `BulkAction`). `--counted N` (the count's
//! number) caps the run at N events and reports how many of them no longer
//! qualified.

use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::Args;
use payhook_core::time::{format_utc, now_ms};
use payhook_core::untrusted::Untrusted;
use payhook_inbox::admin::{Admin, BulkAction, BulkCount, Selection, State, BULK_COUNT_LIMIT};

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
    /// How many events the count selected (printed by the count, with
    /// --as-of): the run acts on at most that many and says how many of them
    /// no longer qualified.
    #[arg(long, value_name = "N", requires = "as_of")]
    pub counted: Option<u64>,
    /// Act without asking.
    #[arg(long)]
    pub yes: bool,
}

/// Runs `payhook inbox bulk` on `namespace`.
pub async fn run(admin: &Admin, namespace: &str, args: &BulkArgs) -> Result<(), Failure> {
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
        "{action}: {}{} event(s) selected: {}",
        if count.more { "more than " } else { "" },
        count.events,
        describe(action, &selection, as_of)
    );
    if count.more {
        say!(
            "the count stops at {BULK_COUNT_LIMIT} events; the run acts on every event selected at the count's time \
             (the types below are those of the first {BULK_COUNT_LIMIT})"
        );
    }
    show_types(&count);
    // What the count the operator saw selected; with --counted, the events
    // that changed since are left out of this count already.
    let counted = args.counted.unwrap_or(count.events);
    let gone = counted.saturating_sub(count.events);
    if gone > 0 {
        say!("{gone} of the {counted} counted no longer qualify: changed since the count");
    }
    if count.events == 0 {
        if counted == 0 {
            say!("nothing to {action}");
        } else {
            say!("nothing to {action}: selected {counted}, acted on 0, {counted} no longer qualified");
        }
        return Ok(());
    }
    if !args.yes {
        let command = confirmed_command(namespace, args, as_of, count.events);
        say!("nothing changed yet; to {action} them: {command}");
        if !confirmed(&format!("{action} them?")).map_err(Failure::usage)? {
            return Err(Failure::usage(format_args!(
                "nothing done: to {action} them: {command}"
            )));
        }
    }
    let run = BulkCount {
        events: counted,
        ..count.clone()
    };
    let report = admin.bulk_run(action, &selection, &run).await.map_err(|err| {
        Failure::usage(format_args!(
            "{err}; the batches before it are done: to finish: {}",
            confirmed_command(namespace, args, as_of, counted)
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
    // A pause reports what changed among the counted types as it ran; the
    // events that had changed before (with --counted) are added here.
    let no_longer = if action == BulkAction::Pause {
        report.no_longer_qualified + gone
    } else {
        report.no_longer_qualified
    };
    say!(
        "{done}, in {} batch(es), the longest {} ms; selected {}, acted on {}, {no_longer} no longer qualified{}",
        report.batches,
        report.longest_batch.as_millis(),
        report.selected,
        report.events,
        if no_longer > 0 {
            " (changed since the count)"
        } else {
            ""
        }
    );
    Ok(())
}

/// The command that acts on what was counted: this one, with its
/// namespace, the count's time and number, and `--yes`.
fn confirmed_command(namespace: &str, args: &BulkArgs, as_of: i64, counted: u64) -> String {
    let mut words = vec![
        "payhook inbox --namespace".to_owned(),
        shell_word(namespace),
        "bulk".to_owned(),
        args.action.as_str().to_owned(),
    ];
    let mut flag = |name: &str, value: String| {
        words.push(name.to_owned());
        words.push(value);
    };
    if let Some(state) = args.state {
        flag("--state", state.as_str().to_owned());
    }
    if let Some(event_type) = &args.event_type {
        flag("--type", shell_word(event_type));
    }
    if let Some(age) = args.older_than {
        flag("--older-than", age_text(age));
    }
    if let Some(age) = args.newer_than {
        flag("--newer-than", age_text(age));
    }
    if let Some(prefix) = &args.id_prefix {
        flag("--id-prefix", shell_word(prefix));
    }
    for id in &args.ids {
        flag("--id", shell_word(id));
    }
    flag("--as-of", as_of.to_string());
    flag("--counted", counted.to_string());
    words.push("--yes".to_owned());
    words.join(" ")
}

/// An age as `--older-than` takes it, in its largest whole unit.
fn age_text(age: Duration) -> String {
    let seconds = age.as_secs();
    match seconds {
        0 => "0s".to_owned(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// `text` as one shell word: escaped as the CLI shows any value (no control
/// character reaches the terminal), then single-quoted unless it is plain.
pub(crate) fn shell_word(text: &str) -> String {
    let shown = Untrusted::value(text).to_string();
    let plain = !shown.is_empty()
        && shown
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:/@%+=,_".contains(c));
    if plain {
        shown
    } else {
        format!("'{}'", shown.replace('\'', "'\\''"))
    }
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
