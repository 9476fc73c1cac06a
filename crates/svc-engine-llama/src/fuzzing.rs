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
