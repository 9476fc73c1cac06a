//! Small pieces shared by the streaming parsers of model output (think
//! blocks, tool calls): how much of a text's end could still grow into a
//! tag, and whitespace trimming that works on a stream.

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

#[cfg(test)]
mod tests {
    use super::*;

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
