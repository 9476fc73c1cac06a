//! Signing in and out, the first admin's setup, and self sign-up.
//!
//! Self sign-up answers the same (a redirect to the sign-in page with a
//! notice) whether or not the email had an account: the form must not
//! tell who has one.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;
use serde::Deserialize;
use svc_core::secrets::same_token;
use svc_core::{AccountError, OpenedSession, SignInError, secrets::random_token};

use super::pages::{PageError, render};
use super::session::{CSRF_COOKIE, SESSION_COOKIE, SignedIn, cookie, safe_next, set_cookie};
use crate::extract::ClientAddress;
use crate::state::AppState;

/// The anonymous form's CSRF token: the cookie's, or a new one to set.
pub(super) fn anonymous_csrf(headers: &HeaderMap) -> (String, bool) {
    match cookie(headers, CSRF_COOKIE) {
        Some(token) if token.len() == 64 => (token, false),
        _ => (random_token(), true),
    }
}

/// A page with the anonymous CSRF cookie set when it was new.
pub(super) fn with_csrf_cookie(
    state: &AppState,
    page: impl IntoResponse,
    token: &str,
    is_new: bool,
) -> Response {
    let mut response = page.into_response();
    if is_new {
        response.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(
                CSRF_COOKIE,
                token,
                3600 * 24,
                state.dashboard.secure_cookies,
            ),
        );
    }
    response
}

/// Checks an anonymous form's token against its cookie.
fn check_anonymous_csrf(headers: &HeaderMap, submitted: &str) -> Result<(), PageError> {
    match cookie(headers, CSRF_COOKIE) {
        Some(expected) if same_token(&expected, submitted) => Ok(()),
        _ => Err(PageError::Csrf),
    }
}

/// Signs in: sets the session cookie and goes to `next`.
pub(super) fn signed_in(state: &AppState, opened: &OpenedSession, next: &str) -> Response {
    let mut response = Redirect::to(next).into_response();
    let max_age = opened.session.expires_at - opened.session.created_at;
    let headers = response.headers_mut();
    headers.append(
        header::SET_COOKIE,
        set_cookie(
            SESSION_COOKIE,
            opened.token.expose(),
            max_age,
            state.dashboard.secure_cookies,
        ),
    );
    headers.append(
        header::SET_COOKIE,
        set_cookie(CSRF_COOKIE, "", 0, state.dashboard.secure_cookies),
    );
    response
}

#[derive(Debug, Deserialize)]
pub struct NextQuery {
    next: Option<String>,
    /// Set after a sign-up: show the notice.
    signed_up: Option<String>,
}

/// Where a sign-up goes, whether or not it made an account.
const AFTER_SIGN_UP: &str = "/dashboard/login?signed_up=1";

pub async fn login_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<NextQuery>,
) -> Result<Response, PageError> {
    let (csrf, is_new) = anonymous_csrf(&headers);
    let next = safe_next(query.next.as_deref());
    let notice = query.signed_up.is_some().then_some(
        "If this email had no account yet, it has one now: sign in with the password you chose.",
    );
    let page = LoginPage {
        csrf: &csrf,
        next: &next,
        email: "",
        notice,
        error: None,
    }
    .render(&state)?;
    Ok(with_csrf_cookie(&state, page, &csrf, is_new))
}

/// The sign-in page: the password form (unless password sign-in is off)
/// and the single sign-on button (when configured).
pub struct LoginPage<'a> {
    pub csrf: &'a str,
    pub next: &'a str,
    pub email: &'a str,
    pub notice: Option<&'a str>,
    pub error: Option<&'a str>,
}

impl LoginPage<'_> {
    pub fn render(&self, state: &AppState) -> Result<axum::response::Html<String>, PageError> {
        let dashboard = &state.dashboard;
        let sso = dashboard.sso.as_ref().map(|sso| {
            context! {
                name => sso.name.clone(),
                href => format!("/dashboard/login/sso?next={}", super::session::urlencode(self.next)),
            }
        });
        render(
            "login.html",
            context! {
                csrf => self.csrf, next => self.next, email => self.email,
                notice => self.notice, error => self.error, sso,
                password_sign_in => dashboard.password_sign_in,
                allow_signup => dashboard.offers_signup(),
            },
        )
    }
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    email: String,
    password: String,
    csrf: String,
    next: Option<String>,
}

