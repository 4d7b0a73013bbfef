//! Intake: a verified delivery, or an event the reconciler listed, stored
//! as a new `pending` row, and the delivery acknowledged after its commit.
//!
//! - [`ingest`] — one verified delivery to a row (`row_of`), its wait for the
//!   writer's commit, and its reply (`200`, or `503` with nothing stored).
//! - [`writer`] — the intake writer task: every delivery waiting written in
//!   one multi-row statement, each answered after its commit; then the other
//!   replicas woken for what this process's workers will not take, and the
//!   duplicates recorded.
//! - [`insert`] — `Intake::insert`, the statement both the writer and the
//!   reconciler store through.
//! - [`duplicates`] — the duplicates records: when each duplicate delivery
//!   was acknowledged, and the ones whose content differed; the stored
//!   copies a later copy is compared with, and the mark of a reconciled
//!   event's delivery.
//! - [`compare`] — a later copy of a stored event (a duplicate delivery, or
//!   the events list's copy) compared with it: a differing content recorded,
//!   a delivery of a reconciled event marked.
//! - [`refused`] — the refused events record: events offered that the inbox
//!   could not take, with their reason and id, bounded.

pub(crate) mod compare;
pub(crate) mod duplicates;
pub(crate) mod ingest;
pub(crate) mod insert;
pub(crate) mod refused;
pub(crate) mod writer;
