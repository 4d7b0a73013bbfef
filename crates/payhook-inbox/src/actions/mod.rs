//! The operator's actions on stored events: what `payhook inbox`, the
//! dashboard and [`Admin`](crate::admin::Admin) change.
//!
//! - [`operations`] — `Operations`: one event's changes (`retry`,
//!   `retry_dead`, `replay`), the bounded retention `purge` batch
//!   (`purge_batch`), `pause`/`resume` of an event type and the parking of
//!   its waiting events (`park_all`).
//! - [`selection`] — what a bulk action is and selects (`BulkAction`,
//!   `Selection`), its count and its report: the types the tools see.
//! - [`bulk`] — `Bulk`: a bulk action's `count` and one keyset `batch`, each
//!   statement built from the selection beside the method that runs it.
//! - [`bulk_run`] — the count first, then the run over what was counted in
//!   batches of `BULK_BATCH`, resting between them.

pub(crate) mod bulk;
pub(crate) mod bulk_run;
pub(crate) mod operations;
pub(crate) mod selection;
