//! The reconciler against a listed page it cannot take whole, and the honest
//! record of what it stored, on both databases:
//!
//! - one bad event holds back none: a page with an event that does not
//!   parse and one longer than a delivery may be stores the rest, and both
//!   are recorded (reason and id, `WARN`, metric), once each however many
//!   passes list them again, and the record keeps at most
//!   `MAX_REFUSED_KEPT` rows;
//! - a reconciled event whose delivery arrives later says so (its
//!   `delivered_at`, its source label), and the overview counts delivered
//!   and recovered events apart;
//! - a listed copy that differs from the stored event, or from the first
//!   copy of its id in the same page, is flagged exactly as a differing
//!   duplicate delivery is (record, metric, `WARN` "differs"), once.
//!
//! The events list is a loopback server of a few lines here, answering
//! every request with the page the test sets.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::admin::{Admin, Source, MAX_REFUSED_KEPT};
use payhook_inbox::metrics::{DIFFERING_DUPLICATES, RECONCILE_REFUSED};
use payhook_inbox::{Inbox, Job, Reconcile, Workers};
use payhook_test_support::{fresh_postgres_database, on_every_backend, sqlite_url, unique};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::eventually;
use crate::telemetry::{namespace_sample, telemetry};

const SECRET: &str = "whsec_reconciled_copies";
const KEY: &str = "sk_test_reconciled_copies";

/// The body limit of the tests' receivers: a delivery's, and so a listed
/// event's, longest body.
const BODY_LIMIT: usize = 2048;

fn now_s() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// An event of the service, created 20 seconds ago, for `amount`.
fn event(id: &str, amount: u64) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","api_version":"v1","created":{},"data":{{"object":{{"id":"pi_{id}","object":"payment_intent","amount":{amount},"currency":"btc","status":"succeeded"}}}},"livemode":false,"type":"payment_intent.succeeded"}}"#,
        now_s() - 20
    )
}

/// The fake events list: the page every request gets, and how many came.
#[derive(Default)]
struct FakeList {
    page: Mutex<Vec<String>>,
    requests: AtomicUsize,
}

