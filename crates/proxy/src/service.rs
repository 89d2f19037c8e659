//! The proxy's network service (`proto/proxy.proto`): it terminates its
//! clients' TLS, authenticates them by its own tenant tokens, and talks to
//! the hecloud server as each client's tenant (`hecloud_client`), so that
//! plaintext crosses only the client's link to the proxy and ciphertexts
//! only the proxy's link to the server.
//!
//! * `Info` (no token): the enclave's attestation, bound to the proxy's
//!   TLS public key and the client's nonce ([`crate::attest::report_data`]),
//!   and the proxy's parameters. A client checks it before it sends its
//!   token ([`crate::client::ProxyClient`]).
//! * `Put`: plaintext vectors (reals for a CKKS tenant, integers mod t for
//!   a BGV tenant), encrypted in one enclave crossing, uploaded to the
//!   server; their object ids.
//! * `Run`: plaintext inputs and a graph in one request: one crossing to
//!   encrypt, the uploads, the job (submitted once every input byte is
//!   sent, so that the server starts it while it stores them), the
//!   downloads, one crossing to decrypt; plaintext out.
//! * `Get`: an object downloaded and decrypted in one crossing.
//!
//! A tenant's key folder says its scheme: CKKS (real vectors, uploaded as
//! `ckks.ciphertext`) or BGV (integer vectors mod t, `bgv.ciphertext`).
//! Outputs and objects decrypt under the tenant's scheme (`Output.values`
//! or `Output.ints`); plaintext of the other scheme is refused with
//! [`ErrorKind::InvalidRequest`], as is an integer not below t.
//!
//! On a tenant's first request the proxy unseals its key folder into the
//! enclave and takes its public files from it (one crossing), uploads
//! them to the server (evaluation keys, public key, session spec) and opens
//! the tenant's key-holder session there: the server's refresh requests
//! for the tenant's jobs are answered inside the enclave
//! ([`EnclaveOp::AnswerRefresh`]), next to the server, with no client
//! online.
//!
//! Every failure is a gRPC status with a typed [`ErrorKind`] in the
//! [`ERROR_KIND_HEADER`] metadata; a failing tenant (keys that do not
//! unseal, a server returning a ciphertext under other parameters) fails
//! its own request only, and the proxy keeps serving. Tokens are compared
//! as BLAKE3 hashes in constant time and never logged; plaintext values
//! are held in `Zeroizing` buffers inside the proxy (the gRPC layer's own
//! buffers are not zeroized).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use hecloud_client::keys::{key_kinds, uploads_in_order};
use hecloud_client::{Client, ClientError, SessionHandle, UploadBody};
use hecloud_protocol::refresh::CALLBACK_REFRESH;
use hecloud_protocol::rpc::{JOB_KIND_GRAPH, JobState};
use hecloud_protocol::{Graph, JobSubmission, Message, ObjectId, SessionSpec};
use tokio::sync::{Mutex, oneshot};
use tonic::metadata::MetadataValue;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Code, Request, Response, Status};
use zeroize::Zeroizing;

use crate::enclave::{Enclave, EnclaveOp, EnclaveReply, StreamTo};
use crate::error::ProxyError;
use crate::rpc::{self, proxy_server};
use crate::seal::{SealedKeyStore, check_name};

/// Default most vectors (inputs) in one request.
pub const DEFAULT_MAX_VECTORS: usize = 64;
/// Largest request or reply message (an N = 2^17 vector is 512 KiB of
/// doubles on the wire).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// The metadata key of a failure's [`ErrorKind`].
pub const ERROR_KIND_HEADER: &str = "hecloud-proxy-error";
/// How long the server waits for a job's inputs still being stored.
const AWAIT_INPUTS: Duration = Duration::from_secs(30);
/// Upload kind of the CKKS ciphertexts the proxy makes.
const CKKS_CIPHERTEXT_KIND: &str = "ckks.ciphertext";
/// Upload kind of the BGV ciphertexts the proxy makes.
const BGV_CIPHERTEXT_KIND: &str = "bgv.ciphertext";

