//! Reading the raw body under the receiver's limit.

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::HeaderMap;
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use payhook_core::{Error, Receiver};

/// The raw request body of a verified delivery, exactly as signed.
///
/// [`WebhookService`](crate::WebhookService) puts it in the request extensions
/// next to the [`Event`](payhook_core::Event), for handlers that parse the body
/// into their own type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawBody(pub Bytes);

/// Collects `body`, reading at most `limit` bytes of it.
///
/// A declared length over the limit is refused before anything is read; a body
/// without one (chunked) is read only until it passes the limit.
pub(crate) async fn read<B>(headers: &HeaderMap, body: B, receiver: &Receiver) -> Result<Bytes, Error>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let limit = receiver.body_limit();
    let too_large = || Error::BodyTooLarge { limit };
    receiver.check_content_length(headers.get(CONTENT_LENGTH).map(|value| value.as_bytes()))?;
    // A body type may know its length without a header (a full in-memory body).
    if body.size_hint().lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(too_large());
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<LengthLimitError>() => Err(too_large()),
        Err(err) => Err(Error::BodyRead(err.to_string())),
    }
}
