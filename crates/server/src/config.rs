//! Server configuration: a TOML file, then `HECLOUD_*` environment
//! variables, then command-line flags (applied by the caller), each
//! overriding the one before.
//!
//! ```toml
//! listen = "127.0.0.1:7443"
//! data_dir = "/var/lib/hecloud"
//! workers = 2
//! tls = true            # certificates under <data_dir>/tls, generated on first start
//!
//! [quota]
//! max_object_bytes = 1073741824
//! max_objects = 10000
//! max_stored_bytes = 68719476736
//! max_concurrent_jobs = 4
//! max_job_seconds = 3600
//! max_inflight_seconds = 14400
//! check_seconds_per_minute = 30
//!
//! [[tenants]]
//! name = "alice"
//! token_blake3 = "…64 hex…"   # or `token = "…"` (plain, for tests)
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::{Result, ServerError};

/// Per-tenant limits. Objects and bytes are checked in the transaction
/// that reserves or records them (uploads and job outputs alike); a
/// refusal is RESOURCE_EXHAUSTED with the figures.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quota {
    /// Largest object in bytes.
    pub max_object_bytes: u64,
    /// Most objects (stored, job outputs, plus pending uploads).
    pub max_objects: u64,
    /// Most bytes stored (objects, job outputs, plus the announced length
    /// of pending uploads).
    pub max_stored_bytes: u64,
    /// Most jobs queued or running at once.
    pub max_concurrent_jobs: u32,
    /// Largest estimated single-core cost of one job, in seconds (the
    /// validator's estimate; a graph over it is refused before it is
    /// costed in full).
    pub max_job_seconds: f64,
    /// Largest estimated cost of a tenant's jobs queued or running at once,
    /// in seconds.
    pub max_inflight_seconds: f64,
    /// Seconds of checking (validating graphs, decoding inputs) a tenant's
    /// submissions may use per minute, on average; bursts of up to twice
    /// that are allowed. Counted whether the job is then accepted or not.
    pub check_seconds_per_minute: f64,
}

impl Default for Quota {
    fn default() -> Self {
        Self {
            max_object_bytes: 2 << 30,
            max_objects: 10_000,
            max_stored_bytes: 64 << 30,
            max_concurrent_jobs: 16,
            max_job_seconds: 3600.0,
            max_inflight_seconds: 4.0 * 3600.0,
            check_seconds_per_minute: 30.0,
        }
    }
}

impl Quota {
    fn validate(&self) -> Result<()> {
        let positive = [
            ("max_job_seconds", self.max_job_seconds),
            ("max_inflight_seconds", self.max_inflight_seconds),
            ("check_seconds_per_minute", self.check_seconds_per_minute),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(ServerError::Config(format!(
                    "quota.{name} must be a positive number of seconds"
                )));
            }
        }
        if self.max_inflight_seconds < self.max_job_seconds {
            return Err(ServerError::Config(
                "quota.max_inflight_seconds must be at least quota.max_job_seconds".into(),
            ));
        }
        if self.max_objects == 0 || self.max_object_bytes == 0 || self.max_stored_bytes == 0 {
            return Err(ServerError::Config(
                "quota.max_objects, max_object_bytes and max_stored_bytes must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// One tenant.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Name (1..64 chars of `[a-z0-9_-]`).
    pub name: String,
    /// Bearer token in clear (tests, embedded setups).
    #[serde(default)]
    pub token: Option<String>,
    /// Hex BLAKE3 of the bearer token (production configs).
    #[serde(default)]
    pub token_blake3: Option<String>,
}

impl std::fmt::Debug for TenantConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantConfig")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Folder of the durable store (and of generated TLS material).
    pub data_dir: PathBuf,
    /// Worker threads for jobs.
    pub workers: usize,
    /// Serve TLS (certificates from `tls_cert`/`tls_key`, or generated under
    /// `<data_dir>/tls`). Without TLS the server only listens on loopback:
    /// bearer tokens would otherwise cross the network in clear.
    pub tls: bool,
    /// Server certificate chain (PEM).
    pub tls_cert: Option<PathBuf>,
    /// Server private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Largest upload chunk in bytes.
    pub max_chunk_bytes: u32,
    /// Times a job interrupted by a restart is run again before it fails.
    pub max_job_attempts: u32,
    /// Hours after which a pending upload whose part file has not grown is
    /// dropped (a client coming back starts it over). Abandoned uploads
    /// would otherwise keep their disk space and count against their
    /// tenant's object quota for ever.
    pub upload_expiry_hours: u32,
    /// Accept insecure (test) CKKS parameter sets.
    pub allow_insecure_params: bool,
    /// Seconds a refresh round of a job waits for its tenant's key holder
    /// (to connect, decrypt and encrypt again) before the job fails.
    pub refresh_wait_secs: u32,
    /// Ask the C allocator (glibc) to keep freed memory for reuse instead of
    /// returning it to the OS (see [`crate::alloc::retain_freed_memory`]).
    /// Every job and upload allocates ciphertext-sized buffers of several
    /// MiB (over a hundred at N = 2^17); mapping them fresh costs page
    /// faults that, measured, were half of decoding an uploaded ciphertext.
    /// The price is that the process keeps its peak heap. Process-wide; on
    /// by default.
    pub retain_freed_memory: bool,
    /// MiB of session keys kept loaded between jobs, all tenants together
    /// (6 GiB by default: two N = 2^16 bootstrapping sessions). The least
    /// recently used sessions are dropped first; a session larger than this
    /// still loads for its job, alone.
    pub key_cache_mib: u64,
    /// MiB a job's outputs may take (8 GiB by default; the tenant's
    /// `max_stored_bytes` if lower): they are held in memory until stored,
    /// and a job estimated over it is refused at submission.
    pub max_job_output_mib: u64,
    /// Per-tenant limits.
    pub quota: Quota,
    /// Tenants.
    pub tenants: Vec<TenantConfig>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7443".parse().expect("valid address"),
            data_dir: PathBuf::from("hecloud-data"),
            workers: 2,
            tls: true,
            tls_cert: None,
            tls_key: None,
            max_chunk_bytes: 4 << 20,
            max_job_attempts: 2,
            upload_expiry_hours: 24,
            allow_insecure_params: false,
            refresh_wait_secs: 60,
            retain_freed_memory: true,
            key_cache_mib: crate::exec::DEFAULT_KEY_CACHE_BYTES >> 20,
            max_job_output_mib: crate::exec::DEFAULT_MAX_OUTPUT_BYTES >> 20,
            quota: Quota::default(),
            tenants: vec![],
        }
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl ServerConfig {
    /// Parses a TOML configuration.
    pub fn from_toml(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| ServerError::Config(e.to_string()))
    }

    /// Reads a TOML configuration file.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))?;
        Self::from_toml(&text)
    }

