//! Small pieces shared by the streaming parsers of model output (think
//! blocks, tool calls): how much of a text's end could still grow into a
//! tag, whitespace trimming that works on a stream, and the guard that
//! tells a marker the model wrote as its token from the same text spelled
//! plainly.

use crate::text::{PLAIN_MARK, TOKEN_MARK};

/// Length in bytes of the longest end of `text` that is a proper, non-empty
/// start of `tag` (what must be held back because it may become `tag`).
pub(crate) fn partial_tag_len(text: &str, tag: &str) -> usize {
    let max = tag.len().saturating_sub(1).min(text.len());
    (1..=max)
        .rev()
        .find(|&k| {
            let at = text.len() - k;
            text.is_char_boundary(at) && tag.starts_with(&text[at..])
        })
        .unwrap_or(0)
}

/// Length in bytes of the end of `text` that text outside a tag must hold
/// back: the longest start of one of `tags`, and the whitespace before it
/// (whitespace next to a tag is the markup's, not the text's).
pub(crate) fn held_before_tags(text: &str, tags: &[&str]) -> usize {
    let partial = tags
        .iter()
        .map(|tag| partial_tag_len(text, tag))
        .max()
        .unwrap_or(0);
    partial + trailing_ws_len(&text[..text.len() - partial])
}

/// Length in bytes of the whitespace at the end of `text`.
pub(crate) fn trailing_ws_len(text: &str) -> usize {
    text.len() - text.trim_end().len()
}

/// Trims a streamed text at both ends: whitespace before the first visible
/// character is dropped, whitespace after the last one is held back until
/// more text follows, and dropped at the end.
#[derive(Debug, Clone, Default)]
pub(crate) struct WsTrim {
    started: bool,
    held: String,
}

impl WsTrim {
    /// Adds `text`; returns what can be sent now (may be empty).
    pub(crate) fn push(&mut self, text: &str) -> String {
        let text = if self.started {
            text
        } else {
            text.trim_start()
        };
        if text.is_empty() {
            return String::new();
        }
        self.started = true;
        self.held.push_str(text);
        let keep = trailing_ws_len(&self.held);
        let rest = self.held.split_off(self.held.len() - keep);
        std::mem::replace(&mut self.held, rest)
    }

    /// Ends the text: the held whitespace is dropped.
    pub(crate) fn finish(&mut self) {
        self.held.clear();
    }
}

/// Tells the markers a model wrote as their tokens from the same text
/// spelled in plain tokens (which a client's prompt can coax a model into
/// echoing), for the markers of a vocabulary's that are tokens of their own.
///
/// The engine writes [`TOKEN_MARK`] before each such token's text (see
/// [`crate::text::TextAssembler::marking`]). Here the mark is taken out,
/// and the same marker without it gets a [`PLAIN_MARK`] after its first
/// character, so no parser reads it; [`unmark`] takes that out of what
/// the parsers send on, so the client sees the model's text as it was.
#[derive(Debug, Clone)]
pub(crate) struct MarkerGuard {
    /// The markers that count only as their tokens, longest first.
    markers: Vec<String>,
    /// The end of the text that may still become a marker.
    held: String,
}

impl MarkerGuard {
    /// A guard of `markers`.
    pub(crate) fn new(markers: &[String]) -> Self {
        let mut markers: Vec<String> = markers.iter().filter(|m| !m.is_empty()).cloned().collect();
        markers.sort_by_key(|m| std::cmp::Reverse(m.len()));
        MarkerGuard {
            markers,
            held: String::new(),
        }
    }

