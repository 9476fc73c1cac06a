//! svc-mcp's top-level modules stay in layers: no module imports,
//! directly or through others, a module that imports it back. A folder is
//! one module; a path through the crate root's re-exports (`crate::Name`)
//! counts as an arrow to the module the root takes it from.
//!
//! The graph is read by svc-layers from the `crate::…` and `super::…`
//! paths of each file's code (comments and `#[cfg(test)]` items left out).

use std::path::Path;

use svc_layers::{Depth, Root};

#[test]
fn no_module_imports_itself_through_others() -> Result<(), svc_layers::Error> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = svc_layers::graph(&src, Depth::Top, Root::Resolved)?;
    let problems = svc_layers::check(&graph, &[]);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}
