//! User accounts: ids, emails, password hashing (argon2id), and the account
//! service that signs people in with throttling.
//!
//! Every argon2 run (19 MiB each) goes through [`hashing`], which lets only
//! as many run at once as there are cores, so a burst of sign-ins cannot
//! exhaust memory.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde_json::json;

use crate::audit::{self, Actor, ActorUser, AuditEntry, AuditStore};
use crate::clock::now;
use crate::error::StoreError;
use crate::hashes::{SessionHash, SetupTokenHash};
use crate::ids::{ProjectId, UserId};
use crate::project::{OrgRole, ProjectRole, ProjectStore};
use crate::secrets::random_token;
use crate::session::{SessionRecord, SessionStore, SessionToken, flash};
use crate::throttle::{Throttle, ThrottleStore, Throttled, give_back_all, take_all};
use crate::user::{AccountChange, UserRecord, UserStore};

/// Shortest accepted password.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Longest accepted password (argon2 takes any length; this bounds the work).
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// A normalised email address: trimmed, lowercase, one `@` with text on
/// both sides, no spaces, at most 254 bytes. Deliverability is not checked.
pub fn normalise_email(input: &str) -> Option<String> {
    let email = input.trim().to_lowercase();
    let (local, domain) = email.split_once('@')?;
    let valid = !local.is_empty()
        && !domain.is_empty()
        && !domain.contains('@')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    valid.then_some(email)
}

/// Why a password is not accepted.
pub fn check_password(password: &str) -> Result<(), AccountError> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(AccountError::WeakPassword);
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(AccountError::PasswordTooLong);
    }
    Ok(())
}

/// argon2id with the crate's defaults (19 MiB, 2 passes), as a PHC string.
/// Slow on purpose: call it off the async executor.
pub fn hash_password(password: &str) -> Result<String, AccountError> {
    use argon2::password_hash::{Output, ParamsString, PasswordHash, SaltString};
    use argon2::{Algorithm, Params, Version};
    let failed = |e: &dyn fmt::Display| AccountError::Hashing(e.to_string());
    let salt_bytes = rand::random::<[u8; 16]>();
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| failed(&e))?;
    let params = Params::default();
    let output = Output::init_with(Params::DEFAULT_OUTPUT_LEN, |out| {
        Ok(argon2_into(
            Algorithm::Argon2id,
            Version::V0x13,
            &params,
            password.as_bytes(),
            &salt_bytes,
            out,
        )?)
    })
    .map_err(|e| failed(&e))?;
    let hash = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(&params).map_err(|e| failed(&e))?,
        salt: Some(salt.as_salt()),
        hash: Some(output),
    };
    Ok(hash.to_string())
}

/// Whether `password` matches the PHC string `hash`; a malformed hash never
/// matches. As the argon2 crate's verifier, with this thread's kept memory.
pub fn verify_password(password: &str, hash: &str) -> bool {
    use argon2::password_hash::{Output, PasswordHash};
    use argon2::{Algorithm, Params, Version};
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let Ok(algorithm) = Algorithm::try_from(parsed.algorithm) else {
        return false;
    };
    let Ok(version) = parsed
        .version
        .map_or(Ok(Version::default()), Version::try_from)
    else {
        return false;
    };
    let Ok(params) = Params::try_from(&parsed) else {
        return false;
    };
    let mut salt_buf = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_buf) else {
        return false;
    };
    Output::init_with(expected.len(), |out| {
        Ok(argon2_into(
            algorithm,
            version,
            &params,
            password.as_bytes(),
            salt,
            out,
        )?)
    })
    // `Output`'s equality is constant-time.
    .is_ok_and(|computed| computed == expected)
}

/// Most argon2 memory a thread keeps between runs: the default cost.
const KEPT_BLOCKS: usize = argon2::Params::DEFAULT_M_COST as usize;