    /// Adds marked text; returns what the parsers may read now.
    pub(crate) fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        let held = std::mem::take(&mut self.held);
        let mut out = String::with_capacity(held.len());
        let mut i = 0;
        while i < held.len() {
            let rest = &held[i..];
            if let Some(after) = rest.strip_prefix(TOKEN_MARK) {
                if let Some(marker) = self.markers.iter().find(|m| after.starts_with(m.as_str())) {
                    out.push_str(marker);
                    i += TOKEN_MARK.len_utf8() + marker.len();
                } else if self.may_become(after) {
                    break;
                } else {
                    // No marker follows (cannot happen): the mark alone goes.
                    i += TOKEN_MARK.len_utf8();
                }
                continue;
            }
            if let Some(marker) = self.markers.iter().find(|m| rest.starts_with(m.as_str())) {
                let first = marker.chars().next().map_or(0, char::len_utf8);
                out.push_str(&marker[..first]);
                out.push(PLAIN_MARK);
                out.push_str(&marker[first..]);
                i += marker.len();
                continue;
            }
            if self.may_become(rest) {
                break;
            }
            let c = rest.chars().next().map_or(1, char::len_utf8);
            out.push_str(&rest[..c]);
            i += c;
        }
        self.held = held[i..].to_owned();
        out
    }

    /// Ends the text: what was held, which became no marker.
    pub(crate) fn finish(&mut self) -> String {
        std::mem::take(&mut self.held).replace(TOKEN_MARK, "")
    }

    /// Whether `rest` (the end of the text) is the start of a marker.
    fn may_become(&self, rest: &str) -> bool {
        self.markers
            .iter()
            .any(|m| m.len() > rest.len() && m.starts_with(rest))
    }
}

/// `text` without the marks of [`MarkerGuard`]: the model's text.
pub(crate) fn unmark(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains([TOKEN_MARK, PLAIN_MARK]) {
        std::borrow::Cow::Owned(text.replace([TOKEN_MARK, PLAIN_MARK], ""))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_marked_marker_stays_a_marker() {
        let markers = ["<tool_call>".to_owned(), "</tool_call>".to_owned()];
        let run = |pieces: &[&str]| {
            let mut guard = MarkerGuard::new(&markers);
            let mut out: String = pieces.iter().map(|p| guard.push(p)).collect();
            out.push_str(&guard.finish());
            out
        };
        let marked = "a \u{FDD1}<tool_call>{}\u{FDD1}</tool_call> b";
        let plain = "a <tool_call>{} </tool_call>é <tool";
        for (text, read) in [
            (marked, "a <tool_call>{}</tool_call> b"),
            (plain, "a <\u{FDD2}tool_call>{} <\u{FDD2}/tool_call>é <tool"),
        ] {
            assert_eq!(run(&[text]), read);
            // However it is cut.
            for (at, _) in text.char_indices() {
                assert_eq!(run(&[&text[..at], &text[at..]]), read, "cut at {at}");
            }
            assert_eq!(unmark(read), text.replace('\u{FDD1}', ""));
        }
        // Nothing to guard: the text as it is, marks out.
        let mut guard = MarkerGuard::new(&[]);
        assert_eq!(guard.push("x<tool_call>\u{FDD1}"), "x<tool_call>");
    }

    #[test]
    fn partial_tags() {
        assert_eq!(partial_tag_len("abc <tool", "<tool_call>"), 5);
        assert_eq!(partial_tag_len("abc <", "<tool_call>"), 1);
        assert_eq!(partial_tag_len("abc", "<tool_call>"), 0);
        // The whole tag is not partial.
        assert_eq!(partial_tag_len("<a>", "<a>"), 0);
        assert_eq!(partial_tag_len("é<", "<a>"), 1);
        assert_eq!(partial_tag_len("", "<a>"), 0);
        assert_eq!(held_before_tags("abc \n<to", &["<tool_call>"]), 5);
        assert_eq!(held_before_tags("abc  ", &["<a>"]), 2);
        assert_eq!(held_before_tags("abc [TOO", &["<a>", "[TOOL_CALLS]"]), 5);
        assert_eq!(held_before_tags("abc", &["<a>"]), 0);
    }

    #[test]
    fn ws_trim_drops_both_ends() {
        let mut t = WsTrim::default();
        let mut out = String::new();
        for piece in ["  \n", " a", " ", " b ", "\n", "c", "  "] {
            out.push_str(&t.push(piece));
        }
        t.finish();
        assert_eq!(out, "a  b \nc");
    }
}
