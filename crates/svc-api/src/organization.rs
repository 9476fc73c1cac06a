//! The admin API's bodies (`/v1/organization/…`), in the shape of OpenAI's
//! Administration API: projects and their API keys, lists with
//! `first_id`/`last_id`/`has_more` and an `after` cursor. svc adds what
//! OpenAI lacks: creating a project key (its secret is in the answer, once),
//! and a key's kind, permissions, allowed models and allowed MCP servers.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use crate::list::{Page, Paged};
use crate::schema::constant;

/// A project: `organization.project`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Project {
    /// `proj_` + 16 hex (the default project: `proj_default`).
    pub id: String,
    /// Always `organization.project`.
    #[schema(schema_with = object_project)]
    pub object: String,
    pub name: String,
    /// Unix time.
    pub created_at: i64,
    /// Unix time; null while active.
    #[schema(required = true)]
    pub archived_at: Option<i64>,
    /// `active` or `archived`.
    #[schema(schema_with = project_status)]
    pub status: String,
    /// The model ids (`*` matches any run of characters) keys of this
    /// project may use; null: every model.
    #[schema(required = true)]
    pub allowed_models: Option<Vec<String>>,
    /// The labels of the registered MCP servers (`*` matches any run of
    /// characters) keys of this project may use (svc's own): their tools
    /// through `/mcp`; null: every registered server.
    #[schema(required = true)]
    pub allowed_mcp_servers: Option<Vec<String>>,
    /// The tokens all the project's keys together may use per period;
    /// null: no budget.
    #[schema(required = true)]
    pub budget: Option<BudgetStatus>,
}

/// A budget (svc's own): at most `tokens` prompt and completion tokens, or
/// `usd` US dollars of spend (each model's tokens at its configured prices),
/// per UTC `period`. Exactly one of `tokens` and `usd`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetLimit {
    /// A token budget: at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub tokens: Option<i64>,
    /// A spend budget, in US dollars: more than 0 (counted in millionths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    /// `day`, `week` (from Monday) or `month`, in UTC.
    #[schema(schema_with = budget_period)]
    pub period: String,
}

/// A budget and what its current window used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BudgetStatus {
    /// A token budget's tokens; absent for a spend budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<i64>,
    /// A spend budget's US dollars; absent for a token budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    /// `day`, `week` or `month`.
    #[schema(schema_with = budget_period)]
    pub period: String,
    /// Used (or held by requests in flight) in the current window: tokens,
    /// or for a spend budget millionths of a dollar; null when the counter
    /// could not be read.
    #[schema(required = true)]
    pub used: Option<i64>,
    /// When the budget renews (unix time).
    pub resets_at: i64,
}

/// `GET /v1/organization/projects`.
pub type ProjectList = Page<Project>;

impl Paged for Project {
    const PAGE: &'static str = "ProjectList";
    const PAGE_ABOUT: &'static str = "`GET /v1/organization/projects`.";
}

/// `POST /v1/organization/projects`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProjectRequest {
    /// 1 to 200 characters.
    pub name: String,
    /// Model ids keys of the project may use (`*` matches any run of
    /// characters); omitted or null: every model.
    #[serde(default)]
    pub allowed_models: Option<Vec<String>>,
    /// Labels of the registered MCP servers keys of the project may use
    /// (`*` matches any run of characters; svc's own); omitted or null:
    /// every registered server.
    #[serde(default)]
    pub allowed_mcp_servers: Option<Vec<String>>,
    /// The tokens all its keys together may use per period; omitted or
    /// null: no budget.
    #[serde(default)]
    pub budget: Option<BudgetLimit>,
}

/// `POST /v1/organization/projects/{project_id}`: what to change (a field
/// left out stays as it is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModifyProjectRequest {
    /// 1 to 200 characters.
    #[serde(default)]
    pub name: Option<String>,
    /// The model ids keys of the project may use; null: every model.
    /// Applies from the keys' next request, on every replica.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub allowed_models: Option<Option<Vec<String>>>,
    /// The labels of the registered MCP servers keys of the project may
    /// use; null: every registered server. Applies from the keys' next
    /// request, on every replica.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub allowed_mcp_servers: Option<Option<Vec<String>>>,
    /// The project's token budget; null: none. Applies from the keys' next
    /// request, on every replica; the current window's count stays.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<BudgetLimit>)]
    pub budget: Option<Option<BudgetLimit>>,
}

