//! Postgres's binary COPY format: the header, the tuple framing (a field
//! count, then each field's length, -1 for NULL, and its bytes), the
//! trailer, a writer and a reader. Nothing else in idem writes or reads
//! that framing; the values' own binary forms belong to their types.

/// Binary COPY starts with this signature, flags and header extension length ...
pub const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// ... and ends with a tuple of field count -1.
pub const TRAILER: &[u8] = &[0xff, 0xff];

/// The most bytes Postgres holds in one value: a varlena is at most 1 GB
/// (`MaxAllocSize`, 2^30 - 1 bytes) including its 4-byte header.
pub const MAX_FIELD_BYTES: usize = (1 << 30) - 1 - 4;

/// The length word of a NULL field.
const NULL_LENGTH: i32 = -1;

/// A field's length word, for a field Postgres can hold.
pub fn field_length(len: usize) -> Result<[u8; 4], String> {
    if len > MAX_FIELD_BYTES {
        return Err(format!(
            "is {len} bytes long; Postgres holds at most {MAX_FIELD_BYTES} bytes in one value"
        ));
    }
    let len = i32::try_from(len).map_err(|_| format!("is {len} bytes long"))?;
    Ok(len.to_be_bytes())
}

/// Appends tuples to COPY data. It writes no header or trailer: the data
/// is sent in parts, and the caller sends those once.
pub struct TupleWriter<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> TupleWriter<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Self { out }
    }

    /// Starts a tuple of `fields` fields.
    pub fn tuple(&mut self, fields: i16) {
        self.out.extend_from_slice(&fields.to_be_bytes());
    }

    /// A field (`None` for NULL), refused when Postgres cannot hold it:
    /// then nothing is written.
    pub fn field(&mut self, value: Option<&[u8]>) -> Result<(), String> {
        match value {
            None => self.null(),
            Some(bytes) => {
                self.out.extend_from_slice(&field_length(bytes.len())?);
                self.out.extend_from_slice(bytes);
            }
        }
        Ok(())
    }

    /// A NULL field.
    pub fn null(&mut self) {
        self.out.extend_from_slice(&NULL_LENGTH.to_be_bytes());
    }

    /// A field whose size its type fixes (a scalar, a uuid, a digest), so
    /// that it cannot fail.
    pub fn fixed<const N: usize>(&mut self, bytes: &[u8; N]) {
        const { assert!(N <= 64, "a fixed field is a scalar, a uuid or a digest") };
        let len = i32::try_from(N).expect("N <= 64, asserted at compile time");
        self.out.extend_from_slice(&len.to_be_bytes());
        self.out.extend_from_slice(bytes);
    }

    /// Starts a field of `len` bytes, which the caller then appends to the
    /// returned data (a value whose binary form is built in pieces).
    pub fn field_of(self, len: usize) -> Result<&'a mut Vec<u8>, String> {
        self.out.extend_from_slice(&field_length(len)?);
        Ok(self.out)
    }
}

/// COPY data that does not parse as binary COPY.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed;

/// Reads COPY data (header, tuples, trailer) front to back.
pub struct TupleReader<'a> {
    rest: &'a [u8],
}

impl<'a> TupleReader<'a> {
    /// A reader of `copy`, past its header.
    pub fn new(copy: &'a [u8]) -> Result<Self, Malformed> {
        let rest = copy.strip_prefix(HEADER).ok_or(Malformed)?;
        Ok(Self { rest })
    }

    /// Starts the next tuple, which must have `fields` fields: `false` at
    /// the trailer.
    pub fn tuple(&mut self, fields: usize) -> Result<bool, Malformed> {
        let count = i16::from_be_bytes(*self.take::<2>()?);
        if count == -1 {
            return Ok(false);
        }
        if usize::try_from(count).ok() != Some(fields) {
            return Err(Malformed);
        }
        Ok(true)
    }

