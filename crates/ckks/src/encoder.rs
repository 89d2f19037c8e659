//! The CKKS encoder: complex (or real) vectors ↔ plaintext polynomials
//! through the canonical embedding, computed with the "special" FFT over the
//! rotation group ⟨5⟩ of Z_2N^* (Cheon–Kim–Kim–Song, HEAAN).
//!
//! Slot i of a plaintext m holds m(ζ^{5^i}) / Δ with ζ = e^{iπ/N}, so the
//! automorphism X → X^{5^k} rotates the slots left by k and X → X^{-1}
//! conjugates them. A sparse encoder with `slots` < N/2 packs m(X) =
//! m'(X^{N/(2·slots)}): the slot vector repeats N/(2·slots) times.

use std::sync::Arc;

use hecloud_math::backend::default_backend;
use hecloud_math::{Domain, Modulus, RnsPoly};
use hecloud_rlwe::Plaintext;
use num_complex::Complex64;
use rayon::prelude::*;
use zeroize::{Zeroize, Zeroizing};

use crate::error::{CkksError, Result};
use crate::params::CkksParameters;

/// The rounded coefficients of an encoded vector, not yet reduced modulo
/// the primes ([`Encoder::coefficients_real`]); zeroized on drop.
pub enum Coefficients {
    /// Each |x| < 2^64: x = x⁺ − x⁻, both parts as words.
    Split((Zeroizing<Vec<u64>>, Zeroizing<Vec<u64>>)),
    /// Some |x| ≥ 2^64.
    Wide(Zeroizing<Vec<i128>>),
}

impl Coefficients {
    /// The coefficients modulo `q` into `dst`, reduced.
    ///
    /// # Panics
    /// If `dst` is not N long.
    pub fn write_limb(&self, q: &Modulus, dst: &mut [u64]) {
        match self {
            Self::Split((pos, neg)) => default_backend().linear_combination(
                q,
                dst,
                None,
                &[pos, neg],
                &[1, q.neg(1)],
                &[64, 64],
            ),
            Self::Wide(rounded) => {
                assert_eq!(dst.len(), rounded.len(), "a limb of N residues");
                for (o, &x) in dst.iter_mut().zip(rounded.iter()) {
                    // Barrett on |x| (a 128-bit division per residue cost
                    // more than the NTTs: 15 ms per top-level plaintext).
                    let r = q.reduce_u128(x.unsigned_abs());
                    *o = if x < 0 { q.neg(r) } else { r };
                }
            }
        }
    }
}

impl std::fmt::Debug for Coefficients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = match self {
            Self::Split((pos, _)) => pos.len(),
            Self::Wide(x) => x.len(),
        };
        write!(f, "Coefficients({n}, redacted)")
    }
}

/// Encodes and decodes vectors of `slots` complex numbers.
///
/// ```
/// use hecloud_ckks::{CkksParameters, Encoder, params::test_literal};
/// use num_complex::Complex64;
/// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 40).unwrap();
/// let enc = Encoder::new(&params);
/// let v: Vec<Complex64> = (0..512).map(|i| Complex64::new(i as f64 / 512.0, -0.5)).collect();
/// let pt = enc.encode(&v, 2, params.default_scale()).unwrap();
/// let back = enc.decode(&pt).unwrap();
/// assert!(back.iter().zip(&v).all(|(a, b)| (a - b).norm() < 1e-9));
/// ```
#[derive(Debug, Clone)]
pub struct Encoder {
    params: Arc<CkksParameters>,
    slots: usize,
    /// 5^j mod 2N for j < N/2.
    rot_group: Vec<usize>,
    /// e^{2πik/2N} for k ≤ 2N.
    ksi: Vec<Complex64>,
    /// [`Self::twiddle`]s of the FFTs over `slots`, stage by stage (the
    /// stage of half-length h at offset h − 1), forward and inverse: the
    /// butterflies read them in order instead of gathering from `ksi`
    /// through a division.
    stage_twiddles: [Vec<Complex64>; 2],
}

