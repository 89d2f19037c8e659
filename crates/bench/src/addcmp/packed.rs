//! Our packed-bit BGV rows of `hecloud bench addcmp`
//! ([`hecloud_circuits::packed`], the paper's HElib row on our engine):
//!
//! - **bits in slots** (HElib's layout, one number per ciphertext): the
//!   latency of one comparison of two w-bit numbers and of one sum of n
//!   numbers;
//! - **bit-sliced** (one ciphertext per bit position, one number per slot):
//!   N sums or comparisons in one run, reported per number.
//!
//! Every circuit runs with a [`LocalRefresher`] (the key holder's decrypt
//! and re-encrypt in the same process, no network), whose refreshes are in
//! the time; encryption of the inputs is not. Every result is decrypted and
//! checked against the plain integers. The primitive costs measured on the
//! way ([`Primitives`]) calibrate `hecloud advise`.

use std::sync::Arc;
use std::time::Duration;

use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, Preset};
use hecloud_circuits::packed::{
    self, BitCircuit, CircuitStats, Depth, LocalRefresher, Refresher, SlicedUints, SlotUint,
    sliced, slot_rotations, slots,
};
use num_bigint::BigUint;
use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;

use super::{Op, Row, param_bits, system};
use crate::timing::{median_time, once};

/// The packed cases a run measures.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Widths of the comparisons in slots.
    pub slot_cmp_widths: Vec<usize>,
    /// n of the sums of 64-bit numbers in slots.
    pub slot_sum_ns: Vec<usize>,
    /// n of the bit-sliced sums of 32-bit numbers.
    pub sliced_sum_n: usize,
    /// Operands encrypted and reduced at a time in the bit-sliced sum.
    pub sliced_chunk: usize,
    /// Width of the bit-sliced comparisons.
    pub sliced_cmp_width: usize,
}

impl Plan {
    /// Every width of figure 18 in slots, the sums of figure 8 (all n, or
    /// up to 64 with `quick`), the bit-sliced sum of 1024 (64 with `quick`)
    /// and the bit-sliced 1024-bit comparison.
    pub fn new(quick: bool) -> Self {
        let ns = super::paper::NS;
        Self {
            slot_cmp_widths: super::paper::WIDTHS.to_vec(),
            slot_sum_ns: ns.iter().copied().filter(|&n| !quick || n <= 64).collect(),
            sliced_sum_n: if quick { 64 } else { 1024 },
            sliced_chunk: 64,
            sliced_cmp_width: 1024,
        }
    }
}

/// Runs `plan` at the `bgv-n13` preset (the fastest of our presets for
/// these circuits: its products cost a quarter of `bgv-n14`'s, and the
/// refreshes its depth of 3 needs cost less than the difference), every
/// result checked; returns the rows and the primitive costs.
pub fn run(
    plan: &Plan,
    samples: usize,
    rng: &mut ChaCha20Rng,
) -> anyhow::Result<(Vec<Row>, Primitives)> {
    let params = Preset::N13.build()?;
    let s = Setup::new(&params)?;
    let prims = primitives(&s, samples)?;
    eprintln!(
        "ours packed at {}: mul_relin {:.2} ms, rotate {:.2} ms, refresh {:.2} ms",
        Preset::N13.name(),
        prims.mul_s * 1e3,
        prims.rotate_s * 1e3,
        prims.refresh_s * 1e3
    );
    let mut rows = Vec::new();
    for &w in &plan.slot_cmp_widths {
        rows.push(slot_cmp(&s, w, rng)?);
    }
    for &n in &plan.slot_sum_ns {
        rows.push(slot_sum(&s, 64, n, rng)?);
    }
    rows.push(sliced_cmp(&s, plan.sliced_cmp_width, rng)?);
    rows.push(sliced_sum(
        &s,
        32,
        plan.sliced_sum_n,
        plan.sliced_chunk,
        rng,
    )?);
    Ok((rows, prims))
}

