//! Channels: a producer's named stream of POSTs, each carrying the offset
//! of what it sends (a Kafka offset, a WAL position, a line number). The
//! names, the offset kinds, how an offset is read and how two compare, and
//! what a POST on a channel came to; the store keeps each channel's
//! committed offset, the pipeline checks a POST's against it.

use std::fmt;

use crate::names::TableName;
use crate::problem::ProblemCode;

/// The longest channel name (Kafka's topic names and Postgres's slot names
/// fit), and the longest text offset, in bytes.
const MAX_NAME_LEN: usize = 128;
const MAX_TEXT_OFFSET_LEN: usize = 256;

/// Why a channel parameter is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// A name, an offset or an `offset_kind` that cannot be read.
    #[error("{0}")]
    Invalid(String),
    /// An `offset_kind` other than the one the channel's first commit fixed.
    #[error("channel {name:?} takes {stored} offsets, not {asked}")]
    KindMismatch {
        name: String,
        stored: OffsetKind,
        asked: OffsetKind,
    },
}

impl ChannelError {
    pub fn code(&self) -> ProblemCode {
        match self {
            ChannelError::Invalid(_) => ProblemCode::InvalidRequest,
            ChannelError::KindMismatch { .. } => ProblemCode::ChannelKind,
        }
    }
}

/// A channel's name: `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelName(String);

impl ChannelName {
    pub fn parse(text: &str) -> Result<Self, ChannelError> {
        let bytes = text.as_bytes();
        let valid = !bytes.is_empty()
            && bytes.len() <= MAX_NAME_LEN
            && bytes[0].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid {
            let shown: String = text.chars().take(40).collect();
            return Err(ChannelError::Invalid(format!(
                "channel name {shown:?} must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$"
            )));
        }
        Ok(ChannelName(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ChannelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a channel's offsets are read and ordered; fixed by its first commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetKind {
    /// Decimal digits, 0 to 2^64-1, compared as numbers.
    Integer,
    /// A Postgres LSN, `X/Y` in hex, compared as the 64-bit position.
    Lsn,
    /// 1 to 256 bytes, compared byte-wise.
    Text,
}

impl OffsetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OffsetKind::Integer => "integer",
            OffsetKind::Lsn => "lsn",
            OffsetKind::Text => "text",
        }
    }

    pub fn parse(text: &str) -> Result<Self, ChannelError> {
        [OffsetKind::Integer, OffsetKind::Lsn, OffsetKind::Text]
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| {
                let shown: String = text.chars().take(40).collect();
                ChannelError::Invalid(format!("offset_kind {shown:?} is not integer, lsn or text"))
            })
    }

    /// The kind an offset looks like: digits are an integer, `X/Y` in hex
    /// an LSN, anything else text.
    pub fn infer(offset: &str) -> Self {
        if is_digits(offset) {
            OffsetKind::Integer
        } else if lsn_parts(offset).is_some() {
            OffsetKind::Lsn
        } else {
            OffsetKind::Text
        }
    }
}

impl fmt::Display for OffsetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An offset read as its kind. Two offsets of one kind compare as the kind
/// says (the derived order compares the values within a variant; offsets
/// of different kinds are never compared).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Offset {
    Integer(u64),
    Lsn(u64),
    /// Compared byte-wise, as `String`'s order does.
    Text(String),
}

impl Offset {
    pub fn parse(kind: OffsetKind, text: &str) -> Result<Self, ChannelError> {
        let parsed = match kind {
            OffsetKind::Integer => is_digits(text)
                .then(|| text.parse().ok())
                .flatten()
                .map(Offset::Integer),
            OffsetKind::Lsn => lsn_parts(text).map(|(hi, lo)| Offset::Lsn((hi << 32) | lo)),
            OffsetKind::Text => is_text_offset(text).then(|| Offset::Text(text.to_string())),
        };
        parsed.ok_or_else(|| {
            let shown: String = text.chars().take(40).collect();
            ChannelError::Invalid(format!("offset {shown:?} is not {}", kind_form(kind)))
        })
    }

