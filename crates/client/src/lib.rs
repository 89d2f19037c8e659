//! # hecloud-client
//!
//! The client SDK: the secret key stays here; data is encrypted before it
//! leaves and decrypted after results come back.
//!
//! * [`Client`]: a connection to a hecloud server (TLS, bearer token):
//!   resumable chunked uploads and downloads, jobs, key-holder sessions;
//! * [`keys`]: CKKS key files on disk (secret key 0600, zeroized in memory).
#![deny(missing_docs)]

pub mod bgv;
mod growing;
pub mod keys;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

pub use growing::{GrowingObject, ObjectWriter, Overrun};
use hecloud_protocol::ObjectId;
use hecloud_protocol::rpc::{
    CallbackReply, DataChunk, DownloadRequest, InfoReply, InfoRequest, JobInfo, JobOutput, JobRef,
    JobState, ListObjectsRequest, ObjectInfo, ObjectRef, SessionClientMsg, SessionHello,
    SubmitRequest, UploadChunk, UploadHeader, UploadOffsetRequest, hecloud_client::HecloudClient,
    session_client_msg, session_server_msg,
};
use thiserror::Error;
use tokio::sync::mpsc;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

/// Client errors.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The server answered with an error status.
    #[error("server: {code:?}: {message}")]
    Status {
        /// gRPC code.
        code: Code,
        /// The server's reason.
        message: String,
    },
    /// The server URL would carry the bearer token in cleartext: `http://`
    /// to a host that is not loopback. Refused before any connection (or
    /// name lookup) is made, so nothing was sent.
    #[error(
        "refusing to send the bearer token in cleartext to {host}: use https:// \
         (http:// is allowed only to a loopback host: 127.0.0.0/8, [::1], localhost)"
    )]
    CleartextToken {
        /// The host the URL names.
        host: String,
    },
    /// Could not connect.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The data received is not what was asked for.
    #[error("integrity: {0}")]
    Integrity(String),
    /// Bad argument on the client side.
    #[error("{0}")]
    Invalid(String),
    /// Local I/O.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Encryption library error.
    #[error("crypto: {0}")]
    Crypto(String),
}

impl From<Status> for ClientError {
    fn from(s: Status) -> Self {
        Self::Status {
            code: s.code(),
            message: s.message().to_string(),
        }
    }
}

