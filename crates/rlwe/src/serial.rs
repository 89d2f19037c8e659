//! A compact, versioned binary format for every RLWE object.
//!
//! Header (64 bytes, little endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `HECL` |
//! | 4..6 | format version (u16, currently 4) |
//! | 6 | object kind (see [`Kind`]) |
//! | 7 | flags (bit 0: seeded — the uniform polynomials are given by seeds) |
//! | 8..40 | BLAKE3 hash of the parameter set |
//! | 40..44 | level (u32) |
//! | 44..52 | scale (f64 bits) |
//! | 52..56 | count (u32): components of a ciphertext, digits of a key |
//! | 56..64 | extra (u64): the Galois element of a Galois key, else 0 |
//!
//! The body is polynomials and 32-byte seeds. A polynomial is its limbs in
//! order, each limb its N residues packed LSB first at the bit length of its
//! prime (N·bits/8 bytes: a 50-bit prime takes 50 bits, not 64). A seeded
//! ciphertext is its seed, then c_0: a decoder receiving it as a stream
//! expands c_1 from the seed while c_0 is still on its way.
//! A decoder checks the header against the parameters the object must belong
//! to and computes the exact body length from them *before* allocating; every
//! residue is checked against its prime. Nothing in the bytes is trusted.

use std::mem::MaybeUninit;
use std::sync::Arc;

use hecloud_math::backend::default_backend;
use hecloud_math::pack::packed_len;
use hecloud_math::{Domain, RnsBasis, RnsPoly, sampling::expand_seed_uniform};
use rayon::prelude::*;

use crate::ciphertext::{Ciphertext, Plaintext};
use crate::error::{DecodeError, Result, RlweError};
use crate::keys::{GaloisKey, PublicKey, RelinearizationKey, SecretKey, SwitchingKey};
use crate::params::Parameters;

/// Magic bytes of every object.
pub const MAGIC: [u8; 4] = *b"HECL";
/// Format version written and read by this build.
pub const FORMAT_VERSION: u16 = 4;
/// Header length in bytes.
pub const HEADER_LEN: usize = 64;
/// Largest number of ciphertext components accepted.
pub const MAX_CIPHERTEXT_COMPONENTS: usize = 3;
const FLAG_SEEDED: u8 = 1;

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
}

fn write_header(out: &mut Vec<u8>, params: &Parameters, kind: Kind, h: Header) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.push(kind as u8);
    out.push(h.flags);
    out.extend_from_slice(params.hash());
    out.extend_from_slice(&h.level.to_le_bytes());
    out.extend_from_slice(&h.scale.to_bits().to_le_bytes());
    out.extend_from_slice(&h.count.to_le_bytes());
    out.extend_from_slice(&h.extra.to_le_bytes());
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
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

/// Bits stored per residue of a limb: the bit length of its prime.
pub(crate) fn residue_bits(q: u64) -> u32 {
    64 - q.leading_zeros()
}

/// Serialized size of one polynomial over `basis`: each limb is its N
/// residues packed at the bit length of its prime (LSB first), rounded up
/// to whole bytes.
pub fn packed_poly_bytes(basis: &RnsBasis) -> usize {
    basis
        .moduli()
        .iter()
        .map(|m| packed_len(basis.degree(), residue_bits(m.value())))
        .sum()
}

/// The byte ranges of the limbs of a packed polynomial over `basis`,
/// starting at `at`.
fn limb_ranges(basis: &RnsBasis, at: usize) -> Vec<(std::ops::Range<usize>, u32)> {
    let mut start = at;
    basis
        .moduli()
        .iter()
        .map(|m| {
            let bits = residue_bits(m.value());
            let end = start + packed_len(basis.degree(), bits);
            let r = (start..end, bits);
            start = end;
            r
        })
        .collect()
}

