//! `payhook send`: build or read an event, sign it, POST it, and judge every reply.
//!
//! A [`Plan`] is everything fixed before the first request: the bodies (the one
//! that is signed and the one that is sent, which differ only for `--tamper`),
//! the secret, the header and what a healthy receiver must answer. Workers then
//! deliver the same event `--repeat` times, `--concurrency` at once, each
//! delivery signed when it is sent (as the service signs each retry afresh).
//! With `--distinct` every delivery is an event of its own instead: the plan
//! keeps the event as a template and each delivery builds it with a fresh id
//! and signs it when it is sent, so the receiver verifies, claims and handles
//! every one (the load a stream of real events puts on it).
//!
//! Replies are judged as they arrive ([`judge`]); the run fails with exit code 1
//! if any reply is unexpected, and with exit code 3 at once if the endpoint
//! cannot be reached at all.
//!
//! The peer is not trusted: of each reply at most [`MAX_REPLY_BYTES`] of the
//! body are read (see `client.rs`, whose client also speaks `https://`, so a
//! staging receiver can be smoke-tested as well as a local one); and every
//! piece of a reply or of a `--data` file that is printed (reply bodies, error
//! causes, the file's event id and type) goes through the core's
//! [`Untrusted`] escaping. Reply headers are never printed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::reply::RECEIVED_BODY;
use payhook_core::sender::{unique_event_id, unix_now, EventBuilder};
use payhook_core::untrusted::Untrusted;
use payhook_core::{sign, Event, Secret};
use tokio::sync::mpsc;

use crate::cli::SendArgs;
use crate::client::{
    http_client, post_signed, shown_body, shown_url, Endpoint, HttpClient, Seen, MAX_REPLY_BYTES,
};
use crate::failure::Failure;
use crate::input;
use crate::output::{note, paint_stdout, say, Colour};
use crate::runtime::{self, Threads};
use crate::secret::{self, Stdin};

/// How old a `--stale` delivery's timestamp is: far outside any sane tolerance.
const STALE_AGE_SECS: u64 = 3600;
/// How often, at most, a progress line goes to stderr during a long run.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// The prefix of every error reply of the protocol.
const ERROR_PREFIX: &str = "Webhook Error: ";

/// What a healthy receiver answers to this run's deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A genuine event: 200 `{"received":true}` (409 allowed for concurrent duplicates).
    Received,
    /// A delivery that must be refused with 400 `Webhook Error: …`; the text says why.
    Rejected(&'static str),
}

/// Everything about a run that is decided before the first request.
struct Plan {
    endpoint: Endpoint,
    header: http::HeaderName,
    secret: Secret,
    signed_body: Bytes,
    sent_body: Bytes,
    /// `--distinct`: the event each delivery is built from, with a fresh id each time.
    distinct: Option<EventBuilder>,
    tamper: bool,
    stale: bool,
    expect: Expect,
    total: u32,
    concurrency: u32,
    timeout: Duration,
    quiet: bool,
    /// What is sent, for the first output line: `<type> <id>` or the file name.
    label: String,
}

/// Runs `payhook send`.
pub fn run(args: &SendArgs) -> Result<(), Failure> {
    let reads_body = args.data.as_deref().is_some_and(|path| path.as_os_str() == "-");
    let secret = secret::one(&args.secret, if reads_body { Stdin::Body } else { Stdin::Free })?;
    let plan = Plan::from_args(args, &secret)?;
    runtime::block_on(Threads::One, Arc::new(plan).execute())
}

