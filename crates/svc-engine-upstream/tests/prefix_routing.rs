//! Prefix affinity against fake upstreams: the turns of a conversation go
//! to the endpoint that served its first (long enough) turn, different
//! conversations spread, a down or busy endpoint loses the conversation to
//! least outstanding, and the table of remembered prefixes stays bounded.
//! Each fake answers its own name, so a reply says where it came from.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed check fails the test, and its tasks end with it"
)]

use std::time::Duration;

use futures::StreamExt;
use svc_core::{ChatMessage, Engine, EngineEvent, EventStream, GenerateRequest, Generator};
use svc_engine_upstream::{EndpointConfig, UpstreamEngine, UpstreamOptions};
use svc_test_support::{FakeUpstream, Reply};

fn options() -> UpstreamOptions {
    UpstreamOptions {
        connect_timeout: Duration::from_millis(300),
        first_byte_timeout: Duration::from_millis(1000),
        idle_timeout: Duration::from_millis(1000),
        health_interval: Duration::from_secs(3600),
        ..UpstreamOptions::default()
    }
}

/// `n` fakes, each answering `fake<i>`, and an engine over them all.
async fn fakes(n: usize, options: UpstreamOptions) -> (Vec<FakeUpstream>, UpstreamEngine) {
    let mut fakes = Vec::new();
    for i in 0..n {
        let fake = FakeUpstream::start().await;
        fake.set_reply(Reply {
            content: Some(vec![format!("fake{i}")]),
            ..Reply::default()
        });
        fakes.push(fake);
    }
    let endpoints = fakes
        .iter()
        .map(|f| EndpointConfig::new(&f.base_url, "their-model"))
        .collect();
    let engine = UpstreamEngine::new(endpoints, options).unwrap();
    (fakes, engine)
}

/// A system prompt of about 2 KiB, the same for every conversation: past
/// the shortest prefix that counts, but shared, so it says nothing alone.
fn system_prompt() -> String {
    "You are a careful assistant; answer briefly and precisely. ".repeat(35)
}

/// A conversation: its messages so far.
struct Conversation(Vec<ChatMessage>);

impl Conversation {
    fn new(name: &str) -> Self {
        Conversation(vec![
            ChatMessage::System(system_prompt()),
            ChatMessage::User(format!("Hello, I am {name}.")),
        ])
    }

    fn request(&self) -> GenerateRequest {
        GenerateRequest {
            messages: self.0.clone(),
            max_tokens: Some(16),
            stream: true,
            ..GenerateRequest::default()
        }
    }

    /// Sends the conversation, appends the reply and the next question,
    /// and says which fake answered.
    async fn turn(&mut self, engine: &UpstreamEngine) -> usize {
        let reply = text(engine.generate(self.request()).await.unwrap()).await;
        let served = reply
            .strip_prefix("fake")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a fake's reply: {reply:?}"));
        self.0.push(ChatMessage::Assistant {
            content: Some(reply),
            tool_calls: Vec::new(),
            reasoning: None,
        });
        self.0
            .push(ChatMessage::User(format!("And turn {}?", self.0.len())));
        served
    }
}

async fn text(mut stream: EventStream) -> String {
    let mut out = String::new();
    while let Some(event) = stream.next().await {
        if let EngineEvent::Text(t) = event.unwrap() {
            out.push_str(&t);
        }
    }
    out
}

