//! What an endpoint says about itself, declared beside its handlers
//! (`crate::chat::ENDPOINT`, ...): its group in the OpenAPI document, the
//! paths its requests come on and their dialect, whether a batch line may
//! call it, and which of its operations generates a reply (and so goes
//! through the response cache). The router lists the declarations once
//! (`routes::ENDPOINTS`, beside each endpoint's routes) and hands them to
//! what works from them: the OpenAPI document's tags and generating
//! operations, the request log's filter and dialects, the endpoints a
//! batch may call. Nothing here knows an endpoint by name.

/// The API dialect a request is in, as the request log records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// OpenAI's (chat, embeddings, files, the admin API, ...): the default.
    OpenAi,
    /// OpenAI's Responses API.
    Responses,
    /// Anthropic's Messages API.
    Anthropic,
    /// MCP's JSON-RPC (svc's own `/mcp`).
    Mcp,
}

impl Dialect {
    /// Its name in the request log.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Responses => "responses",
            Dialect::Anthropic => "anthropic",
            Dialect::Mcp => "mcp",
        }
    }
}

/// One endpoint's declaration: a group of operations.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// Its group (tag) in the OpenAPI document.
    pub tag: &'static str,
    /// The group's description there.
    pub about: &'static str,
    /// The paths its API calls begin with: the request log records these
    /// (under [`Endpoint::dialect`]). None for what is not an API call
    /// (health checks, the OpenAPI document).
    pub paths: &'static [&'static str],
    /// The dialect of its requests.
    pub dialect: Dialect,
    /// The path a batch line may call it at, if batches may.
    pub batch: Option<&'static str>,
    /// The operation (by id) that generates a reply: it says which model
    /// served it and whether the response cache did, and takes the
    /// caller's `Cache-Control`.
    pub generates: Option<&'static str>,
}

impl Endpoint {
    /// A group of operations in OpenAI's dialect, which the request log
    /// does not record, batches do not call and which generate nothing:
    /// the builder's start.
    pub(crate) const fn new(tag: &'static str, about: &'static str) -> Self {
        Endpoint {
            tag,
            about,
            paths: &[],
            dialect: Dialect::OpenAi,
            batch: None,
            generates: None,
        }
    }

    /// Its API calls begin with these paths.
    pub(crate) const fn paths(self, paths: &'static [&'static str]) -> Self {
        Endpoint { paths, ..self }
    }

    /// Its requests are in this dialect.
    pub(crate) const fn dialect(self, dialect: Dialect) -> Self {
        Endpoint { dialect, ..self }
    }

    /// Batch lines may call it at `path`.
    pub(crate) const fn batch(self, path: &'static str) -> Self {
        Endpoint {
            batch: Some(path),
            ..self
        }
    }

    /// `operation` generates a reply.
    pub(crate) const fn generates(self, operation: &'static str) -> Self {
        Endpoint {
            generates: Some(operation),
            ..self
        }
    }
}

/// The dialect of a request on `path`, if it is an API call: the dialect
/// of the endpoint with the longest path `path` begins with; any other
/// path under `/v1/` (a URL no endpoint serves, answered 404) is OpenAI's.
pub(crate) fn dialect_of(endpoints: &[&Endpoint], path: &str) -> Option<Dialect> {
    endpoints
        .iter()
        .flat_map(|e| e.paths.iter().map(move |p| (*p, e.dialect)))
        .filter(|(prefix, _)| path.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, dialect)| dialect)
        .or_else(|| path.starts_with("/v1/").then_some(Dialect::OpenAi))
}

/// The paths batch lines may call, in the endpoints' order.
pub(crate) fn batchable<'a>(endpoints: &'a [&Endpoint]) -> impl Iterator<Item = &'static str> + 'a {
    endpoints.iter().filter_map(|e| e.batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: Endpoint = Endpoint::new("chat", "")
        .paths(&["/v1/chat/completions"])
        .batch("/v1/chat/completions");
    const RESPONSES: Endpoint = Endpoint::new("responses", "")
        .paths(&["/v1/responses"])
        .dialect(Dialect::Responses);
    const RERANK: Endpoint = Endpoint::new("rerank", "").paths(&["/v1/rerank", "/rerank"]);
    const META: Endpoint = Endpoint::new("meta", "");

    #[test]
    fn a_path_takes_its_endpoints_dialect() {
        let all = [&CHAT, &RESPONSES, &RERANK, &META];
        assert_eq!(
            dialect_of(&all, "/v1/responses/resp_1"),
            Some(Dialect::Responses)
        );
        assert_eq!(
            dialect_of(&all, "/v1/chat/completions"),
            Some(Dialect::OpenAi)
        );
        assert_eq!(dialect_of(&all, "/rerank"), Some(Dialect::OpenAi));
        // An unknown URL under /v1/ is still an API call (a 404 logged);
        // health checks and the dashboard are not.
        assert_eq!(dialect_of(&all, "/v1/nothing"), Some(Dialect::OpenAi));
        assert_eq!(dialect_of(&all, "/health"), None);
        assert_eq!(dialect_of(&all, "/dashboard/keys"), None);
    }

    #[test]
    fn only_declared_endpoints_are_batchable() {
        let all = [&CHAT, &RESPONSES, &RERANK, &META];
        assert_eq!(
            batchable(&all).collect::<Vec<_>>(),
            ["/v1/chat/completions"]
        );
    }
}
