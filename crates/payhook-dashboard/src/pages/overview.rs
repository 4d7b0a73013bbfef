//! The overview: counts by state, delivered and recovered events, the
//! oldest pending event, the last hour as a chart, the backend, the refused
//! events, and the bulk actions' forms.

use std::fmt::Write as _;
use std::time::Duration;

use http::Response;
use payhook_core::time::{format_utc, now_ms};
use payhook_inbox::Backend;

use super::{unavailable, Ctx};
use crate::html::{escape, message, span, value, Nav};

/// The most refused events the overview lists (the latest).
const REFUSED_SHOWN: u32 = 20;

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
    // Absent on an inbox whose schema predates the record, until the app
    // next starts: the overview is shown without it.
    let refused = ctx.admin.refused(REFUSED_SHOWN).await.unwrap_or_default();
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
    // Where the events came from: a delivery (a reconciled one whose
    // delivery arrived later included), or the reconciler alone.
    let _ = write!(
        out,
        "<div class=\"card\" id=\"count-delivered\" \
         title=\"Stored by a delivery, or by the reconciler and delivered later\">\
         <span class=\"n\">{}</span><span class=\"label\">delivered</span></div>\
         <a class=\"card\" href=\"{base}/events?source=reconciled\" id=\"count-recovered\" \
         title=\"Stored by the reconciler from the service's events list; no delivery of them arrived\">\
         <span class=\"n\">{}</span><span class=\"label\">recovered</span></a>",
        stats.delivered(),
        stats.recovered()
    );
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
    refused_events(&mut out, &refused);
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

/// The latest refused events: listed events the inbox could not take, with
/// their ids and reasons (the service's text: escaped and capped).
fn refused_events(out: &mut String, refused: &[payhook_inbox::admin::Refused]) {
    if refused.is_empty() {
        return;
    }
    out.push_str(
        "<h2>Refused events</h2><p class=\"notice\">Events the inbox was offered and could not take: \
         the rest of each one's page was stored.</p><table id=\"refused\"><thead><tr><th>Last (UTC)</th>\
         <th>Id</th><th>Source</th><th>Times</th><th>Bytes</th><th>Reason</th></tr></thead><tbody>",
    );
    for refused in refused {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"id\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"error\">{}</td></tr>",
            escape(&format_utc(refused.last_at)),
            refused
                .event_id
                .as_deref()
                .map_or_else(|| "<span class=\"muted\">none readable</span>".to_owned(), value),
            refused.source,
            refused.times,
            refused.bytes,
            message(&refused.reason)
        );
    }
    out.push_str("</tbody></table>");
}

/// The last hour's deliveries (first deliveries and duplicates), handled and
/// failed attempts (interrupted ones included) per interval as bars, drawn
/// here as SVG (no script, no image request).
fn chart(out: &mut String, slots: &[payhook_inbox::admin::ActivitySlot], now: i64) {
    let (width, height, top, bottom, left) = (720i64, 180i64, 12i64, 24i64, 36i64);
    let plot = height - top - bottom;
    let max = slots
        .iter()
        .map(|slot| (slot.received + slot.duplicates).max(slot.handled + slot.failed))
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
        let duplicates = scale(slot.duplicates);
        let handled = scale(slot.handled);
        let failed = scale(slot.failed);
        let base_y = top + plot;
        let _ = write!(
            out,
            "<g><title>{from}: {a} acknowledged ({r} first deliveries, {d} duplicates), {h} handled, {f} failed</title>\
             <rect class=\"received\" x=\"{x}\" y=\"{ry}\" width=\"{bar}\" height=\"{received}\"/>\
             <rect class=\"duplicate\" x=\"{x}\" y=\"{dy}\" width=\"{bar}\" height=\"{duplicates}\"/>\
             <rect class=\"handled\" x=\"{x2}\" y=\"{hy}\" width=\"{bar}\" height=\"{handled}\"/>\
             <rect class=\"failed\" x=\"{x2}\" y=\"{fy}\" width=\"{bar}\" height=\"{failed}\"/></g>",
            from = escape(&format_utc(slot.start)),
            a = slot.received + slot.duplicates,
            r = slot.received,
            d = slot.duplicates,
            h = slot.handled,
            f = slot.failed,
            ry = base_y - received,
            dy = base_y - received - duplicates,
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
    let totals = slots.iter().fold((0, 0, 0, 0), |(r, d, h, f), slot| {
        (
            r + slot.received,
            d + slot.duplicates,
            h + slot.handled,
            f + slot.failed,
        )
    });
    // Every delivery acknowledged, then its two kinds apart: a duplicate is
    // acknowledged too, but is not a new event.
    let _ = write!(
        out,
        "</svg><p class=\"legend\"><span id=\"acknowledged\">acknowledged {}</span>\
         <span id=\"first-deliveries\"><i class=\"received\"></i>first deliveries {}</span>\
         <span id=\"duplicates\"><i class=\"duplicate\"></i>duplicates {}</span>\
         <span><i class=\"handled\"></i>handled {}</span>\
         <span id=\"failed-attempts\"><i class=\"failed\"></i>failed attempts {}</span></p>",
        totals.0 + totals.1,
        totals.0,
        totals.1,
        totals.2,
        totals.3
    );
}
