//! Model families' tool-call syntaxes beyond Hermes' `<tool_call>` JSON
//! (which `crate::tools` parses, arguments streamed): how each family
//! writes its calls, which family a chat template is, and a streaming
//! parser that sends the text around the calls as it comes and each call
//! once its section is complete.
//!
//! | family | a call, as the model writes it |
//! |---|---|
//! | Mistral (v0.3, Nemo, Small 3) | `[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]` |
//! | Magistral, Devstral, Mistral Small 3.2+ | `[TOOL_CALLS]f[ARGS]{...}` (one marker a call) |
//! | Llama 3.1–3.3 | `<\|python_tag\|>{"name": "f", "parameters": {...}}` (`;` between calls) |
//! | Llama 4, pythonic (Llama 3.2 with vLLM's template) | `[f(city="Paris"), g(a=1)]`, or `<\|python_start\|>` and that or JSON calls |
//! | Qwen3-Coder | `<tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n</function>\n</tool_call>` |
//! | DeepSeek V3, R1 | `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>` |
//! | DeepSeek V3.1+ | `<｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` in the same section |
//! | Kimi K2 | `<\|tool_calls_section_begin\|><\|tool_call_begin\|>functions.f:0<\|tool_call_argument_begin\|>{...}<\|tool_call_end\|>...<\|tool_calls_section_end\|>` |
//! | GLM 4.5+ | `<tool_call>f\n<arg_key>p</arg_key>\n<arg_value>v</arg_value>\n</tool_call>` |
//! | Granite 3.x | `<\|tool_call\|>[{"name": "f", "arguments": {...}}]` |
//! | Phi-4-mini | `<\|tool_call\|>[{"name": "f", "arguments": {...}}]<\|/tool_call\|>` |
//! | Command R7B | `<\|START_ACTION\|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}]<\|END_ACTION\|>` |
//!
//! A section is held until it closes (its end marker, or the end of the
//! output for the families whose calls run to it) and then becomes its
//! calls, when every call in it is of a function the request offered with
//! arguments that are a JSON object; otherwise it is sent as the text it
//! was, so svc never reports a call the client did not offer. Text before,
//! between and after sections is sent as it comes, less an end that may
//! still grow into a section's marker. Where the vocabulary has a token for
//! a marker, only the token counts (`crate::markup::MarkerGuard` hides the
//! same text spelled plainly from these parsers).

use serde_json::{Map, Value};

use crate::markup::{held_before_tags, partial_tag_len};
use crate::tools::{ArgsScan, Parsed, ToolCallParser};

/// A call as read: the function's name and its arguments.
type Call = (String, Map<String, Value>);

/// How a model writes its tool calls, as a setting (`tool_format`) that
/// overrides what its chat template says (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": …, "arguments": …}</tool_call>` (Qwen2.5, Hermes, SmolLM2).
    Hermes,
    Mistral,
    Llama3,
    Pythonic,
    Qwen3Coder,
    DeepSeek,
    Kimi,
    Glm,
    Granite,
    Phi4,
    CommandR,
}

impl ToolFormat {
    /// Every format, for settings and their documentation.
    pub const ALL: [ToolFormat; 11] = [
        ToolFormat::Hermes,
        ToolFormat::Mistral,
        ToolFormat::Llama3,
        ToolFormat::Pythonic,
        ToolFormat::Qwen3Coder,
        ToolFormat::DeepSeek,
        ToolFormat::Kimi,
        ToolFormat::Glm,
        ToolFormat::Granite,
        ToolFormat::Phi4,
        ToolFormat::CommandR,
    ];

    /// Its name in settings.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::Mistral => "mistral",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::Pythonic => "pythonic",
            ToolFormat::Qwen3Coder => "qwen3-coder",
            ToolFormat::DeepSeek => "deepseek",
            ToolFormat::Kimi => "kimi",
            ToolFormat::Glm => "glm",
            ToolFormat::Granite => "granite",
            ToolFormat::Phi4 => "phi4",
            ToolFormat::CommandR => "command-r",
        }
    }

    /// The format named `name` (see [`Self::name`]).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Its syntax; `None` for Hermes' (parsed by `crate::tools`).
    pub(crate) fn syntax(self) -> Option<Syntax> {
        match self {
            ToolFormat::Hermes => None,
            ToolFormat::Mistral => Some(Syntax::Mistral),
            ToolFormat::Llama3 => Some(Syntax::Llama3),
            ToolFormat::Pythonic => Some(Syntax::Pythonic),
            ToolFormat::Qwen3Coder => Some(Syntax::Qwen3Coder),
            ToolFormat::DeepSeek => Some(Syntax::DeepSeek),
            ToolFormat::Kimi => Some(Syntax::Kimi),
            ToolFormat::Glm => Some(Syntax::Glm),
            ToolFormat::Granite | ToolFormat::Phi4 => Some(Syntax::ToolCallToken),
            ToolFormat::CommandR => Some(Syntax::CommandR),
        }
    }
}

/// A family's way of writing tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Syntax {
    /// `[TOOL_CALLS]` and a JSON array of calls, or `name[ARGS]{...}`.
    Mistral,
    /// `<|python_tag|>` and JSON calls separated by `;`.
    Llama3,
    /// A Python list of calls, `[f(a=1), g(b="x")]` (or Llama 4's JSON
    /// calls), alone or after `<|python_start|>`.
    Pythonic,
    /// `<tool_call>` around `<function=…>` and its `<parameter=…>`s.
    Qwen3Coder,
    /// DeepSeek's `<｜tool▁calls▁begin｜>` section.
    DeepSeek,
    /// Kimi K2's `<|tool_calls_section_begin|>` section.
    Kimi,
    /// GLM's `<tool_call>` around a name and `<arg_key>`/`<arg_value>` pairs.
    Glm,
    /// `<|tool_call|>` and a JSON array, to the end (Granite) or to
    /// `<|/tool_call|>` (Phi-4-mini).
    ToolCallToken,
    /// Command R7B's `<|START_ACTION|>` and a JSON array (`tool_name`,
    /// `parameters`) to `<|END_ACTION|>`.
    CommandR,
}

