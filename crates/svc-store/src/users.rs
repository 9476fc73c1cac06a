//! [`UserStore`] on SQL: the `users` and `setup_tokens` tables. Emails come
//! normalised and passwords hashed; this module checks neither.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::hashes::SetupTokenHash;
use svc_core::ids::{DEFAULT_PROJECT_ID, UserId};
use svc_core::project::ProjectRole;
use svc_core::store::{StoreError, UserStore};
use svc_core::user::{AccountChange, UserRecord};

use crate::error::query_error;
use crate::{Backend, SqlStore};

type Tx = sqlx::Transaction<'static, sqlx::Any>;

impl SqlStore {
    /// A transaction that, on PostgreSQL, holds [`LOCK_USERS`].
    async fn users_tx(&self) -> Result<Tx, StoreError> {
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        if self.backend == Backend::Postgres {
            sqlx::query(LOCK_USERS)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        Ok(tx)
    }
}

/// Runs `sql` with the account id (and `at`, when given) on `tx`; returns
/// the rows it changed.
async fn run(tx: &mut Tx, sql: &str, id: &UserId, at: Option<i64>) -> Result<u64, StoreError> {
    let mut query = sqlx::query(sql).bind(id.0.as_str());
    if let Some(at) = at {
        query = query.bind(at);
    }
    query
        .execute(&mut **tx)
        .await
        .map(|done| done.rows_affected())
        .map_err(query_error)
}

/// Ends `tx`, which changed nothing for account `id`: why (no such
/// account, or it was in that state already).
async fn unchanged(mut tx: Tx, id: &UserId) -> Result<AccountChange, StoreError> {
    let exists: i64 = sqlx::query_scalar(EXISTS)
        .bind(id.0.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(query_error)?;
    tx.rollback().await.map_err(query_error)?;
    Ok(if exists == 0 {
        AccountChange::NotFound
    } else {
        AccountChange::Unchanged
    })
}

/// Whether no enabled admin is left in `tx`.
async fn no_admin_left(tx: &mut Tx) -> Result<bool, StoreError> {
    let admins: i64 = sqlx::query_scalar(ENABLED_ADMINS)
        .fetch_one(&mut **tx)
        .await
        .map_err(query_error)?;
    Ok(admins == 0)
}

macro_rules! columns {
    () => {
        "id, email, password_hash, is_admin, created_at, disabled_at"
    };
}

const INSERT: &str = "INSERT INTO users \
     (id, email, password_hash, is_admin, created_at, disabled_at) \
     VALUES ($1, $2, $3, $4, $5, $6)";
const BY_EMAIL: &str = concat!("SELECT ", columns!(), " FROM users WHERE email = $1");
const BY_ID: &str = concat!("SELECT ", columns!(), " FROM users WHERE id = $1");
const ALL: &str = concat!("SELECT ", columns!(), " FROM users ORDER BY created_at, id");
const COUNT: &str = "SELECT COUNT(*) FROM users";
const INSERT_SETUP_TOKEN: &str =
    "INSERT INTO setup_tokens (token_hash, expires_at) VALUES ($1, $2)";
const TAKE_SETUP_TOKEN: &str = "DELETE FROM setup_tokens WHERE token_hash = $1 AND expires_at > $2";
// PostgreSQL only. Under READ COMMITTED two first-user transactions with
// different tokens would each count no user and both insert; this mode
// conflicts with itself and with plain INSERTs, so they take turns and the
// second counts the first's user. (SQLite needs nothing: the DELETE that
// opens the transaction holds its single write lock until the end.)
// Also taken by disabling and deleting, so two admins removing each other
// at once take turns and the second finds the first is the last admin.
const LOCK_USERS: &str = "LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE";
// Each of these opens its transaction with a write, so that on SQLite the
// transaction holds the write lock from its first statement (a read first
// could not be upgraded under a concurrent writer).
const DISABLE: &str = "UPDATE users SET disabled_at = $2 WHERE id = $1 AND disabled_at IS NULL";
const ENABLE: &str =
    "UPDATE users SET disabled_at = NULL WHERE id = $1 AND disabled_at IS NOT NULL";
const EXISTS: &str = "SELECT COUNT(*) FROM users WHERE id = $1";
const PROMOTE: &str = "UPDATE users SET is_admin = 1 WHERE id = $1 AND is_admin = 0";
const DEMOTE: &str = "UPDATE users SET is_admin = 0 WHERE id = $1 AND is_admin <> 0";
const IS_ADMIN: &str = "SELECT is_admin FROM users WHERE id = $1";
const DELETE: &str = "DELETE FROM users WHERE id = $1 RETURNING is_admin";
const ENABLED_ADMINS: &str =
    "SELECT COUNT(*) FROM users WHERE is_admin <> 0 AND disabled_at IS NULL";
// What the account approved and no key was issued for yet is refused
// (redemption also checks the approver, for one that races with this).
// On PostgreSQL this waits for a redemption in progress on the same row,
// which then is `redeemed` and left alone; the keys are revoked after it.
const DENY_APPROVED: &str = "UPDATE device_authorizations SET status = 'denied' \
     WHERE user_id = $1 AND status = 'approved'";
const REVOKE_KEYS: &str =
    "UPDATE api_keys SET revoked_at = $2 WHERE owner_id = $1 AND revoked_at IS NULL";
const DELETE_SESSIONS: &str = "DELETE FROM sessions WHERE user_id = $1";
/// The account's stored Responses API responses (their owner is
/// `StoredResponse::owner_of`: `user:<id>`, or `user:<id>@<project>`
/// outside the default project): its conversations leave with it.
const DELETE_RESPONSES: &str = "DELETE FROM responses WHERE owner = 'user:' || $1 \
     OR substr(owner, 1, length($1) + 6) = 'user:' || $1 || '@'";
const DELETE_MEMBERSHIPS: &str = "DELETE FROM project_members WHERE user_id = $1";

fn record(row: &AnyRow) -> Result<UserRecord, sqlx::Error> {
    Ok(UserRecord {
        id: UserId(row.try_get("id")?),
        email: row.try_get("email")?,
        password_hash: row.try_get("password_hash")?,
        is_admin: row.try_get::<i64, _>("is_admin")? != 0,
        created_at: row.try_get("created_at")?,
        disabled_at: row.try_get("disabled_at")?,
    })
}

fn insert(user: &UserRecord) -> sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments<'_>> {
    sqlx::query(INSERT)
        .bind(user.id.0.as_str())
        .bind(user.email.as_str())
        .bind(user.password_hash.as_str())
        .bind(i64::from(user.is_admin))
        .bind(user.created_at)
        .bind(user.disabled_at)
}

/// Makes `user` a member of the default project (its owner when an admin),
/// in `tx`: every account starts there, as every account from before
/// projects was moved there.
async fn join_default_project(tx: &mut Tx, user: &UserRecord) -> Result<(), StoreError> {
    let role = if user.is_admin {
        ProjectRole::Owner
    } else {
        ProjectRole::Member
    };
    sqlx::query(crate::projects::SET_MEMBER)
        .bind(DEFAULT_PROJECT_ID)
        .bind(user.id.0.as_str())
        .bind(role.as_str())
        .bind(user.created_at)
        .execute(&mut **tx)
        .await
        .map(|_| ())
        .map_err(query_error)
}

#[async_trait]
impl UserStore for SqlStore {
    async fn insert_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        insert(user).execute(&mut *tx).await.map_err(query_error)?;
        join_default_project(&mut tx, user).await?;
        tx.commit().await.map_err(query_error)
    }

