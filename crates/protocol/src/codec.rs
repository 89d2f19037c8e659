//! The compact binary encoding under every message: little-endian integers,
//! length-prefixed byte strings and lists, each length checked against the
//! bytes that remain (and against a hard limit) *before* anything is
//! allocated.
//!
//! Every message starts with an 8-byte envelope, following the conventions of
//! [`hecloud_rlwe::serial`]:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `HECP` |
//! | 4..6 | format version (u16, currently [`FORMAT_VERSION`]) |
//! | 6 | message kind (see [`MessageKind`]) |
//! | 7 | flags (0; a session spec with a BGV part sets bit 0) |
//!
//! The body follows and must be consumed exactly: trailing bytes are an error.

use thiserror::Error;

/// Magic bytes of every protocol message.
pub const MAGIC: [u8; 4] = *b"HECP";
/// Format version written and read by this build.
pub const FORMAT_VERSION: u16 = 1;
/// Envelope length in bytes.
pub const ENVELOPE_LEN: usize = 8;

/// Why bytes were refused. Every malformed, truncated, oversized or foreign
/// input ends here, never in a panic or an allocation of a claimed size.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the envelope or a declared field needs.
    #[error("truncated: need {need} more bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Bytes after the end of the message.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// Not a hecloud protocol message.
    #[error("bad magic bytes (not a hecloud protocol message)")]
    BadMagic,
    /// A format version this build does not read.
    #[error("unsupported format version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// Version in the envelope.
        found: u16,
        /// Version this build reads.
        supported: u16,
    },
    /// A message of another kind than the one asked for.
    #[error("message kind {found} where kind {expected} was expected")]
    WrongKind {
        /// Kind asked for.
        expected: u8,
        /// Kind in the envelope.
        found: u8,
    },
    /// An enum tag this build does not know.
    #[error("unknown {field} tag {tag}")]
    UnknownTag {
        /// What the tag selects.
        field: &'static str,
        /// The tag found.
        tag: u64,
    },
    /// A length or count above the protocol's limit for that field.
    #[error("{field}: length {len} exceeds the limit {max}")]
    TooLong {
        /// Field name.
        field: &'static str,
        /// Declared length.
        len: u64,
        /// Largest accepted length.
        max: u64,
    },
    /// A field with an impossible value.
    #[error("invalid field {field}: {reason}")]
    InvalidField {
        /// Field name.
        field: &'static str,
        /// Why it was refused.
        reason: String,
    },
}

/// Result alias for decoding.
pub type DecodeResult<T> = std::result::Result<T, DecodeError>;

/// Kinds of top-level messages (the envelope's kind byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MessageKind {
    /// [`crate::SessionSpec`].
    SessionSpec = 1,
    /// [`crate::ObjectDescriptor`].
    ObjectDescriptor = 2,
    /// [`crate::JobSubmission`].
    JobSubmission = 3,
    /// [`crate::JobStatus`].
    JobStatus = 4,
    /// [`crate::JobResult`].
    JobResult = 5,
    /// [`crate::Graph`] on its own.
    Graph = 6,
    /// [`crate::refresh::RefreshRequest`].
    RefreshRequest = 7,
    /// [`crate::refresh::RefreshReply`].
    RefreshReply = 8,
}

/// A message with a versioned binary encoding.
pub trait Message: Sized {
    /// The envelope kind of this message.
    const KIND: MessageKind;

    /// Writes the body (without envelope).
    fn write_body(&self, w: &mut Writer);

    /// Reads the body (without envelope).
    fn read_body(r: &mut Reader<'_>) -> DecodeResult<Self>;

    /// The envelope's flags byte: 0 unless a message defines a flag.
    fn envelope_flags(&self) -> u8 {
        0
    }

    /// Reads the body under the envelope's `flags`: only 0 is accepted
    /// unless a message defines a flag.
    fn read_flagged(r: &mut Reader<'_>, flags: u8) -> DecodeResult<Self> {
        if flags != 0 {
            return Err(DecodeError::InvalidField {
                field: "flags",
                reason: format!("{flags:#x} (no flag is defined)"),
            });
        }
        Self::read_body(r)
    }

    /// The complete encoding: envelope then body.
    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.bytes_raw(&MAGIC);
        w.u16(FORMAT_VERSION);
        w.u8(Self::KIND as u8);
        w.u8(self.envelope_flags());
        self.write_body(&mut w);
        w.into_bytes()
    }

    /// Parses a complete encoding: envelope checked (magic, version, kind,
    /// flags), body read, no trailing bytes.
    fn decode(bytes: &[u8]) -> DecodeResult<Self> {
        let mut r = Reader::new(bytes);
        let magic = r.take(4)?;
        if magic != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = r.u16()?;
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let kind = r.u8()?;
        if kind != Self::KIND as u8 {
            return Err(DecodeError::WrongKind {
                expected: Self::KIND as u8,
                found: kind,
            });
        }
        let flags = r.u8()?;
        let out = Self::read_flagged(&mut r, flags)?;
        r.finish()?;
        Ok(out)
    }
}

