//! Comparisons: the published carry of `¬X + Y`, the comparison-status
//! tree with its layouts, and equality.

use super::*;

/// `x < y` by the published method: the carry out of `¬x + y` through a
/// Kogge–Stone adder (only the prefix nodes the carry needs are evaluated).
///
/// ```
/// use hecloud_circuits::{circuits, BitEngine, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 7, 4)?;
/// let y = EncryptedUint::encrypt_u128(&e, 9, 4)?;
/// assert!(e.decrypt_bit(&circuits::lt_published(&e, &x, &y)?)?);
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn lt_published<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<WireOf<E>> {
    let width = same_width(x, y)?;
    let nx: Vec<WireOf<E>> = x.bits().iter().map(|b| e.not(b)).collect::<Result<_>>()?;
    // Statuses ¬x_i + y_i; position 0 is the (zero) carry-in.
    let n = width + 1;
    let mut t: Vec<WireOf<E>> = Vec::with_capacity(n);
    t.push(e.constant(0));
    for (a, b) in nx.iter().zip(y.bits()) {
        t.push(e.linear(&Expr::new().term(a, 1).term(b, 1))?);
    }
    let schedule = kogge_stone_schedule(n, &[width]);
    let combine = Lut::new(|x| if x / 3 == 1 { x % 3 } else { x / 3 });
    let combine_bit = Lut::new(|x| u64::from((if x / 3 == 1 { x % 3 } else { x / 3 }) == 2));
    let mut d = 1;
    let last = schedule.len();
    for (l, level) in schedule.iter().enumerate() {
        let nodes: Vec<usize> = (0..n).filter(|&p| level[p]).collect();
        let lut = if l + 1 == last { combine_bit } else { combine };
        let ops: Vec<_> = nodes
            .iter()
            .map(|&p| LutOp::new(Expr::new().term(&t[p], 3).term(&t[p - d], 1), vec![lut]))
            .collect();
        for (&p, out) in nodes.iter().zip(e.eval_layer(&ops)?) {
            t[p] = one(out)?;
        }
        d *= 2;
    }
    Ok(t[width].clone())
}

/// Which relation a comparator outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// `x < y`
    Lt,
    /// `x ≤ y`
    Le,
    /// `x > y`
    Gt,
    /// `x ≥ y`
    Ge,
}

/// An input of a comparison lookup: the status `x_i − y_i + 1` of one raw bit
/// position (indexed from the most significant bit), or a planned node's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CmpItem {
    Raw(usize),
    Node(usize),
}

/// One comparison lookup: its inputs, most significant first, and its layer.
/// Its output is a *trit* (the sign of its part, scaled by the weight its
/// consumer gives it) unless its part reaches the least significant bit: then
/// it is a *bit*, "greater so far" (or the relation, at the root).
#[derive(Clone, Debug)]
struct CmpNode {
    inputs: Vec<CmpItem>,
    layer: usize,
    bottom: bool,
}

/// How a comparison is cut up (see [`compare`]): `trit_chains` chains of
/// `pairs` position pairs each from the top, a bottom chain of
/// `bottom_pairs` pairs, and whatever positions remain, absorbed by the merge.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmpLayout {
    /// Chains from the top whose outputs are trits.
    pub trit_chains: usize,
    /// Position pairs per trit chain.
    pub pairs: usize,
    /// Position pairs of the bottom chain (at least one).
    pub bottom_pairs: usize,
}

/// The lookups of a comparison; the last node is the root.
#[derive(Clone, Debug, Default)]
struct CmpPlan {
    nodes: Vec<CmpNode>,
}

/// Weights of a lookup's inputs, most significant first. With the bits below
/// summarised as a bit `b` ("greater") the inputs read `… + 2t₂ + t₁ + b`
/// (`tᵢ` trits in −1..=1): "greater" iff that is ≥ 1, and four inputs span
/// 16 values. Without it, `4t₂ + 2t₁ + t₀` has the sign of the first non-zero
/// trit and three inputs span 15 values.
fn cmp_weights(k: usize, bottom_bit: bool) -> Vec<i64> {
    (0..k)
        .map(|j| {
            let from_bottom = (k - 1 - j) as u32;
            match (bottom_bit, from_bottom) {
                (true, 0) => 1,
                (true, d) => 1 << (d - 1),
                (false, d) => 1 << d,
            }
        })
        .collect()
}

impl CmpPlan {
    fn layers(&self) -> usize {
        self.nodes.iter().map(|n| n.layer + 1).max().unwrap_or(0)
    }

