//! Single sign-on: svc as an OpenID Connect relying party.
//!
//! The authorization code flow with PKCE (S256), `state` and `nonce`
//! (OpenID Connect Core 1.0 §3.1): [`Oidc::start`] makes the three
//! one-time values and the provider's authorization URL; the dashboard keeps
//! the values in a short-lived cookie of the browser that started; on the
//! way back [`Oidc::finish`] redeems the code (with the PKCE verifier) at
//! the token endpoint and checks the ID token: its signature against the
//! provider's published keys (RS256/384/512, PS256, ES256/384, EdDSA; never
//! `none` or a shared-secret algorithm), its issuer, audience, expiry and
//! the nonce. The email comes from the ID token, or from the userinfo
//! endpoint when the ID token has none (providers that follow
//! `conformIdTokenClaims`), and counts only when the provider says it is
//! verified.
//!
//! The provider's discovery document is fetched when first needed (not at
//! startup, so a provider that is down does not stop the service) and kept
//! an hour; its keys are fetched again when a token names a key id not
//! known yet, at most every [`KEYS_REFRESH`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use svc_core::secrets::random_token;
use svc_core::{ProjectId, ProjectRole};
use tokio::sync::Mutex;
use url::Url;

use crate::config::{Secret, SsoConfig};

/// How long a discovery document is used before it is fetched again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);
/// Least time between two fetches of the provider's keys.
pub const KEYS_REFRESH: Duration = Duration::from_secs(30);
/// Clock difference with the provider that is tolerated, in seconds.
const LEEWAY_SECS: i64 = 120;
/// Largest document read from the provider.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;
/// Time one request to the provider may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why single sign-on failed.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The provider could not be reached, or answered something unusable.
    #[error("the identity provider could not be used: {0}")]
    Provider(String),
    /// The provider refused to give a token for the code.
    #[error("the identity provider refused the sign-in: {0}")]
    Refused(String),
    /// The ID token is not one this service may accept.
    #[error("the identity provider's ID token was refused: {0}")]
    IdToken(#[from] IdTokenError),
}

impl OidcError {
    /// A short code for the audit log.
    pub fn code(&self) -> &'static str {
        match self {
            OidcError::Provider(_) => "sso_provider_error",
            OidcError::Refused(_) => "sso_code_refused",
            OidcError::IdToken(IdTokenError::Nonce) => "sso_nonce_mismatch",
            OidcError::IdToken(_) => "sso_invalid_id_token",
        }
    }
}

/// What is wrong with an ID token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdTokenError {
    #[error("it is not a signed JWT")]
    Malformed,
    #[error("its algorithm {0:?} is not accepted")]
    Algorithm(String),
    #[error("none of the provider's keys matches it")]
    NoKey,
    #[error("its signature does not verify")]
    Signature,
    #[error("it was issued by {0:?}, not this provider")]
    Issuer(String),
    #[error("it was issued to another client")]
    Audience,
    #[error("it has expired")]
    Expired,
    #[error("it was issued in the future, or is not valid yet")]
    IssuedLater,
    #[error("its nonce is not the one this sign-in sent")]
    Nonce,
    #[error("it names no subject")]
    Subject,
    #[error("the userinfo endpoint answered for another subject")]
    UserinfoSubject,
}

/// The one-time values of a sign-in in progress, kept by the browser that
/// started it (in an HttpOnly cookie) until the provider sends it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// Sent as `state`; the answer must carry it back.
    pub state: String,
    /// Sent as `nonce`; the ID token must carry it.
    pub nonce: String,
    /// The PKCE code verifier (its S256 challenge was sent).
    pub verifier: String,
    /// Where to go in the dashboard once signed in.
    pub next: String,
}

impl Flow {
    /// New random values, to come back to `next`.
    pub fn new(next: String) -> Self {
        Flow {
            state: random_token(),
            nonce: random_token(),
            verifier: random_token(),
            next,
        }
    }

