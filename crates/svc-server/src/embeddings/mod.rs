//! `POST /v1/embeddings`, OpenAI's embeddings: validate, route to the
//! model's engine with what every inference gets (the key's scope and
//! model list, rate limits, budgets, usage, metrics), shape the vectors
//! (numbers, or base64 of little-endian floats). Errors are OpenAI's shape.
//! The wire request becomes a domain one in [`valid`].

mod valid;

use axum::extract::{Request, State};
use axum::response::Response;
use base64::Engine as _;
use svc_api::EmbeddingRequest;
use svc_api::embeddings::{Embedding, EmbeddingList, EmbeddingUsage, EmbeddingVector};
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
use valid::ValidEmbeddingRequest;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "embeddings",
    "Embeddings: vectors for texts, from a model that makes them (`svc-embed`) or an upstream.",
)
.paths(&["/v1/embeddings"])
.batch("/v1/embeddings");

/// The route.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create))
}

#[utoipa::path(post, path = "/v1/embeddings", tag = "embeddings", operation_id = "createEmbedding",
    summary = "Create embeddings: a vector for each input text.",
    description = "Served by a model that makes embeddings (`svc-embed`, all-MiniLM-L6-v2: 384 dimensions, mean pooling, length 1; or an upstream model, whose engine answers). A model that makes text answers 400 naming `model`. Each input must fit the model's context (512 tokens for `svc-embed`), else 400 naming `input`; `dimensions` other than the model's own is a 400 naming `dimensions` unless the model can shorten its vectors. The usage counts the inputs' tokens.",
    security(("bearer" = ["model.request"])),
    request_body = EmbeddingRequest,
    responses(
        (status = 200, description = "One vector per input, in order.", body = EmbeddingList),
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

async fn answer(
    state: &AppState,
    key: KeyRecord,
    request: Request,
    metering: Metering,
) -> Result<Response, ApiError> {
    let Opened { arrived, body, .. } = open::<EmbeddingRequest, _>(request, state).await?;
    let ValidEmbeddingRequest {
        model,
        base64,
        mut embed,
    } = ValidEmbeddingRequest::try_from(body)?;
    let estimate: u64 = embed.inputs.iter().map(|i| i.estimate_tokens()).sum();
    let id = model.as_str();
    let asked = Asked {
        key: &key,
        model: id,
        capability: Capability::Embedding,
        metering: &metering,
        arrived,
        estimate: svc_core::Tokens::prompt_only(estimate),
    };
    let (embeddings, used) = state
        .admission
        .whole(
            asked,
            |engine, origin| {
                embed.client = Some(origin.client);
                embed.background = origin.background;
                async move { engine.embedding(id)?.embed(embed).await }
            },
            |embeddings| svc_core::TokenUsage::prompt_only(embeddings.prompt_tokens),
        )
        .await?;
    let data = embeddings
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, vector)| Embedding {
            object: "embedding".to_owned(),
            index: u32::try_from(index).unwrap_or(u32::MAX),
            embedding: if base64 {
                EmbeddingVector::Base64(encode(&vector))
            } else {
                EmbeddingVector::Float(vector)
            },
        })
        .collect();
    Ok(json_response(&EmbeddingList {
        object: "list".to_owned(),
        data,
        model,
        usage: EmbeddingUsage {
            prompt_tokens: used.prompt_tokens,
            total_tokens: used.prompt_tokens,
        },
    }))
}

/// The base64 of `vector`'s little-endian 32-bit floats (what OpenAI's
/// SDKs decode with `numpy.frombuffer(..., dtype="float32")`).
fn encode(vector: &[f32]) -> String {
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_little_endian_f32() {
        assert_eq!(encode(&[1.0, -2.5]), "AACAPwAAIMA=");
    }
}
