//! The fake OpenAI-compatible upstream as a process, answering at once:
//! the zero-latency upstream of the gateway-overhead benchmark. Prints
//! `url http://127.0.0.1:PORT/v1` on stdout, then serves until killed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use svc_test_support::FakeUpstream;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let upstream = FakeUpstream::start().await;
    let mut out = std::io::stdout();
    writeln!(out, "url {}", upstream.base_url)?;
    out.flush()?;
    std::future::pending::<()>().await;
    Ok(())
}