/// Why a request failed, as the proxy tells its client (in the
/// [`ERROR_KIND_HEADER`] metadata of the status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No, a malformed, an unknown or a wrong token.
    Unauthenticated,
    /// A request the proxy refuses (too many vectors, values that are not
    /// finite, integers not below the plaintext modulus, plaintext of
    /// another scheme than the tenant's keys, a graph that does not
    /// decode, a bad object id).
    InvalidRequest,
    /// The tenant's sealed key folder cannot be used: missing, tampered
    /// with, sealed under another key or for another tenant.
    SealedKeys,
    /// The server returned a ciphertext under another parameter set than
    /// the tenant's.
    ForeignCiphertext,
    /// The server returned bytes that are not a ciphertext of the tenant.
    BadCiphertext,
    /// The server could not be reached or refused a request.
    Server,
    /// The server ran the job and it failed.
    JobFailed,
    /// Anything else inside the proxy.
    Internal,
    /// The client speaks another protocol version
    /// ([`rpc::PROTOCOL_VERSION`]).
    Incompatible,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [Self; 9] = [
        Self::Unauthenticated,
        Self::InvalidRequest,
        Self::SealedKeys,
        Self::ForeignCiphertext,
        Self::BadCiphertext,
        Self::Server,
        Self::JobFailed,
        Self::Internal,
        Self::Incompatible,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthenticated => "unauthenticated",
            Self::InvalidRequest => "invalid-request",
            Self::SealedKeys => "sealed-keys",
            Self::ForeignCiphertext => "foreign-ciphertext",
            Self::BadCiphertext => "bad-ciphertext",
            Self::Server => "server",
            Self::JobFailed => "job-failed",
            Self::Internal => "internal",
            Self::Incompatible => "incompatible",
        }
    }

    /// The kind of a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The gRPC code it travels with.
    pub fn code(self) -> Code {
        match self {
            Self::Unauthenticated => Code::Unauthenticated,
            Self::InvalidRequest => Code::InvalidArgument,
            Self::SealedKeys | Self::Incompatible => Code::FailedPrecondition,
            Self::ForeignCiphertext | Self::BadCiphertext => Code::DataLoss,
            Self::Server => Code::Unavailable,
            Self::JobFailed => Code::Aborted,
            Self::Internal => Code::Internal,
        }
    }

    /// A status of this kind.
    pub fn status(self, message: impl Into<String>) -> Status {
        let mut s = Status::new(self.code(), message);
        s.metadata_mut()
            .insert(ERROR_KIND_HEADER, MetadataValue::from_static(self.as_str()));
        s
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of a status from the proxy (`None`: a status without one,
/// from the transport or another service).
pub fn error_kind(status: &Status) -> Option<ErrorKind> {
    status
        .metadata()
        .get(ERROR_KIND_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(ErrorKind::parse)
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A configuration the proxy refuses.
    #[error("proxy configuration: {0}")]
    Config(String),
    /// TLS material that cannot be made or read.
    #[error("proxy TLS: {0}")]
    Tls(String),
    /// A file or socket operation failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The gRPC server failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// One client tenant of the proxy: its proxy token (as a hash) and the
/// token the proxy uses for it on the server. `Debug` shows the name only.
#[derive(Clone)]
pub struct ProxyTenant {
    /// The tenant's name: the same on the proxy and in the sealed key
    /// store (`<store>/<name>/`).
    pub name: String,
    /// BLAKE3 hash of the token clients present to the proxy.
    pub token_hash: [u8; 32],
    /// The token the proxy presents to the server for this tenant
    /// (zeroized on drop).
    pub server_token: Zeroizing<String>,
}

impl std::fmt::Debug for ProxyTenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyTenant")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Shortest proxy token accepted in clear.
pub const MIN_TOKEN_LEN: usize = 16;

impl ProxyTenant {
    /// A tenant whose clients present `proxy_token` (hashed here, at least
    /// [`MIN_TOKEN_LEN`] characters) and for whom the proxy presents
    /// `server_token` to the server.
    pub fn new(name: &str, proxy_token: &str, server_token: &str) -> Result<Self, ServiceError> {
        if proxy_token.trim().len() < MIN_TOKEN_LEN {
            return Err(ServiceError::Config(format!(
                "the proxy token of tenant {name:?} is shorter than {MIN_TOKEN_LEN} characters"
            )));
        }
        Ok(Self {
            name: name.into(),
            token_hash: *blake3::hash(proxy_token.trim().as_bytes()).as_bytes(),
            server_token: Zeroizing::new(server_token.to_string()),
        })
    }
}

/// Where the proxy's TLS identity comes from.
#[derive(Clone, Debug)]
pub enum TlsSource {
    /// A local CA and a certificate for `localhost`, `127.0.0.1`, `::1`,
    /// generated (and renewed) under this folder
    /// (`hecloud_server::tls::load_or_generate`); clients trust its
    /// `ca.pem`.
    Generated(PathBuf),
    /// A certificate chain and its key (PEM files).
    Files {
        /// The certificate (chain).
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
    },
}

/// The proxy's configuration.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The hecloud server's URL (`https://host:port`).
    pub server_url: String,
    /// The CA certificate (PEM) to trust for the server, if it is not in
    /// the system's roots.
    pub server_ca_pem: Option<String>,
    /// The sealed key store (`<store>/<tenant>/<file>.sealed`).
    pub store_dir: PathBuf,
    /// The proxy's TLS identity.
    pub tls: TlsSource,
    /// The tenants.
    pub tenants: Vec<ProxyTenant>,
    /// Most vectors (inputs) in one request.
    pub max_vectors: usize,
}

impl ProxyConfig {
    /// Refuses a configuration the proxy cannot serve: no tenant, a bad
    /// tenant name, a proxy or server token given to two tenants, a server
    /// URL that would carry tokens in cleartext, no vector allowed.
    pub fn validate(&self) -> Result<(), ServiceError> {
        if self.tenants.is_empty() {
            return Err(ServiceError::Config("no tenant is configured".into()));
        }
        if self.max_vectors == 0 {
            return Err(ServiceError::Config(
                "max_vectors must be at least 1".into(),
            ));
        }
        hecloud_client::check_server_url(&self.server_url)
            .map_err(|e| ServiceError::Config(format!("server URL: {e}")))?;
        for (i, t) in self.tenants.iter().enumerate() {
            check_name("tenant", &t.name).map_err(|e| ServiceError::Config(e.to_string()))?;
            for u in &self.tenants[..i] {
                if u.name == t.name {
                    return Err(ServiceError::Config(format!(
                        "tenant {:?} is configured twice",
                        t.name
                    )));
                }
                if u.token_hash == t.token_hash {
                    return Err(ServiceError::Config(format!(
                        "tenants {:?} and {:?} have the same proxy token: give each its own",
                        u.name, t.name
                    )));
                }
                // One server tenant for two proxy tenants would mix their
                // objects and send one's refresh requests to the other's
                // keys (results decrypting as other values).
                if *u.server_token == *t.server_token {
                    return Err(ServiceError::Config(format!(
                        "tenants {:?} and {:?} have the same server token: give each its own server tenant",
                        u.name, t.name
                    )));
                }
            }
        }
        Ok(())
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct RunningProxy {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The CA certificate its clients trust, when it generated its own.
    pub ca_pem: Option<String>,
    /// Its TLS public key (the DER SubjectPublicKeyInfo of its
    /// certificate, [`crate::attest::tls_public_key_of`]), which
    /// attestation reports bind.
    pub tls_public_key: Vec<u8>,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl RunningProxy {
    /// The URL its clients connect to (`https://localhost:<port>`, the
    /// name its generated certificate carries).
    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    /// Stops accepting requests and ends (in-flight requests get two
    /// seconds).
    pub async fn stop(mut self) -> Result<(), ServiceError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match tokio::time::timeout(Duration::from_secs(2), &mut self.task).await {
            Ok(Ok(r)) => r?,
            Ok(Err(e)) => return Err(ServiceError::Config(format!("proxy task: {e}"))),
            Err(_) => self.task.abort(),
        }
        Ok(())
    }

    /// Waits until the proxy ends.
    pub async fn wait(self) -> Result<(), ServiceError> {
        match self.task.await {
            Ok(r) => Ok(r?),
            Err(e) => Err(ServiceError::Config(format!("proxy task: {e}"))),
        }
    }
}

/// The TLS public key of the first (end-entity) certificate of a PEM
/// chain: its DER SubjectPublicKeyInfo as the certificate carries it
/// ([`crate::attest::tls_public_key_of`]), the bytes a client reads from
/// the certificate it is presented.
fn public_key_of(cert_pem: &str) -> Result<Vec<u8>, ServiceError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let leaf = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .next()
        .ok_or_else(|| ServiceError::Tls("the TLS certificate file holds no certificate".into()))?
        .map_err(|e| ServiceError::Tls(format!("the TLS certificate: {e}")))?;
    crate::attest::tls_public_key_of(&leaf).map_err(|e| ServiceError::Tls(e.to_string()))
}

/// Starts the proxy: reads its TLS identity, binds, and serves until
/// [`RunningProxy::stop`]. Tenants' keys are unsealed on their first
/// request, not here. Must be called inside a multi-threaded tokio
/// runtime.
pub async fn start(
    config: ProxyConfig,
    enclave: Arc<dyn Enclave>,
) -> Result<RunningProxy, ServiceError> {
    config.validate()?;
    hecloud_protocol::rpc::install_tls_provider();
    let (cert, key, ca_pem) = match &config.tls {
        TlsSource::Generated(dir) => {
            let m = hecloud_server::tls::load_or_generate(dir)
                .map_err(|e| ServiceError::Tls(e.to_string()))?;
            (m.cert_pem, Zeroizing::new(m.key_pem), Some(m.ca_pem))
        }
        TlsSource::Files { cert, key } => (
            std::fs::read_to_string(cert)?,
            Zeroizing::new(std::fs::read_to_string(key)?),
            None,
        ),
    };
    let tls_public_key = public_key_of(&cert)?;
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let inner = Arc::new(Inner {
        enclave,
        store: SealedKeyStore::new(&config.store_dir),
        server_url: config.server_url.clone(),
        server_ca_pem: config.server_ca_pem.clone(),
        tenants: config
            .tenants
            .iter()
            .map(|t| Tenant {
                config: t.clone(),
                ready: Mutex::new(None),
                busy: tokio::sync::Semaphore::new(TENANT_REQUESTS),
            })
            .collect(),
        max_vectors: config.max_vectors,
        tls_public_key: tls_public_key.clone(),
    });
    let svc = proxy_server::ProxyServer::new(ProxyService(inner))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let router = Server::builder()
        .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key.as_bytes())))?
        .http2_keepalive_interval(Some(Duration::from_secs(20)))
        .initial_stream_window_size(Some(hecloud_protocol::rpc::STREAM_WINDOW))
        .initial_connection_window_size(Some(hecloud_protocol::rpc::CONNECTION_WINDOW))
        .add_service(svc);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
        let _ = rx.await;
    }));
    tracing::info!(%addr, server = %config.server_url, tenants = config.tenants.len(),
        "hecloud proxy listening");
    Ok(RunningProxy {
        addr,
        ca_pem,
        tls_public_key,
        shutdown: Some(tx),
        task,
    })
}