/// Appends little-endian fields to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// Raw bytes, no length prefix.
    pub fn bytes_raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// One byte.
    pub fn u8(&mut self, x: u8) {
        self.buf.push(x);
    }

    /// A bool as one byte 0/1.
    pub fn bool(&mut self, x: bool) {
        self.buf.push(x as u8);
    }

    /// u16, little endian.
    pub fn u16(&mut self, x: u16) {
        self.buf.extend_from_slice(&x.to_le_bytes());
    }

    /// u32, little endian.
    pub fn u32(&mut self, x: u32) {
        self.buf.extend_from_slice(&x.to_le_bytes());
    }

    /// u64, little endian.
    pub fn u64(&mut self, x: u64) {
        self.buf.extend_from_slice(&x.to_le_bytes());
    }

    /// i64, little endian.
    pub fn i64(&mut self, x: i64) {
        self.buf.extend_from_slice(&x.to_le_bytes());
    }

    /// f64 as its IEEE bits.
    pub fn f64(&mut self, x: f64) {
        self.u64(x.to_bits());
    }

    /// A length or count (u32; callers keep them below the read limits).
    pub fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.bytes_raw(b);
    }

    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
}

/// Reads little-endian fields from untrusted bytes; never reads past the end
/// and never allocates more than the remaining bytes can justify.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated {
                need: n,
                have: self.remaining(),
            });
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> DecodeResult<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// One byte.
    pub fn u8(&mut self) -> DecodeResult<u8> {
        Ok(self.take(1)?[0])
    }

    /// A bool (only 0 and 1 are accepted).
    pub fn bool(&mut self, field: &'static str) -> DecodeResult<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            t => Err(DecodeError::UnknownTag {
                field,
                tag: t as u64,
            }),
        }
    }

    /// u16.
    pub fn u16(&mut self) -> DecodeResult<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// u32.
    pub fn u32(&mut self) -> DecodeResult<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// u64.
    pub fn u64(&mut self) -> DecodeResult<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// i64.
    pub fn i64(&mut self) -> DecodeResult<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// f64 from its bits (any bit pattern; callers check finiteness).
    pub fn f64(&mut self) -> DecodeResult<f64> {
        Ok(f64::from_bits(self.u64()?))
    }

    /// A finite f64.
    pub fn finite_f64(&mut self, field: &'static str) -> DecodeResult<f64> {
        let x = self.f64()?;
        if !x.is_finite() {
            return Err(DecodeError::InvalidField {
                field,
                reason: format!("{x} is not finite"),
            });
        }
        Ok(x)
    }

    /// 32 raw bytes (hashes, ids).
    pub fn hash(&mut self) -> DecodeResult<[u8; 32]> {
        self.array()
    }

    /// A count of items, each taking at least `min_item_bytes` bytes on the
    /// wire: refused if above `max` or if the remaining bytes cannot hold
    /// that many items, so a caller may then reserve `count` slots safely.
    pub fn count(
        &mut self,
        field: &'static str,
        max: usize,
        min_item_bytes: usize,
    ) -> DecodeResult<usize> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(DecodeError::TooLong {
                field,
                len: n as u64,
                max: max as u64,
            });
        }
        let need = n.saturating_mul(min_item_bytes.max(1));
        if need > self.remaining() {
            return Err(DecodeError::Truncated {
                need,
                have: self.remaining(),
            });
        }
        Ok(n)
    }

    /// A length-prefixed byte string of at most `max` bytes.
    pub fn bytes(&mut self, field: &'static str, max: usize) -> DecodeResult<&'a [u8]> {
        let n = self.count(field, max, 1)?;
        self.take(n)
    }

    /// A length-prefixed UTF-8 string of at most `max` bytes.
    pub fn str(&mut self, field: &'static str, max: usize) -> DecodeResult<String> {
        let b = self.bytes(field, max)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| DecodeError::InvalidField {
                field,
                reason: "not UTF-8".into(),
            })
    }

    /// Succeeds only if every byte was read.
    pub fn finish(&self) -> DecodeResult<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_refuses_more_items_than_bytes() {
        let mut w = Writer::new();
        w.u32(1000);
        w.bytes_raw(&[0; 10]);
        let b = w.into_bytes();
        let mut r = Reader::new(&b);
        assert!(matches!(
            r.count("x", 10_000, 8),
            Err(DecodeError::Truncated { need: 8000, .. })
        ));
        let mut r = Reader::new(&b);
        assert!(matches!(
            r.count("x", 100, 1),
            Err(DecodeError::TooLong { len: 1000, .. })
        ));
    }

    #[test]
    fn primitives_round_trip() {
        let mut w = Writer::new();
        w.u8(7);
        w.bool(true);
        w.u16(0xBEEF);
        w.u32(0xDEAD_BEEF);
        w.u64(u64::MAX - 3);
        w.i64(-42);
        w.f64(-0.125);
        w.str("héllo");
        let b = w.into_bytes();
        let mut r = Reader::new(&b);
        assert_eq!(r.u8().unwrap(), 7);
        assert!(r.bool("b").unwrap());
        assert_eq!(r.u16().unwrap(), 0xBEEF);
        assert_eq!(r.u32().unwrap(), 0xDEAD_BEEF);
        assert_eq!(r.u64().unwrap(), u64::MAX - 3);
        assert_eq!(r.i64().unwrap(), -42);
        assert_eq!(r.finite_f64("f").unwrap(), -0.125);
        assert_eq!(r.str("s", 16).unwrap(), "héllo");
        r.finish().unwrap();
    }
}
