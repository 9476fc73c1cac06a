//! gpt-oss's harmony format: the model's reply is a run of messages, each
//! a header and a body, in channels. Its template's generation prompt ends
//! with `<|start|>assistant`, and the model goes on:
//!
//! ```text
//! <|channel|>analysis<|message|>The user asks ...<|end|>
//! <|start|>assistant<|channel|>final<|message|>It is 18°C in Paris.<|return|>
//! ```
//!
//! or, calling a function (the recipient may also stand before the channel,
//! `<|start|>assistant to=functions.get_weather<|channel|>commentary json`):
//!
//! ```text
//! <|channel|>analysis<|message|>Need the weather.<|end|>
//! <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
//! ```
//!
//! `analysis` is the reasoning; `final`, and `commentary` without a
//! recipient (a preamble the user may see), are the reply; a message to
//! `functions.NAME` of a function the request offered is a call, its
//! arguments streamed as they come. A message to any other recipient (a
//! built-in tool the request did not offer) is sent as text, so svc never
//! reports a call the client did not offer. `<|return|>` and `<|call|>`
//! end the generation (llama.cpp counts them as end of generation);
//! `<|end|>` does not: the model goes on with its next message.
//!
//! Output that does not start with a header (a model that ignores the
//! format) is the reply's text, unchanged.

use crate::harmony_tokens::{CALL, CHANNEL, CONSTRAIN, END, MESSAGE, RETURN, START};
use crate::markup::{WsTrim, held_before_tags, partial_tag_len};
use crate::reasoning::Piece;
use crate::tools::Parsed;

/// What ends a message's body.
const ENDS: &[&str] = &[END, CALL, RETURN, START];

/// The longest header the parser waits for; a longer one is not a header.
const MAX_HEADER: usize = 512;

/// One thing the reply said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Said {
    /// Reasoning or reply text.
    Piece(Piece),
    /// A call of an offered function (its start, or a piece of its arguments).
    Call(Parsed),
}

/// The kind of the message being read.
#[derive(Debug, Clone)]
enum Body {
    /// The analysis channel.
    Reasoning(WsTrim),
    /// The reply: `final`, or `commentary` without a recipient.
    Content,
    /// A call of an offered function; whether any argument text went out.
    Call { sent: bool },
}

#[derive(Debug, Clone)]
enum State {
    /// Reading a message's header, up to `<|message|>`.
    Header,
    /// Reading a message's body.
    Body(Body),
    /// The output is not in the format: all of it is reply text.
    Plain,
}

/// Parses streamed harmony output into reasoning, reply text and calls
/// (see the module's documentation).
#[derive(Debug, Clone)]
pub(crate) struct HarmonyParser {
    names: Vec<String>,
    state: State,
    buf: String,
    /// Reasoning was sent already (a later analysis message starts a new line).
    reasoned: bool,
    /// Reply text was sent already (a later message's text is joined by a blank line).
    replied: bool,
}

impl HarmonyParser {
    /// A parser that reports calls of the functions `names` (none: every
    /// message to a recipient is text).
    pub(crate) fn new(names: Vec<String>) -> Self {
        HarmonyParser {
            names,
            state: State::Header,
            buf: String::new(),
            reasoned: false,
            replied: false,
        }
    }