impl Syntax {
    /// Its name in the log (a [`ToolFormat`]'s, where it has one).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Syntax::Mistral => "mistral",
            Syntax::Llama3 => "llama3",
            Syntax::Pythonic => "pythonic",
            Syntax::Qwen3Coder => "qwen3-coder",
            Syntax::DeepSeek => "deepseek",
            Syntax::Kimi => "kimi",
            Syntax::Glm => "glm",
            Syntax::ToolCallToken => "granite/phi4",
            Syntax::CommandR => "command-r",
        }
    }

    /// The family whose syntax `template` (a chat template's source)
    /// teaches its model, when it is one of these.
    pub(crate) fn of_template(template: &str) -> Option<Syntax> {
        let has = |s: &str| template.contains(s);
        if has("[TOOL_CALLS]") {
            Some(Syntax::Mistral)
        } else if has("<|python_tag|>") {
            Some(Syntax::Llama3)
        } else if has("<|python_start|>") {
            Some(Syntax::Pythonic)
        } else if has("<function=") && has("<parameter=") {
            Some(Syntax::Qwen3Coder)
        } else if has("tool▁calls▁begin") {
            Some(Syntax::DeepSeek)
        } else if has("<|tool_calls_section_begin|>") {
            Some(Syntax::Kimi)
        } else if has("<arg_key>") {
            Some(Syntax::Glm)
        } else if has("<|tool_call|>") {
            Some(Syntax::ToolCallToken)
        } else if has("<|START_ACTION|>") {
            Some(Syntax::CommandR)
        } else {
            None
        }
    }

    /// Every marker of the syntax: those that open and close sections,
    /// and those inside calls. A model may write them as control tokens,
    /// which the engine turns into their text only for these.
    pub(crate) fn markers(self) -> &'static [&'static str] {
        match self {
            Syntax::Mistral => &["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"],
            Syntax::Llama3 => &["<|python_tag|>"],
            Syntax::Pythonic => &[PY_START, PY_END],
            Syntax::Qwen3Coder | Syntax::Glm => &["<tool_call>", "</tool_call>"],
            Syntax::DeepSeek => &[
                "<｜tool▁calls▁begin｜>",
                "<｜tool▁calls▁end｜>",
                DS_CALL,
                DS_CALL_END,
                DS_SEP,
            ],
            Syntax::Kimi => &[
                "<|tool_calls_section_begin|>",
                "<|tool_calls_section_end|>",
                KIMI_CALL,
                KIMI_CALL_END,
                KIMI_ARGS,
            ],
            Syntax::ToolCallToken => &["<|tool_call|>", "<|/tool_call|>"],
            Syntax::CommandR => &["<|START_ACTION|>", "<|END_ACTION|>"],
        }
    }

    /// The markers that open a section of calls.
    fn opens(self) -> &'static [&'static str] {
        match self {
            Syntax::Mistral => &["[TOOL_CALLS]"],
            Syntax::Llama3 => &["<|python_tag|>"],
            Syntax::Pythonic => &[PY_START],
            Syntax::Qwen3Coder | Syntax::Glm => &["<tool_call>"],
            Syntax::DeepSeek => &["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"],
            Syntax::Kimi => &["<|tool_calls_section_begin|>", "<|tool_call_begin|>"],
            Syntax::ToolCallToken => &["<|tool_call|>"],
            Syntax::CommandR => &["<|START_ACTION|>"],
        }
    }

    /// What closes a section; `None`: it runs to the end of the output.
    fn close(self, open: &str) -> Option<&'static str> {
        match self {
            Syntax::Mistral | Syntax::Llama3 | Syntax::Pythonic => None,
            Syntax::Qwen3Coder | Syntax::Glm => Some("</tool_call>"),
            Syntax::DeepSeek if open == "<｜tool▁call▁begin｜>" => {
                Some("<｜tool▁call▁end｜>")
            }
            Syntax::DeepSeek => Some("<｜tool▁calls▁end｜>"),
            Syntax::Kimi if open == "<|tool_call_begin|>" => Some("<|tool_call_end|>"),
            Syntax::Kimi => Some("<|tool_calls_section_end|>"),
            Syntax::ToolCallToken => Some("<|/tool_call|>"),
            Syntax::CommandR => Some("<|END_ACTION|>"),
        }
    }

    /// The calls a whole section holds (`open` is its marker, `body` what
    /// follows it, without the closing marker), as names and argument
    /// objects; `None` when it is not calls.
    fn calls(self, open: &str, body: &str) -> Option<Vec<Call>> {
        match self {
            Syntax::Mistral => mistral(body),
            Syntax::Llama3 => llama3(body),
            Syntax::Pythonic => pythonic(&body.replace(PY_END, " ")),
            Syntax::Qwen3Coder => qwen3_coder(body),
            Syntax::DeepSeek => deepseek(open, body),
            Syntax::Kimi => kimi(open, body),
            Syntax::Glm => glm(body),
            Syntax::ToolCallToken | Syntax::CommandR => json_calls(body.trim()),
        }
    }
}

/// `[{"name": …, "arguments": {…}}, …]` or one such object; `parameters`
/// is taken for `arguments` and `tool_name` for `name` (Command R), and
/// arguments written as a JSON string holding an object too.
fn json_calls(text: &str) -> Option<Vec<Call>> {
    let value: Value = serde_json::from_str(text).ok()?;
    let items = match value {
        Value::Array(items) => items,
        one @ Value::Object(_) => vec![one],
        _ => return None,
    };
    if items.is_empty() {
        return None;
    }
    items.into_iter().map(json_call).collect()
}

fn json_call(item: Value) -> Option<Call> {
    let Value::Object(mut call) = item else {
        return None;
    };
    let Some(Value::String(name)) = call.remove("name").or_else(|| call.remove("tool_name")) else {
        return None;
    };
    let arguments = call
        .remove("arguments")
        .or_else(|| call.remove("parameters"))
        .unwrap_or_else(|| Value::Object(Map::new()));
    Some((name, object(arguments)?))
}

/// Arguments as an object: one, or a JSON string holding one.
fn object(arguments: Value) -> Option<Map<String, Value>> {
    match arguments {
        Value::Object(map) => Some(map),
        Value::String(text) => match serde_json::from_str(&text).ok()? {
            Value::Object(map) => Some(map),
            _ => None,
        },
        _ => None,
    }
}

/// Mistral: a JSON array of calls, or `name[ARGS]{…}` (with an optional
/// `[CALL_ID]id` before `[ARGS]`), several joined by `[TOOL_CALLS]`.
fn mistral(body: &str) -> Option<Vec<Call>> {
    let body = body.trim();
    if body.starts_with('[') || body.starts_with('{') {
        return json_calls(body);
    }
    body.split("[TOOL_CALLS]")
        .map(|call| {
            let (head, args) = call.split_once("[ARGS]")?;
            let name = head.split("[CALL_ID]").next()?.trim();
            let args: Value = serde_json::from_str(args.trim()).ok()?;
            Some((name.to_owned(), object(args)?))
        })
        .collect()
}

/// Llama 3.1: JSON calls (`parameters` for the arguments) separated by `;`.
fn llama3(body: &str) -> Option<Vec<Call>> {
    let body = body.trim();
    if let Some(calls) = json_calls(body) {
        return Some(calls);
    }
    // Several calls: `{…}; {…}`. A `;` inside a string would split one:
    // then the pieces do not parse and the whole is not calls.
    body.split(';')
        .filter(|piece| !piece.trim().is_empty())
        .map(|piece| json_calls(piece.trim())?.into_iter().next())
        .collect()
}

