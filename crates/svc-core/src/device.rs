//! The OAuth 2.0 device authorization grant (RFC 8628): device codes, user
//! codes, the states of an authorization, [`DeviceStore`], their
//! persistence, and [`DeviceService`], the grant itself.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::audit::AuditStore;
use crate::clock::now;
use crate::error::{StoreError, UnknownValue};
use crate::hashes::{DeviceCodeHash, UserCodeHash};
use crate::ids::{KeyId, UserId};
use crate::key::{ApiKey, KeyHash, KeyOrigin, KeyRecord};
use crate::project::ProjectStore;
use crate::secrets::random_token;
use crate::throttle::{Throttle, ThrottleStore, Throttled, give_back_all, take_all};
use crate::user::UserStore;

/// Where an authorization stands, without the details: the stored `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceStatus {
    /// Waiting for the user.
    Pending,
    /// The user approved; the next poll gets a key.
    Approved,
    /// The user denied.
    Denied,
    /// Approved and its key issued: done.
    Redeemed,
}

impl DeviceStatus {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceStatus::Pending => "pending",
            DeviceStatus::Approved => "approved",
            DeviceStatus::Denied => "denied",
            DeviceStatus::Redeemed => "redeemed",
        }
    }

    /// Reads the stored form; anything else is an error, never a guess.
    pub fn parse(text: &str) -> Result<Self, UnknownValue> {
        Ok(match text {
            "pending" => DeviceStatus::Pending,
            "approved" => DeviceStatus::Approved,
            "denied" => DeviceStatus::Denied,
            "redeemed" => DeviceStatus::Redeemed,
            _ => return Err(UnknownValue::new("device authorization status", text)),
        })
    }
}

/// Where an authorization stands, with what each state carries: who
/// decided and when, and the key that redeemed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceState {
    /// Waiting for the person.
    Pending,
    /// Approved by `by` at `decided_at`; the next poll gets a key.
    Approved { by: UserId, decided_at: i64 },
    /// Denied by `by` at `decided_at`, or approved then and denied since,
    /// because the account was disabled or deleted before the key was issued.
    Denied { by: UserId, decided_at: i64 },
    /// Approved by `by` at `decided_at`, and `key_id` issued: done.
    Redeemed {
        by: UserId,
        decided_at: i64,
        key_id: KeyId,
    },
}

impl DeviceState {
    /// The state's name, as stored.
    pub fn status(&self) -> DeviceStatus {
        match self {
            DeviceState::Pending => DeviceStatus::Pending,
            DeviceState::Approved { .. } => DeviceStatus::Approved,
            DeviceState::Denied { .. } => DeviceStatus::Denied,
            DeviceState::Redeemed { .. } => DeviceStatus::Redeemed,
        }
    }

    /// Who approved or denied it, once decided.
    pub fn decided_by(&self) -> Option<&UserId> {
        match self {
            DeviceState::Pending => None,
            DeviceState::Approved { by, .. }
            | DeviceState::Denied { by, .. }
            | DeviceState::Redeemed { by, .. } => Some(by),
        }
    }

    /// When it was approved or denied.
    pub fn decided_at(&self) -> Option<i64> {
        match self {
            DeviceState::Pending => None,
            DeviceState::Approved { decided_at, .. }
            | DeviceState::Denied { decided_at, .. }
            | DeviceState::Redeemed { decided_at, .. } => Some(*decided_at),
        }
    }

    /// The key issued on redemption.
    pub fn key_id(&self) -> Option<&KeyId> {
        match self {
            DeviceState::Redeemed { key_id, .. } => Some(key_id),
            _ => None,
        }
    }

