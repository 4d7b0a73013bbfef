//! A later copy of a stored event compared with it, by one rule whether the
//! copy is a duplicate delivery or the service's events list listing the
//! event again:
//!
//! * a copy whose content differs (another `type` or `data` under the same
//!   id, [`same_content`]) is counted in
//!   `payhook_inbox_differing_duplicates_total`, logged at `WARN` ("differs")
//!   and recorded as the event's differing copy; the stored body stays the
//!   event's (its handler got it). A listed copy already recorded with the
//!   same content is not counted again: every pass lists its overlap anew.
//! * a delivery of an event the reconciler stored first (no delivery had
//!   arrived then) is recorded on the event (`delivered_at`), so that the
//!   operator's tools say "reconciled at T, delivered at T2" instead of "no
//!   delivery arrived".

use payhook_core::event::same_content;

use crate::database::Database;
use crate::error::payhook_escape;
use crate::intake::duplicates::DuplicatesRecord;
use crate::metrics as m;
use crate::model::{Source, StoredCopy};

/// A later copy of a stored event: its id, body, when it came, and from
/// where.
pub(crate) struct LaterCopy<'a> {
    pub(crate) event_id: &'a str,
    pub(crate) body: &'a str,
    pub(crate) at: i64,
    pub(crate) source: Source,
}

/// Compares `copy` with the stored event and records what it says: a
/// delivery of a reconciled event, a differing content.
pub(crate) async fn compare<DB: DuplicatesRecord>(
    db: &Database<DB>,
    namespace: &str,
    copy: &LaterCopy<'_>,
    stored: &StoredCopy,
) -> Result<(), sqlx::Error> {
    if copy.source == Source::Delivered
        && stored.source == Source::Reconciled
        && stored.delivered_at.is_none()
    {
        db.write(DB::mark_delivered(db, namespace, copy.event_id, copy.at))
            .await?;
        tracing::info!(
            target: "payhook",
            event_id = %payhook_escape(copy.event_id),
            "a delivery arrived for an event the reconciler had stored from the service's events list; \
             acknowledged as a duplicate, and recorded on the event"
        );
    }
    if same_content(&stored.body, copy.body) {
        return Ok(());
    }
    if copy.source == Source::Reconciled {
        let recorded = db
            .bounded(DB::differing_copies(db, namespace, copy.event_id))
            .await?;
        if recorded.is_some_and(|recorded| same_content(&recorded.last_body, copy.body)) {
            return Ok(()); // listed again by a later pass: recorded already
        }
    }
    m::differing_duplicate(namespace.to_owned());
    match copy.source {
        Source::Delivered => tracing::warn!(
            target: "payhook",
            event_id = %payhook_escape(copy.event_id),
            "duplicate delivery with a different body: its type or data differs from the stored event's; \
             acknowledged, and the first body kept"
        ),
        Source::Reconciled => tracing::warn!(
            target: "payhook",
            event_id = %payhook_escape(copy.event_id),
            "the service's events list carries a copy that differs from the stored event: its type or data \
             differs; the stored body kept"
        ),
    }
    db.write(DB::record_differing(
        db,
        namespace,
        copy.event_id,
        copy.at,
        copy.body,
    ))
    .await
}
