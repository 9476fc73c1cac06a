//! Turning token bytes into the text a client sees: whole UTF-8 characters
//! only, and never any part of a stop sequence.
//!
//! Token pieces are bytes; a character may span tokens, and a stop sequence
//! may span tokens too. [`TextAssembler`] keeps back the bytes of an
//! unfinished character and the tail of the text that could still grow into
//! a stop sequence, and releases them once they cannot. It knows nothing of
//! llama.cpp and is tested on its own.

/// Written before the text of a marker token (a tool-call marker the model
/// wrote as its token) by an assembler that [marks](TextAssembler::marking)
/// them: a noncharacter, which the model's own text in such an assembler
/// never holds, so the same marker spelled in plain text is told apart.
pub(crate) const TOKEN_MARK: char = '\u{FDD1}';
/// A noncharacter the chat layer puts inside a marker the model spelled in
/// plain text, so no parser reads it as the marker (and takes out again).
pub(crate) const PLAIN_MARK: char = '\u{FDD2}';

/// Bytes of `text` less its [`TOKEN_MARK`]s: what the model wrote.
pub(crate) fn unmarked_len(text: &str) -> usize {
    text.len() - text.matches(TOKEN_MARK).count() * TOKEN_MARK.len_utf8()
}

/// What one push of token bytes produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Release {
    /// Text that is now certain to be part of the reply (may be empty).
    pub text: String,
    /// A stop sequence appeared: generation must end, `text` is the last of it.
    pub stopped: bool,
}

/// Assembles streamed token bytes into safe-to-send text.
#[derive(Debug, Default)]
pub struct TextAssembler {
    stops: Vec<String>,
    /// Bytes of a character that has not been completed yet.
    partial: Vec<u8>,
    /// Decoded text held back because it may be the start of a stop sequence.
    held: String,
    /// Whether marker tokens get a [`TOKEN_MARK`] (see [`TextAssembler::marking`]).
    marking: bool,
    /// Where in `held` the text of each marker token starts.
    marks: Vec<usize>,
}

impl TextAssembler {
    /// An assembler that ends the text at the first of `stops` (empty ones are ignored).
    pub fn new(stops: &[String]) -> Self {
        TextAssembler {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            partial: Vec::new(),
            held: String::new(),
            marking: false,
            marks: Vec::new(),
        }
    }

    /// The same assembler writing a [`TOKEN_MARK`] before the text of each
    /// token pushed with [`TextAssembler::push_marker`], and U+FFFD for
    /// the noncharacters svc marks with wherever the model's text has them.
    /// Stop sequences are matched in the text without the marks.
    pub(crate) fn marking(mut self) -> Self {
        self.marking = true;
        self
    }

    /// Adds the bytes of one token and returns what can be sent now.
    pub fn push(&mut self, bytes: &[u8]) -> Release {
        self.partial.extend_from_slice(bytes);
        let complete = take_complete_utf8(&mut self.partial);
        if self.marking && complete.contains([TOKEN_MARK, PLAIN_MARK]) {
            self.held
                .push_str(&complete.replace([TOKEN_MARK, PLAIN_MARK], "\u{FFFD}"));
        } else {
            self.held.push_str(&complete);
        }
        self.release()
    }

    /// Adds the bytes of a marker token (a whole text): marked, when the
    /// assembler [marks](TextAssembler::marking) them.
    pub(crate) fn push_marker(&mut self, bytes: &[u8]) -> Release {
        if !self.marking {
            return self.push(bytes);
        }
        // An unfinished character before a whole token is never finished.
        if !self.partial.is_empty() {
            self.held.push_str(&String::from_utf8_lossy(&self.partial));
            self.partial.clear();
        }
        self.marks.push(self.held.len());
        self.held.push_str(&String::from_utf8_lossy(bytes));
        self.release()
    }

    /// What of `held` can be sent now.
    fn release(&mut self) -> Release {
        if let Some(at) = self.first_stop() {
            let mut text = std::mem::take(&mut self.held);
            text.truncate(at);
            self.partial.clear();
            return Release {
                text: self.marked(text),
                stopped: true,
            };
        }
        let keep = self.longest_stop_prefix_suffix();
        let split = self.held.len() - keep;
        let rest = self.held.split_off(split);
        let text = std::mem::replace(&mut self.held, rest);
        Release {
            text: self.marked(text),
            stopped: false,
        }
    }

