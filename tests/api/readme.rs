//! The README's quick start and tour, run as a new user pastes them: every
//! `sh` block of the two sections, in order, in one bash, in a folder that
//! stands in for a fresh clone, with idem started by the quick start's own
//! `scripts/serve --background` (on a fresh database, and on a free port
//! instead of 8080). Each answer a block shows must be what its command
//! printed; then `examples/run_twice.sh` runs with nothing but what the
//! quick start set up.
//!
//! An answer is a run of comment lines at the start of a line, after the
//! command that prints it. Each such line is a piece (a line indented after
//! `# ` continues the piece before it); the pieces appear in the output in
//! order, `…` stands for anything, whitespace is ignored, and an answer
//! that does not end with `…` ends the command's output. Comments that are
//! not answers go at the end of a command's line.

use std::path::Path;

use crate::support::*;

/// The sections run, in this order; each runs to the next `## ` heading.
const SECTIONS: [&str; 2] = ["## Quick start", "## A tour with curl"];
/// The address the README serves on; the test replaces it with its own.
const README_URL: &str = "http://127.0.0.1:8080";
/// Printed in place of each answer, to cut the output into commands' outputs.
const MARK: &str = "@@readme-answer@@";

/// The `sh` blocks of the section under `heading`, subsections included.
fn sh_blocks(readme: &str, heading: &str) -> Vec<String> {
    let mut lines = readme.lines().skip_while(|l| *l != heading).skip(1);
    let mut blocks = Vec::new();
    while let Some(line) = lines.next() {
        if line.starts_with("## ") {
            break;
        }
        if line == "```sh" {
            let block: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
            blocks.push(block.join("\n"));
        }
    }
    blocks
}

/// What the README shows a command printing.
struct Answer {
    shown: String,
    pieces: Vec<String>,
}

/// One script of the blocks, each answer replaced by a line printing
/// `MARK`, and the answers in order.
fn script_and_answers(blocks: &[String]) -> (String, Vec<Answer>) {
    let mut script = String::new();
    let mut answers: Vec<Answer> = Vec::new();
    let mut in_answer = false;
    for line in blocks.iter().flat_map(|b| b.lines()) {
        match line.strip_prefix('#') {
            Some(comment) => {
                if !in_answer {
                    script.push_str(&format!("printf '\\n%s\\n' '{MARK}'\n"));
                    answers.push(Answer {
                        shown: String::new(),
                        pieces: Vec::new(),
                    });
                    in_answer = true;
                }
                let answer = answers.last_mut().expect("an answer was pushed");
                answer.shown.push_str(&format!("{line}\n"));
                match (comment.strip_prefix("  "), answer.pieces.last_mut()) {
                    (Some(more), Some(piece)) => piece.push_str(more),
                    _ => answer.pieces.push(comment.to_string()),
                }
            }
            None => {
                in_answer = false;
                script.push_str(&format!("{line}\n"));
            }
        }
    }
    (script, answers)
}

fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Whether `printed` shows `answer` (see the module's comment).
fn shows(printed: &str, answer: &Answer) -> bool {
    let pattern = squeeze(&answer.pieces.join("…"));
    let mut fragments: Vec<&str> = pattern.split('…').collect();
    let text = squeeze(printed);
    let mut body = text.as_str();
    if !pattern.ends_with('…') {
        let last = fragments.pop().unwrap_or_default();
        match body.strip_suffix(last) {
            Some(rest) => body = rest,
            None => return false,
        }
    }
    fragments
        .iter()
        .try_fold(body, |rest, fragment| {
            rest.find(fragment).map(|at| &rest[at + fragment.len()..])
        })
        .is_some()
}

#[test]
fn an_answer_matches_only_output_that_shows_its_pieces_in_order() {
    let (_, answers) = script_and_answers(&[
        "curl x\n# HTTP/1.1 200 OK\n# {\"a\":1,…,\n#  \"c\": 3}".to_string(),
        "curl y\n# {…,\"b\":2,…}".to_string(),
    ]);
    let headers = "HTTP/1.1 200 OK\r\ndate: now\r\n\r\n{\"a\":1,\"b\":2,\"c\":3}";
    assert!(shows(headers, &answers[0]));
    assert!(!shows("{\"a\":1,\"b\":2,\"c\":4}", &answers[0]));
    assert!(!shows(&format!("{headers}{{}}"), &answers[0]));
    assert!(shows("{\"a\":1,\"b\":2,\"c\":3}", &answers[1]));
    assert!(!shows("{\"a\":1,\"b\":3}", &answers[1]));
}

/// Stops the idem that `scripts/serve --background` left running.
struct Background<'a>(&'a Path);

