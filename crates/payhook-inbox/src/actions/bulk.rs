//! Bulk actions over a [`Selection`]: the count that comes first
//! ([`count`](Bulk::count)) and one bounded batch of the action
//! ([`batch`](Bulk::batch)), each a statement built from the selection
//! beside the method that runs it.
//!
//! A batch reads at most `limit` keys in `(received_at, arrival)` order
//! after a keyset position, then changes those rows in one short statement
//! by primary key (its own transaction: no lock is held between batches),
//! so the batches walk the selection once, however many rows it has.
//!
//! The count and every batch select by one rule: a row is in the selection
//! when it matches the filter, is in one of the action's states, and has not
//! changed since before the count's time (`as_of`): its last change of state
//! (see [`changed_at`]) came before it. So a batch, which re-checks the rule
//! on each row as it changes it, acts only on rows the count saw as they
//! were: an event that died, finished, was retried or replayed or arrived
//! after the count is left alone, whoever changed it (a worker, another
//! operator, this run), and a run interrupted and started again with the
//! same `as_of` touches only the rest.

use std::future::Future;

use sqlx::Row as _;

use crate::actions::selection::{BulkAction, Selection, BULK_COUNT_LIMIT};
use crate::clock::now_ms;
use crate::database::dialect::{table, Dialect};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::State;

/// A bound value of a built statement.
enum Bind {
    Text(String),
    Int(i64),
}

/// A `WHERE` clause built from a selection, with its values in order.
struct Clause {
    sql: String,
    binds: Vec<Bind>,
}

/// How a clause names the columns every index of the table begins with.
#[derive(Clone, Copy)]
enum Lookup {
    /// Plainly, so an index on them can find the rows: the reads that count
    /// a selection or find a batch's keys.
    Indexed,
    /// Through [`Dialect::unindexed`], so that a statement over listed keys
    /// looks each row up by its key. Without statistics (the inbox never
    /// gathers them) SQLite would otherwise drive a batch's change by the
    /// `(namespace, phase, received_at)` index and walk every selected row
    /// for each batch of a few dozen.
    ByKey(Dialect),
}

impl Lookup {
    fn column(self, name: &str) -> String {
        match self {
            Self::Indexed => name.to_owned(),
            Self::ByKey(dialect) => dialect.unindexed(name),
        }
    }
}

impl Clause {
    fn new() -> Self {
        Self {
            sql: String::new(),
            binds: Vec::new(),
        }
    }

    /// Appends `text`, each `?` in it taking the next parameter number.
    fn push(&mut self, text: &str, binds: impl IntoIterator<Item = Bind>) {
        let mut parts = text.split('?');
        self.sql.push_str(parts.next().unwrap_or(""));
        let mut binds = binds.into_iter();
        for part in parts {
            if let Some(bind) = binds.next() {
                self.binds.push(bind);
            }
            self.sql.push_str(&format!("${}", self.binds.len()));
            self.sql.push_str(part);
        }
    }

    /// The rows of `selection` in `states` (those of the action the
    /// selection allows) unchanged since before `as_of`
    /// ([`push_unchanged_since`](Self::push_unchanged_since)), with the
    /// namespace and state named as `lookup` says.
    fn selecting(
        namespace: &str,
        states: &[State],
        selection: &Selection,
        as_of: i64,
        lookup: Lookup,
    ) -> Self {
        let mut clause = Self::new();
        clause.push(
            &format!("{} = ?", lookup.column("namespace")),
            [Bind::Text(namespace.to_owned())],
        );
        let marks = vec!["?"; states.len().max(1)].join(", ");
        let mut state_binds: Vec<Bind> = states
            .iter()
            .map(|state| Bind::Text(state.as_str().to_owned()))
            .collect();
        if state_binds.is_empty() {
            // A state the action does not act on: nothing matches.
            state_binds.push(Bind::Text(String::new()));
        }
        if let Lookup::Indexed = lookup {
            // The phases find the rows through the `(namespace, phase, …)`
            // indexes (the state is in none); the states pick from them.
            let mut phases: Vec<&'static str> = Vec::new();
            for state in states {
                if !phases.contains(&state.phase().as_str()) {
                    phases.push(state.phase().as_str());
                }
            }
            if !phases.is_empty() {
                let marks = vec!["?"; phases.len()].join(", ");
                let binds = phases.iter().map(|phase| Bind::Text((*phase).to_owned()));
                clause.push(&format!(" AND phase IN ({marks})"), binds);
            }
        }
        clause.push(
            &format!(" AND {} IN ({marks})", lookup.column("state")),
            state_binds,
        );
        clause.push_unchanged_since(states, lookup, as_of);
        if let Some(event_type) = &selection.event_type {
            clause.push(" AND event_type = ?", [Bind::Text(event_type.clone())]);
        }
        if let Some(before) = selection.received_before {
            clause.push(" AND received_at <= ?", [Bind::Int(before)]);
        }
        if let Some(after) = selection.received_after {
            clause.push(" AND received_at >= ?", [Bind::Int(after)]);
        }
        if let Some(prefix) = &selection.id_prefix {
            // `substr`, not `LIKE`: no wildcard in an id can widen it.
            let length = i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX);
            clause.push(
                " AND substr(event_id, 1, CAST(? AS INTEGER)) = ?",
                [Bind::Int(length), Bind::Text(prefix.clone())],
            );
        }
        if !selection.ids.is_empty() {
            let marks = vec!["?"; selection.ids.len()].join(", ");
            clause.push(
                &format!(" AND event_id IN ({marks})"),
                selection.ids.iter().map(|id| Bind::Text(id.clone())),
            );
        }
        clause
    }
}

