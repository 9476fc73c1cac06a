//! Reasoning: how each family of thinking models marks its reasoning
//! ([`ReasoningFormat`]), splitting a `<think>…</think>`-style block from the
//! answer, and the prompts of the explicit reasoning pass svc runs for
//! models that do not think on their own.
//!
//! [`ThinkSplitter`] works on streamed text: it holds back what could still
//! be part of a tag, so neither the opening nor the closing tag ever reaches
//! the client, wherever the model's tokens split them. gpt-oss's channels
//! are parsed by `crate::harmony`.

use svc_core::engine::ChatMessage;

use crate::harmony_tokens;
use crate::markup::{WsTrim, partial_tag_len};

/// How a model marks its own reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// It writes none: svc runs an explicit reasoning pass when asked.
    #[default]
    Plain,
    /// A leading `<think>…</think>` block (Qwen3, QwQ, DeepSeek R1 and
    /// V3.1, GLM 4.5+, Kimi K2 Thinking, Granite 3.3, Phi-4 reasoning).
    Think,
    /// A leading `[THINK]…[/THINK]` block (Magistral; control tokens).
    Mistral,
    /// A leading `<seed:think>…</seed:think>` block (Seed-OSS).
    Seed,
    /// A leading `<|START_THINKING|>…<|END_THINKING|>` block (Command R7B, A).
    CommandR,
    /// gpt-oss's harmony channels: `analysis` is the reasoning, `final`
    /// the answer (see `crate::harmony`).
    Harmony,
}

impl ReasoningFormat {
    /// Every format, for settings and their documentation.
    pub const ALL: [ReasoningFormat; 6] = [
        ReasoningFormat::Plain,
        ReasoningFormat::Think,
        ReasoningFormat::Mistral,
        ReasoningFormat::Seed,
        ReasoningFormat::CommandR,
        ReasoningFormat::Harmony,
    ];

    /// Its name in settings (`reasoning_format`).
    pub fn name(self) -> &'static str {
        match self {
            ReasoningFormat::Plain => "none",
            ReasoningFormat::Think => "think",
            ReasoningFormat::Mistral => "mistral",
            ReasoningFormat::Seed => "seed",
            ReasoningFormat::CommandR => "command-r",
            ReasoningFormat::Harmony => "harmony",
        }
    }

    /// The format named `name` (see [`Self::name`]).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The format a chat template (its source) teaches its model.
    pub(crate) fn of_template(source: &str) -> Self {
        let has = |s: &str| source.contains(s);
        if has("<|channel|>") && has("<|message|>") {
            ReasoningFormat::Harmony
        } else if has("[THINK]") {
            ReasoningFormat::Mistral
        } else if has("<seed:think>") {
            ReasoningFormat::Seed
        } else if has(COMMAND_R.0) {
            ReasoningFormat::CommandR
        } else if has(THINK_OPEN) || has("enable_thinking") {
            ReasoningFormat::Think
        } else {
            ReasoningFormat::Plain
        }
    }

    /// Whether the model writes reasoning of its own.
    pub(crate) fn thinks(self) -> bool {
        self != ReasoningFormat::Plain
    }

    /// The tags around a block of reasoning, for the block formats.
    pub(crate) fn tags(self) -> Option<(&'static str, &'static str)> {
        match self {
            ReasoningFormat::Think => Some((THINK_OPEN, THINK_CLOSE)),
            ReasoningFormat::Mistral => Some(("[THINK]", "[/THINK]")),
            ReasoningFormat::Seed => Some(("<seed:think>", "</seed:think>")),
            ReasoningFormat::CommandR => Some(COMMAND_R),
            ReasoningFormat::Plain | ReasoningFormat::Harmony => None,
        }
    }

    /// The markup the model writes, which may be control tokens whose
    /// text the engine must show for the parsers to see them.
    pub(crate) fn markers(self) -> &'static [&'static str] {
        match self {
            ReasoningFormat::Plain => &[],
            ReasoningFormat::Think => &[THINK_OPEN, THINK_CLOSE],
            ReasoningFormat::Mistral => &["[THINK]", "[/THINK]"],
            ReasoningFormat::Seed => &["<seed:think>", "</seed:think>"],
            ReasoningFormat::CommandR => &[COMMAND_R.0, COMMAND_R.1],
            ReasoningFormat::Harmony => harmony_tokens::MARKERS,
        }
    }

    /// Whether a rendered prompt already opened the reasoning for the
    /// model (DeepSeek-R1 distills end their generation prompt with
    /// `<think>\n`).
    pub(crate) fn prompt_opens(self, prompt: &str) -> bool {
        match self.tags() {
            Some((open, _)) => prompt.trim_end().ends_with(open),
            None => false,
        }
    }

    /// What svc appends to a prompt to open the reasoning itself.
    pub(crate) fn open(self) -> String {
        match self.tags() {
            Some((open, _)) => format!("{open}\n"),
            None => harmony_tokens::OPEN_ANALYSIS.to_owned(),
        }
    }

    /// Where the model's reasoning ends: the stop of a reasoning pass.
    pub(crate) fn stop(self) -> &'static str {
        match self.tags() {
            Some((_, close)) => close,
            None => harmony_tokens::END_MESSAGE,
        }
    }

    /// What svc appends after the reasoning (open) to start the answer.
    pub(crate) fn to_answer(self) -> String {
        match self.tags() {
            Some((_, close)) => format!("\n{close}\n\n"),
            None => harmony_tokens::TO_FINAL.to_owned(),
        }
    }

    /// What svc appends to a prompt (that `opened` the reasoning or not)
    /// for the model to answer at once, without reasoning.
    pub(crate) fn skip(self, opened: bool) -> String {
        match self {
            ReasoningFormat::Harmony => harmony_tokens::OPEN_FINAL.to_owned(),
            _ if opened => self.to_answer(),
            _ => String::new(),
        }
    }
}

