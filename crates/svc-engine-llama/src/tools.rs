//! Tools: putting the functions into the prompt for templates that do not
//! render `tools` themselves (a Hermes-style system block), rewriting tool
//! calls and tool results in the history for templates that do not know
//! them, and parsing the model's tool calls out of its streamed output.
//!
//! The call format is Hermes' (Qwen2.5, SmolLM2, NousHermes and most
//! ChatML models): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use svc_core::engine::{ChatMessage, ToolSpec};

use crate::markup::{held_before_tags, partial_tag_len};
use crate::reasoning::with_system_note;

/// Opens a tool call.
pub(crate) const CALL_OPEN: &str = "<tool_call>";
/// Closes it.
pub(crate) const CALL_CLOSE: &str = "</tool_call>";

/// What a chat template knows of tools, read from its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ToolSupport {
    /// It renders the `tools` variable.
    pub(crate) tools: bool,
    /// It renders assistant messages' `tool_calls`.
    pub(crate) tool_calls: bool,
    /// It renders messages of the `tool` role.
    pub(crate) tool_role: bool,
}

impl ToolSupport {
    /// What `source` (a chat template) handles.
    pub(crate) fn of(source: &str) -> Self {
        ToolSupport {
            tools: source.contains("tools"),
            tool_calls: source.contains("tool_calls"),
            tool_role: source.contains("'tool'") || source.contains("\"tool\""),
        }
    }
}

/// The Hermes-style system block that lists `tools` and says how to call them
/// (Qwen2.5's wording).
pub(crate) fn system_block(tools: &[ToolSpec]) -> String {
    let mut block = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for tool in tools {
        block.push('\n');
        block.push_str(&tool_json(tool));
    }
    block.push_str("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
    block
}

/// A tool in OpenAI's shape, keys in OpenAI's order.
fn tool_json(tool: &ToolSpec) -> String {
    let mut function = format!("{{\"name\": {}", Value::String(tool.name.clone()));
    if let Some(description) = &tool.description {
        function.push_str(&format!(
            ", \"description\": {}",
            Value::String(description.clone())
        ));
    }
    function.push_str(&format!(", \"parameters\": {}}}", tool.parameters));
    format!("{{\"type\": \"function\", \"function\": {function}}}")
}

/// The messages to render: the history rewritten for what the template
/// cannot show (tool calls as `<tool_call>` text in the assistant's content,
/// tool results as user `<tool_response>` messages), and, when `tools` are
/// offered and the template does not render them, the system block.
pub(crate) fn prepare_messages(
    messages: &[ChatMessage],
    tools: &[ToolSpec],
    support: ToolSupport,
) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = messages
        .iter()
        .map(|message| match message {
            ChatMessage::Assistant {
                content,
                tool_calls,
                reasoning,
            } if !tool_calls.is_empty() && !support.tool_calls => {
                let mut text = content.clone().unwrap_or_default();
                for call in tool_calls {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    let arguments = match serde_json::from_str::<Value>(&call.arguments) {
                        Ok(_) => call.arguments.trim().to_owned(),
                        Err(_) => Value::String(call.arguments.clone()).to_string(),
                    };
                    text.push_str(&format!(
                        "{CALL_OPEN}\n{{\"name\": {}, \"arguments\": {arguments}}}\n{CALL_CLOSE}",
                        Value::String(call.name.clone())
                    ));
                }
                ChatMessage::Assistant {
                    content: Some(text),
                    tool_calls: Vec::new(),
                    reasoning: reasoning.clone(),
                }
            }
            ChatMessage::Tool { content, .. } if !support.tool_role => {
                ChatMessage::User(format!("<tool_response>\n{content}\n</tool_response>"))
            }
            other => other.clone(),
        })
        .collect();
    if !tools.is_empty() && !support.tools {
        out = with_system_note(&out, &system_block(tools));
    }
    out
}

