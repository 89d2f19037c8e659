//! CKKS bootstrapping: [`mod_raise`], [`EvalMod`], the homomorphic DFTs of
//! [`crate::dft`], sparse-secret encapsulation ([`EncapsulationKeys`]) and
//! [`Bootstrapper`], which composes them; [`BootPreset`] names
//! bootstrappable parameter sets (a 128-bit one at N = 2^16). Full and
//! sparse slots ([`BootstrapLiteral::slots`]: a trace after ModRaise keeps
//! the sparse message's subring). [`EvalMod`] can follow the sine by an
//! arcsine correction ([`BootstrapLiteral::arcsine_degree`]). Not built
//! yet: double hoisting (docs/bootstrapping.md).
//!
//! After [`mod_raise`], a ciphertext that decrypted to t mod q₀ decrypts to
//! t + q₀·I mod Q_L, with I a small integer polynomial (its coefficients
//! are bounded by about the secret's Hamming weight, in practice a few
//! standard deviations of √(h/12)). CoeffsToSlots puts the coefficients
//! into slots; there, divided by q₀, each is an integer plus the message's
//! small fraction, and [`EvalMod`] removes the integer:
//! y mod 1 ≈ sin(2πy)/2π for y near an integer.
//!
//! ```
//! use hecloud_ckks::{Encoder, Evaluator, KeySet, boot::{BootPreset, EncapsulationKeys}};
//! use num_complex::Complex64;
//! // The test-sized layout (insecure); BootPreset::N16 is the 128-bit one.
//! let (params, boot) = BootPreset::TestN12.build()?;
//! let keys = KeySet::generate_at_levels(&params, &boot.rotation_levels(), true)?;
//! let hamming = boot.literal().ephemeral_hamming.unwrap_or(32);
//! let encapsulation = EncapsulationKeys::generate(&params, keys.secret_key(), hamming)?;
//! let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
//! let z: Vec<Complex64> = (0..params.slots())
//!     .map(|k| Complex64::new((k as f64).sin(), (k as f64).cos() / 2.0))
//!     .collect();
//! // A ciphertext that has run out of levels…
//! let spent = keys.encrypt(&enc.encode(&z, 0, params.default_scale())?)?;
//! // …comes back with levels to spend, at the default scale.
//! let fresh = boot.bootstrap(&eval, Some(&encapsulation), &spent)?;
//! assert_eq!(fresh.level(), boot.output_level());
//! let got = enc.decode(&keys.decrypt(&fresh)?)?;
//! assert!(z.iter().zip(&got).all(|(a, b)| (a - b).norm() < 1e-4));
//! # Ok::<(), hecloud_ckks::CkksError>(())
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use hecloud_math::{Domain, RnsPoly};
use hecloud_rlwe::Ciphertext;

use crate::dft::HomomorphicDft;
use crate::error::{CkksError, Result};
use crate::evaluator::Evaluator;
use crate::fixed::{Fixed, chebyshev_through_integers};
use crate::linear::LinearTransform;
use crate::params::CkksParameters;
use crate::polynomial::{ChebyshevOps, ChebyshevPolynomial, chebyshev_product};

