//! The public identifiers of accounts, keys and projects: random, safe to
//! show, and each a type of its own, so one kind of id is never looked up
//! as another. A leaf: it imports nothing else of svc-core, so every layer
//! may name an account, a key or a project without importing its module.

use std::fmt;

/// The public identifier of a user (`usr_` + 16 hex).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserId(pub String);

impl UserId {
    /// A fresh random id.
    pub fn generate() -> Self {
        UserId(format!("usr_{}", hex::encode(rand::random::<[u8; 8]>())))
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The public identifier of a key record (`key_` + 16 hex), safe to show and
/// not guessable from another id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyId(pub String);

impl KeyId {
    /// A fresh random id.
    pub fn generate() -> Self {
        KeyId(format!("key_{}", hex::encode(rand::random::<[u8; 8]>())))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The project every key and account was in before projects existed, and
/// where keys go when no project is named (the dashboard, device logins,
/// `svc keys create` without `--project`).
pub const DEFAULT_PROJECT_ID: &str = "proj_default";

/// The public identifier of a project (`proj_` + 16 hex, or
/// [`DEFAULT_PROJECT_ID`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProjectId(pub String);

impl ProjectId {
    /// A fresh random id.
    pub fn generate() -> Self {
        ProjectId(format!("proj_{}", hex::encode(rand::random::<[u8; 8]>())))
    }

    /// The default project's id.
    pub fn default_project() -> Self {
        ProjectId(DEFAULT_PROJECT_ID.to_owned())
    }

    /// Whether this is the default project.
    pub fn is_default(&self) -> bool {
        self.0 == DEFAULT_PROJECT_ID
    }
}

impl fmt::Display for ProjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