/// What the parser found in the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// Reply text.
    Text(String),
    /// A complete, valid call of a known function; `arguments` is a JSON object's text.
    Call { name: String, arguments: String },
    /// A call of a known function starts; its arguments follow as `Args`.
    CallStart { name: String },
    /// The next piece of the arguments of the call that started last.
    Args(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing visible yet: the output may turn out to be a bare JSON call.
    Start,
    /// Reply text, outside any call.
    Text,
    /// Inside `<tool_call>`, before it is known whether the block streams.
    Call,
    /// Inside a streamed call's arguments object.
    Args(ArgsScan),
    /// After a streamed call's arguments, up to `</tool_call>` (dropped).
    Tail,
    /// The output started with `{` or `[`: held whole until the end.
    Bare,
}

/// Parses streamed output into text and tool calls.
///
/// - Text outside `<tool_call>…</tool_call>` blocks is sent as it comes,
///   except an end that may still become `<tool_call>` (and the whitespace
///   before it), so no markup ever reaches the client.
/// - A block that starts `{"name": <a function offered>, "arguments": {`
///   (`parameters` is accepted for `arguments`; any whitespace between the
///   tokens) streams: the call starts as soon as that much is written, and
///   the arguments object follows piece by piece as it decodes, up to its
///   closing brace (or `</tool_call>` outside its strings, or the end of the
///   output: a call cut off by `max_tokens` keeps what was written); inside
///   a string, `</tool_call>` and braces are the string's, as a grammar and
///   a JSON parser read them. What follows the
///   arguments in the block is dropped. A streamed call is reported as
///   written: its arguments are not checked to be valid JSON (under a
///   grammar they always are).
/// - Any other block becomes one call (or several, when it holds a JSON
///   array of calls) once it closes, when its JSON is a call of a known
///   function (arguments given as a JSON string holding an object are
///   accepted too). Anything else (not JSON, an unknown function, arguments
///   that are not an object) is sent as text, tags and all: svc never
///   reports a call the client did not offer. Such a block still open when
///   the output ends is a call when its JSON is complete and valid, a call
///   with empty arguments when it was cut off after a known function's
///   name, and is dropped otherwise (half a name is neither a call nor
///   text).
/// - Output that starts with `{` or `[` is held to the end and becomes calls
///   when it is, as a whole, a call or an array of calls (Llama 3 style), and
///   text otherwise; but it is text at once for a model whose `<tool_call>`
///   is a token (see [`ToolCallParser::without_bare_calls`]).
/// - Whitespace next to a call block is dropped; other text before, between
///   and after calls is sent as text.
#[derive(Debug, Clone)]
pub(crate) struct ToolCallParser {
    names: Vec<String>,
    state: State,
    buf: String,
    /// Whitespace at the start of the next text is to be skipped (after a call).
    skip_ws: bool,
    calls: usize,
    /// Output that starts with `{` or `[` may be a bare call.
    bare: bool,
}

impl ToolCallParser {
    /// A parser that accepts calls of the functions `names`.
    pub(crate) fn new(names: Vec<String>) -> Self {
        ToolCallParser {
            names,
            state: State::Start,
            buf: String::new(),
            skip_ws: false,
            calls: 0,
            bare: true,
        }
    }

    /// The same parser taking calls in `<tool_call>` blocks only: output
    /// that starts with `{` or `[` is text.
    pub(crate) fn without_bare_calls(self) -> Self {
        ToolCallParser {
            bare: false,
            ..self
        }
    }

    /// How many calls were found so far.
    #[cfg(test)]
    pub(crate) fn calls(&self) -> usize {
        self.calls
    }