/// A tenant on its way to the server: the session is uploaded and the
/// key-holder session open.
struct Ready {
    server: Client,
    session: ObjectId,
    /// Answers the server's refresh requests while it lives.
    refresh: SessionHandle,
}

struct Tenant {
    config: ProxyTenant,
    ready: Mutex<Option<Arc<Ready>>>,
    /// Its requests in flight: each encrypts, uploads or decrypts
    /// ciphertexts of tens of MB, so one tenant's burst queues here
    /// rather than taking the proxy's memory and cores from the others.
    busy: tokio::sync::Semaphore,
}

/// Requests of one tenant the proxy serves at once (more wait their turn).
pub const TENANT_REQUESTS: usize = 4;

struct Inner {
    enclave: Arc<dyn Enclave>,
    store: SealedKeyStore,
    server_url: String,
    server_ca_pem: Option<String>,
    tenants: Vec<Tenant>,
    max_vectors: usize,
    tls_public_key: Vec<u8>,
}

/// The gRPC service.
struct ProxyService(Arc<Inner>);

/// Whether two hashes are equal, in time independent of where they
/// differ.
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut d = 0u8;
    for (x, y) in a.iter().zip(b) {
        d |= x ^ y;
    }
    std::hint::black_box(d) == 0
}

/// The error's own kind and message (the batch position dropped).
fn classify(e: ProxyError, crypto_kind: ErrorKind) -> Status {
    let e = match e {
        ProxyError::InBatch { source, .. } => *source,
        e => e,
    };
    let kind = match &e {
        ProxyError::NotSealed
        | ProxyError::UnknownVersion(_)
        | ProxyError::Truncated { .. }
        | ProxyError::WrongKey
        | ProxyError::WrongTenant(_)
        | ProxyError::WrongFile(_)
        | ProxyError::Tampered
        | ProxyError::MissingFile { .. }
        | ProxyError::Unsupported(_)
        | ProxyError::InvalidName { .. }
        | ProxyError::Io(_) => ErrorKind::SealedKeys,
        ProxyError::ForeignParameters | ProxyError::ForeignKey => ErrorKind::ForeignCiphertext,
        ProxyError::WrongScheme { .. } => ErrorKind::InvalidRequest,
        ProxyError::Crypto(_) => crypto_kind,
        _ => ErrorKind::Internal,
    };
    kind.status(e.to_string())
}

