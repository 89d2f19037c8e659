//! Every circuit on the clear engine against big-integer arithmetic, on fresh
//! random values and named edge cases.

use hecloud_circuits::circuits::{self, AdderKind, CmpLayout, Relation, SumMode};
use hecloud_circuits::{
    BitEngine, CircuitError, ClearEngine, EncryptedUint, Expr, Lut, LutOp, UintOf, plan, with_cost,
};
use num_bigint::BigUint;
use num_traits::{One, Zero};
use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;

const WIDTHS: [usize; 6] = [2, 3, 8, 32, 64, 1024];
const COUNTS: [usize; 7] = [1, 2, 3, 4, 7, 16, 100];
const ADDERS: [AdderKind; 4] = [
    AdderKind::KoggeStone,
    AdderKind::Ripple,
    AdderKind::CarryChains,
    AdderKind::Auto,
];

fn rng() -> ChaCha20Rng {
    hecloud_math::testing::rng()
}

fn random(rng: &mut ChaCha20Rng, width: usize) -> BigUint {
    let mut bytes = vec![0u8; width.div_ceil(8)];
    rng.fill_bytes(&mut bytes);
    BigUint::from_bytes_le(&bytes) % (BigUint::one() << width)
}

fn all_ones(width: usize) -> BigUint {
    (BigUint::one() << width) - 1u32
}

/// Random values plus zero, all-ones, one, and the top bit alone.
fn samples(rng: &mut ChaCha20Rng, width: usize) -> Vec<BigUint> {
    let mut v: Vec<BigUint> = (0..4).map(|_| random(rng, width)).collect();
    v.extend([
        BigUint::zero(),
        all_ones(width),
        BigUint::one(),
        BigUint::one() << (width - 1),
    ]);
    v
}

fn enc(e: &ClearEngine, v: &BigUint, w: usize) -> UintOf<ClearEngine> {
    EncryptedUint::encrypt_biguint(e, v, w).unwrap()
}

#[test]
fn counters_count_every_input_pattern() {
    let e = ClearEngine::new();
    for k in 1..=15usize {
        // All patterns for small k, random ones for large k.
        let patterns: Vec<u32> = if k <= 10 {
            (0..1u32 << k).collect()
        } else {
            (0..300).map(|_| rng().next_u32() % (1 << k)).collect()
        };
        for p in patterns {
            let bits: Vec<_> = (0..k)
                .map(|i| e.encrypt_bit((p >> i) & 1 == 1).unwrap())
                .collect();
            let refs: Vec<_> = bits.iter().collect();
            let out = e.counter(&refs).unwrap();
            let got: u32 = out
                .iter()
                .enumerate()
                .map(|(i, b)| u32::from(e.decrypt_bit(b).unwrap()) << i)
                .sum();
            assert_eq!(got, p.count_ones(), "k={k} pattern={p:b}");
        }
    }
    let sixteen: Vec<_> = (0..16).map(|_| e.encrypt_bit(true).unwrap()).collect();
    let refs: Vec<_> = sixteen.iter().collect();
    assert_eq!(
        e.counter(&refs).unwrap_err(),
        CircuitError::CounterTooWide { got: 16, max: 15 }
    );
}

#[test]
fn gates_match_truth_tables() {
    let e = ClearEngine::new();
    for s in [false, true] {
        for a in [false, true] {
            for b in [false, true] {
                let (ws, wa, wb) = (
                    e.encrypt_bit(s).unwrap(),
                    e.encrypt_bit(a).unwrap(),
                    e.encrypt_bit(b).unwrap(),
                );
                let d = |w| e.decrypt_bit(&w).unwrap();
                assert_eq!(d(e.xor(&wa, &wb).unwrap()), a ^ b);
                assert_eq!(d(e.and(&wa, &wb).unwrap()), a & b);
                assert_eq!(d(e.or(&wa, &wb).unwrap()), a | b);
                assert_eq!(d(e.not(&wa).unwrap()), !a);
                assert_eq!(d(e.mux(&ws, &wa, &wb).unwrap()), if s { a } else { b });
                let (sum, carry) = circuits::full_adder(&e, &ws, &wa, &wb).unwrap();
                let n = u8::from(s) + u8::from(a) + u8::from(b);
                assert_eq!((d(sum), d(carry)), (n & 1 == 1, n >= 2));
            }
        }
    }
}