impl Encoder {
    /// An encoder of N/2 slots.
    pub fn new(params: &Arc<CkksParameters>) -> Self {
        Self::build(params, params.slots())
    }

    /// An encoder of `slots` slots (a power of two in 1..=N/2).
    pub fn with_slots(params: &Arc<CkksParameters>, slots: usize) -> Result<Self> {
        if !slots.is_power_of_two() || slots > params.slots() {
            return Err(CkksError::Slots(format!(
                "{slots} is not a power of two in 1..={}",
                params.slots()
            )));
        }
        Ok(Self::build(params, slots))
    }

    fn build(params: &Arc<CkksParameters>, slots: usize) -> Self {
        let n = params.n();
        let m = 2 * n;
        let mut rot_group = Vec::with_capacity(n / 2);
        let mut g = 1usize;
        for _ in 0..n / 2 {
            rot_group.push(g);
            g = g * 5 % m;
        }
        let ksi = (0..=m)
            .map(|k| {
                let a = 2.0 * std::f64::consts::PI * k as f64 / m as f64;
                Complex64::new(a.cos(), a.sin())
            })
            .collect();
        let mut enc = Self {
            params: params.clone(),
            slots,
            rot_group,
            ksi,
            stage_twiddles: [Vec::new(), Vec::new()],
        };
        enc.stage_twiddles = [false, true].map(|inverse| {
            std::iter::successors(Some(2), |&len| Some(2 * len))
                .take_while(|&len| len <= slots)
                .flat_map(|len| (0..len / 2).map(move |j| (j, len)))
                .map(|(j, len)| enc.twiddle(j, len, inverse))
                .collect()
        });
        enc
    }