    /// The cookie value: base64url of its JSON.
    pub fn encode(&self) -> String {
        B64.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The flow of a cookie value, if it is one.
    pub fn decode(text: &str) -> Option<Self> {
        let bytes = B64.decode(text.as_bytes()).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The S256 PKCE challenge of the verifier.
    fn challenge(&self) -> String {
        B64.encode(Sha256::digest(self.verifier.as_bytes()))
    }
}

/// Who the provider says signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The provider's `sub`.
    pub subject: String,
    /// The email, when the provider gave one.
    pub email: Option<String>,
    /// Whether the provider says it verified the email.
    pub email_verified: bool,
}

/// The relying party, built once from the configuration.
pub struct Oidc {
    /// The issuer as configured.
    issuer: String,
    client_id: String,
    client_secret: Option<Secret>,
    /// Where the provider sends the browser back.
    redirect_uri: String,
    /// The provider's name, for the sign-in button.
    pub name: String,
    /// Where an account made on first sign-in goes; `None`: no accounts
    /// are made.
    pub create_accounts: Option<(ProjectId, ProjectRole)>,
    http: reqwest::Client,
    provider: Mutex<Option<(Instant, Arc<Provider>)>>,
}

/// What the discovery document says, and the keys.
struct Provider {
    issuer: String,
    authorization_endpoint: Url,
    token_endpoint: String,
    userinfo_endpoint: Option<String>,
    jwks_uri: String,
    /// Whether the token endpoint takes the secret in the form
    /// (`client_secret_post`) rather than in HTTP Basic.
    secret_in_form: bool,
    keys: Mutex<Keys>,
}

#[derive(Default)]
struct Keys {
    fetched: Option<Instant>,
    keys: Vec<Jwk>,
}

/// One key of a JWK set (RFC 7517), the members the algorithms here use.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Jwk {
    pub kty: String,
    #[serde(default)]
    pub kid: Option<String>,
    #[serde(default, rename = "use")]
    pub use_: Option<String>,
    #[serde(default)]
    pub alg: Option<String>,
    #[serde(default)]
    pub n: Option<String>,
    #[serde(default)]
    pub e: Option<String>,
    #[serde(default)]
    pub crv: Option<String>,
    #[serde(default)]
    pub x: Option<String>,
    #[serde(default)]
    pub y: Option<String>,
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<Value>,
}

impl Oidc {
    /// The relying party of `config`, whose callback is under
    /// `dashboard_url`; `Ok(None)` when single sign-on is off.
    pub fn from_config(
        config: &SsoConfig,
        allow_signup: bool,
        dashboard_url: &str,
    ) -> Result<Option<Self>, String> {
        config.check(allow_signup)?;
        let Some(provider) = &config.provider else {
            return Ok(None);
        };
        let http = reqwest::Client::builder()
            .timeout(PROVIDER_TIMEOUT)
            // A redirected token request would carry the code (and a
            // client_secret_post secret) wherever it was sent.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make the HTTP client for single sign-on: {e}"))?;
        Ok(Some(Oidc {
            issuer: provider.issuer.as_str().to_owned(),
            client_id: provider.client_id.clone(),
            client_secret: config.oidc_client_secret.clone(),
            redirect_uri: format!("{dashboard_url}/login/sso/callback"),
            name: config.oidc_name.clone(),
            create_accounts: config.oidc_create_accounts.then(|| {
                (
                    ProjectId(config.oidc_default_project.clone()),
                    config.oidc_default_role,
                )
            }),
            http,
            provider: Mutex::new(None),
        }))
    }

