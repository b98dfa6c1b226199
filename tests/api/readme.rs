//! The docs run as a new user pastes them: every `sh` block of `README.md`
//! and of each page under `docs/`, each page in one bash of its own, in a
//! folder that stands in for a fresh clone, against idem started by the
//! quick start's own `scripts/serve --background` (on a fresh database, and
//! on a free port instead of 8080). Each answer a block shows must be what
//! its command printed.
//!
//! - The README's blocks are its quick start; after them
//!   `examples/run_twice.sh` runs with nothing but what they set up.
//! - Each page of `docs/` runs after the quick start's first block (the
//!   server started, `IDEM_URL`, `IDEM_TOKEN` and `PATH` exported): a page
//!   sets up what it needs itself, so the pages run side by side, each on
//!   a database and server of its own, in any order.
//! - A `sh` block that another test runs instead says so on the line
//!   before it, `<!-- run by FILE, FILE -->`; it is not run here, and each
//!   of its commands must be named in one of those files. Any other code
//!   block shows no command to paste: a command not run is written as a
//!   transcript, after a `$ ` prompt (a Docker command, a source database).
//!
//! An answer is a run of comment lines at the start of a line, after the
//! command that prints it. Each such line is a piece (a line indented after
//! `# ` continues the piece before it); the pieces appear in the output in
//! order, `…` stands for anything, whitespace is ignored, and an answer
//! that does not end with `…` ends the command's output. Comments that are
//! not answers go at the end of a command's line.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::doc_links::{pages, read_page, root, Fence};
use crate::support::*;

/// The address the quick start serves on; the test replaces it with its own.
const README_URL: &str = "http://127.0.0.1:8080";
/// Printed in place of each answer, to cut the output into commands' outputs.
const MARK: &str = "@@readme-answer@@";
/// Pages run at once (each a server of its own and its Postgres work, on a
/// machine of two cores).
const AT_ONCE: usize = 3;
/// The most one page may take.
const PAGE_TIME: Duration = Duration::from_secs(300);

/// The test that runs a block instead of this one, as the line before it
/// names it (`<!-- run by FILE, FILE -->`).
fn run_by(fence: &Fence) -> Option<Vec<String>> {
    let names = fence
        .before
        .strip_prefix("<!-- run by ")?
        .strip_suffix("-->")?;
    Some(names.split(',').map(|n| n.trim().to_string()).collect())
}

/// The `sh` blocks of `page` that this test runs, in order.
fn runnable(page: &Path) -> Vec<String> {
    read_page(page)
        .fences
        .iter()
        .filter(|f| f.info == "sh" && run_by(f).is_none())
        .map(|f| f.lines.join("\n"))
        .collect()
}

/// The program a command line runs: its first word after any `NAME=value`.
fn program(line: &str) -> Option<&str> {
    line.split_whitespace()
        .find(|word| !word.split('/').next().unwrap_or_default().contains('='))
}

/// A line of a code block that is a command to paste (not a transcript's
/// `$ ` line, not output).
fn looks_like_a_command(line: &str) -> bool {
    let Some(first) = line.split_whitespace().next() else {
        return false;
    };
    let tools = ["curl", "idem", "docker", "cargo", "psql", "python3"];
    let scripts = ["scripts/", "bench/", "examples/"];
    tools.contains(&first)
        || scripts
            .iter()
            .any(|dir| first.starts_with(dir) && first.len() > dir.len())
}

