//! Bootstrapping's pieces against the clear: ModRaise adds a small
//! multiple of q₀ and nothing else; EvalMod takes slot values mod 1.

use hecloud_ckks::boot::{EvalMod, mod_raise};
use hecloud_ckks::params::test_literal;
use hecloud_ckks::{CkksError, CkksParameters, Encoder, Evaluator, KeySet};
use num_bigint::BigInt;

fn uniform(rng: &mut hecloud_math::Sampler) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

/// Complex slots with real and imaginary parts uniform in [−1, 1].
fn random_slots(rng: &mut hecloud_math::Sampler, n: usize) -> Vec<num_complex::Complex64> {
    (0..n)
        .map(|_| num_complex::Complex64::new(uniform(rng), uniform(rng)))
        .collect()
}

/// Keys for `boot` (its rotations, conjugation), an encoder and an evaluator.
fn boot_keys(
    params: &std::sync::Arc<CkksParameters>,
    boot: &hecloud_ckks::boot::Bootstrapper,
) -> (KeySet, Encoder, Evaluator) {
    let keys = KeySet::generate_at_levels(params, &boot.rotation_levels(), true).unwrap();
    let eval = Evaluator::new(params, keys.evaluation_keys());
    (keys, Encoder::new(params), eval)
}

#[test]
fn mod_raise_adds_a_small_multiple_of_q0() {
    let params = CkksParameters::new_insecure_for_tests(test_literal(10, 4), 40).unwrap();
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let (enc, eval) = (
        Encoder::new(&params),
        Evaluator::new(&params, keys.evaluation_keys()),
    );
    let mut rng = hecloud_math::testing::sampler();
    let x: Vec<f64> = (0..params.slots()).map(|_| uniform(&mut rng)).collect();
    let ct = keys
        .encrypt(&enc.encode_real(&x, 4, params.default_scale()).unwrap())
        .unwrap();
    let low = eval.drop_level(&ct, 0).unwrap();
    let raised = mod_raise(&params, &low).unwrap();
    assert_eq!(
        (raised.level(), raised.scale()),
        (params.max_level(), low.scale())
    );
    let integers = |ct| {
        let mut p = keys.decrypt(ct).unwrap().into_poly();
        p.to_coefficient();
        p.to_bigint_centered().unwrap()
    };
    let (t0, t) = (integers(&low), integers(&raised));
    let q0 = BigInt::from(params.rlwe().q_basis().moduli()[0].value());
    let mut largest = BigInt::from(0);
    for (a, b) in t.iter().zip(&t0) {
        let d = a - b;
        assert_eq!(&d % &q0, BigInt::from(0), "not a multiple of q0");
        let i = (&d / &q0).magnitude().clone();
        largest = largest.max(BigInt::from(i));
    }
    // A dense ternary secret of weight h ≈ 2N/3: I is a sum of about h
    // terms in [−1/2, 1/2], std √(h/12) ≈ 7.5 at N = 2^10.
    let h = 2.0 * params.n() as f64 / 3.0;
    assert!(
        largest < BigInt::from((8.0 * (h / 12.0).sqrt()) as u64),
        "|I| up to {largest}"
    );
    assert!(largest > BigInt::from(0), "q0 multiples expected");
    // Refused above level 0.
    assert!(matches!(
        mod_raise(&params, &ct),
        Err(CkksError::ValueOutOfRange(_))
    ));
}

#[test]
fn eval_mod_removes_the_integer_part() {
    let params = CkksParameters::new_insecure_for_tests(test_literal(11, 14), 45).unwrap();
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let (enc, eval) = (
        Encoder::new(&params),
        Evaluator::new(&params, keys.evaluation_keys()),
    );
    let bound = 12;
    let em = EvalMod::new(bound, 31, 3).unwrap();
    assert!(em.depth() <= 14, "{}", em.depth());
    let mut rng = hecloud_math::testing::sampler();
    // y = I + δ: I uniform in [−bound, bound] (the edges named), δ up to
    // 2^-8 in magnitude.
    let mut y: Vec<f64> = (0..params.slots())
        .map(|_| {
            let i = (rng.next_u64() % (2 * bound as u64 + 1)) as f64 - bound as f64;
            i + uniform(&mut rng) / 256.0
        })
        .collect();
    y[..3].copy_from_slice(&[-(bound as f64), bound as f64, 0.0]);
    let ct = keys
        .encrypt(
            &enc.encode_real(&y, 14, em.input_scale(params.default_scale()))
                .unwrap(),
        )
        .unwrap();
    let out = em.apply(&eval, &ct).unwrap();
    let got = enc.decode_real(&keys.decrypt(&out).unwrap()).unwrap();
    let mut worst = 0.0f64;
    for (v, g) in y.iter().zip(&got) {
        let err = (g - EvalMod::reference(*v)).abs();
        worst = worst.max(err);
        // And the reference is y mod 1 up to the cubic term.
        let delta = v - v.round();
        assert!((EvalMod::reference(*v) - delta).abs() < 7.0 * delta.abs().powi(3) + 1e-12);
    }
    assert!(worst < 2f64.powi(-18), "worst error 2^{:.1}", worst.log2());
    // Too few levels: refused before any work.
    let low = eval.drop_level(&ct, 5).unwrap();
    assert!(em.apply(&eval, &low).is_err());
    assert!(EvalMod::new(0, 31, 3).is_err());
}

