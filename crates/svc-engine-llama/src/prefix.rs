//! Prompt prefixes kept for the next request that starts the same way.
//!
//! The engine thread keeps each finished sequence's tokens and KV cells in
//! its slot (see `scheduler`); this module holds what outlives a slot: the
//! states of sequences whose slot was taken for an unrelated prompt, copied
//! to host memory up to a byte limit and given back (moved out) when a
//! request matches one better than any slot. Least recently used states go
//! first; a state is never kept beside a longer one it is a prefix of.
//!
//! The same byte limit also covers the copies of suspended sequences (see
//! `scheduler`), which the scheduler holds itself: it sets their bytes aside
//! here ([`HostCache::reserve`]), and cached prefixes make room for them.

use llama_cpp_2::token::LlamaToken;

/// The length of the longest common prefix of `a` and `b`.
pub(crate) fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Shortest prefix worth keeping in host memory: shorter ones decode again
/// in about the time copying them takes.
pub(crate) const MIN_HOST_TOKENS: usize = 32;

/// Saved sequence states, bounded by their total size in bytes.
#[derive(Debug)]
pub(crate) struct HostCache<S> {
    limit: usize,
    /// Bytes of the states held here.
    bytes: usize,
    /// Bytes set aside for copies held elsewhere (see [`HostCache::reserve`]).
    reserved: usize,
    entries: Vec<Entry<S>>,
    clock: u64,
}

#[derive(Debug)]
struct Entry<S> {
    tokens: Vec<LlamaToken>,
    state: S,
    bytes: usize,
    used_at: u64,
}

impl<S> HostCache<S> {
    /// An empty cache that never holds more than `limit` bytes (0: keeps nothing).
    pub(crate) fn new(limit: usize) -> Self {
        HostCache {
            limit,
            bytes: 0,
            reserved: 0,
            entries: Vec::new(),
            clock: 0,
        }
    }

