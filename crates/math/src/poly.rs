//! RNS polynomials: a polynomial of Z_Q\[X\]/(X^n + 1), Q = q_0·…·q_{L-1},
//! stored as L limbs of n residues, each tagged with its domain and basis.

use std::mem::MaybeUninit;
use std::sync::Arc;

use num_bigint::{BigInt, BigUint};
use rayon::prelude::*;
use zeroize::Zeroize;

use crate::backend::default_backend;
use crate::error::{MathError, Result};
use crate::modular::Modulus;
use crate::ntt::{NttTable, bit_reverse};

/// Whether a polynomial holds coefficients or NTT evaluations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    /// Coefficients of X^0 … X^(n-1).
    Coefficient,
    /// Evaluations at the odd powers of ψ, in bit-reversed order.
    Ntt,
}

/// Below this many coefficients in total, limb loops stay on one thread.
const PARALLEL_MIN_COEFFS: usize = 1 << 15;

/// An ordered set of distinct NTT-friendly primes for one ring degree, with
/// their NTT tables. Bases are shared behind `Arc`; sub-bases share tables.
///
/// ```
/// use hecloud_math::{RnsBasis, prime::ntt_primes};
/// let qs = ntt_primes(50, 1024, 3, &[]).unwrap();
/// let basis = RnsBasis::new(1024, &qs).unwrap();
/// assert_eq!(basis.len(), 3);
/// assert_eq!(basis.prefix(2).unwrap().moduli()[1].value(), qs[1]);
/// ```
#[derive(Debug)]
pub struct RnsBasis {
    n: usize,
    moduli: Vec<Modulus>,
    tables: Vec<Arc<NttTable>>,
}

impl PartialEq for RnsBasis {
    fn eq(&self, other: &Self) -> bool {
        self.n == other.n && self.moduli == other.moduli
    }
}
impl Eq for RnsBasis {}

impl RnsBasis {
    /// A basis of the given primes for degree `n`.
    pub fn new(n: usize, primes: &[u64]) -> Result<Arc<Self>> {
        if primes.is_empty() {
            return Err(MathError::TooFewModuli { have: 0, need: 1 });
        }
        for (i, q) in primes.iter().enumerate() {
            if primes[..i].contains(q) {
                return Err(MathError::DuplicateModulus(*q));
            }
        }
        let tables = primes
            .par_iter()
            .map(|&q| NttTable::new(q, n).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let moduli = tables.iter().map(|t| *t.modulus()).collect();
        Ok(Arc::new(Self { n, moduli, tables }))
    }

    /// Ring degree n.
    pub fn degree(&self) -> usize {
        self.n
    }

    /// Number of primes.
    pub fn len(&self) -> usize {
        self.moduli.len()
    }

    /// Never true: a basis has at least one prime.
    pub fn is_empty(&self) -> bool {
        self.moduli.is_empty()
    }

    /// The primes.
    pub fn moduli(&self) -> &[Modulus] {
        &self.moduli
    }

    /// NTT tables, one per prime.
    pub fn tables(&self) -> &[Arc<NttTable>] {
        &self.tables
    }

    /// The product Q of the primes.
    pub fn product(&self) -> BigUint {
        self.moduli
            .iter()
            .map(|m| BigUint::from(m.value()))
            .product()
    }

    /// log2 Q.
    pub fn log_q(&self) -> f64 {
        self.moduli.iter().map(|m| (m.value() as f64).log2()).sum()
    }

    /// The first `len` primes as a basis (sharing the NTT tables).
    pub fn prefix(&self, len: usize) -> Result<Arc<Self>> {
        if len == 0 || len > self.len() {
            return Err(MathError::TooFewModuli {
                have: self.len(),
                need: len.max(1),
            });
        }
        Ok(Arc::new(Self {
            n: self.n,
            moduli: self.moduli[..len].to_vec(),
            tables: self.tables[..len].to_vec(),
        }))
    }

    /// The primes at `indices` (in that order) as a basis sharing the NTT
    /// tables: sub-bases such as (Q_l without one digit) ∪ P for key switching.
    ///
    /// ```
    /// use hecloud_math::{RnsBasis, prime::ntt_primes};
    /// let qs = ntt_primes(50, 64, 4, &[]).unwrap();
    /// let basis = RnsBasis::new(64, &qs).unwrap();
    /// let sub = basis.select(&[3, 1]).unwrap();
    /// assert_eq!(sub.moduli()[0].value(), qs[3]);
    /// assert!(basis.select(&[4]).is_err());
    /// assert!(basis.select(&[1, 1]).is_err());
    /// ```
    pub fn select(&self, indices: &[usize]) -> Result<Arc<Self>> {
        if indices.is_empty() {
            return Err(MathError::TooFewModuli { have: 0, need: 1 });
        }
        let mut moduli = Vec::with_capacity(indices.len());
        let mut tables = Vec::with_capacity(indices.len());
        for (k, &i) in indices.iter().enumerate() {
            let m = *self.moduli.get(i).ok_or(MathError::TooFewModuli {
                have: self.len(),
                need: i + 1,
            })?;
            if indices[..k].contains(&i) {
                return Err(MathError::DuplicateModulus(m.value()));
            }
            moduli.push(m);
            tables.push(self.tables[i].clone());
        }
        Ok(Arc::new(Self {
            n: self.n,
            moduli,
            tables,
        }))
    }

    /// This basis followed by `other` (e.g. Q ∪ P for key switching).
    pub fn concat(&self, other: &RnsBasis) -> Result<Arc<Self>> {
        if self.n != other.n {
            return Err(MathError::BasisMismatch);
        }
        if let Some(q) = other.moduli.iter().find(|q| self.moduli.contains(q)) {
            return Err(MathError::DuplicateModulus(q.value()));
        }
        Ok(Arc::new(Self {
            n: self.n,
            moduli: self.moduli.iter().chain(&other.moduli).copied().collect(),
            tables: self.tables.iter().chain(&other.tables).cloned().collect(),
        }))
    }
}

/// A polynomial over an RNS basis, limb-major (limb i is `data[i·n..(i+1)·n]`).
///
/// ```
/// use hecloud_math::{Domain, RnsBasis, RnsPoly, prime::ntt_primes};
/// let n = 1024;
/// let basis = RnsBasis::new(n, &ntt_primes(50, n, 2, &[]).unwrap()).unwrap();
/// let mut x = RnsPoly::from_signed(&basis, &{ let mut c = vec![0i64; n]; c[1] = 1; c }).unwrap();
/// x.to_ntt();
/// let x2 = x.mul(&x).unwrap();            // X · X = X^2
/// let mut x2 = x2;
/// x2.to_coefficient();
/// assert_eq!(x2.domain(), Domain::Coefficient);
/// assert_eq!(x2.limb(0)[2], 1);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RnsPoly {
    basis: Arc<RnsBasis>,
    domain: Domain,
    data: Vec<u64>,
}

