//! The 80-byte header every object opens with, and the checks of its
//! fields.

use crate::error::{DecodeError, Result};
use crate::keys::KeyId;
use crate::params::Parameters;

/// Magic bytes of every object.
pub const MAGIC: [u8; 4] = *b"HECL";
/// Format version written and read by this build.
pub const FORMAT_VERSION: u16 = 5;
/// Header length in bytes.
pub const HEADER_LEN: usize = 80;
/// Largest number of ciphertext components accepted.
pub const MAX_CIPHERTEXT_COMPONENTS: usize = 3;
pub(super) const FLAG_SEEDED: u8 = 1;

/// Object kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A ciphertext.
    Ciphertext = 1,
    /// A plaintext.
    Plaintext = 2,
    /// A public key.
    PublicKey = 3,
    /// A relinearization key.
    RelinearizationKey = 4,
    /// A Galois key.
    GaloisKey = 5,
    /// An exported secret key.
    SecretKey = 6,
    /// A switching key between two secrets (e.g. bootstrapping's
    /// sparse-secret encapsulation keys).
    SwitchingKey = 7,
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Header {
    /// Object kind byte.
    pub kind: u8,
    /// Flags byte.
    pub flags: u8,
    /// Level.
    pub level: u32,
    /// Scale.
    pub scale: f64,
    /// Count field.
    pub count: u32,
    /// Extra field.
    pub extra: u64,
    /// The id of the secret key the object belongs to.
    pub key: KeyId,
}

pub(super) fn write_header(out: &mut Vec<u8>, params: &Parameters, kind: Kind, h: Header) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.push(kind as u8);
    out.push(h.flags);
    out.extend_from_slice(params.hash());
    out.extend_from_slice(&h.level.to_le_bytes());
    out.extend_from_slice(&h.scale.to_bits().to_le_bytes());
    out.extend_from_slice(&h.count.to_le_bytes());
    out.extend_from_slice(&h.extra.to_le_bytes());
    out.extend_from_slice(&h.key.0);
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Parses and checks the header of `bytes` (magic, version, kind, parameter
/// hash); the body is not looked at.
pub fn read_header(params: &Parameters, bytes: &[u8], kind: Kind) -> Result<Header> {
    if bytes.len() < HEADER_LEN {
        return Err(DecodeError::Truncated {
            need: HEADER_LEN,
            have: bytes.len(),
        }
        .into());
    }
    if bytes[..4] != MAGIC {
        return Err(DecodeError::BadMagic.into());
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        }
        .into());
    }
    if bytes[6] != kind as u8 {
        return Err(DecodeError::WrongKind {
            expected: kind as u8,
            found: bytes[6],
        }
        .into());
    }
    if bytes[8..40] != params.hash()[..] {
        return Err(DecodeError::ParameterHash.into());
    }
    let h = Header {
        kind: bytes[6],
        flags: bytes[7],
        level: u32_at(bytes, 40),
        scale: f64::from_bits(u64_at(bytes, 44)),
        count: u32_at(bytes, 52),
        extra: u64_at(bytes, 56),
        key: KeyId(bytes[64..80].try_into().expect("16 bytes")),
    };
    if h.flags & !FLAG_SEEDED != 0 {
        return Err(DecodeError::InvalidField {
            field: "flags",
            value: h.flags as u64,
        }
        .into());
    }
    Ok(h)
}

pub(super) fn check_level(params: &Parameters, level: u32) -> Result<usize> {
    let l = level as usize;
    if l > params.max_level() {
        return Err(DecodeError::InvalidField {
            field: "level",
            value: level as u64,
        }
        .into());
    }
    Ok(l)
}

pub(super) fn check_scale(scale: f64) -> Result<()> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(DecodeError::InvalidField {
            field: "scale",
            value: scale.to_bits(),
        }
        .into());
    }
    Ok(())
}