fn write_poly(out: &mut Vec<u8>, p: &RnsPoly) {
    let at = out.len();
    let ranges = limb_ranges(p.basis(), at);
    out.resize(at + packed_poly_bytes(p.basis()), 0);
    let mut rest = &mut out[at..];
    let mut dsts = Vec::with_capacity(ranges.len());
    for (r, bits) in &ranges {
        let (limb, tail) = rest.split_at_mut(r.len());
        dsts.push((limb, *bits));
        rest = tail;
    }
    dsts.into_par_iter()
        .zip(p.data().par_chunks_exact(p.degree()))
        .for_each(|((dst, bits), src)| pack_limb(src, bits, dst));
}

/// Packs a limb (each residue below 2^bits) into `dst`, LSB first, on the
/// process's backend (see [`hecloud_math::pack`]).
pub(crate) fn pack_limb(src: &[u64], bits: u32, dst: &mut [u8]) {
    default_backend().pack_bits(src, bits, dst);
}

/// Bytes `from..from + dst.len()` of what [`pack_limb`] makes of `src`:
/// whole groups of eight values packed in place, the groups cut by either
/// end packed aside and copied in part.
fn pack_limb_range(src: &[u64], bits: u32, from: usize, dst: &mut [u8]) {
    let w = bits as usize;
    let to = from + dst.len();
    if !src.len().is_multiple_of(8) {
        // Fewer than eight values at the end (degrees below 8 only).
        let mut all = vec![0; packed_len(src.len(), bits)];
        pack_limb(src, bits, &mut all);
        dst.copy_from_slice(&all[from..to]);
        return;
    }
    let (first, last) = (from.div_ceil(w), to / w);
    if first < last {
        pack_limb(
            &src[8 * first..8 * last],
            bits,
            &mut dst[first * w - from..last * w - from],
        );
    }
    let head = (!from.is_multiple_of(w)).then_some(from / w);
    let tail = (!to.is_multiple_of(w) && head != Some(last)).then_some(last);
    let mut group = [0u8; 64];
    for g in head.into_iter().chain(tail) {
        let (start, end) = (from.max(g * w), to.min(g * w + w));
        pack_limb(&src[8 * g..8 * g + 8], bits, &mut group[..w]);
        dst[start - from..end - from].copy_from_slice(&group[start - g * w..end - g * w]);
    }
}

/// A part of a serialized ciphertext.
enum Segment<'a> {
    Bytes(std::borrow::Cow<'a, [u8]>),
    /// A limb and the bits of each of its residues.
    Limb(&'a [u64], u32),
}

impl Segment<'_> {
    fn len(&self) -> usize {
        match self {
            Segment::Bytes(b) => b.len(),
            Segment::Limb(src, bits) => packed_len(src.len(), *bits),
        }
    }
}

/// Unpacks a limb of `bits`-bit residues into a buffer that need not be
/// initialised, on the process's backend: every value of `dst` is written,
/// whatever is returned; false if a value is not below `q` or a padding bit
/// is set.
fn unpack_limb_into(src: &[u8], bits: u32, q: u64, dst: &mut [MaybeUninit<u64>]) -> bool {
    default_backend().unpack_bits(src, bits, q, dst)
}

/// The residues of a polynomial being unpacked, not zeroed first: the
/// polynomial is made only once every limb is written.
#[derive(Debug)]
struct PolyBuffer {
    basis: Arc<RnsBasis>,
    data: Vec<u64>,
}

impl PolyBuffer {
    fn new(basis: &Arc<RnsBasis>) -> Self {
        Self {
            basis: basis.clone(),
            data: Vec::with_capacity(basis.len() * basis.degree()),
        }
    }

    /// Its limbs, in order, to be written.
    fn limbs(&mut self) -> std::slice::ChunksExactMut<'_, MaybeUninit<u64>> {
        let (n, len) = (self.basis.degree(), self.basis.len() * self.basis.degree());
        self.data.spare_capacity_mut()[..len].chunks_exact_mut(n)
    }

    /// # Safety
    /// Every value of every limb must have been written.
    unsafe fn into_poly(mut self) -> RnsPoly {
        // SAFETY: the caller's promise.
        unsafe { self.data.set_len(self.basis.len() * self.basis.degree()) };
        RnsPoly::from_buffer_unchecked(&self.basis, Domain::Ntt, self.data)
    }
}