impl Clause {
    /// Keeps the rows whose last change of state came before `as_of` (the
    /// count's time): what the count saw, as it saw it. A row that changed
    /// since — died, finished, was retried, replayed or handled after the
    /// count, or arrived after it — is left out of the count's run, so a run
    /// never reaches past what was counted, and a run started again with the
    /// same `as_of` never changes a row twice. Each state's change time is
    /// [`changed_at`]; with several states, a `CASE` on the row's state.
    fn push_unchanged_since(&mut self, states: &[State], lookup: Lookup, as_of: i64) {
        match states {
            [] => {}
            [state] => self.push(&format!(" AND {} < ?", changed_at(*state)), [Bind::Int(as_of)]),
            [first @ .., last] => {
                let mut case = format!(" AND CASE {}", lookup.column("state"));
                let mut binds = Vec::with_capacity(states.len());
                for state in first {
                    case.push_str(&format!(" WHEN ? THEN {}", changed_at(*state)));
                    binds.push(Bind::Text(state.as_str().to_owned()));
                }
                case.push_str(&format!(" ELSE {} END < ?", changed_at(*last)));
                binds.push(Bind::Int(as_of));
                self.push(&case, binds);
            }
        }
    }
}

/// The column holding when a row in `state` entered it (Unix milliseconds):
/// a done event's `done_at`; a dead event's `due_at`, which the worker that
/// made it dead set to that moment (a dead event is never due); a waiting or
/// running event's `received_at` (the bulk actions change no such event:
/// only a pause reads them, and pauses only types the count showed).
fn changed_at(state: State) -> &'static str {
    match state {
        State::Done => "done_at",
        State::Dead => "due_at",
        State::Pending | State::Running => "received_at",
    }
}

/// Runs `sql` with `binds` in order.
fn bound<'q, DB>(sql: &'q str, binds: &'q [Bind]) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>>
where
    DB: sqlx::Database + sqlx::database::HasStatementCache,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut query = sqlx::query(sql).persistent(false);
    for bind in binds {
        query = match bind {
            Bind::Text(text) => query.bind(text.as_str()),
            Bind::Int(value) => query.bind(*value),
        };
    }
    query
}

/// Where a bulk run is in its selection: the last row a batch took
/// (crate-internal: the module is private).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    received_at: i64,
    arrival: i64,
}

impl Position {
    /// Before every row.
    pub(crate) const START: Self = Self {
        received_at: i64::MIN,
        arrival: i64::MIN,
    };
}

/// One bulk action over a selection, as counted at `as_of`.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) action: BulkAction,
    pub(crate) selection: &'a Selection,
    pub(crate) as_of: i64,
}

