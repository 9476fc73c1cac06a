//! [`ResponseStore`] on SQL: the `responses` table, one row per turn of a
//! conversation, each naming the one it continues (`previous_id`), and
//! `response_storage`, what each project keeps (kept by triggers, see
//! migration 0014). Ownership and expiry are part of every read, so
//! another owner's or an expired response is never returned; a
//! conversation is read as its chain, and refused from the sizes each row
//! keeps before any of it is read. A deleted response is one that expired
//! at 0; expired rows go in [`ResponseStore::delete_expired_responses`],
//! but for those that another row continues (`children`, counted by the
//! triggers): they go after it.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::conversation::{
    Conversation, ConversationLimits, StorageQuota, StorageUsage, Stored, StoredResponse, Turn,
};
use svc_core::ids::ProjectId;
use svc_core::store::{ResponseStore, StoreError};

use crate::SqlStore;
use crate::connect::REQUEST_PATH_TIMEOUT;
use crate::error::{bounded, query_error};

const INSERT: &str = "INSERT INTO responses \
     (id, owner, project_id, created_at, expires_at, previous_id, chained, depth, \
      stored_bytes, conversation_bytes, response, conversation) \
     VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $9, $10, $11)";
/// The response continued, locked until the new one is written (whose
/// trigger counts it among the continued one's `children`): a deletion or
/// a sweep of it waits for the insert and then sees it continued, or the
/// insert waits for the deletion and then sees it gone. (A no-op update:
/// the one row lock both backends take.)
const LOCK_PREVIOUS: &str = "UPDATE responses SET depth = depth \
     WHERE id = $1 AND owner = $2 AND expires_at > 0 \
     RETURNING depth, conversation_bytes";
const OPEN_STORAGE: &str = "INSERT INTO response_storage (project_id, bytes, responses) \
     VALUES ($1, 0, 0) ON CONFLICT (project_id) DO NOTHING";
/// Locks the project's count when one more response fits: `$2` is the
/// quota's bytes less the response's, `$3` the quota's responses; no row
/// when it does not fit. Concurrent inserts of one project take turns here.
const ROOM: &str = "UPDATE response_storage SET bytes = bytes \
     WHERE project_id = $1 AND bytes <= $2 AND responses < $3";
const STORAGE: &str = "SELECT bytes, responses FROM response_storage WHERE project_id = $1";
const BY_ID: &str = "SELECT id, owner, project_id, created_at, expires_at, previous_id, \
     response, conversation \
     FROM responses WHERE id = $1 AND owner = $2 AND expires_at > $3";
const OBJECT: &str = "SELECT response FROM responses \
     WHERE id = $1 AND owner = $2 AND expires_at > $3";
const SIZE: &str = "SELECT depth, conversation_bytes FROM responses \
     WHERE id = $1 AND owner = $2 AND expires_at > $3";
/// The chain from `$1` back to its first turn, oldest first. Each step
/// goes to a smaller depth, so that no stored cycle could loop.
const CHAIN: &str = "WITH RECURSIVE chain (id, previous_id, depth) AS ( \
         SELECT id, previous_id, depth FROM responses WHERE id = $1 AND owner = $2 \
         UNION ALL \
         SELECT r.id, r.previous_id, r.depth FROM responses r \
         JOIN chain c ON r.id = c.previous_id \
         WHERE r.owner = $2 AND r.depth < c.depth \
     ) \
     SELECT r.conversation, CASE WHEN r.chained = 0 THEN r.response END AS legacy_response \
     FROM chain JOIN responses r ON r.id = chain.id ORDER BY r.depth";
const MARK_DELETED: &str = "UPDATE responses SET expires_at = 0 \
     WHERE id = $1 AND owner = $2 AND expires_at > 0";
/// Removes the deleted response `$1` unless another continues it; returns
/// the one it continued, which may be removable in turn.
const REMOVE_DELETED: &str = "DELETE FROM responses \
     WHERE id = $1 AND expires_at = 0 AND children = 0 \
     RETURNING previous_id";
// Expired at `at` means `expires_at <= at`, as for keys and sessions. Only
// rows that nothing continues go; removing them may leave the ones they
// continued with none, which the next round takes.
const DELETE_EXPIRED: &str = "DELETE FROM responses WHERE children = 0 AND expires_at <= $1";
/// Rounds of [`DELETE_EXPIRED`] in one sweep: the longest expired tail of a
/// chain that one sweep removes; the next sweeps go on with a longer one.
const SWEEP_ROUNDS: usize = 32;

fn record(row: &AnyRow) -> Result<StoredResponse, sqlx::Error> {
    Ok(StoredResponse {
        id: row.try_get("id")?,
        owner: row.try_get("owner")?,
        project_id: ProjectId(row.try_get("project_id")?),
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        previous_id: row.try_get("previous_id")?,
        response: row.try_get("response")?,
        conversation: row.try_get("conversation")?,
    })
}