    /// The state the stored columns describe (`status`, `user_id`,
    /// `decided_at`, `key_id`); an error when they do not make one (a
    /// decided authorization without who or when, a redeemed one without
    /// its key), never a guess.
    pub fn from_stored(
        status: &str,
        user_id: Option<UserId>,
        decided_at: Option<i64>,
        key_id: Option<KeyId>,
    ) -> Result<Self, UnknownValue> {
        let status = DeviceStatus::parse(status)?;
        let incomplete = || UnknownValue::new("device authorization state", status.as_str());
        let decided = || match (user_id.clone(), decided_at) {
            (Some(by), Some(decided_at)) => Ok((by, decided_at)),
            _ => Err(incomplete()),
        };
        Ok(match status {
            DeviceStatus::Pending => DeviceState::Pending,
            DeviceStatus::Approved => {
                let (by, decided_at) = decided()?;
                DeviceState::Approved { by, decided_at }
            }
            DeviceStatus::Denied => {
                let (by, decided_at) = decided()?;
                DeviceState::Denied { by, decided_at }
            }
            DeviceStatus::Redeemed => {
                let (by, decided_at) = decided()?;
                let key_id = key_id.clone().ok_or_else(incomplete)?;
                DeviceState::Redeemed {
                    by,
                    decided_at,
                    key_id,
                }
            }
        })
    }
}

/// What the person chose on the approval page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceDecision {
    Approve,
    Deny,
}

impl DeviceDecision {
    /// The status it moves an authorization to.
    pub fn status(self) -> DeviceStatus {
        match self {
            DeviceDecision::Approve => DeviceStatus::Approved,
            DeviceDecision::Deny => DeviceStatus::Denied,
        }
    }
}

impl fmt::Display for DeviceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored device authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRecord {
    /// `dev_` + 16 hex.
    pub id: String,
    pub device_code_hash: DeviceCodeHash,
    pub user_code_hash: UserCodeHash,
    pub client_id: Option<String>,
    pub scope: Option<String>,
    /// Address and user agent of the client that asked, shown to the user.
    pub client_address: Option<String>,
    pub user_agent: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    /// Seconds the client must wait between polls (grows on `slow_down`).
    pub interval: i64,
    /// Milliseconds since the epoch of the last poll.
    pub last_polled_at_ms: Option<i64>,
    pub state: DeviceState,
}

/// Persistence of device authorizations (RFC 8628).
#[async_trait]
pub trait DeviceStore: Send + Sync {
    /// Stores a new authorization; [`StoreError::Conflict`] when its id,
    /// device-code hash or user-code hash exists already.
    async fn insert_device(&self, record: &DeviceRecord) -> Result<(), StoreError>;
    async fn device_by_code_hash(
        &self,
        hash: &DeviceCodeHash,
    ) -> Result<Option<DeviceRecord>, StoreError>;
    /// By the hash of the normalised user code.
    async fn device_by_user_code_hash(
        &self,
        user_code_hash: &UserCodeHash,
    ) -> Result<Option<DeviceRecord>, StoreError>;
    /// How many authorizations have not expired at `at` (whatever their
    /// status).
    async fn count_live_devices(&self, at: i64) -> Result<i64, StoreError>;
    /// Records a poll at `at_ms` (milliseconds) if the previous one was at
    /// least `min_gap_ms` earlier (or there was none): true. Otherwise adds
    /// `slow_down_secs` to the stored interval, records the poll, and
    /// returns false.
    async fn poll_device(
        &self,
        id: &str,
        at_ms: i64,
        min_gap_ms: i64,
        slow_down_secs: i64,
    ) -> Result<bool, StoreError>;
    /// Moves a pending, unexpired (at `at`) authorization to approved or
    /// denied by `user_id`; false when it was not pending or has expired.
    async fn decide_device(
        &self,
        id: &str,
        user_id: &UserId,
        decision: DeviceDecision,
        at: i64,
    ) -> Result<bool, StoreError>;
    /// In one transaction: moves an `approved` authorization to `redeemed`
    /// with `key.id`, and inserts the key. False, with nothing written, when
    /// it was not `approved` (so a key is never issued twice) or the account
    /// that approved it is disabled.
    async fn redeem_device(
        &self,
        id: &str,
        key: &KeyRecord,
        key_hash: &KeyHash,
        at: i64,
    ) -> Result<bool, StoreError>;
    /// Deletes authorizations that expired before `before`; returns how many.
    async fn delete_expired_devices(&self, before: i64) -> Result<u64, StoreError>;
}

/// RFC 8628 section 6.1: no vowels (no words), no look-alikes.
pub const USER_CODE_ALPHABET: &[u8; 20] = b"BCDFGHJKLMNPQRSTVWXZ";
const USER_CODE_LEN: usize = 8;

/// A user code, normalised to 8 characters of [`USER_CODE_ALPHABET`]; shown
/// as `XXXX-XXXX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCode(String);

