//! Signature schemes: how a delivery proves it comes from the payment service.
//!
//! A scheme is a [`SignatureScheme`]: from the request headers and the raw body
//! it decides whether a delivery is genuine. The receiver holds one as
//! `Arc<dyn SignatureScheme>` ([`ReceiverBuilder::scheme`](crate::ReceiverBuilder::scheme)
//! picks another than the built-in one), so the adapters never know which.
//!
//! * The built-in scheme is the service's `x-service-signature` header,
//!   `t=…,v1=…`: [`Signature`] parses it (its docs give the format, rule by
//!   rule), [`Verifier`] checks it against one or more secrets, [`sign`] makes
//!   it, and [`VerifierBuilder`] configures the verifier.
//! * What every timestamped scheme shares: the replay window, [`Tolerance`],
//!   checked the same way in both directions; and the constant-time comparison
//!   of an expected signature with a candidate.
//!
//! A second scheme is one file beside `stripe.rs` (its type, its
//! [`SignatureScheme`] impl, its builder), using [`Tolerance::check`] for
//! its timestamp and `constant_time::eq` for its comparison, plus its
//! `mod`/`pub use` lines here.
//!
//!
//! ```
//! use payhook::{sign, FixedClock, Secret, Verifier};
//!
//! let secret = Secret::new("whsec_test_secret").unwrap();
//! let body = br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}"#;
//! let header = sign(body, &secret, 1732264800);
//! assert_eq!(
//!     header,
//!     "t=1732264800,v1=47e6632c169b959135c86d19df2cb565cdbea26c53beb45123d38a1437d37287"
//! );
//!
//! let verifier = Verifier::builder()
//!     .secret("whsec_test_secret")
//!     .clock(FixedClock::new(1732264800 + 30))
//!     .build()
//!     .unwrap();
//! assert!(verifier.verify_value(header.as_bytes(), body).is_ok());
//! ```

mod builder;
mod constant_time;
mod standard;
mod stripe;
mod tolerance;

use crate::error::Error;
use crate::headers::Headers;

pub use builder::VerifierBuilder;
#[cfg(feature = "ed25519")]
pub(crate) use standard::{decode_key, public_key_of, signed_content, PUBLIC_KEY_PREFIX, SIGNING_KEY_PREFIX};
pub(crate) use standard::{hmac_of, secret_of, SECRET_PREFIX};
pub use standard::{
    StandardWebhooks, StandardWebhooksBuilder, MAX_SIGNATURE_ITEMS, WEBHOOK_ID, WEBHOOK_SIGNATURE,
    WEBHOOK_TIMESTAMP,
};
pub use stripe::{sign, Signature, Verifier, DEFAULT_HEADER, MAX_V1_SIGNATURES};
pub use tolerance::{Tolerance, DEFAULT_TOLERANCE};

/// A signature format: something that decides from the request headers and the
/// raw body whether a delivery is genuine.
///
/// The receiver pipeline holds its scheme as `Arc<dyn SignatureScheme>`, so a second
/// format can be added without touching the framework adapters. [`Verifier`] is the
/// built-in implementation.
pub trait SignatureScheme: Send + Sync + 'static {
    /// Checks the delivery. `body` is the raw request body, exactly as received.
    ///
    /// # Errors
    /// The [`Error`] that says what failed (missing or malformed header, no matching
    /// signature, timestamp outside the tolerance).
    fn verify(&self, headers: &dyn Headers, body: &[u8]) -> Result<(), Error>;

    /// The event id of a delivery [`verify`](Self::verify) accepted, when the
    /// scheme carries it outside the body (Standard Webhooks' `webhook-id`
    /// header). The receiver and the inbox then deduplicate by it, and
    /// [`Event::id`](crate::Event::id) returns it; the body's own `id`, if any,
    /// is ignored. The default, `None`, takes the id from the body.
    fn event_id<'h>(&self, headers: &'h dyn Headers) -> Option<&'h str> {
        let _ = headers;
        None
    }
}
