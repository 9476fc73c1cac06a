//! Usage accounting: requests and tokens per key per UTC day.

/// What one or more requests add to a key's day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageDelta {
    pub key_id: crate::key::KeyId,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The model id the requests named.
    pub model: String,
    pub requests: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

/// One key's counters for one day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    pub key_id: crate::key::KeyId,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub requests: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

/// One key's counters for one day and model, with the key's project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelUsageRow {
    pub key_id: crate::key::KeyId,
    /// The key's project (`None` when the key is gone).
    pub project_id: Option<crate::project::ProjectId>,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub model: String,
    pub requests: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

/// The UTC day (`YYYY-MM-DD`) of a unix time.
pub fn day_of(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| "1970-01-01".into())
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