impl std::fmt::Debug for RnsPoly {
    // Only the shape: the residues may be secret and are large.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RnsPoly")
            .field("degree", &self.degree())
            .field(
                "moduli",
                &self
                    .basis
                    .moduli
                    .iter()
                    .map(Modulus::value)
                    .collect::<Vec<_>>(),
            )
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

/// A dropped polynomial's buffer goes back to this thread's
/// [`pool`](crate::pool) for the next operation's result or temporaries.
impl Drop for RnsPoly {
    fn drop(&mut self) {
        crate::pool::give(std::mem::take(&mut self.data));
    }
}

impl Zeroize for RnsPoly {
    fn zeroize(&mut self) {
        self.data.zeroize();
    }
}

/// `(a·b)_k` of the negacyclic product, computed directly in O(n): the
/// independent reference the demo and tests check NTT products against.
pub fn negacyclic_coefficient(m: &Modulus, a: &[u64], b: &[u64], k: usize) -> u64 {
    let n = a.len();
    let mut acc = 0u64;
    for i in 0..n {
        let p = m.mul(a[i], b[if i <= k { k - i } else { n + k - i }]);
        acc = if i <= k { m.add(acc, p) } else { m.sub(acc, p) };
    }
    acc
}

/// What a rescale does to each limb it keeps: x ↦ ⌊x / q_L⌉ from the last
/// limb, brought to the coefficient domain and shifted by q_L/2 once.
struct RescaleStep {
    /// The basis without q_L.
    basis: Arc<RnsBasis>,
    /// (x_L + q_L/2) mod q_L, coefficient domain.
    last: Vec<u64>,
    ql: u64,
    last_bits: u32,
    domain: Domain,
}

impl RescaleStep {
    fn new(p: &RnsPoly) -> Result<Self> {
        let l = p.limbs();
        if l < 2 {
            return Err(MathError::TooFewModuli { have: l, need: 2 });
        }
        let last_m = p.basis.moduli[l - 1];
        let half = last_m.value() / 2;
        let mut last = p.limb(l - 1).to_vec();
        if p.domain == Domain::Ntt {
            default_backend().ntt_inverse(&p.basis.tables[l - 1], &mut last);
        }
        // Adding q_L/2 before the floor division turns it into rounding.
        for x in last.iter_mut() {
            *x = last_m.add(*x, half);
        }
        Ok(Self {
            basis: p.basis.prefix(l - 1)?,
            last,
            ql: last_m.value(),
            last_bits: last_m.bits(),
            domain: p.domain,
        })
    }