/// The ciphertext at level 0 lifted to the top level: each coefficient of
/// c₀ and c₁, centred mod q₀, is taken as an integer mod every prime of
/// Q_L. The scale is kept. Refused: a ciphertext above level 0 (drop it
/// first: the lift reads q₀ only) or not of degree 1.
pub fn mod_raise(params: &Arc<CkksParameters>, ct: &Ciphertext) -> Result<Ciphertext> {
    if ct.level() != 0 {
        return Err(CkksError::ValueOutOfRange(format!(
            "ModRaise takes a ciphertext at level 0, not {}",
            ct.level()
        )));
    }
    if ct.degree() != 1 {
        return Err(hecloud_rlwe::RlweError::CiphertextDegree {
            expected: 1,
            found: ct.degree(),
        }
        .into());
    }
    let rlwe = params.rlwe();
    let top = params.max_level();
    let basis = rlwe.q_at(top)?.clone();
    let q0 = rlwe.q_basis().moduli()[0].value();
    let n = params.n();
    let polys = ct
        .polys()
        .iter()
        .map(|p| {
            let mut c = p.clone();
            c.to_coefficient();
            let mut data = vec![0u64; (top + 1) * n];
            for (limb, m) in data.chunks_exact_mut(n).zip(basis.moduli()) {
                for (x, &v) in limb.iter_mut().zip(c.limb(0)) {
                    // Centred: v > q₀/2 stands for v − q₀.
                    *x = if v > q0 / 2 {
                        m.neg(m.reduce(q0 - v))
                    } else {
                        m.reduce(v)
                    };
                }
            }
            let mut out = RnsPoly::from_limbs(&basis, Domain::Coefficient, data)?;
            out.to_ntt();
            Ok(out)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Ciphertext::new(rlwe, polys, top, ct.scale())?.with_metadata_of(ct))
}

/// y mod 1, homomorphically, for real slot values y = I + δ with I an
/// integer, |I| ≤ `bound`, and δ small: sin(2πy)/2π = δ − (2π)²δ³/6 + …,
/// computed as cos(2π(y − 1/4)/2^r) by a Chebyshev interpolant on
/// [−bound − 1, bound + 1], then r double-angle steps
/// cos 2θ = 2cos²θ − 1; the factor 1/2π is read into the scale (no level).
///
/// The cubic term limits the result for large δ (a message whose energy
/// sits in a few coefficients). [`EvalMod::with_arcsine`] removes it: the
/// sine t = sin 2πδ goes through the Taylor polynomial of arcsin t, so the
/// result is δ up to a term in δ^(d+2), for the levels of a degree-d
/// polynomial.
#[derive(Debug, Clone)]
pub struct EvalMod {
    cosine: ChebyshevPolynomial,
    double_angles: u32,
    /// The arcsine's Taylor polynomial on [−1, 1], when corrected.
    arcsine: Option<ChebyshevPolynomial>,
    /// bound + 1: the interpolant's interval is [−half_width, half_width].
    half_width: f64,
}

impl EvalMod {
    /// The highest interpolant degree accepted (a literal from outside,
    /// e.g. a session spec, must not ask for unbounded work).
    pub const MAX_DEGREE: usize = 1023;

    /// The highest degree of the arcsine correction accepted.
    pub const MAX_ARCSINE_DEGREE: usize = 31;

    /// For integers up to `bound` in magnitude, with a Chebyshev
    /// interpolant of `degree` and `double_angles` double-angle steps (the
    /// interpolant covers (2·bound + 2)·2π/2^r radians of cosine).
    pub fn new(bound: u32, degree: usize, double_angles: u32) -> Result<Self> {
        if bound == 0
            || bound > 1 << 16
            || !(1..=Self::MAX_DEGREE).contains(&degree)
            || double_angles > 16
        {
            return Err(CkksError::ValueOutOfRange(format!(
                "EvalMod with bound {bound}, degree {degree}, {double_angles} double angles"
            )));
        }
        let r = f64::from(double_angles).exp2();
        let b = f64::from(bound) + 1.0;
        let tau = 2.0 * std::f64::consts::PI;
        // On [−1, 1], for y/b: the division by b is read into the scale
        // (an affine map to [−1, 1] would cost a level).
        let cosine = ChebyshevPolynomial::interpolate(
            move |x| (tau * (b * x - 0.25) / r).cos(),
            degree,
            -1.0,
            1.0,
        );
        Ok(Self {
            cosine,
            double_angles,
            arcsine: None,
            half_width: b,
        })
    }

    /// For integers up to `bound` in magnitude, with the polynomial of
    /// degree 2·bound through the cosine at those integers, and
    /// `double_angles` double-angle steps. ModRaise's slots are integers
    /// plus a small δ, so the polynomial only has to be right near the
    /// integers (Han and Ki's observation): there it is within
    /// δ·|f^(2b+1)|/(2b+1)!·Π|i − j| of the cosine, far below a full
    /// interpolant's error at the same degree for the integers ModRaise
    /// gives most often, and growing towards ±bound, where they are rare.
    pub fn at_integers(bound: u32, double_angles: u32) -> Result<Self> {
        if bound == 0 || bound > 64 || double_angles > 16 {
            return Err(CkksError::ValueOutOfRange(format!(
                "EvalMod at the integers up to {bound}, {double_angles} double angles"
            )));
        }
        let r = 1i64 << double_angles;
        let b = i64::from(bound);
        // cos(2π(i − 1/4)/r) = cos(π·(4i − 1)/2r).
        let pi = Fixed::pi();
        let coeffs = chebyshev_through_integers(b, b + 1, |i| {
            pi.mul(&Fixed::ratio(4 * i - 1, 2 * r)).cos(&pi)
        });
        Ok(Self {
            cosine: ChebyshevPolynomial {
                coeffs,
                a: -1.0,
                b: 1.0,
            },
            double_angles,
            arcsine: None,
            half_width: (b + 1) as f64,
        })
    }

    /// The same, with the sine corrected by the Taylor polynomial of arcsin
    /// of odd `degree` (3 to [`Self::MAX_ARCSINE_DEGREE`]; 0 for none).
    /// Its error for t = sin 2πδ is about the first dropped term,
    /// c·t^(degree + 2) with c < 1/(degree + 2), far below the cubic
    /// term it removes for the small δ bootstrapping works with.
    pub fn with_arcsine(mut self, degree: usize) -> Result<Self> {
        if degree == 0 {
            self.arcsine = None;
            return Ok(self);
        }
        if degree.is_multiple_of(2) || !(3..=Self::MAX_ARCSINE_DEGREE).contains(&degree) {
            return Err(CkksError::ValueOutOfRange(format!(
                "an arcsine correction of degree {degree} (odd, 3 to {})",
                Self::MAX_ARCSINE_DEGREE
            )));
        }
        // Interpolating a polynomial at degree + 1 nodes gives it back: the
        // Taylor polynomial in the Chebyshev basis, not an equiripple fit
        // (whose error would not vanish at small t, where the values are).
        let taylor = arcsine_taylor(degree);
        let mut p = ChebyshevPolynomial::interpolate(
            |t| taylor.iter().rev().fold(0.0, |acc, c| acc * t + c),
            degree,
            -1.0,
            1.0,
        );
        // An odd polynomial: the even coefficients are rounding residue.
        p.coeffs.iter_mut().step_by(2).for_each(|c| *c = 0.0);
        self.arcsine = Some(p);
        Ok(self)
    }

    /// Levels [`Self::apply`] spends.
    pub fn depth(&self) -> usize {
        self.cosine.depth()
            + self.double_angles as usize
            + self.arcsine.as_ref().map_or(0, ChebyshevPolynomial::depth)
    }

    /// The scale [`Self::apply`] wants its input at for a polynomial
    /// evaluated at `working_scale` (near the primes EvalMod divides by):
    /// the interval's half width is read into the scale.
    pub fn input_scale(&self, working_scale: f64) -> f64 {
        working_scale / self.half_width
    }

    /// Refused unless [`Self::apply`] can run from `level` on an input at
    /// `scale` ([`Self::input_scale`]) under `params`: its steps walked on
    /// shapes ([`crate::plan::Planner`]), so a layout whose primes do not
    /// fit the polynomials (an arcsine correction on primes far from the
    /// cosine's) is refused before any work rather than midway.
    pub fn check(&self, params: &CkksParameters, level: usize, scale: f64) -> Result<()> {
        use crate::plan::{CtShape, Planner, ShapeWalk};
        crate::error::require_levels(level, self.depth())?;
        let mut walk = ShapeWalk::new(Planner::new(params));
        let x = CtShape::new(level, scale * self.half_width);
        self.steps(&mut walk, &x)?;
        Ok(())
    }

    /// The steps of [`Self::apply`] on `ops`' values from `x` (at the
    /// scale the cosine wants), [`Self::depth`] levels below it: written
    /// once for ciphertexts and for [`Self::check`]'s shapes.
    fn steps<O: ChebyshevOps<Error = CkksError>>(
        &self,
        ops: &mut O,
        x: &O::Value,
    ) -> Result<O::Value> {
        let mut c = self.cosine.evaluate_with(ops, x)?;
        for _ in 0..self.double_angles {
            // cos 2θ = T_2(cos θ).
            c = chebyshev_product(ops, &c, &c, None)?;
        }
        if let Some(arcsine) = &self.arcsine {
            c = arcsine.evaluate_with(ops, &c)?;
        }
        Ok(c)
    }

    /// What [`Self::apply`] computes, in the clear (exact arithmetic but
    /// for f64 rounding): the interpolant, the double angles and the
    /// arcsine correction at y, divided by 2π as the scale does.
    pub fn eval_clear(&self, y: f64) -> f64 {
        let mut c = self.cosine.eval(y / self.half_width);
        for _ in 0..self.double_angles {
            c = 2.0 * c * c - 1.0;
        }
        if let Some(arcsine) = &self.arcsine {
            c = arcsine.eval(c);
        }
        c / (2.0 * std::f64::consts::PI)
    }

    /// What [`Self::eval_clear`] should give at y: the sine's
    /// [`Self::reference`], or y − round(y) with the arcsine correction.
    fn target(&self, y: f64) -> f64 {
        if self.arcsine.is_some() {
            y - y.round()
        } else {
            Self::reference(y)
        }
    }

    /// The largest error of the approximation itself (noise aside), on a
    /// grid of inputs y = I + δ: every integer |I| ≤ bound (at most 257 of
    /// them, evenly spaced, for a larger bound) and 17 values
    /// |δ| ≤ `max_delta` each, against [`Self::reference`] (or y − round(y)
    /// with the arcsine correction). Each double angle multiplies the
    /// interpolant's error by up to 4, so a low-degree cosine with many
    /// double angles can lose most of the message.
    pub fn approximation_error(&self, max_delta: f64) -> f64 {
        let bound = (self.half_width - 1.0) as i64;
        let stride = (2 * bound / 256).max(1);
        let mut worst = 0.0f64;
        for i in (-bound..=bound).step_by(stride as usize) {
            for k in -8..=8 {
                let y = i as f64 + max_delta * f64::from(k) / 8.0;
                worst = worst.max((self.eval_clear(y) - self.target(y)).abs());
            }
        }
        worst
    }

    /// sin(2πy)/2π in the clear: what [`Self::apply`] approximates
    /// without the arcsine correction (with it: y − round(y), for y within
    /// 1/4 of an integer).
    pub fn reference(y: f64) -> f64 {
        (2.0 * std::f64::consts::PI * y).sin() / (2.0 * std::f64::consts::PI)
    }

    /// The slots' values mod 1 (real slots; [`Self::depth`] levels).
    pub fn apply(&self, eval: &Evaluator, ct: &Ciphertext) -> Result<Ciphertext> {
        self.apply_cancellable(eval, ct, &AtomicBool::new(false))
    }

    /// [`Self::apply`], giving up with [`CkksError::Cancelled`] before a
    /// product once `cancel` is raised.
    pub fn apply_cancellable(
        &self,
        eval: &Evaluator,
        ct: &Ciphertext,
        cancel: &AtomicBool,
    ) -> Result<Ciphertext> {
        crate::error::require_levels(ct.level(), self.depth())?;
        let mut x = ct.clone();
        x.set_scale(ct.scale() * self.half_width);
        let mut ops = crate::polynomial::Cancellable { eval, cancel };
        let mut c = self.steps(&mut ops, &x)?;
        c.set_scale(c.scale() * 2.0 * std::f64::consts::PI);
        Ok(c)
    }
}

/// Taylor coefficients of arcsin t, c_0 … c_degree: zero at even powers,
/// c_(2k+1) = (2k)!/(4^k·(k!)²·(2k + 1)).
fn arcsine_taylor(degree: usize) -> Vec<f64> {
    let mut c = vec![0.0; degree + 1];
    // (2k)!/(4^k·(k!)²) from its value at k − 1, times (2k − 1)/2k.
    let mut central = 1.0;
    for k in 0..=(degree - 1) / 2 {
        if k > 0 {
            central *= (2 * k - 1) as f64 / (2 * k) as f64;
        }
        c[2 * k + 1] = central / (2 * k + 1) as f64;
    }
    c
}

/// i·x in every slot: the product by the monomial X^(N/2), exact and free
/// of levels (X^(N/2) evaluates to ±i at the slot roots, +i at the
/// encoder's, 5^j ≡ 1 mod 4).
pub fn times_i(ct: &Ciphertext) -> Result<Ciphertext> {
    let mut out = ct.clone();
    for p in out.polys_mut() {
        p.to_coefficient();
        let n = p.degree();
        let moduli = p.basis().moduli().to_vec();
        for (l, m) in moduli.iter().enumerate() {
            let limb = p.limb_mut(l);
            let (lo, hi) = limb.split_at_mut(n / 2);
            // X^(N/2)·(a + b·X^(N/2)) = −b + a·X^(N/2).
            for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
                let (na, nb) = (m.neg(*b), *a);
                *a = na;
                *b = nb;
            }
        }
        p.to_ntt();
    }
    Ok(out)
}