/// Qwen3-Coder: `<function=name>` and its `<parameter=p>value</parameter>`s.
/// A value that is JSON (a number, `true`, an object...) is taken as it;
/// any other is a string (the model writes strings bare).
fn qwen3_coder(body: &str) -> Option<Vec<Call>> {
    let mut calls = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let after = rest.strip_prefix("<function=")?;
        let (name, after) = after.split_once('>')?;
        let (inner, after) = after.split_once("</function>")?;
        let mut arguments = Map::new();
        let mut params = inner.trim();
        while !params.is_empty() {
            let after = params.strip_prefix("<parameter=")?;
            let (key, after) = after.split_once('>')?;
            let (value, after) = after.split_once("</parameter>")?;
            arguments.insert(key.trim().to_owned(), loose_value(value));
            params = after.trim();
        }
        calls.push((name.trim().to_owned(), arguments));
        rest = after.trim();
    }
    (!calls.is_empty()).then_some(calls)
}

/// A value written bare: JSON when it is JSON, else the text (one leading
/// and one trailing newline are the markup's, not the value's).
fn loose_value(text: &str) -> Value {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let text = text.strip_suffix('\n').unwrap_or(text);
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(value) if !text.trim().is_empty() => value,
        _ => Value::String(text.to_owned()),
    }
}

const PY_START: &str = "<|python_start|>";
const PY_END: &str = "<|python_end|>";

/// Pythonic calls: `[f(a=1, b="x"), g()]`, arguments as Python literals
/// (strings in either quotes, numbers, `True`/`False`/`None`, lists,
/// tuples and dicts); or, as Llama 4's own template writes them, JSON
/// calls (see [`llama3`]).
fn pythonic(body: &str) -> Option<Vec<Call>> {
    let body = body.trim();
    if !body.starts_with('[') {
        return llama3(body);
    }
    let mut py = Py { rest: body };
    py.expect('[')?;
    let mut calls = Vec::new();
    py.items(']', |py| {
        let name = py.name()?;
        py.expect('(')?;
        let mut arguments = Map::new();
        py.items(')', |py| {
            let key = py.name()?;
            py.expect('=')?;
            arguments.insert(key.to_owned(), py.value(0)?);
            Some(())
        })?;
        calls.push((name.to_owned(), arguments));
        Some(())
    })?;
    (py.rest.trim().is_empty() && !calls.is_empty()).then_some(calls)
}

/// The most nested lists and dicts a pythonic value may have.
const PY_MAX_DEPTH: usize = 32;

/// A reader of Python literals.
struct Py<'a> {
    rest: &'a str,
}

impl<'a> Py<'a> {
    /// Skips whitespace, then takes `c` when it comes next.
    fn eat(&mut self, c: char) -> bool {
        self.rest = self.rest.trim_start();
        match self.rest.strip_prefix(c) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char) -> Option<()> {
        self.eat(c).then_some(())
    }

