//! Bulk actions by filter: the filter form (`GET /bulk`), then a
//! confirmation page with the count and the filter as it will run (`POST
//! /bulk`), then the run and its report (`POST /bulk` with `confirm=yes`).
//! The confirmation page carries the filter with its ages made times, the
//! count's time and its number, so the run acts on what was counted — the
//! events whose last change of state came before the count, at most as many
//! as it showed — and says how many no longer qualified; sending it again
//! after an interruption finishes the run without touching anything twice.
//! The caller has checked a `POST`'s origin and form token before.

use std::fmt::Write as _;

use http::{Response, StatusCode};
use payhook_core::time::{format_utc, now_ms};
use payhook_inbox::admin::{BulkAction, BulkCount, Selection, State, BULK_COUNT_LIMIT};
use payhook_inbox::{Backend, InboxError};

use crate::forms::{bulk_form, params, Form};
use crate::html::{escape, value, Nav};
use crate::pages::{problem, unavailable, Ctx};

/// The states `action` acts on, in words: `done and dead`.
fn states_of(action: BulkAction) -> String {
    let names: Vec<&str> = action.states().iter().map(|state| state.as_str()).collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "no".to_owned(),
    }
}

/// The filter form, its fields filled from the query string (so that a page
/// can link to a prepared filter).
pub(crate) fn form_page<DB: Backend>(ctx: &Ctx<'_, DB>, query: &str) -> Response<String> {
    let params = match params(query) {
        Ok(params) => params,
        Err(reason) => return problem(ctx.base, StatusCode::BAD_REQUEST, &reason),
    };
    let given = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key == name)
            .map_or(String::new(), |(_, value)| escape(value))
    };
    let base = escape(ctx.base);
    let mut out = String::with_capacity(4096);
    let _ = write!(
        out,
        "<h1>Bulk actions</h1><p>Choose the action and the events; the next page says how many \
         events it will touch before anything changes.</p>\
         <form class=\"filters\" method=\"post\" action=\"{base}/bulk\">{csrf}\
         <label>Action<select name=\"action\" id=\"bulk-action\">",
        csrf = ctx.csrf_field()
    );
    for action in BulkAction::ALL {
        let selected = if given("action") == action.as_str() {
            " selected"
        } else {
            ""
        };
        let _ = write!(out, "<option{selected}>{action}</option>");
    }
    out.push_str(
        "</select></label><label>State<select name=\"state\"><option value=\"\">the action's</option>",
    );
    for state in State::ALL {
        let selected = if given("state") == state.as_str() {
            " selected"
        } else {
            ""
        };
        let _ = write!(out, "<option{selected}>{state}</option>");
    }
    let _ = write!(
        out,
        "</select></label>\
         <label>Type <input name=\"type\" value=\"{}\" placeholder=\"payment_intent.succeeded\"></label>\
         <label>Older than <input name=\"older\" value=\"{}\" placeholder=\"1h\"></label>\
         <label>Newer than <input name=\"newer\" value=\"{}\" placeholder=\"7d\"></label>\
         <label>Id starts with <input name=\"id_prefix\" value=\"{}\" placeholder=\"evt_1A\"></label>\
         <label>Ids <textarea name=\"ids\" rows=\"3\" placeholder=\"evt_…, one per line\">{}</textarea></label>\
         <button type=\"submit\" id=\"bulk-count\">Count…</button></form>\
         <p>Retry acts on {} events, replay on {} ones, purge deletes {} ones \
         (their ids are forgotten: a redelivery runs again), pause pauses the selected events' types.</p>",
        given("type"),
        given("older"),
        given("newer"),
        given("id_prefix"),
        given("ids"),
        states_of(BulkAction::Retry),
        states_of(BulkAction::Replay),
        states_of(BulkAction::Purge),
    );
    ctx.page("Bulk actions", Nav::None, None, &out)
}

