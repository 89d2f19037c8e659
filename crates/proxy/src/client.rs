//! The client of a proxy ([`ProxyClient`]): it connects over TLS, asks
//! for the proxy's attestation with a fresh nonce **before** it sends its
//! token or any data, verifies it ([`crate::attest::verify`]: for SEV-SNP
//! the report's signature, its chain to a pinned AMD root, its binding to
//! the TLS key and nonce, the guest policy and, when given, the
//! measurement; for TDX the quote's and QE's signatures, the PCK chain to
//! a pinned Intel root, the same binding, the debug attribute and, when
//! given, MRTD), and refuses an unattested proxy unless told to allow one.
//! Then it sends plaintext and gets plaintext back: the proxy does the HE
//! encryption, the server's job and the decryption.
//!
//! The TLS key checked is the connection's own: the client's certificate
//! check (the proxy's CA, the host name) also takes the public key of the
//! certificate the proxy presents ([`crate::attest::tls_public_key_of`]),
//! and the report must bind that key. A proxy whose `Info` reply announces
//! another key is refused ([`AttestError::TlsKeyMismatch`]) before the
//! token is sent: a man in the middle holding a certificate the client
//! trusts cannot relay a genuine proxy's report. The key is pinned for
//! the connection: when the channel connects again (the proxy restarted,
//! the network dropped), a handshake presenting another key fails
//! ([`AttestError::TlsKeyChanged`] in the transport error); connect anew
//! to verify a new key.
//!
//! Over `http://` (loopback only) there is no TLS key: an unattested proxy
//! is accepted when allowed, for development, and a report is refused
//! ([`AttestError::NoTlsToBind`]), since it cannot be bound to the
//! connection.
//!
//! Limits: a resumed TLS session (no certificate sent) is trusted as the
//! handshake it resumes, whose key was checked; what a report's
//! verification leaves out (revocation without CRLs, Intel's TCB and QE identity
//! collateral, ...) is listed in [`crate::attest`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hecloud_protocol::{Graph, Message};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

use crate::attest::{
    AttestError, CLIENT_NONCE_LEN, Verified, VerifyPolicy, tls_public_key_of, verify,
};
use crate::enclave::Attestation;
use crate::rpc::{self, proxy_client};
use crate::service::{ErrorKind, MAX_MESSAGE_BYTES, error_kind};

/// What went wrong talking to a proxy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyClientError {
    /// The proxy's attestation was refused: unattested without
    /// `allow_unattested`, or a report that does not verify (see
    /// [`AttestError`]). Nothing was sent to the proxy but the nonce.
    #[error("the proxy's attestation is refused: {0}")]
    Attestation(#[from] AttestError),
    /// The proxy answered with an error.
    #[error("proxy: {code:?} ({}): {message}", kind.map(ErrorKind::as_str).unwrap_or("no kind"))]
    Refused {
        /// What kind of failure, when the proxy said.
        kind: Option<ErrorKind>,
        /// The gRPC code.
        code: Code,
        /// The proxy's reason.
        message: String,
    },
    /// Could not connect.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A bad argument on the client side.
    #[error("{0}")]
    Invalid(String),
    /// The proxy speaks another protocol version than this client
    /// ([`rpc::PROTOCOL_VERSION`]); nothing but the nonce was sent.
    #[error(
        "the proxy speaks protocol version {proxy}, this client {client}: update the older side"
    )]
    Incompatible {
        /// The proxy's version.
        proxy: u32,
        /// This client's.
        client: u32,
    },
}

/// Refuses a proxy speaking another protocol version: its replies could
/// carry what this client does not read (or miss what it expects).
fn check_protocol(proxy: u32) -> Result<()> {
    if proxy == rpc::PROTOCOL_VERSION {
        return Ok(());
    }
    Err(ProxyClientError::Incompatible {
        proxy,
        client: rpc::PROTOCOL_VERSION,
    })
}

impl From<Status> for ProxyClientError {
    fn from(s: Status) -> Self {
        Self::Refused {
            kind: error_kind(&s),
            code: s.code(),
            message: s.message().to_string(),
        }
    }
}

impl ProxyClientError {
    /// The proxy's failure kind, when it gave one.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Refused { kind, .. } => *kind,
            _ => None,
        }
    }
}

/// Result with [`ProxyClientError`].
pub type Result<T> = std::result::Result<T, ProxyClientError>;

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
struct Bearer(MetadataValue<Ascii>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: Request<()>) -> std::result::Result<Request<()>, Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

type Rpc = proxy_client::ProxyClient<InterceptedService<Channel, Bearer>>;