    /// Divides one limb (over prime m) in place.
    fn divide(&self, limb: &mut [u64], m: &Modulus, t: &NttTable) {
        let (ql, last, be) = (self.ql, &self.last, default_backend());
        let half_i = m.reduce(ql / 2);
        let ql_inv = m.inv(m.reduce(ql)).expect("distinct primes are coprime");
        // r = ((x_L + q_L/2) mod q_L) − q_L/2, so that x − r ≡ x − x_L
        // (mod q_L) and (x − r)/q_L = ⌊(x + q_L/2)/q_L⌋; r is brought to
        // the polynomial's domain before the subtraction.
        if self.domain == Domain::Ntt {
            // The reduction and the final x·q_L⁻¹ − r·q_L⁻¹ are the
            // vectorised linear combinations. r is a limb-sized buffer kept
            // per thread: a fresh one per limb cost a zero fill (or page
            // faults) of 512 KiB at N = 2^16 every time.
            thread_local! {
                static R: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
            }
            R.with_borrow_mut(|r| {
                r.resize(last.len(), 0);
                be.linear_combination(m, r, None, &[last], &[1], &[self.last_bits]);
                r.iter_mut().for_each(|x| *x = m.sub(*x, half_i));
                be.ntt_forward(t, r);
                be.linear_combination(m, limb, Some(ql_inv), &[r], &[m.neg(ql_inv)], &[m.bits()]);
            });
        } else {
            let ql_inv_s = m.shoup(ql_inv);
            for (x, &xl) in limb.iter_mut().zip(last) {
                let ri = m.sub(m.reduce(xl), half_i);
                *x = m.mul_shoup(m.sub(*x, ri), ql_inv, ql_inv_s);
            }
        }
    }
}

impl RnsPoly {
    /// The zero polynomial.
    pub fn zero(basis: &Arc<RnsBasis>, domain: Domain) -> Self {
        Self {
            basis: basis.clone(),
            domain,
            data: vec![0; basis.len() * basis.degree()],
        }
    }

    /// A polynomial from limb-major residues (each < its prime).
    pub fn from_limbs(basis: &Arc<RnsBasis>, domain: Domain, data: Vec<u64>) -> Result<Self> {
        let expected = basis.len() * basis.degree();
        if data.len() != expected {
            return Err(MathError::LengthMismatch {
                expected,
                found: data.len(),
            });
        }
        for (limb, m) in data.chunks_exact(basis.degree()).zip(basis.moduli()) {
            // A branch-free pass first (it vectorizes); the search only on failure.
            if !limb.iter().fold(false, |bad, &x| bad | (x >= m.value())) {
                continue;
            }
            if let Some(&bad) = limb.iter().find(|&&x| x >= m.value()) {
                return Err(MathError::ResidueOutOfRange {
                    value: bad,
                    q: m.value(),
                });
            }
        }
        Ok(Self {
            basis: basis.clone(),
            domain,
            data,
        })
    }

    /// A coefficient-domain polynomial with small signed coefficients:
    /// each |c| below every prime of `basis` (a larger one is refused with
    /// [`MathError::ResidueOutOfRange`]; [`Self::from_bigints`] takes any).
    /// Branch-free in the coefficient values (they may be secret): only
    /// their largest magnitude decides the refusal.
    ///
    /// ```
    /// use hecloud_math::{MathError, RnsBasis, RnsPoly, prime::ntt_primes};
    /// let qs = ntt_primes(40, 16, 2, &[]).unwrap();
    /// let basis = RnsBasis::new(16, &qs).unwrap();
    /// let mut c = vec![0i64; 16];
    /// c[0] = -5;
    /// let p = RnsPoly::from_signed(&basis, &c).unwrap();
    /// assert_eq!(p.limb(1)[0], qs[1] - 5);
    /// // |c| at a prime or above would wrap: refused.
    /// c[3] = -(qs[0].min(qs[1]) as i64);
    /// assert!(matches!(
    ///     RnsPoly::from_signed(&basis, &c),
    ///     Err(MathError::ResidueOutOfRange { .. })
    /// ));
    /// c[3] = i64::MIN;
    /// assert!(RnsPoly::from_signed(&basis, &c).is_err());
    /// ```
    pub fn from_signed(basis: &Arc<RnsBasis>, coeffs: &[i64]) -> Result<Self> {
        let n = basis.degree();
        if coeffs.len() != n {
            return Err(MathError::LengthMismatch {
                expected: n,
                found: coeffs.len(),
            });
        }
        let widest = coeffs.iter().fold(0, |m, c| m.max(c.unsigned_abs()));
        if let Some(q) = basis.moduli().iter().map(Modulus::value).min()
            && widest >= q
        {
            return Err(MathError::ResidueOutOfRange { value: widest, q });
        }
        let mut p = Self::zero(basis, Domain::Coefficient);
        for (limb, m) in p.data.chunks_exact_mut(n).zip(basis.moduli()) {
            for (x, &c) in limb.iter_mut().zip(coeffs) {
                *x = m.reduce(m.from_small_i64(c));
            }
        }
        Ok(p)
    }

    /// The basis.
    pub fn basis(&self) -> &Arc<RnsBasis> {
        &self.basis
    }

    /// The domain.
    pub fn domain(&self) -> Domain {
        self.domain
    }

    /// Ring degree.
    pub fn degree(&self) -> usize {
        self.basis.degree()
    }

    /// Number of limbs.
    pub fn limbs(&self) -> usize {
        self.basis.len()
    }

    /// Limb `i` (panics if `i` is out of range, like slice indexing).
    pub fn limb(&self, i: usize) -> &[u64] {
        let n = self.degree();
        &self.data[i * n..(i + 1) * n]
    }