/// `POST /bulk`: the count and the confirmation, or (confirmed) the run.
pub(crate) async fn action<DB: Backend>(ctx: &Ctx<'_, DB>, form: &Form) -> Response<String> {
    let now = now_ms();
    let (action, selection, as_of) = match bulk_form(form, now) {
        Ok(parsed) => parsed,
        Err(reason) => return problem(ctx.base, StatusCode::BAD_REQUEST, &reason),
    };
    // Ages were made times back from `now`: the count is taken at it too.
    let count = match ctx
        .admin
        .bulk_count(action, &selection, Some(as_of.unwrap_or(now)))
        .await
    {
        Ok(count) => count,
        Err(err) => return failed(ctx, &err),
    };
    let base = escape(ctx.base);
    let filter = describe(action, &selection, count.as_of);
    if form.get("confirm") != Some("yes") {
        let mut out = String::with_capacity(4096);
        let _ = write!(
            out,
            "<h1>Confirm</h1><p class=\"notice\" id=\"question\">{action} {more}{n} event{s}? \
             Selected: {filter}.</p>",
            action = capitalised(action),
            more = if count.more { "more than " } else { "" },
            n = count.events,
            s = if count.events == 1 && !count.more { "" } else { "s" },
        );
        if count.more {
            let _ = write!(
                out,
                "<p id=\"bulk-more\">The count stops at {limit} events, so it takes the same time \
                 however long the history: the run acts on every event selected at the count's time. \
                 The types below are those of the first {limit}.</p>",
                limit = BULK_COUNT_LIMIT
            );
        }
        if !count.types.is_empty() {
            out.push_str(
                "<table id=\"bulk-types\"><thead><tr><th>Type</th><th>Events</th></tr></thead><tbody>",
            );
            for (event_type, events) in &count.types {
                let _ = write!(out, "<tr><td>{}</td><td>{events}</td></tr>", value(event_type));
            }
            out.push_str("</tbody></table>");
        }
        if count.events == 0 {
            let _ = write!(
                out,
                "<p>Nothing to do. <a href=\"{base}/bulk\">Change the filter</a></p>"
            );
            return ctx.page("Confirm", Nav::None, None, &out);
        }
        let _ = write!(
            out,
            "<form method=\"post\" action=\"{base}/bulk\">{csrf}{hidden}\
             <input type=\"hidden\" name=\"confirm\" value=\"yes\">\
             <button type=\"submit\" id=\"confirm\" class=\"danger\">Yes, {action} them</button> \
             <a href=\"{base}/bulk\">Cancel</a></form>",
            csrf = ctx.csrf_field(),
            hidden = hidden_fields(action, &selection, &count),
        );
        return ctx.page("Confirm", Nav::None, None, &out);
    }
    // The number the confirmation page showed; counted again at its time,
    // the events that changed since are already left out.
    let counted = match form.get("counted").map(str::parse::<u64>) {
        None => count.events,
        Some(Ok(counted)) => counted,
        Some(Err(_)) => {
            return problem(
                ctx.base,
                StatusCode::BAD_REQUEST,
                "The counted field is not a number of events.",
            )
        }
    };
    let gone_before = counted.saturating_sub(count.events);
    let run = BulkCount {
        events: counted,
        ..count.clone()
    };
    let report = match ctx.admin.bulk_run(action, &selection, &run).await {
        Ok(report) => report,
        Err(err) => return failed(ctx, &err),
    };
    // A pause reports what changed among the types it was given as it ran;
    // the events that had changed before are added here.
    let no_longer = if action == BulkAction::Pause {
        report.no_longer_qualified + gone_before
    } else {
        report.no_longer_qualified
    };
    let done = match action {
        BulkAction::Retry => format!("{} dead event(s) made due now", report.events),
        BulkAction::Replay => format!("{} done event(s) made due again", report.events),
        BulkAction::Purge => format!("{} event(s) purged", report.events),
        _ => {
            let types: Vec<String> = report.paused_types.iter().map(|t| value(t)).collect();
            format!("{} type(s) paused: {}", types.len(), types.join(", "))
        }
    };
    let content = format!(
        "<h1>Done</h1><p class=\"notice\" id=\"outcome\">{done}, in {batches} batch(es), the longest {ms} ms. \
         Selected: {filter}.</p><p id=\"bulk-tally\">Selected {selected}, acted on {acted}, \
         {no_longer} no longer qualified{why}.</p>\
         <p>If it was interrupted, sending the confirmation again finishes it: \
         it changes only what is left.</p><p><a href=\"{base}/bulk\">Another bulk action</a> · \
         <a href=\"{base}/\">Overview</a></p>",
        batches = report.batches,
        ms = report.longest_batch.as_millis(),
        selected = report.selected,
        acted = report.events,
        why = if no_longer > 0 {
            " (changed since the count: died, finished, retried, replayed or handled meanwhile)"
        } else {
            ""
        },
    );
    ctx.page("Done", Nav::None, None, &content)
}