fn server_fail(what: &str, e: ClientError) -> Status {
    ErrorKind::Server.status(format!("{what}: {e}"))
}

impl Tenant {
    /// Waits for one of the tenant's [`TENANT_REQUESTS`] turns.
    async fn turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, Status> {
        self.busy
            .acquire()
            .await
            .map_err(|_| ErrorKind::Internal.status("the proxy is shutting down"))
    }
}

impl Inner {
    /// The tenant a request's bearer token authenticates. Every tenant's
    /// hash is compared, in constant time; the token is never logged.
    fn authenticate<T>(&self, req: &Request<T>) -> Result<&Tenant, Status> {
        let unauth = |m: &str| ErrorKind::Unauthenticated.status(m);
        let v = req
            .metadata()
            .get("authorization")
            .ok_or_else(|| unauth("missing `authorization: Bearer <proxy token>`"))?;
        let tok = v
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| unauth("authorization must be `Bearer <proxy token>`"))?;
        let h = *blake3::hash(tok.trim().as_bytes()).as_bytes();
        let mut found = None;
        for t in &self.tenants {
            if ct_eq(&t.config.token_hash, &h) {
                found = Some(t);
            }
        }
        found.ok_or_else(|| {
            tracing::info!("refused a request with an unknown or wrong proxy token");
            unauth("unknown or wrong proxy token")
        })
    }

    /// Runs a batch in one crossing, off the async threads.
    async fn cross(
        &self,
        batch: Vec<EnclaveOp>,
        crypto_kind: ErrorKind,
    ) -> Result<Vec<EnclaveReply>, Status> {
        let enclave = self.enclave.clone();
        let n = batch.len();
        let replies = tokio::task::spawn_blocking(move || enclave.call(batch))
            .await
            .map_err(|e| ErrorKind::Internal.status(format!("enclave task: {e}")))?
            .map_err(|e| classify(e, crypto_kind))?;
        if replies.len() != n {
            return Err(ErrorKind::Internal.status(format!(
                "the enclave returned {} replies for {n} operations",
                replies.len()
            )));
        }
        Ok(replies)
    }

    /// The tenant's connection to the server, set up on its first request
    /// and again when its key-holder session has ended (the server went
    /// away or restarted). `true` with a connection just set up.
    async fn ready(&self, t: &Tenant) -> Result<(Arc<Ready>, bool), Status> {
        let mut slot = t.ready.lock().await;
        if let Some(r) = slot.as_ref() {
            if !r.refresh.is_closed() {
                return Ok((r.clone(), false));
            }
            tracing::warn!(tenant = %t.config.name,
                "the key-holder session with the server ended; setting the tenant up again");
        }
        *slot = None;
        let r = Arc::new(self.setup(t).await.inspect_err(|s| {
            tracing::warn!(tenant = %t.config.name, kind = ?error_kind(s), error = %s.message(),
                "could not set the tenant up");
        })?);
        *slot = Some(r.clone());
        Ok((r, true))
    }

    /// `work` on the tenant's connection ([`Self::ready`]), once more on
    /// a connection set up again if it failed on the server over one that
    /// was not fresh ([`Self::retry_after`]).
    async fn on_server<T, F, Fut>(&self, t: &Tenant, work: F) -> Result<T, Status>
    where
        F: Fn(Arc<Ready>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let (ready, fresh) = self.ready(t).await?;
        match work(ready.clone()).await {
            Err(s) if self.retry_after(t, &ready, fresh, &s).await => {
                work(self.ready(t).await?.0).await
            }
            r => r,
        }
    }

    /// After a request on `ready` failed with `status`: whether to retry
    /// it once on a connection set up again. Yes for a server failure on
    /// a connection that was not fresh (the server may have restarted and
    /// lost the session or its objects); the old connection is dropped
    /// either way, so the next request sets the tenant up again.
    async fn retry_after(
        &self,
        t: &Tenant,
        ready: &Arc<Ready>,
        fresh: bool,
        status: &Status,
    ) -> bool {
        if error_kind(status) != Some(ErrorKind::Server) {
            return false;
        }
        let mut slot = t.ready.lock().await;
        if slot.as_ref().is_some_and(|r| Arc::ptr_eq(r, ready)) {
            *slot = None;
        }
        if !fresh {
            tracing::warn!(tenant = %t.config.name, error = %status.message(),
                "the server failed a request; retrying once with the tenant set up again");
        }
        !fresh
    }

    /// Unseals the tenant's keys into the enclave and takes its public
    /// files (one crossing), uploads them, opens its key-holder session.
    async fn setup(&self, t: &Tenant) -> Result<Ready, Status> {
        let name = t.config.name.clone();
        let folder = self
            .store
            .read(&name)
            .map_err(|e| classify(e, ErrorKind::SealedKeys))?;
        let replies = self
            .cross(
                vec![
                    EnclaveOp::LoadTenant {
                        tenant: name.clone(),
                        folder: folder.clone(),
                    },
                    EnclaveOp::PublicFiles {
                        tenant: name.clone(),
                        folder,
                    },
                ],
                ErrorKind::SealedKeys,
            )
            .await?;
        let Some(EnclaveReply::PublicFiles(files)) = replies.into_iter().nth(1) else {
            return Err(ErrorKind::Internal.status("the enclave returned no public files"));
        };
        let sealed = |m: String| ErrorKind::SealedKeys.status(m);
        let spec_bytes = files.get("session.spec").ok_or_else(|| {
            sealed(format!(
                "the key folder of tenant {name:?} has no session.spec"
            ))
        })?;
        let spec = SessionSpec::decode(spec_bytes)
            .map_err(|e| sealed(format!("session.spec of tenant {name:?}: {e}")))?;
        let server = Client::connect(
            &self.server_url,
            &t.config.server_token,
            self.server_ca_pem.as_deref(),
        )
        .await
        .map_err(|e| server_fail("connecting to the server", e))?;
        // Keys first, the session last (it names them), of the kinds of
        // the session's scheme: in the order and kinds the client SDK
        // uploads a key folder.
        let order = uploads_in_order(files.keys().map(String::as_str), &spec, key_kinds(&spec));
        for (file, kind) in order {
            let bytes = files.get(file).ok_or_else(|| {
                sealed(format!("the key folder of tenant {name:?} has no {file}"))
            })?;
            server
                .upload(kind, Arc::new(bytes.clone()))
                .await
                .map_err(|e| server_fail(&format!("uploading the tenant's {kind}"), e))?;
        }
        let enclave = self.enclave.clone();
        let tenant = name.clone();
        let refresh = server
            .open_session(
                &[CALLBACK_REFRESH],
                Arc::new(move |kind: &str, payload: &[u8]| {
                    if kind != CALLBACK_REFRESH {
                        return Err(format!(
                            "this key holder answers refresh requests, not `{kind}`"
                        ));
                    }
                    match enclave.call_one(EnclaveOp::AnswerRefresh {
                        tenant: tenant.clone(),
                        request: payload.to_vec(),
                    }) {
                        Ok(EnclaveReply::RefreshReply(r)) => Ok(r),
                        Ok(other) => Err(format!("the enclave answered {other:?}")),
                        Err(e) => Err(e.to_string()),
                    }
                }),
            )
            .await
            .map_err(|e| server_fail("opening the key-holder session", e))?;
        tracing::info!(tenant = %name, session = %spec.id(), "tenant ready");
        Ok(Ready {
            server,
            session: spec.id(),
            refresh,
        })
    }

    /// Encrypts the vectors in one crossing and uploads their ciphertexts
    /// side by side as they are made: a CKKS ciphertext goes a limb at a
    /// time while its last limbs are still being encrypted
    /// ([`EnclaveOp::EncryptRealStreamed`]), a BGV one once it is whole.
    /// Returns the object ids, in order, once every byte of each is sent
    /// (before the server has stored them), with the uploads still running:
    /// a job submitted now with [`Client::submit_awaiting_inputs`] starts
    /// while they are stored.
    async fn encrypt_uploading(
        &self,
        server: &Client,
        tenant: &str,
        vectors: Vec<Plain>,
        crossings: &AtomicU32,
    ) -> Result<Sent, Status> {
        let n = vectors.len();
        let mut uploads = Uploads::new();
        if n == 0 {
            return Ok(Sent {
                ids: vec![],
                uploads,
                encrypted: Instant::now(),
            });
        }
        let mut handed = Vec::with_capacity(n);
        let batch: Vec<EnclaveOp> = vectors
            .into_iter()
            .map(|v| match v {
                Plain::Reals(values) => {
                    let (to, rx) = StreamTo::new();
                    handed.push(Some(rx));
                    EnclaveOp::EncryptRealStreamed {
                        tenant: tenant.into(),
                        values,
                        to,
                    }
                }
                Plain::Ints(values) => {
                    handed.push(None);
                    EnclaveOp::EncryptInts {
                        tenant: tenant.into(),
                        values,
                    }
                }
            })
            .collect();
        let mut announced: Vec<Option<oneshot::Receiver<String>>> = (0..n).map(|_| None).collect();
        let start = |uploads: &mut Uploads, kind: &'static str, body: UploadBody| {
            let (tx, rx) = oneshot::channel();
            let c = server.clone();
            uploads.spawn(async move { c.upload(kind, body).announce(tx).await.map(|_| ()) });
            rx
        };
        crossings.fetch_add(1, Ordering::Relaxed);
        // The streamed uploads start as the enclave hands their objects
        // out, while the crossing runs.
        let (replies, ()) = tokio::join!(self.cross(batch, ErrorKind::InvalidRequest), async {
            for (rx, slot) in handed.into_iter().zip(&mut announced) {
                let Some(rx) = rx else { continue };
                match rx.await {
                    Ok(object) => {
                        *slot = Some(start(&mut uploads, CKKS_CIPHERTEXT_KIND, object.into()));
                    }
                    // The crossing failed before this encryption began.
                    Err(_) => return,
                }
            }
        });
        // A failed crossing drops the uploads, which are aborted.
        let replies = replies?;
        let encrypted = Instant::now();
        for (reply, slot) in replies.into_iter().zip(&mut announced) {
            match (reply, slot.is_some()) {
                (EnclaveReply::Streamed(_), true) => {}
                (EnclaveReply::Ciphertext(b), false) => {
                    *slot = Some(start(&mut uploads, BGV_CIPHERTEXT_KIND, b.into()));
                }
                (other, _) => {
                    return Err(
                        ErrorKind::Internal.status(format!("the enclave answered {other:?}"))
                    );
                }
            }
        }
        let mut ids = Vec::with_capacity(n);
        for rx in announced.into_iter().flatten() {
            match rx.await {
                Ok(id) => ids.push(id),
                // The upload ended before it sent every byte: its error.
                Err(_) => {
                    finish_uploads(uploads).await?;
                    return Err(ErrorKind::Internal.status("an upload ended without its id"));
                }
            }
        }
        Ok(Sent {
            ids,
            uploads,
            encrypted,
        })
    }

    /// Decrypts ciphertexts in one crossing under the tenant's scheme,
    /// keeping `count` values of each (0: all).
    async fn decrypt(
        &self,
        tenant: &str,
        ciphertexts: Vec<Vec<u8>>,
        count: u64,
        crossings: &AtomicU32,
    ) -> Result<Vec<Plain>, Status> {
        if ciphertexts.is_empty() {
            return Ok(vec![]);
        }
        let batch = ciphertexts
            .into_iter()
            .map(|ciphertext| EnclaveOp::Decrypt {
                tenant: tenant.into(),
                ciphertext,
            })
            .collect();
        crossings.fetch_add(1, Ordering::Relaxed);
        self.cross(batch, ErrorKind::BadCiphertext)
            .await?
            .into_iter()
            .map(|r| {
                let keep = |len: usize| {
                    if count > 0 && (count as usize) < len {
                        count as usize
                    } else {
                        len
                    }
                };
                match r {
                    EnclaveReply::Reals(mut v) => {
                        let n = keep(v.len());
                        v.truncate(n);
                        Ok(Plain::Reals(v))
                    }
                    EnclaveReply::Ints(mut v) => {
                        let n = keep(v.len());
                        v.truncate(n);
                        Ok(Plain::Ints(v))
                    }
                    other => {
                        Err(ErrorKind::Internal.status(format!("the enclave answered {other:?}")))
                    }
                }
            })
            .collect()
    }

    /// One attempt at a Run request on `ready`: encrypt, upload, submit,
    /// wait, download, decrypt.
    async fn run_on(
        &self,
        ready: &Ready,
        name: &str,
        job: &RunJob,
    ) -> Result<rpc::RunReply, Status> {
        let crossings = AtomicU32::new(0);
        let start = Instant::now();
        // The job goes in as soon as every input byte is sent; the server
        // starts it once they have arrived, while it stores them.
        let Sent {
            ids: uploaded,
            uploads,
            encrypted,
        } = self
            .encrypt_uploading(&ready.server, name, job.plain.clone(), &crossings)
            .await?;
        let (encrypted, sent) = (encrypted - start, start.elapsed());
        let mut uploaded = uploaded.into_iter();
        let mut inputs = Vec::with_capacity(job.known.len());
        for &k in &job.known {
            match k {
                Some(id) => inputs.push(id),
                None => {
                    let id = uploaded.next().ok_or_else(|| {
                        ErrorKind::Internal.status("fewer uploads than plaintext inputs")
                    })?;
                    inputs.push(object_id(&id)?);
                }
            }
        }
        let submission = JobSubmission {
            session: ready.session,
            graph: job.graph.clone(),
            inputs,
        };
        let input_ids = submission.inputs.iter().map(|i| i.to_hex()).collect();
        let submitted = ready
            .server
            .submit_awaiting_inputs(
                JOB_KIND_GRAPH,
                submission.encode(),
                &job.client_ref,
                AWAIT_INPUTS,
            )
            .await
            .map_err(|e| match e.code() {
                Some(Code::InvalidArgument) => {
                    ErrorKind::InvalidRequest.status(format!("the server refused the job: {e}"))
                }
                _ => server_fail("submitting the job", e),
            });
        // An upload that failed fails the request (and the job, which
        // waits for it in vain), whatever the submission said.
        finish_uploads(uploads).await?;
        let submitted = submitted?;
        let j = ready
            .server
            .wait(&submitted.job_id, &|_| {})
            .await
            .map_err(|e| server_fail("following the job", e))?;
        if j.state != JobState::Succeeded as i32 {
            return Err(ErrorKind::JobFailed.status(format!(
                "job {} ended {:?}: {}",
                j.job_id,
                JobState::try_from(j.state).unwrap_or(JobState::Unspecified),
                j.error
            )));
        }
        let finished = start.elapsed();
        let mut bytes = Vec::with_capacity(j.outputs.len());
        for o in &j.outputs {
            bytes.push(
                ready
                    .server
                    .job_output(o, None)
                    .await
                    .map_err(|e| server_fail(&format!("downloading output {}", o.name), e))?,
            );
        }
        let downloaded = start.elapsed();
        let values = self.decrypt(name, bytes, job.count, &crossings).await?;
        // Where a request's time goes, for tuning (no data in it).
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        tracing::debug!(
            tenant = name,
            encrypted_ms = ms(encrypted),
            sent_ms = ms(sent),
            finished_ms = ms(finished),
            downloaded_ms = ms(downloaded),
            decrypted_ms = ms(start.elapsed()),
            "run phases (time since the request began)"
        );
        let integers = values.iter().any(|v| matches!(v, Plain::Ints(_)));
        let outputs = j
            .outputs
            .iter()
            .zip(values)
            .map(|(o, v)| {
                let (values, ints) = v.take();
                rpc::Output {
                    name: o.name.clone(),
                    object_id: o.object_id.clone(),
                    values,
                    ints,
                }
            })
            .collect();
        Ok(rpc::RunReply {
            job_id: j.job_id,
            outputs,
            input_ids,
            crossings: crossings.load(Ordering::Relaxed),
            integers,
        })
    }

    fn check_vectors(&self, n: usize) -> Result<(), Status> {
        if n > self.max_vectors {
            return Err(ErrorKind::InvalidRequest.status(format!(
                "{n} vectors in one request; this proxy takes at most {}",
                self.max_vectors
            )));
        }
        Ok(())
    }
}

