//! What the person types in an interactive `svc chat`: slash commands, and
//! messages of one or more lines.
//!
//! A line ending in `\` continues on the next line; a line starting with
//! `"""` opens a block that ends at the next line ending in `"""`. A line
//! starting with `//` sends the text with one `/` (so a message may start
//! with a slash).

/// The help text of the interactive session.
pub const HELP: &str = "\
Type a message and press Enter to send it.

  /model [NAME]    show or change the model (see `svc models`)
  /system [TEXT]   show or set the system prompt; `/system -` removes it
  /clear           forget the conversation (the model and system prompt stay)
  /help            show this help
  /exit            leave (also /quit, /bye, or Ctrl-D)

Multi-line messages: end a line with \\ to continue on the next one, or
open a block with \"\"\" and close it with \"\"\" at the end of a later line.
Start a message with // to send it starting with /.
Ctrl-C stops a reply and keeps what came so far; at the prompt it clears
the line. Earlier inputs come back with the Up arrow.";

/// A slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Exit,
    Clear,
    /// `/model` (show) or `/model NAME`.
    Model(Option<String>),
    /// `/system` (show), `/system TEXT` (set), `/system -` (remove: `Some("")`).
    System(Option<String>),
    Unknown(String),
}

/// What a typed line amounts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Typed {
    /// Nothing yet: the message goes on on the next line.
    More,
    /// A message to send.
    Message(String),
    Command(Command),
    /// A blank line: nothing to do.
    Nothing,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Mode {
    #[default]
    Fresh,
    /// After a line ending in `\`.
    Continued,
    /// Inside a `"""` block.
    Block,
}

const FENCE: &str = "\"\"\"";

/// Assembles messages from lines.
#[derive(Debug, Default)]
pub struct InputBuffer {
    lines: Vec<String>,
    mode: Mode,
}

impl InputBuffer {
    pub fn new() -> Self {
        InputBuffer::default()
    }

    /// Whether a message is half typed (the prompt then shows `...`).
    pub fn is_pending(&self) -> bool {
        self.mode != Mode::Fresh
    }

    /// Drops a half-typed message.
    pub fn reset(&mut self) {
        self.lines.clear();
        self.mode = Mode::Fresh;
    }

    /// Takes one typed line.
    pub fn feed(&mut self, line: &str) -> Typed {
        match self.mode {
            Mode::Fresh => self.fresh(line),
            Mode::Block => match line.trim_end().strip_suffix(FENCE) {
                Some(last) => {
                    if !last.is_empty() {
                        self.lines.push(last.to_owned());
                    }
                    self.finish()
                }
                None => {
                    self.lines.push(line.to_owned());
                    Typed::More
                }
            },
            Mode::Continued => self.continued(line),
        }
    }

    fn fresh(&mut self, line: &str) -> Typed {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(FENCE) {
            if let Some(inner) = rest.trim_end().strip_suffix(FENCE) {
                self.lines.push(inner.to_owned());
                return self.finish();
            }
            if !rest.trim().is_empty() {
                self.lines.push(rest.to_owned());
            }
            self.mode = Mode::Block;
            return Typed::More;
        }
        if let Some(rest) = trimmed.strip_prefix("//") {
            return self.continued(&format!("/{rest}"));
        }
        if let Some(command) = trimmed.strip_prefix('/') {
            return Typed::Command(parse_command(command.trim_end()));
        }
        if line.trim().is_empty() {
            return Typed::Nothing;
        }
        self.continued(line)
    }

    fn continued(&mut self, line: &str) -> Typed {
        match line.strip_suffix('\\') {
            Some(head) => {
                self.lines.push(head.to_owned());
                self.mode = Mode::Continued;
                Typed::More
            }
            None => {
                self.lines.push(line.to_owned());
                self.finish()
            }
        }
    }

    fn finish(&mut self) -> Typed {
        let text = self.lines.join("\n");
        self.reset();
        if text.trim().is_empty() {
            Typed::Nothing
        } else {
            Typed::Message(text)
        }
    }
}

/// Reads the text after the `/`.
fn parse_command(text: &str) -> Command {
    let (name, argument) = match text.split_once(char::is_whitespace) {
        Some((name, argument)) => (name, Some(argument.trim()).filter(|a| !a.is_empty())),
        None => (text, None),
    };
    match name {
        "help" | "?" => Command::Help,
        "exit" | "quit" | "bye" => Command::Exit,
        "clear" => Command::Clear,
        "model" => Command::Model(argument.map(str::to_owned)),
        "system" => Command::System(argument.map(|a| if a == "-" { "" } else { a }.to_owned())),
        _ => Command::Unknown(format!("/{name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(lines: &[&str]) -> Vec<Typed> {
        let mut buffer = InputBuffer::new();
        lines.iter().map(|l| buffer.feed(l)).collect()
    }

    fn message(text: &str) -> Typed {
        Typed::Message(text.to_owned())
    }

    #[test]
    fn single_lines_and_commands() {
        assert_eq!(typed(&["hello"]), [message("hello")]);
        assert_eq!(typed(&["   "]), [Typed::Nothing]);
        assert_eq!(
            typed(&[
                "/model svc-thinking",
                "/model",
                "/system  Be brief. ",
                "/system -"
            ]),
            [
                Typed::Command(Command::Model(Some("svc-thinking".into()))),
                Typed::Command(Command::Model(None)),
                Typed::Command(Command::System(Some("Be brief.".into()))),
                Typed::Command(Command::System(Some(String::new()))),
            ]
        );
        assert_eq!(
            typed(&["/exit", "/bye", "/clear", "/help", "/frob x"]),
            [
                Typed::Command(Command::Exit),
                Typed::Command(Command::Exit),
                Typed::Command(Command::Clear),
                Typed::Command(Command::Help),
                Typed::Command(Command::Unknown("/frob".into())),
            ]
        );
        assert_eq!(typed(&["//etc/hosts is"]), [message("/etc/hosts is")]);
    }

    #[test]
    fn backslash_continues_a_message() {
        assert_eq!(
            typed(&["first\\", "/not a command\\", "last"]),
            [
                Typed::More,
                Typed::More,
                message("first\n/not a command\nlast")
            ]
        );
    }

    #[test]
    fn triple_quotes_make_a_block() {
        assert_eq!(
            typed(&["\"\"\"", "line one", "", "/still text", "end\"\"\""]),
            [
                Typed::More,
                Typed::More,
                Typed::More,
                Typed::More,
                message("line one\n\n/still text\nend")
            ]
        );
        assert_eq!(
            typed(&["\"\"\"start", "\"\"\""]),
            [Typed::More, message("start")]
        );
        assert_eq!(typed(&["\"\"\"one line\"\"\""]), [message("one line")]);
        assert_eq!(typed(&["\"\"\"", "\"\"\""]), [Typed::More, Typed::Nothing]);
    }

    #[test]
    fn reset_drops_a_half_typed_message() {
        let mut buffer = InputBuffer::new();
        assert_eq!(buffer.feed("\"\"\""), Typed::More);
        assert!(buffer.is_pending());
        buffer.reset();
        assert!(!buffer.is_pending());
        assert_eq!(buffer.feed("hi"), message("hi"));
    }
}
