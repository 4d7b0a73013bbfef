//! The emulator's HTTP API over real loopback HTTP: every endpoint, every error,
//! pagination edges and idempotency.

use crate::support;

use std::time::Duration;

use payhook_emulator::Emulator;
use support::{limits, started, Api};

#[tokio::test]
async fn authentication_accepts_bearer_and_basic_test_keys_only() {
    let (_emulator, api) = started(Emulator::builder()).await;
    let url = api.url("/v1/payment_intents");
    let get = || api.client.get(&url);

    let ok = api.send(get().bearer_auth("sk_test_anything_well_formed")).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let basic = api.send(get().basic_auth("sk_test_abc", Some(""))).await;
    assert_eq!(basic.status, 200, "{}", basic.text);
    let basic_no_password = api.send(get().basic_auth("sk_test_abc", None::<&str>)).await;
    assert_eq!(basic_no_password.status, 200, "{}", basic_no_password.text);

    for (request, code) in [
        (get(), "api_key_missing"),
        (
            get().header("authorization", "Token sk_test_abc"),
            "api_key_malformed",
        ),
        (get().header("authorization", "Bearer"), "api_key_malformed"),
        (
            get().basic_auth("sk_test_abc", Some("password")),
            "api_key_malformed",
        ),
        (get().bearer_auth("pk_test_abc"), "api_key_invalid"),
        (get().bearer_auth("sk_test_"), "api_key_invalid"),
        (get().bearer_auth("sk_test_has space"), "api_key_invalid"),
        (get().bearer_auth("sk_live_abc"), "livemode_key_refused"),
    ] {
        let reply = api.send(request).await;
        assert_eq!(reply.status, 401, "{code}: {}", reply.text);
        assert_eq!(reply.error_type(), "authentication_error", "{code}");
        assert_eq!(reply.code(), code, "{}", reply.text);
    }
    let live = api.send(get().bearer_auth("sk_live_abc")).await;
    assert!(live.message().contains("test mode only"), "{}", live.text);
    assert!(!live.text.contains("sk_live_abc"), "the key is never echoed");
}

#[tokio::test]
async fn a_fixed_key_is_the_only_key() {
    let (emulator, api) = started(Emulator::builder().api_key("sk_test_fixed_key")).await;
    assert_eq!(emulator.api_key(), "sk_test_fixed_key");
    assert_eq!(api.get("/v1/events").await.status, 200);
    let other = api
        .send(
            api.client
                .get(api.url("/v1/events"))
                .bearer_auth("sk_test_other_key"),
        )
        .await;
    assert_eq!((other.status, other.code()), (401, "api_key_unknown"));
    assert!(!other.text.contains("sk_test_other_key"));

    for bad in ["sk_live_x", "sk_test_", "whatever"] {
        assert!(Emulator::builder().api_key(bad).start().await.is_err(), "{bad}");
    }
}

