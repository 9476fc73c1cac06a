//! The fake OpenAI-compatible upstream as a process, answering at once:
//! the zero-latency upstream of the gateway-overhead benchmark. Prints
//! `url http://127.0.0.1:PORT/v1` on stdout, then serves until killed.

use std::io::Write;

use svc_test_support::FakeUpstream;

/// One thread: a zero-latency upstream needs no second core, and Tokio's
/// workers waking each other would cost more CPU than the answers on the
/// 2 cores that the benchmark shares between upstream, gateway and load
/// generator.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let upstream = FakeUpstream::start().await;
    let mut out = std::io::stdout();
    writeln!(out, "url {}", upstream.base_url)?;
    out.flush()?;
    std::future::pending::<()>().await;
    Ok(())
}
