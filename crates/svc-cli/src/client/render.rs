//! How a streamed reply is written: the answer to stdout as it comes, and
//! the reasoning of a thinking model apart from it.
//!
//! Reasoning goes to a terminal only: dimmed on stdout when stdout is one;
//! on stderr when only stderr is one (so `svc chat "..." > file` keeps just
//! the answer in the file); nowhere otherwise, or with `--hide-reasoning`.

use std::io::{self, Write};

use super::terminal::{DIM, RESET, styles_allowed};

/// Where reasoning is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningTo {
    Hidden,
    Stdout { styled: bool },
    Stderr { styled: bool },
}

impl ReasoningTo {
    /// The choice for these streams (see the module documentation).
    pub fn choose(hide: bool, stdout_terminal: bool, stderr_terminal: bool) -> Self {
        if hide {
            ReasoningTo::Hidden
        } else if stdout_terminal {
            ReasoningTo::Stdout {
                styled: styles_allowed(true),
            }
        } else if stderr_terminal {
            ReasoningTo::Stderr {
                styled: styles_allowed(true),
            }
        } else {
            ReasoningTo::Hidden
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Reasoning,
    Answer,
}

/// Writes one reply; collects the answer for the conversation.
pub struct ReplyPrinter<O: Write, E: Write> {
    out: O,
    err: E,
    reasoning: ReasoningTo,
    state: State,
    /// Reasoning came before any answer: the answer's leading blank lines
    /// (the model's separator) are not shown.
    trim_leading: bool,
    answer: String,
    /// The last character written to `out` was a newline (or nothing was).
    out_at_line_start: bool,
}

impl<O: Write, E: Write> ReplyPrinter<O, E> {
    pub fn new(out: O, err: E, reasoning: ReasoningTo) -> Self {
        ReplyPrinter {
            out,
            err,
            reasoning,
            state: State::Start,
            trim_leading: false,
            answer: String::new(),
            out_at_line_start: true,
        }
    }

    /// The answer so far, as the model wrote it.
    pub fn answer(&self) -> &str {
        &self.answer
    }

    /// A piece of reasoning.
    pub fn reasoning(&mut self, text: &str) -> io::Result<()> {
        if self.answer.is_empty() {
            self.trim_leading = true;
        }
        let (on_stdout, styled) = match self.reasoning {
            ReasoningTo::Hidden => return Ok(()),
            ReasoningTo::Stdout { styled } => (true, styled),
            ReasoningTo::Stderr { styled } => (false, styled),
        };
        if self.state == State::Answer {
            // Reasoning after the answer started: rare; shown all the same.
            self.newline_if_needed()?;
        }
        let target: &mut dyn Write = if on_stdout {
            &mut self.out
        } else {
            &mut self.err
        };
        if self.state != State::Reasoning {
            target.write_all(if styled { DIM } else { "Thinking: " }.as_bytes())?;
            self.state = State::Reasoning;
        }
        target.write_all(text.as_bytes())?;
        target.flush()?;
        if on_stdout {
            self.out_at_line_start = text.ends_with('\n');
        }
        Ok(())
    }

    /// A piece of the answer.
    pub fn content(&mut self, text: &str) -> io::Result<()> {
        self.answer.push_str(text);
        if self.state == State::Reasoning {
            self.close_reasoning()?;
        }
        self.state = State::Answer;
        let shown = if self.trim_leading {
            let trimmed = text.trim_start_matches(['\n', '\r']);
            if !trimmed.is_empty() {
                self.trim_leading = false;
            }
            trimmed
        } else {
            text
        };
        if !shown.is_empty() {
            self.out.write_all(shown.as_bytes())?;
            self.out.flush()?;
            self.out_at_line_start = shown.ends_with('\n');
        }
        Ok(())
    }

    /// Ends the reply: styles reset, and stdout left at the start of a line.
    pub fn finish(&mut self) -> io::Result<()> {
        if self.state == State::Reasoning {
            self.close_reasoning()?;
        }
        self.newline_if_needed()?;
        self.out.flush()?;
        self.err.flush()
    }

    fn close_reasoning(&mut self) -> io::Result<()> {
        let (target, styled, on_stdout): (&mut dyn Write, bool, bool) = match self.reasoning {
            ReasoningTo::Hidden => return Ok(()),
            ReasoningTo::Stdout { styled } => (&mut self.out, styled, true),
            ReasoningTo::Stderr { styled } => (&mut self.err, styled, false),
        };
        if styled {
            target.write_all(RESET.as_bytes())?;
        }
        // A blank line between reasoning and answer on the same stream.
        target.write_all(if on_stdout { b"\n\n" } else { b"\n" })?;
        target.flush()?;
        if on_stdout {
            self.out_at_line_start = true;
        }
        self.state = State::Start;
        Ok(())
    }

    fn newline_if_needed(&mut self) -> io::Result<()> {
        if !self.out_at_line_start {
            self.out.write_all(b"\n")?;
            self.out_at_line_start = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn render(reasoning: ReasoningTo, events: &[(&str, &str)]) -> (String, String, String) {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let answer = {
            let mut printer = ReplyPrinter::new(&mut out, &mut err, reasoning);
            for (kind, text) in events {
                match *kind {
                    "r" => printer.reasoning(text).unwrap(),
                    _ => printer.content(text).unwrap(),
                }
            }
            printer.finish().unwrap();
            printer.answer().to_owned()
        };
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
            answer,
        )
    }

    const THINKING: &[(&str, &str)] = &[
        ("r", "Hmm. "),
        ("r", "Yes."),
        ("a", "\n\nIt is "),
        ("a", "Paris."),
    ];

    #[test]
    fn dimmed_reasoning_then_the_answer_on_a_terminal() {
        let (out, err, answer) = render(ReasoningTo::Stdout { styled: true }, THINKING);
        assert_eq!(out, "\x1b[2mHmm. Yes.\x1b[0m\n\nIt is Paris.\n");
        assert_eq!(err, "");
        assert_eq!(answer, "\n\nIt is Paris.");
    }

    #[test]
    fn only_the_answer_when_reasoning_is_hidden() {
        let (out, err, _) = render(ReasoningTo::Hidden, THINKING);
        assert_eq!(out, "It is Paris.\n");
        assert_eq!(err, "");
    }

    #[test]
    fn reasoning_on_stderr_when_stdout_is_a_file() {
        let (out, err, _) = render(ReasoningTo::Stderr { styled: false }, THINKING);
        assert_eq!(out, "It is Paris.\n");
        assert_eq!(err, "Thinking: Hmm. Yes.\n");
    }

    #[test]
    fn a_trailing_newline_is_not_doubled() {
        let (out, _, _) = render(ReasoningTo::Hidden, &[("a", "one\n")]);
        assert_eq!(out, "one\n");
        let (out, _, _) = render(ReasoningTo::Hidden, &[]);
        assert_eq!(out, "");
    }

    #[test]
    fn choice_follows_the_terminals() {
        assert_eq!(ReasoningTo::choose(true, true, true), ReasoningTo::Hidden);
        assert_eq!(
            ReasoningTo::choose(false, false, false),
            ReasoningTo::Hidden
        );
        assert!(matches!(
            ReasoningTo::choose(false, false, true),
            ReasoningTo::Stderr { .. }
        ));
        assert!(matches!(
            ReasoningTo::choose(false, true, false),
            ReasoningTo::Stdout { .. }
        ));
    }
}
