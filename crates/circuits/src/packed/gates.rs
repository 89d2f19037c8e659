//! [`BitCircuit`]: logic gates on ciphertexts whose slots hold bits, in
//! batches, with refreshes before the products that need them.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use hecloud_bgv::{BgvParameters, Encoder, Evaluator};
use hecloud_rlwe::Ciphertext;
use rayon::prelude::*;

use super::{CircuitStats, Depth, PackedBits, PackedError, Refresher, Result};

/// One prefix combination (G, P) ∘ (G', P') = (G + P·G', P·P') of
/// [`BitCircuit::combine_many`]: `g` and `g_low` absent stand for a known
/// 0, `p_low` absent for "P·P' is not needed".
#[derive(Clone, Copy, Debug)]
pub struct Combine<'p> {
    /// G of the upper part (absent: 0).
    pub g: Option<&'p PackedBits>,
    /// P of the upper part.
    pub p: &'p PackedBits,
    /// G' of the lower part (absent: 0).
    pub g_low: Option<&'p PackedBits>,
    /// P' of the lower part (absent: the combined P is not computed).
    pub p_low: Option<&'p PackedBits>,
}

/// When [`BitCircuit`] refreshes, beyond what the next products need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RefreshPolicy {
    /// Only the operands a batch of products cannot do without: the fewest
    /// ciphertexts refreshed.
    Lazy,
    /// In a refresh round that happens anyway, also every operand of the
    /// batch at level 0 (one product left at most), so that values stay in
    /// step: fewer rounds (round trips of a remote refresher), some more
    /// ciphertexts (the `packed` test `refresh_policies_and_other_refreshers`
    /// prints both on a bit-sliced sum).
    #[default]
    InStep,
}

#[derive(Default)]
struct Counters {
    products: AtomicU64,
    plain_products: AtomicU64,
    rotations: AtomicU64,
    refreshes: AtomicU64,
    refresh_rounds: AtomicU64,
}

/// The gate layer: logic on ciphertexts whose slots hold bits, every gate
/// acting on all slots at once, in batches (a circuit layer: independent
/// gates, run in parallel, their operands refreshed in one round).
///
/// Before a batch of products it refreshes, through its [`Refresher`], the
/// operands of every product whose result would keep less than the margin
/// of noise budget (see [the module docs](super)); without a refresher
/// such a product fails with a typed error
/// ([`PackedError::is_budget_exhausted`]). It counts products, plaintext
/// products, rotations and refreshes ([`BitCircuit::stats`],
/// [`BitCircuit::measure`]).
///
/// ```
/// use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, params::test_literal};
/// use hecloud_circuits::packed::{BitCircuit, PackedBits};
/// let params = BgvParameters::new_insecure_for_tests(test_literal(10, 3, 65537))?;
/// let keys = KeySet::generate(&params, &[], false)?;
/// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
/// let bc = BitCircuit::new(&eval)?;
/// let a = PackedBits::encrypt(&keys, &enc, &[false, false, true, true])?;
/// let b = PackedBits::encrypt(&keys, &enc, &[false, true, false, true])?;
/// let c = PackedBits::encrypt(&keys, &enc, &[true, true, true, false])?;
/// let x = bc.xor(&a, &b)?;
/// assert_eq!(&x.decrypt_bits(&keys, &enc)?[..4], &[false, true, true, false]);
/// let (s, carry) = bc.full_adder(&a, &b, &c)?;
/// assert_eq!(&s.decrypt_bits(&keys, &enc)?[..4], &[true, false, false, false]);
/// assert_eq!(&carry.decrypt_bits(&keys, &enc)?[..4], &[false, true, true, true]);
/// assert_eq!(bc.stats().products, 3);
/// # Ok::<(), hecloud_circuits::packed::PackedError>(())
/// ```
pub struct BitCircuit<'a> {
    eval: &'a Evaluator,
    encoder: Encoder,
    refresher: Option<&'a dyn Refresher>,
    margin: f64,
    policy: RefreshPolicy,
    counters: Counters,
}

