//! `svc login`: the device authorization flow (spec 4.2, 4.3; RFC 8628).
//! It asks the server for a code, shows it with the address where a signed-in
//! person approves it, polls until they do, and stores the key it gets
//! (see `client::credentials`). Everything it says goes to stderr.
//!
//! Failures end with their own exit codes (`client::failure`): 3 when the
//! server cannot be reached, 5 when the login is denied, 6 when the code
//! expires, 130 on Ctrl-C.

use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use svc_api::DeviceCodeResponse;
use svc_core::ApiKey;
use tokio::time::Instant;

use crate::cli::LoginArgs;
use crate::client::api::{Poll, Revocation};
use crate::client::target::{process_env, resolve_base_url};
use crate::client::terminal::{self, bold};
use crate::client::{Api, BaseUrl, Credentials, CredentialsFile, Failure};
use crate::output::errln;

/// Network failures in a row tolerated while polling.
const POLL_RETRIES: u32 = 3;

pub async fn run(args: LoginArgs) -> anyhow::Result<()> {
    let file = CredentialsFile::locate()?;
    let stored = file.load()?;
    let (base_url, _) = resolve_base_url(args.base_url.as_deref(), process_env, stored.as_ref())?;
    let api = Api::new(base_url.clone(), None)?;
    let styled = terminal::stderr_styled();
    // One listener for the whole login, set up before anything is shown, so
    // that no Ctrl-C falls between two of them.
    let mut interrupted = std::pin::pin!(terminal::ctrl_c());

    let codes = tokio::select! {
        codes = api.device_code() => codes?,
        () = &mut interrupted => return Err(cancelled().into()),
    };
    show_code(&base_url, &codes, styled);
    let spinner = spinner();
    // Restored when `run` returns, whichever way.
    let _quiet = offer_browser(&codes, args.no_browser, &spinner);

    let approved = tokio::select! {
        approved = poll(&api, &codes) => approved,
        () = &mut interrupted => Err(cancelled()),
    };
    spinner.finish_and_clear();
    let (key, expires_in) = approved?;

    let login = describe(&base_url, key, expires_in, &codes).await;
    file.save(&login)?;
    errln!(
        "{} to {}{}.",
        bold("Logged in", styled),
        base_url,
        login
            .account
            .as_deref()
            .map(|a| format!(" as {}", bold(a, styled)))
            .unwrap_or_default(),
    );
    errln!(
        "Key {}, expires {}.",
        login.api_key.hint(),
        terminal::expiry(login.expires_at),
    );
    errln!("Stored in {}.", file.path().display());
    if let Some(previous) = stored.filter(|s| s.base_url == base_url && s.api_key != login.api_key)
    {
        retire(previous).await;
    }
    if process_env("SVC_API_KEY").is_some_and(|k| !k.trim().is_empty()) {
        errln!(
            "Note: SVC_API_KEY is set, and it takes precedence over the stored key: \
             unset it to use this login."
        );
    }
    Ok(())
}

fn cancelled() -> Failure {
    Failure::Interrupted("login cancelled; no key was stored".into())
}

fn show_code(base_url: &BaseUrl, codes: &DeviceCodeResponse, styled: bool) {
    errln!("Logging in to {base_url}.");
    errln!();
    errln!("  Your one-time code: {}", bold(&codes.user_code, styled));
    errln!();
    errln!(
        "Open {} in a browser, sign in, and enter the code.",
        codes.verification_uri
    );
    if let Some(complete) = &codes.verification_uri_complete {
        errln!("Or go straight to {complete}");
    }
}

/// The spinner shown while polling: only on a terminal.
fn spinner() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        errln!("Waiting for approval...");
        return ProgressBar::hidden();
    }
    let spinner = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
        spinner.set_style(style);
    }
    spinner.set_message("Waiting for approval in the browser (Ctrl-C cancels)...");
    spinner.enable_steady_tick(Duration::from_millis(100));
    spinner
}

