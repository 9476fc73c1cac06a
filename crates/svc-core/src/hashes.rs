//! What the store keeps of short-lived secrets: the SHA-256 (lowercase hex)
//! of a session token, a device code, a normalised user code or a
//! first-admin setup token. Each is a
//! type of its own, so one kind of hash cannot be looked up as another, and
//! their `Debug` shows only the first 8 hex digits (enough to tell rows
//! apart in a log, not to find one).

use std::fmt;

use crate::secrets::sha256_hex;

macro_rules! stored_hash {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash)]
        pub struct $name(String);

        impl $name {
            /// The hash of `secret`.
            pub fn of(secret: &str) -> Self {
                $name(sha256_hex(secret))
            }

            /// A hash as the store returns it (it wrote [`Self::as_str`]).
            pub fn from_stored(hex: String) -> Self {
                $name(hex)
            }

            /// The stored form: 64 lowercase hex digits.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let shown: String = self.0.chars().take(8).collect();
                write!(f, "{}({shown}…)", stringify!($name))
            }
        }
    };
}

stored_hash!(
    /// SHA-256 of a dashboard session's cookie token.
    SessionHash
);
stored_hash!(
    /// SHA-256 of a one-time token that lets the first admin sign up.
    SetupTokenHash
);
stored_hash!(
    /// SHA-256 of a device code (RFC 8628), how a client's polls find it.
    DeviceCodeHash
);
stored_hash!(
    /// SHA-256 of a normalised user code ([`crate::UserCode::hash`]), how
    /// the person's code entry finds it.
    UserCodeHash
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_a_prefix_only() {
        let hash = SessionHash::of("a session token");
        let full = hash.as_str().to_owned();
        assert_eq!(full.len(), 64);
        let shown = format!("{hash:?}");
        assert_eq!(shown, format!("SessionHash({}…)", &full[..8]));
        assert!(!shown.contains(&full[8..16]));
        assert_eq!(
            format!("{:?}", UserCodeHash::from_stored("abc".into())),
            "UserCodeHash(abc…)"
        );
    }

    #[test]
    fn the_same_secret_hashes_alike_and_reads_back() {
        let hash = DeviceCodeHash::of("code");
        assert_eq!(hash, DeviceCodeHash::of("code"));
        assert_ne!(hash, DeviceCodeHash::of("other"));
        assert_eq!(DeviceCodeHash::from_stored(hash.as_str().to_owned()), hash);
    }
}