    /// Adds streamed text; what is certain now goes to `out`.
    pub(crate) fn push(&mut self, text: &str, out: &mut Vec<Said>) {
        self.buf.push_str(text);
        loop {
            match &mut self.state {
                State::Plain => {
                    let text = std::mem::take(&mut self.buf);
                    content(text, out);
                    return;
                }
                State::Header => {
                    let Some(at) = self.buf.find(MESSAGE) else {
                        if !could_be_header(&self.buf) {
                            self.state = State::Plain;
                            continue;
                        }
                        return;
                    };
                    let header: String = self.buf.drain(..at + MESSAGE.len()).collect();
                    let header = &header[..at];
                    if !is_header(header) {
                        // Text before the first `<|message|>` that is no header.
                        self.buf.insert_str(0, &format!("{header}{MESSAGE}"));
                        self.state = State::Plain;
                        continue;
                    }
                    self.state = State::Body(self.body(header, out));
                }
                State::Body(body) => {
                    let end = ENDS
                        .iter()
                        .filter_map(|end| self.buf.find(end).map(|at| (at, *end)))
                        .min_by_key(|(at, _)| *at);
                    let upto = match end {
                        Some((at, _)) => at,
                        None => match body {
                            // Whitespace before an end is the markup's.
                            Body::Content | Body::Call { .. } => {
                                self.buf.len() - held_before_tags(&self.buf, ENDS)
                            }
                            Body::Reasoning(_) => {
                                self.buf.len()
                                    - ENDS
                                        .iter()
                                        .map(|end| partial_tag_len(&self.buf, end))
                                        .max()
                                        .unwrap_or(0)
                            }
                        },
                    };
                    let text: String = self.buf.drain(..upto).collect();
                    let text = match body {
                        Body::Content if !self.replied => text.trim_start().to_owned(),
                        _ => text,
                    };
                    match body {
                        Body::Reasoning(trim) => {
                            let text = trim.push(&text);
                            if !text.is_empty() {
                                self.reasoned = true;
                                out.push(Said::Piece(Piece::Reasoning(text)));
                            }
                        }
                        Body::Content => {
                            if !text.is_empty() {
                                self.replied = true;
                                content(text, out);
                            }
                        }
                        Body::Call { sent } => {
                            let text = if *sent {
                                text
                            } else {
                                text.trim_start().to_owned()
                            };
                            if !text.is_empty() {
                                *sent = true;
                                out.push(Said::Call(Parsed::Args(text)));
                            }
                        }
                    }
                    let Some((_, end)) = end else {
                        return;
                    };
                    if end != START {
                        self.buf.drain(..end.len());
                    }
                    let State::Body(body) = std::mem::replace(&mut self.state, State::Header)
                    else {
                        return;
                    };
                    self.end_body(body, out);
                }
            }
        }
    }

    /// Ends the output: a message still open ends here; held text is sent.
    pub(crate) fn finish(&mut self, out: &mut Vec<Said>) {
        let rest = std::mem::take(&mut self.buf);
        match std::mem::replace(&mut self.state, State::Header) {
            State::Plain => content(rest, out),
            // A header cut short is markup; anything else is text.
            State::Header => {
                if !could_be_header(&rest) {
                    content(rest, out);
                }
            }
            State::Body(mut body) => {
                let rest = rest.trim_end();
                match &mut body {
                    Body::Reasoning(trim) => {
                        let text = trim.push(rest);
                        if !text.is_empty() {
                            self.reasoned = true;
                            out.push(Said::Piece(Piece::Reasoning(text)));
                        }
                    }
                    Body::Content => {
                        let rest = if self.replied {
                            rest
                        } else {
                            rest.trim_start()
                        };
                        content(rest.to_owned(), out);
                    }
                    Body::Call { sent } => {
                        let rest = if *sent { rest } else { rest.trim_start() };
                        if !rest.is_empty() {
                            *sent = true;
                            out.push(Said::Call(Parsed::Args(rest.to_owned())));
                        }
                    }
                }
                self.end_body(body, out);
            }
        }
    }

    /// The body a message of `header` starts; a call's start goes to `out`.
    fn body(&mut self, header: &str, out: &mut Vec<Said>) -> Body {
        let (channel, recipient) = read_header(header);
        match recipient {
            Some(recipient) => {
                let name = recipient.strip_prefix("functions.").unwrap_or(recipient);
                if self.names.iter().any(|n| n == name) {
                    out.push(Said::Call(Parsed::CallStart {
                        name: name.to_owned(),
                    }));
                    Body::Call { sent: false }
                } else {
                    // Not an offered function: the message is text.
                    Body::Content
                }
            }
            None if channel == "analysis" => {
                if self.reasoned {
                    out.push(Said::Piece(Piece::Reasoning("\n".into())));
                }
                Body::Reasoning(WsTrim::default())
            }
            None => {
                if self.replied {
                    content("\n\n".into(), out);
                }
                Body::Content
            }
        }
    }

    fn end_body(&mut self, body: Body, out: &mut Vec<Said>) {
        match body {
            Body::Reasoning(mut trim) => trim.finish(),
            Body::Content => {}
            // A call without arguments takes none.
            Body::Call { sent: false } => out.push(Said::Call(Parsed::Args("{}".into()))),
            Body::Call { sent: true } => {}
        }
    }
}

fn content(text: String, out: &mut Vec<Said>) {
    if !text.is_empty() {
        out.push(Said::Piece(Piece::Content(text)));
    }
}

