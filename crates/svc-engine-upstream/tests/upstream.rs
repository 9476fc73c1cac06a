//! The upstream engine against fake upstreams that misbehave on purpose:
//! translation both ways, retries before the first event, errors after it,
//! timeouts, the breaker, health checks and a killed endpoint.

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use svc_core::{
    ChatMessage, EmbedInput, EmbedRequest, Embedder, Engine, EngineError, EngineEvent, EventStream,
    FinishReason, GenerateRequest, Generator, OutputFormat, RerankRequest, Reranker, Sampling,
    TextPrompt, TokenUsage, ToolCallChunk, ToolChoiceSpec, ToolSpec,
};
use svc_engine_upstream::{EndpointConfig, UpstreamEngine, UpstreamKey, UpstreamOptions};
use svc_test_support::{
    Behavior, FakeToolCall, FakeUpstream, Reply, fake_relevance, fake_upstream_vector,
};

/// Small timeouts so failing paths stay fast; health checks effectively off.
fn options() -> UpstreamOptions {
    UpstreamOptions {
        connect_timeout: Duration::from_millis(300),
        first_byte_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_millis(300),
        whole_timeout: Duration::from_millis(700),
        health_interval: Duration::from_secs(3600),
        health_timeout: Duration::from_millis(300),
        health_failures: 2,
        breaker_failures: 3,
        breaker_cooldown: Duration::from_millis(300),
        max_attempts: usize::MAX,
        affinity_entries: 4096,
        affinity_min_bytes: 1024,
        affinity_slack: 4,
        ..UpstreamOptions::default()
    }
}

fn endpoint(fake: &FakeUpstream, weight: u32) -> EndpointConfig {
    let mut c = EndpointConfig::new(&fake.base_url, "their-model");
    c.weight = weight;
    c
}

/// An engine over `fakes`, the first one heavily weighted so that it is
/// always tried first while it is available.
fn engine_first_preferred(fakes: &[&FakeUpstream], options: UpstreamOptions) -> UpstreamEngine {
    let endpoints = fakes
        .iter()
        .enumerate()
        .map(|(i, f)| endpoint(f, if i == 0 { 100 } else { 1 }))
        .collect();
    UpstreamEngine::new(endpoints, options).unwrap()
}

fn request(text: &str) -> GenerateRequest {
    GenerateRequest {
        messages: vec![
            ChatMessage::System("Be brief.".into()),
            ChatMessage::User(text.into()),
        ],
        sampling: Sampling::default(),
        max_tokens: Some(64),
        stop: Vec::new(),
        tools: Vec::new(),
        tool_choice: ToolChoiceSpec::Auto,
        output: OutputFormat::Text,
        reasoning: false,
        stream: true,
        ..GenerateRequest::default()
    }
}

/// What the caller gets when the upstream answered badly (a 502).
fn bad_response() -> EngineError {
    EngineError::BadGateway("the upstream endpoint sent a bad response".into())
}

/// What the caller gets when the upstream was too slow (a 504).
fn timed_out() -> EngineError {
    EngineError::GatewayTimeout("the upstream endpoint did not answer in time".into())
}

/// The upstream calls `weather` for Paris, its arguments split over two chunks.
fn weather_call(id: &str) -> FakeToolCall {
    FakeToolCall {
        id: id.into(),
        name: "weather".into(),
        arguments: vec!["{\"city\":".into(), "\"Paris\"}".into()],
    }
}

/// The tool-call pieces among `events`.
fn tool_calls(events: &[EngineEvent]) -> Vec<ToolCallChunk> {
    events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::ToolCall(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

/// Every item of a stream: the events, and the error that ended it.
async fn drain(mut stream: EventStream) -> (Vec<EngineEvent>, Option<EngineError>) {
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(e) => {
                assert!(stream.next().await.is_none(), "items after an error");
                return (events, Some(e));
            }
        }
    }
    (events, None)
}

fn text(events: &[EngineEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn finish(events: &[EngineEvent]) -> Option<(FinishReason, TokenUsage)> {
    match events.last() {
        Some(EngineEvent::Finish { reason, usage }) => Some((*reason, *usage)),
        _ => None,
    }
}

/// A whole successful generation.
async fn generate_ok(engine: &UpstreamEngine, prompt: &str) -> Vec<EngineEvent> {
    let stream = engine.generate(request(prompt)).await.unwrap();
    let (events, err) = drain(stream).await;
    assert_eq!(err, None, "{events:?}");
    events
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn text_and_usage_come_from_the_upstream_and_the_request_is_translated() {
    let fake = FakeUpstream::start().await;
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let mut req = request("hello there");
    req.sampling.seed = Some(42);
    req.stop = vec!["END".into()];
    req.tools = vec![ToolSpec {
        name: "weather".into(),
        description: None,
        parameters: json!({"type": "object"}),
    }];
    req.tool_choice = ToolChoiceSpec::Required;
    let (events, err) = drain(engine.generate(req).await.unwrap()).await;
    assert_eq!(err, None);
    assert_eq!(text(&events), "Echo: hello there");
    // The fake counts prompt words (2 + 2) and one token a piece (3).
    assert_eq!(
        finish(&events),
        Some((
            FinishReason::Stop,
            TokenUsage {
                prompt_tokens: 4,
                // The fake's count: the messages before the last.
                cached_tokens: 2,
                completion_tokens: 3,
                ..TokenUsage::default()
            }
        ))
    );
    let sent = fake.last_request().unwrap();
    assert_eq!(sent["model"], "their-model");
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        sent["messages"],
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}])
    );
    assert_eq!(sent["max_tokens"], 64);
    assert_eq!(sent["seed"], 42);
    assert_eq!(sent["stop"], json!(["END"]));
    assert_eq!(sent["tool_choice"], "required");
    assert_eq!(sent["tools"][0]["function"]["name"], "weather");
}

