//! Plaintext matrix × encrypted vector, by diagonals with baby-step
//! giant-step rotations (Halevi–Shoup; the building block of
//! bootstrapping's CoeffsToSlots and SlotsToCoeffs, whose DFT matrices
//! factor into a few sparse diagonal matrices).
//!
//! A slots × slots matrix M is given by its nonzero diagonals:
//! diag_d(i) = M(i, (i + d) mod n), so that M·x = Σ_d diag_d ⊙ rot(x, d)
//! (rot: rotation left). Writing d = g·n₁ + j (d signed, in units of the
//! stride every index shares: the DFT factors' diagonals are multiples of a
//! power of two on both sides of 0),
//!
//! M·x = Σ_g rot( Σ_j rot(diag_{g·n₁+j}, −g·n₁) ⊙ rot(x, j), g·n₁ ),
//!
//! so the baby steps rot(x, j) are computed once, from one decomposition
//! of x (hoisted), and each giant step costs one rotation of a sum. The
//! baby steps stay over Q_l ∪ P, not divided by P, and the diagonals are
//! encoded there too, so each giant step's inner sum takes one ModDown
//! instead of one per baby step (double hoisting, Bossuat et al. 2021:
//! at N = 2^16, 13 % off a bootstrapping on AVX2). With
//! D diagonals that is about n₁ + D/n₁ rotations instead of D; n₁ near
//! √D. The diagonals are encoded pre-rotated, at scale q_l, so the result
//! keeps the input's scale one level down, like a product by a constant
//! (or at another scale, [`LinearTransform::apply_to_scale`]).
//!
//! ```
//! use std::collections::BTreeMap;
//! use hecloud_ckks::{*, params::test_literal, linear::LinearTransform};
//! use num_complex::Complex64;
//! let params = CkksParameters::new_insecure_for_tests(test_literal(10, 3), 40)?;
//! let n = params.slots();
//! // (M·x)[i] = 2·x[i] + x[i + 1]: diagonals 0 and 1.
//! let lt = LinearTransform::new(
//!     n,
//!     BTreeMap::from([(0, vec![Complex64::new(2.0, 0.0); n]), (1, vec![Complex64::new(1.0, 0.0); n])]),
//! )?;
//! let keys = KeySet::generate(&params, &lt.rotations(), false)?;
//! let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
//! let x: Vec<f64> = (0..n).map(|i| i as f64 / n as f64).collect();
//! let ct = keys.encrypt(&enc.encode_real(&x, 3, params.default_scale())?)?;
//! let y = enc.decode_real(&keys.decrypt(&lt.apply(&eval, &enc, &ct)?)?)?;
//! assert!((y[5] - (2.0 * x[5] + x[6])).abs() < 1e-6);
//! # Ok::<(), CkksError>(())
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use hecloud_math::RnsPoly;
use hecloud_rlwe::Ciphertext;
use hecloud_rlwe::ops::ExtCiphertext;
use num_complex::Complex64;

use crate::encoder::Encoder;
use crate::error::{CkksError, Result};
use crate::evaluator::{Evaluator, RotationSum};

/// A slots × slots complex matrix by its nonzero diagonals, and the
/// baby-step count its evaluation uses.
///
/// Each application encodes the diagonals at the ciphertext's level,
/// unless [`Self::keep_encoded`] keeps them from one application to the
/// next (for the latest parameters, level and scale: a bootstrapping
/// applies each of its matrices at one of each).
#[derive(Debug, Clone, PartialEq)]
pub struct LinearTransform {
    slots: usize,
    /// diag_d for each nonzero d in [0, slots).
    diagonals: BTreeMap<usize, Vec<Complex64>>,
    /// Every diagonal index is a multiple of it (a power of two).
    stride: usize,
    /// n₁, the number of baby steps.
    baby: usize,
    keep_encoded: bool,
    encoded: EncodedCache,
}

/// The diagonals as encoded for one application, in the order of
/// `LinearTransform::giant_steps`.
struct EncodedDiagonals {
    /// The encoder's parameter hash, its slots, the level and the
    /// encoding scale's bits.
    key: ([u8; 32], usize, usize, u64),
    /// Over Q_l ∪ P ([`Encoder::encode_ext`]).
    plaintexts: Vec<RnsPoly>,
}