    /// Rounds of `threads` parallel bootstraps the plan needs.
    fn rounds(&self, threads: usize) -> usize {
        let mut per_layer = vec![0usize; self.layers()];
        for n in &self.nodes {
            per_layer[n.layer] += 1;
        }
        per_layer.iter().map(|&k| k.div_ceil(threads.max(1))).sum()
    }

    fn is_bottom(&self, item: CmpItem) -> bool {
        matches!(item, CmpItem::Node(i) if self.nodes[i].bottom)
    }

    /// Whether `items` can be one lookup: at most 3 inputs (4 above a bottom
    /// bit), raw positions only at weights 1 and 2 — a raw status has the
    /// noise of two fresh bits, 2·4² > 25 at weight 4, while a node's output is
    /// bootstrapped already scaled, at the noise of one fresh ciphertext.
    fn fits(&self, items: &[CmpItem]) -> bool {
        let bottom_bit = items.last().is_some_and(|&i| self.is_bottom(i));
        let max = if bottom_bit { 4 } else { 3 };
        !items.is_empty()
            && items.len() <= max
            && items
                .iter()
                .zip(self.weights(items))
                .all(|(i, w)| matches!(i, CmpItem::Node(_)) || w <= 2)
    }

    /// [`cmp_weights`] of a lookup on `items` (most significant first).
    fn weights(&self, items: &[CmpItem]) -> Vec<i64> {
        let bottom_bit = items.last().is_some_and(|&i| self.is_bottom(i));
        cmp_weights(items.len(), bottom_bit)
    }

    fn add(&mut self, inputs: Vec<CmpItem>, bottom: bool) -> CmpItem {
        let layer = inputs
            .iter()
            .map(|&i| match i {
                CmpItem::Raw(_) => 0,
                CmpItem::Node(n) => self.nodes[n].layer + 1,
            })
            .max()
            .unwrap_or(0);
        self.nodes.push(CmpNode {
            inputs,
            layer,
            bottom,
        });
        CmpItem::Node(self.nodes.len() - 1)
    }

    /// The plan of `layout` over `width` positions, if the layout covers them.
    ///
    /// Trit chains start with a lookup on their top two positions and add the
    /// next two per lookup (`status, raw, raw`); the bottom chain starts on the
    /// two lowest positions and adds the next two above (`raw, raw, bit`). All
    /// chains advance in lockstep. Positions left between chains join the
    /// merge, which groups the chain outputs greedily from the top.
    fn build(width: usize, layout: CmpLayout) -> Option<Self> {
        let CmpLayout {
            trit_chains: t,
            pairs: k,
            bottom_pairs: kb,
        } = layout;
        let used = 2 * (t * k + kb);
        if kb == 0 || (t > 0 && k == 0) || used > width {
            return None;
        }
        // Leftover positions: at most two under each trit chain (two on top
        // when there is none).
        let left = width - used;
        let gaps = t.max(1);
        if left > 2 * gaps {
            return None;
        }
        let mut plan = CmpPlan::default();
        let mut items = Vec::new();
        let mut pos = 0;
        for g in 0..gaps {
            if t > 0 {
                let mut status = plan.add(vec![CmpItem::Raw(pos), CmpItem::Raw(pos + 1)], false);
                for s in 1..k {
                    let p = pos + 2 * s;
                    status = plan.add(vec![status, CmpItem::Raw(p), CmpItem::Raw(p + 1)], false);
                }
                items.push(status);
                pos += 2 * k;
            }
            // The lowest gaps take the leftovers, two each.
            let here = left.saturating_sub(2 * (gaps - 1 - g)).min(2);
            items.extend((pos..pos + here).map(CmpItem::Raw));
            pos += here;
        }
        let low = width - 2;
        let mut bit = plan.add(vec![CmpItem::Raw(low), CmpItem::Raw(low + 1)], true);
        for s in 1..kb {
            let p = low - 2 * s;
            bit = plan.add(vec![CmpItem::Raw(p), CmpItem::Raw(p + 1), bit], true);
        }
        items.push(bit);
        while items.len() > 1 {
            let mut next = Vec::new();
            let mut i = 0;
            while i < items.len() {
                let rest = &items[i..];
                let k = (1..=rest.len().min(4))
                    .rev()
                    .find(|&k| plan.fits(&rest[..k]))
                    .unwrap_or(1);
                // Two items left over at the bottom of a long level wait for the
                // next one, where they can join a bigger group.
                let wait = k == 2 && rest.len() == 2 && items.len() > 3;
                if k == 1 || wait {
                    let pass = if wait { 2 } else { 1 };
                    next.extend_from_slice(&rest[..pass]);
                    i += pass;
                    continue;
                }
                let bottom = i + k == items.len();
                next.push(plan.add(rest[..k].to_vec(), bottom));
                i += k;
            }
            if next.len() == items.len() {
                return None;
            }
            items = next;
        }
        Some(plan)
    }