/// Sparse-secret encapsulation (as Lattigo's ephemeral secret): a key
/// switching a level-0 ciphertext from the secret s to a sparse secret s′,
/// over q₀·P only (a sparse secret is safe with that small a modulus, not
/// with Q·P), and one switching back from s′ to s at the top level. ModRaise
/// runs in between, under s′.
#[derive(Debug, Clone)]
pub struct EncapsulationKeys {
    bottom: Arc<hecloud_rlwe::Parameters>,
    to_sparse: hecloud_rlwe::SwitchingKey,
    from_sparse: hecloud_rlwe::SwitchingKey,
    hamming: usize,
}

impl EncapsulationKeys {
    /// Keys for a fresh ephemeral secret of Hamming weight `hamming`
    /// (drawn from the OS CSPRNG, used here and dropped: no one keeps it).
    pub fn generate(
        params: &Arc<CkksParameters>,
        sk: &hecloud_rlwe::SecretKey,
        hamming: usize,
    ) -> Result<Self> {
        use hecloud_rlwe::{KeyGenerator, SecretKey};
        let rlwe = params.rlwe();
        let bottom = rlwe.bottom()?;
        let mut full = KeyGenerator::new(rlwe);
        let sparse = full.gen_sparse_secret_key(hamming)?;
        let from_sparse = full.gen_switching_key_between(&sparse, sk)?;
        let sparse_bottom = SecretKey::from_coefficients(&bottom, &sparse.export_coefficients())?;
        let dense_bottom = SecretKey::from_coefficients(&bottom, &sk.export_coefficients())?;
        let to_sparse =
            KeyGenerator::new(&bottom).gen_switching_key_between(&dense_bottom, &sparse_bottom)?;
        Ok(Self {
            bottom,
            to_sparse,
            from_sparse,
            hamming,
        })
    }

    /// The ephemeral secret's Hamming weight.
    pub fn hamming(&self) -> usize {
        self.hamming
    }

    /// The id of the secret they lead from and back to (bootstrapping's
    /// input and output key).
    pub fn key_id(&self) -> hecloud_rlwe::KeyId {
        self.from_sparse.key_id()
    }

    /// Their serialized size in bytes (`seeded`: half-size keys).
    pub fn serialized_len(&self, seeded: bool) -> usize {
        self.to_sparse.serialized_len(seeded) + self.from_sparse.serialized_len(seeded)
    }

    /// The bytes the two keys take in memory
    /// ([`hecloud_rlwe::SwitchingKey::memory_bytes`]).
    pub fn memory_bytes(&self) -> usize {
        self.to_sparse.memory_bytes() + self.from_sparse.memory_bytes()
    }

    /// Serialized form (`seeded`: each key's uniform half as its 32-byte
    /// seed, as for the other evaluation keys): the key over q₀·P, length
    /// prefixed, then the top-level one; each header holds the Hamming
    /// weight.
    pub fn to_bytes(&self, seeded: bool) -> Vec<u8> {
        let [first, second] = self.key_bytes(seeded);
        let mut out = (first.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&first);
        out.extend_from_slice(&second);
        out
    }

