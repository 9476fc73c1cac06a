//! The module graph of a crate, read from its sources, and the import
//! circles in it: the one reader behind every crate's `tests/layers.rs`.
//!
//! A module's arrows are the `crate::…` and `super::…` paths of its code
//! (comments and `#[cfg(test)]` items left out), groups
//! (`crate::{a, b::{c, d}}`) included, so the graph also sees paths written
//! inline, in bodies, attributes and macro calls. Each path names the
//! deepest module it reaches. A folder's `mod.rs` (or `name.rs` beside
//! `name/`) declares its children and may hand their names on: those
//! arrows are the folder's own and are not counted; a child's use of its
//! parent counts like any other. A file named `tests.rs` holds a module's
//! tests and is no module here.
//!
//! The crate root is no module: a path to an item `lib.rs` defines itself
//! (`pub fn`, `pub const`, `pub struct`, …) is no arrow, and a path through
//! its re-exports is, by [`Root`], refused (it ties a module to every other:
//! import it from the module that defines it) or an arrow to the module the
//! root's `use` names.
//!
//! It reads text, not Rust: `//` inside a string ends the line's code (and
//! where that leaves a test item's braces open, the rest of the file is
//! left out with it), so it may see fewer arrows than there are, never more; rust-analyzer's resolution
//! gave the same verdict for svc-core (`cargo modules dependencies … |
//! sccmap -s`, see svc-core's tests/layers.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Each module (`a`, `a::b`) and the other modules its code names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// How finely [`graph`] tells modules apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Every file its own module (`batches::runner`).
    Nested,
    /// Top-level modules only: a folder and all it holds are one module.
    Top,
}

/// What a path through the crate root's re-exports (`crate::Name`, where
/// `lib.rs` has `pub use module::Name`) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// An error: import it from the module that defines it.
    Refused,
    /// An arrow to the module the root's `use` names.
    Resolved,
}

/// Why a crate's sources could not be read into a graph.
#[derive(Debug)]
pub enum Error {
    /// A file or folder could not be read.
    Io(PathBuf, io::Error),
    /// `module` names `path`, which reaches no module: it goes through the
    /// crate root's re-exports.
    ThroughRoot {
        /// The module whose code names the path.
        module: String,
        /// The path, `crate::Name`.
        path: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(path, error) => write!(f, "{}: {error}", path.display()),
            Error::ThroughRoot { module, path } => write!(
                f,
                "{module} names {path}: import it from the module that defines it, \
                 not from the crate root"
            ),
        }
    }
}

impl std::error::Error for Error {}

fn io(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |error| Error::Io(path.to_owned(), error)
}

/// Every module file under `src` by its module path (`batches::runner`;
/// `chat` for `chat/mod.rs` or `chat.rs`). The crate root and `tests.rs`
/// files are left out.
pub fn modules(src: &Path) -> Result<BTreeMap<String, PathBuf>, Error> {
    let mut out = BTreeMap::new();
    files(src, &[], &mut out)?;
    Ok(out.into_iter().map(|(m, p)| (m.join("::"), p)).collect())
}

fn files(
    dir: &Path,
    prefix: &[String],
    out: &mut BTreeMap<Vec<String>, PathBuf>,
) -> Result<(), Error> {
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        let Some(stem) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        if path.is_dir() {
            // `src/bin/` holds binaries, each a crate of its own.
            if prefix.is_empty() && stem == "bin" {
                continue;
            }
            let mut inner = prefix.to_vec();
            inner.push(stem);
            files(&path, &inner, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut module = prefix.to_vec();
            match stem.as_str() {
                "mod" => {}
                "lib" | "main" if prefix.is_empty() => continue,
                "tests" => continue,
                _ => module.push(stem),
            }
            out.insert(module, path);
        }
    }
    Ok(())
}

/// The code of a file: without comments and without its `#[cfg(test)]`
/// items (a `mod tests { … }`, a test-only method, `mod fixtures;`).
pub fn code(text: &str) -> String {
    let text = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        rest = rest.get(item_end(rest)..).unwrap_or_default();
    }
    out.push_str(rest);
    out
}

