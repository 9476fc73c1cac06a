//! `POST /v1/rerank` (and `/rerank`, `/v2/rerank`, the paths vLLM serves):
//! a query's relevance to each document, scored by a reranking model
//! (a cross-encoder) with what every inference gets (the key's scope and
//! model list, rate limits, budgets, usage, metrics), returned most
//! relevant first. Errors are OpenAI's shape. The wire request becomes a
//! domain one in [`valid`].

mod valid;

use axum::extract::{Request, State};
use axum::response::Response;
use svc_api::RerankResponse;
use svc_api::rerank::{RerankDocument, RerankResult, RerankUsage};
use svc_core::{Capability, KeyRecord};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::admission::Asked;
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::openapi::shared;
use crate::pipeline::{Metering, Opened, json_response, limited, open};
use crate::state::AppState;
use valid::ValidRerankRequest;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "rerank",
    "Reranking: each document's relevance to a query, from a reranking model (a cross-encoder), most relevant first.",
)
.paths(&["/v1/rerank", "/rerank", "/v2/rerank"])
    .batch("/v1/rerank");

/// The routes: the one path and the aliases clients of vLLM use.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create))
        .routes(routes!(create_unversioned))
        .routes(routes!(create_v2))
}

#[utoipa::path(post, path = "/v1/rerank", tag = "rerank", operation_id = "createRerank",
    summary = "Rerank documents: each one's relevance to a query, most relevant first.",
    description = "Served by a model that reranks (a cross-encoder: an upstream's, through its own `/rerank`). A model that does not rerank answers 400 naming `model`. `documents` are strings or objects with a `text` (at most 1,000, each at most 64 KiB, none empty; else 400 naming `documents` or `documents[i]`); a document too long for the model's context is a 400 naming it. `top_n` keeps the best that many; `return_documents` (default true) puts each document's text in its result. The usage counts the tokens the model read.",
    security(("bearer" = ["model.request"])),
    request_body = svc_api::RerankRequest,
    responses(
        (status = 200, description = "The documents by relevance, highest first.", body = RerankResponse),
        shared::InferenceErrors,
    ))]
pub async fn create(
    Key(key, _): Key<scope::ModelRequest>,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state.admission, key, |key, metering| {
        answer(&state, key, request, metering)
    })
    .await
}

#[utoipa::path(post, path = "/rerank", tag = "rerank", operation_id = "createRerankUnversioned",
    summary = "The same as POST /v1/rerank (the path Jina's and vLLM's clients use).",
    security(("bearer" = ["model.request"])),
    request_body = svc_api::RerankRequest,
    responses(
        (status = 200, description = "The documents by relevance, highest first.", body = RerankResponse),
        shared::InferenceErrors,
    ))]
pub async fn create_unversioned(
    key: Key<scope::ModelRequest>,
    state: State<AppState>,
    request: Request,
) -> Response {
    create(key, state, request).await
}

#[utoipa::path(post, path = "/v2/rerank", tag = "rerank", operation_id = "createRerankV2",
    summary = "The same as POST /v1/rerank (the path Cohere's v2 client uses).",
    security(("bearer" = ["model.request"])),
    request_body = svc_api::RerankRequest,
    responses(
        (status = 200, description = "The documents by relevance, highest first.", body = RerankResponse),
        shared::InferenceErrors,
    ))]
pub async fn create_v2(
    key: Key<scope::ModelRequest>,
    state: State<AppState>,
    request: Request,
) -> Response {
    create(key, state, request).await
}

async fn answer(
    state: &AppState,
    key: KeyRecord,
    request: Request,
    metering: Metering,
) -> Result<Response, ApiError> {
    let Opened { arrived, body, .. } = open::<svc_api::RerankRequest, _>(request, state).await?;
    let ValidRerankRequest {
        model,
        top_n,
        return_documents,
        mut rerank,
    } = ValidRerankRequest::try_from(body)?;
    let estimate = rerank.estimate_tokens();
    let documents = return_documents.then(|| rerank.documents.clone());
    let count = rerank.documents.len();
    let id = model.as_str();
    let asked = Asked {
        key: &key,
        model: id,
        capability: Capability::Reranking,
        metering: &metering,
        arrived,
        estimate: svc_core::Tokens::prompt_only(estimate),
    };
    let (reranked, used) = state
        .admission
        .whole(
            asked,
            |engine, origin| {
                rerank.client = Some(origin.client);
                rerank.background = origin.background;
                async move {
                    let reranked = engine.reranking(id)?.rerank(rerank).await?;
                    if reranked.scores.len() == count {
                        Ok(reranked)
                    } else {
                        Err(svc_core::EngineError::Internal(format!(
                            "the engine scored {} of {count} documents",
                            reranked.scores.len()
                        )))
                    }
                }
            },
            |reranked| svc_core::TokenUsage::prompt_only(reranked.prompt_tokens),
        )
        .await?;
    Ok(json_response(&RerankResponse {
        id: format!("rerank-{}", hex::encode(rand::random::<[u8; 12]>())),
        model,
        results: ranked(&reranked.scores, top_n, documents),
        usage: RerankUsage {
            prompt_tokens: used.prompt_tokens,
            total_tokens: used.prompt_tokens,
        },
    }))
}

/// The `top_n` best of `scores` (one per document), highest first, ties in
/// the documents' order, each with its document's text when `documents`
/// are given.
fn ranked(scores: &[f32], top_n: usize, documents: Option<Vec<String>>) -> Vec<RerankResult> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order.truncate(top_n);
    let mut documents: Vec<Option<String>> = documents
        .map(|d| d.into_iter().map(Some).collect())
        .unwrap_or_default();
    order
        .into_iter()
        .map(|i| RerankResult {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            relevance_score: scores[i],
            document: documents
                .get_mut(i)
                .and_then(Option::take)
                .map(|text| RerankDocument { text }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_sorted_highest_first_ties_in_order() {
        let results = ranked(&[0.1, 0.9, 0.5, 0.9], 3, Some(vec!["a".into(); 4]));
        let order: Vec<u32> = results.iter().map(|r| r.index).collect();
        assert_eq!(order, [1, 3, 2]);
        assert!(results.iter().all(|r| r.document.is_some()));
        assert!(ranked(&[0.2], 1, None)[0].document.is_none());
    }
}
