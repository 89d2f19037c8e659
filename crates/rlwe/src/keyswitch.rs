//! Hybrid key switching (GHS with dnum digits, as in Han–Ki 2019 and
//! Lattigo): decompose d ∈ R_{Q_l} into digits [d]_{Q_j}, extend each to
//! Q_l ∪ P by fast base conversion (ModUp), take the inner product with the
//! switching key over Q_l ∪ P, and divide by P (ModDown).
//!
//! The inner loop runs target limb by target limb: for each limb t of
//! Q_l ∪ P it converts every digit to t, transforms it and accumulates both
//! key products in 128-bit lazy sums, reducing once at the end; scratch is
//! one limb and two accumulators per thread, nothing is allocated per limb.
//!
//! Hoisting: [`decompose`] keeps every ModUp'ed digit, so several
//! automorphisms of the same ciphertext pay the decomposition once
//! ([`key_switch_hoisted`]); the automorphism acts on the digits as an NTT
//! slot permutation (it commutes with the decomposition up to multiples of
//! Q_j, which the gadget absorbs).

use std::sync::Arc;

use hecloud_math::{Domain, Modulus, RnsBasis, RnsPoly, backend::default_backend};
use rayon::prelude::*;

use crate::error::{Result, RlweError};
use crate::keys::SwitchingKey;
use crate::params::{DigitTables, LevelTables, ModDownTables, Parameters};
use crate::pool::{give, give_wide, poly_uninit, recycle, take, take_wide};

/// Below this many coefficients per limb, limb loops stay on one thread.
const PARALLEL_MIN_N: usize = 1 << 11;

/// Runs `work(limb_index, limb)` on every n-coefficient limb of `data`, on
/// several threads from degree PARALLEL_MIN_N up.
fn for_each_limb<F>(data: &mut [u64], n: usize, work: F)
where
    F: Fn((usize, &mut [u64])) + Sync + Send,
{
    if n >= PARALLEL_MIN_N {
        data.par_chunks_exact_mut(n).enumerate().for_each(work);
    } else {
        data.chunks_exact_mut(n).enumerate().for_each(work);
    }
}

/// The two components of a key-switching result over Q_l ∪ P (NTT domain),
/// before the division by P.
#[derive(Debug, Clone)]
pub struct ExtPair {
    /// Component multiplying 1.
    pub c0: RnsPoly,
    /// Component multiplying s.
    pub c1: RnsPoly,
    /// Level l of the Q part.
    pub level: usize,
}

/// A polynomial decomposed once for several key switches (hoisting).
#[derive(Debug, Clone)]
pub struct Decomposed {
    level: usize,
    /// Digit j extended to Q_l ∪ P, NTT domain.
    digits: Vec<RnsPoly>,
}

impl Decomposed {
    /// Level of the decomposed polynomial.
    pub fn level(&self) -> usize {
        self.level
    }
}

fn check_input(params: &Parameters, d: &RnsPoly) -> Result<usize> {
    if d.limbs() == 0 || d.limbs() > params.max_level() + 1 {
        return Err(RlweError::ParameterMismatch);
    }
    let level = d.limbs() - 1;
    if **d.basis() != **params.q_at(level)? {
        return Err(RlweError::ParameterMismatch);
    }
    if d.domain() != Domain::Ntt {
        return Err(hecloud_math::MathError::DomainMismatch {
            expected: Domain::Ntt,
            found: d.domain(),
        }
        .into());
    }
    Ok(level)
}

fn check_key(params: &Parameters, key: &SwitchingKey) -> Result<()> {
    if key.params.hash() != params.hash() {
        return Err(RlweError::ParameterMismatch);
    }
    Ok(())
}

/// Index of limb t (in the Q_l ∪ P index space) inside the key's Q·P basis.
#[inline]
fn key_index(params: &Parameters, level: usize, t: usize) -> usize {
    if t <= level {
        t
    } else {
        params.max_level() + 1 + (t - level - 1)
    }
}