/// Keys, encoder, evaluator and a local refresher for one parameter set.
#[derive(Debug)]
pub struct Setup {
    params: Arc<BgvParameters>,
    keys: Arc<KeySet>,
    enc: Encoder,
    eval: Evaluator,
    refresher: LocalRefresher,
}

impl Setup {
    /// Generates the keys, with the row rotations the bits-in-slots circuits
    /// use.
    pub fn new(params: &Arc<BgvParameters>) -> anyhow::Result<Self> {
        let keys = Arc::new(KeySet::generate(
            params,
            &slot_rotations(params.n()),
            false,
        )?);
        Ok(Self {
            params: params.clone(),
            enc: Encoder::new(params),
            eval: Evaluator::new(params, keys.evaluation_keys()),
            refresher: LocalRefresher::new(keys.clone()),
            keys,
        })
    }

    fn circuit(&self) -> anyhow::Result<BitCircuit<'_>> {
        Ok(BitCircuit::new(&self.eval)?.with_refresher(&self.refresher))
    }

    fn row(&self, system: &'static str, op: Op, bits: usize, n: usize, s: f64) -> Row {
        let mut r = Row::measured(system, op, Some(bits), n);
        r.ring = Some(self.params.n());
        r.seconds = s;
        r
    }

    fn notes(&self, stats: &CircuitStats, extra: &str) -> String {
        format!(
            "{}; {} products, {} rotations, {} refreshes in {} rounds, depth {}{extra}",
            param_bits(&self.params),
            stats.products,
            stats.rotations,
            stats.refreshes,
            stats.refresh_rounds,
            stats.depth
        )
    }
}

/// The primitive costs of a parameter set, in seconds (the packed half of
/// the `advise` calibration).
#[derive(Debug, Clone, Copy)]
pub struct Primitives {
    /// Slots per ciphertext.
    pub slots: usize,
    /// A product, relinearized and switched one level down.
    pub mul_s: f64,
    /// A row rotation.
    pub rotate_s: f64,
    /// The local refresh of one ciphertext (mask, decrypt, encrypt, unmask).
    pub refresh_s: f64,
    /// Products in a row the parameters allow.
    pub depth: usize,
}

/// Times the primitives at the top level.
pub fn primitives(s: &Setup, samples: usize) -> anyhow::Result<Primitives> {
    let ct = s.keys.encrypt(&s.enc.encode(&[1, 0, 1])?)?;
    let time = |op: &mut dyn FnMut()| median_time(samples, Duration::ZERO, op).as_secs_f64();
    let mul_s = time(&mut || {
        std::hint::black_box(s.eval.mul_relin(&ct, &ct).expect("mul_relin"));
    });
    let rotate_s = time(&mut || {
        std::hint::black_box(s.eval.rotate_rows(&ct, -1).expect("rotate"));
    });
    let low = s.eval.mod_switch_to(&ct, 0)?;
    let refresh_s = time(&mut || {
        std::hint::black_box(s.refresher.refresh(&low).expect("refresh"));
    });
    Ok(Primitives {
        slots: s.params.n(),
        mul_s,
        rotate_s,
        refresh_s,
        depth: s.params.depth(),
    })
}

fn random_uint(rng: &mut ChaCha20Rng, bits: usize) -> BigUint {
    let mut bytes = vec![0u8; bits.div_ceil(8)];
    rng.fill_bytes(&mut bytes);
    let v = BigUint::from_bytes_le(&bytes);
    v % (BigUint::from(1u8) << bits)
}

fn mod_sum(values: impl IntoIterator<Item = BigUint>, bits: usize) -> BigUint {
    values.into_iter().sum::<BigUint>() % (BigUint::from(1u8) << bits)
}