/// `POST /v1/organization/projects/{project_id}/api_keys/{key_id}` (svc's
/// own): what to change (a field left out stays as it is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModifyProjectApiKeyRequest {
    /// The key's token budget; null: none. Applies from its next request,
    /// on every replica; the current window's count stays.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<BudgetLimit>)]
    pub budget: Option<Option<BudgetLimit>>,
    /// The labels of the registered MCP servers the key may use within its
    /// project's; null: every one its project allows. Applies from its
    /// next request, on every replica.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub allowed_mcp_servers: Option<Option<Vec<String>>>,
}

/// A field that is present (`null` included) is `Some`: only an absent
/// one (serde's `default`) is `None`.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// A project's API key: `organization.project.api_key` (never its secret,
/// except `value` in the answer to creating it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProjectApiKey {
    /// `key_` + 16 hex.
    pub id: String,
    /// Always `organization.project.api_key`.
    #[schema(schema_with = object_project_api_key)]
    pub object: String,
    pub name: String,
    /// `sk-svc-1a2b…9f0e`.
    pub redacted_value: String,
    /// The key itself: only in the answer to creating it, and never again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Unix time.
    pub created_at: i64,
    /// Unix time; null when never used.
    #[schema(required = true)]
    pub last_used_at: Option<i64>,
    /// Unix time; null when it does not expire.
    #[schema(required = true)]
    pub expires_at: Option<i64>,
    /// `active`, `expired`, `revoked` or `disabled` (its account is).
    #[schema(schema_with = key_state)]
    pub state: String,
    /// `all`, `restricted` or `admin`.
    #[schema(schema_with = key_kind)]
    pub kind: String,
    /// The permissions the key holds (OpenAI's scope names).
    pub permissions: Vec<String>,
    /// The model ids the key may use within its project's; null: every one
    /// its project allows.
    #[schema(required = true)]
    pub allowed_models: Option<Vec<String>>,
    /// The labels of the registered MCP servers the key may use within its
    /// project's (svc's own); null: every one its project allows.
    #[schema(required = true)]
    pub allowed_mcp_servers: Option<Vec<String>>,
    /// The tokens this key may use per period (within its project's
    /// budget); null: no budget of its own.
    #[schema(required = true)]
    pub budget: Option<BudgetStatus>,
    pub owner: ProjectApiKeyOwner,
    /// The key this one replaced by rotation (svc's own); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_from: Option<String>,
}

/// `POST /v1/organization/projects/{project_id}/api_keys/{key_id}/rotate`
/// (svc's own): a new key like this one; this one keeps working for the
/// grace period, then is refused as expired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateProjectApiKeyRequest {
    /// Seconds the old key keeps working, 0 to 2592000 (30 days); omitted
    /// or null: 86400 (24 hours).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 2592000)]
    pub grace_period_seconds: Option<i64>,
}

/// An entry of the audit log, in the shape of OpenAI's audit-log object:
/// the event's details are under its type's name (`"api_key.created":
/// {"id": ..., "data": {...}}`). Never holds a secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditLog {
    /// `audit_log-` + 16 hex.
    pub id: String,
    /// The event: `api_key.created`, `api_key.rotated`, `api_key.deleted`,
    /// `rate_limit.updated`, `login.succeeded`, `login.failed`,
    /// `logout.succeeded`, `project.created`, `project.updated`,
    /// `user.added`, `user.updated`, `user.deleted`, `device.approved`,
    /// `device.denied`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Unix time.
    pub effective_at: i64,
    /// Who did it: `{"type": "session", "session": {"user": {"id",
    /// "email"}, "ip_address"}}`, `{"type": "api_key", "api_key": {"id",
    /// "type": "user" | "operator", "user"?}}`, or svc's `{"type":
    /// "operator", "operator": {}}` (a command against the store).
    #[schema(value_type = Object)]
    pub actor: serde_json::Value,
    /// The project it happened in, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<AuditLogProject>,
    /// The event's details, under the type's name.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// The project of an audit-log entry (its name when it happened).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditLogProject {
    pub id: String,
    pub name: String,
}

/// `GET /v1/organization/audit_logs`: newest first.
pub type AuditLogList = Page<AuditLog>;

