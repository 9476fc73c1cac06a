//! svc-core's modules stay in layers: no module imports, directly or
//! through others, a module that imports it back, and none goes through
//! the crate root's re-exports (which would tie it to every module). A
//! folder (`engine/`) is one module.
//!
//! The graph is read by svc-layers, from the `crate::<module>` paths of
//! each file's code. rust-analyzer's resolution of the `use` declarations
//! gives the same verdict:
//! `cargo modules dependencies --package svc-core --lib --no-externs
//! --no-sysroot --no-owns --no-fns --no-traits --no-types --max-depth 1 |
//! sccmap -s` (cargo-modules 0.27, graphviz) counts 0 strong components.
//! (Its `--acyclic` does not tell: it checks the graph of items before
//! those filters, where any type and its own methods form a circle.)
#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed check fails the test"
)]

use std::collections::BTreeSet;
use std::path::Path;

use svc_layers::{Depth, Graph, Root};

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    svc_layers::graph(&src, Depth::Top, Root::Refused)
        .map_err(|e| e.to_string())
        .unwrap()
}

#[test]
fn no_module_imports_itself_through_others() {
    let problems = svc_layers::check(&graph(), &[]);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_leaves_import_nothing_of_svc_core() {
    let graph = graph();
    for leaf in ["clock", "error", "ids", "limits", "secrets"] {
        assert_eq!(graph[leaf], BTreeSet::new(), "{leaf}.rs");
    }
}
