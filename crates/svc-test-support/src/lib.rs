//! Test support for svc: [`TestApp`] starts the real server on port 0 with a
//! fresh database, and [`FakeEngine`] plays scripted generations so the HTTP
//! layer can be tested with exact control. Nothing here is reachable from a
//! normal `svc serve`.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

pub mod browser;
pub mod fake_engine;
pub mod fake_upstream;
pub mod process;
pub mod sse;
pub mod test_app;
pub mod watchdog;

/// The module graph and import circles every crate's `tests/layers.rs` checks.
pub use svc_layers as layers;

pub use browser::{Browser, Page};
pub use fake_engine::{
    FAKE_EMBED_DIMENSIONS, FAKE_EMBED_MAX_WORDS, FAKE_FINGERPRINT, FAKE_TEMPLATE_TOKENS,
    FakeEmbedder, FakeEngine, FakeReranker, Probe, Script, fake_models, fake_relevance,
    fake_vector,
};
pub use fake_upstream::{Behavior, FakeToolCall, FakeUpstream, Reply, fake_upstream_vector};
pub use process::ServeProcess;
pub use sse::{SseEvent, read_sse};
pub use test_app::{Database, TestApp};
pub use watchdog::process_temp_dir;