    /// Mutable limb `i`.
    pub fn limb_mut(&mut self, i: usize) -> &mut [u64] {
        let n = self.degree();
        &mut self.data[i * n..(i + 1) * n]
    }

    /// All residues, limb-major.
    pub fn data(&self) -> &[u64] {
        &self.data
    }

    /// Takes the residues out (limb-major), e.g. to recycle the buffer.
    ///
    /// ```
    /// use hecloud_math::{Domain, RnsBasis, RnsPoly, prime::ntt_primes};
    /// let basis = RnsBasis::new(16, &ntt_primes(40, 16, 2, &[]).unwrap()).unwrap();
    /// let p = RnsPoly::from_signed(&basis, &[3; 16]).unwrap();
    /// let buf = p.clone().into_data();
    /// let mut q = RnsPoly::from_buffer_unchecked(&basis, Domain::Coefficient, buf);
    /// assert_eq!(q, p);
    /// q.data_mut().fill(0);
    /// assert_eq!(q, RnsPoly::zero(&basis, Domain::Coefficient));
    /// ```
    pub fn into_data(mut self) -> Vec<u64> {
        std::mem::take(&mut self.data)
    }

    /// A polynomial over `basis` reusing `buf` (resized, contents
    /// unspecified until written: the caller overwrites every residue with
    /// a value below its prime before reading it).
    pub fn from_buffer_unchecked(basis: &Arc<RnsBasis>, domain: Domain, mut buf: Vec<u64>) -> Self {
        buf.resize(basis.len() * basis.degree(), 0);
        Self {
            basis: basis.clone(),
            domain,
            data: buf,
        }
    }

    /// A polynomial whose limbs `write(limb_index, prime, limb)` fills, on
    /// several threads when it is large enough to pay for it; the buffer
    /// is not zeroed first.
    ///
    /// # Safety
    /// `write` must initialise every element of the limb it is given (with
    /// a residue below `prime`): the others would be read uninitialised.
    pub(crate) unsafe fn from_limb_writer<F>(
        basis: &Arc<RnsBasis>,
        domain: Domain,
        write: F,
    ) -> Self
    where
        F: Fn(usize, u64, &mut [MaybeUninit<u64>]) + Sync + Send,
    {
        let n = basis.degree();
        let len = basis.len() * n;
        let mut data: Vec<u64> = Vec::with_capacity(len);
        let work = |(i, limb): (usize, &mut [MaybeUninit<u64>])| {
            write(i, basis.moduli[i].value(), limb);
        };
        let spare = &mut data.spare_capacity_mut()[..len];
        if len >= PARALLEL_MIN_COEFFS && basis.len() > 1 {
            spare.par_chunks_exact_mut(n).enumerate().for_each(work);
        } else {
            spare.chunks_exact_mut(n).enumerate().for_each(work);
        }
        // SAFETY: `write` initialised every element of every limb (the
        // caller's promise).
        unsafe { data.set_len(len) };
        Self {
            basis: basis.clone(),
            domain,
            data,
        }
    }

    /// All residues, limb-major, mutable. The caller keeps every residue
    /// below its prime (hot loops of the schemes write results here directly).
    pub fn data_mut(&mut self) -> &mut [u64] {
        &mut self.data
    }

    /// Relabels the domain without transforming: for data produced directly
    /// in a domain (e.g. uniform samples, which are uniform in both).
    pub fn set_domain_unchecked(&mut self, domain: Domain) {
        self.domain = domain;
    }

