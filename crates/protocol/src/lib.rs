//! # hecloud-protocol
//!
//! The wire format between client, proxy and server: versioned messages,
//! computation graphs and their validation, and the evaluator interface the
//! server runs jobs through. No network I/O happens here; the one file
//! operation is [`fs::write_private`], shared by client and server.
//!
//! * [`codec`]: the compact binary encoding (envelope with magic, format
//!   version and message kind; every length checked before allocation);
//! * [`session`]: [`SessionSpec`] (parameter sets + evaluation-key ids),
//!   [`ObjectDescriptor`], [`ObjectId`] (content hash);
//! * [`job`]: [`JobSubmission`], [`JobStatus`], [`JobResult`];
//! * [`graph`]: the computation [`Graph`] of CKKS operations, BGV
//!   operations on integer vectors and integer circuits;
//! * [`validate()`]: types, levels, scales, keys, structure and cost, before
//!   anything runs → [`ValidatedGraph`] or a [`ValidationError`];
//!   [`validate_with_limits`] also refuses jobs above a cost limit
//!   ([`ValidationLimits`]);
//! * [`object`]: decoding and checking payloads ([`SessionParams`]) and the
//!   server's key set ([`SessionKeys`]);
//! * [`execute`]: runs a validated graph (progress, cancellation, also
//!   inside integer circuits);
//! * [`refresh`]: the client-aided refresh protocol (server masks, key
//!   holder re-encrypts, server unmasks), sans I/O.
//!
//! The server's whole path, from bytes to result:
//!
//! ```
//! use std::sync::atomic::AtomicBool;
//! use hecloud_ckks::{params::test_literal, CkksParameters, Encoder, KeySet};
//! use hecloud_protocol::*;
//! let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 45).unwrap();
//! let ks = KeySet::generate(&params, &[], false).unwrap();           // client
//! let enc = Encoder::new(&params);
//! let ct = ks.encrypt(&enc.encode_real(&[1.5, -2.0], 2, params.default_scale()).unwrap()).unwrap();
//! let payload = ct.to_bytes();
//! let relin = ks.evaluation_keys().relin.unwrap().to_bytes(true);
//!
//! // Server: the session spec names the parameters and the key objects.
//! let spec = SessionSpec {
//!     params: ParamSpec { ckks: Some(CkksParamSpec::from_literal(&test_literal(10, 2), 45)), tfhe: None },
//!     relin_key: Some(ObjectId::of(&relin)),
//!     ..SessionSpec::default()
//! };
//! let sp = SessionParams::build(&spec.params, true).unwrap();
//! let (desc, input) = sp.describe(ObjectKind::CkksCiphertext, &payload).unwrap();
//! let keys = SessionKeys::load(&spec, sp, |id| (*id == ObjectId::of(&relin)).then(|| relin.clone())).unwrap();
//! let mut g = Graph::new();
//! let x = g.input(0);
//! let c = g.constant(3.0);
//! let y = g.mul(x, c);       // an integer constant costs no level
//! let y = g.add(y, x);       // 4x
//! g.output("y", y);
//! let job = JobSubmission::decode(&JobSubmission { session: spec.id(), graph: g, inputs: vec![desc.id] }.encode()).unwrap();
//! let types = keys.params().input_types(&[desc]).unwrap();   // from stored descriptors
//! let v = validate(&job.graph, &keys.capabilities(), &types).unwrap();
//! let out = execute(&v, &keys, &[input], &AtomicBool::new(false), &mut |_| {}).unwrap();
//! let Object::CkksCiphertext(r) = &out[0].1 else { panic!() };
//! let back = enc.decode_real(&ks.decrypt(r).unwrap()).unwrap();   // client
//! assert!((back[0] - 6.0).abs() < 1e-6 && (back[1] + 8.0).abs() < 1e-6);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod codec;
pub mod error;
pub mod exec;
pub mod fs;
pub mod graph;
pub mod job;
pub mod object;
pub mod refresh;
pub mod rpc;
pub mod session;
pub mod validate;

pub use codec::{DecodeError, Message, MessageKind};
pub use error::{ExecError, ObjectError, SessionError, ValidationError};
pub use exec::{Progress, execute, execute_with_refresh};
pub use graph::{Graph, NodeId, Op, Output, Relation};
pub use job::{JobId, JobResult, JobState, JobStatus, JobSubmission, NamedObject};
pub use object::{Object, SessionKeys, SessionParams, TfheCiphertext, value_type_of};
pub use session::{
    BgvParamSpec, BootstrapSpec, CkksParamSpec, ObjectDescriptor, ObjectId, ObjectKind, ParamSpec,
    RefreshSpec, SessionSpec, TfheParamSpec,
};
pub use validate::{
    BootstrapCaps, Capabilities, CostEstimate, ValidatedGraph, ValidationLimits, ValueType,
    insert_refreshes, validate, validate_with_limits,
};