    /// Parses keys written by [`Self::to_bytes`] for `params`. Refused: keys
    /// of other parameters, two halves that disagree on the Hamming weight,
    /// truncated or malformed bytes.
    pub fn from_bytes(params: &Arc<CkksParameters>, bytes: &[u8]) -> Result<Self> {
        let malformed =
            |why: &str| CkksError::ValueOutOfRange(format!("encapsulation keys: {why}"));
        let (len, rest) = bytes
            .split_first_chunk::<8>()
            .ok_or_else(|| malformed("truncated"))?;
        let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| malformed("length"))?;
        if len > rest.len() {
            return Err(malformed("truncated"));
        }
        let (first, second) = rest.split_at(len);
        let bottom = params.rlwe().bottom()?;
        let to_sparse = hecloud_rlwe::SwitchingKey::from_bytes(&bottom, first)?;
        let from_sparse = hecloud_rlwe::SwitchingKey::from_bytes(params.rlwe(), second)?;
        Self::from_keys(params, to_sparse, from_sparse)
    }

    /// The two keys as [`Self::to_bytes`] writes them, apart (each with its
    /// own header: the first over q₀·P, the second over the parameters'
    /// Q·P), e.g. to store them as two objects.
    pub fn key_bytes(&self, seeded: bool) -> [Vec<u8>; 2] {
        let h = self.hamming as u64;
        [
            self.to_sparse.to_bytes(seeded, h),
            self.from_sparse.to_bytes(seeded, h),
        ]
    }

    /// Keys from their two halves, each with the Hamming weight its header
    /// carried: the dense-to-sparse key over [`hecloud_rlwe::Parameters::bottom`]
    /// of `params`, the sparse-to-dense one over `params`. Refused: keys of
    /// other parameters (or swapped), halves that disagree on the Hamming
    /// weight, a weight of 0 or above N.
    pub fn from_keys(
        params: &Arc<CkksParameters>,
        (to_sparse, h1): (hecloud_rlwe::SwitchingKey, u64),
        (from_sparse, h2): (hecloud_rlwe::SwitchingKey, u64),
    ) -> Result<Self> {
        let malformed =
            |why: &str| CkksError::ValueOutOfRange(format!("encapsulation keys: {why}"));
        let bottom = params.rlwe().bottom()?;
        if to_sparse.params().hash() != bottom.hash() {
            return Err(malformed(
                "the dense-to-sparse key is not over q0·P of these parameters",
            ));
        }
        if from_sparse.params().hash() != params.rlwe().hash() {
            return Err(malformed(
                "the sparse-to-dense key is not over these parameters",
            ));
        }
        let hamming = usize::try_from(h1).map_err(|_| malformed("Hamming weight"))?;
        if h1 != h2 {
            return Err(malformed("the two keys disagree on the Hamming weight"));
        }
        if hamming == 0 || hamming > params.n() {
            return Err(malformed("Hamming weight out of range"));
        }
        Ok(Self {
            bottom,
            to_sparse,
            from_sparse,
            hamming,
        })
    }

    /// `ct` (level 0, under s) under the sparse secret.
    fn switch_to_sparse(&self, params: &CkksParameters, ct: &Ciphertext) -> Result<Ciphertext> {
        // The keys lead from s and back to it: a ciphertext under another
        // key would come out of them as noise.
        self.from_sparse.key_id().check(ct.key_id())?;
        let full = params.rlwe().q_at(0)?;
        let low = self.bottom.q_at(0)?;
        let rebase = |p: &RnsPoly, b: &Arc<hecloud_math::RnsBasis>| {
            let mut p = p.clone();
            p.to_ntt();
            RnsPoly::from_limbs(b, Domain::Ntt, p.data().to_vec())
        };
        let c1 = rebase(&ct.polys()[1], low)?;
        let (k0, k1) = hecloud_rlwe::keyswitch::key_switch(&self.bottom, &c1, &self.to_sparse)?;
        let mut c0 = rebase(&ct.polys()[0], full)?;
        c0.add_assign(&rebase(&k0, full)?)?;
        let c1 = rebase(&k1, full)?;
        let mut out = Ciphertext::new(params.rlwe(), vec![c0, c1], 0, ct.scale())?;
        out.set_key_id(self.to_sparse.key_id());
        Ok(out)
    }

    /// `ct` (top level, under the sparse secret) back under s.
    fn switch_back(&self, params: &CkksParameters, ct: &Ciphertext) -> Result<Ciphertext> {
        let rlwe = params.rlwe();
        let mut c1 = ct.polys()[1].clone();
        c1.to_ntt();
        let (k0, k1) = hecloud_rlwe::keyswitch::key_switch(rlwe, &c1, &self.from_sparse)?;
        let mut c0 = ct.polys()[0].clone();
        c0.to_ntt();
        c0.add_assign(&k0)?;
        let mut out = Ciphertext::new(rlwe, vec![c0, k1], ct.level(), ct.scale())?;
        out.set_key_id(self.from_sparse.key_id());
        Ok(out)
    }
}

/// What a bootstrapping circuit is made of (checked by
/// [`Bootstrapper::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootstrapLiteral {
    /// Levels of CoeffsToSlots (1 to log2 of the slots).
    pub cts_levels: usize,
    /// Levels of SlotsToCoeffs.
    pub stc_levels: usize,
    /// [`EvalMod`]'s bound on the integer part ModRaise adds.
    pub eval_mod_bound: u32,
    /// Degree of [`EvalMod`]'s Chebyshev cosine (2·bound when
    /// [`Self::eval_mod_at_integers`]).
    pub eval_mod_degree: usize,
    /// Whether the cosine goes through its values at the integers up to the
    /// bound ([`EvalMod::at_integers`], degree 2·bound) rather than
    /// interpolating over the whole interval ([`EvalMod::new`]): for a
    /// sparse secret's small bound, the same precision from about half the
    /// degree.
    pub eval_mod_at_integers: bool,
    /// [`EvalMod`]'s double-angle steps.
    pub double_angles: u32,
    /// Degree of [`EvalMod`]'s arcsine correction ([`EvalMod::with_arcsine`]:
    /// odd, 3 to 31), or 0 for none. It costs the levels of a polynomial of
    /// that degree (3 for degree 3) and lifts the precision of messages
    /// whose energy sits in a few coefficients; for random full-slot
    /// vectors at N = 2^16 the noise, not the sine, limits the result.
    pub arcsine_degree: usize,
    /// Hamming weight of the ephemeral sparse secret a level-0 ciphertext
    /// is switched to before ModRaise ([`EncapsulationKeys`]), or `None`
    /// to raise under the secret itself. A sparse secret keeps ModRaise's
    /// integer part small (its coefficients are sums of h + 1 uniform
    /// terms), so EvalMod needs a smaller bound: fewer levels, less noise.
    pub ephemeral_hamming: Option<usize>,
    /// log2 of q₀/Δ_in: the message is that many bits below q₀ inside
    /// EvalMod, where sin(2πy)/2π ≈ y holds to about 3·ratio bits; an input
    /// at a lower scale is first multiplied up by an integer.
    pub log_message_ratio: u32,
    /// The slots of the ciphertexts it bootstraps (a power of two from 2
    /// to N/2), `None` for N/2. Sparse slots cost log2(N/2/slots) more
    /// rotations (the trace that clears ModRaise's integer part outside
    /// the subring the message lives in) and fewer in the DFTs.
    pub slots: Option<usize>,
}

impl BootstrapLiteral {
    /// The literal's [`EvalMod`].
    ///
    /// # Errors
    /// [`CkksError::ValueOutOfRange`] for a bound, degree, double-angle
    /// count or arcsine degree out of range, or a degree other than
    /// 2·bound at the integers.
    pub fn eval_mod(&self) -> Result<EvalMod> {
        let eval_mod = if self.eval_mod_at_integers {
            if self.eval_mod_degree != 2 * self.eval_mod_bound as usize {
                return Err(CkksError::ValueOutOfRange(format!(
                    "an EvalMod through the integers up to {} has degree {}, not {}",
                    self.eval_mod_bound,
                    2 * self.eval_mod_bound,
                    self.eval_mod_degree
                )));
            }
            EvalMod::at_integers(self.eval_mod_bound, self.double_angles)?
        } else {
            EvalMod::new(
                self.eval_mod_bound,
                self.eval_mod_degree,
                self.double_angles,
            )?
        };
        eval_mod.with_arcsine(self.arcsine_degree)
    }
}

/// Bootstrapping, assembled from its pieces: ModRaise (and the trace, for
/// sparse slots), CoeffsToSlots, the real and imaginary parts apart (one
/// conjugation), EvalMod on each, the two together again, SlotsToCoeffs.
/// At most N/4 slots, the two parts sit side by side in one ciphertext
/// and one EvalMod serves both
/// ([`HomomorphicDft::coeffs_to_slots_split`]). Every constant factor
/// (CoeffsToSlots' 1/n, the halving of the real/imaginary split, EvalMod's
/// 1/2π, the message ratio) is read into a scale rather than multiplied
/// in: no level and no precision is spent on them.
#[derive(Debug, Clone)]
pub struct Bootstrapper {
    params: Arc<CkksParameters>,
    encoder: crate::Encoder,
    cts: crate::dft::HomomorphicDft,
    stc: crate::dft::HomomorphicDft,
    eval_mod: EvalMod,
    /// Whether the real and imaginary parts share one EvalMod (at most
    /// N/4 slots).
    one_eval_mod: bool,
    literal: BootstrapLiteral,
}