/// On a terminal (and without `--no-browser`), opens the approval page when
/// the person presses Enter; polling goes on meanwhile.
/// While the returned guard lives, the terminal does not echo that Enter.
fn offer_browser(
    codes: &DeviceCodeResponse,
    no_browser: bool,
    spinner: &ProgressBar,
) -> Option<terminal::EchoOff> {
    if no_browser || !std::io::stdout().is_terminal() {
        return None;
    }
    let url = codes
        .verification_uri_complete
        .clone()
        .unwrap_or_else(|| codes.verification_uri.clone());
    if !std::io::stdin().is_terminal() {
        if terminal::open_browser(&url) {
            say(spinner, "Opened the page in your browser.");
        }
        return None;
    }
    say(spinner, "Press Enter to open the page in your browser.");
    let quiet = terminal::EchoOff::on_stdin();
    let spinner = spinner.clone();
    // A plain thread: it may stay blocked on stdin until the process ends.
    std::thread::spawn(move || {
        let mut line = String::new();
        if matches!(std::io::stdin().lock().read_line(&mut line), Ok(n) if n > 0) {
            if terminal::open_browser(&url) {
                say(&spinner, "Opened the page in your browser.");
            } else {
                say(
                    &spinner,
                    &format!("Could not start a browser: open {url} yourself."),
                );
            }
        }
    });
    Some(quiet)
}

/// A line on stderr that does not break the spinner.
fn say(spinner: &ProgressBar, line: &str) {
    if spinner.is_hidden() {
        errln!("{line}");
    } else {
        spinner.println(line);
    }
}

/// Polls every `interval` seconds until the code is approved, denied or expired.
async fn poll(api: &Api, codes: &DeviceCodeResponse) -> Result<(ApiKey, Option<i64>), Failure> {
    let deadline = Instant::now() + Duration::from_secs(codes.expires_in.clamp(1, 86_400) as u64);
    let mut interval = Duration::from_secs(codes.interval.clamp(1, 300) as u64);
    let mut failures = 0;
    loop {
        // A little over the interval: clocks and queues are not exact, and
        // polling early only earns a slow_down.
        let margin = (interval / 10).max(Duration::from_millis(200));
        tokio::time::sleep(interval + margin).await;
        if Instant::now() >= deadline {
            return Err(Failure::Expired(
                "the login code expired before it was approved.".into(),
            ));
        }
        match api.device_token(&codes.device_code).await {
            Ok(Poll::Pending) => failures = 0,
            Ok(Poll::SlowDown) => interval += Duration::from_secs(5),
            Ok(Poll::Approved { key, expires_in }) => return Ok((key, expires_in)),
            Ok(Poll::Denied) => return Err(Failure::Denied),
            Ok(Poll::Expired(why)) => return Err(Failure::Expired(why)),
            Err(Failure::Network { .. }) if failures < POLL_RETRIES => failures += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The login to store: what the server says about the key (its owner, name
/// and expiry) when it can, else what the token response said.
async fn describe(
    base_url: &BaseUrl,
    key: ApiKey,
    expires_in: Option<i64>,
    codes: &DeviceCodeResponse,
) -> Credentials {
    let mut login = Credentials::new(base_url.clone(), key.clone());
    login.expires_at = expires_in.map(|s| login.logged_in_at + s);
    login.dashboard_url = codes
        .verification_uri
        .strip_suffix("/device")
        .map(str::to_owned);
    let info = match Api::new(base_url.clone(), Some(key)) {
        Ok(api) => api.key_info().await.ok().flatten(),
        Err(_) => None,
    };
    if let Some(info) = info {
        login.account = info.owner.map(|o| o.email);
        login.key_name = Some(info.name);
        login.expires_at = info.expires_at.or(login.expires_at);
    }
    login
}

/// Revokes the key this login replaces, when the server allows it.
async fn retire(previous: Credentials) {
    let hint = previous.api_key.hint();
    let Ok(api) = Api::new(previous.base_url.clone(), Some(previous.api_key.clone())) else {
        return;
    };
    match api.revoke_key().await {
        Ok(Revocation::Revoked) => {
            errln!("Revoked the key of the previous login ({hint}).");
        }
        Ok(Revocation::AlreadyRefused) => {}
        _ => errln!(
            "The key of the previous login ({hint}) is still valid: revoke it at {}.",
            previous.keys_page()
        ),
    }
}
