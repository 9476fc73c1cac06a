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
//! The graph is read from the `crate::…` and `super::…` paths of each
//! file's code (comments and the `#[cfg(test)]` part at the end left out),
//! groups (`crate::{a, b::{c, d}}`) included, so it also sees paths written
//! inline, in bodies and attributes. Each path names the deepest module it
//! reaches.
#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed check fails the test"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, with its module path (`batches::runner`,
/// `chat` for `chat/mod.rs`, `openapi::shared`).
fn files(dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut inner = prefix.to_vec();
            inner.push(stem);
            files(&path, &inner, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut module = prefix.to_vec();
            match stem.as_str() {
                "mod" => {}
                // The crate root is no module of its own here.
                "lib" if prefix.is_empty() => continue,
                // A child holding a module's tests.
                "tests" => continue,
                _ => module.push(stem),
            }
            out.insert(module, path);
        }
    }
}

/// The code of a file: before its `#[cfg(test)]` part, without comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths of a `use` tree starting at `text` (just past `crate::` or
/// `super::`), groups expanded: `a::{b, c::d}` gives `a::b` and `a::c::d`.
fn paths(text: &str) -> Vec<Vec<String>> {
    fn tree(chars: &[char], at: &mut usize, stem: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut path = stem;
        loop {
            while *at < chars.len() && chars[*at].is_whitespace() {
                *at += 1;
            }
            if *at < chars.len() && chars[*at] == '{' {
                *at += 1;
                loop {
                    tree(chars, at, path.clone(), out);
                    while *at < chars.len() && chars[*at].is_whitespace() {
                        *at += 1;
                    }
                    match chars.get(*at) {
                        Some(',') => *at += 1,
                        Some('}') => {
                            *at += 1;
                            break;
                        }
                        _ => break,
                    }
                    while *at < chars.len() && chars[*at].is_whitespace() {
                        *at += 1;
                    }
                    if chars.get(*at) == Some(&'}') {
                        *at += 1;
                        break;
                    }
                }
                return;
            }
            let start = *at;
            while *at < chars.len() && (chars[*at].is_alphanumeric() || chars[*at] == '_') {
                *at += 1;
            }
            if start == *at {
                break;
            }
            path.push(chars[start..*at].iter().collect());
            if chars.get(*at) == Some(&':') && chars.get(*at + 1) == Some(&':') {
                *at += 2;
            } else {
                break;
            }
        }
        out.push(path);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    tree(&chars, &mut 0, Vec::new(), &mut out);
    out
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Each module of `src/` and the other modules its code names, leaving
/// out a folder's arrows to what it holds.
fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    files(&src, &[], &mut modules);
    let name = |m: &[String]| m.join("::");
    let mut graph = Graph::new();
    for (module, path) in &modules {
        let code = code(&fs::read_to_string(path).unwrap());
        // `super` of `batches::runner` is `batches`; of `chat` (chat/mod.rs), the root.
        let parent = &module[..module.len() - 1];
        let mut named = BTreeSet::new();
        for (anchor, base) in [("crate::", &[][..]), ("super::", parent)] {
            for (at, _) in code.match_indices(anchor) {
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                for tail in paths(&code[at + anchor.len()..]) {
                    let mut full = base.to_vec();
                    full.extend(tail);
                    // The deepest module the path reaches.
                    let reached = (1..=full.len())
                        .rev()
                        .map(|n| &full[..n])
                        .find(|prefix| modules.contains_key(*prefix));
                    let Some(reached) = reached else {
                        // `super::` inside an inline module names its own file.
                        assert!(
                            !base.is_empty() || anchor == "super::",
                            "{}: names {anchor}{}: import it from the module that \
                             defines it, not from the crate root",
                            name(module),
                            name(&full)
                        );
                        continue;
                    };
                    // A folder's arrows to what it holds, and a module's to itself.
                    if reached.starts_with(module) {
                        continue;
                    }
                    named.insert(name(reached));
                }
            }
        }
        graph.insert(name(module), named);
    }
    graph
}

/// A path of imports from `from` back to itself, if there is one.
fn circle(graph: &Graph, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_owned()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in graph.get(last).into_iter().flatten() {
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
        "{} modules in import circles:\n{}",
        circles.len(),
        circles.join("\n")
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
    assert!(
        paths("a::{b, c::{d, e}}, x")
            == vec![
                vec!["a".to_owned(), "b".to_owned()],
                vec!["a".to_owned(), "c".to_owned(), "d".to_owned()],
                vec!["a".to_owned(), "c".to_owned(), "e".to_owned()],
            ]
    );
}

/// The modules `from` reaches through its imports, itself included.
fn reach(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::from([from.to_owned()]);
    let mut stack = vec![from.to_owned()];
    while let Some(module) = stack.pop() {
        for next in graph.get(&module).into_iter().flatten() {
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    seen
}

#[test]
fn the_admission_path_knows_nothing_of_http() {
    let graph = graph();
    let reached = reach(&graph, "admission");
    // What it decides with: limits, budgets, routes, usage, metrics, the
    // request log's row. Never the HTTP edge that calls it.
    for edge in ["error", "extract", "pipeline", "state", "routes", "layers"] {
        assert!(
            !reached.contains(edge),
            "admission reaches {edge}: {reached:?}"
        );
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    files(&src, &[], &mut modules);
    for (module, path) in modules {
        let name = module.join("::");
        if !reached.contains(&name) {
            continue;
        }
        let code = code(&fs::read_to_string(&path).unwrap());
        for http in ["axum", "hyper", "http::", "HeaderMap", "StatusCode"] {
            assert!(
                !code.contains(http),
                "{name}, which admission reaches, names {http}"
            );
        }
    }
}
