//! A large NDJSON body decoded on two threads. Decoding (JSON, types, the
//! canonical form and its digests) costs more than Postgres's binary COPY
//! of the result, so one decoding thread is what bounds a large PUT or
//! POST; two keep COPY busy. The body is cut into blocks of whole lines
//! (`LineBlocks`), the two workers take alternate blocks, each into a sink
//! of its own, and a third thread joins their sinks in the body's order
//! (`Encoding::then`): the COPY data, the counts, the content sums, the
//! bad rows with their line and record numbers, and the key order are what
//! one thread would have made.
//!
//! Only a body that one sink per block can decode is split: not under a
//! quarantine (its rejects spool in the body's order) nor while collecting
//! what rows want of the table (`schema: evolve`), and NDJSON only (a CSV
//! body has a header and quoted line ends; a JSON array one document).

use std::io::{self, BufRead};
use std::ops::ControlFlow;
use std::sync::mpsc as sync;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::encoding::{DecodeJob, Encoding};
use crate::ingest::formats::ReadError;
use crate::ingest::{read_ndjson_block, BodyFormat, LineBlock, LineBlocks};

/// Bytes of the body in one block: large enough that handing a block over
/// costs nothing next to decoding it (about 800 rows of orders), small
/// enough that a 10,000-row POST (1.6 MB) keeps both workers busy to its
/// end.
const BLOCK_BYTES: usize = 128 * 1024;

/// Whether `job` can be decoded a block at a time (see the module's doc).
pub fn can_split(job: &DecodeJob) -> bool {
    job.format == BodyFormat::Ndjson && job.quarantine.is_none() && !job.collect_wants
}

/// Decodes the records of `reader` on two worker threads while this one
/// cuts the blocks; returns the joined sink (which has sent the COPY data
/// to `chunks`, but for what `Encoding::close` sends) and why reading the
/// body stopped, if it failed.
pub fn decode_on_two_threads<'d>(
    job: &'d DecodeJob,
    reader: &mut impl BufRead,
    chunks: mpsc::Sender<io::Result<Bytes>>,
) -> (Encoding<'d>, Option<ReadError>) {
    decode_in_blocks(job, reader, chunks, BLOCK_BYTES)
}

fn decode_in_blocks<'d>(
    job: &'d DecodeJob,
    reader: &mut impl BufRead,
    chunks: mpsc::Sender<io::Result<Bytes>>,
    block_bytes: usize,
) -> (Encoding<'d>, Option<ReadError>) {
    std::thread::scope(|scope| {
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for _ in 0..2 {
            // One block waiting per worker, one sink waiting per worker:
            // memory stays within a few blocks whatever the body's size.
            let (input, blocks) = sync::sync_channel::<LineBlock>(1);
            let (sinks, output) = sync::sync_channel::<Encoding<'d>>(1);
            scope.spawn(move || decode_blocks(job, blocks, sinks));
            inputs.push(input);
            outputs.push(output);
        }
        let joiner = scope.spawn(move || join_sinks(job, outputs, chunks));
        let read_error = cut_blocks(job, reader, block_bytes, &inputs);
        drop(inputs);
        let sink = joiner.join().expect("the joining thread does not panic");
        (sink, read_error)
    })
}

/// Cuts the body into blocks, to the workers in turn, until its end, a
/// failure to read it, or a worker gone (COPY has failed).
fn cut_blocks(
    job: &DecodeJob,
    reader: &mut impl BufRead,
    block_bytes: usize,
    workers: &[sync::SyncSender<LineBlock>],
) -> Option<ReadError> {
    let mut blocks = LineBlocks::new(reader, block_bytes, job.max_record_bytes);
    for worker in workers.iter().cycle() {
        match blocks.next_block() {
            Ok(Some(block)) => {
                if worker.send(block).is_err() {
                    return None;
                }
            }
            Ok(None) => return None,
            Err(e) => return Some(ReadError::Io(e)),
        }
    }
    None
}

/// A worker: each block it is given decoded into a sink of its own.
fn decode_blocks<'d>(
    job: &'d DecodeJob,
    blocks: sync::Receiver<LineBlock>,
    sinks: sync::SyncSender<Encoding<'d>>,
) {
    for block in blocks {
        // The rows' binary form is about the size of their text, plus the
        // system columns (a block of one long line grows it as it needs).
        let capacity = (block.bytes.len() * 3 / 2).min(2 * BLOCK_BYTES);
        let mut sink = Encoding::new(job, None, capacity);
        // A block is in memory: reading it cannot fail.
        let _ = read_ndjson_block(&block, &mut sink, job.max_record_bytes);
        if sinks.send(sink).is_err() {
            return;
        }
    }
}