/// Command R's tags around its reasoning.
const COMMAND_R: (&str, &str) = ("<|START_THINKING|>", "<|END_THINKING|>");

/// Opens a thinking model's reasoning.
pub(crate) const THINK_OPEN: &str = "<think>";
/// Closes it.
pub(crate) const THINK_CLOSE: &str = "</think>";

/// One piece of split output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Reasoning(String),
    Content(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing visible yet: a `<think>` may still come.
    Start,
    /// Inside the think block.
    Think,
    /// After it (or there was none).
    Content,
}

/// Splits streamed model output into reasoning (inside a leading
/// `<think>…</think>` block or another format's tags, trimmed) and content
/// (after it, without the whitespace that follows the closing tag). Output
/// without a block is all content, unchanged.
#[derive(Debug, Clone)]
pub(crate) struct ThinkSplitter {
    open: &'static str,
    close: &'static str,
    state: State,
    buf: String,
    reasoning: WsTrim,
    /// Whitespace right after `</think>` is still to be skipped.
    skip_ws: bool,
}

impl ThinkSplitter {
    /// A splitter of `<think>` blocks for output that starts outside one,
    /// or inside one when the prompt already `opened` it.
    pub(crate) fn new(opened: bool) -> Self {
        Self::with_tags((THINK_OPEN, THINK_CLOSE), opened)
    }

    /// A splitter of blocks between `open` and `close` (see [`Self::new`]).
    pub(crate) fn with_tags((open, close): (&'static str, &'static str), opened: bool) -> Self {
        ThinkSplitter {
            open,
            close,
            state: if opened { State::Think } else { State::Start },
            buf: String::new(),
            reasoning: WsTrim::default(),
            skip_ws: false,
        }
    }

    /// Adds streamed text; what can be sent now goes to `out`.
    pub(crate) fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        self.buf.push_str(text);
        loop {
            match self.state {
                State::Start => {
                    let visible = self.buf.trim_start();
                    if let Some(rest) = visible.strip_prefix(self.open) {
                        self.buf = rest.to_owned();
                        self.state = State::Think;
                        continue;
                    }
                    if visible.is_empty() || self.open.starts_with(visible) {
                        return;
                    }
                    self.state = State::Content;
                }
                State::Think => {
                    if let Some(at) = self.buf.find(self.close) {
                        let reasoning = self.reasoning.push(&self.buf[..at]);
                        self.reasoning.finish();
                        emit(out, Piece::Reasoning(reasoning));
                        self.buf.drain(..at + self.close.len());
                        self.state = State::Content;
                        self.skip_ws = true;
                        continue;
                    }
                    let keep = partial_tag_len(&self.buf, self.close);
                    let rest = self.buf.split_off(self.buf.len() - keep);
                    let head = std::mem::replace(&mut self.buf, rest);
                    emit(out, Piece::Reasoning(self.reasoning.push(&head)));
                    return;
                }
                State::Content => {
                    let mut text = std::mem::take(&mut self.buf);
                    if self.skip_ws {
                        text = text.trim_start().to_owned();
                        self.skip_ws = text.is_empty();
                    }
                    emit(out, Piece::Content(text));
                    return;
                }
            }
        }
    }

    /// Ends the output: whatever was held back.
    pub(crate) fn finish(&mut self, out: &mut Vec<Piece>) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Start => emit(out, Piece::Content(rest)),
            State::Think => {
                emit(out, Piece::Reasoning(self.reasoning.push(&rest)));
                self.reasoning.finish();
            }
            State::Content => {
                let rest = if self.skip_ws {
                    rest.trim_start().to_owned()
                } else {
                    rest
                };
                emit(out, Piece::Content(rest));
            }
        }
    }
}

