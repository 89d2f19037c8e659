//! Client-aided refresh against the plaintext: values survive, precision
//! matches a fresh encryption, headroom and policy are enforced.

use std::sync::Arc;

use hecloud_ckks::params::test_literal;
use hecloud_ckks::precision::report_real;
use hecloud_ckks::refresh::{CkksMask, MaskPolicy, reencrypt};
use hecloud_ckks::{CkksError, CkksParameters, Encoder, Evaluator, KeySet};
use hecloud_math::Sampler;

fn setup(levels: usize) -> (Arc<CkksParameters>, KeySet, Encoder, Evaluator) {
    let params = CkksParameters::new_insecure_for_tests(test_literal(11, levels), 40).unwrap();
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let enc = Encoder::new(&params);
    let eval = Evaluator::new(&params, keys.evaluation_keys());
    (params, keys, enc, eval)
}

fn random_values(n: usize, bound: f64) -> Vec<f64> {
    let mut rng = Sampler::from_os();
    (0..n)
        .map(|_| (rng.next_u64() as f64 / u64::MAX as f64 * 2.0 - 1.0) * bound)
        .collect()
}

fn refresh(
    params: &Arc<CkksParameters>,
    keys: &KeySet,
    ct: &hecloud_rlwe::Ciphertext,
    policy: &MaskPolicy,
    target: usize,
) -> Result<hecloud_rlwe::Ciphertext, CkksError> {
    let (masked, mask) = CkksMask::apply(params, keys.public_key(), ct, policy)?;
    let fresh = reencrypt(
        params,
        keys.secret_key(),
        &masked,
        target,
        mask.target_scale(),
    )?;
    mask.remove(&fresh)
}

