//! Ciphertexts and plaintexts: whole, piece by piece, or any byte range,
//! and back.

use std::sync::Arc;

use hecloud_math::pack::packed_len;

use super::decoder::CiphertextDecoder;
use super::header::{
    FLAG_SEEDED, HEADER_LEN, Header, Kind, check_level, check_scale, read_header, write_header,
};
use super::limbs::{Body, pack_limb, pack_limb_range, residue_bits, write_poly};
use crate::ciphertext::{Ciphertext, Plaintext};
use crate::error::{DecodeError, Result};
use crate::keys::KeyId;
use crate::params::Parameters;

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
    /// #     log_n: 12, log_q: vec![40, 30], log_p: vec![38],
    /// #     secret: SecretDistribution::Ternary, sigma: 3.2, dnum: None, plaintext_modulus: None,
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
    /// #     log_n: 12, log_q: vec![40, 30], log_p: vec![38],
    /// #     secret: SecretDistribution::Ternary, sigma: 3.2, dnum: None, plaintext_modulus: None,
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
        write_ciphertext_header(
            out,
            self.params(),
            CiphertextMeta {
                seeded,
                level: self.level(),
                scale: self.scale(),
                count: self.polys().len(),
                factor: self.factor(),
                key: self.key_id(),
            },
        );
        seeded
    }

    /// Length of [`Ciphertext::to_bytes`].
    pub fn serialized_len(&self) -> usize {
        if self.seed().is_some() && self.degree() == 1 {
            self.params().seeded_ciphertext_bytes(self.level())
        } else {
            HEADER_LEN + self.params().poly_bytes(self.level()) * self.polys().len()
        }
    }

    /// Parses a ciphertext that must belong to `params`.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let mut d = CiphertextDecoder::new(params, bytes.len());
        d.push(bytes)?;
        d.finish()
    }
}

/// What a ciphertext's header says.
pub(crate) struct CiphertextMeta {
    /// c_1 goes as its seed.
    pub seeded: bool,
    pub level: usize,
    pub scale: f64,
    /// Components.
    pub count: usize,
    /// A BGV ciphertext's factor (ignored without a plaintext modulus).
    pub factor: u64,
    pub key: KeyId,
}

/// The header of a ciphertext: of one in memory ([`Ciphertext::to_bytes`])
/// and of one serialized as it is encrypted
/// ([`crate::Encryptor::encrypt_sk_pieces`]).
pub(crate) fn write_ciphertext_header(
    out: &mut Vec<u8>,
    params: &Parameters,
    meta: CiphertextMeta,
) {
    write_header(
        out,
        params,
        Kind::Ciphertext,
        Header {
            kind: Kind::Ciphertext as u8,
            flags: if meta.seeded { FLAG_SEEDED } else { 0 },
            level: meta.level as u32,
            scale: meta.scale,
            count: meta.count as u32,
            extra: if params.plaintext_modulus().is_some() {
                meta.factor
            } else {
                0
            },
            key: meta.key,
        },
    );
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
                key: KeyId::NONE,
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
        if !h.key.is_none() {
            return Err(DecodeError::InvalidField {
                field: "key id of a plaintext",
                value: 1,
            }
            .into());
        }
        let mut body = Body::new(bytes, params.poly_bytes(level))?;
        let poly = body.poly(params.q_at(level)?)?;
        Plaintext::new(params, poly, level, h.scale)
    }
}
