//! Everything the command line prints goes through here: stdout for what
//! scripts read (a key, a path, a reply), stderr for what people read
//! (progress, prompts, errors). The rest of the crate may not print
//! (`clippy::print_stdout`/`print_stderr` are denied): it calls these
//! macros, so this module is the one place to change where output goes.
//!
//! They behave as `println!`, `eprintln!` and `eprint!` do.

use std::fmt;

/// One line on stdout, as `println!`.
macro_rules! outln {
    () => {
        $crate::output::stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::stdout_line(format_args!($($arg)*))
    };
}

/// One line on stderr, as `eprintln!`.
macro_rules! errln {
    () => {
        $crate::output::stderr_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::stderr_line(format_args!($($arg)*))
    };
}

/// A prompt on stderr without a line ending, as `eprint!`.
macro_rules! prompt {
    ($($arg:tt)*) => {
        $crate::output::stderr(format_args!($($arg)*))
    };
}

pub(crate) use {errln, outln, prompt};

/// Writes `args` and a line ending to stdout.
#[expect(clippy::print_stdout, reason = "the command line's one way to stdout")]
pub(crate) fn stdout_line(args: fmt::Arguments<'_>) {
    println!("{args}");
}

/// Writes `args` and a line ending to stderr.
#[expect(clippy::print_stderr, reason = "the command line's one way to stderr")]
pub(crate) fn stderr_line(args: fmt::Arguments<'_>) {
    eprintln!("{args}");
}

/// Writes `args` to stderr.
#[expect(clippy::print_stderr, reason = "the command line's one way to stderr")]
pub(crate) fn stderr(args: fmt::Arguments<'_>) {
    eprint!("{args}");
}