impl Plan {
    fn from_args(args: &SendArgs, secret: &str) -> Result<Self, Failure> {
        let secret = Secret::new(secret).map_err(Failure::usage)?;
        let uri = args
            .to
            .as_str()
            .parse::<http::Uri>()
            .map_err(|err| Failure::usage(format_args!("--to {}: {err}", shown_url(&args.to))))?;
        let mut expect = Expect::Received;
        let mut distinct = None;
        let (signed_body, label, tampered) = match &args.data {
            Some(path) => {
                let body = input::file(path)?;
                let source = if path.as_os_str() == "-" {
                    "stdin".to_owned()
                } else {
                    path.display().to_string()
                };
                let label = match Event::from_slice(&body) {
                    Ok(event) => format!(
                        "{} {} (from {source})",
                        Untrusted::value(event.event_type()),
                        Untrusted::value(event.id())
                    ),
                    Err(err) => {
                        note!(
                            "note: {source} is not a valid event ({}); a healthy receiver rejects it",
                            Untrusted::message(&err.to_string())
                        );
                        expect = Expect::Rejected("a body that is not a valid event");
                        format!("{source} (not a valid event)")
                    }
                };
                // Without a structure to edit, one extra byte is the change.
                let tampered = args.tamper.then(|| {
                    let mut changed = body.to_vec();
                    changed.push(b' ');
                    Bytes::from(changed)
                });
                (body, label, tampered)
            }
            None => {
                let builder = build_event(args);
                let body = Bytes::from(builder.to_json());
                let label = if args.distinct {
                    format!("{} events, each with a fresh id", builder.event_type())
                } else {
                    format!("{} {}", builder.event_type(), builder.event_id())
                };
                let tampered = args.tamper.then(|| tamper_built(&builder, &body));
                if args.distinct {
                    distinct = Some(builder);
                }
                (body, label, tampered)
            }
        };
        if args.tamper {
            expect = Expect::Rejected("a body changed after signing");
        } else if args.stale {
            expect = Expect::Rejected("a delivery signed an hour ago");
        }
        let total = args.repeat.unwrap_or(args.concurrency);
        Ok(Self {
            endpoint: Endpoint {
                url: args.to.clone(),
                uri,
                flag: "--to",
            },
            header: args.header.clone(),
            secret,
            sent_body: tampered.unwrap_or_else(|| signed_body.clone()),
            signed_body,
            distinct,
            tamper: args.tamper,
            stale: args.stale,
            expect,
            total,
            concurrency: args.concurrency.min(total),
            timeout: Duration::from_secs(args.timeout),
            quiet: args.quiet,
            label,
        })
    }