    /// A name (a function's may be dotted).
    fn name(&mut self) -> Option<&'a str> {
        self.rest = self.rest.trim_start();
        let end = self
            .rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == '-'))
            .unwrap_or(self.rest.len());
        let (name, rest) = self.rest.split_at(end);
        self.rest = rest;
        (!name.is_empty()).then_some(name)
    }

    /// Reads items (each by `item`) separated by commas, a trailing one
    /// allowed, up to and with `close`.
    fn items(&mut self, close: char, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        loop {
            if self.eat(close) {
                return Some(());
            }
            item(self)?;
            if !self.eat(',') {
                return self.expect(close);
            }
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > PY_MAX_DEPTH {
            return None;
        }
        self.rest = self.rest.trim_start();
        let first = self.rest.chars().next()?;
        match first {
            '"' | '\'' => self.string(first).map(Value::String),
            '[' | '(' => {
                let close = if first == '[' { ']' } else { ')' };
                self.rest = &self.rest[1..];
                let mut items = Vec::new();
                self.items(close, |py| {
                    items.push(py.value(depth + 1)?);
                    Some(())
                })?;
                Some(Value::Array(items))
            }
            '{' => {
                self.rest = &self.rest[1..];
                let mut map = Map::new();
                self.items('}', |py| {
                    py.rest = py.rest.trim_start();
                    let quote = py.rest.chars().next()?;
                    if quote != '"' && quote != '\'' {
                        return None;
                    }
                    let key = py.string(quote)?;
                    py.expect(':')?;
                    map.insert(key, py.value(depth + 1)?);
                    Some(())
                })?;
                Some(Value::Object(map))
            }
            _ => {
                let end = self
                    .rest
                    .find(|c: char| !(c.is_alphanumeric() || matches!(c, '.' | '-' | '+' | '_')))
                    .unwrap_or(self.rest.len());
                let (word, rest) = self.rest.split_at(end);
                self.rest = rest;
                match word {
                    "True" => Some(Value::Bool(true)),
                    "False" => Some(Value::Bool(false)),
                    "None" => Some(Value::Null),
                    number => {
                        let number = number.replace('_', "");
                        if let Ok(n) = number.parse::<i64>() {
                            return Some(Value::from(n));
                        }
                        let n = number.parse::<f64>().ok()?;
                        serde_json::Number::from_f64(n).map(Value::Number)
                    }
                }
            }
        }
    }

    /// A string in `quote`s, its escapes read.
    fn string(&mut self, quote: char) -> Option<String> {
        let mut out = String::new();
        let mut chars = self.rest.char_indices().skip(1);
        while let Some((at, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.rest = &self.rest[at + c.len_utf8()..];
                    return Some(out);
                }
                '\\' => {
                    let (_, escaped) = chars.next()?;
                    match escaped {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        '0' => out.push('\0'),
                        'u' => {
                            let hex: String = (0..4)
                                .filter_map(|_| chars.next())
                                .map(|(_, c)| c)
                                .collect();
                            let code = u32::from_str_radix(&hex, 16).ok()?;
                            out.push(char::from_u32(code)?);
                        }
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
        }
        None
    }
}

const DS_CALL: &str = "<｜tool▁call▁begin｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";

/// DeepSeek: a section of calls, or one call (V3.1 writes them without the
/// section). A call is `function<｜tool▁sep｜>name\n```json\n{…}\n``` `
/// (V3, R1) or `name<｜tool▁sep｜>{…}` (V3.1).
fn deepseek(open: &str, body: &str) -> Option<Vec<Call>> {
    marked_calls(open, body, (DS_CALL, DS_CALL_END), deepseek_call)
}

/// The calls of a section whose calls are each between `call` markers
/// (`open` is the section's marker: a call's own when the model wrote it
/// without the section), each read by `one`.
fn marked_calls(
    open: &str,
    body: &str,
    (call, end): (&str, &str),
    one: fn(&str) -> Option<Call>,
) -> Option<Vec<Call>> {
    if open == call {
        return Some(vec![one(body)?]);
    }
    let calls: Option<Vec<_>> = body
        .split(call)
        .skip(1)
        .map(|text| one(text.split(end).next()?))
        .collect();
    calls.filter(|c| !c.is_empty())
}

fn deepseek_call(call: &str) -> Option<Call> {
    let (head, args) = call.split_once(DS_SEP)?;
    let (name, args) = if head.trim() == "function" {
        // V3 and R1: the name, then the arguments in a fenced block.
        let (name, args) = args.split_once('\n')?;
        let args = args.trim();
        let args = args
            .strip_prefix("```json")
            .or_else(|| args.strip_prefix("```"))?;
        (name, args.trim().strip_suffix("```")?)
    } else {
        (head, args)
    };
    let args: Value = serde_json::from_str(args.trim()).ok()?;
    Some((name.trim().to_owned(), object(args)?))
}

const KIMI_CALL: &str = "<|tool_call_begin|>";
const KIMI_CALL_END: &str = "<|tool_call_end|>";
const KIMI_ARGS: &str = "<|tool_call_argument_begin|>";

/// Kimi K2: `functions.name:index<|tool_call_argument_begin|>{…}` each.
fn kimi(open: &str, body: &str) -> Option<Vec<Call>> {
    marked_calls(open, body, (KIMI_CALL, KIMI_CALL_END), kimi_call)
}

fn kimi_call(call: &str) -> Option<Call> {
    let (id, args) = call.split_once(KIMI_ARGS)?;
    let id = id.trim();
    let id = id.strip_prefix("functions.").unwrap_or(id);
    let name = id.rsplit_once(':').map_or(id, |(name, _)| name);
    let args: Value = serde_json::from_str(args.trim()).ok()?;
    Some((name.to_owned(), object(args)?))
}

/// GLM 4.5: the name on the first line, then `<arg_key>k</arg_key>` and
/// `<arg_value>v</arg_value>` pairs (values as Qwen3-Coder's).
fn glm(body: &str) -> Option<Vec<Call>> {
    let body = body.trim();
    let (name, mut rest) = match body.find("<arg_key>") {
        Some(at) => (&body[..at], &body[at..]),
        None => (body, ""),
    };
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let mut arguments = Map::new();
    while !rest.trim().is_empty() {
        let after = rest.trim().strip_prefix("<arg_key>")?;
        let (key, after) = after.split_once("</arg_key>")?;
        let after = after.trim().strip_prefix("<arg_value>")?;
        let (value, after) = after.split_once("</arg_value>")?;
        arguments.insert(key.trim().to_owned(), loose_value(value));
        rest = after;
    }
    Some(vec![(name.to_owned(), arguments)])
}

/// How a streamed call starts (see [`Syntax::head`]).
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// A call of an offered function, its JSON arguments' object starting
    /// at `args_at`.
    Call { name: String, args_at: usize },
    /// Not known yet.
    More,
    /// Not a call whose arguments can stream: the section is read whole.
    No,
}

/// The longest name-and-separator a streamed call's head may have before
/// its arguments; a longer one is read whole.
const MAX_HEAD: usize = 256;

impl Syntax {
    /// The marker before each call, for the families whose calls'
    /// arguments stream (a name, then a JSON object, then the call's end).
    fn call_marker(self) -> Option<&'static str> {
        match self {
            Syntax::Mistral => Some("[TOOL_CALLS]"),
            Syntax::Kimi => Some(KIMI_CALL),
            Syntax::DeepSeek => Some(DS_CALL),
            _ => None,
        }
    }

    /// The fence that closes a streamed call's arguments before its end
    /// (DeepSeek V3's and R1's fenced block).
    fn fence(self) -> Option<&'static str> {
        (self == Syntax::DeepSeek).then_some("```")
    }

    /// What ends a streamed call, after its arguments.
    fn call_end(self) -> Option<&'static str> {
        match self {
            Syntax::Kimi => Some(KIMI_CALL_END),
            Syntax::DeepSeek => Some(DS_CALL_END),
            _ => None,
        }
    }

    /// Where a call of an offered function begins its arguments in `buf`
    /// (what follows the section's marker `open`, or the previous call in
    /// it): `name[ARGS]{` (Mistral), `functions.name:0<|tool_call_argument_begin|>{`
    /// (Kimi), `name<｜tool▁sep｜>{` or `function<｜tool▁sep｜>name\n```json\n{`
    /// (DeepSeek), each after the call's marker where the section has one
    /// around its calls.
    fn head(self, open: &str, buf: &str, names: &[String]) -> Head {
        let Some(marker) = self.call_marker() else {
            return Head::No;
        };
        let mut at = buf.len() - buf.trim_start().len();
        if buf[at..].starts_with(marker) {
            at += marker.len();
        } else if open != marker {
            // A section around calls: each starts with its marker.
            return if marker.starts_with(&buf[at..]) {
                Head::More
            } else {
                Head::No
            };
        }
        let (name, args) = match self {
            Syntax::Mistral => {
                let rest = &buf[at..];
                if rest.starts_with('[') || rest.starts_with('{') {
                    // The JSON array of calls: read whole.
                    return Head::No;
                }
                let i = match self.up_to(rest, "[ARGS]") {
                    Ok(i) => i,
                    Err(head) => return head,
                };
                let name = rest[..i].split("[CALL_ID]").next().unwrap_or("").trim();
                (name, at + i + "[ARGS]".len())
            }
            Syntax::Kimi => {
                let rest = &buf[at..];
                let i = match self.up_to(rest, KIMI_ARGS) {
                    Ok(i) => i,
                    Err(head) => return head,
                };
                let id = rest[..i].trim();
                let id = id.strip_prefix("functions.").unwrap_or(id);
                let name = id.rsplit_once(':').map_or(id, |(name, _)| name);
                (name, at + i + KIMI_ARGS.len())
            }
            Syntax::DeepSeek => {
                let rest = &buf[at..];
                let i = match self.up_to(rest, DS_SEP) {
                    Ok(i) => i,
                    Err(head) => return head,
                };
                let head = rest[..i].trim();
                let after = at + i + DS_SEP.len();
                if head != "function" {
                    (head, after)
                } else {
                    // V3 and R1: the name on its line, then a fenced block.
                    let line = &buf[after..];
                    let nl = match self.up_to(line, "\n") {
                        Ok(nl) => nl,
                        Err(head) => return head,
                    };
                    let fence = line[nl + 1..].trim_start();
                    let fence_at = buf.len() - fence.len();
                    let Some(block) = fence.strip_prefix("```json") else {
                        return if "```json".starts_with(fence) {
                            Head::More
                        } else {
                            Head::No
                        };
                    };
                    (line[..nl].trim(), fence_at + (fence.len() - block.len()))
                }
            }
            _ => return Head::No,
        };
        if !names.iter().any(|n| n == name) {
            return Head::No;
        }
        let args_at = buf.len() - buf[args..].trim_start().len();
        match buf[args..].trim_start().chars().next() {
            None => Head::More,
            Some('{') => Head::Call {
                name: name.to_owned(),
                args_at,
            },
            Some(_) => Head::No,
        }
    }

    /// Where `separator` starts in `text`, when it comes before any other
    /// of the syntax's markers and within [`MAX_HEAD`] bytes; otherwise
    /// whether it may still come (`More`) or not (`No`). What it says
    /// depends only on text that is already final, so a head is read the
    /// same however the output is cut.
    fn up_to(self, text: &str, separator: &str) -> Result<usize, Head> {
        let first_marker = self
            .markers()
            .iter()
            // Mistral's optional call id stands in a head.
            .filter(|m| **m != separator && **m != "[CALL_ID]")
            .filter_map(|m| text.find(m))
            .min();
        match text.find(separator) {
            Some(i) if i <= MAX_HEAD && first_marker.is_none_or(|m| i < m) => Ok(i),
            Some(_) => Err(Head::No),
            None if first_marker.is_some() => Err(Head::No),
            // A separator that starts within the bound has ended by here.
            None if text.len() > MAX_HEAD + separator.len() => Err(Head::No),
            None => Err(Head::More),
        }
    }
}

