//! API keys: the secret's value (generation, parsing, hashing and the
//! public hint), the stored record, and [`KeyStore`], their persistence.
//! A key's plaintext exists only between its creation and the one time it
//! is shown; everything stored or logged is its hash or its hint.

use std::fmt;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::budget::Budget;
use crate::error::{StoreError, UnknownValue};
use crate::ids::{KeyId, ProjectId, UserId};
use crate::project::{KeyKind, McpServerAccess, ModelAccess};

/// The constant prefix of every svc key.
pub const KEY_PREFIX: &str = "sk-svc-";
const KEY_HEX_LEN: usize = 40;

/// A syntactically valid API key (`sk-svc-` + 40 lowercase hex). Its
/// `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

/// Why a presented string is not an svc key. The messages never quote it.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyFormatError {
    #[error("API keys start with \"sk-svc-\"")]
    Prefix,
    #[error("API keys are \"sk-svc-\" followed by 40 lowercase hexadecimal characters")]
    Body,
}

impl ApiKey {
    /// A new key from the operating system's CSPRNG (160 random bits).
    pub fn generate() -> Self {
        let bytes = crate::secrets::os_random::<{ KEY_HEX_LEN / 2 }>();
        ApiKey(format!("{KEY_PREFIX}{}", hex::encode(bytes)))
    }

    /// Checks the format of a presented key.
    pub fn parse(text: &str) -> Result<Self, KeyFormatError> {
        let body = text
            .strip_prefix(KEY_PREFIX)
            .ok_or(KeyFormatError::Prefix)?;
        let well_formed = body.len() == KEY_HEX_LEN
            && body.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if well_formed {
            Ok(ApiKey(text.to_owned()))
        } else {
            Err(KeyFormatError::Body)
        }
    }

    /// The secret itself, for the one place that shows it to its owner.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The SHA-256 of the key: what the store keeps and looks up by.
    pub fn hash(&self) -> KeyHash {
        KeyHash(Sha256::digest(self.0.as_bytes()).into())
    }

    /// `sk-svc-1a2b…9f0e`: enough to recognise a key, useless to an attacker.
    pub fn hint(&self) -> String {
        let body = &self.0[KEY_PREFIX.len()..];
        format!("{KEY_PREFIX}{}…{}", &body[..4], &body[body.len() - 4..])
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// SHA-256 of an API key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash([u8; 32]);

impl KeyHash {
    /// Lowercase hex, the stored form.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyHash({}…)", &self.to_hex()[..8])
    }
}

/// A stored API key: everything but the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub id: KeyId,
    pub name: String,
    /// `sk-svc-1a2b…9f0e`.
    pub hint: String,
    /// The owning account; `None` for the operator's keys.
    pub owner_id: Option<UserId>,
    /// How the key was made.
    pub created_via: KeyOrigin,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
    /// This key's own rate limits, where an admin set them.
    pub limits: KeyLimits,
    /// When the owning account was disabled: its keys are refused until it
    /// is enabled again. Read from the account, not stored with the key.
    pub owner_disabled_at: Option<i64>,
    /// The project the key belongs to.
    pub project_id: ProjectId,
    /// What the key may call.
    pub kind: KeyKind,
    /// The models this key may use (within its project's).
    pub allowed_models: ModelAccess,
    /// The models its project allows. Read from the project, not stored
    /// with the key.
    pub project_allowed_models: ModelAccess,
    /// The registered MCP servers this key may use (within its project's).
    pub allowed_mcp_servers: McpServerAccess,
    /// The registered MCP servers its project allows. Read from the
    /// project, not stored with the key.
    pub project_allowed_mcp_servers: McpServerAccess,
    /// This key's token budget, if it has one.
    pub budget: Option<Budget>,
    /// Its project's token budget, if it has one. Read from the project.
    pub project_budget: Option<Budget>,
    /// The key this one replaced by rotation, if any.
    pub rotated_from: Option<KeyId>,
    /// The first key of the rotations that led to this one, if any: its
    /// budget's count is this key's too, so rotating keeps the window.
    pub lineage: Option<KeyId>,
}

impl KeyRecord {
    /// The key whose budget count this key's requests go to: the first of
    /// its rotations (itself when it was never rotated into).
    pub fn budget_holder(&self) -> &KeyId {
        self.lineage.as_ref().unwrap_or(&self.id)
    }

    /// Whether this key may use `model`: its own list and its project's
    /// both allow it.
    pub fn may_use(&self, model: &str) -> bool {
        self.allowed_models.allows(model) && self.project_allowed_models.allows(model)
    }

    /// Whether this key may use the registered MCP server `label` (its
    /// tools through `/mcp`, and the dialects' `mcp` tools naming it): its
    /// own list and its project's both allow it.
    pub fn may_use_mcp_server(&self, label: &str) -> bool {
        self.allowed_mcp_servers.allows(label) && self.project_allowed_mcp_servers.allows(label)
    }
}

/// How a key was made (stored as `created_via`, and shown so).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyOrigin {
    /// By the operator, with `svc keys create`.
    Cli,
    /// By a signed-in person on the dashboard's Keys page.
    Dashboard,
    /// Issued to a client at the end of a device login (RFC 8628).
    Device,
    /// By an admin key, through the admin API.
    Api,
}

impl KeyOrigin {
    /// The stored (and shown) form.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyOrigin::Cli => "cli",
            KeyOrigin::Dashboard => "dashboard",
            KeyOrigin::Device => "device",
            KeyOrigin::Api => "api",
        }
    }

    /// Reads the stored form; anything else is an error, never a guess.
    pub fn parse(stored: &str) -> Result<Self, UnknownValue> {
        match stored {
            "cli" => Ok(KeyOrigin::Cli),
            "dashboard" => Ok(KeyOrigin::Dashboard),
            "device" => Ok(KeyOrigin::Device),
            "api" => Ok(KeyOrigin::Api),
            _ => Err(UnknownValue::new("key origin (created_via)", stored)),
        }
    }
}

