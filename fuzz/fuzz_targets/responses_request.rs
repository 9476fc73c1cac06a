//! `POST /v1/responses` bodies: svc-server's JSON parsing, then its
//! validation into a generation request (with no earlier conversation).
//! Neither may panic; every error names a request field as its `param` (or
//! none, for a body that is not JSON at all); what passes is in range.
#![no_main]
#![expect(
    clippy::panic,
    reason = "a target panics on a broken invariant: that is what libFuzzer reports"
)]

use libfuzzer_sys::fuzz_target;
use svc_api::CreateResponseRequest;
use svc_core::limits::MAX_TOOLS;
use svc_core::{ChatMessage, ValidationError};
use svc_server::ApiError;
use svc_server::fuzzing::{ValidResponseRequest, parse_json};

/// The top-level fields of a Responses request (what a `param` starts with).
const REQUEST_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_output_tokens",
    "temperature",
    "top_p",
    "text",
    "reasoning",
    "metadata",
    "user",
    "include",
    "prompt_cache_key",
    "store",
    "previous_response_id",
    "stream",
];

fn names_request_field(param: &str) -> bool {
    let root = param.split(['.', '[']).next().unwrap_or_default();
    REQUEST_FIELDS.contains(&root)
}

fn check(error: &ValidationError) {
    assert!(!error.message.is_empty());
    assert!(
        names_request_field(&error.param),
        "param {:?} names no request field ({})",
        error.param,
        error.message
    );
}

fuzz_target!(|data: &[u8]| {
    let request: CreateResponseRequest = match parse_json(data) {
        Ok(request) => request,
        Err(ApiError::InvalidBody { param, message }) => {
            assert!(!message.is_empty());
            if let Some(param) = param {
                assert!(
                    names_request_field(&param),
                    "param {param:?} names no request field ({message})"
                );
            }
            return;
        }
        Err(other) => panic!("a body parse failed as {other:?}"),
    };
    let valid = match ValidResponseRequest::try_from(request) {
        Ok(valid) => valid,
        Err(error) => return check(&error),
    };
    assert!(!valid.model.trim().is_empty());
    let g = &valid.generate;
    assert!((0.0..=2.0).contains(&g.sampling.temperature));
    assert!((0.0..=1.0).contains(&g.sampling.top_p));
    assert!(g.max_tokens.is_none_or(|n| n >= 1));
    assert!(g.tools.len() <= MAX_TOOLS);
    match valid.assemble(&[]) {
        Err(error) => check(&error),
        Ok(g) => assert!(
            g.messages
                .iter()
                .any(|m| !matches!(m, ChatMessage::System(_)))
        ),
    }
    // The response object it would start from serializes.
    assert!(serde_json::to_string(&valid.response("resp_x".into(), 0)).is_ok());
});
