//! OpenAI's Batch API: files (`/v1/files`, in [`files`]), batches
//! (`/v1/batches`, in [`batch`]) and the runner that answers their lines
//! ([`runner`]).
//!
//! A batch's lines run through the same router as any request, as the key
//! that created the batch (see [`crate::scoped::batch_caller`]): keys, scopes, model lists,
//! budgets, usage, metrics and the request log apply unchanged. They skip
//! the key's per-minute limits (a batch has its own pace: a few lines at a
//! time on each replica) and go to engines as background work, which the
//! embedded engine runs only in slots interactive requests leave free.

pub(crate) mod batch;
pub(crate) mod files;
mod lines;
mod runner;
pub(crate) mod upload;

pub(crate) use runner::{Runner, sweep};