/// Requests each endpoint got by prefix, fallback and load.
fn routed(engine: &UpstreamEngine) -> Vec<(u64, u64, u64)> {
    engine
        .endpoints()
        .iter()
        .map(|e| (e.routed_by_prefix, e.routed_on_fallback, e.routed_by_load))
        .collect()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn the_turns_of_a_conversation_all_go_to_one_endpoint() {
    let (fakes, engine) = fakes(3, options()).await;
    let mut conversation = Conversation::new("Ada");
    let home = conversation.turn(&engine).await;
    for _ in 2..=7 {
        assert_eq!(conversation.turn(&engine).await, home);
    }
    assert_eq!(fakes[home].chat_requests(), 7);
    let mut expected = vec![(0, 0, 0); 3];
    expected[home] = (6, 0, 1);
    assert_eq!(routed(&engine), expected);
    // The same counts are what `/metrics` exports.
    let status = engine.status();
    assert_eq!(
        status.endpoints[home].routed,
        vec![("prefix", 6), ("fallback", 0), ("load", 1)]
    );
}

#[tokio::test]
async fn different_conversations_spread_over_the_endpoints() {
    let (fakes, engine) = fakes(3, options()).await;
    // Four, not six: with six, plain round-robin would happen to send
    // every turn of a conversation to one endpoint as well.
    let mut conversations: Vec<Conversation> = (0..4)
        .map(|i| Conversation::new(&format!("user {i}")))
        .collect();
    let mut homes = Vec::new();
    for c in &mut conversations {
        homes.push(c.turn(&engine).await);
    }
    // Interleaved turns: each conversation keeps its endpoint.
    for _ in 2..=4 {
        for (c, home) in conversations.iter_mut().zip(&homes) {
            assert_eq!(c.turn(&engine).await, *home);
        }
    }
    // The shared 2 KiB system prompt pinned nothing: every endpoint has
    // conversations, each four turns.
    for (i, fake) in fakes.iter().enumerate() {
        let conversations = homes.iter().filter(|h| **h == i).count();
        assert!(conversations > 0, "{homes:?}");
        assert_eq!(fake.chat_requests(), 4 * conversations);
    }
}

#[tokio::test]
async fn a_conversation_moves_when_its_endpoint_is_down_and_stays_moved() {
    let options = UpstreamOptions {
        health_interval: Duration::from_millis(20),
        health_failures: 1,
        ..options()
    };
    let (fakes, engine) = fakes(2, options).await;
    let mut conversation = Conversation::new("Ada");
    let home = conversation.turn(&engine).await;
    assert_eq!(conversation.turn(&engine).await, home);
    fakes[home].set_models_status(503);
    eventually("the endpoint marked down", || {
        !engine.endpoints()[home].healthy
    })
    .await;
    let other = conversation.turn(&engine).await;
    assert_ne!(other, home);
    assert_eq!(
        fakes[home].chat_requests(),
        2,
        "the down endpoint was not tried"
    );
    // Back up, the conversation stays where its prefix is now.
    fakes[home].set_models_status(200);
    eventually("the endpoint back up", || engine.endpoints()[home].healthy).await;
    assert_eq!(conversation.turn(&engine).await, other);
    assert_eq!(routed(&engine)[other], (1, 1, 0));
}

#[tokio::test]
async fn a_conversation_moves_when_its_endpoint_is_busy() {
    let options = UpstreamOptions {
        affinity_slack: 1,
        ..options()
    };
    let (fakes, engine) = fakes(2, options).await;
    let mut conversation = Conversation::new("Ada");
    let home = conversation.turn(&engine).await;
    // Two requests of the same conversation held open at `home`: one more
    // than the slack of 1 beyond the other endpoint's none.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(engine.generate(conversation.request()).await.unwrap());
    }
    assert_eq!(engine.endpoints()[home].outstanding, 2);
    let other = conversation.turn(&engine).await;
    assert_ne!(other, home);
    drop(held);
    // Remembered where it went: the next turns stay there.
    assert_eq!(conversation.turn(&engine).await, other);
    assert_eq!(conversation.turn(&engine).await, other);
    assert_eq!(fakes[home].chat_requests(), 3);
    assert_eq!(routed(&engine)[home], (2, 0, 1));
    assert_eq!(routed(&engine)[other], (2, 1, 0));
}

#[tokio::test]
async fn the_table_of_prefixes_stays_bounded() {
    let options = UpstreamOptions {
        affinity_entries: 8,
        ..options()
    };
    let (_fakes, engine) = fakes(2, options).await;
    let mut first = Conversation::new("first");
    first.turn(&engine).await;
    first.turn(&engine).await;
    assert_eq!(engine.remembered_prefixes(), 2);
    assert_eq!(routed(&engine).iter().map(|r| r.0).sum::<u64>(), 1);
    // Eight more conversations push the first one's entries out.
    for i in 0..8 {
        Conversation::new(&format!("user {i}")).turn(&engine).await;
    }
    assert_eq!(engine.remembered_prefixes(), 8);
    first.turn(&engine).await;
    let by_prefix: u64 = routed(&engine).iter().map(|r| r.0).sum();
    let by_load: u64 = routed(&engine).iter().map(|r| r.2).sum();
    assert_eq!(
        (by_prefix, by_load),
        (1, 10),
        "the first conversation was forgotten"
    );
    assert_eq!(engine.remembered_prefixes(), 8);
}