/// A limb's destination, packed bytes, residue bits and prime.
type LimbToUnpack<'a> = (&'a mut [MaybeUninit<u64>], &'a [u8], u32, u64);

/// Unpacks limbs in parallel, each `(destination, packed bytes, bits,
/// prime)`. Every residue is checked against its prime as it is unpacked:
/// no second pass.
fn unpack_limbs(limbs: Vec<LimbToUnpack<'_>>) -> Result<()> {
    let ok = limbs
        .into_par_iter()
        .map(|(dst, src, bits, q)| unpack_limb_into(src, bits, q, dst))
        .reduce(|| true, |a, b| a && b);
    if ok {
        Ok(())
    } else {
        Err(DecodeError::ResidueOutOfRange.into())
    }
}

/// A reader over the body whose total length was checked up front.
struct Body<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Body<'a> {
    /// Checks that exactly `expected` body bytes follow the header.
    fn new(bytes: &'a [u8], expected: usize) -> Result<Self> {
        let need = HEADER_LEN
            .checked_add(expected)
            .ok_or(DecodeError::InvalidField {
                field: "length",
                value: u64::MAX,
            })?;
        if bytes.len() < need {
            return Err(DecodeError::Truncated {
                need,
                have: bytes.len(),
            }
            .into());
        }
        if bytes.len() > need {
            return Err(DecodeError::TrailingBytes(bytes.len() - need).into());
        }
        Ok(Self {
            bytes,
            at: HEADER_LEN,
        })
    }

    fn poly(&mut self, basis: &Arc<RnsBasis>) -> Result<RnsPoly> {
        let ranges = limb_ranges(basis, self.at);
        self.at += packed_poly_bytes(basis);
        let mut buf = PolyBuffer::new(basis);
        let limbs = buf
            .limbs()
            .zip(ranges)
            .zip(basis.moduli())
            .map(|((dst, (r, bits)), m)| (dst, &self.bytes[r], bits, m.value()))
            .collect();
        unpack_limbs(limbs)?;
        // SAFETY: every limb was unpacked.
        Ok(unsafe { buf.into_poly() })
    }

    fn seed(&mut self) -> [u8; 32] {
        let mut s = [0u8; 32];
        s.copy_from_slice(&self.bytes[self.at..self.at + 32]);
        self.at += 32;
        s
    }
}

fn check_level(params: &Parameters, level: u32) -> Result<usize> {
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

fn check_scale(scale: f64) -> Result<()> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(DecodeError::InvalidField {
            field: "scale",
            value: scale.to_bits(),
        }
        .into());
    }
    Ok(())
}

