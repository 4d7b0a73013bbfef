//! The pages: overview, events, one event, the actions and the error page.

use std::fmt::Write as _;
use std::time::Duration;

use http::{Response, StatusCode};
use payhook_inbox::admin::{Admin, Cursor, PageQuery, State, MAX_PAGE};
use payhook_inbox::{Backend, InboxError};

use payhook_core::time::{format_utc, now_ms, SinceError};

use crate::html::{self, escape, message, query_value, span, value, Nav};

/// What every page needs.
pub(crate) struct Ctx<'a, DB: Backend> {
    pub(crate) admin: &'a Admin<DB>,
    pub(crate) base: &'a str,
    pub(crate) csrf: String,
    pub(crate) refresh: Option<u32>,
}

impl<DB: Backend> Ctx<'_, DB> {
    fn meta(&self) -> String {
        format!(
            "{} · namespace {}",
            self.admin.backend(),
            value(self.admin.namespace())
        )
    }

    fn page(&self, title: &str, nav: Nav, refresh: Option<u32>, content: &str) -> Response<String> {
        Response::new(html::page(self.base, title, nav, &self.meta(), refresh, content))
    }

    fn csrf_field(&self) -> String {
        format!(
            "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
            escape(&self.csrf)
        )
    }

    fn event_link(&self, event_id: &str) -> String {
        format!(
            "<a href=\"{}/event?id={}\">{}</a>",
            escape(self.base),
            escape(&query_value(event_id)),
            value(event_id)
        )
    }
}

/// An error page with `status` and a sentence saying what is wrong.
pub(crate) fn problem(base: &str, status: StatusCode, text: &str) -> Response<String> {
    let title = format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or(""));
    let content = format!(
        "<h1>{}</h1><p class=\"problem\">{}</p><p><a href=\"{}/\">Back to the overview</a></p>",
        escape(&title),
        escape(text),
        escape(base)
    );
    let mut response = Response::new(html::page(base, &title, Nav::None, "", None, &content));
    *response.status_mut() = status;
    response
}

/// The page for a database error: `503`, naming the kind of failure only.
fn unavailable(base: &str, err: &InboxError) -> Response<String> {
    let _ = err; // its text may name hosts or files: not shown
    problem(
        base,
        StatusCode::SERVICE_UNAVAILABLE,
        "The inbox's database cannot be read right now; try again shortly.",
    )
}

fn state_badge(state: &str) -> String {
    let class = match state {
        "pending" | "running" | "done" | "dead" | "failed" => state,
        _ => "other",
    };
    format!("<span class=\"state {class}\">{}</span>", value(state))
}

/// The overview: counts by state, the oldest pending event, the last hour
/// as a chart, the backend, and the bulk actions.
pub(crate) async fn overview<DB: Backend>(ctx: &Ctx<'_, DB>) -> Response<String> {
    let stats = match ctx.admin.stats().await {
        Ok(stats) => stats,
        Err(err) => return unavailable(ctx.base, &err),
    };
    let activity = match ctx.admin.activity(Duration::from_secs(300), 12).await {
        Ok(activity) => activity,
        Err(err) => return unavailable(ctx.base, &err),
    };
    let now = now_ms();
    let base = escape(ctx.base);
    let mut out = String::with_capacity(8192);
    out.push_str("<h1>Overview</h1><div class=\"cards\">");
    for (state, count) in stats.counts() {
        let _ = write!(
            out,
            "<a class=\"card {state}\" href=\"{base}/events?state={state}\" id=\"count-{state}\">\
             <span class=\"n\">{count}</span><span class=\"label\">{state}</span></a>"
        );
    }
    let oldest = stats
        .oldest_pending_at
        .map_or_else(|| "none".to_owned(), |at| span(now - at));
    let _ = write!(
        out,
        "<div class=\"card\" id=\"oldest-pending\"><span class=\"n\">{}</span>\
         <span class=\"label\">oldest pending event</span></div>\
         <div class=\"card\"><span class=\"n\">{}</span><span class=\"label\">database</span></div></div>",
        escape(&oldest),
        escape(ctx.admin.backend())
    );
    out.push_str("<h2>The last hour, in 5-minute intervals</h2>");
    chart(&mut out, &activity, now);
    let _ = write!(
        out,
        "<h2>Actions</h2><div class=\"actions\">\
         <form method=\"post\" action=\"{base}/retry-dead\">{csrf}\
         <button type=\"submit\" class=\"danger\">Retry every dead event…</button></form>\
         <form method=\"post\" action=\"{base}/replay\">{csrf}\
         <label>Replay done events received since (UTC) \
         <input name=\"since\" placeholder=\"2026-01-31 14:00 or 2h\" required></label> \
         <button type=\"submit\">Replay…</button></form></div>",
        csrf = ctx.csrf_field()
    );
    ctx.page("Overview", Nav::Overview, ctx.refresh, &out)
}