/// Joins the workers' sinks in the blocks' order (block n is worker n mod
/// 2's), sending the COPY data on, until the workers are done or COPY is
/// gone.
fn join_sinks<'d>(
    job: &'d DecodeJob,
    workers: Vec<sync::Receiver<Encoding<'d>>>,
    chunks: mpsc::Sender<io::Result<Bytes>>,
) -> Encoding<'d> {
    let mut joined = Encoding::new(job, Some(chunks), BLOCK_BYTES * 2);
    joined.begin_copy_data();
    for worker in workers.iter().cycle() {
        let Ok(next) = worker.recv() else { break };
        if let ControlFlow::Break(()) = joined.then(next) {
            break;
        }
    }
    joined
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;
    use crate::ids::LoadId;
    use crate::ingest::EncodeOptions;
    use crate::pipeline::intake::encoding::{Decoded, RepeatCheck};
    use crate::schema::{TableDeclaration, TableDef};

    fn job(max_record_bytes: usize) -> DecodeJob {
        let def: TableDef = serde_json::from_str::<TableDeclaration>(
            r#"{"columns":{"order_id":"bigint","ds":"date","status":"text","amount":"numeric"},
                "primary_key":["order_id"]}"#,
        )
        .unwrap()
        .into_def(crate::names::TableName::parse("orders").unwrap())
        .unwrap();
        DecodeJob {
            def,
            options: EncodeOptions {
                allowed: None,
                ds: None,
                row_id_scope: None,
                tombstones: false,
                presence: false,
            },
            repeats: RepeatCheck::Watch,
            load_id: LoadId::NONE,
            format: BodyFormat::Ndjson,
            hash_prefix: Sha256::new(),
            max_listed_errors: 5,
            max_record_bytes,
            max_row_group_bytes: crate::ingest::formats::DEFAULT_MAX_ROW_GROUP_BYTES,
            quarantine: None,
            spool_dir: None,
            collect_wants: false,
        }
    }

    /// Everything a decoding reports but the body's digest (which the
    /// caller takes as the body passes).
    fn report(d: &Decoded) -> String {
        let errors: Vec<_> = (d.errors.listed.iter())
            .map(|r| (r.line, r.record, &r.column, &r.message))
            .collect();
        format!(
            "rows {} repeated {} ordered {} hash {} periods {:?} additions {:?} \
             errors {}/{} {errors:?} read {:?}",
            d.rows_received,
            d.maybe_repeated,
            d.in_key_order,
            d.input_hash.hex(),
            d.periods,
            d.additions,
            d.errors.count,
            d.errors.problems,
            d.read_error,
        )
    }

    /// The body decoded in blocks of `block` bytes: its report and its
    /// COPY data (`None` when the data ended in an error).
    fn in_blocks(job: &DecodeJob, body: &[u8], block: usize) -> (String, Option<Vec<u8>>) {
        let (tx, mut rx) = mpsc::channel::<io::Result<Bytes>>(4);
        let copied = std::thread::spawn(move || {
            let mut data = Vec::new();
            while let Some(chunk) = rx.blocking_recv() {
                data.extend_from_slice(&chunk.ok()?);
            }
            Some(data)
        });
        let (mut sink, read_error) = decode_in_blocks(job, &mut &body[..], tx, block);
        sink.close(read_error.as_ref());
        let decoded = sink.into_decoded(read_error, String::new());
        (report(&decoded), copied.join().unwrap())
    }

    fn row(id: i64) -> String {
        format!(r#"{{"order_id":{id},"ds":"2026-10-12","status":"paid","amount":{id}.5}}"#) + "\n"
    }

    /// The body decoded by one sink, as `decode::decode_whole` does.
    fn in_one_piece(job: &DecodeJob, body: &[u8]) -> (Decoded, Option<Bytes>) {
        let (mut sink, read_error) = Encoding::read_whole_body(job, None, 0, body);
        let data = sink.close(read_error.as_ref());
        (sink.into_decoded(read_error, String::new()), data)
    }

    fn assert_same_as_one_thread(name: &str, job: &DecodeJob, body: &str) {
        let (whole, data) = in_one_piece(job, body.as_bytes());
        for block in [1, 97, 1000, 1 << 20] {
            let (report_in_blocks, data_in_blocks) = in_blocks(job, body.as_bytes(), block);
            assert_eq!(
                report_in_blocks,
                report(&whole),
                "{name}, blocks of {block}"
            );
            assert_eq!(
                data_in_blocks,
                data.as_deref().map(<[u8]>::to_vec),
                "{name}, {block}"
            );
        }
    }

    #[test]
    fn a_body_decoded_in_blocks_is_what_one_thread_makes_of_it() {
        let job = job(300);
        let ascending: String = (1..=400).map(row).collect();
        let mut unordered: Vec<String> = (1..=400).map(row).collect();
        unordered.swap(150, 151);
        let mut repeated: Vec<String> = (1..=400).map(row).collect();
        repeated[300] = row(12);
        let mut bad: Vec<String> = (1..=400).map(row).collect();
        bad[7] = "{\"order_id\": \"x\"}\n".into();
        bad[120] = "not json\n".into();
        bad[121] = "\n".into();
        bad[200] = format!("{{\"order_id\": 1, \"note\": \"{}\"}}\n", "n".repeat(400));
        bad[390] = "{\"order_id\": 3, \"colour\": \"red\"}\r\n".into();
        let bodies = [
            ("ascending", ascending.clone()),
            (
                "a byte order mark, blank lines, no last line end",
                format!("\u{feff}\n{}\r\n{}", row(1).trim_end(), row(2).trim_end()),
            ),
            ("a pair out of order", unordered.concat()),
            ("a key twice", repeated.concat()),
            ("bad rows, a long one among them", bad.concat()),
            ("empty", String::new()),
        ];
        for (name, body) in &bodies {
            assert_same_as_one_thread(name, &job, body);
        }
    }
}
