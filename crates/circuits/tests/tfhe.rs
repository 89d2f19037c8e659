//! A few small circuits on the TFHE engine, checked against plaintext
//! arithmetic and against the clear engine's bootstrap counts. Keys are
//! generated once for this test binary. Wide widths on TFHE run in the bench
//! (`hecloud bench tfhe`) and in the ignored test below.

mod common;

use common::Tripwire;
use hecloud_circuits::circuits::{self, AdderKind, CmpLayout, Relation, SumMode};
use hecloud_circuits::{
    BitEngine, CircuitError, ClearEngine, EncryptedUint, TfheEngine, with_cost,
};
use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

/// Keys generated once; each test gets its own counters.
fn engine() -> TfheEngine {
    static E: OnceLock<TfheEngine> = OnceLock::new();
    E.get_or_init(TfheEngine::generate).fork()
}

fn rng() -> ChaCha20Rng {
    hecloud_math::testing::rng()
}

#[test]
fn fused_counters_and_gates_decrypt_correctly() {
    let e = &engine();
    let mut rng = rng();
    // (3,2), (7,3) and (15,4) counters: 1, 2 and 4 bootstraps.
    for (k, boots) in [(3usize, 1u64), (7, 2), (15, 4)] {
        let p = rng.next_u32() & ((1 << k) - 1);
        let bits: Vec<_> = (0..k)
            .map(|i| e.encrypt_bit((p >> i) & 1 == 1).unwrap())
            .collect();
        let refs: Vec<_> = bits.iter().collect();
        let (out, cost) = with_cost(e, || e.counter(&refs).unwrap());
        let got: u32 = out
            .iter()
            .enumerate()
            .map(|(i, b)| u32::from(e.decrypt_bit(b).unwrap()) << i)
            .sum();
        assert_eq!(got, p.count_ones(), "k={k}");
        assert_eq!(cost.bootstraps, boots, "k={k}");
    }
    let (a, b, s) = (
        rng.next_u32() & 1 == 1,
        rng.next_u32() & 1 == 1,
        rng.next_u32() & 1 == 1,
    );
    let (wa, wb, ws) = (
        e.encrypt_bit(a).unwrap(),
        e.encrypt_bit(b).unwrap(),
        e.encrypt_bit(s).unwrap(),
    );
    assert_eq!(e.decrypt_bit(&e.xor(&wa, &wb).unwrap()).unwrap(), a ^ b);
    assert_eq!(e.decrypt_bit(&e.and(&wa, &wb).unwrap()).unwrap(), a & b);
    assert_eq!(e.decrypt_bit(&e.or(&wa, &wb).unwrap()).unwrap(), a | b);
    assert_eq!(e.decrypt_bit(&e.not(&wa).unwrap()).unwrap(), !a);
    assert_eq!(
        e.decrypt_bit(&e.mux(&ws, &wa, &wb).unwrap()).unwrap(),
        if s { a } else { b }
    );
}

#[test]
fn sum_of_three_8_bit_numbers() {
    let e = &engine();
    let mut rng = rng();
    let mut vals: Vec<u128> = (0..3).map(|_| u128::from(rng.next_u32() & 0xff)).collect();
    vals[2] = 0xff; // keep an all-ones operand: the sum always carries
    let xs: Vec<_> = vals
        .iter()
        .map(|&v| EncryptedUint::encrypt_u128(e, v, 8).unwrap())
        .collect();
    let total: u128 = vals.iter().sum();
    for (mode, kind, expect) in [
        (SumMode::Full, AdderKind::Ripple, total),
        (SumMode::Modular, AdderKind::KoggeStone, total % 256),
    ] {
        let (s, cost) = with_cost(e, || circuits::sum(e, &xs, mode, kind).unwrap());
        assert_eq!(s.decrypt_u128(e).unwrap(), expect, "{mode:?} {kind:?}");
        // The clear engine runs the same circuit with the same bootstraps and depth.
        let c = ClearEngine::new();
        let cx: Vec<_> = vals
            .iter()
            .map(|&v| EncryptedUint::encrypt_u128(&c, v, 8).unwrap())
            .collect();
        let (_, clear_cost) = with_cost(&c, || circuits::sum(&c, &cx, mode, kind).unwrap());
        assert_eq!(cost, clear_cost);
    }
}

#[test]
fn comparisons_and_min_max_at_8_bits() {
    let e = &engine();
    let mut rng = rng();
    let r = u128::from(rng.next_u32() & 0xff);
    for (x, y) in [
        (r, u128::from(rng.next_u32() & 0xff)),
        (r, r),
        (0, 255),
        (255, 254),
    ] {
        let (cx, cy) = (
            EncryptedUint::encrypt_u128(e, x, 8).unwrap(),
            EncryptedUint::encrypt_u128(e, y, 8).unwrap(),
        );
        assert_eq!(
            e.decrypt_bit(&circuits::compare(e, &cx, &cy, Relation::Lt).unwrap())
                .unwrap(),
            x < y,
            "{x} {y}"
        );
        // Other plan shapes: every pair in parallel, then merges of three
        // statuses over a bottom bit; one trit chain beside the bottom chain.
        for (trit_chains, pairs, bottom_pairs) in [(3, 1, 1), (1, 2, 1), (0, 0, 4)] {
            let layout = CmpLayout {
                trit_chains,
                pairs,
                bottom_pairs,
            };
            let ge = circuits::compare_with_layout(e, &cx, &cy, Relation::Ge, layout).unwrap();
            assert_eq!(
                e.decrypt_bit(&ge.unwrap()).unwrap(),
                x >= y,
                "{x} {y} {layout:?}"
            );
        }
        assert_eq!(
            e.decrypt_bit(&circuits::lt_published(e, &cx, &cy).unwrap())
                .unwrap(),
            x < y,
            "{x} {y}"
        );
        assert_eq!(
            e.decrypt_bit(&circuits::eq(e, &cx, &cy, true).unwrap())
                .unwrap(),
            x == y,
            "{x} {y}"
        );
        if x == r {
            let (lo, hi) = circuits::min_max(e, &cx, &cy).unwrap();
            assert_eq!(
                (lo.decrypt_u128(e).unwrap(), hi.decrypt_u128(e).unwrap()),
                (x.min(y), x.max(y))
            );
            let d = circuits::sub(e, &cx, &cy, AdderKind::Auto).unwrap();
            assert_eq!(d.decrypt_u128(e).unwrap(), (x + 256 - y) % 256);
        }
    }
}

