//! Extractors that turn raw requests into typed values, failing with
//! [`ApiError`] instead of axum's plain-text rejections.

use std::net::{IpAddr, SocketAddr};

use std::marker::PhantomData;

use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, header, request::Parts};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use svc_core::{KeyRecord, KeyService, Permission};

use crate::body::body_timed_out;
use crate::config::Cidr;
use crate::error::ApiError;
use crate::scoped::ClientIp;

/// What a route needs of the key presented: a type named in the handler's
/// signature (`Key<scope::ModelRequest>`), so that no handler can take a
/// key without saying what it must hold, and the compiler sees it.
pub trait Scope: Send + Sync + 'static {
    /// The permission the key must hold; `None`: any key (the routes about
    /// the key itself: who am I, log out).
    const PERMISSION: Option<Permission>;
}

/// The scopes a route may need, one type each.
pub mod scope {
    use svc_core::Permission;

    macro_rules! scopes {
        ($($(#[$doc:meta])* $name:ident => $permission:expr;)*) => {$(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            pub struct $name;
            impl super::Scope for $name {
                const PERMISSION: Option<Permission> = $permission;
            }
        )*};
    }

    scopes! {
        /// Any key, whatever its kind.
        AnyKey => None;
        /// `model.request`: inference.
        ModelRequest => Some(Permission::ModelRequest);
        /// `api.model.read`: the model list.
        ModelRead => Some(Permission::ModelRead);
        /// `api.responses.write`: create and delete stored responses.
        ResponsesWrite => Some(Permission::ResponsesWrite);
        /// `api.responses.read`: read stored responses.
        ResponsesRead => Some(Permission::ResponsesRead);
        /// `api.usage.read`: usage.
        UsageRead => Some(Permission::UsageRead);
        /// `api.management.read`: reading the admin API (admin keys).
        ManagementRead => Some(Permission::ManagementRead);
        /// `api.management.write`: changing through the admin API.
        ManagementWrite => Some(Permission::ManagementWrite);
        /// `api.files.write`: upload and delete files.
        FilesWrite => Some(Permission::FilesWrite);
        /// `api.files.read`: list files and read them.
        FilesRead => Some(Permission::FilesRead);
        /// `api.batch.write`: create and cancel batches.
        BatchWrite => Some(Permission::BatchWrite);
        /// `api.batch.read`: read batches.
        BatchRead => Some(Permission::BatchRead);
    }
}

/// The key that authenticated this request, which holds what the route
/// needs (`S`): a key beyond its scope is refused with 403
/// `insufficient_permissions`, naming the missing permission. Put it first
/// among a handler's arguments so authentication is checked before the
/// body is read.
#[derive(Debug, Clone)]
pub struct Key<S>(pub KeyRecord, pub PhantomData<S>);

/// `record`, when its kind holds what `S` needs.
pub(crate) fn in_scope<S: Scope>(record: KeyRecord) -> Result<KeyRecord, ApiError> {
    match S::PERMISSION {
        Some(p) if !record.kind.allows(p) => Err(ApiError::Forbidden(format!(
            "You have insufficient permissions for this operation. Missing scopes: {p}."
        ))),
        _ => Ok(record),
    }
}

impl<S, St> FromRequestParts<St> for Key<S>
where
    S: Scope,
    KeyService: FromRef<St>,
    St: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &St) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or("\u{0}"));
        let record = authenticate(&KeyService::from_ref(state), header).await?;
        Ok(Key(in_scope::<S>(record)?, PhantomData))
    }
}

/// The key a request runs as, from its `Authorization` header (`Bearer
/// <key>`), noted in the request log. A batch's line runs as the key that
/// made the batch (a task-local no client can set), refused once that key
/// is, whatever its headers say: every dialect's key extractor comes here.
pub async fn authenticate(keys: &KeyService, header: Option<&str>) -> Result<KeyRecord, ApiError> {
    let authenticating = crate::request_log::timed("authenticate");
    let record = match crate::scoped::batch_caller() {
        Some(id) => keys.authenticate_id(&id).await,
        None => keys.authenticate(header).await,
    };
    drop(authenticating);
    let record = record?;
    crate::request_log::note_key(&record);
    Ok(record)
}

/// A request body that names the model it asks for.
pub(crate) trait NamesModel {
    fn model(&self) -> &str;
}

macro_rules! names_model {
    ($($request:ty),* $(,)?) => {
        $(impl NamesModel for $request {
            fn model(&self) -> &str {
                &self.model
            }
        })*
    };
}

names_model!(
    svc_api::ChatCompletionRequest,
    svc_api::CompletionRequest,
    svc_api::EmbeddingRequest,
    svc_api::RerankRequest,
    svc_api::audio::SpeechRequest,
    svc_api::messages::MessagesRequest,
    svc_api::messages::CountTokensRequest,
    svc_api::responses::CreateResponseRequest,
);

