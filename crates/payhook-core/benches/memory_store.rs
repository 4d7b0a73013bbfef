//! The in-memory dedupe store: claim + complete throughput and memory per id.
//!
//! Run with `cargo bench -p payhook-core --bench memory_store`. Before the timed
//! groups it prints the heap bytes each retained (done) id costs at 100 k and 1 M
//! ids, counted by a global allocator wrapper: the live bytes after the ids are in,
//! and the peak while they went in (a table doubles as it grows).
//!
//! Groups:
//! * `memory_store/sync_1_thread`: claim + complete of a new id through the
//!   `Store` trait, each future polled once (the memory store answers at once),
//!   the store filling up from empty;
//! * `memory_store/sync_1_thread_full_store`: the same on a store already holding
//!   its default capacity of 1 M ids, so every new id evicts the oldest;
//! * `memory_store/async_1_thread`: the same through the boxed-future `Store` trait;
//! * `memory_store/sync_2_threads`: two threads doing the first on one store
//!   (throughput counts both threads' pairs).

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use payhook_core::store::{Claim, Completion, MemoryStore, Store};

/// Counts live and peak heap bytes; the cost is two relaxed atomics per call.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, passed on as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                let live =
                    LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size - layout.size();
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NS: &str = "payhook";
const LEASE: Duration = Duration::from_secs(300);
const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Realistic event ids (`evt_` and 24 more characters, as the service sends)
/// made by counting in decimal in place, so the timed loops measure the store
/// and not the formatting of ids.
struct EventIds {
    buf: [u8; 28],
}

impl EventIds {
    fn starting_at(n: u64) -> Self {
        let mut buf = *b"evt_1PqX7b000000000000000000";
        let mut n = n;
        for digit in buf[10..].iter_mut().rev() {
            *digit = b'0' + (n % 10) as u8;
            n /= 10;
        }
        Self { buf }
    }

    /// The current id, then moves to the next.
    fn next_id(&mut self) -> &str {
        for digit in self.buf[10..].iter_mut().rev() {
            if *digit == b'9' {
                *digit = b'0';
            } else {
                *digit += 1;
                break;
            }
        }
        std::str::from_utf8(&self.buf).expect("ASCII")
    }
}

fn claim_complete(store: &MemoryStore, id: &str) {
    let Claim::Claimed(token) = now(store.claim(NS, id, LEASE)).expect("store has room") else {
        panic!("{id} is new");
    };
    assert_eq!(
        now(store.complete(NS, id, token, RETENTION)).expect("store has room"),
        Completion::Completed
    );
}

fn now<F: Future>(future: F) -> F::Output {
    match std::pin::pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the memory store never waits"),
    }
}

/// Heap bytes per done id once `ids` ids are retained: (live, peak while filling).
fn bytes_per_id(ids: u64) -> (f64, f64) {
    // Room to spare: the shards fill unevenly, and nothing may be evicted here.
    // (Capacity is a bound; no memory is set aside for it.)
    let store = MemoryStore::builder()
        .capacity(ids as usize * 2)
        .build()
        .expect("valid capacity");
    let mut ids_made = EventIds::starting_at(0);
    // Settle the store's own first allocations outside the count.
    claim_complete(&store, ids_made.next_id());
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    for _ in 1..ids {
        claim_complete(&store, ids_made.next_id());
    }
    assert_eq!(store.len() as u64, ids);
    let live = LIVE.load(Ordering::Relaxed) - before;
    let peak = PEAK.load(Ordering::Relaxed) - before;
    (live as f64 / ids as f64, peak as f64 / ids as f64)
}

fn report_memory() {
    println!("memory_store/bytes_per_retained_id");
    for ids in [100_000u64, 1_000_000] {
        let (live, peak) = bytes_per_id(ids);
        println!("  {ids:>9} ids: {live:6.1} bytes/id live, {peak:6.1} bytes/id peak while filling");
    }
}

/// Ids for the timed loops come from a running counter; the store is replaced
/// (untimed) every `REFILL` ids so each run sees the same table sizes.
const REFILL: u64 = 1_000_000;

/// What `MemoryStore::new()` holds at most.
const DEFAULT_CAPACITY: usize = 1_000_000;

fn bench_store(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_store");
    group.throughput(Throughput::Elements(1));

    let mut store = MemoryStore::new();
    let mut next = 0u64;
    group.bench_function(BenchmarkId::new("sync_1_thread", "claim_complete"), |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if next == REFILL {
                    store = MemoryStore::new();
                    next = 0;
                }
                let run = left.min(REFILL - next);
                let mut ids = EventIds::starting_at(next);
                let started = Instant::now();
                for _ in 0..run {
                    claim_complete(&store, black_box(ids.next_id()));
                }
                elapsed += started.elapsed();
                next += run;
                left -= run;
            }
            elapsed
        })
    });

    // The steady state of a busy receiver: the store is full, so each new id
    // also forgets the oldest one.
    let full = MemoryStore::new();
    let mut ids = EventIds::starting_at(REFILL * 10);
    for _ in 0..DEFAULT_CAPACITY {
        claim_complete(&full, ids.next_id());
    }
    group.bench_function(
        BenchmarkId::new("sync_1_thread_full_store", "claim_complete"),
        |b| b.iter(|| claim_complete(&full, black_box(ids.next_id()))),
    );
    drop(full);

    let mut store = MemoryStore::new();
    let mut next = 0u64;
    group.bench_function(BenchmarkId::new("async_1_thread", "claim_complete"), |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if next == REFILL {
                    store = MemoryStore::new();
                    next = 0;
                }
                let run = left.min(REFILL - next);
                let mut ids = EventIds::starting_at(next);
                let started = Instant::now();
                for _ in 0..run {
                    let id = black_box(ids.next_id());
                    let Claim::Claimed(token) = now(store.claim(NS, id, LEASE)).expect("room") else {
                        panic!("{id} is new");
                    };
                    assert_eq!(
                        now(store.complete(NS, id, token, RETENTION)).expect("room"),
                        Completion::Completed
                    );
                }
                elapsed += started.elapsed();
                next += run;
                left -= run;
            }
            elapsed
        })
    });

    let mut store = MemoryStore::new();
    let mut next = 0u64;
    group.bench_function(BenchmarkId::new("sync_2_threads", "claim_complete"), |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if next + 1 >= REFILL {
                    store = MemoryStore::new();
                    next = 0;
                }
                let run = left.min(REFILL - next) & !1;
                let run = run.max(2);
                let barrier = Barrier::new(2);
                let (store, barrier) = (&store, &barrier);
                let took = std::thread::scope(|scope| {
                    let workers: Vec<_> = (0..2u64)
                        .map(|lane| {
                            scope.spawn(move || {
                                // Each thread takes its own half of the fresh ids.
                                let mut ids = EventIds::starting_at(next + lane * run / 2);
                                barrier.wait();
                                let started = Instant::now();
                                for _ in 0..run / 2 {
                                    claim_complete(store, black_box(ids.next_id()));
                                }
                                started.elapsed()
                            })
                        })
                        .collect();
                    workers
                        .into_iter()
                        .map(|w| w.join().expect("worker finished"))
                        .max()
                        .unwrap_or_default()
                });
                elapsed += took;
                next += run;
                left = left.saturating_sub(run);
            }
            elapsed
        })
    });
    group.finish();
}

criterion_group!(benches, bench_store);

fn main() {
    report_memory();
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
