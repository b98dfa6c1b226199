//! Paths read from Rust text: comments, strings and character literals
//! blanked out, `use` groups expanded, each path with the inline module it
//! sits in and the name a `use` binds.

/// The text with comments, strings and character literals blanked out, so
/// that only code is read for paths.
pub(super) fn code_only(text: &str) -> Vec<char> {
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
pub(super) struct Reference {
    /// The inline modules (`mod tests { … }`) it is written in.
    pub(super) inline: Vec<String>,
    pub(super) path: Vec<String>,
    /// Written in a `pub use` (or `pub(crate) use`).
    pub(super) public: bool,
    /// The name a `use` brings into scope with it (its last segment or
    /// its `as` name), which a bare path may then start with.
    pub(super) binds: Option<String>,
}

/// Every path of two or more segments (`a::b`, `a::{b, c::d}`), with groups
/// expanded into one path per leaf, and the inline module each sits in.
pub(super) fn references(code: &[char]) -> Vec<Reference> {
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
    pub(super) inline: Vec<(String, usize)>,
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

pub(super) fn is_ident(c: char) -> bool {
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
