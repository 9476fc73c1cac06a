//! API key values: generation, parsing, hashing and the public hint.
//! A key's plaintext exists only between its creation and the one time it
//! is shown; everything stored or logged is its hash or its hint.

use std::fmt;

use sha2::{Digest, Sha256};
use thiserror::Error;

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
        let bytes = crate::session::os_random::<{ KEY_HEX_LEN / 2 }>();
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

/// The public identifier of a key record (`key_` + 16 hex), safe to show and
/// not guessable from another id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyId(pub String);

impl KeyId {
    /// A fresh random id.
    pub fn generate() -> Self {
        KeyId(format!("key_{}", hex::encode(rand::random::<[u8; 8]>())))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
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
}
