//! Wake-ups across replicas on PostgreSQL: ingest announces new events with
//! `NOTIFY` after each commit ([`Notify`]), unless the process's own workers
//! will take them at their next claim (the `worker` module's "Claiming
//! ahead"), and each process `LISTEN`s and wakes its workers ([`Listen`]).
//! Polling stays the fallback: a lost notification delays an event by at
//! most the poll interval.

use std::future::Future;

use crate::database::dialect::{table, Dialect};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::error::describe;

/// The PostgreSQL notification channel ingest announces new events on.
pub const PG_CHANNEL: &str = table!();

/// The announcement of new events, on one backend. Not nameable outside the
/// crate.
pub trait Notify: Driver {
    /// Announces new events to the workers of every replica (PostgreSQL).
    fn notify<'a>(db: &'a Database<Self>, namespace: &'a str) -> impl Future<Output = ()> + Send + 'a;
}

sql_bounds! {
    impl<DB> Notify {
        async fn notify<'a>(db: &'a Database<Self>, namespace: &'a str) {
            const NOTIFY: &str = "SELECT 1 FROM pg_notify($1, $2)";
            if db.dialect == Dialect::Postgres {
                let notified = sqlx::query(NOTIFY)
                    .bind(PG_CHANNEL)
                    .bind(namespace)
                    .execute(&db.pool)
                    .await;
                if let Err(err) = notified {
                    // Other replicas still find the event at their next poll.
                    tracing::debug!(target: "payhook", reason = %describe(&err), "could not notify other replicas of new inbox events");
                }
            }
        }
    }
}

/// Called when another replica stored an event.
pub type Wake = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Wake-ups across replicas: on PostgreSQL, a task that `LISTEN`s on
/// [`PG_CHANNEL`] and wakes this process's workers when any replica stores an
/// event in `namespace` (ingest sends `NOTIFY` after each commit of new rows).
pub trait Listen: sqlx::Database {
    /// Starts the listening task, if this backend has one.
    fn listen(
        db: &Database<Self>,
        url: Option<String>,
        namespace: String,
        wake: Wake,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let _ = (db, url, namespace, wake, stop);
        None
    }
}

#[cfg(feature = "sqlite")]
impl Listen for sqlx::Sqlite {}

#[cfg(feature = "postgres")]
impl Listen for sqlx::Postgres {
    fn listen(
        db: &Database<Self>,
        _url: Option<String>,
        namespace: String,
        wake: Wake,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let pool = db.pool.clone();
        Some(tokio::spawn(async move {
            let listener = sqlx::postgres::PgListener::connect_with(&pool).await;
            listen_loop(listener, namespace, wake, stop).await;
        }))
    }
}

impl Listen for sqlx::Any {
    #[cfg(feature = "postgres")]
    fn listen(
        db: &Database<Self>,
        url: Option<String>,
        namespace: String,
        wake: Wake,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let url = url.filter(|_| db.dialect == Dialect::Postgres)?;
        Some(tokio::spawn(async move {
            let listener = sqlx::postgres::PgListener::connect(&url).await;
            listen_loop(listener, namespace, wake, stop).await;
        }))
    }
}

/// Wakes the workers on each notification for `namespace`, until stopped. A
/// lost connection is reopened by the listener; polling covers the gap.
#[cfg(feature = "postgres")]
async fn listen_loop(
    listener: Result<sqlx::postgres::PgListener, sqlx::Error>,
    namespace: String,
    wake: Wake,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut listener = match listener {
        Ok(listener) => listener,
        Err(err) => {
            let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
            tracing::warn!(target: "payhook", %reason, "cannot listen for other replicas' events; polling only");
            return;
        }
    };
    if let Err(err) = listener.listen(PG_CHANNEL).await {
        let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
        tracing::warn!(target: "payhook", %reason, "cannot listen for other replicas' events; polling only");
        return;
    }
    loop {
        tokio::select! {
            received = listener.recv() => match received {
                Ok(notification) if notification.payload() == namespace => wake(),
                Ok(_) => {}
                Err(_) => {
                    // The listener reconnects on the next call; poll meanwhile,
                    // and wake once in case a notification was lost.
                    wake();
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}
