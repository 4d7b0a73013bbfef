//! The bulk actions as `Admin` runs them: the count first, then the run over what was
//! counted, in short batches.

use std::time::Instant;

use crate::actions::bulk::Bulk;
use crate::actions::bulk::{selected_states, Position, Scope};
use crate::actions::operations::{park_all, Operations};
use crate::actions::purge::Pace;
use crate::actions::selection::{
    BulkAction, BulkCount, BulkReport, Selection, BULK_COUNT_LIMIT, MAX_BULK_IDS,
};
use crate::clock::now_ms;
use crate::database::Database;
use crate::error::InboxError;

/// Rows changed per statement of a bulk action: each statement is its own
/// short transaction, whatever the selection's size. Each changed row writes
/// every index of the inbox table (on PostgreSQL a retried row's new version
/// enters all eight), so a statement's time grows with its rows; at this many
/// a PostgreSQL batch takes about a millisecond of a core, short enough that
/// deliveries arriving beside it keep their acknowledgement time, while each
/// statement's fixed cost stays small beside its rows.
pub const BULK_BATCH: i64 = 25;

/// A bulk action on one namespace of an inbox's database.
pub(crate) struct BulkRun<'a, DB: sqlx::Database> {
    pub(crate) db: &'a Database<DB>,
    pub(crate) namespace: &'a str,
}

impl<DB: Bulk + Operations> BulkRun<'_, DB> {
    /// How many events `action` would touch in `selection` at `as_of` (now
    /// when `None`), and the most common types among them.
    pub(crate) async fn count(
        &self,
        action: BulkAction,
        selection: &Selection,
        as_of: Option<i64>,
    ) -> Result<BulkCount, InboxError> {
        check_selection(action, selection)?;
        let now = now_ms();
        let as_of = as_of.unwrap_or(now);
        if as_of > now {
            return Err(InboxError::InvalidSetting(
                "a bulk action's as_of time is in the future",
            ));
        }
        let (read, types) = DB::count(self.db, self.scope(action, selection, as_of)).await?;
        Ok(BulkCount {
            events: read.min(BULK_COUNT_LIMIT),
            types,
            as_of,
            more: read > BULK_COUNT_LIMIT,
        })
    }

    /// Runs `action` over what `count` selected, in batches, resting
    /// between them; never more events than counted.
    pub(crate) async fn run(
        &self,
        action: BulkAction,
        selection: &Selection,
        count: &BulkCount,
    ) -> Result<BulkReport, InboxError> {
        check_selection(action, selection)?;
        let as_of = count.as_of;
        if as_of > now_ms() {
            return Err(InboxError::InvalidSetting(
                "a bulk action's as_of time is in the future",
            ));
        }
        let mut report = BulkReport {
            selected: count.events,
            ..BulkReport::default()
        };
        if action == BulkAction::Pause {
            self.pause_counted(selection, count, &mut report).await?;
            return Ok(report);
        }
        'states: for state in selected_states(action, selection) {
            let mut after = Position::START;
            loop {
                // Never more than the count selected.
                // Never more than the count selected; a count that stopped
                // at its limit bounds the run by its time alone.
                let left = if count.more {
                    u64::MAX
                } else {
                    count.events.saturating_sub(report.events)
                };
                let limit = BULK_BATCH.min(i64::try_from(left).unwrap_or(i64::MAX));
                if limit == 0 {
                    break 'states;
                }
                let started = Instant::now();
                let (changed, last) =
                    DB::batch(self.db, self.scope(action, selection, as_of), state, after, limit).await?;
                // A read that found no row left ends the run; it is no batch.
                let Some(last) = last else { break };
                let took = started.elapsed();
                report.batches += 1;
                report.longest_batch = report.longest_batch.max(took);
                report.events += changed;
                after = last;
                // Not a transaction and holding no write lock, so not a
                // batch; a failed one is made up by the next.
                let _ = DB::checkpoint(self.db).await;
                tokio::time::sleep(Pace::Operator.rest_after(took)).await;
            }
        }
        report.no_longer_qualified = report.selected.saturating_sub(report.events);
        Ok(report)
    }

    /// A bulk pause: each type the count showed that still has a selected
    /// event (the selection counted again at the count's time) is paused;
    /// its events then are acted on, at most as many as were counted of it.
    async fn pause_counted(
        &self,
        selection: &Selection,
        count: &BulkCount,
        report: &mut BulkReport,
    ) -> Result<(), InboxError> {
        let (_, now) = DB::count(self.db, self.scope(BulkAction::Pause, selection, count.as_of)).await?;
        for (event_type, counted) in &count.types {
            let still = now
                .iter()
                .find(|(now_type, _)| now_type == event_type)
                .map_or(0, |(_, events)| *events)
                .min(*counted);
            report.no_longer_qualified += counted - still;
            if still == 0 {
                continue;
            }
            let started = Instant::now();
            if DB::pause(self.db, self.namespace, event_type).await? {
                report.paused_types.push(event_type.clone());
            }
            report.events += still;
            report.batches += 1;
            report.longest_batch = report.longest_batch.max(started.elapsed());
            park_all(self.db, self.namespace, event_type, true).await?;
        }
        Ok(())
    }

    fn scope<'a>(&'a self, action: BulkAction, selection: &'a Selection, as_of: i64) -> Scope<'a> {
        Scope {
            namespace: self.namespace,
            action,
            selection,
            as_of,
        }
    }
}

/// A selection `action` can act on, within the bounds the statements take.
fn check_selection(action: BulkAction, selection: &Selection) -> Result<(), InboxError> {
    if selected_states(action, selection).is_empty() {
        return Err(InboxError::InvalidSetting(match action {
            BulkAction::Retry => "retry acts on dead events only",
            BulkAction::Replay => "replay acts on done events only",
            _ => "purge acts on done and dead events only",
        }));
    }
    if selection.ids.len() > MAX_BULK_IDS {
        return Err(InboxError::InvalidSetting(
            "at most 1000 ids; select more by prefix, type or age",
        ));
    }
    let too_long = |text: &str| text.is_empty() || text.len() > crate::model::MAX_ID_BYTES;
    if selection.ids.iter().any(|id| too_long(id))
        || selection.id_prefix.as_deref().is_some_and(too_long)
        || selection.event_type.as_deref().is_some_and(too_long)
    {
        return Err(InboxError::InvalidSetting(
            "an id, id prefix or event type is 1 to 255 bytes long",
        ));
    }
    Ok(())
}
