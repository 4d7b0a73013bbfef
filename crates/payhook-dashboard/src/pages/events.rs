//! The events list: newest first, filtered by state, type, age and id, one
//! keyset page at a time.

use std::fmt::Write as _;
use std::time::Duration;

use http::{Response, StatusCode};
use payhook_core::time::{format_utc, now_ms};
use payhook_inbox::admin::{Cursor, PageQuery, Source, State};
use payhook_inbox::Backend;

use super::{problem, unavailable, Ctx};
use crate::forms::{page_query, params};
use crate::html::{escape, message, source_badge, span, state_badge, value, Nav};

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
    let source_selected = |source: Option<Source>| {
        if query.filter.source == source {
            " selected"
        } else {
            ""
        }
    };
    let _ = write!(
        out,
        "</select></label><label>Source<select name=\"source\"><option value=\"\"{}>any</option>",
        source_selected(None)
    );
    for &source in Source::ALL {
        let _ = write!(out, "<option{}>{source}</option>", source_selected(Some(source)));
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
                 <td>{}{}</td><td>{}</td><td class=\"error\">{}</td></tr>",
                escape(&format_utc(event.received_at)),
                escape(&span(now - event.received_at)),
                ctx.event_link(&event.event_id),
                value(&event.event_type),
                state_badge(event.state),
                source_badge(event),
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
    if let Some(source) = query.filter.source {
        link.append_pair("source", source.as_str());
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