impl UserCode {
    /// 8 characters from the OS generator: 20^8 ≈ 2^34.6 codes, with code
    /// entry throttled and codes living minutes (RFC 8628 section 5.1).
    pub fn generate() -> Self {
        let code = (0..USER_CODE_LEN)
            .map(|_| {
                let i = loop {
                    // Rejection sampling keeps the choice uniform.
                    let [byte] = crate::secrets::os_random::<1>();
                    if byte < 240 {
                        break usize::from(byte % 20);
                    }
                };
                char::from(USER_CODE_ALPHABET[i])
            })
            .collect();
        UserCode(code)
    }

    /// Reads what a person typed: case, hyphens and spaces do not matter.
    pub fn parse(input: &str) -> Option<Self> {
        let code: String = input
            .chars()
            .filter(|c| !matches!(c, '-' | ' ' | '\u{2010}'..='\u{2015}'))
            .map(|c| c.to_ascii_uppercase())
            .collect();
        let valid =
            code.len() == USER_CODE_LEN && code.bytes().all(|b| USER_CODE_ALPHABET.contains(&b));
        valid.then_some(UserCode(code))
    }

    /// The stored form (`BCDFGHJK`).
    pub fn normalised(&self) -> &str {
        &self.0
    }

    /// The shown form (`BCDF-GHJK`).
    pub fn display(&self) -> String {
        format!("{}-{}", &self.0[..4], &self.0[4..])
    }

    /// The stored form: the hash of the normalised code. The code itself
    /// is a secret for its few minutes, like the device code.
    pub fn hash(&self) -> UserCodeHash {
        UserCodeHash::of(&self.0)
    }
}

/// `text` without control characters and without the invisible format
/// characters that reorder or hide text (bidi overrides and isolates, zero
/// widths), at most `max_chars` long: what a client says about itself is
/// shown to the person approving it exactly as it reads.
pub fn plain_text(text: &str, max_chars: usize) -> String {
    text.chars()
        .filter(|&c| {
            !c.is_control()
                && !matches!(
                    c,
                    '\u{061C}'
                        | '\u{115F}'
                        | '\u{1160}'
                        | '\u{180E}'
                        | '\u{200B}'..='\u{200F}'
                        | '\u{202A}'..='\u{202E}'
                        | '\u{2060}'..='\u{206F}'
                        | '\u{3164}'
                        | '\u{FEFF}'
                        | '\u{FFA0}'
                        | '\u{FFF9}'..='\u{FFFB}'
                )
        })
        .take(max_chars)
        .collect()
}

/// The device flow's timings: the `device_*` keys of the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct DeviceConfig {
    /// Lifetime of a device code in seconds (RFC 8628 `expires_in`).
    #[serde(rename = "device_code_lifetime", with = "crate::config::seconds")]
    pub code_lifetime: i64,
    /// Seconds between polls (RFC 8628 `interval`).
    #[serde(rename = "device_interval", deserialize_with = "poll_interval")]
    pub interval: i64,
    /// Lifetime of a key issued through the flow.
    #[serde(rename = "device_key_lifetime", with = "crate::config::seconds")]
    pub key_lifetime: i64,
}

/// `device_interval`: a whole number of seconds, at least 1.
fn poll_interval<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let seconds: u32 = crate::config::at_least_one::deserialize(d)?;
    Ok(i64::from(seconds))
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            code_lifetime: 600,
            interval: 5,
            key_lifetime: 2_592_000,
        }
    }
}

/// Who asked for a code, shown to the person approving it.
#[derive(Debug, Clone, Default)]
pub struct DeviceClient {
    pub client_id: Option<String>,
    pub scope: Option<String>,
    pub address: Option<String>,
    pub user_agent: Option<String>,
}

/// A new authorization's codes: the device code exists only here.
#[derive(Debug)]
pub struct IssuedCodes {
    pub device_code: String,
    pub user_code: UserCode,
    pub expires_in: i64,
    pub interval: i64,
}

