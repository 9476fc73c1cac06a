//! A batch's input file, line by line: each line one request
//! (`{"custom_id", "method": "POST", "url", "body"}`), checked as the file
//! arrives, so that a wrong line is refused with its number before the
//! file is kept.

use std::collections::HashMap;
use std::sync::Arc;

use svc_api::batches::BatchInputLine;

/// The most requests one batch file holds (OpenAI's limit).
pub(crate) const MAX_LINES: usize = 50_000;

/// The longest `custom_id`.
const MAX_CUSTOM_ID: usize = 512;

/// A line that is not a request a batch can run: its number (from 1) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Checks a file's lines as its bytes arrive.
#[derive(Debug, Clone)]
pub(crate) struct Checker {
    /// The longest line (the request body limit, with room for the line's
    /// own fields).
    max_line: usize,
    /// The paths a line may call (the endpoints that say batches may).
    callable: Arc<[&'static str]>,
    /// Bytes of the line not yet ended.
    partial: Vec<u8>,
    /// Lines seen (ended), blank ones included.
    line: usize,
    /// Requests seen.
    requests: usize,
    /// Each `custom_id` and the line it is on.
    seen: HashMap<String, usize>,
}

impl Checker {
    pub(crate) fn new(max_line: usize, callable: Arc<[&'static str]>) -> Self {
        Checker {
            max_line,
            callable,
            partial: Vec::new(),
            line: 0,
            requests: 0,
            seen: HashMap::new(),
        }
    }

    /// Takes the next bytes of the file.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) -> Result<(), LineError> {
        while let Some(end) = bytes.iter().position(|b| *b == b'\n') {
            self.partial.extend_from_slice(&bytes[..end]);
            bytes = &bytes[end + 1..];
            let line = std::mem::take(&mut self.partial);
            self.check(&line)?;
        }
        self.partial.extend_from_slice(bytes);
        if self.partial.len() > self.max_line {
            return Err(LineError {
                line: self.line + 1,
                message: format!(
                    "the line is longer than {} bytes (the request body limit)",
                    self.max_line
                ),
            });
        }
        Ok(())
    }

    /// The file ended: how many requests it holds (at least one).
    pub(crate) fn finish(mut self) -> Result<usize, LineError> {
        let last = std::mem::take(&mut self.partial);
        self.check(&last)?;
        if self.requests == 0 {
            return Err(LineError {
                line: 1,
                message: "the file holds no request (one JSON object a line)".into(),
            });
        }
        Ok(self.requests)
    }

    fn check(&mut self, line: &[u8]) -> Result<(), LineError> {
        self.line += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let at = self.line;
        let request =
            parse(line, &self.callable).map_err(|message| LineError { line: at, message })?;
        self.requests += 1;
        if self.requests > MAX_LINES {
            return Err(LineError {
                line: at,
                message: format!("a batch holds at most {MAX_LINES} requests"),
            });
        }
        if let Some(first) = self.seen.insert(request.custom_id.clone(), at) {
            return Err(LineError {
                line: at,
                message: format!(
                    "custom_id `{}` is also on line {first}; each request's must be unique",
                    request.custom_id
                ),
            });
        }
        Ok(())
    }
}

/// One line read as a request a batch can run (calling one of `callable`),
/// or why not.
pub(crate) fn parse(line: &[u8], callable: &[&str]) -> Result<BatchInputLine, String> {
    let request: BatchInputLine = serde_json::from_slice(line).map_err(|e| {
        format!(
            "not a request line ({e}); each line must be {{\"custom_id\": ..., \"method\": \"POST\", \"url\": ..., \"body\": {{...}}}}"
        )
    })?;
    if request.custom_id.is_empty() || request.custom_id.len() > MAX_CUSTOM_ID {
        return Err(format!(
            "custom_id must have 1 to {MAX_CUSTOM_ID} characters"
        ));
    }
    if request.method != "POST" {
        return Err(format!("method must be POST, not `{}`", request.method));
    }
    if !callable.contains(&request.url.as_str()) {
        return Err(format!(
            "url `{}` is not an endpoint a batch can call ({})",
            request.url,
            callable.join(", ")
        ));
    }
    if !request
        .body
        .get("model")
        .is_some_and(serde_json::Value::is_string)
    {
        return Err("body.model must name a model".into());
    }
    if request
        .body
        .get("stream")
        .is_some_and(|s| s != &serde_json::Value::Bool(false) && !s.is_null())
    {
        return Err("body.stream is not supported in a batch (each answer is kept whole)".into());
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<usize, LineError> {
        let mut checker = Checker::new(1_000, Arc::from(["/v1/chat/completions"]));
        // Fed in small pieces, as a network would.
        for piece in text.as_bytes().chunks(7) {
            checker.feed(piece)?;
        }
        checker.finish()
    }

    const GOOD: &str = r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}"#;

    #[test]
    fn good_lines_are_counted_whatever_the_line_ends() {
        let two = format!("{GOOD}\n{}\n", GOOD.replace("\"a\"", "\"b\""));
        assert_eq!(check(&two), Ok(2));
        assert_eq!(check(two.trim_end()), Ok(2), "no newline at the end");
        assert_eq!(check(&format!("\n{GOOD}\n\n")), Ok(1), "blank lines");
    }

    #[test]
    fn a_wrong_line_is_named() {
        let cases = [
            (format!("{GOOD}\nnot json"), 2, "not a request line"),
            (format!("{GOOD}\n{GOOD}"), 2, "also on line 1"),
            (GOOD.replace("POST", "GET"), 1, "method must be POST"),
            (
                GOOD.replace("/v1/chat/completions", "/v1/models"),
                1,
                "is not an endpoint",
            ),
            (GOOD.replace("\"model\":\"m\",", ""), 1, "body.model"),
            (
                GOOD.replace("\"model\":\"m\"", "\"model\":\"m\",\"stream\":true"),
                1,
                "stream",
            ),
            (GOOD.replace("\"a\"", "\"\""), 1, "custom_id"),
            (
                GOOD.replace("\"body\"", "\"extra\":1,\"body\""),
                1,
                "unknown field",
            ),
            (String::new(), 1, "no request"),
            (format!("{GOOD}\n{}", "x".repeat(2_000)), 2, "longer than"),
        ];
        for (text, line, message) in cases {
            let error = check(&text).unwrap_err();
            assert_eq!(error.line, line, "{text}: {error}");
            assert!(error.message.contains(message), "{text}: {error}");
        }
    }
}