/// A refused selection is a `400` saying why; a database error a `503`.
fn failed<DB: Backend>(ctx: &Ctx<'_, DB>, err: &InboxError) -> Response<String> {
    match err {
        InboxError::InvalidSetting(reason) => {
            problem(ctx.base, StatusCode::BAD_REQUEST, &format!("{reason}."))
        }
        other => unavailable(ctx.base, other),
    }
}

fn capitalised(action: BulkAction) -> &'static str {
    match action {
        BulkAction::Retry => "Retry",
        BulkAction::Replay => "Replay",
        BulkAction::Purge => "Purge",
        _ => "Pause the types of",
    }
}

/// The filter as it runs, HTML-escaped: states, type, times, ids.
fn describe(action: BulkAction, selection: &Selection, as_of: i64) -> String {
    let mut parts = Vec::new();
    let states: Vec<&str> = match selection.state {
        Some(state) => vec![state.as_str()],
        None => action.states().iter().map(|state| state.as_str()).collect(),
    };
    parts.push(format!("state {}", states.join(" or ")));
    if let Some(event_type) = &selection.event_type {
        parts.push(format!("type {}", value(event_type)));
    }
    if let Some(before) = selection.received_before {
        parts.push(format!("received before {} UTC", escape(&format_utc(before))));
    }
    if let Some(after) = selection.received_after {
        parts.push(format!("received after {} UTC", escape(&format_utc(after))));
    }
    if let Some(prefix) = &selection.id_prefix {
        parts.push(format!("id starting {}", value(prefix)));
    }
    if !selection.ids.is_empty() {
        parts.push(format!("{} listed id(s)", selection.ids.len()));
    }
    parts.push(format!("there at {} UTC", escape(&format_utc(as_of))));
    parts.join(", ")
}

/// The selection as the confirmation form carries it: times, not ages, and
/// the count's time and number.
fn hidden_fields(action: BulkAction, selection: &Selection, count: &BulkCount) -> String {
    let field = |name: &str, text: &str| {
        format!(
            "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
            escape(text)
        )
    };
    let mut out = field("action", action.as_str());
    out.push_str(&field("as_of", &count.as_of.to_string()));
    out.push_str(&field("counted", &count.events.to_string()));
    if let Some(state) = selection.state {
        out.push_str(&field("state", state.as_str()));
    }
    if let Some(event_type) = &selection.event_type {
        out.push_str(&field("type", event_type));
    }
    if let Some(before) = selection.received_before {
        out.push_str(&field("before_ms", &before.to_string()));
    }
    if let Some(after) = selection.received_after {
        out.push_str(&field("after_ms", &after.to_string()));
    }
    if let Some(prefix) = &selection.id_prefix {
        out.push_str(&field("id_prefix", prefix));
    }
    if !selection.ids.is_empty() {
        out.push_str(&field("ids", &selection.ids.join(" ")));
    }
    out
}
