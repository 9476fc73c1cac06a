//! The admin API's projects and project keys (`/v1/organization/projects…`),
//! in the shape of OpenAI's Administration API. Only admin keys get here
//! (each handler takes a `Key<scope::Management…>`); what one may reach
//! depends on whose it is:
//!
//! - the operator's (made with `svc keys create --kind admin`, no account)
//!   or an organization owner's: every project;
//! - a project owner's: its own project only. Every other project, and
//!   every key of another project, is answered as not found, whatever its
//!   id, so ids cannot be probed.
//!
//! Keys made here belong to the admin key's owner (a key is never made for
//! another account: it would act as them), in the project named by the
//! path, and an admin key made here reaches no further than the key that
//! made it (fixed when made, see [`AdminReach`]). Project users are listed,
//! added and given a role here too (an owner's admin key may then reach
//! that project).
//!
//! Keys are rotated here too (svc's own call). Every change is written to
//! the audit log by the admin key: keys by the key service, projects and
//! memberships by [`svc_core::projects`], which the dashboard shares.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use svc_api::{
    BudgetLimit, CreateProjectApiKeyRequest, CreateProjectRequest, CreateProjectUserRequest,
    DeletedProjectApiKey, DeletedProjectUser, ModifyOrganizationUserRequest,
    ModifyProjectApiKeyRequest, ModifyProjectRequest, OrganizationUser, OrganizationUserList,
    Project, ProjectApiKey, ProjectApiKeyList, ProjectApiKeyOwner, ProjectList, ProjectUser,
    ProjectUserList, RotateProjectApiKeyRequest,
};
use svc_core::audit::{Actor, ActorUser};
use svc_core::keys::{DEFAULT_ROTATION_GRACE, MAX_ROTATION_GRACE};
use svc_core::projects::{self, ProjectChanges, mcp_servers, models};
use svc_core::user::AccountChange;
use svc_core::{
    AdminReach, Budget, KeyId, KeyOrigin, KeyRecord, KeyScope, KeyState, NewKey, ProjectId,
    ProjectMember, ProjectRecord, ProjectRole, UserId, UserRecord, ValidationError, now,
};

use crate::budget::{BudgetReading, Scope};
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::extract::{ApiJson, Key, scope};
use crate::openapi::shared;
use crate::state::AppState;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "organization",
    "The admin API, in the shape of OpenAI's Administration API: projects, their keys and users, and the audit log. Admin keys only; a project owner's admin key reaches its own project, an organization owner's (or the operator's) every project.",
)
.paths(&["/v1/organization"]);

crate::openapi::parameters! {
    /// OpenAI's cursor: `limit` and `after`.
    PageParams {
        ("limit", Query, false, "Items per page (1 to 100; default 20).",
            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
        ("after", Query, false, "The `last_id` of the previous page: this page starts after that item.",
            {"type": "string"}),
    }
    /// The project of the path.
    ProjectPath {
        ("project_id", Path, true, "The id of a project (`proj_...`).", {"type": "string"}),
    }
    /// The key of the path.
    KeyPath {
        ("key_id", Path, true, "The id of a key (`key_...`).", {"type": "string"}),
    }
    /// The account of the path.
    UserPath {
        ("user_id", Path, true, "`usr_` + 16 hex.", {"type": "string"}),
    }
}

/// The answers every admin API operation may give besides its own.
pub(crate) struct AdminErrors;

impl utoipa::IntoResponses for AdminErrors {
    fn responses()
    -> std::collections::BTreeMap<String, utoipa::openapi::RefOr<utoipa::openapi::Response>> {
        use utoipa::ToResponse;
        let shared = |(name, _): (&str, _)| utoipa::openapi::Ref::from_response_name(name).into();
        let forbidden = crate::openapi::shared::error_response(
            "Not an admin key, or an admin key that does not reach this (`code` `insufficient_permissions`).",
            None,
        );
        [
            ("401", shared(shared::Unauthorized::response())),
            ("403", forbidden.into()),
            ("500", shared(shared::InternalServerError::response())),
            ("503", shared(shared::ServiceUnavailable::response())),
        ]
        .into_iter()
        .map(|(status, response)| (status.to_owned(), response))
        .collect()
    }
}

/// `limit`'s default and most, as OpenAI's.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

/// What an admin key may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Every project.
    Organization,
    /// One project.
    Project(ProjectId),
}

impl Reach {
    /// Narrows a list's project filter to what this reach sees: `false`
    /// when it asks only for projects out of reach (the answer is then
    /// empty).
    pub(crate) fn narrow(&self, project_ids: &mut Vec<String>) -> bool {
        match self {
            Reach::Organization => true,
            Reach::Project(own) => {
                if !project_ids.is_empty() && !project_ids.contains(&own.0) {
                    return false;
                }
                *project_ids = vec![own.0.clone()];
                true
            }
        }
    }

    fn sees(&self, project: &ProjectId) -> bool {
        match self {
            Reach::Organization => true,
            Reach::Project(own) => own == project,
        }
    }
}

impl Reach {
    /// The reach a key made by this one may be given at most.
    fn most(&self) -> AdminReach {
        match self {
            Reach::Organization => AdminReach::Organization,
            Reach::Project(_) => AdminReach::Project,
        }
    }
}