/// One input of [`ProxyClient::run`].
#[derive(Debug, Clone)]
pub enum RunInput {
    /// Plaintext reals, encrypted by the proxy (a tenant holding CKKS
    /// keys).
    Values(Vec<f64>),
    /// Plaintext integers mod t, encrypted by the proxy (a tenant holding
    /// BGV keys): at most N, each below the plaintext modulus t of the
    /// tenant's preset (65537 for `bgv-n13` … `bgv-n15`). A value not
    /// below t is refused ([`ErrorKind::InvalidRequest`]), never wrapped.
    Ints(Vec<u64>),
    /// An object the server holds already ([`ProxyClient::put`]).
    Object(String),
}

/// A job's outputs, decrypted.
#[derive(Clone, PartialEq)]
pub struct RunOutput {
    /// The job's id on the server.
    pub job_id: String,
    /// (name, object id, values) per output, for a tenant holding CKKS
    /// keys (empty for a BGV tenant).
    pub outputs: Vec<(String, String, Vec<f64>)>,
    /// (name, object id, integers mod t) per output, for a tenant holding
    /// BGV keys (empty for a CKKS tenant).
    pub int_outputs: Vec<(String, String, Vec<u64>)>,
    /// The input object ids on the server, by position.
    pub input_ids: Vec<String>,
    /// Enclave crossings the request took.
    pub crossings: u32,
}

impl std::fmt::Debug for RunOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOutput")
            .field("job_id", &self.job_id)
            .field(
                "outputs",
                &self
                    .outputs
                    .iter()
                    .map(|(n, id, v)| (n, id, v.len()))
                    .collect::<Vec<_>>(),
            )
            .field(
                "int_outputs",
                &self
                    .int_outputs
                    .iter()
                    .map(|(n, id, v)| (n, id, v.len()))
                    .collect::<Vec<_>>(),
            )
            .field("crossings", &self.crossings)
            .finish_non_exhaustive()
    }
}

/// A connection to a proxy whose attestation was checked.
#[derive(Debug, Clone)]
pub struct ProxyClient {
    rpc: Rpc,
    info: rpc::InfoReply,
    verified: Verified,
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(..)")
    }
}

/// The attestation an `Info` reply announces.
fn attestation_of(a: Option<rpc::Attestation>) -> Result<Attestation> {
    let a = a.ok_or_else(|| AttestError::Malformed("no attestation".into()))?;
    match a.kind.as_str() {
        rpc::ATTESTATION_UNATTESTED => Ok(Attestation::Unattested),
        rpc::ATTESTATION_CONFIGFS_TSM => Ok(Attestation::ConfigfsTsm {
            provider: a.provider,
            report: a.report,
            auxblob: a.auxblob,
        }),
        other => {
            Err(AttestError::Malformed(format!("an unknown attestation kind {other:?}")).into())
        }
    }
}

/// The certificate check of a connection to a proxy: the usual check
/// (rustls' WebPKI verifier: chain to the trusted CA, host name, validity)
/// and then the end-entity certificate's public key, pinned at the first
/// handshake; a later handshake presenting another key fails.
#[derive(Debug)]
struct PinningVerifier {
    inner: Arc<WebPkiServerVerifier>,
    /// The DER SubjectPublicKeyInfo of the first certificate that passed
    /// the check.
    pinned: Mutex<Option<Vec<u8>>>,
}

/// A rustls certificate error carrying `e`.
fn cert_error(e: AttestError) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e))))
}

impl PinningVerifier {
    /// A verifier trusting the certificates of `ca_pem` only.
    fn new(ca_pem: &str) -> Result<Self> {
        let invalid = |what: String| ProxyClientError::Invalid(format!("the proxy's CA: {what}"));
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| invalid(e.to_string()))?;
            roots.add(cert).map_err(|e| invalid(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(invalid("no certificate in the PEM text".into()));
        }
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        Ok(Self {
            inner,
            pinned: Mutex::new(None),
        })
    }