    pub fn kind(&self) -> OffsetKind {
        match self {
            Offset::Integer(_) => OffsetKind::Integer,
            Offset::Lsn(_) => OffsetKind::Lsn,
            Offset::Text(_) => OffsetKind::Text,
        }
    }
}

/// The offset's one written form (the one stored and answered): an integer
/// without leading zeros, an LSN as Postgres prints it (`16/B374D848`).
impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Offset::Integer(n) => write!(f, "{n}"),
            Offset::Lsn(lsn) => write!(f, "{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF),
            Offset::Text(text) => f.write_str(text),
        }
    }
}

fn kind_form(kind: OffsetKind) -> &'static str {
    match kind {
        OffsetKind::Integer => "an integer offset (decimal digits, 0 to 18446744073709551615)",
        OffsetKind::Lsn => "an lsn offset (X/Y, each 1 to 8 hex digits)",
        OffsetKind::Text => "a text offset (1 to 256 bytes, no NUL)",
    }
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// The two halves of `X/Y`, each 1 to 8 hex digits.
fn lsn_parts(text: &str) -> Option<(u64, u64)> {
    let (hi, lo) = text.split_once('/')?;
    let half = |part: &str| {
        let hex =
            !part.is_empty() && part.len() <= 8 && part.bytes().all(|b| b.is_ascii_hexdigit());
        hex.then(|| u64::from_str_radix(part, 16).ok()).flatten()
    };
    Some((half(hi)?, half(lo)?))
}

/// Postgres's text holds no NUL.
/// A text offset: 1 to 256 bytes, no NUL, and no U+FFFD, the character a
/// query's bytes that are not UTF-8 decode to: two offsets sent as other
/// bytes must not become one.
fn is_text_offset(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_TEXT_OFFSET_LEN
        && !text.contains('\0')
        && !text.contains(char::REPLACEMENT_CHARACTER)
}

/// A POST's channel parameters: the channel, the offset as sent, and the
/// kind it asked for, if any.
#[derive(Clone, Debug)]
pub struct ChannelOffset {
    pub name: ChannelName,
    pub offset: String,
    pub asked: Option<OffsetKind>,
}

impl ChannelOffset {
    /// Checks what can be checked before the channel is read: the name, and
    /// the offset against the kind asked for (or some kind, when none is).
    pub fn parse(name: &str, offset: &str, asked: Option<&str>) -> Result<Self, ChannelError> {
        let name = ChannelName::parse(name)?;
        let asked = asked.map(OffsetKind::parse).transpose()?;
        let kind = asked.unwrap_or_else(|| OffsetKind::infer(offset));
        Offset::parse(kind, offset)?;
        Ok(ChannelOffset {
            name,
            offset: offset.to_string(),
            asked,
        })
    }

    /// The kind a new channel takes: the one asked for, else the offset's look.
    pub fn first_kind(&self) -> OffsetKind {
        self.asked
            .unwrap_or_else(|| OffsetKind::infer(&self.offset))
    }

    /// The offset read as the channel's kind; refused when another kind was
    /// asked for (409) or it is not of that kind (400).
    pub fn offset_as(&self, stored: OffsetKind) -> Result<Offset, ChannelError> {
        match self.asked {
            Some(asked) if asked != stored => Err(ChannelError::KindMismatch {
                name: self.name.to_string(),
                stored,
                asked,
            }),
            _ => Offset::parse(stored, &self.offset),
        }
    }

    /// What names this write where an Idempotency-Key would: in the ledger,
    /// and in the row ids of a table without a primary key.
    pub fn write_key(&self) -> String {
        format!("channel:{}@{}", self.name, self.offset)
    }
}

/// The offset a written POST committed on its channel.
#[derive(Clone, Debug)]
pub struct ChannelCommitted {
    pub name: ChannelName,
    pub offset: Offset,
}

/// A POST whose offset is not after its channel's: nothing was written.
#[derive(Clone, Debug)]
pub struct ChannelSkipped {
    pub table: TableName,
    pub name: ChannelName,
    pub offset: Offset,
    pub committed: Offset,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lsn(text: &str) -> Offset {
        Offset::parse(OffsetKind::Lsn, text).unwrap()
    }