/// y_i = [d_i · (Q_j/q_i)^-1]_{q_i} for every prime i of Q_l (coefficient
/// domain), the first step of ModUp.
fn modup_prepare(lt: &LevelTables, d: &RnsPoly) -> Vec<u64> {
    let n = d.degree();
    let mut y = take(d.data().len());
    y.copy_from_slice(d.data());
    let be = default_backend();
    let work = |(i, limb): (usize, &mut [u64])| {
        let table = &lt.q.tables()[i];
        be.ntt_inverse(table, limb);
        let dg = digit_of(&lt.digits, i);
        let (c, cs) = dg.qhat_inv[i - dg.start];
        let m = table.modulus();
        for x in limb.iter_mut() {
            *x = m.mul_shoup(*x, c, cs);
        }
    };
    for_each_limb(&mut y, n, work);
    y
}

/// v_j = round(Σ_{i ∈ digit j} y_i / q_i) per coefficient: subtracting
/// v_j·Q_j centers the digit in [−Q_j/2, Q_j/2). An uncentered digit has a
/// large mean that, multiplied by the key error, concentrates in the slots
/// near ζ (measured: 12 bits lost at N = 2^14).
fn digit_centers(lt: &LevelTables, y: &[u64], n: usize) -> Vec<u64> {
    let mut v = take(lt.digits.len() * n);
    for (dg, vj) in lt.digits.iter().zip(v.chunks_exact_mut(n)) {
        for (c, e) in vj.iter_mut().enumerate() {
            let f: f64 = dg
                .q_inv_f64
                .iter()
                .enumerate()
                .map(|(k, inv)| y[(dg.start + k) * n + c] as f64 * inv)
                .sum();
            *e = f.round() as u64;
        }
    }
    v
}

/// The centered digit j at target t: Σ y_i·(Q_j/q_i) − v_j·Q_j (mod t).
fn convert_digit(
    dg: &DigitTables,
    t: usize,
    m: &Modulus,
    y: &[u64],
    vj: &[u64],
    n: usize,
    out: &mut [u64],
) {
    convert_limb(m, &y[dg.start * n..dg.end * n], n, &dg.qhat_mod_t[t], out);
    let (q, qs) = (dg.qj_mod_t[t], m.shoup(dg.qj_mod_t[t]));
    for (o, &v) in out.iter_mut().zip(vj) {
        *o = m.sub(*o, m.mul_shoup(v, q, qs));
    }
}

fn digit_of(digits: &[DigitTables], i: usize) -> &DigitTables {
    digits
        .iter()
        .find(|d| (d.start..d.end).contains(&i))
        .unwrap_or(&digits[0])
}

/// out = Σ_i y_i · w_i mod m over the digit's limbs (128-bit lazy sums).
#[inline]
fn convert_limb(m: &Modulus, y: &[u64], n: usize, w: &[u64], out: &mut [u64]) {
    match w.len() {
        1 => {
            let (c, cs) = (w[0], m.shoup(w[0]));
            for (o, &a) in out.iter_mut().zip(&y[..n]) {
                *o = m.mul_shoup(a, c, cs);
            }
        }
        _ => {
            // Blocks of 64 coefficients keep the partial sums in registers/L1.
            const B: usize = 64;
            let mut acc = [0u128; B];
            for c0 in (0..n).step_by(B) {
                let len = B.min(n - c0);
                acc[..len].fill(0);
                for (k, &wk) in w.iter().enumerate() {
                    let src = &y[k * n + c0..k * n + c0 + len];
                    for (a, &v) in acc[..len].iter_mut().zip(src) {
                        *a += v as u128 * wk as u128;
                    }
                }
                for (o, &a) in out[c0..c0 + len].iter_mut().zip(&acc[..len]) {
                    *o = m.reduce_u128(a);
                }
            }
        }
    }
}

/// Per-thread scratch of the inner product.
struct Scratch {
    limb: Vec<u64>,
    /// Every digit's limb for one target.
    digits: Vec<u64>,
    acc0: Vec<u128>,
    acc1: Vec<u128>,
}

impl Scratch {
    fn new(n: usize, digits: usize) -> Self {
        Self {
            limb: take(n),
            digits: take(digits * n),
            acc0: take_wide(n),
            acc1: take_wide(n),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.limb));
        give(std::mem::take(&mut self.digits));
        give_wide(std::mem::take(&mut self.acc0));
        give_wide(std::mem::take(&mut self.acc1));
    }
}

