//! An embedded server on loopback with a temporary store, for `hecloud demo`,
//! `hecloud bench service` and tests.

use hecloud_client::Client;
use hecloud_server::{Quota, RunningServer, ServerConfig, TenantConfig};

/// A running in-process server, its store and a token.
#[derive(Debug)]
pub struct Embedded {
    /// The server.
    pub server: RunningServer,
    /// The tenant's bearer token.
    pub token: String,
    /// Keeps the temporary store alive.
    _dir: tempfile::TempDir,
}

impl Embedded {
    /// Starts a TLS server on 127.0.0.1 (a free port) with one tenant `demo`
    /// and `workers` job workers.
    pub async fn start(workers: usize, max_jobs: u32) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let token = random_token();
        let config = ServerConfig {
            listen: "127.0.0.1:0".parse()?,
            data_dir: dir.path().to_path_buf(),
            workers,
            tls: true,
            quota: Quota {
                max_object_bytes: 1 << 30,
                max_objects: 100_000,
                max_concurrent_jobs: max_jobs,
                ..Quota::default()
            },
            tenants: vec![TenantConfig {
                name: "demo".into(),
                token: Some(token.clone()),
                token_blake3: None,
            }],
            ..ServerConfig::default()
        };
        let server = hecloud_server::start(config).await?;
        Ok(Self {
            server,
            token,
            _dir: dir,
        })
    }

    /// A new client connection.
    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::connect(
            &format!("https://localhost:{}", self.server.addr.port()),
            &self.token,
            self.server.ca_pem.as_deref(),
        )
        .await?)
    }
}

/// A fresh random bearer token (32 hex characters).
pub fn random_token() -> String {
    hecloud_server::store::rand_bytes::<16>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
