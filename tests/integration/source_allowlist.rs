//! The source-IP allowlist behind trusted proxies, over real HTTP on loopback,
//! for each way a delivery comes in: the tower layer on axum, the actix-web
//! extractor, and the inbox route of each (real SQLite files).
//!
//! Every address of 127.0.0.0/8 reaches this machine, so the client binds its
//! socket to one of them to be a different peer: 127.0.0.2 is an allowed
//! sender, 127.0.0.3 a trusted proxy (a load balancer), 127.0.0.4 a stranger.
//! Each server also listens on `[::1]`, an allowed IPv6 peer.
//!
//! One table of cases runs against every server; each case sends a genuine,
//! signed delivery of its own event, so what the server handled or stored
//! afterwards must be exactly the events of the allowed cases.

use std::collections::BTreeSet;
use std::future::IntoFuture;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use payhook::inbox::sqlx::{self, AnyPool};
use payhook::inbox::{Inbox, Job, Workers};
use payhook::sender::{unique_event_id, EventBuilder, SignedDelivery};
use payhook::{ConfigError, Receiver, ReceiverBuilder};

const SECRET: &str = "whsec_source_allowlist";
const ALLOWED: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const PROXY: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
const STRANGER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4));
const IPV6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);
const REFUSED: &str = "Webhook Error: the source address is not allowed to deliver to this endpoint";

fn receiver() -> ReceiverBuilder {
    Receiver::builder()
        .secret(SECRET)
        // As an operator writes it in an environment variable.
        .allowed_networks(["127.0.0.2, ::1", "198.51.100.0/24,2001:db8:aa::/48"])
        .trusted_proxies(["127.0.0.3"])
}

/// Event ids the server handled or stored, as the test reads them back.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, id: &str) {
        self.0.lock().unwrap().push(id.to_owned());
    }

    fn ids(&self) -> BTreeSet<String> {
        self.0.lock().unwrap().iter().cloned().collect()
    }
}