/// acc += src · k (optionally reading src through a permutation).
#[inline]
fn mul_acc(acc0: &mut [u128], acc1: &mut [u128], src: &[u64], kb: &[u64], ka: &[u64]) {
    for ((((a0, a1), &s), &b), &a) in acc0
        .iter_mut()
        .zip(acc1.iter_mut())
        .zip(src)
        .zip(kb)
        .zip(ka)
    {
        *a0 += s as u128 * b as u128;
        *a1 += s as u128 * a as u128;
    }
}

#[inline]
fn mul_acc_perm(
    acc0: &mut [u128],
    acc1: &mut [u128],
    src: &[u64],
    perm: &[usize],
    kb: &[u64],
    ka: &[u64],
) {
    for ((((a0, a1), &p), &b), &a) in acc0
        .iter_mut()
        .zip(acc1.iter_mut())
        .zip(perm)
        .zip(kb)
        .zip(ka)
    {
        let s = src[p];
        *a0 += s as u128 * b as u128;
        *a1 += s as u128 * a as u128;
    }
}

/// o0 = Σ_j src_j · b_j[ki], o1 = Σ_j src_j · a_j[ki] (mod m), in blocks
/// of coefficients so the 128-bit sums stay in L1.
#[allow(clippy::too_many_arguments)]
fn inner_product_blocked(
    m: &Modulus,
    srcs: &[&[u64]],
    kb: &[RnsPoly],
    ka: &[RnsPoly],
    ki: usize,
    n: usize,
    o0: &mut [u64],
    o1: &mut [u64],
) {
    const B: usize = 256;
    let mut acc0 = [0u128; B];
    let mut acc1 = [0u128; B];
    for c0 in (0..n).step_by(B) {
        let len = B.min(n - c0);
        acc0[..len].fill(0);
        acc1[..len].fill(0);
        for (j, src) in srcs.iter().enumerate() {
            let b = &kb[j].limb(ki)[c0..c0 + len];
            let a = &ka[j].limb(ki)[c0..c0 + len];
            mul_acc(&mut acc0[..len], &mut acc1[..len], &src[c0..c0 + len], b, a);
            if j % 16 == 15 {
                reduce_acc(m, &mut acc0[..len]);
                reduce_acc(m, &mut acc1[..len]);
            }
        }
        finish(m, &acc0[..len], &mut o0[c0..c0 + len]);
        finish(m, &acc1[..len], &mut o1[c0..c0 + len]);
    }
}

fn reduce_acc(m: &Modulus, acc: &mut [u128]) {
    for a in acc.iter_mut() {
        *a = m.reduce_u128(*a) as u128;
    }
}

fn finish(m: &Modulus, acc: &[u128], out: &mut [u64]) {
    for (o, &a) in out.iter_mut().zip(acc) {
        *o = m.reduce_u128(a);
    }
}

/// Runs `f(t, out0_t, out1_t, scratch)` for every target limb of Q_l ∪ P.
fn for_each_target<F>(n: usize, digits: usize, out0: &mut RnsPoly, out1: &mut RnsPoly, f: F)
where
    F: Fn(usize, &mut [u64], &mut [u64], &mut Scratch) + Sync + Send,
{
    let o0 = out0.data_mut();
    let o1 = out1.data_mut();
    if n >= PARALLEL_MIN_N {
        o0.par_chunks_exact_mut(n)
            .zip(o1.par_chunks_exact_mut(n))
            .enumerate()
            .for_each_init(|| Scratch::new(n, digits), |s, (t, (a, b))| f(t, a, b, s));
    } else {
        let mut s = Scratch::new(n, digits);
        for (t, (a, b)) in o0
            .chunks_exact_mut(n)
            .zip(o1.chunks_exact_mut(n))
            .enumerate()
        {
            f(t, a, b, &mut s);
        }
    }
}

