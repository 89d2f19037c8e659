//! BGV refresh with noise flooding (circuit privacy): the refreshed slots
//! against the plaintext on fresh random inputs and the edge values 0 and
//! t − 1, the noise the key holder sees (the flood's, not the
//! computation's), the level the masked ciphertext is sent at, and the
//! typed refusals (no headroom, a flood too narrow, a width out of range).

use std::sync::Arc;

use hecloud_bgv::params::test_literal;
use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet};
use hecloud_circuits::packed::{
    BgvMaskPolicy, LocalRefresher, PackedError, RefreshMask, Refresher, reencrypt, reencrypt_to,
};
use hecloud_math::Sampler;
use hecloud_rlwe::{Ciphertext, Decryptor};
use num_bigint::BigInt;
use num_traits::ToPrimitive;

const T: u64 = 65537;

struct Fixture {
    params: Arc<BgvParameters>,
    keys: Arc<KeySet>,
    enc: Encoder,
    eval: Evaluator,
}

/// N = 2^10, a 60-bit q_0 and `levels` 50-bit primes above it.
fn fixture(levels: usize) -> Fixture {
    let params = BgvParameters::new_insecure_for_tests(test_literal(10, levels, T)).unwrap();
    let keys = Arc::new(KeySet::generate(&params, &[], false).unwrap());
    Fixture {
        enc: Encoder::new(&params),
        eval: Evaluator::new(&params, keys.evaluation_keys()),
        params,
        keys,
    }
}

/// Fresh random slots, with the edge values 0 and t − 1 in the first two.
fn random_slots(n: usize) -> Vec<u64> {
    let mut rng = Sampler::from_os();
    let mut v: Vec<u64> = (0..n).map(|_| rng.uniform_mod(T)).collect();
    v[0] = 0;
    v[1] = T - 1;
    v
}

/// What the key holder sees beyond the slots: the integer e of
/// c₀ + c₁·s = [m']_t + t·e (centred), coefficient by coefficient, as f64.
fn seen_noise(f: &Fixture, ct: &Ciphertext) -> Vec<f64> {
    let mut v = Decryptor::new(f.keys.secret_key())
        .decrypt(ct)
        .unwrap()
        .into_poly();
    v.to_coefficient();
    let t = BigInt::from(T);
    let half = BigInt::from(T / 2);
    v.to_bigint_centered()
        .unwrap()
        .into_iter()
        .map(|x| {
            let mut r = ((&x % &t) + &t) % &t;
            if r > half {
                r -= &t;
            }
            let e = (x - r) / &t;
            e.to_f64().unwrap()
        })
        .collect()
}

fn max_abs_bits(e: &[f64]) -> f64 {
    e.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1.0).log2()
}

/// Server, key holder, server: the slots of the refreshed ciphertext and
/// the masked ciphertext the key holder saw.
fn refresh(f: &Fixture, ct: &Ciphertext, policy: &BgvMaskPolicy) -> (Vec<u64>, Ciphertext) {
    let (masked, mask) =
        RefreshMask::apply_with(&f.eval, &f.enc, f.keys.public_key(), ct, policy).unwrap();
    let fresh = reencrypt(&f.keys, &masked).unwrap();
    let back = mask.remove(&f.eval, &fresh).unwrap();
    assert_eq!(back.level(), f.params.max_level());
    (
        f.enc.decode(&f.keys.decrypt(&back).unwrap()).unwrap(),
        masked,
    )
}