    /// Applies `HECLOUD_LISTEN`, `HECLOUD_DATA_DIR`, `HECLOUD_WORKERS`,
    /// `HECLOUD_TLS` (0/1) and `HECLOUD_TENANT=name:token` from `env`.
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> Result<()> {
        let bad = |k: &str, v: &str| ServerError::Config(format!("{k}={v:?} is not valid"));
        if let Some(v) = env("HECLOUD_LISTEN") {
            self.listen = v.parse().map_err(|_| bad("HECLOUD_LISTEN", &v))?;
        }
        if let Some(v) = env("HECLOUD_DATA_DIR") {
            self.data_dir = v.into();
        }
        if let Some(v) = env("HECLOUD_WORKERS") {
            self.workers = v.parse().map_err(|_| bad("HECLOUD_WORKERS", &v))?;
        }
        if let Some(v) = env("HECLOUD_TLS") {
            self.tls = match v.as_str() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => return Err(bad("HECLOUD_TLS", &v)),
            };
        }
        if let Some(v) = env("HECLOUD_TENANT") {
            let (name, token) = v
                .split_once(':')
                .ok_or_else(|| ServerError::Config("HECLOUD_TENANT must be name:token".into()))?;
            self.tenants.push(TenantConfig {
                name: name.into(),
                token: Some(token.into()),
                token_blake3: None,
            });
        }
        Ok(())
    }

    /// Checks the configuration.
    pub fn validate(&self) -> Result<()> {
        if self.workers == 0 || self.workers > 1024 {
            return Err(ServerError::Config("workers must be 1..=1024".into()));
        }
        if !(1024..=64 << 20).contains(&self.max_chunk_bytes) {
            return Err(ServerError::Config(
                "max_chunk_bytes must be 1 KiB..=64 MiB".into(),
            ));
        }
        if self.refresh_wait_secs == 0 {
            return Err(ServerError::Config(
                "refresh_wait_secs must be at least 1".into(),
            ));
        }
        if self.upload_expiry_hours == 0 {
            return Err(ServerError::Config(
                "upload_expiry_hours must be at least 1".into(),
            ));
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(ServerError::Config(
                "tls_cert and tls_key go together".into(),
            ));
        }
        if !self.tls && !self.listen.ip().is_loopback() {
            return Err(ServerError::Config(format!(
                "TLS is off but {} is not a loopback address: bearer tokens and ciphertexts would cross the network in clear (turn TLS on, or listen on 127.0.0.1 / ::1)",
                self.listen
            )));
        }
        self.quota.validate()?;
        let mut names = std::collections::HashSet::new();
        let mut tokens = std::collections::HashMap::new();
        for t in &self.tenants {
            if !valid_name(&t.name) {
                return Err(ServerError::Config(format!(
                    "tenant name {:?}: 1..64 chars of [a-z0-9_-]",
                    t.name
                )));
            }
            if !names.insert(&t.name) {
                return Err(ServerError::Config(format!("tenant {} twice", t.name)));
            }
            let hash = t.token_hash().ok_or_else(|| {
                ServerError::Config(format!(
                    "tenant {}: give exactly one of token (≥ 16 chars) or token_blake3 (64 hex)",
                    t.name
                ))
            })?;
            // A token authenticates one tenant: a second would make it
            // silently whichever tenant was read last.
            if let Some(other) = tokens.insert(hash, &t.name) {
                return Err(ServerError::Config(format!(
                    "tenants {other} and {} have the same token: give each tenant its own",
                    t.name
                )));
            }
        }
        Ok(())
    }
}

