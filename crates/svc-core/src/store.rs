//! The Store boundary: narrow traits for each kind of record, combined into
//! [`Store`]. Implementations (SQLite, PostgreSQL) live in `svc-store`.

use std::fmt;

use async_trait::async_trait;
use thiserror::Error;

use crate::account::{UserId, UserRecord};
use crate::audit::{AuditEntry, AuditQuery};
use crate::device::{DeviceDecision, DeviceRecord};
use crate::hashes::{DeviceCodeHash, SessionHash, SetupTokenHash, UserCodeHash};
use crate::key::{KeyHash, KeyId};
use crate::project::{
    KeyKind, MemberRemoval, ModelAccess, ProjectId, ProjectMember, ProjectRecord, ProjectRole,
};
use crate::session::SessionRecord;
use crate::usage::{UsageDelta, UsageRow};

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
    /// This key's token budget, if it has one.
    pub budget: Option<crate::budget::Budget>,
    /// Its project's token budget, if it has one. Read from the project.
    pub project_budget: Option<crate::budget::Budget>,
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

/// A stored value that no variant of its type reads: a row written by a
/// newer svc, or edited by hand. The store reports it as a database error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown {what} {value:?} in the store")]
pub struct UnknownValue {
    /// What the value should have been.
    pub what: &'static str,
    /// The value found (cut to 40 characters).
    pub value: String,
}

impl UnknownValue {
    pub fn new(what: &'static str, value: &str) -> Self {
        UnknownValue {
            what,
            value: value.chars().take(40).collect(),
        }
    }
}

/// Per-key overrides of the server's default rate limits (`None`: the
/// default applies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyLimits {
    pub requests_per_minute: Option<i64>,
    pub tokens_per_minute: Option<i64>,
}

/// A failure of the storage layer. The message is for logs, not clients.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("a record with the same unique value exists")]
    Conflict,
    #[error("database error: {0}")]
    Database(String),
    /// The database did not answer in time or cannot be reached: the
    /// request may succeed when tried again (an HTTP 503).
    #[error("database unavailable: {0}")]
    Unavailable(String),
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
    async fn set_key_budget(
        &self,
        id: &KeyId,
        budget: Option<crate::budget::Budget>,
    ) -> Result<bool, StoreError>;
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
    /// A number that changes whenever a key is revoked or its limits set,
    /// or an account is disabled, enabled or deleted (its keys are judged
    /// with it), through this store or, where the store can tell, by another process
    /// sharing its data; `None` while it cannot tell, and then nothing read
    /// about keys may be reused. Read on every authenticated request, so it
    /// must not query the database.
    fn keys_version(&self) -> Option<u64>;
}

