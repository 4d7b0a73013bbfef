//! One event: its facts, its retry button when dead, every attempt, the other
//! events of its payment intent, and its body.

use std::fmt::Write as _;

use http::{header, HeaderValue, Response, StatusCode};
use payhook_core::time::{format_utc, now_ms};
use payhook_core::untrusted::lay_out_json;
use payhook_inbox::admin::{Source, State};
use payhook_inbox::{Backend, InboxError};

use super::{problem, unavailable, Ctx};
use crate::forms::{param, params, path_segment, Quoted};
use crate::html::{escape, message, outcome_badge, query_value, source_badge, span, state_badge, value, Nav};

/// `/events/ID` (the event id as one path segment, percent-encoded as a
/// path carries it): `303 See Other` to the event's page, `/event?id=ID`
/// under the same mount. The id is decoded from the path and encoded again
/// as a query value ([`query_value`]), so none of its characters (`/`, `?`,
/// `#`, `%`, a space, a line break) can end the query or reach another path;
/// the page behind the link shows it by the one rule ([`value`]). An id over
/// [`MAX_ID_BYTES`](payhook_inbox::MAX_ID_BYTES) gets the event page's `404`
/// at once, so the `Location` stays short; a segment with a raw `/` in it,
/// or that is not UTF-8 once decoded, is no page (`404`).
pub(crate) fn event_redirect<DB: Backend>(ctx: &Ctx<'_, DB>, segment: &str) -> Response<String> {
    let Some(id) = path_segment(segment).filter(|id| !id.is_empty() && !segment.contains('/')) else {
        return problem(ctx.base, StatusCode::NOT_FOUND, "There is no such page.");
    };
    if id.len() > payhook_inbox::MAX_ID_BYTES {
        return problem(ctx.base, StatusCode::NOT_FOUND, "There is no event with this id.");
    }
    let target = format!("{}/event?id={}", location_base(ctx.base), query_value(&id));
    let Ok(location) = HeaderValue::from_str(&target) else {
        // Not reached with the adapters: the base is the request's own
        // path (valid in a header) and the rest is ASCII.
        return problem(ctx.base, StatusCode::NOT_FOUND, "There is no such page.");
    };
    let content = format!(
        "<h1>See the event</h1><p>It is at <a href=\"{}\">{}</a>.</p>",
        escape(&target),
        value(&id)
    );
    let mut response = ctx.page("See the event", Nav::Events, None, &content);
    *response.status_mut() = StatusCode::SEE_OTHER;
    response.headers_mut().insert(header::LOCATION, location);
    response
}

/// The mount path as the start of a `Location`: an absolute path with one
/// leading `/`, never `//host` or `/\host`, which a browser would read as
/// another site.
fn location_base(base: &str) -> String {
    let rest = base.trim_start_matches(['/', '\\']);
    if rest.is_empty() {
        String::new()
    } else {
        format!("/{rest}")
    }
}

