//! svc-api's modules stay in layers: no module imports, directly or
//! through others, a module that imports it back, and none goes through
//! the crate root's re-exports (which would tie it to every module). The
//! root's own items (`model_id`, `MAX_MODEL_ID`) name no module, so a path
//! to them is no arrow.
//!
//! The layers: `schema`, the building blocks of the schemas, is a leaf;
//! `list`, the list envelopes, stands on it alone; the wire modules stand
//! on both, and on each other only one way (a legacy completion takes
//! chat's `Usage`, `Stop`...). There is no list of every schema to import them all:
//! the server's router collects the schemas its operations name.
//!
//! The graph is read by svc-layers from the `crate::<module>` paths of
//! each file's code, so it also sees paths written inline, in bodies,
//! attributes and macro calls.
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
fn the_leaves_import_nothing_of_svc_api() {
    let graph = graph();
    for leaf in ["schema", "error"] {
        assert_eq!(graph[leaf], BTreeSet::new(), "{leaf}.rs");
    }
}

#[test]
fn the_list_envelopes_name_no_wire_module() {
    // An item's module names its list (`impl Paged for Project`), never
    // the other way: `list` stands on `schema` alone.
    assert_eq!(graph()["list"], BTreeSet::from(["schema".to_owned()]));
}