/// The last hour's deliveries (received), handled and failed attempts per
/// interval as bars, drawn here as SVG (no script, no image request).
fn chart(out: &mut String, slots: &[payhook_inbox::admin::ActivitySlot], now: i64) {
    let (width, height, top, bottom, left) = (720i64, 180i64, 12i64, 24i64, 36i64);
    let plot = height - top - bottom;
    let max = slots
        .iter()
        .map(|slot| slot.received.max(slot.handled + slot.failed))
        .max()
        .unwrap_or(0)
        .max(1);
    let count = i64::try_from(slots.len()).unwrap_or(1).max(1);
    let step = (width - left - 8) / count;
    let bar = (step - 6) / 2;
    let _ = write!(
        out,
        "<svg class=\"chart\" role=\"img\" aria-label=\"deliveries and attempts in the last hour\" \
         width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">\
         <line x1=\"{left}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\"/>\
         <text x=\"2\" y=\"{ty}\">{max}</text><text x=\"2\" y=\"{y}\">0</text>",
        y = top + plot,
        x2 = width - 4,
        ty = top + 8,
    );
    let scale = |n: i64| n.saturating_mul(plot) / max;
    for (i, slot) in slots.iter().enumerate() {
        let x = left + 4 + i64::try_from(i).unwrap_or(0) * step;
        let received = scale(slot.received);
        let handled = scale(slot.handled);
        let failed = scale(slot.failed);
        let base_y = top + plot;
        let _ = write!(
            out,
            "<g><title>{from}: {r} acknowledged, {h} handled, {f} failed</title>\
             <rect class=\"received\" x=\"{x}\" y=\"{ry}\" width=\"{bar}\" height=\"{received}\"/>\
             <rect class=\"handled\" x=\"{x2}\" y=\"{hy}\" width=\"{bar}\" height=\"{handled}\"/>\
             <rect class=\"failed\" x=\"{x2}\" y=\"{fy}\" width=\"{bar}\" height=\"{failed}\"/></g>",
            from = escape(&format_utc(slot.start)),
            r = slot.received,
            h = slot.handled,
            f = slot.failed,
            ry = base_y - received,
            x2 = x + bar,
            hy = base_y - handled,
            fy = base_y - handled - failed,
        );
        if i % 3 == 0 {
            let _ = write!(
                out,
                "<text x=\"{x}\" y=\"{}\">−{}m</text>",
                height - 6,
                (now - slot.start) / 60_000
            );
        }
    }
    let totals = slots.iter().fold((0, 0, 0), |(r, h, f), slot| {
        (r + slot.received, h + slot.handled, f + slot.failed)
    });
    let _ = write!(
        out,
        "</svg><p class=\"legend\"><span><i class=\"received\"></i>acknowledged {}</span>\
         <span><i class=\"handled\"></i>handled {}</span><span><i class=\"failed\"></i>failed attempts {}</span></p>",
        totals.0, totals.1, totals.2
    );
}

/// The query string as (name, value) pairs; a repeated name is refused.
fn params(query: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        if out.iter().any(|(seen, _)| *seen == name) {
            return Err(format!("The parameter {:?} is given twice.", Quoted(&name)));
        }
        out.push((name.into_owned(), value.into_owned()));
    }
    Ok(out)
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