#[test]
fn flooded_refresh_decrypts_to_the_slots() {
    let f = fixture(2);
    let policy = BgvMaskPolicy::circuit_private(&f.params);
    // 16 + 38 + 1 bits of flooded value and 5 of margin do not fit q_0.
    assert_eq!(policy.flood_bits, Some(38));
    assert_eq!(policy.lowest_level(&f.params), Some(1));
    let n = f.params.n();
    for _ in 0..3 {
        let x = random_slots(n);
        let y = random_slots(n);
        let cx = f.keys.encrypt(&f.enc.encode(&x).unwrap()).unwrap();
        let cy = f.keys.encrypt(&f.enc.encode(&y).unwrap()).unwrap();
        let prod = f.eval.mul_relin(&cx, &cy).unwrap(); // level 1
        let want: Vec<u64> = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (*a as u128 * *b as u128 % T as u128) as u64)
            .collect();
        let (got, masked) = refresh(&f, &prod, &policy);
        assert_eq!(got, want);
        assert_eq!(masked.level(), 1);
        // A top-level ciphertext goes down to level 1 first.
        let (got, masked) = refresh(&f, &cx, &policy);
        assert_eq!(got, x);
        assert_eq!(masked.level(), 1);
    }
    for edge in [0, T - 1] {
        let x = vec![edge; n];
        let ct = f.keys.encrypt(&f.enc.encode(&x).unwrap()).unwrap();
        let sq = f.eval.mul_relin(&ct, &ct).unwrap();
        assert_eq!(refresh(&f, &ct, &policy).0, x);
        let want = (edge as u128 * edge as u128 % T as u128) as u64;
        assert_eq!(refresh(&f, &sq, &policy).0, vec![want; n]);
    }
    // The key holder may encrypt again at any level.
    let x = random_slots(n);
    let ct = f.keys.encrypt(&f.enc.encode(&x).unwrap()).unwrap();
    let (masked, mask) =
        RefreshMask::apply_with(&f.eval, &f.enc, f.keys.public_key(), &ct, &policy).unwrap();
    let fresh = reencrypt_to(&f.keys, &masked, 0).unwrap();
    let back = mask.remove(&f.eval, &fresh).unwrap();
    assert_eq!(f.enc.decode(&f.keys.decrypt(&back).unwrap()).unwrap(), x);
    // The same through the local refresher, in a batch.
    let r = LocalRefresher::new(f.keys.clone()).with_policy(policy);
    let sq = f.eval.mul_relin(&ct, &ct).unwrap();
    let out = r.refresh_many(&[ct.clone(), sq]).unwrap();
    assert_eq!(f.enc.decode(&f.keys.decrypt(&out[0]).unwrap()).unwrap(), x);
    let want: Vec<u64> = x
        .iter()
        .map(|a| (*a as u128 * *a as u128 % T as u128) as u64)
        .collect();
    assert_eq!(
        f.enc.decode(&f.keys.decrypt(&out[1]).unwrap()).unwrap(),
        want
    );
    assert_eq!(r.refreshes(), 2);
}

#[test]
fn the_key_holder_sees_the_flood_not_the_computation_noise() {
    let f = fixture(2);
    let policy = BgvMaskPolicy::circuit_private(&f.params);
    let b = policy.flood_bits.unwrap();
    let n = f.params.n();
    let x = random_slots(n);
    let ct = f.keys.encrypt(&f.enc.encode(&x).unwrap()).unwrap();
    let sq = f.eval.mul_relin(&ct, &ct).unwrap();
    let mut headers = Vec::new();
    for input in [&ct, &sq] {
        // Unflooded: the key holder sees the computation's noise, a few bits.
        let (_, plain) = refresh(&f, input, &BgvMaskPolicy::none());
        assert_eq!(plain.level(), 0);
        let unflooded = max_abs_bits(&seen_noise(&f, &plain));
        assert!(unflooded < 12.0, "unflooded noise of {unflooded:.1} bits");
        // Flooded: uniform in [−2^b, 2^b), so the largest of N is within a
        // fraction of a bit of 2^b and the mean magnitude near 2^(b−1).
        let (_, flooded) = refresh(&f, input, &policy);
        let e = seen_noise(&f, &flooded);
        let bits = max_abs_bits(&e);
        assert!(
            bits > f64::from(b) - 0.1 && bits <= f64::from(b) + 1e-6,
            "flooded noise of {bits:.2} bits, flood of {b}"
        );
        let mean = e.iter().map(|v| v.abs()).sum::<f64>() / n as f64 / f64::from(b).exp2();
        assert!((0.45..0.55).contains(&mean), "mean |e| / 2^b = {mean:.3}");
        assert!(bits - unflooded > 25.0, "{bits:.1} vs {unflooded:.1}");
        // The centred value minus the plaintext is t·e: about 2^b·t.
        let budget = f.keys.noise_budget(&flooded).unwrap();
        let seen_bits = f.params.log_q_at(flooded.level()) - 1.0 - budget;
        let t_bits = (T as f64).log2();
        assert!(
            (seen_bits - (f64::from(b) + t_bits)).abs() < 0.2,
            "{seen_bits:.2} bits"
        );
        let at_level_1 = f.eval.mod_switch_to(input, 1).unwrap().scale();
        headers.push((at_level_1, flooded.scale()));
    }
    // The two computations' noise estimates differ at the sending level,
    // but the flooded header carries the flood's bound for both.
    assert_ne!(headers[0].0, headers[1].0);
    assert_eq!(headers[0].1, headers[1].1);
    assert_eq!(Some(headers[0].1), policy.flooded_noise_bits(&f.params));
}

