//! [`ProjectStore`] on SQL: the `projects` and `project_members` tables.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::ids::{ProjectId, UserId};
use svc_core::project::{MemberRemoval, ProjectMember, ProjectRecord, ProjectRole};
use svc_core::store::{ProjectStore, StoreError};

use crate::error::{query_error, unknown_value};
use crate::{Backend, SqlStore};

macro_rules! columns {
    () => {
        "id, name, created_at, archived_at, allowed_models, budget_tokens, budget_period, \
         budget_unit, allowed_mcp_servers"
    };
}

const INSERT: &str = concat!(
    "INSERT INTO projects (",
    columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
);
const BY_ID: &str = concat!("SELECT ", columns!(), " FROM projects WHERE id = $1");
const ALL: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM projects ORDER BY created_at, id"
);
const OWNED: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM projects WHERE id IN (SELECT project_id FROM project_members \
     WHERE user_id = $1 AND role = 'owner') ORDER BY created_at, id"
);
// An upsert both backends read the same way.
pub(crate) const SET_MEMBER: &str = "INSERT INTO project_members \
     (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (project_id, user_id) DO UPDATE SET role = excluded.role";
const UPDATE: &str = "UPDATE projects SET name = $2, allowed_models = $3, \
     budget_tokens = $4, budget_period = $5, budget_unit = $6, allowed_mcp_servers = $7 \
     WHERE id = $1";
const MEMBERS: &str = "SELECT m.user_id, u.email, m.role, m.created_at \
     FROM project_members m JOIN users u ON u.id = m.user_id \
     WHERE m.project_id = $1 ORDER BY m.created_at, m.user_id";
const ROLE: &str = "SELECT role FROM project_members WHERE project_id = $1 AND user_id = $2";
// Removing a member: on PostgreSQL the project's row is locked first, so
// that removals of its owners take turns and the second counts what the
// first left (SQLite needs nothing: the DELETE holds its single write lock
// until the end of the transaction).
const LOCK_PROJECT: &str = "SELECT id FROM projects WHERE id = $1 FOR UPDATE";
const REMOVE_MEMBER: &str =
    "DELETE FROM project_members WHERE project_id = $1 AND user_id = $2 RETURNING role";
const OWNERS: &str =
    "SELECT COUNT(*) FROM project_members WHERE project_id = $1 AND role = 'owner'";

fn record(row: &AnyRow) -> Result<ProjectRecord, sqlx::Error> {
    Ok(ProjectRecord {
        id: ProjectId(row.try_get("id")?),
        name: row.try_get("name")?,
        created_at: row.try_get("created_at")?,
        archived_at: row.try_get("archived_at")?,
        allowed_models: crate::lists::model_access(row, "allowed_models")?,
        allowed_mcp_servers: crate::lists::mcp_server_access(row, "allowed_mcp_servers")?,
        budget: crate::budgets::budget(row, "budget_tokens", "budget_period", "budget_unit")?,
    })
}

#[async_trait]
impl ProjectStore for SqlStore {
    async fn insert_project(&self, project: &ProjectRecord) -> Result<(), StoreError> {
        sqlx::query(INSERT)
            .bind(project.id.0.as_str())
            .bind(project.name.as_str())
            .bind(project.created_at)
            .bind(project.archived_at)
            .bind(crate::lists::model_access_json(&project.allowed_models))
            .bind(crate::budgets::budget_columns(project.budget).limit)
            .bind(crate::budgets::budget_columns(project.budget).period)
            .bind(crate::budgets::budget_columns(project.budget).unit)
            .bind(crate::lists::mcp_server_access_json(
                &project.allowed_mcp_servers,
            ))
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn project_by_id(&self, id: &ProjectId) -> Result<Option<ProjectRecord>, StoreError> {
        self.one_by(BY_ID, record, &id.0).await
    }

    async fn list_projects(&self) -> Result<Vec<ProjectRecord>, StoreError> {
        self.all_by(ALL, record, &[]).await
    }

    async fn owned_projects(&self, user: &UserId) -> Result<Vec<ProjectRecord>, StoreError> {
        self.all_by(OWNED, record, &[user.0.as_str()]).await
    }

    async fn update_project(&self, project: &ProjectRecord) -> Result<bool, StoreError> {
        let columns = crate::budgets::budget_columns(project.budget);
        self.change_for_keys(
            sqlx::query(UPDATE)
                .bind(project.id.0.as_str())
                .bind(project.name.as_str())
                .bind(crate::lists::model_access_json(&project.allowed_models))
                .bind(columns.limit)
                .bind(columns.period)
                .bind(columns.unit)
                .bind(crate::lists::mcp_server_access_json(
                    &project.allowed_mcp_servers,
                )),
        )
        .await
    }

    async fn set_project_member(
        &self,
        project: &ProjectId,
        user: &UserId,
        role: ProjectRole,
        at: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(SET_MEMBER)
            .bind(project.0.as_str())
            .bind(user.0.as_str())
            .bind(role.as_str())
            .bind(at)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn list_project_members(
        &self,
        project: &ProjectId,
    ) -> Result<Vec<ProjectMember>, StoreError> {
        self.all_by(MEMBERS, member, &[project.0.as_str()]).await
    }

    async fn project_role(
        &self,
        project: &ProjectId,
        user: &UserId,
    ) -> Result<Option<ProjectRole>, StoreError> {
        let role: Option<String> = sqlx::query_scalar(ROLE)
            .bind(project.0.as_str())
            .bind(user.0.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        role.map(|r| ProjectRole::parse(&r))
            .transpose()
            .map_err(|e| query_error(unknown_value("role", e)))
    }

    async fn remove_project_member(
        &self,
        project: &ProjectId,
        user: &UserId,
    ) -> Result<MemberRemoval, StoreError> {
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        if self.backend == Backend::Postgres {
            sqlx::query(LOCK_PROJECT)
                .bind(project.0.as_str())
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        let removed: Option<String> = sqlx::query_scalar(REMOVE_MEMBER)
            .bind(project.0.as_str())
            .bind(user.0.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error)?;
        let Some(role) = removed else {
            tx.rollback().await.map_err(query_error)?;
            return Ok(MemberRemoval::NotMember);
        };
        let role = ProjectRole::parse(&role).map_err(|e| query_error(unknown_value("role", e)))?;
        if role == ProjectRole::Owner {
            let owners: i64 = sqlx::query_scalar(OWNERS)
                .bind(project.0.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error)?;
            if owners == 0 {
                tx.rollback().await.map_err(query_error)?;
                return Ok(MemberRemoval::LastOwner);
            }
        }
        tx.commit().await.map_err(query_error)?;
        Ok(MemberRemoval::Removed(role))
    }
}

/// A row of `MEMBERS`.
fn member(row: &AnyRow) -> Result<ProjectMember, sqlx::Error> {
    let role: String = row.try_get("role")?;
    Ok(ProjectMember {
        user_id: UserId(row.try_get("user_id")?),
        email: row.try_get("email")?,
        role: ProjectRole::parse(&role).map_err(|e| unknown_value("role", e))?,
        added_at: row.try_get("created_at")?,
    })
}