/// A JSON body deserialized into `T`, with the failing field named as the
/// error's `param`.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    BodyLimit: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let is_json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|mime| {
                let mime = mime.trim();
                mime.eq_ignore_ascii_case("application/json")
                    || (mime.starts_with("application/") && mime.ends_with("+json"))
            });
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let limit = BodyLimit::from_ref(state).0;
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if let Some(timed_out) = body_timed_out(&rejection) {
                    ApiError::BodyTimeout(timed_out)
                } else if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge { limit }
                } else {
                    ApiError::InvalidBody {
                        param: None,
                        message: "could not read the request body".into(),
                    }
                }
            })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// The configured body limit in bytes (also for error messages).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Deserializes `bytes`, naming the offending field on failure. Valid
/// bodies take serde_json's direct path; only a failure is parsed again,
/// with the path tracking that names the field (and costs a request's
/// worth of time at thousands of requests a second).
///
/// Every body of this API is a JSON object: serde would also read a struct
/// from an array (its fields by position), so an array is refused first.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ApiError::InvalidBody {
            param: None,
            message: "The body of your request must be a JSON object.".into(),
        });
    }
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(_) => parse_json_tracked(bytes),
    }
}

fn parse_json_tracked<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let syntax_error = |inner: &serde_json::Error| ApiError::InvalidBody {
        param: None,
        message: format!(
            "We could not parse the JSON body of your request: {inner}. Send valid JSON."
        ),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: Result<T, _> = serde_path_to_error::deserialize(&mut de);
    if value.is_ok() {
        de.end().map_err(|e| syntax_error(&e))?;
    }
    value.map_err(|err| {
        let inner = err.inner();
        let mut param = err.path().to_string();
        if param == "." {
            param.clear();
        }
        if inner.is_syntax() || inner.is_eof() {
            return syntax_error(inner);
        }
        let text = inner.to_string();
        // serde reports a missing field at its parent; name the field itself.
        if let Some(field) = text
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            param = if param.is_empty() {
                field.to_owned()
            } else {
                format!("{param}.{field}")
            };
        }
        let message = if param.is_empty() {
            format!("Invalid request body: {text}")
        } else {
            format!("Invalid value for '{param}': {text}")
        };
        ApiError::InvalidBody {
            param: (!param.is_empty()).then_some(param),
            message,
        }
    })
}

/// The client's address: the socket's peer, or, when that peer is a
/// trusted proxy, the address the proxies' headers name (see
/// [`client_ip`]). Every throttle, log line and page that names a client
/// uses this. `None` when the server was not started with connection info,
/// as in some tests.
#[derive(Debug, Clone)]
pub struct ClientAddress(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let address = match parts.extensions.get::<ClientIp>() {
            Some(ClientIp(ip)) => Some(ip.to_string()),
            None => parts
                .extensions
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|info| info.0.ip().to_canonical().to_string()),
        };
        Ok(ClientAddress(address))
    }
}

/// The client's address of a request that came from `peer`.
///
/// Only when `peer` is in `trusted` are forwarding headers read:
/// `X-Forwarded-For` (all of its lines, in order), or `Forwarded` when the
/// request has no `X-Forwarded-For`. Walking the hops from the right (the
/// nearest), trusted proxies are skipped and the first other address is the
/// client; a client cannot spoof it, since anything it sends itself stays
/// left of what its first trusted proxy appends. A hop that is not an
/// address (`unknown`, an obfuscated name, garbage) stops the walk at the
/// trusted proxy that wrote it. When every hop is trusted, the left-most is
/// the client.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[Cidr]) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: IpAddr| trusted.iter().any(|block| block.contains(ip));
    if trusted.is_empty() || !is_trusted(peer) {
        return peer;
    }
    let forwarded_for = headers.get_all(X_FORWARDED_FOR);
    let hops: Vec<Option<IpAddr>> = if forwarded_for.iter().next().is_some() {
        forwarded_for
            .iter()
            .flat_map(|line| line.to_str().unwrap_or("\u{0}").split(','))
            .map(parse_node)
            .collect()
    } else {
        headers
            .get_all(header::FORWARDED)
            .iter()
            .flat_map(|line| line.to_str().unwrap_or("\u{0}").split(','))
            .filter_map(|element| {
                // An element without `for=` says nothing about this hop.
                element.split(';').find_map(|pair| {
                    let (name, value) = pair.split_once('=')?;
                    name.trim()
                        .eq_ignore_ascii_case("for")
                        .then(|| parse_node(value))
                })
            })
            .collect()
    };
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop {
            Some(ip) => {
                client = ip.to_canonical();
                if !is_trusted(client) {
                    return client;
                }
            }
            None => return client,
        }
    }
    client
}

