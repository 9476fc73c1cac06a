//! [`UserStore`] on SQL: the `users` and `setup_tokens` tables. Emails come
//! normalised and passwords hashed; this module checks neither.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::account::{UserId, UserRecord};
use svc_core::store::{StoreError, UserStore};

use crate::error::query_error;
use crate::{Backend, SqlStore};

macro_rules! columns {
    () => {
        "id, email, password_hash, is_admin, created_at"
    };
}

const INSERT: &str = "INSERT INTO users (id, email, password_hash, is_admin, created_at) \
     VALUES ($1, $2, $3, $4, $5)";
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
const LOCK_USERS: &str = "LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE";

fn record(row: &AnyRow) -> Result<UserRecord, sqlx::Error> {
    Ok(UserRecord {
        id: UserId(row.try_get("id")?),
        email: row.try_get("email")?,
        password_hash: row.try_get("password_hash")?,
        is_admin: row.try_get::<i64, _>("is_admin")? != 0,
        created_at: row.try_get("created_at")?,
    })
}

fn insert(user: &UserRecord) -> sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments<'_>> {
    sqlx::query(INSERT)
        .bind(user.id.0.as_str())
        .bind(user.email.as_str())
        .bind(user.password_hash.as_str())
        .bind(i64::from(user.is_admin))
        .bind(user.created_at)
}

#[async_trait]
impl UserStore for SqlStore {
    async fn insert_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        insert(user)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn user_by_email(&self, email: &str) -> Result<Option<UserRecord>, StoreError> {
        self.one_by(BY_EMAIL, record, email).await
    }

    async fn user_by_id(&self, id: &UserId) -> Result<Option<UserRecord>, StoreError> {
        self.one_by(BY_ID, record, &id.0).await
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        let rows = sqlx::query(ALL)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
        rows.iter()
            .map(record)
            .collect::<Result<_, _>>()
            .map_err(query_error)
    }

    async fn count_users(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar(COUNT)
            .fetch_one(&self.pool)
            .await
            .map_err(query_error)
    }

    async fn insert_setup_token(
        &self,
        token_hash: &str,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(INSERT_SETUP_TOKEN)
            .bind(token_hash)
            .bind(expires_at)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn create_first_user(
        &self,
        token_hash: &str,
        user: &UserRecord,
        at: i64,
    ) -> Result<bool, StoreError> {
        // Dropping the transaction without commit rolls it back, so every
        // early return below leaves nothing written.
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        if self.backend == Backend::Postgres {
            sqlx::query(LOCK_USERS)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        let taken = sqlx::query(TAKE_SETUP_TOKEN)
            .bind(token_hash)
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
        tx.commit().await.map_err(query_error)?;
        Ok(true)
    }
}