impl Paged for AuditLog {
    const PAGE: &'static str = "AuditLogList";
    const PAGE_ABOUT: &'static str = "`GET /v1/organization/audit_logs`: newest first.";
}

/// Whose a key is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProjectApiKeyOwner {
    /// `user` (an account's key) or `operator` (made by the operator, with
    /// no account).
    #[serde(rename = "type")]
    #[schema(schema_with = owner_type)]
    pub kind: String,
    /// The account, for `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<ProjectUser>,
}

/// An account as the admin API shows it: `organization.project.user`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProjectUser {
    pub id: String,
    /// Always `organization.project.user`.
    #[schema(schema_with = object_project_user)]
    pub object: String,
    pub email: String,
    /// The account's role in the project (`owner`, `member`), or null
    /// when it is not a member.
    #[schema(required = true)]
    pub role: Option<String>,
    /// When it joined the project (Unix time): in the project's user list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_at: Option<i64>,
}

/// `GET /v1/organization/projects/{project_id}/users`.
pub type ProjectUserList = Page<ProjectUser>;

impl Paged for ProjectUser {
    const PAGE: &'static str = "ProjectUserList";
    const PAGE_ABOUT: &'static str = "`GET /v1/organization/projects/{project_id}/users`.";
}

/// `POST /v1/organization/projects/{project_id}/users`: adds an account to
/// the project, or changes its role there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProjectUserRequest {
    /// The account (`usr_...`).
    pub user_id: String,
    /// `owner` or `member`.
    #[schema(schema_with = project_role)]
    pub role: String,
}

/// `GET /v1/organization/projects/{project_id}/api_keys`.
pub type ProjectApiKeyList = Page<ProjectApiKey>;

impl Paged for ProjectApiKey {
    const PAGE: &'static str = "ProjectApiKeyList";
    const PAGE_ABOUT: &'static str = "`GET /v1/organization/projects/{project_id}/api_keys`.";
}

/// `POST /v1/organization/projects/{project_id}/api_keys` (svc's own: OpenAI
/// makes project keys only in its dashboard).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProjectApiKeyRequest {
    /// 1 to 200 characters.
    pub name: String,
    /// `all` (the default), `restricted` or `admin`.
    #[serde(default)]
    pub kind: Option<String>,
    /// For `restricted` only: the scopes it holds (`model.request`,
    /// `api.responses.write`, `api.responses.read`, `api.model.read`,
    /// `api.usage.read`).
    #[serde(default)]
    pub permissions: Option<Vec<String>>,
    /// Model ids (`*` matches any run of characters) it may use; omitted
    /// or null: every one its project allows.
    #[serde(default)]
    pub allowed_models: Option<Vec<String>>,
    /// Labels of the registered MCP servers (`*` matches any run of
    /// characters) it may use (svc's own); omitted or null: every one its
    /// project allows.
    #[serde(default)]
    pub allowed_mcp_servers: Option<Vec<String>>,
    /// Seconds until it expires; omitted or null: never.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub expires_in: Option<i64>,
    /// The account the key is for (svc's own): only the admin key's own
    /// owner, which is also what omitted or null means. A key acts as its
    /// owner, so none is made for another account (403
    /// `insufficient_permissions` naming `user_id`).
    #[serde(default)]
    pub user_id: Option<String>,
    /// The tokens it may use per period (within its project's budget);
    /// omitted or null: no budget of its own.
    #[serde(default)]
    pub budget: Option<BudgetLimit>,
}

/// `DELETE /v1/organization/projects/{project_id}/api_keys/{key_id}`: the
/// key is revoked (its record stays, for its usage history).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeletedProjectApiKey {
    /// Always `organization.project.api_key.deleted`.
    #[schema(schema_with = object_deleted_key)]
    pub object: String,
    pub id: String,
    /// Always true.
    #[schema(schema_with = always_true)]
    pub deleted: bool,
}

/// `DELETE /v1/organization/projects/{project_id}/users/{user_id}`: the
/// account is no longer a member (its keys stay as they are).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeletedProjectUser {
    /// Always `organization.project.user.deleted`.
    #[schema(schema_with = object_deleted_user)]
    pub object: String,
    pub id: String,
    /// Always true.
    #[schema(schema_with = always_true)]
    pub deleted: bool,
}