impl Ciphertext {
    /// Serialized form (seeded — c_1 as its 32-byte seed — if the ciphertext
    /// is a fresh secret-key encryption).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.serialized_len());
        let seeded = self.write_header(&mut out);
        match self.seed() {
            Some(seed) if seeded => {
                out.extend_from_slice(seed);
                write_poly(&mut out, &self.polys()[0]);
            }
            _ => self.polys().iter().for_each(|p| write_poly(&mut out, p)),
        }
        out
    }

    /// [`Ciphertext::to_bytes`] piece by piece, in order: the header, the
    /// seed if any, each packed limb. For a consumer that hashes or sends
    /// the bytes as they are made: each limb is packed into one buffer that
    /// stays in cache, so it is read there and not from memory, and no
    /// output is zero-filled first. Sequential (`to_bytes` packs limbs in
    /// parallel).
    ///
    /// ```
    /// # use hecloud_rlwe::{Encryptor, KeyGenerator, Parameters, ParametersLiteral, Plaintext, SecretDistribution};
    /// # let params = Parameters::new(ParametersLiteral {
    /// #     log_n: 12, log_q: vec![40, 30], log_p: vec![30],
    /// #     secret: SecretDistribution::Ternary, sigma: 3.2, dnum: None,
    /// # }).unwrap();
    /// # let sk = KeyGenerator::new(&params).gen_secret_key().unwrap();
    /// # let m = hecloud_math::RnsPoly::zero(params.q_at(1).unwrap(), hecloud_math::Domain::Ntt);
    /// # let pt = Plaintext::new(&params, m, 1, 1.0).unwrap();
    /// let ct = Encryptor::new(&params).encrypt_sk(&sk, &pt).unwrap();
    /// let mut bytes = Vec::with_capacity(ct.serialized_len());
    /// ct.write_pieces(|piece| bytes.extend_from_slice(piece));
    /// assert_eq!(bytes, ct.to_bytes());
    /// ```
    pub fn write_pieces(&self, mut piece: impl FnMut(&[u8])) {
        let mut out = Vec::new();
        for segment in self.segments() {
            match segment {
                Segment::Bytes(b) => piece(&b),
                Segment::Limb(src, bits) => {
                    out.resize(packed_len(src.len(), bits), 0);
                    pack_limb(src, bits, &mut out);
                    piece(&out);
                }
            }
        }
    }

    /// Writes the bytes of [`Ciphertext::to_bytes`] at `from..from +
    /// dst.len()` into `dst`, packing only the limbs in that range, straight
    /// into `dst`: a sender makes each chunk where it sends it from.
    ///
    /// # Panics
    /// If the range ends past [`Ciphertext::serialized_len`].
    ///
    /// ```
    /// # use hecloud_rlwe::{Encryptor, KeyGenerator, Parameters, ParametersLiteral, Plaintext, SecretDistribution};
    /// # let params = Parameters::new(ParametersLiteral {
    /// #     log_n: 12, log_q: vec![40, 30], log_p: vec![30],
    /// #     secret: SecretDistribution::Ternary, sigma: 3.2, dnum: None,
    /// # }).unwrap();
    /// # let sk = KeyGenerator::new(&params).gen_secret_key().unwrap();
    /// # let m = hecloud_math::RnsPoly::zero(params.q_at(1).unwrap(), hecloud_math::Domain::Ntt);
    /// # let pt = Plaintext::new(&params, m, 1, 1.0).unwrap();
    /// let ct = Encryptor::new(&params).encrypt_sk(&sk, &pt).unwrap();
    /// let mut chunk = vec![0; 1000];
    /// ct.write_range(5000, &mut chunk);
    /// assert_eq!(chunk, ct.to_bytes()[5000..6000]);
    /// ```
    pub fn write_range(&self, from: usize, dst: &mut [u8]) {
        let to = from + dst.len();
        assert!(
            to <= self.serialized_len(),
            "bytes {from}..{to} of a ciphertext of {} bytes",
            self.serialized_len()
        );
        let mut at = 0;
        for segment in self.segments() {
            let len = segment.len();
            let (start, end) = (from.max(at), to.min(at + len));
            if start < end {
                let out = &mut dst[start - from..end - from];
                match segment {
                    Segment::Bytes(b) => out.copy_from_slice(&b[start - at..end - at]),
                    Segment::Limb(src, bits) => pack_limb_range(src, bits, start - at, out),
                }
            }
            at += len;
            if at >= to {
                break;
            }
        }
    }

    /// The parts of the serialized form, in order: the header, the seed of
    /// c_1 if seeded, each limb (packed when written).
    fn segments(&self) -> impl Iterator<Item = Segment<'_>> {
        let mut header = Vec::with_capacity(HEADER_LEN);
        let seeded = self.write_header(&mut header);
        let polys = if seeded {
            &self.polys()[..1]
        } else {
            self.polys()
        };
        let limbs = polys.iter().flat_map(|p| {
            p.basis()
                .moduli()
                .iter()
                .zip(p.data().chunks_exact(p.degree()))
                .map(|(m, src)| Segment::Limb(src, residue_bits(m.value())))
        });
        let seed = self
            .seed()
            .filter(|_| seeded)
            .map(|s| Segment::Bytes(s.into()));
        std::iter::once(Segment::Bytes(header.into()))
            .chain(seed)
            .chain(limbs)
    }

    /// Writes the header; whether c_1 goes as its seed.
    fn write_header(&self, out: &mut Vec<u8>) -> bool {
        let seeded = self.seed().is_some() && self.degree() == 1;
        write_header(
            out,
            self.params(),
            Kind::Ciphertext,
            Header {
                kind: Kind::Ciphertext as u8,
                flags: if seeded { FLAG_SEEDED } else { 0 },
                level: self.level() as u32,
                scale: self.scale(),
                count: self.polys().len() as u32,
                extra: 0,
            },
        );
        seeded
    }

    /// Length of [`Ciphertext::to_bytes`].
    pub fn serialized_len(&self) -> usize {
        let poly = self.params().poly_bytes(self.level());
        if self.seed().is_some() && self.degree() == 1 {
            HEADER_LEN + poly + 32
        } else {
            HEADER_LEN + poly * self.polys().len()
        }
    }

    /// Parses a ciphertext that must belong to `params`.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let mut d = CiphertextDecoder::new(params, bytes.len());
        d.push(bytes)?;
        d.finish()
    }
}

