//! What the `payhook inbox` tests share: running the command on a namespace,
//! and storing events in an inbox the way a delivery does.

use bytes::Bytes;
use payhook_core::sender::unix_now;
use payhook_core::{sign, Secret};
use payhook_inbox::Inbox;

use super::{payhook_with_env, Run};

/// `payhook inbox --namespace NAMESPACE ARGS…`, the database URL in the
/// environment, as it would be in production (it may hold a password).
pub fn inbox_cli(url: &str, namespace: &str, args: &[&str]) -> Run {
    let mut full = vec!["inbox", "--namespace", namespace];
    full.extend_from_slice(args);
    payhook_with_env(&full, b"", &[("PAYHOOK_DATABASE_URL", url)])
}

/// Stores event `id` of `event_type` (its intent `pi_<id>`), signed with
/// `secret` as the service signs a delivery; it must be acknowledged.
pub async fn ingest(inbox: &Inbox, secret: &str, id: &str, event_type: &str) {
    let body = Bytes::from(format!(
        r#"{{"id":"{id}","type":"{event_type}","created":1,"data":{{"object":{{"id":"pi_{id}","amount":5,"currency":"btc","status":"x"}}}}}}"#
    ));
    let mut headers = http::HeaderMap::new();
    let header = sign(&body, &Secret::new(secret).unwrap(), unix_now());
    headers.insert("x-service-signature", header.parse().unwrap());
    let reply = inbox.ingest(&headers, body).await;
    assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
}