thread_local! {
    /// argon2's 19 MiB of work memory, kept by the thread between runs.
    /// Allocating and freeing it per run left up to three such blocks per
    /// thread in the allocator (measured: 58 MB per hashing thread).
    static ARGON2_MEMORY: std::cell::RefCell<Vec<argon2::Block>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// argon2 of `password` and `salt` into `out`, in this thread's kept
/// memory (fresh memory, not kept, for a cost above the default).
fn argon2_into(
    algorithm: argon2::Algorithm,
    version: argon2::Version,
    params: &argon2::Params,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> Result<(), argon2::Error> {
    let argon2 = argon2::Argon2::new(algorithm, version, params.clone());
    let needed = params.block_count();
    if needed > KEPT_BLOCKS {
        let mut blocks = vec![argon2::Block::default(); needed];
        return argon2.hash_password_into_with_memory(password, salt, out, &mut blocks);
    }
    ARGON2_MEMORY.with_borrow_mut(|blocks| {
        if blocks.len() < needed {
            blocks.resize(needed, argon2::Block::default());
        }
        argon2.hash_password_into_with_memory(password, salt, out, &mut blocks[..needed])
    })
}

/// Longest a password hashing waits for its turn before the request is
/// answered "busy".
pub const HASHING_WAIT: Duration = Duration::from_secs(10);

/// A password hashing job for a hashing thread.
type HashJob = Box<dyn FnOnce() + Send>;

/// The process's password hashing: `permits` threads of its own, and a
/// turn (a semaphore permit) per thread. Dedicated threads, not tokio's
/// blocking pool, because the allocator keeps a freed 19 MiB block per
/// thread that ran argon2: on the blocking pool, whose threads come and go,
/// 100 sign-ins left 440 MB resident even with two at a time.
struct Hashing {
    permits: usize,
    semaphore: Arc<tokio::sync::Semaphore>,
    jobs: std::sync::Mutex<std::sync::mpsc::Sender<HashJob>>,
    running: AtomicUsize,
    peak: AtomicUsize,
}

static HASHING: LazyLock<Hashing> = LazyLock::new(|| {
    // One per core: more would only share the cores and add 19 MiB each.
    let permits = std::thread::available_parallelism()
        .map_or(2, std::num::NonZeroUsize::get)
        .clamp(1, 16);
    let (jobs, queue) = std::sync::mpsc::channel::<HashJob>();
    let queue = Arc::new(std::sync::Mutex::new(queue));
    let mut threads = 0;
    for n in 0..permits {
        let queue = queue.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("svc-argon2-{n}"))
            .spawn(move || {
                loop {
                    // The lock is held only while waiting for the next job.
                    let job = match queue.lock() {
                        Ok(queue) => queue.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    // A panicking job loses its answer (the caller sees
                    // Busy), not the thread.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            });
        threads += usize::from(spawned.is_ok());
    }
    // One turn per thread that started, so a queued job always has a
    // thread (with none, every hashing answers Busy after the wait).
    Hashing {
        permits: threads,
        semaphore: Arc::new(tokio::sync::Semaphore::new(threads)),
        jobs: std::sync::Mutex::new(jobs),
        running: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
    }
});

/// How many argon2 runs this process allows at once, and the most it has
/// had at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashingStats {
    pub permits: usize,
    pub peak: usize,
}

/// See [`HashingStats`].
pub fn hashing_stats() -> HashingStats {
    HashingStats {
        permits: HASHING.permits,
        peak: HASHING.peak.load(Ordering::Relaxed),
    }
}

/// No hashing turn came within [`HASHING_WAIT`] (or the hashing thread
/// failed): the server is too busy to check a password now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// Runs `work` (an argon2 hash or verification) on a hashing thread once a
/// turn is free. The turn is held by the job, not the request: a client
/// that disconnects does not free it while its hash still runs.
async fn hashing<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, Busy> {
    let permit = tokio::time::timeout(HASHING_WAIT, HASHING.semaphore.clone().acquire_owned())
        .await
        .map_err(|_| Busy)?
        .map_err(|_| Busy)?;
    let (answer, result) = tokio::sync::oneshot::channel();
    let job: HashJob = Box::new(move || {
        let running = HASHING.running.fetch_add(1, Ordering::Relaxed) + 1;
        HASHING.peak.fetch_max(running, Ordering::Relaxed);
        let value = work();
        HASHING.running.fetch_sub(1, Ordering::Relaxed);
        drop(permit);
        // The caller may have gone; the hash is simply dropped.
        let _ = answer.send(value);
    });
    HASHING
        .jobs
        .lock()
        .map_err(|_| Busy)?
        .send(job)
        .map_err(|_| Busy)?;
    result.await.map_err(|_| Busy)
}

/// Why an account could not be created.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("Enter a valid email address.")]
    InvalidEmail,
    #[error("Use a password of at least {MIN_PASSWORD_CHARS} characters.")]
    WeakPassword,
    #[error("Use a password of at most {MAX_PASSWORD_BYTES} bytes.")]
    PasswordTooLong,
    #[error("An account with this email exists already.")]
    EmailTaken,
    #[error("This setup link is invalid, used or expired.")]
    SetupClosed,
    #[error("Too many sign-ups from your address. Try again in {} minutes.", (retry_after + 59) / 60)]
    Throttled { retry_after: i64 },
    #[error("The server is busy. Try again in a minute.")]
    Busy,
    #[error("hashing the password failed: {0}")]
    Hashing(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a sign-in failed. `Invalid` never says which of email and password
/// was wrong.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("Incorrect email or password.")]
    Invalid,
    #[error("Too many failed sign-ins. Try again in {retry_after} seconds.")]
    Throttled { retry_after: i64 },
    #[error("The server is busy. Try again in a minute.")]
    Busy,
    /// Told only to someone who gave the right password.
    #[error("This account is disabled. Ask an admin to enable it.")]
    Disabled,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<Throttled> for SignInError {
    fn from(t: Throttled) -> Self {
        SignInError::Throttled {
            retry_after: t.retry_after,
        }
    }
}

/// Why single sign-on let nobody in (the provider's part went well).
#[derive(Debug, thiserror::Error)]
pub enum SsoSignInError {
    #[error(
        "Your identity provider has not verified this email address, so it cannot sign in here."
    )]
    Unverified,
    #[error("No account here has this email address. Ask an admin for one.")]
    NoAccount,
    #[error("This account is disabled. Ask an admin to enable it.")]
    Disabled,
    /// The configured project for new accounts does not exist.
    #[error(
        "The project new accounts join ({0}) does not exist: the single sign-on settings need fixing."
    )]
    NoProject(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SsoSignInError {
    /// The audit log's `error_code`.
    pub fn code(&self) -> &'static str {
        match self {
            SsoSignInError::Unverified => "email_not_verified",
            SsoSignInError::NoAccount => "no_account",
            SsoSignInError::Disabled => "account_disabled",
            SsoSignInError::NoProject(_) => "no_project",
            SsoSignInError::Store(_) => "store_error",
        }
    }
}

/// Who an identity provider says signed in, for [`AccountService::sign_in_sso`].
#[derive(Debug, Clone)]
pub struct SsoIdentity<'a> {
    /// The provider's issuer URL (written to the audit log).
    pub issuer: &'a str,
    pub email: &'a str,
    pub email_verified: bool,
    /// Where an account is made for an email that has none (`None`: it is
    /// refused).
    pub create: Option<(ProjectId, ProjectRole)>,
}

/// The stored "password hash" of an account made by single sign-on: not a
/// PHC string, so no password ever matches it.
const NO_PASSWORD: &str = "!sso";

/// A session just opened: the cookie's token (its only copy) and the record.
#[derive(Debug)]
pub struct OpenedSession {
    pub token: SessionToken,
    pub session: SessionRecord,
    pub user: UserRecord,
}

/// Lifetime of a dashboard session.
pub const SESSION_SECONDS: i64 = 7 * 24 * 3600;
/// Lifetime of the first-admin setup link.
pub const SETUP_SECONDS: i64 = 24 * 3600;

/// Sign-in attempts allowed per account from one client address in
/// [`SIGN_IN_WINDOW`]: failures elsewhere do not lock the owner out.
const SIGN_IN_PER_ACCOUNT_ADDRESS: i64 = 5;
/// Sign-in attempts allowed per client address, whatever the accounts, in
/// [`SIGN_IN_WINDOW`].
const SIGN_IN_PER_ADDRESS: i64 = 20;
const SIGN_IN_WINDOW: i64 = 15 * 60;
/// Sign-in attempts allowed per account from anywhere in
/// [`SIGN_IN_ACCOUNT_WINDOW`]: the slow backstop against guessing one
/// password from many addresses.
const SIGN_IN_PER_ACCOUNT: i64 = 100;
const SIGN_IN_ACCOUNT_WINDOW: i64 = 3600;
/// Sign-ups allowed per client address in [`SIGN_UP_WINDOW`].
const SIGN_UP_PER_ADDRESS: i64 = 5;
const SIGN_UP_WINDOW: i64 = 3600;

/// What the account service reads and writes: accounts and their sessions,
/// the project a new account joins, the audit log, and the sign-in and
/// sign-up throttles. Any [`Store`](crate::Store) is one.
pub trait AccountServiceStore:
    UserStore + SessionStore + ProjectStore + AuditStore + ThrottleStore
{
}

impl<T: UserStore + SessionStore + ProjectStore + AuditStore + ThrottleStore> AccountServiceStore
    for T
{
}

/// Accounts, sign-in, sessions and the first-admin setup.
#[derive(Clone)]
pub struct AccountService {
    store: Arc<dyn AccountServiceStore>,
    /// Per account and address (`email address`).
    pair_throttle: Throttle,
    /// Per address.
    address_throttle: Throttle,
    /// Per account, from anywhere.
    account_throttle: Throttle,
    /// Sign-ups per address.
    signup_throttle: Throttle,
    /// Single sign-on answers per address that signed nobody in.
    sso_throttle: Throttle,
}

impl AccountService {
    pub fn new(store: Arc<dyn AccountServiceStore>) -> Self {
        AccountService {
            pair_throttle: Throttle::new(
                store.clone(),
                "signin-account-address",
                SIGN_IN_PER_ACCOUNT_ADDRESS,
                SIGN_IN_WINDOW,
            ),
            address_throttle: Throttle::per_address(
                store.clone(),
                "signin-address",
                SIGN_IN_PER_ADDRESS,
                SIGN_IN_WINDOW,
            ),
            account_throttle: Throttle::new(
                store.clone(),
                "signin-account",
                SIGN_IN_PER_ACCOUNT,
                SIGN_IN_ACCOUNT_WINDOW,
            ),
            signup_throttle: Throttle::per_address(
                store.clone(),
                "signup-address",
                SIGN_UP_PER_ADDRESS,
                SIGN_UP_WINDOW,
            ),
            sso_throttle: Throttle::per_address(
                store.clone(),
                "sso-address",
                SIGN_IN_PER_ADDRESS,
                SIGN_IN_WINDOW,
            ),
            store,
        }
    }

    /// Creates a user with an argon2id password hash. Audited as
    /// `user.added` by `actor` (`None`: by the new account itself).
    pub async fn create_user(
        &self,
        email: &str,
        password: &str,
        is_admin: bool,
        actor: Option<&Actor>,
    ) -> Result<UserRecord, AccountError> {
        let user = new_user(email, password, is_admin).await?;
        match self.store.insert_user(&user).await {
            Ok(()) => {}
            Err(StoreError::Conflict) => return Err(AccountError::EmailTaken),
            Err(e) => return Err(e.into()),
        }
        let own = Actor::Session {
            user: Some(ActorUser::from(&user)),
            address: None,
        };
        self.audit_user(
            "user.added",
            actor.unwrap_or(&own),
            &user,
            json!({
                "role": OrgRole::of_admin_flag(user.is_admin).as_str(),
            }),
        )
        .await?;
        Ok(user)
    }

    /// Writes an audit entry of `kind` about `user`, with `data`.
    async fn audit_user(
        &self,
        kind: &str,
        actor: &Actor,
        user: &UserRecord,
        data: serde_json::Value,
    ) -> Result<(), StoreError> {
        let field = if kind == "user.updated" {
            "changes_requested"
        } else {
            "data"
        };
        let mut details = json!({"id": user.id.0, "email": user.email});
        details[field] = data;
        audit::record(self.store.as_ref(), AuditEntry::new(kind, actor, details)).await
    }

    /// Self sign-up, throttled per client address. An email that has an
    /// account already is answered exactly as a new one (`Ok`, after the
    /// same hashing), so the form does not tell who has an account; only
    /// input errors, which depend on the input alone, are told.
    pub async fn sign_up(
        &self,
        email: &str,
        password: &str,
        address: Option<&str>,
    ) -> Result<(), AccountError> {
        normalise_email(email).ok_or(AccountError::InvalidEmail)?;
        check_password(password)?;
        let address = address.unwrap_or("unknown");
        if let Err(t) = self.signup_throttle.take(address).await? {
            return Err(AccountError::Throttled {
                retry_after: t.retry_after,
            });
        }
        let actor = Actor::Session {
            user: None,
            address: Some(address.to_owned()),
        };
        match self.create_user(email, password, false, Some(&actor)).await {
            Ok(_) | Err(AccountError::EmailTaken) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// All users, oldest first.
    pub async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        self.store.list_users().await
    }

    pub async fn user(&self, id: &UserId) -> Result<Option<UserRecord>, StoreError> {
        self.store.user_by_id(id).await
    }

    /// When there is no user yet, a one-time token for the first admin's
    /// setup page (valid [`SETUP_SECONDS`]); `None` once someone exists.
    pub async fn setup_token(&self) -> Result<Option<String>, StoreError> {
        if self.store.count_users().await? > 0 {
            return Ok(None);
        }
        let token = random_token();
        self.store
            .insert_setup_token(&SetupTokenHash::of(&token), now() + SETUP_SECONDS)
            .await?;
        Ok(Some(token))
    }

    /// Creates the first admin with a setup token; fails when the token is
    /// unknown, used or expired, or when a user exists already.
    pub async fn complete_setup(
        &self,
        token: &str,
        email: &str,
        password: &str,
        address: Option<&str>,
    ) -> Result<UserRecord, AccountError> {
        let user = new_user(email, password, true).await?;
        if !self
            .store
            .create_first_user(&SetupTokenHash::of(token), &user, now())
            .await?
        {
            return Err(AccountError::SetupClosed);
        }
        let actor = Actor::Session {
            user: Some(ActorUser::from(&user)),
            address: address.map(str::to_owned),
        };
        self.audit_user("user.added", &actor, &user, json!({"role": "owner"}))
            .await?;
        Ok(user)
    }

    /// Checks email and password and opens a session. Each attempt takes a
    /// slot per account and address, per address, and per account before
    /// any hashing; a successful one gives them back.
    pub async fn sign_in(
        &self,
        email: &str,
        password: &str,
        address: Option<&str>,
    ) -> Result<OpenedSession, SignInError> {
        let email = normalise_email(email).unwrap_or_default();
        let address = address.unwrap_or("unknown");
        // An email has no spaces, so this names one pair (an address by
        // its network, as every per-address throttle counts it).
        let pair = format!("{email} {}", crate::throttle::address_key(address));
        // The address first: refused there, an attempt adds no rows for
        // the emails it names.
        let slots = take_all(&[
            (&self.address_throttle, address),
            (&self.pair_throttle, &pair),
            (&self.account_throttle, &email),
        ])
        .await??;
        let user = self.store.user_by_email(&email).await?;
        // An unknown email costs the same hashing as a wrong password, so
        // timing does not tell which accounts exist.
        // So does an account without a password (made by single sign-on).
        let hash = user
            .as_ref()
            .map(|u| u.password_hash.clone())
            .filter(|hash| hash != NO_PASSWORD)
            .unwrap_or_else(|| DUMMY_HASH.to_owned());
        let password = password.to_owned();
        let Ok(matches) = hashing(move || verify_password(&password, &hash)).await else {
            // Nothing was checked: the attempt counts nowhere.
            give_back_all(slots).await?;
            return Err(SignInError::Busy);
        };
        // Only a well-formed email is written down: text typed into the
        // wrong field (a password) must not reach the audit log.
        let actor = Actor::Session {
            user: match &user {
                Some(user) => Some(ActorUser::from(user)),
                None if !email.is_empty() => Some(ActorUser {
                    id: None,
                    email: email.clone(),
                }),
                None => None,
            },
            address: Some(address.to_owned()),
        };
        let failed = |code: &str, error: &SignInError| {
            AuditEntry::new(
                "login.failed",
                &actor,
                json!({"error_code": code, "error_message": error.to_string()}),
            )
        };
        let user = match user {
            Some(user) if matches && user.password_hash != NO_PASSWORD => user,
            _ => {
                let error = SignInError::Invalid;
                audit::record(self.store.as_ref(), failed("invalid_credentials", &error)).await?;
                return Err(error);
            }
        };
        // The right password: the attempt counts against no one.
        give_back_all(slots).await?;
        self.pair_throttle.clear(&pair).await?;
        if user.disabled_at.is_some() {
            let error = SignInError::Disabled;
            audit::record(self.store.as_ref(), failed("account_disabled", &error)).await?;
            return Err(error);
        }
        let opened = self.open_session(user, Some(address)).await?;
        audit::record(
            self.store.as_ref(),
            AuditEntry::new("login.succeeded", &actor, json!({})),
        )
        .await?;
        Ok(opened)
    }

    /// Signs in someone an identity provider vouched for: the account with
    /// their verified email (made now, when `identity.create` says where),
    /// unless disabled. Audited as `login.succeeded` or `login.failed`
    /// with `"method": "sso"`.
    pub async fn sign_in_sso(
        &self,
        identity: SsoIdentity<'_>,
        address: Option<&str>,
    ) -> Result<OpenedSession, SsoSignInError> {
        let email = normalise_email(identity.email);
        let existing = match &email {
            Some(email) => self.store.user_by_email(email).await?,
            None => None,
        };
        let mut actor = Actor::Session {
            user: match (&existing, &email) {
                (Some(user), _) => Some(ActorUser::from(user)),
                (None, Some(email)) => Some(ActorUser {
                    id: None,
                    email: email.clone(),
                }),
                (None, None) => None,
            },
            address: address.map(str::to_owned),
        };
        let outcome = self.sso_account(&identity, email, existing, &actor).await;
        let user = match outcome {
            Ok(user) => user,
            Err(error) => {
                self.record_sso_failure(&actor, identity.issuer, error.code(), &error.to_string())
                    .await?;
                return Err(error);
            }
        };
        let opened = self.open_session(user, address).await?;
        if let Actor::Session { user, .. } = &mut actor {
            *user = Some(ActorUser::from(&opened.user));
        }
        audit::record(
            self.store.as_ref(),
            AuditEntry::new(
                "login.succeeded",
                &actor,
                json!({"method": "sso", "issuer": identity.issuer}),
            ),
        )
        .await?;
        Ok(opened)
    }

    /// The account `identity` signs in to, made when it may be.
    async fn sso_account(
        &self,
        identity: &SsoIdentity<'_>,
        email: Option<String>,
        existing: Option<UserRecord>,
        actor: &Actor,
    ) -> Result<UserRecord, SsoSignInError> {
        let Some(email) = email.filter(|_| identity.email_verified) else {
            return Err(SsoSignInError::Unverified);
        };
        let user = match (existing, &identity.create) {
            (Some(user), _) => user,
            (None, None) => return Err(SsoSignInError::NoAccount),
            (None, Some((project, role))) => {
                if self.store.project_by_id(project).await?.is_none() {
                    return Err(SsoSignInError::NoProject(project.0.clone()));
                }
                let user = UserRecord {
                    id: UserId::generate(),
                    email,
                    password_hash: NO_PASSWORD.to_owned(),
                    is_admin: false,
                    created_at: now(),
                    disabled_at: None,
                };
                match self.store.insert_user(&user).await {
                    Ok(()) => {}
                    // Made meanwhile by another sign-in: that one (disabled
                    // or not, as checked below).
                    Err(StoreError::Conflict) => {
                        let made = self.store.user_by_email(&user.email).await?;
                        return match made {
                            Some(made) if made.disabled_at.is_none() => Ok(made),
                            Some(_) => Err(SsoSignInError::Disabled),
                            None => Err(SsoSignInError::NoAccount),
                        };
                    }
                    Err(e) => return Err(e.into()),
                }
                if !project.is_default() || *role != ProjectRole::Member {
                    self.store
                        .set_project_member(project, &user.id, *role, now())
                        .await?;
                }
                self.audit_user(
                    "user.added",
                    actor,
                    &user,
                    json!({
                        "role": OrgRole::of_admin_flag(false).as_str(),
                        "method": "sso",
                        "project": {"id": project.0, "role": role.as_str()},
                    }),
                )
                .await?;
                user
            }
        };
        if user.disabled_at.is_some() {
            return Err(SsoSignInError::Disabled);
        }
        Ok(user)
    }

    /// Takes a slot of the single sign-on answers an address may send that
    /// sign nobody in (20 in 15 minutes, as password sign-ins): `Ok(Err)`
    /// with the seconds to wait when spent. The slot is given back by
    /// [`AccountService::sso_succeeded`].
    pub async fn take_sso_attempt(
        &self,
        address: Option<&str>,
    ) -> Result<Result<crate::throttle::Slot, i64>, StoreError> {
        Ok(self
            .sso_throttle
            .take(address.unwrap_or("unknown"))
            .await?
            .map_err(|t| t.retry_after))
    }

    /// A single sign-on signed someone in: its attempt counts against no one.
    pub async fn sso_succeeded(&self, slot: crate::throttle::Slot) -> Result<(), StoreError> {
        slot.give_back().await
    }

    /// Writes `login.failed` for a single sign-on that let nobody in
    /// (`code` as the audit log's `error_code`).
    pub async fn record_sso_failure(
        &self,
        actor: &Actor,
        issuer: &str,
        code: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        audit::record(
            self.store.as_ref(),
            AuditEntry::new(
                "login.failed",
                actor,
                json!({
                    "method": "sso", "issuer": issuer,
                    "error_code": code, "error_message": message,
                }),
            ),
        )
        .await
    }

    /// Opens a session for `user` (after sign-in or setup).
    pub async fn open_session(
        &self,
        user: UserRecord,
        address: Option<&str>,
    ) -> Result<OpenedSession, StoreError> {
        let token = SessionToken::generate();
        let created_at = now();
        let session = SessionRecord {
            token_hash: token.hash(),
            user_id: user.id.clone(),
            csrf_token: random_token(),
            created_at,
            expires_at: created_at + SESSION_SECONDS,
            address: address.map(str::to_owned),
        };
        self.store.insert_session(&session).await?;
        Ok(OpenedSession {
            token,
            session,
            user,
        })
    }

    /// The live session of a cookie token, and its user.
    pub async fn session(
        &self,
        token: &str,
    ) -> Result<Option<(SessionRecord, UserRecord)>, StoreError> {
        let Some(session) = self.store.session_by_hash(&SessionHash::of(token)).await? else {
            return Ok(None);
        };
        if session.expires_at <= now() {
            self.store.delete_session(&session.token_hash).await?;
            return Ok(None);
        }
        // Disabling deletes the account's sessions; this also refuses one
        // opened by a sign-in that raced with it.
        let user = self.store.user_by_id(&session.user_id).await?;
        Ok(user
            .filter(|user| user.disabled_at.is_none())
            .map(|user| (session, user)))
    }

    /// The user with this email (normalised here), if any.
    pub async fn user_by_email(&self, email: &str) -> Result<Option<UserRecord>, StoreError> {
        match normalise_email(email) {
            Some(email) => self.store.user_by_email(&email).await,
            None => Ok(None),
        }
    }

    /// Disables an account: it can no longer sign in, its sessions end, its
    /// keys are refused from the next request on (every replica), and the
    /// device logins it approved are never redeemed. Refused for the last
    /// enabled admin.
    pub async fn disable_user(
        &self,
        user: &UserRecord,
        actor: &Actor,
    ) -> Result<AccountChange, StoreError> {
        self.set_disabled(user, true, actor).await
    }

    /// Enables a disabled account: its keys work again, except those
    /// revoked or expired meanwhile.
    pub async fn enable_user(
        &self,
        user: &UserRecord,
        actor: &Actor,
    ) -> Result<AccountChange, StoreError> {
        self.set_disabled(user, false, actor).await
    }

    /// Disables or enables `user`; audited as `user.updated` when it
    /// changed.
    async fn set_disabled(
        &self,
        user: &UserRecord,
        disabled: bool,
        actor: &Actor,
    ) -> Result<AccountChange, StoreError> {
        let at = disabled.then(now);
        let change = self.store.set_user_disabled(&user.id, at).await?;
        if change == AccountChange::Done {
            self.audit_user("user.updated", actor, user, json!({"disabled": disabled}))
                .await?;
        }
        Ok(change)
    }

    /// Makes `user` an organization owner (`admin`) or a reader. Refused
    /// for the last enabled admin. Audited as `user.updated` when it
    /// changed.
    pub async fn set_admin(
        &self,
        user: &UserRecord,
        admin: bool,
        actor: &Actor,
    ) -> Result<AccountChange, StoreError> {
        let change = self.store.set_user_admin(&user.id, admin).await?;
        if change == AccountChange::Done {
            let role = if admin { "owner" } else { "reader" };
            self.audit_user("user.updated", actor, user, json!({"role": role}))
                .await?;
        }
        Ok(change)
    }

    /// Deletes an account: its keys are revoked (their records and usage
    /// stay), its sessions and pending approvals end, and the email is free
    /// again. Refused for the last enabled admin.
    pub async fn delete_user(
        &self,
        user: &UserRecord,
        actor: &Actor,
    ) -> Result<AccountChange, StoreError> {
        let change = self.store.delete_user(&user.id, now()).await?;
        if change == AccountChange::Done {
            self.audit_user("user.deleted", actor, user, json!({}))
                .await?;
        }
        Ok(change)
    }

    /// Ends a session. Audited as `logout.succeeded` by `actor`.
    pub async fn sign_out(&self, token: &str, actor: &Actor) -> Result<(), StoreError> {
        if self.store.delete_session(&SessionHash::of(token)).await? {
            let entry = AuditEntry::new("logout.succeeded", actor, json!({}));
            audit::record(self.store.as_ref(), entry).await?;
        }
        Ok(())
    }

    /// Keeps `secret` for the next [`take_flash`](Self::take_flash) of this
    /// session, encrypted with a key derived from the cookie's token, which
    /// the server does not store: the database alone cannot reveal it.
    pub async fn put_flash(&self, token: &str, secret: &str) -> Result<(), StoreError> {
        let sealed = flash::seal(token, secret);
        self.store
            .set_session_flash(&SessionHash::of(token), Some(&sealed))
            .await
    }

    /// The value put by [`put_flash`](Self::put_flash), once.
    pub async fn take_flash(&self, token: &str) -> Result<Option<String>, StoreError> {
        let sealed = self
            .store
            .take_session_flash(&SessionHash::of(token))
            .await?;
        Ok(sealed.and_then(|sealed| flash::open(token, &sealed)))
    }
}

/// A valid argon2id hash of a random password, verified against when the
/// email is unknown.
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c3ZjLWR1bW15LXNhbHQ$IwwALUT1XK1BHv0QAEqEGNiyv8b6yBPHSpNP5aLnFAY";

async fn new_user(email: &str, password: &str, is_admin: bool) -> Result<UserRecord, AccountError> {
    let email = normalise_email(email).ok_or(AccountError::InvalidEmail)?;
    check_password(password)?;
    let password = password.to_owned();
    let password_hash = hashing(move || hash_password(&password))
        .await
        .map_err(|Busy| AccountError::Busy)??;
    Ok(UserRecord {
        id: UserId::generate(),
        email,
        password_hash,
        is_admin,
        created_at: now(),
        disabled_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_normalised_and_checked() {
        assert_eq!(
            normalise_email("  Alice@Example.COM ").as_deref(),
            Some("alice@example.com")
        );
        for bad in [
            "",
            "alice",
            "@example.com",
            "alice@",
            "a b@c.d",
            "a@b@c",
            "a@.c",
        ] {
            assert_eq!(normalise_email(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn passwords_hash_and_verify() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("correct horsE", &hash));
        assert!(!verify_password("correct horse", "not a hash"));
        assert_ne!(hash, hash_password("correct horse").unwrap(), "salted");
    }

    #[test]
    fn hashes_agree_with_the_argon2_crate() {
        use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
        let ours = hash_password("correct horse").unwrap();
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(
            argon2::Argon2::default()
                .verify_password(b"correct horse", &parsed)
                .is_ok()
        );
        let salt = SaltString::encode_b64(b"sixteen byte slt").unwrap();
        let theirs = argon2::Argon2::default()
            .hash_password(b"correct horse", &salt)
            .unwrap()
            .to_string();
        assert!(verify_password("correct horse", &theirs));
        assert!(!verify_password("correct horsE", &theirs));
        // Other costs and algorithms are read from the hash.
        let params = argon2::Params::new(1024, 1, 1, Some(16)).unwrap();
        let argon2i =
            argon2::Argon2::new(argon2::Algorithm::Argon2i, argon2::Version::V0x10, params);
        let other = argon2i.hash_password(b"pw", &salt).unwrap().to_string();
        assert!(verify_password("pw", &other));
        assert!(!verify_password("pW", &other));
    }

    #[test]
    fn the_dummy_hash_is_well_formed() {
        use argon2::password_hash::PasswordHash;
        assert!(PasswordHash::new(DUMMY_HASH).is_ok());
        assert!(!verify_password("", DUMMY_HASH));
    }

    #[test]
    fn short_passwords_are_refused() {
        assert!(matches!(
            check_password("1234567"),
            Err(AccountError::WeakPassword)
        ));
        assert!(check_password("12345678").is_ok());
    }

    #[test]
    fn debug_hides_the_password_hash() {
        let user = UserRecord {
            id: UserId("usr_1".into()),
            email: "a@b.c".into(),
            password_hash: "$argon2id$secret".into(),
            is_admin: false,
            created_at: 0,
            disabled_at: None,
        };
        assert!(!format!("{user:?}").contains("secret"));
    }
}