/// Plaintext values going into the enclave or coming out of it (zeroized
/// on drop).
#[derive(Clone)]
enum Plain {
    /// Reals (a CKKS tenant).
    Reals(Zeroizing<Vec<f64>>),
    /// Integers mod t (a BGV tenant).
    Ints(Zeroizing<Vec<u64>>),
}

impl Plain {
    /// Moves the values into a reply: (reals, integers), one of them
    /// empty (the reply's buffers are the gRPC layer's, not zeroized).
    fn take(self) -> (Vec<f64>, Vec<u64>) {
        match self {
            Self::Reals(mut v) => (std::mem::take(&mut *v), vec![]),
            Self::Ints(mut v) => (vec![], std::mem::take(&mut *v)),
        }
    }
}

/// Uploads of a request's inputs, every byte sent
/// ([`Inner::encrypt_uploading`]).
struct Sent {
    /// The object ids, in order.
    ids: Vec<String>,
    /// The uploads, still storing.
    uploads: Uploads,
    /// When the enclave finished encrypting.
    encrypted: Instant,
}

/// A parsed Run request, kept for a retry.
struct RunJob {
    graph: Graph,
    /// The plaintext inputs, in order.
    plain: Vec<Plain>,
    /// Where each input comes from: an object id, or the next plaintext.
    known: Vec<Option<ObjectId>>,
    client_ref: String,
    count: u64,
}

