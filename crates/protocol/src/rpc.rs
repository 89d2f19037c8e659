//! The gRPC wire format (`proto/hecloud.proto`, package `hecloud.v1`): prost
//! messages plus the tonic client and server, generated at build time.
#![allow(missing_docs, clippy::all)]

/// Version of the RPC protocol spoken by this build.
pub const PROTOCOL_VERSION: u32 = 1;

tonic::include_proto!("hecloud.v1");

use crate::session::ObjectKind;

/// Upload kind of an encoded [`crate::SessionSpec`].
pub const SESSION_KIND: &str = "session";
/// Upload kind of bytes the server stores without reading them: never a
/// job input, a key or a session. Every other kind is checked as it
/// arrives (see [`crate::object::PayloadCheck`]), so bytes that are not
/// what they claim to be are only ever stored as this.
pub const OPAQUE_KIND: &str = "opaque";
/// Job kind of an encoded [`crate::JobSubmission`] (a computation graph).
pub const JOB_KIND_GRAPH: &str = "graph.v1";
/// Job kind that asks the tenant's key holder to echo the spec back over
/// its session stream (a liveness check of the callback path).
pub const JOB_KIND_ECHO: &str = "echo.v1";
/// Callback kind answered by key holders for [`JOB_KIND_ECHO`].
pub const CALLBACK_ECHO: &str = "echo";

/// HTTP/2 receive window per stream, on both ends of every hecloud
/// connection (server, proxy, their clients: one value for all). h2's
/// default of 64 KiB holds a stream to one window per round trip; on the
/// server it held uploads to about 64 MiB/s on loopback.
pub const STREAM_WINDOW: u32 = 8 << 20;
/// HTTP/2 receive window per connection ([`STREAM_WINDOW`] for four
/// streams at once).
pub const CONNECTION_WINDOW: u32 = 32 << 20;

/// Installs rustls's process-wide crypto provider (once; a provider
/// installed before stays): ring, with TLS 1.3's AES-128-GCM suite first.
/// Client and server both prefer it, so it is the one they agree on:
/// 128-bit security like the HE parameters, and four fewer AES rounds per
/// block than AES-256, which matters on connections that carry hundreds of
/// MiB of ciphertexts and keys.
pub fn install_tls_provider() {
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    let _ = provider.install_default();
}

/// The wire form of a job state (the one place the domain's states meet
/// the gRPC enum; the numbering is the same, and `Unspecified` has no
/// domain state).
impl From<crate::JobState> for JobState {
    fn from(s: crate::JobState) -> Self {
        match s {
            crate::JobState::Queued => Self::Queued,
            crate::JobState::Running => Self::Running,
            crate::JobState::Succeeded => Self::Succeeded,
            crate::JobState::Failed => Self::Failed,
            crate::JobState::Cancelled => Self::Cancelled,
        }
    }
}

/// The domain state of a wire job state; `Unspecified` is refused.
impl TryFrom<JobState> for crate::JobState {
    type Error = JobState;

    fn try_from(s: JobState) -> Result<Self, JobState> {
        Ok(match s {
            JobState::Queued => Self::Queued,
            JobState::Running => Self::Running,
            JobState::Succeeded => Self::Succeeded,
            JobState::Failed => Self::Failed,
            JobState::Cancelled => Self::Cancelled,
            JobState::Unspecified => return Err(s),
        })
    }
}

/// The wire name of an object kind (the `kind` of an upload).
pub fn object_kind_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::CkksCiphertext => "ckks.ciphertext",
        ObjectKind::CkksPlaintext => "ckks.plaintext",
        ObjectKind::CkksPublicKey => "ckks.public_key",
        ObjectKind::CkksRelinKey => "ckks.relin_key",
        ObjectKind::CkksGaloisKey => "ckks.galois_key",
        ObjectKind::CkksSwitchingKey => "ckks.switching_key",
        ObjectKind::TfheServerKey => "tfhe.server_key",
        ObjectKind::TfheUint => "tfhe.uint",
        ObjectKind::TfheBit => "tfhe.bit",
        ObjectKind::BgvCiphertext => "bgv.ciphertext",
        ObjectKind::BgvPublicKey => "bgv.public_key",
        ObjectKind::BgvRelinKey => "bgv.relin_key",
        ObjectKind::BgvGaloisKey => "bgv.galois_key",
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
        ObjectKind::CkksSwitchingKey,
        ObjectKind::TfheServerKey,
        ObjectKind::TfheUint,
        ObjectKind::TfheBit,
        ObjectKind::BgvCiphertext,
        ObjectKind::BgvPublicKey,
        ObjectKind::BgvRelinKey,
        ObjectKind::BgvGaloisKey,
    ]
    .into_iter()
    .find(|k| object_kind_name(*k) == name)
}

/// Whether `name` is an upload kind the server accepts.
pub fn is_known_kind(name: &str) -> bool {
    name == SESSION_KIND || name == OPAQUE_KIND || parse_object_kind(name).is_some()
}

#[cfg(test)]
mod tests {
    #[test]
    fn job_states_round_trip_through_the_wire() {
        use crate::JobState as S;
        for s in [S::Queued, S::Running, S::Succeeded, S::Failed, S::Cancelled] {
            let wire = super::JobState::from(s);
            assert_eq!(wire as i32, s as i32);
            assert_eq!(S::try_from(wire), Ok(s));
        }
        assert!(S::try_from(super::JobState::Unspecified).is_err());
    }

    #[test]
    fn tls_prefers_aes_128_gcm() {
        super::install_tls_provider();
        let p = rustls::crypto::CryptoProvider::get_default().expect("installed");
        assert_eq!(
            p.cipher_suites[0].suite(),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
        );
        // The other suites stay on offer.
        assert_eq!(
            p.cipher_suites.len(),
            rustls::crypto::ring::default_provider().cipher_suites.len()
        );
    }
}