impl Drop for Background<'_> {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.0.join(".idem/idem.pid")) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        }
    }
}

/// A folder with what the blocks use of a clone: the scripts, the example,
/// the binary where `scripts/serve` builds it (this test's debug build), and
/// the project's Python environment (made once, shared rather than
/// installed again in each clone).
fn fresh_clone() -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    for file in [
        "scripts/serve",
        "scripts/pg.sh",
        "scripts/pg-stop",
        "scripts/python-env",
        "scripts/python_env_pins.txt",
        "examples/run_twice.sh",
    ] {
        let to = dir.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join(file), to).unwrap();
    }
    let venv = arrow_python().parent().unwrap().parent().unwrap();
    std::fs::create_dir_all(dir.path().join(".idem")).unwrap();
    std::os::unix::fs::symlink(venv, dir.path().join(".idem/venv-arrow")).unwrap();
    let bin = dir.path().join("target/release");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_idem"), bin.join("idem")).unwrap();
    dir
}

#[tokio::test]
async fn the_readme_quick_start_and_tour_run_as_written_and_print_what_they_show() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let blocks: Vec<String> = SECTIONS
        .iter()
        .flat_map(|heading| {
            let blocks = sh_blocks(&readme, heading);
            assert!(!blocks.is_empty(), "no sh blocks under {heading:?}");
            blocks
        })
        .collect();
    let (script, answers) = script_and_answers(&blocks);
    assert_eq!(
        script.matches(README_URL).count(),
        1,
        "only the quick start's IDEM_URL names the server; every call uses $IDEM_URL"
    );
    assert!(!script.contains("localhost"), "every call uses $IDEM_URL");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let clone = fresh_clone();
    let script = script.replace(README_URL, &format!("http://127.0.0.1:{port}"));
    let script =
        format!("set -euo pipefail\n{script}printf '\\n%s\\n' '{MARK}'\nexamples/run_twice.sh\n");
    std::fs::write(clone.path().join("first-hour.sh"), script).unwrap();
    let (_, database_url, _database) = fresh_database_url().await;
    let _server = Background(clone.path());
    let run = tokio::process::Command::new("bash")
        .arg("first-hour.sh")
        .current_dir(clone.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", clone.path())
        .env("DATABASE_URL", database_url)
        .env("IDEM_LISTEN", format!("127.0.0.1:{port}"))
        .env("IDEM_BIN", env!("CARGO_BIN_EXE_idem"))
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(300), run)
        .await
        .expect("the blocks end within 5 minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the blocks failed:\n{stdout}\n{stderr}"
    );

    let printed: Vec<&str> = stdout.split(MARK).collect();
    assert_eq!(printed.len(), answers.len() + 2, "{stdout}");
    let wrong: Vec<String> = answers
        .iter()
        .zip(&printed)
        .filter(|(answer, printed)| !shows(printed, answer))
        .map(|(answer, printed)| format!("README shows:\n{}printed:\n{printed}\n", answer.shown))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        printed[answers.len() + 1].contains("plain inserts: 3 -> 6; idem: 2 -> 2"),
        "{stdout}\n{stderr}"
    );
}
