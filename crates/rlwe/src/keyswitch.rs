//! Hybrid key switching (GHS with dnum digits, as in Han–Ki 2019 and
//! Lattigo): decompose d ∈ R_{Q_l} into digits \[d\]_{Q_j}, extend each to
//! Q_l ∪ P by fast base conversion (ModUp), take the inner product with the
//! switching key over Q_l ∪ P, and divide by P (ModDown).
//!
//! The inner loop runs over groups of target limbs of Q_l ∪ P: each digit
//! is converted to every target of the group in one pass over its sources
//! (`Backend::linear_combinations`), then each target's digit limbs are
//! transformed back to back and take the inner product with the key
//! (`Backend::dot_product_pair`, lazy sums reduced once). Scratch is one
//! set of digit limbs per target of a group, per thread, reused.
//!
//! Hoisting: [`decompose`] keeps every ModUp'ed digit, so several
//! automorphisms of the same ciphertext pay the decomposition once
//! ([`key_switch_hoisted`]); the automorphism acts on the digits as an NTT
//! slot permutation (it commutes with the decomposition up to multiples of
//! Q_j, which the gadget absorbs), and with a Galois key held permuted by
//! its inverse it moves the key switch's two outputs instead (see
//! `GaloisKey`).

use std::sync::Arc;

use hecloud_math::backend::{Combination, default_backend};
use hecloud_math::{Domain, Modulus, RnsBasis, RnsPoly};
use rayon::prelude::*;

use crate::error::{Result, RlweError};
use crate::keys::SwitchingKey;
use crate::params::{DigitTables, LevelTables, ModDownTables, Parameters};
use crate::pool::{give, pooled_uninit, take};

/// Below this many coefficients per limb, limb loops stay on one thread.
const PARALLEL_MIN_N: usize = 1 << 11;

/// Runs `work(limb_index, limb)` on every n-coefficient limb of `data`, on
/// several threads from degree PARALLEL_MIN_N up.
pub(crate) fn for_each_limb<F>(data: &mut [u64], n: usize, work: F)
where
    F: Fn((usize, &mut [u64])) + Sync + Send,
{
    if n >= PARALLEL_MIN_N {
        data.par_chunks_exact_mut(n).enumerate().for_each(work);
    } else {
        data.chunks_exact_mut(n).enumerate().for_each(work);
    }
}

/// [`for_each_limb`] over two polynomials' limbs side by side:
/// `work((limb_index, (limb_of_a, limb_of_b)))`.
pub(crate) fn for_each_limb_pair<F>(a: &mut [u64], b: &mut [u64], n: usize, work: F)
where
    F: Fn((usize, (&mut [u64], &mut [u64]))) + Sync + Send,
{
    if n >= PARALLEL_MIN_N {
        let limbs = a.par_chunks_exact_mut(n).zip(b.par_chunks_exact_mut(n));
        limbs.enumerate().for_each(work);
    } else {
        let limbs = a.chunks_exact_mut(n).zip(b.chunks_exact_mut(n));
        limbs.enumerate().for_each(work);
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

/// The key belongs to `params` and reaches `level` (a key cut lower,
/// [`SwitchingKey::at_level`], lacks the primes).
fn check_key(params: &Parameters, key: &SwitchingKey, level: usize) -> Result<()> {
    if key.params.hash() != params.hash() {
        return Err(RlweError::ParameterMismatch);
    }
    key.reaches(level)
}

/// Index of limb t (in the Q_l ∪ P index space) inside the key's basis
/// Q_{key_level} ∪ P.
#[inline]
fn key_index(key_level: usize, level: usize, t: usize) -> usize {
    if t <= level {
        t
    } else {
        key_level + 1 + (t - level - 1)
    }
}

/// y_i = [d_i · (Q_j/q_i)^-1]_{q_i} for every prime i of Q_l (coefficient
/// domain), the first step of ModUp.
fn modup_prepare(lt: &LevelTables, d: &RnsPoly) -> Vec<u64> {
    let n = d.degree();
    let mut y = take(d.data().len());
    let be = default_backend();
    let work = |(i, limb): (usize, &mut [u64])| {
        let dg = digit_of(&lt.digits, i);
        let qhat_inv = dg.qhat_inv[i - dg.start].0;
        be.ntt_inverse_scaled(&lt.q.tables()[i], d.limb(i), limb, qhat_inv);
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
        let limbs: Vec<&[u64]> = y[dg.start * n..dg.end * n].chunks_exact(n).collect();
        let bits: Vec<u32> = lt.q.moduli()[dg.start..dg.end]
            .iter()
            .map(Modulus::bits)
            .collect();
        round_sums(vj, &limbs, &dg.q_inv_f64, &bits, n);
    }
    v
}

/// Coefficients per task of [`round_sums`] on several threads.
const ROUND_CHUNK: usize = 1 << 12;

/// out_c = Σ_k limbs_k\[c\]·inv_k rounded to the nearest integer per
/// coefficient c (`Backend::round_sums`, limb k's entries below
/// 2^bits\[k\]): the centering of a base conversion, on several threads
/// from degree PARALLEL_MIN_N up (it is a serial stretch of every key
/// switch otherwise).
fn round_sums(out: &mut [u64], limbs: &[&[u64]], inv: &[f64], bits: &[u32], n: usize) {
    let be = default_backend();
    let work = |(chunk, o): (usize, &mut [u64])| {
        let base = chunk * ROUND_CHUNK;
        let limbs: Vec<&[u64]> = limbs.iter().map(|l| &l[base..base + o.len()]).collect();
        be.round_sums(o, &limbs, inv, bits);
    };
    if n >= PARALLEL_MIN_N {
        out.par_chunks_mut(ROUND_CHUNK).enumerate().for_each(work);
    } else {
        out.chunks_mut(ROUND_CHUNK).enumerate().for_each(work);
    }
}

/// The sources of digit j's conversion: its y limbs and v_j (whose weight
/// carries −Q_j), with their bit widths.
fn digit_sources<'a>(
    lt: &LevelTables,
    j: usize,
    y: &'a [u64],
    v: &'a [u64],
) -> (Vec<&'a [u64]>, Vec<u32>) {
    let (dg, n) = (&lt.digits[j], v.len() / lt.digits.len());
    let mut srcs: Vec<&[u64]> = y[dg.start * n..dg.end * n].chunks_exact(n).collect();
    srcs.push(&v[j * n..(j + 1) * n]);
    (srcs, source_bits(&lt.q.moduli()[dg.start..dg.end]))
}

/// Bit widths of a conversion's sources from limbs over `moduli`: each
/// y_i below its q_i, then the centering term v = round(Σ_i y_i/q_i).
fn source_bits<'a>(moduli: impl IntoIterator<Item = &'a Modulus>) -> Vec<u32> {
    let mut bits: Vec<u32> = moduli.into_iter().map(Modulus::bits).collect();
    bits.push(center_bits(bits.len()));
    bits
}

