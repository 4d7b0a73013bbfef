//! The paused event types: each with its waiting events and a resume
//! button, and the form that pauses a type.

use std::fmt::Write as _;

use http::Response;
use payhook_core::time::now_ms;
use payhook_inbox::Backend;

use super::{unavailable, Ctx};
use crate::html::{escape, query_value, span, value, Nav};

/// The paused types page.
pub(crate) async fn paused<DB: Backend>(ctx: &Ctx<'_, DB>) -> Response<String> {
    let paused = match ctx.admin.paused().await {
        Ok(paused) => paused,
        Err(err) => return unavailable(ctx.base, &err),
    };
    let now = now_ms();
    let base = escape(ctx.base);
    let csrf = ctx.csrf_field();
    let mut out = String::with_capacity(2048 + paused.len() * 400);
    out.push_str(
        "<h1>Paused event types</h1><p>A paused type's deliveries are verified, stored and acknowledged, \
         but no worker handles them until it is resumed; then they run oldest first. A waiting event \
         of a paused type also holds back the later events of its payment intent.</p>",
    );
    if paused.is_empty() {
        out.push_str("<p id=\"paused-none\">No event type is paused.</p>");
    } else {
        out.push_str(
            "<table id=\"paused\"><thead><tr><th>Type</th><th>Paused</th><th>Waiting</th><th></th></tr></thead><tbody>",
        );
        for paused in &paused {
            let _ = write!(
                out,
                "<tr><td><a href=\"{base}/events?state=pending&amp;type={link}\">{shown}</a></td>\
                 <td>{ago} ago</td><td>{waiting}</td><td><form method=\"post\" action=\"{base}/resume\">{csrf}\
                 <input type=\"hidden\" name=\"type\" value=\"{field}\">\
                 <button type=\"submit\" class=\"resume\">Resume…</button></form></td></tr>",
                link = escape(&query_value(&paused.event_type)),
                shown = value(&paused.event_type),
                ago = span(now - paused.paused_at),
                waiting = paused.waiting,
                field = escape(&paused.event_type),
            );
        }
        out.push_str("</tbody></table>");
    }
    let _ = write!(
        out,
        "<h2>Pause a type</h2><form class=\"actions\" method=\"post\" action=\"{base}/pause\">{csrf}\
         <label>Event type <input name=\"type\" placeholder=\"payment_intent.succeeded\" required></label> \
         <button type=\"submit\" class=\"danger\">Pause…</button></form>\
         <p><a href=\"{base}/bulk\">Bulk actions by filter</a></p>"
    );
    ctx.page("Paused types", Nav::None, None, &out)
}
