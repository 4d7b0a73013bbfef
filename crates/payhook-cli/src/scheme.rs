//! Which signature format a command speaks: `--scheme service` (the default)
//! or `--scheme standard`.

use clap::ValueEnum;

/// The signature format of `sign`, `verify` and `emulate`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Scheme {
    /// The service's own format: one `x-service-signature: t=…,v1=…` header
    /// (HMAC-SHA256 in hex), the event id inside the body.
    #[default]
    Service,
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp` and
    /// `webhook-signature: v1,…` (HMAC-SHA256, `whsec_` secrets) or `v1a,…`
    /// (Ed25519, `whsk_` signing and `whpk_` public keys); the event id is the
    /// `webhook-id` header.
    Standard,
}
