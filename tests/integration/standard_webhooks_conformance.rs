//! The Standard Webhooks conformance fixture through both framework adapters,
//! over real HTTP on loopback: the axum app with `WebhookLayer` and the actix
//! app with the `Webhook` extractor, each serving one route per case whose
//! receiver has the case's keys and a fixed clock at the case's `now`.
//!
//! Every case with an event body is posted once: a genuine one must get
//! `200 {"received":true}` and run the handler exactly once with the
//! `webhook-id` as the event id; any other must get `400 Webhook Error: …`
//! and run nothing. (The specification's example, whose body is not an event,
//! goes through the core and the CLI only.)

use crate::actix_loopback;
use crate::axum_loopback;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use actix_web::{web, App, HttpResponse};
use axum::routing::post;
use axum::Router;
use payhook::signature::StandardWebhooks;
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::{Event, FixedClock, Receiver};
use payhook_test_support::standard_webhooks::{cases, Case};

/// The event ids the handler ran for, in order.
#[derive(Clone, Default)]
struct Handled(Arc<Mutex<Vec<String>>>);

impl Handled {
    fn record(&self, event: &Event) {
        self.0.lock().expect("not poisoned").push(event.id().to_owned());
    }

    fn ids(&self) -> Vec<String> {
        self.0.lock().expect("not poisoned").clone()
    }
}

fn event_cases() -> Vec<Case> {
    cases().into_iter().filter(|case| case.event_body).collect()
}

fn receiver(case: &Case) -> Receiver {
    let scheme = StandardWebhooks::builder()
        .secrets(case.secrets.iter().cloned())
        .public_keys(case.public_keys.iter().cloned())
        .clock(FixedClock::new(case.now))
        .build()
        .unwrap_or_else(|error| panic!("{}: the keys are refused: {error}", case.name));
    Receiver::builder()
        .scheme(scheme)
        .build()
        .expect("a valid receiver")
}

fn path(index: usize) -> String {
    format!("/case/{index}")
}

/// Posts every case to its route and checks each reply, then what the handler ran.
async fn post_every_case(addr: SocketAddr, cases: &[Case], handled: &Handled) {
    let client = reqwest::Client::new();
    let mut wrong = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        let mut request = client
            .post(format!("http://{addr}{}", path(index)))
            .header("content-type", "application/json")
            .body(case.body.clone());
        for (name, value) in &case.headers {
            request = request.header(name, value);
        }
        let reply = request.send().await.expect("the test server answers");
        let status = reply.status().as_u16();
        let body = reply.text().await.expect("a reply body");
        let as_expected = if case.genuine {
            status == 200 && body == r#"{"received":true}"#
        } else {
            status == 400 && body.starts_with("Webhook Error: ")
        };
        if !as_expected {
            wrong.push(format!(
                "{}: genuine={}, got {status} {body:?}",
                case.name, case.genuine
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "replies differ from the reference:\n{}",
        wrong.join("\n")
    );

    let mut runs = BTreeMap::<String, usize>::new();
    for id in handled.ids() {
        *runs.entry(id).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = cases
        .iter()
        .filter(|case| case.genuine)
        .map(|case| {
            (
                case.header("webhook-id")
                    .expect("a genuine case has an id")
                    .to_owned(),
                1,
            )
        })
        .collect();
    assert_eq!(
        runs, expected,
        "the handler runs once per genuine case, under its webhook-id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_layer_reaches_the_reference_verdict_on_every_case() {
    let cases = event_cases();
    let handled = Handled::default();
    let mut app = Router::new();
    for (index, case) in cases.iter().enumerate() {
        let handled = handled.clone();
        app = app.route(
            &path(index),
            post(move |Webhook(event): Webhook| async move {
                handled.record(&event);
                Received
            })
            .route_layer(WebhookLayer::new(receiver(case))),
        );
    }
    let addr = axum_loopback::serve(app).await;
    post_every_case(addr, &cases, &handled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_extractor_reaches_the_reference_verdict_on_every_case() {
    let cases = event_cases();
    let handled = Handled::default();
    // Built once, outside the app factory: one receiver (and store) per route.
    let configs: Vec<payhook::actix::WebhookConfig> = cases
        .iter()
        .map(|case| payhook::actix::WebhookConfig::new(receiver(case)))
        .collect();
    let recorder = handled.clone();
    let addr = actix_loopback::serve(move || {
        let mut app = App::new().app_data(web::Data::new(recorder.clone()));
        for (index, config) in configs.iter().enumerate() {
            app = app.service(
                web::resource(path(index))
                    .wrap(config.clone())
                    .route(web::post().to(actix_handler)),
            );
        }
        app
    });
    post_every_case(addr, &cases, &handled).await;
}

async fn actix_handler(webhook: payhook::actix::Webhook, handled: web::Data<Handled>) -> HttpResponse {
    handled.record(webhook.event());
    webhook.ack().await
}
