//! The dashboard in a real browser: Debian's `chromium` driven through
//! `chromedriver` (WebDriver) from this test. It signs in, sees a dead event,
//! retries it, confirms, and sees it done; an event whose type and body hold
//! HTML with event handlers renders as text and no handler runs. It also
//! takes the screenshots the guide shows (`docs/guide/operating.md`; written
//! to `docs/` when `PAYHOOK_UPDATE_SCREENSHOTS=1`).
//!
//! Signing in: Chromium does not send `user:token@` URL credentials with a
//! page's stylesheet and script, so the test sets the `Authorization: Basic`
//! header for every request through the DevTools protocol
//! (`Network.setExtraHTTPHeaders`, reached through chromedriver's
//! `goog/cdp/execute`), as a browser's own login prompt would after the
//! first page.
//!
//! Needs `chromium` and `chromedriver` on `PATH` (or `PAYHOOK_CHROMIUM`,
//! `PAYHOOK_CHROMEDRIVER`); `.ci/test` installs them. Without them it fails,
//! never skips.

use crate::dashboard_app;

use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use dashboard_app::{App, Db, TOKEN};
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use payhook::sender::EventBuilder;
use serde_json::{json, Value};

/// A program on `PATH` (or the path in `env`); a loud failure without it.
fn program(env: &str, names: &[&str]) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "{} is not installed: the dashboard's browser test needs Debian's chromium and chromium-driver \
         (`apt-get install chromium chromium-driver`; .ci/test installs them), or set {env}",
        names[0]
    );
}

/// chromedriver on a free loopback port; killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Self {
        let binary = program("PAYHOOK_CHROMEDRIVER", &["chromedriver"]);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(&binary)
            // Its own process group, which the browsers it starts join: the
            // whole group is killed when the test ends, passed or failed.
            .process_group(0)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
        let driver = Self { child, port };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        driver
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver and every Chromium process it started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A DevTools command through chromedriver.
#[derive(Debug)]
struct Cdp {
    cmd: &'static str,
    params: Value,
}

impl WebDriverCompatibleCommand for Cdp {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        let body = json!({ "cmd": self.cmd, "params": self.params });
        (http::Method::POST, Some(body.to_string()))
    }
}

async fn browser(driver: &Driver, profile: &Path) -> Client {
    let chromium = program("PAYHOOK_CHROMIUM", &["chromium", "chromium-browser"]);
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-dev-shm-usage",
                "--window-size=1280,1000",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .unwrap_or_else(|err| panic!("chromedriver could not start chromium: {err}"));
    // Sign in: the token as the Basic password, on every request.
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("oncall:{TOKEN}"));
    client
        .issue_cmd(Cdp {
            cmd: "Network.enable",
            params: json!({}),
        })
        .await
        .unwrap();
    client
        .issue_cmd(Cdp {
            cmd: "Network.setExtraHTTPHeaders",
            params: json!({ "headers": { "Authorization": format!("Basic {credentials}") } }),
        })
        .await
        .unwrap();
    client
}

async fn text_of(client: &Client, css: &str) -> String {
    match client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
    {
        Ok(element) => element.text().await.unwrap(),
        Err(err) => {
            let url = client
                .current_url()
                .await
                .map(|url| url.to_string())
                .unwrap_or_default();
            let source = client.source().await.unwrap_or_default();
            panic!("no {css} at {url} ({err}); the page:\n{source}");
        }
    }
}