/// Uploads still running.
type Uploads = tokio::task::JoinSet<Result<(), ClientError>>;

/// Waits for uploads to be stored: the first failure.
async fn finish_uploads(mut set: Uploads) -> Result<(), Status> {
    while let Some(r) = set.join_next().await {
        r.map_err(|e| ErrorKind::Internal.status(format!("upload task: {e}")))?
            .map_err(|e| server_fail("uploading a ciphertext", e))?;
    }
    Ok(())
}

fn object_id(s: &str) -> Result<ObjectId, Status> {
    ObjectId::from_hex(s).ok_or_else(|| {
        ErrorKind::InvalidRequest.status(format!("{s:?} is not an object id (64 hex digits)"))
    })
}

#[tonic::async_trait]
impl proxy_server::Proxy for ProxyService {
    async fn info(
        &self,
        req: Request<rpc::InfoRequest>,
    ) -> Result<Response<rpc::InfoReply>, Status> {
        let req = req.into_inner();
        if req.protocol_version != rpc::PROTOCOL_VERSION {
            return Err(ErrorKind::Incompatible.status(format!(
                "this proxy speaks protocol version {}, the client {}: update the client",
                rpc::PROTOCOL_VERSION,
                match req.protocol_version {
                    0 => "1 (or none)".to_string(),
                    v => v.to_string(),
                }
            )));
        }
        let nonce: [u8; crate::attest::CLIENT_NONCE_LEN] = req.nonce.try_into().map_err(|_| {
            ErrorKind::InvalidRequest.status(format!(
                "the nonce must have {} bytes",
                crate::attest::CLIENT_NONCE_LEN
            ))
        })?;
        let inner = self.0.clone();
        let data = crate::attest::report_data(&inner.tls_public_key, &nonce);
        let attestation = tokio::task::spawn_blocking(move || inner.enclave.attestation(&data))
            .await
            .map_err(|e| ErrorKind::Internal.status(format!("enclave task: {e}")))?
            .map_err(|e| ErrorKind::Internal.status(e.to_string()))?;
        let attestation = match attestation {
            crate::Attestation::ConfigfsTsm {
                provider,
                report,
                auxblob,
            } => rpc::Attestation {
                kind: rpc::ATTESTATION_CONFIGFS_TSM.into(),
                provider,
                report,
                auxblob,
            },
            _ => rpc::Attestation {
                kind: rpc::ATTESTATION_UNATTESTED.into(),
                ..Default::default()
            },
        };
        Ok(Response::new(rpc::InfoReply {
            proxy_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: rpc::PROTOCOL_VERSION,
            attestation: Some(attestation),
            tls_public_key: self.0.tls_public_key.clone(),
            max_vectors: self.0.max_vectors as u32,
            max_message_bytes: MAX_MESSAGE_BYTES as u64,
        }))
    }