/// Bits of a conversion's centering term v = round(Σ_i y_i/q_i) over
/// `limbs` limbs: 0 ≤ v ≤ limbs.
fn center_bits(limbs: usize) -> u32 {
    usize::BITS - limbs.leading_zeros()
}

/// Weights of [`digit_sources`] at target t: (Q_j/q_i) mod t, then −Q_j mod t.
fn conversion_weights(lt: &LevelTables, j: usize, t: usize) -> Vec<u64> {
    let (dg, m) = (&lt.digits[j], lt.qp.moduli()[t]);
    let mut w = dg.qhat_mod_t[t].clone();
    w.push(m.neg(dg.qj_mod_t[t]));
    w
}

fn digit_of(digits: &[DigitTables], i: usize) -> &DigitTables {
    digits
        .iter()
        .find(|d| (d.start..d.end).contains(&i))
        .unwrap_or(&digits[0])
}

/// Per-thread scratch of the inner product.
struct Scratch {
    /// Every digit's limb for each target of a group.
    digits: Vec<u64>,
}

impl Scratch {
    /// Room for `limbs` limbs of n coefficients: a loop's largest group
    /// times its digits, so that no group grows it (a reallocation, a copy
    /// and a zero fill).
    fn new(n: usize, limbs: usize) -> Self {
        Self {
            digits: take(limbs * n),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.digits));
    }
}

/// Target limbs converted together on one thread: each conversion pass
/// over a digit's sources (megabytes, read from beyond L2) serves the
/// whole group.
const TARGET_GROUP: usize = 4;

/// [`TARGET_GROUP`], one less on several threads: every thread holds a
/// group's digit limbs (10 MiB for 4 targets at N = 2^16), and two
/// threads' groups of 4 with the shared sources (16 MiB) overflowed a
/// 32 MiB L3. Measured at N = 2^16 on two threads: the product 48.7 →
/// 47.6 ms; one thread unchanged within noise. Every limb-group loop
/// takes it (the decomposition, the hoisted product and ModDown hold no
/// such scratch; their groups only set the tasks).
fn target_group(threads: usize) -> usize {
    if threads > 1 {
        TARGET_GROUP - 1
    } else {
        TARGET_GROUP
    }
}

/// Relative costs of a target limb's work in a key switch, for
/// [`limb_groups`]: a digit converted to it and transformed
/// (`CONVERSION`), one digit's term of its inner product with the key
/// (`PRODUCT_TERM`), a digit's limb copied (`COPY`), as measured at
/// N = 2^16.
const CONVERSION: u32 = 12;
const PRODUCT_TERM: u32 = 4;
const COPY: u32 = 1;

/// The groups of about [`target_group`] limbs, `costs.len()` in all, that
/// a limb-group loop runs as tasks: as many as the threads divide evenly
/// (at least ⌈limbs / group⌉), cut where the running cost crosses each
/// multiple of the total over the group count, so that each half of the
/// list (rayon halves it among its threads) holds half the work. Fixed
/// groups of 4 over N = 2^16's 35 limbs made 9 tasks, 5 of them (20 limbs)
/// on one of two threads; equal limb counts still left the P limbs (one
/// more digit to convert each) on one thread: 13 % more work than the
/// other.
fn limb_groups(costs: &[u32], n: usize) -> Vec<std::ops::Range<usize>> {
    let limbs = costs.len();
    let threads = if n >= PARALLEL_MIN_N {
        rayon::current_num_threads().max(1)
    } else {
        1
    };
    let count = limbs
        .div_ceil(target_group(threads))
        .next_multiple_of(threads)
        .min(limbs)
        .max(1);
    // Running cost before each limb (a zero cost counts as 1).
    let mut before = vec![0u64; limbs + 1];
    for (i, &c) in costs.iter().enumerate() {
        before[i + 1] = before[i] + u64::from(c.max(1));
    }
    let total = before[limbs];
    let mut cuts = vec![0];
    for i in 1..count {
        // Distances scaled by the count: the goal total·i/count exactly.
        let goal = total * i as u64;
        let prev = cuts[i - 1];
        // The limb boundary nearest the goal, leaving each group a limb.
        let lo = prev + 1;
        let hi = limbs - (count - i);
        let k = (lo..=hi)
            .min_by_key(|&k| (before[k] * count as u64).abs_diff(goal))
            .unwrap_or(lo);
        cuts.push(k);
    }
    cuts.push(limbs);
    cuts.windows(2).map(|w| w[0]..w[1]).collect()
}

