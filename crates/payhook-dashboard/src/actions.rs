//! The actions — retry one event, retry every dead event, replay done events
//! since a time, pause or resume an event type: first a confirmation page (the same form with
//! `confirm=yes`), then the change and a page saying what it did. The caller
//! has checked the request's origin and form token before.

use http::{Response, StatusCode};
use payhook_core::time::{format_utc, now_ms};
use payhook_inbox::admin::State;
use payhook_inbox::{Backend, InboxError};

use crate::forms::{parse_since, Form, Quoted};
use crate::html::{escape, query_value, value, Nav};
use crate::pages::{problem, unavailable, Ctx};

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
        "/pause" | "/resume" => {
            let Some(event_type) = form.get("type") else {
                return problem(
                    ctx.base,
                    StatusCode::BAD_REQUEST,
                    "Which event type? The form needs a type.",
                );
            };
            let hidden = format!(
                "<input type=\"hidden\" name=\"type\" value=\"{}\">",
                escape(event_type)
            );
            if path == "/pause" {
                (
                    format!(
                        "Pause the event type {}? Its deliveries are still stored and acknowledged, \
                         but no worker handles them until it is resumed.",
                        value(event_type)
                    ),
                    hidden,
                    Action::Pause(event_type.to_owned()),
                )
            } else {
                (
                    format!(
                        "Resume the event type {}? Its waiting events run, oldest first.",
                        value(event_type)
                    ),
                    hidden,
                    Action::Resume(event_type.to_owned()),
                )
            }
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
        Action::Pause(event_type) => match ctx.admin.pause(&event_type).await {
            Ok(newly) => (
                format!(
                    "The event type {} {}: its deliveries are stored and acknowledged, not handled.",
                    value(&event_type),
                    if newly { "is paused" } else { "was already paused" }
                ),
                format!("<a href=\"{base}/paused\">Paused types</a>"),
            ),
            Err(InboxError::InvalidSetting(reason)) => {
                return problem(ctx.base, StatusCode::BAD_REQUEST, &format!("{reason}."))
            }
            Err(err) => return unavailable(ctx.base, &err),
        },
        Action::Resume(event_type) => match ctx.admin.resume(&event_type).await {
            Ok(newly) => (
                format!(
                    "The event type {} {}.",
                    value(&event_type),
                    if newly {
                        "is resumed: its waiting events run, oldest first"
                    } else {
                        "was not paused"
                    }
                ),
                format!("<a href=\"{base}/paused\">Paused types</a>"),
            ),
            Err(InboxError::InvalidSetting(reason)) => {
                return problem(ctx.base, StatusCode::BAD_REQUEST, &format!("{reason}."))
            }
            Err(err) => return unavailable(ctx.base, &err),
        },
    };
    let content = format!(
        "<h1>Done</h1><p class=\"notice\" id=\"outcome\">{outcome}</p><p>{back} · <a href=\"{base}/\">Overview</a></p>"
    );
    ctx.page("Done", Nav::None, None, &content)
}

enum Action {
    Pause(String),
    Resume(String),
    Retry(String),
    RetryDead,
    Replay(i64),
}
