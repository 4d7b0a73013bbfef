//! Standard Webhooks deliveries: signing with a `whsec_` secret (`v1`) or a
//! `whsk_` Ed25519 signing key (`v1a`, feature `ed25519`), the three headers,
//! and fresh keys.

use std::fmt;

use base64::Engine as _;
use bytes::Bytes;
#[cfg(feature = "testing")]
use http_body_util::Full;

use super::unix_now;
use crate::error::ConfigError;
use crate::secret::Secret;
#[cfg(feature = "ed25519")]
use crate::signature::{decode_key, signed_content, PUBLIC_KEY_PREFIX, SIGNING_KEY_PREFIX};
use crate::signature::{hmac_of, secret_of, SECRET_PREFIX, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// One Standard Webhooks signing key: a `whsec_` secret, which signs `v1`
/// (HMAC-SHA256), or with feature `ed25519` a `whsk_` signing key, which
/// signs `v1a` (Ed25519). `Debug` never shows the key.
///
/// A `whsk_` key is the standard base64 of the 32-byte Ed25519 seed, or of
/// the 64-byte seed followed by its public key (the form some libraries
/// export); its public key, for the receiver, is [`standard_public_key`].
///
/// ```
/// use payhook::sender::StandardSigner;
///
/// let signer = StandardSigner::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
/// let signature = signer.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
/// assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
/// ```
#[derive(Clone)]
pub struct StandardSigner {
    key: SignerKey,
}

#[derive(Clone)]
enum SignerKey {
    Hmac(Secret),
    #[cfg(feature = "ed25519")]
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

impl fmt::Debug for StandardSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let version = match self.key {
            SignerKey::Hmac(_) => "v1",
            #[cfg(feature = "ed25519")]
            SignerKey::Ed25519(_) => "v1a",
        };
        f.debug_struct("StandardSigner")
            .field("version", &version)
            .finish_non_exhaustive()
    }
}

/// The error for a signing key that cannot be used.
fn invalid_signing_key(reason: &'static str) -> ConfigError {
    ConfigError::InvalidKey {
        kind: "signing key",
        position: 1,
        reason,
    }
}

impl StandardSigner {
    /// A signer for `key`, chosen by its prefix: `whsec_…` or `whsk_…`.
    ///
    /// # Errors
    /// [`ConfigError::InvalidKey`] (`signing key #1 …`) for a key with
    /// neither prefix, one that is not base64 or has the wrong length, or a
    /// `whsk_` key without feature `ed25519`.
    pub fn new(key: &str) -> Result<Self, ConfigError> {
        if key.starts_with(SECRET_PREFIX) {
            let secret = secret_of(key).map_err(invalid_signing_key)?;
            return Ok(Self {
                key: SignerKey::Hmac(secret),
            });
        }
        #[cfg(feature = "ed25519")]
        if key.starts_with(SIGNING_KEY_PREFIX) {
            return Ok(Self {
                key: SignerKey::Ed25519(Box::new(signing_key_of(key)?)),
            });
        }
        #[cfg(not(feature = "ed25519"))]
        if key.starts_with("whsk_") {
            return Err(invalid_signing_key(
                "is a whsk_ key, which needs the ed25519 feature",
            ));
        }
        Err(invalid_signing_key("does not start with whsec_ or whsk_"))
    }

    /// The signature item for a delivery: `v1,<base64>` or `v1a,<base64>` over
    /// `{webhook_id}.{timestamp}.{body}`.
    pub fn sign(&self, webhook_id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut t = itoa::Buffer::new();
        let t = t.format(timestamp).as_bytes();
        match &self.key {
            SignerKey::Hmac(secret) => {
                let mac = hmac_of(secret, webhook_id.as_bytes(), t, body);
                format!("v1,{}", BASE64.encode(mac))
            }
            #[cfg(feature = "ed25519")]
            SignerKey::Ed25519(key) => {
                use ed25519_dalek::Signer as _;
                let signature = key.sign(&signed_content(webhook_id.as_bytes(), t, body));
                format!("v1a,{}", BASE64.encode(signature.to_bytes()))
            }
        }
    }
}

/// A `whsk_` key: the 32-byte seed, or the seed and its public key (64 bytes).
#[cfg(feature = "ed25519")]
fn signing_key_of(key: &str) -> Result<ed25519_dalek::SigningKey, ConfigError> {
    let bytes = decode_key(key, SIGNING_KEY_PREFIX).map_err(invalid_signing_key)?;
    match bytes.len() {
        32 | 64 => {}
        _ => return Err(invalid_signing_key("does not decode to 32 or 64 bytes")),
    }
    let mut seed = [0u8; 32];
    seed.copy_from_slice(&bytes[..32]);
    let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
    if bytes.len() == 64 && signing.verifying_key().as_bytes()[..] != bytes[32..] {
        return Err(invalid_signing_key(
            "has a public half that does not match its seed",
        ));
    }
    Ok(signing)
}

/// The `whpk_` public key of a `whsk_` signing key: what a receiver
/// configures with [`StandardWebhooksBuilder::public_key`](crate::signature::StandardWebhooksBuilder::public_key).
///
/// # Errors
/// [`ConfigError::InvalidKey`] (`signing key #1 …`) for a key that is not a
/// `whsk_` key.
#[cfg(feature = "ed25519")]
#[cfg_attr(docsrs, doc(cfg(feature = "ed25519")))]
pub fn standard_public_key(signing_key: &str) -> Result<String, ConfigError> {
    if !signing_key.starts_with(SIGNING_KEY_PREFIX) {
        return Err(invalid_signing_key("does not start with whsk_"));
    }
    let signing = signing_key_of(signing_key)?;
    Ok(format!(
        "{PUBLIC_KEY_PREFIX}{}",
        BASE64.encode(signing.verifying_key().as_bytes())
    ))
}

