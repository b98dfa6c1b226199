//! A full spool disk: idem's spool folder (`IDEM_SPOOL_DIR`) on a 1 MiB
//! tmpfs filled to the last byte. Every write that needs the spool answers
//! `503 spool_full` with `Retry-After` and changes nothing; the server goes
//! on serving; and a re-sent body that is the day's own is still known by
//! its hash (`changed: false`) without the spool.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::scenario::*;
use crate::support::*;

const DAY: &str = "2026-10-12";

/// A tmpfs of 1 MiB mounted for the scenario; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` (with the reason) when this machine will not mount one (not
    /// root, or in a container without the capability).
    fn mount(name: &str) -> Result<Tmpfs, String> {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("faults")
            .join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs(dir))
    }

    /// Writes a file until the disk refuses more: from then on it is full.
    fn fill(&self) {
        let mut filler = std::fs::File::create(self.0.join("filler")).expect("a filler file");
        let refused = filler.write_all(&vec![b'x'; 2 << 20]);
        let refused = refused.expect_err("2 MiB do not fit a 1 MiB tmpfs");
        assert_eq!(refused.kind(), std::io::ErrorKind::StorageFull, "{refused}");
    }

    fn entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .expect("read the spool folder")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `rows` orders from `first`, about 190 bytes a line.
fn orders(first: i64, rows: i64, status: &str) -> Vec<u8> {
    (first..first + rows)
        .map(|id| order_line(id, DAY, status))
        .collect::<String>()
        .into_bytes()
}

async fn put(idem: &Idem, path: &str, body: Vec<u8>) -> RawAnswer {
    let headers = [("content-type", "application/x-ndjson")];
    let body = RawBody::Whole(body);
    raw_request(&idem.addr, "PUT", path, &headers, body, CLIENT_DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("PUT {path}: {e}"))
}

