//! # hecloud-server
//!
//! The untrusted compute node: it stores public and evaluation keys and
//! ciphertexts per tenant and runs computation graphs on them. It never sees
//! a secret key or a plaintext.
//!
//! * [`config`]: TOML file + environment (+ flags in the CLI);
//! * [`store`]: SQLite (WAL) metadata + fsynced content-addressed blobs;
//! * [`arrivals`]: objects whose bytes are in while they are being stored;
//! * [`jobs`]: bounded worker pool, quotas, progress, cancellation, recovery;
//! * [`exec`]: the executors (computation graphs, key-holder echo);
//! * [`hub`]: key-holder sessions for server → client callbacks;
//! * [`service`]: the gRPC API (tonic) with bearer-token tenants;
//! * [`tls`]: a local CA and server certificate for the embedded setup.
#![deny(missing_docs)]

pub mod alloc;
pub mod arrivals;
pub mod config;
pub mod error;
pub mod exec;
pub mod hub;
pub mod jobs;
pub mod part;
pub mod service;
pub mod store;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hecloud_protocol::rpc::hecloud_server::HecloudServer;
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};

pub use config::{Quota, ServerConfig, TenantConfig};
pub use error::{Result, ServerError};

/// The longest [`RunningServer::stop`] waits for cancelled jobs to let the
/// store go.
pub const STOP_RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Largest HTTP/2 frame the server accepts (fewer frames per chunk).
const MAX_FRAME: u32 = 1 << 20;

/// A running server.
#[derive(Debug)]
pub struct RunningServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The CA certificate clients must trust, when the server generated its
    /// own (with certificates from the configuration, clients trust their CA).
    pub ca_pem: Option<String>,
    tls: bool,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::result::Result<(), tonic::transport::Error>>,
    jobs: Arc<jobs::Jobs>,
    /// Submissions waiting for their inputs, per tenant.
    waiting: service::WaitingCount,
    /// Drops pending uploads idle past the expiry.
    sweeper: tokio::task::JoinHandle<()>,
    /// Key-holder sessions, closed when the server stops.
    hub: Arc<hub::SessionHub>,
    /// The store's folder, whose lock says when every holder of the store
    /// has let it go once stopped.
    data_dir: std::path::PathBuf,
}

impl RunningServer {
    /// The URL clients connect to.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Job inputs found already decoded, because they were decoded as their
    /// upload completed (while the store made them durable).
    pub fn inputs_decoded_on_upload(&self) -> u64 {
        self.jobs.inputs_decoded_on_upload()
    }

    /// Submissions of `tenant` waiting for their inputs now (each holds
    /// one of the places bounded by its `max_concurrent_jobs`): a test
    /// acts once a submission waits, instead of guessing how long it takes.
    pub fn waiting_submissions(&self, tenant: &str) -> u32 {
        self.waiting
            .lock()
            .unwrap()
            .get(tenant)
            .copied()
            .unwrap_or(0)
    }

    /// Stops accepting requests, lets in-flight calls finish for up to two
    /// seconds (open session streams never finish by themselves), then
    /// closes every connection, and returns once the data dir is free for
    /// another server (the tasks and job threads that held the store have
    /// let it go; at most [`STOP_RELEASE_WAIT`] after cancelling them).
    pub async fn stop(mut self) -> Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.jobs.shutdown();
        self.hub.close_all();
        self.sweeper.abort();
        let served = match tokio::time::timeout(Duration::from_secs(2), &mut self.task).await {
            Ok(r) => r
                .map_err(|e| ServerError::Internal(e.to_string()))
                .and_then(|r| r.map_err(ServerError::from)),
            Err(_) => {
                self.task.abort();
                // Awaited so that the serving future (and what it holds) is
                // dropped before this returns.
                let _ = (&mut self.task).await;
                Ok(())
            }
        };
        let _ = (&mut self.sweeper).await;
        let data_dir = std::mem::take(&mut self.data_dir);
        drop(self);
        let deadline = std::time::Instant::now() + STOP_RELEASE_WAIT;
        let held = || store::folder_is_locked(&data_dir);
        while held() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if held() {
            tracing::warn!("a job still holds the data dir after the server stopped");
        }
        served
    }

    /// Waits until the server ends (it runs until [`Self::stop`] or an error).
    pub async fn wait(self) -> Result<()> {
        let ended = self.task.await;
        self.sweeper.abort();
        ended.map_err(|e| ServerError::Internal(e.to_string()))??;
        Ok(())
    }
}