impl Bootstrapper {
    /// The circuit of `literal` for `params`. Refused: DFT level counts out
    /// of range, an [`EvalMod`] it cannot build or one that approximates
    /// y mod 1 to fewer than [`Self::MIN_EVAL_MOD_BITS`] of the message, a
    /// message ratio outside 1..=30, or a circuit deeper than the
    /// parameters' top level.
    pub fn new(params: &Arc<CkksParameters>, literal: BootstrapLiteral) -> Result<Self> {
        let encoder = match literal.slots {
            Some(slots) => crate::Encoder::with_slots(params, slots)?,
            None => crate::Encoder::new(params),
        };
        if !(1..=30).contains(&literal.log_message_ratio) {
            return Err(CkksError::ValueOutOfRange(format!(
                "message ratio 2^{} (1 to 30 bits)",
                literal.log_message_ratio
            )));
        }
        // At most N/4 slots: the real and imaginary parts side by side in
        // one ciphertext, one EvalMod.
        let one_eval_mod = 2 * encoder.slots() <= params.slots();
        let (cts, stc) = if one_eval_mod {
            (
                HomomorphicDft::coeffs_to_slots_split(&encoder, literal.cts_levels)?,
                HomomorphicDft::slots_to_coeffs_joined(&encoder, literal.stc_levels)?,
            )
        } else {
            (
                HomomorphicDft::coeffs_to_slots(&encoder, literal.cts_levels)?,
                HomomorphicDft::slots_to_coeffs(&encoder, literal.stc_levels)?,
            )
        };
        let mut boot = Self {
            cts,
            stc,
            one_eval_mod,
            eval_mod: literal.eval_mod()?,
            params: params.clone(),
            encoder,
            literal,
        };
        let bits = boot.eval_mod_precision_bits();
        if bits < Self::MIN_EVAL_MOD_BITS {
            return Err(CkksError::ValueOutOfRange(format!(
                "an EvalMod (bound {}, degree {}, {} double angles, arcsine degree {}) that \
                 approximates y mod 1 to {bits:.1} bits of a message 2^{} below q0 \
                 (at least {} needed): raise the degree or take fewer double angles",
                literal.eval_mod_bound,
                literal.eval_mod_degree,
                literal.double_angles,
                literal.arcsine_degree,
                literal.log_message_ratio,
                Self::MIN_EVAL_MOD_BITS,
            )));
        }
        crate::error::require_levels(params.max_level(), boot.depth())?;
        let level = params.max_level() - boot.cts.levels();
        boot.eval_mod.check(
            params,
            level,
            boot.eval_mod.input_scale(params.q_f64(level)),
        )?;
        boot.keep_encoded_diagonals(Self::KEPT_DIAGONAL_BYTES);
        Ok(boot)
    }

    /// How many bytes of encoded DFT diagonals [`Self::new`] keeps from
    /// one bootstrapping to the next ([`Self::keep_encoded_diagonals`]):
    /// at the N = 2^16 preset, all seven factors' (2.62 GiB over
    /// Q_l ∪ P), and the peak memory with the keys is 10.6 GiB, below 12.
    /// With 2 GiB (CoeffsToSlots and part of SlotsToCoeffs) the peak was
    /// 9.9 GiB and an AVX2 bootstrapping 9 % slower: encoding the other
    /// diagonals took a tenth of it.
    pub const KEPT_DIAGONAL_BYTES: usize = 3 << 30;

    /// Keeps the encoded diagonals of the DFT factors, from the highest
    /// level down, while their total stays within `bytes` (0: none), and
    /// returns that total. A kept factor skips encoding its diagonals (an
    /// FFT and an NTT per prime each) in every bootstrapping after the
    /// first; they take (level + 1 + k) · N words each (over Q_l and the
    /// k primes of P), at the level the
    /// factor is applied at. The highest levels come first because they
    /// hold the bootstrapping's large primes, whose NTTs take the 64-bit
    /// kernels: at N = 2^16, keeping CoeffsToSlots' diagonals saved about
    /// a fifth of a bootstrapping, and keeping SlotsToCoeffs' too another
    /// 9 % once the rest had become faster (AVX2, 2026-12-04).
    pub fn keep_encoded_diagonals(&mut self, bytes: usize) -> usize {
        let (n, top) = (self.params.n(), self.params.max_level());
        let k = self.params.rlwe().p_basis().len();
        let stc_top = top - self.cts.levels() - self.eval_mod.depth();
        let mut factors: Vec<(usize, &mut LinearTransform)> = self
            .cts
            .factors_mut()
            .iter_mut()
            .enumerate()
            .map(|(k, f)| (top - k, f))
            .chain(
                self.stc
                    .factors_mut()
                    .iter_mut()
                    .enumerate()
                    .map(|(k, f)| (stc_top - k, f)),
            )
            .collect();
        factors.sort_by_key(|(level, _)| std::cmp::Reverse(*level));
        let mut kept = 0;
        for (level, f) in factors {
            let size = f.diagonal_count() * (level + 1 + k) * n * 8;
            let keep = kept + size <= bytes;
            f.keep_encoded(keep);
            if keep {
                kept += size;
            }
        }
        kept
    }

    /// The fewest bits of the message [`EvalMod`]'s approximation may
    /// keep (noise aside) for [`Self::new`] to accept a literal: below it
    /// the circuit would return noise without a word.
    pub const MIN_EVAL_MOD_BITS: f64 = 12.0;

    /// Bits EvalMod's approximation keeps, noise aside, of a message
    /// coefficient of magnitude 1: its largest error on inputs within the
    /// bound whose fractional part is such a coefficient
    /// ([`EvalMod::approximation_error`] at δ up to 2^-ratio), relative to
    /// 2^-ratio. The coefficients of a full-slot vector of magnitude 1 are
    /// near 1/√N, so its slots keep about log2 √N bits fewer: the presets'
    /// 37.8 bits are about 29.8 in the slots at N = 2^16, where the noise
    /// leaves 24 to 26.
    pub fn eval_mod_precision_bits(&self) -> f64 {
        let max_delta = f64::from(self.literal.log_message_ratio).exp2().recip();
        let error = self.eval_mod.approximation_error(max_delta);
        -(error / max_delta).log2()
    }

    /// The literal it was built from.
    pub fn literal(&self) -> &BootstrapLiteral {
        &self.literal
    }

    /// The slots it bootstraps.
    pub fn slots(&self) -> usize {
        self.encoder.slots()
    }

    /// The rotations of the trace that keeps only the sparse slots'
    /// subring: by slots, 2·slots, …, N/4 (none at full slots).
    fn trace_rotations(&self) -> impl Iterator<Item = i64> + use<> {
        let (n, full) = (self.slots(), self.params.slots());
        std::iter::successors(Some(n), |&k| Some(2 * k))
            .take_while(move |&k| k < full)
            .map(|k| k as i64)
    }

    /// The rotations it needs keys for (and the conjugation key).
    pub fn rotations(&self) -> Vec<i64> {
        self.rotation_levels().into_iter().map(|(k, _)| k).collect()
    }

    /// [`Self::rotations`], each with the highest level it is used at
    /// (a DFT factor's at the level it is applied at, the trace's at the
    /// top). Keys cut to those levels ([`crate::KeySet::generate_at_levels`])
    /// are smaller: SlotsToCoeffs' run below EvalMod, on a fraction of
    /// the primes and digits.
    pub fn rotation_levels(&self) -> Vec<(i64, usize)> {
        let top = self.params.max_level();
        let stc_top = top - self.cts.levels() - self.eval_mod.depth();
        let mut levels: BTreeMap<i64, usize> = self.trace_rotations().map(|k| (k, top)).collect();
        for (start, dft) in [(top, &self.cts), (stc_top, &self.stc)] {
            for (i, factor) in dft.factors().iter().enumerate() {
                for k in factor.rotations() {
                    let l = levels.entry(k).or_insert(start - i);
                    *l = (*l).max(start - i);
                }
            }
        }
        levels.into_iter().collect()
    }

