//! The keys that sign one endpoint's deliveries, by scheme: drawn when the
//! endpoint is registered or its secret rolled, shown once in that reply.
//!
//! * The service's scheme: one `whsec_` secret, used as is.
//! * Standard Webhooks: a `whsec_` secret (base64 of 32 random bytes), which
//!   signs `v1`, and an Ed25519 pair, whose `whsk_` signing key signs `v1a`
//!   and whose `whpk_` public key is shown for the receiver. Every delivery
//!   carries both items, so a receiver configured with either key verifies it.

use payhook_core::sender::{generate_standard_keypair, generate_standard_secret, StandardSigner};
use payhook_core::Secret;

use crate::config::DeliveryScheme;
use crate::ids;

/// What signs an endpoint's deliveries at one time (a roll keeps the previous
/// ones beside the new for an overlap). `Debug` never shows a key.
#[derive(Clone)]
pub(crate) enum Signers {
    /// The service's `t=…,v1=…` with this secret.
    Service(Secret),
    /// Standard Webhooks: the `v1` signer, then the `v1a` signer (boxed: the
    /// keys are shared through the endpoint's `Arc` and rarely made).
    Standard(Box<[StandardSigner; 2]>),
}

impl std::fmt::Debug for Signers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signers(<redacted>)")
    }
}

/// The keys an endpoint's create or roll reply shows: what its receiver is
/// configured with.
#[derive(Clone)]
pub(crate) struct ShownKeys {
    /// The `whsec_` secret.
    pub secret: String,
    /// The `whpk_` public key (Standard Webhooks only).
    pub public_key: Option<String>,
}

impl std::fmt::Debug for ShownKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShownKeys")
            .field("secret", &"<redacted>")
            .field("public_key", &self.public_key)
            .finish()
    }
}

/// Fresh keys for `scheme`, with `secret` as the `whsec_` secret when given
/// (already checked, see [`check_secret`]). `None` only if the operating
/// system's random generator fails.
pub(crate) fn new_keys(scheme: DeliveryScheme, secret: Option<&str>) -> Option<(Signers, ShownKeys)> {
    match scheme {
        DeliveryScheme::Service => {
            let secret = secret.map_or_else(ids::new_secret, str::to_owned);
            let signers = Signers::Service(Secret::new(&secret).ok()?);
            Some((
                signers,
                ShownKeys {
                    secret,
                    public_key: None,
                },
            ))
        }
        DeliveryScheme::StandardWebhooks => {
            let secret = match secret {
                Some(secret) => secret.to_owned(),
                None => generate_standard_secret().ok()?,
            };
            let (signing_key, public_key) = generate_standard_keypair().ok()?;
            let signers = Signers::Standard(Box::new([
                StandardSigner::new(&secret).ok()?,
                StandardSigner::new(&signing_key).ok()?,
            ]));
            Some((
                signers,
                ShownKeys {
                    secret,
                    public_key: Some(public_key),
                },
            ))
        }
    }
}

/// Checks a secret to fix for `scheme`; `Err` says why it is refused,
/// without quoting it.
pub(crate) fn check_secret(scheme: DeliveryScheme, secret: &str) -> Result<(), &'static str> {
    match scheme {
        DeliveryScheme::Service => crate::check_endpoint_secret(secret),
        DeliveryScheme::StandardWebhooks => match StandardSigner::new(secret) {
            Ok(_) if secret.starts_with("whsec_") => Ok(()),
            _ => Err(
                "a Standard Webhooks signing secret must be whsec_ followed by the base64 of 24 to 64 bytes",
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use payhook_core::signature::StandardWebhooks;

    use super::*;

    #[test]
    fn standard_keys_are_a_secret_and_a_public_key_that_verify_both_items() {
        let (signers, shown) = new_keys(DeliveryScheme::StandardWebhooks, None).expect("random keys");
        assert!(shown.secret.starts_with("whsec_"));
        let public_key = shown.public_key.clone().expect("a public key");
        assert!(public_key.starts_with("whpk_"));
        let Signers::Standard(signers) = signers else {
            panic!("not standard signers")
        };
        let [v1, v1a] = &*signers;
        let t = payhook_core::sender::unix_now();
        for (item, scheme) in [
            (
                v1.sign("msg_1", t, b"{}"),
                StandardWebhooks::builder().secret(shown.secret.clone()),
            ),
            (
                v1a.sign("msg_1", t, b"{}"),
                StandardWebhooks::builder().public_key(public_key),
            ),
        ] {
            let mut headers = http::HeaderMap::new();
            headers.insert("webhook-id", http::HeaderValue::from_static("msg_1"));
            headers.insert("webhook-timestamp", t.to_string().parse().expect("digits"));
            headers.insert("webhook-signature", item.parse().expect("ASCII"));
            let scheme = scheme.build().expect("valid keys");
            assert_eq!(scheme.verify_headers(&headers, b"{}"), Ok(()), "{item}");
        }
        assert!(!format!("{shown:?}").contains(&shown.secret));
    }

    #[test]
    fn a_fixed_secret_is_checked_for_its_scheme() {
        assert!(check_secret(DeliveryScheme::Service, "whsec_local_test").is_ok());
        assert!(check_secret(DeliveryScheme::StandardWebhooks, "whsec_local_test").is_err());
        assert!(check_secret(
            DeliveryScheme::StandardWebhooks,
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        )
        .is_ok());
        let why = check_secret(DeliveryScheme::StandardWebhooks, "whsec_local!test").unwrap_err();
        assert!(!why.contains("local"), "{why}");
    }
}
