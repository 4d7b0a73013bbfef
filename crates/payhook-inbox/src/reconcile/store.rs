//! Storing what the events list has and the inbox lacks: the part of a pass
//! that [`Admin`](crate::admin::Admin) runs too, for `payhook reconcile`.

use crate::database::notify::Notify;
use crate::database::Database;
use crate::error::payhook_escape;
use crate::intake::ingest::row_of;
use crate::intake::insert::Intake;
use crate::model::{NewRow, RefusedRow, Source};
use crate::reconcile::record::ReconcilerRecord;

use payhook_api::MAX_REFUSED_ID_BYTES;

use super::{ListedEvent, RefusedEvent};

/// The listed events the namespace does not hold, in list order.
pub(crate) async fn missing<'e, DB: ReconcilerRecord + Intake + Notify>(
    db: &Database<DB>,
    namespace: &str,
    events: &'e [ListedEvent],
) -> Result<Vec<&'e ListedEvent>, sqlx::Error> {
    let ids: Vec<&str> = events.iter().map(|listed| listed.event.id()).collect();
    let present = db.bounded(DB::present_ids(db, namespace, &ids)).await?;
    Ok(events
        .iter()
        .filter(|listed| !present.contains(listed.event.id()))
        .collect())
}

/// Why listed events could not be stored.
#[derive(Debug)]
pub(crate) enum StoreError {
    /// An event the inbox cannot hold (too long an id, a NUL…): none of the
    /// batch was stored.
    Unstorable(String),
    /// The database failed.
    Database(sqlx::Error),
}

/// Stores `events` as reconciled, in one statement: all of them checked
/// first, so a batch with one that cannot be stored stores none. For each,
/// whether it was new (a delivery may have stored it meanwhile).
pub(crate) async fn store<DB: ReconcilerRecord + Intake + Notify>(
    db: &Database<DB>,
    namespace: &str,
    events: &[&ListedEvent],
) -> Result<Vec<(NewRow, bool)>, StoreError> {
    let rows: Vec<NewRow> = events
        .iter()
        .map(|listed| {
            row_or_reason(listed).map_err(|reason| {
                StoreError::Unstorable(format!("event {}: {reason}", payhook_escape(listed.event.id())))
            })
        })
        .collect::<Result<_, _>>()?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let refs: Vec<&NewRow> = rows.iter().collect();
    let new = db
        .write(DB::insert(db, namespace, &refs, Source::Reconciled))
        .await
        .map_err(StoreError::Database)?;
    Ok(rows.into_iter().zip(new).collect())
}

/// The rows of `events`, and the events that cannot be stored (too long an
/// id, a NUL…) as refused rows: one such event holds back none.
pub(crate) fn rows_of(events: &[ListedEvent]) -> (Vec<NewRow>, Vec<RefusedRow>) {
    let mut rows = Vec::with_capacity(events.len());
    let mut refused = Vec::new();
    for listed in events {
        match row_or_reason(listed) {
            Ok(row) => rows.push(row),
            Err(reason) => refused.push(RefusedRow::new(
                Some(listed.event.id()),
                &reason,
                listed.body.len(),
            )),
        }
    }
    (rows, refused)
}

/// Of `events`, the ones the inbox can store, and apart the ones it cannot
/// as refused events (`position`: the place in `events`, from 1).
pub(crate) fn split_storable<'e>(events: &[&'e ListedEvent]) -> (Vec<&'e ListedEvent>, Vec<RefusedEvent>) {
    let mut storable = Vec::with_capacity(events.len());
    let mut refused = Vec::new();
    for (index, listed) in events.iter().enumerate() {
        match row_or_reason(listed) {
            Ok(_) => storable.push(*listed),
            Err(reason) => refused.push(RefusedEvent {
                id: Some(payhook_core::untrusted::cut(
                    listed.event.id(),
                    MAX_REFUSED_ID_BYTES,
                )),
                reason,
                position: index + 1,
                bytes: listed.body.len(),
            }),
        }
    }
    (storable, refused)
}

/// The row of `listed`, or why it cannot be stored (`cannot be stored: …`,
/// escaped).
fn row_or_reason(listed: &ListedEvent) -> Result<NewRow, String> {
    row_of(&listed.event, listed.body.as_bytes()).map_err(|err| {
        format!(
            "cannot be stored: {}",
            payhook_core::untrusted::Untrusted::message(&err.to_string())
        )
    })
}
