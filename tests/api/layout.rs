//! The source tree's shape, checked. It reads `src/` as text (a light parse,
//! as `cargo` would not tell) and its failure lists every finding at once:
//!
//! - every import is read: `use` statements, groups (`use crate::{a::b, c}`)
//!   and paths written inline, whether they start at `crate::`, `super::`,
//!   `self::`, `idem::` or at a bare name that is a child module of the
//!   current one or a top-level module (`use store::x` in `lib.rs`,
//!   `pipeline::batch::X`). Comments, strings and `mod x;` declarations are
//!   not imports. Each file is a node, `mod.rs` and `lib.rs` included: a
//!   child naming its parent's items and a `mod.rs` naming its children's
//!   are both edges.
//! - no import circle anywhere, across folders and through a `mod.rs` too.
//!   A `pub use` is a re-export, not an import: a path through it is
//!   followed to the module that defines the item.
//! - each module imports only its own layer or the layers below it, in the
//!   order `src/lib.rs` draws (`LAYERS` below); the binary (`main.rs`,
//!   `cli.rs`, `client/`) is the top layer, so only it reaches `client/`.
//! - no file over 700 lines and no function over 80: alarms, not targets.
//!
//! `planted` runs the checker on small trees to show each rule can fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles: the strongly connected components of the import graph.
mod circles;
/// Files and functions over their caps.
mod lengths;
/// Paths read from Rust text: comments and strings out, groups expanded.
mod paths;
/// The checker on planted trees: each rule can fail.
mod planted;

use circles::circles;
use lengths::length_findings;
use paths::{code_only, is_ident, references};

/// The top-level modules from the top layer down, as `src/lib.rs` draws
/// them; a module may import its own layer and the ones below.
const LAYERS: &[&[&str]] = &[
    &["main", "cli", "client"],
    &["app"],
    &["http"],
    &["pipeline"],
    &["config", "metrics", "log_writer"],
    &["store"],
    &["wire"],
    &["ingest", "render"],
    &["schema"],
    &[
        "names",
        "ids",
        "period",
        "access",
        "problem",
        "idempotency",
        "channel",
        "versions",
        "binary_copy",
    ],
];

/// The modules of the binary's crate (`crate::` there is `main.rs`).
const BINARY: &[&str] = &["main", "cli", "client"];

/// A module's path below the crate root: `src/store/mod.rs` is `["store"]`,
/// `src/lib.rs` is `[]`.
type ModPath = Vec<String>;

struct Source {
    file: String,
    module: ModPath,
    text: String,
}

type Edges = BTreeMap<ModPath, BTreeSet<ModPath>>;

#[test]
fn the_source_tree_keeps_its_layout() {
    let findings = findings(&read_sources());
    assert!(
        findings.is_empty(),
        "{} layout finding(s):\n  {}",
        findings.len(),
        findings.join("\n  ")
    );
}

/// Every finding about `sources`: layer order, lengths, circles.
fn findings(sources: &[Source]) -> Vec<String> {
    let modules: BTreeSet<ModPath> = sources.iter().map(|s| s.module.clone()).collect();
    let named: Vec<Vec<Named>> = sources.iter().map(|s| named_paths(s, &modules)).collect();
    let exports = exports(sources, &named);
    let mut findings = Vec::new();
    let mut edges = Edges::new();
    for (source, named) in sources.iter().zip(&named) {
        let targets = imports(source, named, &modules, &exports);
        findings.extend(layer_findings(source, &targets));
        findings.extend(length_findings(source));
        edges.insert(source.module.clone(), targets);
    }
    findings.extend(circle_findings(&modules, &edges));
    findings
}

/// Each import circle.
fn circle_findings(modules: &BTreeSet<ModPath>, edges: &Edges) -> Vec<String> {
    circles(modules, edges)
        .iter()
        .map(|circle| circle_finding(circle, edges))
        .collect()
}

/// A circle named by its modules and the imports that close it.
fn circle_finding(circle: &[ModPath], edges: &Edges) -> String {
    let names: Vec<String> = circle.iter().map(display).collect();
    let mut links = Vec::new();
    for from in circle {
        for to in edges.get(from).into_iter().flatten() {
            if circle.contains(to) {
                links.push(format!("{} -> {}", display(from), display(to)));
            }
        }
    }
    format!("import circle: {} ({})", names.join(", "), links.join("; "))
}

fn read_sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&root).unwrap();
            let text = std::fs::read_to_string(&path).expect("read a source file");
            source(&relative.to_string_lossy(), text)
        })
        .collect()
}