/// `data`'s n-coefficient limbs cut along `groups` (from
/// [`limb_groups`]): (first limb, the group's limbs).
fn split_groups<'a>(
    data: &'a mut [u64],
    n: usize,
    groups: &[std::ops::Range<usize>],
) -> Vec<(usize, &'a mut [u64])> {
    debug_assert_eq!(data.len(), groups.last().map_or(0, |g| g.end) * n);
    let mut rest = data;
    groups
        .iter()
        .map(|r| {
            let (group, tail) = std::mem::take(&mut rest).split_at_mut(r.len() * n);
            rest = tail;
            (r.start, group)
        })
        .collect()
}

/// Runs `work(first, limbs)` on the [`limb_groups`] of `data` under
/// `costs`, `first` being the index of the group's first limb.
fn for_each_limb_group<F>(data: &mut [u64], n: usize, costs: &[u32], work: F)
where
    F: Fn(usize, &mut [u64]) + Sync + Send,
{
    let groups = split_groups(data, n, &limb_groups(costs, n));
    if n >= PARALLEL_MIN_N {
        groups.into_par_iter().for_each(|(i, g)| work(i, g));
    } else {
        groups.into_iter().for_each(|(i, g)| work(i, g));
    }
}

/// Runs `f(t0, out0, out1, scratch)` on the [`limb_groups`] of Q_l ∪ P
/// under `costs` (one per target), the first target being t0 (`out0`,
/// `out1`: the group's limbs), with `scratch_limbs(g)` scratch limbs per
/// thread for the largest group's g targets.
fn for_each_target<F>(
    n: usize,
    scratch_limbs: impl Fn(usize) -> usize,
    costs: &[u32],
    out0: &mut RnsPoly,
    out1: &mut RnsPoly,
    f: F,
) where
    F: Fn(usize, &mut [u64], &mut [u64], &mut Scratch) + Sync + Send,
{
    let cuts = limb_groups(costs, n);
    let groups: Vec<_> = split_groups(out0.data_mut(), n, &cuts)
        .into_iter()
        .zip(split_groups(out1.data_mut(), n, &cuts))
        .map(|((t0, a), (_, b))| (t0, a, b))
        .collect();
    let limbs = scratch_limbs(cuts.iter().map(|g| g.len()).max().unwrap_or(0));
    if n >= PARALLEL_MIN_N {
        groups
            .into_par_iter()
            .for_each_init(|| Scratch::new(n, limbs), |s, (t0, a, b)| f(t0, a, b, s));
    } else {
        let mut s = Scratch::new(n, limbs);
        for (t0, a, b) in groups {
            f(t0, a, b, &mut s);
        }
    }
}

/// Σ_j ModUp(\[d\]_{Q_j}) · (b_j, a_j) over Q_l ∪ P (NTT domain), for `d` in
/// the NTT domain over Q_l: the key-switching product before ModDown.
pub fn key_switch_ext(params: &Parameters, d: &RnsPoly, key: &SwitchingKey) -> Result<ExtPair> {
    let level = check_input(params, d)?;
    check_key(params, key, level)?;
    let lt = params.level(level)?;
    let mut out0 = pooled_uninit(&lt.qp, Domain::Ntt);
    let mut out1 = pooled_uninit(&lt.qp, Domain::Ntt);
    key_switch_product(lt, level, d, key, [&mut out0, &mut out1], None);
    Ok(ExtPair {
        c0: out0,
        c1: out1,
        level,
    })
}

/// [`key_switch_ext`]'s product moved by the NTT slot permutation `perm`
/// (out\[p\] = x\[perm\[p\]\]) and added to `acc` (two sums over Q_l ∪ P,
/// NTT domain) limb by limb as it is made: a sum of key switches for
/// automorphisms (a linear transform's giant steps) without each product
/// written out and read back. Refused before any work for sums over
/// another basis or domain, or a permutation of another length.
pub fn key_switch_ext_add_moved(
    params: &Parameters,
    d: &RnsPoly,
    key: &SwitchingKey,
    perm: &[u32],
    [acc0, acc1]: [&mut RnsPoly; 2],
) -> Result<()> {
    let level = check_input(params, d)?;
    check_key(params, key, level)?;
    let lt = params.level(level)?;
    for acc in [&*acc0, &*acc1] {
        check_ext(params, acc, level)?;
    }
    if perm.len() != params.n() {
        return Err(RlweError::ParameterMismatch);
    }
    key_switch_product(lt, level, d, key, [acc0, acc1], Some(perm));
    Ok(())
}