/// Persistence of projects and their members.
#[async_trait]
pub trait ProjectStore: Send + Sync {
    /// Stores a new project; [`StoreError::Conflict`] when its id exists.
    async fn insert_project(&self, project: &ProjectRecord) -> Result<(), StoreError>;
    async fn project_by_id(&self, id: &ProjectId) -> Result<Option<ProjectRecord>, StoreError>;
    /// Every project, oldest first.
    async fn list_projects(&self) -> Result<Vec<ProjectRecord>, StoreError>;
    /// The projects `user` is an owner of, oldest first.
    async fn owned_projects(&self, user: &UserId) -> Result<Vec<ProjectRecord>, StoreError>;
    /// Stores a project's name, allowed models and budget; false when there
    /// is no such project. Announced like a key change (its keys are judged
    /// with its model list and budget), so [`KeyStore::keys_version`] moves
    /// everywhere.
    async fn update_project(&self, project: &ProjectRecord) -> Result<bool, StoreError>;
    /// Makes `user` a member of `project` with `role` (replacing the role
    /// it had there).
    async fn set_project_member(
        &self,
        project: &ProjectId,
        user: &UserId,
        role: ProjectRole,
        at: i64,
    ) -> Result<(), StoreError>;
    /// The members of `project`, oldest membership first.
    async fn list_project_members(
        &self,
        project: &ProjectId,
    ) -> Result<Vec<ProjectMember>, StoreError>;
    /// `user`'s role in `project`, if a member.
    async fn project_role(
        &self,
        project: &ProjectId,
        user: &UserId,
    ) -> Result<Option<ProjectRole>, StoreError>;
    /// Removes `user` from `project`; refused (`LastOwner`, nothing
    /// changed) when it is the project's only owner, also against a
    /// concurrent removal of the other owners. The account's keys in the
    /// project are left as they are.
    async fn remove_project_member(
        &self,
        project: &ProjectId,
        user: &UserId,
    ) -> Result<MemberRemoval, StoreError>;
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
    /// state), so [`KeyStore::keys_version`] moves everywhere.
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

/// Persistence of device authorizations (RFC 8628).
#[async_trait]
pub trait DeviceStore: Send + Sync {
    /// Stores a new authorization; [`StoreError::Conflict`] when its id,
    /// device-code hash or user-code hash exists already.
    async fn insert_device(&self, record: &DeviceRecord) -> Result<(), StoreError>;
    async fn device_by_code_hash(
        &self,
        hash: &DeviceCodeHash,
    ) -> Result<Option<DeviceRecord>, StoreError>;
    /// By the hash of the normalised user code.
    async fn device_by_user_code_hash(
        &self,
        user_code_hash: &UserCodeHash,
    ) -> Result<Option<DeviceRecord>, StoreError>;
    /// How many authorizations have not expired at `at` (whatever their
    /// status).
    async fn count_live_devices(&self, at: i64) -> Result<i64, StoreError>;
    /// Records a poll at `at_ms` (milliseconds) if the previous one was at
    /// least `min_gap_ms` earlier (or there was none): true. Otherwise adds
    /// `slow_down_secs` to the stored interval, records the poll, and
    /// returns false.
    async fn poll_device(
        &self,
        id: &str,
        at_ms: i64,
        min_gap_ms: i64,
        slow_down_secs: i64,
    ) -> Result<bool, StoreError>;
    /// Moves a pending, unexpired (at `at`) authorization to approved or
    /// denied by `user_id`; false when it was not pending or has expired.
    async fn decide_device(
        &self,
        id: &str,
        user_id: &UserId,
        decision: DeviceDecision,
        at: i64,
    ) -> Result<bool, StoreError>;
    /// In one transaction: moves an `approved` authorization to `redeemed`
    /// with `key.id`, and inserts the key. False, with nothing written, when
    /// it was not `approved` (so a key is never issued twice) or the account
    /// that approved it is disabled.
    async fn redeem_device(
        &self,
        id: &str,
        key: &KeyRecord,
        key_hash: &KeyHash,
        at: i64,
    ) -> Result<bool, StoreError>;
    /// Deletes authorizations that expired before `before`; returns how many.
    async fn delete_expired_devices(&self, before: i64) -> Result<u64, StoreError>;
}

/// Per-key, per-day usage counters.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Adds `delta` to the counters of (`delta.key_id`, `delta.day`), and
    /// of that key, day and `delta.model`.
    async fn add_usage(&self, delta: &UsageDelta) -> Result<(), StoreError>;
    /// Rows by key, day and model for the days from `from_day` (inclusive)
    /// to `to_day` (exclusive), `YYYY-MM-DD`, ordered by day, key and model.
    async fn usage_by_model(
        &self,
        from_day: &str,
        to_day: &str,
    ) -> Result<Vec<crate::usage::ModelUsageRow>, StoreError>;
    /// Rows from `since_day` (`YYYY-MM-DD`, inclusive) on, for the keys of
    /// `owner_id` (every key when `None`), ordered by day then key id.
    async fn usage_since(
        &self,
        owner_id: Option<&UserId>,
        since_day: &str,
    ) -> Result<Vec<UsageRow>, StoreError>;
}

/// Token budgets' counters, one per scope (a key's or a project's) and
/// window, shared by every replica on the same database. Each change is
/// one conditional statement, so replicas racing on a budget never both
/// take its last tokens unseen.
#[async_trait]
pub trait BudgetStore: Send + Sync {
    /// Adds `tokens` to `scope`'s count of the window that started at
    /// `window_start`, unless the count had reached `limit` already;
    /// returns the count after (`None`: refused, nothing added).
    async fn charge_budget(
        &self,
        scope: &str,
        window_start: i64,
        limit: i64,
        tokens: i64,
    ) -> Result<Option<i64>, StoreError>;
    /// Adds `delta` (negative to give tokens back) to `scope`'s count of
    /// that window.
    async fn adjust_budget(
        &self,
        scope: &str,
        window_start: i64,
        delta: i64,
    ) -> Result<(), StoreError>;
    /// `scope`'s count in that window (0 when nothing was counted).
    async fn budget_used(&self, scope: &str, window_start: i64) -> Result<i64, StoreError>;
    /// Deletes the counts of windows that started before `before` (unix
    /// seconds); returns how many.
    async fn sweep_budget_usage(&self, before: i64) -> Result<u64, StoreError>;
}

