//! Cancellation: a circuit run on an engine under a flag
//! (`BitEngine::with_cancel`) stops with `CircuitError::Cancelled` at the
//! first layer after the flag is raised, and runs unchanged otherwise. The
//! flag is raised by the engine itself after a chosen number of layers
//! (`common::Tripwire`), so the point of cancellation is deterministic.

mod common;

use std::sync::atomic::AtomicBool;

use common::Tripwire;
use hecloud_circuits::circuits::{self, AdderKind, Relation, SumMode};
use hecloud_circuits::{BitEngine, CircuitError, ClearEngine, EncryptedUint, UintOf, with_cost};

fn inputs(e: &ClearEngine, n: usize, w: usize) -> (Vec<UintOf<ClearEngine>>, Vec<u128>) {
    let vals: Vec<u128> = (0..n as u128)
        .map(|i| (i * 40_503 + 17) % (1 << w))
        .collect();
    let xs = vals
        .iter()
        .map(|&v| EncryptedUint::encrypt_u128(e, v, w).unwrap())
        .collect();
    (xs, vals)
}

#[test]
fn a_flag_raised_before_a_sum_stops_it_before_any_bootstrap() {
    let e = ClearEngine::new();
    let (xs, _) = inputs(&e, 64, 16);
    let flag = AtomicBool::new(true);
    for kind in [
        AdderKind::CarryChains,
        AdderKind::KoggeStone,
        AdderKind::Ripple,
    ] {
        let (r, cost) = with_cost(&e, || {
            circuits::sum(&e.with_cancel(&flag), &xs, SumMode::Full, kind)
        });
        assert_eq!(r.unwrap_err(), CircuitError::Cancelled, "{kind:?}");
        assert_eq!(cost.bootstraps, 0, "{kind:?}");
    }
}

#[test]
fn a_flag_raised_while_a_sum_runs_stops_it_at_the_next_layer() {
    let e = ClearEngine::new();
    let (xs, vals) = inputs(&e, 64, 16);
    let want: u128 = vals.iter().sum();
    for kind in [
        AdderKind::CarryChains,
        AdderKind::KoggeStone,
        AdderKind::Ripple,
    ] {
        // The whole sum, without a flag: its layers and bootstraps.
        let never = AtomicBool::new(false);
        let count = Tripwire::new(&e, &never, u64::MAX);
        let (s, full) = with_cost(&e, || circuits::sum(&count, &xs, SumMode::Full, kind));
        assert_eq!(s.unwrap().decrypt_u128(&e).unwrap(), want);
        let layers = count.layers();
        assert!(layers >= 4, "{kind:?}: {layers} layers");

        for after in [1, 2, layers / 2, layers - 1] {
            let flag = AtomicBool::new(false);
            let trip = Tripwire::new(&e, &flag, after);
            let (r, done) = with_cost(&e, || {
                circuits::sum(&trip.with_cancel(&flag), &xs, SumMode::Full, kind)
            });
            assert_eq!(
                r.unwrap_err(),
                CircuitError::Cancelled,
                "{kind:?} after {after}"
            );
            // Exactly the layers before the flag ran; the next one did not.
            assert_eq!(trip.layers(), after, "{kind:?}");
            assert!(done.depth <= after, "{kind:?}: {done:?}");
            assert!(
                done.bootstraps < full.bootstraps,
                "{kind:?}: {done:?} vs {full:?}"
            );
        }

        // Raised after the last layer: nothing is left to stop.
        let flag = AtomicBool::new(false);
        let trip = Tripwire::new(&e, &flag, layers);
        let (s, cost) = with_cost(&e, || {
            circuits::sum(&trip.with_cancel(&flag), &xs, SumMode::Full, kind)
        });
        assert_eq!(s.unwrap().decrypt_u128(&e).unwrap(), want, "{kind:?}");
        assert_eq!(cost, full, "{kind:?}");
    }
}

#[test]
fn comparisons_and_min_max_stop_too() {
    let e = ClearEngine::new();
    let (xs, vals) = inputs(&e, 2, 64);
    let (x, y) = (&xs[0], &xs[1]);
    for after in [0, 1] {
        let flag = AtomicBool::new(after == 0);
        let trip = Tripwire::new(&e, &flag, after);
        let c = trip.with_cancel(&flag);
        assert_eq!(
            circuits::compare(&c, x, y, Relation::Lt).unwrap_err(),
            CircuitError::Cancelled
        );
        assert_eq!(trip.layers(), after);
        let flag = AtomicBool::new(after == 0);
        let trip = Tripwire::new(&e, &flag, after);
        assert_eq!(
            circuits::min(&trip.with_cancel(&flag), x, y).unwrap_err(),
            CircuitError::Cancelled
        );
        assert_eq!(trip.layers(), after);
    }
    // Unraised, the results are the plain engine's.
    let flag = AtomicBool::new(false);
    let c = e.with_cancel(&flag);
    assert!(!c.is_cancelled());
    assert_eq!(
        c.decrypt_bit(&circuits::compare(&c, x, y, Relation::Lt).unwrap())
            .unwrap(),
        vals[0] < vals[1]
    );
    assert_eq!(
        circuits::max(&c, x, y).unwrap().decrypt_u128(&e).unwrap(),
        vals[0].max(vals[1])
    );
}