/// The source at `relative` (below `src/`, `/`-separated).
fn source(relative: &str, text: String) -> Source {
    let mut module: ModPath = relative
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if module.last().is_some_and(|m| m == "mod") || module == ["lib"] {
        module.pop();
    }
    Source {
        file: format!("src/{relative}"),
        module,
        text,
    }
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

fn display(module: &ModPath) -> String {
    if module.is_empty() {
        "lib".to_string()
    } else {
        module.join("::")
    }
}

/// A path a source names, from the crate root.
struct Named {
    full: ModPath,
    /// Named by a `pub use`: a re-export, which other modules' paths are
    /// followed through, not an import of the module that writes it.
    public: bool,
    /// The name a `use` brings into scope with it.
    binds: Option<String>,
}

/// Every path `source` names that starts in this crate, from the root.
fn named_paths(source: &Source, modules: &BTreeSet<ModPath>) -> Vec<Named> {
    let code = code_only(&source.text);
    // The names `use` brought into scope, each with the path it stands for.
    let mut scope: BTreeMap<String, ModPath> = BTreeMap::new();
    let mut named = Vec::new();
    for reference in references(&code) {
        let mut at = source.module.clone();
        at.extend(reference.inline.iter().cloned());
        let Some(full) = absolute(source, &at, &reference.path, modules, &scope) else {
            continue;
        };
        if let Some(name) = &reference.binds {
            scope.insert(name.clone(), full.clone());
        }
        named.push(Named {
            full,
            public: reference.public,
            binds: reference.binds,
        });
    }
    named
}

/// What each module re-exports: each name its `pub use` lines bind, with
/// the path it stands for.
type Exports = BTreeMap<ModPath, BTreeMap<String, ModPath>>;

fn exports(sources: &[Source], named: &[Vec<Named>]) -> Exports {
    let mut exports = Exports::new();
    for (source, named) in sources.iter().zip(named) {
        for n in named.iter().filter(|n| n.public) {
            if let Some(name) = &n.binds {
                let own = exports.entry(source.module.clone()).or_default();
                own.insert(name.clone(), n.full.clone());
            }
        }
    }
    exports
}

/// The modules `source` imports: each path it names (re-exports aside)
/// resolved to the module that defines what it names; itself left out, its
/// ancestors and children kept.
fn imports(
    source: &Source,
    named: &[Named],
    modules: &BTreeSet<ModPath>,
    exports: &Exports,
) -> BTreeSet<ModPath> {
    named
        .iter()
        .filter(|n| !n.public)
        .filter_map(|n| defining_module(source, &n.full, modules, exports))
        .filter(|target| *target != source.module)
        .collect()
}

/// The longest module `full` starts with, followed through re-exports
/// (`crate::ingest::Cell` is `ingest::cell`'s when `ingest` re-exports it).
fn defining_module(
    source: &Source,
    full: &ModPath,
    modules: &BTreeSet<ModPath>,
    exports: &Exports,
) -> Option<ModPath> {
    let mut full = full.clone();
    // Bounded: a re-export of a re-export, never a loop.
    for _ in 0..8 {
        let module = longest_module(source, &full, modules)?;
        let through = full
            .get(module.len())
            .and_then(|name| exports.get(&module)?.get(name));
        let Some(path) = through else {
            return Some(module);
        };
        let mut next = path.clone();
        next.extend(full[module.len() + 1..].iter().cloned());
        full = next;
    }
    longest_module(source, &full, modules)
}

/// The path from the crate root that `path`, read in module `at` (the
/// file's module and the inline ones it sits in), stands for. A bare first
/// segment is a name `use` brought into scope, a child module of `at` or
/// of the file's module, or a top-level module; None for any other (an
/// outside crate, a type, a variant).
fn absolute(
    source: &Source,
    at: &ModPath,
    path: &[String],
    modules: &BTreeSet<ModPath>,
    scope: &BTreeMap<String, ModPath>,
) -> Option<ModPath> {
    let first = path.first()?.as_str();
    let (mut full, rest): (ModPath, &[String]) = match first {
        "crate" | "idem" => (Vec::new(), &path[1..]),
        "self" => (at.clone(), &path[1..]),
        "super" => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            let mut base = at.clone();
            base.truncate(at.len().saturating_sub(supers));
            (base, &path[supers..])
        }
        _ => match scope.get(first) {
            Some(bound) => (bound.clone(), &path[1..]),
            None => (bare_base(source, at, first, modules)?, path),
        },
    };
    full.extend(rest.iter().cloned());
    Some(full)
}

/// The longest module of the tree `full` starts with. `crate::X` in the
/// binary is `main.rs`'s X, not the library root's.
fn longest_module(source: &Source, full: &ModPath, modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let found = (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|prefix| modules.contains(prefix))?;
    let binary = source
        .module
        .first()
        .is_some_and(|m| BINARY.contains(&m.as_str()));
    Some(if found.is_empty() && binary {
        vec!["main".to_string()]
    } else {
        found
    })
}

/// The module a bare first segment `first` hangs from: the current module
/// when it is a child there, the root when it is a top-level module.
fn bare_base(
    source: &Source,
    at: &ModPath,
    first: &str,
    modules: &BTreeSet<ModPath>,
) -> Option<ModPath> {
    let child_of = |base: &ModPath| {
        let mut child = base.clone();
        child.push(first.to_string());
        modules.contains(&child)
    };
    [at.clone(), source.module.clone(), Vec::new()]
        .into_iter()
        .find(|base| child_of(base))
}

/// The rank of a module's layer (0 is the top); None for the library root.
fn layer(module: &ModPath) -> Option<Result<usize, String>> {
    let top = module.first()?;
    Some(
        LAYERS
            .iter()
            .position(|layer| layer.contains(&top.as_str()))
            .ok_or_else(|| top.clone()),
    )
}

/// Each import of a layer above the source's own, and a top-level module
/// the layer order does not place.
fn layer_findings(source: &Source, targets: &BTreeSet<ModPath>) -> Vec<String> {
    let own = match layer(&source.module) {
        None => return Vec::new(),
        Some(Err(top)) => return vec![format!("{}: {top} has no place in LAYERS", source.file)],
        Some(Ok(rank)) => rank,
    };
    targets
        .iter()
        .filter(|target| matches!(layer(target), Some(Ok(rank)) if rank < own))
        .map(|target| {
            format!(
                "{} imports {}, a layer above its own",
                source.file,
                display(target)
            )
        })
        .collect()
}
