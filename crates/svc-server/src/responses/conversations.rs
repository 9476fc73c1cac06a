//! Stored Responses API conversations: keeping a finished turn within its
//! project's storage quota, and reading a conversation back to continue
//! it (`previous_response_id`) within the bounds of one continuation.
//!
//! A turn is stored once, as what it adds to its conversation (its input
//! as the prompt reads it, and its output) and the id of the response it
//! continues; a continuation reads the chain. The store refuses a chain
//! past [`MAX_CONVERSATION_RESPONSES`] or [`MAX_CONVERSATION_BYTES`] from
//! the sizes it keeps, before reading any of it; what it reads is parsed
//! and made into the prompt on a blocking thread, by at most as many
//! continuations at once as there are cores, so that neither the async
//! workers nor the memory are at an attacker's mercy. The HTTP route
//! (`routes/responses.rs`) holds none of this.

use std::sync::Arc;

use svc_api::responses::{InputItem, ResponseObject};
use svc_core::{
    Conversation, ConversationLimits, GenerateRequest, ProjectId, Stored, StoredResponse, Turn,
    ValidationError, now,
};

use crate::error::ApiError;
use crate::responses::valid::{
    MAX_CONVERSATION_BYTES, MAX_CONVERSATION_RESPONSES, ValidResponseRequest, conversation_items,
    is_tool_item,
};
use crate::state::stored::Conversations;

/// What a continuation may read of a stored conversation.
const LIMITS: ConversationLimits = ConversationLimits {
    responses: MAX_CONVERSATION_RESPONSES,
    bytes: MAX_CONVERSATION_BYTES,
};

impl Conversations {
    /// The prompt of `valid`, whose `previous_response_id` (of `owner`)
    /// comes between the instructions and the new input: read within
    /// [`LIMITS`] (a 400 on `previous_response_id` past them), parsed and
    /// assembled on a blocking thread. With it, the earlier items the
    /// tool loop reads ([`is_tool_item`]: tool lists, approval requests).
    pub async fn prompt(
        &self,
        valid: &Arc<ValidResponseRequest>,
        owner: &str,
    ) -> Result<(GenerateRequest, Vec<InputItem>), ApiError> {
        let Some(id) = &valid.previous_response_id else {
            return Ok((valid.assemble(&[])?, Vec::new()));
        };
        let _reading = self
            .reads
            .acquire()
            .await
            .map_err(|e| ApiError::Internal(format!("conversation reads: {e}")))?;
        let turns = match self.store.conversation(id, owner, now(), LIMITS).await? {
            None => return Err(not_found(id)),
            Some(Conversation::TooLong { responses, bytes }) => {
                return Err(ValidationError::new(
                    "previous_response_id",
                    format!(
                        "the conversation of {id} holds {responses} responses and {bytes} bytes of stored items; \
                         a continuation reads at most {MAX_CONVERSATION_RESPONSES} responses and \
                         {MAX_CONVERSATION_BYTES} bytes: start a new conversation, with the items it needs as input"
                    ),
                )
                .into());
            }
            Some(Conversation::Turns(turns)) => turns,
        };
        let valid = valid.clone();
        tokio::task::spawn_blocking(move || {
            let earlier = parse(turns)?;
            let request = valid.assemble(&earlier)?;
            let tool_items = earlier.into_iter().filter(is_tool_item).collect();
            Ok((request, tool_items))
        })
        .await
        .map_err(|e| ApiError::Internal(format!("reading a conversation: {e}")))?
    }

    /// Refuses, before anything is generated, a response to store when its
    /// project has no room left for at least its input (`bytes`). The
    /// insert checks again, with the output, atomically.
    pub async fn check_room(&self, project: &ProjectId, bytes: usize) -> Result<(), ApiError> {
        let usage = self.store.response_storage(project).await?;
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        if usage.responses >= self.quota.responses
            || usage.bytes.saturating_add(bytes) > self.quota.bytes
        {
            return Err(ApiError::StorageQuotaExceeded {
                usage,
                quota: self.quota,
            });
        }
        Ok(())
    }

    /// Keeps `response`, the turn `turn` asked for, after the response it
    /// continues; then sweeps the expired ones. Refused (nothing written)
    /// past the project's quota, or when the response it continues was
    /// deleted meanwhile.
    pub async fn save(&self, turn: &Keep, response: &ResponseObject) -> Result<(), ApiError> {
        let at = now();
        let items = conversation_items(turn.input.clone(), &response.output);
        let record = StoredResponse {
            id: response.id.clone(),
            owner: turn.owner.clone(),
            project_id: turn.project.clone(),
            created_at: response.created_at,
            expires_at: at
                .saturating_add(i64::try_from(self.retention.as_secs()).unwrap_or(i64::MAX)),
            previous_id: turn.previous.clone(),
            response: serde_json::to_string(response)
                .map_err(|e| ApiError::Internal(e.to_string()))?,
            conversation: serde_json::to_string(&items)
                .map_err(|e| ApiError::Internal(e.to_string()))?,
        };
        match self.store.insert_response(&record, self.quota).await? {
            Stored::Kept => {}
            Stored::OverQuota(usage) => {
                return Err(ApiError::StorageQuotaExceeded {
                    usage,
                    quota: self.quota,
                });
            }
            Stored::PreviousGone => {
                return Err(not_found(turn.previous.as_deref().unwrap_or_default()));
            }
        }
        // The sweep: expired responses are never served, and go here.
        if let Err(e) = self.store.delete_expired_responses(at).await {
            tracing::warn!(error = %e, "cannot delete expired responses");
        }
        Ok(())
    }
}

/// A turn to keep once it is done: what [`Conversations::save`] needs of
/// its request.
pub struct Keep {
    pub owner: String,
    pub project: ProjectId,
    /// The response it continues.
    pub previous: Option<String>,
    /// Its input as the conversation keeps it
    /// ([`ValidResponseRequest::conversation_input`]).
    pub input: Vec<InputItem>,
}

impl Keep {
    /// The bytes its input takes as stored: what it needs at least.
    pub fn input_bytes(&self) -> usize {
        serde_json::to_string(&self.input).map_or(usize::MAX, |json| json.len())
    }
}

/// OpenAI's answer for a previous response that is not (or no longer)
/// there.
fn not_found(id: &str) -> ApiError {
    ApiError::NotFound {
        param: Some("previous_response_id".into()),
        message: format!("Response with id '{id}' not found."),
    }
}

/// The input items `turns` hold, first turn first: each turn's items,
/// and, for a row stored before chains, its output after them.
fn parse(turns: Vec<Turn>) -> Result<Vec<InputItem>, ApiError> {
    let mut items = Vec::new();
    for turn in turns {
        let mut own: Vec<InputItem> = serde_json::from_str(&turn.items)
            .map_err(|e| ApiError::Internal(format!("stored conversation: {e}")))?;
        items.append(&mut own);
        if let Some(response) = turn.legacy_response {
            let response: ResponseObject = serde_json::from_str(&response)
                .map_err(|e| ApiError::Internal(format!("stored response: {e}")))?;
            items = conversation_items(items, &response.output);
        }
    }
    Ok(items)
}
