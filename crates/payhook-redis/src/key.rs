//! How a (namespace, event id) pair becomes one Redis key.
//!
//! The key is `{prefix}:{namespace}:{id}` with `%` and `:` in the namespace
//! percent-encoded. The namespace part then holds no `:`, so the first `:` after
//! the prefix ends it: namespace `x:y` with id `z` (`…:x%3Ay:z`) and namespace `x`
//! with id `y:z` (`…:x:y:z`) are different keys. Ids are used verbatim (they end
//! the key), which keeps keys readable in `redis-cli` for the common case of a
//! plain namespace such as `orders`.

/// Appends `namespace` to `key` with `%` and `:` percent-encoded.
fn push_namespace(key: &mut Vec<u8>, namespace: &str) {
    for byte in namespace.bytes() {
        match byte {
            b'%' => key.extend_from_slice(b"%25"),
            b':' => key.extend_from_slice(b"%3A"),
            other => key.push(other),
        }
    }
}

/// The key of `id` in `namespace` under `prefix`.
pub(crate) fn event_key(prefix: &str, namespace: &str, id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + namespace.len() + id.len() + 2);
    key.extend_from_slice(prefix.as_bytes());
    key.push(b':');
    push_namespace(&mut key, namespace);
    key.push(b':');
    key.extend_from_slice(id.as_bytes());
    key
}

#[cfg(test)]
mod tests {
    use super::event_key;

    fn key(ns: &str, id: &str) -> String {
        String::from_utf8(event_key("payhook", ns, id)).unwrap()
    }

    #[test]
    fn plain_namespaces_stay_readable() {
        assert_eq!(key("orders", "evt_1"), "payhook:orders:evt_1");
    }

    #[test]
    fn namespace_and_id_never_run_together() {
        assert_eq!(key("x:y", "z"), "payhook:x%3Ay:z");
        assert_eq!(key("x", "y:z"), "payhook:x:y:z");
        assert_ne!(key("x:y", "z"), key("x", "y:z"));
        // An encoded-looking namespace cannot pose as an encoded colon.
        assert_ne!(key("x%3Ay", "z"), key("x:y", "z"));
        assert_eq!(key("x%3Ay", "z"), "payhook:x%253Ay:z");
    }

    #[test]
    fn distinct_pairs_give_distinct_keys() {
        let parts = ["", ":", "::", "%", "%3A", "a", "a:", ":a", "a:b", "a%b", "ü"];
        let mut seen = std::collections::HashMap::new();
        for ns in parts {
            for id in parts {
                if let Some(previous) = seen.insert(key(ns, id), (ns, id)) {
                    panic!("{previous:?} and {:?} share a key", (ns, id));
                }
            }
        }
    }
}