    fn integer(text: &str) -> Offset {
        Offset::parse(OffsetKind::Integer, text).unwrap()
    }

    #[test]
    fn names_follow_the_pattern() {
        for good in ["a", "orders.cdc", "Slot_1-x", &"x".repeat(128)] {
            assert!(ChannelName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", ".a", "a b", "a/b", "é", &"x".repeat(129)] {
            assert!(ChannelName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn integers_compare_as_numbers_up_to_u64_max() {
        assert!(integer("10") > integer("9"));
        assert_eq!(integer("007"), integer("7"));
        assert_eq!(integer("007").to_string(), "7");
        assert_eq!(integer("18446744073709551615"), Offset::Integer(u64::MAX));
        for bad in ["18446744073709551616", "+5", "-1", "1.5", "", " 1"] {
            assert!(Offset::parse(OffsetKind::Integer, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lsns_compare_as_64_bit_positions() {
        assert!(lsn("16/B374D848") > lsn("9/FFFFFFFF"));
        assert!(lsn("0/10") > lsn("0/F"));
        assert_eq!(lsn("16/b374d848"), lsn("16/B374D848"));
        assert_eq!(lsn("016/0B374D84").to_string(), "16/B374D84");
        assert_eq!(lsn("FFFFFFFF/FFFFFFFF"), Offset::Lsn(u64::MAX));
        for bad in ["16", "/1", "1/", "1/2/3", "123456789/0", "G/0", "1 /2"] {
            assert!(Offset::parse(OffsetKind::Lsn, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn text_compares_byte_wise() {
        let text = |t: &str| Offset::parse(OffsetKind::Text, t).unwrap();
        assert!(text("b") > text("a"));
        assert!(text("a") > text("B"));
        assert!(text("10") < text("9"));
        assert!(text("é") > text("z"));
        assert!(Offset::parse(OffsetKind::Text, &"x".repeat(256)).is_ok());
        for bad in ["", "a\0b", &"x".repeat(257)] {
            assert!(Offset::parse(OffsetKind::Text, bad).is_err());
        }
    }

    #[test]
    fn a_kind_is_inferred_from_the_first_offset() {
        assert_eq!(OffsetKind::infer("42"), OffsetKind::Integer);
        assert_eq!(OffsetKind::infer("16/B374D848"), OffsetKind::Lsn);
        assert_eq!(OffsetKind::infer("0/0"), OffsetKind::Lsn);
        assert_eq!(OffsetKind::infer("2026-12-02T10:00:00Z"), OffsetKind::Text);
        assert_eq!(OffsetKind::infer("abc"), OffsetKind::Text);
        assert_eq!(OffsetKind::infer("1/2/3"), OffsetKind::Text);
    }

    #[test]
    fn an_offset_is_read_as_its_channels_kind() {
        let inferred = ChannelOffset::parse("c", "10", None).unwrap();
        assert_eq!(inferred.first_kind(), OffsetKind::Integer);
        assert_eq!(
            inferred.offset_as(OffsetKind::Text).unwrap(),
            Offset::Text("10".into())
        );
        let text = ChannelOffset::parse("c", "abc", None).unwrap();
        let refused = text.offset_as(OffsetKind::Integer).unwrap_err();
        assert_eq!(refused.code(), ProblemCode::InvalidRequest);
        let asked = ChannelOffset::parse("c", "10", Some("integer")).unwrap();
        let mismatch = asked.offset_as(OffsetKind::Lsn).unwrap_err();
        assert_eq!(mismatch.code(), ProblemCode::ChannelKind);
        assert!(ChannelOffset::parse("c", "abc", Some("integer")).is_err());
        assert!(ChannelOffset::parse("c", "1", Some("number")).is_err());
        assert!(ChannelOffset::parse("c", "", None).is_err());
    }

    #[test]
    fn a_text_offset_of_bytes_that_are_not_utf8_is_refused() {
        assert!(Offset::parse(OffsetKind::Text, "a\u{FFFD}b").is_err());
        assert!(Offset::parse(OffsetKind::Text, "a-b").is_ok());
    }
}