fn emit(out: &mut Vec<Piece>, piece: Piece) {
    let empty = match &piece {
        Piece::Reasoning(t) | Piece::Content(t) => t.is_empty(),
    };
    if !empty {
        out.push(piece);
    }
}

/// The system prompt used when the conversation has none and svc adds its own instructions.
pub(crate) const DEFAULT_SYSTEM: &str = "You are a helpful assistant.";

/// What the explicit reasoning pass asks of the model (in the system message).
const REASONING_INSTRUCTION: &str = "You think step by step before answering.";

/// How the explicit reasoning pass starts the assistant's turn; the model
/// continues it, and it is the start of the reasoning sent to the client.
/// (Of the prompts tried on SmolLM2-135M, this one gave the most useful
/// reasoning: short, on topic, and it gets simple arithmetic right.)
pub(crate) const REASONING_PREFILL: &str = "Let me think step by step.";

/// The conversation of the explicit reasoning pass: the request's, with an
/// instruction to reason (added to the system message). Its prompt is the
/// rendering of this followed by [`REASONING_PREFILL`].
pub(crate) fn reasoning_pass_messages(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    with_system_note(messages, REASONING_INSTRUCTION)
}

/// The conversation of the answer pass: the request's, with the reasoning
/// of the first pass given as context in the system message.
pub(crate) fn answer_pass_messages(messages: &[ChatMessage], reasoning: &str) -> Vec<ChatMessage> {
    let reasoning = reasoning.trim();
    if reasoning.is_empty() {
        return messages.to_vec();
    }
    with_system_note(
        messages,
        &format!(
            "You have already thought about the user's last message:\n{reasoning}\n\nUse this to answer the user now, directly."
        ),
    )
}

