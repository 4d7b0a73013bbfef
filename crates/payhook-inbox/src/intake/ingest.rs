//! One verified delivery to a row: the columns it is stored with, its wait
//! for the intake writer's commit, and its reply.

use payhook_core::{Error, Event, Reply};
use tokio::sync::oneshot;

use crate::clock::now_ms;
use crate::error::payhook_escape;
use crate::inner::{Inner, Pending};
use crate::intake::writer::TIMED_OUT;
use crate::metrics as m;
use crate::model::{NewRow, MAX_ID_BYTES};

pub(crate) async fn store<DB: sqlx::Database>(inner: &Inner<DB>, row: NewRow) -> Reply {
    if let Some(file) = &inner.file {
        if let Err(reason) = file.check() {
            tracing::error!(target: "payhook", status = 503, reason, "delivery not stored: the SQLite file the inbox opened is gone");
            return unavailable(inner, reason);
        }
    }
    let (done, answer) = oneshot::channel();
    let event_id = row.event_id.clone();
    // One deadline for the whole delivery: the wait for the writer, the
    // batch's statement, its row-by-row retry and the commit.
    let deadline = tokio::time::Instant::now() + inner.db.timeout;
    let stored = tokio::time::timeout_at(deadline, async {
        if inner.ingest.send(Pending { row, deadline, done }).await.is_err() {
            return Err("the inbox writer has stopped");
        }
        answer.await.unwrap_or(Err("the inbox writer has stopped"))
    })
    .await
    .unwrap_or(Err(TIMED_OUT));
    match stored {
        Ok(new) => {
            let namespace = inner.config.namespace.clone();
            if new {
                m::ingested(namespace);
                inner.arrived.notify_one();
                tracing::debug!(target: "payhook", event_id = %payhook_escape(&event_id), "event stored in the inbox");
            } else {
                m::duplicate(namespace);
                tracing::info!(target: "payhook", event_id = %payhook_escape(&event_id), "duplicate delivery acknowledged; the event is already in the inbox");
            }
            Reply::received()
        }
        Err(kind) => unavailable(inner, kind),
    }
}

/// The `503` reply, counted: `kind` is one of a few fixed phrases, never a
/// database's own message.
fn unavailable<DB: sqlx::Database>(inner: &Inner<DB>, kind: &str) -> Reply {
    m::database_error(inner.config.namespace.clone(), m::INGEST);
    let error = Error::InboxUnavailable(kind.to_owned());
    tracing::error!(target: "payhook", status = 503, reason = %error, "delivery not stored");
    Reply::error(&error)
}

/// The columns of a verified event. The order key is the event's `created`
/// (seconds), or the time of arrival when the event has none. What one of the
/// backends could not store is refused here, for every backend alike.
pub(crate) fn row_of(event: &Event, body: &[u8]) -> Result<NewRow, Error> {
    let received_at = now_ms();
    let body = std::str::from_utf8(body)
        .map_err(|_| Error::InvalidPayload("body is not UTF-8".to_owned()))?
        .to_owned();
    let intent_id = event.payment_intent_id().map(str::to_owned);
    for (field, value) in [
        ("id", Some(event.id())),
        ("type", Some(event.event_type())),
        ("data.object.id", intent_id.as_deref()),
    ] {
        let Some(value) = value else { continue };
        if value.len() > MAX_ID_BYTES {
            return Err(Error::InvalidPayload(format!(
                "{field} is longer than {MAX_ID_BYTES} bytes"
            )));
        }
        if value.contains('\0') {
            return Err(Error::InvalidPayload(format!("{field} contains a NUL character")));
        }
    }
    // Raw NUL bytes are not valid JSON; an escaped one (\u0000) elsewhere in
    // the body is stored as the six characters it is written with.
    if body.contains('\0') {
        return Err(Error::InvalidPayload("body contains a NUL byte".to_owned()));
    }
    Ok(NewRow {
        event_id: event.id().to_owned(),
        event_type: event.event_type().to_owned(),
        intent_id,
        created: event.created().unwrap_or(received_at / 1000),
        body,
        received_at,
        trace_context: None,
    })
}