/// What a poll of the token endpoint finds.
#[derive(Debug)]
pub enum PollOutcome {
    /// Not yet decided (`authorization_pending`).
    Pending,
    /// Polled too fast; wait `interval` seconds from now on (`slow_down`).
    SlowDown { interval: i64 },
    /// Approved: the new key, issued now and never again.
    Approved {
        key: ApiKey,
        record: Box<KeyRecord>,
        expires_in: i64,
    },
    /// The user refused, or the account that approved was disabled or
    /// deleted before the key was issued (`access_denied`).
    Denied,
    /// The code expired before approval or redemption (`expired_token`).
    Expired,
    /// The key for this code was issued already (`invalid_grant`).
    AlreadyUsed,
    /// No such device code, or one issued to another client (`invalid_grant`).
    Unknown,
}

/// How a person's code entry went.
#[derive(Debug)]
pub enum CodeLookup {
    /// A pending, unexpired authorization to confirm.
    Pending(Box<DeviceRecord>),
    /// The code exists but can no longer be decided.
    Closed(Box<DeviceRecord>),
    /// No such code (counted against the throttle).
    Unknown,
    /// Too many wrong codes.
    Throttled(Throttled),
}

/// Wrong user codes allowed per user and per address in [`CODE_WINDOW`].
const CODES_PER_USER: i64 = 10;
const CODES_PER_ADDRESS: i64 = 30;
const CODE_WINDOW: i64 = 10 * 60;
/// Code requests allowed per client address in [`REQUEST_WINDOW`].
const REQUESTS_PER_ADDRESS: i64 = 20;
/// Code requests allowed from everyone together in [`REQUEST_WINDOW`]: with
/// [`EXPIRED_KEPT_SECS`] this bounds the table (about 7,000 rows of at most
/// ~2.5 KB with the default lifetime).
const REQUESTS_OVERALL: i64 = 1_000;
const REQUEST_WINDOW: i64 = 10 * 60;
/// Most unexpired authorizations at once, whatever the code lifetime.
const MAX_LIVE: i64 = 5_000;
/// Seconds added to the interval on `slow_down` (RFC 8628 section 3.5).
pub const SLOW_DOWN_SECS: i64 = 5;

/// What the device service reads and writes: authorizations, the account
/// that approved one, the project its key's audit entry names, the audit
/// log, and the code throttles. Any [`Store`](crate::Store) is one.
pub trait DeviceServiceStore:
    DeviceStore + UserStore + ProjectStore + AuditStore + ThrottleStore
{
}

impl<T: DeviceStore + UserStore + ProjectStore + AuditStore + ThrottleStore> DeviceServiceStore
    for T
{
}

/// The device authorization grant on top of any [`DeviceServiceStore`].
#[derive(Clone)]
pub struct DeviceService {
    store: Arc<dyn DeviceServiceStore>,
    settings: DeviceConfig,
    user_throttle: Throttle,
    address_throttle: Throttle,
    request_address_throttle: Throttle,
    request_overall_throttle: Throttle,
}

impl DeviceService {
    pub fn new(store: Arc<dyn DeviceServiceStore>, settings: DeviceConfig) -> Self {
        DeviceService {
            user_throttle: Throttle::new(store.clone(), "code-user", CODES_PER_USER, CODE_WINDOW),
            address_throttle: Throttle::per_address(
                store.clone(),
                "code-address",
                CODES_PER_ADDRESS,
                CODE_WINDOW,
            ),
            request_address_throttle: Throttle::per_address(
                store.clone(),
                "device-request-address",
                REQUESTS_PER_ADDRESS,
                REQUEST_WINDOW,
            ),
            request_overall_throttle: Throttle::new(
                store.clone(),
                "device-request",
                REQUESTS_OVERALL,
                REQUEST_WINDOW,
            ),
            store,
            settings,
        }
    }

    pub fn settings(&self) -> DeviceConfig {
        self.settings
    }

    /// Starts an authorization (`POST /v1/auth/device/code`), unless the
    /// client's address or everyone together asked too often, or too many
    /// codes are live (`Err(Throttled)`).
    pub async fn start(
        &self,
        client: DeviceClient,
    ) -> Result<Result<IssuedCodes, Throttled>, StoreError> {
        let address = client.address.as_deref().unwrap_or("unknown");
        let slots = match take_all(&[
            (&self.request_address_throttle, address),
            (&self.request_overall_throttle, ""),
        ])
        .await?
        {
            Ok(slots) => slots,
            Err(throttled) => return Ok(Err(throttled)),
        };
        let created_at = now();
        // Expired rows are swept as new ones arrive, so the table stays small.
        self.store
            .delete_expired_devices(created_at - EXPIRED_KEPT_SECS)
            .await?;
        if self.store.count_live_devices(created_at).await? >= MAX_LIVE {
            give_back_all(slots).await?;
            return Ok(Err(Throttled {
                retry_after: self.settings.code_lifetime.clamp(1, 60),
            }));
        }
        self.issue(client, created_at).await.map(Ok)
    }