    /// Adds streamed text; what is certain now goes to `out`.
    pub(crate) fn push(&mut self, text: &str, out: &mut Vec<Parsed>) {
        self.buf.push_str(text);
        loop {
            match self.state {
                State::Start => {
                    let visible = self.buf.trim_start();
                    if visible.is_empty() {
                        return;
                    }
                    let bare = visible.starts_with('{') || visible.starts_with('[');
                    self.state = if bare && self.bare {
                        State::Bare
                    } else {
                        State::Text
                    };
                }
                State::Text => {
                    if let Some(at) = self.buf.find(CALL_OPEN) {
                        let before = self.buf[..at].trim_end().to_owned();
                        self.text(before, out);
                        self.buf.drain(..at + CALL_OPEN.len());
                        self.state = State::Call;
                        continue;
                    }
                    let keep = held_before_tags(&self.buf, &[CALL_OPEN]);
                    let rest = self.buf.split_off(self.buf.len() - keep);
                    let head = std::mem::replace(&mut self.buf, rest);
                    self.text(head, out);
                    return;
                }
                State::Call => {
                    let close = self.buf.find(CALL_CLOSE);
                    let region = &self.buf[..close.unwrap_or(self.buf.len())];
                    if let Head::Call { name, args_at } = head(region, &self.names) {
                        self.buf.drain(..args_at);
                        self.calls += 1;
                        out.push(Parsed::CallStart { name });
                        self.state = State::Args(ArgsScan::default());
                        continue;
                    }
                    let Some(at) = close else {
                        return;
                    };
                    let body: String = self.buf[..at].to_owned();
                    self.buf.drain(..at + CALL_CLOSE.len());
                    self.block(&body, out);
                    self.state = State::Text;
                }
                State::Args(mut scan) => {
                    // `</tool_call>` inside one of the arguments' strings is
                    // the argument's text (a grammar allows it there), not
                    // the block's end.
                    let (upto, next) = match scan.feed_until(&self.buf, CALL_CLOSE) {
                        Scanned::Closed(end) => (end, State::Tail),
                        Scanned::Stopped(at) => (at, State::Text),
                        Scanned::More(upto) => (upto, State::Args(scan)),
                    };
                    let args: String = self.buf.drain(..upto).collect();
                    if !args.is_empty() {
                        out.push(Parsed::Args(args));
                    }
                    self.state = next;
                    match next {
                        State::Args(_) => return,
                        State::Text => {
                            // Closed before its arguments did: the call stands as written.
                            self.buf.drain(..CALL_CLOSE.len());
                            self.skip_ws = true;
                        }
                        _ => {}
                    }
                }
                State::Tail => {
                    if let Some(at) = self.buf.find(CALL_CLOSE) {
                        self.buf.drain(..at + CALL_CLOSE.len());
                        self.skip_ws = true;
                        self.state = State::Text;
                        continue;
                    }
                    let keep = partial_tag_len(&self.buf, CALL_CLOSE);
                    self.buf.drain(..self.buf.len() - keep);
                    return;
                }
                State::Bare => return,
            }
        }
    }

