//! The tests' databases, made and reached in one way: [`any_pool`] to reach
//! a database of either kind, [`fresh_postgres_database`] for a PostgreSQL
//! database of the test's own and [`drop_postgres_database`] to drop it.
//! Each fails the test when the server cannot be reached; nothing here
//! skips.

use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;
use sqlx::{Connection, Executor, PgConnection};

use crate::{postgres_url, postgres_url_of, unique};

/// A pool of two connections to `url` (`sqlite://…` or `postgres://…`)
/// through sqlx's `Any` driver; a SQLite file is created when missing
/// (`mode=rwc`, unless `url` sets a mode). Panics when the database cannot
/// be reached.
pub async fn any_pool(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    let url = if url.starts_with("sqlite:") && !url.contains("mode=") {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}mode=rwc")
    } else {
        url.to_owned()
    };
    AnyPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"))
}

/// Creates a database of its own for one test on the test PostgreSQL server
/// ([`postgres_url`]), named [`unique`]`(prefix)` (`prefix` must be a valid
/// SQL identifier), and returns its URL. For a test whose tables, locks or
/// extensions must not meet another test's. The server's user needs the
/// `CREATEDB` privilege (`.ci/start-postgres`'s has it). Panics, saying why,
/// when the server is not configured, cannot be reached or refuses.
pub async fn fresh_postgres_database(prefix: &str) -> String {
    let name = unique(prefix);
    on_the_server(
        &format!("CREATE DATABASE {name}"),
        &format!("create the test database {name} (CREATEDB needed)"),
    )
    .await;
    postgres_url_of(&name)
}

/// Drops a database [`fresh_postgres_database`] made, given its URL, with
/// `WITH (FORCE)` (connections still open to it are ended). For a test that
/// makes many rows and should not leave them on the server. Panics when the
/// database cannot be dropped.
pub async fn drop_postgres_database(url: &str) {
    let name = url
        .split('?')
        .next()
        .and_then(|path| path.rsplit_once('/'))
        .map(|(_, name)| name)
        .unwrap_or_else(|| panic!("no database named in {url}"));
    on_the_server(
        &format!("DROP DATABASE {name} WITH (FORCE)"),
        &format!("drop the test database {name}"),
    )
    .await;
}

/// Runs `statement` on the test server's own database, in a connection of
/// its own; panics saying it cannot `what` when that fails.
async fn on_the_server(statement: &str, what: &str) {
    let mut admin = PgConnection::connect(&postgres_url())
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test PostgreSQL server: {err}"));
    admin
        .execute(statement)
        .await
        .unwrap_or_else(|err| panic!("cannot {what}: {err}"));
    admin
        .close()
        .await
        .unwrap_or_else(|err| panic!("cannot close the connection to PostgreSQL: {err}"));
}