    /// `text`, the start of what was held, with a mark before each marker
    /// token's text in it; the marks after it move to what is still held.
    fn marked(&mut self, text: String) -> String {
        let sent = self.marks.partition_point(|&at| at < text.len());
        if sent == 0 {
            for at in &mut self.marks {
                *at -= text.len();
            }
            return text;
        }
        let mut out = String::with_capacity(text.len() + sent * TOKEN_MARK.len_utf8());
        let mut from = 0;
        for &at in &self.marks[..sent] {
            out.push_str(&text[from..at]);
            out.push(TOKEN_MARK);
            from = at;
        }
        out.push_str(&text[from..]);
        self.marks.drain(..sent);
        for at in &mut self.marks {
            *at = at.saturating_sub(text.len());
        }
        out
    }

    /// Ends the text (end of generation or length): everything still held back,
    /// with an unfinished character written as U+FFFD.
    pub fn finish(&mut self) -> String {
        let mut text = std::mem::take(&mut self.held);
        if !self.partial.is_empty() {
            text.push_str(&String::from_utf8_lossy(&self.partial));
            self.partial.clear();
        }
        self.marks.retain(|&at| at < text.len());
        self.marked(text)
    }

    /// Byte offset in `held` where the earliest stop sequence starts.
    fn first_stop(&self) -> Option<usize> {
        self.stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
    }

    /// Length of the longest end of `held` that is a proper prefix of a stop sequence.
    fn longest_stop_prefix_suffix(&self) -> usize {
        let mut keep = 0;
        for stop in &self.stops {
            // Longest first; stop at the first (longest) match for this stop.
            for (len, _) in stop.char_indices().rev() {
                if len <= keep {
                    break;
                }
                if self.held.ends_with(&stop[..len]) {
                    keep = len;
                    break;
                }
            }
        }
        keep
    }
}