    /// Ends the output: an unclosed block becomes calls when its JSON is
    /// complete and valid, and is dropped otherwise; held text is sent.
    pub(crate) fn finish(&mut self, out: &mut Vec<Parsed>) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Start => self.text(rest, out),
            State::Text => {
                let rest = if self.calls > 0 {
                    rest.trim_end().to_owned()
                } else {
                    rest
                };
                self.text(rest, out);
            }
            State::Call => {
                // Cut off (length, a stop sequence) or ended without its
                // close tag: a call when its JSON is complete or it got as
                // far as a known function's name, else dropped, so half a
                // call never shows as text.
                if let Some(calls) = self.parse_calls(&rest) {
                    self.found(calls, out);
                } else if let Head::More { name: Some(name) } = head(&rest, &self.names) {
                    self.found(
                        vec![Parsed::Call {
                            name,
                            arguments: String::new(),
                        }],
                        out,
                    );
                }
            }
            State::Args(_) => {
                // Cut off inside the arguments: they stay as written.
                if !rest.is_empty() {
                    out.push(Parsed::Args(rest));
                }
            }
            State::Tail => {}
            State::Bare => match self.parse_calls(&rest) {
                Some(calls) => self.found(calls, out),
                None => self.text(rest, out),
            },
        }
        self.state = State::Text;
    }

    /// Sends reply text (skipping whitespace right after a call).
    fn text(&mut self, text: String, out: &mut Vec<Parsed>) {
        let text = if self.skip_ws {
            let trimmed = text.trim_start().to_owned();
            self.skip_ws = trimmed.is_empty();
            trimmed
        } else {
            text
        };
        if !text.is_empty() {
            out.push(Parsed::Text(text));
        }
    }

    /// A closed `<tool_call>` block's body: calls, or the block as text.
    fn block(&mut self, body: &str, out: &mut Vec<Parsed>) {
        match self.parse_calls(body) {
            Some(calls) => self.found(calls, out),
            None => self.text(format!("{CALL_OPEN}{body}{CALL_CLOSE}"), out),
        }
    }

    fn found(&mut self, calls: Vec<Parsed>, out: &mut Vec<Parsed>) {
        self.calls += calls.len();
        out.extend(calls);
        self.skip_ws = true;
    }

    /// `text` as one call or an array of calls of known functions; `None` when it is anything else.
    fn parse_calls(&self, text: &str) -> Option<Vec<Parsed>> {
        let text = text.trim();
        if text.starts_with('[') {
            let items: Vec<RawCall> = serde_json::from_str(text).ok()?;
            if items.is_empty() {
                return None;
            }
            items.into_iter().map(|c| self.call(c)).collect()
        } else {
            let call: RawCall = serde_json::from_str(text).ok()?;
            Some(vec![self.call(call)?])
        }
    }

    fn call(&self, call: RawCall) -> Option<Parsed> {
        if !self.names.contains(&call.name) {
            return None;
        }
        let arguments = match call.arguments {
            None => "{}".to_owned(),
            Some(raw) => {
                let raw = raw.get().trim();
                if raw.starts_with('{') {
                    raw.to_owned()
                } else if raw.starts_with('"') {
                    // Arguments as a string that holds the JSON object.
                    let inner: String = serde_json::from_str(raw).ok()?;
                    match serde_json::from_str::<Value>(&inner).ok()? {
                        Value::Object(_) => inner.trim().to_owned(),
                        _ => return None,
                    }
                } else {
                    return None;
                }
            }
        };
        Some(Parsed::Call {
            name: call.name,
            arguments,
        })
    }
}

/// How far the start of a block's body matches a streamable call.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// `{"name": <known>, "arguments": ` is complete; the arguments object
    /// starts at byte `args_at`.
    Call { name: String, args_at: usize },
    /// So far a match; `name` once the function's name is complete and known.
    More { name: Option<String> },
    /// Not a streamable call (or not of a known function).
    No,
}

/// Matches `{"name": <string>, "arguments": {` (or `"parameters"`), any
/// JSON whitespace between, at the start of `text`.
fn head(text: &str, names: &[String]) -> Head {
    let b = text.as_bytes();
    let mut i = 0;
    let ws = |i: &mut usize| {
        while *i < b.len() && matches!(b[*i], b' ' | b'\n' | b'\r' | b'\t') {
            *i += 1;
        }
    };
    // Some(true): matched (i moved past it); Some(false): mismatch; None: text ended inside it.
    let lit = |i: &mut usize, word: &str| -> Option<bool> {
        let w = word.as_bytes();
        let have = &b[*i..];
        let n = have.len().min(w.len());
        if have[..n] != w[..n] {
            return Some(false);
        }
        if n < w.len() {
            return None;
        }
        *i += w.len();
        Some(true)
    };
    macro_rules! step {
        ($m:expr, $name:expr) => {
            match $m {
                Some(true) => {}
                Some(false) => return Head::No,
                None => return Head::More { name: $name },
            }
        };
    }
    ws(&mut i);
    step!(lit(&mut i, "{"), None);
    ws(&mut i);
    step!(lit(&mut i, "\"name\""), None);
    ws(&mut i);
    step!(lit(&mut i, ":"), None);
    ws(&mut i);
    step!(lit(&mut i, "\""), None);
    let start = i - 1;
    let mut escaped = false;
    let end = loop {
        let Some(&c) = b.get(i) else {
            return Head::More { name: None };
        };
        i += 1;
        match c {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => break i,
            _ => {}
        }
    };
    let Ok(name) = serde_json::from_str::<String>(&text[start..end]) else {
        return Head::No;
    };
    if !names.contains(&name) {
        return Head::No;
    }
    let known = || Some(name.clone());
    ws(&mut i);
    step!(lit(&mut i, ","), known());
    ws(&mut i);
    let mut key = i;
    match (
        lit(&mut key, "\"arguments\""),
        lit(&mut i, "\"parameters\""),
    ) {
        (Some(true), _) => i = key,
        (_, Some(true)) => {}
        (None, _) | (_, None) => return Head::More { name: known() },
        _ => return Head::No,
    }
    ws(&mut i);
    step!(lit(&mut i, ":"), known());
    ws(&mut i);
    match b.get(i) {
        None => Head::More { name: known() },
        Some(b'{') => Head::Call { name, args_at: i },
        Some(_) => Head::No,
    }
}