/// One event: its facts, actions, attempts, the other events of its payment
/// intent, and its body.
pub(crate) async fn event<DB: Backend>(ctx: &Ctx<'_, DB>, query: &str) -> Response<String> {
    let params = match params(query) {
        Ok(params) => params,
        Err(reason) => return problem(ctx.base, StatusCode::BAD_REQUEST, &reason),
    };
    let Some(id) = param(&params, "id") else {
        return problem(
            ctx.base,
            StatusCode::BAD_REQUEST,
            "Which event? The link needs ?id=.",
        );
    };
    if id.len() > payhook_inbox::MAX_ID_BYTES {
        return problem(ctx.base, StatusCode::NOT_FOUND, "There is no event with this id.");
    }
    let event = match ctx.admin.show(id).await {
        Ok(event) => event,
        Err(InboxError::NotFound(_)) => {
            return problem(
                ctx.base,
                StatusCode::NOT_FOUND,
                &format!("There is no event with the id {:?}.", Quoted(id)),
            )
        }
        Err(err) => return unavailable(ctx.base, &err),
    };
    let attempts = match ctx.admin.attempts(id).await {
        Ok(attempts) => attempts,
        Err(err) => return unavailable(ctx.base, &err),
    };
    // Absent on an inbox whose schema predates the record, until the app
    // next starts: the page is shown without it.
    let differing = ctx.admin.differing_copies(id).await.ok().flatten();
    let siblings = match &event.intent_id {
        Some(intent) => match ctx.admin.intent_events(intent, 100).await {
            Ok(events) => events,
            Err(err) => return unavailable(ctx.base, &err),
        },
        None => Vec::new(),
    };
    let now = now_ms();
    let base = escape(ctx.base);
    let mut out = String::with_capacity(
        4096 + event
            .body
            .as_ref()
            .map_or(0, String::len)
            .min(payhook_core::untrusted::MAX_LAID_OUT_BYTES)
            * 2,
    );
    let _ = write!(
        out,
        "<h1 id=\"event-id\">{}</h1><table class=\"facts\">",
        value(&event.event_id)
    );
    let mut fact = |name: &str, html: String| {
        let _ = write!(out, "<tr><th>{name}</th><td>{html}</td></tr>");
    };
    fact(
        "Type",
        format!(
            "<span class=\"mono\" id=\"event-type\">{}</span>",
            value(&event.event_type)
        ),
    );
    fact(
        "State",
        format!("<span id=\"event-state\">{}</span>", state_badge(event.state)),
    );
    fact("Attempts", event.attempts.to_string());
    fact(
        "Source",
        match (event.source, event.delivered_at) {
            (Source::Delivered, _) => "<span id=\"event-source\">delivered</span>".to_owned(),
            (Source::Reconciled, None) => format!(
                "<span id=\"event-source\">{}</span> no delivery of it arrived: the reconciler stored it from the \
                 service's events list",
                source_badge(&event).trim_start()
            ),
            (Source::Reconciled, Some(at)) => format!(
                "<span id=\"event-source\">{}</span> reconciled at {} UTC, delivered at {} UTC: the reconciler \
                 stored it from the service's events list, and its delivery arrived later (acknowledged as a \
                 duplicate)",
                source_badge(&event).trim_start(),
                escape(&format_utc(event.received_at)),
                escape(&format_utc(at))
            ),
        },
    );
    fact(
        "Received (UTC)",
        format!(
            "{} ({} ago)",
            escape(&format_utc(event.received_at)),
            escape(&span(now - event.received_at))
        ),
    );
    fact(
        "Created (UTC)",
        escape(&format_utc(event.created.saturating_mul(1000))),
    );
    if event.state == State::Pending {
        let due = if event.due_at <= now {
            "now".to_owned()
        } else {
            format!("{} (in {})", format_utc(event.due_at), span(event.due_at - now))
        };
        fact("Due", escape(&due));
    }
    if let Some(until) = event.lease_until.filter(|_| event.state == State::Running) {
        let lease = if until > now {
            format!("held until {} (in {})", format_utc(until), span(until - now))
        } else {
            format!(
                "ran out at {} ({} ago): the event is taken up again",
                format_utc(until),
                span(now - until)
            )
        };
        fact("Lease", escape(&lease));
    }
    if let Some(at) = event.last_attempt_at {
        fact("Last attempt (UTC)", escape(&format_utc(at)));
    }
    if let Some(at) = event.done_at {
        fact("Done (UTC)", escape(&format_utc(at)));
    }
    if let Some(error) = &event.last_error {
        fact(
            "Last error",
            format!(
                "<span class=\"error\" id=\"last-error\">{}</span>",
                message(error)
            ),
        );
    }
    if let Some(intent) = &event.intent_id {
        fact(
            "Payment intent",
            format!("<span class=\"mono\">{}</span>", value(intent)),
        );
    }
    out.push_str("</table>");
    if event.state.can_be_made_due() {
        let _ = write!(
            out,
            "<h2>Actions</h2><form method=\"post\" action=\"{base}/retry\">{}\
             <input type=\"hidden\" name=\"id\" value=\"{}\">\
             <button type=\"submit\" id=\"retry\">Retry this event…</button></form>",
            ctx.csrf_field(),
            escape(&event.event_id)
        );
    }
    if let Some(differing) = &differing {
        let body = lay_out_json(&differing.last_body, "");
        let _ = write!(
            out,
            "<h2>Differing copies</h2><p class=\"notice\" id=\"differing\">{} later cop{} of this id (a \
             delivery, or the service's events list) carried another type or data (first at {} UTC, last at \
             {} UTC). The first body was kept: the one below, which the handler got. The last differing body:</p>\
             <pre class=\"body\" id=\"differing-body\">{}</pre>",
            differing.copies,
            if differing.copies == 1 { "y" } else { "ies" },
            escape(&format_utc(differing.first_at)),
            escape(&format_utc(differing.last_at)),
            escape(&body.text)
        );
    }
    out.push_str("<h2>Attempts</h2>");
    // The history says where the event came from, so that attempts read on
    // their own are not taken for a delivery's.
    match (event.source, event.delivered_at) {
        (Source::Delivered, _) => out.push_str(
            "<p class=\"muted\" id=\"attempts-source\">Delivered: a signed delivery stored this event.</p>",
        ),
        (Source::Reconciled, None) => out.push_str(
            "<p class=\"notice\" id=\"attempts-source\">Reconciled: no delivery arrived. The reconciler \
             stored this event from the service's events list; its attempts handle that copy.</p>",
        ),
        (Source::Reconciled, Some(at)) => {
            let _ = write!(
                out,
                "<p class=\"notice\" id=\"attempts-source\">Reconciled at {} UTC, delivered at {} UTC: the \
                 reconciler stored this event from the service's events list before its delivery arrived; its \
                 attempts handle the reconciler's copy.</p>",
                escape(&format_utc(event.received_at)),
                escape(&format_utc(at))
            );
        }
    }
    if attempts.is_empty() {
        out.push_str("<p class=\"muted\">No attempt has ended yet.</p>");
    } else {
        out.push_str(
            "<table id=\"attempts\"><thead><tr><th>#</th><th>Started (UTC)</th><th>Duration</th>\
             <th>Outcome</th><th>Error</th></tr></thead><tbody>",
        );
        for attempt in &attempts {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{} ms</td><td>{}</td><td class=\"error\">{}</td></tr>",
                attempt.attempt,
                escape(&format_utc(attempt.started_at)),
                attempt.duration_ms,
                outcome_badge(&attempt.outcome),
                attempt.error.as_deref().map(message).unwrap_or_default()
            );
        }
        out.push_str("</tbody></table>");
    }
    if siblings.len() > 1 {
        out.push_str(
            "<h2>Events of the same payment intent</h2><table id=\"intent-events\"><thead><tr>\
             <th>Created (UTC)</th><th>Id</th><th>Type</th><th>State</th></tr></thead><tbody>",
        );
        for other in &siblings {
            let id = if other.event_id == event.event_id {
                format!(
                    "{} <span class=\"muted\">(this one)</span>",
                    value(&other.event_id)
                )
            } else {
                ctx.event_link(&other.event_id)
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"id\">{id}</td><td class=\"mono\">{}</td><td>{}</td></tr>",
                escape(&format_utc(other.created.saturating_mul(1000))),
                value(&other.event_type),
                state_badge(other.state)
            );
        }
        out.push_str("</tbody></table>");
    }
    // Laid out by the core's rule for request values, indentation and size
    // bounded: a body nested half a million levels deep is no larger a page.
    let body = lay_out_json(event.body.as_deref().unwrap_or(""), "");
    let _ = write!(
        out,
        "<h2>Body</h2><pre class=\"body\" id=\"event-body\">{}</pre>",
        escape(&body.text)
    );
    if body.omitted_bytes > 0 {
        let _ = write!(
            out,
            "<p class=\"muted\" id=\"body-cut\">The body goes on for {} more bytes, not shown \
             (the database holds all of it).</p>",
            body.omitted_bytes
        );
    }
    ctx.page(&event.event_id, Nav::None, None, &out)
}