    async fn user_by_email(&self, email: &str) -> Result<Option<UserRecord>, StoreError> {
        self.one_by(BY_EMAIL, record, email).await
    }

    async fn user_by_id(&self, id: &UserId) -> Result<Option<UserRecord>, StoreError> {
        self.one_by(BY_ID, record, &id.0).await
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        self.all_by(ALL, record, &[]).await
    }

    async fn count_users(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar(COUNT)
            .fetch_one(&self.pool)
            .await
            .map_err(query_error)
    }

    async fn insert_setup_token(
        &self,
        token_hash: &SetupTokenHash,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(INSERT_SETUP_TOKEN)
            .bind(token_hash.as_str())
            .bind(expires_at)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn create_first_user(
        &self,
        token_hash: &SetupTokenHash,
        user: &UserRecord,
        at: i64,
    ) -> Result<bool, StoreError> {
        // Dropping the transaction without commit rolls it back, so every
        // early return below leaves nothing written.
        let mut tx = self.users_tx().await?;
        let taken = sqlx::query(TAKE_SETUP_TOKEN)
            .bind(token_hash.as_str())
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        if taken.rows_affected() != 1 {
            tx.rollback().await.map_err(query_error)?;
            return Ok(false);
        }
        let users: i64 = sqlx::query_scalar(COUNT)
            .fetch_one(&mut *tx)
            .await
            .map_err(query_error)?;
        if users != 0 {
            tx.rollback().await.map_err(query_error)?;
            return Ok(false);
        }
        insert(user).execute(&mut *tx).await.map_err(query_error)?;
        join_default_project(&mut tx, user).await?;
        tx.commit().await.map_err(query_error)?;
        Ok(true)
    }

    async fn set_user_disabled(
        &self,
        id: &UserId,
        disabled_at: Option<i64>,
    ) -> Result<AccountChange, StoreError> {
        let before = self.key_changes.before_change().await;
        let mut tx = self.users_tx().await?;
        let changed = match disabled_at {
            Some(at) => run(&mut tx, DISABLE, id, Some(at)).await?,
            None => run(&mut tx, ENABLE, id, None).await?,
        };
        if changed != 1 {
            return unchanged(tx, id).await;
        }
        if disabled_at.is_some() {
            let is_admin: i64 = sqlx::query_scalar(IS_ADMIN)
                .bind(id.0.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error)?;
            if is_admin != 0 && no_admin_left(&mut tx).await? {
                tx.rollback().await.map_err(query_error)?;
                return Ok(AccountChange::LastAdmin);
            }
            run(&mut tx, DENY_APPROVED, id, None).await?;
            run(&mut tx, DELETE_SESSIONS, id, None).await?;
        }
        tx.commit().await.map_err(query_error)?;
        self.key_changes.changed(before).await;
        Ok(AccountChange::Done)
    }

    async fn set_user_admin(&self, id: &UserId, admin: bool) -> Result<AccountChange, StoreError> {
        let before = self.key_changes.before_change().await;
        let mut tx = self.users_tx().await?;
        let changed = run(&mut tx, if admin { PROMOTE } else { DEMOTE }, id, None).await?;
        if changed != 1 {
            return unchanged(tx, id).await;
        }
        if !admin && no_admin_left(&mut tx).await? {
            tx.rollback().await.map_err(query_error)?;
            return Ok(AccountChange::LastAdmin);
        }
        tx.commit().await.map_err(query_error)?;
        self.key_changes.changed(before).await;
        Ok(AccountChange::Done)
    }

    async fn delete_user(&self, id: &UserId, at: i64) -> Result<AccountChange, StoreError> {
        let before = self.key_changes.before_change().await;
        let mut tx = self.users_tx().await?;
        let deleted: Option<i64> = sqlx::query_scalar(DELETE)
            .bind(id.0.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error)?;
        let Some(is_admin) = deleted else {
            tx.rollback().await.map_err(query_error)?;
            return Ok(AccountChange::NotFound);
        };
        if is_admin != 0 && no_admin_left(&mut tx).await? {
            tx.rollback().await.map_err(query_error)?;
            return Ok(AccountChange::LastAdmin);
        }
        // Approvals first: on PostgreSQL a redemption in progress finishes
        // before, so the key it inserts is among those revoked next.
        run(&mut tx, DENY_APPROVED, id, None).await?;
        run(&mut tx, REVOKE_KEYS, id, Some(at)).await?;
        run(&mut tx, DELETE_SESSIONS, id, None).await?;
        run(&mut tx, DELETE_RESPONSES, id, None).await?;
        run(&mut tx, DELETE_MEMBERSHIPS, id, None).await?;
        tx.commit().await.map_err(query_error)?;
        self.key_changes.changed(before).await;
        Ok(AccountChange::Done)
    }
}
