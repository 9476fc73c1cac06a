//! `POST /v1/chat/completions` bodies: svc-server's JSON parsing, then
//! its validation into a generation request. Neither may panic; every
//! error names a request field as its `param` (or none, for a body that is
//! not JSON at all); what passes is in range.
#![no_main]
#![expect(
    clippy::panic,
    reason = "a target panics on a broken invariant: that is what libFuzzer reports"
)]

mod common;

use libfuzzer_sys::fuzz_target;
use svc_api::ChatCompletionRequest;
use svc_core::ValidationError;
use svc_core::engine::OutputFormat;
use svc_core::limits::MAX_TOOLS;
use svc_server::ApiError;
use svc_server::fuzzing::{MAX_STOP_SEQUENCES, ValidChatRequest, parse_json};

fuzz_target!(|data: &[u8]| {
    let request: ChatCompletionRequest = match parse_json(data) {
        Ok(request) => request,
        Err(ApiError::InvalidBody { param, message }) => {
            assert!(!message.is_empty());
            if let Some(param) = param {
                assert!(
                    common::names_request_field(&param),
                    "param {param:?} names no request field ({message})"
                );
            }
            return;
        }
        Err(other) => panic!("a body parse failed as {other:?}"),
    };
    match ValidChatRequest::try_from(request) {
        Err(ValidationError { param, message }) => {
            assert!(!message.is_empty());
            assert!(
                common::names_request_field(&param),
                "param {param:?} names no request field ({message})"
            );
        }
        Ok(valid) => {
            let g = &valid.generate;
            assert!(!valid.model.trim().is_empty());
            assert!(!g.messages.is_empty());
            assert!((0.0..=2.0).contains(&g.sampling.temperature));
            assert!((0.0..=1.0).contains(&g.sampling.top_p));
            assert!((-2.0..=2.0).contains(&g.sampling.presence_penalty));
            assert!((-2.0..=2.0).contains(&g.sampling.frequency_penalty));
            assert!(g.max_tokens.is_none_or(|n| n >= 1));
            assert!(g.stop.len() <= MAX_STOP_SEQUENCES);
            assert!(g.tools.len() <= MAX_TOOLS);
            if let OutputFormat::JsonSchema { schema, .. } = &g.output {
                assert!(schema.is_object() || schema.is_boolean(), "schema {schema}");
            }
        }
    }
});
