//! The refresh protocol's messages: round trips against the plaintext,
//! and every forged, mismatched, replayed or malformed message refused.

use std::sync::Arc;

use hecloud_bgv::{BgvParameters, Encoder as BgvEncoder, Evaluator as BgvEvaluator};
use hecloud_circuits::packed::{BgvMaskPolicy, Refresher};
use hecloud_ckks::refresh::MaskPolicy;
use hecloud_ckks::{CkksParameters, Encoder, KeySet};
use hecloud_math::Sampler;
use hecloud_protocol::Message;
use hecloud_protocol::refresh::*;
use hecloud_rlwe::Ciphertext;

/// A copy of a key set's secret key (the responder owns its own).
fn sk_of(keys: &KeySet) -> hecloud_rlwe::SecretKey {
    hecloud_rlwe::SecretKey::from_coefficients(
        keys.params().rlwe(),
        &keys.secret_key().export_coefficients(),
    )
    .unwrap()
}

fn ckks() -> (Arc<CkksParameters>, Arc<KeySet>, Encoder) {
    let params =
        CkksParameters::new_insecure_for_tests(hecloud_ckks::params::test_literal(10, 5), 40)
            .unwrap();
    let keys = Arc::new(KeySet::generate(&params, &[], false).unwrap());
    (params.clone(), keys, Encoder::new(&params))
}

fn ckks_ct(params: &CkksParameters, keys: &KeySet, enc: &Encoder, x: &[f64]) -> Ciphertext {
    keys.encrypt(
        &enc.encode_real(x, params.max_level(), params.default_scale())
            .unwrap(),
    )
    .unwrap()
}

/// A round refreshing `ct` to level 5 under the default policy, and its request.
fn request(
    job: &str,
    params: &Arc<CkksParameters>,
    keys: &KeySet,
    ct: &Ciphertext,
) -> (RefreshRound, Vec<u8>) {
    RefreshRound::ckks(
        job,
        params,
        keys.public_key(),
        &[ct],
        &MaskPolicy::default(),
        5,
    )
    .unwrap()
}

fn random(n: usize) -> Vec<f64> {
    let mut rng = Sampler::from_os();
    (0..n)
        .map(|_| rng.next_u64() as f64 / u64::MAX as f64 * 20.0 - 10.0)
        .collect()
}

#[test]
fn a_batch_of_ckks_ciphertexts_comes_back_fresh_at_the_target_level() {
    let (params, keys, enc) = ckks();
    let xs: Vec<Vec<f64>> = (0..3).map(|_| random(16)).collect();
    let cts: Vec<Ciphertext> = xs
        .iter()
        .map(|x| ckks_ct(&params, &keys, &enc, x))
        .collect();
    let refs: Vec<&Ciphertext> = cts.iter().collect();
    let holder = RefreshResponder::new().with_ckks(params.clone(), sk_of(&keys));
    let link = DirectLink {
        job_id: "job".into(),
        responder: &holder,
    };
    let out = refresh_ckks(
        &link,
        &params,
        keys.public_key(),
        &MaskPolicy::default(),
        &refs,
        4,
    )
    .unwrap();
    assert_eq!(out.len(), 3);
    for (x, ct) in xs.iter().zip(&out) {
        assert_eq!(ct.level(), 4);
        let y = enc.decode_real(&keys.decrypt(ct).unwrap()).unwrap();
        let err = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(err < 1e-5, "error {err}");
    }
    let s = holder.stats();
    assert_eq!((s.requests, s.ciphertexts), (1, 3));
    assert!(s.bytes_out > 0 && s.bytes_in > s.bytes_out / 2);
}

#[test]
fn a_bgv_batch_comes_back_fresh_and_the_remote_refresher_works_in_circuits() {
    let params =
        BgvParameters::new_insecure_for_tests(hecloud_bgv::params::test_literal(10, 2, 65537))
            .unwrap();
    let keys = Arc::new(hecloud_bgv::KeySet::generate(&params, &[], false).unwrap());
    let (enc, eval) = (
        BgvEncoder::new(&params),
        BgvEvaluator::new(&params, keys.evaluation_keys()),
    );
    let x: Vec<u64> = (0..32).map(|i| i * 1000 + 7).collect();
    let ct = keys.encrypt(&enc.encode(&x).unwrap()).unwrap();
    let sq = eval.mul_relin(&ct, &ct).unwrap();
    let holder = RefreshResponder::new().with_bgv(keys.clone());
    let link = DirectLink {
        job_id: "job".into(),
        responder: &holder,
    };
    let r = RemoteRefresher::new(&link, &eval, keys.public_key());
    let fresh = r.refresh_many(&[sq.clone(), ct.clone()]).unwrap();
    assert_eq!(fresh[0].level(), params.max_level());
    let got = enc.decode(&keys.decrypt(&fresh[0]).unwrap()).unwrap();
    let t = 65537u64;
    for (i, v) in x.iter().enumerate() {
        assert_eq!(got[i], v * v % t, "slot {i}");
    }
    // A lower target level, too.
    let none = BgvMaskPolicy::none();
    let low = refresh_bgv(&link, &eval, &enc, keys.public_key(), &[&sq], &none, 1).unwrap();
    assert_eq!(low[0].level(), 1);
    assert_eq!(
        enc.decode(&keys.decrypt(&low[0]).unwrap()).unwrap()[3],
        x[3] * x[3] % t
    );
    // With flooding, through the remote refresher: the same slots.
    let flood = BgvMaskPolicy::circuit_private(&params);
    let r = RemoteRefresher::new(&link, &eval, keys.public_key()).with_policy(flood);
    let fresh = r.refresh_many(&[sq]).unwrap();
    let got = enc.decode(&keys.decrypt(&fresh[0]).unwrap()).unwrap();
    for (i, v) in x.iter().enumerate() {
        assert_eq!(got[i], v * v % t, "flooded, slot {i}");
    }
}

