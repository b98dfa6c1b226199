//! The source tree's shape, checked: no import circle between the files of
//! one folder, `pipeline/` and `store/` never reach `http/`, only the binary
//! (`main.rs`, `cli.rs`, `client/`) reaches `client/`, no file over 700
//! lines and no function over 80. It reads `src/` as text (a light parse of
//! `crate::`, `super::`, `self::` and `idem::` paths, as `cargo` would not
//! tell), and its failure lists every finding at once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 700;
const MAX_FN_LINES: usize = 80;

/// A module's path below the crate root: `src/store/mod.rs` is `["store"]`,
/// `src/lib.rs` is `[]`.
type ModPath = Vec<String>;

struct Source {
    file: String,
    module: ModPath,
    text: String,
}

#[test]
fn the_source_tree_keeps_its_layout() {
    let sources = read_sources();
    let modules: BTreeSet<ModPath> = sources.iter().map(|s| s.module.clone()).collect();
    let mut findings = Vec::new();
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for source in &sources {
        let targets = imports(source, &modules);
        findings.extend(layer_findings(source, &targets));
        findings.extend(length_findings(source));
        edges.insert(source.module.clone(), targets);
    }
    for circle in circles(&modules, &edges) {
        let names: Vec<String> = circle.iter().map(display).collect();
        findings.push(format!("import circle: {}", names.join(" <-> ")));
    }
    assert!(
        findings.is_empty(),
        "{} layout finding(s):\n  {}",
        findings.len(),
        findings.join("\n  ")
    );
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
            let mut module: ModPath = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod") || module == ["lib"] {
                module.pop();
            }
            Source {
                file: format!("src/{}", relative.display()),
                module,
                text: std::fs::read_to_string(&path).expect("read a source file"),
            }
        })
        .collect()
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

/// The modules `source` names, each resolved to the longest module of the
/// tree its path starts with; neither itself nor its ancestors.
fn imports(source: &Source, modules: &BTreeSet<ModPath>) -> BTreeSet<ModPath> {
    let code = without_comments(&source.text);
    let mut targets = BTreeSet::new();
    for path in paths(&code) {
        if let Some(target) = resolve(&source.module, &path, modules) {
            let ancestor = target.len() < source.module.len() && source.module.starts_with(&target);
            if target != source.module && !ancestor {
                targets.insert(target);
            }
        }
    }
    targets
}

fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that starts at `crate`, `super`, `self` or `idem`, with
/// `use` groups (`a::{b, c::{d}}`) expanded into one path per leaf.
fn paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_ident(chars[i - 1]) && chars[i - 1] != ':';
        if starts_word && is_ident(chars[i]) {
            let (word, end) = ident(&chars, i);
            if ["crate", "super", "self", "idem"].contains(&word.as_str()) && at(&chars, end, "::")
            {
                i = path_at(&chars, i, Vec::new(), &mut found);
                continue;
            }
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

/// Reads one path (or group) from `i`, after the segments in `prefix`;
/// pushes what it names onto `found`; returns where it ends.
fn path_at(
    chars: &[char],
    mut i: usize,
    mut prefix: Vec<String>,
    found: &mut Vec<Vec<String>>,
) -> usize {
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
    if !prefix.is_empty() {
        found.push(prefix);
    }
    i
}

/// The items of a `{…}` group from `i` (just past its `{`), each read as a
/// path after `prefix`; returns where the group ends.
fn group_at(
    chars: &[char],
    mut i: usize,
    prefix: &[String],
    found: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        i = skip_space(chars, i);
        match chars.get(i) {
            None => return i,
            Some('}') => return i + 1,
            Some(',') => i += 1,
            Some(c) if is_ident(*c) || *c == '{' => {
                i = path_at(chars, i, prefix.to_vec(), found);
                // `as name`, `*` and the like up to the next item.
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

/// The longest module of the tree that `path`, read from `current`, starts with.
fn resolve(current: &ModPath, path: &[String], modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let mut full: ModPath = Vec::new();
    let mut segments = path;
    match path.first().map(String::as_str) {
        Some("crate" | "idem") => segments = &path[1..],
        Some("self") => {
            full = current.clone();
            segments = &path[1..];
        }
        Some("super") => {
            full = current.clone();
            while segments.first().is_some_and(|s| s == "super") {
                full.pop();
                segments = &segments[1..];
            }
        }
        _ => return None,
    }
    full.extend(segments.iter().cloned());
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|prefix| modules.contains(prefix))
}

/// (b) `pipeline/` and `store/` reach `http/`; (c) a file outside the binary's
/// own reaches `client/`.
fn layer_findings(source: &Source, targets: &BTreeSet<ModPath>) -> Vec<String> {
    let top = source.module.first().map(String::as_str);
    let reaches = |name: &str| targets.iter().any(|t| t.first().is_some_and(|f| f == name));
    let mut findings = Vec::new();
    if matches!(top, Some("pipeline" | "store")) && reaches("http") {
        findings.push(format!("{} imports crate::http", source.file));
    }
    let binary = matches!(top, Some("main" | "cli" | "client"));
    if !binary && reaches("client") {
        findings.push(format!("{} imports client", source.file));
    }
    findings
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