/// Removes and returns the longest decodable start of `bytes`: complete
/// characters, with invalid sequences as U+FFFD. An unfinished character at
/// the end stays in `bytes`.
fn take_complete_utf8(bytes: &mut Vec<u8>) -> String {
    let mut out = String::new();
    let mut rest: &[u8] = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                rest = &[];
                break;
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                out.push_str(&String::from_utf8_lossy(valid));
                match e.error_len() {
                    Some(n) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        rest = &after[n..];
                    }
                    None => {
                        rest = after;
                        break;
                    }
                }
            }
        }
    }
    let consumed = bytes.len() - rest.len();
    bytes.drain(..consumed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(stops: &[&str], pieces: &[&[u8]]) -> (Vec<String>, bool) {
        let stops: Vec<String> = stops.iter().map(|s| (*s).to_owned()).collect();
        let mut a = TextAssembler::new(&stops);
        let mut out = Vec::new();
        for p in pieces {
            let r = a.push(p);
            if !r.text.is_empty() {
                out.push(r.text);
            }
            if r.stopped {
                return (out, true);
            }
        }
        let tail = a.finish();
        if !tail.is_empty() {
            out.push(tail);
        }
        (out, false)
    }

    #[test]
    fn plain_text_streams_as_it_comes() {
        let (out, stopped) = run(&[], &[b"Hel", b"lo", b" world"]);
        assert_eq!(out, ["Hel", "lo", " world"]);
        assert!(!stopped);
    }

    #[test]
    fn multibyte_characters_are_never_split() {
        // "é" = C3 A9, "😀" = F0 9F 98 80
        let (out, _) = run(&[], &[b"a\xC3", b"\xA9b", b"\xF0\x9F", b"\x98", b"\x80!"]);
        assert_eq!(out, ["a", "éb", "😀!"]);
    }

    #[test]
    fn an_unfinished_character_at_the_end_becomes_a_replacement() {
        let (out, _) = run(&[], &[b"ok\xF0\x9F"]);
        assert_eq!(out.concat(), "ok\u{FFFD}");
    }

    #[test]
    fn invalid_bytes_become_replacements() {
        let (out, _) = run(&[], &[b"a\x80b"]);
        assert_eq!(out.concat(), "a\u{FFFD}b");
    }

    #[test]
    fn stop_across_tokens_is_cut_and_never_sent() {
        let (out, stopped) = run(&["lo, w"], &[b"Hel", b"lo", b",", b" wor", b"ld"]);
        assert!(stopped);
        // "l" of "Hel" waits until "lo" shows it is not the stop.
        assert_eq!(out, ["He", "l"]);
    }

    #[test]
    fn held_text_is_released_when_the_stop_cannot_match() {
        let (out, stopped) = run(&["world?"], &[b"Hello", b" wor", b"ld", b"!"]);
        assert!(!stopped);
        assert_eq!(out, ["Hello", " ", "world!"]);
    }

    #[test]
    fn held_text_is_released_at_the_end() {
        let (out, stopped) = run(&["END"], &[b"abc E", b"N"]);
        assert!(!stopped);
        assert_eq!(out, ["abc ", "EN"]);
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        let (out, stopped) = run(&["cd", "bc"], &[b"abcd"]);
        assert!(stopped);
        assert_eq!(out.concat(), "a");
    }

    #[test]
    fn stop_made_of_multibyte_characters() {
        let (out, stopped) = run(&["é!"], &[b"caf\xC3", b"\xA9", b"!", b"more"]);
        assert!(stopped);
        assert_eq!(out.concat(), "caf");
    }

    #[test]
    fn stop_at_the_very_start_gives_nothing() {
        let (out, stopped) = run(&["Hi"], &[b"H", b"i there"]);
        assert!(stopped);
        assert!(out.is_empty());
    }

    #[test]
    fn a_marking_assembler_marks_marker_tokens_and_nothing_else() {
        let mut a = TextAssembler::new(&["[X]b".to_owned()]).marking();
        let mut out = String::new();
        // The model's own noncharacters cannot pass for marks.
        out.push_str(&a.push("a\u{FDD1}\u{FDD2}".as_bytes()).text);
        assert_eq!(out, "a\u{FFFD}\u{FFFD}");
        // A marker held back (it may start the stop) keeps its mark.
        let r = a.push_marker(b"[X]");
        assert_eq!(r.text, "");
        out.push_str(&a.push(b"c").text);
        out.push_str(&a.push(b"[X").text);
        out.push_str(&a.finish());
        assert_eq!(out, "a\u{FFFD}\u{FFFD}\u{FDD1}[X]c[X");
        assert_eq!(unmarked_len(&out), out.len() - 3);

        // Stops match the text without the marks, and what a stop cuts
        // off is never sent, its marks neither.
        let mut a = TextAssembler::new(&["a[X]".to_owned()]).marking();
        assert_eq!(a.push(b"za").text, "z");
        let r = a.push_marker(b"[X]");
        assert!(r.stopped);
        assert_eq!(r.text, "");

        // An assembler that does not mark writes a marker as text.
        let mut a = TextAssembler::new(&[]);
        assert_eq!(a.push_marker(b"[X]").text, "[X]");
        assert_eq!(a.push("\u{FDD1}".as_bytes()).text, "\u{FDD1}");
    }

    /// What a client must see when `text` arrives cut at `cuts` (byte offsets):
    /// after each piece, the complete characters so far are checked for stops.
    fn oracle(text: &str, stops: &[String], cuts: &[usize]) -> (String, bool) {
        for &end in cuts {
            let mut end = end;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let seen = &text[..end];
            if let Some(at) = stops
                .iter()
                .filter(|s| !s.is_empty())
                .filter_map(|s| seen.find(s.as_str()))
                .min()
            {
                return (seen[..at].to_owned(), true);
            }
        }
        (text.to_owned(), false)
    }

    proptest! {
        #[test]
        fn streaming_matches_the_oracle(
            text in "[ab é😀]{0,20}",
            stops in proptest::collection::vec("[ab é😀]{1,3}", 0..3),
            cuts in proptest::collection::vec(0usize..80, 0..12),
        ) {
            let bytes = text.as_bytes();
            let mut ends: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            ends.push(bytes.len());
            ends.sort_unstable();
            ends.dedup();
            let mut pieces = Vec::new();
            let mut start = 0;
            for &end in &ends {
                pieces.push(&bytes[start..end]);
                start = end;
            }
            let stop_refs: Vec<&str> = stops.iter().map(String::as_str).collect();
            let (out, stopped) = run(&stop_refs, &pieces);
            let (expected, expected_stop) = oracle(&text, &stops, &ends);
            prop_assert_eq!(out.concat(), expected);
            prop_assert_eq!(stopped, expected_stop);
            prop_assert!(out.iter().all(|p| !p.contains(char::REPLACEMENT_CHARACTER)));
        }
    }
}
