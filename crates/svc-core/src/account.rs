//! User accounts: ids, emails, password hashing (argon2id), and the account
//! service that signs people in with throttling.

use std::fmt;
use std::sync::Arc;

use crate::now;
use crate::session::{SessionRecord, SessionToken, flash, random_token, sha256_hex};
use crate::store::{AccountChange, Store, StoreError};
use crate::throttle::Throttle;

/// The public identifier of a user (`usr_` + 16 hex).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserId(pub String);

impl UserId {
    /// A fresh random id.
    pub fn generate() -> Self {
        UserId(format!("usr_{}", hex::encode(rand::random::<[u8; 8]>())))
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A stored user.
#[derive(Clone, PartialEq, Eq)]
pub struct UserRecord {
    pub id: UserId,
    /// Normalised: trimmed and lowercase.
    pub email: String,
    /// argon2id, in PHC string form.
    pub password_hash: String,
    pub is_admin: bool,
    pub created_at: i64,
    /// When an admin disabled the account: it cannot sign in, and its keys
    /// and approvals are refused, until it is enabled again.
    pub disabled_at: Option<i64>,
}

// By hand: the password hash stays out of logs.
impl fmt::Debug for UserRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserRecord")
            .field("id", &self.id)
            .field("email", &self.email)
            .field("is_admin", &self.is_admin)
            .field("created_at", &self.created_at)
            .field("disabled_at", &self.disabled_at)
            .finish_non_exhaustive()
    }
}

/// Shortest accepted password.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Longest accepted password (argon2 takes any length; this bounds the work).
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// A normalised email address: trimmed, lowercase, one `@` with text on
/// both sides, no spaces, at most 254 bytes. Deliverability is not checked.
pub fn normalise_email(input: &str) -> Option<String> {
    let email = input.trim().to_lowercase();
    let (local, domain) = email.split_once('@')?;
    let valid = !local.is_empty()
        && !domain.is_empty()
        && !domain.contains('@')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    valid.then_some(email)
}

/// Why a password is not accepted.
pub fn check_password(password: &str) -> Result<(), AccountError> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(AccountError::WeakPassword);
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(AccountError::PasswordTooLong);
    }
    Ok(())
}

/// argon2id with the crate's defaults (19 MiB, 2 passes), as a PHC string.
/// Slow on purpose: call it off the async executor.
pub fn hash_password(password: &str) -> Result<String, AccountError> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| AccountError::Hashing(e.to_string()))?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| AccountError::Hashing(e.to_string()))
}