/// Σ_j ModUp([d]_{Q_j}) · (b_j, a_j) over Q_l ∪ P (NTT domain), for `d` in
/// the NTT domain over Q_l: the key-switching product before ModDown.
pub fn key_switch_ext(params: &Parameters, d: &RnsPoly, key: &SwitchingKey) -> Result<ExtPair> {
    check_key(params, key)?;
    let level = check_input(params, d)?;
    let lt = params.level(level)?;
    let n = params.n();
    let y = modup_prepare(lt, d);
    let v = digit_centers(lt, &y, n);
    let mut out0 = poly_uninit(&lt.qp, Domain::Ntt);
    let mut out1 = poly_uninit(&lt.qp, Domain::Ntt);
    let digits = lt.digits.len();
    for_each_target(n, digits, &mut out0, &mut out1, |t, o0, o1, s| {
        let m = lt.qp.moduli()[t];
        let ki = key_index(params, level, t);
        // Every digit's ModUp'ed limb t first, then one blocked pass of the
        // inner product with 128-bit sums that stay in L1.
        let mut srcs: Vec<&[u64]> = Vec::with_capacity(digits);
        if s.digits.len() < digits * n {
            s.digits.resize(digits * n, 0);
        }
        let mut rest: &mut [u64] = &mut s.digits[..digits * n];
        for j in 0..digits {
            let (head, tail) = rest.split_at_mut(n);
            rest = tail;
            let dg = &lt.digits[j];
            if (dg.start..dg.end).contains(&t) {
                srcs.push(d.limb(t));
            } else {
                let table = &lt.qp.tables()[t];
                let vj = &v[j * n..(j + 1) * n];
                convert_digit(dg, t, table.modulus(), &y, vj, n, head);
                default_backend().ntt_forward(table, head);
                srcs.push(head);
            }
        }
        inner_product_blocked(&m, &srcs, &key.b, &key.a, ki, n, o0, o1);
    });
    give(y);
    give(v);
    Ok(ExtPair {
        c0: out0,
        c1: out1,
        level,
    })
}

/// Decomposes `d` (NTT over Q_l) once for several key switches.
pub fn decompose(params: &Parameters, d: &RnsPoly) -> Result<Decomposed> {
    let level = check_input(params, d)?;
    let lt = params.level(level)?;
    let n = params.n();
    let y = modup_prepare(lt, d);
    let v = digit_centers(lt, &y, n);
    let digits = (0..lt.digits.len())
        .map(|j| {
            let mut out = poly_uninit(&lt.qp, Domain::Ntt);
            let work = |(t, o): (usize, &mut [u64])| {
                let dg = &lt.digits[j];
                if (dg.start..dg.end).contains(&t) {
                    o.copy_from_slice(d.limb(t));
                } else {
                    let table = &lt.qp.tables()[t];
                    let vj = &v[j * n..(j + 1) * n];
                    convert_digit(dg, t, table.modulus(), &y, vj, n, o);
                    default_backend().ntt_forward(table, o);
                }
            };
            for_each_limb(out.data_mut(), n, work);
            out
        })
        .collect();
    give(y);
    give(v);
    Ok(Decomposed { level, digits })
}

/// The key-switching product of a decomposed polynomial, with the
/// automorphism of NTT-slot permutation `perm` applied to it first (hoisted
/// rotation), over Q_l ∪ P before ModDown.
pub fn key_switch_hoisted_ext(
    params: &Parameters,
    dec: &Decomposed,
    key: &SwitchingKey,
    perm: Option<&[usize]>,
) -> Result<ExtPair> {
    check_key(params, key)?;
    let level = dec.level;
    let lt = params.level(level)?;
    let n = params.n();
    if let Some(p) = perm
        && p.len() != n
    {
        return Err(RlweError::ParameterMismatch);
    }
    let mut out0 = poly_uninit(&lt.qp, Domain::Ntt);
    let mut out1 = poly_uninit(&lt.qp, Domain::Ntt);
    for_each_target(n, 0, &mut out0, &mut out1, |t, o0, o1, s| {
        let m = lt.qp.moduli()[t];
        let ki = key_index(params, level, t);
        s.acc0.fill(0);
        s.acc1.fill(0);
        for (j, dj) in dec.digits.iter().enumerate() {
            let (kb, ka) = (key.b[j].limb(ki), key.a[j].limb(ki));
            match perm {
                Some(p) => mul_acc_perm(&mut s.acc0, &mut s.acc1, dj.limb(t), p, kb, ka),
                None => mul_acc(&mut s.acc0, &mut s.acc1, dj.limb(t), kb, ka),
            }
            if j % 16 == 15 {
                reduce_acc(&m, &mut s.acc0);
                reduce_acc(&m, &mut s.acc1);
            }
        }
        finish(&m, &s.acc0, o0);
        finish(&m, &s.acc1, o1);
    });
    Ok(ExtPair {
        c0: out0,
        c1: out1,
        level,
    })
}

