//! Refresh nodes in graphs: a computation deeper than its parameters runs
//! through the key holder, predicted exactly, batched, and every missing
//! piece refused with a reason.

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use hecloud_ckks::refresh::MaskPolicy;
use hecloud_ckks::{CkksParameters, Encoder, KeySet};
use hecloud_protocol::refresh::{DirectLink, RefreshLink, RefreshResponder};
use hecloud_protocol::*;

/// A copy of a key set's secret key (the responder owns its own).
fn sk_of(keys: &KeySet) -> hecloud_rlwe::SecretKey {
    hecloud_rlwe::SecretKey::from_coefficients(
        keys.params().rlwe(),
        &keys.secret_key().export_coefficients(),
    )
    .unwrap()
}

fn ckks_session(levels: usize, refresh: bool) -> (Arc<CkksParameters>, Arc<KeySet>, SessionKeys) {
    let params =
        CkksParameters::new_insecure_for_tests(hecloud_ckks::params::test_literal(10, levels), 45)
            .unwrap();
    let ks = Arc::new(KeySet::generate(&params, &[], false).unwrap());
    let sp = SessionParams {
        ckks: Some(params.clone()),
        tfhe: None,
        bgv: None,
    };
    let mut keys = SessionKeys::from_parts(sp, ks.evaluation_keys(), None).unwrap();
    if refresh {
        keys = keys
            .with_refresh(Some(ks.public_key().clone()), None, MaskPolicy::default())
            .unwrap();
    }
    (params, ks, keys)
}

fn direct(holder: &RefreshResponder) -> DirectLink<'_> {
    DirectLink {
        job_id: "job".into(),
        responder: holder,
    }
}