#[test]
fn engine_rejects_lookups_outside_the_guarantees() {
    let e = ClearEngine::new();
    let b: Vec<_> = (0..16).map(|_| e.encrypt_bit(true).unwrap()).collect();
    // 16 bits can reach 16: outside 0..16.
    let x = b.iter().fold(Expr::new(), |x, w| x.term(w, 1));
    assert!(matches!(
        plan(&LutOp::new(x, vec![Lut::new(|v| v)])),
        Err(CircuitError::OutOfPlaintextSpace { .. })
    ));
    // 3a + 3b - ... : noise 9 + 9 + 9 = 27 > 25 although the range fits.
    let x = Expr::new()
        .term(&b[0], 3)
        .term(&b[1], 3)
        .term(&b[2], -3)
        .plus(3);
    assert!(matches!(
        plan(&LutOp::new(x, vec![Lut::new(|v| v)])),
        Err(CircuitError::NoiseBudgetExceeded { .. })
    ));
    // Many-LUT grouping: range 0..=7 gives two tables per bootstrap.
    let x = b[..7].iter().fold(Expr::new(), |x, w| x.term(w, 1));
    let p = plan(&LutOp::new(
        x,
        vec![
            Lut::new(|v| v & 1),
            Lut::new(|v| v >> 1 & 1),
            Lut::new(|v| v >> 2),
        ],
    ))
    .unwrap();
    assert_eq!((p.per_bootstrap, p.bootstraps), (2, 2));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let e = ClearEngine::new();
    assert!(matches!(
        EncryptedUint::encrypt_u128(&e, 0, 1),
        Err(CircuitError::WidthOutOfRange { width: 1, .. })
    ));
    assert!(matches!(
        EncryptedUint::encrypt_biguint(&e, &BigUint::zero(), 1025),
        Err(CircuitError::WidthOutOfRange { width: 1025, .. })
    ));
    assert!(matches!(
        EncryptedUint::encrypt_u128(&e, 8, 3),
        Err(CircuitError::ValueTooWide { bits: 4, width: 3 })
    ));
    let x = EncryptedUint::encrypt_u128(&e, 1, 8).unwrap();
    let y = EncryptedUint::encrypt_u128(&e, 1, 9).unwrap();
    let mismatch = CircuitError::WidthMismatch { left: 8, right: 9 };
    assert_eq!(
        circuits::add(&e, &x, &y, AdderKind::Auto).unwrap_err(),
        mismatch
    );
    assert_eq!(
        circuits::sub(&e, &x, &y, AdderKind::Auto).unwrap_err(),
        mismatch
    );
    assert_eq!(circuits::lt(&e, &x, &y).unwrap_err(), mismatch);
    assert_eq!(circuits::lt_published(&e, &x, &y).unwrap_err(), mismatch);
    assert_eq!(circuits::eq(&e, &x, &y, true).unwrap_err(), mismatch);
    assert_eq!(circuits::min_max(&e, &x, &y).unwrap_err(), mismatch);
    assert_eq!(
        circuits::sum(&e, &[x.clone(), y], SumMode::Modular, AdderKind::Auto).unwrap_err(),
        mismatch
    );
    assert_eq!(
        circuits::sum::<ClearEngine>(&e, &[], SumMode::Modular, AdderKind::Auto).unwrap_err(),
        CircuitError::EmptyOperands
    );
    let big = EncryptedUint::encrypt_u128(&e, 1, 1024).unwrap();
    assert!(matches!(
        circuits::sum(&e, &[big.clone(), big], SumMode::Full, AdderKind::Auto),
        Err(CircuitError::WidthOutOfRange { width: 1025, .. })
    ));
    let wire = e.encrypt_value(2, 3).unwrap();
    assert!(e.encrypt_value(4, 3).is_err());
    assert!(e.encrypt_value(1, 16).is_err());
    assert_eq!(
        e.decrypt_bit(&wire).unwrap_err(),
        CircuitError::NotABit { value: 2 }
    );
}