/// Divides x (NTT over Q_l ∪ P, limbs `removed` to be divided out) by the
/// product R of the removed primes onto the first `keep` primes, rounding to
/// the nearest integer: the residue x mod R is taken centered, with the
/// exact basis extension (the overflow count v = round(Σ y_m / r_m) computed
/// in floating point and subtracted), so the result is ⌊x / R⌉ without the
/// bias of a fast (floor-type) conversion. A bias would be multiplied by s
/// and concentrate in the slots near ζ (measured: 10 bits lost at N = 2^14).
fn divide_out(
    x: &RnsPoly,
    removed: &[usize],
    keep: usize,
    tables: &ModDownTables,
    target: &Arc<RnsBasis>,
) -> Result<RnsPoly> {
    let n = x.degree();
    let be = default_backend();
    let basis = x.basis();
    // y_m = [x_m · (R/r_m)^-1]_{r_m} in the coefficient domain.
    let mut y = take(removed.len() * n);
    let work = |(k, out): (usize, &mut [u64])| {
        let idx = removed[k];
        out.copy_from_slice(x.limb(idx));
        let table = &basis.tables()[idx];
        be.ntt_inverse(table, out);
        let (c, cs) = tables.phat_inv[k];
        let m = table.modulus();
        for v in out.iter_mut() {
            *v = m.mul_shoup(*v, c, cs);
        }
    };
    for_each_limb(&mut y, n, work);
    // v = round(Σ_m y_m / r_m): Σ y_m·(R/r_m) − v·R is x mod R, centered.
    let mut v = take(n);
    for (c, e) in v.iter_mut().enumerate() {
        let f: f64 = tables
            .r_inv_f64
            .iter()
            .enumerate()
            .map(|(k, inv)| y[k * n + c] as f64 * inv)
            .sum();
        *e = f.round() as u64;
    }
    let mut out = poly_uninit(target, Domain::Ntt);
    let work = |(i, o): (usize, &mut [u64])| {
        let table = &target.tables()[i];
        let m = table.modulus();
        convert_limb(m, &y, n, &tables.phat_mod_q[i], o);
        let (r, rs) = (tables.r_mod_q[i], m.shoup(tables.r_mod_q[i]));
        for (c, &vc) in o.iter_mut().zip(v.iter()) {
            *c = m.sub(*c, m.mul_shoup(vc, r, rs));
        }
        be.ntt_forward(table, o);
        let (c, cs) = tables.p_inv[i];
        for (val, &xi) in o.iter_mut().zip(x.limb(i)) {
            *val = m.mul_shoup(m.sub(xi, *val), c, cs);
        }
    };
    debug_assert_eq!(target.len(), keep);
    for_each_limb(out.data_mut(), n, work);
    give(y);
    give(v);
    Ok(out)
}

fn check_ext(params: &Parameters, x: &RnsPoly, level: usize) -> Result<()> {
    if **x.basis() != **params.qp_at(level)? || x.domain() != Domain::Ntt {
        return Err(RlweError::ParameterMismatch);
    }
    Ok(())
}

/// ModDown: x over Q_l ∪ P (NTT) ↦ ≈ x / P over Q_l (NTT).
pub fn mod_down(params: &Parameters, level: usize, x: &RnsPoly) -> Result<RnsPoly> {
    check_ext(params, x, level)?;
    let lt = params.level(level)?;
    let k = params.p_basis().len();
    let removed: Vec<usize> = (level + 1..level + 1 + k).collect();
    divide_out(x, &removed, level + 1, params.mod_down(), &lt.q)
}

