//! The shape-only bootstrap bounds of `hecloud_circuits::bound` against the
//! clear engine's exact counts (which equal the TFHE engine's), over operand
//! counts, widths, sum modes, adders and thread counts: never below, and for
//! sums close above (a server refuses jobs on these bounds, so slack would
//! refuse jobs that fit).

use hecloud_circuits::circuits::{self, AdderKind, Relation, SumMode};
use hecloud_circuits::{BitEngine, CircuitError, ClearEngine, EncryptedUint, UintOf, bound};

fn operands(e: &ClearEngine, n: usize, w: usize) -> Vec<UintOf<ClearEngine>> {
    // Bootstrap counts do not depend on the values (the circuits are
    // data-oblivious), so zeros will do.
    (0..n)
        .map(|_| EncryptedUint::encrypt_u128(e, 0, w).unwrap())
        .collect()
}

fn exact_sum(e: &ClearEngine, xs: &[UintOf<ClearEngine>], mode: SumMode, kind: AdderKind) -> u64 {
    let before = e.stats();
    circuits::sum(e, xs, mode, kind).unwrap();
    (e.stats() - before).bootstraps
}

/// Checks the bound of every (n, w, mode) against the exact count; returns
/// the largest bound/exact ratio seen.
fn check_sums(e: &ClearEngine, ns: &[usize], widths: &[usize], kind: AdderKind) -> f64 {
    let mut worst: f64 = 1.0;
    for &w in widths {
        for &n in ns {
            let xs = operands(e, n, w);
            for mode in [SumMode::Modular, SumMode::Full] {
                let exact = exact_sum(e, &xs, mode, kind);
                let b = bound::sum_bootstraps(n, w, mode, kind, e.threads()).unwrap();
                assert!(
                    b >= exact,
                    "{kind:?} {mode:?} n={n} w={w} threads={}: bound {b} < exact {exact}",
                    e.threads()
                );
                if n == 1 {
                    assert_eq!(b, 0);
                } else {
                    worst = worst.max(b as f64 / exact as f64);
                }
            }
        }
    }
    worst
}

#[test]
fn sum_bounds_hold_for_every_adder() {
    let e = ClearEngine::new();
    let small: Vec<usize> = (1..=40).collect();
    let widths = [2, 3, 4, 5, 7, 8, 13, 16, 32, 64];
    let big = [47, 63, 64, 65, 100, 127, 128, 129, 255, 256, 300, 513, 1000];
    for kind in [
        AdderKind::CarryChains,
        AdderKind::KoggeStone,
        AdderKind::Ripple,
    ] {
        let a = check_sums(&e, &small, &widths, kind);
        let b = check_sums(&e, &big, &[2, 8, 33, 64], kind);
        eprintln!("{kind:?}: largest bound / exact {:.3}", a.max(b));
        // The bounds replay the circuits' planning: within a few percent.
        assert!(
            a.max(b) < 1.15,
            "{kind:?}: bound / exact up to {}",
            a.max(b)
        );
    }
}

#[test]
fn sum_bounds_follow_the_adder_auto_picks_for_the_thread_count() {
    let e = ClearEngine::new();
    for threads in [1, 2, 7, 8, 16] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            assert_eq!(e.threads(), threads);
            check_sums(&e, &[2, 3, 9, 17, 64, 200], &[4, 16, 64], AdderKind::Auto);
        });
    }
    // A sum of 4096 operands of 64 bits, the largest a graph may hold.
    let xs = operands(&e, 4096, 64);
    let exact = exact_sum(&e, &xs, SumMode::Full, AdderKind::Auto);
    let b = bound::sum_bootstraps(4096, 64, SumMode::Full, AdderKind::Auto, e.threads()).unwrap();
    assert!(
        b >= exact && (b as f64) < 1.05 * exact as f64,
        "{b} vs {exact}"
    );
}

#[test]
fn comparison_bounds_hold_at_every_width_and_thread_count() {
    let e = ClearEngine::new();
    let widths: Vec<usize> = (2..=70)
        .chain([100, 127, 128, 129, 255, 256, 511, 512, 1000, 1024])
        .collect();
    for threads in [1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            for &w in &widths {
                let xs = operands(&e, 2, w);
                let cmp = bound::compare_bootstraps(w, threads).unwrap();
                let mm = bound::min_max_bootstraps(w, threads).unwrap();
                for rel in [Relation::Lt, Relation::Le, Relation::Gt, Relation::Ge] {
                    let before = e.stats();
                    circuits::compare(&e, &xs[0], &xs[1], rel).unwrap();
                    let exact = (e.stats() - before).bootstraps;
                    assert!(cmp >= exact, "compare w={w} t={threads}: {cmp} < {exact}");
                }
                for min in [true, false] {
                    let before = e.stats();
                    if min {
                        circuits::min(&e, &xs[0], &xs[1]).unwrap();
                    } else {
                        circuits::max(&e, &xs[0], &xs[1]).unwrap();
                    }
                    let exact = (e.stats() - before).bootstraps;
                    assert!(mm >= exact, "min/max w={w} t={threads}: {mm} < {exact}");
                }
            }
        });
    }
}

#[test]
fn bad_shapes_are_the_errors_the_circuits_return() {
    let e = ClearEngine::new();
    let t = e.threads();
    let sum = |n, w, mode| bound::sum_bootstraps(n, w, mode, AdderKind::Auto, t);
    assert_eq!(sum(0, 8, SumMode::Full), Err(CircuitError::EmptyOperands));
    for (n, w, mode) in [
        (3, 1, SumMode::Modular),
        (3, 1025, SumMode::Modular),
        (2, 1024, SumMode::Full),
    ] {
        let err = sum(n, w, mode).unwrap_err();
        assert!(
            matches!(err, CircuitError::WidthOutOfRange { .. }),
            "{err:?}"
        );
        if (2..=1024).contains(&w) {
            let xs = operands(&e, n, w);
            assert_eq!(
                circuits::sum(&e, &xs, mode, AdderKind::Auto).unwrap_err(),
                err
            );
        }
    }
    assert!(matches!(
        bound::compare_bootstraps(1, t),
        Err(CircuitError::WidthOutOfRange { .. })
    ));
    assert!(matches!(
        bound::min_max_bootstraps(2000, t),
        Err(CircuitError::WidthOutOfRange { .. })
    ));
}