    /// The pinned key, once a handshake passed.
    fn pinned(&self) -> Option<Vec<u8>> {
        self.pinned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ServerCertVerifier for PinningVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        // The first handshake's key is pinned here, before its signature
        // (CertificateVerify) is checked: a handshake failing after this
        // fails the connection, so the key checked against the report is
        // always one whose possession a completed handshake proved.
        let key = tls_public_key_of(end_entity).map_err(cert_error)?;
        let mut pinned = self.pinned.lock().unwrap_or_else(PoisonError::into_inner);
        match pinned.as_ref() {
            None => *pinned = Some(key),
            Some(p) if *p == key => {}
            Some(_) => return Err(cert_error(AttestError::TlsKeyChanged)),
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

impl ProxyClient {
    /// Connects to the proxy at `url` (`https://host:port`; `http://` to a
    /// loopback host only), trusting `ca_pem` for its TLS certificate
    /// (required with `https://`: no system roots are built in), and
    /// checks its attestation before sending `token`: the `Info` reply
    /// must announce the TLS key of this connection; an unattested proxy
    /// is refused with [`ProxyClientError::Attestation`] unless
    /// `allow_unattested`; a report is verified against AMD's roots with
    /// no measurement pinned ([`VerifyPolicy::new`]; see
    /// [`ProxyClient::connect_with`] to pin one). Over `http://` only an
    /// allowed unattested proxy is accepted (see the [module
    /// documentation](self)).
    pub async fn connect(
        url: &str,
        token: &str,
        ca_pem: Option<&str>,
        allow_unattested: bool,
    ) -> Result<Self> {
        Self::connect_with(url, token, ca_pem, &VerifyPolicy::new(allow_unattested)).await
    }

    /// [`ProxyClient::connect`] verifying the attestation under `policy`
    /// (the expected measurement, a VCEK, the pinned roots).
    pub async fn connect_with(
        url: &str,
        token: &str,
        ca_pem: Option<&str>,
        policy: &VerifyPolicy,
    ) -> Result<Self> {
        hecloud_client::check_server_url(url)
            .map_err(|e| ProxyClientError::Invalid(e.to_string()))?;
        hecloud_protocol::rpc::install_tls_provider();
        let mut ep = Endpoint::from_shared(url.to_string())?
            .connect_timeout(Duration::from_secs(10))
            .http2_keep_alive_interval(Duration::from_secs(20))
            .initial_stream_window_size(Some(hecloud_protocol::rpc::STREAM_WINDOW))
            .initial_connection_window_size(Some(hecloud_protocol::rpc::CONNECTION_WINDOW));
        // The transport speaks TLS exactly when the parsed scheme is
        // "https" (`check_server_url` allowed http:// to loopback only).
        let tls = ep.uri().scheme_str() == Some("https");
        let pin = if tls {
            let ca = ca_pem.ok_or_else(|| {
                ProxyClientError::Invalid(
                    "an https:// proxy needs its CA certificate (no system roots are trusted)"
                        .into(),
                )
            })?;
            let pin = Arc::new(PinningVerifier::new(ca)?);
            let config = ClientTlsConfig::new().domain_name(hecloud_client::tls_domain(ep.uri()));
            ep = ep.tls_config_with_verifier(config, pin.clone())?;
            Some(pin)
        } else {
            None
        };
        let channel = ep.connect().await?;
        // Attestation first, without the token.
        let mut nonce = [0u8; CLIENT_NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| ProxyClientError::Invalid("the system random generator failed".into()))?;
        let info = proxy_client::ProxyClient::new(channel.clone())
            .info(rpc::InfoRequest {
                nonce: nonce.to_vec(),
                protocol_version: rpc::PROTOCOL_VERSION,
            })
            .await?
            .into_inner();
        check_protocol(info.protocol_version)?;
        let attestation = attestation_of(info.attestation.clone())?;
        let verified = match pin {
            // The key of the certificate presented on this connection (every
            // handshake of the channel presents it: it is pinned), not the
            // one the proxy announces.
            Some(pin) => {
                let key = pin.pinned().ok_or_else(|| {
                    AttestError::TlsCertificate(
                        "no certificate was checked on this connection".into(),
                    )
                })?;
                if info.tls_public_key != key {
                    return Err(AttestError::TlsKeyMismatch.into());
                }
                verify(&attestation, &key, &nonce, policy)?
            }
            None => match attestation {
                Attestation::Unattested => verify(&attestation, &[], &nonce, policy)?,
                _ => return Err(AttestError::NoTlsToBind.into()),
            },
        };
        let bearer = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| ProxyClientError::Invalid("the token must be printable ASCII".into()))?;
        let rpc = proxy_client::ProxyClient::new(InterceptedService::new(channel, Bearer(bearer)))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Self {
            rpc,
            info,
            verified,
        })
    }

    /// What the attestation check established.
    pub fn verified(&self) -> &Verified {
        &self.verified
    }

    /// The proxy's `Info` reply (version, limits, attestation).
    pub fn info(&self) -> &rpc::InfoReply {
        &self.info
    }

    /// Encrypts and uploads real vectors through the proxy (a tenant
    /// holding CKKS keys): their object ids on the server.
    pub async fn put(&self, vectors: &[Vec<f64>]) -> Result<Vec<String>> {
        Ok(self
            .rpc
            .clone()
            .put(rpc::PutRequest {
                vectors: vectors
                    .iter()
                    .map(|v| rpc::Vector { values: v.clone() })
                    .collect(),
                int_vectors: vec![],
            })
            .await?
            .into_inner()
            .object_ids)
    }

    /// Encrypts and uploads integer vectors mod t through the proxy (a
    /// tenant holding BGV keys; see [`RunInput::Ints`]): their object ids
    /// on the server.
    pub async fn put_ints(&self, vectors: &[Vec<u64>]) -> Result<Vec<String>> {
        Ok(self
            .rpc
            .clone()
            .put(rpc::PutRequest {
                vectors: vec![],
                int_vectors: vectors
                    .iter()
                    .map(|v| rpc::IntVector { values: v.clone() })
                    .collect(),
            })
            .await?
            .into_inner()
            .object_ids)
    }

    /// Runs `graph` on `inputs` (by position) in one request: the proxy
    /// encrypts, runs the job on the server and returns the outputs
    /// decrypted, `count` values each (0: every slot): reals in
    /// [`RunOutput::outputs`] for a CKKS tenant, integers in
    /// [`RunOutput::int_outputs`] for a BGV tenant.
    pub async fn run(
        &self,
        inputs: Vec<RunInput>,
        graph: &Graph,
        count: usize,
    ) -> Result<RunOutput> {
        let inputs = inputs
            .into_iter()
            .map(|i| rpc::RunInput {
                source: Some(match i {
                    RunInput::Values(values) => {
                        rpc::run_input::Source::Values(rpc::Vector { values })
                    }
                    RunInput::Ints(values) => {
                        rpc::run_input::Source::Ints(rpc::IntVector { values })
                    }
                    RunInput::Object(id) => rpc::run_input::Source::ObjectId(id),
                }),
            })
            .collect();
        let r = self
            .rpc
            .clone()
            .run(rpc::RunRequest {
                inputs,
                graph: graph.encode(),
                count: count as u64,
                client_ref: String::new(),
            })
            .await?
            .into_inner();
        let (mut outputs, mut int_outputs) = (vec![], vec![]);
        for o in r.outputs {
            if r.integers {
                int_outputs.push((o.name, o.object_id, o.ints));
            } else {
                outputs.push((o.name, o.object_id, o.values));
            }
        }
        Ok(RunOutput {
            job_id: r.job_id,
            outputs,
            int_outputs,
            input_ids: r.input_ids,
            crossings: r.crossings,
        })
    }

    /// Downloads an object through the proxy and decrypts it: `count`
    /// reals (0: every slot). An object of a BGV tenant (integers) is
    /// refused with [`ProxyClientError::Invalid`]: see
    /// [`ProxyClient::get_ints`].
    pub async fn get(&self, object_id: &str, count: usize) -> Result<Vec<f64>> {
        let r = self.get_reply(object_id, count).await?;
        if r.integers {
            return Err(ProxyClientError::Invalid(
                "the object decrypts to integers (a BGV tenant): use get_ints".into(),
            ));
        }
        Ok(r.values)
    }

    /// Downloads an object through the proxy and decrypts it: `count`
    /// integers mod t (0: every slot). An object of a CKKS tenant (reals)
    /// is refused with [`ProxyClientError::Invalid`]: see
    /// [`ProxyClient::get`].
    pub async fn get_ints(&self, object_id: &str, count: usize) -> Result<Vec<u64>> {
        let r = self.get_reply(object_id, count).await?;
        if !r.integers {
            return Err(ProxyClientError::Invalid(
                "the object decrypts to reals (a CKKS tenant): use get".into(),
            ));
        }
        Ok(r.ints)
    }

    async fn get_reply(&self, object_id: &str, count: usize) -> Result<rpc::GetReply> {
        Ok(self
            .rpc
            .clone()
            .get(rpc::GetRequest {
                object_id: object_id.into(),
                count: count as u64,
            })
            .await?
            .into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_of_another_protocol_version_is_refused() {
        check_protocol(rpc::PROTOCOL_VERSION).unwrap();
        for v in [0, 1, rpc::PROTOCOL_VERSION + 1] {
            match check_protocol(v) {
                Err(ProxyClientError::Incompatible { proxy, client }) => {
                    assert_eq!((proxy, client), (v, rpc::PROTOCOL_VERSION));
                }
                other => panic!("version {v} passed: {other:?}"),
            }
        }
    }
}
