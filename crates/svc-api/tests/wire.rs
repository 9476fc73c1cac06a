//! The bodies that were written with `json!` before they had a type keep
//! their exact bytes: `json!` wrote keys in alphabetical order, and `null`
//! where a value is absent.

#![expect(clippy::unwrap_used)]

use svc_api::{HealthStatus, KeyInfo, KeyOwner, ReadyStatus, RevokedKey, UsageDay, UsageList};

fn text(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap()
}

#[test]
fn health_and_ready() {
    assert_eq!(text(&HealthStatus::ok()), r#"{"status":"ok"}"#);
    assert_eq!(text(&ReadyStatus::ready()), r#"{"status":"ready"}"#);
}

#[test]
fn a_key_without_owner_or_expiry_says_null() {
    let mut key = KeyInfo {
        object: "api_key".into(),
        id: "key_0123456789abcdef".into(),
        name: "laptop".into(),
        hint: "sk-svc-1a2b…9f0e".into(),
        created_via: "device".into(),
        created_at: 1,
        expires_at: None,
        owner: None,
    };
    assert_eq!(
        text(&key),
        r#"{"created_at":1,"created_via":"device","expires_at":null,"hint":"sk-svc-1a2b…9f0e","id":"key_0123456789abcdef","name":"laptop","object":"api_key","owner":null}"#
    );
    key.expires_at = Some(2);
    key.owner = Some(KeyOwner {
        id: "u1".into(),
        email: "ada@example.com".into(),
    });
    let json = text(&key);
    assert!(
        json.ends_with(r#""object":"api_key","owner":{"email":"ada@example.com","id":"u1"}}"#),
        "{json}"
    );
    let back: KeyInfo = serde_json::from_str(&json).unwrap();
    assert_eq!(back, key);
}

#[test]
fn revocation_and_usage() {
    assert_eq!(
        text(&RevokedKey::new("key_1".into())),
        r#"{"id":"key_1","object":"api_key","revoked":true}"#
    );
    let list = UsageList {
        object: "list".into(),
        since: "2026-01-01".into(),
        data: vec![UsageDay {
            object: "usage.day".into(),
            key_id: "key_1".into(),
            day: "2026-01-02".into(),
            requests: 3,
            prompt_tokens: 10,
            cached_tokens: 4,
            completion_tokens: 5,
            total_tokens: 15,
            cache_hits: 1,
            cache_saved_tokens: 20,
        }],
    };
    assert_eq!(
        text(&list),
        r#"{"data":[{"cache_hits":1,"cache_saved_tokens":20,"cached_tokens":4,"completion_tokens":5,"day":"2026-01-02","key_id":"key_1","object":"usage.day","prompt_tokens":10,"requests":3,"total_tokens":15}],"object":"list","since":"2026-01-01"}"#
    );
}