/// The pieces together, at a test size: a level-0 ciphertext of random
/// complex slots comes back at a usable level with its slots.
#[test]
fn bootstrapping_brings_a_level_0_ciphertext_back_with_its_slots() {
    use hecloud_ckks::boot::{BootstrapLiteral, Bootstrapper};
    use hecloud_ckks::precision::report;
    let mut literal = test_literal(11, 0);
    // 60-bit primes: with 50-bit ones CoeffsToSlots' rounding (2^-31 on
    // values up to 40, against 2^-41 here) limits the result to 14 bits.
    literal.log_q = std::iter::once(61)
        .chain(std::iter::repeat_n(60, 22))
        .collect();
    literal.log_p = vec![61, 61, 61];
    let params = CkksParameters::new_insecure_for_tests(literal, 60).unwrap();
    // A dense ternary secret at N = 2^11: I's coefficients have σ ≈
    // √(h/12) ≈ 10.7; a bound of 48 (4.5σ) failed about one run in 70 (one
    // coefficient beyond it puts an error of 2^-20 into every slot), 64 is
    // 6σ: about 2^-18 per run.
    let literal = BootstrapLiteral {
        cts_levels: 3,
        stc_levels: 3,
        eval_mod_bound: 64,
        eval_mod_degree: 63,
        eval_mod_at_integers: false,
        double_angles: 4,
        arcsine_degree: 0,
        ephemeral_hamming: None,
        log_message_ratio: 10,
        slots: None,
    };
    let boot = Bootstrapper::new(&params, literal).unwrap();
    let (keys, enc, eval) = boot_keys(&params, &boot);
    let mut rng = hecloud_math::testing::sampler();
    let z = random_slots(&mut rng, params.slots());
    // At level 0 with a scale 2^7.5 below q0/2^10, the message ratio
    // EvalMod works with: multiplied up by 181 first.
    let scale = params.q_f64(0) / 1024.0 / 181.5;
    let ct = keys.encrypt(&enc.encode(&z, 0, scale).unwrap()).unwrap();
    let out = boot.bootstrap(&eval, None, &ct).unwrap();
    assert_eq!(out.level(), boot.output_level());
    assert_eq!(out.scale(), params.default_scale());
    let got = enc.decode(&keys.decrypt(&out).unwrap()).unwrap();
    let r = report(&z, &got);
    eprintln!("bootstrapped: {r}");
    // Measured: 23.5 bits (EvalMod's error, about 2^-37.6, against a
    // message part 2^-10 of the values it sees, spread by SlotsToCoeffs).
    assert!(r.bits() > 20.0, "{r}");
    // The second bootstrapping takes the kept diagonals (all of them at
    // this size) and gives the very same ciphertext as one encoding afresh.
    let mut fresh = boot.clone();
    assert_eq!(fresh.keep_encoded_diagonals(0), 0);
    assert!(boot.clone().keep_encoded_diagonals(usize::MAX) > 0);
    assert_eq!(boot.bootstrap(&eval, None, &ct).unwrap(), out);
    assert_eq!(fresh.bootstrap(&eval, None, &ct).unwrap(), out);
    // Refused before any work: a ciphertext above level 0 (ModRaise reads
    // q0 only), a scale above q0/2^10, missing keys, a circuit deeper than
    // the parameters.
    let high = keys.encrypt(&enc.encode(&z, 1, scale).unwrap()).unwrap();
    assert!(boot.bootstrap(&eval, None, &high).is_err());
    let loud = keys
        .encrypt(&enc.encode(&z, 0, params.q_f64(0) / 512.0).unwrap())
        .unwrap();
    assert!(matches!(
        boot.bootstrap(&eval, None, &loud),
        Err(CkksError::ValueOutOfRange(_))
    ));
    let bare = Evaluator::new(
        &params,
        KeySet::generate(&params, &[1], true)
            .unwrap()
            .evaluation_keys(),
    );
    assert!(matches!(
        boot.bootstrap(&bare, None, &ct),
        Err(CkksError::Rlwe(hecloud_rlwe::RlweError::MissingGaloisKey(
            _
        )))
    ));
    // Every key present but cut one level below where the circuit uses it.
    let short: Vec<(i64, usize)> = boot
        .rotation_levels()
        .into_iter()
        .map(|(k, l)| (k, l - 1))
        .collect();
    let short = Evaluator::new(
        &params,
        KeySet::generate_at_levels(&params, &short, true)
            .unwrap()
            .evaluation_keys(),
    );
    assert!(matches!(
        boot.bootstrap(&short, None, &ct),
        Err(CkksError::Rlwe(
            hecloud_rlwe::RlweError::KeyBelowLevel { .. }
        ))
    ));
    let deep = BootstrapLiteral {
        eval_mod_degree: 255,
        eval_mod_at_integers: false,
        double_angles: 12,
        ..literal
    };
    assert!(Bootstrapper::new(&params, deep).is_err());
    // An EvalMod that fits the levels but approximates y mod 1 badly: a
    // degree-31 cosine over 2·49·2π/2^2 radians. Accepted, it would
    // return noise; refused, it names the bits it would keep.
    assert!(boot.eval_mod_precision_bits() > 30.0);
    for (eval_mod_degree, double_angles) in [(31, 2), (63, 0)] {
        let poor = BootstrapLiteral {
            eval_mod_degree,
            double_angles,
            ..literal
        };
        match Bootstrapper::new(&params, poor) {
            Err(CkksError::ValueOutOfRange(m)) => assert!(m.contains("bits"), "{m}"),
            other => panic!("{eval_mod_degree}, {double_angles}: {other:?}"),
        }
    }
}

