//! The docs' links and names, checked: every relative link of `README.md`
//! and of each page under `docs/` leads to a file, every `#anchor` (in the
//! page, or `page.md#anchor`) to a heading of its page, every page is listed
//! in `docs/SUMMARY.md`, every path under `src/`, `tests/`, `scripts/`,
//! `bench/` or `examples/` that the docs name in backticks (or in a code
//! block) exists, and every server setting of `src/config.rs` has its row in
//! `docs/reference/configuration.md`. The failure lists every finding.
//!
//! Headings become anchors as GitHub and mdBook make them: the text without
//! its markup, lowercased, every character but letters, digits, `-`, `_`
//! and spaces dropped, spaces made `-`; a repeated one gets `-1`, `-2`, ….
//!
//! The pages and their code blocks are read here for `readme` too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The repository.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md`, then every Markdown file under `docs/` in path order (paths
/// relative to the repository).
pub fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| dir.join(e.unwrap().file_name()))
            .collect();
        entries.sort();
        for entry in entries {
            if root().join(&entry).is_dir() {
                walk(&entry, out);
            } else if entry.extension().is_some_and(|e| e == "md") {
                out.push(entry);
            }
        }
    }
    let mut pages = vec![PathBuf::from("README.md")];
    walk(Path::new("docs"), &mut pages);
    pages
}

/// A fenced code block of a page.
pub struct Fence {
    /// What follows the opening backticks (`sh`, `text`, or nothing).
    pub info: String,
    /// Its lines, without the fence's own indentation.
    pub lines: Vec<String>,
    /// The line just before the opening fence, trimmed.
    pub before: String,
    /// The opening fence's line number, from 1.
    pub line: usize,
}

/// A page split into its prose (code blocks blanked, so that line numbers
/// hold) and its code blocks.
pub struct Page {
    pub prose: String,
    pub fences: Vec<Fence>,
}

pub fn read_page(path: &Path) -> Page {
    let text = std::fs::read_to_string(root().join(path))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut prose = String::new();
    let mut fences = Vec::new();
    let mut open: Option<(Fence, usize)> = None;
    let mut previous = "";
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.take() {
            Some((fence, _)) if trimmed == "```" => fences.push(fence),
            Some((mut fence, indent)) => {
                let cut = line.len() - line.trim_start().len();
                fence.lines.push(line[cut.min(indent)..].to_string());
                open = Some((fence, indent));
            }
            None => match trimmed.strip_prefix("```") {
                Some(info) => {
                    let fence = Fence {
                        info: info.trim().to_string(),
                        lines: Vec::new(),
                        before: previous.trim().to_string(),
                        line: n + 1,
                    };
                    open = Some((fence, line.len() - trimmed.len()));
                }
                None => {
                    prose.push_str(line);
                    prose.push('\n');
                    previous = line;
                    continue;
                }
            },
        }
        prose.push('\n');
        previous = line;
    }
    assert!(
        open.is_none(),
        "{}: a code block is not closed",
        path.display()
    );
    Page { prose, fences }
}

/// The code spans of `prose` (single backticks, within a paragraph), and
/// the prose with each span blanked out.
fn code_spans(prose: &str) -> (Vec<String>, String) {
    let mut spans = Vec::new();
    let mut rest = String::with_capacity(prose.len());
    for paragraph in prose.split_inclusive("\n\n") {
        let mut parts = paragraph.split('`');
        rest.push_str(parts.next().unwrap_or_default());
        let parts: Vec<&str> = parts.collect();
        // An odd count of backticks leaves the last one as text.
        for (i, part) in parts.iter().enumerate() {
            if i % 2 == 0 && i + 1 < parts.len() {
                spans.push(part.to_string());
                rest.push_str(&" ".repeat(part.len() + 2));
            } else if i % 2 == 0 {
                rest.push('`');
                rest.push_str(part);
            } else {
                rest.push_str(part);
            }
        }
    }
    (spans, rest)
}

/// Every link target in `text` (`[…](target)` and `![…](target)`).
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        targets.push(after[..end].trim().to_string());
        rest = &after[end..];
    }
    targets
}

