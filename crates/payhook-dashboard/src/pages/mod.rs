//! The pages: what every page needs ([`Ctx`]), the error pages, and one file
//! per page: the overview, the events list, one event, the paused types. Each page reads
//! through the inbox's [`Admin`] and writes through [`crate::html`].

mod event;
mod events;
mod overview;
mod paused;

use http::{Response, StatusCode};
use payhook_core::untrusted::Untrusted;
use payhook_inbox::admin::Admin;
use payhook_inbox::{Backend, InboxError};

use crate::html::{self, escape, query_value, value, Nav};

pub(crate) use event::{event, event_redirect};
pub(crate) use events::events;
pub(crate) use overview::overview;
pub(crate) use paused::paused;

/// What every page needs.
pub(crate) struct Ctx<'a, DB: Backend> {
    pub(crate) admin: &'a Admin<DB>,
    pub(crate) base: &'a str,
    pub(crate) csrf: String,
    pub(crate) refresh: Option<u32>,
}

impl<DB: Backend> Ctx<'_, DB> {
    pub(crate) fn meta(&self) -> String {
        format!(
            "{} · namespace {}",
            self.admin.backend(),
            value(self.admin.namespace())
        )
    }

    pub(crate) fn page(
        &self,
        title: &str,
        nav: Nav,
        refresh: Option<u32>,
        content: &str,
    ) -> Response<String> {
        Response::new(html::page(self.base, title, nav, &self.meta(), refresh, content))
    }

    pub(crate) fn csrf_field(&self) -> String {
        format!(
            "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
            escape(&self.csrf)
        )
    }

    pub(crate) fn event_link(&self, event_id: &str) -> String {
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
pub(crate) fn unavailable(base: &str, err: &InboxError) -> Response<String> {
    let _ = err; // its text may name hosts or files: not shown
    problem(
        base,
        StatusCode::SERVICE_UNAVAILABLE,
        "The inbox's database cannot be read right now; try again shortly.",
    )
}

/// The most namespaces the refusal below names.
const NAMESPACES_SHOWN: u32 = 20;

/// `400` when the database has never seen the dashboard's namespace (no
/// event, no paused type), naming the ones it has: an action there would
/// change nothing that runs. `None` when it has, or when it cannot be read
/// (the action's own read then says so).
pub(crate) async fn unseen_namespace<DB: Backend>(ctx: &Ctx<'_, DB>) -> Option<Response<String>> {
    if ctx.admin.namespace_seen().await.unwrap_or(true) {
        return None;
    }
    let known = ctx
        .admin
        .namespaces(NAMESPACES_SHOWN + 1)
        .await
        .unwrap_or_default();
    let mut names: Vec<String> = known
        .iter()
        .take(NAMESPACES_SHOWN as usize)
        .map(|name| format!("\"{}\"", Untrusted::value(name)))
        .collect();
    if known.len() > NAMESPACES_SHOWN as usize {
        names.push("…".to_owned());
    }
    let has = if names.is_empty() {
        "It has none yet.".to_owned()
    } else {
        format!("It has: {}.", names.join(", "))
    };
    let text = format!(
        "Nothing was done: the database has no event and no paused type in this dashboard's namespace \"{}\"; \
         is the dashboard's Admin on the inbox's namespace? {has}",
        Untrusted::value(ctx.admin.namespace())
    );
    Some(problem(ctx.base, StatusCode::BAD_REQUEST, &text))
}