/// The bootstrappable layout at a test size: the input at the default
/// scale 2^40 is multiplied up to q0/2^8, and a real and a complex vector
/// come back at the default scale with the levels the preset promises.
#[test]
fn the_test_preset_bootstraps_real_and_complex_slots() {
    use hecloud_ckks::boot::{BootPreset, EncapsulationKeys};
    use hecloud_ckks::precision::report;
    use num_complex::Complex64;
    let (params, boot) = BootPreset::TestN12.build().unwrap();
    assert_eq!(boot.output_level(), 2);
    assert_eq!(BootPreset::TestN12.output_level(), 2);
    let (keys, enc, eval) = boot_keys(&params, &boot);
    let h = boot.literal().ephemeral_hamming.unwrap();
    let encapsulation = EncapsulationKeys::generate(&params, keys.secret_key(), h).unwrap();
    let mut rng = hecloud_math::testing::sampler();
    let complex = random_slots(&mut rng, params.slots());
    let mut real: Vec<Complex64> = (0..params.slots())
        .map(|_| Complex64::new(uniform(&mut rng), 0.0))
        .collect();
    real[..3].copy_from_slice(&[1.0, -1.0, 0.0].map(|x| Complex64::new(x, 0.0)));
    for (what, z) in [("complex", complex), ("real", real)] {
        let ct = keys
            .encrypt(&enc.encode(&z, 0, params.default_scale()).unwrap())
            .unwrap();
        let out = boot.bootstrap(&eval, Some(&encapsulation), &ct).unwrap();
        assert_eq!((out.level(), out.scale()), (2, params.default_scale()));
        let got = enc.decode(&keys.decrypt(&out).unwrap()).unwrap();
        let r = report(&z, &got);
        eprintln!("{what}: {r}");
        assert!(r.bits() > 18.0, "{what}: {r}");
    }
    // Serialized seeded (half size) and read back, they still work.
    let bytes = encapsulation.to_bytes(true);
    assert!(bytes.len() < encapsulation.to_bytes(false).len() * 6 / 10);
    assert_eq!(bytes.len(), 8 + encapsulation.serialized_len(true));
    let back = EncapsulationKeys::from_bytes(&params, &bytes).unwrap();
    let z = random_slots(&mut rng, params.slots());
    let ct = keys
        .encrypt(&enc.encode(&z, 0, params.default_scale()).unwrap())
        .unwrap();
    let got = enc
        .decode(
            &keys
                .decrypt(&boot.bootstrap(&eval, Some(&back), &ct).unwrap())
                .unwrap(),
        )
        .unwrap();
    assert!(report(&z, &got).bits() > 18.0, "{}", report(&z, &got));
    for cut in [0, 7, 8, 100, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            EncapsulationKeys::from_bytes(&params, &bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut swapped = bytes.clone();
    swapped[..8].copy_from_slice(&0u64.to_le_bytes());
    assert!(EncapsulationKeys::from_bytes(&params, &swapped).is_err());
    // Without the encapsulation keys, or with another secret's: refused.
    let ct = keys
        .encrypt(
            &enc.encode(&[Complex64::new(0.5, 0.0)], 0, params.default_scale())
                .unwrap(),
        )
        .unwrap();
    assert!(matches!(
        boot.bootstrap(&eval, None, &ct),
        Err(CkksError::MissingKey(_))
    ));
    // A raised cancellation flag stops it before any work.
    assert!(matches!(
        boot.bootstrap_cancellable(
            &eval,
            Some(&encapsulation),
            &ct,
            &std::sync::atomic::AtomicBool::new(true)
        ),
        Err(CkksError::Cancelled)
    ));
    let other = EncapsulationKeys::generate(&params, keys.secret_key(), h + 1).unwrap();
    assert!(matches!(
        boot.bootstrap(&eval, Some(&other), &ct),
        Err(CkksError::MissingKey(_))
    ));
}

/// User and system CPU time of this process so far (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields 14 and 15 (utime, stime, in clock ticks of 1/100 s), counted
    // after the parenthesised command name.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// The 128-bit preset at full size (N = 2^16, about 2.7 GiB of keys):
/// `cargo test --release -p hecloud-ckks --test boot -- --ignored`.
/// `hecloud bench boot` measures it against Lattigo.
#[test]
#[ignore = "full size: minutes and about 10 GB of memory"]
fn the_n16_preset_bootstraps_full_slots() {
    use hecloud_ckks::boot::{BootPreset, EncapsulationKeys};
    use hecloud_ckks::precision::report;
    let (params, boot) = BootPreset::N16.build().unwrap();
    assert!(params.rlwe().is_secure());
    let t = std::time::Instant::now();
    let mut keys = KeySet::generate_at_levels(&params, &boot.rotation_levels(), true).unwrap();
    let h = boot.literal().ephemeral_hamming.unwrap();
    let encapsulation = EncapsulationKeys::generate(&params, keys.secret_key(), h).unwrap();
    eprintln!(
        "keygen: {} rotations in {:.1} s",
        boot.rotations().len(),
        t.elapsed().as_secs_f64()
    );
    let (enc, eval) = (
        Encoder::new(&params),
        Evaluator::new(&params, keys.take_evaluation_keys()),
    );
    let mut rng = hecloud_math::testing::sampler();
    let z = random_slots(&mut rng, params.slots());
    let ct = keys
        .encrypt(&enc.encode(&z, 0, params.default_scale()).unwrap())
        .unwrap();
    let (t, cpu) = (std::time::Instant::now(), cpu_seconds());
    let out = boot.bootstrap(&eval, Some(&encapsulation), &ct).unwrap();
    // CPU time beside wall time: on a shared machine the wall time moves
    // with the other load, the CPU time (one thread) much less.
    eprintln!(
        "bootstrap: {:.2} s ({:.2} s of CPU)",
        t.elapsed().as_secs_f64(),
        cpu_seconds() - cpu
    );
    assert_eq!(out.level(), 9);
    let r = report(&z, &enc.decode(&keys.decrypt(&out).unwrap()).unwrap());
    eprintln!("n16: {r}");
    assert!(r.bits() > 18.0, "{r}");
}

/// Sparse slots at the test preset's layout: the trace clears ModRaise's
/// integer part outside the message's subring, the DFTs run at the sparse
/// size, and real and complex vectors of 8 to N/4 slots come back.
#[test]
fn the_test_preset_bootstraps_sparse_slots() {
    use hecloud_ckks::boot::{BootPreset, Bootstrapper, EncapsulationKeys};
    use hecloud_ckks::precision::report;
    use num_complex::Complex64;
    let params = BootPreset::TestN12.params().unwrap();
    let (_, _, circuit) = BootPreset::TestN12.literal();
    let mut rng = hecloud_math::testing::sampler();
    for (slots, levels) in [(256, 3), (1024, 3), (8, 3)] {
        let literal = hecloud_ckks::boot::BootstrapLiteral {
            slots: Some(slots),
            cts_levels: levels,
            stc_levels: levels,
            ..circuit
        };
        let boot = Bootstrapper::new(&params, literal).unwrap();
        assert_eq!(boot.slots(), slots);
        let (keys, _, eval) = boot_keys(&params, &boot);
        let enc = Encoder::with_slots(&params, slots).unwrap();
        let h = literal.ephemeral_hamming.unwrap();
        let encapsulation = EncapsulationKeys::generate(&params, keys.secret_key(), h).unwrap();
        let real: Vec<Complex64> = (0..slots)
            .map(|_| Complex64::new(uniform(&mut rng), 0.0))
            .collect();
        for (what, z) in [("complex", random_slots(&mut rng, slots)), ("real", real)] {
            let ct = keys
                .encrypt(&enc.encode(&z, 0, params.default_scale()).unwrap())
                .unwrap();
            let out = boot.bootstrap(&eval, Some(&encapsulation), &ct).unwrap();
            assert_eq!(out.level(), boot.output_level());
            let got = enc.decode(&keys.decrypt(&out).unwrap()).unwrap();
            let r = report(&z, &got);
            eprintln!("{slots} slots, {what}: {r}");
            // Fewer slots put more of the message into each coefficient,
            // where EvalMod's sine departs from the identity: about 16.5
            // bits at 8 slots, 20 to 23 at 256 and more.
            let min = if slots < 64 { 14.0 } else { 18.0 };
            assert!(r.bits() > min, "{slots} slots, {what}: {r}");
        }
    }
    // The arcsine correction, where the sine limits the result: at 8 slots,
    // the same inputs with and without it, on the layout with two more
    // EvalMod primes for the correction's two levels.
    // Three CoeffsToSlots factors (8 slots have 3 bits): one CtS prime
    // fewer than the preset's.
    let (mut wider, log_scale, _) = BootPreset::TestN12.literal();
    let eval_mod_top = 1 + BootPreset::TestN12.output_level() + circuit.stc_levels;
    wider.log_q.splice(eval_mod_top..eval_mod_top, [60; 2]);
    wider
        .log_q
        .truncate(wider.log_q.len() - (circuit.cts_levels - 3));
    let wider = CkksParameters::new_insecure_for_tests(wider, log_scale).unwrap();
    let z = random_slots(&mut rng, 8);
    let mut bits = Vec::new();
    for arcsine_degree in [0, 3] {
        let literal = hecloud_ckks::boot::BootstrapLiteral {
            slots: Some(8),
            cts_levels: 3,
            arcsine_degree,
            ..circuit
        };
        let boot = Bootstrapper::new(&wider, literal).unwrap();
        let (keys, _, eval) = boot_keys(&wider, &boot);
        let enc = Encoder::with_slots(&wider, 8).unwrap();
        let h = literal.ephemeral_hamming.unwrap();
        let encapsulation = EncapsulationKeys::generate(&wider, keys.secret_key(), h).unwrap();
        let ct = keys
            .encrypt(&enc.encode(&z, 0, wider.default_scale()).unwrap())
            .unwrap();
        let out = boot.bootstrap(&eval, Some(&encapsulation), &ct).unwrap();
        assert_eq!(out.level(), boot.output_level());
        let r = report(&z, &enc.decode(&keys.decrypt(&out).unwrap()).unwrap());
        eprintln!("8 slots, arcsine degree {arcsine_degree}: {r}");
        bits.push(r.bits());
    }
    // Measured: 16.2 bits without, 30.8 with.
    assert!(bits[1] > bits[0] + 6.0, "{bits:?}");
    // Refused when built: degrees it does not take, and a correction on the
    // preset's own layout, where the levels are there (one SlotsToCoeffs
    // level) but the primes are the 42-bit ones, not EvalMod's: its T_2
    // would land 38 bits above them.
    for (arcsine_degree, stc_levels) in [(1, 3), (2, 3), (33, 3), (3, 1)] {
        let literal = hecloud_ckks::boot::BootstrapLiteral {
            arcsine_degree,
            stc_levels,
            ..circuit
        };
        let r = Bootstrapper::new(&params, literal);
        if stc_levels == 1 {
            assert!(
                matches!(&r, Err(CkksError::Polynomial(m)) if m.contains("mixed sizes")),
                "{r:?}"
            );
        } else {
            assert!(
                matches!(r, Err(CkksError::ValueOutOfRange(_))),
                "arcsine degree {arcsine_degree}"
            );
        }
    }
    for slots in [0, 1, 3, 4096] {
        let literal = hecloud_ckks::boot::BootstrapLiteral {
            slots: Some(slots),
            cts_levels: 1,
            stc_levels: 1,
            ..circuit
        };
        assert!(
            Bootstrapper::new(&params, literal).is_err(),
            "{slots} slots"
        );
    }
}