#[test]
fn demo_sum_and_comparison_check_out() {
    let report = hecloud_circuits::demo::run_tfhe_demo().unwrap();
    assert!(report.ok(), "{report}");
    assert_eq!(
        report.sum,
        report.addends.iter().map(|&v| u64::from(v)).sum::<u64>()
    );
    assert_eq!(report.less, report.compared.0 < report.compared.1);
}

#[test]
fn carry_chains_use_the_whole_plaintext_space() {
    // Eight rows: one ripple lane whose lookup inputs reach 8 + 7 = 15.
    let e = &engine();
    let mut rng = rng();
    let mut vals: Vec<u128> = (0..8).map(|_| u128::from(rng.next_u32() & 0x3f)).collect();
    vals[0] = 0x3f;
    vals[1] = 0x3f;
    let xs: Vec<_> = vals
        .iter()
        .map(|&v| EncryptedUint::encrypt_u128(e, v, 6).unwrap())
        .collect();
    let s = circuits::sum(e, &xs, SumMode::Full, AdderKind::CarryChains).unwrap();
    assert_eq!(s.decrypt_u128(e).unwrap(), vals.iter().sum::<u128>());
}

#[test]
fn cancellation_stops_tfhe_where_it_stops_the_clear_engine() {
    let e = &engine();
    let c = ClearEngine::new();
    let vals = [3u128, 15, 9, 0, 7, 12];
    let xt: Vec<_> = vals
        .iter()
        .map(|&v| EncryptedUint::encrypt_u128(e, v, 4).unwrap())
        .collect();
    let xc: Vec<_> = vals
        .iter()
        .map(|&v| EncryptedUint::encrypt_u128(&c, v, 4).unwrap())
        .collect();
    // Raised before: no bootstrap at all.
    let raised = AtomicBool::new(true);
    let (r, cost) = with_cost(e, || {
        circuits::sum(&e.with_cancel(&raised), &xt, SumMode::Full, AdderKind::Auto)
    });
    assert_eq!(r.unwrap_err(), CircuitError::Cancelled);
    assert_eq!(cost.bootstraps, 0);
    // Raised after two layers: both engines stop after the same work.
    let (ft, fc) = (AtomicBool::new(false), AtomicBool::new(false));
    let (tt, tc) = (Tripwire::new(e, &ft, 2), Tripwire::new(&c, &fc, 2));
    let (rt, st) = with_cost(e, || {
        circuits::sum(&tt.with_cancel(&ft), &xt, SumMode::Full, AdderKind::Auto)
    });
    let (rc, sc) = with_cost(&c, || {
        circuits::sum(&tc.with_cancel(&fc), &xc, SumMode::Full, AdderKind::Auto)
    });
    assert_eq!(rt.unwrap_err(), CircuitError::Cancelled);
    assert_eq!(rc.unwrap_err(), CircuitError::Cancelled);
    assert_eq!((tt.layers(), tc.layers()), (2, 2));
    assert_eq!(st, sc);
    assert!(st.bootstraps > 0);
}

/// Heavy: a 64-bit sum of 16 and a 1024-bit comparison on TFHE (minutes on 2 cores).
#[test]
#[ignore = "minutes on 2 cores; run with --ignored (the bench covers these widths)"]
fn wide_circuits_on_tfhe() {
    let e = &engine();
    let mut rng = rng();
    let vals: Vec<u128> = (0..16).map(|_| u128::from(rng.next_u64())).collect();
    let xs: Vec<_> = vals
        .iter()
        .map(|&v| EncryptedUint::encrypt_u128(e, v, 64).unwrap())
        .collect();
    let s = circuits::sum(e, &xs, SumMode::Full, AdderKind::Auto).unwrap();
    assert_eq!(s.decrypt_u128(e).unwrap(), vals.iter().sum::<u128>());
    let mut bits = |_: usize| -> Vec<bool> { (0..1024).map(|_| rng.next_u32() & 1 == 1).collect() };
    let (a, mut b) = (bits(0), bits(1));
    b[..1000].copy_from_slice(&a[..1000]);
    let (ca, cb) = (
        EncryptedUint::encrypt_bools(e, &a).unwrap(),
        EncryptedUint::encrypt_bools(e, &b).unwrap(),
    );
    let expect = a.iter().rev().cmp(b.iter().rev()) == std::cmp::Ordering::Less;
    assert_eq!(
        e.decrypt_bit(&circuits::lt(e, &ca, &cb).unwrap()).unwrap(),
        expect
    );
}