/// What `key` (an admin key: the handler's scope let it in) may reach now: the
/// lesser of the reach fixed when it was made and what its owner's roles
/// reach now, so demoting the owner takes the reach away and promoting
/// them does not widen a key made before.
pub(crate) async fn reach(state: &AppState, key: &KeyRecord) -> Result<Reach, ApiError> {
    let fixed = key.kind.admin_reach().unwrap_or(AdminReach::Project);
    let owners = match &key.owner_id {
        // The operator's key: whatever it was made to reach.
        None => AdminReach::Organization,
        Some(owner) => {
            let user = state.accounts.user(owner).await?;
            if user.as_ref().is_some_and(|u| u.is_admin) {
                AdminReach::Organization
            } else if state.store.project_role(&key.project_id, owner).await?
                == Some(ProjectRole::Owner)
            {
                AdminReach::Project
            } else {
                return Err(ApiError::Forbidden(
                    "You have insufficient permissions for this operation: this admin key's account is no longer an owner of the organization or of the key's project."
                        .into(),
                ));
            }
        }
    };
    Ok(match fixed.min(owners) {
        AdminReach::Organization => Reach::Organization,
        AdminReach::Project => Reach::Project(key.project_id.clone()),
    })
}

/// `key` as the audit log names it: by id, with its account.
pub(crate) async fn key_actor(state: &AppState, key: &KeyRecord) -> Result<Actor, ApiError> {
    let owner = match &key.owner_id {
        Some(id) => state.accounts.user(id).await?.map(|u| ActorUser::from(&u)),
        None => None,
    };
    Ok(Actor::ApiKey {
        id: key.id.clone(),
        owner,
    })
}

/// The project `id`, if it exists and `reach` sees it; otherwise the 404 of
/// a project that does not exist.
async fn visible_project(
    state: &AppState,
    reach: &Reach,
    id: &str,
) -> Result<ProjectRecord, ApiError> {
    let id = ProjectId(id.to_owned());
    let found = if reach.sees(&id) {
        state.store.project_by_id(&id).await?
    } else {
        None
    };
    found.ok_or_else(|| ApiError::NotFound {
        param: None,
        message: format!("No project found with id '{}'.", id.0),
    })
}

/// The key `key_id` of `project`; any other (another project's, or none)
/// is the same 404.
async fn key_of(
    state: &AppState,
    project: &ProjectRecord,
    key_id: &str,
) -> Result<KeyRecord, ApiError> {
    let key = state.keys.get(&KeyId(key_id.to_owned())).await?;
    key.filter(|k| k.project_id == project.id)
        .ok_or_else(|| ApiError::NotFound {
            param: None,
            message: format!("No API key found with id '{key_id}' in this project."),
        })
}

async fn project_body(state: &AppState, project: ProjectRecord) -> Project {
    let budget = state
        .admission
        .budgets
        .status(Scope::Project, &project.id.0, project.budget)
        .await
        .map(budget_status);
    Project {
        budget,
        id: project.id.0,
        object: "organization.project".into(),
        name: project.name,
        created_at: project.created_at,
        archived_at: project.archived_at,
        status: if project.archived_at.is_some() {
            "archived".into()
        } else {
            "active".into()
        },
        allowed_models: project.allowed_models.0,
        allowed_mcp_servers: project.allowed_mcp_servers.0,
    }
}

async fn key_body(state: &AppState, key: KeyRecord) -> Result<ProjectApiKey, ApiError> {
    let owner = match &key.owner_id {
        None => ProjectApiKeyOwner {
            kind: "operator".into(),
            user: None,
        },
        Some(id) => {
            let user = state.accounts.user(id).await?;
            let role = state.store.project_role(&key.project_id, id).await?;
            ProjectApiKeyOwner {
                kind: "user".into(),
                user: user.map(|u| ProjectUser {
                    id: u.id.0,
                    object: "organization.project.user".into(),
                    email: u.email,
                    role: role.map(|r| r.as_str().to_owned()),
                    added_at: None,
                }),
            }
        }
    };
    let budget = state
        .admission
        .budgets
        .status(Scope::Key, &key.budget_holder().0, key.budget)
        .await
        .map(budget_status);
    Ok(ProjectApiKey {
        object: "organization.project.api_key".into(),
        budget,
        state: KeyState::of(&key, now()).as_str().into(),
        kind: key.kind.name().into(),
        permissions: key
            .kind
            .permissions()
            .into_iter()
            .map(|p| p.as_str().to_owned())
            .collect(),
        allowed_models: key.allowed_models.0,
        allowed_mcp_servers: key.allowed_mcp_servers.0,
        id: key.id.0,
        name: key.name,
        redacted_value: key.hint,
        value: None,
        created_at: key.created_at,
        last_used_at: key.last_used_at,
        expires_at: key.expires_at,
        owner,
        rotated_from: key.rotated_from.map(|k| k.0),
    })
}

/// `limit` and `after` of a list request, as OpenAI reads them.
pub(crate) struct Page {
    pub(crate) limit: usize,
    pub(crate) after: Option<String>,
}