#[test]
fn a_request_is_answered_once() {
    let (params, keys, enc) = ckks();
    let ct = ckks_ct(&params, &keys, &enc, &[1.0]);
    let (_round, req) = request("j", &params, &keys, &ct);
    let holder = RefreshResponder::new().with_ckks(params.clone(), sk_of(&keys));
    holder.answer(&req).unwrap();
    assert!(matches!(holder.answer(&req), Err(RefreshError::Replay(_))));
}

#[test]
fn a_request_with_missing_or_foreign_target_scales_is_refused() {
    let (params, keys, enc) = ckks();
    let ct = ckks_ct(&params, &keys, &enc, &[1.0]);
    let holder = RefreshResponder::new().with_ckks(params.clone(), sk_of(&keys));
    let forge = |f: &dyn Fn(&mut RefreshRequest)| {
        let (_, req) = request("j", &params, &keys, &ct);
        let mut req = RefreshRequest::decode(&req).unwrap();
        f(&mut req);
        holder.answer(&req.encode())
    };
    assert!(matches!(
        forge(&|r| r.target_scales.clear()),
        Err(RefreshError::Mismatch(_))
    ));
    // Not the masked scale over a power of two: the key holder cannot
    // divide exactly, and says so.
    assert!(matches!(
        forge(&|r| r.target_scales[0] *= 1.5),
        Err(RefreshError::Ckks(_))
    ));
}

#[test]
fn a_holder_serving_named_jobs_refuses_others() {
    let (params, keys, enc) = ckks();
    let ct = ckks_ct(&params, &keys, &enc, &[1.0]);
    let holder = RefreshResponder::new()
        .with_ckks(params.clone(), sk_of(&keys))
        .only_named_jobs();
    holder.serve_job("mine");
    let (_, other) = request("theirs", &params, &keys, &ct);
    assert!(matches!(holder.answer(&other), Err(RefreshError::UnknownJob(j)) if j == "theirs"));
    let (round, mine) = request("mine", &params, &keys, &ct);
    round.finish(&holder.answer(&mine).unwrap()).unwrap();
}

#[test]
fn a_holder_without_the_key_refuses() {
    let (params, keys, enc) = ckks();
    let ct = ckks_ct(&params, &keys, &enc, &[1.0]);
    let (_, req) = request("j", &params, &keys, &ct);
    let other =
        CkksParameters::new_insecure_for_tests(hecloud_ckks::params::test_literal(10, 4), 40)
            .unwrap();
    let other_keys = KeySet::generate(&other, &[], false).unwrap();
    let wrong = RefreshResponder::new().with_ckks(other.clone(), sk_of(&other_keys));
    assert!(matches!(
        wrong.answer(&req),
        Err(RefreshError::NoKey("CKKS"))
    ));
    let none = RefreshResponder::new();
    assert!(matches!(
        none.answer(&req),
        Err(RefreshError::NoKey("CKKS"))
    ));
}

/// A round and the honest reply's decoded form, to forge variants of.
fn round_and_reply() -> (RefreshRound, RefreshReply, Arc<KeySet>) {
    let (params, keys, enc) = ckks();
    let a = ckks_ct(&params, &keys, &enc, &[1.0]);
    let b = ckks_ct(&params, &keys, &enc, &[2.0]);
    let (round, req) = RefreshRound::ckks(
        "j",
        &params,
        keys.public_key(),
        &[&a, &b],
        &MaskPolicy::default(),
        5,
    )
    .unwrap();
    let holder = RefreshResponder::new().with_ckks(params.clone(), sk_of(&keys));
    let reply = RefreshReply::decode(&holder.answer(&req).unwrap()).unwrap();
    (round, reply, keys)
}

fn refused(forge: impl FnOnce(&mut RefreshReply, &KeySet)) -> RefreshError {
    let (round, mut reply, keys) = round_and_reply();
    forge(&mut reply, &keys);
    round.finish(&reply.encode()).unwrap_err()
}

