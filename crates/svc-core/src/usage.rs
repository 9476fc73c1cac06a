//! Usage accounting: requests and tokens per key per UTC day, and
//! [`UsageStore`], their persistence.

use async_trait::async_trait;

use crate::error::StoreError;
use crate::ids::{KeyId, ProjectId, UserId};

/// What one or more requests add to a key's day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageDelta {
    pub key_id: KeyId,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The model id the requests named.
    pub model: String,
    pub requests: i64,
    pub prompt_tokens: i64,
    /// Of `prompt_tokens`, those served from a reused prefix.
    pub cached_tokens: i64,
    pub completion_tokens: i64,
    /// Replies served from the response cache (their requests are counted
    /// in `requests`; they used no tokens).
    pub cache_hits: i64,
    /// The prompt and completion tokens those replies took when made.
    pub cache_saved_tokens: i64,
    /// Seconds of audio transcribed or translated (counted per model only).
    pub audio_seconds: i64,
    /// Characters of text spoken (counted per model only).
    pub characters: i64,
}

/// One key's counters for one day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    pub key_id: KeyId,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub requests: i64,
    pub prompt_tokens: i64,
    /// Of `prompt_tokens`, those served from a reused prefix.
    pub cached_tokens: i64,
    pub completion_tokens: i64,
    /// Replies served from the response cache (their requests are counted
    /// in `requests`; they used no tokens).
    pub cache_hits: i64,
    /// The prompt and completion tokens those replies took when made.
    pub cache_saved_tokens: i64,
}

/// One key's counters for one day and model, with the key's project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelUsageRow {
    pub key_id: KeyId,
    /// The key's project (`None` when the key is gone).
    pub project_id: Option<ProjectId>,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub model: String,
    pub requests: i64,
    pub prompt_tokens: i64,
    /// Of `prompt_tokens`, those served from a reused prefix.
    pub cached_tokens: i64,
    pub completion_tokens: i64,
    /// Replies served from the response cache (their requests are counted
    /// in `requests`; they used no tokens).
    pub cache_hits: i64,
    /// The prompt and completion tokens those replies took when made.
    pub cache_saved_tokens: i64,
    /// Seconds of audio transcribed or translated.
    pub audio_seconds: i64,
    /// Characters of text spoken.
    pub characters: i64,
}

/// The counters of every key (of an owner) for one day, summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayTotals {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub requests: i64,
    pub prompt_tokens: i64,
    /// Of `prompt_tokens`, those served from a reused prefix.
    pub cached_tokens: i64,
    pub completion_tokens: i64,
    /// Replies served from the response cache (their requests are counted
    /// in `requests`; they used no tokens).
    pub cache_hits: i64,
    /// The prompt and completion tokens those replies took when made.
    pub cache_saved_tokens: i64,
}

/// The UTC day (`YYYY-MM-DD`) of a unix time.
pub fn day_of(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| "1970-01-01".into())
}

/// Per-key, per-day usage counters.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Adds `delta` to the counters of (`delta.key_id`, `delta.day`), and
    /// of that key, day and `delta.model`.
    async fn add_usage(&self, delta: &UsageDelta) -> Result<(), StoreError>;
    /// Rows by key, day and model for the days from `from_day` (inclusive)
    /// to `to_day` (exclusive), `YYYY-MM-DD`, ordered by day, key and model.
    async fn usage_by_model(
        &self,
        from_day: &str,
        to_day: &str,
    ) -> Result<Vec<ModelUsageRow>, StoreError>;
    /// Rows from `since_day` (`YYYY-MM-DD`, inclusive) on, for the keys of
    /// `owner_id` (every key when `None`), ordered by day then key id.
    async fn usage_since(
        &self,
        owner_id: Option<&UserId>,
        since_day: &str,
    ) -> Result<Vec<UsageRow>, StoreError>;
    /// The newest `limit` rows from `since_day` on, for the keys of
    /// `owner_id` (every key when `None`): newest day first, then by key id
    /// downwards. The database reads no more than that.
    async fn recent_usage(
        &self,
        owner_id: Option<&UserId>,
        since_day: &str,
        limit: i64,
    ) -> Result<Vec<UsageRow>, StoreError>;
    /// Each day's counters from `since_day` on, summed over the keys of
    /// `owner_id` (every key when `None`), oldest day first: one row a day.
    async fn usage_by_day(
        &self,
        owner_id: Option<&UserId>,
        since_day: &str,
    ) -> Result<Vec<DayTotals>, StoreError>;
}

#[cfg(test)]
mod tests {
    #[test]
    fn days_are_utc() {
        assert_eq!(super::day_of(0), "1970-01-01");
        assert_eq!(super::day_of(1_795_305_599), "2026-11-21");
        assert_eq!(super::day_of(1_795_305_600), "2026-11-22");
    }
}