impl Page {
    /// How many to read for this page: one more, to tell whether more follow.
    pub(crate) fn read_limit(&self) -> i64 {
        i64::try_from(self.limit)
            .unwrap_or(i64::MAX)
            .saturating_add(1)
    }

    /// `items` (read up to [`Page::read_limit`]) cut to the page, and
    /// whether more follow.
    pub(crate) fn cut<T>(&self, mut items: Vec<T>) -> (Vec<T>, bool) {
        let has_more = items.len() > self.limit;
        items.truncate(self.limit);
        (items, has_more)
    }
}

/// A list request's query string as its name-value pairs, in order.
pub(crate) struct QueryPairs(Vec<(String, String)>);

impl QueryPairs {
    /// `text` decoded; a 400 naming `query` when it is not a query string.
    pub(crate) fn parse(text: Option<&str>) -> Result<Self, ApiError> {
        serde_urlencoded::from_str(text.unwrap_or(""))
            .map(QueryPairs)
            .map_err(|_| {
                ValidationError {
                    param: "query".into(),
                    message: "the query string is not valid".into(),
                }
                .into()
            })
    }

    /// The values of a list parameter, given as `name[]` or `name`, in
    /// order, as sent.
    pub(crate) fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.0.iter().filter_map(move |(k, v)| {
            let listed = k == name || k.strip_suffix("[]") == Some(name);
            listed.then_some(v.as_str())
        })
    }

    /// The last value given for `name`.
    pub(crate) fn last(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) fn page(query: Option<&str>) -> Result<Page, ApiError> {
    page_within(query, DEFAULT_LIMIT, MAX_LIMIT)
}

/// [`page`], with a default and a most `limit` of its own.
pub(crate) fn page_within(
    query: Option<&str>,
    default_limit: usize,
    max_limit: usize,
) -> Result<Page, ApiError> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.unwrap_or("")).unwrap_or_default();
    let last = |name: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let limit = match last("limit") {
        None => default_limit,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=max_limit).contains(l))
            .ok_or_else(|| ValidationError {
                param: "limit".into(),
                message: format!("limit must be a whole number from 1 to {max_limit}"),
            })?,
    };
    Ok(Page {
        limit,
        after: last("after").filter(|a| !a.is_empty()),
    })
}

/// One page of `items` (identified by `id`): those after the item `after`
/// (all when it is not among them), at most `limit`; and whether more
/// follow.
fn paginate<T>(items: Vec<T>, page: &Page, id: impl Fn(&T) -> &str) -> (Vec<T>, bool) {
    let start = page
        .after
        .as_deref()
        .and_then(|after| items.iter().position(|item| id(item) == after))
        .map_or(0, |at| at + 1);
    page.cut(items.into_iter().skip(start).collect())
}

/// A requested budget, checked.
fn budget(requested: Option<BudgetLimit>) -> Result<Option<Budget>, ValidationError> {
    requested
        .map(|b| projects::budget(b.tokens, b.usd, &b.period))
        .transpose()
}

/// `GET /v1/organization/projects`: the projects the key reaches, oldest
/// first.
#[utoipa::path(get, path = "/v1/organization/projects", tag = "organization", operation_id = "listProjects",
    summary = "The projects this admin key reaches, oldest first.",
    security(("bearer" = ["api.management.read"])),
    params(PageParams),
    responses(
        (status = 200, description = "A page of projects.", body = ProjectList),
        (status = 400, response = shared::BadRequest),
        AdminErrors,
    ))]
pub async fn list_projects(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<ProjectList>, ApiError> {
    let reach = reach(&state, &key).await?;
    let page = page(query.as_deref())?;
    let projects: Vec<ProjectRecord> = state
        .store
        .list_projects()
        .await?
        .into_iter()
        .filter(|p| reach.sees(&p.id))
        .collect();
    let (projects, has_more) = paginate(projects, &page, |p| p.id.0.as_str());
    let mut data = Vec::with_capacity(projects.len());
    for project in projects {
        data.push(project_body(&state, project).await);
    }
    Ok(Json(ProjectList {
        object: "list".into(),
        first_id: data.first().map(|p| p.id.clone()),
        last_id: data.last().map(|p| p.id.clone()),
        has_more,
        data,
    }))
}

/// `POST /v1/organization/projects`: organization-wide admin keys only.
#[utoipa::path(post, path = "/v1/organization/projects", tag = "organization", operation_id = "createProject",
    summary = "Create a project (an organization owner's or the operator's admin key).",
    security(("bearer" = ["api.management.write"])),
    request_body = CreateProjectRequest,
    responses(
        (status = 200, description = "The project.", body = Project),
        (status = 400, response = shared::BadRequest),
        AdminErrors,
    ))]
pub async fn create_project(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateProjectRequest>,
) -> Result<Json<Project>, ApiError> {
    if reach(&state, &key).await? != Reach::Organization {
        return Err(ApiError::Forbidden(
            "You have insufficient permissions for this operation: creating projects needs an admin key of an organization owner."
                .into(),
        ));
    }
    let project = ProjectRecord {
        id: ProjectId::generate(),
        name: projects::name(&body.name)?,
        created_at: now(),
        archived_at: None,
        allowed_models: models(body.allowed_models)?,
        allowed_mcp_servers: mcp_servers(body.allowed_mcp_servers)?,
        budget: budget(body.budget)?,
    };
    state
        .projects
        .create(&key_actor(&state, &key).await?, &project)
        .await?;
    Ok(Json(project_body(&state, project).await))
}

