//! Single sign-on: the two steps of the OpenID Connect sign-in.
//!
//! `GET /dashboard/login/sso?next=…` makes the sign-in's one-time values
//! ([`Flow`]), keeps them in the `svc_sso` cookie (HttpOnly, SameSite=Lax,
//! ten minutes) and sends the browser to the provider. The provider sends
//! it back to `GET /dashboard/login/sso/callback?code=…&state=…`: the
//! `state` must be the cookie's (else the answer belongs to another
//! browser's sign-in: a forged or replayed one), the code is redeemed with
//! the PKCE verifier, the ID token checked (nonce included), and the
//! verified email signs in to its account. The cookie is cleared on every
//! answer, so each sign-in's values serve once. Every failure is a sign-in
//! page with the reason, and a `login.failed` audit entry.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use svc_core::secrets::same_token;
use svc_core::{Actor, SsoIdentity, SsoSignInError};

use super::account::{LoginPage, anonymous_csrf, signed_in, with_csrf_cookie};
use super::pages::PageError;
use super::session::{cookie, safe_next, set_cookie};
use crate::extract::ClientAddress;
use crate::oidc::{Flow, Oidc};
use crate::state::AppState;

/// The cookie holding a sign-in's one-time values.
pub const SSO_COOKIE: &str = "svc_sso";
/// How long a sign-in at the provider may take, in seconds.
const FLOW_SECONDS: i64 = 600;

#[derive(Debug, Deserialize)]
pub struct StartQuery {
    next: Option<String>,
}

fn provider(state: &AppState) -> Result<&Oidc, PageError> {
    state.dashboard.sso.as_ref().ok_or(PageError::NotFound)
}