fn object_deleted_user() -> Object {
    constant("organization.project.user.deleted")
}

fn object_project() -> Object {
    constant("organization.project")
}

fn object_project_api_key() -> Object {
    constant("organization.project.api_key")
}

fn object_project_user() -> Object {
    constant("organization.project.user")
}

fn object_deleted_key() -> Object {
    constant("organization.project.api_key.deleted")
}

fn always_true() -> Object {
    constant(true)
}

fn strings(values: &[&str]) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.iter().copied()))
        .build()
}

fn project_status() -> Object {
    strings(&["active", "archived"])
}

fn key_state() -> Object {
    strings(&["active", "expired", "revoked", "disabled"])
}

fn budget_period() -> Object {
    strings(&["day", "week", "month"])
}

fn key_kind() -> Object {
    strings(&["all", "restricted", "admin"])
}

fn project_role() -> Object {
    strings(&["owner", "member"])
}

fn owner_type() -> Object {
    strings(&["user", "operator"])
}

/// `GET /v1/organization/usage/completions`: one page of day buckets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageCompletionsPage {
    /// Always `page`.
    #[schema(schema_with = object_page)]
    pub object: String,
    pub data: Vec<UsageCompletionsBucket>,
    pub has_more: bool,
    /// Pass it as `page` for the next buckets; null on the last page.
    #[schema(required = true)]
    pub next_page: Option<String>,
}

/// One day's usage: `bucket`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageCompletionsBucket {
    /// Always `bucket`.
    #[schema(schema_with = object_bucket)]
    pub object: String,
    /// Unix time, 00:00 UTC of the day.
    pub start_time: i64,
    /// Unix time, 00:00 UTC of the next day.
    pub end_time: i64,
    pub results: Vec<UsageCompletionsResult>,
}

/// The usage of one group in a bucket:
/// `organization.usage.completions.result`. A field the query did not group
/// by is null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageCompletionsResult {
    /// Always `organization.usage.completions.result`.
    #[schema(schema_with = object_usage_result)]
    pub object: String,
    /// Prompt tokens.
    pub input_tokens: i64,
    /// Of `input_tokens`, those served from a reused prompt prefix.
    pub input_cached_tokens: i64,
    /// Completion tokens.
    pub output_tokens: i64,
    /// Always 0.
    pub input_audio_tokens: i64,
    /// Always 0.
    pub output_audio_tokens: i64,
    pub num_model_requests: i64,
    #[schema(required = true)]
    pub project_id: Option<String>,
    /// Always null: svc groups by key, not by account.
    #[schema(required = true)]
    pub user_id: Option<String>,
    #[schema(required = true)]
    pub api_key_id: Option<String>,
    #[schema(required = true)]
    pub model: Option<String>,
    /// Always null: svc has no batch API.
    #[schema(required = true)]
    pub batch: Option<bool>,
}

/// The page, bucket and result of one of OpenAI's audio usage endpoints:
/// the same as the completions endpoint's, with the result counting
/// `$unit` where that counts tokens.
macro_rules! audio_usage {
    ($page:ident, $bucket:ident, $result:ident, $object:literal, $unit:ident, $unit_doc:literal) => {
        #[doc = concat!("`GET /v1/organization/usage/", $object, "`: one page of day buckets.")]
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
        pub struct $page {
            /// Always `page`.
            #[schema(schema_with = object_page)]
            pub object: String,
            pub data: Vec<$bucket>,
            pub has_more: bool,
            /// Pass it as `page` for the next buckets; null on the last page.
            #[schema(required = true)]
            pub next_page: Option<String>,
        }

        /// One day's usage: `bucket`.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
        pub struct $bucket {
            /// Always `bucket`.
            #[schema(schema_with = object_bucket)]
            pub object: String,
            /// Unix time, 00:00 UTC of the day.
            pub start_time: i64,
            /// Unix time, 00:00 UTC of the next day.
            pub end_time: i64,
            pub results: Vec<$result>,
        }

        #[doc = concat!("The usage of one group in a bucket: `organization.usage.", $object, ".result`. A field the query did not group by is null.")]
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
        pub struct $result {
            #[doc = concat!("Always `organization.usage.", $object, ".result`.")]
            pub object: String,
            #[doc = $unit_doc]
            pub $unit: i64,
            pub num_model_requests: i64,
            #[schema(required = true)]
            pub project_id: Option<String>,
            /// Always null: svc groups by key, not by account.
            #[schema(required = true)]
            pub user_id: Option<String>,
            #[schema(required = true)]
            pub api_key_id: Option<String>,
            #[schema(required = true)]
            pub model: Option<String>,
        }
    };
}

