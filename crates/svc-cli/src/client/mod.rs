//! The command-line client's side of svc: talking to a running service over
//! HTTP ([`api`]), reading its Server-Sent Events ([`sse`]), keeping the
//! login ([`credentials`]), deciding which server and key a command uses
//! ([`target`]), and how failures end the process ([`failure`]).
//!
//! Nothing here opens the store or starts a server: the client only knows
//! what the HTTP API tells it. The full key is never printed; messages show
//! its hint (`sk-svc-1a2b…9f0e`).

pub mod api;
pub mod conversation;
pub mod credentials;
pub mod failure;
pub mod input;
pub mod render;
pub mod sse;
pub mod target;
pub mod terminal;

pub use api::Api;
pub use credentials::{Credentials, CredentialsFile};
pub use failure::Failure;
pub use target::{BaseUrl, Source, Target};