    /// Levels it spends from the top: CoeffsToSlots, EvalMod,
    /// SlotsToCoeffs. The result is at the top level minus this.
    pub fn depth(&self) -> usize {
        self.cts.levels() + self.eval_mod.depth() + self.stc.levels()
    }

    /// The level of a bootstrapped ciphertext.
    pub fn output_level(&self) -> usize {
        self.params.max_level() - self.depth()
    }

    /// The largest input scale [`Self::bootstrap`] takes: q₀/2^ratio.
    pub fn max_input_scale(&self) -> f64 {
        self.params.q_f64(0) / f64::from(self.literal.log_message_ratio).exp2()
    }

    /// About how many key switches one bootstrapping runs (for cost
    /// estimates): a rotation per key the DFTs use, the conjugation, two
    /// EvalMods of about 2√d + log2 d products (the cosine's and the
    /// arcsine's) and a square per double angle, the two encapsulation
    /// switches.
    pub fn key_switches(&self) -> usize {
        let poly = |d: usize| {
            if d == 0 {
                0
            } else {
                2 * d.isqrt() + d.ilog2() as usize
            }
        };
        let products = poly(self.literal.eval_mod_degree)
            + poly(self.literal.arcsine_degree)
            + self.literal.double_angles as usize;
        let eval_mods = if self.one_eval_mod { 1 } else { 2 };
        self.rotations().len() + self.trace_rotations().count() + 1 + eval_mods * products + 2
    }

    /// Refused unless `eval` holds the relinearization key, the
    /// conjugation key and a key for each of [`Self::rotations`], each
    /// reaching the level it is used at ([`Self::rotation_levels`]).
    pub fn check_keys(&self, eval: &Evaluator) -> Result<()> {
        let keys = eval.keys();
        if keys.relin.is_none() {
            return Err(hecloud_rlwe::RlweError::MissingRelinearizationKey.into());
        }
        let n = self.params.n();
        // The conjugation runs after CoeffsToSlots.
        let conj = (
            hecloud_rlwe::keys::galois_element_conjugate(n),
            self.params.max_level() - self.cts.levels(),
        );
        let elements = self
            .rotation_levels()
            .into_iter()
            .map(|(k, level)| (hecloud_rlwe::keys::galois_element_for_rotation(k, n), level))
            .chain(std::iter::once(conj))
            .filter(|&(g, _)| g != 1);
        for (g, level) in elements {
            keys.galois.get(g)?.switching_key().reaches(level)?;
        }
        Ok(())
    }

    /// A top-level encryption of `ct`'s slots, at level
    /// [`Self::output_level`] and the parameters' default scale. `ct` must
    /// be at level 0 (drop it there first) with a scale at most
    /// q₀/2^ratio; a lower scale is multiplied up to it by an integer
    /// (exact, no level). `encapsulation`: the keys of the literal's
    /// ephemeral secret (`None` when it has none). Keys and inputs are
    /// checked before any work.
    pub fn bootstrap(
        &self,
        eval: &Evaluator,
        encapsulation: Option<&EncapsulationKeys>,
        ct: &Ciphertext,
    ) -> Result<Ciphertext> {
        self.bootstrap_cancellable(eval, encapsulation, ct, &AtomicBool::new(false))
    }

    /// [`Self::bootstrap`], giving up with [`CkksError::Cancelled`] once
    /// `cancel` is raised: it is read between the steps, between the DFTs'
    /// factors and before each product of EvalMod's polynomial (at
    /// N = 2^16 every second or so).
    pub fn bootstrap_cancellable(
        &self,
        eval: &Evaluator,
        encapsulation: Option<&EncapsulationKeys>,
        ct: &Ciphertext,
        cancel: &AtomicBool,
    ) -> Result<Ciphertext> {
        let params = &self.params;
        let check = || crate::polynomial::not_cancelled(cancel);
        check()?;
        self.check_keys(eval)?;
        let encapsulation = match (self.literal.ephemeral_hamming, encapsulation) {
            (None, _) => None,
            (Some(h), Some(k))
                if k.hamming == h && k.from_sparse.params().hash() == params.rlwe().hash() =>
            {
                Some(k)
            }
            (Some(h), _) => {
                return Err(CkksError::MissingKey(format!(
                    "bootstrapping needs the encapsulation keys of an ephemeral secret of Hamming weight {h} for these parameters"
                )));
            }
        };
        if ct.level() != 0 {
            return Err(CkksError::ValueOutOfRange(format!(
                "bootstrapping takes a ciphertext at level 0, not {}",
                ct.level()
            )));
        }
        let q0 = params.q_f64(0);
        let target = self.max_input_scale();
        let scale = ct.scale();
        if !(scale.is_finite() && scale >= 1.0 && scale <= target * (1.0 + 1e-9)) {
            return Err(CkksError::ValueOutOfRange(format!(
                "bootstrapping takes a scale up to q0/2^{} = 2^{:.2}, not 2^{:.2}",
                self.literal.log_message_ratio,
                target.log2(),
                scale.log2()
            )));
        }
        let factor = (target / scale).floor() as i64;
        let mut ct = eval.mul_int(ct, factor)?;
        ct.set_scale(scale * factor as f64);
        let input_scale = ct.scale();
        let mut raised = match encapsulation {
            Some(k) => k.switch_back(
                params,
                &mod_raise(params, &k.switch_to_sparse(params, &ct)?)?,
            )?,
            None => mod_raise(params, &ct)?,
        };
        // With sparse slots the message lives in the subring of X^(N/2n);
        // the trace (a sum over rotations by multiples of n) keeps that
        // part of ModRaise's result, times N/2n, and clears the rest.
        let mut trace = 1.0;
        for k in self.trace_rotations() {
            raised = eval.add(&raised, &eval.rotate(&raised, k)?)?;
            trace *= 2.0;
        }
        // Read at scale 2·q₀ its slots are t/2q₀: half of an integer plus
        // the message's fraction once in the coefficient domain (the half
        // is what the real/imaginary split below wants).
        raised.set_scale(2.0 * q0 * trace);
        let eval_mod_scale = self
            .eval_mod
            .input_scale(params.q_f64(params.max_level() - self.cts.levels()));
        check()?;
        let half = self.cts.apply_to_scale_cancellable(
            eval,
            &self.encoder,
            &raised,
            eval_mod_scale,
            cancel,
        )?;
        check()?;
        let conj = eval.conjugate(&half)?;
        let mut u = if self.one_eval_mod {
            // The real parts in the first n of every 2n slots, the
            // imaginary parts in the others (`coeffs_to_slots_split`);
            // SlotsToCoeffs joins them again.
            let parts = eval.add(&half, &conj)?;
            self.eval_mod.apply_cancellable(eval, &parts, cancel)?
        } else {
            let re = eval.add(&half, &conj)?;
            let im = times_i(&eval.sub(&conj, &half)?)?;
            let re = self.eval_mod.apply_cancellable(eval, &re, cancel)?;
            let im = self.eval_mod.apply_cancellable(eval, &im, cancel)?;
            eval.add(&re, &times_i(&im)?)?
        };
        // The slots hold (Δ_in/q₀)·m: read at this scale, m.
        u.set_scale(u.scale() * input_scale / q0);
        self.stc
            .apply_to_scale_cancellable(eval, &self.encoder, &u, params.default_scale(), cancel)
    }
}