#[tokio::test]
async fn a_whole_request_gets_one_whole_reply_from_the_upstream() {
    let fake = FakeUpstream::start().await;
    fake.set_reply(Reply {
        reasoning: vec!["Think. ".into(), "Done.".into()],
        content: Some(vec!["Pa".into(), "ris".into()]),
        tool_calls: vec![weather_call("call_w1")],
        ..Reply::default()
    });
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let mut req = request("capital?");
    req.stream = false;
    req.reasoning = true;
    let (events, err) = drain(engine.generate(req).await.unwrap()).await;
    assert_eq!(err, None);
    let sent = fake.last_request().unwrap();
    assert_eq!(sent["stream"], false);
    assert!(sent.get("stream_options").is_none(), "{sent}");
    assert_eq!(
        events[..2],
        [
            EngineEvent::Reasoning("Think. Done.".into()),
            EngineEvent::Text("Paris".into()),
        ]
    );
    let calls = tool_calls(&events);
    assert_eq!(calls.len(), 1, "{events:?}");
    assert_eq!(calls[0].id.as_deref(), Some("call_w1"));
    assert_eq!(calls[0].arguments, "{\"city\":\"Paris\"}");
    // The fake counts prompt words (2 + 1) and one token a piece (2 + 2 + 3).
    assert_eq!(
        finish(&events),
        Some((
            FinishReason::ToolCalls,
            TokenUsage {
                prompt_tokens: 3,
                cached_tokens: 2,
                completion_tokens: 7,
                ..TokenUsage::default()
            }
        ))
    );
}

#[tokio::test]
async fn a_whole_request_waits_for_the_whole_timeout_and_is_retried_elsewhere() {
    let slow = FakeUpstream::start().await;
    let hung = FakeUpstream::start().await;
    // Slower than a first byte may take, within what a whole reply may.
    slow.set_behavior(Behavior::Delay(Duration::from_millis(550)));
    let engine = UpstreamEngine::new(vec![endpoint(&slow, 1)], options()).unwrap();
    let mut req = request("x");
    req.stream = false;
    let (events, err) = drain(engine.generate(req.clone()).await.unwrap()).await;
    assert_eq!((text(&events).as_str(), err), ("Echo: x", None));

    // A hung endpoint is given up on after the whole timeout, and the
    // request goes to the other one.
    let good = FakeUpstream::start().await;
    hung.set_behavior(Behavior::Hang);
    let engine = engine_first_preferred(&[&hung, &good], options());
    let start = Instant::now();
    let (events, err) = drain(engine.generate(req).await.unwrap()).await;
    assert_eq!((text(&events).as_str(), err), ("Echo: x", None));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(700) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert_eq!((hung.chat_requests(), good.chat_requests()), (1, 1));
}

#[tokio::test]
async fn connections_are_reused() {
    let fake = FakeUpstream::start().await;
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    for _ in 0..20 {
        generate_ok(&engine, "again").await;
    }
    // One for the requests, perhaps one more for the first health check.
    assert!(
        fake.connections() <= 2,
        "{} connections",
        fake.connections()
    );
}

#[tokio::test]
async fn reasoning_passes_only_for_reasoning_routes() {
    let fake = FakeUpstream::start().await;
    fake.set_reply(Reply {
        reasoning: vec!["Let me think. ".into(), "Done.".into()],
        vllm_reasoning: true,
        content: Some(vec!["Paris".into()]),
        ..Reply::default()
    });
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let mut thinking = request("capital?");
    thinking.reasoning = true;
    let (events, _) = drain(engine.generate(thinking).await.unwrap()).await;
    assert_eq!(
        events[..3],
        [
            EngineEvent::Reasoning("Let me think. ".into()),
            EngineEvent::Reasoning("Done.".into()),
            EngineEvent::Text("Paris".into()),
        ]
    );
    let events = generate_ok(&engine, "capital?").await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(text(&events), "Paris");
}

