//! The gRPC wire format (`proto/hecloud.proto`, package `hecloud.v1`): prost
//! messages plus the tonic client and server, generated at build time.
#![allow(missing_docs, clippy::all)]

/// Version of the RPC protocol spoken by this build.
pub const PROTOCOL_VERSION: u32 = 1;

tonic::include_proto!("hecloud.v1");

use crate::session::ObjectKind;

/// Upload kind of an encoded [`crate::SessionSpec`].
pub const SESSION_KIND: &str = "session";
/// Job kind of an encoded [`crate::JobSubmission`] (a computation graph).
pub const JOB_KIND_GRAPH: &str = "graph.v1";
/// Job kind that asks the tenant's key holder to echo the spec back over
/// its session stream (a liveness check of the callback path).
pub const JOB_KIND_ECHO: &str = "echo.v1";
/// Callback kind answered by key holders for [`JOB_KIND_ECHO`].
pub const CALLBACK_ECHO: &str = "echo";

/// The wire name of an object kind (the `kind` of an upload).
pub fn object_kind_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::CkksCiphertext => "ckks.ciphertext",
        ObjectKind::CkksPlaintext => "ckks.plaintext",
        ObjectKind::CkksPublicKey => "ckks.public_key",
        ObjectKind::CkksRelinKey => "ckks.relin_key",
        ObjectKind::CkksGaloisKey => "ckks.galois_key",
        ObjectKind::TfheServerKey => "tfhe.server_key",
        ObjectKind::TfheUint => "tfhe.uint",
        ObjectKind::TfheBit => "tfhe.bit",
    }
}

/// The object kind of a wire name.
pub fn parse_object_kind(name: &str) -> Option<ObjectKind> {
    [
        ObjectKind::CkksCiphertext,
        ObjectKind::CkksPlaintext,
        ObjectKind::CkksPublicKey,
        ObjectKind::CkksRelinKey,
        ObjectKind::CkksGaloisKey,
        ObjectKind::TfheServerKey,
        ObjectKind::TfheUint,
        ObjectKind::TfheBit,
    ]
    .into_iter()
    .find(|k| object_kind_name(*k) == name)
}

/// Whether `name` is an upload kind the server accepts.
pub fn is_known_kind(name: &str) -> bool {
    name == SESSION_KIND || parse_object_kind(name).is_some()
}
