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
    vec![
        ("spec", spec.encode()),
        ("preset", preset.encode()),
        ("descriptor", descriptor(7).encode()),
        ("job", job.encode()),
        ("status", status.encode()),
        ("result", result.encode()),
        ("graph", sample_graph().encode()),
    ]
}