#[test]
fn every_sh_block_is_run_here_or_by_the_test_it_names() {
    let mut findings = Vec::new();
    for path in pages() {
        let page = read_page(&path);
        let at = |fence: &Fence| format!("{}:{}", path.display(), fence.line);
        for fence in &page.fences {
            if ["bash", "shell", "console", "zsh"].contains(&fence.info.as_str()) {
                findings.push(format!(
                    "{}: a `{}` block: write `sh` (run) or a transcript",
                    at(fence),
                    fence.info
                ));
            }
            if fence.info == "sh" {
                let Some(files) = run_by(fence) else {
                    if path != Path::new("README.md") {
                        let script = fence.lines.join("\n");
                        if script.contains(README_URL) || script.contains("localhost") {
                            findings
                                .push(format!("{}: names the server; use $IDEM_URL", at(fence)));
                        }
                    }
                    continue;
                };
                let texts: Vec<String> = files
                    .iter()
                    .map(|f| std::fs::read_to_string(root().join(f)).unwrap_or_default())
                    .collect();
                for line in fence.lines.iter().map(|l| l.trim()) {
                    let Some(program) = program(line).filter(|_| !line.starts_with('#')) else {
                        continue;
                    };
                    if !texts.iter().any(|t| t.contains(program)) {
                        findings.push(format!(
                            "{}: `{program}` is run by none of {files:?}",
                            at(fence)
                        ));
                    }
                }
            } else {
                for line in fence.lines.iter().filter(|l| looks_like_a_command(l)) {
                    findings.push(format!(
                        "{}: `{line}` is neither run (a `sh` block) nor a transcript (`$ `)",
                        at(fence)
                    ));
                }
            }
        }
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

/// What a page shows a command printing.
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
fn fresh_clone(venv: &Path) -> tempfile::TempDir {
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
        std::fs::copy(root().join(file), to).unwrap();
    }
    std::fs::create_dir_all(dir.path().join(".idem")).unwrap();
    std::os::unix::fs::symlink(venv, dir.path().join(".idem/venv-arrow")).unwrap();
    let bin = dir.path().join("target/release");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_idem"), bin.join("idem")).unwrap();
    dir
}

/// One bash session: a page's blocks (after the quick start's first, for a
/// page of `docs/`), then `then`.
struct Session {
    page: PathBuf,
    blocks: Vec<String>,
    then: &'static str,
}

/// What a session printed, or why it failed.
async fn run(session: Session, venv: PathBuf) -> Result<Duration, String> {
    let started = Instant::now();
    let page = session.page.display().to_string();
    let (script, answers) = script_and_answers(&session.blocks);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let clone = fresh_clone(&venv);
    let script = script.replace(README_URL, &format!("http://127.0.0.1:{port}"));
    let script = format!(
        "set -euo pipefail\n{script}printf '\\n%s\\n' '{MARK}'\n{}\n",
        session.then
    );
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
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(PAGE_TIME, run).await {
        Ok(out) => out.unwrap(),
        Err(_) => {
            return Err(format!(
                "{page}: the blocks did not end within {PAGE_TIME:?}"
            ))
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("{page}: the blocks failed:\n{stdout}\n{stderr}"));
    }
    let printed: Vec<&str> = stdout.split(MARK).collect();
    if printed.len() != answers.len() + 2 {
        return Err(format!(
            "{page}: {} answers, output cut in {}:\n{stdout}",
            answers.len(),
            printed.len()
        ));
    }
    let wrong: Vec<String> = answers
        .iter()
        .zip(&printed)
        .filter(|(answer, printed)| !shows(printed, answer))
        .map(|(answer, printed)| format!("{page} shows:\n{}printed:\n{printed}\n", answer.shown))
        .collect();
    if !wrong.is_empty() {
        return Err(wrong.join("\n"));
    }
    let after = printed[answers.len() + 1];
    if session.then.contains("run_twice") && !after.contains("plain inserts: 3 -> 6; idem: 2 -> 2")
    {
        return Err(format!(
            "{page}: examples/run_twice.sh printed:\n{after}\n{stderr}"
        ));
    }
    Ok(started.elapsed())
}

#[tokio::test]
async fn the_readme_and_every_page_of_the_docs_run_as_written_and_print_what_they_show() {
    let started = Instant::now();
    let quick_start = runnable(Path::new("README.md"));
    assert!(
        quick_start
            .first()
            .is_some_and(|b| b.contains("scripts/serve --background")),
        "the README's first block to run starts idem: {quick_start:?}"
    );
    assert_eq!(
        quick_start.concat().matches(README_URL).count(),
        1,
        "only the quick start's IDEM_URL names the server; every call uses $IDEM_URL"
    );
    let mut sessions = vec![Session {
        page: PathBuf::from("README.md"),
        blocks: quick_start.clone(),
        then: "examples/run_twice.sh",
    }];
    for page in pages().into_iter().filter(|p| p.starts_with("docs")) {
        let blocks = runnable(&page);
        if !blocks.is_empty() {
            let blocks = std::iter::once(quick_start[0].clone())
                .chain(blocks)
                .collect();
            sessions.push(Session {
                page,
                blocks,
                then: "",
            });
        }
    }
    assert!(sessions.len() > 5, "the guide's pages have blocks to run");
    // Made once, before the sessions share it.
    let venv = arrow_python()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut running = tokio::task::JoinSet::new();
    for session in sessions {
        let (slots, venv) = (slots.clone(), venv.clone());
        running.spawn(async move {
            let _slot = slots.acquire_owned().await.unwrap();
            let page = session.page.clone();
            (page, run(session, venv).await)
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = running.join_next().await {
        let (page, result) = joined.unwrap();
        match result {
            Ok(took) => eprintln!(
                "readme: {} ran in {:.1} s",
                page.display(),
                took.as_secs_f64()
            ),
            Err(failure) => failures.push(failure),
        }
    }
    eprintln!(
        "readme: every page in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
