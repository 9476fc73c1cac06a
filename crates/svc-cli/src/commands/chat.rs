//! `svc chat`: with a prompt (or text on stdin) it streams one reply to
//! stdout and exits; otherwise it holds an interactive session with line
//! editing, history, multi-line input and slash commands
//! (`client::input`). Ctrl-C stops a reply: the session goes on, a one-shot
//! run exits with 130.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use anyhow::Context;
use rustyline::error::ReadlineError;
use rustyline::{Config, DefaultEditor};

use crate::cli::ChatArgs;
use crate::client::api::StreamEvent;
use crate::client::conversation::{Conversation, Sampling};
use crate::client::credentials::create_private_dir;
use crate::client::input::{Command, HELP, InputBuffer, Typed};
use crate::client::render::{ReasoningTo, ReplyPrinter};
use crate::client::terminal;
use crate::client::{Api, Failure, Target};
use crate::output::{errln, outln};

pub async fn run(args: ChatArgs) -> anyhow::Result<()> {
    let target = Target::from_process(
        args.connect.base_url.as_deref(),
        args.connect.api_key.as_deref(),
    )?;
    let api = target.api()?;
    let conversation = Conversation::new(
        args.model.clone(),
        args.system.clone().filter(|s| !s.trim().is_empty()),
        Sampling {
            temperature: args.temperature,
            max_tokens: args.max_tokens,
        },
    );
    let prompt = (!args.prompt.is_empty()).then(|| args.prompt.join(" "));
    let stdin_terminal = std::io::stdin().is_terminal();
    if prompt.is_none() && stdin_terminal {
        return interactive(api, conversation, args.hide_reasoning).await;
    }
    let piped = if stdin_terminal {
        None
    } else {
        Some(read_stdin().await?)
    };
    let message = match (prompt, piped) {
        (Some(prompt), Some(text)) if !text.trim().is_empty() => {
            format!("{prompt}\n\n{}", text.trim_end())
        }
        (Some(prompt), _) => prompt,
        (None, Some(text)) => text.trim_end().to_owned(),
        (None, None) => String::new(),
    };
    if message.trim().is_empty() {
        return Err(Failure::Usage(
            "nothing to send: give a prompt (`svc chat \"...\"`) or pipe text on stdin".into(),
        )
        .into());
    }
    one_shot(&api, &conversation, &message, args.hide_reasoning).await
}

/// All of stdin; Ctrl-C gives up waiting for it.
async fn read_stdin() -> Result<String, Failure> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    // A plain thread, not the runtime's blocking pool: a stdin that never
    // closes must not keep the process alive after Ctrl-C.
    std::thread::spawn(move || {
        let mut text = String::new();
        let read = std::io::stdin().read_to_string(&mut text).map(|_| text);
        let _ = tx.send(read);
    });
    tokio::select! {
        read = rx => match read {
            Ok(Ok(text)) => Ok(text),
            Ok(Err(e)) => Err(Failure::Usage(format!("cannot read stdin: {e}"))),
            Err(_) => Err(Failure::Usage("cannot read stdin".into())),
        },
        () = terminal::ctrl_c() => Err(Failure::Interrupted("interrupted".into())),
    }
}

/// How a streamed reply ended.
enum Ending {
    /// `data: [DONE]`, with the choice's finish reason.
    Finished(Option<String>),
    /// Ctrl-C.
    Interrupted,
    /// Whoever read stdout went away (`svc chat ... | head`).
    OutputClosed,
}

fn reasoning_to(hide: bool) -> ReasoningTo {
    ReasoningTo::choose(
        hide,
        std::io::stdout().is_terminal(),
        std::io::stderr().is_terminal(),
    )
}

type Printer = ReplyPrinter<std::io::Stdout, std::io::Stderr>;

/// Streams one reply into `printer` until it ends, fails or Ctrl-C.
/// Returning drops the stream, which closes the connection: the server then
/// stops generating.
async fn stream_reply(
    api: &Api,
    conversation: &Conversation,
    message: &str,
    printer: &mut Printer,
) -> Result<Ending, Failure> {
    let request = conversation.request(message);
    let streamed = async {
        let mut stream = api.chat_stream(&request).await?;
        let mut finish = None;
        while let Some(event) = stream.next().await? {
            let written = match event {
                StreamEvent::Reasoning(text) => printer.reasoning(&text),
                StreamEvent::Content(text) => printer.content(&text),
                StreamEvent::Finish(reason) => {
                    finish = Some(reason);
                    Ok(())
                }
                StreamEvent::Usage(_) => Ok(()),
            };
            match written {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    return Ok(Ending::OutputClosed);
                }
                Err(e) => return Err(Failure::Local(format!("cannot write the reply: {e}"))),
            }
        }
        Ok(Ending::Finished(finish))
    };
    tokio::select! {
        ending = streamed => ending,
        () = terminal::ctrl_c() => Ok(Ending::Interrupted),
    }
}

/// A note on stderr when the reply was cut short.
fn note_finish(reason: Option<&str>) {
    if reason == Some("length") {
        errln!("(the reply reached the token limit and was cut short)");
    }
}

