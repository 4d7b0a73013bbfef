//! The numbered migrations, one `.sql` file per version and database under
//! `migrations/sqlite/` and `migrations/postgres/`. Each runs once per
//! database, in order, inside a transaction, and is recorded in
//! [`SCHEMA_TABLE`](crate::SCHEMA_TABLE) by its version. Never edit one that
//! has shipped: add the next.

use crate::database::dialect::{table, Dialect};
use crate::model::{AttemptOutcome, State};

/// One version: its statements on each database.
pub(crate) struct Migration {
    pub(crate) version: i64,
    sqlite: &'static str,
    postgres: &'static str,
    /// A statement run after the file's, with one state bound as `$1`: a
    /// state is written from [`State`]'s own names, never typed into a
    /// `.sql` file.
    pub(crate) then: Option<(&'static str, State)>,
}

/// Done events no longer keep a last error (version 2).
const CLEAR_DONE_ERRORS: &str = concat!("UPDATE ", table!(), " SET last_error = NULL WHERE state = $1");

/// Events held when the inbox is upgraded to version 11 may have had their
/// attempt counted by the start mark of the release before: they are taken
/// as suspects whose attempt started (2), so that a lease that runs out is
/// handled as that release did (the attempt recorded as interrupted, the
/// event dead on its last attempt).
const HELD_ARE_SUSPECTS: &str = concat!("UPDATE ", table!(), " SET suspect = 2 WHERE state = $1");

/// Every migration, oldest first.
pub(crate) const MIGRATIONS: [Migration; 21] = [
    Migration {
        version: 1,
        sqlite: include_str!("../../../migrations/sqlite/0001_inbox_table.sql"),
        postgres: include_str!("../../../migrations/postgres/0001_inbox_table.sql"),
        then: None,
    },
    // Done events no longer keep a last error: the ones that did are cleared.
    Migration {
        version: 2,
        sqlite: include_str!("../../../migrations/sqlite/0002_purge_index.sql"),
        postgres: include_str!("../../../migrations/postgres/0002_purge_index.sql"),
        then: Some((CLEAR_DONE_ERRORS, State::Done)),
    },
    Migration {
        version: 3,
        sqlite: include_str!("../../../migrations/sqlite/0003_attempts.sql"),
        postgres: include_str!("../../../migrations/postgres/0003_attempts.sql"),
        then: None,
    },
    Migration {
        version: 4,
        sqlite: include_str!("../../../migrations/sqlite/0004_type_index.sql"),
        postgres: include_str!("../../../migrations/postgres/0004_type_index.sql"),
        then: None,
    },
    Migration {
        version: 5,
        sqlite: include_str!("../../../migrations/sqlite/0005_paused_types.sql"),
        postgres: include_str!("../../../migrations/postgres/0005_paused_types.sql"),
        then: None,
    },
    Migration {
        version: 6,
        sqlite: include_str!("../../../migrations/sqlite/0006_trace_context.sql"),
        postgres: include_str!("../../../migrations/postgres/0006_trace_context.sql"),
        then: None,
    },
    Migration {
        version: 7,
        sqlite: include_str!("../../../migrations/sqlite/0007_duplicates.sql"),
        postgres: include_str!("../../../migrations/postgres/0007_duplicates.sql"),
        then: None,
    },
    Migration {
        version: 8,
        sqlite: include_str!("../../../migrations/sqlite/0008_fill_factor.sql"),
        postgres: include_str!("../../../migrations/postgres/0008_fill_factor.sql"),
        then: None,
    },
    Migration {
        version: 9,
        sqlite: include_str!("../../../migrations/sqlite/0009_differing_copies.sql"),
        postgres: include_str!("../../../migrations/postgres/0009_differing_copies.sql"),
        then: None,
    },
    Migration {
        version: 10,
        sqlite: include_str!("../../../migrations/sqlite/0010_reconciler.sql"),
        postgres: include_str!("../../../migrations/postgres/0010_reconciler.sql"),
        then: None,
    },
    Migration {
        version: 11,
        sqlite: include_str!("../../../migrations/sqlite/0011_suspects.sql"),
        postgres: include_str!("../../../migrations/postgres/0011_suspects.sql"),
        then: Some((HELD_ARE_SUSPECTS, State::Running)),
    },
    Migration {
        version: 12,
        sqlite: include_str!("../../../migrations/sqlite/0012_waiting_phase.sql"),
        postgres: include_str!("../../../migrations/postgres/0012_waiting_phase.sql"),
        then: None,
    },
    Migration {
        version: 13,
        sqlite: include_str!("../../../migrations/sqlite/0013_lighter_marks.sql"),
        postgres: include_str!("../../../migrations/postgres/0013_lighter_marks.sql"),
        then: None,
    },
    Migration {
        version: 14,
        sqlite: include_str!("../../../migrations/sqlite/0014_intent_probes.sql"),
        postgres: include_str!("../../../migrations/postgres/0014_intent_probes.sql"),
        then: None,
    },
    // The count of each namespace's events by phase, kept by triggers.
    Migration {
        version: 15,
        sqlite: include_str!("../../../migrations/sqlite/0015_tally.sql"),
        postgres: include_str!("../../../migrations/postgres/0015_tally.sql"),
        then: None,
    },
    // Its base on PostgreSQL, counted outside the triggers' lock.
    Migration {
        version: 16,
        sqlite: include_str!("../../../migrations/sqlite/0016_tally_base.sql"),
        postgres: include_str!("../../../migrations/postgres/0016_tally_base.sql"),
        then: None,
    },
    // When a reconciled event's delivery arrived, and the refused events.
    Migration {
        version: 17,
        sqlite: include_str!("../../../migrations/sqlite/0017_refused_and_delivered.sql"),
        postgres: include_str!("../../../migrations/postgres/0017_refused_and_delivered.sql"),
        then: None,
    },
    // The activity chart's buckets, kept by triggers.
    Migration {
        version: 18,
        sqlite: include_str!("../../../migrations/sqlite/0018_activity.sql"),
        postgres: include_str!("../../../migrations/postgres/0018_activity.sql"),
        then: None,
    },
    // Their base on PostgreSQL, counted outside the triggers' lock.
    Migration {
        version: 19,
        sqlite: include_str!("../../../migrations/sqlite/0019_activity_base.sql"),
        postgres: include_str!("../../../migrations/postgres/0019_activity_base.sql"),
        then: None,
    },
    // PostgreSQL's bodies in a table of their own (SQLite: nothing).
    Migration {
        version: 20,
        sqlite: include_str!("../../../migrations/sqlite/0020_bodies_apart.sql"),
        postgres: include_str!("../../../migrations/postgres/0020_bodies_apart.sql"),
        then: None,
    },
    // PostgreSQL deletes a purge batch's attempts and bodies by one range
    // of their key (SQLite: nothing).
    Migration {
        version: 21,
        sqlite: include_str!("../../../migrations/sqlite/0021_forget_by_range.sql"),
        postgres: include_str!("../../../migrations/postgres/0021_forget_by_range.sql"),
        then: None,
    },
];

impl Migration {
    /// Its statements on `dialect`, one at a time: the file split after each
    /// `;` that ends a line (a trigger's inner `;` does not), comment lines
    /// left out, and each `{pending}` or `{running}` replaced by that state's
    /// name as an SQL literal (`{attempt_done}` by the done attempts'
    /// outcome), so that a state is written from [`State`] (an outcome from
    /// [`AttemptOutcome`]), never typed into a `.sql` file.
    pub(crate) fn statements(&self, dialect: Dialect) -> impl Iterator<Item = String> + '_ {
        let file = match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
        };
        file.split(";\n").filter_map(|chunk| {
            let statement: Vec<&str> = chunk
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect();
            let statement = statement.join("\n");
            let statement = statement.trim().trim_end_matches(';').trim();
            (!statement.is_empty()).then(|| {
                statement
                    .replace("{pending}", &format!("'{}'", State::Pending.as_str()))
                    .replace("{running}", &format!("'{}'", State::Running.as_str()))
                    .replace("{attempt_done}", &format!("'{}'", AttemptOutcome::Done.as_str()))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_numbered_in_order_and_files_hold_statements() {
        // Versions are 1, 2, 3, … with no gap: the runner applies them in
        // this order and records each number it ran.
        for (expected, migration) in (1_i64..).zip(MIGRATIONS.iter()) {
            assert_eq!(migration.version, expected);
        }
        for migration in &MIGRATIONS {
            // A version may change nothing on one database (a PostgreSQL
            // storage setting), never on both.
            let on_both: usize = [Dialect::Sqlite, Dialect::Postgres]
                .into_iter()
                .map(|dialect| migration.statements(dialect).count())
                .sum();
            assert!(on_both > 0, "version {}", migration.version);
            for dialect in [Dialect::Sqlite, Dialect::Postgres] {
                let statements: Vec<String> = migration.statements(dialect).collect();
                for statement in &statements {
                    assert!(!statement.contains("--"), "{statement}");
                    assert!(statement.contains(crate::database::dialect::TABLE), "{statement}");
                }
            }
        }
        let sqlite: Vec<String> = MIGRATIONS[2].statements(Dialect::Sqlite).collect();
        assert_eq!(sqlite.len(), 5);
        assert!(
            sqlite[2].ends_with("WHERE arrival = OLD.arrival; END"),
            "{}",
            sqlite[2]
        );
        assert_eq!(MIGRATIONS[2].statements(Dialect::Postgres).count(), 4);
        assert_eq!(MIGRATIONS[0].statements(Dialect::Postgres).count(), 4);
        // The phase column files `running` under `pending`, as
        // `State::phase` does, and the waiting events' index names the
        // phase the claims write as a literal.
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let statements: Vec<String> = MIGRATIONS[11].statements(dialect).collect();
            assert!(
                statements[0].contains(&format!(
                    "CASE WHEN state = '{}' THEN '{}' ELSE state END",
                    State::Running.as_str(),
                    State::Running.phase().as_str()
                )),
                "{}",
                statements[0]
            );
            if dialect == Dialect::Postgres {
                assert!(
                    statements[1].ends_with(concat!(
                        "WHERE phase = ",
                        crate::database::dialect::waiting_phase!()
                    )),
                    "{}",
                    statements[1]
                );
            }
            assert!(statements.iter().all(|statement| !statement.contains('{')));
        }
        // The intents' index of waiting events keys on the expression the
        // claim's probes name (`due_in_order_indexed!`), phase as a literal.
        let intents: Vec<String> = MIGRATIONS[13].statements(Dialect::Postgres).collect();
        assert_eq!(intents.len(), 1);
        let key = concat!(
            "(CASE WHEN phase = ",
            crate::database::dialect::waiting_phase!(),
            " THEN intent_id END)"
        );
        assert!(
            intents[0].contains(&format!("{key}, created, arrival) WHERE {key} IS NOT NULL")),
            "{}",
            intents[0]
        );
        assert_eq!(MIGRATIONS[13].statements(Dialect::Sqlite).count(), 0);
    }

    /// Every table the `.sql` files write to or read from is one of the
    /// crate's table names (`table!` and its siblings), compared as a whole
    /// word: the identifier after `TABLE`, `ON`, `INTO`, `FROM`, `UPDATE`,
    /// `JOIN` or `REFERENCES` (past `IF NOT EXISTS`, `ONLY`), when it starts
    /// with `payhook`, must be one of them, so the table a `CREATE TABLE`,
    /// `CREATE INDEX … ON` or `ALTER TABLE` acts on is exactly one of them;
    /// every statement but a `DROP INDEX` names one, and each table is
    /// created by some migration (the schema table by the runner).
    #[test]
    fn statements_name_the_crate_tables_exactly() {
        let tables = [
            crate::database::dialect::TABLE,
            crate::database::dialect::SCHEMA_TABLE,
            crate::database::dialect::ATTEMPTS_TABLE,
            crate::database::dialect::PAUSED_TABLE,
            crate::database::dialect::DUPLICATES_TABLE,
            crate::database::dialect::DIFFERING_TABLE,
            crate::database::dialect::RECONCILER_TABLE,
            crate::database::dialect::REFUSED_TABLE,
            crate::database::dialect::ACTIVITY_TABLE,
            crate::database::dialect::BODIES_TABLE,
            crate::database::dialect::tally_table!(),
        ];
        let mut created = std::collections::BTreeSet::<String>::new();
        for migration in &MIGRATIONS {
            for dialect in [Dialect::Sqlite, Dialect::Postgres] {
                for statement in migration.statements(dialect) {
                    let words: Vec<&str> = statement
                        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .filter(|word| !word.is_empty())
                        .collect();
                    let mut named = Vec::new();
                    for (at, word) in words.iter().enumerate() {
                        let keyword = word.to_ascii_uppercase();
                        if !["TABLE", "ON", "INTO", "FROM", "UPDATE", "JOIN", "REFERENCES"]
                            .contains(&keyword.as_str())
                        {
                            continue;
                        }
                        let name = words[at + 1..].iter().find(|next| {
                            !["IF", "NOT", "EXISTS", "ONLY"].contains(&next.to_ascii_uppercase().as_str())
                        });
                        if let Some(name) =
                            name.filter(|name| name.to_ascii_lowercase().starts_with("payhook"))
                        {
                            assert!(
                                tables.contains(name),
                                "version {} on {dialect:?} names the table `{name}`, which is none of {tables:?}: {statement}",
                                migration.version
                            );
                            named.push(*name);
                        }
                    }
                    // Only a dropped index names no table.
                    assert!(
                        !named.is_empty() || statement.starts_with("DROP INDEX"),
                        "version {} on {dialect:?} names no table: {statement}",
                        migration.version
                    );
                    if statement.starts_with("CREATE TABLE") {
                        created.insert(named[0].to_owned());
                    }
                }
            }
        }
        for table in tables
            .into_iter()
            .filter(|table| *table != crate::database::dialect::SCHEMA_TABLE)
        {
            assert!(created.contains(table), "no migration creates `{table}`");
        }
    }
}