/// Decodes a ciphertext from its bytes as they arrive (an upload, say), so
/// that little is left to do when the last byte is in. It makes the checks
/// of [`Ciphertext::from_bytes`] and fails with the same errors: that
/// function is this decoder given every byte at once. The header is checked
/// as soon as it is in, each limb as soon as its bytes are.
///
/// ```
/// # use hecloud_rlwe::{Ciphertext, Encryptor, KeyGenerator, Parameters, ParametersLiteral, Plaintext, SecretDistribution};
/// # use hecloud_rlwe::serial::CiphertextDecoder;
/// # let params = Parameters::new(ParametersLiteral {
/// #     log_n: 12, log_q: vec![40, 30], log_p: vec![30],
/// #     secret: SecretDistribution::Ternary, sigma: 3.2, dnum: None,
/// # }).unwrap();
/// # let sk = KeyGenerator::new(&params).gen_secret_key().unwrap();
/// # let m = hecloud_math::RnsPoly::zero(params.q_at(1).unwrap(), hecloud_math::Domain::Ntt);
/// # let pt = Plaintext::new(&params, m, 1, 1.0).unwrap();
/// let ct = Encryptor::new(&params).encrypt_sk(&sk, &pt).unwrap();
/// let bytes = ct.to_bytes();
/// let mut d = CiphertextDecoder::new(&params, bytes.len());
/// for chunk in bytes.chunks(1000) {
///     d.push(chunk).unwrap();
/// }
/// assert_eq!(d.finish().unwrap(), ct);
/// ```
#[derive(Debug)]
pub struct CiphertextDecoder {
    params: Arc<Parameters>,
    /// Bytes announced.
    total: usize,
    /// Bytes pushed.
    received: usize,
    /// The start of a header or limb whose end is still to come.
    carry: Vec<u8>,
    /// Known once the header is in.
    body: Option<CiphertextBody>,
    /// The first error: every later call returns it.
    failed: Option<RlweError>,
}

/// What the header of a ciphertext announced, and the body so far.
#[derive(Debug)]
struct CiphertextBody {
    level: usize,
    scale: f64,
    seeded: bool,
    /// The polynomials given in full (c_0 alone if seeded).
    polys: Vec<PolyBuffer>,
    /// Byte length, residue bits and prime of every limb, in order.
    limbs: Vec<(usize, u32, u64)>,
    /// Limbs decoded.
    done: usize,
    /// The seed of c_1 and c_1 expanded from it, once in (seeded only).
    seeded_c1: Option<([u8; 32], RnsPoly)>,
}

impl CiphertextDecoder {
    /// A decoder for a ciphertext of `params` that is `total` bytes long.
    pub fn new(params: &Arc<Parameters>, total: usize) -> Self {
        Self {
            params: params.clone(),
            total,
            received: 0,
            carry: Vec::new(),
            body: None,
            failed: None,
        }
    }

