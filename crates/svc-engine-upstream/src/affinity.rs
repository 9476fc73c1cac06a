//! Prefix affinity: a request whose messages begin with an earlier
//! request's whole message list goes to the endpoint that served that one,
//! so the upstream's own prompt (KV) cache holds its prefix.
//!
//! A request is keyed by hashes of its prompt at message boundaries: the
//! tools, then each message in order (role, content, tool calls), `h_1`
//! covering the tools and the first message, `h_k` all `k` messages. Turn
//! N+1 of a conversation sends turn N's messages followed by the reply and
//! the next question, so its `h_m` (for turn N's `m` messages) is the key
//! recorded for turn N. Only prefixes of at least `min_bytes` of text
//! count: a short system prompt that every request shares says nothing
//! about where a request's cache is, and must not pin all traffic to one
//! endpoint.
//!
//! The table maps keys to endpoints and forgets the least recently used
//! key past its capacity; only the key of a request's whole message list
//! is recorded (its shorter prefixes are earlier turns' keys, there
//! already), so a conversation takes one entry a turn until the older
//! ones age out.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use svc_core::{ChatMessage, GenerateRequest, UserPart};

/// The keys of `request`'s prompt prefixes that end at a message boundary
/// and hold at least `min_bytes` of text, shortest first.
pub fn prefix_keys(request: &GenerateRequest, min_bytes: usize) -> Vec<u64> {
    // `DefaultHasher::new` has fixed keys: the same text hashes the same
    // for the life of the process, which is all a routing table needs.
    let mut hasher = DefaultHasher::new();
    let mut bytes = 0usize;
    request.tools.len().hash(&mut hasher);
    for tool in &request.tools {
        let parameters = tool.parameters.to_string();
        tool.name.hash(&mut hasher);
        tool.description.hash(&mut hasher);
        parameters.hash(&mut hasher);
        bytes += tool.name.len() + tool.description.as_ref().map_or(0, String::len);
        bytes += parameters.len();
    }
    let mut keys = Vec::new();
    for message in &request.messages {
        match message {
            ChatMessage::System(text) => (0u8, text).hash(&mut hasher),
            ChatMessage::User(text) => (1u8, text).hash(&mut hasher),
            ChatMessage::UserParts(parts) => {
                4u8.hash(&mut hasher);
                for part in parts {
                    match part {
                        UserPart::Text(text) => (0u8, text).hash(&mut hasher),
                        UserPart::Image(image) => (1u8, &image.url).hash(&mut hasher),
                    }
                }
            }
            // The reasoning is not sent upstream, so it is not part of the prefix.
            ChatMessage::Assistant {
                content,
                tool_calls,
                reasoning: _,
            } => {
                (2u8, content, tool_calls.len()).hash(&mut hasher);
                for call in tool_calls {
                    (&call.id, &call.name, &call.arguments).hash(&mut hasher);
                }
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => (3u8, tool_call_id, content).hash(&mut hasher),
        }
        bytes += message.text_bytes();
        if bytes >= min_bytes {
            keys.push(hasher.finish());
        }
    }
    keys
}

/// A bounded map from prefix keys to endpoint indexes that forgets the
/// least recently used key first.
#[derive(Debug)]
pub struct Table {
    capacity: usize,
    /// Key to (endpoint, when last used).
    entries: HashMap<u64, (usize, u64)>,
    /// When last used to key, oldest first.
    by_use: BTreeMap<u64, u64>,
    clock: u64,
}

impl Table {
    /// A table of at most `capacity` keys (at least one).
    pub fn new(capacity: usize) -> Table {
        let capacity = capacity.max(1);
        Table {
            capacity,
            entries: HashMap::with_capacity(capacity.min(1 << 16)),
            by_use: BTreeMap::new(),
            clock: 0,
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The endpoint remembered for the longest of `keys` (shortest first),
    /// marked as used now.
    pub fn lookup(&mut self, keys: &[u64]) -> Option<usize> {
        let key = *keys.iter().rev().find(|k| self.entries.contains_key(k))?;
        let now = self.tick();
        let (endpoint, used) = self.entries.get_mut(&key)?;
        let before = std::mem::replace(used, now);
        let endpoint = *endpoint;
        self.by_use.remove(&before);
        self.by_use.insert(now, key);
        Some(endpoint)
    }

    /// Remembers `endpoint` for `key`, forgetting the least recently used
    /// key when the table is full.
    pub fn record(&mut self, key: u64, endpoint: usize) {
        let now = self.tick();
        if let Some((_, used)) = self.entries.insert(key, (endpoint, now)) {
            self.by_use.remove(&used);
        } else if self.entries.len() > self.capacity
            && let Some((_, oldest)) = self.by_use.pop_first()
        {
            self.entries.remove(&oldest);
        }
        self.by_use.insert(now, key);
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_core::{ToolCallSpec, ToolSpec};

    fn request(messages: Vec<ChatMessage>) -> GenerateRequest {
        GenerateRequest {
            messages,
            ..GenerateRequest::default()
        }
    }

    fn long(c: char) -> String {
        std::iter::repeat_n(c, 600).collect()
    }

    #[test]
    fn the_next_turn_starts_with_this_turns_key() {
        let turn1 = vec![ChatMessage::System(long('s')), ChatMessage::User(long('u'))];
        let mut turn2 = turn1.clone();
        turn2.push(ChatMessage::Assistant {
            content: Some("reply".into()),
            tool_calls: vec![ToolCallSpec {
                id: "c1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }],
            reasoning: None,
        });
        turn2.push(ChatMessage::Tool {
            tool_call_id: "c1".into(),
            content: "42".into(),
        });
        let k1 = prefix_keys(&request(turn1), 1024);
        let k2 = prefix_keys(&request(turn2), 1024);
        // The system prompt alone (600 bytes) is too short to count.
        assert_eq!(k1.len(), 1);
        assert_eq!(k2.len(), 3);
        assert_eq!(k2[0], k1[0]);
        assert_ne!(k2[1], k2[2]);
    }

    #[test]
    fn roles_tools_and_boundaries_change_the_key() {
        let key = |r: GenerateRequest| prefix_keys(&r, 0).pop().unwrap();
        let base = request(vec![ChatMessage::User("ab".into())]);
        let system = request(vec![ChatMessage::System("ab".into())]);
        let split = request(vec![
            ChatMessage::User("a".into()),
            ChatMessage::User("b".into()),
        ]);
        let mut tools = base.clone();
        tools.tools.push(ToolSpec {
            name: "f".into(),
            description: None,
            parameters: serde_json::json!({"type": "object"}),
        });
        let k = key(base.clone());
        assert_eq!(k, key(base));
        assert_ne!(k, key(system));
        assert_ne!(k, key(split));
        assert_ne!(k, key(tools));
    }

    #[test]
    fn the_table_forgets_the_least_recently_used() {
        let mut t = Table::new(3);
        for k in 0..3 {
            t.record(k, k as usize);
        }
        assert_eq!(t.lookup(&[0]), Some(0));
        t.record(3, 3);
        assert_eq!(t.len(), 3);
        // 1 was the least recently used; 0 was looked up after it.
        assert_eq!(t.lookup(&[1]), None);
        assert_eq!(t.lookup(&[0]), Some(0));
        // The longest key held wins.
        assert_eq!(t.lookup(&[0, 9, 3, 8]), Some(3));
        t.record(0, 7);
        assert_eq!(t.lookup(&[0]), Some(7));
        assert_eq!(t.len(), 3);
        for k in 10..1000 {
            t.record(k, 1);
        }
        assert_eq!(t.len(), 3);
        assert_eq!(t.by_use.len(), 3);
    }
}
