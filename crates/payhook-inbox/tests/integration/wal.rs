//! While the workers run, SQLite's WAL is copied back into the database
//! file beside the writes, not by SQLite's automatic checkpoint inside a
//! delivery's commit (which would make that delivery wait for the copy).
//!
//! The test stores a few large events with no workers running and sees the
//! database file keep its size: they are in the WAL only, well under the
//! automatic checkpoint's 1 000 pages. Once the workers start, the file
//! grows by at least the events' bodies within a few seconds. Without the
//! workers' copy it would keep its size until SQLite's own checkpoint.

use std::time::{Duration, Instant};

use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::{Inbox, Job};
use payhook_test_support::unique;

const SECRET: &str = "whsec_wal";
const EVENTS: usize = 20;
const PADDING: usize = 10_000;

async fn ingest_large(inbox: &Inbox, id: &str) {
    let padding = "x".repeat(PADDING);
    let delivery = SignedDelivery::now(
        format!(
            r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_{id}","amount":5,"currency":"btc","status":"succeeded","description":"{padding}"}}}}}}"#
        ),
        SECRET,
    )
    .unwrap();
    let mut headers = http::HeaderMap::new();
    headers.insert("x-service-signature", delivery.signature.parse().unwrap());
    assert_eq!(inbox.ingest(&headers, delivery.body).await.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_workers_copy_the_wal_back_beside_the_writes() {
    let dir = std::env::temp_dir().join(unique("payhook-wal"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("inbox.db");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(unique("wal"))
        .poll_interval(Duration::from_millis(5))
        .connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    let size = || std::fs::metadata(&file).unwrap().len();
    let before = size();
    for n in 0..EVENTS {
        ingest_large(&inbox, &format!("evt_wal_{n}")).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        size(),
        before,
        "with no workers running the events stay in the WAL (SQLite's own checkpoint did not run)"
    );
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    inbox.wait_idle(Duration::from_secs(30)).await.unwrap();
    let grown = before + u64::try_from(EVENTS * PADDING).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while size() < grown {
        assert!(
            Instant::now() < deadline,
            "the database file stayed at {} bytes (was {before}): the WAL was not copied back",
            size()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    workers.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
