//! What a request carries with it that the layers below the handlers
//! read: its id (a task-local the request-id layer sets), the client's
//! address (a request extension the accept loop sets) and, for a batch's
//! line, the key it runs as (a task-local: no client can set it). A leaf: it imports nothing else of the crate, so the
//! policy (limits, budgets, the request log) can read these without
//! reaching up into the routes that set them.

use std::future::Future;
use std::net::IpAddr;

use svc_core::KeyId;

/// The client's address as resolved by the accept loop, in the request's
/// extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

tokio::task_local! {
    /// The id of the request this task answers.
    static REQUEST_ID: String;
    /// The key a batch's line runs as, while it runs.
    static BATCH_CALLER: KeyId;
}

/// Runs `work` as the request `id`: [`request_id`] sees it, on this task.
pub fn as_request<F: Future>(id: String, work: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(id, work)
}

/// Runs `f` as if inside the request `id` (for work that outlives the
/// handler, such as a stream's body).
pub fn in_request<R>(id: String, f: impl FnOnce() -> R) -> R {
    REQUEST_ID.sync_scope(id, f)
}

/// The id of the request being handled on this task, if any.
pub fn request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Runs `work` as a batch's line of `key`: [`batch_caller`] and
/// [`in_batch`] see it, on this task only.
pub fn as_batch_line<F: Future>(key: KeyId, work: F) -> impl Future<Output = F::Output> {
    BATCH_CALLER.scope(key, work)
}

/// The key of the batch whose line this task runs; `None` for a request
/// that came over the network.
pub fn batch_caller() -> Option<KeyId> {
    BATCH_CALLER.try_with(Clone::clone).ok()
}

/// Whether this task runs a batch's line.
pub fn in_batch() -> bool {
    BATCH_CALLER.try_with(|_| ()).is_ok()
}