/// One comparison X < Y of two `bits`-bit numbers in slots (X and Y equal
/// but for a random low bit, the carry's longest path), checked.
pub fn slot_cmp(s: &Setup, bits: usize, rng: &mut ChaCha20Rng) -> anyhow::Result<Row> {
    let y = random_uint(rng, bits);
    let x = &y ^ BigUint::from(rng.next_u32() & 1);
    let (ex, ey) = (
        SlotUint::encrypt(&s.keys, &s.enc, &x, bits)?,
        SlotUint::encrypt(&s.keys, &s.enc, &y, bits)?,
    );
    let bc = s.circuit()?;
    let (res, t) = once(|| bc.measure(|| slots::lt(&bc, &ex, &ey)));
    let (lt, stats) = res?;
    anyhow::ensure!(
        lt.decrypt(&s.keys, &s.enc)? == (x < y),
        "our bits-in-slots lt of {bits} bits decrypted wrongly"
    );
    let mut row = s.row(system::OURS_PACKED, Op::Cmp, bits, 2, t.as_secs_f64());
    row.numbers = 1;
    row.params = s.notes(&stats, "; latency of one comparison");
    eprintln!(
        "ours packed bits in slots: {bits}-bit lt at N = {}: {:.3} s",
        s.params.n(),
        row.seconds
    );
    Ok(row)
}

/// One sum of `n` numbers of `bits` bits in slots (mod 2^bits), checked.
pub fn slot_sum(s: &Setup, bits: usize, n: usize, rng: &mut ChaCha20Rng) -> anyhow::Result<Row> {
    let values: Vec<BigUint> = (0..n).map(|_| random_uint(rng, bits)).collect();
    let cts = values
        .iter()
        .map(|v| SlotUint::encrypt(&s.keys, &s.enc, v, bits))
        .collect::<packed::Result<Vec<_>>>()?;
    let bc = s.circuit()?;
    let (res, t) = once(|| bc.measure(|| slots::sum(&bc, &cts)));
    let (sum, stats) = res?;
    anyhow::ensure!(
        sum.decrypt(&s.keys, &s.enc)? == mod_sum(values, bits),
        "our bits-in-slots sum of {n} decrypted wrongly"
    );
    let mut row = s.row(system::OURS_PACKED, Op::Sum, bits, n, t.as_secs_f64());
    row.numbers = n;
    row.params = s.notes(&stats, "; latency of one sum");
    eprintln!(
        "ours packed bits in slots: sum of {n} {bits}-bit at N = {}: {:.3} s",
        s.params.n(),
        row.seconds
    );
    Ok(row)
}

/// N sums of `n` numbers of `bits` bits each, bit-sliced (mod 2^bits),
/// checked. The operands are encrypted and reduced `chunk` at a time (each
/// chunk's sum one sliced number, then the sum of those), so that memory
/// holds one chunk of inputs: a few more Kogge–Stone adders than one tree
/// of all n, never fewer products.
pub fn sliced_sum(
    s: &Setup,
    bits: usize,
    n: usize,
    chunk: usize,
    rng: &mut ChaCha20Rng,
) -> anyhow::Result<Row> {
    let count = s.params.n();
    let mut want = vec![BigUint::default(); count];
    let bc = s.circuit()?;
    let mut partials = Vec::new();
    let mut elapsed = Duration::ZERO;
    // One circuit for every chunk and the final sum: its counters cover
    // the whole job (encryption does not touch them).
    let before = bc.stats();
    let mut left = n;
    while left > 0 {
        let k = chunk.min(left);
        left -= k;
        let operands = (0..k)
            .map(|_| {
                let v: Vec<BigUint> = (0..count).map(|_| random_uint(rng, bits)).collect();
                want.iter_mut().zip(&v).for_each(|(w, x)| *w += x);
                SlicedUints::encrypt(&s.keys, &s.enc, &v, bits)
            })
            .collect::<packed::Result<Vec<_>>>()?;
        let (part, t) = once(|| sliced::sum(&bc, &operands));
        elapsed += t;
        partials.push(part?);
    }
    let (out, t) = once(|| sliced::sum(&bc, &partials));
    elapsed += t;
    let out = out?;
    let mut total = bc.stats() - before;
    total.depth = out.depth();
    let want: Vec<BigUint> = want.into_iter().map(|w| mod_sum([w], bits)).collect();
    anyhow::ensure!(
        out.decrypt(&s.keys, &s.enc)? == want,
        "our bit-sliced sums of {n} decrypted wrongly"
    );
    let mut row = s.row(system::OURS_SLICED, Op::Sum, bits, n, elapsed.as_secs_f64());
    row.numbers = n * count;
    row.params = s.notes(
        &total,
        &format!("; {count} sums at once, in chunks of {chunk} operands"),
    );
    eprintln!(
        "ours bit-sliced: {count} sums of {n} {bits}-bit at N = {count}: {:.3} s ({:.3e} s per number)",
        row.seconds,
        row.per_number_s()
    );
    Ok(row)
}

