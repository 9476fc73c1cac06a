//! Grammars for constrained decoding: JSON Schema to GBNF through llama.cpp's
//! own converter (`json_schema_to_grammar`), and the few GBNF edits the chat
//! layer needs on top of it (prefixing rule names so two grammars can be
//! joined, wrapping tool-call objects in `<tool_call>` tags).
//!
//! Every grammar built here has its start rule named `root`.

use serde_json::Value;
use svc_core::engine::ToolSpec;

use crate::sampler::Grammar;

/// The start rule of every grammar built here.
const ROOT: &str = "root";

/// Most bytes of one JSON schema (as compact JSON) that becomes a grammar.
/// The converter and llama.cpp's grammar parser take time that grows with
/// it, and a grammar with many alternatives (a long `enum`) makes every
/// sampled token slower for the whole batch.
pub(crate) const MAX_SCHEMA_BYTES: usize = 32 * 1024;
/// Most bytes of a whole decoding grammar (GBNF), all tools together.
pub(crate) const MAX_GRAMMAR_BYTES: usize = 128 * 1024;
/// Most alternatives in one rule of a grammar (an `enum`'s values, a
/// `oneOf`'s branches): each is a parse stack the sampler checks against
/// every candidate token while the rule is open.
pub(crate) const MAX_ALTERNATIVES: usize = 256;

/// Converts a JSON Schema into GBNF whose `root` matches exactly the JSON
/// texts the schema accepts (llama.cpp's converter). `Err` when the converter
/// refuses the schema or it is too large.
pub(crate) fn from_schema(schema: &Value) -> Result<String, String> {
    schema_text_to_gbnf(&schema.to_string())
}

fn schema_text_to_gbnf(schema: &str) -> Result<String, String> {
    if schema.len() > MAX_SCHEMA_BYTES {
        return Err(format!(
            "the schema is too large for a decoding grammar ({} bytes; at most {MAX_SCHEMA_BYTES})",
            schema.len()
        ));
    }
    let gbnf = llama_cpp_2::json_schema_to_grammar(schema).map_err(|e| {
        format!("the schema cannot be turned into a decoding grammar (llama.cpp's converter refused it: {e})")
    })?;
    let gbnf = compact_space(&gbnf);
    check_size(&gbnf)?;
    Ok(gbnf)
}

/// `Err` when `gbnf` is too large or has a rule with too many alternatives
/// (see [`MAX_GRAMMAR_BYTES`], [`MAX_ALTERNATIVES`]).
pub(crate) fn check_size(gbnf: &str) -> Result<(), String> {
    if gbnf.len() > MAX_GRAMMAR_BYTES {
        return Err(format!(
            "the schema makes a decoding grammar too large ({} bytes; at most {MAX_GRAMMAR_BYTES})",
            gbnf.len()
        ));
    }
    let most = most_alternatives(gbnf);
    if most > MAX_ALTERNATIVES {
        return Err(format!(
            "the schema has {most} alternatives in one place (an enum's values or a oneOf's branches); at most {MAX_ALTERNATIVES}"
        ));
    }
    Ok(())
}

/// The most `|` alternatives of one group or rule of `gbnf` (outside
/// literals, character classes and comments), plus one.
fn most_alternatives(gbnf: &str) -> usize {
    // Alternatives counted per nesting depth of parentheses, per rule line.
    let mut most = 0;
    let mut open: Vec<usize> = vec![1];
    let mut chars = gbnf.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' | '[' => {
                let close = if c == '"' { '"' } else { ']' };
                while let Some(d) = chars.next() {
                    if d == '\\' {
                        chars.next();
                    } else if d == close {
                        break;
                    }
                }
            }
            '#' => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
                open.truncate(1);
                open[0] = 1;
            }
            '(' => open.push(1),
            ')' => {
                if open.len() > 1
                    && let Some(n) = open.pop()
                {
                    most = most.max(n);
                }
            }
            '|' => {
                if let Some(n) = open.last_mut() {
                    *n += 1;
                }
            }
            '\n' => {
                // A rule may go on over several lines; only `::=` starts another.
            }
            ':' => {
                if let Some(n) = open.first_mut() {
                    most = most.max(*n);
                    *n = 1;
                }
                open.truncate(1);
            }
            _ => {}
        }
    }
    most.max(open.into_iter().max().unwrap_or(1))
}

/// The whitespace rule svc uses between JSON tokens: at most one space.
pub(crate) const SPACE_RULE: &str = "space ::= \" \"?";

