//! The alert rules of `docs/prometheus/alerts.yml`, proven: `promtool check
//! rules` accepts them, `promtool test rules` runs their unit tests
//! (`docs/prometheus/alerts.test.yml`, every threshold and `for:`), and a real
//! Prometheus scraping an inbox app sees `PayhookInboxBackingUp` go from
//! pending to firing while the handlers are blocked, then resolve once they
//! are released.
//!
//! The app is the metrics example's set-up (`metrics-exporter-prometheus`
//! rendered on `GET /metrics` of the app itself) on an inbox whose one handler
//! waits for the test. Prometheus loads alerts.yml itself, with only that
//! rule's threshold and `for:` shortened ([`BACKING_UP_THRESHOLD`],
//! [`BACKING_UP_FOR`]) so that it fires within seconds; it scrapes and
//! evaluates every second.
//!
//! Needs `prometheus` and `promtool` on PATH (Debian's `prometheus` package,
//! which `.ci/test` installs when missing); fails, never skips, without them.
//! One live test in this binary: it installs the process-wide metrics recorder.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use payhook::inbox::{Inbox, Job};
use payhook::sender::{EventBuilder, SignedDelivery};
use payhook::Receiver;
use payhook_test_support::{sqlite_url, unique};

const SECRET: &str = "whsec_prometheus_alerts";
const RULE: &str = "PayhookInboxBackingUp";
/// The test's threshold on the oldest pending age, in place of 900 s.
const BACKING_UP_THRESHOLD: &str = "> 2";
/// The test's `for:`, in place of 5 minutes.
const BACKING_UP_FOR: &str = "for: 3s";

fn repository_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs a Prometheus tool, panicking with how to install it when it is missing.
fn tool(name: &str) -> Command {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "`{name}` is not on PATH: install Debian's prometheus package \
         (apt-get install prometheus; .ci/test does it when missing). This test never skips."
    );
    Command::new(name)
}

