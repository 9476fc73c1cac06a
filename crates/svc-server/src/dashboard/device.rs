//! The device flow's verification page: enter the code (or arrive with it
//! from `verification_uri_complete`), see who asked, approve or deny.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use serde::Deserialize;
use svc_core::{CodeLookup, DeviceRecord, DeviceStatus, UserCode, now};

use super::pages::{PageError, layout, render, time};
use super::session::SignedIn;
use crate::extract::ClientAddress;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub struct CodeQuery {
    user_code: Option<String>,
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
    match record.status {
        DeviceStatus::Approved | DeviceStatus::Redeemed => (
            "Code already used",
            "This code was already approved. If you did not do that, revoke the device's key on the API keys page.".into(),
        ),
        DeviceStatus::Denied => (
            "Code denied",
            "This request was denied. Start the login again on your device to get a new code.".into(),
        ),
        DeviceStatus::Pending => (
            "Code expired",
            "This code has expired. Start the login again on your device to get a new code.".into(),
        ),
    }
}

pub async fn page(
    State(state): State<AppState>,
    who: SignedIn,
    ClientAddress(address): ClientAddress,
    Query(query): Query<CodeQuery>,
) -> Result<Response, PageError> {
    let input = query.user_code.unwrap_or_default();
    if input.trim().is_empty() {
        let page = render(
            "device.html",
            context! { ..layout(&who, "device"), ..context! { user_code => "" } },
        )?;
        return Ok(page.into_response());
    }
    let address = address.unwrap_or_else(|| "unknown".into());
    match state.devices.lookup(&input, &who.user.id, &address).await? {
        CodeLookup::Pending(record) => {
            let code = UserCode::parse(&record.user_code)
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
                        address => record.client_address.clone(),
                        client_id => record.client_id.clone(),
                        user_agent => record.user_agent.clone(),
                        scope => record.scope.clone(),
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
                        user_code => input,
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
    let approve = match form.decision.as_str() {
        "approve" => true,
        "deny" => false,
        _ => return Err(PageError::BadRequest("Choose Approve or Deny.".into())),
    };
    if state
        .devices
        .decide(&form.id, &who.user.id, approve)
        .await?
    {
        if approve {
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