fn input(params: &Arc<CkksParameters>, ks: &KeySet, x: &[f64]) -> Object {
    let enc = Encoder::new(params);
    Object::CkksCiphertext(
        ks.encrypt(
            &enc.encode_real(x, params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap(),
    )
}

fn decode(params: &Arc<CkksParameters>, ks: &KeySet, o: &Object) -> Vec<f64> {
    let Object::CkksCiphertext(c) = o else {
        panic!("not a CKKS ciphertext")
    };
    Encoder::new(params)
        .decode_real(&ks.decrypt(c).unwrap())
        .unwrap()
}

/// x ↦ x² applied `rounds` times, refreshing to the top whenever the next
/// square would go below the lowest refresh level (2 here).
fn squares(rounds: usize, top: u32) -> Graph {
    let mut g = Graph::new();
    let mut x = g.input(0);
    let mut level = top;
    for _ in 0..rounds {
        if level == 2 {
            x = g.refresh(x, top);
            level = top;
        }
        let m = g.mul(x, x);
        x = g.rescale(m);
        level -= 1;
    }
    g.output("y", x);
    g
}

#[test]
fn a_computation_deeper_than_the_parameters_succeeds_with_refreshes() {
    let (params, ks, keys) = ckks_session(4, true);
    let holder = RefreshResponder::new().with_ckks(params.clone(), sk_of(&ks));
    let link = direct(&holder);
    // Eight squarings on four levels: 2^8 = 256th power of values near 1.
    let x: Vec<f64> = (0..16).map(|i| 1.0 - i as f64 / 1024.0).collect();
    let want: Vec<f64> = x.iter().map(|v| v.powi(256)).collect();
    let g = squares(8, 4);
    let inputs = [input(&params, &ks, &x)];
    let types = vec![inputs[0].value_type().unwrap()];
    let v = validate(&g, &keys.capabilities(), &types).unwrap();
    assert_eq!(v.cost().refreshes, 3);
    assert!(v.cost().refresh_bytes_up > v.cost().refresh_bytes_down / 4);
    let out = common::execute_as_predicted_with(&v, &keys, &inputs, Some(&link));
    let got = decode(&params, &ks, &out[0].1);
    for (w, y) in want.iter().zip(&got) {
        assert!((w - y).abs() < 1e-3, "want {w}, got {y}");
    }
    assert_eq!(holder.stats().requests, 3);
    // Without refreshes the same depth is refused before it runs.
    let mut plain = Graph::new();
    let mut y = plain.input(0);
    for _ in 0..8 {
        let m = plain.mul(y, y);
        y = plain.rescale(m);
    }
    plain.output("y", y);
    let e = validate(&plain, &keys.capabilities(), &types).unwrap_err();
    assert!(
        matches!(
            e,
            ValidationError::LevelsExhausted { .. }
                | ValidationError::ScaleOverflow { level: 0, .. }
        ),
        "{e:?}"
    );
}

#[test]
fn refreshes_ready_together_share_one_round_trip() {
    let (params, ks, keys) = ckks_session(4, true);
    let holder = RefreshResponder::new().with_ckks(params.clone(), sk_of(&ks));
    let link = direct(&holder);
    let mut g = Graph::new();
    let (a, b) = (g.input(0), g.input(1));
    let ra = g.refresh(a, 3);
    let s = g.add(ra, ra);
    let rb = g.refresh(b, 3);
    let t = g.add(s, rb);
    g.output("t", t);
    let inputs = [
        input(&params, &ks, &[1.0, 2.0]),
        input(&params, &ks, &[0.5, 0.25]),
    ];
    let types: Vec<_> = inputs.iter().map(|o| o.value_type().unwrap()).collect();
    let v = validate(&g, &keys.capabilities(), &types).unwrap();
    let out = common::execute_as_predicted_with(&v, &keys, &inputs, Some(&link));
    let got = decode(&params, &ks, &out[0].1);
    assert!((got[0] - 2.5).abs() < 1e-6 && (got[1] - 4.25).abs() < 1e-6);
    let s = holder.stats();
    assert_eq!((s.requests, s.ciphertexts), (1, 2));
}

#[test]
fn refresh_without_a_refresh_part_without_headroom_or_above_the_top_is_refused() {
    let (params, ks, no_refresh) = ckks_session(4, false);
    let inputs = [input(&params, &ks, &[1.0])];
    let types = vec![inputs[0].value_type().unwrap()];
    // input → refresh(target) → output.
    let refresh_to = |target: u32| {
        let mut g = Graph::new();
        let x = g.input(0);
        let r = g.refresh(x, target);
        g.output("r", r);
        g
    };
    let g = refresh_to(4);
    let refused = |e: ValidationError, what: &str| match e {
        ValidationError::RefreshRefused { reason, .. } => {
            assert!(reason.contains(what), "{reason}")
        }
        other => panic!("expected a refused refresh ({what}), got {other:?}"),
    };
    refused(
        validate(&g, &no_refresh.capabilities(), &types).unwrap_err(),
        "no refresh part",
    );
    let (_, _, keys) = ckks_session(4, true);
    let caps = keys.capabilities();
    refused(
        validate(&refresh_to(5), &caps, &types).unwrap_err(),
        "above the top level",
    );
    // A refresh to a level decoding could not check (this layout decodes
    // over q0 and q1, checked by q2).
    refused(
        validate(&refresh_to(1), &caps, &types).unwrap_err(),
        "level 2 is the lowest",
    );
    let ValueType::CkksCiphertext { scale, .. } = types[0] else {
        panic!("a ciphertext input")
    };
    let at_level_1 = [ValueType::CkksCiphertext {
        level: 1,
        scale,
        degree: 1,
    }];
    refused(
        validate(&g, &caps, &at_level_1).unwrap_err(),
        "refresh at level 2 or above",
    );
}

struct Failing(&'static str);

impl RefreshLink for Failing {
    fn job_id(&self) -> &str {
        "job"
    }
    fn round_trip(&self, req: Vec<u8>) -> Result<Vec<u8>, String> {
        match self.0 {
            "garbage" => Ok(req),
            reason => Err(reason.into()),
        }
    }
}

#[test]
fn a_missing_silent_or_lying_key_holder_fails_the_job_with_a_reason() {
    let (params, ks, keys) = ckks_session(4, true);
    let inputs = [input(&params, &ks, &[1.0])];
    let types = vec![inputs[0].value_type().unwrap()];
    let g = squares(4, 4);
    let v = validate(&g, &keys.capabilities(), &types).unwrap();
    let run = |link: Option<&dyn RefreshLink>| {
        execute_with_refresh(
            &v,
            &keys,
            &inputs,
            &AtomicBool::new(false),
            &mut |_| {},
            link,
        )
        .unwrap_err()
    };
    let reason = |e: ExecError| match e {
        ExecError::Refresh { reason, .. } => reason,
        other => panic!("expected a refresh failure, got {other:?}"),
    };
    assert!(reason(run(None)).contains("no key holder"));
    assert!(
        reason(run(Some(&Failing(
            "the key holder did not answer within 1s"
        ))))
        .contains("did not answer")
    );
    // The request echoed back is not a reply.
    assert!(reason(run(Some(&Failing("garbage")))).contains("malformed"));
    // Keys without the public key the graph was validated with.
    let (_, _, bare) = ckks_session(4, false);
    let e = execute_with_refresh(
        &v,
        &bare,
        &inputs,
        &AtomicBool::new(false),
        &mut |_| {},
        None,
    )
    .unwrap_err();
    assert!(matches!(e, ExecError::KeysMismatch(_)), "{e:?}");
}

/// `out` decrypts to x^(2^squarings) mod 65537 in every slot.
fn assert_squarings(
    enc: &hecloud_bgv::Encoder,
    ks: &hecloud_bgv::KeySet,
    out: &Object,
    x: &[u64],
    squarings: usize,
) {
    let Object::BgvCiphertext(c) = out else {
        panic!("not a BGV ciphertext")
    };
    let got = enc.decode(&ks.decrypt(c).unwrap()).unwrap();
    let t = 65537u128;
    for (i, &v) in x.iter().enumerate() {
        let mut w = v as u128 % t;
        for _ in 0..squarings {
            w = w * w % t;
        }
        assert_eq!(got[i] as u128, w, "slot {i}");
    }
}

/// Without and with circuit privacy: a policy with flooding floods BGV
/// refreshes too, which are then sent at level 1 (the flood does not fit
/// q_0): more bytes up, the same slots, and a level-0 operand refused.
#[test]
fn a_bgv_product_chain_deeper_than_the_parameters_runs_with_refreshes_as_predicted() {
    let params = hecloud_bgv::BgvParameters::new_insecure_for_tests(
        hecloud_bgv::params::test_literal(10, 2, 65537),
    )
    .unwrap();
    let ks = Arc::new(hecloud_bgv::KeySet::generate(&params, &[], false).unwrap());
    let enc = hecloud_bgv::Encoder::new(&params);
    let x: Vec<u64> = (0..64).map(|i| i * 37 + 3).collect();
    let inputs = [Object::BgvCiphertext(
        ks.encrypt(&enc.encode(&x).unwrap()).unwrap(),
    )];
    let types = vec![inputs[0].value_type().unwrap()];
    // x^(2^6) by six squarings, refreshing before each.
    let mut g = Graph::new();
    let mut y = g.input(0);
    for _ in 0..6 {
        y = g.bgv_refresh(y, 2);
        y = g.bgv_mul(y, y);
    }
    g.output("y", y);
    let mut bytes_up = vec![];
    let flooded = MaskPolicy {
        flood_bits: Some(40),
        ..MaskPolicy::default()
    };
    for policy in [MaskPolicy::default(), flooded] {
        let keys = common::bgv_session(&params, &ks)
            .with_refresh(None, Some(ks.public_key().clone()), policy)
            .unwrap();
        let holder = RefreshResponder::new().with_bgv(ks.clone());
        let link = direct(&holder);
        let v = validate(&g, &keys.capabilities(), &types).unwrap();
        assert_eq!(v.cost().refreshes, 6);
        bytes_up.push(v.cost().refresh_bytes_up);
        let out = common::execute_as_predicted_with(&v, &keys, &inputs, Some(&link));
        assert_squarings(&enc, &ks, &out[0].1, &x, 6);
        assert_eq!(holder.stats().ciphertexts, 6);
        if policy.flood_bits.is_some() {
            // A level-0 operand cannot hold the flood: refused up front.
            let mut low = Graph::new();
            let a = low.input(0);
            let a = low.bgv_mod_switch(a, 0);
            let r = low.bgv_refresh(a, 2);
            low.output("r", r);
            let e = validate(&low, &keys.capabilities(), &types).unwrap_err();
            assert!(matches!(e, ValidationError::RefreshRefused { .. }), "{e}");
        }
    }
    assert!(bytes_up[1] > bytes_up[0], "{bytes_up:?}");
}

#[test]
fn the_planner_inserts_the_refreshes_a_deep_graph_needs_and_no_more() {
    let (params, ks, keys) = ckks_session(4, true);
    let holder = RefreshResponder::new().with_ckks(params.clone(), sk_of(&ks));
    let link = direct(&holder);
    let x: Vec<f64> = (0..16).map(|i| 1.0 - i as f64 / 1024.0).collect();
    let inputs = [input(&params, &ks, &x)];
    let types = vec![inputs[0].value_type().unwrap()];
    let caps = keys.capabilities();
    let g = common::squares(8);
    assert!(validate(&g, &caps, &types).is_err());
    let planned = insert_refreshes(&g, &caps, &types, &ValidationLimits::UNLIMITED).unwrap();
    let v = validate(&planned, &caps, &types).unwrap();
    // Levels 4 → 2 twice over, then 4 → 0 at the end: two refreshes.
    assert_eq!(v.cost().refreshes, 2, "{planned:?}");
    let out = common::execute_as_predicted_with(&v, &keys, &inputs, Some(&link));
    let got = decode(&params, &ks, &out[0].1);
    for (v, y) in x.iter().zip(&got) {
        assert!((v.powi(256) - y).abs() < 1e-3, "{} vs {y}", v.powi(256));
    }
    assert_eq!(holder.stats().ciphertexts, 2);
    // A graph that fits is left alone; so is one the session cannot refresh.
    let fits = common::squares(4);
    assert_eq!(
        insert_refreshes(&fits, &caps, &types, &ValidationLimits::UNLIMITED).unwrap(),
        fits
    );
    let (_, _, bare) = ckks_session(4, false);
    assert_eq!(
        insert_refreshes(
            &g,
            &bare.capabilities(),
            &types,
            &ValidationLimits::UNLIMITED
        )
        .unwrap(),
        g
    );
}

#[test]
fn the_planner_refreshes_before_polynomials_that_lack_the_depth() {
    let (params, ks, keys) = ckks_session(6, true);
    let holder = RefreshResponder::new().with_ckks(params.clone(), sk_of(&ks));
    let link = direct(&holder);
    // p(y) = T_1(y)/2 + T_3(y)/4 on [-1, 1]: depth 2 (degree 3), applied 4
    // times: 8 levels or more on 6.
    let coeffs = vec![0.0, 0.5, 0.0, 0.25];
    let p = |x: f64| 0.5 * x + 0.25 * (4.0 * x * x * x - 3.0 * x);
    let mut g = Graph::new();
    let mut y = g.input(0);
    for _ in 0..4 {
        y = g.chebyshev(y, coeffs.clone(), -1.0, 1.0);
    }
    g.output("y", y);
    let x: Vec<f64> = (0..16).map(|i| i as f64 / 8.0 - 1.0).collect();
    let inputs = [input(&params, &ks, &x)];
    let types = vec![inputs[0].value_type().unwrap()];
    let caps = keys.capabilities();
    assert!(validate(&g, &caps, &types).is_err());
    let planned = insert_refreshes(&g, &caps, &types, &ValidationLimits::UNLIMITED).unwrap();
    let v = validate(&planned, &caps, &types).unwrap();
    assert!(v.cost().refreshes >= 1);
    let out = common::execute_as_predicted_with(&v, &keys, &inputs, Some(&link));
    let got = decode(&params, &ks, &out[0].1);
    for (v, y) in x.iter().zip(&got) {
        let want = p(p(p(p(*v))));
        assert!((want - y).abs() < 1e-4, "{want} vs {y}");
    }
}

/// The planner for BGV: a chain of squarings deeper than the parameters,
/// with no refresh node, is refused for want of budget; with refreshes
/// inserted where the budget runs out it runs, as predicted, to x^(2^8).
#[test]
fn the_planner_refreshes_a_bgv_chain_where_its_budget_runs_out() {
    let params = hecloud_bgv::BgvParameters::new_insecure_for_tests(
        hecloud_bgv::params::test_literal(10, 2, 65537),
    )
    .unwrap();
    let ks = Arc::new(hecloud_bgv::KeySet::generate(&params, &[], false).unwrap());
    let keys = common::bgv_session(&params, &ks)
        .with_refresh(None, Some(ks.public_key().clone()), MaskPolicy::default())
        .unwrap();
    let holder = RefreshResponder::new().with_bgv(ks.clone());
    let link = direct(&holder);
    let enc = hecloud_bgv::Encoder::new(&params);
    let x: Vec<u64> = (0..64).map(|i| i * 91 + 5).collect();
    let inputs = [Object::BgvCiphertext(
        ks.encrypt(&enc.encode(&x).unwrap()).unwrap(),
    )];
    let types = vec![inputs[0].value_type().unwrap()];
    let mut g = Graph::new();
    let mut y = g.input(0);
    for _ in 0..8 {
        y = g.bgv_mul(y, y);
    }
    g.output("y", y);
    let caps = keys.capabilities();
    let e = validate(&g, &caps, &types).unwrap_err();
    assert!(
        matches!(
            e,
            ValidationError::BudgetExhausted { .. } | ValidationError::LevelsExhausted { .. }
        ),
        "{e}"
    );
    let planned = insert_refreshes(&g, &caps, &types, &ValidationLimits::UNLIMITED).unwrap();
    let v = validate(&planned, &caps, &types).unwrap();
    let n = v.cost().refreshes;
    assert!((1..8).contains(&n), "{n} refreshes: {planned:?}");
    let out = common::execute_as_predicted_with(&v, &keys, &inputs, Some(&link));
    assert_squarings(&enc, &ks, &out[0].1, &x, 8);
    assert_eq!(holder.stats().ciphertexts, n as u64);
    // Without a BGV public key in the session the graph is left as it is.
    let bare = common::bgv_session(&params, &ks);
    let same = insert_refreshes(
        &g,
        &bare.capabilities(),
        &types,
        &ValidationLimits::UNLIMITED,
    )
    .unwrap();
    assert_eq!(same, g);
}