#[test]
fn forged_and_mismatched_replies_are_refused() {
    let mismatch = |e: RefreshError, what: &str| match e {
        RefreshError::Mismatch(m) => assert!(m.contains(what), "{m}"),
        other => panic!("expected a mismatch ({what}), got {other:?}"),
    };
    mismatch(refused(|r, _| r.request_id[0] ^= 1), "answers request");
    mismatch(refused(|r, _| r.params_hash[0] ^= 1), "other parameters");
    mismatch(refused(|r, _| r.target_level = 4), "level 4");
    mismatch(
        refused(|r, _| drop(r.ciphertexts.pop())),
        "1 ciphertexts for 2",
    );
    mismatch(
        refused(|r, _| {
            let c = r.ciphertexts[0].clone();
            r.ciphertexts.push(c)
        }),
        "3 ciphertexts for 2",
    );
    mismatch(
        refused(|r, _| {
            let n = r.ciphertexts[1].len();
            r.ciphertexts[1].truncate(n / 2)
        }),
        "ciphertext 1 does not decode",
    );
    // A well-formed ciphertext at another level than the header says.
    mismatch(
        refused(|r, k| {
            let p = k.params();
            let enc = Encoder::new(p);
            let pt = enc.encode_real(&[1.0], 3, p.default_scale()).unwrap();
            r.ciphertexts[0] = k.encrypt_sk(&pt).unwrap().to_bytes();
        }),
        "at level 3",
    );
    // A ciphertext at another scale cannot be unmasked.
    mismatch(
        refused(|r, k| {
            let p = k.params();
            let enc = Encoder::new(p);
            let pt = enc.encode_real(&[1.0], 5, p.default_scale() * 4.0).unwrap();
            r.ciphertexts[0] = k.encrypt_sk(&pt).unwrap().to_bytes();
        }),
        "cannot be unmasked",
    );
}

#[test]
fn malformed_bytes_are_refused_on_both_sides() {
    let (params, keys, enc) = ckks();
    let ct = ckks_ct(&params, &keys, &enc, &[1.0]);
    let holder = RefreshResponder::new().with_ckks(params.clone(), sk_of(&keys));
    let (round, req) = request("j", &params, &keys, &ct);
    for cut in [0, 7, 8, 30, req.len() / 2, req.len() - 1] {
        assert!(holder.answer(&req[..cut]).is_err(), "cut at {cut}");
    }
    let mut extra = req.clone();
    extra.push(0);
    assert!(matches!(
        holder.answer(&extra),
        Err(RefreshError::Decode(_))
    ));
    assert!(matches!(
        round.finish(b"garbage"),
        Err(RefreshError::Decode(_))
    ));
    // A reply in place of a request, and the reverse.
    let (round, req) = request("j", &params, &keys, &ct);
    assert!(matches!(
        holder.answer(&holder.answer(&req).unwrap()),
        Err(RefreshError::Decode(_))
    ));
    assert!(matches!(round.finish(&req), Err(RefreshError::Decode(_))));
}

#[test]
fn a_ciphertext_without_headroom_or_a_target_above_the_top_is_refused_before_sending() {
    let (params, keys, enc) = ckks();
    let ct = ckks_ct(&params, &keys, &enc, &[1.0]);
    let mut low = ct.clone();
    low.drop_to_level(1).unwrap();
    assert!(matches!(
        RefreshRound::ckks(
            "j",
            &params,
            keys.public_key(),
            &[&low],
            &MaskPolicy::default(),
            5
        ),
        Err(RefreshError::Ckks(
            hecloud_ckks::CkksError::NoRefreshHeadroom { .. }
        ))
    ));
    assert!(matches!(
        RefreshRound::ckks(
            "j",
            &params,
            keys.public_key(),
            &[&ct],
            &MaskPolicy::default(),
            6
        ),
        Err(RefreshError::TooLarge(_))
    ));
    assert!(matches!(
        RefreshRound::ckks(
            "j",
            &params,
            keys.public_key(),
            &[],
            &MaskPolicy::default(),
            5
        ),
        Err(RefreshError::TooLarge(_))
    ));
}

#[test]
fn a_link_failure_is_reported_as_such() {
    struct Gone;
    impl RefreshLink for Gone {
        fn job_id(&self) -> &str {
            "j"
        }
        fn round_trip(&self, _: Vec<u8>) -> std::result::Result<Vec<u8>, String> {
            Err("the key holder did not answer within 1s".into())
        }
    }
    let (params, keys, enc) = ckks();
    let ct = ckks_ct(&params, &keys, &enc, &[1.0]);
    match refresh_ckks(
        &Gone,
        &params,
        keys.public_key(),
        &MaskPolicy::default(),
        &[&ct],
        5,
    ) {
        Err(RefreshError::Link(m)) => assert!(m.contains("did not answer")),
        other => panic!("{other:?}"),
    }
}