pub async fn start(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<StartQuery>,
) -> Result<Response, PageError> {
    let sso = provider(&state)?;
    let next = safe_next(query.next.as_deref());
    match sso.start(next.clone()).await {
        Ok((flow, url)) => {
            let mut response = Redirect::to(url.as_str()).into_response();
            response.headers_mut().append(
                header::SET_COOKIE,
                set_cookie(
                    SSO_COOKIE,
                    &flow.encode(),
                    FLOW_SECONDS,
                    state.dashboard.secure_cookies,
                ),
            );
            Ok(response)
        }
        Err(e) => {
            tracing::warn!(error = %e, "single sign-on could not start");
            let message = format!(
                "Signing in with {} is not possible now: the identity provider did not answer. \
                 Try again later.",
                sso.name
            );
            failed_page(&state, &headers, &next, &message, StatusCode::BAD_GATEWAY)
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// Why the callback signed nobody in: the audit code, the message, the status.
struct Refusal {
    code: &'static str,
    message: String,
    status: StatusCode,
}

pub async fn callback(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> Result<Response, PageError> {
    let sso = provider(&state)?;
    let flow = cookie(&headers, SSO_COOKIE).and_then(|text| Flow::decode(&text));
    let next = flow
        .as_ref()
        .map(|flow| safe_next(Some(&flow.next)))
        .unwrap_or_else(|| safe_next(None));
    // Every answer that signs nobody in counts against the address (as
    // failed password sign-ins do), before it is audited or sent on to the
    // provider: a client cannot make either happen without limit.
    let slot = match state.accounts.take_sso_attempt(address.as_deref()).await? {
        Ok(slot) => slot,
        Err(retry_after) => {
            let message = format!(
                "Too many sign-ins that did not work from your address. \
                 Try again in {retry_after} seconds."
            );
            let status = StatusCode::TOO_MANY_REQUESTS;
            let mut response = failed_page(&state, &headers, &next, &message, status)?;
            clear_flow(&state, &mut response);
            return Ok(response);
        }
    };
    // The provider's answer counts only with this browser's state.
    let flow = flow.filter(|flow| {
        query
            .state
            .as_deref()
            .is_some_and(|sent| same_token(sent, &flow.state))
    });
    let outcome = match (&flow, &query) {
        (
            Some(_),
            CallbackQuery {
                error: Some(error), ..
            },
        ) => Err(Refusal {
            code: "sso_provider_refused",
            message: format!(
                "{} did not sign you in ({}).",
                sso.name,
                error
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .take(64)
                    .collect::<String>()
            ),
            status: StatusCode::UNAUTHORIZED,
        }),
        (
            Some(flow),
            CallbackQuery {
                code: Some(code), ..
            },
        ) => Ok((flow, code)),
        _ => Err(Refusal {
            code: "sso_state_mismatch",
            message: "This sign-in answer does not belong to a sign-in started in this browser \
                      (it expired, or was forged). Start again."
                .to_owned(),
            status: StatusCode::BAD_REQUEST,
        }),
    };
    let anonymous = Actor::Session {
        user: None,
        address: address.clone(),
    };
    let (flow, code) = match outcome {
        Ok(found) => found,
        Err(refusal) => return refused(&state, &headers, sso, &anonymous, &next, refusal).await,
    };
    let identity = match sso.finish(flow, code).await {
        Ok(identity) => identity,
        Err(e) => {
            tracing::warn!(error = %e, "single sign-on refused");
            // What went wrong with the provider itself (addresses, transport
            // errors) stays in the log; the page says what the person can do.
            let (status, message) = match e {
                crate::oidc::OidcError::Provider(_) => (
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "Signing in with {} is not possible now: the identity provider did not \
                         answer as expected. Try again later.",
                        sso.name
                    ),
                ),
                _ => (
                    StatusCode::UNAUTHORIZED,
                    format!("Signing in with {} failed: {e}.", sso.name),
                ),
            };
            let refusal = Refusal {
                code: e.code(),
                message,
                status,
            };
            return refused(&state, &headers, sso, &anonymous, &next, refusal).await;
        }
    };
    let signed = state
        .accounts
        .sign_in_sso(
            SsoIdentity {
                issuer: sso.issuer(),
                email: identity.email.as_deref().unwrap_or(""),
                email_verified: identity.email_verified,
                create: sso.create_accounts.clone(),
            },
            address.as_deref(),
        )
        .await;
    let mut response = match signed {
        Ok(opened) => {
            state.accounts.sso_succeeded(slot).await?;
            signed_in(&state, &opened, &next)
        }
        Err(SsoSignInError::Store(e)) => return Err(e.into()),
        Err(e) => {
            let status = match e {
                SsoSignInError::NoProject(_) => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::FORBIDDEN,
            };
            failed_page(&state, &headers, &next, &e.to_string(), status)?
        }
    };
    clear_flow(&state, &mut response);
    Ok(response)
}

/// Records the refusal and answers with the sign-in page saying it.
async fn refused(
    state: &AppState,
    headers: &HeaderMap,
    sso: &Oidc,
    actor: &Actor,
    next: &str,
    refusal: Refusal,
) -> Result<Response, PageError> {
    state
        .accounts
        .record_sso_failure(actor, sso.issuer(), refusal.code, &refusal.message)
        .await?;
    let mut response = failed_page(state, headers, next, &refusal.message, refusal.status)?;
    clear_flow(state, &mut response);
    Ok(response)
}

/// The sign-in page with `message`, answered with `status`.
fn failed_page(
    state: &AppState,
    headers: &HeaderMap,
    next: &str,
    message: &str,
    status: StatusCode,
) -> Result<Response, PageError> {
    let (csrf, is_new) = anonymous_csrf(headers);
    let page = LoginPage {
        csrf: &csrf,
        next,
        email: "",
        notice: None,
        error: Some(message),
    }
    .render(state)?;
    Ok(with_csrf_cookie(
        state,
        (status, page).into_response(),
        &csrf,
        is_new,
    ))
}

/// Deletes the sign-in's cookie: its values serve once.
fn clear_flow(state: &AppState, response: &mut Response) {
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SSO_COOKIE, "", 0, state.dashboard.secure_cookies),
    );
}