const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// One hop of `X-Forwarded-For` or `Forwarded`'s `for=`: an address,
/// perhaps quoted, perhaps with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    if let Some(rest) = text.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    if let Ok(ip) = text.parse() {
        return Some(ip);
    }
    let (address, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    address.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn resolve(peer: &str, headers: &[(&str, &str)], trusted: &[&str]) -> String {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let trusted: Vec<Cidr> = trusted.iter().map(|t| t.parse().unwrap()).collect();
        client_ip(peer.parse().unwrap(), &map, &trusted).to_string()
    }

    const PROXY: &[&str] = &["10.0.0.0/8"];

    /// Found by the `chat_request` fuzz target: serde reads a struct from a
    /// JSON array, so `["svc", [...]]` was a valid chat request and a wrong
    /// one failed with `param` `[0]`, which names no field.
    #[test]
    fn a_body_that_is_an_array_is_refused() {
        let positional = br#" ["svc", [{"role": "user", "content": "hi"}]]"#;
        match parse_json::<svc_api::ChatCompletionRequest>(positional) {
            Err(ApiError::InvalidBody {
                param: None,
                message,
            }) => {
                assert!(message.contains("JSON object"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let wrong = br#"[{"model": "svc"}]"#;
        assert!(matches!(
            parse_json::<svc_api::ChatCompletionRequest>(wrong),
            Err(ApiError::InvalidBody { param: None, .. })
        ));
    }

    #[test]
    fn headers_from_untrusted_peers_are_ignored() {
        let spoof = [("x-forwarded-for", "198.51.100.1")];
        assert_eq!(resolve("203.0.113.5", &spoof, &[]), "203.0.113.5");
        assert_eq!(resolve("203.0.113.5", &spoof, PROXY), "203.0.113.5");
        assert_eq!(resolve("::ffff:203.0.113.5", &spoof, PROXY), "203.0.113.5");
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        // The client put 198.51.100.1 in itself; its proxy appended what it saw.
        let xff = [("x-forwarded-for", "198.51.100.1, 203.0.113.5, 10.0.0.2")];
        assert_eq!(resolve("10.0.0.1", &xff, PROXY), "203.0.113.5");
        let lines = [
            ("x-forwarded-for", "198.51.100.1"),
            ("x-forwarded-for", "203.0.113.5:4711"),
        ];
        assert_eq!(resolve("10.0.0.1", &lines, PROXY), "203.0.113.5");
        let v6 = [("x-forwarded-for", "[2001:db8::7]:443")];
        assert_eq!(resolve("10.0.0.1", &v6, PROXY), "2001:db8::7");
        let all_trusted = [("x-forwarded-for", "10.9.9.9, 10.0.0.2")];
        assert_eq!(resolve("10.0.0.1", &all_trusted, PROXY), "10.9.9.9");
        assert_eq!(resolve("10.0.0.1", &[], PROXY), "10.0.0.1");
    }

    #[test]
    fn forwarded_is_read_when_there_is_no_x_forwarded_for() {
        let forwarded = [(
            "forwarded",
            "for=198.51.100.1, for=\"[2001:db8::7]:4711\";proto=https, by=10.0.0.3;for=10.0.0.2",
        )];
        assert_eq!(resolve("10.0.0.1", &forwarded, PROXY), "2001:db8::7");
        let both = [
            ("forwarded", "for=198.51.100.1"),
            ("x-forwarded-for", "203.0.113.5"),
        ];
        assert_eq!(resolve("10.0.0.1", &both, PROXY), "203.0.113.5");
    }

    #[test]
    fn a_hop_that_is_no_address_stops_at_the_proxy_that_wrote_it() {
        for junk in ["unknown", "_hidden", "not an address", "1.2.3.4:99999"] {
            let xff = [("x-forwarded-for", format!("198.51.100.1, {junk}, 10.0.0.2"))];
            let xff: Vec<(&str, &str)> = xff.iter().map(|(n, v)| (*n, v.as_str())).collect();
            assert_eq!(resolve("10.0.0.1", &xff, PROXY), "10.0.0.2", "{junk}");
        }
    }
}

#[cfg(test)]
mod scope_tests {
    use super::*;
    use svc_core::{AdminReach, KeyKind};

    fn record(kind: KeyKind) -> KeyRecord {
        KeyRecord {
            id: svc_core::KeyId("key_test".into()),
            name: String::new(),
            hint: String::new(),
            owner_id: None,
            created_via: svc_core::KeyOrigin::Cli,
            created_at: 0,
            expires_at: None,
            last_used_at: None,
            revoked_at: None,
            limits: Default::default(),
            owner_disabled_at: None,
            project_id: svc_core::ProjectId::default_project(),
            kind,
            allowed_models: Default::default(),
            project_allowed_models: Default::default(),
            allowed_mcp_servers: Default::default(),
            project_allowed_mcp_servers: Default::default(),
            budget: None,
            project_budget: None,
            rotated_from: None,
            lineage: None,
        }
    }

    #[test]
    fn refusals_name_the_missing_permission() {
        let none = KeyKind::Restricted(vec![]);
        let err = in_scope::<scope::ModelRequest>(record(none.clone())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "You have insufficient permissions for this operation. Missing scopes: model.request."
        );
        assert_eq!(err.status(), 403);
        assert!(in_scope::<scope::AnyKey>(record(none)).is_ok());
        assert!(in_scope::<scope::ModelRequest>(record(KeyKind::All)).is_ok());
        let admin = KeyKind::Admin(AdminReach::Organization);
        assert!(in_scope::<scope::ModelRequest>(record(admin.clone())).is_err());
        assert!(in_scope::<scope::ManagementRead>(record(KeyKind::All)).is_err());
        assert!(in_scope::<scope::ManagementRead>(record(admin)).is_ok());
    }
}
