//! The README's main job: the demo's receiver answers every delivery as the
//! protocol prescribes.

#[path = "../examples/demo.rs"]
mod demo;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_demo_delivery_gets_the_prescribed_reply() {
    let rows = demo::run().await.expect("demo receiver starts");
    assert!(rows.len() >= 12, "only {} rows", rows.len());
    for row in &rows {
        assert!(
            row.ok,
            "{}: {} (handler ran {}x)",
            row.sent, row.reply, row.handler_runs
        );
    }
}
