//! Messages shared by the decoder and golden-file tests: one of each kind,
//! built from fixed values so their encoding is reproducible.

#![allow(dead_code)]

use hecloud_ckks::params::test_literal;
use hecloud_protocol::*;

pub fn sample_graph() -> Graph {
    let mut g = Graph::new();
    let x = g.input(0);
    let y = g.input(1);
    let v = g.plain(vec![0.5, -1.5, 2.0]);
    let c = g.constant(3.25);
    let m = g.mul(x, y);
    let m = g.rescale(m);
    let a = g.add(m, v);
    let s = g.sub(c, a);
    let r = g.rotate(s, -1);
    let r = g.rotate_and_sum(r, 8);
    let j = g.conjugate(r);
    let j = g.drop_level(j, 1);
    let n = g.neg(j);
    let p = g.chebyshev(n, vec![0.1, 0.2], -1.0, 1.0);
    g.output("p", p);
    let u: Vec<u32> = (2..6).map(|i| g.input(i)).collect();
    let su = g.int_sum(u.clone(), true);
    let lt = g.int_compare(u[0], u[1], Relation::Le);
    let mn = g.int_min(u[2], u[3]);
    let mx = g.int_max(u[2], u[3]);
    g.output("sum", su);
    g.output("le", lt);
    g.output("min", mn);
    g.output("max", mx);
    g
}

/// A graph of every BGV operation.
/// x ↦ x², `rounds` times (each square rescaled), with no refresh or
/// bootstrap: deeper than the parameters once `rounds` passes their levels.
pub fn squares(rounds: usize) -> Graph {
    let mut g = Graph::new();
    let mut x = g.input(0);
    for _ in 0..rounds {
        let m = g.mul(x, x);
        x = g.rescale(m);
    }
    g.output("y", x);
    g
}

pub fn bgv_graph() -> Graph {
    let mut g = Graph::new();
    let (x, y) = (g.input(0), g.input(1));
    let a = g.bgv_add(x, y);
    let s = g.bgv_sub(a, y);
    let n = g.bgv_neg(s);
    let m = g.bgv_mul(n, x);
    let sum = g.bgv_sum(vec![m, x, y]);
    let ss = g.bgv_slot_sum(sum);
    let r = g.bgv_rotate_rows(ss, -3);
    let c = g.bgv_rotate_columns(r);
    let c = g.bgv_add_scalar(c, 7);
    let c = g.bgv_mul_scalar(c, 65536);
    let lt = g.bgv_less_than(x, y, 16);
    let low = g.bgv_mod_switch(c, 0);
    g.output("low", low);
    g.output("lt", lt);
    g
}

/// A graph of every packed-bit BGV operation (bits in slots).
pub fn bgv_bits_graph() -> Graph {
    let mut g = Graph::new();
    let (x, y, z) = (g.input(0), g.input(1), g.input(2));
    let a = g.bgv_bits_add(x, y, 8);
    let s = g.bgv_bits_sum(vec![x, y, z], 8);
    let lt = g.bgv_bits_lt(a, s, 8);
    let gt = g.bgv_bits_gt(x, y, 1024);
    let low = g.bgv_mod_switch(lt, 0);
    g.output("lt", low);
    g.output("gt", gt);
    g
}

/// The session keys of a BGV-only session with `ks`'s evaluation keys.
pub fn bgv_session(
    params: &std::sync::Arc<hecloud_bgv::BgvParameters>,
    ks: &hecloud_bgv::KeySet,
) -> SessionKeys {
    let sp = SessionParams {
        ckks: None,
        tfhe: None,
        bgv: Some(params.clone()),
    };
    SessionKeys::from_parts(sp, hecloud_ckks::EvaluationKeys::default(), None)
        .unwrap()
        .with_bgv_keys(ks.evaluation_keys())
        .unwrap()
}

/// Executes the validated `v` on `inputs`; every output must carry exactly
/// the type validation predicted.
pub fn execute_as_predicted(
    v: &ValidatedGraph,
    keys: &SessionKeys,
    inputs: &[Object],
) -> Vec<(String, Object)> {
    execute_as_predicted_with(v, keys, inputs, None)
}

/// [`execute_as_predicted`] with a key holder for refresh nodes.
pub fn execute_as_predicted_with(
    v: &ValidatedGraph,
    keys: &SessionKeys,
    inputs: &[Object],
    link: Option<&dyn refresh::RefreshLink>,
) -> Vec<(String, Object)> {
    let predicted: Vec<ValueType> = v
        .output_types()
        .into_iter()
        .map(|(_, t)| t.clone())
        .collect();
    let out = execute_with_refresh(
        v,
        keys,
        inputs,
        &std::sync::atomic::AtomicBool::new(false),
        &mut |_| {},
        link,
    )
    .unwrap();
    for ((name, o), want) in out.iter().zip(&predicted) {
        assert_eq!(o.value_type().as_ref(), Some(want), "output {name}");
    }
    out
}