/// The bulk actions on one backend. Not nameable outside the crate.
pub trait Bulk: Driver {
    /// Events the action would touch, read up to one over
    /// [`BULK_COUNT_LIMIT`], and the 20 most common types among the first
    /// [`BULK_COUNT_LIMIT`].
    fn count<'a>(
        db: &'a Database<Self>,
        scope: Scope<'a>,
    ) -> impl Future<Output = Result<(u64, Vec<(String, u64)>), sqlx::Error>> + Send + 'a;
    /// Acts on at most `limit` selected rows in `state` after `after`
    /// (retry, replay, purge): one state at a time, so the batch follows the
    /// `(namespace, phase, received_at, arrival)` index in order. The rows
    /// changed, and the position of the last row read (`None` when none was
    /// left: the run is over).
    fn batch<'a>(
        db: &'a Database<Self>,
        scope: Scope<'a>,
        state: State,
        after: Position,
        limit: i64,
    ) -> impl Future<Output = Result<(u64, Option<Position>), sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> Bulk {
        async fn count<'a>(db: &'a Database<Self>, scope: Scope<'a>) -> Result<(u64, Vec<(String, u64)>), sqlx::Error> {
            let Scope { namespace, action, selection, as_of } = scope;
            let states = selected_states(action, selection);
            let clause = Clause::selecting(namespace, &states, selection, as_of, Lookup::Indexed);
            // One bounded read: a count costs the same however much history
            // the table keeps (one over the limit says "more"), and the types
            // are tallied from the same rows rather than read again (each
            // row's state and type are in its heap page, not in the index
            // that finds it); the types among the first BULK_COUNT_LIMIT of
            // them, the total over all (in every row, by a window over the
            // groups).
            let read = format!(
                concat!(
                    "SELECT event_type, CAST(SUM(CASE WHEN seen <= {limit} THEN 1 ELSE 0 END) AS BIGINT) AS n, \
                     CAST(SUM(COUNT(*)) OVER () AS BIGINT) AS total \
                     FROM (SELECT event_type, ROW_NUMBER() OVER () AS seen FROM (SELECT event_type FROM ",
                    table!(),
                    " WHERE {clause} LIMIT {read}) selected) numbered \
                     GROUP BY event_type ORDER BY n DESC, event_type LIMIT 20"
                ),
                limit = BULK_COUNT_LIMIT,
                clause = clause.sql,
                read = BULK_COUNT_LIMIT + 1,
            );
            let rows = bound::<DB>(&read, &clause.binds).fetch_all(&db.pool).await?;
            let mut total = 0_i64;
            let mut types = Vec::new();
            for row in &rows {
                total = row.try_get("total")?;
                let n: i64 = row.try_get("n")?;
                if n > 0 {
                    types.push((row.try_get("event_type")?, u64::try_from(n).unwrap_or(0)));
                }
            }
            Ok((u64::try_from(total).unwrap_or(0), types))
        }

        async fn batch<'a>(
            db: &'a Database<Self>,
            scope: Scope<'a>,
            state: State,
            after: Position,
            limit: i64,
        ) -> Result<(u64, Option<Position>), sqlx::Error> {
            let Scope { namespace, action, selection, as_of } = scope;
            if action == BulkAction::Pause {
                return Ok((0, None));
            }
            // First the batch's keys, read in keyset order outside any write
            // transaction; then the change by primary key, so the write holds
            // SQLite's lock only for the rows it changes, and PostgreSQL's
            // plan is key look-ups whatever its statistics say.
            let mut pick = Clause::selecting(namespace, &[state], selection, as_of, Lookup::Indexed);
            pick.push(
                " AND (received_at, arrival) > (?, ?)",
                [Bind::Int(after.received_at), Bind::Int(after.arrival)],
            );
            pick.push(" ORDER BY received_at, arrival LIMIT ?", [Bind::Int(limit)]);
            let sql = format!(concat!("SELECT arrival, received_at FROM ", table!(), " WHERE {}"), pick.sql);
            let picked = bound::<DB>(&sql, &pick.binds)
                .fetch_all(&db.pool)
                .await?
                .iter()
                .map(|row| {
                    Ok(Position {
                        received_at: row.try_get("received_at")?,
                        arrival: row.try_get("arrival")?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()?;
            let Some(&last) = picked.last() else {
                return Ok((0, None));
            };
            let Some(statement) = change_statement(db.dialect, scope, state, &picked, now_ms()) else {
                return Ok((0, None));
            };
            // On SQLite in this process's turn to write, so the inbox's own
            // writes queue behind it instead of sleeping at the file lock.
            let changed = db
                .write(bound::<DB>(&statement.sql, &statement.binds).execute(&db.pool))
                .await?;
            Ok((DB::rows_affected(&changed), Some(last)))
        }
    }
}

/// The statement that changes the rows of one batch, listed by `picked`:
/// `scope`'s action over them, the selection re-checked on each row (on
/// PostgreSQL under the row's lock), so a row changed since it was read is
/// skipped, not changed twice. Each row is looked up by its key
/// ([`Lookup::ByKey`]). `None` for [`BulkAction::Pause`], which changes no
/// event.
fn change_statement(
    dialect: Dialect,
    scope: Scope<'_>,
    state: State,
    picked: &[Position],
    now: i64,
) -> Option<Clause> {
    let Scope {
        namespace,
        action,
        selection,
        as_of,
    } = scope;
    let (change, set) = match action {
        BulkAction::Retry => ("UPDATE ", " SET state = ?, due_at = ?"),
        BulkAction::Replay => ("UPDATE ", " SET state = ?, due_at = ?, done_at = NULL"),
        BulkAction::Purge => ("DELETE FROM ", ""),
        BulkAction::Pause => return None,
    };
    let mut statement = Clause::new();
    statement.push(
        &format!("{change}{}{set} WHERE ", table!()),
        if set.is_empty() {
            Vec::new()
        } else {
            vec![Bind::Text(State::Pending.as_str().to_owned()), Bind::Int(now)]
        },
    );
    let recheck = Clause::selecting(namespace, &[state], selection, as_of, Lookup::ByKey(dialect));
    let offset = statement.binds.len();
    statement.sql.push_str(&renumber(&recheck.sql, offset));
    statement.binds.extend(recheck.binds);
    let marks = vec!["?"; picked.len()].join(", ");
    statement.push(
        &format!(" AND arrival IN ({marks})"),
        picked.iter().map(|position| Bind::Int(position.arrival)),
    );
    Some(statement)
}

/// The states `action` acts on that `selection` allows (none when its
/// state is not one of them).
pub(crate) fn selected_states(action: BulkAction, selection: &Selection) -> Vec<State> {
    action
        .states()
        .iter()
        .copied()
        .filter(|state| selection.state.is_none_or(|selected| selected == *state))
        .collect()
}

/// `sql` with each `$N` made `$(N + offset)`.
fn renumber(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(&(_, d)) = chars.peek() {
            if !d.is_ascii_digit() {
                break;
            }
            digits.push(d);
            chars.next();
        }
        match digits.parse::<usize>() {
            Ok(n) => out.push_str(&format!("${}", n + offset)),
            Err(_) => out.push('$'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch's change looks each listed row up by its key, whatever the
    /// selection. With `namespace` and `state` written plainly, SQLite
    /// (which has no statistics on an inbox file) drives it by the
    /// `(namespace, phase, received_at)` index instead and walks every
    /// selected row for each batch: 5 ms for a batch of 32 rows among
    /// 100 000, where the look-ups take a few hundred microseconds.
    #[tokio::test]
    async fn sqlite_changes_a_batchs_rows_by_their_keys() {
        let picked: Vec<Position> = (1..=32)
            .map(|arrival| Position {
                received_at: 1_000 + arrival,
                arrival,
            })
            .collect();
        let selections = [
            Selection::default(),
            Selection {
                event_type: Some("payment.completed".to_owned()),
                received_before: Some(5_000),
                received_after: Some(1_000),
                id_prefix: Some("evt_".to_owned()),
                ids: vec!["evt_1".to_owned(), "evt_2".to_owned()],
                ..Selection::default()
            },
        ];
        for action in [BulkAction::Retry, BulkAction::Replay, BulkAction::Purge] {
            for selection in &selections {
                let scope = Scope {
                    namespace: "ns",
                    action,
                    selection,
                    as_of: 10_000,
                };
                let state = action.states()[0];
                let statement = change_statement(Dialect::Sqlite, scope, state, &picked, 10_000).unwrap();
                let plan = crate::database::migrate::sqlite_plan(&statement.sql).await;
                crate::database::migrate::assert_rows_found_by_key(&plan);
            }
        }
        let scope = Scope {
            namespace: "ns",
            action: BulkAction::Pause,
            selection: &selections[0],
            as_of: 0,
        };
        assert!(change_statement(Dialect::Sqlite, scope, State::Pending, &picked, 0).is_none());
    }
}