    /// A copy of `self`'s first `basis.len()` limbs over `basis` (`self`'s
    /// basis or a prefix of it), with `f(limb_index, limb, modulus, table)`
    /// run on each limb as soon as it is copied: the out-of-place form of
    /// an operation costs one pass over memory, not a copy of the whole
    /// polynomial and then a second pass over the copy.
    fn mapped<F>(&self, basis: &Arc<RnsBasis>, f: F) -> Self
    where
        F: Fn(usize, &mut [u64], &Modulus, &NttTable) + Sync + Send,
    {
        debug_assert!(
            basis.len() <= self.limbs() && self.basis.moduli()[..basis.len()] == *basis.moduli()
        );
        let write = |i: usize, _: u64, limb: &mut [MaybeUninit<u64>]| {
            let src = self.limb(i);
            assert_eq!(limb.len(), src.len(), "limbs of one degree");
            // SAFETY: the copy initialises every element of `limb` (a fresh
            // buffer: no overlap), which may then be read as u64.
            let limb = unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), limb.as_mut_ptr().cast(), src.len());
                &mut *(std::ptr::from_mut(limb) as *mut [u64])
            };
            f(i, limb, &basis.moduli[i], &basis.tables[i]);
        };
        // SAFETY: `write` initialises every element of its limb (the copy)
        // before `f` sees it; `f` keeps residues below their primes.
        unsafe { Self::from_limb_writer(basis, self.domain, write) }
    }

    /// Runs `f(limb_index, limb, modulus, table)` on every limb, on several
    /// threads when the polynomial is large enough to pay for it.
    pub(crate) fn par_limbs<F>(&mut self, f: F)
    where
        F: Fn(usize, &mut [u64], &Modulus, &NttTable) + Sync + Send,
    {
        let n = self.degree();
        let basis = self.basis.clone();
        let work = |(i, limb): (usize, &mut [u64])| f(i, limb, &basis.moduli[i], &basis.tables[i]);
        if self.data.len() >= PARALLEL_MIN_COEFFS && basis.len() > 1 {
            self.data.par_chunks_exact_mut(n).enumerate().for_each(work);
        } else {
            self.data.chunks_exact_mut(n).enumerate().for_each(work);
        }
    }

    /// Transforms to the NTT domain (no-op if already there).
    pub fn to_ntt(&mut self) {
        if self.domain == Domain::Ntt {
            return;
        }
        let be = default_backend();
        self.par_limbs(|_, limb, _, t| be.ntt_forward(t, limb));
        self.domain = Domain::Ntt;
    }

    /// Transforms to the coefficient domain (no-op if already there).
    pub fn to_coefficient(&mut self) {
        if self.domain == Domain::Coefficient {
            return;
        }
        let be = default_backend();
        self.par_limbs(|_, limb, _, t| be.ntt_inverse(t, limb));
        self.domain = Domain::Coefficient;
    }

    /// Same basis (by identity or by value) as `other`.
    pub fn same_basis(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.basis, &other.basis) || *self.basis == *other.basis
    }

    fn check_same(&self, other: &Self) -> Result<()> {
        if !self.same_basis(other) {
            return Err(MathError::BasisMismatch);
        }
        if self.domain != other.domain {
            return Err(MathError::DomainMismatch {
                expected: self.domain,
                found: other.domain,
            });
        }
        Ok(())
    }

    fn require_domain(&self, expected: Domain) -> Result<()> {
        if self.domain != expected {
            return Err(MathError::DomainMismatch {
                expected,
                found: self.domain,
            });
        }
        Ok(())
    }

    /// `self[i] = f(q, self[i], other[i])` residue by residue.
    fn zip_assign(
        &mut self,
        other: &Self,
        f: impl Fn(&Modulus, u64, u64) -> u64 + Sync,
    ) -> Result<()> {
        self.check_same(other)?;
        self.par_limbs(|i, limb, m, _| {
            for (x, y) in limb.iter_mut().zip(other.limb(i)) {
                *x = f(m, *x, *y);
            }
        });
        Ok(())
    }

    /// `self += other`.
    pub fn add_assign(&mut self, other: &Self) -> Result<()> {
        self.zip_assign(other, |m, x, y| m.add(x, y))
    }

    /// `self -= other`.
    pub fn sub_assign(&mut self, other: &Self) -> Result<()> {
        self.zip_assign(other, |m, x, y| m.sub(x, y))
    }

    /// `f(q, self[i], other[i])` residue by residue over `self`'s limbs,
    /// out of place (the caller has checked `other`'s basis).
    fn zip(&self, other: &Self, f: impl Fn(&Modulus, u64, u64) -> u64 + Sync) -> Self {
        self.mapped(&self.basis, |i, limb, m, _| {
            for (x, y) in limb.iter_mut().zip(other.limb(i)) {
                *x = f(m, *x, *y);
            }
        })
    }

    /// `self + other`.
    pub fn add(&self, other: &Self) -> Result<Self> {
        self.check_same(other)?;
        Ok(self.zip(other, |m, x, y| m.add(x, y)))
    }

    /// `self - other`.
    pub fn sub(&self, other: &Self) -> Result<Self> {
        self.check_same(other)?;
        Ok(self.zip(other, |m, x, y| m.sub(x, y)))
    }

    /// `-self`, in place.
    pub fn neg_assign(&mut self) {
        self.par_limbs(|_, limb, m, _| limb.iter_mut().for_each(|x| *x = m.neg(*x)));
    }

    /// `-self`.
    pub fn neg(&self) -> Self {
        self.mapped(&self.basis, |_, limb, m, _| {
            limb.iter_mut().for_each(|x| *x = m.neg(*x))
        })
    }

    /// `self · other` (both in the NTT domain: pointwise product).
    pub fn mul(&self, other: &Self) -> Result<Self> {
        self.check_same(other)?;
        // Same basis: the prefix product over all of it.
        self.mul_prefix(other)
    }

    /// `self ·= other` (both in the NTT domain).
    pub fn mul_assign(&mut self, other: &Self) -> Result<()> {
        self.check_same(other)?;
        self.require_domain(Domain::Ntt)?;
        let be = default_backend();
        self.par_limbs(|i, limb, m, _| be.mul_pointwise(m, limb, other.limb(i)));
        Ok(())
    }

    /// `self += a · b` (all in the NTT domain).
    pub fn mul_add_assign(&mut self, a: &Self, b: &Self) -> Result<()> {
        self.check_same(a)?;
        self.check_same(b)?;
        self.require_domain(Domain::Ntt)?;
        let be = default_backend();
        self.par_limbs(|i, limb, m, _| be.mul_add_pointwise(m, a.limb(i), b.limb(i), limb));
        Ok(())
    }

    /// Checks that `other` (NTT domain, like `self`) is over a basis that
    /// starts with `self`'s: a plaintext kept at a higher level than the
    /// ciphertext it multiplies, or an operand at a higher level than the
    /// product it takes part in.
    pub fn check_prefix(&self, other: &Self) -> Result<()> {
        let k = self.limbs();
        if other.degree() != self.degree()
            || other.limbs() < k
            || self.basis.moduli() != &other.basis.moduli()[..k]
        {
            return Err(MathError::BasisMismatch);
        }
        self.require_domain(Domain::Ntt)?;
        other.require_domain(Domain::Ntt)
    }

    /// `self ·= other` over `self`'s limbs, where `other`'s basis starts
    /// with `self`'s (its extra limbs are ignored): a product by a
    /// plaintext at a higher level without copying its limbs first.
    pub fn mul_prefix_assign(&mut self, other: &Self) -> Result<()> {
        self.check_prefix(other)?;
        let be = default_backend();
        self.par_limbs(|i, limb, m, _| be.mul_pointwise(m, limb, other.limb(i)));
        Ok(())
    }

    /// `self · other` over `self`'s limbs, where `other`'s basis starts
    /// with `self`'s, out of place (see [`Self::mul_prefix_assign`]).
    pub fn mul_prefix(&self, other: &Self) -> Result<Self> {
        self.check_prefix(other)?;
        let be = default_backend();
        Ok(self.mapped(&self.basis, |i, limb, m, _| {
            be.mul_pointwise(m, limb, other.limb(i))
        }))
    }

    /// `self + other` over `self`'s limbs, where `other`'s basis starts
    /// with `self`'s (a plaintext at a higher level), out of place.
    pub fn add_prefix(&self, other: &Self) -> Result<Self> {
        self.check_prefix(other)?;
        Ok(self.zip(other, |m, x, y| m.add(x, y)))
    }

    /// `self − other` as [`Self::add_prefix`].
    pub fn sub_prefix(&self, other: &Self) -> Result<Self> {
        self.check_prefix(other)?;
        Ok(self.zip(other, |m, x, y| m.sub(x, y)))
    }

    /// `self += a · b` over `self`'s limbs: `a` over `self`'s basis, `b`
    /// over one that starts with it (a plaintext at a higher level). The
    /// multiply-accumulate of a plaintext matrix product, with no
    /// temporary.
    pub fn mul_add_prefix_assign(&mut self, a: &Self, b: &Self) -> Result<()> {
        self.check_same(a)?;
        self.check_prefix(b)?;
        let be = default_backend();
        self.par_limbs(|i, limb, m, _| be.mul_add_pointwise(m, a.limb(i), b.limb(i), limb));
        Ok(())
    }

    /// `self += a · c_i` on limb i (NTT domain), for constants `cs` (one
    /// below each of `self`'s primes), where `a`'s basis starts with
    /// `self`'s (its extra limbs are ignored): a constant multiple of a ciphertext at a higher
    /// level folded into a sum, with no copy.
    pub fn add_scaled_prefix_assign(&mut self, a: &Self, cs: &[u64]) -> Result<()> {
        self.check_prefix(a)?;
        if cs.len() != self.limbs() {
            return Err(MathError::BasisMismatch);
        }
        let be = default_backend();
        self.par_limbs(|i, limb, m, _| {
            be.linear_combination(m, limb, Some(1), &[a.limb(i)], &[cs[i]], &[m.bits()]);
        });
        Ok(())
    }

    /// `cs` holds one constant per limb.
    fn check_rns_scalar(&self, cs: &[u64]) -> Result<()> {
        if cs.len() != self.limbs() {
            return Err(MathError::LengthMismatch {
                expected: self.limbs(),
                found: cs.len(),
            });
        }
        Ok(())
    }

    /// Multiplies by an integer constant (any domain), reduced per prime.
    pub fn mul_scalar_assign(&mut self, c: u64) {
        let be = default_backend();
        self.par_limbs(|_, limb, m, _| be.mul_scalar(m, limb, m.reduce(c)));
    }

    /// Multiplies limb i by `cs[i]` (an RNS constant, e.g. a big integer
    /// given by its residues).
    pub fn mul_rns_scalar_assign(&mut self, cs: &[u64]) -> Result<()> {
        self.check_rns_scalar(cs)?;
        let be = default_backend();
        self.par_limbs(|i, limb, m, _| be.mul_scalar(m, limb, m.reduce(cs[i])));
        Ok(())
    }

    /// `self` with limb i multiplied by `cs[i]`, out of place.
    pub fn mul_rns_scalar(&self, cs: &[u64]) -> Result<Self> {
        self.check_rns_scalar(cs)?;
        let be = default_backend();
        Ok(self.mapped(&self.basis, |i, limb, m, _| {
            be.mul_scalar(m, limb, m.reduce(cs[i]))
        }))
    }

    /// `self` with `cs[i]` added to every residue of limb i (in the NTT
    /// domain: a constant polynomial), out of place.
    pub fn add_rns_scalar(&self, cs: &[u64]) -> Result<Self> {
        self.check_rns_scalar(cs)?;
        self.require_domain(Domain::Ntt)?;
        Ok(self.mapped(&self.basis, |i, limb, m, _| {
            let c = m.reduce(cs[i]);
            limb.iter_mut().for_each(|x| *x = m.add(*x, c));
        }))
    }

    /// [`Self::add_rns_scalar`] in place.
    pub fn add_rns_scalar_assign(&mut self, cs: &[u64]) -> Result<()> {
        self.check_rns_scalar(cs)?;
        self.require_domain(Domain::Ntt)?;
        self.par_limbs(|i, limb, m, _| {
            let c = m.reduce(cs[i]);
            limb.iter_mut().for_each(|x| *x = m.add(*x, c));
        });
        Ok(())
    }

    /// The automorphism X → X^k (k odd, taken mod 2n), in either domain.
    pub fn automorphism(&self, k: usize) -> Result<Self> {
        let n = self.degree();
        let two_n = 2 * n;
        let k = k % two_n;
        if k.is_multiple_of(2) {
            return Err(MathError::InvalidGaloisElement { k, two_n });
        }
        let mut out = Self::zero(&self.basis, self.domain);
        match self.domain {
            Domain::Coefficient => {
                out.par_limbs(|l, limb, m, _| {
                    let src = self.limb(l);
                    for (i, &c) in src.iter().enumerate() {
                        let e = i * k % two_n;
                        if e < n {
                            limb[e] = c;
                        } else {
                            limb[e - n] = m.neg(c);
                        }
                    }
                });
            }
            Domain::Ntt => {
                let perm = ntt_automorphism_permutation(n, k);
                out.par_limbs(|l, limb, _, _| {
                    let src = self.limb(l);
                    for (o, &p) in limb.iter_mut().zip(&perm) {
                        *o = src[p];
                    }
                });
            }
        }
        Ok(out)
    }

    /// Drops the last limb (a modulus switch without rounding, used for
    /// level matching of values already scaled down).
    pub fn drop_last_limb(&mut self) -> Result<()> {
        let l = self.limbs();
        if l < 2 {
            return Err(MathError::TooFewModuli { have: l, need: 2 });
        }
        self.basis = self.basis.prefix(l - 1)?;
        self.data.truncate((l - 1) * self.degree());
        Ok(())
    }

    /// Divides by the last prime q_L with rounding and drops it:
    /// x ↦ ⌊x / q_L⌉ over the remaining basis. Works in either domain (in the
    /// NTT domain the last limb is brought back to coefficients once).
    pub fn rescale(&mut self) -> Result<()> {
        let step = RescaleStep::new(self)?;
        self.data.truncate(step.basis.len() * self.degree());
        self.basis = step.basis.clone();
        self.par_limbs(|_, limb, m, t| step.divide(limb, m, t));
        Ok(())
    }

    /// [`Self::rescale`] out of place: each limb is divided as it is
    /// copied, with no copy of the whole polynomial first.
    pub fn rescaled(&self) -> Result<Self> {
        let step = RescaleStep::new(self)?;
        Ok(self.mapped(&step.basis, |_, limb, m, t| step.divide(limb, m, t)))
    }

    /// The coefficients as integers in [0, Q) by CRT (coefficient domain).
    pub fn to_biguint(&self) -> Result<Vec<BigUint>> {
        self.require_domain(Domain::Coefficient)?;
        let crt = Crt::new(&self.basis);
        Ok((0..self.degree())
            .map(|j| crt.reconstruct(self, j))
            .collect())
    }

    /// The coefficients as integers in (−Q/2, Q/2] by CRT (coefficient domain).
    pub fn to_bigint_centered(&self) -> Result<Vec<BigInt>> {
        let q = BigInt::from(self.basis.product());
        let half = &q >> 1;
        Ok(self
            .to_biguint()?
            .into_iter()
            .map(|x| {
                let x = BigInt::from(x);
                if x > half { x - &q } else { x }
            })
            .collect())
    }

    /// A coefficient-domain polynomial from integers (reduced mod each prime).
    pub fn from_bigints(basis: &Arc<RnsBasis>, coeffs: &[BigInt]) -> Result<Self> {
        let n = basis.degree();
        if coeffs.len() != n {
            return Err(MathError::LengthMismatch {
                expected: n,
                found: coeffs.len(),
            });
        }
        let mut p = Self::zero(basis, Domain::Coefficient);
        for (limb, m) in p.data.chunks_exact_mut(n).zip(basis.moduli()) {
            let q = BigInt::from(m.value());
            for (x, c) in limb.iter_mut().zip(coeffs) {
                let r = ((c % &q) + &q) % &q;
                *x = u64::try_from(r).expect("residue below q");
            }
        }
        Ok(p)
    }
}