/// Fixed-window counters for throttling (sign-in, sign-up, code requests
/// and code entry), shared by
/// every replica on the same database.
#[async_trait]
pub trait ThrottleStore: Send + Sync {
    /// Counts one hit on `bucket` in the window that started at
    /// `window_start` (a previous window's count is reset) and returns the
    /// hits in this window, this one included.
    async fn hit(&self, bucket: &str, window_start: i64) -> Result<i64, StoreError>;
    /// The hits on `bucket` in the window that started at `window_start`.
    async fn hits(&self, bucket: &str, window_start: i64) -> Result<i64, StoreError>;
    /// Takes back one hit on `bucket` counted in the window that started at
    /// `window_start`; nothing when that window is over or has no hits.
    async fn unhit(&self, bucket: &str, window_start: i64) -> Result<(), StoreError>;
    /// Forgets `bucket` (after a successful sign-in, say).
    async fn clear(&self, bucket: &str) -> Result<(), StoreError>;
    /// Deletes every bucket whose window started before `before`; returns
    /// how many.
    async fn delete_stale_throttles(&self, before: i64) -> Result<u64, StoreError>;
}

/// A stored Responses API response (`POST /v1/responses` with `store`):
/// one turn of a conversation. A turn keeps what it adds to the
/// conversation and names the response it continues, so a conversation is
/// stored once, as a chain, and read back turn by turn
/// ([`ResponseStore::conversation`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// `resp_…`.
    pub id: String,
    /// Whose it is: `user:<id>` for an account's keys, `operator` for the
    /// operator's keys (they have no account), each followed by
    /// `@<project id>` outside the default project. Only keys of the same
    /// owner read, continue or delete it.
    pub owner: String,
    /// The project whose storage quota it counts against (its key's).
    pub project_id: ProjectId,
    pub created_at: i64,
    /// Not served from this time on, and deleted by the next sweep once no
    /// response that is still served continues it.
    pub expires_at: i64,
    /// The response it continues (`previous_response_id`, the same
    /// owner's); `None` when it starts its conversation.
    pub previous_id: Option<String>,
    /// The response object, as JSON.
    pub response: String,
    /// What this turn adds to its conversation, as a JSON array of input
    /// items: the new input items the prompt reads, then its output as
    /// input items. (Rows stored before conversations were chains hold
    /// instead every input item before their output, earlier turns
    /// included; they have no `previous_id`.)
    pub conversation: String,
}

impl StoredResponse {
    /// The `owner` of the responses made with a key of this account (`None`:
    /// an operator's key) in `project`. Deleting an account deletes its
    /// responses by this name. The default project's owners are named as
    /// before projects existed, so responses stored then stay readable.
    pub fn owner_of(account: Option<&UserId>, project: &ProjectId) -> String {
        let who = match account {
            Some(user) => format!("user:{}", user.0),
            None => "operator".into(),
        };
        if project.is_default() {
            who
        } else {
            format!("{who}@{}", project.0)
        }
    }

    /// The bytes this row keeps, which its project's quota counts: the
    /// response object and the conversation's text.
    pub fn stored_bytes(&self) -> u64 {
        u64::try_from(self.response.len() + self.conversation.len()).unwrap_or(u64::MAX)
    }
}

/// How much of stored responses one project may keep at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageQuota {
    /// Bytes ([`StoredResponse::stored_bytes`], summed).
    pub bytes: u64,
    /// Stored responses.
    pub responses: u64,
}

/// What one project keeps of stored responses, deleted and expired ones
/// that a served response still continues included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageUsage {
    pub bytes: u64,
    pub responses: u64,
}

/// What became of a response given to [`ResponseStore::insert_response`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Kept,
    /// It would take its project past the quota, which this much is
    /// stored already: nothing was written.
    OverQuota(StorageUsage),
    /// The response it continues was deleted (or swept) in the meantime:
    /// nothing was written.
    PreviousGone,
}