#[tokio::test]
async fn tool_calls_pass_through() {
    let fake = FakeUpstream::start().await;
    fake.set_reply(Reply {
        content: Some(Vec::new()),
        tool_calls: vec![weather_call("call_up1")],
        ..Reply::default()
    });
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let events = generate_ok(&engine, "weather?").await;
    let calls = tool_calls(&events);
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].index, 0);
    assert_eq!(calls[0].id.as_deref(), Some("call_up1"));
    assert_eq!(calls[0].name.as_deref(), Some("weather"));
    assert!(
        calls[1..]
            .iter()
            .all(|c| c.id.is_none() && c.name.is_none())
    );
    let args: String = calls.iter().map(|c| c.arguments.as_str()).collect();
    assert_eq!(args, "{\"city\":\"Paris\"}");
    assert_eq!(finish(&events).unwrap().0, FinishReason::ToolCalls);
}

#[tokio::test]
async fn usage_is_counted_when_the_upstream_reports_none() {
    let fake = FakeUpstream::start().await;
    fake.set_reply(Reply {
        content: Some(vec!["abcd".into(), "efgh".into()]),
        usage: false,
        ..Reply::default()
    });
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let (_, usage) = finish(&generate_ok(&engine, "hi").await).unwrap();
    assert_eq!(usage.completion_tokens, 2);
    assert!(usage.prompt_tokens > 0);
}

#[tokio::test]
async fn the_api_key_is_sent() {
    let fake = FakeUpstream::start().await;
    fake.require_key("sk-upstream");
    let mut with_key = endpoint(&fake, 1);
    with_key.api_key = Some(UpstreamKey::new("sk-upstream"));
    let engine = UpstreamEngine::new(vec![with_key], options()).unwrap();
    assert_eq!(text(&generate_ok(&engine, "hi").await), "Echo: hi");
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    // A 401 is this endpoint's misconfiguration, not the client's fault.
    assert_eq!(
        engine.generate(request("hi")).await.err(),
        Some(bad_response())
    );
}

#[tokio::test]
async fn failures_before_the_first_byte_are_retried_on_the_healthy_endpoint() {
    let cases = [
        Behavior::Status(500, "boom".into()),
        Behavior::Status(503, "loading".into()),
        Behavior::Status(429, "busy".into()),
        Behavior::Close,
        // Cut after the role chunk: no event had reached the caller.
        Behavior::DropAfter(0),
        Behavior::MalformedAfter(0),
        Behavior::Delay(Duration::from_millis(800)),
        Behavior::Hang,
    ];
    for behavior in cases {
        let bad = FakeUpstream::start().await;
        let good = FakeUpstream::start().await;
        bad.set_behavior(behavior.clone());
        let engine = engine_first_preferred(&[&bad, &good], options());
        let events = generate_ok(&engine, "still here").await;
        assert_eq!(text(&events), "Echo: still here", "{behavior:?}");
        assert_eq!(bad.chat_requests(), 1, "{behavior:?}");
        assert_eq!(good.chat_requests(), 1, "{behavior:?}");
    }
}

#[tokio::test]
async fn a_delay_within_the_first_byte_timeout_is_waited_for() {
    let fake = FakeUpstream::start().await;
    fake.set_behavior(Behavior::Delay(Duration::from_millis(200)));
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let start = Instant::now();
    assert_eq!(text(&generate_ok(&engine, "slow").await), "Echo: slow");
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert_eq!(fake.chat_requests(), 1);
}

#[tokio::test]
async fn a_failure_after_the_first_byte_ends_the_stream_with_an_error() {
    let bad = FakeUpstream::start().await;
    let good = FakeUpstream::start().await;
    bad.set_behavior(Behavior::DropAfter(2));
    let engine = engine_first_preferred(&[&bad, &good], options());
    let (events, err) = drain(engine.generate(request("one two three")).await.unwrap()).await;
    assert_eq!(text(&events), "Echo: one ");
    assert_eq!(err, Some(bad_response()));
    // Text had reached the caller: no retry elsewhere.
    assert_eq!(good.chat_requests(), 0);
}

#[tokio::test]
async fn malformed_sse_is_an_error() {
    let fake = FakeUpstream::start().await;
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    fake.push_behavior(Behavior::MalformedAfter(1));
    let (events, err) = drain(engine.generate(request("a b")).await.unwrap()).await;
    assert_eq!(text(&events), "Echo: ");
    assert_eq!(err, Some(bad_response()));
    // Before anything reached the caller, with nowhere else to go.
    fake.push_behavior(Behavior::MalformedAfter(0));
    assert_eq!(
        engine.generate(request("a b")).await.err(),
        Some(bad_response())
    );
}

