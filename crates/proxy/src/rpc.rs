//! The proxy's gRPC wire format (`proto/proxy.proto`, package
//! `hecloud.proxy.v1`): prost messages plus the tonic client and server,
//! generated at build time.
#![allow(missing_docs, clippy::all)]

/// Version of the proxy's RPC protocol spoken by this build. Client and
/// proxy must speak the same: each refuses the other's before any data
/// moves. 2: integer vectors (`IntVector`, `Output.ints`), which a
/// version-1 client would read as empty real vectors.
pub const PROTOCOL_VERSION: u32 = 2;

tonic::include_proto!("hecloud.proxy.v1");

/// `Attestation.kind` of a plain process (no TEE).
pub const ATTESTATION_UNATTESTED: &str = "unattested";
/// `Attestation.kind` of a configfs-tsm report.
pub const ATTESTATION_CONFIGFS_TSM: &str = "configfs-tsm";