/// No hostile handler ran: no alert is open, the title is the page's own,
/// and no element from the hostile values exists in the page.
async fn no_script_ran(client: &Client, title: &str) {
    assert!(
        client.get_alert_text().await.is_err(),
        "an alert is open: a handler ran"
    );
    let state = client
        .execute(
            "return [document.title, window.payhookPwned === undefined, \
             document.querySelectorAll('main img, main script').length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(state, json!([format!("{title} · payhook inbox"), true, 0]));
}

async fn save_screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let dir = if std::env::var_os("PAYHOOK_UPDATE_SCREENSHOTS").is_some() {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs")
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), png).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_call_retries_a_dead_event_in_chromium() {
    let app = App::start(Db::Sqlite, 2).await;
    // A few ordinary events (done), two of one payment intent.
    for (id, builder) in [
        (
            "evt_1Qk2a8Paid",
            EventBuilder::payment_intent_succeeded().payment_intent_id("pi_3Mtw"),
        ),
        (
            "evt_1Qk2a7Created",
            EventBuilder::of_type("payment_intent.created").payment_intent_id("pi_3Mtw"),
        ),
        ("evt_1Qk29xPaid", EventBuilder::payment_intent_succeeded()),
        ("evt_1Qk29wFailed", EventBuilder::payment_intent_failed()),
        ("evt_1Qk29vPaid", EventBuilder::payment_intent_succeeded()),
    ] {
        app.deliver(&builder.id(id)).await;
    }
    // One that the ledger keeps refusing (dead after 2 attempts), and a
    // hostile one whose type and body hold HTML with handlers.
    let dead = "evt_1Qk2b0Refused";
    let hostile = "evt_1Qk2b1Hostile";
    app.broken
        .lock()
        .unwrap()
        .extend([dead.to_owned(), hostile.to_owned()]);
    app.deliver(
        &EventBuilder::payment_intent_succeeded()
            .id(dead)
            .payment_intent_id("pi_3Mtw"),
    )
    .await;
    app.deliver(
        &EventBuilder::other("<img src=x onerror=alert(1)>")
            .id(hostile)
            .data(r#"{"object":{"note":"</pre><img src=x onerror=\"window.payhookPwned=1\"><script>window.payhookPwned=2</script>"}}"#),
    )
    .await;
    for id in ["evt_1Qk2a8Paid", "evt_1Qk29vPaid"] {
        app.wait_for_state(id, "done").await;
    }
    app.wait_for_state(dead, "dead").await;
    app.wait_for_state(hostile, "dead").await;

    let driver = Driver::start();
    let profile = std::env::temp_dir().join(format!("payhook-chromium-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).unwrap();
    let client = browser(&driver, &profile).await;

    // The overview: two dead events, counted; it will reload itself.
    client.goto(&app.url("/payhook/")).await.unwrap();
    assert_eq!(text_of(&client, "#count-dead .n").await, "2");
    assert_eq!(text_of(&client, "#count-done .n").await, "5");
    no_script_ran(&client, "Overview").await;
    // The stylesheet loaded (from the dashboard, with the header): the
    // header bar is dark.
    let background = client
        .execute(
            "return getComputedStyle(document.querySelector('header')).backgroundColor",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(background, json!("rgb(29, 36, 48)"));
    save_screenshot(&client, "dashboard-overview.png").await;

    // The dead events, and the hostile one as text.
    client
        .find(Locator::Css("#count-dead"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let table = text_of(&client, "#events").await;
    assert!(table.contains("<img src=x onerror=alert(1)>"), "{table}");
    assert!(table.contains(dead));
    no_script_ran(&client, "Events").await;
    client
        .find(Locator::XPath(&format!("//a[text()='{hostile}']")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(
        text_of(&client, "#event-type").await,
        "<img src=x onerror=alert(1)>"
    );
    assert!(text_of(&client, "#event-body")
        .await
        .contains("<script>window.payhookPwned=2</script>"));
    no_script_ran(&client, hostile).await;

    // The dead event: its attempts and error; retry, confirm, see it done.
    client.goto(&app.url("/payhook/events?state=dead")).await.unwrap();
    client
        .wait()
        .for_element(Locator::XPath(&format!("//a[text()='{dead}']")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(text_of(&client, "#event-state").await, "dead");
    let attempts = text_of(&client, "#attempts").await;
    assert!(attempts.contains("the ledger refused <b>it</b>"), "{attempts}");
    assert!(text_of(&client, "#intent-events")
        .await
        .contains("evt_1Qk2a8Paid"));
    save_screenshot(&client, "dashboard-event.png").await;
    app.broken.lock().unwrap().remove(dead);
    client
        .find(Locator::Id("retry"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(text_of(&client, "#question").await.contains(dead));
    client
        .find(Locator::Id("confirm"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(text_of(&client, "#outcome").await.contains("is due now"));
    client
        .find(Locator::LinkText("Back to the event"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        // Done, and its successful attempt recorded (it follows the mark).
        if text_of(&client, "#event-state").await == "done"
            && text_of(&client, "#attempts").await.contains("done")
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the retried event never showed done"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        client.refresh().await.unwrap();
    }
    // A forged post from another page is refused by the browser's own
    // Sec-Fetch-Site: here a form the test writes into a blank page.
    client.goto("about:blank").await.unwrap();
    client
        .execute(
            "const f = document.createElement('form'); f.method = 'post'; f.action = arguments[0]; \
             const i = document.createElement('input'); i.name = 'confirm'; i.value = 'yes'; f.appendChild(i); \
             document.body.appendChild(f); f.submit();",
            vec![json!(app.url("/payhook/retry-dead"))],
        )
        .await
        .unwrap();
    let refused = text_of(&client, "main").await;
    assert!(
        refused.contains("another site") || refused.contains("token"),
        "{refused}"
    );
    client.close().await.unwrap();
    drop(driver);
    let _ = std::fs::remove_dir_all(&profile);
    app.stop().await;
}