audio_usage!(
    UsageAudioSpeechesPage,
    UsageAudioSpeechesBucket,
    UsageAudioSpeechesResult,
    "audio_speeches",
    characters,
    "Characters of text spoken."
);
audio_usage!(
    UsageAudioTranscriptionsPage,
    UsageAudioTranscriptionsBucket,
    UsageAudioTranscriptionsResult,
    "audio_transcriptions",
    seconds,
    "Seconds of audio transcribed or translated."
);

fn object_page() -> Object {
    constant("page")
}

fn object_bucket() -> Object {
    constant("bucket")
}

fn object_usage_result() -> Object {
    constant("organization.usage.completions.result")
}

/// An account of the organization: `organization.user`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OrganizationUser {
    /// `usr_` + 16 hex.
    pub id: String,
    /// Always `organization.user`.
    #[schema(schema_with = object_organization_user)]
    pub object: String,
    /// svc keeps no names: the email.
    pub name: String,
    pub email: String,
    /// `owner` (an admin account) or `reader`.
    #[schema(schema_with = organization_role)]
    pub role: String,
    /// When the account was made (Unix time).
    pub added_at: i64,
    /// When an admin disabled it (Unix time; svc's own); null while enabled.
    #[schema(required = true)]
    pub disabled_at: Option<i64>,
}

/// `GET /v1/organization/users`.
pub type OrganizationUserList = Page<OrganizationUser>;

impl Paged for OrganizationUser {
    const PAGE: &'static str = "OrganizationUserList";
    const PAGE_ABOUT: &'static str = "`GET /v1/organization/users`.";
}

fn object_organization_user() -> Object {
    constant("organization.user")
}

fn organization_role() -> Object {
    strings(&["owner", "reader"])
}

/// `POST /v1/organization/users/{user_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModifyOrganizationUserRequest {
    /// `owner` (an admin account) or `reader`.
    #[schema(schema_with = organization_role)]
    pub role: String,
}

/// One API request in the request log: who asked, which model, how it
/// ended, its tokens, cost and timings. Never the prompt or the reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RequestLog {
    /// Always `organization.request_log`.
    pub object: String,
    /// The request's id, as its `x-request-id` header said.
    pub id: String,
    /// When it arrived, Unix time in milliseconds.
    pub started_at_ms: i64,
    /// The key that authenticated it (none when no key did).
    #[schema(required = true)]
    pub api_key_id: Option<String>,
    #[schema(required = true)]
    pub project_id: Option<String>,
    /// The key's owning account (none for the operator's keys).
    #[schema(required = true)]
    pub user_id: Option<String>,
    /// The model asked for, once the request reached one.
    #[schema(required = true)]
    pub model: Option<String>,
    /// `openai`, `responses`, `anthropic` or `mcp`.
    pub dialect: String,
    /// Method and path: `POST /v1/chat/completions`.
    pub endpoint: String,
    /// The HTTP status answered; 499 when the client went away first.
    pub status: u16,
    /// The error's `type`, or `client_disconnected`; none on success.
    #[schema(required = true)]
    pub error_type: Option<String>,
    pub prompt_tokens: i64,
    /// Of `prompt_tokens`, those served from a reused prefix.
    pub cached_tokens: i64,
    pub completion_tokens: i64,
    /// What its tokens cost at the configured `[prices]`, in US dollars.
    pub cost_usd: f64,
    /// From arrival to the first generated token, in milliseconds.
    #[schema(required = true)]
    pub ttft_ms: Option<i64>,
    /// From arrival to the answer's last byte, in milliseconds.
    pub duration_ms: i64,
    /// The upstream endpoint that answered, for a routed model.
    #[schema(required = true)]
    pub upstream: Option<String>,
}

/// `GET /v1/organization/request_logs`: newest first.
pub type RequestLogList = Page<RequestLog>;

impl Paged for RequestLog {
    const PAGE: &'static str = "RequestLogList";
    const PAGE_ABOUT: &'static str = "`GET /v1/organization/request_logs`: newest first.";
}