    /// Takes the next bytes; fails as soon as they show the ciphertext is
    /// malformed (or are more than announced).
    pub fn push(&mut self, data: &[u8]) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.take(data);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    fn take(&mut self, mut data: &[u8]) -> Result<()> {
        if data.len() > self.total - self.received {
            return Err(DecodeError::TrailingBytes(self.received + data.len() - self.total).into());
        }
        self.received += data.len();
        if self.body.is_none() {
            let take = (HEADER_LEN - self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.carry.len() < HEADER_LEN {
                return Ok(());
            }
            self.body = Some(CiphertextBody::new(&self.params, &self.carry, self.total)?);
            self.carry.clear();
        }
        let body = self.body.as_mut().expect("the header is in");
        if !self.carry.is_empty() {
            let need = body.next_len() - self.carry.len();
            let take = need.min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            if take < need {
                return Ok(());
            }
            body.decode(&self.carry)?;
            self.carry.clear();
        }
        let whole = body.decode(data)?;
        self.carry.extend_from_slice(&data[whole..]);
        Ok(())
    }

    /// The ciphertext, once every byte is in.
    pub fn finish(self) -> Result<Ciphertext> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let truncated = |need: usize| -> RlweError {
            DecodeError::Truncated {
                need,
                have: self.received,
            }
            .into()
        };
        let Some(body) = self.body else {
            return Err(truncated(HEADER_LEN));
        };
        if self.received < self.total || body.done < body.limbs.len() {
            return Err(truncated(self.total));
        }
        let CiphertextBody {
            level,
            scale,
            polys,
            seeded_c1,
            ..
        } = body;
        // SAFETY: every limb of every polynomial was unpacked (`done`).
        let polys: Vec<RnsPoly> = polys
            .into_iter()
            .map(|p| unsafe { p.into_poly() })
            .collect();
        match seeded_c1 {
            Some((seed, c1)) => {
                let c0 = polys.into_iter().next().expect("c_0");
                Ciphertext::from_seed(&self.params, c0, c1, seed, level, scale)
            }
            None if body.seeded => Err(truncated(self.total)),
            None => Ciphertext::new(&self.params, polys, level, scale),
        }
    }
}

impl CiphertextBody {
    /// Checks the header against `params` and the announced length `total`
    /// before allocating anything.
    fn new(params: &Parameters, header: &[u8], total: usize) -> Result<Self> {
        let h = read_header(params, header, Kind::Ciphertext)?;
        let level = check_level(params, h.level)?;
        check_scale(h.scale)?;
        let count = h.count as usize;
        let seeded = h.flags & FLAG_SEEDED != 0;
        if !(2..=MAX_CIPHERTEXT_COMPONENTS).contains(&count) || (seeded && count != 2) {
            return Err(DecodeError::InvalidField {
                field: "count",
                value: h.count as u64,
            }
            .into());
        }
        let given = if seeded { 1 } else { count };
        let poly = params.poly_bytes(level);
        let need = HEADER_LEN + poly * given + if seeded { 32 } else { 0 };
        if total < need {
            return Err(DecodeError::Truncated { need, have: total }.into());
        }
        if total > need {
            return Err(DecodeError::TrailingBytes(total - need).into());
        }
        let basis = params.q_at(level)?;
        let per_poly: Vec<_> = limb_ranges(basis, 0)
            .into_iter()
            .zip(basis.moduli())
            .map(|((r, bits), m)| (r.len(), bits, m.value()))
            .collect();
        Ok(Self {
            level,
            scale: h.scale,
            seeded,
            polys: (0..given).map(|_| PolyBuffer::new(basis)).collect(),
            limbs: per_poly.repeat(given),
            done: 0,
            seeded_c1: None,
        })
    }

    fn awaits_seed(&self) -> bool {
        self.seeded && self.seeded_c1.is_none()
    }

    /// Bytes of the next unit (the opening seed, or a limb).
    fn next_len(&self) -> usize {
        if self.awaits_seed() {
            return 32;
        }
        self.limbs.get(self.done).map_or(0, |&(len, ..)| len)
    }

