//! The inbox's model: what an event's states are, what the operator's tools
//! read (stored events, filters, pages, counts, attempts, paused types), and the
//! rows the queue passes between intake, workers and the database.
//!
//! - `state.rs` — `State`, its groups, `AttemptOutcome`.
//! - `event.rs` — `StoredEvent`, `Filter`, `Attempt`, `IntentEvent`,
//!   `DifferingCopies`, `Refused`, `MAX_ID_BYTES`.
//! - `page.rs` — `PageQuery`, `Page`, `Cursor`, `MAX_PAGE`: keyset pages.
//! - `stats.rs` — `Stats` (one count per `State`), `ActivitySlot`.
//! - `pause.rs` — `PausedType`.
//! - `source.rs` — `Source`: a delivery or the reconciler.
//! - `rows.rs` — crate-internal rows (`NewRow`, `Claimed`, `ClaimRequest`,
//!   `ClaimResult`, `AttemptRecord`, `RefusedRow`, `StoredCopy`).
//!
//! The bulk actions' types are with the actions (`actions/selection.rs`).
//!
//! The model knows no SQL and no database: the queue and the reads turn these
//! types into statements and back, the dashboard and the CLI show them.

mod event;
mod page;
mod pause;
mod rows;
mod source;
mod state;
mod stats;

pub use event::{Attempt, DifferingCopies, Filter, IntentEvent, Refused, StoredEvent, MAX_ID_BYTES};
pub use page::{Cursor, Page, PageQuery, MAX_PAGE};
pub use pause::PausedType;
pub(crate) use rows::{
    AttemptRecord, ClaimRequest, ClaimResult, Claimed, ClaimedAttempt, Failure, NewRow, RefusedRow,
    StoredCopy,
};
pub use source::Source;
pub use state::{AttemptOutcome, State};
pub use stats::{ActivitySlot, Stats};