pub fn descriptor(i: u8) -> ObjectDescriptor {
    ObjectDescriptor {
        id: ObjectId([i; 32]),
        kind: ObjectKind::CkksCiphertext,
        size: 123_456,
        param_hash: [i ^ 0x5a; 32],
        level: 3,
        scale: 2f64.powi(45),
        count: 2,
        galois_element: 0,
    }
}

/// Every message type, encoded.
pub fn messages() -> Vec<(&'static str, Vec<u8>)> {
    let spec = SessionSpec {
        params: ParamSpec {
            ckks: Some(CkksParamSpec::from_literal(&test_literal(10, 3), 45)),
            tfhe: Some(TfheParamSpec::Message2Carry2),
        },
        relin_key: Some(ObjectId([1; 32])),
        galois_keys: vec![ObjectId([2; 32]), ObjectId([3; 32])],
        tfhe_server_key: Some(ObjectId([4; 32])),
        ..SessionSpec::default()
    };
    let preset = SessionSpec {
        params: ParamSpec {
            ckks: Some(CkksParamSpec::Preset(hecloud_ckks::Preset::N16)),
            tfhe: None,
        },
        ..SessionSpec::default()
    };
    let job = JobSubmission {
        session: spec.id(),
        graph: sample_graph(),
        inputs: (0..6).map(|i| ObjectId([i; 32])).collect(),
    };
    let status = JobStatus {
        job: JobId([9; 16]),
        state: JobState::Running,
        nodes_done: 3,
        nodes_total: 17,
        message: "running node 4 (rotate)".into(),
    };
    let result = JobResult {
        job: JobId([9; 16]),
        outputs: vec![
            NamedObject {
                name: "p".into(),
                object: descriptor(1),
            },
            NamedObject {
                name: "sum".into(),
                object: descriptor(2),
            },
        ],
    };
    let bgv_spec = SessionSpec {
        params: ParamSpec {
            ckks: None,
            tfhe: None,
        },
        bgv: Some(BgvParamSpec::Literal {
            log_n: 11,
            log_q: vec![60, 50, 50],
            log_p: vec![60],
            t: 65537,
        }),
        bgv_relin_key: Some(ObjectId([5; 32])),
        bgv_galois_keys: vec![ObjectId([6; 32])],
        ..SessionSpec::default()
    };
    let bgv_preset = SessionSpec {
        bgv: BgvParamSpec::from_name("bgv-n14"),
        ..SessionSpec::default()
    };
    let refresh_spec = SessionSpec {
        bgv: BgvParamSpec::from_name("bgv-n14"),
        refresh: Some(RefreshSpec {
            ckks_public_key: Some(ObjectId([7; 32])),
            bgv_public_key: Some(ObjectId([8; 32])),
            lambda_s: 48,
            flood_bits: 40,
        }),
        ..preset.clone()
    };
    let mut refresh_graph = Graph::new();
    let x = refresh_graph.input(0);
    let r = refresh_graph.refresh(x, 5);
    let b = refresh_graph.input(1);
    let rb = refresh_graph.bgv_refresh(b, 3);
    refresh_graph.output("r", r);
    refresh_graph.output("rb", rb);
    let request = refresh::RefreshRequest {
        request_id: [3; 16],
        job_id: JobId([9; 16]).to_hex(),
        scheme: refresh::RefreshScheme::Ckks,
        params_hash: [4; 32],
        target_level: 5,
        target_scales: vec![2f64.powi(40), 2f64.powi(45)],
        ciphertexts: vec![vec![1, 2, 3], vec![4]],
    };
    let reply = refresh::RefreshReply {
        request_id: [3; 16],
        params_hash: [4; 32],
        target_level: 5,
        ciphertexts: vec![vec![5, 6], vec![7, 8, 9]],
    };
    vec![
        ("spec", spec.encode()),
        ("bgv-spec", bgv_spec.encode()),
        ("bgv-preset", bgv_preset.encode()),
        ("bgv-graph", bgv_graph().encode()),
        ("bgv-bits-graph", bgv_bits_graph().encode()),
        ("preset", preset.encode()),
        ("descriptor", descriptor(7).encode()),
        ("job", job.encode()),
        ("status", status.encode()),
        ("result", result.encode()),
        ("graph", sample_graph().encode()),
        ("refresh-spec", refresh_spec.encode()),
        ("refresh-graph", refresh_graph.encode()),
        ("refresh-request", request.encode()),
        ("refresh-reply", reply.encode()),
    ]
}