    /// The provider's issuer, as configured.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// A new sign-in back to `next`: the values to keep and the URL of the
    /// provider's authorization endpoint to send the browser to.
    pub async fn start(&self, next: String) -> Result<(Flow, Url), OidcError> {
        let provider = self.provider().await?;
        let flow = Flow::new(next);
        let mut url = provider.authorization_endpoint.clone();
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.client_id)
            .append_pair("redirect_uri", &self.redirect_uri)
            .append_pair("scope", "openid email profile")
            .append_pair("state", &flow.state)
            .append_pair("nonce", &flow.nonce)
            .append_pair("code_challenge", &flow.challenge())
            .append_pair("code_challenge_method", "S256");
        Ok((flow, url))
    }

    /// Redeems `code` of the sign-in `flow` (whose `state` the caller
    /// checked) and says who signed in.
    pub async fn finish(&self, flow: &Flow, code: &str) -> Result<Identity, OidcError> {
        let provider = self.provider().await?;
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &self.redirect_uri),
            ("code_verifier", &flow.verifier),
        ];
        let mut request = self.http.post(&provider.token_endpoint);
        match &self.client_secret {
            Some(secret) if provider.secret_in_form => {
                form.push(("client_id", &self.client_id));
                form.push(("client_secret", secret.expose()));
            }
            // RFC 6749 §2.3.1: both form-encoded, then Basic.
            Some(secret) => {
                let encode = |s: &str| serde_urlencoded::to_string([("", s)]).unwrap_or_default();
                let user = encode(&self.client_id);
                let pass = encode(secret.expose());
                let basic = base64::engine::general_purpose::STANDARD.encode(format!(
                    "{}:{}",
                    user.trim_start_matches('='),
                    pass.trim_start_matches('=')
                ));
                request = request.header("authorization", format!("Basic {basic}"));
            }
            None => form.push(("client_id", &self.client_id)),
        }
        let response = request
            .form(&form)
            .send()
            .await
            .map_err(|e| OidcError::Provider(format!("token endpoint: {e}")))?;
        let status = response.status();
        let body = read_json(response, "token endpoint").await?;
        if !status.is_success() {
            let error = body["error"].as_str().unwrap_or("no error code");
            return Err(OidcError::Refused(format!(
                "{error} (token endpoint answered {status})"
            )));
        }
        let id_token = body["id_token"]
            .as_str()
            .ok_or_else(|| OidcError::Provider("the token endpoint gave no id_token".into()))?;
        let expected = Expected {
            issuer: &provider.issuer,
            client_id: &self.client_id,
            nonce: &flow.nonce,
        };
        let claims = self.verify(&provider, id_token, &expected).await?;
        let mut identity = identity_of(&claims)?;
        if identity.email.is_none()
            && let (Some(endpoint), Some(access)) =
                (&provider.userinfo_endpoint, body["access_token"].as_str())
        {
            let response = self
                .http
                .get(endpoint)
                .bearer_auth(access)
                .send()
                .await
                .map_err(|e| OidcError::Provider(format!("userinfo endpoint: {e}")))?;
            if !response.status().is_success() {
                return Err(OidcError::Provider(format!(
                    "userinfo endpoint answered {}",
                    response.status()
                )));
            }
            let info = read_json(response, "userinfo endpoint").await?;
            if info["sub"].as_str() != Some(identity.subject.as_str()) {
                return Err(IdTokenError::UserinfoSubject.into());
            }
            identity.email = info["email"].as_str().map(str::to_owned);
            identity.email_verified = is_true(&info["email_verified"]);
        }
        Ok(identity)
    }

    /// Checks `token` with the provider's keys, fetching them again once
    /// when none matches (the provider may have rotated them).
    async fn verify(
        &self,
        provider: &Provider,
        token: &str,
        expected: &Expected<'_>,
    ) -> Result<Value, OidcError> {
        let now = chrono::Utc::now().timestamp();
        let mut keys = provider.keys.lock().await;
        let stale = keys.fetched.is_none_or(|at| at.elapsed() >= KEYS_REFRESH);
        if keys.fetched.is_none() {
            keys.keys = self.fetch_keys(&provider.jwks_uri).await?;
            keys.fetched = Some(Instant::now());
        }
        match verify_id_token(token, &keys.keys, expected, now) {
            Err(IdTokenError::NoKey) if stale => {
                keys.keys = self.fetch_keys(&provider.jwks_uri).await?;
                keys.fetched = Some(Instant::now());
                Ok(verify_id_token(token, &keys.keys, expected, now)?)
            }
            other => Ok(other?),
        }
    }

    async fn fetch_keys(&self, uri: &str) -> Result<Vec<Jwk>, OidcError> {
        let response = self
            .http
            .get(uri)
            .send()
            .await
            .map_err(|e| OidcError::Provider(format!("jwks_uri: {e}")))?;
        let body = read_json(response, "jwks_uri").await?;
        let set: JwkSet = serde_json::from_value(body)
            .map_err(|e| OidcError::Provider(format!("jwks_uri is not a JWK set: {e}")))?;
        // Keys of kinds not known here are skipped, not fatal.
        Ok(set
            .keys
            .into_iter()
            .filter_map(|key| serde_json::from_value(key).ok())
            .collect())
    }

    /// The discovery document, fetched when missing or older than an hour.
    async fn provider(&self) -> Result<Arc<Provider>, OidcError> {
        let mut cached = self.provider.lock().await;
        if let Some((at, provider)) = cached.as_ref()
            && at.elapsed() < DISCOVERY_TTL
        {
            return Ok(provider.clone());
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| OidcError::Provider(format!("discovery at {url}: {e}")))?;
        if !response.status().is_success() {
            return Err(OidcError::Provider(format!(
                "discovery at {url} answered {}",
                response.status()
            )));
        }
        let doc = read_json(response, "discovery").await?;
        let text = |name: &str| {
            doc[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| OidcError::Provider(format!("discovery has no {name}")))
        };
        let issuer = text("issuer")?;
        // OpenID Connect Discovery §4.3: the document's issuer is the one
        // configured (a trailing slash aside: URLs are written both ways).
        if issuer.trim_end_matches('/') != self.issuer.trim_end_matches('/') {
            return Err(OidcError::Provider(format!(
                "discovery names issuer {issuer:?}, not {:?}",
                self.issuer
            )));
        }
        let authorization_endpoint = Url::parse(&text("authorization_endpoint")?)
            .map_err(|e| OidcError::Provider(format!("authorization_endpoint: {e}")))?;
        let methods = doc["token_endpoint_auth_methods_supported"].as_array();
        let secret_in_form = methods.is_some_and(|m| {
            let has = |name: &str| m.iter().any(|v| v.as_str() == Some(name));
            has("client_secret_post") && !has("client_secret_basic")
        });
        let provider = Arc::new(Provider {
            issuer,
            authorization_endpoint,
            token_endpoint: text("token_endpoint")?,
            userinfo_endpoint: doc["userinfo_endpoint"].as_str().map(str::to_owned),
            jwks_uri: text("jwks_uri")?,
            secret_in_form,
            keys: Mutex::new(Keys::default()),
        });
        *cached = Some((Instant::now(), provider.clone()));
        Ok(provider)
    }
}