    /// Decodes the whole units at the start of `data` (c_1 from its seed,
    /// limbs in parallel, each residue checked against its prime); returns
    /// the bytes used.
    fn decode(&mut self, data: &[u8]) -> Result<usize> {
        let mut used = 0;
        if self.awaits_seed() {
            let Some(seed) = data.first_chunk::<32>() else {
                return Ok(0);
            };
            // c_1 has the basis of c_0.
            let c1 = expand_seed_uniform(seed, &self.polys[0].basis);
            self.seeded_c1 = Some((*seed, c1));
            used = 32;
        }
        let first = self.done;
        let mut units = Vec::new();
        while let Some(&(len, bits, q)) = self.limbs.get(self.done)
            && data.len() - used >= len
        {
            units.push((&data[used..used + len], bits, q));
            used += len;
            self.done += 1;
        }
        if !units.is_empty() {
            let dsts = self
                .polys
                .iter_mut()
                .flat_map(PolyBuffer::limbs)
                .skip(first);
            unpack_limbs(
                dsts.zip(units)
                    .map(|(dst, (src, bits, q))| (dst, src, bits, q))
                    .collect(),
            )?;
        }
        Ok(used)
    }
}

impl Plaintext {
    /// Serialized form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(
            &mut out,
            self.params(),
            Kind::Plaintext,
            Header {
                kind: Kind::Plaintext as u8,
                flags: 0,
                level: self.level() as u32,
                scale: self.scale(),
                count: 1,
                extra: 0,
            },
        );
        write_poly(&mut out, self.poly());
        out
    }

    /// Parses a plaintext that must belong to `params`.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let h = read_header(params, bytes, Kind::Plaintext)?;
        let level = check_level(params, h.level)?;
        check_scale(h.scale)?;
        if h.count != 1 || h.flags != 0 {
            return Err(DecodeError::InvalidField {
                field: "count",
                value: h.count as u64,
            }
            .into());
        }
        let mut body = Body::new(bytes, params.poly_bytes(level))?;
        let poly = body.poly(params.q_at(level)?)?;
        Plaintext::new(params, poly, level, h.scale)
    }
}

impl PublicKey {
    /// Serialized form (seeded: `a` as its seed).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(
            &mut out,
            &self.params,
            Kind::PublicKey,
            Header {
                kind: Kind::PublicKey as u8,
                flags: FLAG_SEEDED,
                level: self.params.max_level() as u32,
                scale: 1.0,
                count: 2,
                extra: 0,
            },
        );
        write_poly(&mut out, &self.b);
        out.extend_from_slice(&self.seed);
        out
    }

    /// Parses a public key of `params`.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let h = read_header(params, bytes, Kind::PublicKey)?;
        if h.level as usize != params.max_level() || h.count != 2 || h.flags != FLAG_SEEDED {
            return Err(DecodeError::InvalidField {
                field: "level",
                value: h.level as u64,
            }
            .into());
        }
        let basis = params.qp_basis().clone();
        let mut body = Body::new(bytes, key_poly_bytes(params) + 32)?;
        let b = body.poly(&basis)?;
        let seed = body.seed();
        let a = expand_seed_uniform(&seed, &basis);
        Ok(PublicKey {
            params: params.clone(),
            b,
            a,
            seed,
        })
    }
}

fn key_poly_bytes(params: &Parameters) -> usize {
    packed_poly_bytes(params.qp_basis())
}

fn write_switching_key(out: &mut Vec<u8>, k: &SwitchingKey, kind: Kind, extra: u64, seeded: bool) {
    let seeds = if seeded { k.seeds.as_ref() } else { None };
    let seeded = seeds.is_some();
    write_header(
        out,
        &k.params,
        kind,
        Header {
            kind: kind as u8,
            flags: if seeded { FLAG_SEEDED } else { 0 },
            level: k.params.max_level() as u32,
            scale: 1.0,
            count: k.b.len() as u32,
            extra,
        },
    );
    for j in 0..k.b.len() {
        write_poly(out, &k.b[j]);
        if let Some(seeds) = seeds {
            out.extend_from_slice(&seeds[j]);
        } else {
            write_poly(out, &k.a[j]);
        }
    }
}