/// A cache that takes no part in the matrix's identity: clones start
/// empty and any two compare equal.
#[derive(Default)]
struct EncodedCache(Mutex<Option<Arc<EncodedDiagonals>>>);

impl Clone for EncodedCache {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for EncodedCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for EncodedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.0.lock().map(|c| c.is_some()).unwrap_or(false);
        f.write_str(if cached { "encoded" } else { "not encoded" })
    }
}

impl LinearTransform {
    /// The matrix with these diagonals (indices taken mod `slots`, each
    /// `slots` long; `slots` a power of two). Refused: an empty map, a
    /// diagonal of another length, non-finite entries, two indices equal
    /// mod `slots`.
    pub fn new(slots: usize, diagonals: BTreeMap<i64, Vec<Complex64>>) -> Result<Self> {
        let bad = |why: String| {
            Err(CkksError::ValueOutOfRange(format!(
                "linear transform: {why}"
            )))
        };
        if !slots.is_power_of_two() {
            return bad(format!("{slots} slots, not a power of two"));
        }
        if diagonals.is_empty() {
            return bad("no diagonal".into());
        }
        let mut by_index = BTreeMap::new();
        for (d, v) in diagonals {
            if v.len() != slots {
                return bad(format!("diagonal {d} has {} entries, not {slots}", v.len()));
            }
            if v.iter().any(|c| !c.re.is_finite() || !c.im.is_finite()) {
                return bad(format!("diagonal {d} is not finite"));
            }
            let i = d.rem_euclid(slots as i64) as usize;
            if by_index.insert(i, v).is_some() {
                return bad(format!("two diagonals at {i} mod {slots}"));
            }
        }
        // The DFT factors' diagonals are multiples of a stride g (a power
        // of two) on both sides of 0: baby steps g·j, j < n₁, with n₁ a
        // power of two near √(span of the signed indices / g): the fewest
        // rotations (a hoisted baby step cost 0.6 of a full rotation at
        // boot-n16's top level, on AVX2 and IFMA alike: its inner product
        // reads 7 digits of key from memory; with that, 8 baby steps for
        // 31 or 63 diagonals beat 4 or 16). Undivided baby steps are
        // cheaper still, but 16 of them measured within the host's noise
        // of 8 (2026-12-03, AVX2) for 27 more rotation keys.
        let stride = by_index
            .keys()
            .filter(|&&d| d != 0)
            .map(|&d| 1usize << d.trailing_zeros())
            .min()
            .unwrap_or(slots)
            .min(slots);
        let signed = |d: usize| {
            if d > slots / 2 {
                d as i64 - slots as i64
            } else {
                d as i64
            }
        };
        let (lo, hi) = by_index
            .keys()
            .map(|&d| signed(d))
            .fold((0, 0), |(lo, hi), k| (lo.min(k), hi.max(k)));
        let span = ((hi - lo) as usize / stride) + 1;
        let baby = ((span as f64).sqrt().ceil().max(1.0) as usize)
            .next_power_of_two()
            .min(slots / stride);
        Ok(Self {
            slots,
            diagonals: by_index,
            stride,
            baby,
            keep_encoded: false,
            encoded: EncodedCache::default(),
        })
    }