/// Opens the store, recovers interrupted jobs and starts serving. Must be
/// called inside a multi-threaded tokio runtime. With
/// `retain_freed_memory` on, call [`alloc::retain_freed_memory`] before
/// building the runtime as well (as `hecloud serve` does): its arena
/// limit only holds for threads that have not allocated yet.
pub async fn start(config: ServerConfig) -> Result<RunningServer> {
    config.validate()?;
    hecloud_protocol::rpc::install_tls_provider();
    if config.retain_freed_memory && !alloc::retain_freed_memory() {
        tracing::debug!("the C allocator does not take retain_freed_memory (not glibc)");
    }
    // Locks the data dir: a second server on it is refused here.
    let store = Arc::new(store::Store::open(&config.data_dir)?);
    let data_dir = store.root().to_path_buf();
    // Bound before any job is resumed: a server that cannot listen must
    // not use up an attempt of each interrupted job.
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;

    let mut builder = Server::builder();
    let mut ca_pem = None;
    if config.tls {
        let (cert, key, ca) = match (&config.tls_cert, &config.tls_key) {
            (Some(c), Some(k)) => (
                std::fs::read_to_string(c)?,
                std::fs::read_to_string(k)?,
                None,
            ),
            _ => {
                let m = tls::load_or_generate(&config.data_dir.join("tls"))?;
                (m.cert_pem, m.key_pem, Some(m.ca_pem))
            }
        };
        builder =
            builder.tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))?;
        ca_pem = ca;
    }
    // Interrupted jobs resume only once the server can serve.
    let hub = Arc::new(hub::SessionHub::default());
    let hub_ref = hub.clone();
    let jobs = jobs::Jobs::start(
        store.clone(),
        exec::builtin(&config),
        hub.clone(),
        config.workers,
        config.quota,
        config.max_job_attempts,
        tokio::runtime::Handle::current(),
    )?;
    let upload_store = store.clone();
    let svc = service::Service::new(&config, store, jobs.clone(), hub);
    let waiting = svc.waiting.clone();
    // Upload chunks bound most messages; a key holder's callback reply
    // (a refresh of an N = 2^17 ciphertext is 59 MB) may be as large as
    // the session stream carries.
    let limit = (config.max_chunk_bytes as usize * 2).max(hub::MAX_CALLBACK_BYTES) + (64 << 10);
    let authenticator = svc.authenticator();
    let grpc = HecloudServer::new(svc)
        .max_decoding_message_size(limit)
        .max_encoding_message_size(
            limit.max(service::DOWNLOAD_CHUNK.max(service::INLINE_OUTPUT_BYTES) + (64 << 10)),
        );
    let grpc = tonic::service::interceptor::InterceptedService::new(grpc, authenticator);
    let (tx, rx) = oneshot::channel::<()>();
    // Uploads are paced by the receive windows (see `rpc::STREAM_WINDOW`).
    let router = builder
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(20)))
        .initial_stream_window_size(Some(hecloud_protocol::rpc::STREAM_WINDOW))
        .initial_connection_window_size(Some(hecloud_protocol::rpc::CONNECTION_WINDOW))
        .max_frame_size(Some(MAX_FRAME))
        .add_service(grpc);
    // `serve_with_incoming` ignores the builder's `tcp_nodelay`: without it
    // on the accepted sockets, Nagle's algorithm held each small reply
    // (upload acknowledgements, job events) until the peer's delayed ACK,
    // about 40 ms on Linux.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let task = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
        let _ = rx.await;
    }));
    let sweeper = tokio::spawn(expire_uploads(
        upload_store,
        Duration::from_secs(u64::from(config.upload_expiry_hours) * 3600),
    ));
    tracing::info!(%addr, tls = config.tls, workers = config.workers, tenants = config.tenants.len(),
        data_dir = %config.data_dir.display(), "hecloud server listening");
    Ok(RunningServer {
        addr,
        ca_pem,
        tls: config.tls,
        shutdown: Some(tx),
        task,
        jobs,
        waiting,
        sweeper,
        data_dir,
        hub: hub_ref,
    })
}

/// Drops the pending uploads idle past `expiry`, at start and then every
/// hour.
async fn expire_uploads(store: Arc<store::Store>, expiry: Duration) {
    let mut every = tokio::time::interval(expiry.min(Duration::from_secs(3600)));
    loop {
        every.tick().await;
        let s = store.clone();
        match tokio::task::spawn_blocking(move || s.expire_uploads(expiry)).await {
            Ok(Ok(0)) | Err(_) => {}
            Ok(Ok(n)) => {
                tracing::info!(uploads = n, "dropped pending uploads idle past the expiry")
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "could not expire pending uploads"),
        }
    }
}
