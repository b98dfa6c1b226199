//! An NDJSON body cut into blocks of whole lines, so that several threads
//! can decode it at once, each block knowing the number of its first line.
//! A line longer than the record bound travels alone, cut at the bound
//! (its reader reports it too large, as it would in one piece).

use std::io::{self, BufRead, Read};

/// The UTF-8 byte order mark, which is no part of a body (see
/// `read_records`).
const BYTE_ORDER_MARK: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Whole lines of a body, in order.
pub struct LineBlock {
    pub bytes: Vec<u8>,
    /// The number of the block's first line in the body (from 1).
    pub first_line: u64,
}

/// Cuts a body into blocks of about `target` bytes, each ending with a
/// line's end (but the body's last); no block holds more than `target`
/// bytes and one line of at most `max_record + 1` bytes.
pub struct LineBlocks<R> {
    reader: R,
    target: usize,
    max_record: usize,
    /// The start of the next block's first line, read with the last block.
    carry: Vec<u8>,
    next_line: u64,
    started: bool,
}

impl<R: BufRead> LineBlocks<R> {
    pub fn new(reader: R, target: usize, max_record: usize) -> Self {
        LineBlocks {
            reader,
            target: target.max(1),
            max_record,
            carry: Vec::new(),
            next_line: 1,
            started: false,
        }
    }

    /// The reader, past what the blocks took.
    pub fn into_inner(self) -> R {
        self.reader
    }

    /// The next block; `None` at the end of the body.
    pub fn next_block(&mut self) -> io::Result<Option<LineBlock>> {
        if !self.started {
            self.started = true;
            self.skip_byte_order_mark()?;
        }
        let mut block = std::mem::take(&mut self.carry);
        block.reserve(self.target);
        // Fill to the target, then cut after the last line's end.
        while block.len() < self.target {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok((!block.is_empty()).then(|| self.emit(block, false)));
            }
            let take = buf.len().min(self.target - block.len());
            block.extend_from_slice(&buf[..take]);
            self.reader.consume(take);
        }
        if let Some(end) = memchr::memrchr(b'\n', &block) {
            self.carry = block.split_off(end + 1);
            return Ok(Some(self.emit(block, false)));
        }
        self.one_long_line(block).map(Some)
    }

    /// A block that is one line longer than the target: read on to the
    /// line's end, or to the record bound (then the rest of the line is
    /// dropped).
    fn one_long_line(&mut self, mut block: Vec<u8>) -> io::Result<LineBlock> {
        loop {
            if block.len() > self.max_record {
                drop_rest_of_line(&mut self.reader)?;
                return Ok(self.emit(block, true));
            }
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(self.emit(block, false));
            }
            // At most the bound: checked above (which may be usize::MAX).
            let room = self.max_record.saturating_add(1) - block.len();
            let window = &buf[..buf.len().min(room)];
            if let Some(end) = memchr::memchr(b'\n', window) {
                block.extend_from_slice(&window[..=end]);
                self.reader.consume(end + 1);
                return Ok(self.emit(block, false));
            }
            let take = window.len();
            block.extend_from_slice(window);
            self.reader.consume(take);
        }
    }

    /// `bytes` as the next block; `cut` when its line's end was dropped.
    fn emit(&mut self, bytes: Vec<u8>, cut: bool) -> LineBlock {
        let first_line = self.next_line;
        let ends = memchr::memchr_iter(b'\n', &bytes).count() + usize::from(cut);
        let ends = u64::try_from(ends).expect("a block's line count fits in u64");
        self.next_line = self.next_line.saturating_add(ends);
        LineBlock { bytes, first_line }
    }

    fn skip_byte_order_mark(&mut self) -> io::Result<()> {
        let mut head = Vec::with_capacity(BYTE_ORDER_MARK.len());
        (&mut self.reader).take(3).read_to_end(&mut head)?;
        if head != BYTE_ORDER_MARK {
            self.carry = head;
        }
        Ok(())
    }
}

/// Reads and drops what is left of the current line, its end included: the
/// part of a line past the record bound, which no one reads.
pub(super) fn drop_rest_of_line(reader: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(end) = memchr::memchr(b'\n', buf) {
            reader.consume(end + 1);
            return Ok(());
        }
        let n = buf.len();
        reader.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(body: &[u8], target: usize, max_record: usize) -> Vec<(u64, String)> {
        let mut cut = LineBlocks::new(body, target, max_record);
        let mut out = Vec::new();
        while let Some(block) = cut.next_block().unwrap() {
            out.push((block.first_line, String::from_utf8(block.bytes).unwrap()));
        }
        out
    }

    #[test]
    fn blocks_end_at_line_ends_and_know_their_first_line() {
        let got = blocks(b"a1\nb22\nc333\nd\n\ne", 6, 100);
        assert_eq!(
            got,
            [
                (1, "a1\n".to_string()),
                (2, "b22\n".to_string()),
                (3, "c333\n".to_string()),
                (4, "d\n\ne".to_string()),
            ]
        );
    }

    #[test]
    fn a_line_over_the_record_bound_travels_cut_and_alone() {
        let got = blocks(b"ok\n0123456789abcdef\nnext\n", 4, 8);
        assert_eq!(
            got,
            [
                (1, "ok\n".to_string()),
                (2, "012345678".to_string()),
                (3, "next\n".to_string()),
            ]
        );
    }

    #[test]
    fn a_long_line_within_the_bound_stays_whole() {
        let got = blocks(b"0123456789\nx\n", 4, 10);
        assert_eq!(
            got,
            [(1, "0123456789\n".to_string()), (2, "x\n".to_string())]
        );
    }

    #[test]
    fn no_bound_on_records_cuts_nothing() {
        let got = blocks(b"0123456789\nx", 4, usize::MAX);
        assert_eq!(got, [(1, "0123456789\n".to_string()), (2, "x".to_string())]);
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        let got = blocks(b"\xEF\xBB\xBFa\nb\n", 100, 100);
        assert_eq!(got, [(1, "a\nb\n".to_string())]);
    }
}
