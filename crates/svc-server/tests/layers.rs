//! svc-server's modules stay in layers: no module imports, directly or
//! through others, a module that imports it back. A folder's `mod.rs` (or
//! `name.rs` beside `name/`) declares its children and may hand their
//! names on: those arrows are the folder's own, and are not counted; a
//! child's use of its parent counts like any other, so a circle through a
//! parent and anything but its own children is one. Nothing goes through
//! the crate root's re-exports (that would tie a module to every other).
//!
//! The layers, from the ground up: leaves that import nothing of the crate
//! (`scoped`, what a request carries; `body`, `batcher`, `registry`,
//! `config`, `tls`); the policy's parts (`ratelimit`, `budget`); the HTTP
//! edge's error (`error`); what is counted and logged (`metrics`,
//! `request_log`, `usage`); the admission path every endpoint's work goes
//! through (`admission`) and the response cache over it (`cache`); the
//! shared state (`state`) and the HTTP side of admission (`pipeline`);
//! the endpoints, each a folder or a file; and the router, the OpenAPI
//! document and the server at the top (`routes`, `startup`, `serve`).
//!
//! The graph is read by svc-layers (every file its own module) from the
//! `crate::…` and `super::…` paths of each file's code (comments and
//! `#[cfg(test)]` items left out), groups (`crate::{a, b::{c, d}}`)
//! included, so it also sees paths written inline, in bodies and
//! attributes. Each path names the deepest module it reaches.
#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed check fails the test"
)]

use std::fs;
use std::path::{Path, PathBuf};

use svc_layers::{Depth, Graph, Root};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Each module of `src/` and the other modules its code names, leaving
/// out a folder's arrows to what it holds.
fn graph() -> Graph {
    svc_layers::graph(&src(), Depth::Nested, Root::Refused)
        .map_err(|e| e.to_string())
        .unwrap()
}

#[test]
fn no_module_imports_itself_through_others() {
    let problems = svc_layers::check(&graph(), &[]);
    assert!(
        problems.is_empty(),
        "{} import circles:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_reader_sees_groups_and_folders() {
    let graph = graph();
    // `use crate::{request_id, routes};` in startup.rs.
    assert!(
        graph["startup"].contains("routes"),
        "{:?}",
        graph["startup"]
    );
    // A child's `super::` names its parent folder's module.
    assert!(graph.contains_key("batches::runner"));
}

#[test]
fn the_admission_path_knows_nothing_of_http() {
    let graph = graph();
    let reached = svc_layers::reach(&graph, "admission");
    // What it decides with: limits, budgets, routes, usage, metrics, the
    // request log's row. Never the HTTP edge that calls it.
    for edge in ["error", "extract", "pipeline", "state", "routes", "layers"] {
        assert!(
            !reached.contains(edge),
            "admission reaches {edge}: {reached:?}"
        );
    }
    let modules = svc_layers::modules(&src())
        .map_err(|e| e.to_string())
        .unwrap();
    for (name, path) in modules {
        if !reached.contains(&name) {
            continue;
        }
        let code = svc_layers::code(&fs::read_to_string(&path).unwrap());
        for http in ["axum", "hyper", "http::", "HeaderMap", "StatusCode"] {
            assert!(
                !code.contains(http),
                "{name}, which admission reaches, names {http}"
            );
        }
    }
}

/// The state holds infrastructure and services, whose types are its own
/// (`state/`): it imports none of the endpoints that use it, folder by
/// folder, so that an endpoint's folder and the state are never one
/// circle.
#[test]
fn the_state_imports_no_endpoint() {
    let graph = svc_layers::graph(&src(), Depth::Top, Root::Refused)
        .map_err(|e| e.to_string())
        .unwrap();
    let reached = svc_layers::reach(&graph, "state");
    for endpoint in [
        "chat",
        "completions",
        "responses",
        "messages",
        "embeddings",
        "rerank",
        "audio",
        "batches",
        "dashboard",
        "routes",
        "startup",
    ] {
        assert!(
            !reached.contains(endpoint),
            "state reaches {endpoint}: {reached:?}"
        );
    }
}
