//! `svc models`: the ids of the models the server serves, one per line on
//! stdout (`GET /v1/models`).

use std::io::Write;

use crate::cli::ConnectArgs;
use crate::client::terminal;
use crate::client::{Failure, Target};

pub async fn run(args: ConnectArgs) -> anyhow::Result<()> {
    let target = Target::from_process(args.base_url.as_deref(), args.api_key.as_deref())?;
    let api = target.api()?;
    let models = tokio::select! {
        models = api.models() => models?,
        () = terminal::ctrl_c() => return Err(Failure::Interrupted("interrupted".into()).into()),
    };
    let mut out = std::io::stdout().lock();
    for model in models.data {
        writeln!(out, "{}", model.id)?;
    }
    out.flush()?;
    Ok(())
}
