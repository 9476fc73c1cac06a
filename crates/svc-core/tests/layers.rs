//! svc-core's modules stay in layers: no module imports, directly or
//! through others, a module that imports it back, and none goes through
//! the crate root's re-exports (which would tie it to every module).
//!
//! The graph is read from the `crate::<module>` paths of each file's code
//! (comments and the `#[cfg(test)]` part at the end left out), so it also
//! sees paths written inline, in bodies and attributes. rust-analyzer's
//! resolution of the `use` declarations gives the same verdict:
//! `cargo modules dependencies --package svc-core --lib --no-externs
//! --no-sysroot --no-owns --no-fns --no-traits --no-types --max-depth 1 |
//! sccmap -s` (cargo-modules 0.27, graphviz) counts 0 strong components.
//! (Its `--acyclic` does not tell: it checks the graph of items before
//! those filters, where any type and its own methods form a circle.)
#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed check fails the test"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Each module of `src/` and the other modules its code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        // A folder is one module: its files' code, each without its tests.
        let text = if path.is_dir() {
            let mut parts: Vec<_> = fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            parts.sort();
            parts
                .iter()
                .map(|part| {
                    assert!(part.is_file(), "{part:?}: one level of folders only");
                    let text = fs::read_to_string(part).unwrap();
                    text.split("#[cfg(test)]")
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            fs::read_to_string(&path).unwrap()
        };
        files.insert(name, text);
    }
    let modules: BTreeSet<String> = files.keys().filter(|m| *m != "lib").cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, text) in files.iter().filter(|(m, _)| *m != "lib") {
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut names = BTreeSet::new();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or_default();
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let named: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .collect(),
                    None => vec![rest],
                };
                for path in named {
                    let first: String = path
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    assert!(
                        modules.contains(&first),
                        "{module}.rs names crate::{first}: import it from the module \
                         that defines it, not from the crate root"
                    );
                    if first != *module {
                        names.insert(first);
                    }
                }
            }
        }
        graph.insert(module.clone(), names);
    }
    graph
}

/// A path of imports from `from` back to itself, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_owned()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in &graph[last] {
            if next == from {
                let mut circle = path.clone();
                circle.push(next.clone());
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn no_module_imports_itself_through_others() {
    let graph = graph();
    let circles: Vec<String> = graph
        .keys()
        .filter_map(|m| circle(&graph, m))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_leaves_import_nothing_of_svc_core() {
    let graph = graph();
    for leaf in ["clock", "error", "ids", "limits", "secrets"] {
        assert_eq!(graph[leaf], BTreeSet::new(), "{leaf}.rs");
    }
}
