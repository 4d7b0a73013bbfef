//! The request body, read through the core's [`BodyIntake`].

use std::task::Poll;

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::Body;
use payhook_core::adapter::BodyIntake;
use payhook_core::{Receiver, Reply};

/// The raw request body of a verified delivery, exactly as signed.
///
/// [`WebhookService`](crate::WebhookService) puts it in the request extensions
/// next to the [`Event`](payhook_core::Event), for handlers that parse the body
/// into their own type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawBody(pub Bytes);

/// Collects `body` under the receiver's limit and body timeout; the refusal is
/// the reply to send.
pub(crate) async fn read<B>(headers: &HeaderMap, body: B, receiver: &Receiver) -> Result<Bytes, Reply>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let intake = BodyIntake::new(receiver, headers)?;
    // A body type may know its length without a header (a full in-memory body).
    intake.refuse_over(body.size_hint().lower())?;
    let mut body = std::pin::pin!(body);
    intake
        .read(|cx| loop {
            return match body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(mut data) => Poll::Ready(Some(Ok(data.copy_to_bytes(data.remaining())))),
                    Err(_trailers) => continue,
                },
                Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(err.into()))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        })
        .await
}