fn read_switching_key(params: &Arc<Parameters>, bytes: &[u8], h: &Header) -> Result<SwitchingKey> {
    let digits = params.dnum();
    if h.level as usize != params.max_level() || h.count as usize != digits {
        return Err(DecodeError::InvalidField {
            field: "count",
            value: h.count as u64,
        }
        .into());
    }
    let seeded = h.flags & FLAG_SEEDED != 0;
    let per = key_poly_bytes(params) + if seeded { 32 } else { key_poly_bytes(params) };
    let mut body = Body::new(bytes, per * digits)?;
    let qp = params.qp_basis().clone();
    let (mut b, mut a, mut seeds) = (vec![], vec![], vec![]);
    for _ in 0..digits {
        b.push(body.poly(&qp)?);
        if seeded {
            let s = body.seed();
            a.push(expand_seed_uniform(&s, &qp));
            seeds.push(s);
        } else {
            a.push(body.poly(&qp)?);
        }
    }
    Ok(SwitchingKey {
        params: params.clone(),
        b,
        a,
        seeds: seeded.then_some(seeds),
    })
}

impl RelinearizationKey {
    /// Serialized form; `seeded` writes each `a_j` as its 32-byte seed.
    pub fn to_bytes(&self, seeded: bool) -> Vec<u8> {
        let mut out = Vec::new();
        write_switching_key(&mut out, &self.0, Kind::RelinearizationKey, 0, seeded);
        out
    }

    /// Parses a relinearization key of `params`.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let h = read_header(params, bytes, Kind::RelinearizationKey)?;
        if h.extra != 0 {
            return Err(DecodeError::InvalidField {
                field: "extra",
                value: h.extra,
            }
            .into());
        }
        Ok(Self(read_switching_key(params, bytes, &h)?))
    }
}

impl GaloisKey {
    /// Serialized form; `seeded` writes each `a_j` as its 32-byte seed.
    pub fn to_bytes(&self, seeded: bool) -> Vec<u8> {
        let mut out = Vec::new();
        write_switching_key(
            &mut out,
            &self.key,
            Kind::GaloisKey,
            self.galois_element as u64,
            seeded,
        );
        out
    }

    /// Parses a Galois key of `params`.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let h = read_header(params, bytes, Kind::GaloisKey)?;
        let two_n = 2 * params.n() as u64;
        if h.extra >= two_n || h.extra % 2 == 0 {
            return Err(DecodeError::InvalidField {
                field: "galois element",
                value: h.extra,
            }
            .into());
        }
        let key = read_switching_key(params, bytes, &h)?;
        GaloisKey::from_parts(h.extra as usize, key)
    }
}

impl SecretKey {
    /// Explicit export of the secret key (its ternary coefficients, one
    /// byte each). The caller owns the secret bytes from here on.
    pub fn export_bytes(&self) -> zeroize::Zeroizing<Vec<u8>> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.coeffs.len());
        write_header(
            &mut out,
            self.params(),
            Kind::SecretKey,
            Header {
                kind: Kind::SecretKey as u8,
                flags: 0,
                level: self.params().max_level() as u32,
                scale: 1.0,
                count: 1,
                extra: 0,
            },
        );
        out.extend(self.coeffs.iter().map(|&c| c as u8));
        zeroize::Zeroizing::new(out)
    }

    /// Imports a secret key exported by [`SecretKey::export_bytes`].
    pub fn import_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let h = read_header(params, bytes, Kind::SecretKey)?;
        if h.count != 1 || h.flags != 0 {
            return Err(DecodeError::InvalidField {
                field: "count",
                value: h.count as u64,
            }
            .into());
        }
        let body = Body::new(bytes, params.n())?;
        let mut coeffs: zeroize::Zeroizing<Vec<i8>> =
            zeroize::Zeroizing::new(body.bytes[HEADER_LEN..].iter().map(|&b| b as i8).collect());
        if coeffs.iter().any(|c| !(-1..=1).contains(c)) {
            coeffs.iter_mut().for_each(|c| *c = 0);
            return Err(RlweError::Decode(DecodeError::InvalidField {
                field: "secret coefficient",
                value: 0,
            }));
        }
        SecretKey::from_coefficients(params, &coeffs)
    }
}