impl ClientError {
    /// The gRPC code, when the server answered with one.
    pub fn code(&self) -> Option<Code> {
        match self {
            Self::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    fn retryable(&self) -> bool {
        matches!(
            self.code(),
            Some(Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Aborted)
        ) || matches!(self, Self::Transport(_))
    }
}

/// Result with [`ClientError`].
pub type Result<T> = std::result::Result<T, ClientError>;

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct Auth(MetadataValue<tonic::metadata::Ascii>);

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(..)")
    }
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> std::result::Result<Request<()>, Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

/// Bytes moved by a client (payload bytes of uploads, downloads, specs).
#[derive(Debug, Default)]
pub struct Traffic {
    /// Bytes sent.
    pub sent: AtomicU64,
    /// Bytes received.
    pub received: AtomicU64,
}

/// A progress callback: (bytes done, total).
pub type ProgressFn = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// A connection that adds the bearer token to every call.
type Connection = InterceptedService<Channel, Auth>;

type Rpc = HecloudClient<Connection>;

/// A connection to a hecloud server.
#[derive(Debug, Clone)]
pub struct Client {
    /// One client per connection: uploads take turns on them, every other
    /// call uses the first.
    connections: Arc<[Connection]>,
    next_upload: Arc<AtomicUsize>,
    traffic: Arc<Traffic>,
    chunk: usize,
    max_download: u64,
}

/// Largest object [`Client::download`] accepts by default: twice the
/// server's default object limit. A server announcing more (it is not
/// trusted) is refused before anything is allocated.
pub const MAX_DOWNLOAD_BYTES: u64 = 4 << 30;

/// HTTP/2 connections a client opens. Each connection's TLS and framing
/// run on one task at each end, so concurrent uploads on separate
/// connections use separate cores.
pub const CONNECTIONS: usize = 2;

/// Default upload chunk size.
pub const UPLOAD_CHUNK: usize = 1 << 20;

/// An upload buffer as the owner of a [`bytes::Bytes`].
struct SharedBuf(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedBuf {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// An object whose bytes are made as they are sent
/// ([`UploadBody::Source`]).
pub trait ObjectSource: Send + Sync {
    /// Its length in bytes.
    fn byte_len(&self) -> u64;
    /// Writes its bytes at `offset..offset + dst.len()` (always inside
    /// `byte_len`, and below [`ObjectSource::made`] where there is one)
    /// into `dst`: the same bytes on every call.
    fn write_at(&self, offset: u64, dst: &mut [u8]);
    /// For an object still being made ([`GrowingObject`]): the count of
    /// its first bytes that exist, growing to `byte_len`; an upload sends
    /// each chunk once its bytes are there. Closed before reaching
    /// `byte_len`: the object was abandoned, and the upload fails. `None`
    /// (the default): every byte can be made at once.
    fn made(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// A ciphertext makes any range of its serialized form
/// ([`Ciphertext::to_bytes`]), packing only the limbs in it.
///
/// [`Ciphertext::to_bytes`]: hecloud_rlwe::Ciphertext::to_bytes
impl ObjectSource for hecloud_rlwe::Ciphertext {
    fn byte_len(&self) -> u64 {
        self.serialized_len() as u64
    }

    fn write_at(&self, offset: u64, dst: &mut [u8]) {
        self.write_range(offset as usize, dst);
    }
}

/// The messages of a streamed upload.
type PlanStream = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = PlannedChunk> + Send>>;

/// One message of a streamed upload, before its bytes are made.
#[derive(Debug)]
struct PlannedChunk {
    /// Goes with the first message.
    header: Option<UploadHeader>,
    offset: u64,
    len: usize,
}

/// What a streamed upload has made so far: the hash of every byte, and the
/// count.
struct Made {
    hasher: blake3::Hasher,
    bytes: u64,
}

/// The codec of a streamed upload: each message's bytes are made by the
/// source straight into the message buffer, and hashed there, as the
/// connection takes them; a message is otherwise encoded as prost
/// encodes an [`UploadChunk`] (so the server decodes it as one).
#[derive(Clone)]
struct StreamedUpload {
    source: Arc<dyn ObjectSource>,
    made: Arc<std::sync::Mutex<Made>>,
    traffic: Arc<Traffic>,
    total: u64,
    progress: Option<ProgressFn>,
    sent: Option<SentSignal>,
}

/// Where a streamed upload announces its object id (hex) once every byte is
/// made (shared by the attempts of a resumed upload; announced once).
type SentSignal = Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<String>>>>;

impl tonic::codec::Codec for StreamedUpload {
    type Encode = PlannedChunk;
    type Decode = ObjectInfo;
    type Encoder = Self;
    type Decoder = tonic_prost::ProstDecoder<ObjectInfo>;

    fn encoder(&mut self) -> Self {
        self.clone()
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::new(tonic::codec::BufferSettings::default())
    }
}

impl tonic::codec::Encoder for StreamedUpload {
    type Item = PlannedChunk;
    type Error = Status;

    fn encode(
        &mut self,
        item: PlannedChunk,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> std::result::Result<(), Status> {
        use bytes::BufMut;
        use prost::Message;
        use prost::encoding::{WireType, encode_key, encode_varint};
        let head = UploadChunk {
            header: item.header,
            offset: item.offset,
            data: bytes::Bytes::new(),
        };
        head.encode(dst)
            .map_err(|e| Status::internal(format!("encoding an upload chunk: {e}")))?;
        // Field 3, `data`.
        encode_key(3, WireType::LengthDelimited, dst);
        encode_varint(item.len as u64, dst);
        dst.reserve(item.len);
        let spare = dst.chunk_mut();
        assert!(spare.len() >= item.len, "reserved room for the chunk");
        // SAFETY: the `item.len` bytes of spare capacity are zeroed before a
        // slice is made of them, and `advance_mut` only covers those bytes,
        // now written.
        let data = unsafe {
            std::ptr::write_bytes(spare.as_mut_ptr(), 0, item.len);
            std::slice::from_raw_parts_mut(spare.as_mut_ptr(), item.len)
        };
        self.source.write_at(item.offset, data);
        {
            let mut made = self.made.lock().expect("hasher lock");
            made.hasher.update(data);
            made.bytes += item.len as u64;
            if made.bytes == self.total
                && let Some(tx) = self.sent.as_ref().and_then(|s| s.lock().ok()?.take())
            {
                let _ = tx.send(made.hasher.finalize().to_hex().to_string());
            }
        }
        // SAFETY: see above.
        unsafe { dst.advance_mut(item.len) };
        self.traffic
            .sent
            .fetch_add(item.len as u64, Ordering::Relaxed);
        if let Some(p) = &self.progress {
            p(item.offset + item.len as u64, self.total);
        }
        Ok(())
    }
}

/// What an upload sends ([`Client::upload`]).
#[derive(Clone)]
pub enum UploadBody {
    /// Bytes in memory. Their hash, the object id, is computed first (or
    /// given with [`Upload::hashed`]) and announced in the header, so the
    /// server skips an object it already holds; the upload id is derived
    /// from it, so re-running the same upload, even from a new process,
    /// resumes it. Use it for keys and session specs.
    Bytes(Arc<Vec<u8>>),
    /// Bytes made as they are sent: the first are on the wire as soon as
    /// they are made, not once the whole object and its hash are. They are
    /// hashed as they are made and the object id the server answers with is
    /// checked against that hash. No hash is announced, so an object the
    /// server already holds is sent again: use it for fresh data (a new
    /// ciphertext). An interrupted transfer resumes, remaking the bytes.
    Source(Arc<dyn ObjectSource>),
}

impl std::fmt::Debug for UploadBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Self::Source(s) => write!(f, "Source({} bytes)", s.byte_len()),
        }
    }
}

impl From<Arc<Vec<u8>>> for UploadBody {
    fn from(bytes: Arc<Vec<u8>>) -> Self {
        Self::Bytes(bytes)
    }
}

impl From<Vec<u8>> for UploadBody {
    fn from(bytes: Vec<u8>) -> Self {
        Self::Bytes(Arc::new(bytes))
    }
}

impl<T: ObjectSource + 'static> From<Arc<T>> for UploadBody {
    fn from(source: Arc<T>) -> Self {
        Self::Source(source)
    }
}

impl From<Arc<dyn ObjectSource>> for UploadBody {
    fn from(source: Arc<dyn ObjectSource>) -> Self {
        Self::Source(source)
    }
}

/// An upload being set up by [`Client::upload`]: set its options, then
/// `.await` it for the stored object's [`ObjectInfo`].
#[must_use = "an upload sends nothing until it is awaited"]
pub struct Upload<'a> {
    client: &'a Client,
    kind: String,
    body: UploadBody,
    progress: Option<ProgressFn>,
    hash: Option<ObjectId>,
    upload_id: Option<String>,
    announce: Option<tokio::sync::oneshot::Sender<String>>,
    header: Option<UploadHeader>,
    /// One stream from `.0`, stopped after `.1` bytes, not resumed.
    once: Option<(u64, u64)>,
}

impl std::fmt::Debug for Upload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("kind", &self.kind)
            .field("body", &self.body)
            .field("hash", &self.hash)
            .field("upload_id", &self.upload_id)
            .field("header", &self.header)
            .field("once", &self.once)
            .finish_non_exhaustive()
    }
}