#[tokio::test]
async fn a_hanging_upstream_hits_the_first_byte_and_idle_timeouts() {
    let fake = FakeUpstream::start().await;
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let timed_out = Some(timed_out());
    fake.push_behavior(Behavior::Hang);
    let start = Instant::now();
    assert_eq!(engine.generate(request("x")).await.err(), timed_out);
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    fake.push_behavior(Behavior::HangAfter(2));
    let start = Instant::now();
    let (events, err) = drain(engine.generate(request("x y z")).await.unwrap()).await;
    assert_eq!(text(&events), "Echo: x ");
    assert_eq!(err, timed_out);
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn a_refused_request_is_not_retried() {
    let bad = FakeUpstream::start().await;
    let good = FakeUpstream::start().await;
    let engine = engine_first_preferred(&[&bad, &good], options());
    bad.push_behavior(Behavior::Status(
        400,
        "This model's maximum context length is 100 tokens. However, your request has 150 input tokens.".into(),
    ));
    assert_eq!(
        engine.generate(request("long")).await.err(),
        Some(EngineError::ContextLengthExceeded {
            prompt_tokens: 150,
            context: 100
        })
    );
    bad.push_behavior(Behavior::Status(400, "stop: too many sequences".into()));
    assert_eq!(
        engine.generate(request("x")).await.err(),
        Some(EngineError::InvalidRequest {
            param: None,
            message: "stop: too many sequences".into()
        })
    );
    assert_eq!(good.chat_requests(), 0);
    assert_eq!(engine.endpoints()[0].breaker, "closed");
}

#[tokio::test]
async fn when_every_endpoint_fails_the_worst_failure_is_reported() {
    let a = FakeUpstream::start().await;
    let b = FakeUpstream::start().await;
    let engine = engine_first_preferred(&[&a, &b], options());
    a.push_behavior(Behavior::Status(429, "busy".into()));
    b.push_behavior(Behavior::Status(429, "busy".into()));
    assert!(matches!(
        engine.generate(request("x")).await.err(),
        Some(EngineError::Overloaded(_))
    ));
    a.push_behavior(Behavior::Status(429, "busy".into()));
    b.push_behavior(Behavior::Status(500, "boom".into()));
    assert_eq!(
        engine.generate(request("x")).await.err(),
        Some(bad_response())
    );
    a.kill().await;
    b.kill().await;
    assert_eq!(
        engine.generate(request("x")).await.err(),
        Some(EngineError::Unavailable(
            "no upstream endpoint could be reached".into()
        ))
    );
}

#[tokio::test]
async fn the_breaker_opens_after_repeated_failures_and_the_endpoint_is_skipped() {
    let bad = FakeUpstream::start().await;
    let good = FakeUpstream::start().await;
    bad.set_behavior(Behavior::Status(500, "boom".into()));
    let engine = engine_first_preferred(&[&bad, &good], options());
    for _ in 0..3 {
        generate_ok(&engine, "x").await;
    }
    assert_eq!(bad.chat_requests(), 3);
    assert_eq!(engine.endpoints()[0].breaker, "open");
    for _ in 0..5 {
        generate_ok(&engine, "x").await;
    }
    assert_eq!(bad.chat_requests(), 3, "an open breaker skips the endpoint");
    assert_eq!(good.chat_requests(), 8);
    // After the cool-down one trial goes through; it succeeds and closes.
    tokio::time::sleep(Duration::from_millis(350)).await;
    bad.set_behavior(Behavior::Normal);
    generate_ok(&engine, "x").await;
    assert_eq!(bad.chat_requests(), 4);
    assert_eq!(engine.endpoints()[0].breaker, "closed");
}

#[tokio::test]
async fn health_checks_mark_a_dead_endpoint_down_and_back_up() {
    let flaky = FakeUpstream::start().await;
    let good = FakeUpstream::start().await;
    flaky.set_models_status(503);
    let mut opts = options();
    opts.health_interval = Duration::from_millis(30);
    let engine = engine_first_preferred(&[&flaky, &good], opts);
    eventually("the endpoint is down", || !engine.endpoints()[0].healthy).await;
    let status = engine.status();
    assert_eq!(status.endpoints[0].url, flaky.base_url);
    assert!(!status.endpoints[0].healthy && status.endpoints[1].healthy);
    for _ in 0..3 {
        generate_ok(&engine, "x").await;
    }
    assert_eq!(flaky.chat_requests(), 0, "a down endpoint gets no requests");
    flaky.set_models_status(200);
    eventually("the endpoint is up", || engine.endpoints()[0].healthy).await;
    generate_ok(&engine, "x").await;
    assert_eq!(flaky.chat_requests(), 1);
    // A killed endpoint goes down too.
    flaky.kill().await;
    eventually("the killed endpoint is down", || {
        !engine.endpoints()[0].healthy
    })
    .await;
    assert!(good.models_requests() > 3);
}

#[tokio::test]
async fn dropping_the_stream_aborts_the_upstream_request() {
    let fake = FakeUpstream::start().await;
    fake.set_reply(Reply {
        content: Some((0..100).map(|i| format!("w{i} ")).collect()),
        chunk_delay: Duration::from_millis(20),
        ..Reply::default()
    });
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let mut stream = engine.generate(request("x")).await.unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(EngineEvent::Text(_)))
    ));
    assert_eq!(engine.endpoints()[0].outstanding, 1);
    drop(stream);
    assert_eq!(engine.endpoints()[0].outstanding, 0);
    eventually("the upstream saw the request go away", || {
        fake.cancelled() == 1
    })
    .await;
    assert_eq!(fake.completed(), 0);
}

