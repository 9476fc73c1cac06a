//! svc's domain, free of HTTP and SQL: API keys and the key service,
//! accounts and sessions, the device authorization grant, usage counters,
//! the validated chat request, and the two boundaries the server depends
//! on: [`Engine`] (inference) and [`Store`] (persistence).

pub mod account;
pub mod audit;
pub mod budget;
pub mod config;
pub mod device;
pub mod duration;
pub mod engine;
pub mod hashes;
pub mod key;
pub mod keys;
pub mod messages;
pub mod project;
pub mod request;
pub mod responses;
pub mod session;
pub mod store;
pub mod throttle;
pub mod usage;

pub use account::{
    AccountError, AccountService, OpenedSession, SignInError, SsoIdentity, SsoSignInError, UserId,
    UserRecord,
};
pub use audit::{Actor, ActorUser, AuditEntry, AuditQuery};
pub use budget::{Budget, BudgetPeriod, BudgetUnit, ModelPrice};
pub use device::{
    CodeLookup, DeviceClient, DeviceConfig, DeviceDecision, DeviceRecord, DeviceService,
    DeviceState, DeviceStatus, IssuedCodes, PollOutcome, UserCode, plain_text,
};
pub use engine::{
    ChatMessage, EndpointStatus, Engine, EngineError, EngineEvent, EngineStatus, EventStream,
    FinishReason, GenerateRequest, OutputFormat, PrefixCacheStatus, Sampling, TokenLogprob,
    TokenUsage, ToolCallChunk, ToolCallSpec, ToolChoiceSpec, ToolSpec, TopLogprob, estimate_tokens,
};
pub use hashes::{DeviceCodeHash, SessionHash, SetupTokenHash, UserCodeHash};
pub use key::{ApiKey, KeyFormatError, KeyHash, KeyId};
pub use keys::{AuthError, KeyScope, KeyService, KeyState, NewKey};
pub use project::{
    AdminReach, DEFAULT_PROJECT_ID, KeyKind, MemberRemoval, ModelAccess, OrgRole, Permission,
    ProjectId, ProjectMember, ProjectRecord, ProjectRole,
};
pub use request::{ValidChatRequest, ValidationError};
pub use responses::ValidResponseRequest;
pub use session::{SessionRecord, SessionToken};
pub use store::{
    AccountChange, AuditStore, Conversation, ConversationLimits, KeyLimits, KeyOrigin, KeyRecord,
    ProjectStore, ResponseStore, StorageQuota, StorageUsage, Store, StoreError, Stored,
    StoredResponse, Turn, UnknownValue,
};
pub use usage::{UsageDelta, UsageRow, day_of};

/// Seconds since the Unix epoch, the one time unit stored and compared.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}