/// Finds where a streamed JSON object ends: braces counted outside strings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ArgsScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

/// How far [`ArgsScan::feed_until`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scanned {
    /// The object closed: the byte offset just after its closing brace.
    Closed(usize),
    /// The stop tag starts here, outside the object's strings, before the
    /// object closed.
    Stopped(usize),
    /// Read up to here; what follows may be the start of the stop tag.
    More(usize),
}

impl ArgsScan {
    /// Reads `text` (the next bytes of the object); the byte offset just
    /// after its closing brace when it closes in `text`.
    pub(crate) fn feed(&mut self, text: &str) -> Option<usize> {
        text.bytes()
            .enumerate()
            .find_map(|(i, c)| self.byte(c).then_some(i + 1))
    }

    /// Reads `text` (the next bytes of the object) up to its closing brace
    /// or to `stop`, which counts only outside the object's strings: inside
    /// one it is the string's text, as a JSON parser reads it.
    pub(crate) fn feed_until(&mut self, text: &str, stop: &str) -> Scanned {
        let bytes = text.as_bytes();
        for (i, &c) in bytes.iter().enumerate() {
            if !self.in_string && stop.as_bytes().first() == Some(&c) {
                let rest = &bytes[i..];
                if rest.starts_with(stop.as_bytes()) {
                    return Scanned::Stopped(i);
                }
                if stop.as_bytes().starts_with(rest) {
                    return Scanned::More(i);
                }
            }
            if self.byte(c) {
                return Scanned::Closed(i + 1);
            }
        }
        Scanned::More(bytes.len())
    }