#[tokio::test]
async fn a_killed_endpoint_loses_no_request_that_had_not_streamed() {
    let doomed = FakeUpstream::start().await;
    let survivor = FakeUpstream::start().await;
    let reply = Reply {
        content: Some((0..10).map(|i| format!("w{i} ")).collect()),
        chunk_delay: Duration::from_millis(30),
        ..Reply::default()
    };
    doomed.set_reply(reply.clone());
    survivor.set_reply(reply);
    // Two of the doomed endpoint's requests stream; the rest wait for
    // their first byte when it dies.
    doomed.push_behavior(Behavior::Normal);
    doomed.push_behavior(Behavior::Normal);
    doomed.set_behavior(Behavior::Delay(Duration::from_secs(10)));
    let mut opts = options();
    opts.first_byte_timeout = Duration::from_secs(3);
    let engine = Arc::new(
        UpstreamEngine::new(vec![endpoint(&doomed, 1), endpoint(&survivor, 1)], opts).unwrap(),
    );
    let run = |engine: Arc<UpstreamEngine>| {
        tokio::spawn(async move {
            let stream = engine.generate(request("x")).await.map_err(|e| (0, e))?;
            match drain(stream).await {
                (events, None) => Ok(text(&events)),
                (events, Some(e)) => Err((events.len(), e)),
            }
        })
    };
    let before: Vec<_> = (0..12).map(|_| run(engine.clone())).collect();
    eventually("both endpoints are busy", || {
        doomed.chat_requests() >= 6 && survivor.chat_requests() >= 6
    })
    .await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    doomed.kill().await;
    let after: Vec<_> = (0..6).map(|_| run(engine.clone())).collect();
    let mut ok = 0;
    let mut cut = 0;
    for task in before.into_iter().chain(after) {
        match task.await.unwrap() {
            Ok(text) => {
                assert_eq!(text.len(), 30);
                ok += 1;
            }
            Err((streamed, e)) => {
                assert!(streamed > 0, "a request failed before streaming: {e:?}");
                cut += 1;
            }
        }
    }
    assert_eq!(
        cut, 2,
        "only the streams under way on the killed endpoint fail"
    );
    assert_eq!(ok, 16);
}

#[tokio::test]
async fn logprobs_are_asked_for_and_n_above_one_is_refused() {
    let fake = FakeUpstream::start().await;
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let mut req = request("hello");
    req.logprobs = Some(3);
    let (_, err) = drain(engine.generate(req.clone()).await.unwrap()).await;
    assert_eq!(err, None);
    let sent = fake.last_request().unwrap();
    assert_eq!(sent["logprobs"], true);
    assert_eq!(sent["top_logprobs"], 3);
    // Not asked for: neither field is sent.
    generate_ok(&engine, "hello").await;
    let sent = fake.last_request().unwrap();
    assert!(sent.get("logprobs").is_none() && sent.get("top_logprobs").is_none());

    req.n = 2;
    let before = fake.chat_requests();
    let err = engine.generate(req).await.err();
    assert!(
        matches!(&err, Some(EngineError::InvalidRequest { param: Some(p), .. }) if p == "n"),
        "{err:?}"
    );
    assert_eq!(fake.chat_requests(), before, "nothing was sent upstream");
}

fn embed_request() -> EmbedRequest {
    EmbedRequest {
        inputs: vec![
            EmbedInput::Text("one two three".into()),
            EmbedInput::Tokens(vec![7, 8]),
        ],
        dimensions: Some(3),
        client: None,
        background: false,
    }
}

#[tokio::test]
async fn embeddings_pass_through_in_the_inputs_order() {
    let fake = FakeUpstream::start().await;
    fake.require_key("sk-up");
    let mut with_key = endpoint(&fake, 1);
    with_key.api_key = Some(UpstreamKey::new("sk-up"));
    let engine = UpstreamEngine::new(vec![with_key], options()).unwrap();
    let got = engine.embed(embed_request()).await.unwrap();
    assert_eq!(
        got.vectors,
        [
            fake_upstream_vector(&json!("one two three")),
            fake_upstream_vector(&json!([7, 8]))
        ]
    );
    // The fake counts 3 words and 2 ids (5), under svc's estimate: 4
    // tokens of 13 bytes, and 2 ids.
    assert_eq!(got.prompt_tokens, 6);
    assert_eq!(
        fake.last_request().unwrap(),
        json!({"model": "their-model", "input": ["one two three", [7, 8]], "encoding_format": "float", "dimensions": 3})
    );
}

