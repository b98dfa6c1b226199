//! Files and functions over their caps: alarms, not targets.

use super::{is_ident, Source};

const MAX_FILE_LINES: usize = 700;
const MAX_FN_LINES: usize = 80;

/// (d) the file over 700 lines; (e) each function over 80, counted from its
/// `fn` line to the closing brace at the same indent.
pub(super) fn length_findings(source: &Source) -> Vec<String> {
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