impl fmt::Display for KeyOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-key overrides of the server's default rate limits (`None`: the
/// default applies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyLimits {
    pub requests_per_minute: Option<i64>,
    pub tokens_per_minute: Option<i64>,
}

/// Persistence of API keys.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Stores a new key by its hash.
    async fn insert_key(&self, record: &KeyRecord, hash: &KeyHash) -> Result<(), StoreError>;
    /// The key with this hash, if any (revoked and expired ones included).
    async fn key_by_hash(&self, hash: &KeyHash) -> Result<Option<KeyRecord>, StoreError>;
    /// The key with this id, if any.
    async fn key_by_id(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError>;
    /// Keys, newest first; only `owner_id`'s when given.
    async fn list_keys(&self, owner_id: Option<&UserId>) -> Result<Vec<KeyRecord>, StoreError>;
    /// Marks a key revoked at `at`; false when there is no such active key.
    async fn revoke_key(&self, id: &KeyId, at: i64) -> Result<bool, StoreError>;
    /// Records use at `at`.
    async fn touch_key(&self, id: &KeyId, at: i64) -> Result<(), StoreError>;
    /// Sets a key's own rate limits; false when there is no such key.
    async fn set_key_limits(&self, id: &KeyId, limits: KeyLimits) -> Result<bool, StoreError>;
    /// Sets (or, with `None`, removes) a key's token budget; false when
    /// there is no such key. Announced like its limits.
    async fn set_key_budget(&self, id: &KeyId, budget: Option<Budget>) -> Result<bool, StoreError>;
    /// In one transaction: moves the active key `old`'s expiry to
    /// `old_expires_at` (the end of its grace period) and inserts its
    /// successor `new` (whose `rotated_from` names `old`). False, with
    /// nothing written, when `old` is not active at `at` (revoked, expired,
    /// or missing). Announced like a revocation.
    async fn rotate_key(
        &self,
        old: &KeyId,
        old_expires_at: i64,
        new: &KeyRecord,
        hash: &KeyHash,
        at: i64,
    ) -> Result<bool, StoreError>;
    /// The keys of one project, newest first.
    async fn list_project_keys(&self, project: &ProjectId) -> Result<Vec<KeyRecord>, StoreError>;
    /// Sets the models a key may use (within its project's); false when
    /// there is no such key. Announced like its limits.
    async fn set_key_models(&self, id: &KeyId, models: &ModelAccess) -> Result<bool, StoreError>;
    /// Sets the registered MCP servers a key may use (within its
    /// project's); false when there is no such key. Announced like its
    /// models.
    async fn set_key_mcp_servers(
        &self,
        id: &KeyId,
        servers: &McpServerAccess,
    ) -> Result<bool, StoreError>;
    /// A number that changes whenever a key is revoked or its limits set,
    /// or an account is disabled, enabled or deleted (its keys are judged
    /// with it), through this store or, where the store can tell, by another process
    /// sharing its data; `None` while it cannot tell, and then nothing read
    /// about keys may be reused. Read on every authenticated request, so it
    /// must not query the database.
    fn keys_version(&self) -> Option<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_spec_format() {
        let key = ApiKey::generate();
        // `sk-svc-` (7) + 40 hex. The spec's table says 48 in total, which
        // its own prefix and digit count contradict; prefix and digits win.
        assert_eq!(key.expose().len(), 47);
        assert_eq!(ApiKey::parse(key.expose()), Ok(key.clone()));
        assert_ne!(key, ApiKey::generate());
    }

    #[test]
    fn parse_refuses_near_misses() {
        let good = format!("sk-svc-{}", "a".repeat(40));
        assert!(ApiKey::parse(&good).is_ok());
        assert_eq!(ApiKey::parse("sk-abc"), Err(KeyFormatError::Prefix));
        assert_eq!(ApiKey::parse(&good[..46]), Err(KeyFormatError::Body));
        assert_eq!(
            ApiKey::parse(&format!("{good}0")),
            Err(KeyFormatError::Body)
        );
        assert_eq!(
            ApiKey::parse(&format!("sk-svc-{}", "A".repeat(40))),
            Err(KeyFormatError::Body)
        );
    }

    #[test]
    fn debug_and_hint_hide_the_secret() {
        let key = ApiKey::parse("sk-svc-1a2b000000000000000000000000000000009f0e").unwrap();
        assert_eq!(key.hint(), "sk-svc-1a2b…9f0e");
        assert!(!format!("{key:?}").contains("1a2b"));
        assert_eq!(key.hash().to_hex().len(), 64);
    }

    #[test]
    fn key_origins_round_trip_through_their_stored_form() {
        for origin in [
            KeyOrigin::Cli,
            KeyOrigin::Dashboard,
            KeyOrigin::Device,
            KeyOrigin::Api,
        ] {
            assert_eq!(KeyOrigin::parse(origin.as_str()), Ok(origin));
            assert_eq!(origin.to_string(), origin.as_str());
            assert_eq!(
                serde_json::to_value(origin).unwrap(),
                serde_json::json!(origin.as_str())
            );
        }
    }

    #[test]
    fn an_unknown_key_origin_is_an_error_not_a_guess() {
        for stored in ["", "CLI", "admin", "dashboard\n"] {
            let err = KeyOrigin::parse(stored).unwrap_err();
            assert_eq!(err.value, stored);
            assert!(err.to_string().starts_with("unknown key origin"), "{err}");
        }
        let long = "x".repeat(100);
        assert_eq!(KeyOrigin::parse(&long).unwrap_err().value.len(), 40);
    }
}