/// The product of [`key_switch_ext`] for a checked input at `level` (its
/// tables `lt`) and a key reaching it, written into `out` (over Q_l ∪ P),
/// or with `perm` moved and added to it.
fn key_switch_product(
    lt: &LevelTables,
    level: usize,
    d: &RnsPoly,
    key: &SwitchingKey,
    [out0, out1]: [&mut RnsPoly; 2],
    perm: Option<&[u32]>,
) {
    let key_level = key.level();
    let n = d.degree();
    let y = modup_prepare(lt, d);
    let v = digit_centers(lt, &y, n);
    let digits = lt.digits.len();
    let be = default_backend();
    let own = |j: usize, t: usize| (lt.digits[j].start..lt.digits[j].end).contains(&t);
    let costs: Vec<u32> = (0..lt.qp.len())
        .map(|t| {
            let converted = (0..digits).filter(|&j| !own(j, t)).count() as u32;
            CONVERSION * converted + PRODUCT_TERM * digits as u32
        })
        .collect();
    // Moved, each product limb pair is made in two more scratch limbs (in
    // cache) and gathered from there.
    let moved_limbs = if perm.is_some() { 2 } else { 0 };
    let limbs = |g: usize| g * digits + moved_limbs;
    for_each_target(n, limbs, &costs, out0, out1, |t0, o0, o1, s| {
        let g = o0.len() / n;
        // Every digit's ModUp'ed limbs for the group first (one pass over
        // each digit's sources), then each target's transforms back to back
        // (its twiddles stay in cache) and at once its inner product.
        debug_assert!(
            s.digits.len() >= (g * digits + moved_limbs) * n,
            "scratch for the largest group"
        );
        let (scratch, moved) = s.digits.split_at_mut(g * digits * n);
        let mut limbs: Vec<Option<&mut [u64]>> = scratch.chunks_exact_mut(n).map(Some).collect();
        for j in 0..digits {
            let (srcs, bits) = digit_sources(lt, j, &y, &v);
            let targets: Vec<usize> = (t0..t0 + g).filter(|&t| !own(j, t)).collect();
            let weights: Vec<Vec<u64>> = targets
                .iter()
                .map(|&t| conversion_weights(lt, j, t))
                .collect();
            let mut outputs: Vec<Combination<'_>> = targets
                .iter()
                .zip(&weights)
                .map(|(&t, w)| Combination {
                    q: &lt.qp.moduli()[t],
                    out: limbs[(t - t0) * digits + j]
                        .take()
                        .expect("one output per limb"),
                    w,
                })
                .collect();
            be.linear_combinations(&mut outputs, &srcs, &bits);
        }
        let outs = o0.chunks_exact_mut(n).zip(o1.chunks_exact_mut(n));
        let targets = scratch.chunks_exact_mut(digits * n).zip(outs);
        for (k, (target_limbs, (r0, r1))) in targets.enumerate() {
            let t = t0 + k;
            for (j, limb) in target_limbs.chunks_exact_mut(n).enumerate() {
                if !own(j, t) {
                    be.ntt_forward(&lt.qp.tables()[t], limb);
                }
            }
            // The inner product while the transformed limbs are in L2.
            let srcs: Vec<&[u64]> = target_limbs
                .chunks_exact(n)
                .enumerate()
                .map(|(j, limb)| if own(j, t) { d.limb(t) } else { limb })
                .collect();
            let (kb, ka) = key_limbs(key, key_index(key_level, level, t), digits);
            let q = &lt.qp.moduli()[t];
            let Some(perm) = perm else {
                be.dot_product_pair(q, &srcs, &kb, &ka, r0, r1);
                continue;
            };
            let (m0, m1) = moved[..2 * n].split_at_mut(n);
            be.dot_product_pair(q, &srcs, &kb, &ka, m0, m1);
            hecloud_math::poly::gather_add(q, r0, m0, perm);
            hecloud_math::poly::gather_add(q, r1, m1, perm);
        }
    });
    give(y);
    give(v);
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
            let mut out = pooled_uninit(&lt.qp, Domain::Ntt);
            let dg = &lt.digits[j];
            let own = |t: usize| (dg.start..dg.end).contains(&t);
            let (srcs, bits) = digit_sources(lt, j, &y, &v);
            let costs: Vec<u32> = (0..lt.qp.len())
                .map(|t| if own(t) { COPY } else { CONVERSION })
                .collect();
            for_each_limb_group(out.data_mut(), n, &costs, |first, group| {
                let limbs = (first..).zip(group.chunks_exact_mut(n));
                let (inside, converted): (Vec<_>, Vec<_>) = limbs.partition(|(t, _)| own(*t));
                for (t, o) in inside {
                    o.copy_from_slice(d.limb(t));
                }
                let ts: Vec<usize> = converted.iter().map(|(t, _)| *t).collect();
                let weights: Vec<Vec<u64>> =
                    ts.iter().map(|&t| conversion_weights(lt, j, t)).collect();
                let mut outputs: Vec<Combination<'_>> = converted
                    .into_iter()
                    .zip(&weights)
                    .map(|((t, out), w)| Combination {
                        q: &lt.qp.moduli()[t],
                        out,
                        w,
                    })
                    .collect();
                default_backend().linear_combinations(&mut outputs, &srcs, &bits);
                for (&t, o) in ts.iter().zip(outputs) {
                    default_backend().ntt_forward(&lt.qp.tables()[t], o.out);
                }
            });
            out
        })
        .collect();
    give(y);
    give(v);
    Ok(Decomposed { level, digits })
}

/// The key-switching product of a decomposed polynomial, over Q_l ∪ P
/// before ModDown.
pub fn key_switch_hoisted_ext(
    params: &Parameters,
    dec: &Decomposed,
    key: &SwitchingKey,
) -> Result<ExtPair> {
    hoisted_ext(params, dec, key, None)
}

/// [`key_switch_hoisted_ext`] finished as an automorphism's, for the key
/// held permuted (see `GaloisKey`): (π(x₀ + P·c₀), π(x₁)) over Q_l ∪ P, π
/// being the NTT slot permutation `perm` (out\[p\] = y\[perm\[p\]\]) and
/// P·c₀ zero on the P limbs. Each limb is summed and moved as it leaves
/// the inner product, where the sum and the two moves took three passes
/// over the finished product (the baby steps of a double-hoisted linear
/// transform).
pub fn key_switch_hoisted_moved_ext(
    params: &Parameters,
    dec: &Decomposed,
    key: &SwitchingKey,
    perm: &[u32],
    c0: &RnsPoly,
) -> Result<ExtPair> {
    if check_input(params, c0)? != dec.level || perm.len() != params.n() {
        return Err(RlweError::ParameterMismatch);
    }
    hoisted_ext(params, dec, key, Some((perm, c0)))
}