/// A JSON answer of the provider, at most [`MAX_DOCUMENT_BYTES`].
async fn read_json(mut response: reqwest::Response, what: &str) -> Result<Value, OidcError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| OidcError::Provider(format!("{what}: {e}")))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(OidcError::Provider(format!("{what}: answer too large")));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| OidcError::Provider(format!("{what}: not JSON: {e}")))
}

/// What an ID token must say.
pub struct Expected<'a> {
    /// The `iss` of the discovery document.
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub nonce: &'a str,
}

/// `true` or `"true"` (some providers send the string).
fn is_true(value: &Value) -> bool {
    value.as_bool() == Some(true) || value.as_str() == Some("true")
}

/// Who an ID token's claims name.
fn identity_of(claims: &Value) -> Result<Identity, IdTokenError> {
    let subject = claims["sub"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or(IdTokenError::Subject)?;
    Ok(Identity {
        subject: subject.to_owned(),
        email: claims["email"].as_str().map(str::to_owned),
        email_verified: is_true(&claims["email_verified"]),
    })
}

/// Checks a compact-serialized ID token's signature with `keys` and its
/// claims against `expected` at `now` (Unix seconds); returns the claims.
pub fn verify_id_token(
    token: &str,
    keys: &[Jwk],
    expected: &Expected<'_>,
    now: i64,
) -> Result<Value, IdTokenError> {
    let mut parts = token.split('.');
    let (Some(header_part), Some(payload_part), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(IdTokenError::Malformed);
    };
    let decode = |part: &str| B64.decode(part).map_err(|_| IdTokenError::Malformed);
    let header: Value =
        serde_json::from_slice(&decode(header_part)?).map_err(|_| IdTokenError::Malformed)?;
    let claims: Value =
        serde_json::from_slice(&decode(payload_part)?).map_err(|_| IdTokenError::Malformed)?;
    let signature = decode(signature)?;
    // What was signed: `header.payload`, as sent.
    let signed = &token.as_bytes()[..header_part.len() + 1 + payload_part.len()];
    // RFC 7515 §4.1.11: extensions this code does not know must be refused.
    if header.get("crit").is_some() {
        return Err(IdTokenError::Malformed);
    }
    let alg = header["alg"].as_str().unwrap_or("").to_owned();
    let kind = Algorithm::parse(&alg).ok_or_else(|| IdTokenError::Algorithm(alg.clone()))?;
    let kid = header["kid"].as_str();
    let candidates = keys.iter().filter(|key| {
        key.use_.as_deref().is_none_or(|u| u == "sig")
            && key.alg.as_deref().is_none_or(|a| a == alg)
            && kid.is_none_or(|kid| key.kid.as_deref() == Some(kid))
            && kind.fits(key)
    });
    let mut any = false;
    let mut verified = false;
    for key in candidates {
        any = true;
        if kind.verify(key, signed, &signature) {
            verified = true;
            break;
        }
    }
    if !any {
        return Err(IdTokenError::NoKey);
    }
    if !verified {
        return Err(IdTokenError::Signature);
    }
    let iss = claims["iss"].as_str().unwrap_or("");
    if iss != expected.issuer {
        return Err(IdTokenError::Issuer(iss.to_owned()));
    }
    let audience: Vec<&str> = match &claims["aud"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !audience.contains(&expected.client_id) {
        return Err(IdTokenError::Audience);
    }
    // Core §3.1.3.7: azp, when present, is us; with several audiences it
    // must be present.
    match claims["azp"].as_str() {
        Some(azp) if azp != expected.client_id => return Err(IdTokenError::Audience),
        None if audience.len() > 1 => return Err(IdTokenError::Audience),
        _ => {}
    }
    let seconds = |name: &str| {
        claims[name]
            .as_i64()
            .or_else(|| claims[name].as_f64().map(|f| f as i64))
    };
    match seconds("exp") {
        Some(exp) if exp + LEEWAY_SECS > now => {}
        _ => return Err(IdTokenError::Expired),
    }
    if seconds("iat").is_some_and(|iat| iat > now + LEEWAY_SECS)
        || seconds("nbf").is_some_and(|nbf| nbf > now + LEEWAY_SECS)
    {
        return Err(IdTokenError::IssuedLater);
    }
    match claims["nonce"].as_str() {
        Some(nonce) if svc_core::secrets::same_token(nonce, expected.nonce) => {}
        _ => return Err(IdTokenError::Nonce),
    }
    identity_of(&claims)?;
    Ok(claims)
}

/// The signature algorithms accepted.
#[derive(Debug, Clone, Copy)]
enum Algorithm {
    Rsa(&'static ring::signature::RsaParameters),
    Ecdsa(
        &'static ring::signature::EcdsaVerificationAlgorithm,
        &'static str,
    ),
    Ed25519,
}

impl Algorithm {
    fn parse(alg: &str) -> Option<Self> {
        use ring::signature::*;
        Some(match alg {
            "RS256" => Algorithm::Rsa(&RSA_PKCS1_2048_8192_SHA256),
            "RS384" => Algorithm::Rsa(&RSA_PKCS1_2048_8192_SHA384),
            "RS512" => Algorithm::Rsa(&RSA_PKCS1_2048_8192_SHA512),
            "PS256" => Algorithm::Rsa(&RSA_PSS_2048_8192_SHA256),
            "ES256" => Algorithm::Ecdsa(&ECDSA_P256_SHA256_FIXED, "P-256"),
            "ES384" => Algorithm::Ecdsa(&ECDSA_P384_SHA384_FIXED, "P-384"),
            "EdDSA" => Algorithm::Ed25519,
            _ => return None,
        })
    }

    /// Whether `key` is of this algorithm's kind.
    fn fits(self, key: &Jwk) -> bool {
        match self {
            Algorithm::Rsa(_) => key.kty == "RSA",
            Algorithm::Ecdsa(_, curve) => key.kty == "EC" && key.crv.as_deref() == Some(curve),
            Algorithm::Ed25519 => key.kty == "OKP" && key.crv.as_deref() == Some("Ed25519"),
        }
    }

    fn verify(self, key: &Jwk, message: &[u8], signature: &[u8]) -> bool {
        let bytes = |field: &Option<String>| field.as_deref().and_then(|v| B64.decode(v).ok());
        match self {
            Algorithm::Rsa(params) => {
                let (Some(n), Some(e)) = (bytes(&key.n), bytes(&key.e)) else {
                    return false;
                };
                ring::signature::RsaPublicKeyComponents { n, e }
                    .verify(params, message, signature)
                    .is_ok()
            }
            Algorithm::Ecdsa(algorithm, _) => {
                let (Some(x), Some(y)) = (bytes(&key.x), bytes(&key.y)) else {
                    return false;
                };
                let mut point = vec![4u8];
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                ring::signature::UnparsedPublicKey::new(algorithm, point)
                    .verify(message, signature)
                    .is_ok()
            }
            Algorithm::Ed25519 => {
                let Some(x) = bytes(&key.x) else {
                    return false;
                };
                ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, x)
                    .verify(message, signature)
                    .is_ok()
            }
        }
    }
}

#[cfg(test)]
mod tests;