#[tokio::test]
async fn embeddings_are_retried_elsewhere_and_a_refusal_is_not() {
    let (down, up) = (FakeUpstream::start().await, FakeUpstream::start().await);
    down.set_behavior(Behavior::Status(503, "loading".into()));
    let engine = engine_first_preferred(&[&down, &up], options());
    let got = engine.embed(embed_request()).await.unwrap();
    assert_eq!(got.vectors.len(), 2);
    assert_eq!(
        (down.embeddings_requests(), up.embeddings_requests()),
        (1, 1)
    );

    up.set_behavior(Behavior::Status(400, "dimensions is not supported".into()));
    down.set_behavior(Behavior::Status(400, "dimensions is not supported".into()));
    let refused = engine.embed(embed_request()).await.unwrap_err();
    assert!(
        matches!(refused, EngineError::InvalidRequest { .. }),
        "{refused:?}"
    );
    assert_eq!(
        down.embeddings_requests() + up.embeddings_requests(),
        3,
        "a 400 is not retried"
    );

    up.set_behavior(Behavior::Hang);
    down.set_behavior(Behavior::Close);
    let started = Instant::now();
    let failed = engine.embed(embed_request()).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            failed,
            EngineError::GatewayTimeout(_)
                | EngineError::BadGateway(_)
                | EngineError::Unavailable(_)
        ),
        "{failed:?}"
    );
}

fn rerank_request() -> RerankRequest {
    RerankRequest {
        query: "where do pandas live".into(),
        documents: vec![
            "bamboo grows where it rains".into(),
            "pandas live where bamboo grows".into(),
            "stocks fell".into(),
        ],
        client: None,
        background: false,
    }
}

// Issue 47: an upstream that reranks (vLLM, llama-server --rerank, any
// Jina/Cohere-shaped endpoint) is asked for every document's score, under
// its own model name, and its results come back in the documents' order.
#[tokio::test]
async fn rerank_passes_through_in_the_documents_order() {
    let fake = FakeUpstream::start().await;
    fake.require_key("sk-up");
    let mut with_key = endpoint(&fake, 1);
    with_key.api_key = Some(UpstreamKey::new("sk-up"));
    let engine = UpstreamEngine::new(vec![with_key], options()).unwrap();
    let request = rerank_request();
    let got = engine.rerank(request.clone()).await.unwrap();
    let expected: Vec<f32> = request
        .documents
        .iter()
        .map(|d| fake_relevance(&request.query, d))
        .collect();
    assert_eq!(got.scores, expected);
    assert!(got.scores[1] > got.scores[0] && got.scores[0] > got.scores[2]);
    // The fake counts a document's words plus 3 (24), under svc's
    // estimate: the query's 5 tokens for each document, and the
    // documents' 7, 8 and 3.
    assert_eq!(got.prompt_tokens, 5 * 3 + 7 + 8 + 3);
    assert_eq!(
        fake.last_request().unwrap(),
        json!({"model": "their-model", "query": "where do pandas live",
            "documents": ["bamboo grows where it rains", "pandas live where bamboo grows", "stocks fell"],
            "top_n": 3, "return_documents": false})
    );
    assert_eq!(fake.rerank_requests(), 1);

    // A failing endpoint is tried again elsewhere, a refusal is not.
    let (down, up) = (FakeUpstream::start().await, FakeUpstream::start().await);
    down.set_behavior(Behavior::Status(503, "loading".into()));
    let engine = engine_first_preferred(&[&down, &up], options());
    assert_eq!(
        engine.rerank(rerank_request()).await.unwrap().scores,
        expected
    );
    assert_eq!((down.rerank_requests(), up.rerank_requests()), (1, 1));
    up.set_behavior(Behavior::Status(400, "no such model".into()));
    down.set_behavior(Behavior::Status(400, "no such model".into()));
    let refused = engine.rerank(rerank_request()).await.unwrap_err();
    assert!(
        matches!(refused, EngineError::InvalidRequest { .. }),
        "{refused:?}"
    );
    assert_eq!(down.rerank_requests() + up.rerank_requests(), 3);
}

fn text_request(prompt: &str, suffix: Option<&str>, stream: bool) -> GenerateRequest {
    GenerateRequest {
        prompt: Some(TextPrompt {
            text: prompt.into(),
            suffix: suffix.map(str::to_owned),
            score: false,
        }),
        max_tokens: Some(16),
        stream,
        logprobs: Some(1),
        sampling: Sampling {
            seed: Some(7),
            ..Sampling::default()
        },
        stop: vec!["\n\n".into()],
        ..GenerateRequest::default()
    }
}