    async fn execute(self: Arc<Self>) -> Result<(), Failure> {
        let client = http_client(
            self.endpoint.url.scheme() == "https",
            self.timeout.min(Duration::from_secs(10)),
        )?;

        let mut modifiers = Vec::new();
        if self.tamper {
            modifiers.push("tampered");
        }
        if self.stale {
            modifiers.push("stale");
        }
        say!(
            "POST {} {}{}: {} {}, {} at once",
            shown_url(&self.endpoint.url),
            self.label,
            if modifiers.is_empty() {
                String::new()
            } else {
                format!(" [{}]", modifiers.join(", "))
            },
            self.total,
            if self.total == 1 { "delivery" } else { "deliveries" },
            self.concurrency,
        );

        let started = Instant::now();
        let next = Arc::new(AtomicU32::new(0));
        let (results, mut replies) = mpsc::unbounded_channel();
        for _ in 0..self.concurrency {
            let (plan, client, next, results) = (
                Arc::clone(&self),
                client.clone(),
                Arc::clone(&next),
                results.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= plan.total {
                        break;
                    }
                    let seen = plan.deliver(&client).await;
                    if results.send((n + 1, seen)).is_err() {
                        break; // the run was abandoned
                    }
                }
            });
        }
        drop(results);

        let mut tally = Tally::default();
        let mut last_progress = Instant::now();
        while let Some((n, seen)) = replies.recv().await {
            let seen = seen.map_err(Failure::Unreachable)?;
            self.record(n, &seen, &mut tally);
            if self.total > 1 && last_progress.elapsed() >= PROGRESS_EVERY {
                last_progress = Instant::now();
                note!(
                    "progress: {}/{} replies, {} unexpected, {:.1} s",
                    tally.done,
                    self.total,
                    tally.unexpected,
                    started.elapsed().as_secs_f64()
                );
            }
        }
        if self.expect == Expect::Received && tally.unexpected == 0 && !tally.by_status.contains_key(&200) {
            tally.unexpected += 1;
            say!("unexpected: no delivery was acknowledged with 200 {RECEIVED_BODY}");
        }
        self.summarize(&tally, started.elapsed());
        if tally.unexpected == 0 {
            Ok(())
        } else {
            Err(Failure::Rejected)
        }
    }

    /// Sends one delivery. `Err` means the endpoint cannot be reached at all,
    /// which ends the run.
    async fn deliver(&self, client: &HttpClient) -> Result<Seen, String> {
        let now = unix_now();
        let timestamp = if self.stale {
            now.saturating_sub(STALE_AGE_SECS)
        } else {
            now
        };
        let (signed_body, sent_body) = self.bodies();
        let signature = sign(&signed_body, &self.secret, timestamp);
        post_signed(
            client,
            &self.endpoint,
            &self.header,
            signature,
            sent_body,
            self.timeout,
        )
        .await
    }

    /// The body to sign and the body to send for the next delivery.
    fn bodies(&self) -> (Bytes, Bytes) {
        let Some(template) = &self.distinct else {
            return (self.signed_body.clone(), self.sent_body.clone());
        };
        let builder = template.clone().id(unique_event_id());
        let signed = Bytes::from(builder.to_json());
        let sent = if self.tamper {
            tamper_built(&builder, &signed)
        } else {
            signed.clone()
        };
        (signed, sent)
    }

    fn record(&self, n: u32, seen: &Seen, tally: &mut Tally) {
        tally.done += 1;
        // Only copies of one event may meet each other in flight (409).
        let concurrent = self.concurrency > 1 && self.distinct.is_none();
        let (line, verdict) = match seen {
            Seen::Reply { status, body, cut } => {
                *tally.by_status.entry(*status).or_default() += 1;
                let cut = if *cut {
                    format!(
                        " (reply longer than {} KiB; the rest was not read)",
                        MAX_REPLY_BYTES / 1024
                    )
                } else {
                    String::new()
                };
                (
                    format!("#{n} {status} {}{cut}", shown_body(body)),
                    judge(self.expect, concurrent, *status, body),
                )
            }
            Seen::NoReply(why) => {
                tally.no_reply += 1;
                (
                    format!("#{n} no reply: {}", Untrusted::message(why)),
                    Err(expected_text(self.expect, concurrent)),
                )
            }
        };
        match verdict {
            Ok(()) => {
                if !self.quiet {
                    say!("{}", paint_stdout(&line, Colour::Green));
                }
            }
            Err(why) => {
                tally.unexpected += 1;
                say!("{}", paint_stdout(&line, Colour::Red));
                say!("   {}: {why}", paint_stdout("unexpected", Colour::Red));
            }
        }
    }

    fn summarize(&self, tally: &Tally, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let mut statuses: Vec<String> = tally
            .by_status
            .iter()
            .map(|(status, count)| format!("{status}: {count}"))
            .collect();
        if tally.no_reply > 0 {
            statuses.push(format!("no reply: {}", tally.no_reply));
        }
        let verdict = if tally.unexpected == 0 {
            paint_stdout("all as expected", Colour::Green)
        } else {
            paint_stdout(&format!("{} unexpected", tally.unexpected), Colour::Red)
        };
        // A rate says something about many requests, not about one.
        let rate = if tally.done > 1 {
            format!(" ({:.0}/s)", f64::from(tally.done) / secs.max(1e-9))
        } else {
            String::new()
        };
        say!(
            "summary: {} {} in {secs:.2} s{rate}; {verdict} ({})",
            tally.done,
            if tally.done == 1 { "reply" } else { "replies" },
            statuses.join(", "),
        );
    }
}

#[derive(Debug, Default)]
struct Tally {
    done: u32,
    unexpected: u32,
    no_reply: u32,
    by_status: BTreeMap<u16, u32>,
}

fn build_event(args: &SendArgs) -> EventBuilder {
    let mut builder = EventBuilder::of_type(&args.event_type);
    if let Some(id) = &args.id {
        builder = builder.id(id);
    }
    if let Some(amount) = args.amount {
        builder = builder.amount(amount);
    }
    if let Some(currency) = &args.currency {
        builder = builder.currency(currency);
    }
    builder
}

/// The tampering an attacker would try on a payment: a different amount. Other
/// events get one extra byte.
fn tamper_built(builder: &EventBuilder, signed: &Bytes) -> Bytes {
    match Event::from_slice(signed)
        .ok()
        .and_then(|e| e.payment_intent().map(|pi| pi.amount))
    {
        Some(amount) => {
            let changed = amount.checked_add(1).unwrap_or(amount - 1);
            Bytes::from(builder.clone().amount(changed).to_json())
        }
        None => {
            let mut changed = signed.to_vec();
            changed.push(b' ');
            Bytes::from(changed)
        }
    }
}

/// Decides whether a reply is what a healthy receiver sends; `Err` says what
/// was expected instead.
fn judge(expect: Expect, concurrent: bool, status: u16, body: &str) -> Result<(), String> {
    let fine = match expect {
        Expect::Received => {
            (status == 200 && body.trim_end() == RECEIVED_BODY)
                || (concurrent && status == 409 && body.starts_with(ERROR_PREFIX))
        }
        Expect::Rejected(_) => status == 400 && body.starts_with(ERROR_PREFIX),
    };
    if fine {
        return Ok(());
    }
    let mut why = expected_text(expect, concurrent);
    if let Some(hint) = hint(expect, status, body) {
        why.push_str("; ");
        why.push_str(hint);
    }
    Err(why)
}