/// The parser's place in the output.
#[derive(Debug, Clone)]
enum State {
    /// Nothing visible yet: for Llama 3, the output may be a bare JSON call.
    Start,
    /// Reply text, outside any section.
    Text,
    /// Inside a section opened by this marker.
    Section(&'static str),
    /// Streaming the arguments of a call, in a section opened by this marker.
    Args(&'static str, ArgsScan),
    /// After a streamed call's arguments, in a section opened by this marker.
    Tail(&'static str),
}

/// Parses streamed output of a family with one of these syntaxes into text
/// and tool calls (see the module's documentation).
#[derive(Debug, Clone)]
pub(crate) struct SectionParser {
    syntax: Syntax,
    names: Vec<String>,
    state: State,
    buf: String,
    calls: usize,
    /// The whitespace that follows a section is still to be dropped.
    skip_ws: bool,
}

impl SectionParser {
    /// A parser of `syntax` that accepts calls of the functions `names`.
    pub(crate) fn new(syntax: Syntax, names: Vec<String>) -> Self {
        SectionParser {
            syntax,
            names,
            state: State::Start,
            buf: String::new(),
            calls: 0,
            skip_ws: false,
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
                    // Llama 3 writes a call as bare JSON too (its template
                    // asks for `{"name": …, "parameters": …}` alone), and a
                    // pythonic model its list: held to the end, like a
                    // section that runs to it.
                    let bare = match self.syntax {
                        Syntax::Llama3 => visible.starts_with('{') || visible.starts_with('['),
                        Syntax::Pythonic => visible.starts_with('['),
                        _ => false,
                    };
                    self.state = if bare {
                        self.buf = visible.to_owned();
                        State::Section("")
                    } else {
                        State::Text
                    };
                }
                State::Text => {
                    if self.skip_ws {
                        // Until the first visible character, however late it comes.
                        let visible = self.buf.trim_start();
                        if visible.is_empty() {
                            self.buf.clear();
                            return;
                        }
                        self.buf = visible.to_owned();
                        self.skip_ws = false;
                    }
                    let first = self
                        .syntax
                        .opens()
                        .iter()
                        .filter_map(|open| self.buf.find(open).map(|at| (at, *open)))
                        .min_by_key(|(at, _)| *at);
                    if let Some((at, open)) = first {
                        let before: String = self.buf.drain(..at).collect();
                        text_out(before.trim_end(), out);
                        self.buf.drain(..open.len());
                        self.state = State::Section(open);
                        continue;
                    }
                    // What may become a section's marker, and the
                    // whitespace before it, are held until it is known.
                    let hold = held_before_tags(&self.buf, self.syntax.opens());
                    let head: String = self.buf.drain(..self.buf.len() - hold).collect();
                    text_out(&head, out);
                    return;
                }
                State::Section(open) => {
                    let closed = self
                        .syntax
                        .close(open)
                        .is_some_and(|close| self.buf.contains(close));
                    match self.syntax.head(open, &self.buf, &self.names) {
                        Head::Call { name, args_at } => {
                            self.buf.drain(..args_at);
                            self.calls += 1;
                            out.push(Parsed::CallStart { name });
                            self.state = State::Args(open, ArgsScan::default());
                            continue;
                        }
                        Head::More if !closed => return,
                        Head::More | Head::No => {}
                    }
                    let Some(close) = self.syntax.close(open) else {
                        // Runs to the end of the output.
                        return;
                    };
                    let Some(at) = self.buf.find(close) else {
                        return;
                    };
                    let body: String = self.buf.drain(..at).collect();
                    self.buf.drain(..close.len());
                    self.section(open, &body, Some(close), out);
                    // Whitespace after a section is the markup's.
                    self.skip_ws = true;
                    self.state = State::Text;
                }
                State::Args(open, mut scan) => {
                    // A marker (or its start) ends what may stream now.
                    let markers = self.syntax.markers();
                    let marker_at = markers.iter().filter_map(|m| self.buf.find(m)).min();
                    let upto = marker_at.unwrap_or_else(|| {
                        let hold = markers
                            .iter()
                            .map(|m| partial_tag_len(&self.buf, m))
                            .max()
                            .unwrap_or(0);
                        self.buf.len() - hold
                    });
                    if let Some(end) = scan.feed(&self.buf[..upto]) {
                        let args: String = self.buf.drain(..end).collect();
                        out.push(Parsed::Args(args));
                        self.state = State::Tail(open);
                        continue;
                    }
                    let args: String = self.buf.drain(..upto).collect();
                    if !args.is_empty() {
                        out.push(Parsed::Args(args));
                    }
                    if marker_at.is_none() {
                        self.state = State::Args(open, scan);
                        return;
                    }
                    // A marker before the object closed: the call stands as written.
                    self.state = State::Tail(open);
                }
                State::Tail(open) => {
                    let visible = self.buf.trim_start();
                    if visible.is_empty() {
                        self.buf.clear();
                        return;
                    }
                    // The call's end (DeepSeek V3's fence before it).
                    let ends = [self.syntax.call_end(), self.syntax.fence()];
                    if let Some(end) = ends.into_iter().flatten().find(|e| visible.starts_with(e)) {
                        self.buf = visible[end.len()..].to_owned();
                        continue;
                    }
                    // The next call of the section, or the section's end.
                    let next = self.syntax.call_marker();
                    let close = self.syntax.close(open);
                    if let Some(marker) = next.filter(|m| visible.starts_with(m)) {
                        // A call marker that opens sections of its own
                        // (Mistral's) is this next section's opening.
                        let from = if marker == open { marker.len() } else { 0 };
                        self.buf = visible[from..].to_owned();
                        self.state = State::Section(open);
                        continue;
                    }
                    if let Some(close) = close.filter(|c| visible.starts_with(c)) {
                        self.buf = visible[close.len()..].to_owned();
                        self.skip_ws = true;
                        self.state = State::Text;
                        continue;
                    }
                    let markup = [self.syntax.call_end(), self.syntax.fence(), next, close];
                    if markup.into_iter().flatten().any(|m| m.starts_with(visible)) {
                        return;
                    }
                    // Anything else is the reply's text.
                    self.buf = visible.to_owned();
                    self.state = State::Text;
                }
            }
        }
    }

    /// Ends the output: a section still open becomes its calls when it is
    /// whole calls, and text otherwise; held text is sent.
    pub(crate) fn finish(&mut self, out: &mut Vec<Parsed>) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Start => text_out(&rest, out),
            State::Text if self.skip_ws => text_out(rest.trim_start(), out),
            State::Text => text_out(&rest, out),
            State::Section(open) => self.section(open, &rest, None, out),
            // The arguments end with the output, as written.
            State::Args(..) => {
                if !rest.is_empty() {
                    out.push(Parsed::Args(rest));
                }
            }
            State::Tail(_) => {
                // Markup cut short is dropped; anything else is text.
                let visible = rest.trim();
                let fence = self.syntax.fence();
                let mut markup = self.syntax.markers().iter().copied().chain(fence);
                if !markup.any(|m| m.starts_with(visible)) {
                    text_out(visible, out);
                }
            }
        }
        self.state = State::Text;
    }

    /// A whole section: its calls, when each is of a function offered with
    /// an object of arguments; else the section as the text it was.
    fn section(&mut self, open: &str, body: &str, close: Option<&str>, out: &mut Vec<Parsed>) {
        let calls = self
            .syntax
            .calls(open, body)
            .filter(|calls| calls.iter().all(|(name, _)| self.names.contains(name)));
        match calls {
            Some(calls) => {
                for (name, arguments) in calls {
                    self.calls += 1;
                    out.push(Parsed::Call {
                        name,
                        arguments: Value::Object(arguments).to_string(),
                    });
                }
            }
            None => text_out(&format!("{open}{body}{}", close.unwrap_or("")), out),
        }
    }
}

