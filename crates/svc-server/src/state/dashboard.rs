//! The dashboard's settings, fixed at startup: where it is reached, its
//! cookies, and how people sign in.

/// The dashboard's settings, fixed at startup.
pub struct Dashboard {
    /// Where people reach the dashboard, e.g. `https://svc.example/dashboard`.
    pub url: String,
    /// Whether cookies get `Secure` (the public URL is https).
    pub secure_cookies: bool,
    /// Whether the sign-in page offers self sign-up.
    pub allow_signup: bool,
    /// Whether email and password sign in (else only single sign-on does).
    pub password_sign_in: bool,
    /// Single sign-on through an OpenID Connect provider, when configured.
    pub sso: Option<crate::oidc::Oidc>,
}

/// Where the dashboard's routes are mounted on this server.
pub const PATH: &str = "/dashboard";

impl Dashboard {
    /// `dashboard_url` defaults to `<public_url>/dashboard`.
    pub fn new(public_url: &str, dashboard_url: Option<&str>, allow_signup: bool) -> Self {
        let url = dashboard_url
            .map(|u| u.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| format!("{public_url}{PATH}"));
        Dashboard {
            secure_cookies: url.starts_with("https://") || public_url.starts_with("https://"),
            url,
            allow_signup,
            password_sign_in: true,
            sso: None,
        }
    }

    /// With single sign-on as `config` says; the message says why the
    /// settings cannot work.
    pub fn with_sso(mut self, config: &crate::config::SsoConfig) -> Result<Self, String> {
        self.sso = crate::oidc::Oidc::from_config(config, self.allow_signup, &self.url)?;
        self.password_sign_in = config.password_sign_in;
        Ok(self)
    }

    /// Whether the sign-in page offers self sign-up: asked for, and
    /// passwords sign in.
    pub fn offers_signup(&self) -> bool {
        self.allow_signup && self.password_sign_in
    }

    /// The device flow's `verification_uri`.
    pub fn device_url(&self) -> String {
        format!("{}/device", self.url)
    }
}
