//! Storing what the events list has and the inbox lacks: the part of a pass
//! that [`Admin`](crate::admin::Admin) runs too, for `payhook reconcile`.

use crate::database::notify::Notify;
use crate::database::Database;
use crate::error::payhook_escape;
use crate::intake::ingest::row_of;
use crate::intake::insert::Intake;
use crate::model::{NewRow, RefusedRow, Source};
use crate::reconcile::record::ReconcilerRecord;

use super::ListedEvent;

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
            row_of(&listed.event, listed.body.as_bytes()).map_err(|err| {
                StoreError::Unstorable(format!(
                    "event {}: {}",
                    payhook_escape(listed.event.id()),
                    payhook_core::untrusted::Untrusted::message(&err.to_string())
                ))
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
        match row_of(&listed.event, listed.body.as_bytes()) {
            Ok(row) => rows.push(row),
            Err(err) => refused.push(RefusedRow::new(
                Some(listed.event.id()),
                &format!(
                    "cannot be stored: {}",
                    payhook_core::untrusted::Untrusted::message(&err.to_string())
                ),
                listed.body.len(),
            )),
        }
    }
    (rows, refused)
}