fn hoisted_ext(
    params: &Parameters,
    dec: &Decomposed,
    key: &SwitchingKey,
    moved: Option<(&[u32], &RnsPoly)>,
) -> Result<ExtPair> {
    let level = dec.level;
    check_key(params, key, level)?;
    let key_level = key.level();
    let lt = params.level(level)?;
    let n = params.n();
    let mut out0 = pooled_uninit(&lt.qp, Domain::Ntt);
    let mut out1 = pooled_uninit(&lt.qp, Domain::Ntt);
    let digits = dec.digits.len();
    let costs = vec![1; lt.qp.len()];
    // Moved, each limb pair is made in two scratch limbs (in cache) and
    // gathered from there.
    let limbs = |_: usize| if moved.is_some() { 2 } else { 0 };
    let be = default_backend();
    for_each_target(n, limbs, &costs, &mut out0, &mut out1, |t0, o0, o1, s| {
        let outs = o0.chunks_exact_mut(n).zip(o1.chunks_exact_mut(n));
        for (t, (r0, r1)) in (t0..).zip(outs) {
            let (kb, ka) = key_limbs(key, key_index(key_level, level, t), digits);
            let srcs: Vec<&[u64]> = dec.digits.iter().map(|dj| dj.limb(t)).collect();
            let q = &lt.qp.moduli()[t];
            let Some((perm, c0)) = moved else {
                be.dot_product_pair(q, &srcs, &kb, &ka, r0, r1);
                continue;
            };
            let (m0, m1) = s.digits.split_at_mut(n);
            be.dot_product_pair(q, &srcs, &kb, &ka, m0, m1);
            if t <= level {
                let w = params.p_mod_q()[t];
                be.linear_combination(q, m0, Some(1), &[c0.limb(t)], &[w], &[q.bits()]);
            }
            hecloud_math::poly::gather(r0, m0, perm);
            hecloud_math::poly::gather(r1, m1, perm);
        }
    });
    Ok(ExtPair {
        c0: out0,
        c1: out1,
        level,
    })
}

/// Divides each x of `xs` (NTT over Q_l ∪ P, limbs `removed` to be divided
/// out) by the product R of the removed primes onto the basis `target`
/// (the first primes of Q), rounding to the nearest integer: the residue x mod R is taken
/// centered, with the exact basis extension (the overflow count
/// v = round(Σ y_m / r_m) computed in floating point and subtracted), so the
/// result is ⌊x / R⌉ without the bias of a fast (floor-type) conversion. A
/// bias would be multiplied by s and concentrate in the slots near ζ
/// (measured: 10 bits lost at N = 2^14).
///
/// The inputs share each parallel step (a ciphertext's two components are
/// divided together): one input's handful of removed limbs, or its groups
/// of target limbs, rarely divide evenly among the threads, and two inputs
/// run side by side as separate tasks fight over the caches (measured at
/// N = 2^16, two threads: 13.3 ms one after the other, 15.3 ms side by
/// side).
///
/// With `adds` (one per input, over Q_l in the NTT domain, or none), each
/// input is x + P·a: P·a joins the removed Q limb (a rescale's q_l) before
/// the conversion and the other limbs in the last step's sum, where a
/// separate pass adding P·a to every limb first would cost two more
/// passes over memory (measured: 2 ms of a 90 ms product at N = 2^16, and
/// the part of it that gains least from a second thread).
/// Fewer `adds` than inputs leave the last inputs without one.
///
/// With `perm`, every result is moved by that NTT slot permutation
/// (out\[p\] = y\[perm\[p\]\]) limb by limb as it is made, while the limb
/// is still in cache: an automorphism's key switch, which moved each
/// finished component in a pass of its own over memory.
///
/// `p_mod_q` is P mod q_i for each prime q_i of Q.
fn divide_out(
    xs: &[&RnsPoly],
    adds: &[&RnsPoly],
    perm: Option<&[u32]>,
    p_mod_q: &[u64],
    removed: &[usize],
    tables: &ModDownTables,
    target: &Arc<RnsBasis>,
) -> Result<Vec<RnsPoly>> {
    let Some(first) = xs.first() else {
        return Ok(vec![]);
    };
    let (n, r) = (first.degree(), removed.len());
    let be = default_backend();
    let basis = first.basis();
    // y_m = [x_m · (R/r_m)^-1]_{r_m} in the coefficient domain: input j's
    // in limbs j·r .. (j + 1)·r.
    let mut y = take(xs.len() * r * n);
    let work = |(k, out): (usize, &mut [u64])| {
        let (j, m) = (k / r, k % r);
        let idx = removed[m];
        let table = &basis.tables()[idx];
        let phat_inv = tables.phat_inv[m].0;
        match adds.get(j) {
            Some(a) if idx < a.limbs() => {
                // The transform is linear: (x + P·a)·c transformed.
                let q = table.modulus();
                let srcs = [xs[j].limb(idx), a.limb(idx)];
                let w = [phat_inv, q.mul(p_mod_q[idx], phat_inv)];
                be.linear_combination(q, out, None, &srcs, &w, &[q.bits(); 2]);
                be.ntt_inverse(table, out);
            }
            _ => be.ntt_inverse_scaled(table, xs[j].limb(idx), out, phat_inv),
        }
    };
    for_each_limb(&mut y, n, work);
    // v = round(Σ_m y_m / r_m): Σ y_m·(R/r_m) − v·R is x mod R, centered.
    let mut v = take(xs.len() * n);
    let bits: Vec<u32> = removed.iter().map(|&i| basis.moduli()[i].bits()).collect();
    for (ys, vj) in y.chunks_exact(r * n).zip(v.chunks_exact_mut(n)) {
        let limbs: Vec<&[u64]> = ys.chunks_exact(n).collect();
        round_sums(vj, &limbs, &tables.r_inv_f64, &bits, n);
    }
    let srcs: Vec<Vec<&[u64]>> = y
        .chunks_exact(r * n)
        .zip(v.chunks_exact(n))
        .map(|(ys, vj)| ys.chunks_exact(n).chain([vj]).collect())
        .collect();
    let bits = source_bits(removed.iter().map(|&r| &basis.moduli()[r]));
    // x mod R in the centered representative: −R folded into v's weight.
    let weights: Vec<Vec<u64>> = (0..target.len())
        .map(|i| {
            let mut w = tables.phat_mod_q[i].clone();
            w.push(target.moduli()[i].neg(tables.r_mod_q[i]));
            w
        })
        .collect();
    let work = |j: usize, first: usize, group: &mut [u64], moved: &mut [u64]| {
        let mut outputs: Vec<Combination<'_>> = group
            .chunks_exact_mut(n)
            .zip(&weights[first..])
            .enumerate()
            .map(|(k, (out, w))| Combination {
                q: &target.moduli()[first + k],
                out,
                w,
            })
            .collect();
        be.linear_combinations(&mut outputs, &srcs[j], &bits);
        for (i, o) in (first..).zip(group.chunks_exact_mut(n)) {
            let table = &target.tables()[i];
            let m = table.modulus();
            be.ntt_forward(table, o);
            // (x_i + P·a_i − o)·R^-1 as o·(−R^-1) + x_i·R^-1 + a_i·P·R^-1.
            let r_inv = tables.p_inv[i].0;
            let keep = Some(m.neg(r_inv));
            let (x, bits) = (xs[j].limb(i), m.bits());
            let a = adds.get(j).map(|a| (a.limb(i), m.mul(p_mod_q[i], r_inv)));
            match perm {
                // Summed into the move's limb and gathered back: no copy.
                Some(perm) => {
                    let (srcs, w) = match a {
                        Some((a, pr)) => (vec![&*o, x, a], vec![m.neg(r_inv), r_inv, pr]),
                        None => (vec![&*o, x], vec![m.neg(r_inv), r_inv]),
                    };
                    be.linear_combination(m, moved, None, &srcs, &w, &vec![bits; srcs.len()]);
                    hecloud_math::poly::gather(o, moved, perm);
                }
                None => match a {
                    Some((a, pr)) => {
                        be.linear_combination(m, o, keep, &[x, a], &[r_inv, pr], &[bits; 2])
                    }
                    None => be.linear_combination(m, o, keep, &[x], &[r_inv], &[bits]),
                },
            }
        }
    };
    // A limb to move each result limb through, per task (none without a
    // permutation). Not from the pool: a limb-sized request would take and
    // shorten one of its polynomial-sized buffers.
    let moved = || vec![0u64; if perm.is_some() { n } else { 0 }];
    let mut outs: Vec<RnsPoly> = xs
        .iter()
        .map(|_| pooled_uninit(target, Domain::Ntt))
        .collect();
    // The target limbs' groups, of every input.
    let cuts = limb_groups(&vec![1; target.len()], n);
    let groups: Vec<(usize, usize, &mut [u64])> = outs
        .iter_mut()
        .enumerate()
        .flat_map(|(j, o)| {
            split_groups(o.data_mut(), n, &cuts)
                .into_iter()
                .map(move |(first, limbs)| (j, first, limbs))
        })
        .collect();
    if n >= PARALLEL_MIN_N {
        groups
            .into_par_iter()
            .for_each_init(moved, |m, (j, first, limbs)| work(j, first, limbs, m));
    } else {
        let mut m = moved();
        for (j, first, limbs) in groups {
            work(j, first, limbs, &mut m);
        }
    }
    give(y);
    give(v);
    Ok(outs)
}