/// The permutation of NTT slots realising X → X^k (k odd, taken mod 2n):
/// `out[p] = in[perm[p]]`, for schemes that apply one automorphism to many
/// polynomials (hoisted rotations).
///
/// ```
/// use hecloud_math::poly::automorphism_permutation;
/// let perm = automorphism_permutation(16, 5).unwrap();
/// assert_eq!(perm.len(), 16);
/// assert!(automorphism_permutation(16, 4).is_err());
/// ```
pub fn automorphism_permutation(n: usize, k: usize) -> Result<Vec<usize>> {
    if !n.is_power_of_two() || n < 2 {
        return Err(MathError::InvalidDegree(n));
    }
    let k = k % (2 * n);
    if k.is_multiple_of(2) {
        return Err(MathError::InvalidGaloisElement { k, two_n: 2 * n });
    }
    Ok(ntt_automorphism_permutation(n, k))
}

/// `out[p] = src[perm[p]]`: an [`automorphism_permutation`] applied to one
/// limb, with the permutation as u32 (N ≤ 2^17; half the bytes of usize
/// beside every limb it moves).
///
/// Aligned runs of outputs read aligned runs of `src`, but from lines in
/// no order a hardware prefetcher follows: the line that output 1024
/// places later reads is asked for ahead (on x86_64). At N = 2^16 the
/// permutations' share of a rotation fell from 7 % to 3 % (64 places
/// ahead: 5.8 %, 256: 3.7 %).
///
/// ```
/// use hecloud_math::poly::{automorphism_permutation, gather};
/// let perm: Vec<u32> = automorphism_permutation(16, 5).unwrap().iter().map(|&p| p as u32).collect();
/// let src: Vec<u64> = (100..116).collect();
/// let mut out = vec![0; 16];
/// gather(&mut out, &src, &perm);
/// assert!(out.iter().zip(&perm).all(|(&o, &p)| o == src[p as usize]));
/// ```
///
/// # Panics
/// If an index of `perm` is outside `src`, or `out` and `perm` differ in
/// length.
pub fn gather(out: &mut [u64], src: &[u64], perm: &[u32]) {
    assert_eq!(out.len(), perm.len(), "one index per output");
    for (j, (v, &p)) in out.iter_mut().zip(perm).enumerate() {
        prefetch_gathered(src, perm, j);
        *v = src[p as usize];
    }
}