/// An age, in the inbox's one form ([`payhook_inbox::admin::parse_age`]).
pub(crate) fn parse_age(text: &str) -> Result<Duration, String> {
    payhook_inbox::admin::parse_age(text)
        .ok_or_else(|| format!("{:?} is not an age like 90s, 15m, 2h or 7d.", Quoted(text)))
}

/// Request text quoted in an error sentence: escaped by the core's `Untrusted`
/// here, and HTML-escaped later with the page. (Named apart from the core's
/// type, which it wraps.)
struct Quoted<'a>(&'a str);

impl std::fmt::Debug for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", payhook_core::untrusted::Untrusted::value(self.0))
    }
}

/// The events page's query, from its query string.
fn page_query(params: &[(String, String)]) -> Result<PageQuery, String> {
    let mut query = PageQuery::default();
    if let Some(state) = param(params, "state") {
        let state: State = state.parse().map_err(|_| {
            format!(
                "The state {:?} is not pending, running, done or dead.",
                Quoted(state)
            )
        })?;
        query.filter.state = Some(state);
    }
    if let Some(event_type) = param(params, "type") {
        if event_type.len() > payhook_inbox::MAX_ID_BYTES {
            return Err("The type filter is too long.".to_owned());
        }
        query.filter.event_type = Some(event_type.to_owned());
    }
    if let Some(id) = param(params, "id") {
        if id.len() > payhook_inbox::MAX_ID_BYTES {
            return Err("The id filter is too long.".to_owned());
        }
        query.event_id = Some(id.to_owned());
    }
    if let Some(age) = param(params, "older") {
        query.filter.older_than = Some(parse_age(age)?);
    }
    if let Some(age) = param(params, "newer") {
        query.filter.newer_than = Some(parse_age(age)?);
    }
    if let Some(after) = param(params, "after") {
        query.after = Some(after.parse::<Cursor>().map_err(|reason| format!("{reason}."))?);
    }
    if let Some(limit) = param(params, "limit") {
        let limit = limit
            .parse::<u32>()
            .ok()
            .filter(|limit| (1..=MAX_PAGE).contains(limit))
            .ok_or_else(|| format!("The page size must be a whole number from 1 to {MAX_PAGE}."))?;
        query.limit = limit;
    }
    Ok(query)
}

/// The events page: newest first, filtered, one keyset page at a time.
pub(crate) async fn events<DB: Backend>(ctx: &Ctx<'_, DB>, query: &str) -> Response<String> {
    let parsed = params(query).and_then(|params| page_query(&params));
    let query = match parsed {
        Ok(query) => query,
        Err(reason) => return problem(ctx.base, StatusCode::BAD_REQUEST, &reason),
    };
    let page = match ctx.admin.page(&query).await {
        Ok(page) => page,
        Err(err) => return unavailable(ctx.base, &err),
    };
    render_events(ctx, &query, &page)
}

