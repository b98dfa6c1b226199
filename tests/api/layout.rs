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
//! - no import circle anywhere, across folders too. A `pub use` is a
//!   re-export, not an import: a path through it is followed to the module
//!   that defines the item. The hubs still to split (`HUBS_TO_SPLIT`: a
//!   `mod.rs` holding both what its children share and their wiring) have
//!   their edges to their own children left out until then; the list is
//!   told to shrink as soon as one closes no circle.
//! - each module imports only its own layer or the layers below it, in the
//!   order `src/lib.rs` draws (`LAYERS` below); the binary (`main.rs`,
//!   `cli.rs`, `client/`) is the top layer, so only it reaches `client/`.
//! - no file over 700 lines and no function over 80: alarms, not targets.
//!
//! The tests at the end plant small trees to show each rule can fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 700;
const MAX_FN_LINES: usize = 80;

/// The top-level modules from the top layer down, as `src/lib.rs` draws
/// them; a module may import its own layer and the ones below.
const LAYERS: &[&[&str]] = &[
    &["main", "cli", "client"],
    &["app"],
    &["http"],
    &["pipeline"],
    &["config", "metrics", "log_writer"],
    &["store"],
    &["ingest"],
    &["schema"],
    &[
        "names",
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
    let findings = findings(&read_sources(), HUBS_TO_SPLIT);
    assert!(
        findings.is_empty(),
        "{} layout finding(s):\n  {}",
        findings.len(),
        findings.join("\n  ")
    );
}

/// Every finding about `sources`: layer order, lengths, circles (`hubs` as
/// `HUBS_TO_SPLIT`).
fn findings(sources: &[Source], hubs: &[&str]) -> Vec<String> {
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
    findings.extend(circle_findings(&modules, &edges, hubs));
    findings
}

/// The hubs still to split: a `mod.rs` that holds code its children use
/// and wires those children too, so it and they form a circle. Their edges
/// to their own children are left out of the circle check until they are
/// split (shared items to a file of their own, the wiring to another); the
/// check fails once a listed hub closes no circle, so the list only shrinks.
const HUBS_TO_SPLIT: &[&str] = &["http", "pipeline"];

/// Each import circle, and each listed hub that no longer closes one.
fn circle_findings(modules: &BTreeSet<ModPath>, edges: &Edges, hubs: &[&str]) -> Vec<String> {
    let hubs: Vec<ModPath> = hubs.iter().map(|h| vec![h.to_string()]).collect();
    let counted: Edges = edges
        .iter()
        .map(|(from, to)| {
            let hub = hubs.contains(from);
            let kept = to.iter().filter(|t| !(hub && t.starts_with(from)));
            (from.clone(), kept.cloned().collect())
        })
        .collect();
    let mut findings: Vec<String> = circles(modules, &counted)
        .iter()
        .map(|circle| circle_finding(circle, &counted))
        .collect();
    let all = circles(modules, edges);
    for hub in hubs.iter().filter(|h| modules.contains(*h)) {
        if !all.iter().any(|circle| circle.contains(hub)) {
            findings.push(format!(
                "{} closes no circle now: take it off HUBS_TO_SPLIT",
                display(hub)
            ));
        }
    }
    findings
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

/// The text with comments, strings and character literals blanked out, so
/// that only code is read for paths.
fn code_only(text: &str) -> Vec<char> {
    let chars: Vec<char> = text.chars().collect();
    let mut code = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let end = literal_or_comment_end(&chars, i);
        if end > i {
            code.extend(
                chars[i..end]
                    .iter()
                    .map(|c| if *c == '\n' { '\n' } else { ' ' }),
            );
            i = end;
        } else {
            code.push(chars[i]);
            i += 1;
        }
    }
    code
}

/// Where the comment, string or character literal at `i` ends; `i` when
/// none starts there.
fn literal_or_comment_end(chars: &[char], i: usize) -> usize {
    let rest = |s: &str| at(chars, i, s);
    if rest("//") {
        return find_from(chars, i, "\n").unwrap_or(chars.len());
    }
    if rest("/*") {
        return find_from(chars, i + 2, "*/").map_or(chars.len(), |e| e + 2);
    }
    if chars[i] == '"' {
        return string_end(chars, i + 1);
    }
    if chars[i] == '\'' {
        return char_end(chars, i);
    }
    let word_start = i == 0 || !is_ident(chars[i - 1]);
    let raw_start = if rest("br") { i + 1 } else { i };
    if word_start && chars[raw_start] == 'r' {
        let hashes = chars[raw_start + 1..]
            .iter()
            .take_while(|c| **c == '#')
            .count();
        if chars.get(raw_start + 1 + hashes) == Some(&'"') {
            let close = format!("\"{}", "#".repeat(hashes));
            let from = raw_start + 2 + hashes;
            return find_from(chars, from, &close).map_or(chars.len(), |e| e + close.len());
        }
    }
    i
}

fn string_end(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// The end of a character literal at `i` (`'a'`, `'\n'`, `'\u{1F}'`); `i`
/// for a lifetime (`'a`), which is code.
fn char_end(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        return find_from(chars, i + 2, "'").map_or(chars.len(), |e| e + 1);
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    i
}

fn find_from(chars: &[char], from: usize, s: &str) -> Option<usize> {
    (from..chars.len()).find(|&k| at(chars, k, s))
}

/// One path the code names.
struct Reference {
    /// The inline modules (`mod tests { … }`) it is written in.
    inline: Vec<String>,
    path: Vec<String>,
    /// Written in a `pub use` (or `pub(crate) use`).
    public: bool,
    /// The name a `use` brings into scope with it (its last segment or
    /// its `as` name), which a bare path may then start with.
    binds: Option<String>,
}

/// Every path of two or more segments (`a::b`, `a::{b, c::d}`), with groups
/// expanded into one path per leaf, and the inline module each sits in.
fn references(code: &[char]) -> Vec<Reference> {
    let mut scan = Scan::default();
    let mut i = 0;
    while i < code.len() {
        match code[i] {
            '{' => scan.open(),
            '}' => scan.close(),
            ';' => {
                scan.in_use = false;
                scan.pending_mod = None;
            }
            c if is_ident(c) && (i == 0 || !is_ident(code[i - 1]) && code[i - 1] != ':') => {
                i = scan.word(code, i);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    scan.found
}

#[derive(Default)]
struct Scan {
    depth: usize,
    /// The inline modules open here, each with the depth its `{` opened.
    inline: Vec<(String, usize)>,
    /// A `mod name` just read, waiting for its `{` (or `;`).
    pending_mod: Option<String>,
    in_use: bool,
    public_use: bool,
    found: Vec<Reference>,
}

impl Scan {
    fn open(&mut self) {
        self.depth += 1;
        if let Some(name) = self.pending_mod.take() {
            self.inline.push((name, self.depth));
        }
    }

    fn close(&mut self) {
        if self.inline.last().is_some_and(|(_, d)| *d == self.depth) {
            self.inline.pop();
        }
        self.depth = self.depth.saturating_sub(1);
    }

    /// Reads the word at `i`: a keyword that matters here, the start of a
    /// path, or neither; returns where to go on.
    fn word(&mut self, code: &[char], i: usize) -> usize {
        let (word, end) = ident(code, i);
        let next = skip_space(code, end);
        if word == "mod" {
            let (name, name_end) = ident(code, next);
            self.pending_mod = (!name.is_empty()).then_some(name);
            return name_end.max(end);
        }
        if word == "use" {
            self.in_use = true;
            self.public_use = after_pub(code, i);
            return end;
        }
        if !at(code, next, "::") {
            self.pending_mod = None;
            return end;
        }
        let mut paths = Vec::new();
        let end = path_at(code, i, Vec::new(), &mut paths);
        let inline: Vec<String> = self.inline.iter().map(|(n, _)| n.clone()).collect();
        for (path, binds) in paths {
            let binds = if self.in_use { binds } else { None };
            self.found.push(Reference {
                inline: inline.clone(),
                path,
                public: self.in_use && self.public_use,
                binds,
            });
        }
        end
    }
}

/// Whether the word at `i` follows `pub` or `pub(…)`.
fn after_pub(code: &[char], i: usize) -> bool {
    let before: String = code[i.saturating_sub(40)..i].iter().collect();
    let mut before = before.trim_end();
    if let Some(open) = before.strip_suffix(')').and_then(|b| b.rfind('(')) {
        before = before[..open].trim_end();
    }
    before.ends_with("pub") && !before.ends_with("_pub")
}

/// A path and the name it binds when it is a `use` leaf.
type Leaf = (Vec<String>, Option<String>);

/// Reads one path (or group) from `i`, after the segments in `prefix`;
/// pushes what it names onto `found`; returns where it ends.
fn path_at(chars: &[char], mut i: usize, mut prefix: Vec<String>, found: &mut Vec<Leaf>) -> usize {
    loop {
        i = skip_space(chars, i);
        if i < chars.len() && chars[i] == '{' {
            return group_at(chars, i + 1, &prefix, found);
        }
        if i >= chars.len() || !is_ident(chars[i]) {
            break;
        }
        let (word, end) = ident(chars, i);
        prefix.push(word);
        i = skip_space(chars, end);
        if !at(chars, i, "::") {
            break;
        }
        i += 2;
    }
    let mut binds = prefix.last().cloned();
    let after = skip_space(chars, i);
    if at(chars, after, "as") {
        let (alias, end) = ident(chars, skip_space(chars, after + 2));
        binds = Some(alias);
        i = end;
    }
    if !prefix.is_empty() {
        found.push((prefix, binds));
    }
    i
}

/// The items of a `{…}` group from `i` (just past its `{`), each read as a
/// path after `prefix`; returns where the group ends.
fn group_at(chars: &[char], mut i: usize, prefix: &[String], found: &mut Vec<Leaf>) -> usize {
    loop {
        i = skip_space(chars, i);
        match chars.get(i) {
            None => return i,
            Some('}') => return i + 1,
            Some(',') => i += 1,
            Some(c) if is_ident(*c) || *c == '{' => {
                i = path_at(chars, i, prefix.to_vec(), found);
                // `*` and the like up to the next item.
                while i < chars.len() && chars[i] != ',' && chars[i] != '}' {
                    i += 1;
                }
            }
            Some(_) => i += 1,
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn ident(chars: &[char], start: usize) -> (String, usize) {
    let mut end = start;
    while end < chars.len() && is_ident(chars[end]) {
        end += 1;
    }
    (chars[start..end].iter().collect(), end)
}

fn skip_space(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

fn at(chars: &[char], i: usize, s: &str) -> bool {
    s.chars()
        .enumerate()
        .all(|(k, c)| chars.get(i + k) == Some(&c))
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

/// (d) the file over 700 lines; (e) each function over 80, counted from its
/// `fn` line to the closing brace at the same indent.
fn length_findings(source: &Source) -> Vec<String> {
    let lines: Vec<&str> = source.text.lines().collect();
    let mut findings = Vec::new();
    if lines.len() > MAX_FILE_LINES {
        findings.push(format!(
            "{}: {} lines (at most {MAX_FILE_LINES})",
            source.file,
            lines.len()
        ));
    }
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        if let Some(end) = fn_end(&lines, start) {
            let length = end - start + 1;
            if length > MAX_FN_LINES {
                findings.push(format!(
                    "{}:{}: fn {name} is {length} lines (at most {MAX_FN_LINES})",
                    source.file,
                    start + 1
                ));
            }
        }
    }
    findings
}

/// The function's name when `line` starts a function item.
fn fn_name(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    if rest.starts_with("pub(") {
        rest = &rest[rest.find(')')? + 1..];
    }
    for qualifier in [
        "pub ",
        "default ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ] {
        rest = rest.trim_start();
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let rest = rest.trim_start().strip_prefix("fn ")?;
    let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
    (!name.is_empty()).then_some(name)
}

/// The line of the function's closing brace: the first line after its body
/// opens that is its indent and `}`. None for a declaration without a body
/// or a body on one line.
fn fn_end(lines: &[&str], start: usize) -> Option<usize> {
    let indent = &lines[start][..lines[start].len() - lines[start].trim_start().len()];
    let closing = format!("{indent}}}");
    let mut opened = false;
    for (i, line) in lines.iter().enumerate().skip(start) {
        let code = line.trim_end();
        if opened {
            if code == closing {
                return Some(i);
            }
            continue;
        }
        let same_level =
            i == start || line.starts_with(indent) && !line[indent.len()..].starts_with(' ');
        if same_level && code.ends_with(';') {
            return None;
        }
        if same_level && code.ends_with('}') && code.contains('{') {
            return None;
        }
        if same_level && code.ends_with('{') {
            opened = true;
        }
    }
    None
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(
    modules: &BTreeSet<ModPath>,
    edges: &BTreeMap<ModPath, BTreeSet<ModPath>>,
) -> Vec<Vec<ModPath>> {
    let mut tarjan = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for module in modules {
        if !tarjan.index.contains_key(module) {
            tarjan.visit(module);
        }
    }
    tarjan.found
}

struct Tarjan<'a> {
    edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
    index: BTreeMap<ModPath, usize>,
    low: BTreeMap<ModPath, usize>,
    stack: Vec<ModPath>,
    on_stack: BTreeSet<ModPath>,
    found: Vec<Vec<ModPath>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: &ModPath) {
        let n = self.index.len();
        self.index.insert(v.clone(), n);
        self.low.insert(v.clone(), n);
        self.stack.push(v.clone());
        self.on_stack.insert(v.clone());
        let edges = self.edges;
        for w in edges.get(v).into_iter().flatten() {
            if !self.index.contains_key(w) {
                self.visit(w);
                let low = self.low[v].min(self.low[w]);
                self.low.insert(v.clone(), low);
            } else if self.on_stack.contains(w) {
                let low = self.low[v].min(self.index[w]);
                self.low.insert(v.clone(), low);
            }
        }
        if self.low[v] == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(&w);
                let done = &w == v;
                component.push(w);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                self.found.push(component);
            }
        }
    }
}

// The checker on planted trees: each rule can fail.

/// The findings about a planted tree: (path below `src/`, text) pairs.
fn planted(files: &[(&str, &str)], hubs: &[&str]) -> Vec<String> {
    let sources: Vec<Source> = files
        .iter()
        .map(|(path, text)| source(path, text.to_string()))
        .collect();
    findings(&sources, hubs)
}

#[test]
fn a_circle_through_a_mod_rs_is_found() {
    let hub = [
        ("lib.rs", "pub mod store;\n"),
        (
            "store/mod.rs",
            "mod a;\npub struct Pool;\npub fn open() -> a::Handle { a::Handle }\n",
        ),
        ("store/a.rs", "use super::Pool;\npub struct Handle;\n"),
    ];
    assert_eq!(
        planted(&hub, &[]),
        ["import circle: store, store::a (store -> store::a; store::a -> store)"]
    );
    // Listed as a hub to split, its edges to its children wait; listed
    // when it closes no circle, the list is told to shrink.
    assert_eq!(planted(&hub, &["store"]), Vec::<String>::new());
    assert_eq!(
        planted(&hub[..2], &["store"]),
        ["store closes no circle now: take it off HUBS_TO_SPLIT"]
    );
}

#[test]
fn a_circle_across_folders_is_found() {
    let found = planted(
        &[
            (
                "http/auth.rs",
                "use super::console::owns;\npub fn caller() {}\n",
            ),
            (
                "http/console/mod.rs",
                "mod session;\npub fn owns() {}\npub fn router() { session::page() }\n",
            ),
            (
                "http/console/session.rs",
                "fn f() { crate::http::auth::caller() }\n",
            ),
        ],
        &[],
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("import circle: http::auth, http::console, http::console::session")
    );
}

#[test]
fn a_re_export_is_followed_to_its_module() {
    let found = planted(
        &[
            ("store/mod.rs", "mod a;\nmod b;\npub use a::Handle;\n"),
            ("store/a.rs", "pub struct Handle;\n"),
            ("store/b.rs", "use super::Handle;\nuse super::b::Other;\n"),
        ],
        &[],
    );
    assert_eq!(found, Vec::<String>::new());
}

/// An upward import of `pipeline` from `store/x.rs`, written as `import`.
fn store_importing(import: &str) -> Vec<String> {
    planted(
        &[
            ("pipeline/mod.rs", "pub struct Batch;\n"),
            ("store/mod.rs", "mod x;\n"),
            ("store/x.rs", import),
        ],
        &[],
    )
}

#[test]
fn an_upward_import_is_found_however_it_is_written() {
    let upward = ["src/store/x.rs imports pipeline, a layer above its own"];
    for import in [
        "use super::super::pipeline::Batch;\n",
        "fn f() -> pipeline::Batch { pipeline::Batch }\n",
        "use crate::{names::TableName, pipeline::Batch};\n",
        "use idem::pipeline as p;\n",
        "#[cfg(test)]\nmod tests {\n    use super::super::super::pipeline::Batch;\n}\n",
    ] {
        assert_eq!(store_importing(import), upward, "{import}");
    }
}

#[test]
fn comments_strings_and_declarations_are_no_imports() {
    let text = "// pipeline::Batch\nconst S: &str = \"pipeline::Batch\";\nconst C: char = '\"';\n\
                /* crate::pipeline::Batch */\nmod pipeline;\n";
    assert_eq!(store_importing(text), Vec::<String>::new());
}

#[test]
fn only_the_binary_reaches_the_client() {
    let found = planted(
        &[
            ("client/mod.rs", "pub fn send() {}\n"),
            ("cli.rs", "use crate::client::send;\n"),
            ("http/mod.rs", "use crate::client::send;\n"),
        ],
        &[],
    );
    assert_eq!(
        found,
        ["src/http/mod.rs imports client, a layer above its own"]
    );
}
