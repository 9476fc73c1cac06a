//! Real chat templates (issue 45): every model family's template, as its
//! GGUF ships it (`tests/templates/*.jinja`, from llama.cpp's
//! `models/templates`), rendered by svc on every conversation of
//! `tests/templates/conversations.json` (tools, tool calls and results,
//! reasoning history, template variables), must give byte for byte what
//! Hugging Face transformers' `apply_chat_template` gives
//! (`tests/templates/expected.json`, written by `tests/templates/render.py`),
//! and fail where it fails.
//!
//! A pair that cannot match is listed in the fixture's `known_differences`
//! with its reason; the test fails when such a pair matches again, so the
//! list stays true.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a fixture that does not read right fails the test"
)]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use chrono::NaiveDateTime;
use serde_json::{Map, Value as Json};
use svc_core::engine::{ChatMessage, EngineError, ToolCallSpec, ToolSpec};
use svc_engine_llama::{ChatTemplate, RenderOptions};

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/templates")
}

fn read_json(name: &str) -> Json {
    let path = folder().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn text<'j>(value: &'j Json, key: &str) -> &'j str {
    value
        .get(key)
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("no string {key:?} in {value}"))
}

fn objects<'j>(value: &'j Json, key: &str) -> &'j [Json] {
    value
        .get(key)
        .and_then(Json::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A fixture message (OpenAI's shape) as svc receives it.
fn message(m: &Json) -> ChatMessage {
    let content = m.get("content").and_then(Json::as_str).map(str::to_owned);
    match text(m, "role") {
        "system" => ChatMessage::System(content.unwrap()),
        "user" => ChatMessage::User(content.unwrap()),
        "assistant" => ChatMessage::Assistant {
            content,
            tool_calls: objects(m, "tool_calls")
                .iter()
                .map(|call| {
                    let function = &call["function"];
                    ToolCallSpec {
                        id: text(call, "id").to_owned(),
                        name: text(function, "name").to_owned(),
                        // Clients send the arguments as JSON text.
                        arguments: serde_json::to_string(&function["arguments"]).unwrap(),
                    }
                })
                .collect(),
            reasoning: m
                .get("reasoning_content")
                .and_then(Json::as_str)
                .map(str::to_owned),
        },
        "tool" => ChatMessage::Tool {
            tool_call_id: text(m, "tool_call_id").to_owned(),
            content: content.unwrap(),
        },
        other => panic!("no such role in svc: {other}"),
    }
}

fn tool(t: &Json) -> ToolSpec {
    let function = &t["function"];
    ToolSpec {
        name: text(function, "name").to_owned(),
        description: function
            .get("description")
            .and_then(Json::as_str)
            .map(str::to_owned),
        parameters: function["parameters"].clone(),
    }
}

/// Where two renderings part: the first differing line of each, with its number.
fn first_difference(expected: &str, actual: &str) -> String {
    let (mut e, mut a) = (expected.split_inclusive('\n'), actual.split_inclusive('\n'));
    for line in 1.. {
        match (e.next(), a.next()) {
            (Some(x), Some(y)) if x == y => {}
            (None, None) => break,
            (x, y) => {
                return format!(
                    "first difference at line {line}:\n      transformers: {}\n      svc:          {}",
                    x.map_or("(end of text)".to_owned(), |x| format!("{x:?}")),
                    y.map_or("(end of text)".to_owned(), |y| format!("{y:?}")),
                );
            }
        }
    }
    "no difference".to_owned()
}

/// What went wrong with one pair, or `None` when svc agrees with transformers.
fn check(expected: &Json, actual: &Result<String, EngineError>) -> Option<String> {
    match (expected.get("output").and_then(Json::as_str), actual) {
        (Some(want), Ok(got)) if want == got => None,
        (Some(want), Ok(got)) => Some(first_difference(want, got)),
        (Some(_), Err(e)) => Some(format!("svc failed where transformers renders: {e}")),
        (None, Ok(got)) => Some(format!(
            "svc rendered where transformers fails ({}); svc wrote {} bytes:\n{got}",
            expected["error"],
            got.len()
        )),
        (None, Err(EngineError::InvalidRequest { message, .. })) => {
            let error = &expected["error"];
            // A template's own raise_exception: the client reads its message.
            let wanted = text(error, "message");
            if text(error, "kind") == "raise_exception" && !message.contains(wanted) {
                Some(format!("svc's error does not say {wanted:?}: {message}"))
            } else {
                None
            }
        }
        (None, Err(e)) => Some(format!("not a client error (400): {e:?}")),
    }
}

#[test]
fn real_templates_render_as_transformers_renders_them() {
    let fixture = read_json("conversations.json");
    let expected = read_json("expected.json");
    let now: NaiveDateTime = text(&fixture, "now").parse().unwrap();
    assert_eq!(text(&expected, "now"), text(&fixture, "now"));
    let pairs_of = &expected["pairs"];
    let known: BTreeSet<(&str, &str)> = objects(&fixture, "known_differences")
        .iter()
        .flat_map(|d| {
            assert!(!text(d, "reason").is_empty(), "{d}");
            let template = text(d, "template");
            objects(d, "conversations").iter().map(move |c| {
                let conversation = c.as_str().unwrap();
                assert!(
                    pairs_of[template].get(conversation).is_some(),
                    "known difference {template} × {conversation} is not a pair"
                );
                (template, conversation)
            })
        })
        .collect();

    let (mut matched, mut skipped, mut failures) = (0, 0, String::new());
    for template in objects(&fixture, "templates") {
        let file = text(template, "file");
        let source = std::fs::read_to_string(folder().join(file)).unwrap();
        let chat = ChatTemplate::new(
            Some(&source),
            text(template, "bos_token"),
            text(template, "eos_token"),
        );
        assert!(chat.is_from_model(), "{file}: minijinja cannot compile it");
        let pairs = &pairs_of[file];
        for conversation in objects(&fixture, "conversations") {
            let name = text(conversation, "name");
            let variables: Map<String, Json> = conversation
                .get("variables")
                .and_then(Json::as_object)
                .cloned()
                .unwrap_or_default();
            // render.py's rule: variables only for the templates that read them.
            if !variables.keys().all(|v| source.contains(v.as_str())) {
                assert!(pairs.get(name).is_none(), "{file} × {name}: not a pair");
                continue;
            }
            let want = pairs
                .get(name)
                .unwrap_or_else(|| panic!("{file} × {name}: missing from expected.json"));
            let messages: Vec<ChatMessage> = objects(conversation, "messages")
                .iter()
                .map(message)
                .collect();
            let tools: Vec<ToolSpec> = objects(conversation, "tools").iter().map(tool).collect();
            let options = RenderOptions {
                add_generation_prompt: conversation["add_generation_prompt"].as_bool().unwrap(),
                extra: variables,
                now: Some(now),
            };
            let got = chat.render_with(&messages, &tools, &options);
            let problem = check(want, &got);
            if known.contains(&(file, name)) {
                skipped += 1;
                if problem.is_none() {
                    writeln!(
                        failures,
                        "{file} × {name}: listed in known_differences but now matches: remove it"
                    )
                    .unwrap();
                }
            } else if let Some(problem) = problem {
                writeln!(failures, "{file} × {name}: {problem}").unwrap();
            } else {
                matched += 1;
            }
        }
    }
    eprintln!("{matched} pairs as transformers renders them, {skipped} known differences");
    assert!(failures.is_empty(), "\n{failures}");
    assert!(matched > 0);
}

/// The largest conversation a request may bring (issue 61): every real
/// template renders [`MAX_MESSAGES`] messages of tool calls and results and
/// [`MAX_TOOLS`] tools within its step and output limits (Command R7B's
/// takes 22 million steps: it reads the whole conversation at each message).
#[test]
fn real_templates_render_the_largest_requests_within_their_limits() {
    use svc_core::limits::{MAX_MESSAGES, MAX_TOOLS};

    let fixture = read_json("conversations.json");
    let conversation = objects(&fixture, "conversations")
        .iter()
        .find(|c| text(c, "name") == "two_tool_calls")
        .unwrap();
    // system, then (user, call, result, result, answer) again and again, then user.
    let few: Vec<ChatMessage> = objects(conversation, "messages")
        .iter()
        .map(message)
        .collect();
    let (system, turn, last) = (&few[0], &few[1..6], &few[6]);
    let mut messages = vec![system.clone()];
    while messages.len() + turn.len() < MAX_MESSAGES {
        messages.extend_from_slice(turn);
    }
    messages.push(last.clone());
    let offered: Vec<ToolSpec> = objects(conversation, "tools").iter().map(tool).collect();
    let tools: Vec<ToolSpec> = (0..MAX_TOOLS)
        .map(|i| {
            let mut tool = offered[i % offered.len()].clone();
            if i >= offered.len() {
                tool.name = format!("{}_{i}", tool.name);
            }
            tool
        })
        .collect();

    let (mut rendered, mut failures) = (0, String::new());
    for template in objects(&fixture, "templates") {
        let file = text(template, "file");
        let source = std::fs::read_to_string(folder().join(file)).unwrap();
        let chat = ChatTemplate::new(
            Some(&source),
            text(template, "bos_token"),
            text(template, "eos_token"),
        );
        let small = chat.render_with(&few, &offered, &RenderOptions::default());
        let large = chat.render_with(&messages, &tools, &RenderOptions::default());
        match (small, large) {
            (Ok(_), Ok(_)) => rendered += 1,
            // A template that refuses the conversation refuses it at any size.
            (Err(_), Err(EngineError::InvalidRequest { .. })) => {}
            (_, large) => writeln!(failures, "{file}: {:?}", large.map(|text| text.len())).unwrap(),
        }
    }
    assert!(failures.is_empty(), "\n{failures}");
    assert!(rendered >= 15, "{rendered}");
}
