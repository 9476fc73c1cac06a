//! The `svc` binary: parse the command line, hand over to the library.

use clap::Parser;

/// mimalloc instead of the system allocator: the server allocates and frees
/// small buffers on every request from several threads, where glibc's
/// malloc spends a sizeable share of each request (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    svc_cli::main(svc_cli::Cli::parse())
}