/// The events page's HTML for a page already read (the benchmark times the
/// query and this together).
pub(crate) fn render_events<DB: Backend>(
    ctx: &Ctx<'_, DB>,
    query: &PageQuery,
    page: &payhook_inbox::admin::Page,
) -> Response<String> {
    let now = now_ms();
    let base = escape(ctx.base);
    let mut out = String::with_capacity(2048 + page.events.len() * 400);
    out.push_str("<h1>Events</h1>");
    // The filter form: GET, so a filtered view is a link to hand on.
    let selected = |state: Option<State>| {
        if query.filter.state == state {
            " selected"
        } else {
            ""
        }
    };
    let _ = write!(
        out,
        "<form class=\"filters\" method=\"get\" action=\"{base}/events\">\
         <label>State<select name=\"state\"><option value=\"\"{}>any</option>",
        selected(None)
    );
    for &state in State::ALL {
        let _ = write!(out, "<option{}>{state}</option>", selected(Some(state)));
    }
    let text = |value: &Option<String>| escape(value.as_deref().unwrap_or(""));
    let age = |age: Option<Duration>| age.map_or_else(String::new, |age| format!("{}s", age.as_secs()));
    let _ = write!(
        out,
        "</select></label><label>Type<input name=\"type\" value=\"{}\" placeholder=\"payment_intent.succeeded\"></label>\
         <label>Event id<input name=\"id\" value=\"{}\" placeholder=\"evt_…\"></label>\
         <label>Older than<input name=\"older\" value=\"{}\" placeholder=\"1h\" size=\"6\"></label>\
         <label>Newer than<input name=\"newer\" value=\"{}\" placeholder=\"7d\" size=\"6\"></label>\
         <label>Per page<input name=\"limit\" value=\"{}\" size=\"4\"></label>\
         <button type=\"submit\">Filter</button> <a href=\"{base}/events\">clear</a></form>",
        text(&query.filter.event_type),
        text(&query.event_id),
        escape(&age(query.filter.older_than)),
        escape(&age(query.filter.newer_than)),
        query.limit,
    );
    if page.events.is_empty() {
        out.push_str("<p class=\"muted\" id=\"no-events\">No events match.</p>");
    } else {
        out.push_str(
            "<table id=\"events\"><thead><tr><th>Received (UTC)</th><th>Id</th><th>Type</th><th>State</th>\
             <th>Attempts</th><th>Last error</th></tr></thead><tbody>",
        );
        for event in &page.events {
            let _ = write!(
                out,
                "<tr><td>{} <span class=\"muted\">{} ago</span></td><td class=\"id\">{}</td><td class=\"mono\">{}</td>\
                 <td>{}</td><td>{}</td><td class=\"error\">{}</td></tr>",
                escape(&format_utc(event.received_at)),
                escape(&span(now - event.received_at)),
                ctx.event_link(&event.event_id),
                value(&event.event_type),
                state_badge(&event.state),
                event.attempts,
                event.last_error.as_deref().map(message).unwrap_or_default(),
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("<p class=\"pager\">");
    if query.after.is_some() {
        let _ = write!(
            out,
            "<a href=\"{}\">« newest</a>",
            escape(&events_href(ctx.base, query, None))
        );
    }
    if let Some(next) = page.next {
        let _ = write!(
            out,
            "<a id=\"next-page\" href=\"{}\">older »</a>",
            escape(&events_href(ctx.base, query, Some(next)))
        );
    }
    out.push_str("</p>");
    ctx.page("Events", Nav::Events, None, &out)
}

/// A link to the events page with the same filters, from `after`.
fn events_href(base: &str, query: &PageQuery, after: Option<Cursor>) -> String {
    let mut link = form_urlencoded::Serializer::new(String::new());
    if let Some(state) = query.filter.state {
        link.append_pair("state", state.as_str());
    }
    if let Some(event_type) = &query.filter.event_type {
        link.append_pair("type", event_type);
    }
    if let Some(id) = &query.event_id {
        link.append_pair("id", id);
    }
    if let Some(age) = query.filter.older_than {
        link.append_pair("older", &format!("{}s", age.as_secs()));
    }
    if let Some(age) = query.filter.newer_than {
        link.append_pair("newer", &format!("{}s", age.as_secs()));
    }
    if query.limit != PageQuery::default().limit {
        link.append_pair("limit", &query.limit.to_string());
    }
    if let Some(after) = after {
        link.append_pair("after", &after.to_string());
    }
    format!("{base}/events?{}", link.finish())
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
    let siblings = match &event.intent_id {
        Some(intent) => match ctx.admin.intent_events(intent, 100).await {
            Ok(events) => events,
            Err(err) => return unavailable(ctx.base, &err),
        },
        None => Vec::new(),
    };
    let now = now_ms();
    let base = escape(ctx.base);
    let mut out = String::with_capacity(4096 + event.body.as_ref().map_or(0, String::len) * 2);
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
        format!("<span id=\"event-state\">{}</span>", state_badge(&event.state)),
    );
    fact("Attempts", event.attempts.to_string());
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
    if event.state == State::Pending.as_str() {
        let due = if event.due_at <= now {
            "now".to_owned()
        } else {
            format!("{} (in {})", format_utc(event.due_at), span(event.due_at - now))
        };
        fact("Due", escape(&due));
    }
    if let Some(until) = event
        .lease_until
        .filter(|_| event.state == State::Running.as_str())
    {
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
    if event.state == State::Dead.as_str() || event.state == State::Pending.as_str() {
        let _ = write!(
            out,
            "<h2>Actions</h2><form method=\"post\" action=\"{base}/retry\">{}\
             <input type=\"hidden\" name=\"id\" value=\"{}\">\
             <button type=\"submit\" id=\"retry\">Retry this event…</button></form>",
            ctx.csrf_field(),
            escape(&event.event_id)
        );
    }
    out.push_str("<h2>Attempts</h2>");
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
                state_badge(&attempt.outcome),
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
                state_badge(&other.state)
            );
        }
        out.push_str("</tbody></table>");
    }
    let body = event.body.as_deref().unwrap_or("");
    let _ = write!(
        out,
        "<h2>Body</h2><pre class=\"body\" id=\"event-body\">{}</pre>",
        escape(&html::pretty_json(body))
    );
    ctx.page(&event.event_id, Nav::None, None, &out)
}