    async fn put(&self, req: Request<rpc::PutRequest>) -> Result<Response<rpc::PutReply>, Status> {
        let inner = &self.0;
        let t = inner.authenticate(&req)?;
        let _turn = t.turn().await?;
        let req = req.into_inner();
        // The reals, then the integers: the order of the object ids.
        let vectors: Vec<Plain> = req
            .vectors
            .into_iter()
            .map(|v| Plain::Reals(Zeroizing::new(v.values)))
            .chain(
                req.int_vectors
                    .into_iter()
                    .map(|v| Plain::Ints(Zeroizing::new(v.values))),
            )
            .collect();
        inner.check_vectors(vectors.len())?;
        let put = |ready: Arc<Ready>| {
            let vectors = vectors.clone();
            async move {
                let crossings = AtomicU32::new(0);
                let sent = inner
                    .encrypt_uploading(&ready.server, &t.config.name, vectors, &crossings)
                    .await?;
                finish_uploads(sent.uploads).await?;
                Ok(sent.ids)
            }
        };
        let object_ids = inner.on_server(t, put).await?;
        Ok(Response::new(rpc::PutReply { object_ids }))
    }

    async fn run(&self, req: Request<rpc::RunRequest>) -> Result<Response<rpc::RunReply>, Status> {
        let inner = &self.0;
        let t = inner.authenticate(&req)?;
        let _turn = t.turn().await?;
        let name = &t.config.name;
        let req = req.into_inner();
        inner.check_vectors(req.inputs.len())?;
        let graph = Graph::decode(&req.graph)
            .map_err(|e| ErrorKind::InvalidRequest.status(format!("the graph: {e}")))?;
        // Plaintext inputs to encrypt, and where each input comes from.
        let mut plain = vec![];
        let mut known: Vec<Option<ObjectId>> = Vec::with_capacity(req.inputs.len());
        for (i, input) in req.inputs.into_iter().enumerate() {
            match input.source {
                Some(rpc::run_input::Source::Values(v)) => {
                    plain.push(Plain::Reals(Zeroizing::new(v.values)));
                    known.push(None);
                }
                Some(rpc::run_input::Source::Ints(v)) => {
                    plain.push(Plain::Ints(Zeroizing::new(v.values)));
                    known.push(None);
                }
                Some(rpc::run_input::Source::ObjectId(id)) => known.push(Some(object_id(&id)?)),
                None => {
                    return Err(ErrorKind::InvalidRequest.status(format!(
                        "input {i} has neither values, integers nor an object id"
                    )));
                }
            }
        }
        let job = RunJob {
            graph,
            plain,
            known,
            client_ref: req.client_ref,
            count: req.count,
        };
        let job = &job;
        let reply = inner
            .on_server(
                t,
                |ready| async move { inner.run_on(&ready, name, job).await },
            )
            .await?;
        Ok(Response::new(reply))
    }