fn check_ext(params: &Parameters, x: &RnsPoly, level: usize) -> Result<()> {
    if **x.basis() != **params.qp_at(level)? || x.domain() != Domain::Ntt {
        return Err(RlweError::ParameterMismatch);
    }
    Ok(())
}

/// What a ModDown divides out at a level: the removed limbs, their
/// tables, and the basis the result is over.
type DividePlan<'a> = (Vec<usize>, &'a ModDownTables, &'a Arc<RnsBasis>);

/// Checks each of `xs` against Q_l ∪ P at `level` (`adds`, at most one per
/// input, against Q_l, and `perm` against the degree), then divides them
/// out together under `plan` ([`divide_out`]).
fn divide_down<const K: usize>(
    params: &Parameters,
    level: usize,
    xs: [&RnsPoly; K],
    adds: &[&RnsPoly],
    perm: Option<&[u32]>,
    plan: for<'a> fn(&'a Parameters, usize) -> Result<DividePlan<'a>>,
) -> Result<[RnsPoly; K]> {
    for x in xs {
        check_ext(params, x, level)?;
    }
    if adds.len() > K || perm.is_some_and(|p| p.len() != params.n()) {
        return Err(RlweError::ParameterMismatch);
    }
    for a in adds {
        if check_input(params, a)? != level {
            return Err(RlweError::ParameterMismatch);
        }
    }
    let (removed, tables, target) = plan(params, level)?;
    let out = divide_out(&xs, adds, perm, params.p_mod_q(), &removed, tables, target)?;
    Ok(out
        .try_into()
        .unwrap_or_else(|_| unreachable!("one output per input")))
}

/// ModDown: x over Q_l ∪ P (NTT) ↦ ≈ x / P over Q_l (NTT).
pub fn mod_down(params: &Parameters, level: usize, x: &RnsPoly) -> Result<RnsPoly> {
    let [y] = divide_down(params, level, [x], &[], None, mod_down_plan)?;
    Ok(y)
}