    /// The next field of the tuple (`None` for NULL).
    pub fn field(&mut self) -> Result<Option<&'a [u8]>, Malformed> {
        let length = i32::from_be_bytes(*self.take::<4>()?);
        match usize::try_from(length) {
            Ok(n) => {
                let (value, rest) = self.rest.split_at_checked(n).ok_or(Malformed)?;
                self.rest = rest;
                Ok(Some(value))
            }
            Err(_) if length == NULL_LENGTH => Ok(None),
            Err(_) => Err(Malformed),
        }
    }

    fn take<const N: usize>(&mut self) -> Result<&'a [u8; N], Malformed> {
        let (head, rest) = self.rest.split_first_chunk::<N>().ok_or(Malformed)?;
        self.rest = rest;
        Ok(head)
    }
}

/// Calls `f` with each field of each tuple of `copy` (`None` for NULL) and
/// its index in the tuple, which must have `fields` fields.
pub fn for_each_field<'a, E: From<Malformed>>(
    copy: &'a [u8],
    fields: usize,
    mut f: impl FnMut(usize, Option<&'a [u8]>) -> Result<(), E>,
) -> Result<(), E> {
    let mut reader = TupleReader::new(copy)?;
    while reader.tuple(fields)? {
        for i in 0..fields {
            f(i, reader.field()?)?;
        }
    }
    Ok(())
}

/// COPY data as Postgres sends it, in parts that need not end where a
/// tuple does: the header checked once, then each whole tuple read in turn,
/// a tuple's first part kept until the rest arrives.
pub struct TupleStream {
    fields: usize,
    pending: Vec<u8>,
    header_read: bool,
    ended: bool,
}

impl TupleStream {
    /// A stream of tuples of `fields` fields.
    pub fn new(fields: usize) -> Self {
        Self {
            fields,
            pending: Vec::new(),
            header_read: false,
            ended: false,
        }
    }