/// `gbnf` with llama.cpp's whitespace rule (`| " " | "\n"{1,2} [ \t]{0,20}`:
/// up to 22 characters between any two JSON tokens) replaced by
/// [`SPACE_RULE`]. A model then cannot spend its tokens on indentation (a
/// random or confused one otherwise runs to `max_tokens` in whitespace), and
/// the JSON is compact, as OpenAI's is. The converter names its rule
/// `space`; a schema's own `space` definition gets another name.
fn compact_space(gbnf: &str) -> String {
    gbnf.lines()
        .map(|line| {
            if line.starts_with("space ::=") {
                SPACE_RULE
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The schema of one call of `tool`: `{"name": <its name>, "arguments": <its parameters>}`,
/// written by hand so that `name` comes first (serde_json may sort keys).
pub(crate) fn call_schema(tool: &ToolSpec) -> String {
    let name = Value::String(tool.name.clone());
    let parameters = if tool.parameters.is_null() {
        Value::Object(serde_json::Map::new())
    } else {
        tool.parameters.clone()
    };
    format!(
        r#"{{"type":"object","properties":{{"name":{{"const":{name}}},"arguments":{parameters}}},"required":["name","arguments"]}}"#
    )
}

/// A grammar for one tool call in Hermes' format:
/// `<tool_call>\n{json}\n</tool_call>`, where the JSON is a call of one of
/// `tools`. One call only: a grammar that allowed another block after the
/// first would let a small model's habit of writing a newline there force it
/// into call after call (llama-server's default, `parallel_tool_calls`
/// false, is one call as well).
///
/// `Err((i, why))` names the tool whose parameters the converter refused.
pub(crate) fn tool_call(tools: &[&ToolSpec]) -> Result<String, (usize, String)> {
    let mut gbnf = String::new();
    let mut alternatives = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let one = schema_text_to_gbnf(&call_schema(tool)).map_err(|e| (i, e))?;
        let prefix = format!("call{i}-");
        gbnf.push_str(&prefixed(&one, &prefix));
        alternatives.push(format!("{prefix}{ROOT}"));
    }
    gbnf.push_str(&format!("svc-call ::= {}\n", alternatives.join(" | ")));
    gbnf.push_str(&format!(
        "{ROOT} ::= \"<tool_call>\\n\" svc-call \"\\n</tool_call>\"\n"
    ));
    Ok(gbnf)
}

/// A grammar that matches what `a` or `b` matches (both with a `root` rule).
pub(crate) fn either(a: &str, b: &str) -> String {
    let mut gbnf = prefixed(a, "a-");
    gbnf.push_str(&prefixed(b, "b-"));
    gbnf.push_str(&format!("{ROOT} ::= a-{ROOT} | b-{ROOT}\n"));
    gbnf
}

/// `gbnf` as a [`Grammar`] starting at `root`.
pub(crate) fn grammar(gbnf: String) -> Grammar {
    Grammar {
        gbnf,
        root: ROOT.to_owned(),
    }
}

/// `gbnf` with `prefix` put before every rule name (definitions and
/// references), so it can sit beside another grammar without clashes.
/// String literals, character classes, repetition counts, token references
/// and comments are copied as they are.
pub(crate) fn prefixed(gbnf: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(gbnf.len() + gbnf.len() / 4);
    let mut chars = gbnf.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '[' | '{' | '<' => {
                let close = match c {
                    '"' => '"',
                    '[' => ']',
                    '{' => '}',
                    _ => '>',
                };
                out.push(c);
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == '\\' {
                        if let Some(escaped) = chars.next() {
                            out.push(escaped);
                        }
                    } else if d == close {
                        break;
                    }
                }
            }
            '#' => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            c if is_word_char(c) => {
                out.push_str(prefix);
                out.push(c);
                while let Some(&d) = chars.peek() {
                    if !is_word_char(d) {
                        break;
                    }
                    out.push(d);
                    chars.next();
                }
            }
            c => out.push(c),
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Characters of a GBNF rule name (llama.cpp's `is_word_char`).
fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prefixing_renames_rules_only() {
        let gbnf = concat!(
            "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n",
            "root ::= \"{\" space city-kv \"}\" space # a comment with words\n",
            "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n",
            "string ::= \"\\\"\" char* \"\\\"\" space\n",
            "city-kv ::= \"\\\"city\\\"\" space \":\" space string <[42]>\n",
        );
        let out = prefixed(gbnf, "p-");
        assert_eq!(
            out,
            concat!(
                "p-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n",
                "p-root ::= \"{\" p-space p-city-kv \"}\" p-space # a comment with words\n",
                "p-space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n",
                "p-string ::= \"\\\"\" p-char* \"\\\"\" p-space\n",
                "p-city-kv ::= \"\\\"city\\\"\" p-space \":\" p-space p-string <[42]>\n",
            )
        );
    }

    #[test]
    fn schemas_convert_and_bad_ones_are_refused() {
        let gbnf = from_schema(&json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        }))
        .unwrap();
        assert!(gbnf.contains("root ::="), "{gbnf}");
        assert!(gbnf.contains(&format!("\n{SPACE_RULE}\n")), "{gbnf}");
        assert_eq!(gbnf.matches("space ::=").count(), 1, "{gbnf}");
        assert!(from_schema(&json!({"type": "no-such-type"})).is_err());
        assert!(from_schema(&json!({"$ref": "https://example.com/schema.json"})).is_err());
    }

    #[test]
    fn call_schema_puts_the_name_first() {
        let tool = ToolSpec {
            name: "get_weather".into(),
            description: None,
            parameters: json!({"type": "object"}),
        };
        let schema = call_schema(&tool);
        assert!(schema.find("\"name\"").unwrap() < schema.find("\"arguments\"").unwrap());
        let parsed: Value = serde_json::from_str(&schema).unwrap();
        assert_eq!(parsed["properties"]["name"]["const"], "get_weather");
        let gbnf = tool_call(&[&tool]).unwrap();
        assert!(
            gbnf.ends_with("root ::= \"<tool_call>\\n\" svc-call \"\\n</tool_call>\"\n"),
            "{gbnf}"
        );
        assert!(gbnf.contains("svc-call ::= call0-root\n"), "{gbnf}");
    }

    #[test]
    fn either_joins_two_grammars() {
        let out = either("root ::= x\nx ::= \"a\"\n", "root ::= \"b\"");
        assert_eq!(
            out,
            "a-root ::= a-x\na-x ::= \"a\"\nb-root ::= \"b\"\nroot ::= a-root | b-root\n"
        );
    }
}