#[tokio::test]
async fn text_completions_go_to_the_completions_path_with_the_suffix() {
    let fake = FakeUpstream::start().await;
    let engine = engine_first_preferred(&[&fake], options());
    for stream in [true, false] {
        let events = engine
            .generate(text_request("def f(", Some("):"), stream))
            .await
            .unwrap();
        let (events, error) = drain(events).await;
        assert_eq!(error, None);
        assert_eq!(text(&events), "Fill: def f(|):");
        // The legacy log probabilities come back as svc's own, before their text.
        let logprobs: Vec<(String, f32, Vec<String>)> = events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::Logprobs(tokens) => Some(tokens.clone()),
                _ => None,
            })
            .flatten()
            .map(|t| {
                (
                    t.token,
                    t.logprob,
                    t.top.into_iter().map(|a| a.token).collect(),
                )
            })
            .collect();
        assert_eq!(logprobs.len(), 3, "{events:?}");
        assert_eq!(
            logprobs[0],
            ("Fill: ".into(), -0.25, vec!["Fill: ".into(), "alt".into()])
        );
        let (reason, usage) = finish(&events).unwrap();
        assert_eq!(reason, FinishReason::Stop);
        assert_eq!(usage.prompt_tokens, 2);
        assert_eq!(usage.completion_tokens, 3);
        let sent = fake.last_request().unwrap();
        assert_eq!(sent["model"], "their-model");
        assert_eq!(sent["prompt"], "def f(");
        assert_eq!(sent["suffix"], "):");
        assert_eq!(sent["logprobs"], 1);
        assert_eq!(sent["seed"], 7);
        assert_eq!(sent["stop"], json!(["\n\n"]));
        assert_eq!(sent["stream"], stream);
        assert!(sent.get("messages").is_none(), "{sent}");
    }
    assert_eq!(fake.completions_requests(), 2);
    assert_eq!(fake.chat_requests(), 0);
}

#[tokio::test]
async fn a_prompt_to_score_is_refused_naming_logprobs_before_the_upstream_is_asked() {
    let fake = FakeUpstream::start().await;
    let engine = engine_first_preferred(&[&fake], options());
    let mut request = text_request("The capital of France is", None, false);
    request.prompt.as_mut().unwrap().score = true;
    let Err(EngineError::InvalidRequest { param, .. }) = engine.generate(request).await else {
        panic!("an upstream model took a prompt to score");
    };
    assert_eq!(param.as_deref(), Some("logprobs"));
    assert_eq!(fake.completions_requests(), 0);
}

#[tokio::test]
async fn text_completions_are_retried_elsewhere_before_the_first_event() {
    let (down, up) = (FakeUpstream::start().await, FakeUpstream::start().await);
    down.set_behavior(Behavior::Status(503, "loading".into()));
    let engine = engine_first_preferred(&[&down, &up], options());
    let events = engine
        .generate(text_request("once upon", None, true))
        .await
        .unwrap();
    let (events, error) = drain(events).await;
    assert_eq!(error, None);
    assert_eq!(text(&events), "Echo: once upon");
    assert_eq!(
        (down.completions_requests(), up.completions_requests()),
        (1, 1)
    );
}

// Issue 61: an upstream's usage is charged only where it is above svc's
// estimate; one reporting 0 tokens was charged 0.
#[tokio::test]
async fn an_upstream_reporting_fewer_tokens_than_the_estimate_is_charged_the_estimate() {
    let fake = FakeUpstream::start().await;
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], options()).unwrap();
    let rerank = rerank_request();
    let embed = embed_request();
    for (reported, rerank_charged, embed_charged) in [
        (0, rerank.estimate_tokens(), 6),
        (1, rerank.estimate_tokens(), 6),
        (10_000, 10_000, 10_000),
    ] {
        fake.push_behavior(Behavior::ReportTokens(reported));
        let got = engine.rerank(rerank.clone()).await.unwrap();
        assert_eq!(
            got.prompt_tokens, rerank_charged,
            "rerank, {reported} reported"
        );
        fake.push_behavior(Behavior::ReportTokens(reported));
        let got = engine.embed(embed.clone()).await.unwrap();
        assert_eq!(
            got.prompt_tokens, embed_charged,
            "embeddings, {reported} reported"
        );
    }
}

/// What a connection may take in beyond what its reader read: the
/// sockets' buffers on both sides and the client's read buffer.
const IN_FLIGHT: u64 = 32 << 20;

/// [`options`] with time to read tens of megabytes in a debug build.
fn patient() -> UpstreamOptions {
    UpstreamOptions {
        whole_timeout: Duration::from_secs(60),
        first_byte_timeout: Duration::from_secs(60),
        health_timeout: Duration::from_secs(30),
        ..options()
    }
}