#[test]
fn promtool_accepts_the_rules() {
    let output = tool("promtool")
        .args(["check", "rules"])
        .arg(repository_file("docs/prometheus/alerts.yml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("SUCCESS: 9 rules found"), "{stdout}");
}

#[test]
fn the_rules_pass_their_unit_tests() {
    let output = tool("promtool")
        .args(["test", "rules"])
        .arg(repository_file("docs/prometheus/alerts.test.yml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("SUCCESS"),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// alerts.yml with the backing-up rule's threshold and `for:` shortened; the
/// other rules as they are. Panics when the rule no longer reads as expected,
/// so a change to it is a change to this test too.
fn rules_for_the_test(production: &str) -> String {
    let start = production
        .find(&format!("- alert: {RULE}\n"))
        .unwrap_or_else(|| panic!("alerts.yml has no rule {RULE}"));
    let end = production[start + 1..]
        .find("- alert: ")
        .map_or(production.len(), |next| start + 1 + next);
    let rule = &production[start..end];
    assert_eq!(
        rule.matches("payhook_inbox_oldest_pending_age_seconds) > 900")
            .count(),
        1,
        "{rule}"
    );
    assert_eq!(rule.matches("for: 5m").count(), 1, "{rule}");
    let short = rule
        .replace(
            "payhook_inbox_oldest_pending_age_seconds) > 900",
            &format!("payhook_inbox_oldest_pending_age_seconds) {BACKING_UP_THRESHOLD}"),
        )
        .replace("for: 5m", BACKING_UP_FOR);
    format!("{}{short}{}", &production[..start], &production[end..])
}

/// A Prometheus server on a free loopback port, killed when dropped.
struct Prometheus {
    child: Child,
    base: String,
    log: PathBuf,
}

impl Prometheus {
    fn start(dir: &Path, target: SocketAddr, rules: &Path) -> Self {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: shop\n    static_configs:\n      - targets: ['{target}']\n",
                rules.display()
            ),
        )
        .unwrap();
        // A free port: bound, read, released for Prometheus.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Prometheus logs to stderr: kept in a file, shown when the test fails.
        let log = dir.join("prometheus.log");
        let child = tool("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("prometheus starts");
        Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    /// Waits until the app's metrics have been scraped: the inbox's pending
    /// gauge of `namespace` is in Prometheus.
    async fn wait_scraped(&self, client: &reqwest::Client, namespace: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let query = format!("payhook_inbox_pending{{job=\"shop\",namespace=\"{namespace}\"}}");
            let query: String = form_urlencoded::byte_serialize(query.as_bytes()).collect();
            let reply = get_json(client, &format!("{}/api/v1/query?query={query}", self.base)).await;
            if reply["data"]["result"]
                .as_array()
                .is_some_and(|result| !result.is_empty())
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "never scraped: {reply}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_ready(&mut self, client: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(response) = client.get(format!("{}/-/ready", self.base)).send().await {
                if response.status().is_success() {
                    return;
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("prometheus exited with {status}:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready in 20 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The active alerts, as (name, state, namespace label).
    async fn alerts(&self, client: &reqwest::Client) -> Vec<(String, String, String)> {
        let reply = get_json(client, &format!("{}/api/v1/alerts", self.base)).await;
        assert_eq!(reply["status"], "success", "{reply}");
        reply["data"]["alerts"]
            .as_array()
            .unwrap_or_else(|| panic!("no alert list: {reply}"))
            .iter()
            .map(|alert| {
                let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
                (
                    text(&alert["labels"]["alertname"]),
                    text(&alert["state"]),
                    text(&alert["labels"]["namespace"]),
                )
            })
            .collect()
    }

    /// Polls the alerts until `done` holds for them, recording every state of
    /// [`RULE`] seen; panics after `timeout`.
    async fn wait_for(
        &self,
        client: &reqwest::Client,
        what: &str,
        timeout: Duration,
        seen: &mut Vec<String>,
        mut done: impl FnMut(&[(String, String, String)]) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let alerts = self.alerts(client).await;
            for (name, state, _) in &alerts {
                assert_eq!(
                    name, RULE,
                    "only the backing-up alert may go off here: {alerts:?}"
                );
                if seen.last() != Some(state) {
                    seen.push(state.clone());
                }
            }
            if done(&alerts) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {timeout:?}; states seen {seen:?}, alerts now {alerts:?}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn get_json(client: &reqwest::Client, url: &str) -> serde_json::Value {
    let text = client.get(url).send().await.unwrap().text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{url}: {err}: {text}"))
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn render(prometheus: PrometheusHandle) -> String {
    prometheus.render()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backed_up_inbox_fires_the_alert_in_a_real_prometheus_and_it_resolves() {
    let dir = std::env::temp_dir().join(unique("prometheus_alerts"));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("alerts.yml");
    let production = std::fs::read_to_string(repository_file("docs/prometheus/alerts.yml")).unwrap();
    std::fs::write(&rules, rules_for_the_test(&production)).unwrap();

    // The app: the recorder first, then an inbox with one handler, which
    // waits until the gate opens.
    let recorder = PrometheusBuilder::new().install_recorder().unwrap();
    let namespace = unique("alerts");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(namespace.clone())
        .concurrency(1)
        .connect(&sqlite_url("prometheus_alerts"))
        .await
        .unwrap();
    let (gate, opened) = tokio::sync::watch::channel(false);
    let workers = inbox.start(move |_job: Job| {
        let mut opened = opened.clone();
        async move {
            let _ = opened.wait_for(|open| *open).await;
            Ok(())
        }
    });
    let app = Router::new()
        .route("/webhooks", payhook::tower::axum::inbox_route(inbox.clone()))
        .route("/metrics", get(move || render(recorder.clone())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { payhook::tower::axum::serve(listener, app).await });

    let client = reqwest::Client::new();
    let mut prometheus = Prometheus::start(&dir, addr, &rules);
    prometheus.wait_ready(&client).await;
    // Healthy first: scraped, and no alert.
    prometheus.wait_scraped(&client, &namespace).await;
    assert_eq!(prometheus.alerts(&client).await, []);
    let mut seen = Vec::new();

    // Two events: the first blocks the only handler, the second waits.
    for _ in 0..2 {
        let event = EventBuilder::payment_intent_succeeded();
        let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
        let reply = client
            .post(format!("http://{addr}/webhooks"))
            .header("x-service-signature", &signed.signature)
            .header("content-type", "application/json")
            .body(signed.body)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200);
    }

    let ours = |alerts: &[(String, String, String)], state: &str| {
        alerts
            .iter()
            .any(|(name, now, labelled)| name == RULE && now == state && *labelled == namespace)
    };
    // The gauge is refreshed every 5 s; past 2 s it is pending, 3 s later firing.
    prometheus
        .wait_for(
            &client,
            "the alert fires",
            Duration::from_secs(30),
            &mut seen,
            |alerts| ours(alerts, "firing"),
        )
        .await;
    assert_eq!(seen, ["pending", "firing"], "pending first, then firing");

    // Released: the backlog is handled, the gauge drops, the alert resolves.
    gate.send(true).unwrap();
    inbox.wait_idle(Duration::from_secs(10)).await.unwrap();
    prometheus
        .wait_for(
            &client,
            "the alert resolves",
            Duration::from_secs(20),
            &mut seen,
            |alerts| alerts.is_empty(),
        )
        .await;
    assert_eq!(seen, ["pending", "firing"], "{seen:?}");
    workers.shutdown().await;
    drop(prometheus);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_test_rules_differ_from_production_only_in_the_backing_up_rule() {
    let production = std::fs::read_to_string(repository_file("docs/prometheus/alerts.yml")).unwrap();
    let test = rules_for_the_test(&production);
    let changed: Vec<(&str, &str)> = production
        .lines()
        .zip(test.lines())
        .filter(|(before, after)| before != after)
        .collect();
    assert_eq!(changed.len(), 2, "{changed:?}");
    assert!(changed[0].1.ends_with(BACKING_UP_THRESHOLD), "{changed:?}");
    assert!(changed[1].1.ends_with(BACKING_UP_FOR), "{changed:?}");
    assert_eq!(production.lines().count(), test.lines().count());
}
