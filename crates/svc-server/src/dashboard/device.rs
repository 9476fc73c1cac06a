//! The device flow's verification page: enter the code (or arrive with it
//! from `verification_uri_complete`), see who asked, approve or deny.
//!
//! Arriving with `?user_code=` only fills in the form: a link, from any site,
//! must not look codes up, which would spend the person's budget of wrong
//! codes. The code is looked up when the person submits the form (a POST
//! with the session's CSRF token).

use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use serde::Deserialize;
use svc_core::{CodeLookup, DeviceDecision, DeviceRecord, DeviceState, UserCode, now, plain_text};

use super::pages::{PageError, render, time};
use super::session::SignedIn;
use super::session::layout;
use crate::extract::ClientAddress;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub struct CodeQuery {
    user_code: Option<String>,
}

/// The code entry form, submitted.
#[derive(Debug, Deserialize)]
pub struct CodeForm {
    csrf: String,
    user_code: String,
}

/// Longest code entry kept for the form (a code is 9 characters).
const MAX_CODE_INPUT: usize = 16;

/// Shown to the person approving: one line, no characters that reorder or
/// hide text.
fn shown(text: &Option<String>) -> Option<String> {
    text.as_deref()
        .map(|t| plain_text(t, 200))
        .filter(|t| !t.is_empty())
}

/// The code entry form, filled with `user_code`.
fn entry_form(who: &SignedIn, user_code: &str) -> Result<Response, PageError> {
    let user_code = plain_text(user_code, MAX_CODE_INPUT);
    let page = render(
        "device.html",
        context! { ..layout(who, "device"), ..context! { user_code } },
    )?;
    Ok(page.into_response())
}

fn message(
    who: &SignedIn,
    status: StatusCode,
    title: &str,
    text: String,
    tone: &str,
) -> Result<Response, PageError> {
    let page = render(
        "message.html",
        context! { ..layout(who, "device"), ..context! { title, message => text, tone } },
    )?;
    Ok((status, page).into_response())
}

/// Why a code can no longer be decided, in words.
fn closed_reason(record: &DeviceRecord) -> (&'static str, String) {
    match record.state {
        DeviceState::Approved { .. } | DeviceState::Redeemed { .. } => (
            "Code already used",
            "This code was already approved. If you did not do that, revoke the device's key on the API keys page.".into(),
        ),
        DeviceState::Denied { .. } => (
            "Code denied",
            "This request was denied. Start the login again on your device to get a new code.".into(),
        ),
        DeviceState::Pending => (
            "Code expired",
            "This code has expired. Start the login again on your device to get a new code.".into(),
        ),
    }
}

/// `GET /dashboard/device`: the form, filled in from `?user_code=`.
pub async fn page(who: SignedIn, Query(query): Query<CodeQuery>) -> Result<Response, PageError> {
    entry_form(&who, query.user_code.as_deref().unwrap_or_default())
}

/// `POST /dashboard/device`: looks the code up (throttled) and shows who
/// asked, with Approve and Deny.
pub async fn enter(
    State(state): State<AppState>,
    who: SignedIn,
    ClientAddress(address): ClientAddress,
    Form(form): Form<CodeForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let input = form.user_code;
    if input.trim().is_empty() {
        return entry_form(&who, "");
    }
    let address = address.unwrap_or_else(|| "unknown".into());
    match state.devices.lookup(&input, &who.user.id, &address).await? {
        CodeLookup::Pending(record) => {
            // The store keeps only the code's hash: show what was typed,
            // which found it.
            let code = UserCode::parse(&input)
                .map(|c| c.display())
                .unwrap_or_default();
            let minutes_left = ((record.expires_at - now()).max(0) + 59) / 60;
            let key_days = state.devices.settings().key_lifetime / 86_400;
            let page = render(
                "device_confirm.html",
                context! {
                    ..layout(&who, "device"),
                    ..context! {
                        id => record.id.clone(),
                        user_code => code,
                        requested => time(record.created_at),
                        address => shown(&record.client_address),
                        client_id => shown(&record.client_id),
                        user_agent => shown(&record.user_agent),
                        scope => shown(&record.scope),
                        minutes_left,
                        key_days,
                    }
                },
            )?;
            Ok(page.into_response())
        }
        CodeLookup::Closed(record) => {
            let (title, text) = closed_reason(&record);
            message(&who, StatusCode::GONE, title, text, "error")
        }
        CodeLookup::Unknown => {
            let page = render(
                "device.html",
                context! {
                    ..layout(&who, "device"),
                    ..context! {
                        user_code => plain_text(&input, MAX_CODE_INPUT),
                        error => "That code is not valid. Check it on your device and type it again (XXXX-XXXX).",
                    }
                },
            )?;
            Ok((StatusCode::NOT_FOUND, page).into_response())
        }
        CodeLookup::Throttled(t) => message(
            &who,
            StatusCode::TOO_MANY_REQUESTS,
            "Too many attempts",
            format!(
                "Too many wrong codes were entered. Wait {} minutes and try again.",
                (t.retry_after + 59) / 60
            ),
            "error",
        ),
    }
}

#[derive(Debug, Deserialize)]
pub struct DecideForm {
    csrf: String,
    id: String,
    decision: String,
}

pub async fn decide(
    State(state): State<AppState>,
    who: SignedIn,
    Form(form): Form<DecideForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let decision = match form.decision.as_str() {
        "approve" => DeviceDecision::Approve,
        "deny" => DeviceDecision::Deny,
        _ => return Err(PageError::BadRequest("Choose Approve or Deny.".into())),
    };
    if state
        .devices
        .decide(&form.id, &who.user.id, decision, &who.actor())
        .await?
    {
        if decision == DeviceDecision::Approve {
            message(
                &who,
                StatusCode::OK,
                "Device approved",
                "Your device is now signed in and will receive its key in a few seconds. You can close this page; the key appears on the API keys page and can be revoked there.".into(),
                "success",
            )
        } else {
            message(
                &who,
                StatusCode::OK,
                "Request denied",
                "The device was not given a key. You can close this page.".into(),
                "info",
            )
        }
    } else {
        message(
            &who,
            StatusCode::GONE,
            "Code no longer valid",
            "This code expired or was already used before your answer arrived. Start the login again on your device.".into(),
            "error",
        )
    }
}