/// A named bootstrappable set: CKKS parameters laid out for the circuit
/// (from q₀ up: the residual levels at the default scale, SlotsToCoeffs,
/// EvalMod, CoeffsToSlots) and the circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootPreset {
    /// 128-bit, N = 2^16, ternary secret of Hamming weight 192, log QP ≈
    /// 1519, under the bound of Lattigo's `N16QP1546H192H32` for H = 192
    /// (the table `Parameters::new` checks, for uniform ternary secrets,
    /// allows 1747).
    /// The Q primes, from q₀ up: 60 bits; 9 × 40 (the residual levels,
    /// scale 2^40); 3 × 42 (SlotsToCoeffs); 8 × 61 (EvalMod: the degree-30
    /// polynomial through the cosine at the integers −15 … 15 and 3 double
    /// angles); 4 × 60 (CoeffsToSlots). P: 5 × 49 (7 key-switching digits
    /// of up to 4 Q primes). Bootstrapping leaves 9
    /// levels. ModRaise runs under an ephemeral secret of Hamming weight 32
    /// ([`EncapsulationKeys`], over q₀·P: 305 bits). Failure (a coefficient
    /// of ModRaise's integer part beyond EvalMod's bound 15): each is the
    /// rounded sum of 33 uniform terms in ±1/2, so |I| = 16 needs the sum
    /// beyond 15.5, probability 2/33! per coefficient: 2^-105.7 per
    /// bootstrapping over its 2^16 coefficients.
    N16,
    /// The same layout at N = 2^12 (insecure, for tests): 2 residual
    /// levels.
    TestN12,
}

impl BootPreset {
    /// Levels of the presets' EvalMod (degree 30: 5, and 3 double angles).
    const EVAL_MOD_LEVELS: usize = 8;

    /// The level bootstrapping leaves a ciphertext at: the top of the
    /// residual levels, where fresh encryptions belong (the levels above
    /// are the circuit's, their primes sized for it).
    pub fn output_level(self) -> usize {
        match self {
            Self::N16 => 9,
            Self::TestN12 => 2,
        }
    }

    /// The parameters' literal, log2 of the default scale and the circuit.
    pub fn literal(self) -> (hecloud_rlwe::ParametersLiteral, u32, BootstrapLiteral) {
        let log_n = match self {
            Self::N16 => 16,
            Self::TestN12 => 12,
        };
        let residual = self.output_level();
        let circuit = BootstrapLiteral {
            cts_levels: 4,
            stc_levels: 3,
            eval_mod_bound: 15,
            eval_mod_degree: 30,
            eval_mod_at_integers: true,
            double_angles: 3,
            arcsine_degree: 0,
            ephemeral_hamming: Some(32),
            log_message_ratio: 8,
            slots: None,
        };
        let mut log_q = vec![60];
        log_q.extend(std::iter::repeat_n(40, residual));
        log_q.extend(std::iter::repeat_n(42, circuit.stc_levels));
        // EvalMod at 61 bits: its products' rounding, not the cosine, sets
        // bootstrapping's precision (T_2's reaches the result about 40
        // times over), and a scale twice as large halves it: 28.0 bits
        // mean instead of 27.4 at N = 2^16. Every EvalMod prime alike: a
        // 61-bit prime among 60-bit ones leaves the giant steps above the
        // primes' scale and their quotients below it, and lost bits.
        log_q.extend(std::iter::repeat_n(61, Self::EVAL_MOD_LEVELS));
        log_q.extend(std::iter::repeat_n(60, circuit.cts_levels));
        // P below 2^50 keeps key switching's extension limbs on the
        // floating-point kernels of AVX2 and the 52-bit ones of IFMA. Four
        // CoeffsToSlots factors (31 diagonals each, where three have 63)
        // take fewer rotations for one more prime: 10 % less time, 7
        // digits instead of 6. Their keys fit in memory because each is
        // cut to the level it is used at (`rotation_levels`).
        let literal = hecloud_rlwe::ParametersLiteral {
            log_n,
            log_q,
            log_p: vec![49; 5],
            secret: hecloud_rlwe::SecretDistribution::TernaryHamming(192),
            sigma: hecloud_rlwe::params::SIGMA,
            dnum: None,
            plaintext_modulus: None,
        };
        (literal, 40, circuit)
    }

    /// Every preset.
    pub const ALL: [Self; 2] = [Self::N16, Self::TestN12];

    /// The parameters (checked for 128-bit security, except the test set).
    pub fn params(self) -> Result<Arc<CkksParameters>> {
        let (literal, log_scale, _) = self.literal();
        match self {
            Self::N16 => CkksParameters::new(literal, log_scale),
            Self::TestN12 => CkksParameters::new_insecure_for_tests(literal, log_scale),
        }
    }

    /// The parameters and the bootstrapper.
    pub fn build(self) -> Result<(Arc<CkksParameters>, Bootstrapper)> {
        let params = self.params()?;
        let boot = Bootstrapper::new(&params, self.literal().2)?;
        Ok((params, boot))
    }

