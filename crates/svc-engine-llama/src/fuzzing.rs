//! Entry points for the fuzz targets in `fuzz/`, which feed the streaming
//! parsers of model output and the history rewriting untrusted text. Not
//! part of the API: the parsers stay crate-private, these wrappers only
//! drive them.

use svc_core::engine::{ChatMessage, ToolSpec};

use crate::reasoning::{Piece, ThinkSplitter};
use crate::tools::{Parsed, ToolCallParser, ToolSupport};

/// What the tool-call parser sent on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOutput {
    Text(String),
    Call { name: String, arguments: String },
}

/// Streams `pieces` through the tool-call parser that accepts calls of
/// `names`, then ends the output. A streamed call (its start and the
/// pieces of its arguments) comes back as one `Call`.
pub fn parse_tool_calls(names: &[String], pieces: &[&str]) -> Vec<ToolOutput> {
    let mut parser = ToolCallParser::new(names.to_vec());
    let mut out = Vec::new();
    for piece in pieces {
        parser.push(piece, &mut out);
    }
    parser.finish(&mut out);
    let mut calls: Vec<ToolOutput> = Vec::new();
    for p in out {
        match p {
            Parsed::Text(t) => calls.push(ToolOutput::Text(t)),
            Parsed::Call { name, arguments } => calls.push(ToolOutput::Call { name, arguments }),
            Parsed::CallStart { name } => calls.push(ToolOutput::Call {
                name,
                arguments: String::new(),
            }),
            Parsed::Args(more) => {
                if let Some(ToolOutput::Call { arguments, .. }) = calls.last_mut() {
                    arguments.push_str(&more);
                }
            }
        }
    }
    calls
}

/// What the think splitter sent on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThinkOutput {
    Reasoning(String),
    Content(String),
}

/// Streams `pieces` through the think splitter (`opened`: the prompt
/// already opened the think block), then ends the output.
pub fn split_think(opened: bool, pieces: &[&str]) -> Vec<ThinkOutput> {
    let mut splitter = ThinkSplitter::new(opened);
    let mut out = Vec::new();
    for piece in pieces {
        splitter.push(piece, &mut out);
    }
    splitter.finish(&mut out);
    out.into_iter()
        .map(|p| match p {
            Piece::Reasoning(t) => ThinkOutput::Reasoning(t),
            Piece::Content(t) => ThinkOutput::Content(t),
        })
        .collect()
}

/// The history as the engine renders it with the template `source`: tool
/// calls and results rewritten for what the template cannot show, and the
/// tools' system block when it does not render `tools`.
pub fn prepare_messages(
    messages: &[ChatMessage],
    tools: &[ToolSpec],
    source: &str,
) -> Vec<ChatMessage> {
    crate::tools::prepare_messages(messages, tools, ToolSupport::of(source))
}

/// What a model family's parser sent on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FamilyOutput {
    Text(String),
    Reasoning(String),
    /// A call (a streamed one's start and arguments joined).
    Call {
        name: String,
        arguments: String,
    },
}

/// Streams `pieces` through the parser of the tool-call format named
/// `format` (a `ToolFormat` name: `mistral`, `pythonic`, ...; or
/// `harmony`, gpt-oss's channels, which carry reasoning too) that accepts
/// calls of `names`, then ends the output; `None` for a name it does not
/// know or for `hermes` (see [`parse_tool_calls`]). Consecutive pieces of
/// one kind come back joined.
pub fn parse_family(format: &str, names: &[String], pieces: &[&str]) -> Option<Vec<FamilyOutput>> {
    let mut out: Vec<FamilyOutput> = Vec::new();
    let mut parsed = Vec::new();
    if format == "harmony" {
        let mut parser = crate::harmony::HarmonyParser::new(names.to_vec());
        let mut said = Vec::new();
        for piece in pieces {
            parser.push(piece, &mut said);
        }
        parser.finish(&mut said);
        for item in said {
            match item {
                crate::harmony::Said::Piece(Piece::Reasoning(t)) => {
                    join(&mut out, FamilyOutput::Reasoning(t));
                }
                crate::harmony::Said::Piece(Piece::Content(t)) => parsed.push(Parsed::Text(t)),
                crate::harmony::Said::Call(p) => parsed.push(p),
            }
            for p in parsed.drain(..) {
                push_parsed(&mut out, p);
            }
        }
        return Some(out);
    }
    let syntax = crate::families::ToolFormat::parse(format)?.syntax()?;
    let mut parser = crate::families::SectionParser::new(syntax, names.to_vec());
    for piece in pieces {
        parser.push(piece, &mut parsed);
    }
    parser.finish(&mut parsed);
    for p in parsed {
        push_parsed(&mut out, p);
    }
    Some(out)
}

fn push_parsed(out: &mut Vec<FamilyOutput>, parsed: Parsed) {
    match parsed {
        Parsed::Text(t) => join(out, FamilyOutput::Text(t)),
        Parsed::Call { name, arguments } => out.push(FamilyOutput::Call { name, arguments }),
        Parsed::CallStart { name } => out.push(FamilyOutput::Call {
            name,
            arguments: String::new(),
        }),
        Parsed::Args(more) => {
            if let Some(FamilyOutput::Call { arguments, .. }) = out.last_mut() {
                arguments.push_str(&more);
            }
        }
    }
}

fn join(out: &mut Vec<FamilyOutput>, item: FamilyOutput) {
    match (out.last_mut(), item) {
        (Some(FamilyOutput::Text(a)), FamilyOutput::Text(b))
        | (Some(FamilyOutput::Reasoning(a)), FamilyOutput::Reasoning(b)) => a.push_str(&b),
        (_, item) => out.push(item),
    }
}