    async fn issue(
        &self,
        client: DeviceClient,
        created_at: i64,
    ) -> Result<IssuedCodes, StoreError> {
        let mut attempts = 0;
        loop {
            let device_code = random_token();
            let user_code = UserCode::generate();
            let record = DeviceRecord {
                id: format!("dev_{}", hex::encode(rand::random::<[u8; 8]>())),
                device_code_hash: DeviceCodeHash::of(&device_code),
                user_code_hash: user_code.hash(),
                client_id: client.client_id.clone(),
                scope: client.scope.clone(),
                client_address: client.address.clone(),
                user_agent: client.user_agent.clone(),
                created_at,
                expires_at: created_at + self.settings.code_lifetime,
                interval: self.settings.interval,
                last_polled_at_ms: None,
                state: DeviceState::Pending,
            };
            match self.store.insert_device(&record).await {
                Ok(()) => {
                    return Ok(IssuedCodes {
                        device_code,
                        user_code,
                        expires_in: self.settings.code_lifetime,
                        interval: self.settings.interval,
                    });
                }
                // A user code collided with a live one: draw again.
                Err(StoreError::Conflict) if attempts < 5 => attempts += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Answers a poll with `device_code` (`POST /v1/auth/device/token`).
    /// `client_id`, when the poll names one, must be the one the code was
    /// issued to (if it was issued to one): a code is not another client's.
    pub async fn poll(
        &self,
        device_code: &str,
        client_id: Option<&str>,
    ) -> Result<PollOutcome, StoreError> {
        let Some(record) = self
            .store
            .device_by_code_hash(&DeviceCodeHash::of(device_code))
            .await?
        else {
            return Ok(PollOutcome::Unknown);
        };
        if let (Some(issued), Some(asking)) = (record.client_id.as_deref(), client_id)
            && issued != asking
        {
            return Ok(PollOutcome::Unknown);
        }
        let at_ms = chrono::Utc::now().timestamp_millis();
        let at = at_ms.div_euclid(1000);
        match &record.state {
            DeviceState::Redeemed { .. } => return Ok(PollOutcome::AlreadyUsed),
            DeviceState::Denied { .. } => return Ok(PollOutcome::Denied),
            _ if record.expires_at <= at => return Ok(PollOutcome::Expired),
            DeviceState::Approved { by, .. } => return self.redeem(&record, by).await,
            DeviceState::Pending => {}
        }
        // Clients sleep `interval` and then ask, so a gap a little shorter
        // than the interval is network jitter or clock drift, not abuse.
        let min_gap_ms = record.interval * 1000 * 4 / 5;
        if self
            .store
            .poll_device(&record.id, at_ms, min_gap_ms, SLOW_DOWN_SECS)
            .await?
        {
            Ok(PollOutcome::Pending)
        } else {
            Ok(PollOutcome::SlowDown {
                interval: record.interval + SLOW_DOWN_SECS,
            })
        }
    }

    async fn redeem(
        &self,
        record: &DeviceRecord,
        user_id: &UserId,
    ) -> Result<PollOutcome, StoreError> {
        // Disabling an account denies what it approved; this covers an
        // approval that raced with that (and the store checks again).
        let approver = match self.store.user_by_id(user_id).await? {
            Some(user) if user.disabled_at.is_none() => user,
            _ => return Ok(PollOutcome::Denied),
        };
        let key = ApiKey::generate();
        let created_at = now();
        let expires_in = self.settings.key_lifetime;
        let key_record = KeyRecord {
            id: KeyId::generate(),
            name: device_key_name(record, created_at),
            hint: key.hint(),
            owner_id: Some(user_id.clone()),
            created_via: KeyOrigin::Device,
            created_at,
            expires_at: Some(created_at + expires_in),
            last_used_at: None,
            revoked_at: None,
            limits: Default::default(),
            owner_disabled_at: None,
            project_id: crate::ids::ProjectId::default_project(),
            kind: crate::project::KeyKind::All,
            allowed_models: crate::project::ModelAccess::any(),
            project_allowed_models: crate::project::ModelAccess::any(),
            allowed_mcp_servers: crate::project::McpServerAccess::any(),
            project_allowed_mcp_servers: crate::project::McpServerAccess::any(),
            budget: None,
            project_budget: None,
            rotated_from: None,
            lineage: None,
        };
        if self
            .store
            .redeem_device(&record.id, &key_record, &key.hash(), created_at)
            .await?
        {
            // Made for the person who approved it, from the device's address.
            let actor = crate::audit::Actor::Session {
                user: Some(crate::audit::ActorUser::from(&approver)),
                address: record.client_address.clone(),
            };
            let mut entry = crate::audit::AuditEntry::new(
                "api_key.created",
                &actor,
                crate::audit::key_details(&key_record),
            );
            if let Some(project) = self.store.project_by_id(&key_record.project_id).await? {
                entry = entry.in_project(&project);
            }
            crate::audit::record(self.store.as_ref(), entry).await?;
            Ok(PollOutcome::Approved {
                key,
                record: Box::new(key_record),
                expires_in,
            })
        } else {
            // A concurrent poll redeemed it first.
            Ok(PollOutcome::AlreadyUsed)
        }
    }

    /// Finds the authorization a person typed the code of, throttling wrong
    /// codes per user and per address (RFC 8628 section 5.1). Each entry
    /// takes its slots before the lookup; a code that exists gives them back.
    pub async fn lookup(
        &self,
        input: &str,
        user_id: &UserId,
        address: &str,
    ) -> Result<CodeLookup, StoreError> {
        let slots = match take_all(&[
            (&self.user_throttle, &user_id.0),
            (&self.address_throttle, address),
        ])
        .await?
        {
            Ok(slots) => slots,
            Err(throttled) => return Ok(CodeLookup::Throttled(throttled)),
        };
        let record = match UserCode::parse(input) {
            Some(code) => self.store.device_by_user_code_hash(&code.hash()).await?,
            None => None,
        };
        let Some(record) = record else {
            return Ok(CodeLookup::Unknown);
        };
        give_back_all(slots).await?;
        if record.state == DeviceState::Pending && record.expires_at > now() {
            Ok(CodeLookup::Pending(Box::new(record)))
        } else {
            Ok(CodeLookup::Closed(Box::new(record)))
        }
    }

    /// Approves or denies a pending authorization for `user_id`; false when
    /// it was no longer pending or had expired.
    /// Audited as `device.approved` or `device.denied` by `actor` (never
    /// with the device's codes).
    pub async fn decide(
        &self,
        id: &str,
        user_id: &UserId,
        decision: DeviceDecision,
        actor: &crate::audit::Actor,
    ) -> Result<bool, StoreError> {
        let decided = self
            .store
            .decide_device(id, user_id, decision, now())
            .await?;
        if decided {
            let kind = match decision {
                DeviceDecision::Approve => "device.approved",
                DeviceDecision::Deny => "device.denied",
            };
            let entry = crate::audit::AuditEntry::new(kind, actor, serde_json::json!({"id": id}));
            crate::audit::record(self.store.as_ref(), entry).await?;
        }
        Ok(decided)
    }
}

/// How long expired authorizations are kept (for "this code expired" pages).
const EXPIRED_KEPT_SECS: i64 = 3600;

/// `Device login: <client> (YYYY-MM-DD)`, the issued key's name.
fn device_key_name(record: &DeviceRecord, at: i64) -> String {
    let client = record
        .client_id
        .as_deref()
        .or(record.user_agent.as_deref())
        .unwrap_or("unknown device");
    let client = plain_text(client, 80);
    let day = chrono::DateTime::from_timestamp(at, 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_default();
    format!("Device login: {client} ({day})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::sha256_hex;

    #[test]
    fn user_codes_use_the_rfc_alphabet() {
        for _ in 0..200 {
            let code = UserCode::generate();
            assert_eq!(code.normalised().len(), 8);
            assert!(
                code.normalised()
                    .bytes()
                    .all(|b| USER_CODE_ALPHABET.contains(&b))
            );
            let shown = code.display();
            assert_eq!(shown.len(), 9);
            assert_eq!(&shown[4..5], "-");
        }
    }

    #[test]
    fn user_codes_parse_case_and_hyphen_insensitively() {
        let code = UserCode::parse("bcdf-ghjk").unwrap();
        assert_eq!(code.normalised(), "BCDFGHJK");
        assert_eq!(UserCode::parse(" BCDF GHJK ").unwrap(), code);
        assert_eq!(UserCode::parse("BCDFGHJK").unwrap(), code);
        assert_eq!(UserCode::parse("BCDF-GHJ"), None);
        assert_eq!(
            UserCode::parse("ABCD-EFGH"),
            None,
            "vowels are not in the alphabet"
        );
        assert_eq!(UserCode::parse("BCDF-GHJKL"), None);
    }

    #[test]
    fn user_codes_are_stored_hashed() {
        let code = UserCode::parse("bcdf-ghjk").unwrap();
        assert_eq!(code.hash().as_str(), sha256_hex("BCDFGHJK"));
        assert!(!code.hash().as_str().contains("BCDFGHJK"));
    }

    #[test]
    fn plain_text_drops_what_reorders_or_hides_text() {
        assert_eq!(
            plain_text("svc\u{202E}exe.cod\u{202C} \u{2067}x\u{2069}\u{200B}\n", 80),
            "svcexe.cod x"
        );
        assert_eq!(plain_text("naïve – “ok”", 80), "naïve – “ok”");
        assert_eq!(plain_text("abcdef", 3), "abc");
    }

    #[test]
    fn statuses_round_trip() {
        for s in [
            DeviceStatus::Pending,
            DeviceStatus::Approved,
            DeviceStatus::Denied,
            DeviceStatus::Redeemed,
        ] {
            assert_eq!(DeviceStatus::parse(s.as_str()), Ok(s));
        }
    }

    #[test]
    fn an_unknown_stored_status_is_an_error() {
        for stored in ["", "Pending", "expired", "approved "] {
            let err = DeviceStatus::parse(stored).unwrap_err();
            assert_eq!(err.what, "device authorization status");
            assert_eq!(err.value, stored);
        }
        assert!(DeviceState::from_stored("revoked", None, None, None).is_err());
    }

    #[test]
    fn states_read_back_from_their_columns() {
        let by = UserId("usr_1".into());
        let key = KeyId("key_1".into());
        let read = |status, user: Option<&UserId>, at, key: Option<&KeyId>| {
            DeviceState::from_stored(status, user.cloned(), at, key.cloned())
        };
        assert_eq!(read("pending", None, None, None), Ok(DeviceState::Pending));
        let approved = read("approved", Some(&by), Some(7), None).unwrap();
        assert_eq!(
            approved,
            DeviceState::Approved {
                by: by.clone(),
                decided_at: 7
            }
        );
        assert_eq!(approved.status(), DeviceStatus::Approved);
        assert_eq!(approved.decided_by(), Some(&by));
        assert_eq!(approved.decided_at(), Some(7));
        assert_eq!(approved.key_id(), None);
        let denied = read("denied", Some(&by), Some(8), None).unwrap();
        assert_eq!(denied.status(), DeviceStatus::Denied);
        let redeemed = read("redeemed", Some(&by), Some(9), Some(&key)).unwrap();
        assert_eq!(redeemed.key_id(), Some(&key));
        assert_eq!(redeemed.status(), DeviceStatus::Redeemed);
    }

    #[test]
    fn columns_that_make_no_state_are_an_error() {
        let by = UserId("usr_1".into());
        let key = KeyId("key_1".into());
        for (status, user, at, key) in [
            ("approved", None, Some(7), None),
            ("approved", Some(&by), None, None),
            ("denied", None, None, None),
            ("redeemed", Some(&by), Some(9), None),
            ("redeemed", None, Some(9), Some(&key)),
        ] {
            let err =
                DeviceState::from_stored(status, user.cloned(), at, key.cloned()).unwrap_err();
            assert_eq!(err.what, "device authorization state", "{status}");
            assert_eq!(err.value, status);
        }
    }

    #[test]
    fn decisions_move_to_approved_or_denied() {
        assert_eq!(DeviceDecision::Approve.status(), DeviceStatus::Approved);
        assert_eq!(DeviceDecision::Deny.status(), DeviceStatus::Denied);
    }
}