/// [`mod_down`] of a ciphertext's two components, divided together: one
/// parallel loop over both components' limbs, where two ModDowns side by
/// side split unevenly over the threads and contend for the caches.
pub fn mod_down_pair(
    params: &Parameters,
    level: usize,
    x0: &RnsPoly,
    x1: &RnsPoly,
) -> Result<(RnsPoly, RnsPoly)> {
    let [y0, y1] = divide_down(params, level, [x0, x1], &[], None, mod_down_plan)?;
    Ok((y0, y1))
}

/// [`mod_down_pair`] of (x₀ + P·a₀, x₁ + P·a₁), for a₀, a₁ over Q_l
/// (NTT): a sum of undivided key-switching products and of terms that
/// need no division, in one pass (see [`mod_down_rescale_pair_adding`]).
pub fn mod_down_pair_adding(
    params: &Parameters,
    level: usize,
    [x0, x1]: [&RnsPoly; 2],
    adds: [&RnsPoly; 2],
) -> Result<(RnsPoly, RnsPoly)> {
    let [y0, y1] = divide_down(params, level, [x0, x1], &adds, None, mod_down_plan)?;
    Ok((y0, y1))
}

/// The ModDown of an automorphism's key switch (x₀, x₁) of c₁, for the key
/// held permuted (see `GaloisKey`): (π(x₀/P + c₀), π(x₁/P)) over Q_l, π
/// being the NTT slot permutation `perm` (out\[p\] = y\[perm\[p\]\]). The
/// sum and both moves are made as each limb is divided, where each took
/// a pass of its own over the finished components.
pub fn mod_down_pair_moved(
    params: &Parameters,
    level: usize,
    [x0, x1]: [&RnsPoly; 2],
    c0: &RnsPoly,
    perm: &[u32],
) -> Result<(RnsPoly, RnsPoly)> {
    let [y0, y1] = divide_down(params, level, [x0, x1], &[c0], Some(perm), mod_down_plan)?;
    Ok((y0, y1))
}

fn mod_down_plan(params: &Parameters, level: usize) -> Result<DividePlan<'_>> {
    let lt = params.level(level)?;
    let k = params.p_basis().len();
    Ok((
        (level + 1..level + 1 + k).collect(),
        params.mod_down(),
        &lt.q,
    ))
}

/// Fused ModDown and rescale: x over Q_l ∪ P (NTT) ↦ ≈ x / (q_l·P) over
/// Q_{l−1} (NTT), saving the NTTs of a separate rescale.
pub fn mod_down_rescale(params: &Parameters, level: usize, x: &RnsPoly) -> Result<RnsPoly> {
    let [y] = divide_down(params, level, [x], &[], None, mod_down_rescale_plan)?;
    Ok(y)
}

/// [`mod_down_rescale`] of a ciphertext's two components, divided
/// together, as [`mod_down_pair`].
pub fn mod_down_rescale_pair(
    params: &Parameters,
    level: usize,
    x0: &RnsPoly,
    x1: &RnsPoly,
) -> Result<(RnsPoly, RnsPoly)> {
    let [y0, y1] = divide_down(params, level, [x0, x1], &[], None, mod_down_rescale_plan)?;
    Ok((y0, y1))
}

/// [`mod_down_rescale_pair`] of (x₀ + P·a₀, x₁ + P·a₁), for a₀, a₁ over
/// Q_l (NTT): the degree-0 and degree-1 parts of a product folded into its
/// relinearization, without a pass of their own.
pub fn mod_down_rescale_pair_adding(
    params: &Parameters,
    level: usize,
    [x0, x1]: [&RnsPoly; 2],
    adds: [&RnsPoly; 2],
) -> Result<(RnsPoly, RnsPoly)> {
    let [y0, y1] = divide_down(params, level, [x0, x1], &adds, None, mod_down_rescale_plan)?;
    Ok((y0, y1))
}

fn mod_down_rescale_plan(params: &Parameters, level: usize) -> Result<DividePlan<'_>> {
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
    Ok((removed, tables, params.q_at(level - 1)?))
}