    /// The plan with the fewest rounds of `threads` parallel bootstraps, then
    /// the fewest bootstraps, then the fewest layers, over all layouts.
    fn best(width: usize, threads: usize) -> Self {
        let half = width / 2;
        let mut layouts = vec![CmpLayout {
            trit_chains: 0,
            pairs: 0,
            bottom_pairs: half,
        }];
        for t in 1..half {
            for k in 1..=half / t {
                for kb in k.saturating_sub(1).max(1)..=k + 1 {
                    layouts.push(CmpLayout {
                        trit_chains: t,
                        pairs: k,
                        bottom_pairs: kb,
                    });
                }
            }
        }
        layouts
            .into_iter()
            .filter_map(|l| Self::build(width, l))
            .min_by_key(|p| (p.rounds(threads), p.nodes.len(), p.layers()))
            .unwrap_or_default()
    }
}

/// Comparator: comparison statuses combined by chains of lookups that run side
/// by side, then merged.
///
/// A position's status `x_i − y_i` is a free linear combination. A lookup
/// combines two positions, a status and two positions, or three statuses
/// (`4t₂ + 2t₁ + t₀` has the sign of the first non-zero trit). The part that
/// reaches the least significant bit only needs "greater or not", a bit `b`,
/// and `4t₃ + 2t₂ + t₁ + b ≥ 1` combines four inputs in 16 values. So one
/// chain of lookups from the bottom costs `⌈w/2⌉` bootstraps; with `t`
/// threads the comparator picks the cut into chains and merges that needs the
/// fewest rounds of `t` bootstraps (depth about `w/4 + 1` on two threads, down
/// to logarithmic with `w/2` threads).
///
/// ```
/// use hecloud_circuits::{circuits::{self, Relation}, BitEngine, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 1 << 40, 64)?;
/// let y = EncryptedUint::encrypt_u128(&e, 12345, 64)?;
/// assert!(e.decrypt_bit(&circuits::compare(&e, &x, &y, Relation::Gt)?)?);
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn compare<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    rel: Relation,
) -> Result<WireOf<E>> {
    let width = same_width(x, y)?;
    run_compare(e, x, y, rel, &best_plan(width, e.threads()))
}

/// [`CmpPlan::best`], memoised: the search builds thousands of plans at 1024 bits.
fn best_plan(width: usize, threads: usize) -> std::sync::Arc<CmpPlan> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Plans = HashMap<(usize, usize), Arc<CmpPlan>>;
    static PLANS: OnceLock<Mutex<Plans>> = OnceLock::new();
    let plans = PLANS.get_or_init(Default::default);
    if let Some(p) = plans
        .lock()
        .ok()
        .and_then(|m| m.get(&(width, threads)).cloned())
    {
        return p;
    }
    let plan = Arc::new(CmpPlan::best(width, threads));
    if let Ok(mut m) = plans.lock() {
        m.insert((width, threads), plan.clone());
    }
    plan
}

/// [`compare`] with a given layout (`None` if it does not cover the width),
/// so that tests reach every plan shape.
#[doc(hidden)]
pub fn compare_with_layout<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    rel: Relation,
    layout: CmpLayout,
) -> Result<Option<WireOf<E>>> {
    let width = same_width(x, y)?;
    CmpPlan::build(width, layout)
        .map(|p| run_compare(e, x, y, rel, &p))
        .transpose()
}

