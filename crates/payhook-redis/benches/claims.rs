//! Deliveries per second through the Redis store, beside plain Redis round
//! trips measured in the same run on the same connection kind.
//!
//! Needs a server: `eval "$(.ci/start-redis)"` then
//! `cargo bench -p payhook-redis --bench claims`.
//!
//! * `sequential/*` — one operation at a time;
//! * `concurrent_16/*` — 16 tasks sharing the store's one multiplexed
//!   connection, as concurrent deliveries do.
//!
//! In each group, `claim_complete` (a delivery that succeeds: two round trips)
//! compares with `ping_x2` and `set_x2` (two bare round trips), and
//! `claim_duplicate` (a delivery seen before: one round trip) with `ping`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use payhook_core::store::{Claim, ClaimToken, Completion, Store};
use payhook_redis::RedisStore;
use redis::aio::ConnectionManager;

const LEASE: Duration = Duration::from_secs(60);
/// Short, so benchmark keys do not pile up in the server.
const RETENTION: Duration = Duration::from_secs(120);

struct Fixture {
    store: RedisStore,
    conn: ConnectionManager,
    namespace: String,
    next_id: AtomicU64,
}

impl Fixture {
    fn id(&self) -> String {
        format!("evt_{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

/// One benchmarked operation: one delivery, or its reference round trips.
#[derive(Clone, Copy)]
enum Op {
    Ping,
    PingX2,
    SetX2,
    ClaimComplete,
    ClaimDuplicate,
    RawSetNxGet,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Ping => "ping",
            Op::PingX2 => "ping_x2",
            Op::SetX2 => "set_x2",
            Op::ClaimComplete => "claim_complete",
            Op::ClaimDuplicate => "claim_duplicate",
            Op::RawSetNxGet => "raw_set_nx_get",
        }
    }

    async fn run(self, fx: &Fixture) {
        let mut conn = fx.conn.clone();
        match self {
            Op::Ping => ping(&mut conn).await,
            Op::PingX2 => {
                ping(&mut conn).await;
                ping(&mut conn).await;
            }
            Op::SetX2 => {
                let key = format!("payhook-bench:{}:{}", fx.namespace, fx.id());
                for _ in 0..2 {
                    redis::cmd("SET")
                        .arg(&key)
                        .arg("0123456789abcdef0123456789abcdef")
                        .arg("PX")
                        .arg(RETENTION.as_millis() as u64)
                        .query_async::<()>(&mut conn)
                        .await
                        .expect("SET");
                }
            }
            Op::ClaimComplete => {
                let id = fx.id();
                let Claim::Claimed(token) = fx.store.claim(&fx.namespace, &id, LEASE).await.expect("claim")
                else {
                    panic!("a new id is claimed");
                };
                assert_eq!(
                    fx.store
                        .complete(&fx.namespace, &id, token, RETENTION)
                        .await
                        .expect("complete"),
                    Completion::Completed
                );
            }
            Op::RawSetNxGet => {
                let _: Option<String> = redis::cmd("SET")
                    .arg(format!("payhook-bench:{}:done", fx.namespace))
                    .arg("0123456789abcdef0123456789abcdef")
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE.as_millis() as u64)
                    .arg("GET")
                    .query_async(&mut conn)
                    .await
                    .expect("SET");
            }
            Op::ClaimDuplicate => {
                let claim = fx
                    .store
                    .claim(&fx.namespace, "evt_done", LEASE)
                    .await
                    .expect("claim");
                assert_eq!(claim, Claim::Done);
            }
        }
    }
}

async fn ping(conn: &mut ConnectionManager) {
    redis::cmd("PING").query_async::<()>(conn).await.expect("PING");
}

/// Runs `iters` operations, `in_flight` at a time, and returns the wall time.
async fn run_many(fx: &Arc<Fixture>, op: Op, iters: u64, in_flight: u64) -> Duration {
    let started = Instant::now();
    if in_flight == 1 {
        for _ in 0..iters {
            op.run(fx).await;
        }
    } else {
        let tasks: Vec<_> = (0..in_flight)
            .map(|task| {
                let fx = Arc::clone(fx);
                // Spread `iters` over the tasks; the first ones take the remainder.
                let share = iters / in_flight + u64::from(task < iters % in_flight);
                tokio::spawn(async move {
                    for _ in 0..share {
                        op.run(&fx).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("benchmark task");
        }
    }
    started.elapsed()
}

fn group(c: &mut Criterion, rt: &tokio::runtime::Runtime, fx: &Arc<Fixture>, name: &str, in_flight: u64) {
    let mut group: BenchmarkGroup<'_, _> = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    for op in [
        Op::Ping,
        Op::PingX2,
        Op::SetX2,
        Op::ClaimComplete,
        Op::ClaimDuplicate,
        Op::RawSetNxGet,
    ] {
        group.bench_function(op.name(), |b| {
            b.iter_custom(|iters| rt.block_on(run_many(fx, op, iters, in_flight)))
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    let url = std::env::var("PAYHOOK_TEST_REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "PAYHOOK_TEST_REDIS_URL is not set: start a server with `eval \"$(.ci/start-redis)\"` \
             (prints the export line)"
        )
    });
    // One thread, like one replica's share of a small machine; the server
    // gets the other core.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let fx = rt.block_on(async {
        let store = RedisStore::builder(&url)
            .connect()
            .await
            .unwrap_or_else(|err| panic!("{err}; start a server with `eval \"$(.ci/start-redis)\"`"));
        let conn = ConnectionManager::new(redis::Client::open(url.as_str()).expect("URL"))
            .await
            .expect("reference connection");
        let namespace = format!("bench-{}", ClaimToken::random());
        let Claim::Claimed(token) = store.claim(&namespace, "evt_done", LEASE).await.unwrap() else {
            panic!("fresh namespace");
        };
        assert_eq!(
            store
                .complete(&namespace, "evt_done", token, RETENTION)
                .await
                .unwrap(),
            Completion::Completed
        );
        Arc::new(Fixture {
            store,
            conn,
            namespace,
            next_id: AtomicU64::new(0),
        })
    });
    group(c, &rt, &fx, "sequential", 1);
    group(c, &rt, &fx, "concurrent_16", 16);
}

criterion_group! {
    name = claims;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(claims);