/// Fused ModDown and rescale: x over Q_l ∪ P (NTT) ↦ ≈ x / (q_l·P) over
/// Q_{l−1} (NTT), saving the NTTs of a separate rescale.
pub fn mod_down_rescale(params: &Parameters, level: usize, x: &RnsPoly) -> Result<RnsPoly> {
    check_ext(params, x, level)?;
    if level == 0 {
        return Err(RlweError::LevelsExhausted { level, need: 1 });
    }
    let lt = params.level(level)?;
    let tables = lt
        .rescale_down
        .as_ref()
        .ok_or(RlweError::LevelsExhausted { level, need: 1 })?;
    let k = params.p_basis().len();
    let mut removed = vec![level];
    removed.extend(level + 1..level + 1 + k);
    divide_out(x, &removed, level, tables, params.q_at(level - 1)?)
}

/// Lifts x over Q_l (NTT) to P·x over Q_l ∪ P (zero on the P limbs), so it
/// can be added to an [`ExtPair`] component before a fused ModDown.
pub fn lift_times_p(params: &Parameters, x: &RnsPoly) -> Result<RnsPoly> {
    let level = check_input(params, x)?;
    let lt = params.level(level)?;
    let n = params.n();
    let mut out = RnsPoly::zero(&lt.qp, Domain::Ntt);
    let pm = params.p_basis().moduli();
    let be = default_backend();
    for (i, o) in out.data_mut()[..(level + 1) * n]
        .chunks_exact_mut(n)
        .enumerate()
    {
        let m = lt.q.moduli()[i];
        let p_mod = pm.iter().fold(1u64, |a, p| m.mul(a, m.reduce(p.value())));
        o.copy_from_slice(x.limb(i));
        be.mul_scalar(&m, o, p_mod);
    }
    Ok(out)
}

/// `acc += P·x` on the Q_l limbs of `acc` (over Q_l ∪ P, NTT), for x over
/// Q_l (NTT): folds a Q_l term into a key-switching product before a fused
/// [`mod_down`] or [`mod_down_rescale`].
pub fn add_times_p_assign(params: &Parameters, acc: &mut RnsPoly, x: &RnsPoly) -> Result<()> {
    let level = check_input(params, x)?;
    check_ext(params, acc, level)?;
    let n = params.n();
    let pm = params.p_basis().moduli();
    let moduli = params.q_at(level)?.moduli();
    let work = |(i, o): (usize, &mut [u64])| {
        let m = moduli[i];
        let c = pm.iter().fold(1u64, |a, p| m.mul(a, m.reduce(p.value())));
        let cs = m.shoup(c);
        for (v, &xi) in o.iter_mut().zip(x.limb(i)) {
            *v = m.add(*v, m.mul_shoup(xi, c, cs));
        }
    };
    let q_part = &mut acc.data_mut()[..(level + 1) * n];
    for_each_limb(q_part, n, work);
    Ok(())
}

/// Key switching of d (NTT over Q_l) with `key`: (c_0, c_1) over Q_l with
/// c_0 + c_1·s ≈ d·s' where `key` switches s' to s.
pub fn key_switch(
    params: &Parameters,
    d: &RnsPoly,
    key: &SwitchingKey,
) -> Result<(RnsPoly, RnsPoly)> {
    let ext = key_switch_ext(params, d, key)?;
    finish_pair(params, ext)
}

/// Hoisted key switching: like [`key_switch`] of the automorphism (slot
/// permutation `perm`) of the decomposed polynomial.
pub fn key_switch_hoisted(
    params: &Parameters,
    dec: &Decomposed,
    key: &SwitchingKey,
    perm: Option<&[usize]>,
) -> Result<(RnsPoly, RnsPoly)> {
    let ext = key_switch_hoisted_ext(params, dec, key, perm)?;
    finish_pair(params, ext)
}

fn finish_pair(params: &Parameters, ext: ExtPair) -> Result<(RnsPoly, RnsPoly)> {
    let out = (
        mod_down(params, ext.level, &ext.c0)?,
        mod_down(params, ext.level, &ext.c1)?,
    );
    recycle(ext.c0);
    recycle(ext.c1);
    Ok(out)
}

impl Decomposed {
    /// Hands the digit buffers back to the thread's pool.
    pub fn recycle(self) {
        self.digits.into_iter().for_each(recycle);
    }
}