fn random_bytes<const N: usize>() -> Result<[u8; N], ConfigError> {
    let mut bytes = [0u8; N];
    // A key must come from the OS's random source: no fallback.
    getrandom::fill(&mut bytes)
        .map_err(|_| ConfigError::InvalidSetting("the system's random source failed"))?;
    Ok(bytes)
}

/// A fresh `whsec_` secret: 32 random bytes, base64.
///
/// # Errors
/// [`ConfigError::InvalidSetting`] if the system's random source fails.
pub fn generate_standard_secret() -> Result<String, ConfigError> {
    Ok(format!("{SECRET_PREFIX}{}", BASE64.encode(random_bytes::<32>()?)))
}

/// A fresh Ed25519 key pair: the `whsk_` signing key (its 32-byte seed) for
/// the sender, and the `whpk_` public key for the receiver.
///
/// ```
/// use payhook::sender::{generate_standard_keypair, standard_public_key};
///
/// let (signing_key, public_key) = generate_standard_keypair().unwrap();
/// assert!(signing_key.starts_with("whsk_") && public_key.starts_with("whpk_"));
/// assert_eq!(standard_public_key(&signing_key).unwrap(), public_key);
/// ```
///
/// # Errors
/// [`ConfigError::InvalidSetting`] if the system's random source fails.
#[cfg(feature = "ed25519")]
#[cfg_attr(docsrs, doc(cfg(feature = "ed25519")))]
pub fn generate_standard_keypair() -> Result<(String, String), ConfigError> {
    let seed = random_bytes::<32>()?;
    let signing = format!("{SIGNING_KEY_PREFIX}{}", BASE64.encode(seed));
    let public = standard_public_key(&signing)?;
    Ok((signing, public))
}

/// A fresh, unique Standard Webhooks message id: `msg_…`.
pub fn unique_message_id() -> String {
    let random = crate::store::ClaimToken::random().as_u128();
    format!("msg_{random:032x}")
}

/// A body and the three Standard Webhooks headers that make it a genuine
/// delivery.
///
/// ```
/// use payhook::sender::{EventBuilder, StandardDelivery};
///
/// let body = EventBuilder::payment_intent_succeeded().to_json();
/// let delivery = StandardDelivery::now(body, "msg_1", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
/// assert!(delivery.webhook_signature.starts_with("v1,"));
/// let headers = delivery.headers();
/// assert_eq!(headers["webhook-id"], "msg_1");
/// ```
#[derive(Debug, Clone)]
pub struct StandardDelivery {
    /// The raw body.
    pub body: Bytes,
    /// The `webhook-id` header: the message id, the event id receivers dedupe by.
    pub webhook_id: String,
    /// The `webhook-timestamp` header, unix seconds.
    pub webhook_timestamp: u64,
    /// The `webhook-signature` header: one space-separated item per signer.
    pub webhook_signature: String,
}

impl StandardDelivery {
    /// Signs `body` as message `webhook_id` at `timestamp` (unix seconds) with
    /// one key (`whsec_…` or `whsk_…`).
    ///
    /// # Errors
    /// The [`ConfigError`] of [`StandardSigner::new`].
    pub fn at(
        body: impl Into<Bytes>,
        webhook_id: impl Into<String>,
        key: &str,
        timestamp: u64,
    ) -> Result<Self, ConfigError> {
        let signer = StandardSigner::new(key)?;
        Ok(Self::signed_by(body, webhook_id, &[signer], timestamp))
    }

    /// The same, signed now.
    ///
    /// # Errors
    /// The [`ConfigError`] of [`StandardSigner::new`].
    pub fn now(
        body: impl Into<Bytes>,
        webhook_id: impl Into<String>,
        key: &str,
    ) -> Result<Self, ConfigError> {
        Self::at(body, webhook_id, key, unix_now())
    }

    /// Signs with every signer, their items space-separated in the order
    /// given: what a sender does during a key rotation.
    pub fn signed_by(
        body: impl Into<Bytes>,
        webhook_id: impl Into<String>,
        signers: &[StandardSigner],
        timestamp: u64,
    ) -> Self {
        let body = body.into();
        let webhook_id = webhook_id.into();
        let webhook_signature = signers
            .iter()
            .map(|signer| signer.sign(&webhook_id, timestamp, &body))
            .collect::<Vec<_>>()
            .join(" ");
        Self {
            body,
            webhook_id,
            webhook_timestamp: timestamp,
            webhook_signature,
        }
    }

    /// The three headers (a header whose value is not a valid header value,
    /// such as an id with a line break, is left out).
    pub fn headers(&self) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        let mut t = itoa::Buffer::new();
        for (name, value) in [
            (WEBHOOK_ID, self.webhook_id.as_str()),
            (WEBHOOK_TIMESTAMP, t.format(self.webhook_timestamp)),
            (WEBHOOK_SIGNATURE, self.webhook_signature.as_str()),
        ] {
            if let Ok(value) = http::HeaderValue::from_str(value) {
                headers.insert(http::HeaderName::from_static(name), value);
            }
        }
        headers
    }

    /// A `POST` request to `uri` with the body, `content-type:
    /// application/json` and the three headers; see
    /// [`SignedDelivery::to_request`](super::SignedDelivery::to_request).
    #[cfg(feature = "testing")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn to_request(&self, uri: &str) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::new(Full::new(self.body.clone()));
        *request.method_mut() = http::Method::POST;
        if let Ok(uri) = uri.parse() {
            *request.uri_mut() = uri;
        }
        let headers = request.headers_mut();
        *headers = self.headers();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        request
    }
}