#[tokio::test]
async fn create_and_retrieve_a_payment_intent_with_an_exact_wei_amount() {
    let (_emulator, api) = started(Emulator::builder()).await;
    // 2^128 − 1: far beyond 2^64, exact.
    let amount = "340282366920938463463374607431768211455";
    let reply = api
        .post_json(
            "/v1/payment_intents",
            &format!(r#"{{"amount":{amount},"currency":"eth","description":"order 42","metadata":{{"order":"42"}}}}"#),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(
        reply.text.contains(&format!(r#""amount":{amount},"#)),
        "{}",
        reply.text
    );
    let id = reply.id();
    assert!(id.starts_with("pi_") && id.len() == 27 && id[3..].bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_eq!(reply.json["object"], "payment_intent");
    assert_eq!(reply.json["amount_received"], 0);
    assert_eq!(reply.json["status"], "requires_payment");
    assert_eq!(
        reply.json["payment_method_types"],
        serde_json::json!(["ethereum"])
    );
    assert_eq!(reply.json["livemode"], false);
    assert_eq!(reply.json["metadata"]["order"], "42");
    assert_eq!(reply.json["description"], "order 42");
    let created = reply.json["created"].as_u64().expect("created");
    assert!(created.abs_diff(support::unix_now()) < 5);

    let fetched = api.get(&format!("/v1/payment_intents/{id}")).await;
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.text, reply.text);

    // A decimal string amount, the form encoding and the btc default.
    let form = api
        .post_form(
            "/v1/payment_intents",
            "amount=18446744073709551617&currency=btc&metadata[order]=7&metadata[customer]=c_1",
        )
        .await;
    assert_eq!(form.status, 200, "{}", form.text);
    assert!(
        form.text.contains(r#""amount":18446744073709551617,"#),
        "{}",
        form.text
    );
    assert_eq!(form.json["payment_method_types"], serde_json::json!(["bitcoin"]));
    assert_eq!(form.json["metadata"]["customer"], "c_1");
    assert_eq!(form.json["description"], serde_json::Value::Null);
    let listed = api
        .post_form(
            "/v1/payment_intents",
            "amount=5&currency=usdc&payment_method_types[]=ethereum&payment_method_types[]=solana_pay",
        )
        .await;
    assert_eq!(
        listed.json["payment_method_types"],
        serde_json::json!(["ethereum", "solana_pay"])
    );
    let string_amount = api
        .post_json(
            "/v1/payment_intents",
            r#"{"amount":"1500000000000000000","currency":"eth"}"#,
        )
        .await;
    assert!(string_amount.text.contains(r#""amount":1500000000000000000,"#));
}

#[tokio::test]
async fn invalid_payment_intents_are_refused_naming_the_parameter() {
    let (emulator, api) = started(Emulator::builder()).await;
    let cases: &[(&str, &str, &str)] = &[
        (r#"{"currency":"btc"}"#, "amount", "parameter_missing"),
        (r#"{"amount":10}"#, "currency", "parameter_missing"),
        (
            r#"{"amount":-1,"currency":"btc"}"#,
            "amount",
            "parameter_invalid_integer",
        ),
        (
            r#"{"amount":1.5,"currency":"btc"}"#,
            "amount",
            "parameter_invalid_integer",
        ),
        (
            r#"{"amount":1e18,"currency":"btc"}"#,
            "amount",
            "parameter_invalid_integer",
        ),
        (
            r#"{"amount":0,"currency":"btc"}"#,
            "amount",
            "parameter_invalid_integer",
        ),
        (
            r#"{"amount":"12abc","currency":"btc"}"#,
            "amount",
            "parameter_invalid_integer",
        ),
        (
            r#"{"amount":true,"currency":"btc"}"#,
            "amount",
            "parameter_invalid_integer",
        ),
        (
            r#"{"amount":340282366920938463463374607431768211456,"currency":"btc"}"#,
            "amount",
            "parameter_invalid_integer",
        ),
        (
            r#"{"amount":1,"currency":"BTC"}"#,
            "currency",
            "parameter_invalid_currency",
        ),
        (
            r#"{"amount":1,"currency":"bt"}"#,
            "currency",
            "parameter_invalid_currency",
        ),
        (
            r#"{"amount":1,"currency":"abcdefghijk"}"#,
            "currency",
            "parameter_too_long",
        ),
        (
            r#"{"amount":1,"currency":7}"#,
            "currency",
            "parameter_invalid_string",
        ),
        (
            r#"{"amount":1,"currency":"btc","colour":"red"}"#,
            "colour",
            "parameter_unknown",
        ),
        (
            r#"{"amount":1,"currency":"btc","payment_method_types":[]}"#,
            "payment_method_types",
            "parameter_invalid_array",
        ),
        (
            r#"{"amount":1,"currency":"btc","payment_method_types":"bitcoin"}"#,
            "payment_method_types",
            "parameter_invalid_array",
        ),
        (
            r#"{"amount":1,"currency":"btc","metadata":{"n":42}}"#,
            "metadata[n]",
            "parameter_invalid_string",
        ),
        (
            r#"{"amount":1,"currency":"btc","metadata":[]}"#,
            "metadata",
            "parameter_invalid_object",
        ),
    ];
    for (body, param, code) in cases {
        let reply = api.post_json("/v1/payment_intents", body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text);
        assert_eq!(reply.error_type(), "invalid_request_error", "{body}");
        assert_eq!(
            (reply.param(), reply.code()),
            (*param, *code),
            "{body}: {}",
            reply.text
        );
        assert!(
            reply.message().contains(param.split('[').next().unwrap_or(param)),
            "{body}: {}",
            reply.text
        );
    }
    // A form amount's message says what is wrong with the number.
    for (name, amount, says) in [
        ("negative", "-5", "negative"),
        ("a fraction", "1.5", "fraction"),
        (
            "beyond 2^128",
            "99999999999999999999999999999999999999999",
            "too large",
        ),
    ] {
        let reply = api
            .post_form("/v1/payment_intents", &format!("amount={amount}&currency=btc"))
            .await;
        assert!(reply.message().contains(says), "{name}: {}", reply.text);
    }

    // Metadata limits: 51 keys, a 41-character key, a 501-character value.
    let many: Vec<String> = (0..51).map(|i| format!("metadata[k{i}]=v")).collect();
    let reply = api
        .post_form(
            "/v1/payment_intents",
            &format!("amount=1&currency=btc&{}", many.join("&")),
        )
        .await;
    assert_eq!((reply.status, reply.param()), (400, "metadata"), "{}", reply.text);
    let long_key = "k".repeat(41);
    let reply = api
        .post_form(
            "/v1/payment_intents",
            &format!("amount=1&currency=btc&metadata[{long_key}]=v"),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "parameter_invalid_metadata"));
    let long_value = "v".repeat(501);
    let reply = api
        .post_form(
            "/v1/payment_intents",
            &format!("amount=1&currency=btc&metadata[k]={long_value}"),
        )
        .await;
    assert_eq!(
        (reply.status, reply.param()),
        (400, "metadata[k]"),
        "{}",
        reply.text
    );
    let fifty: Vec<String> = (0..50)
        .map(|i| format!("metadata[k{i}]={}", "v".repeat(500)))
        .collect();
    let reply = api
        .post_form(
            "/v1/payment_intents",
            &format!("amount=1&currency=btc&{}", fifty.join("&")),
        )
        .await;
    assert_eq!(
        reply.status, 200,
        "50 keys of 500-character values are allowed: {}",
        reply.text
    );

    // Nothing invalid was stored.
    assert_eq!(api.get("/v1/payment_intents?limit=100").await.ids().len(), 1);
    drop(emulator);
}

#[tokio::test]
async fn malformed_bodies_wrong_types_sizes_ids_and_methods_get_json_errors() {
    let (_emulator, api) =
        started(Emulator::builder().limits(limits(|limits| limits.body_bytes = 1024))).await;

    let reply = api.post_json("/v1/payment_intents", r#"{"amount":1,"#).await;
    assert_eq!(
        (reply.status, reply.code()),
        (400, "parameter_invalid_json"),
        "{}",
        reply.text
    );
    let reply = api.post_json("/v1/payment_intents", "[1,2]").await;
    assert_eq!((reply.status, reply.code()), (400, "parameter_invalid_json"));
    assert!(reply.message().contains("JSON object"));
    let reply = api.post_form("/v1/payment_intents", "amount[a][b]=1").await;
    assert_eq!(
        (reply.status, reply.code()),
        (400, "parameter_invalid_form"),
        "{}",
        reply.text
    );
    let reply = api
        .post_form("/v1/payment_intents", "amount=1&amount=2&currency=btc")
        .await;
    assert_eq!((reply.status, reply.param()), (400, "amount"));
    let reply = api
        .send(
            api.client
                .post(api.url("/v1/payment_intents"))
                .bearer_auth(&api.key)
                .header("content-type", "text/plain")
                .body("amount=1"),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (415, "unsupported_content_type"));
    let reply = api
        .send(
            api.client
                .post(api.url("/v1/payment_intents"))
                .bearer_auth(&api.key)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(vec![b'a', b'=', 0xff]),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    // Refused for its bytes, not merely because `a` is no parameter.
    assert_eq!(reply.code(), "parameter_invalid_form", "{}", reply.text);
    assert!(reply.message().contains("UTF-8"), "{}", reply.text);

    let big = format!("amount=1&currency=btc&description={}", "d".repeat(2000));
    let reply = api.post_form("/v1/payment_intents", &big).await;
    assert_eq!(
        (reply.status, reply.code()),
        (413, "request_too_large"),
        "{}",
        reply.text
    );
    assert!(reply.message().contains("1024-byte limit"));

    let unknown = "pi_000000000000000000000000";
    for path in [
        format!("/v1/payment_intents/{unknown}"),
        "/v1/events/evt_nope".to_owned(),
        "/v1/events/evt_nope/delivery_attempts".to_owned(),
        "/v1/webhook_endpoints/we_nope".to_owned(),
    ] {
        let reply = api.get(&path).await;
        assert_eq!(
            (reply.status, reply.code()),
            (404, "resource_missing"),
            "{path}: {}",
            reply.text
        );
        assert_eq!(reply.param(), "id");
    }
    for (method, path, code) in [
        (
            reqwest::Method::POST,
            format!("/v1/test_helpers/payment_intents/{unknown}/succeed"),
            "resource_missing",
        ),
        (
            reqwest::Method::DELETE,
            "/v1/webhook_endpoints/we_nope".to_owned(),
            "resource_missing",
        ),
        (
            reqwest::Method::POST,
            "/v1/webhook_endpoints/we_nope/roll_secret".to_owned(),
            "resource_missing",
        ),
        (reqwest::Method::GET, "/v1/charges".to_owned(), "route_unknown"),
    ] {
        let reply = api.request(method.clone(), &path).await;
        assert_eq!(
            (reply.status, reply.code()),
            (404, code),
            "{method} {path}: {}",
            reply.text
        );
    }
    // A hostile path is escaped and capped in the message.
    let reply = api.get(&format!("/v1/{}%0A%1B", "x".repeat(500))).await;
    assert_eq!(reply.status, 404);
    assert!(reply.message().len() < 200, "{}", reply.text);

    for (method, path) in [
        (reqwest::Method::DELETE, "/v1/payment_intents"),
        (reqwest::Method::PUT, "/v1/events"),
        (
            reqwest::Method::GET,
            "/v1/test_helpers/payment_intents/pi_x/succeed",
        ),
        (reqwest::Method::POST, "/v1/events/evt_x"),
    ] {
        let reply = api.request(method.clone(), path).await;
        assert_eq!(
            (reply.status, reply.code()),
            (405, "method_not_allowed"),
            "{method} {path}"
        );
    }

    // A list's query: (query, status, the parameter named, its code if checked).
    for (query, status, param, code) in [
        ("limit=0", 400, "limit", None),
        ("limit=101", 400, "limit", None),
        ("limit=ten", 400, "limit", None),
        ("expand=data", 400, "expand", Some("parameter_unknown")),
        (
            "starting_after=pi_a&ending_before=pi_b",
            400,
            "ending_before",
            None,
        ),
        ("starting_after=pi_gone", 404, "starting_after", None),
    ] {
        let reply = api.get(&format!("/v1/payment_intents?{query}")).await;
        assert_eq!(
            (reply.status, reply.param()),
            (status, param),
            "?{query}: {}",
            reply.text
        );
        if let Some(code) = code {
            assert_eq!(reply.code(), code, "?{query}: {}", reply.text);
        }
    }

    // After all that, the emulator still serves.
    assert_eq!(api.get("/v1/payment_intents").await.status, 200);
}

#[tokio::test]
async fn test_helpers_move_a_payment_intent_once_and_emit_its_event() {
    let (_emulator, api) = started(Emulator::builder()).await;
    let paid = api.create_intent("250000", "btc").await;
    let reply = api.succeed(&paid).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["status"], "succeeded");
    assert_eq!(reply.json["amount_received"], 250000);
    let again = api.succeed(&paid).await;
    assert_eq!(
        (again.status, again.code()),
        (400, "payment_intent_unexpected_state")
    );
    assert!(again.message().contains("succeeded"), "{}", again.text);
    let fail_after = api
        .post_empty(&format!("/v1/test_helpers/payment_intents/{paid}/fail"))
        .await;
    assert_eq!(
        (fail_after.status, fail_after.code()),
        (400, "payment_intent_unexpected_state")
    );

    let partly = api.create_intent("1000", "eth").await;
    let reply = api
        .post_form(
            &format!("/v1/test_helpers/payment_intents/{partly}/succeed"),
            "amount_received=400",
        )
        .await;
    assert_eq!(reply.json["amount_received"], 400, "{}", reply.text);
    let unknown_param = api.create_intent("1000", "eth").await;
    let reply = api
        .post_form(
            &format!("/v1/test_helpers/payment_intents/{unknown_param}/fail"),
            "reason=x",
        )
        .await;
    assert_eq!((reply.status, reply.param()), (400, "reason"));
    let reply = api
        .post_empty(&format!("/v1/test_helpers/payment_intents/{unknown_param}/fail"))
        .await;
    assert_eq!(reply.json["status"], "failed");
    assert_eq!(reply.json["amount_received"], 0);

    // Events, newest first, exactly as delivered.
    let events = api.get("/v1/events").await;
    assert_eq!(events.status, 200);
    assert_eq!(events.json["url"], "/v1/events");
    let data = events.json["data"].as_array().expect("list");
    let types: Vec<&str> = data.iter().map(|e| e["type"].as_str().unwrap_or("")).collect();
    assert_eq!(
        types,
        [
            "payment_intent.failed",
            "payment_intent.succeeded",
            "payment_intent.succeeded"
        ]
    );
    let first = &data[2];
    assert_eq!(first["object"], "event");
    assert_eq!(first["livemode"], false);
    assert_eq!(first["data"]["object"]["id"], paid.as_str());
    assert_eq!(first["data"]["object"]["status"], "succeeded");
    let id = first["id"].as_str().expect("event id");
    assert!(id.starts_with("evt_") && id.len() == 28);
    let one = api.get(&format!("/v1/events/{id}")).await;
    assert_eq!(one.json, *first);
    let attempts = api.get(&format!("/v1/events/{id}/delivery_attempts")).await;
    assert_eq!(
        (attempts.status, attempts.ids().len()),
        (200, 0),
        "no endpoint, no attempt"
    );
}

#[tokio::test]
async fn lists_page_newest_first_with_both_cursors() {
    let (_emulator, api) = started(Emulator::builder()).await;
    let empty = api.get("/v1/payment_intents").await;
    assert_eq!(
        empty.text,
        r#"{"object":"list","data":[],"has_more":false,"url":"/v1/payment_intents"}"#
    );

    let mut created = Vec::new();
    for i in 1..=12 {
        created.push(api.create_intent(&i.to_string(), "btc").await);
    }
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();

    let default_page = api.get("/v1/payment_intents").await;
    assert_eq!(default_page.ids(), newest_first[..10]);
    assert!(default_page.has_more());

    let exact = api.get("/v1/payment_intents?limit=12").await;
    assert_eq!(exact.ids(), newest_first);
    assert!(!exact.has_more(), "an exact page has no more");

    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(id) => format!("/v1/payment_intents?limit=5&starting_after={id}"),
            None => "/v1/payment_intents?limit=5".to_owned(),
        };
        let page = api.get(&path).await;
        walked.extend(page.ids());
        if !page.has_more() {
            break;
        }
        cursor = page.ids().last().cloned();
    }
    assert_eq!(walked, newest_first, "starting_after walks every object once");

    let oldest = &created[0];
    let after_oldest = api
        .get(&format!("/v1/payment_intents?starting_after={oldest}"))
        .await;
    assert_eq!((after_oldest.ids().len(), after_oldest.has_more()), (0, false));

    // ending_before: the page just newer than the cursor, still newest first.
    let before = api
        .get(&format!(
            "/v1/payment_intents?limit=3&ending_before={}",
            created[4]
        ))
        .await;
    assert_eq!(
        before.ids(),
        [created[7].clone(), created[6].clone(), created[5].clone()]
    );
    assert!(before.has_more());
    let before_top = api
        .get(&format!(
            "/v1/payment_intents?limit=3&ending_before={}",
            created[9]
        ))
        .await;
    assert_eq!(before_top.ids(), [created[11].clone(), created[10].clone()]);
    assert!(!before_top.has_more());
    let before_newest = api
        .get(&format!("/v1/payment_intents?ending_before={}", created[11]))
        .await;
    assert_eq!((before_newest.ids().len(), before_newest.has_more()), (0, false));
}

#[tokio::test]
async fn webhook_endpoints_are_registered_listed_rolled_and_deleted() {
    let (_emulator, api) = started(Emulator::builder()).await;
    let reply = api
        .post_json(
            "/v1/webhook_endpoints",
            r#"{"url":"http://127.0.0.1:9/webhooks","enabled_events":["payment_intent.failed"],"description":"ops"}"#,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let id = reply.id();
    assert!(id.starts_with("we_") && id.len() == 27);
    let secret = reply.json["secret"]
        .as_str()
        .expect("secret on create")
        .to_owned();
    assert!(secret.starts_with("whsec_") && secret.len() > 20);
    assert_eq!(
        reply.json["enabled_events"],
        serde_json::json!(["payment_intent.failed"])
    );
    assert_eq!(reply.json["object"], "webhook_endpoint");

    let (all_id, _) = api.register("http://127.0.0.1:9/other").await;
    let fetched = api.get(&format!("/v1/webhook_endpoints/{id}")).await;
    assert_eq!(fetched.status, 200);
    assert!(
        fetched.json.get("secret").is_none(),
        "the secret is shown only on create"
    );
    assert!(!fetched.text.contains(&secret));
    let listed = api.get("/v1/webhook_endpoints").await;
    assert_eq!(listed.ids(), [all_id.clone(), id.clone()]);
    assert!(!listed.text.contains("whsec_"));
    assert_eq!(listed.json["data"][0]["enabled_events"], serde_json::json!(["*"]));

    let rolled = api
        .post_form(
            &format!("/v1/webhook_endpoints/{id}/roll_secret"),
            "expires_in=3600",
        )
        .await;
    assert_eq!(rolled.status, 200, "{}", rolled.text);
    let new_secret = rolled.json["secret"].as_str().expect("new secret");
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    let reply = api
        .post_form(
            &format!("/v1/webhook_endpoints/{id}/roll_secret"),
            "expires_in=604801",
        )
        .await;
    assert_eq!((reply.status, reply.param()), (400, "expires_in"));
    let reply = api
        .post_form(
            &format!("/v1/webhook_endpoints/{id}/roll_secret"),
            "expires_in=-1",
        )
        .await;
    assert_eq!((reply.status, reply.param()), (400, "expires_in"));

    for (body, param, code) in [
        ("enabled_events[]=*", "url", "parameter_missing"),
        ("url=not%20a%20url", "url", "url_invalid"),
        ("url=https://127.0.0.1/webhooks", "url", "url_invalid"),
        ("url=ftp://127.0.0.1/", "url", "url_invalid"),
        (
            "url=http://127.0.0.1/&enabled_events[]=charge.refunded%0Aforged",
            "enabled_events",
            "parameter_invalid_event_type",
        ),
        (
            "url=http://127.0.0.1/&enabled_events[]=",
            "enabled_events",
            "parameter_invalid_event_type",
        ),
        (
            "url=http://127.0.0.1/&secret=whsec_mine",
            "secret",
            "parameter_unknown",
        ),
    ] {
        let reply = api.post_form("/v1/webhook_endpoints", body).await;
        assert_eq!(
            (reply.status, reply.param(), reply.code()),
            (400, param, code),
            "{body}: {}",
            reply.text
        );
    }
    let reply = api
        .post_json(
            "/v1/webhook_endpoints",
            r#"{"url":"http://127.0.0.1/","enabled_events":[]}"#,
        )
        .await;
    assert_eq!((reply.status, reply.param()), (400, "enabled_events"));

    let deleted = api.delete(&format!("/v1/webhook_endpoints/{id}")).await;
    assert_eq!(
        deleted.json,
        serde_json::json!({"id": id, "object": "webhook_endpoint", "deleted": true})
    );
    assert_eq!(api.get(&format!("/v1/webhook_endpoints/{id}")).await.status, 404);
    assert_eq!(api.get("/v1/webhook_endpoints").await.ids(), [all_id]);
}

#[tokio::test]
async fn too_many_endpoints_are_refused_not_evicted() {
    let (_emulator, api) = started(Emulator::builder().limits(limits(|limits| limits.endpoints = 2))).await;
    let (first, _) = api.register("http://127.0.0.1:9/a").await;
    api.register("http://127.0.0.1:9/b").await;
    let reply = api
        .post_form("/v1/webhook_endpoints", "url=http://127.0.0.1:9/c")
        .await;
    assert_eq!((reply.status, reply.code()), (400, "webhook_endpoints_limit"));
    assert_eq!(
        api.get(&format!("/v1/webhook_endpoints/{first}")).await.status,
        200
    );
}

#[tokio::test]
async fn an_idempotency_key_replays_refuses_other_parameters_and_scopes_per_api_key() {
    let (_emulator, api) = started(Emulator::builder()).await;
    let post = |key: &str, body: &str| {
        api.client
            .post(api.url("/v1/payment_intents"))
            .bearer_auth(&api.key)
            .header("idempotency-key", key)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_owned())
    };
    let first = api.send(post("order-1", "amount=100&currency=btc")).await;
    assert_eq!(first.status, 200);
    let replay = api.send(post("order-1", "amount=100&currency=btc")).await;
    assert_eq!(replay.text, first.text, "the first reply is replayed");
    assert_eq!(
        replay.headers.get("idempotent-replayed").map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert_eq!(
        api.get("/v1/payment_intents").await.ids().len(),
        1,
        "created once"
    );

    let other = api.send(post("order-1", "amount=101&currency=btc")).await;
    assert_eq!((other.status, other.error_type()), (400, "idempotency_error"));
    assert_eq!(other.code(), "idempotency_key_reused");

    // An error reply is replayed too: the key stands for that request.
    let bad = api.send(post("order-2", "amount=-1&currency=btc")).await;
    let bad_again = api.send(post("order-2", "amount=-1&currency=btc")).await;
    assert_eq!((bad.status, bad_again.text), (400, bad.text.clone()));

    // Another API key has its own keys.
    let elsewhere = api
        .send(
            api.client
                .post(api.url("/v1/payment_intents"))
                .bearer_auth("sk_test_another_account")
                .header("idempotency-key", "order-1")
                .header("content-type", "application/x-www-form-urlencoded")
                .body("amount=999&currency=eth"),
        )
        .await;
    assert_eq!(elsewhere.status, 200, "{}", elsewhere.text);
    assert_ne!(elsewhere.id(), first.id());

    let too_long = api.send(post(&"k".repeat(256), "amount=1&currency=btc")).await;
    assert_eq!(
        (too_long.status, too_long.code()),
        (400, "idempotency_key_invalid")
    );
}

#[tokio::test]
async fn two_concurrent_requests_with_one_key_run_once_and_the_other_gets_409() {
    let (_emulator, api) = started(Emulator::builder().api_latency(Duration::from_millis(400))).await;
    let post = || {
        api.client
            .post(api.url("/v1/payment_intents"))
            .bearer_auth(&api.key)
            .header("idempotency-key", "same-key")
            .header("content-type", "application/json")
            .body(r#"{"amount":1,"currency":"btc"}"#)
    };
    let (a, b) = tokio::join!(api.send(post()), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        api.send(post()).await
    });
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        (b.status, b.error_type(), b.code()),
        (409, "idempotency_error", "idempotency_key_in_use")
    );
    // Once the first has finished, the key replays it.
    let later = api.send(post()).await;
    assert_eq!(later.text, a.text);
    assert_eq!(api.get("/v1/payment_intents").await.ids(), [a.id()]);
}

#[tokio::test]
async fn a_client_that_goes_away_does_not_leave_its_key_in_flight() {
    let (_emulator, api) = started(Emulator::builder().api_latency(Duration::from_secs(1))).await;
    let post = |timeout: Duration| {
        api.client
            .post(api.url("/v1/payment_intents"))
            .bearer_auth(&api.key)
            .header("idempotency-key", "abandoned")
            .header("content-type", "application/json")
            .body(r#"{"amount":1,"currency":"btc"}"#)
            .timeout(timeout)
    };
    assert!(
        post(Duration::from_millis(50)).send().await.is_err(),
        "the client gives up"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let retried = api.send(post(Duration::from_secs(5))).await;
    assert_eq!(retried.status, 200, "{}", retried.text);
    // The retry ran the request (it is no replay), and the abandoned one
    // created nothing: one payment intent, the retry's.
    assert!(retried.headers.get("idempotent-replayed").is_none());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(api.get("/v1/payment_intents").await.ids(), [retried.id()]);
}

#[tokio::test]
async fn parameter_names_from_the_request_are_escaped_and_capped_in_error_replies() {
    let (_emulator, api) = started(Emulator::builder()).await;

    // An unknown form parameter whose name holds a bidi override (it would
    // reorder a terminal line) and runs on for 5 000 characters.
    let name = format!("\u{202e}{}", "x".repeat(5000));
    let encoded: String = form_urlencoded::byte_serialize(name.as_bytes()).collect();
    let reply = api
        .post_form(
            "/v1/payment_intents",
            &format!("amount=1&currency=btc&{encoded}=1"),
        )
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (400, "parameter_unknown"),
        "{}",
        reply.text
    );
    assert!(
        !reply.text.contains('\u{202e}'),
        "the bidi override is escaped: {}",
        reply.text
    );
    assert!(reply.message().contains(r"\u{202e}"), "{}", reply.message());
    assert!(reply.param().starts_with(r"\u{202e}xxx"), "{}", reply.param());
    assert!(
        reply.param().chars().count() <= 80,
        "param capped: {}",
        reply.param()
    );
    assert!(
        reply.text.len() < 1000,
        "the reply does not echo the whole name: {} bytes",
        reply.text.len()
    );

    // A JSON metadata key with a non-string value: named in `param`, capped.
    let key = "k".repeat(5000);
    let reply = api
        .post_json(
            "/v1/payment_intents",
            &format!(r#"{{"amount":1,"currency":"btc","metadata":{{"{key}":42}}}}"#),
        )
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (400, "parameter_invalid_string"),
        "{}",
        reply.text
    );
    assert!(reply.param().starts_with("metadata[kkk"), "{}", reply.param());
    assert!(
        reply.param().chars().count() <= 80,
        "param capped: {}",
        reply.param()
    );
    assert!(reply.text.len() < 1000, "{} bytes", reply.text.len());
}

#[tokio::test]
async fn an_endpoint_url_with_credentials_is_refused_so_they_never_reach_a_log_or_a_listing() {
    let (emulator, api) = started(Emulator::builder()).await;
    for url in [
        "http://hook:hunter2@127.0.0.1:9/webhooks",
        "http://hunter2@127.0.0.1:9/webhooks",
    ] {
        let encoded: String = form_urlencoded::byte_serialize(url.as_bytes()).collect();
        let reply = api
            .post_form("/v1/webhook_endpoints", &format!("url={encoded}"))
            .await;
        assert_eq!(
            (reply.status, reply.param(), reply.code()),
            (400, "url", "url_invalid"),
            "{url}: {}",
            reply.text
        );
        assert!(
            reply.message().contains("user name or password"),
            "{}",
            reply.text
        );
        assert!(!reply.text.contains("hunter2"), "{}", reply.text);
    }
    // The library's registration refuses it the same way.
    let refused = emulator
        .register_endpoint("http://hook:hunter2@127.0.0.1:9/webhooks")
        .expect_err("refused");
    assert!(!refused.message.contains("hunter2"), "{}", refused.message);
    let listed = api.get("/v1/webhook_endpoints").await;
    assert_eq!(
        listed.json["data"].as_array().map(Vec::len),
        Some(0),
        "{}",
        listed.text
    );
}

#[tokio::test]
async fn events_filter_by_type_and_creation_time() {
    let (emulator, api) = started(Emulator::builder()).await;
    let paid = api.create_intent("5", "btc").await;
    api.succeed(&paid).await;
    let failed = api.create_intent("5", "btc").await;
    api.post_empty(&format!("/v1/test_helpers/payment_intents/{failed}/fail"))
        .await;
    let events = emulator.events();
    let (succeeded, failed) = (&events[0], &events[1]);
    assert_eq!(failed.event_type, "payment_intent.failed");
    let ids = |path: &str| {
        let api = api.clone();
        let path = path.to_owned();
        async move {
            let reply = api.get(&path).await;
            assert_eq!(reply.status, 200, "{path}: {}", reply.text);
            assert_eq!(reply.json["url"], "/v1/events");
            reply.ids()
        }
    };
    assert_eq!(
        ids("/v1/events?type=payment_intent.failed").await,
        std::slice::from_ref(&failed.id)
    );
    assert_eq!(
        ids("/v1/events?type=payment_intent.succeeded&limit=5").await,
        std::slice::from_ref(&succeeded.id)
    );
    assert!(ids("/v1/events?type=payment_intent.payment_failed")
        .await
        .is_empty());
    let created = succeeded.created;
    let both = [failed.id.clone(), succeeded.id.clone()];
    assert_eq!(ids(&format!("/v1/events?created[gte]={created}")).await.len(), 2);
    assert_eq!(
        ids(&format!("/v1/events?created[lte]={}", failed.created)).await,
        both
    );
    assert!(ids(&format!("/v1/events?created[gt]={}", failed.created))
        .await
        .is_empty());
    assert!(ids(&format!("/v1/events?created[lt]={created}")).await.is_empty());
    assert!(ids("/v1/events?created[lt]=0").await.is_empty());
    assert_eq!(
        ids(&format!(
            "/v1/events?created%5Bgt%5D={}&created%5Blt%5D={}&type=payment_intent.failed",
            created - 1,
            failed.created + 1
        ))
        .await,
        std::slice::from_ref(&failed.id)
    );

    for (query, param) in [
        ("created[gt]=soon", "created[gt]"),
        ("created[gte]=-1", "created[gte]"),
        ("created[lt]=1.5", "created[lt]"),
        ("created[between]=1", "created[between]"),
        ("created=5", "created"),
        ("type[]=x", "type"),
        ("kind=x", "kind"),
    ] {
        let reply = api.get(&format!("/v1/events?{query}")).await;
        assert_eq!(
            (reply.status, reply.param()),
            (400, param),
            "{query}: {}",
            reply.text
        );
    }
    emulator.shutdown().await;
}

/// Walks `query` (with `limit`) through `starting_after` until `has_more` is
/// false; returns every id in order and each page's `has_more`.
async fn walk(api: &Api, query: &str) -> (Vec<String>, Vec<bool>) {
    let (mut ids, mut more) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let path = match &cursor {
            Some(id) => format!("/v1/events?{query}&starting_after={id}"),
            None => format!("/v1/events?{query}"),
        };
        let page = api.get(&path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.text);
        ids.extend(page.ids());
        more.push(page.has_more());
        if !page.has_more() {
            return (ids, more);
        }
        cursor = page.ids().last().cloned();
    }
    panic!("{query}: more than 100 pages");
}

#[tokio::test]
async fn events_filter_by_types_and_delivery_success_and_page_exactly_once_under_a_filter() {
    let (emulator, api) = started(Emulator::builder()).await;
    // 25 events within a second or two (many share their `created`): every
    // third one failed, the rest succeeded. No endpoint: none is acknowledged.
    for i in 0..25 {
        let intent = emulator.create_payment_intent(5, "btc").expect("created");
        if i % 3 == 0 {
            emulator.fail_payment_intent(&intent.id).expect("failed");
        } else {
            emulator.succeed_payment_intent(&intent.id).expect("succeeded");
        }
    }
    let events = emulator.events();
    assert!(events.iter().all(|e| !e.delivery_success()));
    let newest_first: Vec<String> = events.iter().rev().map(|e| e.id.clone()).collect();
    let of_type = |t: &str| -> Vec<String> {
        events
            .iter()
            .rev()
            .filter(|e| e.event_type == t)
            .map(|e| e.id.clone())
            .collect()
    };
    let failed = of_type("payment_intent.failed");
    assert_eq!(failed.len(), 9);

    // delivery_success=false, 10 a page: every event once, in creation order
    // (same-second events included), has_more until the last page.
    let (walked, more) = walk(&api, "delivery_success=false&limit=10").await;
    assert_eq!(walked, newest_first, "each event exactly once, newest first");
    assert_eq!(more, [true, true, false]);
    assert!(api.get("/v1/events?delivery_success=true").await.ids().is_empty());

    // types[]: one type, both (repeated or indexed), and combined with the rest.
    let (walked, more) = walk(&api, "types[]=payment_intent.failed&limit=4").await;
    assert_eq!((walked, more), (failed.clone(), vec![true, true, false]));
    let both = "types[]=payment_intent.failed&types[]=payment_intent.succeeded&limit=100";
    assert_eq!(api.get(&format!("/v1/events?{both}")).await.ids(), newest_first);
    let indexed = "types%5B1%5D=payment_intent.failed&types%5B0%5D=nothing.else&limit=100";
    assert_eq!(api.get(&format!("/v1/events?{indexed}")).await.ids(), failed);
    assert!(api
        .get("/v1/events?types[]=payment_intent.payment_failed")
        .await
        .ids()
        .is_empty());
    let (first, last) = (events[0].created, events[24].created);
    let all_time = format!("created[gte]={first}&created[lt]={}", last + 1);
    let (walked, more) = walk(
        &api,
        &format!("{all_time}&types[]=payment_intent.failed&delivery_success=false&limit=5"),
    )
    .await;
    assert_eq!((walked, more), (failed.clone(), vec![true, false]));
    assert!(walk(&api, &format!("created[lt]={first}&delivery_success=false"))
        .await
        .0
        .is_empty());
    assert!(walk(&api, &format!("created[gte]={}", last + 1))
        .await
        .0
        .is_empty());

    // A cursor need not match the filter (it may have been acknowledged since
    // the last page): the page starts right after it all the same.
    let succeeded_id = &events[13].id;
    assert_eq!(events[13].event_type, "payment_intent.succeeded");
    let older_failed: Vec<String> = events[..13]
        .iter()
        .rev()
        .filter(|e| e.event_type == "payment_intent.failed")
        .map(|e| e.id.clone())
        .collect();
    let page = api
        .get(&format!(
            "/v1/events?types[]=payment_intent.failed&limit=100&starting_after={succeeded_id}"
        ))
        .await;
    assert_eq!(page.ids(), older_failed);
    // ending_before under a filter: the closest newer matches, newest first.
    let page = api
        .get(&format!(
            "/v1/events?types[]=payment_intent.failed&limit=2&ending_before={}",
            failed[8]
        ))
        .await;
    assert_eq!(
        (page.ids(), page.has_more()),
        (vec![failed[6].clone(), failed[7].clone()], true)
    );

    for (query, param) in [
        ("delivery_success=yes", "delivery_success"),
        ("delivery_success=", "delivery_success"),
        ("delivery_success=FALSE", "delivery_success"),
        ("delivery_success[]=false", "delivery_success"),
        ("types=payment_intent.failed", "types"),
        ("types[]=", "types"),
        ("types[x]=payment_intent.failed", "types"),
        ("type=a&types[]=b", "types"),
        ("created[gte]=yesterday", "created[gte]"),
        ("created[lt]=-1", "created[lt]"),
        ("created[lt]=1e9", "created[lt]"),
    ] {
        let reply = api.get(&format!("/v1/events?{query}")).await;
        assert_eq!(
            (reply.status, reply.error_type(), reply.param()),
            (400, "invalid_request_error", param),
            "{query}: {}",
            reply.text
        );
    }
    let long = format!("types[]={}", "t".repeat(256));
    let reply = api.get(&format!("/v1/events?{long}")).await;
    assert_eq!((reply.status, reply.param()), (400, "types"), "{}", reply.text);
    let too_many: Vec<String> = (0..101).map(|i| format!("types[]=t{i}")).collect();
    let reply = api.get(&format!("/v1/events?{}", too_many.join("&"))).await;
    assert_eq!((reply.status, reply.param()), (400, "types"), "{}", reply.text);
    // A hostile value is escaped and capped in the message.
    let hostile = format!("%1B%5B31m{}", "x".repeat(5000));
    let reply = api.get(&format!("/v1/events?delivery_success={hostile}")).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply
            .message()
            .starts_with("delivery_success must be true or false, got \"\\u{1b}[31m"),
        "{}",
        reply.message()
    );
    assert!(reply.message().chars().count() < 200, "{}", reply.message());
    let reply = api
        .get("/v1/events?delivery_success=false&starting_after=evt_gone")
        .await;
    assert_eq!(
        (reply.status, reply.code(), reply.param()),
        (404, "resource_missing", "starting_after")
    );
    emulator.shutdown().await;
}