/// `out[p] = out[p] + src[perm[p]] mod q` ([`gather`] summed in).
///
/// ```
/// use hecloud_math::{Modulus, poly::gather_add};
/// let q = Modulus::new(97).unwrap();
/// let mut out = vec![90, 1];
/// gather_add(&q, &mut out, &[10, 20], &[1, 0]);
/// assert_eq!(out, vec![13, 11]);
/// ```
///
/// # Panics
/// As [`gather`].
pub fn gather_add(q: &Modulus, out: &mut [u64], src: &[u64], perm: &[u32]) {
    assert_eq!(out.len(), perm.len(), "one index per output");
    for (j, (v, &p)) in out.iter_mut().zip(perm).enumerate() {
        prefetch_gathered(src, perm, j);
        *v = q.add(*v, src[p as usize]);
    }
}

/// Asks for the line of `src` that output `j + AHEAD` of a gather reads,
/// once per 8 outputs (a cache line of them).
#[inline]
fn prefetch_gathered(src: &[u64], perm: &[u32], j: usize) {
    const AHEAD: usize = 1024;
    #[cfg(target_arch = "x86_64")]
    if j.is_multiple_of(8)
        && let Some(&p) = perm.get(j + AHEAD)
    {
        crate::ntt::simd::prefetch(src, p as usize);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (src, perm, j);
}

/// Permutation of NTT slots realising X → X^k: `out[p] = in[perm[p]]`.
fn ntt_automorphism_permutation(n: usize, k: usize) -> Vec<usize> {
    let log_n = n.trailing_zeros();
    let two_n = 2 * n;
    (0..n)
        .map(|p| {
            let e = 2 * bit_reverse(p, log_n) + 1;
            let ek = e * k % two_n;
            bit_reverse((ek - 1) / 2, log_n)
        })
        .collect()
}

/// CRT reconstruction constants of a basis.
#[derive(Debug)]
struct Crt {
    q: BigUint,
    /// (Q/q_i)^{-1} mod q_i.
    qhat_inv: Vec<u64>,
    /// Q/q_i.
    qhat: Vec<BigUint>,
    moduli: Vec<Modulus>,
}

impl Crt {
    fn new(basis: &RnsBasis) -> Self {
        let q = basis.product();
        let moduli = basis.moduli().to_vec();
        let qhat: Vec<BigUint> = moduli.iter().map(|m| &q / m.value()).collect();
        let qhat_inv = moduli
            .iter()
            .zip(&qhat)
            .map(|(m, h)| {
                let r = u64::try_from(h % m.value()).expect("residue below q");
                m.inv(r).expect("distinct primes are coprime")
            })
            .collect();
        Self {
            q,
            qhat_inv,
            qhat,
            moduli,
        }
    }

    fn reconstruct(&self, p: &RnsPoly, j: usize) -> BigUint {
        let mut acc = BigUint::default();
        for (i, m) in self.moduli.iter().enumerate() {
            let y = m.mul(p.limb(i)[j], self.qhat_inv[i]);
            acc += &self.qhat[i] * y;
        }
        acc % &self.q
    }
}
