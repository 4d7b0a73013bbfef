//! Reading one request body under the receiver's size limit and body timeout.

use std::fmt;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::error::Error;
use crate::headers::{HeaderLookup, Headers};
use crate::receiver::Receiver;
use crate::reject::{refusal, rejected};
use crate::reply::Reply;

/// Smaller than most limits, so a `Content-Length` alone cannot make every open
/// connection allocate a full limit's worth up front.
const MAX_INITIAL_CAPACITY: usize = 64 * 1024;

/// Reads one request body under the receiver's size limit and body timeout.
///
/// Made by [`BodyIntake::new`], which refuses a declared `Content-Length` over the
/// limit before anything is read; then either [`read`](Self::read) the whole
/// body, or [`push`](Self::push) chunks and [`finish`](Self::finish) yourself
/// (under your own timer of [`timeout`](Self::timeout)).
#[derive(Debug)]
pub struct BodyIntake {
    limit: usize,
    timeout: Duration,
    body: BytesMut,
}

impl BodyIntake {
    /// Starts reading a body for `receiver`; `headers` are the request's.
    ///
    /// # Errors
    /// The `413` reply (logged, closing the connection) when `Content-Length`
    /// declares more than the limit. A `Content-Length` that is not a number is
    /// left to the framework (which rejects it); the limit is then enforced while
    /// reading.
    pub fn new(receiver: &Receiver, headers: &dyn Headers) -> Result<Self, Reply> {
        let limit = receiver.body_limit();
        let declared = match headers.lookup("content-length") {
            HeaderLookup::Once(value) => std::str::from_utf8(value)
                .ok()
                .and_then(|value| value.trim().parse::<u64>().ok()),
            HeaderLookup::Missing | HeaderLookup::Repeated => None,
        };
        let intake = Self {
            limit,
            timeout: receiver.body_timeout(),
            body: BytesMut::new(),
        };
        let Some(declared) = declared else {
            return Ok(intake);
        };
        intake.refuse_over(declared)?;
        let capacity = usize::try_from(declared)
            .unwrap_or(usize::MAX)
            .min(MAX_INITIAL_CAPACITY);
        Ok(Self {
            body: BytesMut::with_capacity(capacity),
            ..intake
        })
    }

    /// Refuses the body when at least `length` bytes of it are known to come
    /// (for a body type that knows its size without a header).
    ///
    /// # Errors
    /// The `413` reply, logged and closing the connection.
    pub fn refuse_over(&self, length: u64) -> Result<(), Reply> {
        if length > u64::try_from(self.limit).unwrap_or(u64::MAX) {
            return Err(refusal(Error::BodyTooLarge { limit: self.limit }));
        }
        Ok(())
    }

    /// How long the whole body may take to arrive (the receiver's body timeout).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Adds a chunk of the body.
    ///
    /// # Errors
    /// The `413` reply (logged, closing the connection) as soon as the body
    /// passes the limit; the chunk is not kept.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), Reply> {
        if chunk.len() > self.limit.saturating_sub(self.body.len()) {
            return Err(refusal(Error::BodyTooLarge { limit: self.limit }));
        }
        self.body.extend_from_slice(chunk);
        Ok(())
    }

    /// The body read so far, as one buffer.
    pub fn finish(self) -> Bytes {
        self.body.freeze()
    }

    /// Reads the whole body: calls `poll_chunk` (the framework's "next chunk",
    /// `None` at the end) until the body ends, passes the limit, fails, or the
    /// [timeout](Self::timeout) runs out. Needs a tokio runtime (the timer).
    ///
    /// # Errors
    /// The reply to send, already logged: `413` over the limit, `408` when the
    /// timeout ran out (both closing the connection), `400` when the framework
    /// reported a read error (the client went away, a corrupt chunk).
    pub async fn read<E: fmt::Display>(
        mut self,
        mut poll_chunk: impl FnMut(&mut Context<'_>) -> Poll<Option<Result<Bytes, E>>>,
    ) -> Result<Bytes, Reply> {
        let timeout = self.timeout;
        let body = &mut self;
        let read_all = std::future::poll_fn(|cx| loop {
            match poll_chunk(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Err(reply) = body.push(&chunk) {
                        return Poll::Ready(Err(reply));
                    }
                }
                Poll::Ready(Some(Err(err))) => {
                    return Poll::Ready(Err(rejected(Error::BodyRead(err.to_string()))))
                }
            }
        });
        match tokio::time::timeout(timeout, read_all).await {
            Ok(Ok(())) => Ok(self.finish()),
            Ok(Err(reply)) => Err(reply),
            Err(_elapsed) => Err(refusal(Error::BodyTimeout(timeout))),
        }
    }
}
