//! Model ids and the engines behind them.

use std::sync::Arc;

use svc_core::Engine;

/// One servable model id.
#[derive(Clone)]
pub struct ModelRoute {
    pub id: String,
    pub engine: Arc<dyn Engine>,
    /// Whether requests to this id ask the engine for reasoning.
    pub reasoning: bool,
    /// Unix time reported as `created` in the model list.
    pub created: i64,
    pub owned_by: String,
    /// A system message put first when a request has none.
    pub default_system_prompt: Option<String>,
    /// The models that answer when this one fails.
    pub fallbacks: Fallbacks,
}

/// `[models.<id>] fallbacks` and `fallback_on_context_length`: the models
/// asked, in turn, when this one fails before its first event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fallbacks {
    /// Model ids, in the order they are tried. Their own fallbacks are
    /// not followed.
    pub models: Vec<String>,
    /// Whether a prompt longer than this model's context goes to them too
    /// (to a model with a longer one).
    pub on_context_length: bool,
}

/// The models of this server, in listing order.
#[derive(Clone, Default)]
pub struct ModelRegistry {
    routes: Vec<ModelRoute>,
}

impl ModelRegistry {
    pub fn new(routes: Vec<ModelRoute>) -> Self {
        ModelRegistry { routes }
    }

    /// The route for `id`, if served here.
    pub fn get(&self, id: &str) -> Option<&ModelRoute> {
        self.routes.iter().find(|r| r.id == id)
    }

    /// Checks every model's fallbacks: each is served here, none is the
    /// model itself or listed twice, and following them never comes back
    /// to where it began (a loop, refused at start).
    pub fn check_fallbacks(&self) -> Result<(), String> {
        for route in &self.routes {
            let mut seen = Vec::new();
            for fallback in &route.fallbacks.models {
                if self.get(fallback).is_none() {
                    return Err(format!(
                        "models.{}.fallbacks: no model {fallback:?} is served",
                        route.id
                    ));
                }
                if seen.contains(&fallback) {
                    return Err(format!(
                        "models.{}.fallbacks: {fallback:?} is listed twice",
                        route.id
                    ));
                }
                seen.push(fallback);
            }
            if let Some(path) = self.loop_from(&route.id) {
                return Err(format!(
                    "models.{}.fallbacks: a loop: {}",
                    route.id,
                    path.join(" → ")
                ));
            }
        }
        Ok(())
    }

    /// A path of fallbacks from `id` back to `id`, if there is one.
    fn loop_from(&self, id: &str) -> Option<Vec<String>> {
        // Depth first over the fallback graph (models are few).
        let mut stack = vec![vec![id.to_owned()]];
        let mut visited: Vec<&str> = Vec::new();
        while let Some(path) = stack.pop() {
            let at = path.last().map(String::as_str).unwrap_or(id);
            let Some(route) = self.get(at) else { continue };
            for next in &route.fallbacks.models {
                let mut longer = path.clone();
                longer.push(next.clone());
                if next == id {
                    return Some(longer);
                }
                if !visited.contains(&next.as_str()) {
                    visited.push(next);
                    stack.push(longer);
                }
            }
        }
        None
    }

    /// All routes, in listing order.
    pub fn iter(&self) -> impl Iterator<Item = &ModelRoute> {
        self.routes.iter()
    }
}

#[cfg(test)]
mod tests {
    use svc_core::{EngineError, EventStream, GenerateRequest};

    use super::*;

    struct Idle;

    #[async_trait::async_trait]
    impl svc_core::Generator for Idle {
        async fn generate(&self, _: GenerateRequest) -> Result<EventStream, EngineError> {
            Err(EngineError::Unavailable("idle".into()))
        }

        async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
            Ok(svc_core::estimate_tokens(request))
        }

        fn sees_images(&self) -> bool {
            false
        }
    }

    impl Engine for Idle {
        svc_core::offers!(generator);

        fn name(&self) -> &str {
            "idle"
        }
    }

    fn registry(fallbacks: &[(&str, &[&str])]) -> ModelRegistry {
        let engine: Arc<dyn Engine> = Arc::new(Idle);
        ModelRegistry::new(
            fallbacks
                .iter()
                .map(|(id, to)| ModelRoute {
                    id: (*id).to_owned(),
                    engine: engine.clone(),
                    reasoning: false,
                    created: 0,
                    owned_by: "svc".into(),
                    default_system_prompt: None,
                    fallbacks: Fallbacks {
                        models: to.iter().map(|m| (*m).to_owned()).collect(),
                        on_context_length: false,
                    },
                })
                .collect(),
        )
    }

    #[test]
    fn fallbacks_must_be_served_listed_once_and_loop_free() {
        assert_eq!(
            registry(&[("a", &["b", "c"]), ("b", &["c"]), ("c", &[])]).check_fallbacks(),
            Ok(())
        );
        let refused = |r: ModelRegistry| r.check_fallbacks().unwrap_err();
        assert!(refused(registry(&[("a", &["x"])])).contains("no model \"x\""));
        assert!(refused(registry(&[("a", &["b", "b"]), ("b", &[])])).contains("twice"));
        assert_eq!(
            refused(registry(&[("a", &["a"])])),
            "models.a.fallbacks: a loop: a → a"
        );
        assert_eq!(
            refused(registry(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])])),
            "models.a.fallbacks: a loop: a → b → c → a"
        );
    }
}
