//! Files in other tools' formats, written by those tools: a Python with
//! pyarrow (`scripts/python-env` makes it once, in `.idem/venv-arrow`) runs
//! a test's script, so that idem's readers meet an independent writer's
//! bytes, never their own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The interpreter of the project's test environment (made on first use).
pub fn arrow_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/python-env");
        let out = Command::new(script)
            .output()
            .expect("scripts/python-env runs");
        assert!(
            out.status.success(),
            "scripts/python-env failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// The imports every script runs with.
const PRELUDE: &str = "import datetime, decimal, json, uuid\nimport pyarrow as pa\n\
    import pyarrow.parquet as pq\nimport pyarrow.ipc as ipc\n";

/// Runs `script` (Python, with `pyarrow as pa`, `pyarrow.parquet as pq`,
/// `pyarrow.ipc as ipc`, `datetime`, `decimal`, `json` and `uuid` imported,
/// and `out`, a path in a fresh directory, defined) and returns the bytes it
/// wrote to `out`.
pub fn written_by_pyarrow(script: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    run_python(&format!("out = {:?}\n{script}", out.to_str().unwrap()));
    std::fs::read(&out).unwrap()
}

/// Runs `script` (with the imports of `written_by_pyarrow`, and `inp`, the
/// path of a file holding `input`) and returns what it printed.
pub fn read_by_pyarrow(input: &[u8], script: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("inp");
    std::fs::write(&inp, input).unwrap();
    run_python(&format!("inp = {:?}\n{script}", inp.to_str().unwrap()))
}

fn run_python(script: &str) -> String {
    let program = format!("{PRELUDE}{script}");
    let run = Command::new(arrow_python())
        .arg("-c")
        .arg(&program)
        .output()
        .expect("python runs");
    assert!(
        run.status.success(),
        "pyarrow's script failed:\n{}\n{program}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8(run.stdout).unwrap()
}