    /// Calls `f` with a reader of each whole tuple that `part` completes,
    /// to read its fields with.
    pub fn feed<E: From<Malformed>>(
        &mut self,
        part: &[u8],
        mut f: impl FnMut(&mut TupleReader<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        // Postgres sends a tuple a message: nothing is pending, nothing copied.
        if self.pending.is_empty() {
            let used = self.whole_tuples(part, &mut f)?;
            self.pending.extend_from_slice(&part[used..]);
        } else {
            let mut data = std::mem::take(&mut self.pending);
            data.extend_from_slice(part);
            let used = self.whole_tuples(&data, &mut f)?;
            data.drain(..used);
            self.pending = data;
        }
        Ok(())
    }

    /// Whether the data ended with the trailer, and nothing after it.
    pub fn finish(&self) -> Result<(), Malformed> {
        match self.ended && self.pending.is_empty() {
            true => Ok(()),
            false => Err(Malformed),
        }
    }

    /// Reads the whole tuples at the front of `data`; the bytes read.
    fn whole_tuples<E: From<Malformed>>(
        &mut self,
        data: &[u8],
        f: &mut impl FnMut(&mut TupleReader<'_>) -> Result<(), E>,
    ) -> Result<usize, E> {
        let mut at = 0;
        if !self.header_read {
            if data.len() < HEADER.len() {
                return Ok(0);
            }
            TupleReader::new(data)?;
            at = HEADER.len();
            self.header_read = true;
        }
        while !self.ended {
            match next_tuple(&data[at..], self.fields)? {
                None => break,
                Some(Next::Trailer) => {
                    at += TRAILER.len();
                    self.ended = true;
                }
                Some(Next::Tuple(size)) => {
                    // Past the field count, which `next_tuple` checked.
                    let rest = &data[at + 2..at + size];
                    at += size;
                    f(&mut TupleReader { rest })?;
                }
            }
        }
        if self.ended && at < data.len() {
            return Err(Malformed.into());
        }
        Ok(at)
    }
}

/// What starts COPY data past its header.
enum Next {
    /// A whole tuple of this many bytes.
    Tuple(usize),
    Trailer,
}

/// The tuple of `fields` fields (or the trailer) at the front of `data`;
/// `None` when `data` ends before it does.
fn next_tuple(data: &[u8], fields: usize) -> Result<Option<Next>, Malformed> {
    let Some(count) = data.first_chunk::<2>() else {
        return Ok(None);
    };
    let count = i16::from_be_bytes(*count);
    if count == -1 {
        return Ok(Some(Next::Trailer));
    }
    if usize::try_from(count).ok() != Some(fields) {
        return Err(Malformed);
    }
    let mut at = 2;
    for _ in 0..fields {
        let Some(length) = data.get(at..).and_then(<[u8]>::first_chunk::<4>) else {
            return Ok(None);
        };
        at += 4;
        let length = i32::from_be_bytes(*length);
        match usize::try_from(length) {
            Ok(n) => at += n,
            Err(_) if length == NULL_LENGTH => {}
            Err(_) => return Err(Malformed),
        }
    }
    Ok((at <= data.len()).then_some(Next::Tuple(at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuples(rows: &[&[Option<&[u8]>]]) -> Vec<u8> {
        let mut out = HEADER.to_vec();
        let mut w = TupleWriter::new(&mut out);
        for row in rows {
            w.tuple(i16::try_from(row.len()).unwrap());
            for field in *row {
                w.field(*field).unwrap();
            }
        }
        out.extend_from_slice(TRAILER);
        out
    }

    #[test]
    fn fields_are_framed_as_postgres_reads_them() {
        let mut out = Vec::new();
        let mut w = TupleWriter::new(&mut out);
        w.tuple(3);
        w.field(Some(b"ab")).unwrap();
        w.null();
        w.fixed(&7i32.to_be_bytes());
        let expected: &[u8] = &[
            0, 3, 0, 0, 0, 2, b'a', b'b', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 4, 0, 0, 0, 7,
        ];
        assert_eq!(out, expected);
    }

    #[test]
    fn written_tuples_read_back() {
        let copy = tuples(&[&[Some(b"x"), None], &[Some(b""), Some(b"yz")]]);
        let mut seen = Vec::new();
        for_each_field::<Malformed>(&copy, 2, |i, f| {
            seen.push((i, f.map(<[u8]>::to_vec)));
            Ok(())
        })
        .unwrap();
        let expected = vec![
            (0, Some(b"x".to_vec())),
            (1, None),
            (0, Some(Vec::new())),
            (1, Some(b"yz".to_vec())),
        ];
        assert_eq!(seen, expected);
    }

    #[test]
    fn malformed_data_is_refused() {
        let copy = tuples(&[&[Some(b"x")]]);
        let read = |data: &[u8], fields| for_each_field::<Malformed>(data, fields, |_, _| Ok(()));
        assert_eq!(read(&copy, 2), Err(Malformed));
        assert_eq!(read(&copy[..copy.len() - 3], 1), Err(Malformed));
        assert_eq!(read(&copy[1..], 1), Err(Malformed));
        assert_eq!(read(&copy, 1), Ok(()));
    }

    #[test]
    fn tuples_split_anywhere_read_as_whole_ones() {
        let copy = tuples(&[&[Some(b"x"), None], &[Some(b""), Some(b"yz")]]);
        let whole = |parts: &[&[u8]]| {
            let mut stream = TupleStream::new(2);
            let mut seen = Vec::new();
            for part in parts {
                stream
                    .feed::<Malformed>(part, |t| {
                        seen.push((
                            t.field()?.map(<[u8]>::to_vec),
                            t.field()?.map(<[u8]>::to_vec),
                        ));
                        Ok(())
                    })
                    .unwrap();
            }
            (seen, stream.finish())
        };
        let expected = vec![
            (Some(b"x".to_vec()), None),
            (Some(Vec::new()), Some(b"yz".to_vec())),
        ];
        assert_eq!(whole(&[&copy]), (expected.clone(), Ok(())));
        for cut in 1..copy.len() {
            let (a, b) = copy.split_at(cut);
            assert_eq!(whole(&[a, b]), (expected.clone(), Ok(())), "cut at {cut}");
        }
        assert_eq!(whole(&[&copy[..copy.len() - 1]]).1, Err(Malformed));
    }

    #[test]
    fn a_field_postgres_cannot_hold_is_refused() {
        assert_eq!(field_length(3), Ok([0, 0, 0, 3]));
        assert!(field_length(MAX_FIELD_BYTES).is_ok());
        let err = field_length(MAX_FIELD_BYTES + 1).unwrap_err();
        assert!(err.contains("at most 1073741819 bytes"), "{err}");
        assert!(field_length(usize::MAX).is_err());
    }
}
