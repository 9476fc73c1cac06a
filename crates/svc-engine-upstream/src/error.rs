//! Why an attempt at an endpoint failed, and what the caller is told.
//!
//! The detail of a failure (the endpoint, the upstream's words) is logged,
//! never returned: the client only learns which kind of failure it was.
//! The exceptions: a request the upstream refused (a 400), whose message
//! is about the client's own request and is passed on, and a reply past
//! its size limit, whose message names svc's own limit and its key.

use serde_json::Value;
use svc_core::EngineError;

/// One attempt's failure, with a detail for the log.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// No connection could be opened.
    Unreachable(String),
    /// The endpoint said 429.
    Overloaded(String),
    /// No first byte in time, or too long between two chunks.
    Timeout(String),
    /// A 5xx or unexpected status, a body that is not a chat stream, or a
    /// connection that broke.
    BadResponse(String),
    /// The upstream refused the request itself: not the endpoint's fault,
    /// and another endpoint would refuse it too.
    Rejected(EngineError),
    /// A reply read whole passed its limit (`limit` bytes, set by the
    /// option `key`, on `what` replies) and was left unread there. Not
    /// retried: another endpoint of the model would most likely send the
    /// same reply to the same request, and it cannot count against an
    /// endpoint's breaker when a client's request can cause it.
    TooLarge {
        what: &'static str,
        key: &'static str,
        limit: usize,
    },
}

impl Failure {
    /// Whether another endpoint may be tried (when nothing was yielded
    /// yet), and whether it counts against this endpoint's breaker.
    pub fn retryable(&self) -> bool {
        !matches!(self, Failure::Rejected(_) | Failure::TooLarge { .. })
    }

    /// What the caller is told after this failure (the last or worst one).
    pub fn to_engine_error(&self) -> EngineError {
        match self {
            Failure::Unreachable(_) => {
                EngineError::Unavailable("no upstream endpoint could be reached".into())
            }
            Failure::Overloaded(_) => {
                EngineError::Overloaded("every upstream endpoint is busy".into())
            }
            Failure::Timeout(_) => {
                EngineError::GatewayTimeout("the upstream endpoint did not answer in time".into())
            }
            Failure::BadResponse(_) => {
                EngineError::BadGateway("the upstream endpoint sent a bad response".into())
            }
            Failure::Rejected(e) => e.clone(),
            Failure::TooLarge { what, key, limit } => EngineError::BadGateway(format!(
                "the upstream's reply passed the {} limit for {what} ({key})",
                size(*limit)
            )),
        }
    }

    /// How much this failure says about the service, for choosing what to
    /// report when every endpoint failed: a bad response (502) over a
    /// timeout (504) over busy (429) over unreachable (503).
    pub fn severity(&self) -> u8 {
        match self {
            Failure::Unreachable(_) => 0,
            Failure::Overloaded(_) => 1,
            Failure::Timeout(_) => 2,
            Failure::BadResponse(_) | Failure::TooLarge { .. } => 3,
            Failure::Rejected(_) => 4,
        }
    }
}

/// `bytes` as a person writes it: `64 MiB`, `512 KiB`, else in bytes.
fn size(bytes: usize) -> String {
    for (unit, name) in [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} bytes")
}

/// What the caller is told when no endpoint served the request.
pub fn exhausted(worst: Option<&Failure>) -> EngineError {
    match worst {
        Some(failure) => failure.to_engine_error(),
        None => EngineError::Unavailable("no upstream endpoint is available".into()),
    }
}

/// Longest upstream message passed on to a client.
const MAX_MESSAGE: usize = 1_000;

