//! Stored Responses API responses (`POST /v1/responses` with `store`):
//! each turn of a conversation as a record that names the turn it
//! continues, what a project may keep of them, and [`ResponseStore`], their
//! persistence. Parsing the requests is [`crate::responses`]; retention
//! and quotas are the server's.

use async_trait::async_trait;

use crate::error::StoreError;
use crate::ids::{ProjectId, UserId};

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
