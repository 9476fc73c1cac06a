//! svc's domain, free of HTTP and SQL: API keys and the key service,
//! accounts and sessions, the device authorization grant, projects, usage
//! counters, the generation request and the bounds every dialect puts on
//! it, and the two boundaries the server depends on: [`Engine`]
//! (inference) and [`Store`] (persistence). The wire formats are not
//! svc-core's: each dialect's handler in svc-server turns its requests
//! into these.
//!
//! The modules are layers. Each imports only from its own layer (a key's
//! record names its project's types, the audit log the records of
//! accounts, projects and keys) or the ones before it, never from a later
//! one, and no import goes round in a circle (`tests/layers.rs` keeps it
//! so):
//! 1. leaves, importing nothing else of svc-core: the ids, the making and
//!    hashing of secrets, the clock, the store's errors, durations, a
//!    request's limits, and the [`Engine`] boundary;
//! 2. values and their checks;
//! 3. aggregates: each one's records beside its narrow store trait
//!    ([`KeyStore`](key::KeyStore) in `key`, [`UserStore`](user::UserStore)
//!    in `user`, ...), and the audit log over them;
//! 4. services, each holding only the store traits it uses
//!    ([`KeyService`], [`AccountService`], [`DeviceService`], which keeps
//!    the device grant's records and store trait beside it, and
//!    [`ProjectService`]);
//! 5. [`Store`], the union of the narrow traits, which the stores in
//!    `svc-store` get by implementing them, and which turns into whatever
//!    a service takes.

// Leaves.
pub mod clock;
pub mod duration;
pub mod engine;
pub mod error;
pub mod ids;
pub mod limits;
pub mod secrets;

// Values and their checks.
pub mod config;
pub mod hashes;
pub mod images;
pub mod validation;

// Aggregates: records and their store traits.
pub mod audit;
pub mod batch;
pub mod budget;
pub mod conversation;
pub mod key;
pub mod project;
pub mod request_log;
pub mod response_cache;
pub mod session;
pub mod throttle;
pub mod trace;
pub mod usage;
pub mod user;

// Services.
pub mod account;
pub mod device;
pub mod keys;
pub mod projects;

// The union of the store traits.
pub mod store;

pub use account::{
    AccountError, AccountService, OpenedSession, SignInError, SsoIdentity, SsoSignInError,
};
pub use audit::{Actor, ActorUser, AuditEntry, AuditQuery, AuditStore};
pub use budget::{Budget, BudgetPeriod, BudgetUnit, ModelPrice, Tokens};
pub use clock::now;
pub use conversation::{
    Conversation, ConversationLimits, ResponseStore, StorageQuota, StorageUsage, Stored,
    StoredResponse, Turn,
};
pub use device::{
    CodeLookup, DeviceClient, DeviceConfig, DeviceDecision, DeviceRecord, DeviceService,
    DeviceState, DeviceStatus, IssuedCodes, PollOutcome, UserCode, plain_text,
};
pub use engine::{
    AudioFile, Capability, ChatMessage, EmbedInput, EmbedRequest, Embedder, Embeddings,
    EndpointStatus, Engine, EngineError, EngineEvent, EngineStatus, EventStream, FinishReason,
    GenerateRequest, Generator, IMAGE_TOKEN_ESTIMATE, ImageInput, OutputFormat, PrefixCacheStatus,
    ReasoningEffort, RerankRequest, Reranked, Reranker, Residence, Residency, ResidencyState,
    Sampling, Speaker, Speech, SpeechRequest, TextPrompt, TokenLogprob, TokenUsage, ToolCallChunk,
    ToolCallSpec, ToolChoiceSpec, ToolSpec, TopLogprob, TranscribeRequest, Transcriber, Transcript,
    Unload, UserPart, estimate_tokens, refuse_images, refuse_prompt_scoring,
};
pub use error::{StoreError, UnknownValue};
pub use hashes::{DeviceCodeHash, SessionHash, SetupTokenHash, UserCodeHash};
pub use ids::{DEFAULT_PROJECT_ID, KeyId, ProjectId, UserId};
pub use key::{ApiKey, KeyFormatError, KeyHash, KeyLimits, KeyOrigin, KeyRecord};
pub use keys::{AuthError, KeyScope, KeyService, KeyState, NewKey};
pub use project::{
    AdminReach, KeyKind, McpServerAccess, MemberRemoval, ModelAccess, OrgRole, Permission,
    ProjectMember, ProjectRecord, ProjectRole, ProjectStore,
};
pub use projects::{ProjectChanges, ProjectService};
pub use session::{SessionRecord, SessionToken};
pub use store::Store;
pub use usage::{UsageDelta, UsageRow, day_of};
pub use user::{AccountChange, UserRecord};
pub use validation::ValidationError;