/// The fields of an upstream error body, in whichever dialect it came:
/// OpenAI `{"error":{...}}`, vLLM's flat `{"object":"error",...}`, TGI's
/// `{"error":"..."}`, or llama-server's `{"error":{..,"n_prompt_tokens","n_ctx"}}`.
#[derive(Debug, Default, PartialEq)]
struct UpstreamError {
    message: String,
    param: Option<String>,
    code: Option<String>,
    status: Option<u16>,
    kind: Option<String>,
    prompt_tokens: Option<u64>,
    context: Option<u64>,
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn parse_error(body: &str) -> UpstreamError {
    let Ok(json) = serde_json::from_str::<Value>(body) else {
        return UpstreamError {
            message: body.trim().to_owned(),
            ..UpstreamError::default()
        };
    };
    let obj = match json.get("error") {
        Some(inner @ Value::Object(_)) => inner,
        _ => &json,
    };
    let field = |name: &str| obj.get(name).and_then(text_of);
    let message = match json.get("error") {
        Some(Value::String(s)) => Some(s.clone()),
        _ => field("message").or_else(|| field("detail")),
    };
    UpstreamError {
        message: message.unwrap_or_else(|| body.trim().to_owned()),
        param: field("param"),
        code: field("code"),
        status: obj
            .get("code")
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok()),
        kind: field("type").or_else(|| field("error_type")),
        prompt_tokens: obj.get("n_prompt_tokens").and_then(Value::as_u64),
        context: obj.get("n_ctx").and_then(Value::as_u64),
    }
}