/// The tool-call parser of a request: Hermes' (`crate::tools`, arguments
/// streamed), which a grammar that forces calls writes whatever the
/// family, or the family's own.
#[derive(Debug, Clone)]
pub(crate) enum CallParser {
    Hermes(ToolCallParser),
    Family(SectionParser),
}

impl CallParser {
    /// The parser for calls of `names` by a model of `syntax` (`None`:
    /// Hermes'); `forced`: a grammar writes the calls, in Hermes' syntax;
    /// `marked`: the markers are tokens of the model's vocabulary, which
    /// only count as those tokens (`crate::markup::MarkerGuard`), so a
    /// Hermes model writes no call without them either (no bare JSON call).
    pub(crate) fn new(
        syntax: Option<Syntax>,
        forced: bool,
        marked: bool,
        names: Vec<String>,
    ) -> Self {
        match syntax {
            Some(syntax) if !forced => CallParser::Family(SectionParser::new(syntax, names)),
            _ if marked => CallParser::Hermes(ToolCallParser::new(names).without_bare_calls()),
            _ => CallParser::Hermes(ToolCallParser::new(names)),
        }
    }

    pub(crate) fn push(&mut self, text: &str, out: &mut Vec<Parsed>) {
        match self {
            CallParser::Hermes(p) => p.push(text, out),
            CallParser::Family(p) => p.push(text, out),
        }
    }

    pub(crate) fn finish(&mut self, out: &mut Vec<Parsed>) {
        match self {
            CallParser::Hermes(p) => p.finish(out),
            CallParser::Family(p) => p.finish(out),
        }
    }

    #[cfg(test)]
    pub(crate) fn calls(&self) -> usize {
        match self {
            CallParser::Hermes(p) => p.calls(),
            CallParser::Family(p) => p.calls(),
        }
    }
}

