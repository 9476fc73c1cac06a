//! The `svc` binary: parse the command line, hand over to the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    svc_cli::main(svc_cli::Cli::parse())
}