pub async fn login(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Result<Response, PageError> {
    if !state.dashboard.password_sign_in {
        return Err(PageError::NotFound);
    }
    check_anonymous_csrf(&headers, &form.csrf)?;
    let next = safe_next(form.next.as_deref());
    let failed = |message: String, status| -> Result<Response, PageError> {
        let page = LoginPage {
            csrf: &form.csrf,
            next: &next,
            email: &form.email,
            notice: None,
            error: Some(&message),
        }
        .render(&state)?;
        Ok((status, page).into_response())
    };
    match state
        .accounts
        .sign_in(&form.email, &form.password, address.as_deref())
        .await
    {
        Ok(opened) => Ok(signed_in(&state, &opened, &next)),
        Err(e @ SignInError::Invalid) => failed(e.to_string(), StatusCode::UNAUTHORIZED),
        Err(e @ SignInError::Throttled { .. }) => {
            failed(e.to_string(), StatusCode::TOO_MANY_REQUESTS)
        }
        Err(e @ SignInError::Busy) => failed(e.to_string(), StatusCode::SERVICE_UNAVAILABLE),
        Err(e @ SignInError::Disabled) => failed(e.to_string(), StatusCode::FORBIDDEN),
        Err(SignInError::Store(e)) => Err(e.into()),
    }
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    pub csrf: String,
}

pub async fn logout(
    State(state): State<AppState>,
    who: SignedIn,
    Form(form): Form<CsrfForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    state.accounts.sign_out(&who.token, &who.actor()).await?;
    let mut response = Redirect::to("/dashboard/login").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, "", 0, state.dashboard.secure_cookies),
    );
    Ok(response)
}

#[derive(Debug, Deserialize)]
pub struct SetupQuery {
    token: Option<String>,
}

pub async fn setup_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<SetupQuery>,
) -> Result<Response, PageError> {
    let (csrf, is_new) = anonymous_csrf(&headers);
    let token = query.token.unwrap_or_default();
    let page = render(
        "setup.html",
        context! { csrf => csrf.clone(), token, email => "" },
    )?;
    Ok(with_csrf_cookie(&state, page, &csrf, is_new))
}

#[derive(Debug, Deserialize)]
pub struct AccountForm {
    email: String,
    password: String,
    confirm: String,
    csrf: String,
    #[serde(default)]
    token: String,
}

impl AccountForm {
    fn passwords_match(&self) -> Result<(), String> {
        if self.password == self.confirm {
            Ok(())
        } else {
            Err("The two passwords differ.".into())
        }
    }
}

pub async fn setup(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    Form(form): Form<AccountForm>,
) -> Result<Response, PageError> {
    check_anonymous_csrf(&headers, &form.csrf)?;
    let created = match form.passwords_match() {
        Ok(()) => state
            .accounts
            .complete_setup(&form.token, &form.email, &form.password, address.as_deref())
            .await
            .map_err(account_message),
        Err(message) => Err(Ok((StatusCode::BAD_REQUEST, message))),
    };
    finish_account_form(&state, address, "setup.html", form, created).await
}

pub async fn signup_page(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    if !state.dashboard.offers_signup() {
        return Err(PageError::NotFound);
    }
    let (csrf, is_new) = anonymous_csrf(&headers);
    let page = render(
        "signup.html",
        context! { csrf => csrf.clone(), email => "" },
    )?;
    Ok(with_csrf_cookie(&state, page, &csrf, is_new))
}

pub async fn signup(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    Form(form): Form<AccountForm>,
) -> Result<Response, PageError> {
    if !state.dashboard.offers_signup() {
        return Err(PageError::NotFound);
    }
    check_anonymous_csrf(&headers, &form.csrf)?;
    let done = match form.passwords_match() {
        Ok(()) => state
            .accounts
            .sign_up(&form.email, &form.password, address.as_deref())
            .await
            .map_err(account_message),
        Err(message) => Err(Ok((StatusCode::BAD_REQUEST, message))),
    };
    match done {
        // Not signed in: a new account and a taken email look the same.
        Ok(()) => Ok(Redirect::to(AFTER_SIGN_UP).into_response()),
        Err(failed) => form_failed("signup.html", form, failed),
    }
}

/// Why an account form failed: a status and message for the person
/// (`Ok`), or a failure of the server (`Err`).
type FormFailure = Result<(StatusCode, String), PageError>;

/// After the setup form: signed in when the account was created, else the
/// form again with the message, or the server's failure.
async fn finish_account_form(
    state: &AppState,
    address: Option<String>,
    template: &str,
    form: AccountForm,
    created: Result<svc_core::UserRecord, FormFailure>,
) -> Result<Response, PageError> {
    match created {
        Ok(user) => {
            let opened = state
                .accounts
                .open_session(user, address.as_deref())
                .await?;
            Ok(signed_in(state, &opened, "/dashboard/keys"))
        }
        Err(failed) => form_failed(template, form, failed),
    }
}

/// The account form again with its message, or the server's failure.
fn form_failed(
    template: &str,
    form: AccountForm,
    failed: FormFailure,
) -> Result<Response, PageError> {
    let (status, message) = failed?;
    let page = render(
        template,
        context! { csrf => form.csrf, token => form.token, email => form.email, error => message },
    )?;
    Ok((status, page).into_response())
}

/// A message for the person, with its status (`Ok`), or a failure of the
/// server (`Err`).
fn account_message(e: AccountError) -> FormFailure {
    let status = match e {
        AccountError::Store(e) => return Err(e.into()),
        AccountError::Hashing(e) => return Err(PageError::Internal(e)),
        AccountError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
        AccountError::Busy => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    };
    Ok((status, e.to_string()))
}