/// Sends non-empty text.
fn text_out(text: &str, out: &mut Vec<Parsed>) {
    if !text.is_empty() {
        out.push(Parsed::Text(text.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markup::{MarkerGuard, unmark};
    use crate::text::TOKEN_MARK;

    /// What the parser makes of `output` fed at once, with text pieces
    /// joined.
    fn parse(syntax: Syntax, pieces: &[&str]) -> Vec<Parsed> {
        let mut parser = SectionParser::new(syntax, vec!["get_weather".into(), "add".into()]);
        let mut out = Vec::new();
        for piece in pieces {
            parser.push(piece, &mut out);
        }
        parser.finish(&mut out);
        joined(out)
    }

    /// Text pieces joined, and a streamed call (its start and the pieces
    /// of its arguments) as one call.
    fn joined(events: Vec<Parsed>) -> Vec<Parsed> {
        let mut out: Vec<Parsed> = Vec::new();
        for event in events {
            match (out.last_mut(), event) {
                (Some(Parsed::Text(have)), Parsed::Text(more)) => have.push_str(&more),
                (_, Parsed::CallStart { name }) => out.push(Parsed::Call {
                    name,
                    arguments: String::new(),
                }),
                (Some(Parsed::Call { arguments, .. }), Parsed::Args(more)) => {
                    arguments.push_str(&more)
                }
                (_, event) => out.push(event),
            }
        }
        out
    }

    fn call(name: &str, arguments: &str) -> Parsed {
        Parsed::Call {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn text(t: &str) -> Parsed {
        Parsed::Text(t.into())
    }

    /// `output` parses to `expected` whole, cut at every char boundary
    /// into two, and a char at a time.
    fn check(syntax: Syntax, output: &str, expected: &[Parsed]) {
        assert_eq!(parse(syntax, &[output]), expected, "whole: {output:?}");
        for (at, _) in output.char_indices().skip(1) {
            let (a, b) = output.split_at(at);
            assert_eq!(parse(syntax, &[a, b]), expected, "cut at {at}: {output:?}");
        }
        let chars: Vec<String> = output.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(
            parse(syntax, &pieces),
            expected,
            "a char at a time: {output:?}"
        );
    }

    const WEATHER: &str = r#"{"city":"Paris"}"#;
    /// Streamed arguments, as the model wrote them.
    const WEATHER_AS_WRITTEN: &str = r#"{"city": "Paris"}"#;

    #[test]
    fn mistral_calls_in_either_form() {
        check(
            Syntax::Mistral,
            r#"Let me look.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "add", "arguments": {"a": 1, "b": 2}}]"#,
            &[
                text("Let me look."),
                call("get_weather", WEATHER),
                call("add", r#"{"a":1,"b":2}"#),
            ],
        );
        check(
            Syntax::Mistral,
            r#"[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[CALL_ID]abc123456[ARGS]{"a": 1, "b": 2}"#,
            // Streamed: the arguments as the model wrote them.
            &[
                call("get_weather", WEATHER_AS_WRITTEN),
                call("add", r#"{"a": 1, "b": 2}"#),
            ],
        );
    }

    #[test]
    fn llama3_python_tag_calls() {
        check(
            Syntax::Llama3,
            r#"<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}"#,
            &[call("get_weather", WEATHER)],
        );
        check(
            Syntax::Llama3,
            r#"<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "add", "parameters": {"a": 1, "b": 2}}"#,
            &[
                call("get_weather", WEATHER),
                call("add", r#"{"a":1,"b":2}"#),
            ],
        );
    }

    #[test]
    fn llama3_bare_json_calls() {
        check(
            Syntax::Llama3,
            r#"{"name": "get_weather", "parameters": {"city": "Paris"}}"#,
            &[call("get_weather", WEATHER)],
        );
        // JSON that is not a call is the reply's text.
        check(
            Syntax::Llama3,
            r#"{"answer": 4}"#,
            &[text(r#"{"answer": 4}"#)],
        );
    }

    #[test]
    fn pythonic_calls() {
        check(
            Syntax::Pythonic,
            r#"[get_weather(city="Paris"), add(a=1, b=2)]"#,
            &[
                call("get_weather", WEATHER),
                call("add", r#"{"a":1,"b":2}"#),
            ],
        );
        // Llama 4: after `<|python_start|>`, with Python's literals.
        check(
            Syntax::Pythonic,
            "Let me check.<|python_start|>[add(a=-1.5, b=[1, 'x\\'y', {'k': None}], c=True)]<|python_end|>",
            &[
                text("Let me check."),
                call("add", r#"{"a":-1.5,"b":[1,"x'y",{"k":null}],"c":true}"#),
            ],
        );
        // Or its JSON calls.
        check(
            Syntax::Pythonic,
            r#"<|python_start|><|python_end|>{"name": "get_weather", "parameters": {"city": "Paris"}}"#,
            &[call("get_weather", WEATHER)],
        );
        // A list that is not calls is text.
        check(Syntax::Pythonic, "[1, 2, 3]", &[text("[1, 2, 3]")]);
        check(
            Syntax::Pythonic,
            "[get_weather(city=)]",
            &[text("[get_weather(city=)]")],
        );
        // Nesting is bounded.
        let deep = format!("[add(a={}{})]", "[".repeat(100), "]".repeat(100));
        check(Syntax::Pythonic, &deep, &[text(&deep)]);
    }

    #[test]
    fn tool_formats_have_names() {
        for format in ToolFormat::ALL {
            assert_eq!(ToolFormat::parse(format.name()), Some(format));
        }
        assert_eq!(ToolFormat::parse("nope"), None);
    }

    #[test]
    fn qwen3_coder_xml_calls_with_text_around() {
        check(
            Syntax::Qwen3Coder,
            "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>",
            &[
                text("I'll check."),
                call("get_weather", WEATHER),
                call("add", r#"{"a":1,"b":2}"#),
            ],
        );
    }

    #[test]
    fn deepseek_v3_and_v3_1_calls() {
        check(
            Syntax::DeepSeek,
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": 1, \"b\": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            &[
                call("get_weather", WEATHER_AS_WRITTEN),
                call("add", r#"{"a": 1, "b": 2}"#),
            ],
        );
        check(
            Syntax::DeepSeek,
            "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            &[text("Sure."), call("get_weather", WEATHER_AS_WRITTEN)],
        );
    }

    #[test]
    fn kimi_k2_calls() {
        check(
            Syntax::Kimi,
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.add:1<|tool_call_argument_begin|>{\"a\": 1, \"b\": 2}<|tool_call_end|><|tool_calls_section_end|>",
            &[
                call("get_weather", WEATHER_AS_WRITTEN),
                call("add", r#"{"a": 1, "b": 2}"#),
            ],
        );
    }

    #[test]
    fn arguments_stream_in_the_families_that_write_a_name_then_json() {
        for (syntax, start) in [
            (Syntax::Mistral, "[TOOL_CALLS]get_weather[ARGS]"),
            (
                Syntax::Kimi,
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>",
            ),
            (
                Syntax::DeepSeek,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>",
            ),
            (
                Syntax::DeepSeek,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n",
            ),
        ] {
            let mut parser = SectionParser::new(syntax, vec!["get_weather".into()]);
            let mut out = Vec::new();
            parser.push("Sure.", &mut out);
            parser.push(start, &mut out);
            parser.push("{\"city\": \"Pa", &mut out);
            assert_eq!(
                out,
                [
                    text("Sure."),
                    Parsed::CallStart {
                        name: "get_weather".into()
                    },
                    Parsed::Args("{\"city\": \"Pa".into())
                ],
                "{syntax:?}"
            );
        }
    }

    #[test]
    fn the_whitespace_after_a_section_is_dropped_however_late_it_comes() {
        // Found by the model_families fuzz target: the space after the
        // section's end stayed when the end came last in a token.
        check(
            Syntax::Kimi,
            "<|tool_calls_section_begin|>x<|tool_calls_section_end|> 1",
            &[text(
                "<|tool_calls_section_begin|>x<|tool_calls_section_end|>1",
            )],
        );
        check(
            Syntax::Glm,
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>  \n Done.",
            &[call("get_weather", WEATHER), text("Done.")],
        );
    }

    #[test]
    fn a_streamed_call_beside_one_not_offered() {
        // The first call streams; the second, of a function not offered,
        // is the rest of the section as text, after the section's marker.
        check(
            Syntax::Kimi,
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.rm:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
            &[
                call("get_weather", WEATHER_AS_WRITTEN),
                text(
                    "<|tool_calls_section_begin|><|tool_call_begin|>functions.rm:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
                ),
            ],
        );
        // A second call whose head cannot stream is read whole.
        check(
            Syntax::Mistral,
            r#"[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]"x""#,
            &[
                call("get_weather", WEATHER_AS_WRITTEN),
                text(r#"[TOOL_CALLS]add[ARGS]"x""#),
            ],
        );
        // A marker inside a head ends it: not a call.
        check(
            Syntax::Kimi,
            "<|tool_call_begin|>functions.get<|tool_call_end|>_weather:0<|tool_call_argument_begin|>{}",
            &[text(
                "<|tool_call_begin|>functions.get<|tool_call_end|>_weather:0<|tool_call_argument_begin|>{}",
            )],
        );
        // Only DeepSeek's calls end with a fence: after Mistral's call, a
        // fence is the reply's.
        check(
            Syntax::Mistral,
            "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}\n```py\nx```",
            &[call("get_weather", WEATHER_AS_WRITTEN), text("```py\nx```")],
        );
        // Arguments that are no object are read whole, as text.
        check(
            Syntax::Mistral,
            "[TOOL_CALLS]get_weather[ARGS]Paris",
            &[text("[TOOL_CALLS]get_weather[ARGS]Paris")],
        );
    }

    #[test]
    fn glm_calls() {
        check(
            Syntax::Glm,
            "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
            &[text("Checking."), call("get_weather", WEATHER)],
        );
    }

    #[test]
    fn granite_and_phi4_tool_call_token() {
        check(
            Syntax::ToolCallToken,
            r#"<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]"#,
            &[call("get_weather", WEATHER)],
        );
        check(
            Syntax::ToolCallToken,
            r#"<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>Done."#,
            &[call("get_weather", WEATHER), text("Done.")],
        );
    }

    #[test]
    fn command_r_actions() {
        check(
            Syntax::CommandR,
            "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n]<|END_ACTION|>",
            &[call("get_weather", WEATHER)],
        );
    }

    #[test]
    fn a_call_of_a_function_not_offered_is_text() {
        let output = r#"[TOOL_CALLS][{"name": "rm_rf", "arguments": {}}]"#;
        check(Syntax::Mistral, output, &[text(output)]);
        let output = "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>";
        check(Syntax::Qwen3Coder, output, &[text(output)]);
    }

    #[test]
    fn text_that_only_looks_like_a_marker_is_text() {
        check(
            Syntax::Mistral,
            "Use [TOOL] tags [like this].",
            &[text("Use [TOOL] tags [like this].")],
        );
        check(Syntax::Kimi, "a <| b", &[text("a <| b")]);
    }

    #[test]
    fn every_marker_a_parser_looks_for_is_one_the_engine_shows() {
        for syntax in [
            Syntax::Mistral,
            Syntax::Llama3,
            Syntax::Pythonic,
            Syntax::Qwen3Coder,
            Syntax::DeepSeek,
            Syntax::Kimi,
            Syntax::Glm,
            Syntax::ToolCallToken,
            Syntax::CommandR,
        ] {
            for open in syntax.opens() {
                assert!(syntax.markers().contains(open), "{syntax:?} {open}");
                if let Some(close) = syntax.close(open) {
                    assert!(syntax.markers().contains(&close), "{syntax:?} {close}");
                }
            }
        }
    }

    #[test]
    fn a_grammar_that_forces_calls_is_parsed_as_hermes() {
        let names = vec!["get_weather".to_owned()];
        let hermes = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        for (syntax, forced) in [(None, false), (Some(Syntax::Mistral), true)] {
            let mut parser = CallParser::new(syntax, forced, false, names.clone());
            let mut out = Vec::new();
            parser.push(hermes, &mut out);
            parser.finish(&mut out);
            assert_eq!(parser.calls(), 1, "{syntax:?} forced {forced}: {out:?}");
        }
        let mut family = CallParser::new(Some(Syntax::Mistral), false, false, names);
        let mut out = Vec::new();
        family.push(
            r#"[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}"#,
            &mut out,
        );
        family.finish(&mut out);
        assert_eq!(joined(out), [call("get_weather", WEATHER_AS_WRITTEN)]);
    }

    /// `output` with a [`TOKEN_MARK`] before each of `syntax`'s markers:
    /// as the engine writes it when the model wrote them as their tokens.
    fn as_tokens(syntax: Syntax, output: &str) -> String {
        let mut markers = syntax.markers().to_vec();
        markers.sort_by_key(|m| std::cmp::Reverse(m.len()));
        let mut out = String::new();
        let mut rest = output;
        while let Some(c) = rest.chars().next() {
            match markers.iter().find(|m| rest.starts_with(**m)) {
                Some(marker) => {
                    out.push(TOKEN_MARK);
                    out.push_str(marker);
                    rest = &rest[marker.len()..];
                }
                None => {
                    out.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        out
    }

    /// What the guard of `syntax`'s markers and its parser make of
    /// `pieces`, the guard's marks taken out.
    fn guarded(syntax: Syntax, pieces: &[&str]) -> Vec<Parsed> {
        let markers: Vec<String> = syntax.markers().iter().map(|m| (*m).to_owned()).collect();
        let mut guard = MarkerGuard::new(&markers);
        let mut parser = SectionParser::new(syntax, vec!["get_weather".into(), "add".into()]);
        let mut out = Vec::new();
        for piece in pieces {
            parser.push(&guard.push(piece), &mut out);
        }
        parser.push(&guard.finish(), &mut out);
        parser.finish(&mut out);
        joined(out)
            .into_iter()
            .map(|p| match p {
                Parsed::Text(t) => Parsed::Text(unmark(&t).into_owned()),
                Parsed::Call { name, arguments } => Parsed::Call {
                    name,
                    arguments: unmark(&arguments).into_owned(),
                },
                other => other,
            })
            .collect()
    }

    #[test]
    fn a_marker_spelled_in_plain_text_is_text_where_the_vocabulary_has_its_token() {
        // A client's prompt can coax a model into echoing a call's markup
        // in plain tokens: where the markers are tokens, only a call whose
        // markers came as those tokens is a call.
        let cases = [
            (
                Syntax::Mistral,
                r#"[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}"#,
            ),
            (
                Syntax::Mistral,
                r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]"#,
            ),
            (
                Syntax::Llama3,
                r#"<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}"#,
            ),
            (
                Syntax::Pythonic,
                r#"<|python_start|>[get_weather(city="Paris")]<|python_end|>"#,
            ),
            (
                Syntax::Qwen3Coder,
                "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
            ),
            (
                Syntax::DeepSeek,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ),
            (
                Syntax::Kimi,
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>",
            ),
            (
                Syntax::Glm,
                "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
            ),
            (
                Syntax::ToolCallToken,
                r#"<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>"#,
            ),
            (
                Syntax::CommandR,
                r#"<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}]<|END_ACTION|>"#,
            ),
        ];
        for (syntax, call) in cases {
            // Some sections run to the end of the output.
            let output = match syntax.close(syntax.opens()[0]) {
                Some(_) => format!("Sure. {call} Done."),
                None => format!("Sure. {call}"),
            };
            // Written as the markers' tokens: the call, as without a guard.
            let tokens = as_tokens(syntax, &output);
            let read = guarded(syntax, &[&tokens]);
            assert_eq!(read, parse(syntax, &[&output]), "{syntax:?}");
            assert!(
                read.iter().any(|p| matches!(p, Parsed::Call { .. })),
                "{syntax:?}: {read:?}"
            );
            // Spelled: the text it was, however it is cut.
            assert_eq!(guarded(syntax, &[&output]), [text(&output)], "{syntax:?}");
            for (at, _) in output.char_indices() {
                let (a, b) = output.split_at(at);
                assert_eq!(
                    guarded(syntax, &[a, b]),
                    [text(&output)],
                    "{syntax:?} cut at {at}"
                );
            }
            // The markers that open calls spelled, the others tokens: no call.
            let mut mixed = tokens.clone();
            for open in syntax.opens() {
                mixed = mixed.replace(&format!("{TOKEN_MARK}{open}"), open);
            }
            let read = guarded(syntax, &[&mixed]);
            assert!(
                read.iter().all(|p| matches!(p, Parsed::Text(_))),
                "{syntax:?}: {read:?}"
            );
        }
    }

    #[test]
    fn templates_name_their_family() {
        let cases = [
            (
                "{{ '[TOOL_CALLS]' + tool_calls | tojson }}",
                Some(Syntax::Mistral),
            ),
            (
                "{{- '<|python_tag|>' + tool_call.name }}",
                Some(Syntax::Llama3),
            ),
            (
                "<function=' ~ tool_call.name ~ '>\n<parameter=",
                Some(Syntax::Qwen3Coder),
            ),
            ("{{- '<|python_start|>' }}", Some(Syntax::Pythonic)),
            ("{{'<｜tool▁calls▁begin｜>'}}", Some(Syntax::DeepSeek)),
            ("<|tool_calls_section_begin|>", Some(Syntax::Kimi)),
            ("<tool_call>{{ tc.name }}<arg_key>", Some(Syntax::Glm)),
            ("<|tool_call|>", Some(Syntax::ToolCallToken)),
            ("<tool_call>\n{\"name\": ...}</tool_call>", None),
        ];
        for (template, syntax) in cases {
            assert_eq!(Syntax::of_template(template), syntax, "{template}");
        }
    }
}
