//! Paging through the service's events list for one window: every page,
//! newest first, each event once, and every failure of the API turned into
//! the failure (and exit code) the command reports.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use payhook_api::{ApiError, ListedEvent, Pages, RefusedEvent};
use payhook_core::untrusted::Untrusted;

use super::{Service, Window};
use crate::failure::Failure;
use crate::output::note;

/// The longest `Retry-After` waited for before the one retry of a page; a
/// longer one ends the run (the user can run it again later).
const MAX_WAIT: Duration = Duration::from_secs(10);
/// How often, at most, a progress line goes to stderr on a long listing.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// The pages of one window, asked for one at a time through the API
/// client's walk: the events outside the window are dropped there (the
/// reconciler's rule), and a list whose cursor repeats or whose events stop
/// moving back in time ends the walk.
pub(crate) struct Pager<'a> {
    service: &'a Service,
    pages: Pages<'a>,
    /// The ids listed so far: an event listed twice is counted once.
    seen: HashSet<String>,
    /// The listed events the client could not take (they do not parse, or
    /// are longer than a delivery may be), as the pages said.
    refused: Vec<RefusedEvent>,
    started: Instant,
    last_progress: Instant,
    /// The window, for the message of a run that stops at `max_pages`.
    window: Window,
    /// The most pages read (`--max-pages`).
    max_pages: u32,
}

impl<'a> Pager<'a> {
    /// The events created in `window`; only those no endpoint acknowledged
    /// when `delivery_success` is `Some(false)`; at most `max_pages` pages.
    pub(crate) fn new(
        service: &'a Service,
        window: Window,
        delivery_success: Option<bool>,
        max_pages: u32,
    ) -> Self {
        Self {
            service,
            pages: service.api.events(window.query(delivery_success)),
            seen: HashSet::new(),
            refused: Vec::new(),
            started: Instant::now(),
            last_progress: Instant::now(),
            window,
            max_pages,
        }
    }

    /// The next page's events (newest first), or `None` after the last.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<ListedEvent>>, Failure> {
        let page = match self.pages.next().await {
            None => return Ok(None),
            Some(Err(ApiError::Throttled {
                retry_after: Some(after),
                ..
            })) if after <= MAX_WAIT => {
                note!(
                    "the service asked to wait {} s; asking once more",
                    after.as_secs()
                );
                tokio::time::sleep(after).await;
                match self.pages.next().await {
                    Some(page) => page,
                    None => return Ok(None),
                }
            }
            Some(page) => page,
        }
        .map_err(|err| self.failure(err))?;
        // The bound ends a run that would otherwise hold an ever longer list
        // (ever new pages whose events move back in time never end a walk).
        if page.has_more && self.pages.requests() >= u64::from(self.max_pages) {
            return Err(Failure::Failed(format!(
                "the events list has more than {} page(s) of events created {}; nothing was changed: \
                 narrow the window with --since, or raise --max-pages",
                self.max_pages,
                self.window.describe()
            )));
        }
        self.refused.extend(page.refused);
        let mut events = Vec::with_capacity(page.events.len());
        for listed in page.events {
            if self.seen.insert(listed.event.id().to_owned()) {
                events.push(listed);
            }
        }
        if page.has_more && self.last_progress.elapsed() >= PROGRESS_EVERY {
            self.last_progress = Instant::now();
            note!(
                "listing: {} event(s) so far, {:.0} s",
                self.seen.len(),
                self.started.elapsed().as_secs_f64()
            );
        }
        Ok(Some(events))
    }

    /// Adds listed events found unfit later (the inbox cannot store them)
    /// to the ones that could not be taken.
    pub(crate) fn refuse(&mut self, events: Vec<RefusedEvent>) {
        self.refused.extend(events);
    }

    /// The listed events that could not be taken, each once.
    pub(crate) fn refused(&self) -> &[RefusedEvent] {
        &self.refused
    }

    /// Says on stderr which listed events could not be taken, if any (id
    /// and reason escaped and bounded, as the client keeps them).
    pub(crate) fn note_refused(&self) {
        if self.refused.is_empty() {
            return;
        }
        note!(
            "warning: {} listed event(s) could not be taken (the rest were):",
            self.refused.len()
        );
        for refused in &self.refused {
            note!(
                "  {}\t{}",
                Untrusted::value(refused.id.as_deref().unwrap_or("-")),
                Untrusted::message(&refused.reason)
            );
        }
    }

    /// How many distinct events of the window were listed.
    pub(crate) fn listed(&self) -> usize {
        self.seen.len()
    }

    /// Says on stderr how many listed events were left out, if any.
    pub(crate) fn note_outside(&self) {
        if self.pages.outside() > 0 {
            note!(
                "warning: the service listed {} event(s) created outside the window (or with no `created`); \
                 they were left out",
                self.pages.outside()
            );
        }
    }

    /// What the command reports for a failed request; the key is cut out of
    /// anything the service said.
    fn failure(&self, err: ApiError) -> Failure {
        let base = Untrusted::value(self.service.api.base());
        match err {
            ApiError::Unauthorized { status, message, .. } => Failure::usage(format_args!(
                "the service at {base} refused the API key read from --api-key-file {} \
                 ({status}: {}); check that it is the account's secret key and that it is not revoked",
                self.service.key_file.display(),
                message
            )),
            ApiError::Unreachable(reason) => Failure::Unreachable(format!(
                "cannot reach the service at {base}: {}; nothing was changed",
                reason
            )),
            ApiError::Throttled {
                status,
                retry_after: Some(after),
            } => Failure::Failed(format!(
                "the service at {base} answered {status} and asks to wait {} s; nothing was changed: \
                 run the command again later",
                after.as_secs()
            )),
            ApiError::Throttled { status, .. } => Failure::Failed(format!(
                "the service at {base} answered {status}; nothing was changed: run the command again later"
            )),
            other => Failure::Failed(format!("{}; nothing was changed", other)),
        }
    }
}