/// `messages` with `note` appended to the leading system message (or in a
/// new one, after [`DEFAULT_SYSTEM`], when there is none).
pub(crate) fn with_system_note(messages: &[ChatMessage], note: &str) -> Vec<ChatMessage> {
    let mut out = messages.to_vec();
    match out.first_mut() {
        Some(ChatMessage::System(system)) => {
            if !system.trim().is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(note);
        }
        _ => out.insert(
            0,
            ChatMessage::System(format!("{DEFAULT_SYSTEM}\n\n{note}")),
        ),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Feeds `pieces` and returns (reasoning, content, number of pieces sent).
    fn split(opened: bool, pieces: &[&str]) -> (String, String, Vec<Piece>) {
        let mut s = ThinkSplitter::new(opened);
        let mut out = Vec::new();
        for p in pieces {
            s.push(p, &mut out);
        }
        s.finish(&mut out);
        let mut reasoning = String::new();
        let mut content = String::new();
        let mut seen_content = false;
        for p in &out {
            match p {
                Piece::Reasoning(t) => {
                    assert!(!seen_content, "reasoning after content: {out:?}");
                    reasoning.push_str(t);
                }
                Piece::Content(t) => {
                    seen_content = true;
                    content.push_str(t);
                }
            }
        }
        (reasoning, content, out)
    }

    #[test]
    fn think_blocks_split_from_the_answer() {
        let cases: &[(bool, &str, &str, &str)] = &[
            (
                false,
                "<think>\nLet me see.\n</think>\n\nParis.",
                "Let me see.",
                "Paris.",
            ),
            (false, "  <think>a</think>b", "a", "b"),
            (false, "Paris.", "", "Paris."),
            (false, "<thin", "", "<thin"),
            (false, "<thinking>x", "", "<thinking>x"),
            (false, "", "", ""),
            (true, "\nHmm.\n</think>\n\nParis.", "Hmm.", "Paris."),
            (true, "Still thinking </thi", "Still thinking </thi", ""),
            (false, "<think></think>Only this", "", "Only this"),
            (false, "a<think>b</think>c", "", "a<think>b</think>c"),
            (false, "<think>é 😀</think>\n😀 é", "é 😀", "😀 é"),
        ];
        for &(opened, text, reasoning, content) in cases {
            let (r, c, _) = split(opened, &[text]);
            assert_eq!((r.as_str(), c.as_str()), (reasoning, content), "{text:?}");
        }
    }

    #[test]
    fn every_split_point_gives_the_same_result() {
        for (opened, text) in [
            (false, "<think>\nLet me see.\n</think>\n\nParis."),
            (true, "\nHmm, </thx> no.\n</think>\n\nParis </think>."),
            (false, "<think>é 😀</think>\n😀 é"),
        ] {
            let whole = split(opened, &[text]);
            for (at, _) in text.char_indices() {
                let parts = split(opened, &[&text[..at], &text[at..]]);
                assert_eq!((&parts.0, &parts.1), (&whole.0, &whole.1), "split at {at}");
            }
        }
    }

    fn chunked(text: &str, cuts: &[usize]) -> Vec<String> {
        let mut bounds: Vec<usize> = cuts
            .iter()
            .map(|c| c % (text.len() + 1))
            .filter(|&c| text.is_char_boundary(c))
            .collect();
        bounds.push(0);
        bounds.push(text.len());
        bounds.sort_unstable();
        bounds.dedup();
        bounds
            .windows(2)
            .map(|w| text[w[0]..w[1]].to_owned())
            .collect()
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_result(
            reasoning in "[a-z <>/\n]{0,20}",
            content in "[a-z <>/\n]{0,20}",
            opened in any::<bool>(),
            cuts in proptest::collection::vec(0usize..64, 0..8),
        ) {
            let text = if opened {
                format!("{reasoning}</think>{content}")
            } else {
                format!("<think>{reasoning}</think>{content}")
            };
            let whole = split(opened, &[&text]);
            let parts = chunked(&text, &cuts);
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let pieces = split(opened, &refs);
            prop_assert_eq!(&pieces.0, &whole.0);
            prop_assert_eq!(&pieces.1, &whole.1);
            // When the reasoning holds no close tag of its own, the split is exact.
            if !reasoning.contains("</think>") {
                prop_assert_eq!(pieces.0, reasoning.trim().to_owned());
                prop_assert_eq!(pieces.1, content.trim_start().to_owned());
            }
        }
    }

    #[test]
    fn templates_and_prompts_that_think() {
        let of = ReasoningFormat::of_template;
        assert_eq!(
            of("{% if enable_thinking is defined %}x{% endif %}"),
            ReasoningFormat::Think
        );
        assert_eq!(of("{{ '<think>\\n' }}"), ReasoningFormat::Think);
        assert_eq!(of("{{ '[THINK]' + thinking }}"), ReasoningFormat::Mistral);
        assert_eq!(of("<seed:think>"), ReasoningFormat::Seed);
        assert_eq!(
            of("<|start|>assistant<|channel|>analysis<|message|>"),
            ReasoningFormat::Harmony
        );
        assert_eq!(of("{{ messages }}"), ReasoningFormat::Plain);
        let think = ReasoningFormat::Think;
        assert!(think.prompt_opens("<｜Assistant｜><think>\n"));
        assert!(!think.prompt_opens("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!ReasoningFormat::Harmony.prompt_opens("<|start|>assistant"));
        for format in ReasoningFormat::ALL {
            assert_eq!(ReasoningFormat::parse(format.name()), Some(format));
        }
    }

    #[test]
    fn other_tags_split_like_think() {
        let tags = ReasoningFormat::Mistral.tags().unwrap();
        let text = "[THINK]Let me see.[/THINK]\n\nParis.";
        for (at, _) in text.char_indices() {
            let mut s = ThinkSplitter::with_tags(tags, false);
            let mut out = Vec::new();
            s.push(&text[..at], &mut out);
            s.push(&text[at..], &mut out);
            s.finish(&mut out);
            let (mut r, mut c) = (String::new(), String::new());
            for p in out {
                match p {
                    Piece::Reasoning(t) => r.push_str(&t),
                    Piece::Content(t) => c.push_str(&t),
                }
            }
            assert_eq!(
                (r.as_str(), c.as_str()),
                ("Let me see.", "Paris."),
                "cut at {at}"
            );
        }
    }

    #[test]
    fn notes_go_into_the_system_message() {
        let m = [ChatMessage::User("Hi".into())];
        let out = with_system_note(&m, "Note.");
        assert_eq!(
            out[0],
            ChatMessage::System(format!("{DEFAULT_SYSTEM}\n\nNote."))
        );
        let m = [
            ChatMessage::System("Be brief.".into()),
            ChatMessage::User("Hi".into()),
        ];
        let out = answer_pass_messages(&m, "  It is a greeting. ");
        let ChatMessage::System(s) = &out[0] else {
            panic!()
        };
        assert!(s.starts_with("Be brief.\n\n") && s.contains("It is a greeting."));
        assert_eq!(answer_pass_messages(&m, " "), m.to_vec());
    }
}