impl Upload<'_> {
    /// Calls `progress(bytes sent, total)` as chunks go out.
    pub fn progress(mut self, progress: ProgressFn) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The object id (BLAKE3 hash) of the bytes, which the caller already
    /// computed: spares a pass over them. The server checks it: a wrong id
    /// fails the upload with INVALID_ARGUMENT. For an [`UploadBody::Source`]
    /// it is announced in the header, as for bytes.
    pub fn hashed(mut self, id: ObjectId) -> Self {
        self.hash = Some(id);
        self
    }

    /// An explicit upload id (16..64 of `[0-9A-Za-z_-]`) instead of the one
    /// derived from the content (bytes) or drawn at random (a source).
    pub fn upload_id(mut self, upload_id: impl Into<String>) -> Self {
        self.upload_id = Some(upload_id.into());
        self
    }

    /// Sends the object's id (hex) on `sent` as soon as every byte is handed
    /// to the connection, before the server has stored (and acknowledged)
    /// it: a job submitted then with [`Client::submit_awaiting_inputs`] may
    /// start on it while the server stores it. Sent once, however often the
    /// upload resumes.
    pub fn announce(mut self, sent: tokio::sync::oneshot::Sender<String>) -> Self {
        self.announce = Some(sent);
        self
    }

    /// Sends `header` exactly as given (upload id, kind, length and hash
    /// unchecked, replacing those of the other options): for tests of the
    /// server's checks.
    pub fn header(mut self, header: UploadHeader) -> Self {
        self.header = Some(header);
        self
    }

    /// Sends one stream, from `offset` on, and does not resume it: for tests
    /// and demos of resumption ([`Client::upload_offset`] tells where the
    /// server stands).
    pub fn from_offset(mut self, offset: u64) -> Self {
        self.once = Some((offset, self.once.map_or(u64::MAX, |o| o.1)));
        self
    }

    /// Sends one stream that stops after the first `end` bytes of the object
    /// (a deliberately interrupted upload), and does not resume it.
    pub fn stop_after(mut self, end: u64) -> Self {
        self.once = Some((self.once.map_or(0, |o| o.0), end));
        self
    }

    async fn send(self) -> Result<ObjectInfo> {
        let Self {
            client,
            kind,
            body,
            progress,
            hash,
            upload_id,
            announce,
            header,
            once,
        } = self;
        let sent: Option<SentSignal> = announce.map(|tx| Arc::new(std::sync::Mutex::new(Some(tx))));
        let empty = || Err(ClientError::Invalid("cannot upload an empty object".into()));
        match body {
            UploadBody::Bytes(bytes) => {
                let header = match header {
                    Some(h) => h,
                    None if bytes.is_empty() => return empty(),
                    None => {
                        let id = hash.unwrap_or_else(|| ObjectId::of(&bytes));
                        let upload_id = upload_id.unwrap_or_else(|| {
                            let derived = format!(
                                "{}-{}",
                                &id.to_hex()[..32],
                                kind.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
                            );
                            derived.chars().take(64).collect()
                        });
                        UploadHeader {
                            upload_id,
                            kind,
                            total_bytes: bytes.len() as u64,
                            blake3: id.0.to_vec(),
                        }
                    }
                };
                // What to announce: the id in the header, else the hash.
                let announce = sent.map(|s| {
                    let id = <[u8; 32]>::try_from(header.blake3.as_slice())
                        .map_or_else(|_| ObjectId::of(&bytes), ObjectId);
                    (s, id.to_hex())
                });
                if let Some(range) = once {
                    return client
                        .bytes_from(&header, bytes, range, progress, announce)
                        .await;
                }
                client
                    .resuming(&header.upload_id, |offset| {
                        client.bytes_from(
                            &header,
                            bytes.clone(),
                            (offset, u64::MAX),
                            progress.clone(),
                            announce.clone(),
                        )
                    })
                    .await
            }
            UploadBody::Source(source) => {
                let header = match header {
                    Some(h) => h,
                    None if source.byte_len() == 0 => return empty(),
                    None => UploadHeader {
                        // Content-derived ids need the hash up front: this
                        // one is random.
                        upload_id: upload_id
                            .unwrap_or_else(|| format!("streamed-{}", rand_hex(16))),
                        kind,
                        total_bytes: source.byte_len(),
                        blake3: hash.map(|h| h.0.to_vec()).unwrap_or_default(),
                    },
                };
                if let Some(range) = once {
                    return client
                        .streamed_from(&header, source, range, progress, sent)
                        .await;
                }
                client
                    .resuming(&header.upload_id, |offset| {
                        client.streamed_from(
                            &header,
                            source.clone(),
                            (offset, u64::MAX),
                            progress.clone(),
                            sent.clone(),
                        )
                    })
                    .await
            }
        }
    }
}