#[test]
fn multi_operand_sums_match_big_integers() {
    let mut rng = rng();
    for &w in &WIDTHS {
        for &n in &COUNTS {
            // Random operands, plus an all-ones run that overflows.
            for all_max in [false, true] {
                let e = ClearEngine::new();
                let vals: Vec<BigUint> = (0..n)
                    .map(|_| {
                        if all_max {
                            all_ones(w)
                        } else {
                            random(&mut rng, w)
                        }
                    })
                    .collect();
                let xs: Vec<_> = vals.iter().map(|v| enc(&e, v, w)).collect();
                let total: BigUint = vals.iter().sum();
                for mode in [SumMode::Modular, SumMode::Full] {
                    let kinds: &[AdderKind] = if w == 1024 && n == 100 {
                        &[AdderKind::Auto]
                    } else {
                        &ADDERS
                    };
                    for &kind in kinds {
                        let r = circuits::sum(&e, &xs, mode, kind);
                        let full_w = w + (usize::BITS - (n - 1).leading_zeros()) as usize;
                        if mode == SumMode::Full && full_w > 1024 {
                            assert!(matches!(r, Err(CircuitError::WidthOutOfRange { .. })));
                            continue;
                        }
                        let r = r.unwrap();
                        let (out_w, expect) = match mode {
                            SumMode::Modular => (w, &total % (BigUint::one() << w)),
                            SumMode::Full => (full_w, total.clone()),
                        };
                        assert_eq!(r.width(), out_w, "w={w} n={n} {mode:?}");
                        assert_eq!(
                            r.decrypt_biguint(&e).unwrap(),
                            expect,
                            "w={w} n={n} {mode:?} {kind:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn add_and_sub_match_big_integers() {
    let mut rng = rng();
    for &w in &WIDTHS {
        let m = BigUint::one() << w;
        let vals = samples(&mut rng, w);
        for x in &vals {
            for y in vals
                .iter()
                .take(if w == 1024 { 3 } else { vals.len() })
                .chain([x])
            {
                let e = ClearEngine::new();
                let (cx, cy) = (enc(&e, x, w), enc(&e, y, w));
                for kind in ADDERS {
                    let s = circuits::add(&e, &cx, &cy, kind).unwrap();
                    assert_eq!(
                        s.decrypt_biguint(&e).unwrap(),
                        (x + y) % &m,
                        "w={w} {kind:?}"
                    );
                    let (s, c) = circuits::add_with_carry(&e, &cx, &cy, kind).unwrap();
                    assert_eq!(s.decrypt_biguint(&e).unwrap(), (x + y) % &m);
                    assert_eq!(
                        e.decrypt_bit(&c).unwrap(),
                        x + y >= m,
                        "carry w={w} {kind:?}"
                    );
                    let d = circuits::sub(&e, &cx, &cy, kind).unwrap();
                    assert_eq!(
                        d.decrypt_biguint(&e).unwrap(),
                        (x + &m - y) % &m,
                        "sub w={w} {kind:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn comparisons_equality_and_min_max_match_big_integers() {
    let mut rng = rng();
    for &w in &WIDTHS {
        let mut vals = samples(&mut rng, w);
        // Values differing only in the lowest bit, and only in the top bit.
        let r = random(&mut rng, w);
        vals.push(&r ^ BigUint::one());
        vals.push(r.clone());
        vals.push(&r ^ (BigUint::one() << (w - 1)));
        for x in &vals {
            for y in &vals {
                let e = ClearEngine::new();
                let (cx, cy) = (enc(&e, x, w), enc(&e, y, w));
                let bit = |b: Result<_, CircuitError>| e.decrypt_bit(&b.unwrap()).unwrap();
                assert_eq!(
                    bit(circuits::lt_published(&e, &cx, &cy)),
                    x < y,
                    "published w={w}"
                );
                assert_eq!(
                    bit(circuits::compare(&e, &cx, &cy, Relation::Lt)),
                    x < y,
                    "lt w={w} {x} {y}"
                );
                assert_eq!(bit(circuits::compare(&e, &cx, &cy, Relation::Le)), x <= y);
                assert_eq!(bit(circuits::compare(&e, &cx, &cy, Relation::Gt)), x > y);
                assert_eq!(bit(circuits::compare(&e, &cx, &cy, Relation::Ge)), x >= y);
                assert_eq!(bit(circuits::eq(&e, &cx, &cy, true)), x == y, "eq w={w}");
                assert_eq!(bit(circuits::eq(&e, &cx, &cy, false)), x != y);
                let (lo, hi) = circuits::min_max(&e, &cx, &cy).unwrap();
                assert_eq!(lo.decrypt_biguint(&e).unwrap(), x.min(y).clone());
                assert_eq!(hi.decrypt_biguint(&e).unwrap(), x.max(y).clone());
            }
        }
    }
}

#[test]
fn every_comparator_layout_matches_big_integers() {
    let mut rng = rng();
    let mut shapes = 0;
    for w in [2usize, 3, 4, 5, 7, 8, 9, 16, 33, 64] {
        let mut pairs: Vec<(BigUint, BigUint)> = (0..4)
            .map(|_| (random(&mut rng, w), random(&mut rng, w)))
            .collect();
        let r = random(&mut rng, w);
        pairs.extend([
            (BigUint::zero(), all_ones(w)),
            (all_ones(w), all_ones(w)),
            (r.clone(), r.clone()),
            (r.clone(), &r ^ BigUint::one()),
            (r.clone(), &r ^ (BigUint::one() << (w - 1))),
        ]);
        for trit_chains in 0..=w / 2 {
            for pairs_each in 0..=w / 2 {
                for bottom_pairs in 0..=w / 2 {
                    let layout = CmpLayout {
                        trit_chains,
                        pairs: pairs_each,
                        bottom_pairs,
                    };
                    let e = ClearEngine::new();
                    let (zero, ones) = (enc(&e, &BigUint::zero(), w), enc(&e, &all_ones(w), w));
                    let probe =
                        circuits::compare_with_layout(&e, &zero, &ones, Relation::Lt, layout);
                    if probe.unwrap().is_none() {
                        continue;
                    }
                    shapes += 1;
                    for (x, y) in &pairs {
                        let (cx, cy) = (enc(&e, x, w), enc(&e, y, w));
                        for (rel, want) in [
                            (Relation::Lt, x < y),
                            (Relation::Le, x <= y),
                            (Relation::Gt, x > y),
                            (Relation::Ge, x >= y),
                        ] {
                            let got = circuits::compare_with_layout(&e, &cx, &cy, rel, layout);
                            assert_eq!(
                                e.decrypt_bit(&got.unwrap().unwrap()).unwrap(),
                                want,
                                "w={w} {layout:?} {rel:?} {x} {y}"
                            );
                        }
                    }
                }
            }
        }
    }
    assert!(shapes > 100, "only {shapes} layouts covered");
}

#[test]
fn fast_comparator_is_cheaper_than_the_published_one() {
    let e = ClearEngine::new();
    for &w in &[8usize, 32, 64, 1024] {
        let (x, y) = (enc(&e, &all_ones(w), w), enc(&e, &BigUint::zero(), w));
        let (_, published) = with_cost(&e, || circuits::lt_published(&e, &x, &y).unwrap());
        let pool = |t| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap()
        };
        // One thread: a single chain, one bootstrap per pair of positions.
        let (_, one) = pool(1).install(|| with_cost(&e, || circuits::lt(&e, &x, &y).unwrap()));
        assert_eq!(one.bootstraps as usize, w / 2, "w={w}: {one:?}");
        assert!(one.bootstraps < published.bootstraps);
        // Two threads: two chains side by side, depth about w/4.
        let (_, two) = pool(2).install(|| with_cost(&e, || circuits::lt(&e, &x, &y).unwrap()));
        assert!(two.bootstraps <= one.bootstraps + 1, "w={w}: {two:?}");
        assert!(two.depth as usize <= w / 4 + 2, "w={w}: {two:?}");
        // Many threads: logarithmic depth.
        let (_, wide) = pool(64).install(|| with_cost(&e, || circuits::lt(&e, &x, &y).unwrap()));
        assert!(wide.depth <= 2 * u64::from(w.ilog2()), "w={w}: {wide:?}");
    }
}