fn run_compare<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    rel: Relation,
    plan: &CmpPlan,
) -> Result<WireOf<E>> {
    // The plan computes "a > b"; the other relations swap or negate it.
    let ((a, b), negate) = match rel {
        Relation::Gt => ((x, y), false),
        Relation::Le => ((x, y), true),
        Relation::Lt => ((y, x), false),
        Relation::Ge => ((y, x), true),
    };
    // Raw statuses, most significant first: τ = a_i − b_i + 1 (free).
    let raw: Vec<WireOf<E>> = a
        .bits()
        .iter()
        .zip(b.bits())
        .rev()
        .map(|(p, q)| e.linear(&Expr::new().term(p, 1).term(q, -1).plus(1)))
        .collect::<Result<_>>()?;
    // Each node's output is bootstrapped at the weight its consumer gives it.
    let mut scale = vec![None; plan.nodes.len()];
    for n in &plan.nodes {
        for (item, w) in n.inputs.iter().zip(plan.weights(&n.inputs)) {
            if let CmpItem::Node(c) = *item {
                scale[c] = Some(w);
            }
        }
    }
    let mut out: Vec<Option<WireOf<E>>> = vec![None; plan.nodes.len()];
    for layer in 0..plan.layers() {
        let ids: Vec<usize> = (0..plan.nodes.len())
            .filter(|&i| plan.nodes[i].layer == layer)
            .collect();
        let ops: Vec<LutOp<'_, E::Ct>> = ids
            .iter()
            .map(|&i| {
                let node = &plan.nodes[i];
                let weights = plan.weights(&node.inputs);
                let mut expr = Expr::new();
                // Value when every trit is 0 ("equal") and the bit, if any, is 0.
                let mut mid = 0;
                for (item, &w) in node.inputs.iter().zip(&weights) {
                    expr = match *item {
                        CmpItem::Raw(p) => expr.term(&raw[p], w),
                        CmpItem::Node(c) => {
                            let wire = out[c].as_ref().ok_or(CircuitError::EmptyOperands)?;
                            expr.term(wire, 1)
                        }
                    };
                    if !plan.is_bottom(*item) {
                        mid += w;
                    }
                }
                let lut = match (node.bottom, scale[i]) {
                    (false, s) => {
                        let s = s.unwrap_or(1);
                        Lut::new(move |v| (((v as i64 - mid).signum() + 1) * s) as u64)
                    }
                    (true, Some(_)) => Lut::new(move |v| u64::from(v as i64 > mid)),
                    (true, None) => Lut::new(move |v| u64::from((v as i64 > mid) != negate)),
                };
                Ok(LutOp::new(expr, vec![lut]))
            })
            .collect::<Result<_>>()?;
        let results = e.eval_layer(&ops)?;
        for (&i, r) in ids.iter().zip(results) {
            out[i] = Some(one(r)?);
        }
    }
    out.pop().flatten().ok_or(CircuitError::EmptyOperands)
}

/// `x < y` ([`compare`]).
pub fn lt<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<WireOf<E>> {
    compare(e, x, y, Relation::Lt)
}

/// `x > y` ([`compare`]).
pub fn gt<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<WireOf<E>> {
    compare(e, x, y, Relation::Gt)
}

/// `x == y` (`want_equal = true`) or `x != y`: pairs of positions then
/// OR-trees of up to 15 "differs" bits per lookup.
///
/// ```
/// use hecloud_circuits::{circuits, BitEngine, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 77, 7)?;
/// assert!(e.decrypt_bit(&circuits::eq(&e, &x, &x.clone(), true)?)?);
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn eq<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    want_equal: bool,
) -> Result<WireOf<E>> {
    let width = same_width(x, y)?;
    let d: Vec<WireOf<E>> = x
        .bits()
        .iter()
        .zip(y.bits())
        .map(|(a, b)| e.linear(&Expr::new().term(a, 1).term(b, -1).plus(1)))
        .collect::<Result<_>>()?;
    let fin = move |differs: bool| u64::from(differs != want_equal);
    if width == 2 {
        let x = Expr::new().term(&d[1], 2).term(&d[0], 1);
        return one(e.lookup(LutOp::new(x, vec![Lut::new(move |v| fin(v != 3))]))?);
    }
    // Level 1: "differs" bits of pairs (2·d₁ + d₀ = 3 iff both equal) and of a leftover.
    let ops: Vec<LutOp<'_, E::Ct>> = d
        .chunks(2)
        .map(|c| match c {
            [lo, hi] => LutOp::new(
                Expr::new().term(hi, 2).term(lo, 1),
                vec![Lut::new(|v| u64::from(v != 3))],
            ),
            _ => LutOp::new(
                Expr::new().term(&c[0], 1),
                vec![Lut::new(|v| u64::from(v != 1))],
            ),
        })
        .collect();
    let mut bits: Vec<WireOf<E>> = e
        .eval_layer(&ops)?
        .into_iter()
        .map(one)
        .collect::<Result<_>>()?;
    loop {
        let is_final = bits.len() <= 15;
        let ops: Vec<LutOp<'_, E::Ct>> = bits
            .chunks(15)
            .map(|c| {
                let x = c.iter().fold(Expr::new(), |x, b| x.term(b, 1));
                let lut = if is_final {
                    Lut::new(move |v| fin(v != 0))
                } else {
                    Lut::new(|v| u64::from(v != 0))
                };
                LutOp::new(x, vec![lut])
            })
            .collect();
        bits = e
            .eval_layer(&ops)?
            .into_iter()
            .map(one)
            .collect::<Result<_>>()?;
        if is_final {
            return one(bits);
        }
    }
}