    /// Whether anything can be kept at all.
    pub(crate) fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// Bytes held now: the states kept here and the bytes set aside.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes + self.reserved
    }

    /// Sets `bytes` aside for a copy held elsewhere until [`HostCache::release`],
    /// dropping least recently used states until it fits. Returns how many
    /// were dropped, or `None` (nothing set aside, nothing dropped) when it
    /// does not fit beside what is set aside already.
    pub(crate) fn reserve(&mut self, bytes: usize) -> Option<usize> {
        if self.reserved + bytes > self.limit {
            return None;
        }
        let dropped = self.make_room(bytes);
        self.reserved += bytes;
        Some(dropped)
    }

    /// Gives back `bytes` set aside by [`HostCache::reserve`].
    pub(crate) fn release(&mut self, bytes: usize) {
        self.reserved = self.reserved.saturating_sub(bytes);
    }

    /// States held now.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether a state of `tokens` (or of a longer sequence starting with them) is held.
    pub(crate) fn covers(&self, tokens: &[LlamaToken]) -> bool {
        self.entries
            .iter()
            .any(|e| common_prefix(&e.tokens, tokens) == tokens.len())
    }

    /// The entry sharing the longest prefix with `prompt`, and that length.
    pub(crate) fn best(&self, prompt: &[LlamaToken]) -> Option<(usize, usize)> {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, common_prefix(&e.tokens, prompt)))
            .filter(|&(_, n)| n > 0)
            .max_by_key(|&(i, n)| (n, self.entries[i].used_at))
    }

    /// The tokens of entry `index`.
    pub(crate) fn tokens(&self, index: usize) -> &[LlamaToken] {
        &self.entries[index].tokens
    }

    /// A copy of entry `index`, which stays (and counts as used now).
    pub(crate) fn copy(&mut self, index: usize) -> (Vec<LlamaToken>, S)
    where
        S: Clone,
    {
        self.clock += 1;
        let entry = &mut self.entries[index];
        entry.used_at = self.clock;
        (entry.tokens.clone(), entry.state.clone())
    }

    /// Takes entry `index` out (its state goes back into a slot).
    pub(crate) fn take(&mut self, index: usize) -> (Vec<LlamaToken>, S) {
        let entry = self.entries.swap_remove(index);
        self.bytes -= entry.bytes;
        (entry.tokens, entry.state)
    }

    /// Keeps `state` (of `bytes` bytes) for `tokens`, dropping least
    /// recently used states until it fits, and any state of a prefix of
    /// `tokens`. Returns how many states were dropped to make room, or
    /// `None` (nothing kept) when it is larger than the whole cache.
    pub(crate) fn insert(
        &mut self,
        tokens: Vec<LlamaToken>,
        state: S,
        bytes: usize,
    ) -> Option<usize> {
        if self.reserved + bytes > self.limit {
            return None;
        }
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            if common_prefix(&e.tokens, &tokens) == e.tokens.len() {
                self.bytes -= e.bytes;
                self.entries.swap_remove(i);
            } else {
                i += 1;
            }
        }
        let dropped = self.make_room(bytes);
        self.clock += 1;
        self.bytes += bytes;
        self.entries.push(Entry {
            tokens,
            state,
            bytes,
            used_at: self.clock,
        });
        Some(dropped)
    }

    /// Drops least recently used states until `bytes` more fit; returns how many.
    fn make_room(&mut self, bytes: usize) -> usize {
        let mut dropped = 0;
        while self.bytes + self.reserved + bytes > self.limit {
            let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used_at)
            else {
                break;
            };
            self.bytes -= self.entries[oldest].bytes;
            self.entries.swap_remove(oldest);
            dropped += 1;
        }
        dropped
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn toks(ids: &[i32]) -> Vec<LlamaToken> {
        ids.iter().copied().map(LlamaToken).collect()
    }

    #[test]
    fn common_prefix_counts_equal_leading_tokens() {
        assert_eq!(common_prefix(&toks(&[1, 2, 3]), &toks(&[1, 2, 4, 5])), 2);
        assert_eq!(common_prefix(&toks(&[1, 2]), &toks(&[1, 2, 3])), 2);
        assert_eq!(common_prefix(&toks(&[]), &toks(&[1])), 0);
        assert_eq!(common_prefix(&toks(&[9]), &toks(&[1])), 0);
    }

    #[test]
    fn never_holds_more_than_its_limit() {
        let mut cache = HostCache::new(100);
        for i in 0..50 {
            let kept = cache.insert(toks(&[i, i + 1000]), i, 30);
            assert!(kept.is_some());
            assert!(cache.bytes() <= 100, "{} bytes", cache.bytes());
        }
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.insert(toks(&[7]), 7, 101), None);
        assert!(cache.bytes() <= 100);
    }

    #[test]
    fn the_least_recently_kept_goes_first() {
        let mut cache = HostCache::new(60);
        cache.insert(toks(&[1, 1]), "a", 30);
        cache.insert(toks(&[2, 2]), "b", 30);
        assert_eq!(cache.insert(toks(&[3, 3]), "c", 30), Some(1));
        assert!(!cache.covers(&toks(&[1, 1])));
        assert!(cache.covers(&toks(&[2, 2])));
        assert!(cache.covers(&toks(&[3])));
    }

    #[test]
    fn a_longer_state_replaces_its_prefix_and_the_best_match_is_taken_out() {
        let mut cache = HostCache::new(1000);
        cache.insert(toks(&[1, 2, 3]), "short", 10);
        cache.insert(toks(&[5, 6]), "other", 10);
        cache.insert(toks(&[1, 2, 3, 4]), "long", 20);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.bytes(), 30);
        let (index, n) = cache.best(&toks(&[1, 2, 3, 4, 9])).unwrap();
        assert_eq!(n, 4);
        let (tokens, state) = cache.take(index);
        assert_eq!((tokens, state), (toks(&[1, 2, 3, 4]), "long"));
        assert_eq!(cache.bytes(), 10);
        assert_eq!(cache.best(&toks(&[8])), None);
    }

    #[test]
    fn bytes_set_aside_share_the_limit_and_push_cached_states_out() {
        let mut cache = HostCache::new(100);
        cache.insert(toks(&[1]), "a", 40);
        cache.insert(toks(&[2]), "b", 40);
        // Room for 50 only once the least recently kept state goes.
        assert_eq!(cache.reserve(50), Some(1));
        assert_eq!(cache.bytes(), 90);
        assert!(!cache.covers(&toks(&[1])) && cache.covers(&toks(&[2])));
        // Cached states give way; what is set aside does not.
        assert_eq!(cache.reserve(60), None);
        assert_eq!(cache.bytes(), 90);
        assert_eq!(cache.insert(toks(&[3]), "c", 51), None);
        assert_eq!(cache.insert(toks(&[3]), "c", 50), Some(1));
        assert_eq!((cache.len(), cache.bytes()), (1, 100));
        cache.release(50);
        assert_eq!(cache.bytes(), 50);
        assert_eq!(cache.reserve(50), Some(0));
        assert_eq!(HostCache::<()>::new(0).reserve(1), None);
    }

    #[test]
    fn a_zero_limit_keeps_nothing() {
        let mut cache = HostCache::new(0);
        assert!(!cache.enabled());
        assert_eq!(cache.insert(toks(&[1]), (), 1), None);
        assert_eq!(cache.len(), 0);
    }
}
