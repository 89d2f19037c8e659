//! The streaming decoder of ciphertexts.

use std::sync::Arc;

use hecloud_math::pack::PolyUnpacker;
use hecloud_math::{Domain, RnsPoly, sampling::expand_seed_uniform};

use super::header::{
    FLAG_SEEDED, HEADER_LEN, Kind, MAX_CIPHERTEXT_COMPONENTS, check_level, check_scale, read_header,
};
use super::limbs::{limb_ranges, unpack_limbs};
use crate::ciphertext::Ciphertext;
use crate::error::{DecodeError, Result, RlweError};
use crate::params::Parameters;

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
/// #     log_n: 12, log_q: vec![40, 30], log_p: vec![38],
/// #     secret: SecretDistribution::Ternary, sigma: 3.2, dnum: None, plaintext_modulus: None,
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
    factor: u64,
    key: crate::keys::KeyId,
    seeded: bool,
    /// The polynomials given in full (c_0 alone if seeded).
    polys: Vec<PolyUnpacker>,
    /// Byte length and residue bits of every limb, in order (the
    /// polynomials know their primes).
    limbs: Vec<(usize, u32)>,
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
            factor,
            key,
            polys,
            seeded_c1,
            ..
        } = body;
        let polys: Vec<RnsPoly> = polys
            .into_iter()
            .map(|p| p.finish(Domain::Ntt).expect("every limb unpacked (`done`)"))
            .collect();
        let mut ct = match seeded_c1 {
            Some((seed, c1)) => {
                let c0 = polys.into_iter().next().expect("c_0");
                Ciphertext::from_seed(&self.params, c0, c1, seed, level, scale)
            }
            None if body.seeded => Err(truncated(self.total)),
            None => Ciphertext::new(&self.params, polys, level, scale),
        }?;
        ct.set_factor(factor);
        ct.set_key_id(key);
        Ok(ct)
    }
}

/// The `extra` field of a ciphertext: the factor, a unit of Z_t, under a
/// plaintext modulus t; 0 otherwise (read as factor 1).
fn check_factor(params: &Parameters, extra: u64) -> Result<u64> {
    let unit = |t: u64| (1..t).contains(&extra) && gcd(extra, t) == 1;
    match params.plaintext_modulus() {
        None if extra == 0 => Ok(1),
        Some(t) if unit(t) => Ok(extra),
        _ => Err(DecodeError::InvalidField {
            field: "factor",
            value: extra,
        }
        .into()),
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl CiphertextBody {
    /// Checks the header against `params` and the announced length `total`
    /// before allocating anything.
    fn new(params: &Parameters, header: &[u8], total: usize) -> Result<Self> {
        let h = read_header(params, header, Kind::Ciphertext)?;
        let level = check_level(params, h.level)?;
        check_scale(h.scale)?;
        let factor = check_factor(params, h.extra)?;
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
            .map(|(r, bits)| (r.len(), bits))
            .collect();
        Ok(Self {
            level,
            scale: h.scale,
            factor,
            key: h.key,
            seeded,
            polys: (0..given).map(|_| PolyUnpacker::new(basis)).collect(),
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
            let c1 = expand_seed_uniform(seed, self.polys[0].basis());
            self.seeded_c1 = Some((*seed, c1));
            used = 32;
        }
        let first = self.done;
        let mut units = Vec::new();
        while let Some(&(len, bits)) = self.limbs.get(self.done)
            && data.len() - used >= len
        {
            units.push((&data[used..used + len], bits));
            used += len;
            self.done += 1;
        }
        if !units.is_empty() {
            let dsts = self
                .polys
                .iter_mut()
                .flat_map(PolyUnpacker::limbs)
                .skip(first);
            unpack_limbs(
                dsts.zip(units)
                    .map(|(dst, (src, bits))| (dst, src, bits))
                    .collect(),
            )?;
        }
        Ok(used)
    }
}