    /// The twiddles of the FFT stage of half-length `lenh`.
    fn stage_twiddles(&self, lenh: usize, inverse: bool) -> &[Complex64] {
        &self.stage_twiddles[usize::from(inverse)][lenh - 1..2 * lenh - 1]
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The parameters.
    pub fn params(&self) -> &Arc<CkksParameters> {
        &self.params
    }

    fn bit_reverse(v: &mut [Complex64]) {
        let n = v.len();
        let mut j = 0;
        for i in 1..n {
            let mut bit = n >> 1;
            while j & bit != 0 {
                j ^= bit;
                bit >>= 1;
            }
            j |= bit;
            if i < j {
                v.swap(i, j);
            }
        }
    }

    /// The twiddle factor j of the special FFT's butterfly stage of
    /// length `len` (decoding direction; `inverse`: encoding): also what
    /// the homomorphic DFT of bootstrapping is made of ([`crate::dft`]).
    pub(crate) fn twiddle(&self, j: usize, len: usize, inverse: bool) -> Complex64 {
        let (m, lenq) = (2 * self.params.n(), 4 * len);
        let r = self.rot_group[j] % lenq;
        self.ksi[if inverse { lenq - r } else { r } * (m / lenq)]
    }

    /// Evaluation at the slot roots (decoding direction).
    fn fft_special(&self, v: &mut [Complex64]) {
        let size = v.len();
        Self::bit_reverse(v);
        let mut len = 2;
        while len <= size {
            let lenh = len / 2;
            let tw = self.stage_twiddles(lenh, false);
            for i in (0..size).step_by(len) {
                for j in 0..lenh {
                    let u = v[i + j];
                    let w = v[i + j + lenh] * tw[j];
                    v[i + j] = u + w;
                    v[i + j + lenh] = u - w;
                }
            }
            len *= 2;
        }
    }

    /// Interpolation from the slot roots (encoding direction).
    fn fft_special_inv(&self, v: &mut [Complex64]) {
        let size = v.len();
        let mut len = size;
        while len >= 2 {
            let lenh = len / 2;
            let tw = self.stage_twiddles(lenh, true);
            for i in (0..size).step_by(len) {
                for j in 0..lenh {
                    let u = v[i + j] + v[i + j + lenh];
                    let w = (v[i + j] - v[i + j + lenh]) * tw[j];
                    v[i + j] = u;
                    v[i + j + lenh] = w;
                }
            }
            len /= 2;
        }
        Self::bit_reverse(v);
        let inv = 1.0 / size as f64;
        for x in v.iter_mut() {
            *x *= inv;
        }
    }

    /// The coefficient vector (real numbers, before scaling) of `values`
    /// (at most `slots`, the rest zero).
    fn coefficients(&self, values: &[Complex64]) -> Result<Vec<f64>> {
        if values.len() > self.slots {
            return Err(CkksError::Slots(format!(
                "{} values for {} slots",
                values.len(),
                self.slots
            )));
        }
        if values
            .iter()
            .any(|z| !z.re.is_finite() || !z.im.is_finite())
        {
            return Err(CkksError::ValueOutOfRange("NaN or infinity".into()));
        }
        let mut v = vec![Complex64::new(0.0, 0.0); self.slots];
        v[..values.len()].copy_from_slice(values);
        self.fft_special_inv(&mut v);
        let n = self.params.n();
        let gap = n / 2 / self.slots;
        let mut coeffs = vec![0.0; n];
        for (i, z) in v.iter().enumerate() {
            coeffs[i * gap] = z.re;
            coeffs[n / 2 + i * gap] = z.im;
        }
        Ok(coeffs)
    }

    /// Encodes complex `values` at `level` with `scale`.
    pub fn encode(&self, values: &[Complex64], level: usize, scale: f64) -> Result<Plaintext> {
        let coeffs = self.coefficients(values)?;
        self.plaintext(
            &self.round_coefficients(&coeffs, level, scale)?,
            level,
            scale,
        )
    }

    /// Encodes complex `values` at `level` with `scale` over Q_l ∪ P, the
    /// key-switching basis (NTT): a plaintext for the undivided rotations
    /// of [`crate::Evaluator::rotate_hoisted_ext`]. Its first l + 1 limbs
    /// are [`Self::encode`]'s.
    ///
    /// ```
    /// use hecloud_ckks::{CkksParameters, Encoder, params::test_literal};
    /// use num_complex::Complex64;
    /// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 40).unwrap();
    /// let enc = Encoder::new(&params);
    /// let v = vec![Complex64::new(0.25, -1.0); params.slots()];
    /// let ext = enc.encode_ext(&v, 1, params.default_scale()).unwrap();
    /// let pt = enc.encode(&v, 1, params.default_scale()).unwrap();
    /// assert_eq!(ext.limbs(), 2 + params.rlwe().p_basis().len());
    /// assert_eq!(&ext.data()[..2 * params.n()], pt.poly().data());
    /// ```
    pub fn encode_ext(&self, values: &[Complex64], level: usize, scale: f64) -> Result<RnsPoly> {
        let coeffs = self.coefficients(values)?;
        let form = self.round_coefficients(&coeffs, level, scale)?;
        let basis = self.params.rlwe().qp_at(level)?;
        Ok(self.reduced(&form, basis))
    }

    /// Encodes real `values` at `level` with `scale`.
    pub fn encode_real(&self, values: &[f64], level: usize, scale: f64) -> Result<Plaintext> {
        self.plaintext(&self.coefficients_real(values, level, scale)?, level, scale)
    }

    /// Encodes real `values` at `level` with `scale` into their rounded
    /// coefficients, reduced modulo each prime only when asked
    /// ([`Coefficients::write_limb`]): the input of
    /// [`hecloud_rlwe::Encryptor::encrypt_sk_pieces`], which encrypts and
    /// serializes a limb at a time, so that no plaintext over all of Q is
    /// made. The same polynomial as [`Encoder::encode_real`], before its
    /// NTT.
    ///
    /// ```
    /// use hecloud_ckks::{CkksParameters, Encoder, params::test_literal};
    /// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 40).unwrap();
    /// let enc = Encoder::new(&params);
    /// let form = enc.coefficients_real(&[0.5, -1.25], 2, params.default_scale()).unwrap();
    /// let mut pt = enc.encode_real(&[0.5, -1.25], 2, params.default_scale()).unwrap().into_poly();
    /// pt.to_coefficient();
    /// let q1 = params.rlwe().q_at(2).unwrap().moduli()[1];
    /// let mut limb = vec![0; params.n()];
    /// form.write_limb(&q1, &mut limb);
    /// assert_eq!(limb, pt.limb(1));
    /// ```
    pub fn coefficients_real(
        &self,
        values: &[f64],
        level: usize,
        scale: f64,
    ) -> Result<Coefficients> {
        let z: Vec<Complex64> = values.iter().map(|&x| Complex64::new(x, 0.0)).collect();
        let coeffs = self.coefficients(&z)?;
        self.round_coefficients(&coeffs, level, scale)
    }

    /// Rounds `coeffs · scale`, each below [`representable_bound`] at
    /// `level`.
    fn round_coefficients(&self, coeffs: &[f64], level: usize, scale: f64) -> Result<Coefficients> {
        let basis = self.params.rlwe().q_at(level)?;
        if !(scale.is_finite() && scale >= 1.0) {
            return Err(CkksError::InvalidScale(scale.log2()));
        }
        let limit = representable_bound(basis.log_q(), scale);
        let mut rounded = Vec::with_capacity(coeffs.len());
        for &c in coeffs {
            let x = (c * scale).round();
            if !x.is_finite() || x.abs() >= limit {
                return Err(CkksError::ValueOutOfRange(format!(
                    "a coefficient of 2^{:.1} at scale 2^{:.1} exceeds the modulus at level \
                     {level} or the decoding headroom (values below 2^{})",
                    x.abs().log2(),
                    scale.log2(),
                    crate::DECODE_HEADROOM_BITS - 1.0,
                )));
            }
            rounded.push(x as i128);
        }
        if rounded.iter().all(|x| x.unsigned_abs() <= u64::MAX as u128) {
            // The usual case (|c·Δ| < 2^64): x = x⁺ − x⁻ with both parts in
            // a u64, so each limb is the vectorised x⁺·1 + x⁻·(q − 1) mod q.
            // Scalar 128-bit reductions here cost as much as the NTTs.
            let part = |neg: bool| -> Vec<u64> {
                rounded
                    .iter()
                    .map(|&x| {
                        if (x < 0) == neg {
                            x.unsigned_abs() as u64
                        } else {
                            0
                        }
                    })
                    .collect()
            };
            let parts = (part(false).into(), part(true).into());
            rounded.zeroize();
            Ok(Coefficients::Split(parts))
        } else {
            Ok(Coefficients::Wide(rounded.into()))
        }
    }

    /// The plaintext of rounded coefficients at `level` with `scale`:
    /// reduced modulo every prime of Q_level, then to the NTT domain.
    fn plaintext(&self, form: &Coefficients, level: usize, scale: f64) -> Result<Plaintext> {
        let rlwe = self.params.rlwe();
        let poly = self.reduced(form, rlwe.q_at(level)?);
        Ok(Plaintext::new(rlwe, poly, level, scale)?)
    }

    /// The rounded coefficients modulo every prime of `basis`, then to the
    /// NTT domain.
    fn reduced(&self, form: &Coefficients, basis: &Arc<hecloud_math::RnsBasis>) -> RnsPoly {
        let mut poly = RnsPoly::zero(basis, Domain::Coefficient);
        poly.data_mut()
            .par_chunks_exact_mut(self.params.n())
            .zip(basis.moduli())
            .for_each(|(limb, m)| form.write_limb(m, limb));
        poly.to_ntt();
        poly
    }

    /// Plaintext polynomial coefficients as centered floats divided by the
    /// scale. Reads only the primes up to [`CkksParameters::decoding_level`]
    /// (one or two for the usual scales), for values below
    /// 2^(log2 scale + 54) in magnitude, and checks every coefficient
    /// against the next prime where the plaintext has one: a larger value
    /// (a computation that outgrew the headroom) is read over all the
    /// plaintext's primes, checked by its last, or refused with
    /// [`CkksError::ValueOutOfRange`]; it never decodes as another value.
    /// A plaintext with no prime above those read (a ciphertext dropped
    /// below [`CkksParameters::checked_decoding_level`], or one that used
    /// its levels up) is decoded unchecked.
    fn decode_coefficients(&self, pt: &Plaintext) -> Result<Vec<f64>> {
        if pt.params().hash() != self.params.rlwe().hash() {
            return Err(hecloud_rlwe::RlweError::ParameterMismatch.into());
        }
        // The scale comes with the ciphertext (from a server, untrusted):
        // one below 1 would divide the values up to infinities.
        let scale = pt.scale();
        if !(scale.is_finite() && scale >= 1.0) {
            return Err(CkksError::InvalidScale(scale.log2()));
        }
        let top = pt.level();
        let first = self.params.decoding_level(scale, top);
        if let Some(v) = self.decode_checked(pt, first)? {
            return Ok(v);
        }
        // More than the headroom: all the primes but the last, checked by it.
        if first + 1 < top
            && let Some(v) = self.decode_checked(pt, top - 1)?
        {
            return Ok(v);
        }
        // Reached only below the top level (the top one has no prime above
        // to check it, and reads every value).
        Err(CkksError::ValueOutOfRange(if first + 1 < top {
            format!(
                "a decrypted value exceeds what the primes up to level {} hold (checked \
                 by the prime at level {top}): it cannot be read at this level",
                top - 1
            )
        } else {
            format!(
                "a decrypted value exceeds the headroom read at level {first} (2^{} times \
                 the scale) and level {top} has no prime above it to check a wider \
                 reading: keep the ciphertext at level {} or above to read it",
                crate::DECODE_HEADROOM_BITS - 1.0,
                first + 2
            )
        }))
    }

    /// The coefficients over the primes up to `level` divided by the scale,
    /// or `None` where the prime above (if the plaintext has it) shows one
    /// of them does not fit those primes.
    fn decode_checked(&self, pt: &Plaintext, level: usize) -> Result<Option<Vec<f64>>> {
        let (scale, n) = (pt.scale(), self.params.n());
        let mut p = RnsPoly::from_buffer_unchecked(
            self.params.rlwe().q_at(level)?,
            pt.poly().domain(),
            pt.poly().data()[..(level + 1) * n].to_vec(),
        );
        p.to_coefficient();
        // The next prime's residues (where the plaintext has it), which an
        // exact value must match.
        let check = (level < pt.level()).then(|| {
            let (basis, l) = (pt.poly().basis(), level + 1);
            let mut r = pt.poly().limb(l).to_vec();
            if pt.poly().domain() == Domain::Ntt {
                default_backend().ntt_inverse(&basis.tables()[l], &mut r);
            }
            (basis.moduli()[l], r)
        });
        let moduli = p.basis().moduli();
        // Whether coefficient j's value, given by its residue mod the check
        // prime, matches that prime's limb (every value fits without one).
        let fits = |j: usize, residue_of: &dyn Fn(&hecloud_math::Modulus) -> u64| {
            check.as_ref().is_none_or(|(m, r)| residue_of(m) == r[j])
        };
        let values: Option<Vec<f64>> = match moduli {
            [m0] => (0..n)
                .map(|j| {
                    let x = p.limb(0)[j];
                    let v = m0.center(x);
                    // v = x, or x − q0 when centered below zero.
                    let residue = |m: &hecloud_math::Modulus| {
                        let r = m.reduce(x);
                        if v < 0 {
                            m.sub(r, m.reduce(m0.value()))
                        } else {
                            r
                        }
                    };
                    fits(j, &residue).then_some(v as f64 / scale)
                })
                .collect(),
            [m0, m1] => {
                // Two-prime CRT in 128-bit integers.
                let (q0, q1) = (m0.value(), m1.value());
                let q0_inv_mod_q1 = m1.inv(m1.reduce(q0))?;
                let big = q0 as u128 * q1 as u128;
                let half = big / 2;
                let (l0, l1) = (p.limb(0), p.limb(1));
                // q0 and q0·q1 mod the check prime, for the residues of x.
                let (q0_c, big_c) = check.as_ref().map_or((0, 0), |(m, _)| {
                    let q0_c = m.reduce(q0);
                    (q0_c, m.mul(q0_c, m.reduce(q1)))
                });
                (0..n)
                    .map(|j| {
                        // x = x0 + q0·((x1 − x0)·q0^-1 mod q1)
                        let t = m1.mul(m1.sub(l1[j], m1.reduce(l0[j])), q0_inv_mod_q1);
                        let x = l0[j] as u128 + q0 as u128 * t as u128;
                        let negative = x > half;
                        let residue = |m: &hecloud_math::Modulus| {
                            let r = m.add(m.reduce(l0[j]), m.mul(q0_c, m.reduce(t)));
                            if negative { m.sub(r, big_c) } else { r }
                        };
                        let v = if negative {
                            -((big - x) as f64)
                        } else {
                            x as f64
                        };
                        fits(j, &residue).then_some(v / scale)
                    })
                    .collect()
            }
            // Exact big-integer CRT over the primes read.
            _ => p
                .to_bigint_centered()?
                .iter()
                .enumerate()
                .map(|(j, x)| {
                    let residue = |m: &hecloud_math::Modulus| {
                        let q = num_bigint::BigInt::from(m.value());
                        let r = ((x % &q) + &q) % &q;
                        r.to_u64_digits().1.first().copied().unwrap_or(0)
                    };
                    fits(j, &residue).then_some(num_traits_to_f64(x) / scale)
                })
                .collect(),
        };
        Ok(values)
    }

    /// Decodes a plaintext into `slots` complex numbers.
    pub fn decode(&self, pt: &Plaintext) -> Result<Vec<Complex64>> {
        let coeffs = self.decode_coefficients(pt)?;
        let n = self.params.n();
        let gap = n / 2 / self.slots;
        let mut v: Vec<Complex64> = (0..self.slots)
            .map(|i| Complex64::new(coeffs[i * gap], coeffs[n / 2 + i * gap]))
            .collect();
        self.fft_special(&mut v);
        Ok(v)
    }

    /// Decodes the real parts.
    pub fn decode_real(&self, pt: &Plaintext) -> Result<Vec<f64>> {
        Ok(self.decode(pt)?.into_iter().map(|z| z.re).collect())
    }
}

/// A big integer as the nearest f64.
fn num_traits_to_f64(x: &num_bigint::BigInt) -> f64 {
    let bits = x.bits();
    if bits <= 120 {
        return i128::try_from(x).map(|v| v as f64).unwrap_or(f64::NAN);
    }
    let shift = bits - 120;
    let top: num_bigint::BigInt = x >> shift;
    i128::try_from(&top)
        .map(|v| v as f64 * (shift as f64).exp2())
        .unwrap_or(f64::NAN)
}

/// What |round(v·Δ)| must stay below for a value v at scale Δ taken at a
/// level whose modulus Q_l has `log_q` bits: Q_l / 2 (beyond it the value
/// wraps around the modulus), 2^126 (rounding goes through an i128) and
/// Δ·2^54 (decoding reads the primes of [`crate::DECODE_HEADROOM_BITS`]
/// above the scale, and a larger value would decode as another one).
pub(crate) fn representable_bound(log_q: f64, scale: f64) -> f64 {
    (log_q - 1.0)
        .min(126.0)
        .min(scale.log2() + crate::DECODE_HEADROOM_BITS - 1.0)
        .exp2()
}