/// A parsed form body.
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    pub(crate) fn parse(body: &[u8]) -> Result<Self, String> {
        if body.len() > crate::MAX_FORM_BYTES {
            return Err("The form is too large.".to_owned());
        }
        let mut fields: Vec<(String, String)> = Vec::new();
        for (name, value) in form_urlencoded::parse(body) {
            if fields.iter().any(|(seen, _)| *seen == name) {
                return Err("A form field is given twice.".to_owned());
            }
            fields.push((name.into_owned(), value.into_owned()));
        }
        Ok(Self(fields))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        param(&self.0, name)
    }
}

/// A time to replay from, in the one form every tool takes
/// ([`payhook_core::time::parse_since`]): an age back from now (`2h`), Unix
/// seconds, or a UTC date or date and time (`2026-01-31`, `2026-01-31 14:00`);
/// never in the future.
pub(crate) fn parse_since(text: &str, now: i64) -> Result<i64, String> {
    let at = payhook_core::time::parse_since(text, now).map_err(|err| match err {
        SinceError::NoSuchDay { year, month, days } => format!(
            "{:?} is not a date: {year}-{month:02} has {days} days.",
            Quoted(text)
        ),
        SinceError::NotATime => format!(
            "{:?} is not a UTC time like 2026-01-31 14:00 or an age like 2h.",
            Quoted(text)
        ),
    })?;
    if at > now {
        return Err("That time is in the future: nothing was received since.".to_owned());
    }
    Ok(at)
}

