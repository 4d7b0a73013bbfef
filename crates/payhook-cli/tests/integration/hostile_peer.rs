//! Output a hostile peer controls, run as the real binary: every value from a
//! request, a reply or a stored event is printed escaped (ESC, BEL, CR/LF,
//! U+202E, U+2028 and C1 controls never reach the terminal raw, and no line can
//! be forged), and `send` reads a bounded prefix of a reply that never ends.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use payhook_core::sender::unix_now;
use payhook_core::{sign, Secret};
use support::{payhook, temp_dir, TestReceiver, SECRET};

/// Every character a hostile value carries, raw.
const RAW: [char; 7] = [
    '\u{1b}', '\u{7}', '\r', '\u{202e}', '\u{2028}', '\u{9b}', '\u{85}',
];

/// A value holding each of them, as JSON string content (escaped, so the body
/// is valid JSON and the parsed value holds the raw characters).
const HOSTILE_JSON: &str =
    r"evt_x\u001b[2J\u001b]0;owned\u0007\r\nverified evt_forged\u202e\u2028\u009b31m\u0085";

/// No raw hostile character, and no line that starts like one of ours.
fn assert_clean(output: &str, forged_prefix: &str) {
    for c in RAW {
        assert!(!output.contains(c), "raw {c:?} in {output:?}");
    }
    assert!(
        !output.lines().any(|line| line.starts_with(forged_prefix)),
        "forged {forged_prefix:?} line in {output:?}"
    );
}

fn hostile_event() -> String {
    format!(
        r#"{{"id":"{HOSTILE_JSON}","type":"payment_intent.payment_failed{HOSTILE_JSON}","data":{{"object":{{"id":"pi_{HOSTILE_JSON}","amount":5,"currency":"btc","status":"x"}}}}}}"#
    )
}

#[test]
fn verify_prints_the_event_id_and_type_escaped() {
    let body = hostile_event();
    let header = sign(body.as_bytes(), &Secret::new(SECRET).unwrap(), unix_now());
    let run = payhook(
        &["verify", "--secret", SECRET, "--header", &header],
        body.as_bytes(),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_clean(&run.stdout, "verified evt_forged");
    assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
    assert!(
        run.stdout
            .starts_with(r"verified evt_x\u{1b}[2J\u{1b}]0;owned\u{7}\r\nverified evt_forged\u{202e}\u{2028}\u{9b}31m\u{85}"),
        "{run:?}"
    );
}

#[test]
fn send_prints_a_data_file_label_escaped() {
    let receiver = TestReceiver::start();
    let dir = temp_dir("hostile-label");
    let file = dir.join("event.json");
    std::fs::write(&file, hostile_event()).unwrap();
    let run = payhook(
        &[
            "send",
            "--to",
            &receiver.url,
            "--secret",
            SECRET,
            "--data",
            file.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_clean(&run.stdout, "verified evt_forged");
    assert!(run.stdout.contains(r"POST "), "{run:?}");
    assert!(run.stdout.contains(r"\u{202e}"), "{run:?}");
    // Not an event: the parse error quoting the file is escaped on stderr.
    std::fs::write(&file, "{\"id\":\"evt_1\u{1b}[2J\",\"type\":5}").unwrap();
    let run = payhook(
        &[
            "send",
            "--to",
            &receiver.url,
            "--secret",
            SECRET,
            "--data",
            file.to_str().unwrap(),
        ],
        b"",
    );
    assert_clean(&run.stderr, "x");
}

/// A server answering every request on one connection with `reply` (head and
/// body as written), then closing it.
fn raw_server(reply: impl Fn(&mut TcpStream) + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            read_request(&stream);
            reply(&mut stream);
        }
    });
    url
}

/// Reads one request's head and its `content-length` body.
fn read_request(stream: &TcpStream) {
    let mut reader = BufReader::new(stream);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
}

