//! The operator's actions on stored events: what `payhook inbox`, the
//! dashboard and [`Admin`](crate::admin::Admin) change.
//!
//! - [`operations`] — `Operations`: one event's changes (`retry`,
//!   `retry_dead`, `replay`), one bounded `purge` batch, `pause`/`resume`
//!   of an event type and the parking of its waiting events (`park_all`).
//! - [`purge`] — the purge of done events in batches (`purge_batch` rows)
//!   with a rest after each as a `Pace` says (the bulk actions rest at the
//!   operator's pace too): `purge_paced`, run by the retention purge and by
//!   the admin.
//! - [`selection`] — what a bulk action is and selects (`BulkAction`,
//!   `Selection`), its count and its report: the types the tools see.
//! - [`bulk`] — `Bulk`: a bulk action's `count` and one keyset `batch`, each
//!   statement built from the selection beside the method that runs it.
//! - [`bulk_run`] — the count first, then the run over what was counted in
//!   batches of `BULK_BATCH`, resting between them as the purge does.

pub(crate) mod bulk;
pub(crate) mod bulk_run;
pub(crate) mod operations;
pub(crate) mod purge;
pub(crate) mod selection;
