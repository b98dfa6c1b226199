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

/// Runs `script` (Python, with `pyarrow as pa`, `pyarrow.parquet as pq`,
/// `pyarrow.ipc as ipc`, `datetime`, `decimal` and `uuid` imported, and
/// `out`, a path in a fresh directory, defined) and returns the bytes it
/// wrote to `out`.
pub fn written_by_pyarrow(script: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let program = format!(
        "import datetime, decimal, uuid\nimport pyarrow as pa\nimport pyarrow.parquet as pq\n\
         import pyarrow.ipc as ipc\nout = {out:?}\n{script}",
        out = out.to_str().unwrap()
    );
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
    std::fs::read(&out).unwrap()
}