/// Lifts x over Q_l (NTT) to P·x over Q_l ∪ P (zero on the P limbs), for a
/// ModDown (or [`mod_down_rescale`]) of x itself: BGV's modulus switch. A
/// sum with a key-switching product is [`mod_down_rescale_pair_adding`].
pub fn lift_times_p(params: &Parameters, x: &RnsPoly) -> Result<RnsPoly> {
    let level = check_input(params, x)?;
    let lt = params.level(level)?;
    let n = params.n();
    let mut out = RnsPoly::zero(&lt.qp, Domain::Ntt);
    let be = default_backend();
    for (i, o) in out.data_mut()[..(level + 1) * n]
        .chunks_exact_mut(n)
        .enumerate()
    {
        let m = lt.q.moduli()[i];
        o.copy_from_slice(x.limb(i));
        be.mul_scalar(&m, o, params.p_mod_q()[i]);
    }
    Ok(out)
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

/// Hoisted key switching: [`key_switch`] of the decomposed polynomial.
pub fn key_switch_hoisted(
    params: &Parameters,
    dec: &Decomposed,
    key: &SwitchingKey,
) -> Result<(RnsPoly, RnsPoly)> {
    let ext = key_switch_hoisted_ext(params, dec, key)?;
    finish_pair(params, ext)
}

fn finish_pair(params: &Parameters, ext: ExtPair) -> Result<(RnsPoly, RnsPoly)> {
    let out = mod_down_pair(params, ext.level, &ext.c0, &ext.c1)?;
    Ok(out)
}

/// Limb `ki` of the (b, a) key pairs of the first `digits` digits (a
/// level below the top has fewer digits than the key).
fn key_limbs(key: &SwitchingKey, ki: usize, digits: usize) -> (Vec<&[u64]>, Vec<&[u64]>) {
    (
        key.b.iter().take(digits).map(|p| p.limb(ki)).collect(),
        key.a.iter().take(digits).map(|p| p.limb(ki)).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The centering term v = round(Σ y_i/q_i) of a conversion stays within
    /// the width the kernels are told ([`center_bits`]): at its largest
    /// (every y_i = q_i − 1) it is the limb count.
    #[test]
    fn centering_terms_fit_their_declared_width() {
        let n = 8;
        for limbs in 1..=12usize {
            let qs: Vec<u64> = (0..limbs as u64).map(|i| (1 << 61) - 1 - 2 * i).collect();
            let inv: Vec<f64> = qs.iter().map(|&q| 1.0 / q as f64).collect();
            let ys: Vec<Vec<u64>> = qs
                .iter()
                .map(|&q| {
                    (0..n as u64)
                        .map(|c| if c == 0 { q - 1 } else { c * (q / 8) })
                        .collect()
                })
                .collect();
            let refs: Vec<&[u64]> = ys.iter().map(Vec::as_slice).collect();
            let mut v = vec![0u64; n];
            round_sums(&mut v, &refs, &inv, &vec![61; limbs], n);
            assert_eq!(v[0], limbs as u64, "{limbs} limbs at their largest");
            let bits = center_bits(limbs);
            assert!(v.iter().all(|&x| x >> bits == 0), "{limbs} limbs: {v:?}");
        }
        assert_eq!(center_bits(1), 1);
        assert_eq!(center_bits(4), 3);
    }

    /// round_sums rounds each sum to the nearest integer, as `f64::round`
    /// of the same sum does away from ties: random residues of 50- to
    /// 61-bit moduli, over 1 to 12 limbs and a length with a partial chunk.
    #[test]
    fn centering_terms_round_to_nearest() {
        let mut rng = hecloud_math::testing::sampler();
        let n = ROUND_CHUNK + 37;
        for limbs in 1..=12usize {
            let qs: Vec<u64> = (0..limbs)
                .map(|i| (1u64 << (50 + i % 12)) - 1 - 2 * i as u64)
                .collect();
            let inv: Vec<f64> = qs.iter().map(|&q| 1.0 / q as f64).collect();
            let ys: Vec<Vec<u64>> = qs
                .iter()
                .map(|&q| (0..n).map(|_| rng.uniform_mod(q)).collect())
                .collect();
            let refs: Vec<&[u64]> = ys.iter().map(Vec::as_slice).collect();
            let bits: Vec<u32> = qs.iter().map(|&q| 64 - q.leading_zeros()).collect();
            let mut v = vec![0u64; n];
            round_sums(&mut v, &refs, &inv, &bits, n);
            let mut checked = 0;
            for (c, &got) in v.iter().enumerate() {
                let sum = ys
                    .iter()
                    .zip(&inv)
                    .fold(0.0, |s, (y, i)| s + y[c] as f64 * i);
                if (sum - sum.floor() - 0.5).abs() > 1e-9 {
                    assert_eq!(got, sum.round() as u64, "{limbs} limbs, coefficient {c}");
                    checked += 1;
                }
            }
            assert!(checked > n - 10, "{limbs} limbs: {checked} checked");
        }
    }

    /// The groups cover every limb once, in order (at most [`target_group`]
    /// each under equal costs), and each half of the list (what rayon
    /// gives each of two threads) holds half the work, to one limb's cost:
    /// under equal costs and under a key switch's (the last limbs, P's,
    /// converting one digit more).
    #[test]
    fn limb_groups_cover_the_limbs_and_halve_the_work() {
        let n = PARALLEL_MIN_N;
        for threads in [1, 2, 3, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for limbs in 1..=80 {
                let p_limbs = limbs / 5;
                let uneven: Vec<u32> = (0..limbs)
                    .map(|t| if t + p_limbs >= limbs { 20 } else { 17 })
                    .collect();
                // A decomposed digit: its own limbs (here a middle run) copies.
                let digit: Vec<u32> = (0..limbs)
                    .map(|t| {
                        if (limbs / 3..limbs / 2).contains(&t) {
                            1
                        } else {
                            12
                        }
                    })
                    .collect();
                let zeros = vec![0; limbs];
                for costs in [vec![1; limbs], uneven, digit, zeros] {
                    let groups = pool.install(|| limb_groups(&costs, n));
                    let mut next = 0;
                    for g in &groups {
                        assert_eq!(g.start, next, "{limbs} limbs on {threads} threads");
                        assert!(!g.is_empty());
                        if costs.iter().all(|&c| c <= 1) {
                            let most = target_group(threads);
                            assert!(g.len() <= most, "{limbs} limbs: {groups:?}");
                        }
                        next = g.end;
                    }
                    assert_eq!(next, limbs);
                    assert!(groups.len() >= limbs.div_ceil(target_group(threads)));
                    if limbs >= threads {
                        assert_eq!(groups.len() % threads, 0, "{limbs} limbs on {threads}");
                    }
                    let half = groups.len() / 2;
                    let work = |gs: &[std::ops::Range<usize>]| -> u32 {
                        gs.iter()
                            .flat_map(|g| &costs[g.clone()])
                            .map(|&c| c.max(1))
                            .sum()
                    };
                    if groups.len() % 2 == 0 {
                        let (first, second) = (work(&groups[..half]), work(&groups[half..]));
                        let most = costs.iter().map(|&c| c.max(1)).max().unwrap();
                        assert!(first.abs_diff(second) <= most, "{limbs}: {groups:?}");
                    }
                }
            }
        }
        // One thread below the parallel size: fixed groups.
        assert_eq!(limb_groups(&[1; 9], 16).len(), 3);
    }
}