/// One request: from which source address, with which forwarding headers,
/// and whether it must get through.
struct Case {
    name: &'static str,
    from: IpAddr,
    headers: &'static [(&'static str, &'static str)],
    allowed: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "an allowed peer",
        from: ALLOWED,
        headers: &[],
        allowed: true,
    },
    Case {
        name: "a stranger",
        from: STRANGER,
        headers: &[],
        allowed: false,
    },
    Case {
        name: "forwarded by the trusted proxy for an allowed client",
        from: PROXY,
        headers: &[("x-forwarded-for", "198.51.100.7")],
        allowed: true,
    },
    Case {
        name: "the trusted proxy forwarding for a stranger",
        from: PROXY,
        headers: &[("x-forwarded-for", "192.0.2.1")],
        allowed: false,
    },
    Case {
        name: "the trusted proxy itself, forwarding nothing",
        from: PROXY,
        headers: &[],
        allowed: false,
    },
    Case {
        name: "a forwarding header from an untrusted peer is ignored",
        from: STRANGER,
        headers: &[
            ("x-forwarded-for", "198.51.100.7"),
            ("forwarded", "for=198.51.100.7"),
        ],
        allowed: false,
    },
    Case {
        name: "a spoofed allowed hop left of the real client is ignored",
        from: PROXY,
        headers: &[("x-forwarded-for", "198.51.100.7, 192.0.2.1")],
        allowed: false,
    },
    Case {
        name: "a spoofed stranger hop left of the real client is ignored too",
        from: PROXY,
        headers: &[("x-forwarded-for", "192.0.2.1, 198.51.100.7")],
        allowed: true,
    },
    Case {
        name: "two X-Forwarded-For lines are one list",
        from: PROXY,
        headers: &[
            ("x-forwarded-for", "192.0.2.1"),
            ("x-forwarded-for", "198.51.100.7, 127.0.0.3"),
        ],
        allowed: true,
    },
    Case {
        name: "Forwarded, RFC 7239",
        from: PROXY,
        headers: &[(
            "forwarded",
            "for=192.0.2.1, for=198.51.100.7;proto=https;by=127.0.0.3",
        )],
        allowed: true,
    },
    Case {
        name: "Forwarded with a quoted IPv6 client and port",
        from: PROXY,
        headers: &[("forwarded", r#"for="[2001:db8:aa::17]:4711""#)],
        allowed: true,
    },
    Case {
        name: "Forwarded for an IPv6 stranger",
        from: PROXY,
        headers: &[("forwarded", r#"for="[2001:db8:bb::17]""#)],
        allowed: false,
    },
    Case {
        name: "an IPv4-mapped client is compared as IPv4",
        from: PROXY,
        headers: &[("x-forwarded-for", "::ffff:198.51.100.7")],
        allowed: true,
    },
    Case {
        name: "a malformed hop from the trusted proxy",
        from: PROXY,
        headers: &[("x-forwarded-for", "198.51.100.7, unknown")],
        allowed: false,
    },
    Case {
        name: "the two headers disagreeing",
        from: PROXY,
        headers: &[
            ("x-forwarded-for", "198.51.100.7"),
            ("forwarded", "for=198.51.100.8"),
        ],
        allowed: false,
    },
    Case {
        name: "an allowed IPv6 peer",
        from: IPV6,
        headers: &[],
        allowed: true,
    },
];

/// Sends one signed delivery of a new event from `from` to the server listening
/// on `v4` (or `v6` for an IPv6 source); returns its event id, status, body,
/// and whether the reply asked to close the connection.
async fn deliver(case: &Case, v4: SocketAddr, v6: SocketAddr) -> (String, u16, String, bool) {
    let id = unique_event_id();
    let signed =
        SignedDelivery::now(EventBuilder::payment_intent_succeeded().id(&id).to_json(), SECRET).unwrap();
    let to = if case.from.is_ipv6() { v6 } else { v4 };
    let client = reqwest::Client::builder()
        .local_address(case.from)
        .build()
        .unwrap();
    let mut request = client
        .post(format!("http://{to}/webhooks"))
        .header("content-type", "application/json")
        .header("x-service-signature", &signed.signature)
        .body(signed.body);
    for (name, value) in case.headers {
        request = request.header(*name, *value);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|err| panic!("{}: {err}", case.name));
    let status = response.status().as_u16();
    let closes = response
        .headers()
        .get("connection")
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"close"));
    (id, status, response.text().await.unwrap(), closes)
}

/// Runs every case; returns the ids of the allowed ones.
async fn run_cases(v4: SocketAddr, v6: SocketAddr) -> BTreeSet<String> {
    let mut allowed = BTreeSet::new();
    for case in CASES {
        let (id, status, body, closes) = deliver(case, v4, v6).await;
        if case.allowed {
            assert_eq!(
                (status, body.as_str()),
                (200, r#"{"received":true}"#),
                "{}",
                case.name
            );
            allowed.insert(id);
        } else {
            assert_eq!((status, body.as_str()), (403, REFUSED), "{}", case.name);
            assert!(
                closes,
                "{}: a refusal closes the connection, its body unread",
                case.name
            );
        }
    }
    allowed
}

fn webhook_app(seen: &Seen, receiver: Receiver) -> axum::Router {
    use axum::routing::post;
    use payhook::tower::axum::{Received, Webhook};
    let seen = seen.clone();
    axum::Router::new()
        .route(
            "/webhooks",
            post(move |Webhook(event): Webhook| async move {
                seen.push(event.id());
                Received
            }),
        )
        .route_layer(payhook::tower::WebhookLayer::new(receiver))
}

/// Serves `app` with `payhook::tower::axum::serve` on 127.0.0.1 and [::1].
async fn serve_axum(app: axum::Router) -> (SocketAddr, SocketAddr) {
    let mut addrs = Vec::new();
    for ip in [IpAddr::V4(Ipv4Addr::LOCALHOST), IPV6] {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        tokio::spawn(payhook::tower::axum::serve(listener, app.clone()).into_future());
    }
    (addrs[0], addrs[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_layer() {
    let seen = Seen::default();
    let (v4, v6) = serve_axum(webhook_app(&seen, receiver().build().unwrap())).await;
    let allowed = run_cases(v4, v6).await;
    assert_eq!(
        seen.ids(),
        allowed,
        "the handler ran for the allowed deliveries only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_layer_with_axums_own_connect_info() {
    let seen = Seen::default();
    let app = webhook_app(&seen, receiver().build().unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let v4 = listener.local_addr().unwrap();
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    let allowed = deliver(&CASES[0], v4, v4).await;
    assert_eq!(allowed.1, 200, "{}", allowed.2);
    let refused = deliver(&CASES[1], v4, v4).await;
    assert_eq!((refused.1, refused.2.as_str()), (403, REFUSED));
    assert_eq!(seen.ids(), BTreeSet::from([allowed.0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_without_a_peer_address_is_a_configuration_error_never_an_allow() {
    let seen = Seen::default();
    let app = webhook_app(&seen, receiver().build().unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let v4 = listener.local_addr().unwrap();
    // Plain `axum::serve(listener, app)`: no ConnectInfo in the requests.
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (_, status, body, _) = deliver(&CASES[0], v4, v4).await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.starts_with("Webhook Error: server misconfigured: "),
        "{body}"
    );
    assert!(
        body.contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{body}"
    );
    assert!(seen.ids().is_empty());

    // Without an allowlist the peer is not needed.
    let open = webhook_app(&seen, Receiver::builder().secret(SECRET).build().unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let v4 = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, open).await });
    let (id, status, _, _) = deliver(&CASES[1], v4, v4).await;
    assert_eq!(status, 200);
    assert_eq!(seen.ids(), BTreeSet::from([id]));
}

/// Serves `app` with actix-web on 127.0.0.1 and [::1].
fn serve_actix<F, A>(app: F) -> (SocketAddr, SocketAddr, actix_web::dev::ServerHandle)
where
    F: Fn() -> actix_web::App<A> + Send + Clone + 'static,
    A: actix_web::dev::ServiceFactory<
            actix_web::dev::ServiceRequest,
            Config = (),
            Response = actix_web::dev::ServiceResponse,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
{
    let server = actix_web::HttpServer::new(app)
        .workers(1)
        .bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .bind((Ipv6Addr::LOCALHOST, 0))
        .unwrap();
    let addrs = server.addrs();
    let v4 = *addrs.iter().find(|addr| addr.is_ipv4()).unwrap();
    let v6 = *addrs.iter().find(|addr| addr.is_ipv6()).unwrap();
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    (v4, v6, handle)
}

#[actix_web::test]
async fn actix_extractor() {
    use payhook::actix::{Webhook, WebhookConfig};
    let seen = Seen::default();
    let config = WebhookConfig::new(receiver().build().unwrap());
    let handler_seen = seen.clone();
    let (v4, v6, server) = serve_actix(move || {
        let seen = handler_seen.clone();
        actix_web::App::new().app_data(config.clone()).route(
            "/webhooks",
            actix_web::web::post().to(move |webhook: Webhook| {
                let seen = seen.clone();
                async move {
                    seen.push(webhook.id());
                    webhook.ack().await
                }
            }),
        )
    });
    let allowed = run_cases(v4, v6).await;
    assert_eq!(
        seen.ids(),
        allowed,
        "the handler ran for the allowed deliveries only"
    );
    server.stop(true).await;
}

#[actix_web::test]
async fn actix_request_without_a_peer_address_is_a_configuration_error() {
    use actix_web::test;
    use payhook::actix::{Webhook, WebhookConfig};
    let app = test::init_service(
        actix_web::App::new()
            .app_data(WebhookConfig::new(receiver().build().unwrap()))
            .route(
                "/webhooks",
                actix_web::web::post().to(|webhook: Webhook| async move { webhook.ack().await }),
            ),
    )
    .await;
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    let request = || {
        test::TestRequest::post()
            .uri("/webhooks")
            .insert_header(("x-service-signature", signed.signature.as_str()))
            .set_payload(signed.body.clone())
    };
    let response = test::call_service(&app, request().to_request()).await;
    assert_eq!(response.status(), 500);
    let body = String::from_utf8(test::read_body(response).await.to_vec()).unwrap();
    assert!(body.contains("TestRequest::peer_addr"), "{body}");
    let response = test::call_service(
        &app,
        request()
            .peer_addr("127.0.0.2:5000".parse().unwrap())
            .to_request(),
    )
    .await;
    assert_eq!(response.status(), 200);
}

static INBOXES: AtomicUsize = AtomicUsize::new(0);

async fn inbox() -> (Inbox, Workers, Seen) {
    let dir = std::env::temp_dir().join(format!(
        "payhook-source-allowlist-{}-{}",
        std::process::id(),
        INBOXES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let inbox = Inbox::builder(receiver().build().unwrap())
        .poll_interval(Duration::from_millis(20))
        .connect(&format!("sqlite://{}", dir.join("inbox.db").display()))
        .await
        .unwrap();
    let seen = Seen::default();
    let handled = seen.clone();
    let workers = inbox.start(move |job: Job| {
        handled.push(job.event().id());
        async { Ok(()) }
    });
    (inbox, workers, seen)
}

/// Nothing but the allowed deliveries was stored, and each was processed.
async fn only_allowed_stored(pool: &AnyPool, seen: &Seen, allowed: &BTreeSet<String>) {
    let stored: BTreeSet<String> = sqlx::query_scalar("SELECT event_id FROM payhook_inbox")
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(&stored, allowed, "only the allowed deliveries are stored");
    let deadline = Instant::now() + Duration::from_secs(20);
    while &seen.ids() != allowed {
        assert!(
            Instant::now() < deadline,
            "processed {:?}, stored {allowed:?}",
            seen.ids()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_inbox_route() {
    let (inbox, workers, seen) = inbox().await;
    let pool = inbox.pool().clone();
    let app = axum::Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox));
    let (v4, v6) = serve_axum(app).await;
    let allowed = run_cases(v4, v6).await;
    only_allowed_stored(&pool, &seen, &allowed).await;
    workers.shutdown().await;
}

#[actix_web::test]
async fn actix_inbox_route() {
    let (inbox, workers, seen) = inbox().await;
    let pool = inbox.pool().clone();
    let (v4, v6, server) = serve_actix(move || {
        actix_web::App::new().route("/webhooks", payhook::actix::inbox_route(inbox.clone()))
    });
    let allowed = run_cases(v4, v6).await;
    only_allowed_stored(&pool, &seen, &allowed).await;
    workers.shutdown().await;
    server.stop(true).await;
}

#[test]
fn a_malformed_setting_is_a_build_error_naming_the_entry() {
    for (allowed, trusted, expected) in [
        (
            "10.0.0.0/33",
            None,
            r#"invalid allowed_networks entry "10.0.0.0/33": the prefix length is over 32"#,
        ),
        (
            "127.0.0.2, , ::1",
            None,
            r#"invalid allowed_networks entry "": the entry is empty"#,
        ),
        (
            "::1",
            Some("127.0.0.3/8"),
            r#"invalid trusted_proxies entry "127.0.0.3/8": bits are set"#,
        ),
        (
            "::1",
            Some("lb.internal"),
            r#"invalid trusted_proxies entry "lb.internal": not an IPv4"#,
        ),
    ] {
        let mut builder = Receiver::builder().secret(SECRET).allowed_networks([allowed]);
        if let Some(trusted) = trusted {
            builder = builder.trusted_proxies([trusted]);
        }
        let error = builder.build().unwrap_err();
        assert!(matches!(error, ConfigError::InvalidNetwork { .. }), "{error:?}");
        assert!(error.to_string().starts_with(expected), "{error}");
    }
}

#[actix_web::test]
async fn actix_expect_continue_refuses_a_stranger_before_inviting_its_body() {
    use actix_http::HttpService;
    use payhook::actix::{ExpectContinue, Webhook, WebhookConfig};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let config = WebhookConfig::new(receiver().build().unwrap());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = actix_server::Server::build()
        .workers(1)
        .disable_signals()
        .shutdown_timeout(0)
        .listen("webhooks", listener, move || {
            HttpService::build()
                .expect(ExpectContinue::new(config.receiver()))
                .h1(actix_service::map_config(
                    actix_web::App::new().app_data(config.clone()).route(
                        "/webhooks",
                        actix_web::web::post().to(|webhook: Webhook| async move { webhook.ack().await }),
                    ),
                    |_| actix_web::dev::AppConfig::default(),
                ))
                .tcp()
        })
        .unwrap()
        .run();
    let handle = server.handle();
    actix_web::rt::spawn(server);

    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    let head = format!(
        "POST /webhooks HTTP/1.1\r\nhost: {addr}\r\nx-service-signature: {}\r\n\
         expect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        signed.signature,
        signed.body.len()
    );
    for (from, expected) in [(STRANGER, "HTTP/1.1 403 "), (ALLOWED, "HTTP/1.1 100 Continue")] {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(from, 0)).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(10), async {
            while !reply.ends_with(b"\r\n\r\n") {
                match stream.read(&mut byte).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => reply.push(byte[0]),
                }
            }
        })
        .await
        .expect("the server answers the head");
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with(expected), "from {from}: {reply:?}");
    }
    handle.stop(true).await;
}