    /// Whether applications keep the encoded diagonals for the next one
    /// at the same parameters, level and scale (off by default): each
    /// application then skips encoding and transforming
    /// [`Self::diagonal_count`] plaintexts, and the matrix holds them,
    /// (level + 1 + k) · N words each, over Q_l and the k primes of P.
    /// Turning it off drops them.
    pub fn keep_encoded(&mut self, keep: bool) {
        self.keep_encoded = keep;
        if !keep {
            *self.encoded.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// The number of nonzero diagonals, each a plaintext multiplication.
    pub fn diagonal_count(&self) -> usize {
        self.diagonals.len()
    }

    /// The diagonals by giant step, each with its baby step, in the order
    /// of evaluation.
    fn giant_steps(&self) -> BTreeMap<usize, Vec<(usize, &Vec<Complex64>)>> {
        let mut giants: BTreeMap<usize, Vec<(usize, &Vec<Complex64>)>> = BTreeMap::new();
        for (&d, v) in &self.diagonals {
            let (g, j) = self.split(d);
            giants.entry(g).or_default().push((j, v));
        }
        giants
    }

    /// Diagonal `v` of giant step g encoded over Q_l ∪ P at `level` and
    /// `scale`, pre-rotated: rot(diag, −g), slot i holding diag[i − g].
    fn encode_diagonal(
        &self,
        enc: &Encoder,
        v: &[Complex64],
        g: usize,
        level: usize,
        scale: f64,
    ) -> Result<RnsPoly> {
        let n = self.slots;
        let pre: Vec<Complex64> = (0..n).map(|i| v[(i + n - g % n) % n]).collect();
        enc.encode_ext(&pre, level, scale)
    }

    /// Every diagonal encoded at `level` and `scale`, from the cache when
    /// it holds them; kept there for the next call.
    fn kept_encoded(
        &self,
        enc: &Encoder,
        level: usize,
        scale: f64,
    ) -> Result<Arc<EncodedDiagonals>> {
        let key = (
            *enc.params().rlwe().hash(),
            enc.slots(),
            level,
            scale.to_bits(),
        );
        {
            let mut cache = self.encoded.0.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(hit) = cache.as_ref().filter(|c| c.key == key) {
                return Ok(Arc::clone(hit));
            }
            // The old plaintexts go before the new ones are made.
            *cache = None;
        }
        // Encoded outside the lock: a bootstrapper is shared by sessions
        // (whose inputs' scales, and so SlotsToCoeffs' diagonals, may
        // differ), and another application need not wait for this one.
        let plaintexts = self
            .giant_steps()
            .into_iter()
            .flat_map(|(g, terms)| terms.into_iter().map(move |(_, v)| (g, v)))
            .map(|(g, v)| self.encode_diagonal(enc, v, g, level, scale))
            .collect::<Result<Vec<_>>>()?;
        let fresh = Arc::new(EncodedDiagonals { key, plaintexts });
        *self.encoded.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    /// Diagonal d as a giant step (mod slots) and a baby step:
    /// d = giant + stride·j with j < n₁, over the signed d.
    fn split(&self, d: usize) -> (usize, usize) {
        let n = self.slots as i64;
        let k = if d > self.slots / 2 {
            d as i64 - n
        } else {
            d as i64
        } / self.stride as i64;
        let j = k.rem_euclid(self.baby as i64);
        let giant = ((k - j) * self.stride as i64).rem_euclid(n) as usize;
        (giant, j as usize * self.stride)
    }

    /// The dense matrix `m` (rows of `slots` entries), by its nonzero
    /// diagonals.
    pub fn from_dense(m: &[Vec<Complex64>]) -> Result<Self> {
        let n = m.len();
        let mut diagonals = BTreeMap::new();
        for d in 0..n {
            let diag: Vec<Complex64> = (0..n)
                .map(|i| m[i].get((i + d) % n).copied().unwrap_or_default())
                .collect();
            if diag.iter().any(|c| *c != Complex64::default()) {
                diagonals.insert(d as i64, diag);
            }
        }
        Self::new(n, diagonals)
    }

    /// The slots it acts on.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The rotation (left) amounts the evaluation needs keys for.
    pub fn rotations(&self) -> Vec<i64> {
        let mut r: Vec<i64> = self
            .diagonals
            .keys()
            .flat_map(|&d| {
                let (g, j) = self.split(d);
                [g as i64, j as i64]
            })
            .filter(|&k| k != 0)
            .collect();
        r.sort_unstable();
        r.dedup();
        r
    }

    /// M·x in the clear (the reference the tests hold the evaluation to).
    pub fn apply_clear(&self, x: &[Complex64]) -> Vec<Complex64> {
        let n = self.slots;
        (0..n)
            .map(|i| {
                self.diagonals
                    .iter()
                    .map(|(&d, v)| v[i] * x[(i + d) % n])
                    .sum()
            })
            .collect()
    }

    /// M·ct: one level spent, the scale kept. Refused: a ciphertext with
    /// a number of slots other than the matrix's, at level 0, or a missing
    /// rotation key ([`Self::rotations`]).
    pub fn apply(&self, eval: &Evaluator, enc: &Encoder, ct: &Ciphertext) -> Result<Ciphertext> {
        self.apply_to_scale(eval, enc, ct, ct.scale())
    }

    /// M·ct with the result at scale `out_scale`: the diagonals are encoded
    /// at out_scale·q_l/scale, so a change of scale costs nothing beyond
    /// the product's level (bootstrapping folds its constant factors into
    /// the scales this way). Refused as [`Self::apply`], and when that
    /// encoding scale is below 2^20 (the diagonals would lose their
    /// precision) or too large for the modulus.
    pub fn apply_to_scale(
        &self,
        eval: &Evaluator,
        enc: &Encoder,
        ct: &Ciphertext,
        out_scale: f64,
    ) -> Result<Ciphertext> {
        let params = eval.params();
        // Sparse slots: the ciphertext's N/2 slots repeat every `slots`,
        // and the diagonals, encoded at that size, repeat as they do.
        if enc.slots() != self.slots {
            return Err(CkksError::ValueOutOfRange(format!(
                "linear transform of {} slots with an encoder of {}",
                self.slots,
                enc.slots()
            )));
        }
        let level = ct.level();
        if level == 0 {
            return Err(hecloud_rlwe::RlweError::LevelsExhausted { level, need: 1 }.into());
        }
        // Baby steps by their nonzero rotations, over Q_l ∪ P and not
        // divided by P (double hoisting): each giant step's sum of them,
        // times diagonals encoded over Q_l ∪ P, takes one ModDown, where
        // each rotation took one (the terms of baby step 0, the input
        // itself, need none and join that ModDown's pass).
        let mut used: Vec<i64> = self
            .diagonals
            .keys()
            .map(|&d| self.split(d).1 as i64)
            .filter(|&j| j != 0)
            .collect();
        used.sort_unstable();
        used.dedup();
        let rotated: BTreeMap<usize, ExtCiphertext> = used
            .iter()
            .map(|&j| j as usize)
            .zip(eval.rotate_hoisted_ext(ct, &used)?)
            .collect();
        let scale = out_scale * params.q_f64(level) / ct.scale();
        if !(scale.is_finite() && (2f64.powi(20)..crate::evaluator::MAX_CONSTANT).contains(&scale))
        {
            return Err(CkksError::InvalidScale(scale.log2()));
        }
        let kept = match self.keep_encoded {
            true => Some(self.kept_encoded(enc, level, scale)?),
            false => None,
        };
        let mut kept = kept.as_ref().map(|k| k.plaintexts.iter());
        // The giant steps' rotations share one ModDown, fused with the
        // rescale.
        let mut total = RotationSum::default();
        for (g, terms) in self.giant_steps() {
            let mut direct: Option<Ciphertext> = None;
            let mut products: Vec<(&ExtCiphertext, Cow<'_, RnsPoly>)> = Vec::new();
            for (j, v) in terms {
                let pt = match kept.as_mut() {
                    Some(plaintexts) => {
                        Cow::Borrowed(plaintexts.next().expect("one plaintext per diagonal"))
                    }
                    None => Cow::Owned(self.encode_diagonal(enc, v, g, level, scale)?),
                };
                if j == 0 {
                    let mut term = ct.map_polys(|c| c.mul_prefix(&pt))?;
                    term.set_scale(ct.scale() * scale);
                    direct = Some(term);
                } else {
                    products.push((&rotated[&j], pt));
                }
            }
            // The baby steps' products summed limb by limb in one pass.
            let undivided = if products.is_empty() {
                None
            } else {
                let terms: Vec<(&ExtCiphertext, &RnsPoly)> =
                    products.iter().map(|(x, pt)| (*x, pt.as_ref())).collect();
                Some(ExtCiphertext::sum_of_products(&terms, scale)?)
            };
            match (g, undivided) {
                (0, undivided) => {
                    if let Some(x) = undivided {
                        eval.add_ext_rotation(&mut total, x)?;
                    }
                    if let Some(d) = direct {
                        eval.add_rotation(&mut total, &d, 0)?;
                    }
                }
                (g, Some(x)) => {
                    let inner = eval.mod_down_ext(x, direct.as_ref())?;
                    eval.add_rotation(&mut total, &inner, g as i64)?;
                }
                (g, None) => {
                    let inner = direct.expect("a giant step has a term");
                    eval.add_rotation(&mut total, &inner, g as i64)?;
                }
            }
        }
        let mut out = eval.rescale_rotation_sum(total)?;
        out.set_scale(out_scale);
        Ok(out)
    }
}