/// N comparisons X < Y of `bits`-bit numbers, bit-sliced, checked.
pub fn sliced_cmp(s: &Setup, bits: usize, rng: &mut ChaCha20Rng) -> anyhow::Result<Row> {
    let count = s.params.n();
    let ys: Vec<BigUint> = (0..count).map(|_| random_uint(rng, bits)).collect();
    // Half the pairs differ only in their low bit: the carry's longest path.
    let xs: Vec<BigUint> = ys
        .iter()
        .enumerate()
        .map(|(j, y)| {
            if j % 2 == 0 {
                y ^ BigUint::from(rng.next_u32() & 1)
            } else {
                random_uint(rng, bits)
            }
        })
        .collect();
    let (ex, ey) = (
        SlicedUints::encrypt(&s.keys, &s.enc, &xs, bits)?,
        SlicedUints::encrypt(&s.keys, &s.enc, &ys, bits)?,
    );
    let bc = s.circuit()?;
    let (res, t) = once(|| bc.measure(|| sliced::lt(&bc, &ex, &ey)));
    let (lt, stats) = res?;
    let got = lt.decrypt_bits(&s.keys, &s.enc)?;
    let want: Vec<bool> = xs.iter().zip(&ys).map(|(x, y)| x < y).collect();
    anyhow::ensure!(
        got[..count] == want[..],
        "our bit-sliced comparisons decrypted wrongly"
    );
    let mut row = s.row(system::OURS_SLICED, Op::Cmp, bits, 2, t.as_secs_f64());
    row.numbers = count;
    row.params = s.notes(&stats, &format!("; {count} comparisons at once"));
    eprintln!(
        "ours bit-sliced: {count} {bits}-bit lt at N = {count}: {:.3} s ({:.3e} s per comparison)",
        row.seconds,
        row.per_number_s()
    );
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hecloud_bgv::params::test_literal;
    use rand_core::SeedableRng;

    #[test]
    fn packed_rows_are_checked_and_counted() {
        let params = BgvParameters::new_insecure_for_tests(test_literal(10, 3, 65537)).unwrap();
        let s = Setup::new(&params).unwrap();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let cmp = slot_cmp(&s, 8, &mut rng).unwrap();
        assert!(cmp.seconds > 0.0 && cmp.params.contains("products"));
        let sum = slot_sum(&s, 8, 4, &mut rng).unwrap();
        assert_eq!((sum.n, sum.numbers), (4, 4));
        let sl = sliced_sum(&s, 4, 5, 2, &mut rng).unwrap();
        assert_eq!(sl.numbers, 5 * 1024);
        let lt = sliced_cmp(&s, 4, &mut rng).unwrap();
        assert_eq!(lt.numbers, 1024);
        let p = primitives(&s, 1).unwrap();
        assert!(p.mul_s > 0.0 && p.refresh_s > 0.0 && p.depth >= 1);
    }
}