/// Whether `password` matches the PHC string `hash`; a malformed hash never
/// matches.
pub fn verify_password(password: &str, hash: &str) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier};
    PasswordHash::new(hash).is_ok_and(|parsed| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// Why an account could not be created.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("Enter a valid email address.")]
    InvalidEmail,
    #[error("Use a password of at least {MIN_PASSWORD_CHARS} characters.")]
    WeakPassword,
    #[error("Use a password of at most {MAX_PASSWORD_BYTES} bytes.")]
    PasswordTooLong,
    #[error("An account with this email exists already.")]
    EmailTaken,
    #[error("This setup link is invalid, used or expired.")]
    SetupClosed,
    #[error("hashing the password failed: {0}")]
    Hashing(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a sign-in failed. `Invalid` never says which of email and password
/// was wrong.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("Incorrect email or password.")]
    Invalid,
    #[error("Too many failed sign-ins. Try again in {retry_after} seconds.")]
    Throttled { retry_after: i64 },
    /// Told only to someone who gave the right password.
    #[error("This account is disabled. Ask an admin to enable it.")]
    Disabled,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A session just opened: the cookie's token (its only copy) and the record.
#[derive(Debug)]
pub struct OpenedSession {
    pub token: SessionToken,
    pub session: SessionRecord,
    pub user: UserRecord,
}

/// Lifetime of a dashboard session.
pub const SESSION_SECONDS: i64 = 7 * 24 * 3600;
/// Lifetime of the first-admin setup link.
pub const SETUP_SECONDS: i64 = 24 * 3600;

/// Failed sign-ins allowed per account in [`SIGN_IN_WINDOW`].
const SIGN_IN_PER_ACCOUNT: i64 = 5;
/// Failed sign-ins allowed per client address in [`SIGN_IN_WINDOW`].
const SIGN_IN_PER_ADDRESS: i64 = 20;
const SIGN_IN_WINDOW: i64 = 15 * 60;

/// Accounts, sign-in, sessions and the first-admin setup.
#[derive(Clone)]
pub struct AccountService {
    store: Arc<dyn Store>,
    account_throttle: Throttle,
    address_throttle: Throttle,
}

impl AccountService {
    pub fn new(store: Arc<dyn Store>) -> Self {
        AccountService {
            account_throttle: Throttle::new(
                store.clone(),
                "signin-account",
                SIGN_IN_PER_ACCOUNT,
                SIGN_IN_WINDOW,
            ),
            address_throttle: Throttle::new(
                store.clone(),
                "signin-address",
                SIGN_IN_PER_ADDRESS,
                SIGN_IN_WINDOW,
            ),
            store,
        }
    }

    /// Creates a user with an argon2id password hash.
    pub async fn create_user(
        &self,
        email: &str,
        password: &str,
        is_admin: bool,
    ) -> Result<UserRecord, AccountError> {
        let user = new_user(email, password, is_admin).await?;
        match self.store.insert_user(&user).await {
            Ok(()) => Ok(user),
            Err(StoreError::Conflict) => Err(AccountError::EmailTaken),
            Err(e) => Err(e.into()),
        }
    }

    /// All users, oldest first.
    pub async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        self.store.list_users().await
    }

    pub async fn user(&self, id: &UserId) -> Result<Option<UserRecord>, StoreError> {
        self.store.user_by_id(id).await
    }

    /// When there is no user yet, a one-time token for the first admin's
    /// setup page (valid [`SETUP_SECONDS`]); `None` once someone exists.
    pub async fn setup_token(&self) -> Result<Option<String>, StoreError> {
        if self.store.count_users().await? > 0 {
            return Ok(None);
        }
        let token = random_token();
        self.store
            .insert_setup_token(&sha256_hex(&token), now() + SETUP_SECONDS)
            .await?;
        Ok(Some(token))
    }

    /// Creates the first admin with a setup token; fails when the token is
    /// unknown, used or expired, or when a user exists already.
    pub async fn complete_setup(
        &self,
        token: &str,
        email: &str,
        password: &str,
    ) -> Result<UserRecord, AccountError> {
        let user = new_user(email, password, true).await?;
        if self
            .store
            .create_first_user(&sha256_hex(token), &user, now())
            .await?
        {
            Ok(user)
        } else {
            Err(AccountError::SetupClosed)
        }
    }

    /// Checks email and password, with failures throttled per account and
    /// per client address, and opens a session.
    pub async fn sign_in(
        &self,
        email: &str,
        password: &str,
        address: Option<&str>,
    ) -> Result<OpenedSession, SignInError> {
        let email = normalise_email(email).unwrap_or_default();
        let address = address.unwrap_or("unknown");
        self.account_throttle.check(&email).await??;
        self.address_throttle.check(address).await??;
        let user = self.store.user_by_email(&email).await?;
        // An unknown email costs the same hashing as a wrong password, so
        // timing does not tell which accounts exist.
        let hash = user
            .as_ref()
            .map(|u| u.password_hash.clone())
            .unwrap_or_else(|| DUMMY_HASH.to_owned());
        let password = password.to_owned();
        let matches = tokio::task::spawn_blocking(move || verify_password(&password, &hash))
            .await
            .unwrap_or(false);
        let user = match user {
            Some(user) if matches => user,
            _ => {
                self.account_throttle.fail(&email).await?;
                self.address_throttle.fail(address).await?;
                return Err(SignInError::Invalid);
            }
        };
        if user.disabled_at.is_some() {
            return Err(SignInError::Disabled);
        }
        self.account_throttle.clear(&email).await?;
        Ok(self.open_session(user, Some(address)).await?)
    }

    /// Opens a session for `user` (after sign-in or setup).
    pub async fn open_session(
        &self,
        user: UserRecord,
        address: Option<&str>,
    ) -> Result<OpenedSession, StoreError> {
        let token = SessionToken::generate();
        let created_at = now();
        let session = SessionRecord {
            token_hash: token.hash(),
            user_id: user.id.clone(),
            csrf_token: random_token(),
            created_at,
            expires_at: created_at + SESSION_SECONDS,
            address: address.map(str::to_owned),
        };
        self.store.insert_session(&session).await?;
        Ok(OpenedSession {
            token,
            session,
            user,
        })
    }

    /// The live session of a cookie token, and its user.
    pub async fn session(
        &self,
        token: &str,
    ) -> Result<Option<(SessionRecord, UserRecord)>, StoreError> {
        let Some(session) = self.store.session_by_hash(&sha256_hex(token)).await? else {
            return Ok(None);
        };
        if session.expires_at <= now() {
            self.store.delete_session(&session.token_hash).await?;
            return Ok(None);
        }
        // Disabling deletes the account's sessions; this also refuses one
        // opened by a sign-in that raced with it.
        let user = self.store.user_by_id(&session.user_id).await?;
        Ok(user
            .filter(|user| user.disabled_at.is_none())
            .map(|user| (session, user)))
    }

    /// The user with this email (normalised here), if any.
    pub async fn user_by_email(&self, email: &str) -> Result<Option<UserRecord>, StoreError> {
        match normalise_email(email) {
            Some(email) => self.store.user_by_email(&email).await,
            None => Ok(None),
        }
    }

    /// Disables an account: it can no longer sign in, its sessions end, its
    /// keys are refused from the next request on (every replica), and the
    /// device logins it approved are never redeemed. Refused for the last
    /// enabled admin.
    pub async fn disable_user(&self, id: &UserId) -> Result<AccountChange, StoreError> {
        self.store.set_user_disabled(id, Some(now())).await
    }

    /// Enables a disabled account: its keys work again, except those
    /// revoked or expired meanwhile.
    pub async fn enable_user(&self, id: &UserId) -> Result<AccountChange, StoreError> {
        self.store.set_user_disabled(id, None).await
    }

    /// Deletes an account: its keys are revoked (their records and usage
    /// stay), its sessions and pending approvals end, and the email is free
    /// again. Refused for the last enabled admin.
    pub async fn delete_user(&self, id: &UserId) -> Result<AccountChange, StoreError> {
        self.store.delete_user(id, now()).await
    }

    /// Ends a session.
    pub async fn sign_out(&self, token: &str) -> Result<(), StoreError> {
        self.store
            .delete_session(&sha256_hex(token))
            .await
            .map(|_| ())
    }

    /// Keeps `secret` for the next [`take_flash`](Self::take_flash) of this
    /// session, encrypted with a key derived from the cookie's token, which
    /// the server does not store: the database alone cannot reveal it.
    pub async fn put_flash(&self, token: &str, secret: &str) -> Result<(), StoreError> {
        let sealed = flash::seal(token, secret);
        self.store
            .set_session_flash(&sha256_hex(token), Some(&sealed))
            .await
    }

    /// The value put by [`put_flash`](Self::put_flash), once.
    pub async fn take_flash(&self, token: &str) -> Result<Option<String>, StoreError> {
        let sealed = self.store.take_session_flash(&sha256_hex(token)).await?;
        Ok(sealed.and_then(|sealed| flash::open(token, &sealed)))
    }
}

/// A valid argon2id hash of a random password, verified against when the
/// email is unknown.
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c3ZjLWR1bW15LXNhbHQ$IwwALUT1XK1BHv0QAEqEGNiyv8b6yBPHSpNP5aLnFAY";

async fn new_user(email: &str, password: &str, is_admin: bool) -> Result<UserRecord, AccountError> {
    let email = normalise_email(email).ok_or(AccountError::InvalidEmail)?;
    check_password(password)?;
    let password = password.to_owned();
    let password_hash = tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| AccountError::Hashing(e.to_string()))??;
    Ok(UserRecord {
        id: UserId::generate(),
        email,
        password_hash,
        is_admin,
        created_at: now(),
        disabled_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_normalised_and_checked() {
        assert_eq!(
            normalise_email("  Alice@Example.COM ").as_deref(),
            Some("alice@example.com")
        );
        for bad in [
            "",
            "alice",
            "@example.com",
            "alice@",
            "a b@c.d",
            "a@b@c",
            "a@.c",
        ] {
            assert_eq!(normalise_email(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn passwords_hash_and_verify() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("correct horsE", &hash));
        assert!(!verify_password("correct horse", "not a hash"));
        assert_ne!(hash, hash_password("correct horse").unwrap(), "salted");
    }

    #[test]
    fn the_dummy_hash_is_well_formed() {
        use argon2::password_hash::PasswordHash;
        assert!(PasswordHash::new(DUMMY_HASH).is_ok());
        assert!(!verify_password("", DUMMY_HASH));
    }

    #[test]
    fn short_passwords_are_refused() {
        assert!(matches!(
            check_password("1234567"),
            Err(AccountError::WeakPassword)
        ));
        assert!(check_password("12345678").is_ok());
    }

    #[test]
    fn debug_hides_the_password_hash() {
        let user = UserRecord {
            id: UserId("usr_1".into()),
            email: "a@b.c".into(),
            password_hash: "$argon2id$secret".into(),
            is_admin: false,
            created_at: 0,
            disabled_at: None,
        };
        assert!(!format!("{user:?}").contains("secret"));
    }
}
