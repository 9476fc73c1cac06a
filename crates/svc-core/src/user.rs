//! User accounts as stored: [`UserRecord`], what became of a change to an
//! account ([`AccountChange`]), and [`UserStore`], their persistence. The
//! account service (sign-in, sign-up, passwords) is [`crate::account`].

use std::fmt;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::hashes::SetupTokenHash;
use crate::ids::UserId;

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

/// What became of a request to disable, enable or delete an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountChange {
    /// Done (and announced as a key change).
    Done,
    /// There is no such account.
    NotFound,
    /// Already in that state: nothing changed.
    Unchanged,
    /// The account is an admin and no other enabled admin would be left.
    LastAdmin,
}

/// Persistence of user accounts.
#[async_trait]
pub trait UserStore: Send + Sync {
    /// Stores a new user, a member of the default project (its owner when
    /// an admin); [`StoreError::Conflict`] when the email is taken.
    async fn insert_user(&self, user: &UserRecord) -> Result<(), StoreError>;
    /// The user with this (already normalised, lowercase) email.
    async fn user_by_email(&self, email: &str) -> Result<Option<UserRecord>, StoreError>;
    async fn user_by_id(&self, id: &UserId) -> Result<Option<UserRecord>, StoreError>;
    /// All users, oldest first.
    async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError>;
    async fn count_users(&self) -> Result<i64, StoreError>;
    /// Remembers the hash of a one-time setup token, valid until `expires_at`.
    async fn insert_setup_token(
        &self,
        token_hash: &SetupTokenHash,
        expires_at: i64,
    ) -> Result<(), StoreError>;
    /// In one transaction: consumes the setup token (which must exist and not
    /// be expired at `at`) and, if there is still no user at all, inserts
    /// `user` (as [`UserStore::insert_user`] does). False, with nothing changed, when either condition fails.
    async fn create_first_user(
        &self,
        token_hash: &SetupTokenHash,
        user: &UserRecord,
        at: i64,
    ) -> Result<bool, StoreError>;
    /// Disables (`Some(at)`) or enables (`None`) an account. Disabling is
    /// one transaction that also deletes the account's sessions and denies
    /// the device authorizations it approved that were not redeemed yet;
    /// it is refused for the last enabled admin. Either way the change is
    /// announced like a key change (the account's keys are judged with its
    /// state), so [`KeyStore::keys_version`](crate::key::KeyStore::keys_version) moves everywhere.
    async fn set_user_disabled(
        &self,
        id: &UserId,
        disabled_at: Option<i64>,
    ) -> Result<AccountChange, StoreError>;
    /// In one transaction: denies the device authorizations the account
    /// approved that were not redeemed, revokes its keys at `at` (the
    /// records stay, so usage history keeps its keys), deletes its sessions
    /// and the account. Refused for the last enabled admin. Announced like
    /// a key change.
    async fn delete_user(&self, id: &UserId, at: i64) -> Result<AccountChange, StoreError>;
    /// Makes an account an organization owner (an admin) or a reader.
    /// Refused (`LastAdmin`) for the last enabled admin; announced as a key
    /// change (an admin key's reach follows its owner's role).
    async fn set_user_admin(&self, id: &UserId, admin: bool) -> Result<AccountChange, StoreError>;
}