/// A heading's anchor (see the module's comment).
pub fn slug(heading: &str) -> String {
    let text = heading.replace('`', "");
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings.
fn anchors(page: &Page) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in page.prose.lines() {
        let level = line.chars().take_while(|c| *c == '#').count();
        if level == 0 || !line[level..].starts_with(' ') {
            continue;
        }
        let base = slug(line[level..].trim());
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.insert(match *count {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        *count += 1;
    }
    anchors
}

/// Where the relative links and anchors of `page` do not lead.
fn broken_links(path: &Path, page: &Page) -> Vec<String> {
    let (_, prose) = code_spans(&page.prose);
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for target in link_targets(&prose) {
        if ["http://", "https://", "mailto:"]
            .iter()
            .any(|scheme| target.starts_with(scheme))
        {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (target.as_str(), None),
        };
        let to = match file {
            "" => path.to_path_buf(),
            file => dir.join(file),
        };
        if !root().join(&to).exists() {
            broken.push(format!("{}: {target}: no such file", path.display()));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if to.extension().is_none_or(|e| e != "md") {
            broken.push(format!(
                "{}: {target}: an anchor into a file that is not Markdown",
                path.display()
            ));
        } else if !anchors(&read_page(&normal(&to))).contains(anchor) {
            broken.push(format!(
                "{}: {target}: no heading makes that anchor",
                path.display()
            ));
        }
    }
    broken
}

/// `path` without its `..` and `.` parts.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The folders whose files the docs name, and must name rightly.
const CHECKED: [&str; 5] = ["src/", "tests/", "scripts/", "bench/", "examples/"];

/// A word of a code span or block that names a file or folder of the
/// repository (not a placeholder such as `src/http/<resource>.rs`).
fn named_path(word: &str) -> Option<&str> {
    let word = word
        .trim_start_matches(['"', '\'', '(', '$', '['])
        .trim_end_matches(['"', '\'', ')', ',', ';', ':', '.', ']']);
    let checked = CHECKED
        .iter()
        .any(|dir| word.starts_with(dir) && word.len() > dir.len());
    let placeholder = word.contains(['<', '{', '*', '…', '$', '|', '=']);
    (checked && !placeholder).then_some(word)
}

/// The paths `page` names that do not exist.
fn missing_paths(path: &Path, page: &Page) -> Vec<String> {
    let (spans, _) = code_spans(&page.prose);
    let mut named: Vec<&str> = spans
        .iter()
        .filter_map(|span| span.split_whitespace().next())
        .filter_map(named_path)
        .collect();
    for fence in &page.fences {
        named.extend(
            fence
                .lines
                .iter()
                .flat_map(|l| l.split_whitespace())
                .filter_map(named_path),
        );
    }
    named
        .into_iter()
        .filter(|p| !root().join(p).exists())
        .map(|p| format!("{}: `{p}` does not exist", path.display()))
        .collect()
}

#[test]
fn a_slug_is_the_heading_lowercased_without_punctuation() {
    assert_eq!(slug("Quick start"), "quick-start");
    assert_eq!(
        slug("Keys repeated in one body: the `duplicates` policy"),
        "keys-repeated-in-one-body-the-duplicates-policy"
    );
    assert_eq!(
        slug("Dropping a table: `DELETE /tables/{table}`"),
        "dropping-a-table-delete-tablestable"
    );
    assert_eq!(slug("A PUT's key"), "a-puts-key");
    assert_eq!(named_path("`src/http/<resource>.rs`"), None);
    assert_eq!(
        named_path("\"$(scripts/python-env)\""),
        Some("scripts/python-env")
    );
    assert_eq!(named_path("bench/"), None);
    let (spans, rest) = code_spans("a `src/x.rs` and `y\nz` b\n\n`c");
    assert_eq!(spans, ["src/x.rs", "y\nz"]);
    assert!(rest.ends_with("`c") && !rest.contains("src/x.rs"));
}

#[test]
fn every_link_anchor_and_named_path_of_the_docs_resolves() {
    let mut findings = Vec::new();
    for path in pages() {
        let page = read_page(&path);
        findings.extend(broken_links(&path, &page));
        findings.extend(missing_paths(&path, &page));
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

#[test]
fn the_summary_lists_every_page_of_the_docs() {
    let summary = read_page(Path::new("docs/SUMMARY.md"));
    let listed: BTreeSet<PathBuf> = link_targets(&summary.prose)
        .iter()
        .map(|t| Path::new("docs").join(t))
        .collect();
    let unlisted: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with("docs") && !p.ends_with("SUMMARY.md"))
        .filter(|p| !listed.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(unlisted.is_empty(), "not in docs/SUMMARY.md: {unlisted:?}");
}

#[test]
fn the_configuration_page_has_every_setting_of_the_server() {
    let config = std::fs::read_to_string(root().join("src/config.rs")).unwrap();
    let page = std::fs::read_to_string(root().join("docs/reference/configuration.md")).unwrap();
    let mut missing = BTreeSet::new();
    for (at, _) in config.match_indices("IDEM_") {
        let name: String = config[at..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        if !page.contains(&format!("`{name}`")) {
            missing.insert(name);
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/reference/configuration.md: {missing:?}"
    );
}