#[test]
fn send_prints_reply_bodies_escaped() {
    let body = "Webhook Error: no\r\nstate: dead\u{1b}[2J\u{7}\u{202e}\u{2028}\u{9b}\u{85} end";
    let url = raw_server(move |stream| {
        let _ = write!(
            stream,
            "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    let run = payhook(&["send", "--to", &url, "--secret", SECRET], b"");
    assert_eq!(run.code, 1, "a 400 to a genuine delivery is unexpected: {run:?}");
    assert_clean(&run.stdout, "state:");
    assert!(
        run.stdout
            .contains(r"#1 400 Webhook Error: no\r\nstate: dead\u{1b}[2J\u{7}\u{202e}"),
        "{run:?}"
    );
}

/// The peak resident memory of a running process, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn send_reads_a_bounded_prefix_of_an_endless_reply() {
    // A reply that never ends, as fast as the loopback takes it.
    let url = raw_server(|stream| {
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
        );
        let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
        while stream.write_all(chunk.as_bytes()).is_ok() {}
    });
    let timeout_secs = 10;
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_payhook"))
        .args(["send", "--to", &url, "--secret", SECRET, "--timeout"])
        .arg(timeout_secs.to_string())
        .args(["--repeat", "40", "--concurrency", "4"])
        .env_remove("PAYHOOK_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        if let Some(kib) = peak_rss_kib(pid) {
            peak = peak.max(kib);
        }
        assert!(
            started.elapsed() < Duration::from_secs(timeout_secs + 20),
            "send did not finish"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(peak < 100 * 1024, "peak RSS {peak} KiB");
    // Each delivery stopped reading at the limit rather than at the timeout.
    assert!(
        started.elapsed() < Duration::from_secs(timeout_secs),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let cut = stdout
        .lines()
        .filter(|line| line.contains("(reply longer than 64 KiB; the rest was not read)"))
        .count();
    assert_eq!(cut, 40, "{stdout}");
}

#[cfg(feature = "inbox")]
mod inbox {
    use bytes::Bytes;
    use payhook_core::Receiver;
    use payhook_inbox::Inbox;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn inbox_list_and_show_print_stored_events_escaped() {
        let dir = temp_dir("hostile-inbox");
        let url = format!("sqlite://{}", dir.join("inbox.db").display());
        let receiver = Receiver::builder().secret(SECRET).build().unwrap();
        let inbox = Inbox::builder(receiver).connect(&url).await.unwrap();
        // CR/LF between JSON tokens, and hostile characters in every string.
        let body = format!(
            "{{\"id\":\"{HOSTILE_JSON}\",\r\nstate: dead\r\n\"type\":\"t{HOSTILE_JSON}\",\"data\":{{\"note\":\"\u{202e}\u{2028}\u{9b}\u{85}\"}}}}"
        );
        // Not JSON as it stands (the forged line is bare text): it must be
        // refused. The same forgery inside a string and between tokens is
        // valid JSON and is stored.
        let stored = format!(
            "{{\"id\":\"{HOSTILE_JSON}\",\r\n\"x\\r\\nstate: dead\":1,\r\n\"type\":\"t{HOSTILE_JSON}\",\"data\":{{\"note\":\"\u{202e}\u{2028}\u{9b}\u{85}\"}}}}"
        );
        for (body, status) in [(body, 400), (stored, 200)] {
            let body = Bytes::from(body);
            let mut headers = http::HeaderMap::new();
            let header = sign(&body, &Secret::new(SECRET).unwrap(), unix_now());
            headers.insert("x-service-signature", header.parse().unwrap());
            let reply = inbox.ingest(&headers, body).await;
            assert_eq!(reply.status().as_u16(), status, "{}", reply.body());
        }
        let run = tokio::task::spawn_blocking(move || {
            let env = [("PAYHOOK_DATABASE_URL", url.as_str())];
            let list = support::payhook_with_env(&["inbox", "list"], b"", &env);
            let id =
                "evt_x\u{1b}[2J\u{1b}]0;owned\u{7}\r\nverified evt_forged\u{202e}\u{2028}\u{9b}31m\u{85}";
            let show = support::payhook_with_env(&["inbox", "show", id], b"", &env);
            (list, show)
        })
        .await
        .unwrap();
        let (list, show) = run;
        assert_eq!(list.code, 0, "{list:?}");
        assert_clean(&list.stdout, "verified evt_forged");
        assert_eq!(list.stdout.lines().count(), 2, "one row for one event: {list:?}");
        assert_eq!(show.code, 0, "{show:?}");
        assert_clean(&show.stdout, "state: dead");
        assert_eq!(
            show.stdout
                .lines()
                .filter(|line| line.starts_with("state:"))
                .count(),
            1,
            "{show:?}"
        );
        // The body is shown, laid out and escaped as JSON: still readable.
        assert!(show.stdout.contains("\nbody:\n  {\n"), "{show:?}");
        assert!(show.stdout.contains(r#"    "x\r\nstate: dead": 1,"#), "{show:?}");
        assert!(
            show.stdout.contains(r#""note": "\u202e\u2028\u009b\u0085""#),
            "{show:?}"
        );
    }
}
