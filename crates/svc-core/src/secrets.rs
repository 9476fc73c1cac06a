//! The making, hashing and comparing of secrets: randomness from the
//! operating system, SHA-256 as the store keeps tokens and codes, and an
//! equality that takes the same time wherever two tokens differ. A leaf: it
//! imports nothing else of svc-core, so keys, sessions and device codes
//! draw on it without importing one another.

use sha2::{Digest, Sha256};

/// 256 random bits from the operating system, as 64 lowercase hex.
pub fn random_token() -> String {
    hex::encode(os_random::<32>())
}

/// `N` bytes from the operating system's CSPRNG: what every key, token and
/// code is made of.
#[expect(
    clippy::panic,
    reason = "the OS generator failing is not recoverable: never issue a weak secret"
)]
pub(crate) fn os_random<const N: usize>() -> [u8; N] {
    use rand::TryRngCore;
    let mut bytes = [0u8; N];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .unwrap_or_else(|_| panic!("the operating system's random number generator failed"));
    bytes
}

/// Equal in constant time (for tokens): how long it takes says nothing of
/// where two tokens of one length differ.
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// SHA-256 of `text`, lowercase hex: how tokens and codes are stored.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::same_token;

    #[test]
    fn tokens_compare_exactly() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
    }
}