impl std::fmt::Debug for BitCircuit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BitCircuit")
            .field("refresher", &self.refresher.is_some())
            .field("margin", &self.margin)
            .field("policy", &self.policy)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The key of an operand in a batch: its address (an operand passed twice
/// is refreshed once).
fn key(x: &PackedBits) -> usize {
    x as *const PackedBits as usize
}

impl<'a> BitCircuit<'a> {
    /// Noise budget, in bits, a product must leave by default
    /// ([`BitCircuit::with_margin`]): room for the additions of a gate (4
    /// bits), for the product by a constant below t/2 that adds two terms
    /// of unequal BGV factors (log2(t) − 1 bits), and the evaluator's own
    /// minimum ([`BgvParameters::MIN_BUDGET_BITS`]). With t = 65537: 24
    /// bits.
    pub fn default_margin(params: &BgvParameters) -> f64 {
        BgvParameters::MIN_BUDGET_BITS + 4.0 + (params.t() as f64).log2() - 1.0
    }

    /// Gates over `eval`, without a refresher. The parameters must batch
    /// (t prime, t ≡ 1 mod 2N).
    pub fn new(eval: &'a Evaluator) -> Result<Self> {
        let encoder = Encoder::new(eval.params());
        encoder.encode(&[])?; // NoBatching when t does not batch
        Ok(Self {
            eval,
            encoder,
            refresher: None,
            margin: Self::default_margin(eval.params()),
            policy: RefreshPolicy::default(),
            counters: Counters::default(),
        })
    }

    /// Refreshes through `refresher` when the noise budget runs out.
    pub fn with_refresher(mut self, refresher: &'a dyn Refresher) -> Self {
        self.refresher = Some(refresher);
        self
    }

    /// The budget, in bits, a product must leave before its operands are
    /// refreshed (default [`BitCircuit::default_margin`]).
    pub fn with_margin(mut self, bits: f64) -> Self {
        self.margin = bits;
        self
    }

    /// Which operands a refresh round takes (default
    /// [`RefreshPolicy::InStep`]).
    pub fn with_policy(mut self, policy: RefreshPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The evaluator.
    pub fn evaluator(&self) -> &'a Evaluator {
        self.eval
    }

    /// The batch encoder of the evaluator's parameters.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// Whether a refresher is attached.
    pub fn has_refresher(&self) -> bool {
        self.refresher.is_some()
    }

    /// Counters since creation (depth 0: depth belongs to results).
    pub fn stats(&self) -> CircuitStats {
        let c = &self.counters;
        CircuitStats {
            products: c.products.load(Relaxed),
            plain_products: c.plain_products.load(Relaxed),
            rotations: c.rotations.load(Relaxed),
            refreshes: c.refreshes.load(Relaxed),
            refresh_rounds: c.refresh_rounds.load(Relaxed),
            depth: 0,
        }
    }

    /// Runs `f` and returns its result with what it cost: the counters'
    /// differences and the result's depth.
    pub fn measure<T: Depth>(&self, f: impl FnOnce() -> Result<T>) -> Result<(T, CircuitStats)> {
        let before = self.stats();
        let out = f()?;
        let mut stats = self.stats() - before;
        stats.depth = out.depth();
        Ok((out, stats))
    }

    // ----- refreshing -----

    /// Refreshes `xs` (one [`Refresher::refresh_many`] call): fresh
    /// top-level encryptions of the same slots, depths kept. An error
    /// without a refresher.
    pub fn refresh_many(&self, xs: &[&PackedBits]) -> Result<Vec<PackedBits>> {
        let refresher = self
            .refresher
            .ok_or_else(|| PackedError::Refresh("no refresher attached".into()))?;
        let cts: Vec<Ciphertext> = xs.iter().map(|x| x.ct.clone()).collect();
        let out = refresher.refresh_many(&cts)?;
        if out.len() != cts.len() {
            return Err(PackedError::Refresh(format!(
                "{} ciphertexts back for {}",
                out.len(),
                cts.len()
            )));
        }
        self.counters.refreshes.fetch_add(cts.len() as u64, Relaxed);
        self.counters.refresh_rounds.fetch_add(1, Relaxed);
        Ok(out
            .into_iter()
            .zip(xs)
            .map(|(ct, x)| PackedBits { ct, depth: x.depth })
            .collect())
    }

    /// Which operands to refresh in round `round` (0 or 1) of a batch:
    /// in round 0 every operand whose own budget is below the margin, and
    /// for each product `pairs` (indices into `ops`) whose predicted budget
    /// is below it, the operand whose square would keep the less budget;
    /// in round 1 the other operand of each product still short. Operands
    /// `done` (refreshed already) are not asked again.
    fn choose(
        &self,
        ops: &[&PackedBits],
        done: &[bool],
        pairs: &[(usize, usize)],
        round: usize,
    ) -> Vec<usize> {
        let mut marked = vec![false; ops.len()];
        if round == 0 {
            for (k, x) in ops.iter().enumerate() {
                marked[k] = !done[k] && self.eval.budget_estimate(&x.ct) < self.margin;
            }
        }
        for &(i, j) in pairs {
            if self.eval.mul_relin_budget(&ops[i].ct, &ops[j].ct) >= self.margin {
                continue;
            }
            if round == 0 && !done[i] && !done[j] {
                let si = self.eval.mul_relin_budget(&ops[i].ct, &ops[i].ct);
                let sj = self.eval.mul_relin_budget(&ops[j].ct, &ops[j].ct);
                marked[if si <= sj { i } else { j }] = true;
            } else {
                marked[i] |= !done[i];
                marked[j] |= !done[j];
            }
        }
        // In step: a round trip happens anyway, so take along every operand
        // at level 0 (one product left at most): values refreshed together
        // stay in step and later layers need fewer rounds.
        if self.policy == RefreshPolicy::InStep && round == 0 && marked.iter().any(|&m| m) {
            for (k, x) in ops.iter().enumerate() {
                marked[k] |= !done[k] && x.ct.level() == 0;
            }
        }
        (0..ops.len()).filter(|&k| marked[k]).collect()
    }

    /// Refreshes, in place, the cells a batch of products `pairs` (indices
    /// into `cells`) and linear uses of every cell will need (see
    /// [the module docs](super)): for values a circuit keeps across layers,
    /// so that a refresh serves every later use. At most two refresh
    /// rounds; nothing without a refresher.
    pub fn refresh_for(
        &self,
        cells: &mut [&mut PackedBits],
        pairs: &[(usize, usize)],
    ) -> Result<()> {
        if self.refresher.is_none() {
            return Ok(());
        }
        let mut done = vec![false; cells.len()];
        for round in 0..2 {
            let want = {
                let view: Vec<&PackedBits> = cells.iter().map(|c| &**c).collect();
                self.choose(&view, &done, pairs, round)
            };
            if want.is_empty() {
                break;
            }
            let out = {
                let xs: Vec<&PackedBits> = want.iter().map(|&k| &*cells[k]).collect();
                self.refresh_many(&xs)?
            };
            for (k, r) in want.into_iter().zip(out) {
                *cells[k] = r;
                done[k] = true;
            }
        }
        Ok(())
    }

    /// The operands of a batch, refreshed where needed ([`BitCircuit::choose`];
    /// an operand passed twice is refreshed once). Without a refresher, `ops`
    /// as they are.
    fn prepare<'p>(
        &self,
        ops: &[&'p PackedBits],
        pairs: &[(usize, usize)],
    ) -> Result<Vec<Cow<'p, PackedBits>>> {
        let mut ready: Vec<Cow<'p, PackedBits>> = ops.iter().map(|&x| Cow::Borrowed(x)).collect();
        if self.refresher.is_none() {
            return Ok(ready);
        }
        let mut done = vec![false; ops.len()];
        for round in 0..2 {
            let want = {
                let view: Vec<&PackedBits> = ready.iter().map(|c| &**c).collect();
                self.choose(&view, &done, pairs, round)
            };
            if want.is_empty() {
                break;
            }
            let mut seen = HashSet::new();
            let unique: Vec<&PackedBits> = want
                .iter()
                .map(|&k| ops[k])
                .filter(|x| seen.insert(key(x)))
                .collect();
            let fresh: HashMap<usize, PackedBits> = unique
                .iter()
                .map(|x| key(x))
                .zip(self.refresh_many(&unique)?)
                .collect();
            for (k, x) in ops.iter().enumerate() {
                if let (false, Some(r)) = (done[k], fresh.get(&key(x))) {
                    ready[k] = Cow::Owned(r.clone());
                    done[k] = true;
                }
            }
        }
        Ok(ready)
    }

    /// [`BitCircuit::prepare`], then the products `pairs` in parallel.
    fn run_batch<'p>(
        &self,
        ops: &[&'p PackedBits],
        pairs: &[(usize, usize)],
    ) -> Result<(Vec<Cow<'p, PackedBits>>, Vec<PackedBits>)> {
        let ready = self.prepare(ops, pairs)?;
        let products = pairs
            .par_iter()
            .map(|&(i, j)| self.product(&ready[i], &ready[j]))
            .collect::<Result<Vec<_>>>()?;
        Ok((ready, products))
    }

    fn product(&self, a: &PackedBits, b: &PackedBits) -> Result<PackedBits> {
        let ct = self.eval.mul_relin(&a.ct, &b.ct)?;
        self.counters.products.fetch_add(1, Relaxed);
        Ok(PackedBits {
            ct,
            depth: a.depth.max(b.depth) + 1,
        })
    }

    // ----- linear pieces -----

    fn add(&self, a: &PackedBits, b: &PackedBits) -> Result<PackedBits> {
        Ok(PackedBits {
            ct: self.eval.add(&a.ct, &b.ct)?,
            depth: a.depth.max(b.depth),
        })
    }

    fn sub(&self, a: &PackedBits, b: &PackedBits) -> Result<PackedBits> {
        Ok(PackedBits {
            ct: self.eval.sub(&a.ct, &b.ct)?,
            depth: a.depth.max(b.depth),
        })
    }

    /// a + b − 2ab from a, b and ab.
    fn xor_from(&self, a: &PackedBits, b: &PackedBits, ab: &PackedBits) -> Result<PackedBits> {
        self.sub(&self.add(a, b)?, &self.add(ab, ab)?)
    }

    /// pt − a (slot-wise): the complement of a within a 0/1 plaintext mask.
    pub(crate) fn plain_minus(
        &self,
        pt: &hecloud_bgv::Plaintext,
        a: &PackedBits,
    ) -> Result<PackedBits> {
        let neg = self.eval.neg(&a.ct)?;
        Ok(PackedBits {
            ct: self.eval.add_plain(&neg, pt)?,
            depth: a.depth,
        })
    }

    /// A ciphertext of 0 in every slot, at the level of `like`.
    pub(crate) fn zero_like(&self, like: &PackedBits) -> Result<PackedBits> {
        Ok(PackedBits {
            ct: self.eval.mul_scalar(&like.ct, 0)?,
            depth: 0,
        })
    }

    // ----- gates -----

    /// NOT: 1 − a in every slot (no product).
    pub fn not(&self, a: &PackedBits) -> Result<PackedBits> {
        let neg = self.eval.neg(&a.ct)?;
        Ok(PackedBits {
            ct: self.eval.add_scalar(&neg, 1)?,
            depth: a.depth,
        })
    }

    /// [`BitCircuit::not`] of each.
    pub fn not_many(&self, xs: &[&PackedBits]) -> Result<Vec<PackedBits>> {
        xs.par_iter().map(|a| self.not(a)).collect()
    }

    /// AND: a·b.
    pub fn and(&self, a: &PackedBits, b: &PackedBits) -> Result<PackedBits> {
        Ok(self.and_many(&[(a, b)])?.remove(0))
    }

    /// [`BitCircuit::and`] of each pair, as one batch.
    pub fn and_many(&self, pairs: &[(&PackedBits, &PackedBits)]) -> Result<Vec<PackedBits>> {
        let ops: Vec<&PackedBits> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        let idx: Vec<(usize, usize)> = (0..pairs.len()).map(|k| (2 * k, 2 * k + 1)).collect();
        Ok(self.run_batch(&ops, &idx)?.1)
    }

    /// XOR: a + b − 2ab.
    pub fn xor(&self, a: &PackedBits, b: &PackedBits) -> Result<PackedBits> {
        Ok(self.xor_many(&[(a, b)])?.remove(0))
    }

    /// [`BitCircuit::xor`] of each pair, as one batch.
    pub fn xor_many(&self, pairs: &[(&PackedBits, &PackedBits)]) -> Result<Vec<PackedBits>> {
        Ok(self
            .half_adder_many(pairs)?
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }

    /// OR: a + b − ab.
    pub fn or(&self, a: &PackedBits, b: &PackedBits) -> Result<PackedBits> {
        Ok(self.or_many(&[(a, b)])?.remove(0))
    }

    /// [`BitCircuit::or`] of each pair, as one batch.
    pub fn or_many(&self, pairs: &[(&PackedBits, &PackedBits)]) -> Result<Vec<PackedBits>> {
        let ops: Vec<&PackedBits> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        let idx: Vec<(usize, usize)> = (0..pairs.len()).map(|k| (2 * k, 2 * k + 1)).collect();
        let (ready, ab) = self.run_batch(&ops, &idx)?;
        (0..pairs.len())
            .into_par_iter()
            .map(|k| self.sub(&self.add(&ready[2 * k], &ready[2 * k + 1])?, &ab[k]))
            .collect()
    }

    /// Half adder: (a ⊕ b, a·b), one product.
    pub fn half_adder(&self, a: &PackedBits, b: &PackedBits) -> Result<(PackedBits, PackedBits)> {
        Ok(self.half_adder_many(&[(a, b)])?.remove(0))
    }

    /// [`BitCircuit::half_adder`] of each pair, as one batch.
    pub fn half_adder_many(
        &self,
        pairs: &[(&PackedBits, &PackedBits)],
    ) -> Result<Vec<(PackedBits, PackedBits)>> {
        let ops: Vec<&PackedBits> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        let idx: Vec<(usize, usize)> = (0..pairs.len()).map(|k| (2 * k, 2 * k + 1)).collect();
        let (ready, ab) = self.run_batch(&ops, &idx)?;
        ab.into_par_iter()
            .enumerate()
            .map(|(k, ab)| Ok((self.xor_from(&ready[2 * k], &ready[2 * k + 1], &ab)?, ab)))
            .collect()
    }

    /// Full adder: (a ⊕ b ⊕ c, majority(a, b, c)) as x = a ⊕ b, x ⊕ c and
    /// ab + c·x: two products, depth max(depth(a, b) + 2, depth(c) + 1) —
    /// pass the deepest input as `c`.
    pub fn full_adder(
        &self,
        a: &PackedBits,
        b: &PackedBits,
        c: &PackedBits,
    ) -> Result<(PackedBits, PackedBits)> {
        Ok(self.full_adder_many(&[(a, b, c)])?.remove(0))
    }

    /// [`BitCircuit::full_adder`] of each triple, as two batches of products.
    pub fn full_adder_many(
        &self,
        triples: &[(&PackedBits, &PackedBits, &PackedBits)],
    ) -> Result<Vec<(PackedBits, PackedBits)>> {
        let n = triples.len();
        let ops: Vec<&PackedBits> = triples.iter().flat_map(|&(a, b, c)| [a, b, c]).collect();
        let idx: Vec<(usize, usize)> = (0..n).map(|k| (3 * k, 3 * k + 1)).collect();
        let (ready, ab) = self.run_batch(&ops, &idx)?;
        let xs: Vec<PackedBits> = (0..n)
            .into_par_iter()
            .map(|k| self.xor_from(&ready[3 * k], &ready[3 * k + 1], &ab[k]))
            .collect::<Result<_>>()?;
        let ops2: Vec<&PackedBits> = (0..n).flat_map(|k| [&xs[k], &*ready[3 * k + 2]]).collect();
        let idx2: Vec<(usize, usize)> = (0..n).map(|k| (2 * k, 2 * k + 1)).collect();
        let (ready2, xc) = self.run_batch(&ops2, &idx2)?;
        (0..n)
            .into_par_iter()
            .map(|k| {
                let s = self.xor_from(&ready2[2 * k], &ready2[2 * k + 1], &xc[k])?;
                let carry = self.add(&ab[k], &xc[k])?;
                Ok((s, carry))
            })
            .collect()
    }

    /// Majority of three bits: ab + c·(a ⊕ b), two products (the carry of
    /// [`BitCircuit::full_adder`]).
    pub fn majority(&self, a: &PackedBits, b: &PackedBits, c: &PackedBits) -> Result<PackedBits> {
        Ok(self.full_adder(a, b, c)?.1)
    }

    /// Select: `cond ? a : b` as cond·(a − b) + b, one product.
    pub fn select(&self, cond: &PackedBits, a: &PackedBits, b: &PackedBits) -> Result<PackedBits> {
        Ok(self.select_many(&[(cond, a, b)])?.remove(0))
    }

    /// [`BitCircuit::select`] of each triple `(cond, a, b)`, as one batch.
    pub fn select_many(
        &self,
        triples: &[(&PackedBits, &PackedBits, &PackedBits)],
    ) -> Result<Vec<PackedBits>> {
        let n = triples.len();
        let ops: Vec<&PackedBits> = triples.iter().flat_map(|&(c, a, b)| [c, a, b]).collect();
        let ready = self.prepare(&ops, &[])?;
        let diffs: Vec<PackedBits> = (0..n)
            .into_par_iter()
            .map(|k| self.sub(&ready[3 * k + 1], &ready[3 * k + 2]))
            .collect::<Result<_>>()?;
        let ops2: Vec<&PackedBits> = (0..n).flat_map(|k| [&*ready[3 * k], &diffs[k]]).collect();
        let idx2: Vec<(usize, usize)> = (0..n).map(|k| (2 * k, 2 * k + 1)).collect();
        let (_, prods) = self.run_batch(&ops2, &idx2)?;
        prods
            .into_par_iter()
            .enumerate()
            .map(|(k, p)| self.add(&p, &ready[3 * k + 2]))
            .collect()
    }

    /// Prefix combinations (G, P) ∘ (G', P') = (G + P·G', P·P') as one
    /// batch; no XOR is needed since G and P·G' are never both 1 (P is the
    /// XOR of a position's bits, G their AND). Returns (G, P) per item,
    /// G absent when it is a known 0 and P absent when not asked for.
    pub fn combine_many(
        &self,
        items: &[Combine<'_>],
    ) -> Result<Vec<(Option<PackedBits>, Option<PackedBits>)>> {
        // Operands and products of each item, by index.
        struct Slots {
            g: Option<usize>,
            pg: Option<usize>,
            pp: Option<usize>,
        }
        fn push<'p>(ops: &mut Vec<&'p PackedBits>, x: &'p PackedBits) -> usize {
            ops.push(x);
            ops.len() - 1
        }
        let mut ops: Vec<&PackedBits> = Vec::new();
        let mut pairs = Vec::new();
        let mut slots = Vec::with_capacity(items.len());
        for it in items {
            let p = push(&mut ops, it.p);
            let g = it.g.map(|g| push(&mut ops, g));
            let mut product = |x: Option<usize>| {
                x.map(|j| {
                    pairs.push((p, j));
                    pairs.len() - 1
                })
            };
            let pg = product(it.g_low.map(|x| push(&mut ops, x)));
            let pp = product(it.p_low.map(|x| push(&mut ops, x)));
            slots.push(Slots { g, pg, pp });
        }
        let (ready, prods) = self.run_batch(&ops, &pairs)?;
        slots
            .par_iter()
            .map(|s| {
                let g = match (s.g, s.pg) {
                    (Some(g), Some(pg)) => Some(self.add(&ready[g], &prods[pg])?),
                    (Some(g), None) => Some(ready[g].clone().into_owned()),
                    (None, Some(pg)) => Some(prods[pg].clone()),
                    (None, None) => None,
                };
                Ok((g, s.pp.map(|pp| prods[pp].clone())))
            })
            .collect()
    }

    /// Rotates the rows of `a` left by `k` (negative: right) — see
    /// [`hecloud_bgv::Evaluator::rotate_rows`].
    pub fn rotate(&self, a: &PackedBits, k: i64) -> Result<PackedBits> {
        Ok(self.rotate_many(&[(a, k)])?.remove(0))
    }

    /// [`BitCircuit::rotate`] of each, as one batch.
    pub fn rotate_many(&self, items: &[(&PackedBits, i64)]) -> Result<Vec<PackedBits>> {
        let ops: Vec<&PackedBits> = items.iter().map(|&(a, _)| a).collect();
        let ready = self.prepare(&ops, &[])?;
        ready
            .par_iter()
            .zip(items)
            .map(|(a, &(_, k))| {
                let ct = self.eval.rotate_rows(&a.ct, k)?;
                self.counters.rotations.fetch_add(1, Relaxed);
                Ok(PackedBits { ct, depth: a.depth })
            })
            .collect()
    }

    /// `a` with every slot whose `keep` entry is false (or beyond `keep`)
    /// set to 0: a product with a plaintext, no level but about
    /// log2(t·√N) bits of noise (refreshed first when that would leave less
    /// than the margin). The result's factor is 1 whatever `a`'s: the kept
    /// slots are multiplied by the inverse of `a`'s factor, at no extra
    /// noise, so that what a circuit ends with does not depend on the
    /// factors its products and modulus switches left.
    pub fn mask(&self, a: &PackedBits, keep: &[bool]) -> Result<PackedBits> {
        let params = self.eval.params();
        let after = params.budget_bits(a.ct.level(), params.noise().mul_plain(a.ct.scale()));
        let a = if after < self.margin && self.refresher.is_some() {
            Cow::Owned(self.refresh_many(&[a])?.remove(0))
        } else {
            Cow::Borrowed(a)
        };
        let t = params.t_modulus();
        let unit = t
            .inv(t.reduce(a.ct.factor()))
            .map_err(hecloud_bgv::BgvError::from)?;
        let values: Vec<u64> = keep.iter().map(|&k| if k { unit } else { 0 }).collect();
        let pt = self.encoder.encode(&values)?;
        let mut ct = self.eval.mul_plain(&a.ct, &pt)?;
        ct.set_factor(1);
        self.counters.plain_products.fetch_add(1, Relaxed);
        Ok(PackedBits { ct, depth: a.depth })
    }
}