/// `GET /v1/organization/projects/{project_id}`.
#[utoipa::path(get, path = "/v1/organization/projects/{project_id}", tag = "organization", operation_id = "getProject",
    summary = "A project, by id.",
    security(("bearer" = ["api.management.read"])),
    params(ProjectPath),
    responses(
        (status = 200, description = "The project.", body = Project),
        (status = 404, description = "No project the key reaches has this id (`code` `not_found`): another project's id is answered the same.", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn get_project(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    Path(project_id): Path<String>,
) -> Result<Json<Project>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    Ok(Json(project_body(&state, project).await))
}

/// `POST /v1/organization/projects/{project_id}`: renames the project or
/// sets its allowed models, MCP servers or budget (organization-wide admin
/// keys only: a project's owner cannot widen what the organization allowed
/// it).
#[utoipa::path(post, path = "/v1/organization/projects/{project_id}", tag = "organization", operation_id = "modifyProject",
    summary = "Rename a project or set its allowed models, MCP servers or budget (an organization owner's or the operator's admin key); keys follow from their next request.",
    security(("bearer" = ["api.management.write"])),
    params(ProjectPath), request_body = ModifyProjectRequest,
    responses(
        (status = 200, description = "The project.", body = Project),
        (status = 400, response = shared::BadRequest),
        (status = 404, description = "No project the key reaches has this id (`code` `not_found`): another project's id is answered the same.", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn modify_project(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    Path(project_id): Path<String>,
    ApiJson(body): ApiJson<ModifyProjectRequest>,
) -> Result<Json<Project>, ApiError> {
    let reach = reach(&state, &key).await?;
    let mut project = visible_project(&state, &reach, &project_id).await?;
    if reach != Reach::Organization {
        return Err(ApiError::Forbidden(
            "You have insufficient permissions for this operation: changing a project needs an admin key of an organization owner."
                .into(),
        ));
    }
    let changes = ProjectChanges {
        name: body.name.as_deref().map(projects::name).transpose()?,
        allowed_models: body.allowed_models.map(models).transpose()?,
        allowed_mcp_servers: body.allowed_mcp_servers.map(mcp_servers).transpose()?,
        budget: body.budget.map(budget).transpose()?,
    };
    let actor = key_actor(&state, &key).await?;
    if !state.projects.update(&actor, &mut project, changes).await? {
        return Err(ApiError::NotFound {
            param: None,
            message: format!("No project found with id '{}'.", project.id.0),
        });
    }
    Ok(Json(project_body(&state, project).await))
}

/// `GET /v1/organization/projects/{project_id}/api_keys`: newest first.
#[utoipa::path(get, path = "/v1/organization/projects/{project_id}/api_keys", tag = "organization", operation_id = "listProjectApiKeys",
    summary = "A project's keys (never their secrets), newest first, revoked ones included.",
    security(("bearer" = ["api.management.read"])),
    params(PageParams, ProjectPath),
    responses(
        (status = 200, description = "A page of keys.", body = ProjectApiKeyList),
        (status = 400, response = shared::BadRequest),
        (status = 404, description = "No project the key reaches has this id (`code` `not_found`): another project's id is answered the same.", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn list_keys(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    Path(project_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<ProjectApiKeyList>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    let page = page(query.as_deref())?;
    let keys = state.store.list_project_keys(&project.id).await?;
    let (keys, has_more) = paginate(keys, &page, |k| k.id.0.as_str());
    let mut data = Vec::with_capacity(keys.len());
    for key in keys {
        data.push(key_body(&state, key).await?);
    }
    Ok(Json(ProjectApiKeyList {
        object: "list".into(),
        first_id: data.first().map(|k| k.id.clone()),
        last_id: data.last().map(|k| k.id.clone()),
        has_more,
        data,
    }))
}

/// `POST /v1/organization/projects/{project_id}/api_keys`: a new key of the
/// admin key's owner in the project, its secret in `value`, once.
#[utoipa::path(post, path = "/v1/organization/projects/{project_id}/api_keys", tag = "organization", operation_id = "createProjectApiKey",
    summary = "Create a key in the project for the admin key's owner; its secret is in `value`, this once.",
    security(("bearer" = ["api.management.write"])),
    params(ProjectPath), request_body = CreateProjectApiKeyRequest,
    responses(
        (status = 200, description = "The key, with `value`.", body = ProjectApiKey),
        (status = 400, response = shared::BadRequest),
        (status = 404, description = "No project the key reaches has this id (`code` `not_found`): another project's id is answered the same.", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn create_key(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    Path(project_id): Path<String>,
    ApiJson(body): ApiJson<CreateProjectApiKeyRequest>,
) -> Result<Json<ProjectApiKey>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    let name = projects::name(&body.name)?;
    let kind = projects::key_kind(
        body.kind.as_deref().unwrap_or("all"),
        &body.permissions.unwrap_or_default(),
    )?;
    if let Some(seconds) = body.expires_in
        && seconds < 1
    {
        return Err(ValidationError {
            param: "expires_in".into(),
            message: "expires_in must be a positive number of seconds".into(),
        }
        .into());
    }
    // A key acts as its owner, so it is made for its maker only (the
    // operator's keys, which have no owner, make the operator's): never
    // for another account, whose usage, audit entries and stored
    // responses it would then take on.
    if let Some(user_id) = body.user_id
        && Some(&user_id) != key.owner_id.as_ref().map(|u| &u.0)
    {
        return Err(ApiError::OnParam {
            param: "user_id",
            error: Box::new(ApiError::Forbidden(format!(
                "You have insufficient permissions for this operation: a key is made for its maker only, not for the account '{user_id}'. That account can make its own key."
            ))),
        });
    }
    let owner_id = key.owner_id.clone();
    // No further than this key reaches now.
    let kind = kind.bounded_by(reach.most());
    let actor = key_actor(&state, &key).await?;
    let (secret, record) = state
        .keys
        .create(
            NewKey {
                name,
                owner_id,
                created_via: KeyOrigin::Api,
                expires_in: body.expires_in,
                scope: KeyScope {
                    project_id: Some(project.id.clone()),
                    kind,
                    allowed_models: models(body.allowed_models)?,
                    allowed_mcp_servers: mcp_servers(body.allowed_mcp_servers)?,
                    budget: budget(body.budget)?,
                },
            },
            &actor,
        )
        .await?;
    let mut body = key_body(&state, record).await?;
    body.value = Some(secret.expose().to_owned());
    Ok(Json(body))
}

/// `GET /v1/organization/projects/{project_id}/api_keys/{key_id}`.
#[utoipa::path(get, path = "/v1/organization/projects/{project_id}/api_keys/{key_id}", tag = "organization", operation_id = "getProjectApiKey",
    summary = "A key of the project, by id (never its secret).",
    security(("bearer" = ["api.management.read"])),
    params(ProjectPath, KeyPath),
    responses(
        (status = 200, description = "The key.", body = ProjectApiKey),
        (status = 404, description = "The project or the key is not found in what the admin key reaches (`code` `not_found`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn get_key(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    Path((project_id, key_id)): Path<(String, String)>,
) -> Result<Json<ProjectApiKey>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    let found = key_of(&state, &project, &key_id).await?;
    Ok(Json(key_body(&state, found).await?))
}

/// `POST /v1/organization/projects/{project_id}/api_keys/{key_id}` (svc's
/// own): sets or removes the key's token budget, or sets the MCP servers it
/// may use (within its project's, so a project's owner narrows, never
/// widens, what the organization allowed).
#[utoipa::path(post, path = "/v1/organization/projects/{project_id}/api_keys/{key_id}", tag = "organization", operation_id = "modifyProjectApiKey",
    summary = "Set or remove a key's token budget, or set its allowed MCP servers (svc's own); the key follows from its next request, on every replica.",
    security(("bearer" = ["api.management.write"])),
    params(ProjectPath, KeyPath), request_body = ModifyProjectApiKeyRequest,
    responses(
        (status = 200, description = "The key.", body = ProjectApiKey),
        (status = 400, response = shared::BadRequest),
        (status = 404, description = "The project or the key is not found in what the admin key reaches (`code` `not_found`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn modify_key(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    Path((project_id, key_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<ModifyProjectApiKeyRequest>,
) -> Result<Json<ProjectApiKey>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    let mut found = key_of(&state, &project, &key_id).await?;
    // Everything asked is checked before anything is changed.
    let new_budget = body.budget.map(budget).transpose()?;
    let new_servers = body.allowed_mcp_servers.map(mcp_servers).transpose()?;
    let gone = || ApiError::NotFound {
        param: None,
        message: format!("No API key found with id '{key_id}' in this project."),
    };
    if let Some(requested) = new_budget {
        found.budget = requested;
        let actor = key_actor(&state, &key).await?;
        if !state.keys.set_budget(&found, found.budget, &actor).await? {
            return Err(gone());
        }
    }
    if let Some(servers) = new_servers {
        let actor = key_actor(&state, &key).await?;
        if !state
            .keys
            .set_allowed_mcp_servers(&found, &servers, &actor)
            .await?
        {
            return Err(gone());
        }
        found.allowed_mcp_servers = servers;
    }
    Ok(Json(key_body(&state, found).await?))
}

/// `DELETE /v1/organization/projects/{project_id}/api_keys/{key_id}`:
/// revokes the key (refused from the next request, on every replica); its
/// record stays, shown as `revoked`. Deleting it again answers the same.
#[utoipa::path(delete, path = "/v1/organization/projects/{project_id}/api_keys/{key_id}", tag = "organization", operation_id = "deleteProjectApiKey",
    summary = "Revoke a key of the project: refused from its next request, on every replica; its record stays, `revoked`.",
    security(("bearer" = ["api.management.write"])),
    params(ProjectPath, KeyPath),
    responses(
        (status = 200, description = "Revoked.", body = DeletedProjectApiKey),
        (status = 404, description = "The project or the key is not found in what the admin key reaches (`code` `not_found`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn delete_key(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    Path((project_id, key_id)): Path<(String, String)>,
) -> Result<Json<DeletedProjectApiKey>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    let found = key_of(&state, &project, &key_id).await?;
    state
        .keys
        .revoke(&found.id, &key_actor(&state, &key).await?)
        .await?;
    Ok(Json(DeletedProjectApiKey {
        object: "organization.project.api_key.deleted".into(),
        id: found.id.0,
        deleted: true,
    }))
}

/// `POST /v1/organization/projects/{project_id}/api_keys/{key_id}/rotate`:
/// a new key like this one (its secret in `value`, once); this one keeps
/// working for `grace_period_seconds` (default 24 hours), then is refused
/// as expired.
#[utoipa::path(post, path = "/v1/organization/projects/{project_id}/api_keys/{key_id}/rotate", tag = "organization", operation_id = "rotateProjectApiKey",
    summary = "Rotate a key of the project (svc's own): a new key with the same project, owner, kind, permissions, models, rate limits and name, its secret in `value` this once and `rotated_from` naming the old one; the old key keeps working for `grace_period_seconds` (default 86400), then is refused as expired.",
    security(("bearer" = ["api.management.write"])),
    params(ProjectPath, KeyPath), request_body = RotateProjectApiKeyRequest,
    responses(
        (status = 200, description = "The new key, with `value`.", body = ProjectApiKey),
        (status = 400, description = "A grace period out of range (`param` `grace_period_seconds`), or a key that is not active (`param` `key_id`).", body = svc_api::ErrorBody),
        (status = 404, description = "The project or the key is not found in what the admin key reaches (`code` `not_found`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn rotate_key(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    Path((project_id, key_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<RotateProjectApiKeyRequest>,
) -> Result<Json<ProjectApiKey>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    let mut found = key_of(&state, &project, &key_id).await?;
    // The new secret acts as the key's owner: only that account (or, for
    // the operator's keys, the operator) may hold it. Anyone here may
    // revoke the key instead.
    if found.owner_id != key.owner_id {
        return Err(ApiError::OnParam {
            param: "key_id",
            error: Box::new(ApiError::Forbidden(
                "You have insufficient permissions for this operation: only the key's own account can rotate it, since the new key acts as that account. Revoke it instead."
                    .into(),
            )),
        });
    }
    // The new key reaches no further than this one does now.
    found.kind = found.kind.bounded_by(reach.most());
    let grace = body.grace_period_seconds.unwrap_or(DEFAULT_ROTATION_GRACE);
    if !(0..=MAX_ROTATION_GRACE).contains(&grace) {
        return Err(ValidationError {
            param: "grace_period_seconds".into(),
            message: format!(
                "grace_period_seconds must be a whole number of seconds from 0 to {MAX_ROTATION_GRACE} (30 days)"
            ),
        }
        .into());
    }
    let state_now = KeyState::of(&found, now());
    let actor = key_actor(&state, &key).await?;
    let rotated = match state_now {
        KeyState::Active => state.keys.rotate(&found, grace, &actor).await?,
        _ => None,
    };
    let Some((secret, record)) = rotated else {
        return Err(ValidationError {
            param: "key_id".into(),
            message: format!(
                "Only an active key can be rotated; this one is {}.",
                state_now.as_str()
            ),
        }
        .into());
    };
    let mut body = key_body(&state, record).await?;
    body.value = Some(secret.expose().to_owned());
    Ok(Json(body))
}

fn member_body(member: ProjectMember) -> ProjectUser {
    ProjectUser {
        id: member.user_id.0,
        object: "organization.project.user".into(),
        email: member.email,
        role: Some(member.role.as_str().to_owned()),
        added_at: Some(member.added_at),
    }
}

/// An account as the admin API shows it.
fn organization_user(user: UserRecord) -> OrganizationUser {
    OrganizationUser {
        object: "organization.user".into(),
        name: user.email.clone(),
        role: if user.is_admin { "owner" } else { "reader" }.into(),
        id: user.id.0,
        email: user.email,
        added_at: user.created_at,
        disabled_at: user.disabled_at,
    }
}

/// Organization-wide admin keys only: the accounts of the organization are
/// not a project's to read.
async fn organization_wide(state: &AppState, key: &KeyRecord) -> Result<(), ApiError> {
    if reach(state, key).await? != Reach::Organization {
        return Err(ApiError::Forbidden(
            "You have insufficient permissions for this operation: the organization's users need an admin key of an organization owner."
                .into(),
        ));
    }
    Ok(())
}

/// `GET /v1/organization/users`: every account, oldest first.
#[utoipa::path(get, path = "/v1/organization/users", tag = "organization", operation_id = "listOrganizationUsers",
    summary = "The organization's accounts, oldest first, with their role (`owner`: an admin account; `reader`). An organization owner's or the operator's admin key.",
    security(("bearer" = ["api.management.read"])),
    params(PageParams),
    responses(
        (status = 200, description = "A page of accounts.", body = OrganizationUserList),
        (status = 400, response = shared::BadRequest),
        AdminErrors,
    ))]
pub async fn list_organization_users(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<OrganizationUserList>, ApiError> {
    organization_wide(&state, &key).await?;
    let page = page(query.as_deref())?;
    let users = state.accounts.list_users().await?;
    let (users, has_more) = paginate(users, &page, |u| u.id.0.as_str());
    let data: Vec<OrganizationUser> = users.into_iter().map(organization_user).collect();
    Ok(Json(OrganizationUserList {
        object: "list".into(),
        first_id: data.first().map(|u| u.id.clone()),
        last_id: data.last().map(|u| u.id.clone()),
        has_more,
        data,
    }))
}

/// `GET /v1/organization/users/{user_id}`.
#[utoipa::path(get, path = "/v1/organization/users/{user_id}", tag = "organization", operation_id = "getOrganizationUser",
    summary = "One account of the organization.",
    security(("bearer" = ["api.management.read"])),
    params(UserPath),
    responses(
        (status = 200, description = "The account.", body = OrganizationUser),
        (status = 404, description = "No account with that id (`code` `not_found`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn get_organization_user(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    Path(user_id): Path<String>,
) -> Result<Json<OrganizationUser>, ApiError> {
    organization_wide(&state, &key).await?;
    let user = state.accounts.user(&UserId(user_id.clone())).await?;
    user.map(|u| Json(organization_user(u)))
        .ok_or_else(|| ApiError::NotFound {
            param: None,
            message: format!("No user found with id '{user_id}'."),
        })
}

/// `POST /v1/organization/users/{user_id}`: makes an account an
/// organization owner (an admin) or a reader; refused for the last enabled
/// owner. Its admin keys follow from their next request, on every replica.
#[utoipa::path(post, path = "/v1/organization/users/{user_id}", tag = "organization", operation_id = "modifyOrganizationUser",
    summary = "Make an account an organization owner (an admin) or a reader; the last enabled owner stays one. Its admin keys follow from their next request, on every replica.",
    security(("bearer" = ["api.management.write"])),
    params(UserPath), request_body = ModifyOrganizationUserRequest,
    responses(
        (status = 200, description = "The account.", body = OrganizationUser),
        (status = 400, description = "`role` is not owner or reader, or the account is the last owner (`param` `role`).", body = svc_api::ErrorBody),
        (status = 404, description = "No account with that id (`code` `not_found`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn modify_organization_user(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    Path(user_id): Path<String>,
    ApiJson(body): ApiJson<ModifyOrganizationUserRequest>,
) -> Result<Json<OrganizationUser>, ApiError> {
    organization_wide(&state, &key).await?;
    let admin = match body.role.as_str() {
        "owner" => true,
        "reader" => false,
        other => {
            return Err(ValidationError {
                param: "role".into(),
                message: format!("role must be owner or reader, not '{other}'"),
            }
            .into());
        }
    };
    let not_found = || ApiError::NotFound {
        param: None,
        message: format!("No user found with id '{user_id}'."),
    };
    let id = UserId(user_id.clone());
    let user = state.accounts.user(&id).await?.ok_or_else(not_found)?;
    let actor = key_actor(&state, &key).await?;
    match state.accounts.set_admin(&user, admin, &actor).await? {
        AccountChange::Done | AccountChange::Unchanged => {}
        AccountChange::NotFound => return Err(not_found()),
        AccountChange::LastAdmin => {
            return Err(ValidationError {
                param: "role".into(),
                message: "the last organization owner cannot become a reader".into(),
            }
            .into());
        }
    }
    let user = state.accounts.user(&id).await?.ok_or_else(not_found)?;
    Ok(Json(organization_user(user)))
}

/// `GET /v1/organization/projects/{project_id}/users`: oldest member first.
#[utoipa::path(get, path = "/v1/organization/projects/{project_id}/users", tag = "organization", operation_id = "listProjectUsers",
    summary = "A project's members and their roles, oldest first.",
    security(("bearer" = ["api.management.read"])),
    params(PageParams, ProjectPath),
    responses(
        (status = 200, description = "A page of members.", body = ProjectUserList),
        (status = 400, response = shared::BadRequest),
        (status = 404, description = "No project the key reaches has this id (`code` `not_found`): another project's id is answered the same.", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn list_users(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    Path(project_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<ProjectUserList>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    let page = page(query.as_deref())?;
    let members = state.store.list_project_members(&project.id).await?;
    let (members, has_more) = paginate(members, &page, |m| m.user_id.0.as_str());
    let data: Vec<ProjectUser> = members.into_iter().map(member_body).collect();
    Ok(Json(ProjectUserList {
        object: "list".into(),
        first_id: data.first().map(|u| u.id.clone()),
        last_id: data.last().map(|u| u.id.clone()),
        has_more,
        data,
    }))
}

/// `POST /v1/organization/projects/{project_id}/users`: adds an account to
/// the project with a role, or changes its role there. An owner's admin
/// keys reach the project from their next request; a member's do not.
#[utoipa::path(post, path = "/v1/organization/projects/{project_id}/users", tag = "organization", operation_id = "createProjectUser",
    summary = "Add an account to the project with a role, or change its role there.",
    security(("bearer" = ["api.management.write"])),
    params(ProjectPath), request_body = CreateProjectUserRequest,
    responses(
        (status = 200, description = "The member.", body = ProjectUser),
        (status = 400, response = shared::BadRequest),
        (status = 404, description = "No project the key reaches has this id, or no account has this `user_id` (`code` `not_found`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn add_user(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    Path(project_id): Path<String>,
    ApiJson(body): ApiJson<CreateProjectUserRequest>,
) -> Result<Json<ProjectUser>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    let role = ProjectRole::parse(&body.role).map_err(|_| ValidationError {
        param: "role".into(),
        message: "role must be owner or member".into(),
    })?;
    let user = UserId(body.user_id);
    if state.accounts.user(&user).await?.is_none() {
        return Err(ApiError::NotFound {
            param: Some("user_id".into()),
            message: format!("No user found with id '{}'.", user.0),
        });
    }
    state
        .projects
        .set_member(&key_actor(&state, &key).await?, &project, &user, role)
        .await?;
    let members = state.store.list_project_members(&project.id).await?;
    let member = members
        .into_iter()
        .find(|m| m.user_id == user)
        .ok_or_else(|| ApiError::Internal("a member just added is not listed".into()))?;
    Ok(Json(member_body(member)))
}

/// `DELETE /v1/organization/projects/{project_id}/users/{user_id}`:
/// removes the account from the project (audited as `user.deleted`), never
/// its last owner; the account's keys stay as they are.
#[utoipa::path(delete, path = "/v1/organization/projects/{project_id}/users/{user_id}", tag = "organization", operation_id = "deleteProjectUser",
    summary = "Remove an account from the project (never its last owner); its keys stay as they are.",
    security(("bearer" = ["api.management.write"])),
    params(ProjectPath, UserPath),
    responses(
        (status = 200, description = "Removed.", body = DeletedProjectUser),
        (status = 400, response = shared::BadRequest),
        (status = 404, description = "No project the key reaches has this id, or the account is not a member (`code` `not_found`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn remove_user(
    Key(key, _): Key<scope::ManagementWrite>,
    State(state): State<AppState>,
    Path((project_id, user_id)): Path<(String, String)>,
) -> Result<Json<DeletedProjectUser>, ApiError> {
    let reach = reach(&state, &key).await?;
    let project = visible_project(&state, &reach, &project_id).await?;
    let user = UserId(user_id);
    let actor = key_actor(&state, &key).await?;
    match state
        .projects
        .remove_member(&actor, &project, &user)
        .await?
    {
        svc_core::MemberRemoval::Removed(_) => Ok(Json(DeletedProjectUser {
            object: "organization.project.user.deleted".into(),
            id: user.0,
            deleted: true,
        })),
        svc_core::MemberRemoval::NotMember => Err(ApiError::NotFound {
            param: Some("user_id".into()),
            message: format!("No member of this project has the id '{}'.", user.0),
        }),
        svc_core::MemberRemoval::LastOwner => Err(ValidationError {
            param: "user_id".into(),
            message: "this is the project's last owner: make another member owner first".into(),
        }
        .into()),
    }
}

/// A budget's reading as the admin API shows it: a token budget's tokens
/// or a spend budget's dollars, its period, used and renewal.
fn budget_status(reading: BudgetReading) -> svc_api::BudgetStatus {
    let budget = reading.budget;
    let (tokens, usd) = match budget.unit {
        svc_core::BudgetUnit::Tokens => (Some(budget.limit), None),
        svc_core::BudgetUnit::Usd => (None, Some(svc_core::budget::micros_to_usd(budget.limit))),
    };
    svc_api::BudgetStatus {
        tokens,
        usd,
        period: budget.period.as_str().into(),
        used: reading.used,
        resets_at: reading.resets_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_the_cursor() {
        let items: Vec<String> = (0..5).map(|n| format!("id{n}")).collect();
        let page_of = |limit, after: Option<&str>| Page {
            limit,
            after: after.map(str::to_owned),
        };
        let (first, more) = paginate(items.clone(), &page_of(2, None), |s| s.as_str());
        assert_eq!((first, more), (vec!["id0".into(), "id1".into()], true));
        let (next, more) = paginate(items.clone(), &page_of(2, Some("id1")), |s| s.as_str());
        assert_eq!((next, more), (vec!["id2".into(), "id3".into()], true));
        let (last, more) = paginate(items.clone(), &page_of(2, Some("id3")), |s| s.as_str());
        assert_eq!((last, more), (vec!["id4".to_owned()], false));
        let (past, more) = paginate(items, &page_of(2, Some("id4")), |s| s.as_str());
        assert!(past.is_empty() && !more);
    }

    #[test]
    fn limits_are_checked() {
        assert_eq!(page(None).unwrap().limit, DEFAULT_LIMIT);
        assert_eq!(page(Some("limit=100&after=key_1")).unwrap().limit, 100);
        assert_eq!(
            page(Some("after=key_1")).unwrap().after.as_deref(),
            Some("key_1")
        );
        for bad in ["limit=0", "limit=101", "limit=x"] {
            assert!(page(Some(bad)).is_err(), "{bad}");
        }
    }
}
