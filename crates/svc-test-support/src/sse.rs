//! A strict reader of Server-Sent Events as svc frames them, for tests.

use serde_json::Value;

/// One `data:` event: its raw payload and, unless it is `[DONE]`, its JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub data: String,
    pub json: Option<Value>,
}

/// Splits a whole SSE body into events, panicking on anything but
/// `data: <payload>\n\n` frames (the framing svc promises).
pub fn read_sse(body: &str) -> Vec<SseEvent> {
    assert!(
        body.ends_with("\n\n"),
        "stream does not end with a blank line: {body:?}"
    );
    body[..body.len() - 2]
        .split("\n\n")
        .map(|frame| {
            let data = frame
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("frame without `data: ` prefix: {frame:?}"));
            assert!(!data.contains('\n'), "multi-line frame: {frame:?}");
            let json = (data != "[DONE]").then(|| {
                serde_json::from_str(data).unwrap_or_else(|e| panic!("bad JSON {data:?}: {e}"))
            });
            SseEvent {
                data: data.to_owned(),
                json,
            }
        })
        .collect()
}
