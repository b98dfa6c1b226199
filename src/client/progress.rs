//! What a client command shows while it works: a progress bar on stderr when
//! a person watches (stdout and stderr both terminals, no `--quiet`), plain
//! log lines otherwise, so that an orchestrator's task log reads as lines
//! and not as a redrawn bar.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// `Progress::total` when the total is not known (a gzipped or piped body).
const UNKNOWN: u64 = u64::MAX;

/// How often a plain progress line is written while bytes flow.
const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// What is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Bytes of a body sent (rows are told beside them).
    Bytes,
    /// Days of a backfill.
    Days,
}

/// The progress of one command.
pub struct Progress {
    what: String,
    unit: Unit,
    /// The total, `UNKNOWN` until known.
    total: AtomicU64,
    bar: Option<ProgressBar>,
    /// The bars of a backfill's days in flight, under its own.
    multi: Option<MultiProgress>,
    /// Plain lines every `PLAIN_EVERY` when there is no bar (not for the
    /// days of a backfill, which tells each day when it ends).
    lines: bool,
    position: AtomicU64,
    rows: AtomicU64,
    started: Instant,
    last_line: Mutex<Instant>,
}

/// Whether a person is watching: a bar then, plain lines otherwise.
pub fn watched(quiet: bool) -> bool {
    !quiet && std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

impl Progress {
    /// Progress of `what` towards `total` (unknown for a gzipped or piped
    /// body), drawn as a bar when `watched`.
    pub fn new(what: impl Into<String>, unit: Unit, total: Option<u64>, watched: bool) -> Self {
        let what = what.into();
        let (bar, multi) = match (watched, unit) {
            (false, _) => (None, None),
            (true, Unit::Bytes) => (Some(bar(&what, unit, total)), None),
            (true, Unit::Days) => {
                let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
                (Some(multi.add(bar(&what, unit, total))), Some(multi))
            }
        };
        Progress::with(what, unit, total, bar, multi, true)
    }

    /// The progress of one day of a backfill: a bar under the backfill's
    /// when it has one, else nothing (the backfill tells the day's end).
    pub fn day(&self, what: impl Into<String>, total: Option<u64>) -> Self {
        let what = what.into();
        let bar = self
            .multi
            .as_ref()
            .map(|multi| multi.add(bar(&what, Unit::Bytes, total)));
        Progress::with(what, Unit::Bytes, total, bar, None, false)
    }

    fn with(
        what: String,
        unit: Unit,
        total: Option<u64>,
        bar: Option<ProgressBar>,
        multi: Option<MultiProgress>,
        lines: bool,
    ) -> Self {
        let now = Instant::now();
        Progress {
            what,
            unit,
            total: AtomicU64::new(total.unwrap_or(UNKNOWN)),
            bar,
            multi,
            lines,
            position: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            started: now,
            last_line: Mutex::new(now),
        }
    }

    /// The total, once known.
    pub fn set_total(&self, total: u64) {
        self.total.store(total, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_style(style(self.unit, true));
        }
    }

    /// `n` more bytes or days done.
    pub fn advance(&self, n: u64) {
        self.position.fetch_add(n, Ordering::Relaxed);
        match &self.bar {
            Some(bar) => bar.inc(n),
            None => self.plain_line_now_and_then(),
        }
    }

    /// `n` more rows sent.
    pub fn add_rows(&self, n: u64) {
        let rows = self.rows.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(bar) = &self.bar {
            bar.set_message(format!(", {rows} rows"));
        }
    }

    /// A new attempt sends the body again from its start.
    pub fn restart(&self) {
        self.position.store(0, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.set_position(0);
        }
    }

    /// A line for the log (a retry, a finished day), above the bar if any.
    pub fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Clears the bar; the summary comes after.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn plain_line_now_and_then(&self) {
        if self.unit != Unit::Bytes || !self.lines {
            return;
        }
        let Ok(mut last) = self.last_line.lock() else {
            return;
        };
        if last.elapsed() < PLAIN_EVERY {
            return;
        }
        *last = Instant::now();
        eprintln!("{}", self.plain_line());
    }

    /// `idem: orders 2026-10-12: 12.00 MiB of 40.00 MiB sent, 52000 rows, 3.10 MiB/s`.
    fn plain_line(&self) -> String {
        let sent = self.position.load(Ordering::Relaxed);
        let of = match self.total.load(Ordering::Relaxed) {
            UNKNOWN => String::new(),
            total => format!(" of {}", HumanBytes(total)),
        };
        let rate = HumanBytes(per_second(sent, self.started.elapsed()));
        let rows = self.rows.load(Ordering::Relaxed);
        format!(
            "idem: {}: {}{of} sent, {rows} rows, {rate}/s",
            self.what,
            HumanBytes(sent)
        )
    }
}

/// A count per second, whole.
fn per_second(count: u64, elapsed: Duration) -> u64 {
    let millis = u64::try_from(elapsed.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    count.saturating_mul(1000) / millis
}

fn bar(what: &str, unit: Unit, total: Option<u64>) -> ProgressBar {
    let bar = match total {
        Some(total) => ProgressBar::new(total),
        None => ProgressBar::new_spinner(),
    };
    bar.set_style(style(unit, total.is_some()));
    bar.set_prefix(what.to_string());
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A command that ends early (a refusal, a file it cannot read) leaves no
/// bar drawn under its last line.
impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

fn style(unit: Unit, known_total: bool) -> ProgressStyle {
    let template = match (unit, known_total) {
        (Unit::Bytes, true) => {
            "{prefix} [{bar:30}] {bytes}/{total_bytes}{msg}, {binary_bytes_per_sec}, ETA {eta}"
        }
        (Unit::Bytes, false) => "{prefix} {spinner} {bytes}{msg}, {binary_bytes_per_sec}",
        (Unit::Days, _) => "{prefix} [{bar:30}] {pos}/{len} days, {elapsed} elapsed, ETA {eta}",
    };
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_line_tells_bytes_of_the_total_rows_and_rate() {
        let progress = Progress::new("orders 2026-10-12", Unit::Bytes, None, false);
        progress.advance(3 * 1024 * 1024);
        progress.add_rows(52_000);
        let line = progress.plain_line();
        assert!(
            line.starts_with("idem: orders 2026-10-12: 3.00 MiB sent, 52000 rows, "),
            "{line}"
        );
        progress.set_total(12 * 1024 * 1024);
        assert!(progress.plain_line().contains("3.00 MiB of 12.00 MiB sent"));
        // A new attempt counts from the start again.
        progress.restart();
        assert!(progress.plain_line().contains(": 0 B of 12.00 MiB sent"));
        assert_eq!(per_second(5000, Duration::from_millis(2500)), 2000);
        // No time yet counts as a millisecond; a huge count saturates.
        assert_eq!(per_second(10, Duration::ZERO), 10_000);
        assert_eq!(
            per_second(u64::MAX, Duration::from_secs(1)),
            u64::MAX / 1000
        );
    }
}
