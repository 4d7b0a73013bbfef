//! Test mode: what a test of a webhook endpoint or of a store needs beyond
//! [`sender`](crate::sender).
//!
//! * [`SignedDelivery::to_request`](crate::sender::SignedDelivery::to_request)
//!   (this feature) makes a signed delivery an `http::Request` that an axum
//!   `Router` or any tower service takes as it is; the actix adapter has its own
//!   helper for actix test requests;
//! * [`store_conformance`] is the suite every [`Store`](crate::Store) must pass,
//!   and [`FailingStore`] a store that fails on demand.
//!
//! ```
//! use payhook::sender::{EventBuilder, SignedDelivery};
//!
//! let event = EventBuilder::payment_intent_succeeded().amount(42_000).currency("btc");
//! let delivery = SignedDelivery::now(event.to_json(), "whsec_test_secret").unwrap();
//! let request = delivery.to_request("/webhooks");
//! assert!(request.headers()["x-service-signature"].to_str().unwrap().starts_with("t="));
//! ```

mod failing_store;
pub mod store_conformance;

pub use failing_store::FailingStore;