    /// Reads one byte; true when it closes the object.
    fn byte(&mut self, c: u8) -> bool {
        if self.in_string {
            match c {
                _ if self.escaped => self.escaped = false,
                b'\\' => self.escaped = true,
                b'"' => self.in_string = false,
                _ => {}
            }
            return false;
        }
        match c {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }
}

/// One call as models write it; arguments kept as the model wrote them.
#[derive(Deserialize)]
struct RawCall {
    name: String,
    #[serde(alias = "parameters")]
    arguments: Option<Box<RawValue>>,
}

/// A fresh call id: `call_` and 24 random letters and digits.
pub(crate) fn call_id() -> String {
    use rand::Rng as _;
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect();
    format!("call_{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use svc_core::engine::ToolCallSpec;

    use crate::reasoning::DEFAULT_SYSTEM;

    fn parse(pieces: &[&str]) -> Vec<Parsed> {
        parse_with(&["get_weather", "get_time"], pieces)
    }

    /// What the parser of calls of `names` makes of `pieces`, with text
    /// pieces and a streamed call's pieces joined.
    fn parse_with(names: &[&str], pieces: &[&str]) -> Vec<Parsed> {
        let mut p = ToolCallParser::new(names.iter().map(|n| (*n).to_owned()).collect());
        let mut out = Vec::new();
        for piece in pieces {
            p.push(piece, &mut out);
        }
        p.finish(&mut out);
        // Adjacent text pieces joined, so chunkings compare equal.
        // A streamed call (its start and argument pieces) joined into one.
        let mut merged: Vec<Parsed> = Vec::new();
        for item in out {
            match (merged.last_mut(), item) {
                (Some(Parsed::Text(a)), Parsed::Text(b)) => a.push_str(&b),
                (Some(Parsed::Call { arguments, .. }), Parsed::Args(more)) => {
                    arguments.push_str(&more)
                }
                (_, Parsed::Args(more)) => panic!("arguments {more:?} without a call"),
                (_, Parsed::CallStart { name }) => merged.push(Parsed::Call {
                    name,
                    arguments: String::new(),
                }),
                (_, item) => merged.push(item),
            }
        }
        merged
    }

    fn text(s: &str) -> Parsed {
        Parsed::Text(s.into())
    }

    fn call(name: &str, arguments: &str) -> Parsed {
        Parsed::Call {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn cases() -> Vec<(&'static str, Vec<Parsed>)> {
        vec![
            ("Just text.", vec![text("Just text.")]),
            (
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                vec![call("get_weather", "{\"city\": \"Paris\"}")],
            ),
            (
                "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n",
                vec![
                    text("Let me check."),
                    call("get_weather", "{\"city\": \"Paris\"}"),
                    call("get_time", "{}"),
                ],
            ),
            (
                "<tool_call>[{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}]</tool_call> Done.",
                vec![
                    call("get_time", "{}"),
                    call("get_weather", "{\"city\": \"Oslo\"}"),
                    text("Done."),
                ],
            ),
            (
                "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>",
                vec![text(
                    "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>",
                )],
            ),
            (
                "<tool_call>not json</tool_call> ok",
                vec![text("<tool_call>not json</tool_call> ok")],
            ),
            (
                "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}",
                vec![call("get_weather", "{\"city\": \"Rome\"}")],
            ),
            ("{\"a\": 1}", vec![text("{\"a\": 1}")]),
            ("[1] is a footnote", vec![text("[1] is a footnote")]),
            (
                "a < b <tool and <tool_call",
                vec![text("a < b <tool and <tool_call")],
            ),
            (
                "Unclosed: <tool_call>{\"name\": \"get_time\", \"arguments\": {}}",
                vec![text("Unclosed:"), call("get_time", "{}")],
            ),
            (
                "Cut off: <tool_call>{\"name\": \"get_ti",
                vec![text("Cut off:")],
            ),
            (
                "é😀 <tool_call>{\"name\":\"get_time\"}</tool_call>😀",
                vec![text("é😀"), call("get_time", "{}"), text("😀")],
            ),
            ("  \n", vec![text("  \n")]),
            // Cut off by max_tokens inside the arguments: kept as written.
            (
                "Checking. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
                vec![text("Checking."), call("get_weather", "{\"city\": \"Par")],
            ),
            // Cut off after the function's name: a call with no arguments yet.
            (
                "<tool_call>{\"name\": \"get_time\", \"argu",
                vec![call("get_time", "")],
            ),
            // Markup and braces inside the arguments' strings are arguments.
            (
                "<tool_call>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a<b}{\\\"\"}}\n</tool_call> ok",
                vec![call("get_weather", "{\"city\": \"a<b}{\\\"\"}"), text("ok")],
            ),
            // What a grammar allows in an argument's string is the
            // argument's, braces, quotes and the block's end included.
            (
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo}}</tool_call>\\\"}\"}}\n</tool_call>",
                vec![call(
                    "get_weather",
                    "{\"city\": \"Oslo}}</tool_call>\\\"}\"}",
                )],
            ),
            (
                "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"\\\\\",\"x\":[\"</tool_call>\\n<tool_call>\"]}}\n</tool_call>",
                vec![call(
                    "get_weather",
                    "{\"city\":\"\\\\\",\"x\":[\"</tool_call>\\n<tool_call>\"]}",
                )],
            ),
            // Closed before its arguments were: the call as written.
            (
                "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"</tool_call> after",
                vec![call("get_weather", "{\"city\": \"x\""), text("after")],
            ),
        ]
    }

    #[test]
    fn calls_and_text_parse() {
        for (output, expected) in cases() {
            assert_eq!(parse(&[output]), expected, "{output:?}");
        }
    }

    #[test]
    fn every_split_point_gives_the_same_result() {
        for (output, expected) in cases() {
            for (at, _) in output.char_indices() {
                assert_eq!(
                    parse(&[&output[..at], &output[at..]]),
                    expected,
                    "{output:?} split at {at}"
                );
            }
            // One character at a time.
            let chars: Vec<String> = output.chars().map(String::from).collect();
            let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
            assert_eq!(parse(&refs), expected, "{output:?} char by char");
        }
    }

    #[test]
    fn markup_of_a_valid_call_never_streams_as_text() {
        let output = "Sure. <tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
        let mut p = ToolCallParser::new(vec!["get_time".into()]);
        let mut out = Vec::new();
        for c in output.chars() {
            p.push(&c.to_string(), &mut out);
        }
        p.finish(&mut out);
        for item in &out {
            if let Parsed::Text(t) = item {
                assert!(!t.contains('<') && !t.contains('{'), "{out:?}");
            }
        }
        assert_eq!(p.calls(), 1);
    }

    #[test]
    fn arguments_stream_as_they_come() {
        let mut p = ToolCallParser::new(vec!["get_weather".into()]);
        let mut out = Vec::new();
        p.push(
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci",
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                Parsed::CallStart {
                    name: "get_weather".into()
                },
                Parsed::Args("{\"ci".into()),
            ]
        );
        out.clear();
        p.push("ty\": \"Paris\"}}\n</tool", &mut out);
        assert_eq!(out, vec![Parsed::Args("ty\": \"Paris\"}".into())]);
        out.clear();
        p.push("_call>", &mut out);
        p.finish(&mut out);
        assert_eq!(out, vec![]);
        assert_eq!(p.calls(), 1);
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_result(
            before in "[a-z <>\n]{0,12}",
            between in "[a-z <>\n]{0,12}",
            city in "[a-zA-Z ]{0,10}",
            cuts in proptest::collection::vec(0usize..200, 0..10),
        ) {
            let output = format!(
                "{before}<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{city}\"}}}}\n</tool_call>{between}<tool_call>{{\"name\": \"get_time\", \"arguments\": {{}}}}</tool_call>"
            );
            let whole = parse(&[&output]);
            let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (output.len() + 1)).collect();
            bounds.extend([0, output.len()]);
            bounds.sort_unstable();
            bounds.dedup();
            let parts: Vec<&str> = bounds.windows(2).map(|w| &output[w[0]..w[1]]).collect();
            prop_assert_eq!(&parse(&parts), &whole);
            let calls: Vec<&Parsed> = whole.iter().filter(|p| matches!(p, Parsed::Call { .. })).collect();
            prop_assert_eq!(calls.len(), 2);
            let city_args = format!("{{\"city\": \"{city}\"}}");
            prop_assert_eq!(calls[0], &call("get_weather", &city_args));
        }
    }

