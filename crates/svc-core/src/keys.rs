//! The key service: creating, authenticating, listing and revoking API keys
//! on top of any [`Store`].

use std::sync::Arc;

use thiserror::Error;

use crate::key::{ApiKey, KeyFormatError, KeyId};
use crate::now;
use crate::store::{KeyLimits, KeyRecord, Store, StoreError};

/// How often at most `last_used_at` is written for one key, in seconds:
/// often enough for a dashboard, rare enough to keep writes off the hot path.
const TOUCH_EVERY: i64 = 60;

/// What a new key should be.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub name: String,
    pub owner_id: Option<String>,
    pub created_via: String,
    /// Lifetime in seconds; `None` never expires.
    pub expires_in: Option<i64>,
}

/// Why a request is not authenticated. The messages never quote the key.
#[derive(Debug, Error)]
pub enum AuthError {
    #[error(
        "You didn't provide an API key. Send it in the Authorization header as \"Bearer sk-svc-...\"."
    )]
    Missing,
    #[error("Malformed API key: {0}.")]
    Malformed(KeyFormatError),
    #[error("Incorrect API key provided.")]
    Unknown,
    #[error("This API key has been revoked.")]
    Revoked,
    #[error("This API key has expired.")]
    Expired,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The state of a key at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    Active,
    Expired,
    Revoked,
}

impl KeyState {
    /// The state of `record` at `at`; revocation wins over expiry.
    pub fn of(record: &KeyRecord, at: i64) -> Self {
        if record.revoked_at.is_some() {
            KeyState::Revoked
        } else if record.expires_at.is_some_and(|e| e <= at) {
            KeyState::Expired
        } else {
            KeyState::Active
        }
    }

    /// `active`, `expired` or `revoked`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Active => "active",
            KeyState::Expired => "expired",
            KeyState::Revoked => "revoked",
        }
    }
}

/// Key operations shared by the API, the operator commands and the dashboard.
#[derive(Clone)]
pub struct KeyService {
    store: Arc<dyn Store>,
}

impl KeyService {
    pub fn new(store: Arc<dyn Store>) -> Self {
        KeyService { store }
    }

    /// Mints a key; the returned [`ApiKey`] is the only copy of the secret.
    pub async fn create(&self, new: NewKey) -> Result<(ApiKey, KeyRecord), StoreError> {
        let key = ApiKey::generate();
        let created_at = now();
        let record = KeyRecord {
            id: KeyId::generate(),
            name: new.name,
            hint: key.hint(),
            owner_id: new.owner_id,
            created_via: new.created_via,
            created_at,
            expires_at: new.expires_in.map(|s| created_at.saturating_add(s)),
            last_used_at: None,
            revoked_at: None,
            limits: Default::default(),
        };
        self.store.insert_key(&record, &key.hash()).await?;
        Ok((key, record))
    }

    /// Checks an `Authorization` header value. Reads the store every time, so
    /// a revocation anywhere takes effect on the very next request.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<KeyRecord, AuthError> {
        let header = authorization.map(str::trim).filter(|h| !h.is_empty());
        let header = header.ok_or(AuthError::Missing)?;
        let token = bearer_token(header).ok_or(AuthError::Missing)?;
        let key = ApiKey::parse(token).map_err(AuthError::Malformed)?;
        let record = self
            .store
            .key_by_hash(&key.hash())
            .await?
            .ok_or(AuthError::Unknown)?;
        let at = now();
        match KeyState::of(&record, at) {
            KeyState::Active => {}
            KeyState::Revoked => return Err(AuthError::Revoked),
            KeyState::Expired => return Err(AuthError::Expired),
        }
        if record.last_used_at.is_none_or(|t| at - t >= TOUCH_EVERY) {
            self.store.touch_key(&record.id, at).await?;
        }
        Ok(record)
    }

    /// Keys, newest first (an owner's only, when given).
    pub async fn list(&self, owner_id: Option<&str>) -> Result<Vec<KeyRecord>, StoreError> {
        self.store.list_keys(owner_id).await
    }

    /// The key with this id (any state).
    pub async fn get(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError> {
        self.store.key_by_id(id).await
    }

    /// Sets a key's own rate limits; false when there is no such key.
    pub async fn set_limits(&self, id: &KeyId, limits: KeyLimits) -> Result<bool, StoreError> {
        self.store.set_key_limits(id, limits).await
    }

    /// Revokes a key; false when it does not exist or was already revoked.
    pub async fn revoke(&self, id: &KeyId) -> Result<bool, StoreError> {
        self.store.revoke_key(id, now()).await
    }
}

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 7235).
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }

    #[test]
    fn revocation_wins_over_expiry() {
        let mut record = KeyRecord {
            id: KeyId("key_1".into()),
            name: "n".into(),
            hint: "h".into(),
            owner_id: None,
            created_via: "cli".into(),
            created_at: 0,
            expires_at: Some(10),
            last_used_at: None,
            revoked_at: None,
            limits: Default::default(),
        };
        assert_eq!(KeyState::of(&record, 9), KeyState::Active);
        assert_eq!(KeyState::of(&record, 10), KeyState::Expired);
        record.revoked_at = Some(5);
        assert_eq!(KeyState::of(&record, 10), KeyState::Revoked);
    }
}
