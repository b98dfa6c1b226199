//! Where log lines go: a buffer that a thread of its own writes out to
//! stderr every few milliseconds, all waiting lines at once.
//!
//! A line costs its writer a copy under a lock, and never a wake-up of
//! another thread (an access line per request at tens of thousands of
//! requests a second made the queue-per-line writer, which wakes its thread
//! for nearly every line, a fifth of the cost of a replay). The buffer is
//! bounded: past `LIMIT` a writer waits until the thread has taken the
//! lines (nothing is dropped). Lines reach stderr within `FLUSH_EVERY`, and
//! all of them before the process ends (`LogGuard`).

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait in the buffer.
const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// Buffered bytes past which the thread is woken before its time.
const WAKE_AT: usize = 256 * 1024;
/// Buffered bytes past which writers wait for the thread.
const LIMIT: usize = 4 * 1024 * 1024;

struct Lines {
    waiting: Vec<u8>,
    closed: bool,
}

struct Shared {
    lines: Mutex<Lines>,
    /// Wakes the thread: many lines waiting, or closing.
    wake: Condvar,
    /// Wakes writers waiting for room.
    room: Condvar,
}

impl Shared {
    /// The lines, even if a thread panicked while holding them (a line is
    /// appended whole or not at all).
    fn lock(&self) -> MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `MakeWriter` of the log's subscriber.
#[derive(Clone)]
pub struct BufferedLog {
    shared: Arc<Shared>,
}

/// Ends the log when dropped: every buffered line is written first.
pub struct LogGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A log writing to `out` from a thread named `idem-log`.
pub fn buffered_log(out: impl Write + Send + 'static) -> io::Result<(BufferedLog, LogGuard)> {
    let shared = Arc::new(Shared {
        lines: Mutex::new(Lines {
            waiting: Vec::new(),
            closed: false,
        }),
        wake: Condvar::new(),
        room: Condvar::new(),
    });
    let thread = std::thread::Builder::new().name("idem-log".into()).spawn({
        let shared = shared.clone();
        move || write_out(&shared, out)
    })?;
    let log = BufferedLog {
        shared: shared.clone(),
    };
    let guard = LogGuard {
        shared,
        thread: Some(thread),
    };
    Ok((log, guard))
}

/// The thread: takes the waiting lines every `FLUSH_EVERY` (or sooner when
/// many wait) and writes them, until closed and empty.
fn write_out(shared: &Shared, mut out: impl Write) {
    let mut taken = Vec::new();
    loop {
        let closed = {
            let mut lines = shared.lock();
            if lines.waiting.len() < WAKE_AT && !lines.closed {
                lines = shared
                    .wake
                    .wait_timeout(lines, FLUSH_EVERY)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            std::mem::swap(&mut lines.waiting, &mut taken);
            shared.room.notify_all();
            lines.closed
        };
        if !taken.is_empty() {
            // A log that cannot be written has nowhere to say so.
            let _ = out.write_all(&taken).and_then(|()| out.flush());
            taken.clear();
        }
        if closed && shared.lock().waiting.is_empty() {
            return;
        }
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl<'a> MakeWriter<'a> for BufferedLog {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> LineWriter<'a> {
        LineWriter {
            shared: &self.shared,
        }
    }
}

/// One event's writer (the subscriber writes a whole line at once).
pub struct LineWriter<'a> {
    shared: &'a Shared,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let mut lines = self.shared.lock();
        while lines.waiting.len() >= LIMIT && !lines.closed {
            lines = self
                .shared
                .room
                .wait(lines)
                .unwrap_or_else(|e| e.into_inner());
        }
        lines.waiting.extend_from_slice(line);
        if lines.waiting.len() >= WAKE_AT {
            self.shared.wake.notify_one();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_is_written_in_order_by_the_time_the_guard_drops() {
        let out = Captured::default();
        let (log, guard) = buffered_log(out.clone()).unwrap();
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000 {
                        let line = format!("{t} {i:0>200}\n");
                        log.make_writer().write_all(line.as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        drop(guard);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let mut next = [0u32; 4];
        for line in text.lines() {
            let (t, i) = line.split_once(' ').unwrap();
            let t: usize = t.parse().unwrap();
            assert_eq!(
                i.parse::<u32>().unwrap(),
                next[t],
                "lines of one thread in order"
            );
            next[t] += 1;
        }
        assert_eq!(next, [20_000; 4], "no line lost");
    }

    #[test]
    fn a_line_reaches_the_output_within_moments_without_more_lines() {
        let out = Captured::default();
        let (log, _guard) = buffered_log(out.clone()).unwrap();
        log.make_writer().write_all(b"alone\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while out.0.lock().unwrap().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the line was never written"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(&out.0.lock().unwrap()[..], b"alone\n");
    }
}