/// The answer is the full spool's: 503, `spool_full`, `Retry-After`.
fn assert_spool_full(answer: &RawAnswer, what: &str) {
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (503, "spool_full"),
        "{what}: {}",
        answer.body
    );
    assert!(
        answer.header("retry-after").is_some(),
        "{what}: Retry-After"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_answers_503_with_retry_after_and_a_days_own_body_still_changes_nothing() {
    let spool = match Tmpfs::mount("spool") {
        Ok(spool) => spool,
        // CI runs as root, where the mount works: there it must not pass
        // unchecked.
        Err(why) if std::env::var_os("CI").is_none() => {
            report!("full spool: skipped, a tmpfs cannot be mounted here ({why})");
            return;
        }
        Err(why) => panic!("full spool: a tmpfs cannot be mounted under CI ({why})"),
    };
    let pg = Postgres::start().await;
    let spool_dir = spool.0.to_str().expect("a UTF-8 path").to_string();
    let idem = Idem::start(&pg.url, "spool-full", &[("IDEM_SPOOL_DIR", &spool_dir)]).await;
    let client = client();
    declare(&client, &idem, "orders", ORDERS).await;
    let day = format!("/partitions/orders/{DAY}");
    // 2 MB, twice the spool: a new day is not spooled.
    let first_body = orders(1, 11_000, "first");
    let first = put(&idem, &day, first_body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let before = read_partition(&client, &idem, "orders", DAY).await;
    spool.fill();

    // Another body for the day: spooled while its hash is checked.
    let other = put(&idem, &day, orders(5_000, 11_000, "other")).await;
    assert_spool_full(&other, "a new body for an existing day");
    let after = read_partition(&client, &idem, "orders", DAY).await;
    assert_eq!((after.etag, after.lines), (before.etag, before.lines));

    // The day's own body again: told by its hash, without the spool.
    let again = put(&idem, &day, first_body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    let again: serde_json::Value = serde_json::from_str(&again.body).expect("a receipt");
    assert_eq!(again["changed"], false, "{again}");

    // An `evolve` table (undeclared) spools every large body to read it
    // twice; a quarantine spools its rejects past 1 MiB.
    let inferred = put(
        &idem,
        &format!("/partitions/auto/{DAY}"),
        orders(1, 2_000, "a"),
    )
    .await;
    assert_spool_full(&inferred, "a body for an undeclared table");
    let bad: String = (0..12_000)
        .map(|n| format!("{{\"order_id\":\"not a number {n:0>120}\"}}\n"))
        .collect();
    let quarantined = put(
        &idem,
        "/partitions/orders/2026-10-13?bad_rows=quarantine",
        bad.into(),
    )
    .await;
    assert_spool_full(&quarantined, "a quarantine of 1.5 MB of rejects");
    // A Parquet body is read from a spool file (its footer comes last).
    let parquet = written_by_pyarrow(&format!(
        "pq.write_table(pa.table({{'order_id': pa.array([1, 2], pa.int64()), \
           'ds': pa.array([datetime.date.fromisoformat('{DAY}')] * 2), \
           'status': ['a', 'b']}}), out)"
    ));
    let headers = [("content-type", "application/vnd.apache.parquet")];
    let columnar = raw_request(
        &idem.addr,
        "PUT",
        "/partitions/orders/2026-10-14",
        &headers,
        RawBody::Whole(parquet),
        CLIENT_DEADLINE,
    )
    .await
    .expect("an answer");
    assert_spool_full(&columnar, "a Parquet body");
    for path in [
        "/tables/auto",
        "/partitions/orders/2026-10-13",
        "/partitions/orders/2026-10-14",
    ] {
        let r = client.get(idem.url(path)).send().await.expect("an answer");
        assert_eq!(r.status().as_u16(), 404, "{path} was not written");
    }
    assert_eq!(readyz(&client, &idem).await, 200, "still serving");
    assert_eq!(spool.entries(), ["filler"], "no spool file left");
    let failures = idem.failures_logged_at_least(4).await;
    assert_eq!(failures.len(), 4, "{failures:?}");
    assert!(
        failures.iter().all(|l| l.contains("\"WARN\"")),
        "a full spool is a warning, not an error: {failures:?}"
    );
    report!(
        "full spool: a 1 MiB tmpfs filled as IDEM_SPOOL_DIR; a new body for an existing day, \
         a large body for an undeclared table, 1.5 MB of quarantined rejects and a Parquet body each answered \
         503 spool_full with Retry-After, the days untouched, no file left; the day's own 2 MB \
         body sent again answered changed:false; the server kept serving"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_still_tells_an_evolve_tables_own_body_by_its_hash() {
    let spool = match Tmpfs::mount("spool-evolve") {
        Ok(spool) => spool,
        Err(why) => {
            report!("full spool, evolve: skipped, a tmpfs cannot be mounted here ({why})");
            return;
        }
    };
    let pg = Postgres::start().await;
    let spool_dir = spool.0.to_str().expect("a UTF-8 path").to_string();
    let idem = Idem::start(&pg.url, "spool-evolve", &[("IDEM_SPOOL_DIR", &spool_dir)]).await;
    let client = client();
    // An undeclared table is under `evolve`: a body past 128 KiB (this one
    // is about 380 KB) is spooled to be read again.
    let day = format!("/partitions/auto/{DAY}");
    let first_body = orders(1, 2_000, "first");
    let first = put(&idem, &day, first_body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let before = read_partition(&client, &idem, "auto", DAY).await;
    spool.fill();

    let again = put(&idem, &day, first_body).await;
    assert_eq!(
        again.status, 200,
        "the day's own body again: {}",
        again.body
    );
    let again: serde_json::Value = serde_json::from_str(&again.body).expect("a receipt");
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(again["row_count"], 2_000, "{again}");

    let other = put(&idem, &day, orders(1, 2_000, "other")).await;
    assert_spool_full(&other, "another body for an evolve table's day");
    let after = read_partition(&client, &idem, "auto", DAY).await;
    assert_eq!((after.etag, after.lines), (before.etag, before.lines));
    assert_eq!(spool.entries(), ["filler"], "no spool file left");
    report!(
        "full spool, evolve: an undeclared table's day sent again (380 KB, spooled to be read \
         twice) answered changed:false by its hash with the spool full; another body 503 spool_full"
    );
}
