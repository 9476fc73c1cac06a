//! The request log: one row per API request (issue 33) — who asked, which
//! model, how it ended, its tokens, cost and timings — so that an operator
//! can answer "my request at 14:02 was slow". Never the prompt or the
//! reply, never a key's secret.

use async_trait::async_trait;

use crate::clock::now;
use crate::error::StoreError;

/// One API request, as it ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestLogEntry {
    /// The request's id (`X-Request-Id`), unique.
    pub id: String,
    /// When it arrived, Unix time in milliseconds.
    pub started_at_ms: i64,
    /// The key that authenticated it, when one did.
    pub key_id: Option<String>,
    /// That key's project.
    pub project_id: Option<String>,
    /// That key's owning account (`None` for the operator's keys).
    pub user_id: Option<String>,
    /// The model asked for, when the body named one.
    pub model: Option<String>,
    /// `openai`, `responses` or `anthropic`: whose API shape it spoke.
    pub dialect: String,
    /// `POST /v1/chat/completions`.
    pub endpoint: String,
    /// The HTTP status answered; 499 when the client went away first.
    pub status: u16,
    /// The error's `type` (or `client_disconnected`), when it failed.
    pub error_type: Option<String>,
    pub prompt_tokens: i64,
    pub cached_tokens: i64,
    pub completion_tokens: i64,
    /// What its tokens cost at the configured prices, in micro-dollars.
    pub cost_micros: i64,
    /// From arrival to the first generated token, when there was one.
    pub ttft_ms: Option<i64>,
    /// From arrival to the last byte of the answer (or the client leaving).
    pub duration_ms: i64,
    /// The upstream endpoint that answered, for a routed model.
    pub upstream: Option<String>,
}

/// Which rows to list: every filter optional, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestLogQuery {
    pub key_ids: Vec<String>,
    pub project_ids: Vec<String>,
    pub user_ids: Vec<String>,
    pub models: Vec<String>,
    /// Exact statuses (`429`), or classes written `4xx`.
    pub statuses: Vec<StatusFilter>,
    /// `started_at_ms` at or after this.
    pub since_ms: Option<i64>,
    /// `started_at_ms` before this.
    pub until_ms: Option<i64>,
    /// Older than this row (the next page).
    pub after: Option<String>,
    /// Rows wanted; the store returns one more when there are more.
    pub limit: usize,
}

/// A status to match: one code, or a class (`4` for 4xx).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    Exact(u16),
    Class(u16),
}

impl StatusFilter {
    /// `429` or `4xx`.
    pub fn parse(text: &str) -> Option<StatusFilter> {
        let text = text.trim();
        if let Some(class) = text.strip_suffix("xx").or_else(|| text.strip_suffix("XX")) {
            let class: u16 = class.parse().ok()?;
            return (1..=5)
                .contains(&class)
                .then_some(StatusFilter::Class(class));
        }
        let code: u16 = text.parse().ok()?;
        (100..=599)
            .contains(&code)
            .then_some(StatusFilter::Exact(code))
    }

    /// The statuses it matches, as a range (inclusive).
    pub fn range(self) -> (u16, u16) {
        match self {
            StatusFilter::Exact(code) => (code, code),
            StatusFilter::Class(class) => (class * 100, class * 100 + 99),
        }
    }
}

/// The request log's persistence.
#[async_trait]
pub trait RequestLogStore: Send + Sync {
    /// Appends `rows`, all or none.
    async fn insert_request_logs(&self, rows: &[RequestLogEntry]) -> Result<(), StoreError>;
    /// Rows matching `query`, newest first, at most `query.limit + 1`.
    async fn list_request_logs(
        &self,
        query: &RequestLogQuery,
    ) -> Result<Vec<RequestLogEntry>, StoreError>;
    /// Deletes the rows of requests started before `before_ms`; how many.
    async fn delete_request_logs_before(&self, before_ms: i64) -> Result<u64, StoreError>;
}

/// Deletes the rows older than `retention_seconds` (0: keeps all); how many.
pub async fn sweep(store: &dyn RequestLogStore, retention_seconds: u64) -> Result<u64, StoreError> {
    if retention_seconds == 0 {
        return Ok(0);
    }
    let retention = i64::try_from(retention_seconds).unwrap_or(i64::MAX);
    let before = now().saturating_sub(retention).saturating_mul(1000);
    store.delete_request_logs_before(before).await
}

#[cfg(test)]
mod tests {
    use super::StatusFilter;

    #[test]
    fn statuses_are_codes_or_classes() {
        assert_eq!(StatusFilter::parse("429"), Some(StatusFilter::Exact(429)));
        assert_eq!(
            StatusFilter::parse("4xx").map(StatusFilter::range),
            Some((400, 499))
        );
        assert_eq!(StatusFilter::parse("6xx"), None);
        assert_eq!(StatusFilter::parse("42"), None);
        assert_eq!(StatusFilter::parse("abc"), None);
    }
}
