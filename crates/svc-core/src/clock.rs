//! The one clock of the domain: seconds since the Unix epoch. A leaf: it
//! imports nothing else of svc-core.

/// Seconds since the Unix epoch, the one time unit stored and compared.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}
