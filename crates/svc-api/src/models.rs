//! `GET /v1/models` bodies, and the admin API's loading and unloading of a
//! local model (`POST /v1/admin/models/load` and `…/unload`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use crate::list::{List, Listed};
use crate::schema::constant;

/// One entry of the model list, as OpenAI shapes it, with svc's
/// `residency` for a model run here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Model {
    #[schema(examples("svc"))]
    pub id: String,
    /// Always `model`.
    #[schema(schema_with = object_model)]
    pub object: String,
    /// Unix time.
    pub created: i64,
    pub owned_by: String,
    /// svc's own: whether a local model (a GGUF file run in this server)
    /// is loaded, and the memory it holds. Absent for a model served by an
    /// upstream. Models sharing one file (`svc` and `svc-thinking`) are
    /// one model: each id shows the same residency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub residency: Option<ModelResidency>,
}

/// Where a local model stands: `{"state", "memory_bytes", "pinned",
/// "keep_alive_seconds"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelResidency {
    /// `loaded`, `loading` or `unloaded`.
    #[schema(schema_with = residency_state)]
    pub state: String,
    /// Host memory the model holds now (weights, KV cells, saved prompt
    /// prefixes); 0 when unloaded.
    #[schema(minimum = 0)]
    pub memory_bytes: u64,
    /// Its keep-alive is forever (the default models, and by default a
    /// preloaded one): never unloaded when idle nor evicted to make room
    /// for another model; only when asked.
    pub pinned: bool,
    /// How long the model stays loaded once idle, in seconds; absent when
    /// pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 0)]
    pub keep_alive_seconds: Option<u64>,
}

/// `POST /v1/admin/models/load` and `POST /v1/admin/models/unload`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelResidenceRequest {
    /// The model id (ids may contain `/`), as `GET /v1/models` lists it.
    #[schema(examples("svc"), min_length = 1)]
    pub model: String,
}

/// `POST /v1/admin/models/unload`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelUnloadRequest {
    /// The model id (ids may contain `/`), as `GET /v1/models` lists it.
    #[schema(examples("svc"), min_length = 1)]
    pub model: String,
    /// Unload it now even while requests run on it: they are ended with a
    /// `model_unavailable` error (a stream with an error event). Without
    /// it (the default) an unload of a model in use waits for them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

/// What `POST /v1/admin/models/unload` answers: the model (its residency
/// as it is now) and what the unload did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UnloadedModel {
    #[serde(flatten)]
    pub model: Model,
    /// `unloaded`: it is unloaded now (a forced unload ended the requests
    /// running on it); `when_idle`: requests are running on it (or it is
    /// loading), and it is unloaded when the last one ends (none is cut);
    /// `not_loaded`: it was not loaded (nor loading), nothing changed.
    #[schema(schema_with = unload_result)]
    pub unload: String,
}

/// `{"object":"list","data":[...]}`.
pub type ModelList = List<Model>;

impl Listed for Model {
    const LIST: &'static str = "ModelList";
    const LIST_ABOUT: &'static str = "`{\"object\":\"list\",\"data\":[...]}`.";
}

/// What [`ModelResidency::state`] may be.
pub const RESIDENCY_STATES: [&str; 3] = ["loaded", "loading", "unloaded"];

/// What [`UnloadedModel::unload`] may be.
pub const UNLOAD_RESULTS: [&str; 3] = ["unloaded", "when_idle", "not_loaded"];

fn strings(values: &[&str]) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.iter().copied()))
        .build()
}

fn residency_state() -> Object {
    strings(&RESIDENCY_STATES)
}

fn unload_result() -> Object {
    strings(&UNLOAD_RESULTS)
}

fn object_model() -> Object {
    constant("model")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(residency: Option<ModelResidency>) -> Model {
        Model {
            id: "svc".into(),
            object: "model".into(),
            created: 1,
            owned_by: "svc".into(),
            residency,
        }
    }

    #[test]
    fn residency_is_left_out_for_an_upstream_and_keep_alive_when_pinned() {
        let upstream = serde_json::to_value(model(None)).unwrap();
        assert!(upstream.get("residency").is_none(), "{upstream}");
        let pinned = serde_json::to_value(model(Some(ModelResidency {
            state: "loaded".into(),
            memory_bytes: 10,
            pinned: true,
            keep_alive_seconds: None,
        })))
        .unwrap();
        assert_eq!(
            pinned["residency"],
            serde_json::json!({"state": "loaded", "memory_bytes": 10, "pinned": true})
        );
        // An OpenAI client's model (no residency) still reads it back.
        let read: Model = serde_json::from_value(serde_json::json!(
            {"id": "svc", "object": "model", "created": 1, "owned_by": "svc"}
        ))
        .unwrap();
        assert_eq!(read, model(None));
    }

    #[test]
    fn the_unload_answer_is_the_model_and_what_it_did() {
        let body = serde_json::to_value(UnloadedModel {
            model: model(None),
            unload: "when_idle".into(),
        })
        .unwrap();
        assert_eq!(body["id"], "svc");
        assert_eq!(body["unload"], "when_idle");
    }
}
