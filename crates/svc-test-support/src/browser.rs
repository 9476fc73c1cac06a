//! [`Browser`]: a cookie-keeping HTTP client for the dashboard's pages, the
//! way a browser without JavaScript uses them (forms, redirects, cookies).
//! The real-browser tests live in `tests/browser`; this drives the same
//! pages from Rust tests, fast.

use std::collections::BTreeMap;
use std::sync::Mutex;

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};

/// One page as fetched.
#[derive(Debug, Clone)]
pub struct Page {
    pub status: StatusCode,
    /// Where a redirect pointed, if it was one.
    pub location: Option<String>,
    pub body: String,
    pub headers: reqwest::header::HeaderMap,
}

impl Page {
    /// The value of the first hidden `csrf` input.
    pub fn csrf(&self) -> String {
        self.input_value("csrf").expect("the page has a csrf field")
    }

    /// The `value` of the first input named `name`.
    pub fn input_value(&self, name: &str) -> Option<String> {
        self.value_of(&format!("name=\"{name}\""))
    }

    /// The `value` of the element with this `id`.
    pub fn value_by_id(&self, id: &str) -> Option<String> {
        self.value_of(&format!("id=\"{id}\""))
    }

    /// The `value` attribute of the first tag containing `marker`.
    fn value_of(&self, marker: &str) -> Option<String> {
        let at = self.body.find(marker)?;
        let tag_start = self.body[..at].rfind('<')?;
        let tag_end = at + self.body[at..].find('>')?;
        let tag = &self.body[tag_start..tag_end];
        let value = tag.split("value=\"").nth(1)?.split('"').next()?;
        Some(value.replace("&amp;", "&").replace("&#x2f;", "/"))
    }
}

/// A client with its own cookie jar, not following redirects.
pub struct Browser {
    base_url: String,
    client: reqwest::Client,
    cookies: Mutex<BTreeMap<String, String>>,
}

impl Browser {
    pub fn new(base_url: &str) -> Self {
        Browser {
            base_url: base_url.trim_end_matches('/').to_owned(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            cookies: Mutex::new(BTreeMap::new()),
        }
    }

    /// The cookie `name`, if set.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.cookies.lock().unwrap().get(name).cloned()
    }

    /// Sets or replaces a cookie by hand.
    pub fn set_cookie(&self, name: &str, value: &str) {
        self.cookies
            .lock()
            .unwrap()
            .insert(name.to_owned(), value.to_owned());
    }

    pub async fn get(&self, path: &str) -> Page {
        self.send(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Page {
        self.send(Method::POST, path, Some(form)).await
    }

    /// Follows redirects from `page` (GETs) until a non-redirect.
    pub async fn follow(&self, mut page: Page) -> Page {
        for _ in 0..10 {
            match page.location.clone() {
                Some(location) if page.status.is_redirection() => page = self.get(&location).await,
                _ => return page,
            }
        }
        page
    }

    /// Signs in with email and password; panics unless it worked.
    pub async fn sign_in(&self, email: &str, password: &str) {
        let login = self.get("/dashboard/login").await;
        assert_eq!(login.status, StatusCode::OK);
        let done = self
            .post(
                "/dashboard/login",
                &[
                    ("csrf", &login.csrf()),
                    ("email", email),
                    ("password", password),
                    ("next", "/dashboard/keys"),
                ],
            )
            .await;
        assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
        assert!(self.cookie("svc_session").is_some());
    }

    /// Opens the device-code form as `verification_uri_complete` does
    /// (which only fills the code in) and submits it, as the person's
    /// Continue does: the approval page, or whatever the server answered.
    pub async fn enter_device_code(&self, user_code: &str) -> Page {
        let form = self
            .get(&format!("/dashboard/device?user_code={user_code}"))
            .await;
        assert_eq!(form.status, StatusCode::OK, "{}", form.body);
        assert_eq!(form.input_value("user_code").as_deref(), Some(user_code));
        self.post(
            "/dashboard/device",
            &[("csrf", &form.csrf()), ("user_code", user_code)],
        )
        .await
    }

    async fn send(&self, method: Method, path: &str, form: Option<&[(&str, &str)]>) -> Page {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base_url)
        };
        let mut request = self.client.request(method, url);
        let jar = self
            .cookies
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        if !jar.is_empty() {
            request = request.header(COOKIE, jar);
        }
        if let Some(form) = form {
            request = request.form(form);
        }
        let response = request.send().await.expect("send");
        let status = response.status();
        let headers = response.headers().clone();
        for value in headers.get_all(SET_COOKIE) {
            let text = value.to_str().unwrap_or_default();
            let first = text.split(';').next().unwrap_or_default();
            if let Some((name, value)) = first.split_once('=') {
                let mut cookies = self.cookies.lock().unwrap();
                let deleted = text.contains("Max-Age=0") || value.is_empty();
                if deleted {
                    cookies.remove(name);
                } else {
                    cookies.insert(name.to_owned(), value.to_owned());
                }
            }
        }
        let location = headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.text().await.unwrap_or_default();
        Page {
            status,
            location,
            body,
            headers,
        }
    }
}