/// A count as stored (BIGINT), from an unsigned one.
fn stored(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// An unsigned count, from a stored one.
fn counted(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[async_trait]
impl ResponseStore for SqlStore {
    async fn insert_response(
        &self,
        response: &StoredResponse,
        quota: StorageQuota,
    ) -> Result<Stored, StoreError> {
        let bytes = response.stored_bytes();
        let own = stored(u64::try_from(response.conversation.len()).unwrap_or(u64::MAX));
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        let (depth, conversation_bytes) = match &response.previous_id {
            None => (1, own),
            Some(previous) => {
                let row: Option<(i64, i64)> = sqlx::query_as(LOCK_PREVIOUS)
                    .bind(previous.as_str())
                    .bind(response.owner.as_str())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(query_error)?;
                let Some((depth, before)) = row else {
                    tx.rollback().await.map_err(query_error)?;
                    return Ok(Stored::PreviousGone);
                };
                (depth.saturating_add(1), before.saturating_add(own))
            }
        };
        let project = response.project_id.0.as_str();
        sqlx::query(OPEN_STORAGE)
            .bind(project)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        let room = sqlx::query(ROOM)
            .bind(project)
            .bind(stored(quota.bytes).saturating_sub(stored(bytes)))
            .bind(stored(quota.responses))
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        if room.rows_affected() == 0 {
            let (used, count): (i64, i64) = sqlx::query_as(STORAGE)
                .bind(project)
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error)?;
            tx.rollback().await.map_err(query_error)?;
            return Ok(Stored::OverQuota(StorageUsage {
                bytes: counted(used),
                responses: counted(count),
            }));
        }
        sqlx::query(INSERT)
            .bind(response.id.as_str())
            .bind(response.owner.as_str())
            .bind(project)
            .bind(response.created_at)
            .bind(response.expires_at)
            .bind(response.previous_id.as_deref())
            .bind(depth)
            .bind(stored(bytes))
            .bind(conversation_bytes)
            .bind(response.response.as_str())
            .bind(response.conversation.as_str())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(Stored::Kept)
    }

    async fn response_by_id(
        &self,
        id: &str,
        owner: &str,
        at: i64,
    ) -> Result<Option<StoredResponse>, StoreError> {
        let row = sqlx::query(BY_ID)
            .bind(id)
            .bind(owner)
            .bind(at)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        row.as_ref().map(record).transpose().map_err(query_error)
    }

    async fn response_object(
        &self,
        id: &str,
        owner: &str,
        at: i64,
    ) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(OBJECT)
            .bind(id)
            .bind(owner)
            .bind(at)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)
    }

    // On the request path, bounded like the key lookup: a database that
    // stopped answering holds a continuation (and what it holds) 2 s at most.
    async fn conversation(
        &self,
        id: &str,
        owner: &str,
        at: i64,
        limits: ConversationLimits,
    ) -> Result<Option<Conversation>, StoreError> {
        bounded(REQUEST_PATH_TIMEOUT, async {
            let size: Option<(i64, i64)> = sqlx::query_as(SIZE)
                .bind(id)
                .bind(owner)
                .bind(at)
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error)?;
            let Some((depth, bytes)) = size else {
                return Ok(None);
            };
            let (responses, bytes) = (counted(depth), counted(bytes));
            if responses > limits.responses || bytes > limits.bytes {
                return Ok(Some(Conversation::TooLong { responses, bytes }));
            }
            let rows = sqlx::query(CHAIN)
                .bind(id)
                .bind(owner)
                .fetch_all(&self.pool)
                .await
                .map_err(query_error)?;
            if rows.is_empty() {
                // Deleted since its size was read.
                return Ok(None);
            }
            if rows.len() as u64 != responses {
                return Err(StoreError::Database(format!(
                    "the conversation of {id} holds {} of its {responses} responses",
                    rows.len()
                )));
            }
            let turns = rows
                .iter()
                .map(|row| {
                    Ok(Turn {
                        items: row.try_get("conversation")?,
                        legacy_response: row.try_get("legacy_response")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()
                .map_err(query_error)?;
            Ok(Some(Conversation::Turns(turns)))
        })
        .await
    }

    async fn response_storage(&self, project: &ProjectId) -> Result<StorageUsage, StoreError> {
        let row: Option<(i64, i64)> = sqlx::query_as(STORAGE)
            .bind(project.0.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(
            row.map_or_else(StorageUsage::default, |(bytes, responses)| StorageUsage {
                bytes: counted(bytes),
                responses: counted(responses),
            }),
        )
    }

    async fn delete_response(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        let marked = sqlx::query(MARK_DELETED)
            .bind(id)
            .bind(owner)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        if marked.rows_affected() == 0 {
            tx.rollback().await.map_err(query_error)?;
            return Ok(false);
        }
        // It, and the deleted responses before it that nothing else
        // continues now, go at once; an expired one before them is the
        // sweep's.
        let mut next = Some(id.to_owned());
        while let Some(id) = next {
            let removed: Option<Option<String>> = sqlx::query_scalar(REMOVE_DELETED)
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error)?;
            next = removed.flatten();
        }
        tx.commit().await.map_err(query_error)?;
        Ok(true)
    }

    async fn delete_expired_responses(&self, at: i64) -> Result<u64, StoreError> {
        let mut deleted = 0;
        for _ in 0..SWEEP_ROUNDS {
            let done = sqlx::query(DELETE_EXPIRED)
                .bind(at)
                .execute(&self.pool)
                .await
                .map_err(query_error)?;
            if done.rows_affected() == 0 {
                break;
            }
            deleted += done.rows_affected();
        }
        Ok(deleted)
    }
}