/// How much one continuation may read of a stored conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversationLimits {
    /// Responses in the chain, the continued one included.
    pub responses: u64,
    /// Bytes of the turns' conversation (and, of a row stored before
    /// chains, its response object, which holds its output).
    pub bytes: u64,
}

/// One turn of a stored conversation, as a continuation reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// [`StoredResponse::conversation`]: a JSON array of input items.
    pub items: String,
    /// The response object of a row stored before conversations were
    /// chains, whose output is not among its items; `None` for the others.
    pub legacy_response: Option<String>,
}

/// A stored conversation, from [`ResponseStore::conversation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conversation {
    /// Its turns, the first first; the continued response's is last.
    Turns(Vec<Turn>),
    /// It holds this many responses and bytes, past the limits asked for:
    /// none of it was read.
    TooLong { responses: u64, bytes: u64 },
}

/// Persistence of Responses API responses.
#[async_trait]
pub trait ResponseStore: Send + Sync {
    /// Stores a new response and counts it against its project's `quota`
    /// (one response, [`StoredResponse::stored_bytes`]); its
    /// `previous_id` must be stored and not deleted. The checks and the
    /// write are one transaction: concurrent inserts never pass the quota.
    /// [`StoreError::Conflict`] when its id exists.
    async fn insert_response(
        &self,
        response: &StoredResponse,
        quota: StorageQuota,
    ) -> Result<Stored, StoreError>;
    /// The response `id` of `owner`, unless it expired or was deleted at
    /// `at` (or there is none, or it is another owner's).
    async fn response_by_id(
        &self,
        id: &str,
        owner: &str,
        at: i64,
    ) -> Result<Option<StoredResponse>, StoreError>;
    /// The response object (JSON) of the response that
    /// [`ResponseStore::response_by_id`] finds, read without its
    /// conversation: what `GET /v1/responses/{id}` answers.
    async fn response_object(
        &self,
        id: &str,
        owner: &str,
        at: i64,
    ) -> Result<Option<String>, StoreError>;
    /// The conversation up to and including the response `id` of `owner`,
    /// to continue it: `None` as for [`ResponseStore::response_by_id`];
    /// [`Conversation::TooLong`], read from the sizes each row keeps of its
    /// chain and nothing else, when it is past `limits`.
    async fn conversation(
        &self,
        id: &str,
        owner: &str,
        at: i64,
        limits: ConversationLimits,
    ) -> Result<Option<Conversation>, StoreError>;
    /// What `project` keeps.
    async fn response_storage(&self, project: &ProjectId) -> Result<StorageUsage, StoreError>;
    /// Deletes the response `id` of `owner`; false when there was none (or
    /// it was deleted already). While a stored response continues it, it
    /// stays, never served, for that one's conversation, and goes with it.
    async fn delete_response(&self, id: &str, owner: &str) -> Result<bool, StoreError>;
    /// Deletes every response that expired or was deleted at `at`
    /// (`expires_at <= at`), but for those that a response still served
    /// continues; returns how many. An expired tail of a chain goes from
    /// its last turn back, a bounded number of turns per call.
    async fn delete_expired_responses(&self, at: i64) -> Result<u64, StoreError>;
}

/// The audit log: append-only entries (see [`crate::audit`]).
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends an entry.
    async fn insert_audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;
    /// Entries matching `query`, newest first, at most `query.limit + 1`
    /// (one more tells the caller there are more): those older than
    /// `query.after`, or the ones just newer than `query.before`.
    async fn list_audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError>;
    /// Deletes entries effective before `before` (retention); returns how many.
    async fn delete_audit_before(&self, before: i64) -> Result<u64, StoreError>;
}

/// Whether the database answers.
#[async_trait]
pub trait HealthStore: Send + Sync {
    async fn ping(&self) -> Result<(), StoreError>;
}

/// Everything svc keeps.
pub trait Store:
    KeyStore
    + ProjectStore
    + UserStore
    + SessionStore
    + DeviceStore
    + UsageStore
    + ThrottleStore
    + BudgetStore
    + ResponseStore
    + AuditStore
    + HealthStore
{
}

impl<T> Store for T where
    T: KeyStore
        + ProjectStore
        + UserStore
        + SessionStore
        + DeviceStore
        + UsageStore
        + ThrottleStore
        + BudgetStore
        + ResponseStore
        + AuditStore
        + HealthStore
{
}

#[cfg(test)]
mod tests {
    use super::*;

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