impl FakeList {
    fn set(&self, events: Vec<String>) {
        *self.page.lock().unwrap() = events;
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Serves `list` on loopback; its base URL.
async fn serve(list: Arc<FakeList>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let list = Arc::clone(&list);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                list.requests.fetch_add(1, Ordering::SeqCst);
                let body = format!(
                    r#"{{"object":"list","has_more":false,"data":[{}]}}"#,
                    list.page.lock().unwrap().join(",")
                );
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

/// An inbox reconciling against `list` every 200 ms, its workers running,
/// and its admin.
async fn reconciling(url: &str, namespace: &str, list: &Arc<FakeList>) -> (Inbox, Workers, Admin) {
    telemetry();
    let base = serve(Arc::clone(list)).await;
    let receiver = Receiver::builder()
        .secret(SECRET)
        .body_limit(BODY_LIMIT)
        .build()
        .unwrap();
    let reconcile = Reconcile::new(&base, KEY)
        .unwrap()
        .interval(Duration::from_millis(200));
    let inbox = Inbox::builder(receiver)
        .namespace(namespace)
        .poll_interval(Duration::from_millis(20))
        .reconcile(reconcile)
        .connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    let admin = Admin::connect(url, namespace).await.unwrap();
    (inbox, workers, admin)
}

async fn deliver(inbox: &Inbox, body: &str) {
    let delivery = SignedDelivery::now(Bytes::from(body.to_owned()), SECRET).unwrap();
    let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
    assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
}

fn counter(name: &str, namespace: &str) -> f64 {
    namespace_sample(&telemetry().prometheus.render(), name, namespace).unwrap_or(0.0)
}

fn log_lines(message: &str, event_id: &str) -> usize {
    let field = format!("event_id={event_id}");
    telemetry()
        .log
        .lines(|line| line.contains(message) && line.split(' ').any(|word| word == field))
        .len()
}

/// Waits for `more` requests to the list after now: passes that listed the
/// page again.
async fn passes(list: &FakeList, more: usize) {
    let until = list.requests() + more;
    eventually("more passes", || async { list.requests() >= until }).await;
}

/// A page with an event that does not parse and one over the body limit:
/// the two good events are stored as reconciled, and both bad ones are
/// recorded with their ids and reasons, logged and counted; listed again by
/// later passes, each stays one record (seen more times).
async fn one_bad_event_holds_back_none(url: String) {
    let ns = unique("refused");
    let list = Arc::new(FakeList::default());
    let (good1, good2) = (format!("evt_{ns}_good1"), format!("evt_{ns}_good2"));
    let (bad, big) = (format!("evt_{ns}_bad"), format!("evt_{ns}_big"));
    let oversized = event(&big, 1).replace(
        r#""status":"succeeded""#,
        &format!(r#""status":"succeeded","note":"{}""#, "x".repeat(BODY_LIMIT)),
    );
    let unparseable = format!(
        r#"{{"id":"{bad}","object":"event","created":{},"data":{{}}}}"#,
        now_s() - 20
    );
    list.set(vec![event(&good1, 1), oversized, unparseable, event(&good2, 2)]);
    let (_inbox, workers, admin) = reconciling(&url, &ns, &list).await;
    eventually("the good events stored and both bad ones recorded", || async {
        admin.show(&good2).await.is_ok() && admin.refused(10).await.unwrap().len() == 2
    })
    .await;
    for id in [&good1, &good2] {
        assert_eq!(admin.show(id).await.unwrap().source, Source::Reconciled);
    }
    let refused = admin.refused(10).await.unwrap();
    let by_id = |id: &str| {
        refused
            .iter()
            .find(|refused| refused.event_id.as_deref() == Some(id))
            .unwrap_or_else(|| panic!("{id} not recorded: {refused:?}"))
            .clone()
    };
    let too_long = by_id(&big);
    assert!(
        too_long.reason.contains(&format!("over the {BODY_LIMIT} bytes")),
        "{too_long:?}"
    );
    assert!(too_long.bytes > BODY_LIMIT as i64);
    assert_eq!(too_long.source, Source::Reconciled);
    let broken = by_id(&bad);
    assert!(broken.reason.contains("does not parse"), "{broken:?}");
    assert!(counter(RECONCILE_REFUSED, &ns) >= 2.0);
    assert!(log_lines("was refused and recorded", &big) >= 1);
    assert!(log_lines("was refused and recorded", &bad) >= 1);
    // Later passes list them again: still one record each, seen again.
    passes(&list, 3).await;
    let again = admin.refused(10).await.unwrap();
    assert_eq!(again.len(), 2, "{again:?}");
    assert!(again.iter().all(|refused| refused.times >= 2), "{again:?}");
    workers.shutdown().await;
}

/// An event stored by the reconciler is recovered (no delivery of it) until
/// its delivery arrives: then it says reconciled, delivered later, with
/// the delivery's time, and the overview counts it as delivered.
async fn a_reconciled_event_delivered_later_says_so(url: String) {
    let ns = unique("delivered-later");
    let list = Arc::new(FakeList::default());
    let id = format!("evt_{ns}_late");
    let body = event(&id, 7);
    list.set(vec![body.clone()]);
    let (inbox, workers, admin) = reconciling(&url, &ns, &list).await;
    eventually("stored from the list", || async { admin.show(&id).await.is_ok() }).await;
    let stored = admin.show(&id).await.unwrap();
    assert_eq!(stored.source, Source::Reconciled);
    assert_eq!(stored.delivered_at, None);
    assert_eq!(stored.source_label(), "reconciled");
    assert!(stored.is_recovered());
    let stats = admin.stats().await.unwrap();
    assert_eq!((stats.delivered(), stats.recovered()), (0, 1));
    // Its delivery comes at last; and another event is delivered only.
    deliver(&inbox, &body).await;
    let other = format!("evt_{ns}_delivered");
    deliver(&inbox, &event(&other, 8)).await;
    eventually("the delivery recorded on the event", || async {
        admin.show(&id).await.unwrap().delivered_at.is_some()
    })
    .await;
    let stored = admin.show(&id).await.unwrap();
    assert_eq!(stored.source, Source::Reconciled);
    assert_eq!(stored.source_label(), "reconciled, delivered later");
    assert!(!stored.is_recovered());
    assert!(stored.delivered_at.unwrap() >= stored.received_at);
    assert_eq!(admin.show(&other).await.unwrap().source_label(), "delivered");
    let stats = admin.stats().await.unwrap();
    assert_eq!((stats.delivered(), stats.recovered()), (2, 0));
    // The same content: not a differing copy.
    assert_eq!(admin.differing_copies(&id).await.unwrap(), None);
    workers.shutdown().await;
}

/// A listed copy that differs from the delivered event, and a second copy
/// of one id in a page that differs from the first, are each flagged as a
/// differing duplicate is: recorded, counted, logged with "differs"; once,
/// however many passes list them again.
async fn a_differing_listed_copy_is_flagged(url: String) {
    let ns = unique("listed-copy");
    let list = Arc::new(FakeList::default());
    let (delivered, twice) = (format!("evt_{ns}_delivered"), format!("evt_{ns}_twice"));
    let (inbox, workers, admin) = reconciling(&url, &ns, &list).await;
    deliver(&inbox, &event(&delivered, 100)).await;
    list.set(vec![event(&delivered, 900), event(&twice, 1), event(&twice, 2)]);
    eventually("both differing copies recorded", || async {
        admin.differing_copies(&delivered).await.unwrap().is_some()
            && admin.differing_copies(&twice).await.unwrap().is_some()
    })
    .await;
    assert!(admin
        .show(&delivered)
        .await
        .unwrap()
        .body
        .unwrap()
        .contains(r#""amount":100"#));
    assert!(admin
        .show(&twice)
        .await
        .unwrap()
        .body
        .unwrap()
        .contains(r#""amount":1,"#));
    let differing = admin.differing_copies(&twice).await.unwrap().unwrap();
    assert!(differing.last_body.contains(r#""amount":2,"#), "{differing:?}");
    passes(&list, 3).await;
    for id in [&delivered, &twice] {
        assert_eq!(
            admin.differing_copies(id).await.unwrap().unwrap().copies,
            1,
            "{id}"
        );
        assert_eq!(
            log_lines("a copy that differs from the stored event", id),
            1,
            "{id}"
        );
    }
    assert_eq!(counter(DIFFERING_DUPLICATES, &ns), 2.0);
    workers.shutdown().await;
}

/// A list of more bad events than the record keeps: the record holds
/// `MAX_REFUSED_KEPT` of them, however many passes list them, and the good
/// event beside them is stored.
async fn the_refused_record_is_bounded(url: String) {
    let ns = unique("refused-bound");
    let list = Arc::new(FakeList::default());
    let good = format!("evt_{ns}_good");
    let mut page = vec![event(&good, 1)];
    let bad = usize::try_from(MAX_REFUSED_KEPT).unwrap() + 5;
    page.extend((0..bad).map(|i| format!(r#"{{"id":"evt_{ns}_bad_{i}","created":{}}}"#, now_s() - 20)));
    list.set(page);
    let (_inbox, workers, admin) = reconciling(&url, &ns, &list).await;
    eventually("the good event stored and the bad ones recorded", || async {
        admin.show(&good).await.is_ok() && !admin.refused(1).await.unwrap().is_empty()
    })
    .await;
    passes(&list, 2).await;
    let kept = admin.refused(u32::MAX).await.unwrap();
    assert_eq!(kept.len() as i64, MAX_REFUSED_KEPT);
    assert!(counter(RECONCILE_REFUSED, &ns) >= bad as f64);
    workers.shutdown().await;
}

/// An admin never migrates: on a schema before migration 17 (here the
/// column dropped after the fact) the overview still counts, every
/// reconciled event as recovered, since no delivery of one was recorded.
async fn an_admin_counts_recovered_events_on_an_older_schema(url: String) {
    let ns = unique("older-schema");
    let list = Arc::new(FakeList::default());
    let id = format!("evt_{ns}_listed");
    list.set(vec![event(&id, 3)]);
    let (inbox, workers, admin) = reconciling(&url, &ns, &list).await;
    eventually("stored from the list", || async { admin.show(&id).await.is_ok() }).await;
    workers.shutdown().await;
    deliver(&inbox, &event(&format!("evt_{ns}_delivered"), 4)).await;
    payhook_inbox::sqlx::query("ALTER TABLE payhook_inbox DROP COLUMN delivered_at")
        .execute(inbox.pool())
        .await
        .unwrap();
    let admin = Admin::connect(&url, &ns).await.unwrap();
    let stats = admin.stats().await.unwrap();
    assert_eq!((stats.delivered(), stats.recovered()), (1, 1));
}

// Each test on a PostgreSQL database of its own: one drops a column.
on_every_backend! {
    sqlite: sqlite_url("payhook-reconciled-copies"),
    postgres: fresh_postgres_database("payhook_reconciled_copies").await,
    worker_threads: 2;
    an_admin_counts_recovered_events_on_an_older_schema,
    one_bad_event_holds_back_none,
    the_refused_record_is_bounded,
    a_reconciled_event_delivered_later_says_so,
    a_differing_listed_copy_is_flagged,
}
