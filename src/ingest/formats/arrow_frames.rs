//! An Arrow IPC stream read a message at a time, each checked before
//! arrow-rs decodes it: its metadata and body under their bounds, and a
//! record batch's size once its buffers are uncompressed (each compressed
//! buffer states that size in its first 8 bytes) under
//! `IDEM_MAX_ROW_GROUP_BYTES`, as a Parquet row group's is. arrow-rs
//! allocates what a compressed buffer says it unpacks to before it unpacks
//! it, so a stream of a few bytes could otherwise ask for terabytes.
//!
//! A message is `0xFFFFFFFF`, its metadata's length (i32, little-endian),
//! the metadata (a flatbuffer `Message`), then `bodyLength` bytes of body;
//! streams from before Arrow 0.15 leave out the `0xFFFFFFFF`. A length of 0,
//! or the body's end, ends the stream.

use std::collections::HashMap;
use std::io::{self, Read};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_ipc::reader::{read_dictionary, read_record_batch};
use arrow_ipc::{MessageHeader, RecordBatch as BatchHeader};
use arrow_schema::SchemaRef;

use super::columnar_errors::{arrow_error, broken};
use super::record::{Chunk, ReadError};

const NOT_A_STREAM: &str = "the body is not an Arrow IPC stream";
const BREAKS_OFF: &str = "the Arrow stream breaks off";

/// An Arrow stream's schema and record batches, decoded from checked
/// messages (dictionaries kept for the batches that refer to them).
pub(super) struct ArrowStream<R> {
    messages: CheckedMessages<R>,
    schema: SchemaRef,
    dictionaries: HashMap<i64, ArrayRef>,
}

