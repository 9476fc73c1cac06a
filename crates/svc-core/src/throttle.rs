//! Fixed-window throttling on top of [`ThrottleStore`], so every replica
//! sharing the database counts the same attempts.
//!
//! An attempt takes its slot *before* the work it guards (argon2, a code
//! lookup, a new row): one atomic `hit` that counts and returns the count.
//! Reading the count first and counting after the work let 100 parallel
//! attempts all read "under the limit" and all go ahead. An attempt that
//! turns out harmless (a right password, a code that exists) gives its slot
//! back.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use async_trait::async_trait;

use crate::clock::now;
use crate::error::StoreError;

/// Fixed-window counters for throttling (sign-in, sign-up, code requests
/// and code entry), shared by
/// every replica on the same database.
#[async_trait]
pub trait ThrottleStore: Send + Sync {
    /// Counts one hit on `bucket` in the window that started at
    /// `window_start` (a previous window's count is reset) and returns the
    /// hits in this window, this one included.
    async fn hit(&self, bucket: &str, window_start: i64) -> Result<i64, StoreError>;
    /// The hits on `bucket` in the window that started at `window_start`.
    async fn hits(&self, bucket: &str, window_start: i64) -> Result<i64, StoreError>;
    /// Takes back one hit on `bucket` counted in the window that started at
    /// `window_start`; nothing when that window is over or has no hits.
    async fn unhit(&self, bucket: &str, window_start: i64) -> Result<(), StoreError>;
    /// Forgets `bucket` (after a successful sign-in, say).
    async fn clear(&self, bucket: &str) -> Result<(), StoreError>;
    /// Deletes every bucket whose window started before `before`; returns
    /// how many.
    async fn delete_stale_throttles(&self, before: i64) -> Result<u64, StoreError>;
}

/// Buckets whose window started this long ago are deleted: longer than any
/// window, so no count in force is lost.
const STALE_SECS: i64 = 24 * 3600;

/// At most `limit` attempts per `window` seconds for each key of one scope
/// (an account, an address).
#[derive(Clone)]
pub struct Throttle {
    store: Arc<dyn ThrottleStore>,
    scope: &'static str,
    limit: i64,
    window: i64,
    /// Whether keys are client addresses, counted by their network (see
    /// [`client_network`]).
    by_address: bool,
}

/// The network a client is counted as by every per-address limit (the
/// throttles here, the server's connection caps): an IPv4 address itself,
/// an IPv6 address's /64, which one subscriber usually has whole, so that
/// its 2^64 addresses are one client and not 2^64 fresh budgets.
pub fn client_network(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        v4 => v4,
    }
}

/// [`client_network`] of a client's address as text (`2001:db8::/64`, or
/// the IPv4 address); what is not an address (`unknown`) stays itself.
pub fn address_key(address: &str) -> String {
    match address.parse::<IpAddr>().map(client_network) {
        Ok(network @ IpAddr::V6(_)) => format!("{network}/64"),
        Ok(ip) => ip.to_string(),
        Err(_) => address.to_owned(),
    }
}

/// The caller must wait `retry_after` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub retry_after: i64,
}

/// One attempt counted by [`Throttle::take`], until given back.
#[derive(Clone)]
pub struct Slot {
    store: Arc<dyn ThrottleStore>,
    bucket: String,
    window_start: i64,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("bucket", &self.bucket)
            .field("window_start", &self.window_start)
            .finish_non_exhaustive()
    }
}

impl Slot {
    /// Uncounts the attempt (it did no harm). A no-op once its window is over.
    pub async fn give_back(self) -> Result<(), StoreError> {
        self.store.unhit(&self.bucket, self.window_start).await
    }
}

impl Throttle {
    pub fn new(
        store: Arc<dyn ThrottleStore>,
        scope: &'static str,
        limit: i64,
        window: i64,
    ) -> Self {
        Throttle {
            store,
            scope,
            limit,
            window,
            by_address: false,
        }
    }

    /// A throttle whose keys are client addresses, each counted by its
    /// network ([`address_key`]).
    pub fn per_address(
        store: Arc<dyn ThrottleStore>,
        scope: &'static str,
        limit: i64,
        window: i64,
    ) -> Self {
        Throttle {
            by_address: true,
            ..Throttle::new(store, scope, limit, window)
        }
    }

    fn bucket(&self, key: &str) -> String {
        if self.by_address {
            format!("{}:{}", self.scope, address_key(key))
        } else {
            format!("{}:{key}", self.scope)
        }
    }

    fn window_start(&self, at: i64) -> i64 {
        at - at.rem_euclid(self.window)
    }

    /// Counts an attempt for `key`; `Err(Throttled)` when it is over the
    /// limit of this window (and must not be made).
    pub async fn take(&self, key: &str) -> Result<Result<Slot, Throttled>, StoreError> {
        let at = now();
        let window_start = self.window_start(at);
        let bucket = self.bucket(key);
        let hits = self.store.hit(&bucket, window_start).await?;
        if hits == 1 {
            // A bucket new or new in this window: sweep the stale ones, so
            // attempts naming ever new accounts or addresses do not grow
            // the table without end (an indexed delete, usually of none).
            self.store.delete_stale_throttles(at - STALE_SECS).await?;
        }
        Ok(if hits > self.limit {
            Err(Throttled {
                retry_after: (window_start + self.window - at).max(1),
            })
        } else {
            Ok(Slot {
                store: self.store.clone(),
                bucket,
                window_start,
            })
        })
    }

    /// Forgets `key`'s attempts.
    pub async fn clear(&self, key: &str) -> Result<(), StoreError> {
        self.store.clear(&self.bucket(key)).await
    }
}

/// Takes a slot of every throttle in order; on the first refusal gives back
/// the slots already taken (the attempt is not made, so it counts nowhere
/// else) and returns the refusal.
pub async fn take_all(
    throttles: &[(&Throttle, &str)],
) -> Result<Result<Vec<Slot>, Throttled>, StoreError> {
    let mut slots = Vec::with_capacity(throttles.len());
    for (throttle, key) in throttles {
        match throttle.take(key).await? {
            Ok(slot) => slots.push(slot),
            Err(throttled) => {
                give_back_all(slots).await?;
                return Ok(Err(throttled));
            }
        }
    }
    Ok(Ok(slots))
}

/// Gives back every slot.
pub async fn give_back_all(slots: Vec<Slot>) -> Result<(), StoreError> {
    for slot in slots {
        slot.give_back().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_counted_by_ipv4_address_or_ipv6_64() {
        for (one, other) in [
            ("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"),
            ("2001:db8:1:2:abcd::", "2001:db8:1:2::"),
            // An IPv4 address mapped into IPv6 is that IPv4 address.
            ("::ffff:203.0.113.5", "203.0.113.5"),
        ] {
            assert_eq!(address_key(one), address_key(other), "{one} {other}");
        }
        assert_eq!(address_key("2001:db8:1:2::7"), "2001:db8:1:2::/64");
        for (one, other) in [
            ("2001:db8:1:2::1", "2001:db8:1:3::1"),
            ("203.0.113.5", "203.0.113.6"),
            ("::1", "::2:0:0:0:1"),
        ] {
            assert_ne!(address_key(one), address_key(other), "{one} {other}");
        }
        assert_eq!(address_key("unknown"), "unknown");
    }
}
