//! Test mode while it runs: `payhook faults show` and `payhook faults set`
//! against a real `payhook emulate` process delivering to a real receiver.
//! "Now the endpoint breaks", then "now it is back", in one run: the faults
//! change through the API, and the emulator keeps every intent, event and
//! attempt it held.
#![cfg(feature = "emulate")]

use crate::{emulate, support};

use support::{payhook, Run, TestReceiver, SECRET};

const KEY: &str = "sk_test_faults";

/// `payhook emulate` forwarding to `url`; killed when dropped.
struct Emulate {
    _process: emulate::Emulate,
    base: String,
}

impl Emulate {
    fn start(url: &str) -> Self {
        let (process, base) = emulate::Emulate::forwarding_to(url, KEY, &["--secret", SECRET, "--seed", "7"]);
        Self {
            _process: process,
            base,
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend(["--api", &self.base, "--key", KEY]);
        payhook(&all, b"")
    }

    /// `GET` or `POST` (with a form body) on the API: the status and the JSON.
    fn call(&self, path: &str, form: Option<&str>) -> (u16, serde_json::Value) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = reqwest::Client::new();
            let request = match form {
                None => client.get(format!("{}{path}", self.base)),
                Some(form) => client
                    .post(format!("{}{path}", self.base))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(form.to_owned()),
            };
            let reply = request.bearer_auth(KEY).send().await.unwrap();
            let status = reply.status().as_u16();
            (
                status,
                serde_json::from_str(&reply.text().await.unwrap()).unwrap(),
            )
        })
    }
}

#[test]
fn faults_change_while_the_emulator_runs_and_it_keeps_its_state() {
    let receiver = TestReceiver::start();
    let emulate = Emulate::start(&receiver.url);

    let shown = emulate.run(&["faults", "show"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(
        shown.stdout.contains("faults in force (seed 7):"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("  undeliverable 0.0\n"), "{}", shown.stdout);

    let delivered = emulate.run(&["trigger", "payment_intent.succeeded"]);
    assert_eq!(delivered.code, 0, "{delivered:?}");

    // Now the endpoint breaks: every event undeliverable.
    let set = emulate.run(&["faults", "set", "--undeliverable", "1"]);
    assert_eq!(set.code, 0, "{set:?}");
    assert!(set.stdout.contains("  undeliverable 1.0\n"), "{}", set.stdout);
    assert!(
        set.stdout.contains("  duplicates 0.0\n"),
        "the others stay: {}",
        set.stdout
    );
    let lost = emulate.run(&["trigger", "payment_intent.succeeded", "--wait", "2"]);
    assert_eq!(lost.code, 1, "{lost:?}");
    assert!(
        lost.stdout.contains("not sent: the injected fault undeliverable"),
        "{}",
        lost.stdout
    );

    // And back: the next event is delivered, and nothing was lost meanwhile.
    let back = emulate.run(&["faults", "set", "--undeliverable", "0"]);
    assert_eq!(back.code, 0, "{back:?}");
    let delivered_again = emulate.run(&["trigger", "payment_intent.succeeded"]);
    assert_eq!(delivered_again.code, 0, "{delivered_again:?}");
    let (_, events) = emulate.call("/v1/events?limit=100", None);
    assert_eq!(events["data"].as_array().unwrap().len(), 3, "{events}");
    assert_eq!(receiver.handled().len(), 2);

    // Bad values are refused by name, by the command and by the API.
    let bad = emulate.run(&["faults", "set", "--undeliverable", "1.5"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    let none = emulate.run(&["faults", "set"]);
    assert_eq!(none.code, 2, "{none:?}");
    let (status, refused) = emulate.call("/v1/test_helpers/faults", Some("duplicates=2"));
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "duplicates", "{refused}");
    let (status, now) = emulate.call("/v1/test_helpers/faults", None);
    assert_eq!((status, now["duplicates"].as_f64()), (200, Some(0.0)), "{now}");
}

/// `payhook endpoints roll-secret`: the new secret goes into the file, never
/// to the terminal, and the output says when the previous one stops signing
/// (now, without an overlap); a refused roll leaves the file as it was.
#[test]
fn roll_secret_writes_the_new_secret_to_the_file_and_says_when_the_old_stops() {
    let receiver = TestReceiver::start();
    let emulate = Emulate::start(&receiver.url);
    let (_, endpoints) = emulate.call("/v1/webhook_endpoints", None);
    let endpoint = endpoints["data"][0]["id"].as_str().unwrap().to_owned();
    let dir = support::temp_dir("roll-secret");
    let file = dir.join("secrets");
    std::fs::write(&file, SECRET).unwrap();
    let path = file.to_str().unwrap();

    let rolled = emulate.run(&["endpoints", "roll-secret", &endpoint, "--secret-file", path]);
    assert_eq!(rolled.code, 0, "{rolled:?}");
    let listed = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert_eq!(lines[0], SECRET);
    assert!(lines[1].starts_with("whsec_") && lines[1] != SECRET);
    assert!(
        !rolled.stdout.contains(lines[1]),
        "the secret was printed: {}",
        rolled.stdout
    );
    assert!(
        rolled.stdout.contains("the previous secret stopped signing at"),
        "{}",
        rolled.stdout
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the file is readable by others: {mode:o}");
    }

    // The API's roll reply says when the previous secret stops: now, without an overlap.
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (status, reply) = emulate.call(
        &format!("/v1/webhook_endpoints/{endpoint}/roll_secret"),
        Some("expires_in=0"),
    );
    assert_eq!(status, 200, "{reply}");
    let stops = reply["previous_secret_expires_at"]
        .as_u64()
        .expect("previous_secret_expires_at");
    assert!((before..=before + 2).contains(&stops), "{reply}");
    let (_, reply) = emulate.call(
        &format!("/v1/webhook_endpoints/{endpoint}/roll_secret"),
        Some("expires_in=600"),
    );
    let stops = reply["previous_secret_expires_at"]
        .as_u64()
        .expect("previous_secret_expires_at");
    assert!((before + 600..=before + 602).contains(&stops), "{reply}");

    let unknown = emulate.run(&["endpoints", "roll-secret", "we_missing", "--secret-file", path]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), listed);
}