/// An action: first a confirmation page (the same form with `confirm=yes`),
/// then the change and a page saying what it did.
pub(crate) async fn action<DB: Backend>(ctx: &Ctx<'_, DB>, path: &str, form: &Form) -> Response<String> {
    let confirmed = form.get("confirm") == Some("yes");
    let base = escape(ctx.base);
    let now = now_ms();
    let (question, hidden, run): (String, String, Action) = match path {
        "/retry" => {
            let Some(id) = form.get("id") else {
                return problem(
                    ctx.base,
                    StatusCode::BAD_REQUEST,
                    "Which event? The form needs an id.",
                );
            };
            (
                format!(
                    "Retry the event {}? It is made due now and a worker takes it up.",
                    value(id)
                ),
                format!("<input type=\"hidden\" name=\"id\" value=\"{}\">", escape(id)),
                Action::Retry(id.to_owned()),
            )
        }
        "/retry-dead" => {
            let dead = match ctx.admin.stats().await {
                Ok(stats) => stats.count(State::Dead),
                Err(err) => return unavailable(ctx.base, &err),
            };
            (
                format!("Retry every dead event ({dead} now)? Each gets one more attempt."),
                String::new(),
                Action::RetryDead,
            )
        }
        _ => {
            let Some(since) = form.get("since") else {
                return problem(
                    ctx.base,
                    StatusCode::BAD_REQUEST,
                    "Since when? The form needs a time.",
                );
            };
            let at = match parse_since(since, now) {
                Ok(at) => at,
                Err(reason) => return problem(ctx.base, StatusCode::BAD_REQUEST, &reason),
            };
            (
                format!(
                    "Replay every done event received since {} UTC? Its handler runs once more.",
                    escape(&format_utc(at))
                ),
                format!(
                    "<input type=\"hidden\" name=\"since\" value=\"{}\">",
                    escape(since)
                ),
                Action::Replay(at),
            )
        }
    };
    if !confirmed {
        let content = format!(
            "<h1>Confirm</h1><p class=\"notice\" id=\"question\">{question}</p>\
             <form method=\"post\" action=\"{base}{path}\">{csrf}{hidden}\
             <input type=\"hidden\" name=\"confirm\" value=\"yes\">\
             <button type=\"submit\" id=\"confirm\" class=\"danger\">Yes, do it</button> \
             <a href=\"{base}/\">Cancel</a></form>",
            path = escape(path),
            csrf = ctx.csrf_field(),
        );
        return ctx.page("Confirm", Nav::None, None, &content);
    }
    let (outcome, back) = match run {
        Action::Retry(id) => match ctx.admin.retry(&id).await {
            Ok(()) => (
                format!(
                    "The event {} is due now: a worker takes it up shortly.",
                    value(&id)
                ),
                format!(
                    "<a href=\"{base}/event?id={}\">Back to the event</a>",
                    escape(&query_value(&id))
                ),
            ),
            Err(InboxError::NotFound(_)) => {
                return problem(
                    ctx.base,
                    StatusCode::NOT_FOUND,
                    &format!("There is no dead or pending event with the id {:?}.", Quoted(&id)),
                )
            }
            Err(err) => return unavailable(ctx.base, &err),
        },
        Action::RetryDead => match ctx.admin.retry_dead().await {
            Ok(n) => (
                format!("{n} dead event{} made due now.", if n == 1 { "" } else { "s" }),
                format!("<a href=\"{base}/events?state=pending\">Pending events</a>"),
            ),
            Err(err) => return unavailable(ctx.base, &err),
        },
        Action::Replay(at) => match ctx.admin.replay_since(at).await {
            Ok(n) => (
                format!(
                    "{n} done event{} received since {} UTC made due again.",
                    if n == 1 { "" } else { "s" },
                    escape(&format_utc(at))
                ),
                format!("<a href=\"{base}/events?state=pending\">Pending events</a>"),
            ),
            Err(err) => return unavailable(ctx.base, &err),
        },
    };
    let content = format!(
        "<h1>Done</h1><p class=\"notice\" id=\"outcome\">{outcome}</p><p>{back} · <a href=\"{base}/\">Overview</a></p>"
    );
    ctx.page("Done", Nav::None, None, &content)
}

enum Action {
    Retry(String),
    RetryDead,
    Replay(i64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_times_parse_and_refuse() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "h", "2", "-2h", "2w", "9999999999d", "2hh", "²h"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
        let now = 1_800_000_000_000;
        assert_eq!(parse_since("2024-02-29", now), Ok(1_709_164_800_000));
        assert_eq!(parse_since("2024-02-29 12:34", now), Ok(1_709_210_040_000));
        assert_eq!(parse_since("2024-02-29T12:34:56Z", now), Ok(1_709_210_096_000));
        assert_eq!(parse_since("1h", now), Ok(now - 3_600_000));
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-01-01 24:00",
            "yesterday",
            "2099-01-01",
            "2024-1-1",
        ] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn filters_parse_and_refuse() {
        let query = page_query(&params("state=dead&type=a.b&older=1h&limit=20&after=5.7&x=ignored").unwrap())
            .unwrap();
        assert_eq!(query.filter.state, Some(State::Dead));
        assert_eq!(query.filter.event_type.as_deref(), Some("a.b"));
        assert_eq!(query.limit, 20);
        assert_eq!(
            query.after,
            Some(Cursor {
                received_at: 5,
                arrival: 7
            })
        );
        for bad in [
            "state=gone",
            "limit=0",
            "limit=501",
            "limit=1e9",
            "after=5",
            "after=a.b",
            "older=soon",
            "state=dead&state=done",
        ] {
            assert!(params(bad).and_then(|p| page_query(&p)).is_err(), "{bad}");
        }
        // Empty fields of the filter form are no filter.
        let query = page_query(&params("state=&type=&id=&older=&newer=&limit=").unwrap()).unwrap();
        assert_eq!(query.filter.state, None);
        assert_eq!(query.limit, 50);
    }
}