    /// Tools whose forced calls the grammar × parser property runs: the
    /// Vercel AI SDK's shape of a one-string schema, one with every JSON
    /// type, nesting, optional and free-form properties, a free-form
    /// object, and no parameters at all.
    fn forced_tools() -> Vec<ToolSpec> {
        let tool = |name: &str, parameters: Value| ToolSpec {
            name: name.into(),
            description: None,
            parameters,
        };
        vec![
            tool(
                "get_weather",
                json!({
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "additionalProperties": false
                }),
            ),
            tool(
                "search",
                json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "limit": {"type": "integer"},
                        "score": {"type": "number"},
                        "exact": {"type": "boolean"},
                        "unit": {"enum": ["celsius", "fahrenheit", "}\"</tool_call>"]},
                        "filter": {
                            "type": "object",
                            "properties": {
                                "field": {"type": "string"},
                                "any": {"type": "array", "items": {"type": "object", "properties": {"v": {"type": "string"}}}}
                            },
                            "required": ["field"]
                        },
                        "note": {"type": ["string", "null"]},
                        "extra": {}
                    },
                    "required": ["query", "tags", "filter"]
                }),
            ),
            tool("anything", json!({"type": "object"})),
            tool("get_time", Value::Null),
        ]
    }

    proptest! {
        /// Whatever a forced call's grammar lets the model write, the parser
        /// gives back that call, its arguments exactly as written: valid
        /// JSON that matches the schema, however the text is cut.
        #[test]
        fn a_forced_call_parses_to_exactly_what_its_grammar_allowed(
            seed: u64,
            which in 0usize..5,
            cuts in proptest::collection::vec(0usize..4096, 0..24),
        ) {
            #[derive(Deserialize)]
            struct Written<'a> {
                name: String,
                #[serde(borrow)]
                arguments: &'a RawValue,
            }
            let tools = forced_tools();
            // One tool forced (tool_choice names it), or any of them ("required").
            let chosen: Vec<&ToolSpec> = match tools.get(which) {
                Some(tool) => vec![tool],
                None => tools.iter().collect(),
            };
            let gbnf = crate::grammar::tool_call(&chosen).unwrap();
            let output = crate::grammar::sample::Gbnf::parse(&gbnf).generate("root", seed);

            let body = output
                .strip_prefix("<tool_call>\n")
                .and_then(|b| b.strip_suffix("\n</tool_call>"))
                .unwrap_or_else(|| panic!("not a block: {output:?}"));
            let written: Written<'_> = serde_json::from_str(body)
                .unwrap_or_else(|e| panic!("the grammar wrote invalid JSON ({e}): {body:?}"));
            let tool = chosen.iter().find(|t| t.name == written.name).unwrap();
            let arguments: Value = serde_json::from_str(written.arguments.get()).unwrap();
            let schema = if tool.parameters.is_null() { json!({"type": "object"}) } else { tool.parameters.clone() };
            prop_assert!(
                jsonschema::validator_for(&schema).unwrap().is_valid(&arguments),
                "{arguments} does not match {schema}"
            );

            let mut bounds: Vec<usize> = cuts
                .iter()
                .map(|c| c % (output.len() + 1))
                .filter(|&c| output.is_char_boundary(c))
                .collect();
            bounds.extend([0, output.len()]);
            bounds.sort_unstable();
            bounds.dedup();
            let pieces: Vec<&str> = bounds.windows(2).map(|w| &output[w[0]..w[1]]).collect();
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            prop_assert_eq!(
                parse_with(&names, &pieces),
                vec![call(&written.name, written.arguments.get())],
                "{:?}", output
            );
        }
    }

    #[test]
    fn ids_look_like_openais() {
        let id = call_id();
        assert_eq!(id.len(), 29);
        assert!(id.starts_with("call_"));
        assert!(id[5..].chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(call_id(), id);
    }

    #[test]
    fn history_is_rewritten_for_templates_without_tools() {
        let tools = [ToolSpec {
            name: "get_weather".into(),
            description: Some("Weather in a city".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }];
        let messages = [
            ChatMessage::User("Weather in Paris?".into()),
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCallSpec {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                }],
                reasoning: None,
            },
            ChatMessage::Tool {
                tool_call_id: "call_1".into(),
                content: "18°C".into(),
            },
        ];
        let out = prepare_messages(&messages, &tools, ToolSupport::default());
        assert_eq!(out.len(), 4);
        let ChatMessage::System(system) = &out[0] else {
            panic!("{out:?}")
        };
        assert!(system.starts_with(DEFAULT_SYSTEM));
        assert!(system.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather in a city\", \"parameters\": "), "{system}");
        assert_eq!(
            out[2],
            ChatMessage::Assistant {
                content: Some(
                    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>".into()
                ),
                tool_calls: vec![],
                reasoning: None,
            }
        );
        assert_eq!(
            out[3],
            ChatMessage::User("<tool_response>\n18°C\n</tool_response>".into())
        );

        // A template that knows tools gets the history as it is.
        let all = ToolSupport {
            tools: true,
            tool_calls: true,
            tool_role: true,
        };
        assert_eq!(prepare_messages(&messages, &tools, all), messages.to_vec());
        assert_eq!(
            ToolSupport::of(
                "{% if tools %}{{ message.tool_calls }}{% elif message.role == \"tool\" %}"
            ),
            all
        );
    }
}