impl TenantConfig {
    /// The BLAKE3 hash of the tenant's token (what clients are matched
    /// by), if exactly one well-formed token form is given.
    pub fn token_hash(&self) -> Option<[u8; 32]> {
        match (&self.token, &self.token_blake3) {
            (Some(tok), None) if tok.len() >= 16 => Some(*blake3::hash(tok.as_bytes()).as_bytes()),
            (None, Some(h)) if h.len() == 64 => hex::decode(h).ok()?.try_into().ok(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_env_and_checks() {
        let mut c = ServerConfig::from_toml(
            r#"
            listen = "127.0.0.1:9000"
            workers = 3
            [quota]
            max_objects = 5
            [[tenants]]
            name = "alice"
            token = "0123456789abcdef0123"
            "#,
        )
        .unwrap();
        assert_eq!(c.workers, 3);
        assert_eq!(c.quota.max_objects, 5);
        assert!(c.retain_freed_memory, "on unless the file turns it off");
        let off = ServerConfig::from_toml("retain_freed_memory = false").unwrap();
        assert!(!off.retain_freed_memory);
        assert_eq!(c.upload_expiry_hours, 24);
        assert_eq!(c.key_cache_mib, 6144);
        let small = ServerConfig::from_toml("key_cache_mib = 512").unwrap();
        assert_eq!(small.key_cache_mib, 512);
        let hourly = ServerConfig::from_toml("upload_expiry_hours = 1").unwrap();
        assert_eq!(hourly.upload_expiry_hours, 1);
        hourly.validate().unwrap();
        let never = ServerConfig::from_toml("upload_expiry_hours = 0").unwrap();
        assert!(never.validate().is_err());
        assert_eq!(
            c.quota.max_concurrent_jobs,
            Quota::default().max_concurrent_jobs
        );
        c.validate().unwrap();
        c.apply_env(|k| match k {
            "HECLOUD_WORKERS" => Some("7".into()),
            "HECLOUD_TENANT" => Some("bob:abcdefabcdefabcdef".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.workers, 7);
        assert_eq!(c.tenants.len(), 2);
        c.validate().unwrap();
        // The same token for two tenants would authenticate as either.
        let mut twice = c.clone();
        twice.tenants.push(TenantConfig {
            name: "carol".into(),
            token: None,
            token_blake3: Some(blake3::hash(b"abcdefabcdefabcdef").to_hex().to_string()),
        });
        let e = twice.validate().unwrap_err().to_string();
        assert!(e.contains("bob and carol have the same token"), "{e}");
        // No TLS only on loopback.
        let mut clear = c.clone();
        clear.tls = false;
        clear.validate().unwrap();
        clear.listen = "[::1]:7443".parse().unwrap();
        clear.validate().unwrap();
        for addr in ["0.0.0.0:7443", "192.0.2.7:7443", "[::]:7443"] {
            clear.listen = addr.parse().unwrap();
            let e = clear.validate().unwrap_err().to_string();
            assert!(e.contains("not a loopback address"), "{e}");
        }
        // Quota figures are checked.
        let mut q = c.clone();
        q.quota.max_job_seconds = f64::NAN;
        assert!(q.validate().is_err());
        q.quota.max_job_seconds = 10.0;
        q.quota.max_inflight_seconds = 5.0;
        assert!(q.validate().is_err());
        // The token never shows in Debug output.
        assert!(!format!("{c:?}").contains("0123456789abcdef0123"));
        assert!(ServerConfig::from_toml("nonsense = 1").is_err());
        c.tenants[1].name = "Bad Name".into();
        assert!(c.validate().is_err());
        assert!(
            c.apply_env(|k| (k == "HECLOUD_WORKERS").then(|| "x".into()))
                .is_err()
        );
    }
}
