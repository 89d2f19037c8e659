//! The proxy's errors.

use thiserror::Error;

/// Why a proxy operation failed. No variant carries secret material: key
/// bytes, plaintexts and unsealed files never appear in a message.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// Bytes that do not start with the sealed-file magic.
    #[error("not a sealed file (bad magic)")]
    NotSealed,
    /// A sealed file of a format version this proxy does not read.
    #[error("sealed file format version {0} is not supported (this proxy reads version {supported})", supported = crate::seal::VERSION)]
    UnknownVersion(u8),
    /// A sealed file shorter than its header says it is.
    #[error("sealed file truncated: {len} bytes, {need} expected")]
    Truncated {
        /// Its length.
        len: usize,
        /// The length its header (or the header itself) needs.
        need: usize,
    },
    /// A sealed file made under another sealing key.
    #[error("sealed under another sealing key")]
    WrongKey,
    /// A sealed file made for another tenant.
    #[error("sealed for another tenant than {0:?}")]
    WrongTenant(String),
    /// A sealed file made for another file name (swapped files).
    #[error("sealed as another file than {0:?}")]
    WrongFile(String),
    /// The authentication tag does not verify: the header, nonce,
    /// ciphertext or tag was modified.
    #[error("sealed file tampered with (authentication failed)")]
    Tampered,
    /// A tenant or file name the proxy refuses (empty, too long, or with
    /// characters outside `A-Z a-z 0-9 . _ -`, or starting with a dot).
    #[error("invalid {what} name {name:?}")]
    InvalidName {
        /// `tenant` or `file`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A sealing key file that cannot be used.
    #[error("sealing key file {path}: {reason}")]
    KeyFile {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Refusing to overwrite something that exists (a sealing key, a
    /// tenant's sealed folder).
    #[error("{0} already exists; refusing to overwrite it")]
    Exists(String),
    /// The operating system's random generator failed.
    #[error("the system random generator failed")]
    Random,
    /// A file or folder operation failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A key folder without a file it needs.
    #[error("key folder of tenant {tenant:?} has no {file:?}")]
    MissingFile {
        /// The tenant.
        tenant: String,
        /// The missing file.
        file: String,
    },
    /// A key folder this proxy cannot hold (neither a CKKS nor a BGV
    /// preset folder, or keys that are not a pair).
    #[error("unsupported key folder: {0}")]
    Unsupported(String),
    /// An operation of one scheme asked of a tenant whose keys are of
    /// another: integers of a CKKS tenant, reals of a BGV tenant.
    #[error("tenant {tenant:?} holds {holds} keys; it cannot encrypt {asked}")]
    WrongScheme {
        /// The tenant.
        tenant: String,
        /// The scheme of its keys.
        holds: &'static str,
        /// The scheme the operation needs.
        asked: &'static str,
    },
    /// A tenant whose keys are not loaded in the enclave.
    #[error("tenant {0:?} is not loaded")]
    UnknownTenant(String),
    /// Bad input to a homomorphic operation (a ciphertext that does not
    /// decode under the tenant's parameters, too many values, ...).
    #[error("{0}")]
    Crypto(String),
    /// A ciphertext made under another parameter set than the tenant's
    /// (a server returning an object of another tenant or session).
    #[error("the ciphertext belongs to another parameter set than the tenant's")]
    ForeignParameters,
    /// A ciphertext under another secret key than the tenant's, over its
    /// parameters (a server returning an object of another tenant or
    /// session): its decryption would be noise.
    #[error("the ciphertext is under another secret key than the tenant's")]
    ForeignKey,
    /// A refresh request refused by the tenant's responder.
    #[error("refresh: {0}")]
    Refresh(#[from] hecloud_protocol::refresh::RefreshError),
    /// Operation `index` of a batched enclave call failed; the operations
    /// before it took effect, those after it did not run.
    #[error("enclave operation {index}: {source}")]
    InBatch {
        /// Position of the failed operation in the batch.
        index: usize,
        /// Why it failed.
        source: Box<ProxyError>,
    },
    /// An attestation report that cannot be produced or does not verify.
    #[error("attestation: {0}")]
    Attestation(String),
}

/// The proxy's result type.
pub type Result<T> = std::result::Result<T, ProxyError>;