impl<R: Read> ArrowStream<R> {
    /// The stream, once its first message, its schema, is read.
    pub fn start(reader: R, max_batch_bytes: u64) -> Result<Self, ReadError> {
        let mut messages = CheckedMessages::new(reader, max_batch_bytes);
        let Some(first) = messages.next_message(1)? else {
            return Err(broken(1, NOT_A_STREAM, "it is empty"));
        };
        let message = first.message();
        let schema = message
            .header_as_schema()
            .ok_or_else(|| broken(1, NOT_A_STREAM, "it does not start with a schema"))?;
        let schema = arrow_ipc::convert::try_fb_to_schema(schema)
            .map_err(|e| arrow_error(e, 1, NOT_A_STREAM))?;
        Ok(ArrowStream {
            messages,
            schema: Arc::new(schema),
            dictionaries: HashMap::new(),
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The next record batch, or `None` at the stream's end; `line` is the
    /// row its first row would be, where a break is reported.
    pub fn next_batch(&mut self, line: u64) -> Result<Option<RecordBatch>, ReadError> {
        while let Some(frame) = self.messages.next_message(line)? {
            let message = frame.message();
            let version = message.version();
            let decoded = match message.header_type() {
                MessageHeader::RecordBatch => {
                    let header = message.header_as_record_batch().expect("its header");
                    let schema = self.schema.clone();
                    read_record_batch(
                        &frame.body,
                        header,
                        schema,
                        &self.dictionaries,
                        None,
                        &version,
                    )
                    .map(Some)
                }
                MessageHeader::DictionaryBatch => {
                    let header = message.header_as_dictionary_batch().expect("its header");
                    read_dictionary(
                        &frame.body,
                        header,
                        &self.schema,
                        &mut self.dictionaries,
                        &version,
                    )
                    .map(|()| None)
                }
                MessageHeader::NONE => Ok(None),
                other => {
                    let detail = format!("a {other:?} message has no place in a stream of rows");
                    return Err(broken(line, BREAKS_OFF, &detail));
                }
            };
            if let Some(batch) = decoded.map_err(|e| arrow_error(e, line, BREAKS_OFF))? {
                return Ok(Some(batch));
            }
        }
        Ok(None)
    }
}

/// One message: its metadata (a verified flatbuffer) and its body.
struct Frame {
    metadata: Vec<u8>,
    body: Buffer,
}

impl Frame {
    fn message(&self) -> arrow_ipc::Message<'_> {
        arrow_ipc::root_as_message(&self.metadata).expect("verified when read")
    }
}

/// The continuation marker before each message's length.
const CONTINUATION: [u8; 4] = [0xFF; 4];

/// The most metadata one message may declare: a schema of 1,600 columns
/// takes well under 1 MiB.
const MAX_METADATA_BYTES: usize = 16 << 20;

/// A compressed buffer's stated length meaning "stored uncompressed".
const STORED_UNCOMPRESSED: i64 = -1;

/// The messages of a stream, each whole and checked.
struct CheckedMessages<R> {
    reader: R,
    /// The most a record batch may hold, uncompressed.
    max_batch_bytes: u64,
    record_batches: usize,
    dictionary_batches: usize,
}

impl<R: Read> CheckedMessages<R> {
    fn new(reader: R, max_batch_bytes: u64) -> Self {
        CheckedMessages {
            reader,
            max_batch_bytes,
            record_batches: 0,
            dictionary_batches: 0,
        }
    }

    /// The next message, or `None` at the stream's end. `line` is the row
    /// a break here is reported at.
    fn next_message(&mut self, line: u64) -> Result<Option<Frame>, ReadError> {
        let Some(length) = self.metadata_length(line)? else {
            return Ok(None);
        };
        let mut metadata = Vec::with_capacity(length);
        self.read_exactly(&mut metadata, length, line)?;
        let (body_length, chunk) = self.body_of(&metadata, line)?;
        if let Some(chunk) = chunk {
            check_size(chunk, body_length, self.max_batch_bytes)?;
        }
        let mut body = Vec::new();
        let body_length = usize::try_from(body_length).unwrap_or(usize::MAX);
        self.read_exactly(&mut body, body_length, line)?;
        if let Some(chunk) = chunk {
            let unpacked = unpacked_size(&metadata, &body)
                .map_err(|detail| broken(line, BREAKS_OFF, &detail))?;
            check_size(chunk, unpacked, self.max_batch_bytes)?;
        }
        Ok(Some(Frame {
            metadata,
            body: Buffer::from_vec(body),
        }))
    }

    /// The length of the next message's metadata; `None` at the end.
    fn metadata_length(&mut self, line: u64) -> Result<Option<usize>, ReadError> {
        let mut word = [0u8; 4];
        if !self.read_word(&mut word)? {
            return Ok(None);
        }
        if word == CONTINUATION && !self.read_word(&mut word)? {
            return Ok(None);
        }
        let length = i32::from_le_bytes(word);
        match usize::try_from(length) {
            Ok(0) => Ok(None),
            Ok(length) if length <= MAX_METADATA_BYTES => Ok(Some(length)),
            _ => Err(broken(
                line,
                BREAKS_OFF,
                &format!("a message declares {length} bytes of metadata"),
            )),
        }
    }

    /// Reads 4 bytes into `word`; false when the body ended before them.
    fn read_word(&mut self, word: &mut [u8; 4]) -> Result<bool, ReadError> {
        let mut filled = 0;
        while filled < word.len() {
            match self.reader.read(&mut word[filled..]) {
                Ok(0) if filled == 0 => return Ok(false),
                Ok(0) => return Err(short(0)),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
        Ok(true)
    }

    /// Appends exactly `length` bytes to `out`, holding no more than
    /// arrives (a length is checked before this, but the body may end
    /// short of it).
    fn read_exactly(
        &mut self,
        out: &mut Vec<u8>,
        length: usize,
        line: u64,
    ) -> Result<(), ReadError> {
        let wanted = u64::try_from(length).unwrap_or(u64::MAX);
        let read = (&mut self.reader).take(wanted).read_to_end(out)?;
        if read < length {
            return Err(short(line));
        }
        Ok(())
    }

    /// The message's body length, and the chunk it is when it holds rows
    /// (counted here, so a refusal names it).
    fn body_of(&mut self, metadata: &[u8], line: u64) -> Result<(u64, Option<Chunk>), ReadError> {
        let message = arrow_ipc::root_as_message(metadata).map_err(|e| {
            broken(
                line,
                BREAKS_OFF,
                &format!("a message's metadata is broken: {e}"),
            )
        })?;
        let body_length = u64::try_from(message.bodyLength()).map_err(|_| {
            broken(
                line,
                BREAKS_OFF,
                "a message declares a negative body length",
            )
        })?;
        let chunk = match message.header_type() {
            MessageHeader::RecordBatch => {
                self.record_batches += 1;
                Some(Chunk::RecordBatch(self.record_batches))
            }
            MessageHeader::DictionaryBatch => {
                self.dictionary_batches += 1;
                Some(Chunk::DictionaryBatch(self.dictionary_batches))
            }
            _ => None,
        };
        Ok((body_length, chunk))
    }
}

fn check_size(chunk: Chunk, bytes: u64, max: u64) -> Result<(), ReadError> {
    if bytes > max {
        return Err(ReadError::ChunkTooLarge { chunk, bytes, max });
    }
    Ok(())
}

fn short(line: u64) -> ReadError {
    broken(line.max(1), BREAKS_OFF, "the body ends inside a message")
}

/// What a batch message's buffers hold once uncompressed: its body's
/// length when it is not compressed, else the sum of the lengths its
/// compressed buffers state.
fn unpacked_size(metadata: &[u8], body: &[u8]) -> Result<u64, String> {
    let message = arrow_ipc::root_as_message(metadata).map_err(|e| e.to_string())?;
    let batch: Option<BatchHeader> = match message.header_type() {
        MessageHeader::RecordBatch => message.header_as_record_batch(),
        MessageHeader::DictionaryBatch => {
            message.header_as_dictionary_batch().and_then(|d| d.data())
        }
        _ => None,
    };
    let Some(batch) = batch else {
        return Ok(u64::try_from(body.len()).unwrap_or(u64::MAX));
    };
    if batch.compression().is_none() {
        return Ok(u64::try_from(body.len()).unwrap_or(u64::MAX));
    }
    let mut total: u64 = 0;
    for buffer in batch.buffers().into_iter().flatten() {
        total = total.saturating_add(stated_size(body, buffer.offset(), buffer.length())?);
    }
    Ok(total)
}

/// The unpacked size a compressed buffer at `offset` of `length` bytes
/// states (0 for an empty buffer).
fn stated_size(body: &[u8], offset: i64, length: i64) -> Result<u64, String> {
    if length == 0 {
        return Ok(0);
    }
    let place = |n: i64| usize::try_from(n).ok();
    let (Some(start), Some(length)) = (place(offset), place(length)) else {
        return Err(format!("a buffer lies at {offset} ({length} bytes)"));
    };
    let prefix = start
        .checked_add(8)
        .filter(|&end| length >= 8 && end <= body.len())
        .and_then(|end| body.get(start..end))
        .ok_or_else(|| format!("a compressed buffer at {start} lies outside its message"))?;
    let stated = i64::from_le_bytes(prefix.try_into().expect("8 bytes"));
    match stated {
        STORED_UNCOMPRESSED => Ok(u64::try_from(length - 8).unwrap_or(u64::MAX)),
        stated => u64::try_from(stated)
            .map_err(|_| format!("a compressed buffer states {stated} bytes unpacked")),
    }
}