#[test]
fn a_flood_narrow_enough_goes_at_level_0() {
    let f = fixture(2);
    let n = f.params.n();
    let x = random_slots(n);
    let ct = f.keys.encrypt(&f.enc.encode(&x).unwrap()).unwrap();
    let low = f.eval.mod_switch_to(&ct, 0).unwrap();
    // Exactly the width that drowns this ciphertext's noise by λc bits.
    let policy = BgvMaskPolicy::covering(&f.params, low.scale());
    assert_eq!(policy.lowest_level(&f.params), Some(0));
    let (got, masked) = refresh(&f, &low, &policy);
    assert_eq!(got, x);
    assert_eq!(masked.level(), 0);
    let bits = max_abs_bits(&seen_noise(&f, &masked));
    assert!(bits > f64::from(policy.flood_bits.unwrap()) - 0.1);
}

#[test]
fn flooding_without_headroom_is_a_typed_error() {
    let f = fixture(2);
    let policy = BgvMaskPolicy::circuit_private(&f.params);
    let ct = f.keys.encrypt(&f.enc.encode(&[1, 2, 3]).unwrap()).unwrap();
    let low = f.eval.mod_switch_to(&ct, 0).unwrap();
    // Level 0 has no room for the flood: refused, naming level 1.
    let err =
        RefreshMask::apply_with(&f.eval, &f.enc, f.keys.public_key(), &low, &policy).unwrap_err();
    match &err {
        PackedError::NoFloodHeadroom {
            flood_bits,
            level,
            need_bits,
            have_bits,
            lowest_level,
        } => {
            assert_eq!((*flood_bits, *level, *lowest_level), (38, 0, Some(1)));
            assert!(need_bits > have_bits, "{need_bits} vs {have_bits}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains("lowest level with the room: 1"),
        "{err}"
    );
    assert_eq!(policy.check_level(&f.params, 0), Err(err.clone()));
    // The local refresher fails the same way; without flooding it works.
    let r = LocalRefresher::new(f.keys.clone()).with_policy(policy);
    assert_eq!(r.refresh(&low).unwrap_err(), err);
    let plain = LocalRefresher::new(f.keys.clone());
    let out = plain.refresh(&low).unwrap();
    assert_eq!(
        &f.enc.decode(&f.keys.decrypt(&out).unwrap()).unwrap()[..3],
        &[1, 2, 3]
    );
    // A flood no level can hold (log2 Q = 110 at the top).
    let g = fixture(1);
    let top = g.keys.encrypt(&g.enc.encode(&[1]).unwrap()).unwrap();
    let wide = BgvMaskPolicy {
        flood_bits: Some(BgvMaskPolicy::MAX_FLOOD_BITS),
    };
    assert_eq!(wide.lowest_level(&g.params), None);
    assert!(matches!(
        RefreshMask::apply_with(&g.eval, &g.enc, g.keys.public_key(), &top, &wide),
        Err(PackedError::NoFloodHeadroom {
            lowest_level: None,
            level: 1,
            ..
        })
    ));
    // Widths out of range.
    for b in [0, BgvMaskPolicy::MAX_FLOOD_BITS + 1] {
        let bad = BgvMaskPolicy {
            flood_bits: Some(b),
        };
        assert!(matches!(
            RefreshMask::apply_with(&f.eval, &f.enc, f.keys.public_key(), &ct, &bad),
            Err(PackedError::FloodPolicy { .. })
        ));
    }
}

#[test]
fn a_flood_too_narrow_for_the_noise_is_refused() {
    let f = fixture(2);
    let ct = f.keys.encrypt(&f.enc.encode(&[7]).unwrap()).unwrap();
    let low = f.eval.mod_switch_to(&ct, 0).unwrap();
    // Level 0 has room for 20 bits, but they do not drown the noise.
    let narrow = BgvMaskPolicy {
        flood_bits: Some(20),
    };
    assert_eq!(narrow.lowest_level(&f.params), Some(0));
    let need = BgvMaskPolicy::covering(&f.params, low.scale())
        .flood_bits
        .unwrap();
    match RefreshMask::apply_with(&f.eval, &f.enc, f.keys.public_key(), &low, &narrow) {
        Err(PackedError::FloodTooNarrow {
            level: 0,
            flood_bits: 20,
            need_flood_bits,
            noise_bits,
        }) => {
            assert_eq!(need_flood_bits, need);
            assert_eq!(noise_bits, low.scale());
        }
        other => panic!("{other:?}"),
    }
    // A ciphertext computed at the sending level with much noise (products
    // by large constants) is refused by the default policy too.
    let policy = BgvMaskPolicy::circuit_private(&f.params);
    let mut noisy = f.eval.mod_switch_to(&ct, 1).unwrap();
    for _ in 0..3 {
        noisy = f.eval.mul_scalar(&noisy, T / 2).unwrap();
    }
    assert!(matches!(
        RefreshMask::apply_with(&f.eval, &f.enc, f.keys.public_key(), &noisy, &policy),
        Err(PackedError::FloodTooNarrow { level: 1, .. })
    ));
    // Switched down from one level above, the same noise is drowned.
    let mut high = ct.clone();
    for _ in 0..3 {
        high = f.eval.mul_scalar(&high, T / 2).unwrap();
    }
    let (masked, _) =
        RefreshMask::apply_with(&f.eval, &f.enc, f.keys.public_key(), &high, &policy).unwrap();
    assert_eq!(masked.level(), 1);
}

/// The figures of docs/refresh.md: at every preset the default flood is
/// 40 or 41 bits and needs level 1 (level 0, 60 bits, is short of the room).
#[test]
fn presets_flood_at_level_1() {
    for p in hecloud_bgv::Preset::ALL {
        let params = p.build().unwrap();
        let policy = BgvMaskPolicy::circuit_private(&params);
        let b = policy.flood_bits.unwrap();
        let need = policy.need_bits(&params).unwrap();
        println!(
            "{}: flood {b} bits, flooded value {:.1} bits, needs log2 Q ≥ {need:.1}; q_0 {:.1}, Q_1 {:.1}; floor {:.1}",
            p.name(),
            policy.flooded_noise_bits(&params).unwrap(),
            params.log_q_at(0),
            params.log_q_at(1),
            params.noise().switching_floor(),
        );
        assert!((40..=41).contains(&b), "{p:?}: {b}");
        assert_eq!(policy.lowest_level(&params), Some(1), "{p:?}");
        assert!(policy.check_level(&params, 0).is_err());
    }
}

/// A refresh across two key sets over the same parameters: a public key of
/// another set re-randomizing, a key holder of another set decrypting, and
/// an answer under another key are refused with `KeyMismatch` (each would
/// give integers mod t like any other); the set's own refresh goes through.
#[test]
fn a_refresh_across_key_sets_is_refused() {
    let f = fixture(2);
    let stranger = KeySet::generate(&f.params, &[], false).unwrap();
    let policy = BgvMaskPolicy::none();
    let ct = f.keys.encrypt(&f.enc.encode(&[1, 2, 3]).unwrap()).unwrap();
    let mismatch = |e: PackedError| {
        matches!(
            e,
            PackedError::Bgv(hecloud_bgv::BgvError::Rlwe(
                hecloud_rlwe::RlweError::KeyMismatch { .. }
            ))
        )
    };
    assert!(mismatch(
        RefreshMask::apply_with(&f.eval, &f.enc, stranger.public_key(), &ct, &policy).unwrap_err()
    ));
    let (masked, mask) =
        RefreshMask::apply_with(&f.eval, &f.enc, f.keys.public_key(), &ct, &policy).unwrap();
    assert!(mismatch(reencrypt(&stranger, &masked).unwrap_err()));
    let mut theirs = reencrypt(&f.keys, &masked).unwrap();
    theirs.set_key_id(stranger.secret_key().key_id());
    assert!(mismatch(mask.remove(&f.eval, &theirs).unwrap_err()));
    let back = mask
        .remove(&f.eval, &reencrypt(&f.keys, &masked).unwrap())
        .unwrap();
    assert_eq!(
        &f.enc.decode(&f.keys.decrypt(&back).unwrap()).unwrap()[..3],
        &[1, 2, 3]
    );
}
