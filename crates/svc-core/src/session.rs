//! Dashboard sign-in sessions: a random token in an HttpOnly cookie, stored
//! only as its SHA-256, and [`SessionStore`], their persistence.

use std::fmt;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::hashes::SessionHash;
use crate::ids::UserId;
use crate::secrets::random_token;

/// A stored session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub token_hash: SessionHash,
    pub user_id: UserId,
    /// The token every form of this session must carry (not secret from the
    /// user; unknowable to other sites).
    pub csrf_token: String,
    pub created_at: i64,
    pub expires_at: i64,
    /// The client address at sign-in, for the user's information.
    pub address: Option<String>,
}

/// The secret of a session cookie. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionToken(String);

impl SessionToken {
    pub fn generate() -> Self {
        SessionToken(random_token())
    }

    /// The value for the cookie, the one place it is sent.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What the store keeps.
    pub fn hash(&self) -> SessionHash {
        SessionHash::of(&self.0)
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(<redacted>)")
    }
}

/// One-time values kept with a session (a new API key between its creation
/// and the page that shows it), sealed with ChaCha20-Poly1305 under a key
/// derived from the session token: the store holds only the token's hash,
/// so what it holds cannot be opened without the user's cookie.
pub mod flash {
    use chacha20poly1305::aead::{Aead, KeyInit};
    use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
    use sha2::{Digest, Sha256};

    fn cipher(token: &str) -> ChaCha20Poly1305 {
        let mut hasher = Sha256::new();
        hasher.update(b"svc session flash\0");
        hasher.update(token.as_bytes());
        let key: [u8; 32] = hasher.finalize().into();
        ChaCha20Poly1305::new(&Key::from(key))
    }

    /// `hex(nonce || ciphertext)`.
    pub fn seal(token: &str, secret: &str) -> String {
        let nonce: [u8; 12] = rand::random();
        let sealed = cipher(token)
            .encrypt(&Nonce::from(nonce), secret.as_bytes())
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        hex::encode(out)
    }

    /// The secret, when `sealed` was made by [`seal`] with this token.
    pub fn open(token: &str, sealed: &str) -> Option<String> {
        let bytes = hex::decode(sealed).ok()?;
        if bytes.len() < 12 {
            return None;
        }
        let (nonce, ciphertext) = bytes.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().ok()?;
        let plain = cipher(token)
            .decrypt(&Nonce::from(nonce), ciphertext)
            .ok()?;
        String::from_utf8(plain).ok()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn sealed_values_open_only_with_their_token() {
            let sealed = seal("token-a", "sk-svc-secret");
            assert!(!sealed.contains("secret"));
            assert_eq!(open("token-a", &sealed).as_deref(), Some("sk-svc-secret"));
            assert_eq!(open("token-b", &sealed), None);
            assert_ne!(sealed, seal("token-a", "sk-svc-secret"), "fresh nonce");
            assert_eq!(open("token-a", "zz"), None);
        }
    }
}

/// Persistence of dashboard sign-in sessions, by the hash of their token.
#[async_trait]
pub trait SessionStore: Send + Sync {
    async fn insert_session(&self, session: &SessionRecord) -> Result<(), StoreError>;
    /// The session with this token hash (expired ones included).
    async fn session_by_hash(
        &self,
        token_hash: &SessionHash,
    ) -> Result<Option<SessionRecord>, StoreError>;
    /// Deletes a session; false when there was none.
    async fn delete_session(&self, token_hash: &SessionHash) -> Result<bool, StoreError>;
    /// Deletes every session that expired before `at`; returns how many.
    async fn delete_expired_sessions(&self, at: i64) -> Result<u64, StoreError>;
    /// Sets (or with `None` clears) the session's one-time flash value.
    async fn set_session_flash(
        &self,
        token_hash: &SessionHash,
        flash: Option<&str>,
    ) -> Result<(), StoreError>;
    /// Returns the flash value and clears it atomically: of two concurrent
    /// calls, at most one gets it.
    async fn take_session_flash(
        &self,
        token_hash: &SessionHash,
    ) -> Result<Option<String>, StoreError>;
}