// Issue 61: a reply read whole was read to its end however long it was (a
// 256 MB rerank reply took svc from 169 MB to 875 MB). Past its kind's
// limit it is refused with a 502 naming the limit, and read no further.
#[tokio::test]
async fn a_reply_past_its_limit_is_a_502_naming_the_limit_and_read_no_further() {
    let (fake, other) = (FakeUpstream::start().await, FakeUpstream::start().await);
    let engine = engine_first_preferred(&[&fake, &other], patient());
    fake.push_behavior(Behavior::Padded {
        status: 200,
        bytes: 48 << 20,
    });
    let refused = engine.rerank(rerank_request()).await.unwrap_err();
    assert_eq!(
        refused,
        EngineError::BadGateway(
            "the upstream's reply passed the 16 MiB limit for rerank replies (rerank_reply_limit)"
                .into()
        )
    );
    eventually("the connection is closed", || fake.padded_cut() == 1).await;
    let sent = fake.padding_sent();
    assert!(sent < (16 << 20) + IN_FLIGHT, "{sent} bytes sent");
    // Another endpoint would be sent the same request, and answer as long.
    assert_eq!(other.rerank_requests(), 0);
    assert_eq!(engine.endpoints()[0].breaker, "closed");
    // A reply within the limit is read as before.
    fake.push_behavior(Behavior::Padded {
        status: 200,
        bytes: 8 << 20,
    });
    assert_eq!(
        engine.rerank(rerank_request()).await.unwrap().scores.len(),
        3
    );
}

#[tokio::test]
async fn each_kind_of_reply_has_its_own_limit() {
    let fake = FakeUpstream::start().await;
    let limited = UpstreamOptions {
        chat_reply_limit: 300 << 10,
        embeddings_reply_limit: 200 << 10,
        ..patient()
    };
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], limited).unwrap();
    let padded = Behavior::Padded {
        status: 200,
        bytes: 250 << 10,
    };
    fake.push_behavior(padded.clone());
    let refused = engine.embed(embed_request()).await.unwrap_err();
    assert_eq!(
        refused,
        EngineError::BadGateway(
            "the upstream's reply passed the 200 KiB limit for embeddings replies (embeddings_reply_limit)"
                .into()
        )
    );
    fake.push_behavior(padded);
    let mut whole = request("hi");
    whole.stream = false;
    let (events, error) = drain(engine.generate(whole.clone()).await.unwrap()).await;
    assert_eq!((text(&events).as_str(), error), ("Echo: hi", None));
    fake.push_behavior(Behavior::Padded {
        status: 200,
        bytes: 400 << 10,
    });
    let Err(refused) = engine.generate(whole).await else {
        panic!("a chat reply past its limit was read");
    };
    assert_eq!(
        refused,
        EngineError::BadGateway(
            "the upstream's reply passed the 300 KiB limit for whole chat replies (chat_reply_limit)"
                .into()
        )
    );
    let zero = UpstreamOptions {
        rerank_reply_limit: 0,
        ..options()
    };
    assert!(UpstreamEngine::new(vec![endpoint(&fake, 1)], zero).is_err());
}

// Issue 61: an error reply was read whole, however long, for a message of
// which 1,000 characters are kept.
#[tokio::test]
async fn of_an_error_reply_only_its_start_is_read() {
    let fake = FakeUpstream::start().await;
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], patient()).unwrap();
    fake.push_behavior(Behavior::Padded {
        status: 500,
        bytes: 64 << 20,
    });
    let failed = engine.rerank(rerank_request()).await.unwrap_err();
    assert_eq!(failed, bad_response());
    eventually("the connection is closed", || fake.padded_cut() == 1).await;
    let sent = fake.padding_sent();
    assert!(sent < (64 << 10) + IN_FLIGHT, "{sent} bytes sent");
    // A refusal's message is the start of what the upstream said.
    fake.push_behavior(Behavior::Padded {
        status: 400,
        bytes: 64 << 20,
    });
    let Err(EngineError::InvalidRequest { message, .. }) = engine.generate(request("hi")).await
    else {
        panic!("a 400 is a refusal");
    };
    assert!(
        message.starts_with(r#"{"pad":"xxx"#) && message.len() < 1_100,
        "{message}"
    );
    eventually("the connection is closed", || fake.padded_cut() == 2).await;
    let sent = fake.padding_sent() - sent;
    assert!(sent < (64 << 10) + IN_FLIGHT, "{sent} bytes sent");
}

// Issue 61: a 256 MB `GET /models` body took svc to 852 MB with no client
// request at all.
#[tokio::test]
async fn a_health_check_reads_no_more_than_its_limit() {
    let fake = FakeUpstream::start().await;
    fake.set_models_padding(64 << 20);
    let engine = UpstreamEngine::new(vec![endpoint(&fake, 1)], patient()).unwrap();
    eventually("the check closed the connection", || fake.padded_cut() == 1).await;
    let sent = fake.padding_sent();
    assert!(sent < (1 << 20) + IN_FLIGHT, "{sent} bytes sent");
    // The status is the verdict.
    assert!(engine.endpoints()[0].healthy);
}
