//! The contract of `examples/inbox_receiver`: the dashboard is served under
//! `/payhook/` when `PAYHOOK_DASHBOARD_TOKEN` is set, and not at all (`404`)
//! when it is not; a token too short to be safe stops the example at start.

use crate::example_process;

use std::time::Duration;

use example_process::Example;

const SECRET: &str = "whsec_dashboard_example";
const TOKEN: &str = "example-dashboard-token-0123456789";

fn database() -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!(
        "payhook-dashboard-example-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("inbox.db").display());
    (dir, url)
}

#[tokio::test]
async fn served_under_payhook_only_with_a_token() {
    let (dir, url) = database();
    let client = reqwest::Client::new();

    let without = Example::start(
        "inbox_receiver",
        &[("PAYHOOK_SECRET", SECRET), ("PAYHOOK_DATABASE_URL", &url)],
    );
    for path in ["/payhook/", "/payhook/events", "/payhook/assets/dashboard.js"] {
        let response = client
            .get(format!("http://{}{path}", without.addr))
            .basic_auth("oncall", Some(TOKEN))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 404, "{path} without a token");
    }
    drop(without);

    let with = Example::start(
        "inbox_receiver",
        &[
            ("PAYHOOK_SECRET", SECRET),
            ("PAYHOOK_DATABASE_URL", &url),
            ("PAYHOOK_DASHBOARD_TOKEN", TOKEN),
        ],
    );
    let response = client
        .get(format!("http://{}/payhook/", with.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let response = client
        .get(format!("http://{}/payhook/", with.addr))
        .basic_auth("oncall", Some(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let page = response.text().await.unwrap();
    assert!(page.contains("<h1>Overview</h1>"));
    assert!(
        !page.contains(SECRET) && !page.contains(&url),
        "neither the secret nor the URL"
    );
    drop(with);

    let mut weak = example_process::command(
        "inbox_receiver",
        &[
            ("PAYHOOK_SECRET", SECRET),
            ("PAYHOOK_DATABASE_URL", &url),
            ("PAYHOOK_DASHBOARD_TOKEN", "short"),
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = weak.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a weak token must stop the example"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut weak.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("PAYHOOK_DASHBOARD_TOKEN"), "{stderr}");
    assert!(!stderr.contains("short"), "the token is not echoed: {stderr}");
    let _ = std::fs::remove_dir_all(dir);
}