    async fn get(&self, req: Request<rpc::GetRequest>) -> Result<Response<rpc::GetReply>, Status> {
        let inner = &self.0;
        let t = inner.authenticate(&req)?;
        let _turn = t.turn().await?;
        let req = req.into_inner();
        let id = object_id(&req.object_id)?;
        let download = |ready: Arc<Ready>| async move {
            ready
                .server
                .download(&id.to_hex(), None)
                .await
                .map_err(|e| server_fail(&format!("downloading {id}"), e))
        };
        let bytes = inner.on_server(t, download).await?;
        let crossings = AtomicU32::new(0);
        let mut v = inner
            .decrypt(&t.config.name, vec![bytes], req.count, &crossings)
            .await?;
        let integers = matches!(v.last(), Some(Plain::Ints(_)));
        let (values, ints) = v.pop().map(Plain::take).unwrap_or_default();
        Ok(Response::new(rpc::GetReply {
            values,
            ints,
            integers,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tenant's requests beyond [`TENANT_REQUESTS`] wait for a turn
    /// (another tenant's do not), and go on when one ends.
    #[tokio::test]
    async fn a_tenants_burst_waits_its_turn() {
        let tenant = |name: &str| Tenant {
            config: ProxyTenant::new(name, "a-proxy-token-0123456789", "a-server-token-012345678")
                .unwrap(),
            ready: Mutex::new(None),
            busy: tokio::sync::Semaphore::new(TENANT_REQUESTS),
        };
        let (alice, bob) = (tenant("alice"), tenant("bob"));
        let mut turns = Vec::new();
        for _ in 0..TENANT_REQUESTS {
            turns.push(alice.turn().await.unwrap());
        }
        let wait = std::time::Duration::from_millis(50);
        assert!(tokio::time::timeout(wait, alice.turn()).await.is_err());
        assert!(tokio::time::timeout(wait, bob.turn()).await.is_ok());
        turns.pop();
        assert!(tokio::time::timeout(wait, alice.turn()).await.is_ok());
    }

    /// Two tenants may share neither a name, nor a proxy token, nor a
    /// server token (one server tenant would mix their objects and
    /// refreshes); distinct ones pass.
    #[test]
    fn tenants_share_no_name_and_no_token() {
        let config = |tenants: Vec<ProxyTenant>| ProxyConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            server_url: "https://localhost:7443".into(),
            server_ca_pem: None,
            store_dir: "store".into(),
            tls: TlsSource::Generated("tls".into()),
            tenants,
            max_vectors: DEFAULT_MAX_VECTORS,
        };
        let t =
            |name: &str, proxy: &str, server: &str| ProxyTenant::new(name, proxy, server).unwrap();
        let (a, b) = ("a-proxy-token-0123456789", "b-proxy-token-0123456789");
        let (sa, sb) = ("a-server-token-0123456789", "b-server-token-0123456789");
        assert!(
            config(vec![t("alice", a, sa), t("bob", b, sb)])
                .validate()
                .is_ok()
        );
        for (tenants, what) in [
            (
                vec![t("alice", a, sa), t("alice", b, sb)],
                "configured twice",
            ),
            (vec![t("alice", a, sa), t("bob", a, sb)], "same proxy token"),
            (
                vec![t("alice", a, sa), t("bob", b, sa)],
                "same server token",
            ),
        ] {
            match config(tenants).validate() {
                Err(ServiceError::Config(m)) => assert!(m.contains(what), "{m}"),
                other => panic!("{what}: {other:?}"),
            }
        }
    }
}