fn expected_text(expect: Expect, concurrent: bool) -> String {
    match expect {
        Expect::Received if concurrent => format!(
            "a valid delivery should get 200 {RECEIVED_BODY} (or 409 while another delivery of the event is in flight)"
        ),
        Expect::Received => format!("a valid delivery should get 200 {RECEIVED_BODY}"),
        Expect::Rejected(what) => format!("{what} should get 400 {ERROR_PREFIX}…"),
    }
}

/// The likeliest cause of a common wrong reply.
fn hint(expect: Expect, status: u16, body: &str) -> Option<&'static str> {
    match (expect, status) {
        (Expect::Received, 400) if body.contains("no signature matches") => {
            Some("is --secret the secret the receiver is configured with?")
        }
        (Expect::Received, 400) if body.contains("missing") && body.contains("header") => {
            Some("does the receiver read the signature from another header? see --header")
        }
        (Expect::Received, 409) => Some("409 is only expected for concurrent deliveries of one event"),
        (Expect::Rejected(_), 200) => Some("the receiver accepted a delivery it must refuse"),
        (_, 404 | 405) => Some("is the path in --to the receiver's webhook route?"),
        (_, 300..=399) => Some("the receiver redirected; webhook senders do not follow redirects"),
        (_, 500..=599) => Some("the receiver failed; see its logs"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IN_FLIGHT: &str = "Webhook Error: event evt_1 is being handled by another delivery; retry later";

    #[test]
    fn a_valid_delivery_needs_the_exact_acknowledgement() {
        assert_eq!(judge(Expect::Received, false, 200, RECEIVED_BODY), Ok(()));
        assert_eq!(
            judge(Expect::Received, false, 200, "{\"received\":true}\n"),
            Ok(())
        );
        assert!(judge(Expect::Received, false, 200, "ok").is_err());
        assert!(judge(Expect::Received, false, 204, "").is_err());
        assert!(judge(Expect::Received, false, 500, "boom")
            .unwrap_err()
            .contains("logs"));
    }

    #[test]
    fn conflict_is_fine_only_for_concurrent_duplicates() {
        assert_eq!(judge(Expect::Received, true, 409, IN_FLIGHT), Ok(()));
        assert!(judge(Expect::Received, false, 409, IN_FLIGHT).is_err());
        assert!(judge(Expect::Received, true, 409, "busy").is_err());
    }

    #[test]
    fn refused_deliveries_need_a_webhook_error() {
        let expect = Expect::Rejected("a body changed after signing");
        let body =
            "Webhook Error: no signature matches the expected signature for this payload and timestamp";
        assert_eq!(judge(expect, false, 400, body), Ok(()));
        let why = judge(expect, false, 200, RECEIVED_BODY).unwrap_err();
        assert!(
            why.starts_with("a body changed after signing should get 400"),
            "{why}"
        );
        assert!(why.contains("accepted a delivery it must refuse"), "{why}");
        assert!(judge(expect, false, 400, "bad request").is_err());
        assert!(judge(expect, true, 409, IN_FLIGHT).is_err());
    }

    #[test]
    fn wrong_secret_gets_a_hint() {
        let body =
            "Webhook Error: no signature matches the expected signature for this payload and timestamp";
        assert!(judge(Expect::Received, false, 400, body)
            .unwrap_err()
            .contains("--secret"));
    }

    #[test]
    fn tampering_a_payment_changes_only_its_amount() {
        let builder = EventBuilder::payment_intent_succeeded().amount(u128::MAX);
        let signed = Bytes::from(builder.to_json());
        let tampered = tamper_built(&builder, &signed);
        assert_ne!(tampered, signed);
        let event = Event::from_slice(&tampered).unwrap();
        assert_eq!(event.id(), builder.event_id());
        assert_eq!(event.payment_intent().unwrap().amount, u128::MAX - 1);

        let other = EventBuilder::other("customer.created");
        let signed = Bytes::from(other.to_json());
        let tampered = tamper_built(&other, &signed);
        assert_eq!(&tampered[..signed.len()], &signed[..]);
        assert_eq!(tampered.len(), signed.len() + 1);
    }
}
