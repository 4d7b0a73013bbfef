//! `payhook reconcile --forward-to URL --secret-file FILE`: the events no
//! endpoint acknowledged (`delivery_success=false`), sent to a receiver of
//! any kind (inline or inbox) as the service delivers them: the listed body
//! as is, `content-type: application/json`, signed at the time of sending in
//! `x-service-signature`. The receiver deduplicates them as usual, so an
//! event that arrives meanwhile (or is sent twice) runs once.
//!
//! Events go one at a time, oldest first (the order the service created
//! them), through `payhook send`'s client (`client.rs`): a reply is read up to its bound
//! and judged healthy when it is 2xx. A receiver that cannot be reached ends
//! the run at once (exit code 3); any other reply that is not 2xx makes it
//! exit 1 once every event was tried.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use payhook_core::sender::unix_now;
use payhook_core::signature::DEFAULT_HEADER;
use payhook_core::untrusted::Untrusted;
use payhook_core::{sign, Secret};
use payhook_inbox::reconcile::ListedEvent;
use url::Url;

use super::list::Pager;
use super::{print_types, ReconcileArgs, Service, Window};
use crate::client::{http_client, post_signed, shown_body, shown_url, Endpoint, Seen};
use crate::failure::Failure;
use crate::output::{paint_stdout, say, Colour};

/// How long a receiver may take to answer one event (the service waits 10 s;
/// a reconciling operator can wait longer).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection to the receiver may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Counts the events no endpoint acknowledged; with `yes`, sends each.
pub(crate) async fn run(
    service: &Service,
    window: Window,
    to: &Url,
    secret: &Secret,
    args: &ReconcileArgs,
) -> Result<(), Failure> {
    let yes = args.yes;
    let mut pages = Pager::new(service, window, Some(false), args.max_pages);
    let mut events: Vec<ListedEvent> = Vec::new();
    while let Some(page) = pages.next().await? {
        events.extend(page);
    }
    say!(
        "{} event(s) the service created {} were acknowledged by no endpoint (delivery_success=false)",
        events.len(),
        window.describe()
    );
    print_types(&events);
    pages.note_outside();
    pages.note_refused();
    let shown = shown_url(to);
    if events.is_empty() {
        return Ok(());
    }
    if !yes {
        say!("nothing sent: run again with --yes to send them to {shown}");
        return Ok(());
    }
    let endpoint = Endpoint {
        url: to.clone(),
        uri: to
            .as_str()
            .parse::<http::Uri>()
            .map_err(|err| Failure::usage(format_args!("--forward-to {shown}: {err}")))?,
        flag: "--forward-to",
    };
    let client = http_client(to.scheme() == "https", CONNECT_TIMEOUT)?;
    let header = http::HeaderName::from_static(DEFAULT_HEADER);
    // Oldest first, as the service created them.
    events.reverse();
    let total = events.len();
    let mut tally = Tally::default();
    for (sent, listed) in events.iter().enumerate() {
        let body = Bytes::from(listed.body.clone());
        let signature = sign(&body, secret, unix_now());
        let seen = post_signed(&client, &endpoint, &header, signature, body, REPLY_TIMEOUT)
            .await
            .map_err(|why| {
                Failure::Unreachable(format!(
                    "{}; {sent} of {total} event(s) were sent before",
                    Untrusted::message(&why)
                ))
            })?;
        tally.record(listed, &seen);
    }
    let verdict = if tally.failed == 0 {
        paint_stdout("every reply 2xx", Colour::Green)
    } else {
        paint_stdout(&format!("{} not 2xx", tally.failed), Colour::Red)
    };
    let mut statuses: Vec<String> = tally
        .by_status
        .iter()
        .map(|(status, count)| format!("{status}: {count}"))
        .collect();
    if tally.no_reply > 0 {
        statuses.push(format!("no reply: {}", tally.no_reply));
    }
    say!(
        "summary: {total} event(s) sent to {shown}; {verdict} ({})",
        statuses.join(", ")
    );
    if tally.failed == 0 {
        Ok(())
    } else {
        Err(Failure::Rejected)
    }
}

/// The replies so far.
#[derive(Debug, Default)]
struct Tally {
    failed: usize,
    no_reply: usize,
    by_status: BTreeMap<u16, usize>,
}

impl Tally {
    /// Prints the reply to one event and counts it.
    fn record(&mut self, listed: &ListedEvent, seen: &Seen) {
        let label = format!(
            "{} {}",
            Untrusted::value(listed.event.id()),
            Untrusted::value(listed.event.event_type())
        );
        let (line, fine) = match seen {
            Seen::Reply { status, body, cut } => {
                *self.by_status.entry(*status).or_default() += 1;
                let cut = if *cut {
                    " (reply cut; the rest was not read)"
                } else {
                    ""
                };
                (
                    format!("{label}: {status} {}{cut}", shown_body(body)),
                    (200..300).contains(status),
                )
            }
            Seen::NoReply(why) => {
                self.no_reply += 1;
                (format!("{label}: no reply: {}", Untrusted::message(why)), false)
            }
        };
        if fine {
            say!("{}", paint_stdout(&line, Colour::Green));
        } else {
            self.failed += 1;
            say!("{}", paint_stdout(&line, Colour::Red));
        }
    }
}