async fn one_shot(
    api: &Api,
    conversation: &Conversation,
    message: &str,
    hide_reasoning: bool,
) -> anyhow::Result<()> {
    let mut printer = ReplyPrinter::new(
        std::io::stdout(),
        std::io::stderr(),
        reasoning_to(hide_reasoning),
    );
    let ending = stream_reply(api, conversation, message, &mut printer).await;
    let _ = printer.finish();
    match ending? {
        Ending::Finished(reason) => {
            note_finish(reason.as_deref());
            Ok(())
        }
        Ending::OutputClosed => Ok(()),
        Ending::Interrupted => Err(Failure::Interrupted("interrupted".into()).into()),
    }
}

/// Where the interactive session keeps its input history:
/// `$XDG_STATE_HOME/svc/chat_history`, else the platform's state (or
/// configuration) directory.
fn history_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(dirs::state_dir)
        .or_else(dirs::config_dir)?;
    let dir = base.join("svc");
    create_private_dir(&dir).ok()?;
    Some(dir.join("chat_history"))
}

async fn interactive(
    api: Api,
    mut conversation: Conversation,
    hide_reasoning: bool,
) -> anyhow::Result<()> {
    let config = Config::builder()
        .auto_add_history(false)
        .max_history_size(1000)
        .context("cannot set up line editing")?
        .history_ignore_dups(true)
        .context("cannot set up line editing")?
        .build();
    let mut editor = DefaultEditor::with_config(config).context("cannot set up line editing")?;
    let history = history_path();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    let styled = terminal::stderr_styled();
    errln!(
        "Chatting with {} at {}. Type /help for help; Ctrl-D or /exit leaves.",
        terminal::bold(&conversation.model, styled),
        api.base_url()
    );
    let mut buffer = InputBuffer::new();
    loop {
        let prompt = if buffer.is_pending() { "... " } else { ">>> " };
        let (returned, line) = tokio::task::spawn_blocking(move || {
            let line = editor.readline(prompt);
            (editor, line)
        })
        .await
        .context("the line editor stopped")?;
        editor = returned;
        let line = match line {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                if buffer.is_pending() {
                    buffer.reset();
                } else {
                    errln!("(To leave, press Ctrl-D or type /exit.)");
                }
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e).context("cannot read from the terminal"),
        };
        let typed = buffer.feed(&line);
        if !matches!(typed, Typed::More | Typed::Nothing) {
            let entry = match &typed {
                Typed::Message(text) => text.as_str(),
                _ => line.as_str(),
            };
            let _ = editor.add_history_entry(entry);
            if let Some(path) = &history {
                let _ = editor.append_history(path);
            }
        }
        match typed {
            Typed::More | Typed::Nothing => {}
            Typed::Command(Command::Exit) => break,
            Typed::Command(command) => run_command(&api, &mut conversation, command).await,
            Typed::Message(text) => {
                let mut printer = ReplyPrinter::new(
                    std::io::stdout(),
                    std::io::stderr(),
                    reasoning_to(hide_reasoning),
                );
                let ending = stream_reply(&api, &conversation, &text, &mut printer).await;
                let _ = printer.finish();
                match ending {
                    Ok(Ending::Finished(reason)) => {
                        note_finish(reason.as_deref());
                        conversation.record(&text, printer.answer());
                    }
                    Ok(Ending::Interrupted) => {
                        errln!("(stopped)");
                        conversation.record(&text, printer.answer());
                    }
                    Ok(Ending::OutputClosed) => break,
                    Err(failure) => errln!("error: {failure}"),
                }
                outln!();
            }
        }
    }
    let _ = std::io::stdout().flush();
    Ok(())
}

/// Runs a slash command other than `/exit`.
async fn run_command(api: &Api, conversation: &mut Conversation, command: Command) {
    match command {
        Command::Help => errln!("{HELP}"),
        Command::Clear => {
            conversation.clear();
            errln!("(conversation cleared)");
        }
        Command::Model(None) => errln!("Model: {}", conversation.model),
        Command::Model(Some(name)) => match api.models().await {
            Ok(list) if !list.data.iter().any(|m| m.id == name) => {
                let ids: Vec<&str> = list.data.iter().map(|m| m.id.as_str()).collect();
                errln!(
                    "No model {name:?} on this server; it has: {}. Still using {}.",
                    ids.join(", "),
                    conversation.model
                );
            }
            _ => {
                errln!("Model: {name}");
                conversation.model = name;
            }
        },
        Command::System(None) => match &conversation.system {
            Some(system) => errln!("System prompt: {system}"),
            None => errln!("No system prompt (the server's default applies)."),
        },
        Command::System(Some(text)) if text.is_empty() => {
            conversation.system = None;
            errln!("(system prompt removed)");
        }
        Command::System(Some(text)) => {
            conversation.system = Some(text);
            errln!("(system prompt set)");
        }
        Command::Unknown(name) => errln!("Unknown command {name}: type /help for the list."),
        Command::Exit => {}
    }
}
