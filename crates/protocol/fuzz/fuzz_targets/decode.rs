//! Fuzz target: every decoder of the protocol and the graph validator on
//! untrusted bytes. The first byte picks what is fed:
//!
//! * 0: the eight message decoders;
//! * 1: a graph, decoded then validated against a CKKS + TFHE session with
//!   fixed input types (validation must refuse or accept, never panic or hang);
//! * 2: a CKKS object payload (ciphertext, plaintext, keys) of a small
//!   parameter set, kind from the second byte;
//! * 3: a TFHE container (bit, integer, server key), kind from the second byte;
//! * 4: a BGV object payload (ciphertext, keys) of a small parameter set,
//!   kind from the second byte.
//!
//! Graphs (1) are validated against a session with BGV parameters and keys
//! too, with two BGV ciphertext inputs and the Galois keys of the packed-bit
//! nodes (right rotations by powers of two), so the BGV noise prediction
//! and the packed-bit depth, row and key checks run.
#![no_main]

use std::sync::OnceLock;

use hecloud_ckks::{CkksParameters, params::test_literal};
use hecloud_protocol::*;
use libfuzzer_sys::fuzz_target;

struct Ctx {
    caps: Capabilities,
    inputs: Vec<ValueType>,
    sp: SessionParams,
}

fn ctx() -> &'static Ctx {
    static CTX: OnceLock<Ctx> = OnceLock::new();
    CTX.get_or_init(|| {
        let params = CkksParameters::new_insecure_for_tests(test_literal(10, 3), 45).unwrap();
        let caps = Capabilities::ckks(&params)
            .with_relin_key()
            .with_rotations(&[1, 2, 4, -1])
            .with_conjugation()
            .with_tfhe_server_key();
        let ct = ValueType::CkksCiphertext {
            level: 3,
            scale: params.default_scale(),
            degree: 1,
        };
        let inputs = vec![
            ct.clone(),
            ct,
            ValueType::CkksPlaintext {
                level: 3,
                scale: params.default_scale(),
            },
            ValueType::Uint { width: 8 },
            ValueType::Uint { width: 8 },
            ValueType::Bit,
        ];
        let bgv = hecloud_bgv::BgvParameters::new_insecure_for_tests(
            hecloud_bgv::params::test_literal(10, 3, 65537),
        )
        .unwrap();
        let caps = caps
            .with_bgv(&bgv)
            .with_bgv_relin_key()
            // Left by 1, 2, 4 (rotations, slot sums); right by the powers
            // of two (packed-bit nodes, bits in slots).
            .with_bgv_rotations(&[1, 2, 4, -1, -2, -4, -8, -16, -32, -64, -128, -256], true);
        let mut inputs = inputs;
        let fresh = ValueType::BgvCiphertext {
            level: 3,
            noise: bgv.noise().fresh_pk(),
            factor: 1,
            degree: 1,
        };
        inputs.extend([fresh.clone(), fresh]);
        let sp = SessionParams {
            ckks: Some(params.clone()),
            tfhe: Some(TfheParamSpec::Message2Carry2),
            bgv: Some(bgv),
        };
        Ctx { caps, inputs, sp }
    })
}

const KINDS: [ObjectKind; 13] = [
    ObjectKind::CkksCiphertext,
    ObjectKind::CkksPlaintext,
    ObjectKind::CkksPublicKey,
    ObjectKind::CkksRelinKey,
    ObjectKind::CkksGaloisKey,
    ObjectKind::CkksSwitchingKey,
    ObjectKind::TfheBit,
    ObjectKind::TfheUint,
    ObjectKind::TfheServerKey,
    ObjectKind::BgvCiphertext,
    ObjectKind::BgvPublicKey,
    ObjectKind::BgvRelinKey,
    ObjectKind::BgvGaloisKey,
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let c = ctx();
    match sel % 5 {
        0 => {
            let _ = SessionSpec::decode(rest);
            let _ = ObjectDescriptor::decode(rest);
            let _ = JobSubmission::decode(rest);
            let _ = JobStatus::decode(rest);
            let _ = JobResult::decode(rest);
            let _ = Graph::decode(rest);
            let _ = hecloud_protocol::refresh::RefreshRequest::decode(rest);
            let _ = hecloud_protocol::refresh::RefreshReply::decode(rest);
        }
        1 => {
            // Graphs without the envelope, so the fuzzer reaches validation.
            let mut r = hecloud_protocol::codec::Reader::new(rest);
            if let Ok(g) = Graph::read(&mut r) {
                if let Ok(v) = validate(&g, &c.caps, &c.inputs) {
                    assert!(v.schedule().len() <= g.nodes.len());
                    assert!(v.cost().est_seconds.is_finite());
                }
            }
        }
        _ => {
            let Some((&k, body)) = rest.split_first() else {
                return;
            };
            let kind = match sel % 5 {
                2 => KINDS[(k % 5) as usize],
                3 => KINDS[5 + (k % 3) as usize],
                _ => KINDS[8 + (k % 4) as usize],
            };
            if let Ok(obj) = c.sp.decode(kind, body) {
                assert_eq!(obj.kind(), kind);
            }
        }
    }
});