#[test]
fn a_refreshed_product_decrypts_to_the_plain_product_at_the_precision_of_a_fresh_encryption() {
    let (params, keys, enc, eval) = setup(5);
    let slots = params.slots();
    let policy = MaskPolicy::default();
    let x = random_values(slots, 4.0);
    let y = random_values(slots, 4.0);
    let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a * b).collect();
    let ex = keys
        .encrypt(
            &enc.encode_real(&x, params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let ey = keys
        .encrypt(
            &enc.encode_real(&y, params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let p = eval.mul_relin_rescale(&ex, &ey).unwrap();
    let low_level = policy.lowest_level(&params, p.scale()).unwrap();
    let low = eval.drop_level(&p, low_level).unwrap();
    let before = report_real(
        &want,
        &enc.decode_real(&keys.decrypt(&low).unwrap()).unwrap(),
    );
    let back = refresh(&params, &keys, &low, &policy, params.max_level()).unwrap();
    assert_eq!(back.level(), params.max_level());
    assert_eq!(back.scale(), low.scale());
    let after = report_real(
        &want,
        &enc.decode_real(&keys.decrypt(&back).unwrap()).unwrap(),
    );
    // A fresh encryption of the product's exact values at the same scale.
    let fresh = keys
        .encrypt(
            &enc.encode_real(&want, params.max_level(), back.scale())
                .unwrap(),
        )
        .unwrap();
    let reference = report_real(
        &want,
        &enc.decode_real(&keys.decrypt(&fresh).unwrap()).unwrap(),
    );
    eprintln!("before {before}, after {after}, fresh {reference}");
    assert!(after.bits() > 20.0, "{after}");
    // The refreshed value carries the product's error and a fresh
    // encryption's noise (the re-randomization's, 2^16 times smaller, is
    // negligible): √2 times (0.5 bits) the worse of the two at most. The
    // mean error over the slots is stable enough to hold that within 0.8
    // bits; the maximum wanders by a fraction of one.
    let worse = before.log2_mean_err.max(reference.log2_mean_err);
    assert!(
        after.log2_mean_err <= worse + 0.8,
        "before {before}, after {after}, fresh {reference}"
    );
    // The refreshed ciphertext computes on: square it.
    let sq = eval.mul_relin_rescale(&back, &back).unwrap();
    let want_sq: Vec<f64> = want.iter().map(|v| v * v).collect();
    let got = report_real(
        &want_sq,
        &enc.decode_real(&keys.decrypt(&sq).unwrap()).unwrap(),
    );
    // Values up to 16, squared: up to 256, with twice the relative error.
    assert!(got.bits() > 12.0, "{got}");
}

/// The target: within a bit of a fresh encryption at the same
/// scale. A fresh secret-key encryption at the lowest refreshable level,
/// refreshed to the top, against one made at the top: the refresh adds the
/// key holder's fresh noise to the original's (√2, half a bit), and the
/// public-key encryption of zero that re-randomizes c₁ (about 2^8 times a
/// secret-key encryption's noise) is divided away by the boost.
#[test]
fn refreshing_costs_less_than_a_bit_over_a_fresh_encryption() {
    let (params, keys, enc, _) = setup(5);
    let policy = MaskPolicy::default();
    let x = random_values(params.slots(), 1.0);
    let scale = params.default_scale();
    let low_level = policy.lowest_level(&params, scale).unwrap();
    let low = keys
        .encrypt(&enc.encode_real(&x, low_level, scale).unwrap())
        .unwrap();
    let top = params.max_level();
    let (masked, mask) = CkksMask::apply(&params, keys.public_key(), &low, &policy).unwrap();
    let k = policy.boost_bits(&params, low_level, scale);
    assert!(k >= 10, "boost {k}");
    assert_eq!(masked.scale(), scale * f64::from(k).exp2());
    assert_eq!(mask.target_scale(), scale);
    let fresh = reencrypt(&params, keys.secret_key(), &masked, top, scale).unwrap();
    let back = mask.remove(&fresh).unwrap();
    assert_eq!((back.level(), back.scale()), (top, scale));
    let decrypt = |ct| enc.decode_real(&keys.decrypt(ct).unwrap()).unwrap();
    let after = report_real(&x, &decrypt(&back));
    let reference = keys
        .encrypt(&enc.encode_real(&x, top, scale).unwrap())
        .unwrap();
    let reference = report_real(&x, &decrypt(&reference));
    eprintln!("refreshed {after}, fresh {reference}");
    assert!(
        after.log2_mean_err <= reference.log2_mean_err + 1.0,
        "refreshed {after}, fresh {reference}"
    );
}

#[test]
fn refresh_reaches_every_target_level_including_lower_ones() {
    let (params, keys, enc, _) = setup(5);
    let x = random_values(8, 100.0);
    let ct = keys
        .encrypt(
            &enc.encode_real(&x, params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let policy = MaskPolicy::default();
    for target in 0..=params.max_level() {
        let back = refresh(&params, &keys, &ct, &policy, target).unwrap();
        assert_eq!(back.level(), target);
        let got = enc.decode_real(&keys.decrypt(&back).unwrap()).unwrap();
        let r = report_real(&x, &got);
        assert!(r.bits() > 15.0, "target {target}: {r}");
    }
}

#[test]
fn negative_and_zero_values_and_complex_slots_survive() {
    let (params, keys, enc, eval) = setup(5);
    let x = [0.0, -0.0, -1.0, 1.0, -123.456, 1e-6];
    let ct = keys
        .encrypt(
            &enc.encode_real(&x, params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let ct = eval.drop_level(&ct, 3).unwrap();
    let back = refresh(&params, &keys, &ct, &MaskPolicy::default(), 5).unwrap();
    let got = enc.decode_real(&keys.decrypt(&back).unwrap()).unwrap();
    assert!(report_real(&x, &got).bits() > 15.0);
    let z: Vec<num_complex::Complex64> = (0..8)
        .map(|i| num_complex::Complex64::new(i as f64 - 3.0, 0.5 - i as f64))
        .collect();
    let cz = keys
        .encrypt(
            &enc.encode(&z, params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let back = refresh(&params, &keys, &cz, &MaskPolicy::default(), 4).unwrap();
    let got = enc.decode(&keys.decrypt(&back).unwrap()).unwrap();
    let r = hecloud_ckks::precision::report(&z, &got);
    assert!(r.bits() > 15.0, "{r}");
}

#[test]
fn a_level_without_headroom_is_refused_with_the_lowest_usable_level() {
    let (params, keys, enc, eval) = setup(5);
    let ct = keys
        .encrypt(
            &enc.encode_real(&[1.0], params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let policy = MaskPolicy::default();
    // 60 + 45 bits at level 1: the default mask needs 40 + 19 + 1 + 64 + 3.
    let lowest = policy.lowest_level(&params, ct.scale()).unwrap();
    assert_eq!(lowest, 2);
    let low = eval.drop_level(&ct, 1).unwrap();
    match CkksMask::apply(&params, keys.public_key(), &low, &policy) {
        Err(CkksError::NoRefreshHeadroom {
            level: 1,
            need_bits: 127,
            have_bits: 104,
            lowest_level: Some(2),
        }) => {}
        other => panic!("expected NoRefreshHeadroom, got {other:?}"),
    }
    // Less hiding needs less room: λs = 40 masks at level 1.
    let weak = MaskPolicy {
        lambda_s: 40,
        ..policy
    };
    assert_eq!(weak.lowest_level(&params, ct.scale()), Some(1));
    refresh(&params, &keys, &low, &weak, 5).unwrap();
}

#[test]
fn too_little_hiding_is_refused() {
    let (params, _keys, enc, _) = setup(3);
    let ct = _keys
        .encrypt(
            &enc.encode_real(&[1.0], params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let policy = MaskPolicy {
        lambda_s: 39,
        ..MaskPolicy::default()
    };
    assert!(matches!(
        CkksMask::apply(&params, _keys.public_key(), &ct, &policy),
        Err(CkksError::MaskPolicy(_))
    ));
}

#[test]
fn an_answer_under_other_parameters_or_at_another_scale_is_refused() {
    let (params, keys, enc, _) = setup(4);
    let ct = keys
        .encrypt(
            &enc.encode_real(&[1.0], params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let (masked, mask) =
        CkksMask::apply(&params, keys.public_key(), &ct, &MaskPolicy::default()).unwrap();
    let target = mask.target_scale();
    // The key holder takes only a target scale the masked one is 2^k of.
    assert!(matches!(
        reencrypt(&params, keys.secret_key(), &masked, 4, target * 0.75),
        Err(CkksError::MaskPolicy(_))
    ));
    let mut fresh = reencrypt(&params, keys.secret_key(), &masked, 4, target).unwrap();
    fresh.set_scale(fresh.scale() * 2.0);
    assert!(matches!(
        mask.remove(&fresh),
        Err(CkksError::ScaleMismatch { .. })
    ));
    let (other, okeys, oenc, _) = setup(3);
    let foreign = okeys
        .encrypt(
            &oenc
                .encode_real(&[1.0], other.max_level(), other.default_scale())
                .unwrap(),
        )
        .unwrap();
    assert!(mask.remove(&foreign).is_err());
    assert!(reencrypt(&params, keys.secret_key(), &masked, 9, target).is_err());
    // A key holder of another key folder over the same parameters cannot
    // decrypt the masked ciphertext, and its answer is refused.
    let stranger = KeySet::generate(&params, &[], false).unwrap();
    let key_mismatch = |e| {
        matches!(
            e,
            CkksError::Rlwe(hecloud_rlwe::RlweError::KeyMismatch { .. })
        )
    };
    assert!(key_mismatch(
        reencrypt(&params, stranger.secret_key(), &masked, 4, target).unwrap_err()
    ));
    let theirs = reencrypt(&params, keys.secret_key(), &masked, 4, target)
        .map(|c| {
            let mut c = c;
            c.set_key_id(stranger.secret_key().key_id());
            c
        })
        .unwrap();
    assert!(key_mismatch(mask.remove(&theirs).unwrap_err()));
    // Nor is a re-randomizing public key of another key accepted.
    assert!(key_mismatch(
        CkksMask::apply(&params, stranger.public_key(), &ct, &MaskPolicy::default()).unwrap_err()
    ));
    let back = mask
        .remove(&reencrypt(&params, keys.secret_key(), &masked, 4, target).unwrap())
        .unwrap();
    assert_eq!(back.key_id(), keys.secret_key().key_id());
}

#[test]
fn flooding_costs_the_precision_its_width_says() {
    let (params, keys, enc, _) = setup(5);
    let x = random_values(params.slots(), 1.0);
    let ct = keys
        .encrypt(
            &enc.encode_real(&x, params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let policy = MaskPolicy::circuit_private(&params);
    let flood = policy.flood_bits.unwrap();
    let back = refresh(&params, &keys, &ct, &policy, 5).unwrap();
    let r = report_real(&x, &enc.decode_real(&keys.decrypt(&back).unwrap()).unwrap());
    // Noise of 2^flood per coefficient at scale 2^40, grown by the
    // embedding's √N: about 40 − flood − log2(N)/2 bits of precision.
    let expect = 40.0 - flood as f64 - 11.0 / 2.0;
    eprintln!("flood 2^{flood}: {r} (expected about {expect} bits)");
    assert!((r.bits() - expect).abs() < 3.0, "{r}");
}

#[test]
fn the_masked_ciphertext_shares_no_component_with_the_computed_one() {
    let (params, keys, enc, _) = setup(4);
    let ct = keys
        .encrypt(
            &enc.encode_real(&[1.0, 2.0], params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let (masked, _) =
        CkksMask::apply(&params, keys.public_key(), &ct, &MaskPolicy::default()).unwrap();
    // c_1 re-randomized by the encryption of zero, c_0 by it and the mask.
    for i in 0..2 {
        let same = masked.polys()[i]
            .data()
            .iter()
            .zip(ct.polys()[i].data())
            .filter(|(a, b)| a == b)
            .count();
        assert!(same < 8, "component {i}: {same} residues unchanged");
    }
}
