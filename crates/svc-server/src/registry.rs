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

    /// All routes, in listing order.
    pub fn iter(&self) -> impl Iterator<Item = &ModelRoute> {
        self.routes.iter()
    }
}