/// Where the item that `text` starts (with its attributes) ends: past its
/// `;` or its closing brace; the end of `text` when its braces do not close.
fn item_end(text: &str) -> usize {
    let mut depth = 0usize;
    let mut brackets = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            '[' => brackets += 1,
            ']' => brackets = brackets.saturating_sub(1),
            ';' if depth == 0 && brackets == 0 => return at + 1,
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return at + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// The names of the items the crate root defines itself, from the text of
/// `lib.rs`: `pub fn model_id`, `pub const MAX`, `pub struct`, …
pub fn root_items(lib: &str) -> BTreeSet<String> {
    let kinds = [
        "fn ",
        "const ",
        "static ",
        "struct ",
        "enum ",
        "type ",
        "trait ",
        "macro_rules! ",
    ];
    code(lib)
        .lines()
        .filter_map(|line| {
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            let line = line.strip_prefix("async ").unwrap_or(line);
            let rest = kinds.iter().find_map(|kind| line.strip_prefix(kind))?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// The names of the macros a file exports (`#[macro_export]`), which the
/// language puts at the crate root whatever module defines them: a
/// macro's own `$crate::helper!` names one of them, not an import through
/// the root.
pub fn exported_macros(text: &str) -> BTreeSet<String> {
    let code = code(text);
    code.match_indices("#[macro_export]")
        .filter_map(|(at, _)| {
            let rest = &code[at..];
            let after = rest.find("macro_rules!")? + "macro_rules!".len();
            let name: String = rest[after..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// The names the crate root's `use` declarations bring in, each with the
/// module path it comes from: `pub use write::{GgufWriter, Other};` gives
/// `GgufWriter` and `Other` from `write`.
pub fn root_uses(lib: &str) -> BTreeMap<String, Vec<String>> {
    let code = code(lib);
    let mut out = BTreeMap::new();
    for (at, _) in code.match_indices("use ") {
        let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
        let before = code[line_start..at].trim();
        if !matches!(before, "" | "pub" | "pub(crate)") {
            continue;
        }
        let tail = &code[at + "use ".len()..];
        let tail = tail.strip_prefix("self::").unwrap_or(tail);
        for path in paths(tail) {
            if let Some((name, from)) = path.split_last() {
                out.insert(name.clone(), from.to_vec());
            }
        }
    }
    out
}

/// The paths of a `use` tree starting at `text` (just past `crate::` or
/// `super::`), groups expanded: `a::{b, c::d}` gives `a::b` and `a::c::d`.
pub fn paths(text: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    tree(&chars, &mut 0, Vec::new(), &mut out);
    out
}

fn skip_space(chars: &[char], at: &mut usize) {
    while chars.get(*at).is_some_and(|c| c.is_whitespace()) {
        *at += 1;
    }
}

fn tree(chars: &[char], at: &mut usize, stem: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = stem;
    loop {
        skip_space(chars, at);
        if chars.get(*at) == Some(&'{') {
            *at += 1;
            loop {
                tree(chars, at, path.clone(), out);
                skip_space(chars, at);
                match chars.get(*at) {
                    Some(',') => *at += 1,
                    Some('}') => {
                        *at += 1;
                        break;
                    }
                    _ => break,
                }
                skip_space(chars, at);
                if chars.get(*at) == Some(&'}') {
                    *at += 1;
                    break;
                }
            }
            return;
        }
        let start = *at;
        while chars
            .get(*at)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
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

/// The module graph of the crate whose sources are in `src`.
pub fn graph(src: &Path, depth: Depth, through_root: Root) -> Result<Graph, Error> {
    let mut modules = BTreeMap::new();
    files(src, &[], &mut modules)?;
    let lib = src.join("lib.rs");
    let lib = if lib.is_file() {
        fs::read_to_string(&lib).map_err(io(&lib))?
    } else {
        String::new()
    };
    let mut root = root_items(&lib);
    for path in modules.values() {
        root.extend(exported_macros(
            &fs::read_to_string(path).map_err(io(path))?,
        ));
    }
    let uses = match through_root {
        Root::Refused => BTreeMap::new(),
        Root::Resolved => root_uses(&lib),
    };
    let shown = |m: &[String]| match depth {
        Depth::Nested => m.join("::"),
        Depth::Top => m.first().cloned().unwrap_or_default(),
    };
    let mut graph = Graph::new();
    for (module, path) in &modules {
        let code = code(&fs::read_to_string(path).map_err(io(path))?);
        // `super` of `batches::runner` is `batches`; of `chat` (chat/mod.rs), the root.
        let parent = &module[..module.len().saturating_sub(1)];
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
                    // `crate::Name` through the root's `use module::Name`.
                    if base.is_empty()
                        && anchor == "crate::"
                        && !modules.contains_key(&full[..full.len().min(1)])
                        && let Some(from) = full.first().and_then(|first| uses.get(first))
                    {
                        let mut through = from.clone();
                        through.append(&mut full);
                        full = through;
                    }
                    // The deepest module the path reaches.
                    let reached = (1..=full.len())
                        .rev()
                        .map(|n| &full[..n])
                        .find(|prefix| modules.contains_key(*prefix));
                    let Some(reached) = reached else {
                        // An item of the root's own names no module, and
                        // `super::` inside an inline module names its own
                        // file; anything else goes through the root.
                        let own = full.first().is_some_and(|first| root.contains(first));
                        if anchor == "crate::" && !own {
                            return Err(Error::ThroughRoot {
                                module: module.join("::"),
                                path: format!("crate::{}", full.join("::")),
                            });
                        }
                        continue;
                    };
                    // A folder's arrows to what it holds, and a module's to itself.
                    if reached.starts_with(module) {
                        continue;
                    }
                    named.insert(shown(reached));
                }
            }
        }
        let own = shown(module);
        named.remove(&own);
        graph.entry(own).or_default().extend(named);
    }
    Ok(graph)
}

/// The modules `from` reaches through its imports, itself included.
pub fn reach(graph: &Graph, from: &str) -> BTreeSet<String> {
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

/// The import circles of `graph`: each set of modules that reach one
/// another (a strongly connected component of more than one module), its
/// names sorted, the sets in order.
pub fn circles(graph: &Graph) -> Vec<Vec<String>> {
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(graph, m))).collect();
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for (module, from_here) in &reached {
        if placed.contains(*module) {
            continue;
        }
        let circle: Vec<String> = from_here
            .iter()
            .filter(|other| {
                reached
                    .get(other)
                    .is_some_and(|back| back.contains(*module))
            })
            .cloned()
            .collect();
        placed.extend(circle.iter().cloned());
        if circle.len() > 1 {
            out.push(circle);
        }
    }
    out
}

/// A path of imports from `from` back to itself, if there is one:
/// `[a, b, a]`.
pub fn circle_through(graph: &Graph, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_owned()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last()?;
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

/// What is wrong with `graph`'s circles, given the ones still allowed
/// (`known`, each written as its modules sorted and joined by ", "): every
/// circle not in `known`, with a path around it, and every entry of
/// `known` no longer found (remove it). Empty when all is well.
pub fn check(graph: &Graph, known: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let found: Vec<String> = circles(graph).iter().map(|c| c.join(", ")).collect();
    for (circle, text) in circles(graph).iter().zip(&found) {
        if known.contains(&text.as_str()) {
            continue;
        }
        let around = circle
            .first()
            .and_then(|first| circle_through(graph, first))
            .map(|path| path.join(" -> "))
            .unwrap_or_default();
        problems.push(format!("import circle among {text}: {around}"));
    }
    for gone in known {
        if !found.iter().any(|f| f == gone) {
            problems.push(format!(
                "the known circle \"{gone}\" is gone: take it off the list"
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made_up(arrows: &[(&str, &str)]) -> Graph {
        let mut graph = Graph::new();
        for (from, to) in arrows {
            graph
                .entry((*from).to_owned())
                .or_default()
                .insert((*to).to_owned());
            graph.entry((*to).to_owned()).or_default();
        }
        graph
    }

    #[test]
    fn a_graph_in_layers_has_no_circle() {
        let graph = made_up(&[("top", "mid"), ("mid", "leaf"), ("top", "leaf")]);
        assert_eq!(circles(&graph), Vec::<Vec<String>>::new());
        assert_eq!(circle_through(&graph, "top"), None);
        assert_eq!(check(&graph, &[]), Vec::<String>::new());
    }

    #[test]
    fn a_circle_is_found_whole_and_only_once() {
        let graph = made_up(&[
            ("a", "b"),
            ("b", "c"),
            ("c", "a"),
            ("c", "leaf"),
            ("x", "y"),
            ("y", "x"),
        ]);
        assert_eq!(
            circles(&graph),
            vec![
                vec!["a".to_owned(), "b".to_owned(), "c".to_owned()],
                vec!["x".to_owned(), "y".to_owned()],
            ]
        );
        assert_eq!(
            circle_through(&graph, "a"),
            Some(
                vec!["a", "b", "c", "a"]
                    .into_iter()
                    .map(String::from)
                    .collect()
            )
        );
        // A known circle is allowed; a new one, or one gone, is not.
        assert_eq!(
            check(&graph, &["a, b, c"]),
            vec!["import circle among x, y: x -> y -> x".to_owned()]
        );
        assert_eq!(
            check(&graph, &["a, b, c", "x, y", "p, q"]),
            vec!["the known circle \"p, q\" is gone: take it off the list".to_owned()]
        );
    }

    #[test]
    fn test_items_are_left_out_wherever_they_are() {
        let text = "use crate::a;\n#[cfg(test)]\nmod fixtures;\nuse crate::b; // crate::c\n\
                    #[cfg(test)]\npub(crate) fn calls(&self) -> usize {\n    crate::d::x([1; 2])\n}\n\
                    fn later() { crate::e::f() }\n#[cfg(test)]\nmod tests {\n    use crate::g;\n}\n";
        let code = code(text);
        for seen in ["crate::a", "crate::b", "crate::e"] {
            assert!(code.contains(seen), "{seen} in {code}");
        }
        for unseen in ["crate::c", "crate::d", "crate::g", "fixtures"] {
            assert!(!code.contains(unseen), "{unseen} in {code}");
        }
    }

    #[test]
    fn groups_are_expanded() {
        assert_eq!(
            paths("a::{b, c::{d, e}}, x"),
            vec![
                vec!["a".to_owned(), "b".to_owned()],
                vec!["a".to_owned(), "c".to_owned(), "d".to_owned()],
                vec!["a".to_owned(), "c".to_owned(), "e".to_owned()],
            ]
        );
        assert_eq!(paths("a::b::C;"), vec![vec!["a", "b", "C"]]);
    }

    #[test]
    fn root_uses_name_their_modules() {
        let lib = "use std::io;\npub use write::{GgufWriter, header::Tensor};\n\
                   pub(crate) use self::hold::Hold;\n// pub use gone::Gone;\n";
        let uses = root_uses(lib);
        assert_eq!(uses["GgufWriter"], vec!["write"]);
        assert_eq!(uses["Tensor"], vec!["write", "header"]);
        assert_eq!(uses["Hold"], vec!["hold"]);
        assert_eq!(uses["io"], vec!["std"]);
        assert!(!uses.contains_key("Gone"));
    }

    #[test]
    fn root_items_are_the_roots_own() {
        let lib = "pub mod a;\npub use a::X;\npub const MAX: usize = 1;\n\
                   pub fn model_id() {}\n    fn inner() {}\n// pub fn gone() {}\n";
        assert_eq!(
            root_items(lib),
            BTreeSet::from(["MAX".to_owned(), "model_id".to_owned()])
        );
    }

    #[test]
    fn exported_macros_are_the_roots_wherever_they_are_written() {
        let text = "/// Doc.\n#[macro_export]\nmacro_rules! offers {\n    () => { $crate::__offer!() };\n}\n\
                    #[doc(hidden)]\n#[macro_export]\nmacro_rules! __offer { () => {} }\n\
                    macro_rules! local { () => {} }\n";
        assert_eq!(
            exported_macros(text),
            BTreeSet::from(["offers".to_owned(), "__offer".to_owned()])
        );
    }

    /// A crate written out in a temporary folder: nested and top-level
    /// graphs, a folder's own arrows, `super::`, and the crate root.
    #[test]
    fn a_crate_on_disk_reads_at_both_depths() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("svc-layers-{}", std::process::id()));
        let src = dir.join("src");
        fs::create_dir_all(src.join("folder"))?;
        fs::write(
            src.join("lib.rs"),
            "pub mod folder;\npub mod leaf;\npub const MAX: u8 = 1;\n",
        )?;
        fs::write(
            src.join("leaf.rs"),
            "pub struct Leaf; // crate::folder in a comment\n",
        )?;
        fs::write(
            src.join("folder/mod.rs"),
            "pub mod inner;\npub use crate::folder::inner::Inner;\n",
        )?;
        fs::write(
            src.join("folder/inner.rs"),
            "use crate::{leaf::Leaf, MAX};\nuse super::Other;\n\
             #[cfg(test)]\nmod tests { use crate::folder; }\n",
        )?;
        fs::write(src.join("folder/tests.rs"), "use crate::leaf;\n")?;
        let nested = graph(&src, Depth::Nested, Root::Refused)?;
        assert_eq!(
            nested,
            Graph::from([
                ("folder".to_owned(), BTreeSet::new()),
                (
                    "folder::inner".to_owned(),
                    BTreeSet::from(["folder".to_owned(), "leaf".to_owned()])
                ),
                ("leaf".to_owned(), BTreeSet::new()),
            ])
        );
        let top = graph(&src, Depth::Top, Root::Refused)?;
        assert_eq!(
            top,
            Graph::from([
                ("folder".to_owned(), BTreeSet::from(["leaf".to_owned()])),
                ("leaf".to_owned(), BTreeSet::new()),
            ])
        );
        // A path through the root's re-exports is refused.
        fs::write(src.join("leaf.rs"), "use crate::Inner;\n")?;
        let refused = graph(&src, Depth::Top, Root::Refused);
        // Or read as the arrow it is, to the module the root's `use` names.
        fs::write(
            src.join("lib.rs"),
            "pub mod folder;\npub mod leaf;\npub const MAX: u8 = 1;\npub use folder::{inner::Inner, Other};\n",
        )?;
        let resolved = graph(&src, Depth::Top, Root::Resolved);
        fs::remove_dir_all(&dir)?;
        assert_eq!(resolved?["leaf"], BTreeSet::from(["folder".to_owned()]),);
        assert!(
            matches!(&refused, Err(Error::ThroughRoot { module, path })
                if module == "leaf" && path == "crate::Inner"),
            "{refused:?}"
        );
        Ok(())
    }
}