    /// Short name (`boot-n16`, `boot-test-n12`).
    pub fn name(self) -> &'static str {
        match self {
            Self::N16 => "boot-n16",
            Self::TestN12 => "boot-test-n12",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::test_literal;

    /// EvalMod over primes of mixed sizes: one 61-bit prime above 60-bit
    /// ones drifts the cosine's giant steps far enough above the primes
    /// that a quotient would be taken 14 bits below the result's scale
    /// (measured: 8 bits of the result lost), which is refused; two such
    /// primes (7 bits, 1.3 lost) and the presets' all-alike primes pass.
    #[test]
    fn eval_mod_over_primes_of_mixed_sizes_is_refused_where_it_loses_bits() {
        let (base, log_scale, circuit) = BootPreset::N16.literal();
        let eval_mod = circuit.eval_mod().unwrap();
        let n = base.log_q.len();
        let first = n - circuit.cts_levels - BootPreset::EVAL_MOD_LEVELS;
        for (top_61, refused) in [(0, false), (1, true), (2, false), (4, false), (8, false)] {
            let mut literal = base.clone();
            for (k, bits) in literal.log_q[first..n - circuit.cts_levels]
                .iter_mut()
                .enumerate()
            {
                *bits = if k + top_61 >= BootPreset::EVAL_MOD_LEVELS {
                    61
                } else {
                    60
                };
            }
            let params = CkksParameters::new_insecure_for_tests(literal, log_scale).unwrap();
            let level = params.max_level() - circuit.cts_levels;
            let scale = eval_mod.input_scale(params.q_f64(level));
            let r = eval_mod.check(&params, level, scale);
            match r {
                Err(CkksError::Polynomial(m)) if refused => {
                    assert!(m.contains("primes of mixed sizes"), "{m}")
                }
                Ok(()) if !refused => {}
                other => panic!("{top_61} 61-bit primes: {other:?}"),
            }
        }
    }

    /// The full-size circuit builds: its EvalMod walked on the preset's
    /// primes (`EvalMod::check`), its DFTs, its output level.
    #[test]
    fn the_n16_preset_builds() {
        let (_, boot) = BootPreset::N16.build().unwrap();
        assert_eq!(boot.output_level(), BootPreset::N16.output_level());
        assert!(!boot.one_eval_mod);
    }

    #[test]
    fn the_n16_preset_is_within_lattigos_bound_for_its_secret() {
        let (literal, _, circuit) = BootPreset::N16.literal();
        let bits: u32 = literal.log_q.iter().chain(&literal.log_p).sum();
        assert!(bits <= 1546, "{bits}");
        assert_eq!(circuit.ephemeral_hamming, Some(32));
        let eval_mod = circuit.eval_mod().unwrap();
        assert_eq!(eval_mod.depth(), BootPreset::EVAL_MOD_LEVELS);
        let depth = circuit.cts_levels + circuit.stc_levels + eval_mod.depth();
        assert_eq!(literal.log_q.len() - 1 - depth, 9, "levels left");
    }
    use crate::{Encoder, KeySet};
    use num_complex::Complex64;

    /// The fit at the integers goes through the cosine there (to f64's
    /// rounding), for several bounds and double-angle counts; near the
    /// integers ModRaise gives most often it keeps y mod 1 as well as the
    /// sine itself does; past the last integer it is no cosine.
    #[test]
    fn the_cosine_at_integers_goes_through_them() {
        for (bound, double_angles) in [(4, 1), (15, 3), (16, 3), (24, 4)] {
            let eval_mod = EvalMod::at_integers(bound, double_angles).unwrap();
            assert_eq!(eval_mod.cosine.degree(), 2 * bound as usize);
            let (b, r) = (i64::from(bound), f64::from(double_angles).exp2());
            for i in -b..=b {
                let want = (2.0 * std::f64::consts::PI * (i as f64 - 0.25) / r).cos();
                let got = eval_mod.cosine.eval(i as f64 / (b + 1) as f64);
                assert!(
                    (got - want).abs() < 1e-13,
                    "{bound}/{double_angles} at {i}: {got} {want}"
                );
            }
            // Past the last integer it extrapolates (closely, for a
            // cosine as slow as 24/4's).
            if bound > 16 {
                continue;
            }
            let y = b as f64 + 0.5;
            let off = (2.0 * std::f64::consts::PI * (y - 0.25) / r).cos();
            let got = eval_mod.cosine.eval(y / (b + 1) as f64);
            assert!(
                (got - off).abs() > 1e-6,
                "{bound}/{double_angles}: {got} {off}"
            );
        }
        let eval_mod = EvalMod::at_integers(15, 3).unwrap();
        for i in -10..=10 {
            for k in [-8.0f64, -16.0, 16.0, 8.0] {
                let delta = k.signum() * (-k.abs()).exp2();
                let y = f64::from(i) + delta;
                let err = (eval_mod.eval_clear(y) - EvalMod::reference(y)).abs();
                assert!(err < delta.abs() * (-30f64).exp2(), "{y}: {err}");
            }
        }
        for literal in [(15, 31), (0, 0), (65, 130)] {
            let circuit = BootstrapLiteral {
                eval_mod_bound: literal.0,
                eval_mod_degree: literal.1,
                ..BootPreset::N16.literal().2
            };
            assert!(matches!(
                circuit.eval_mod(),
                Err(CkksError::ValueOutOfRange(_))
            ));
        }
    }

    /// The correction in the clear: its Taylor coefficients against arcsin,
    /// its Chebyshev form against the Taylor polynomial (interpolation at
    /// degree + 1 nodes is exact for it), and the sine it corrects.
    #[test]
    fn the_arcsine_correction_undoes_the_sine() {
        let taylor = arcsine_taylor(31);
        let horner = |c: &[f64], t: f64| c.iter().rev().fold(0.0, |acc, c| acc * t + c);
        for t in [0.0, 0.01, -0.2, 0.5] {
            let d: f64 = horner(&taylor, t) - f64::asin(t);
            assert!(d.abs() < 1e-10, "{t}: {d}");
        }
        let tau = 2.0 * std::f64::consts::PI;
        for degree in [3, 5, 7] {
            let eval_mod = EvalMod::new(16, 63, 2)
                .unwrap()
                .with_arcsine(degree)
                .unwrap();
            let p = eval_mod.arcsine.as_ref().unwrap();
            assert_eq!(p.degree(), degree);
            for delta in [1e-4, -1.0 / 256.0, 1.0 / 64.0] {
                let t = (tau * delta).sin();
                let exact = horner(&arcsine_taylor(degree), t);
                assert!((p.eval(t) - exact).abs() < 1e-15, "{degree} {delta}");
                let corrected = p.eval(t) / tau - delta;
                let sine = t / tau - delta;
                // The error falls from the cubic term's to the first term
                // the polynomial drops, c·t^(degree + 2) with c < 1 (plus
                // Clenshaw's rounding, absolute: about 2^-52 of the
                // coefficients).
                let dropped = t.abs().powi(degree as i32 + 2) + 1e-15;
                assert!(corrected.abs() <= dropped, "{degree} {delta}");
                assert!(corrected.abs() < sine.abs() / 100.0, "{degree} {delta}");
            }
        }
        assert!(
            EvalMod::new(16, 63, 2)
                .unwrap()
                .with_arcsine(0)
                .unwrap()
                .arcsine
                .is_none()
        );
        let base = EvalMod::new(16, 63, 2).unwrap();
        assert_eq!(
            base.clone().with_arcsine(3).unwrap().depth(),
            base.depth() + 2
        );
        for bad in [1, 2, 4, 33] {
            assert!(matches!(
                EvalMod::new(16, 63, 2).unwrap().with_arcsine(bad),
                Err(CkksError::ValueOutOfRange(_))
            ));
        }
    }

    /// The clear pipeline against the sine it approximates (an
    /// independent reference: `f64::sin`), and the error estimate against
    /// a denser grid of its own.
    #[test]
    fn eval_mods_clear_pipeline_follows_the_sine() {
        let tau = 2.0 * std::f64::consts::PI;
        let good = EvalMod::new(16, 63, 2).unwrap();
        let poor = EvalMod::new(16, 31, 2).unwrap();
        let mut worst = [0.0f64; 2];
        for i in -16..=16 {
            for k in -64..=64 {
                let y = f64::from(i) + f64::from(k) / 64.0 / 256.0;
                let want = (tau * y).sin() / tau;
                for (w, e) in worst.iter_mut().zip([&good, &poor]) {
                    *w = w.max((e.eval_clear(y) - want).abs());
                }
            }
        }
        assert!(worst[0] < 1e-13, "{worst:?}");
        assert!(worst[1] > 1e-3, "{worst:?}");
        for (w, e) in worst.iter().zip([&good, &poor]) {
            let estimate = e.approximation_error(1.0 / 256.0);
            assert!(estimate <= *w && estimate > w / 4.0, "{estimate} {w}");
        }
    }

    #[test]
    fn times_i_multiplies_every_slot_by_i() {
        let params = CkksParameters::new_insecure_for_tests(test_literal(10, 1), 40).unwrap();
        let keys = KeySet::generate(&params, &[], false).unwrap();
        let enc = Encoder::new(&params);
        let z: Vec<Complex64> = (0..params.slots())
            .map(|k| Complex64::new(k as f64 / 512.0, 0.5 - k as f64 / 1024.0))
            .collect();
        let ct = keys
            .encrypt(&enc.encode(&z, 1, params.default_scale()).unwrap())
            .unwrap();
        let got = enc
            .decode(&keys.decrypt(&times_i(&ct).unwrap()).unwrap())
            .unwrap();
        for (a, b) in z.iter().zip(&got) {
            assert!((a * Complex64::i() - b).norm() < 1e-6);
        }
    }
}
