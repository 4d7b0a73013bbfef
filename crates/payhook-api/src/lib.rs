//! A client of the payment service's API: create and retrieve payment
//! intents, read the events list page by page, and drive the test-mode
//! helpers the emulator serves. The inbox's reconciler, `payhook
//! reconcile`, `payhook trigger` and `payhook events resend` all go through
//! it, so the rules below hold for every caller.
//!
//! ```no_run
//! use payhook::api::{ApiKey, Client, EventsQuery, NewPaymentIntent};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let key = ApiKey::new(&std::env::var("PAYHOOK_API_KEY")?)?;
//! let client = Client::new("https://api.service.example", key)?;
//!
//! // Create an intent with the metadata the webhook handler will read back.
//! let intent = client
//!     .create_payment_intent(&NewPaymentIntent::new(5000, "btc").metadata("order", "42"))
//!     .await?;
//!
//! // Before acting on a webhook: the intent's state now.
//! let now = client.retrieve_payment_intent(&intent.id).await?;
//! println!("{:?}", now.status);
//!
//! // The events no endpoint acknowledged, every page in turn.
//! let mut pages = client.events(EventsQuery { delivery_success: Some(false), ..EventsQuery::default() });
//! while let Some(page) = pages.next().await {
//!     for listed in page?.events {
//!         println!("{} {}", listed.event.id(), listed.event.event_type());
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Trust rules
//! The client talks out, with a secret key, to a server that may be wrong,
//! misconfigured or hostile. Whatever it answers:
//!
//! - **`https://` except loopback.** [`Client::new`] refuses a plain
//!   `http://` base unless its host is `localhost`, `127.0.0.0/8` or `[::1]`
//!   (the emulator, a local proxy), and a base carrying a user, password,
//!   query or fragment. TLS is rustls with the platform's roots; no proxy
//!   from the environment is used.
//! - **No redirect is followed.** A `3xx` is [`ApiError::BadReply`]: the key
//!   goes to the configured base and nowhere else.
//! - **Replies are bounded in size and time.** A reply longer than
//!   [`Client::max_reply_bytes`] (default [`MAX_REPLY_BYTES`]) is refused as
//!   soon as its length says so or that much has arrived
//!   ([`ApiError::TooLarge`]); a request that takes longer than
//!   [`Client::timeout`] (default [`REQUEST_TIMEOUT`]), connection and whole
//!   reply included, is [`ApiError::Unreachable`].
//! - **The key is never shown.** [`ApiKey`] and [`Client`] redact it in
//!   `Debug`; every text taken from the service — an error's message, a
//!   parse error quoting a typed field, a connection error — has every
//!   occurrence of the key (whole, or inside a longer word) replaced by
//!   `<redacted>` **before** anything shortens it, by [`ApiKey::scrub`]. An
//!   [`ApiError`] holds only such text, so its `Display`, `Debug`, the log
//!   lines and stored errors made from it, and the CLI's output never carry
//!   the key. The key is trimmed once, by [`ApiKey::new`], and redacted as
//!   trimmed.
//! - **Every message from the service is escaped and bounded.** After the
//!   key is cut out, the text goes through the project's one rule for
//!   untrusted text ([`payhook::untrusted::Untrusted::message`](payhook_core::untrusted::Untrusted::message):
//!   control and bidi characters escaped, long runs cut) and is cut to
//!   [`MAX_MESSAGE_BYTES`] (1 KiB), so a reply can make no log line or
//!   stored error longer than that.
//! - **`Retry-After` is parsed once**, here: whole seconds, capped at
//!   [`MAX_RETRY_AFTER`], carried in [`ApiError::Throttled`].
//! - **Only the window asked for.** The events list's pages keep only the
//!   events inside the query's `created` range ([`EventsQuery::contains`]);
//!   the others are dropped and counted ([`EventsPage::outside`]), whatever
//!   the server sent.
//! - **One bad event holds back none.** An event of the list that does not
//!   parse as a delivery's body must, or is longer than a delivery's body
//!   may be ([`Client::max_event_bytes`]), is listed apart in
//!   [`EventsPage::refused`] — its id when one can be read (the key cut
//!   out, bounded), the reason (scrubbed like every message) — and the rest
//!   of its page is kept.
//! - **A walk of the list always ends.** [`Pages::next`] ends with
//!   [`ApiError::BrokenList`] when a page's cursor repeats one already
//!   followed or an event is newer than one listed before it; it holds one
//!   page at a time. Bounding a walk in pages and time is the caller's (the
//!   reconciler's settings).
//! - **Ids put in a path** are letters, digits, `_` and `-` only
//!   ([`ApiError::Invalid`] otherwise): no argument or reply can change the
//!   route asked.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod error;
mod events;
mod intents;
mod key;

pub use client::{Client, CONNECT_TIMEOUT, MAX_REPLY_BYTES, MAX_RETRY_AFTER, REQUEST_TIMEOUT};
pub use error::ApiError;
pub use events::{
    EventsPage, EventsQuery, ListedEvent, Pages, RefusedEvent, MAX_REFUSED_ID_BYTES, PAGE_LIMIT,
};
pub use intents::{NewPaymentIntent, Resend};
pub use key::{ApiKey, MAX_MESSAGE_BYTES};