impl<'a> std::future::IntoFuture for Upload<'a> {
    type Output = Result<ObjectInfo>;
    type IntoFuture =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<ObjectInfo>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// Largest message the client sends or accepts: a key holder's reply on
/// the session stream may be as large as the server takes (64 MiB of
/// payload; a refresh of an N = 2^17 ciphertext is 59 MB).
const MAX_MESSAGE: usize = (64 << 20) + (64 << 10);

fn rand_hex(n: usize) -> String {
    use rand_core::{OsRng, TryRngCore};
    let mut b = vec![0u8; n];
    OsRng.try_fill_bytes(&mut b).expect("OS randomness");
    hex::encode(b)
}

impl Client {
    /// Connects to `url` with a bearer token; `ca_pem` is the CA certificate
    /// to trust for TLS.
    ///
    /// `url` is `https://host:port`, or `http://host:port` to a loopback host
    /// only: any other `http://` URL is refused with
    /// [`ClientError::CleartextToken`] before a connection is attempted (see
    /// [`check_server_url`]).
    pub async fn connect(url: &str, token: &str, ca_pem: Option<&str>) -> Result<Self> {
        hecloud_protocol::rpc::install_tls_provider();
        let ep = Endpoint::from_shared(url.to_string())?;
        // Checked on the endpoint's own parse of the URL, so that the check
        // and the connection cannot disagree on the scheme or the host.
        check_uri(ep.uri())?;
        let mut ep = ep
            .connect_timeout(Duration::from_secs(10))
            .http2_keep_alive_interval(Duration::from_secs(20))
            .initial_stream_window_size(Some(hecloud_protocol::rpc::STREAM_WINDOW))
            .initial_connection_window_size(Some(hecloud_protocol::rpc::CONNECTION_WINDOW));
        if let Some(ca) = ca_pem {
            // `check_uri` made sure there is a host.
            ep = trusting_ca(ep, ca)?;
        }
        let auth = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| ClientError::Invalid("token must be printable ASCII".into()))?;
        let mut connections = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            let channel = ep.connect().await?;
            connections.push(InterceptedService::new(channel, Auth(auth.clone())));
        }
        Ok(Self {
            connections: connections.into(),
            next_upload: Arc::new(AtomicUsize::new(0)),
            traffic: Arc::new(Traffic::default()),
            chunk: UPLOAD_CHUNK,
            max_download: MAX_DOWNLOAD_BYTES,
        })
    }

    /// Sets the largest object a download accepts (for a server whose
    /// object limit is above [`MAX_DOWNLOAD_BYTES`]).
    pub fn with_max_download_bytes(mut self, bytes: u64) -> Self {
        self.max_download = bytes;
        self
    }

    /// Sets the upload chunk size.
    pub fn with_chunk_size(mut self, bytes: usize) -> Self {
        self.chunk = bytes.max(1);
        self
    }

    /// Bytes moved so far by this client (and its clones).
    pub fn traffic(&self) -> (u64, u64) {
        (
            self.traffic.sent.load(Ordering::Relaxed),
            self.traffic.received.load(Ordering::Relaxed),
        )
    }

    /// The raw gRPC client (for tests of malformed requests).
    pub fn raw(&self) -> Rpc {
        self.rpc()
    }

    fn rpc(&self) -> Rpc {
        self.rpc_on(0)
    }

    /// The generated client on connection `i`.
    fn rpc_on(&self, i: usize) -> Rpc {
        HecloudClient::new(self.connections[i].clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE)
    }

    /// The connection for the next upload (uploads take turns).
    fn upload_turn(&self) -> usize {
        self.next_upload.fetch_add(1, Ordering::Relaxed) % self.connections.len()
    }

    /// Server version, limits and the caller's tenant.
    pub async fn info(&self) -> Result<InfoReply> {
        Ok(self.rpc().info(InfoRequest {}).await?.into_inner())
    }

    /// Uploads an object of `kind`: `.await` the [`Upload`] it returns to
    /// send it, after setting any of its options.
    ///
    /// `body` is bytes in memory (`Arc<Vec<u8>>` or `Vec<u8>`) or an
    /// [`ObjectSource`] that makes its bytes as they are sent (such as an
    /// `Arc<Ciphertext>`); see [`UploadBody`] for what each one does. The
    /// object is sent in chunks, and an interrupted transfer resumes from
    /// the offset the server holds.
    ///
    /// ```no_run
    /// # async fn f(client: &hecloud_client::Client, key: Vec<u8>, ct: hecloud_rlwe::Ciphertext) -> hecloud_client::Result<()> {
    /// use std::sync::Arc;
    /// // Bytes in memory, with a progress bar.
    /// let info = client
    ///     .upload("ckks.relin_key", key)
    ///     .progress(Arc::new(|done, total| eprintln!("{done}/{total}")))
    ///     .await?;
    /// println!("stored as {}", info.object_id);
    /// // A ciphertext serialized as it is sent; its id is announced once
    /// // every byte is on its way, before the server has stored it.
    /// let (tx, rx) = tokio::sync::oneshot::channel();
    /// let upload = client.upload("ckks.ciphertext", Arc::new(ct)).announce(tx).into_future();
    /// let (info, id) = tokio::join!(upload, async { rx.await.ok() });
    /// assert_eq!(Some(info?.object_id), id);
    /// # Ok(()) }
    /// ```
    pub fn upload(&self, kind: &str, body: impl Into<UploadBody>) -> Upload<'_> {
        Upload {
            client: self,
            kind: kind.into(),
            body: body.into(),
            progress: None,
            hash: None,
            upload_id: None,
            announce: None,
            header: None,
            once: None,
        }
    }

    /// Runs `send(offset)` (one upload stream from `offset`) until it
    /// succeeds, resuming from the offset the server holds after a transport
    /// error.
    async fn resuming<F, Fut>(&self, upload_id: &str, mut send: F) -> Result<ObjectInfo>
    where
        F: FnMut(u64) -> Fut,
        Fut: std::future::Future<Output = Result<ObjectInfo>>,
    {
        let mut attempt = 0;
        loop {
            let offset = if attempt == 0 {
                0
            } else {
                self.upload_offset(upload_id).await?
            };
            match send(offset).await {
                Ok(info) => return Ok(info),
                Err(e) if e.retryable() && attempt < 5 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
                Err(e) => {
                    // The server says where it stands: resume from there once.
                    if e.code() == Some(Code::InvalidArgument)
                        && attempt == 0
                        && matches!(&e, ClientError::Status { message, .. } if message.contains("resume from"))
                    {
                        attempt += 1;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Bytes of a pending upload the server holds.
    pub async fn upload_offset(&self, upload_id: &str) -> Result<u64> {
        Ok(self
            .rpc()
            .upload_offset(UploadOffsetRequest {
                upload_id: upload_id.into(),
            })
            .await?
            .into_inner()
            .received)
    }

    /// Sends one upload stream of `bytes[offset..end]` (the first message
    /// holds the header); announces `announce.1` on `announce.0` once the
    /// last byte of the object is handed to the stream.
    async fn bytes_from(
        &self,
        header: &UploadHeader,
        bytes: Arc<Vec<u8>>,
        (offset, end): (u64, u64),
        progress: Option<ProgressFn>,
        announce: Option<(SentSignal, String)>,
    ) -> Result<ObjectInfo> {
        let total = bytes.len() as u64;
        let end = end.min(total);
        let chunk = self.chunk as u64;
        let traffic = self.traffic.clone();
        let (tx, rx) = mpsc::channel::<UploadChunk>(4);
        let header = header.clone();
        let prog = progress.clone();
        // Chunks are slices of the caller's buffer, not copies.
        let bytes = bytes::Bytes::from_owner(SharedBuf(bytes));
        let producer = tokio::spawn(async move {
            let mut off = offset.min(end);
            let mut first = true;
            loop {
                let n = chunk.min(end - off);
                let msg = UploadChunk {
                    header: first.then(|| header.clone()),
                    offset: off,
                    data: bytes.slice(off as usize..(off + n) as usize),
                };
                first = false;
                traffic.sent.fetch_add(n, Ordering::Relaxed);
                if tx.send(msg).await.is_err() {
                    return;
                }
                off += n;
                if let Some(p) = &prog {
                    p(off, total);
                }
                if off >= total
                    && let Some((signal, id)) = &announce
                    && let Some(tx) = signal.lock().ok().and_then(|mut s| s.take())
                {
                    let _ = tx.send(id.clone());
                }
                if off >= end {
                    return;
                }
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let r = self.rpc_on(self.upload_turn()).upload(stream).await;
        producer.abort();
        Ok(r?.into_inner())
    }

    /// One upload stream of the bytes of `source` from `offset` to `end`,
    /// made as the connection takes them (those before `offset` are made
    /// too, to be hashed).
    async fn streamed_from(
        &self,
        header: &UploadHeader,
        source: Arc<dyn ObjectSource>,
        (offset, end): (u64, u64),
        progress: Option<ProgressFn>,
        sent: Option<SentSignal>,
    ) -> Result<ObjectInfo> {
        let total = header.total_bytes;
        let offset = offset.min(total);
        let end = end.min(total);
        // Every byte is hashed, those the server holds (before `offset`)
        // first.
        let mut hasher = blake3::Hasher::new();
        if offset > 0 {
            let (src, chunk) = (source.clone(), self.chunk);
            hasher = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0; chunk.min(offset as usize)];
                let mut at = 0;
                while at < offset {
                    let n = buf.len().min((offset - at) as usize);
                    src.write_at(at, &mut buf[..n]);
                    hasher.update(&buf[..n]);
                    at += n as u64;
                }
                hasher
            })
            .await
            .map_err(|e| ClientError::Invalid(format!("serializer panicked: {e}")))?;
        }
        let made = Arc::new(std::sync::Mutex::new(Made {
            hasher,
            bytes: offset,
        }));
        let chunk = self.chunk as u64;
        let mut plans = vec![];
        let mut at = offset;
        while at < end || plans.is_empty() {
            let len = chunk.min(end.saturating_sub(at));
            plans.push(PlannedChunk {
                header: plans.is_empty().then(|| header.clone()),
                offset: at,
                len: len as usize,
            });
            at += len;
        }
        // A source still being made: each chunk goes once its bytes exist
        // (`abandoned` if they never will).
        let abandoned = Arc::new(AtomicU64::new(u64::MAX));
        let (plans, waiter): (PlanStream, _) = match source.made() {
            None => (Box::pin(tokio_stream::iter(plans)), None),
            Some(mut made) => {
                let (tx, rx) = mpsc::channel(2);
                let abandoned = abandoned.clone();
                let waiter = tokio::spawn(async move {
                    for plan in plans {
                        let need = plan.offset + plan.len as u64;
                        if made.wait_for(|&n| n >= need).await.is_err() {
                            abandoned.store(*made.borrow(), Ordering::Relaxed);
                            return;
                        }
                        if tx.send(plan).await.is_err() {
                            return;
                        }
                    }
                });
                (
                    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)),
                    Some(waiter),
                )
            }
        };
        let codec = StreamedUpload {
            source,
            made: made.clone(),
            traffic: self.traffic.clone(),
            total,
            progress,
            sent,
        };
        let mut grpc = tonic::client::Grpc::new(self.connections[self.upload_turn()].clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        grpc.ready().await.map_err(|e| ClientError::Status {
            code: Code::Unavailable,
            message: format!("connection not ready: {e}"),
        })?;
        let info = grpc
            .client_streaming(
                Request::new(plans),
                tonic::codegen::http::uri::PathAndQuery::from_static("/hecloud.v1.Hecloud/Upload"),
                codec,
            )
            .await;
        if let Some(w) = waiter {
            w.abort();
        }
        let abandoned = abandoned.load(Ordering::Relaxed);
        if abandoned != u64::MAX {
            return Err(ClientError::Invalid(format!(
                "the object was abandoned after {abandoned} of its {total} bytes were made"
            )));
        }
        let info = info?.into_inner();
        let made = made.lock().expect("hasher lock");
        if made.bytes != total {
            return Err(ClientError::Invalid(format!(
                "the upload stream ended after {} of {total} bytes",
                made.bytes
            )));
        }
        let hash = made.hasher.finalize();
        if info.object_id != hash.to_hex().as_str() {
            return Err(ClientError::Integrity(format!(
                "the server stored object {} but the bytes sent hash to {}",
                info.object_id,
                hash.to_hex()
            )));
        }
        Ok(info)
    }

    /// The bytes of a job output: those its job's final event carried
    /// (small outputs come that way, see [`Self::wait`]), checked against
    /// its id, or else downloaded.
    pub async fn job_output(
        &self,
        output: &JobOutput,
        progress: Option<ProgressFn>,
    ) -> Result<Vec<u8>> {
        if output.data.is_empty() {
            return self.download(&output.object_id, progress).await;
        }
        if blake3::hash(&output.data).to_hex().as_str() != output.object_id {
            return Err(ClientError::Integrity(format!(
                "output {}: the bytes sent with the job do not match its hash",
                output.object_id
            )));
        }
        self.traffic
            .received
            .fetch_add(output.data.len() as u64, Ordering::Relaxed);
        Ok(output.data.clone())
    }

    /// Downloads an object and checks it against its id (content hash); an
    /// interrupted stream resumes from the bytes already received.
    pub async fn download(&self, object_id: &str, progress: Option<ProgressFn>) -> Result<Vec<u8>> {
        let mut out: Vec<u8> = Vec::new();
        let mut attempt = 0;
        loop {
            match self
                .download_from(object_id, &mut out, progress.clone())
                .await
            {
                Ok(()) => break,
                Err(e) if e.retryable() && attempt < 5 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
        if blake3::hash(&out).to_hex().as_str() != object_id {
            return Err(ClientError::Integrity(format!(
                "object {object_id}: the bytes received do not match its hash"
            )));
        }
        Ok(out)
    }

    async fn download_from(
        &self,
        object_id: &str,
        out: &mut Vec<u8>,
        progress: Option<ProgressFn>,
    ) -> Result<()> {
        let mut s = self
            .rpc()
            .download(DownloadRequest {
                object_id: object_id.into(),
                offset: out.len() as u64,
            })
            .await?
            .into_inner();
        let mut total = None;
        while let Some(c) = s.message().await? {
            check_chunk(&c, out.len() as u64, total, self.max_download)?;
            if total.is_none() {
                // Reserved only up to a limit: memory grows with the bytes
                // that actually arrive.
                let rest = c.total_bytes.saturating_sub(out.len() as u64);
                out.reserve(rest.min(64 << 20) as usize);
            }
            total = Some(c.total_bytes);
            self.traffic
                .received
                .fetch_add(c.data.len() as u64, Ordering::Relaxed);
            out.extend_from_slice(&c.data);
            if let Some(p) = &progress {
                p(out.len() as u64, c.total_bytes);
            }
        }
        match total {
            Some(t) if out.len() as u64 == t => Ok(()),
            None if !out.is_empty() => Ok(()),
            _ => Err(ClientError::Status {
                code: Code::Unavailable,
                message: "download stream ended early".into(),
            }),
        }
    }

    /// Objects of this tenant.
    pub async fn list(&self) -> Result<Vec<ObjectInfo>> {
        Ok(self
            .rpc()
            .list_objects(ListObjectsRequest {})
            .await?
            .into_inner()
            .objects)
    }

    /// Deletes an object.
    pub async fn delete(&self, object_id: &str) -> Result<ObjectInfo> {
        Ok(self
            .rpc()
            .delete_object(ObjectRef {
                object_id: object_id.into(),
            })
            .await?
            .into_inner())
    }

    /// Submits a job.
    pub async fn submit(&self, kind: &str, spec: Vec<u8>, client_ref: &str) -> Result<JobInfo> {
        self.submit_awaiting_inputs(kind, spec, client_ref, Duration::ZERO)
            .await
    }

    /// Submits a job some of whose inputs are still being uploaded by this
    /// client (every byte sent, see [`Upload::announce`]):
    /// the server waits up to `wait` (at most 30 s) for each input it does
    /// not hold yet, starts the job once they have arrived, and lets it
    /// succeed only once they are stored.
    pub async fn submit_awaiting_inputs(
        &self,
        kind: &str,
        spec: Vec<u8>,
        client_ref: &str,
        wait: Duration,
    ) -> Result<JobInfo> {
        self.traffic
            .sent
            .fetch_add(spec.len() as u64, Ordering::Relaxed);
        Ok(self
            .rpc()
            .submit(SubmitRequest {
                kind: kind.into(),
                spec,
                inputs: Default::default(),
                client_ref: client_ref.into(),
                await_inputs_ms: wait.as_millis().min(u128::from(u32::MAX)) as u32,
            })
            .await?
            .into_inner())
    }

    /// A job's status.
    pub async fn job(&self, job_id: &str) -> Result<JobInfo> {
        Ok(self
            .rpc()
            .get_job(JobRef {
                job_id: job_id.into(),
            })
            .await?
            .into_inner())
    }

    /// Cancels a job.
    pub async fn cancel(&self, job_id: &str) -> Result<JobInfo> {
        Ok(self
            .rpc()
            .cancel_job(JobRef {
                job_id: job_id.into(),
            })
            .await?
            .into_inner())
    }

    /// Follows a job's progress events until it ends; returns the final
    /// state. `on_event` sees every event. The outputs of a succeeded job
    /// that are small (2 MiB together) come with their bytes (sent while
    /// the server stores them, before the job ends): read them with
    /// [`Self::job_output`].
    pub async fn wait(
        &self,
        job_id: &str,
        on_event: &(dyn Fn(&JobInfo) + Sync),
    ) -> Result<JobInfo> {
        let mut attempt = 0;
        loop {
            let r: Result<Option<JobInfo>> = async {
                let mut s = self
                    .rpc()
                    .watch_job(JobRef {
                        job_id: job_id.into(),
                    })
                    .await?
                    .into_inner();
                let mut last = None;
                // Output bytes sent before the end, by object id.
                let mut early = HashMap::new();
                while let Some(mut ev) = s.message().await? {
                    on_event(&ev);
                    let ended = is_final(&ev);
                    for o in &mut ev.outputs {
                        if !ended && !o.data.is_empty() {
                            early.insert(o.object_id.clone(), std::mem::take(&mut o.data));
                        } else if ended
                            && o.data.is_empty()
                            && let Some(d) = early.remove(&o.object_id)
                        {
                            o.data = d;
                        }
                    }
                    last = Some(ev);
                }
                Ok(last)
            }
            .await;
            match r {
                Ok(Some(j)) if is_final(&j) => return Ok(j),
                Ok(_) => {}
                Err(e) if e.retryable() && attempt < 5 => attempt += 1,
                Err(e) => return Err(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Opens a key-holder session answering the callback kinds in
    /// `capabilities` with `handler`; runs until the returned handle is
    /// dropped or the server closes the stream. Returns once the server has
    /// welcomed the session.
    pub async fn open_session(
        &self,
        capabilities: &[&str],
        handler: CallbackHandler,
    ) -> Result<SessionHandle> {
        let (tx, rx) = mpsc::channel::<SessionClientMsg>(16);
        tx.send(SessionClientMsg {
            msg: Some(session_client_msg::Msg::Hello(SessionHello {
                capabilities: capabilities.iter().map(|s| s.to_string()).collect(),
            })),
        })
        .await
        .map_err(|_| ClientError::Invalid("session channel closed".into()))?;
        let mut inbound = self
            .rpc()
            .session(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        let session_id = match inbound.message().await? {
            Some(m) => match m.msg {
                Some(session_server_msg::Msg::Welcome(w)) => w.session_id,
                _ => {
                    return Err(ClientError::Integrity(
                        "session did not start with a welcome".into(),
                    ));
                }
            },
            None => return Err(ClientError::Integrity("session closed at once".into())),
        };
        let task = tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                if let Some(session_server_msg::Msg::Request(r)) = m.msg {
                    let h = handler.clone();
                    let (kind, payload) = (r.kind, r.payload);
                    let reply = tokio::task::spawn_blocking(move || h(&kind, &payload))
                        .await
                        .unwrap_or_else(|_| Err("handler panicked".into()));
                    let msg = match reply {
                        Ok(payload) => CallbackReply {
                            request_id: r.request_id,
                            payload,
                            error: String::new(),
                        },
                        Err(error) => CallbackReply {
                            request_id: r.request_id,
                            payload: vec![],
                            error,
                        },
                    };
                    if tx
                        .send(SessionClientMsg {
                            msg: Some(session_client_msg::Msg::Reply(msg)),
                        })
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        });
        Ok(SessionHandle { session_id, task })
    }
}

impl Client {
    /// Opens a key-holder session that answers the server's refresh
    /// requests ([`hecloud_protocol::refresh`]) with `responder` while the
    /// returned handle lives: keep it open from before a job with refresh
    /// nodes is submitted until it ends. A request the responder refuses
    /// (replayed, foreign parameters, a job it does not serve) fails that
    /// job with the reason.
    pub async fn serve_refreshes(
        &self,
        responder: Arc<hecloud_protocol::refresh::RefreshResponder>,
    ) -> Result<SessionHandle> {
        self.open_session(
            &[hecloud_protocol::refresh::CALLBACK_REFRESH],
            Arc::new(move |kind: &str, payload: &[u8]| {
                if kind != hecloud_protocol::refresh::CALLBACK_REFRESH {
                    return Err(format!(
                        "this key holder answers refresh requests, not `{kind}`"
                    ));
                }
                responder.answer(payload).map_err(|e| e.to_string())
            }),
        )
        .await
    }
}

/// Answers the server's callbacks: (kind, payload) → reply or refusal.
pub type CallbackHandler =
    Arc<dyn Fn(&str, &[u8]) -> std::result::Result<Vec<u8>, String> + Send + Sync>;

/// `ep` over TLS trusting only the CA `ca_pem`, the certificate checked
/// against [`tls_domain`] of the URL.
pub fn trusting_ca(
    ep: Endpoint,
    ca_pem: &str,
) -> std::result::Result<Endpoint, tonic::transport::Error> {
    let domain = tls_domain(ep.uri());
    ep.tls_config(
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca_pem))
            .domain_name(domain),
    )
}

/// The name a server's certificate is checked against for the URL `uri`:
/// its host name; an IP literal is checked against `localhost`, the name
/// hecloud's generated certificates carry (`Uri::host` keeps an IPv6
/// literal's brackets: they are trimmed first).
pub fn tls_domain(uri: &tonic::codegen::http::Uri) -> String {
    let host = uri
        .host()
        .unwrap_or("localhost")
        .trim_start_matches('[')
        .trim_end_matches(']');
    if host.parse::<std::net::IpAddr>().is_ok() {
        "localhost".to_string()
    } else {
        host.to_string()
    }
}

/// Whether a job will not change again.
pub fn is_final(j: &JobInfo) -> bool {
    matches!(
        JobState::try_from(j.state),
        Ok(JobState::Succeeded | JobState::Failed | JobState::Cancelled)
    )
}

/// An open key-holder session; dropping it closes the session.
#[derive(Debug)]
pub struct SessionHandle {
    /// The server's id for the session.
    pub session_id: String,
    task: tokio::task::JoinHandle<()>,
}

impl SessionHandle {
    /// Whether the session has ended: the server closed it or went away
    /// (a restart). Its handler answers nothing more; open another.
    pub fn is_closed(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Checks that `url` is one [`Client::connect`] will send the bearer token
/// to, without connecting (or looking the host up).
///
/// Accepted: `https://` to any host (the token travels inside TLS), and
/// `http://` to a loopback host (`127.0.0.0/8`, `[::1]`, `localhost`), where
/// the token never leaves the machine. Refused: `http://` to any other host
/// ([`ClientError::CleartextToken`]); and, as [`ClientError::Invalid`], a URL
/// that does not parse, has no scheme or host, has a scheme other than
/// `http`/`https` (the transport would speak cleartext to it), or carries
/// user info (`user:password@host`).
pub fn check_server_url(url: &str) -> Result<()> {
    let uri: tonic::codegen::http::Uri = url
        .parse()
        .map_err(|e| ClientError::Invalid(format!("server URL {url:?} does not parse: {e}")))?;
    check_uri(&uri)
}

/// [`check_server_url`] on a parsed URL.
fn check_uri(uri: &tonic::codegen::http::Uri) -> Result<()> {
    let Some(authority) = uri.authority() else {
        return Err(ClientError::Invalid(format!(
            "server URL {uri} has no host: use https://host:port"
        )));
    };
    // The user info would otherwise be dropped silently or, worse, taken for
    // a credential; the token is passed separately.
    if authority.as_str().contains('@') {
        return Err(ClientError::Invalid(
            "the server URL must not carry user info (user:password@); \
             the bearer token is passed separately"
                .into(),
        ));
    }
    let host = authority.host();
    // The transport wraps the connection in TLS exactly when the parsed
    // scheme reads "https" (the parser lower-cases `HTTPS://`): anything else
    // is cleartext.
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback_host(host) => Ok(()),
        Some("http") => Err(ClientError::CleartextToken {
            host: host.to_string(),
        }),
        Some(other) => Err(ClientError::Invalid(format!(
            "unsupported scheme {other}:// in the server URL: use https:// \
             (or http:// to a loopback host)"
        ))),
        None => Err(ClientError::Invalid(format!(
            "server URL {uri} has no scheme: use https://{authority}"
        ))),
    }
}

/// Whether `host` (as [`tonic::codegen::http::uri::Authority::host`] gives
/// it: IPv6 literals in brackets) names this machine: `localhost`, an
/// address in `127.0.0.0/8`, `::1`, or `::ffff:127.x.y.z`. Only literal
/// forms count: `127.1` or a decimal address is refused rather than
/// second-guessing the resolver.
fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok_and(|a| {
            a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }),
        None => host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback()),
    }
}

/// A download chunk checked against what came before it: at the offset
/// reached, within the size the first chunk announced and every later one
/// repeats, that size at most `max` (the server is not trusted).
fn check_chunk(c: &DataChunk, received: u64, total: Option<u64>, max: u64) -> Result<()> {
    if c.offset != received {
        return Err(ClientError::Integrity(format!(
            "chunk at offset {} where {received} was expected",
            c.offset
        )));
    }
    if c.total_bytes > max {
        return Err(ClientError::Integrity(format!(
            "{} bytes announced, over the {max} this client accepts",
            c.total_bytes
        )));
    }
    if total.is_some_and(|t| t != c.total_bytes)
        || c.offset.saturating_add(c.data.len() as u64) > c.total_bytes
    {
        return Err(ClientError::Integrity(
            "chunk past the announced size".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's chunks are checked before anything is reserved: an
    /// announced size over the client's limit (2^40 aborted the process
    /// on `reserve`), a size that changes, data past it, a wrong offset.
    #[test]
    fn download_chunks_from_an_untrusted_server_are_bounded() {
        let chunk = |offset: u64, len: usize, total: u64| DataChunk {
            offset,
            data: vec![7; len].into(),
            total_bytes: total,
        };
        let max = 1 << 20;
        assert!(check_chunk(&chunk(0, 16, 32), 0, None, max).is_ok());
        assert!(check_chunk(&chunk(16, 16, 32), 16, Some(32), max).is_ok());
        assert!(check_chunk(&chunk(0, 16, max), 0, None, max).is_ok());
        for (c, received, total) in [
            (chunk(0, 16, 1 << 40), 0, None),
            (chunk(0, 16, max + 1), 0, None),
            (chunk(16, 16, 64), 16, Some(32)),
            (chunk(16, 32, 32), 16, Some(32)),
            (chunk(u64::MAX, 1, u64::MAX), u64::MAX, None),
            (chunk(8, 8, 32), 16, Some(32)),
        ] {
            assert!(
                matches!(
                    check_chunk(&c, received, total, max),
                    Err(ClientError::Integrity(_))
                ),
                "{c:?}"
            );
        }
    }

    fn refused_cleartext(url: &str) -> String {
        match check_server_url(url) {
            Err(ClientError::CleartextToken { host }) => host,
            other => panic!("{url}: expected a cleartext refusal, got {other:?}"),
        }
    }

    #[test]
    fn http_to_a_remote_host_is_refused() {
        assert_eq!(refused_cleartext("http://10.0.0.1:7443"), "10.0.0.1");
        assert_eq!(refused_cleartext("http://example.com"), "example.com");
        assert_eq!(refused_cleartext("http://example.com:80/x"), "example.com");
        assert_eq!(
            refused_cleartext("http://[2001:db8::1]:7443"),
            "[2001:db8::1]"
        );
        // The scheme is case-insensitive, and a port does not hide the host.
        assert_eq!(refused_cleartext("HTTP://10.0.0.1:7443"), "10.0.0.1");
        // Look-alikes of loopback are not loopback.
        for url in [
            "http://localhost.example.com:7443",
            "http://127.0.0.1.example.com",
            "http://0.0.0.0:7443",
            "http://[::]:7443",
            "http://128.0.0.1",
            "http://127.1:7443",
        ] {
            refused_cleartext(url);
        }
        let msg = check_server_url("http://10.0.0.1:7443")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("cleartext") && msg.contains("https://"),
            "{msg}"
        );
    }

    #[test]
    fn http_to_loopback_is_accepted() {
        for url in [
            "http://127.0.0.1:7443",
            "http://127.255.0.9",
            "http://localhost:7443",
            "http://LocalHost",
            "http://[::1]:7443",
            "http://[::1]",
            "http://[::ffff:127.0.0.1]:7443",
            "HTTP://127.0.0.1:1",
        ] {
            check_server_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn https_is_accepted_anywhere() {
        for url in [
            "https://10.0.0.1:7443",
            "https://example.com",
            "https://[2001:db8::1]:7443",
            "HTTPS://example.com:443",
            "https://localhost:7443",
        ] {
            check_server_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn odd_urls_are_refused() {
        for url in [
            // User info: refused even over https, and must not smuggle a
            // remote host past the loopback check.
            "http://localhost@10.0.0.1:7443",
            "http://user:pw@127.0.0.1:7443",
            "https://user@example.com",
            // Schemes the transport would speak cleartext to.
            "grpc://10.0.0.1:7443",
            "httpx://127.0.0.1:7443",
            // No scheme, no host, no URL.
            "10.0.0.1:7443",
            "/just/a/path",
            "",
            "http://",
        ] {
            assert!(
                matches!(
                    check_server_url(url),
                    Err(ClientError::Invalid(_) | ClientError::CleartextToken { .. })
                ),
                "{url} was accepted"
            );
        }
    }

    /// `connect` refuses before touching the network: a connection attempt
    /// to these hosts would fail with a transport error (or hang until the
    /// connect timeout), not with `CleartextToken`.
    #[tokio::test]
    async fn connect_refuses_cleartext_before_connecting() {
        for url in [
            "http://10.0.0.1:7443",
            "http://example.com:7443",
            "http://[2001:db8::1]:7443",
        ] {
            let r = tokio::time::timeout(
                Duration::from_secs(2),
                Client::connect(url, "secret-token", None),
            )
            .await
            .unwrap_or_else(|_| panic!("{url}: connect tried the network"));
            assert!(
                matches!(r, Err(ClientError::CleartextToken { .. })),
                "{url}: {r:?}"
            );
        }
    }

    /// Loopback `http://` gets past the check to the transport: with
    /// nothing listening, the error is the transport's.
    #[tokio::test]
    async fn connect_allows_http_to_loopback() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let r = Client::connect(&format!("http://127.0.0.1:{port}"), "t", None).await;
        assert!(matches!(r, Err(ClientError::Transport(_))), "{r:?}");
    }
}