/// How a header starts (after whitespace): a marker, a recipient or the role.
const HEADER_STARTS: [&str; 5] = [START, CHANNEL, CONSTRAIN, "to=", "assistant"];

/// Whether `text` (all that came before a `<|message|>`) is a message's
/// header: empty, or starting as one does, and not longer than one can be.
fn is_header(text: &str) -> bool {
    let text = text.trim_start();
    text.len() <= MAX_HEADER
        && (text.is_empty() || HEADER_STARTS.iter().any(|s| text.starts_with(s)))
}

/// Whether `text` (no `<|message|>` in it yet) may still become a header,
/// or a header's end: it is one already, or the start of one or of
/// `<|message|>`.
fn could_be_header(text: &str) -> bool {
    let visible = text.trim_start();
    // A start of `<|message|>` at the end is not the header's.
    let header = &text[..text.len() - partial_tag_len(text, MESSAGE)];
    is_header(header)
        || HEADER_STARTS
            .iter()
            .chain(&[MESSAGE])
            .any(|s| s.starts_with(visible))
}

/// A header's channel and recipient: `<|start|>assistant to=R<|channel|>C
/// <|constrain|>json`, each part optional.
fn read_header(header: &str) -> (&str, Option<&str>) {
    fn word(text: &str) -> &str {
        let end = text
            .find(|c: char| c.is_whitespace() || c == '<')
            .unwrap_or(text.len());
        &text[..end]
    }
    let channel = header
        .find(CHANNEL)
        .map_or("", |at| word(&header[at + CHANNEL.len()..]));
    let recipient = header
        .find("to=")
        .map(|at| word(&header[at + 3..]))
        .filter(|r| !r.is_empty());
    (channel, recipient)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(names: &[&str], pieces: &[&str]) -> Vec<Said> {
        let mut parser = HarmonyParser::new(names.iter().map(|n| (*n).to_owned()).collect());
        let mut out = Vec::new();
        for piece in pieces {
            parser.push(piece, &mut out);
        }
        parser.finish(&mut out);
        joined(out)
    }

    /// Consecutive pieces of one kind joined, as a client sees them.
    fn joined(said: Vec<Said>) -> Vec<Said> {
        let mut out: Vec<Said> = Vec::new();
        for item in said {
            match (out.last_mut(), item) {
                (
                    Some(Said::Piece(Piece::Reasoning(have))),
                    Said::Piece(Piece::Reasoning(more)),
                )
                | (Some(Said::Piece(Piece::Content(have))), Said::Piece(Piece::Content(more)))
                | (Some(Said::Call(Parsed::Args(have))), Said::Call(Parsed::Args(more))) => {
                    have.push_str(&more)
                }
                (_, item) => out.push(item),
            }
        }
        out
    }

    fn reasoning(t: &str) -> Said {
        Said::Piece(Piece::Reasoning(t.into()))
    }
    fn text(t: &str) -> Said {
        Said::Piece(Piece::Content(t.into()))
    }
    fn start(name: &str) -> Said {
        Said::Call(Parsed::CallStart { name: name.into() })
    }
    fn args(a: &str) -> Said {
        Said::Call(Parsed::Args(a.into()))
    }

    /// `output` parses to `expected` whole, cut in two at every char
    /// boundary, and a char at a time.
    fn check(names: &[&str], output: &str, expected: &[Said]) {
        assert_eq!(parse(names, &[output]), expected, "whole: {output:?}");
        for (at, _) in output.char_indices().skip(1) {
            let (a, b) = output.split_at(at);
            assert_eq!(parse(names, &[a, b]), expected, "cut at {at}: {output:?}");
        }
        let chars: Vec<String> = output.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(parse(names, &pieces), expected, "a char at a time");
    }

    #[test]
    fn analysis_is_reasoning_and_final_is_the_reply() {
        check(
            &[],
            "<|channel|>analysis<|message|>The user greets. Reply briefly.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?",
            &[
                reasoning("The user greets. Reply briefly."),
                text("Hello! How can I help?"),
            ],
        );
        // The end of generation may be shown too.
        check(
            &[],
            "<|channel|>final<|message|>Hi.<|return|>",
            &[text("Hi.")],
        );
    }

    #[test]
    fn a_call_on_commentary_streams_its_arguments() {
        let expected = [
            reasoning("Need the weather."),
            start("get_weather"),
            args(r#"{"city": "Paris"}"#),
        ];
        check(
            &["get_weather"],
            r#"<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>"#,
            &expected,
        );
        // The recipient before the channel, and no `<|call|>` shown.
        check(
            &["get_weather"],
            r#"<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}"#,
            &expected,
        );
        // The arguments go out before the call ends.
        let mut parser = HarmonyParser::new(vec!["get_weather".into()]);
        let mut out = Vec::new();
        parser.push(
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa",
            &mut out,
        );
        assert_eq!(joined(out), [start("get_weather"), args("{\"city\": \"Pa")]);
    }

    #[test]
    fn a_preamble_and_several_calls() {
        check(
            &["get_weather", "add"],
            "<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Paris\"}<|end|><|start|>assistant<|channel|>commentary to=functions.add<|message|><|call|>",
            &[
                text("Checking both."),
                start("get_weather"),
                args("{\"city\":\"Paris\"}"),
                start("add"),
                args("{}"),
            ],
        );
    }

    #[test]
    fn a_message_to_a_function_not_offered_is_text() {
        check(
            &["get_weather"],
            "<|channel|>analysis<|message|>Search.<|end|><|start|>assistant<|channel|>commentary to=browser.search<|message|>{\"q\": \"x\"}<|call|>",
            &[reasoning("Search."), text("{\"q\": \"x\"}")],
        );
    }

    #[test]
    fn output_outside_the_format_is_the_reply() {
        check(&[], "Just an answer.", &[text("Just an answer.")]);
        check(
            &[],
            "Hello <|message|> there",
            &[text("Hello <|message|> there")],
        );
        check(&[], "", &[]);
        // A header that never ends is markup, not reply.
        check(&[], "<|channel|>analysis", &[]);
        // Found by `any_chunking_gives_the_same_result`: an empty header is
        // one, the start of a marker before `<|message|>` is not.
        check(&[], "<|message|>Hi", &[text("Hi")]);
        check(&[], "<|<|message|>", &[text("<|<|message|>")]);
        // And a header of the longest length, its end cut anywhere (the
        // start of `<|message|>` does not count against it).
        let long = format!("<|channel|>final{}", " ".repeat(MAX_HEADER - 16));
        check(&[], &format!("{long}<|message|>Hi"), &[text("Hi")]);
        let longer = format!("{long} <|message|>Hi");
        check(&[], &longer, &[text(&longer)]);
    }

    #[test]
    fn several_analysis_messages_are_one_reasoning() {
        check(
            &[],
            "<|channel|>analysis<|message|>First. <|end|><|start|>assistant<|channel|>analysis<|message|> Second.<|end|><|start|>assistant<|channel|>final<|message|>Done.",
            &[reasoning("First.\nSecond."), text("Done.")],
        );
    }

    proptest::proptest! {
        /// Whatever the output and however it is cut, the parser says the
        /// same as when it gets it whole.
        #[test]
        fn any_chunking_gives_the_same_result(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    START, CHANNEL, MESSAGE, END, CALL, CONSTRAIN, "analysis", "final",
                    "commentary", " to=functions.f", " json", "assistant", "{\"a\": 1}",
                    " ", "\n", "text", "<|", "é",
                ]),
                0..16,
            ),
            cuts in proptest::collection::vec(0usize..200, 0..6),
        ) {
            let output: String = parts.concat();
            let whole = parse(&["f"], &[&output]);
            let mut bounds: Vec<usize> = cuts
                .iter()
                .map(|c| c % (output.len() + 1))
                .filter(|&c| output.is_char_boundary(c))
                .collect();
            bounds.extend([0, output.len()]);
            bounds.sort_unstable();
            bounds.dedup();
            let pieces: Vec<&str> = bounds.windows(2).map(|w| &output[w[0]..w[1]]).collect();
            proptest::prop_assert_eq!(parse(&["f"], &pieces), whole);
        }
    }

    #[test]
    fn headers_name_channel_and_recipient() {
        assert_eq!(read_header("<|channel|>analysis"), ("analysis", None));
        assert_eq!(
            read_header("<|channel|>commentary to=functions.f <|constrain|>json"),
            ("commentary", Some("functions.f"))
        );
        assert_eq!(
            read_header("<|start|>assistant to=functions.f<|channel|>commentary json"),
            ("commentary", Some("functions.f"))
        );
    }
}