fn truncate(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// The number that follows `needle` in `hay` (both lower case).
fn number_after(hay: &str, needle: &str) -> Option<u64> {
    let start = hay.find(needle)? + needle.len();
    let digits: String = hay[start..]
        .chars()
        .skip_while(|c| *c == ' ')
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The number just before `needle` in `hay`.
fn number_before(hay: &str, needle: &str) -> Option<u64> {
    let end = hay.find(needle)?;
    let head = hay[..end].trim_end();
    let start = head
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    head[start..].parse().ok()
}

/// Maps an upstream's refusal of the request to the caller's error: a
/// prompt over the context becomes `ContextLengthExceeded` when the
/// numbers can be read, anything else `InvalidRequest` with the upstream's
/// message.
fn refusal(err: UpstreamError) -> EngineError {
    let lower = err.message.to_lowercase();
    let about_context = err.code.as_deref() == Some("context_length_exceeded")
        || err.kind.as_deref() == Some("exceed_context_size_error")
        || lower.contains("context length")
        || lower.contains("context size")
        || lower.contains("context window");
    if about_context {
        let context = err.context.or_else(|| {
            [
                "maximum context length is",
                "context length of",
                "context window of",
            ]
            .iter()
            .find_map(|n| number_after(&lower, n))
        });
        let prompt = err
            .prompt_tokens
            .or_else(|| number_after(&lower, "messages use"))
            .or_else(|| number_before(&lower, "in the messages"))
            .or_else(|| number_before(&lower, "input tokens"))
            .or_else(|| number_after(&lower, "messages resulted in"))
            .or_else(|| number_after(&lower, "prompt contains"));
        // Only a prompt that alone is too long; a prompt that fits with a
        // `max_tokens` that does not is the upstream's message as it is.
        if let (Some(context), Some(prompt_tokens)) = (context, prompt)
            && prompt_tokens >= context
        {
            return EngineError::ContextLengthExceeded {
                prompt_tokens,
                context,
            };
        }
    }
    let param = err
        .param
        .or_else(|| about_context.then(|| "messages".to_owned()));
    EngineError::InvalidRequest {
        param,
        message: truncate(err.message),
    }
}

/// The failure an HTTP status other than 2xx means, with its body.
pub fn from_status(status: u16, body: &str) -> Failure {
    match status {
        429 => Failure::Overloaded(format!("status 429: {}", truncate(body.to_owned()))),
        400 | 413 | 422 => Failure::Rejected(refusal(parse_error(body))),
        408 | 504 => Failure::Timeout(format!("status {status}: {}", truncate(body.to_owned()))),
        // 401/403/404 are this endpoint's configuration (key, model name),
        // which another endpoint may have right; 5xx is the endpoint's.
        _ => Failure::BadResponse(format!("status {status}: {}", truncate(body.to_owned()))),
    }
}

/// An error object sent inside an event stream (`data` is its JSON).
pub fn in_stream(data: &str) -> Failure {
    let err = parse_error(data);
    let client_fault = err
        .status
        .is_some_and(|s| (400..500).contains(&s) && s != 429)
        || err.kind.as_deref().is_some_and(|k| {
            k == "invalid_request_error"
                || k == "BadRequestError"
                || k == "exceed_context_size_error"
        });
    if client_fault {
        Failure::Rejected(refusal(err))
    } else if err.status == Some(429) {
        Failure::Overloaded(format!("error event: {}", truncate(err.message)))
    } else {
        Failure::BadResponse(format!("error event: {}", truncate(err.message)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(status: u16, body: &str) -> EngineError {
        match from_status(status, body) {
            Failure::Rejected(e) => e,
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn context_length_in_each_dialect() {
        let want = |p, c| EngineError::ContextLengthExceeded {
            prompt_tokens: p,
            context: c,
        };
        // Another svc (and OpenAI's wording).
        assert_eq!(
            rejected(
                400,
                r#"{"error":{"message":"this model's maximum context length is 2048 tokens, but the messages use 3000 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#
            ),
            want(3000, 2048)
        );
        // vLLM, recent.
        assert_eq!(
            rejected(
                400,
                r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}}"#
            ),
            want(5000, 4096)
        );
        // vLLM, older, flat.
        assert_eq!(
            rejected(
                400,
                r#"{"object":"error","message":"This model's maximum context length is 2048 tokens. However, you requested 2300 tokens (2200 in the messages, 100 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#
            ),
            want(2200, 2048)
        );
        // llama-server.
        assert_eq!(
            rejected(
                400,
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#
            ),
            want(9000, 8192)
        );
    }

    #[test]
    fn a_prompt_that_fits_keeps_the_upstream_message() {
        let msg = "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens (2000 in the messages, 100 in the completion).";
        let body = serde_json::json!({"object": "error", "message": msg, "code": 400}).to_string();
        assert_eq!(
            rejected(400, &body),
            EngineError::InvalidRequest {
                param: Some("messages".into()),
                message: msg.into()
            }
        );
    }

    #[test]
    fn other_refusals_and_statuses() {
        assert_eq!(
            rejected(
                422,
                r#"{"error":"Input validation error: `top_p` must be > 0","error_type":"validation"}"#
            ),
            EngineError::InvalidRequest {
                param: None,
                message: "Input validation error: `top_p` must be > 0".into()
            }
        );
        assert_eq!(
            rejected(400, "plain text"),
            EngineError::InvalidRequest {
                param: None,
                message: "plain text".into()
            }
        );
        let long = "x".repeat(5_000);
        let EngineError::InvalidRequest { message, .. } = rejected(400, &long) else {
            panic!()
        };
        assert!(message.len() < 1_100);
        assert!(matches!(from_status(429, ""), Failure::Overloaded(_)));
        assert!(matches!(from_status(504, ""), Failure::Timeout(_)));
        for status in [401, 404, 500, 502, 503] {
            assert!(
                matches!(from_status(status, ""), Failure::BadResponse(_)),
                "{status}"
            );
        }
    }

    #[test]
    fn a_reply_past_its_limit_names_the_limit_and_is_not_retried() {
        let failure = Failure::TooLarge {
            what: "rerank replies",
            key: "rerank_reply_limit",
            limit: 16 << 20,
        };
        assert!(!failure.retryable());
        assert_eq!(
            failure.to_engine_error(),
            EngineError::BadGateway(
                "the upstream's reply passed the 16 MiB limit for rerank replies (rerank_reply_limit)"
                    .into()
            )
        );
        assert_eq!(size(1000), "1000 bytes");
        assert_eq!(size(3 << 10), "3 KiB");
        assert_eq!(size((1 << 20) + 1), "1048577 bytes");
    }

    #[test]
    fn the_worst_failure_is_reported() {
        assert_eq!(
            exhausted(None),
            EngineError::Unavailable("no upstream endpoint is available".into())
        );
        let busy = Failure::Overloaded(String::new());
        assert!(matches!(exhausted(Some(&busy)), EngineError::Overloaded(_)));
        assert!(Failure::BadResponse(String::new()).severity() > busy.severity());
        assert!(busy.severity() > Failure::Unreachable(String::new()).severity());
    }
}
