//! Sealing at rest: AES-256-GCM under a [`SealingKey`].
//!
//! A sealed file is a header, the ciphertext and the 16-byte tag:
//!
//! | bytes | field |
//! | --- | --- |
//! | 6 | magic `HCSEAL` |
//! | 1 | format version ([`VERSION`]) |
//! | 8 | key id: SHA-256 of a domain label and the sealing key, first 8 bytes |
//! | 8 | tenant tag: SHA-256 of a domain label and the tenant name, first 8 bytes |
//! | 8 | file tag: the same over the file name |
//! | 8 | plaintext length, little endian |
//! | 12 | nonce, random from the OS for every sealing |
//!
//! The associated data authenticated with the ciphertext is the whole
//! header followed by the length-prefixed tenant and file names, so a
//! sealed file cannot be moved to another tenant or renamed to another
//! file of the same tenant, and no header byte can be changed unnoticed.
//! The tags in the clear only let [`unseal`] say which check failed
//! ([`ProxyError::WrongKey`], [`ProxyError::WrongTenant`],
//! [`ProxyError::WrongFile`]) instead of a bare [`ProxyError::Tampered`];
//! they reveal a hash of the tenant and file names, which are not secret.
//!
//! [`SealedKeyStore`] keeps one folder per tenant under its root, one
//! `<file>.sealed` per file of the tenant's key folder, and unseals a
//! tenant into memory only ([`UnsealedFolder`], zeroized on drop).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::digest::{SHA256, digest};
use ring::rand::{SecureRandom, SystemRandom};
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::enclave::{Enclave, EnclaveOp, EnclaveReply};
use crate::error::{ProxyError, Result};

/// The magic that starts every sealed file.
pub const MAGIC: &[u8; 6] = b"HCSEAL";
/// The sealed-file format version written and read.
pub const VERSION: u8 = 1;
/// Length of a sealing key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of the sealed-file header (magic, version, key id, tenant tag,
/// file tag, plaintext length, nonce).
pub const HEADER_LEN: usize = 6 + 1 + 8 + 8 + 8 + 8 + NONCE_LEN;
/// Length of the authentication tag after the ciphertext.
pub const TAG_LEN: usize = 16;
/// Largest sealed file read (a Galois key at N = 2^17 takes about
/// 100 MB; nothing in a key folder comes near this).
pub const MAX_SEALED_FILE: u64 = 1 << 30;
/// Longest tenant or file name.
pub const MAX_NAME: usize = 128;
/// The extension of sealed files in a [`SealedKeyStore`].
pub const SEALED_EXT: &str = "sealed";

const KEY_ID_AT: usize = 7;
const TENANT_AT: usize = 15;
const FILE_AT: usize = 23;
const LEN_AT: usize = 31;
const NONCE_AT: usize = 39;

/// A 256-bit AES-GCM sealing key: zeroized on drop, redacted in `Debug`.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct SealingKey([u8; KEY_LEN]);

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey(<redacted>)")
    }
}

impl SealingKey {
    /// A fresh key from the operating system's random generator.
    pub fn generate() -> Result<Self> {
        let mut k = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut k)
            .map_err(|_| ProxyError::Random)?;
        let key = Self(k);
        k.zeroize();
        Ok(key)
    }

    /// A key from its bytes (a key derived by a TEE, say).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// Reads a key file written by [`SealingKey::write_file`]: exactly
    /// [`KEY_LEN`] bytes, and on Unix readable by its owner only.
    pub fn from_file(path: &Path) -> Result<Self> {
        let bad = |reason: String| ProxyError::KeyFile {
            path: path.display().to_string(),
            reason,
        };
        let meta = std::fs::metadata(path)?;
        if !meta.is_file() {
            return Err(bad("not a regular file".into()));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(bad(format!(
                    "readable or writable by others (mode {mode:o}; it must be 600)"
                )));
            }
        }
        if meta.len() != KEY_LEN as u64 {
            return Err(bad(format!(
                "{} bytes, a sealing key has {KEY_LEN}",
                meta.len()
            )));
        }
        let raw = Zeroizing::new(std::fs::read(path)?);
        let bytes: [u8; KEY_LEN] = raw
            .as_slice()
            .try_into()
            .map_err(|_| bad(format!("{} bytes, a sealing key has {KEY_LEN}", raw.len())))?;
        Ok(Self(bytes))
    }

    /// Writes the key to a new file readable by its owner only (0600);
    /// refuses to replace an existing file (that would orphan everything
    /// sealed under the old key).
    pub fn write_file(&self, path: &Path) -> Result<()> {
        if path.exists() {
            return Err(ProxyError::Exists(path.display().to_string()));
        }
        hecloud_protocol::fs::write_private(path, &self.0)?;
        Ok(())
    }

    /// The key's public identifier written into sealed headers.
    pub fn id(&self) -> [u8; 8] {
        tag(b"hecloud-proxy sealing key id v1\0", &self.0)
    }

    fn aead(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &self.0).expect("a 32-byte AES-256 key"))
    }
}

/// First 8 bytes of SHA-256(label || data).
fn tag(label: &[u8], data: &[u8]) -> [u8; 8] {
    let mut buf = Zeroizing::new(Vec::with_capacity(label.len() + data.len()));
    buf.extend_from_slice(label);
    buf.extend_from_slice(data);
    digest(&SHA256, &buf).as_ref()[..8]
        .try_into()
        .expect("8 bytes")
}

fn tenant_tag(tenant: &str) -> [u8; 8] {
    tag(b"hecloud-proxy tenant v1\0", tenant.as_bytes())
}

fn file_tag(name: &str) -> [u8; 8] {
    tag(b"hecloud-proxy file v1\0", name.as_bytes())
}

/// Checks a tenant or file name: 1 to [`MAX_NAME`] bytes of `A-Z a-z 0-9
/// . _ -`, not starting with a dot (so it is a safe path component).
pub fn check_name(what: &'static str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ProxyError::InvalidName {
            what,
            name: name.into(),
        })
    }
}

fn aad(header: &[u8], tenant: &str, name: &str) -> Vec<u8> {
    let mut a = Vec::with_capacity(header.len() + 8 + tenant.len() + name.len());
    a.extend_from_slice(header);
    for s in [tenant, name] {
        a.extend_from_slice(&(s.len() as u32).to_le_bytes());
        a.extend_from_slice(s.as_bytes());
    }
    a
}

/// Seals `plaintext` as file `name` of `tenant`: the header, the
/// AES-256-GCM ciphertext and its tag (see the module doc).
pub fn seal(key: &SealingKey, tenant: &str, name: &str, plaintext: &[u8]) -> Result<Vec<u8>> {
    check_name("tenant", tenant)?;
    check_name("file", name)?;
    seal_tagged(
        key,
        tenant,
        name,
        plaintext,
        [tenant_tag(tenant), file_tag(name)],
    )
}

/// [`seal`] with the header's tenant and file tags given (a test makes
/// them collide with another tenant's).
fn seal_tagged(
    key: &SealingKey,
    tenant: &str,
    name: &str,
    plaintext: &[u8],
    [tenant_tag, file_tag]: [[u8; 8]; 2],
) -> Result<Vec<u8>> {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| ProxyError::Random)?;
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(MAGIC);
    header.push(VERSION);
    header.extend_from_slice(&key.id());
    header.extend_from_slice(&tenant_tag);
    header.extend_from_slice(&file_tag);
    header.extend_from_slice(&(plaintext.len() as u64).to_le_bytes());
    header.extend_from_slice(&nonce);
    debug_assert_eq!(header.len(), HEADER_LEN);
    let mut body = Zeroizing::new(Vec::with_capacity(plaintext.len() + TAG_LEN));
    body.extend_from_slice(plaintext);
    key.aead()
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(&header, tenant, name)),
            &mut *body,
        )
        .map_err(|_| ProxyError::Crypto("AES-GCM sealing failed".into()))?;
    let mut out = header;
    out.extend_from_slice(&body);
    Ok(out)
}

/// Unseals a file sealed by [`seal`] for `tenant` as `name` under `key`.
/// Every failure is a typed error: [`ProxyError::NotSealed`],
/// [`ProxyError::UnknownVersion`], [`ProxyError::Truncated`],
/// [`ProxyError::WrongKey`], [`ProxyError::WrongTenant`],
/// [`ProxyError::WrongFile`], [`ProxyError::Tampered`].
pub fn unseal(
    key: &SealingKey,
    tenant: &str,
    name: &str,
    sealed: &[u8],
) -> Result<Zeroizing<Vec<u8>>> {
    check_name("tenant", tenant)?;
    check_name("file", name)?;
    if sealed.len() < MAGIC.len() + 1 {
        return Err(ProxyError::Truncated {
            len: sealed.len(),
            need: HEADER_LEN + TAG_LEN,
        });
    }
    if &sealed[..MAGIC.len()] != MAGIC {
        return Err(ProxyError::NotSealed);
    }
    if sealed[MAGIC.len()] != VERSION {
        return Err(ProxyError::UnknownVersion(sealed[MAGIC.len()]));
    }
    if sealed.len() < HEADER_LEN + TAG_LEN {
        return Err(ProxyError::Truncated {
            len: sealed.len(),
            need: HEADER_LEN + TAG_LEN,
        });
    }
    let field = |at: usize| -> [u8; 8] { sealed[at..at + 8].try_into().expect("8 bytes") };
    if field(KEY_ID_AT) != key.id() {
        return Err(ProxyError::WrongKey);
    }
    if field(TENANT_AT) != tenant_tag(tenant) {
        return Err(ProxyError::WrongTenant(tenant.into()));
    }
    if field(FILE_AT) != file_tag(name) {
        return Err(ProxyError::WrongFile(name.into()));
    }
    let declared = u64::from_le_bytes(field(LEN_AT));
    let body_len = (sealed.len() - HEADER_LEN - TAG_LEN) as u64;
    if body_len < declared {
        return Err(ProxyError::Truncated {
            len: sealed.len(),
            need: usize::try_from(declared)
                .ok()
                .and_then(|d| d.checked_add(HEADER_LEN + TAG_LEN))
                .unwrap_or(usize::MAX),
        });
    }
    if body_len > declared {
        // Bytes appended, or the length field lowered: either way the
        // file is not what was sealed.
        return Err(ProxyError::Tampered);
    }
    let header = &sealed[..HEADER_LEN];
    let nonce: [u8; NONCE_LEN] = sealed[NONCE_AT..HEADER_LEN]
        .try_into()
        .expect("nonce bytes");
    let mut body = Zeroizing::new(sealed[HEADER_LEN..].to_vec());
    let n = key
        .aead()
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(header, tenant, name)),
            &mut body,
        )
        .map_err(|_| ProxyError::Tampered)?
        .len();
    body.truncate(n);
    Ok(body)
}

/// A tenant's key folder, every file sealed (safe to keep on disk and to
/// hand across the enclave boundary).
#[derive(Clone, PartialEq, Eq)]
pub struct SealedFolder {
    tenant: String,
    files: BTreeMap<String, Vec<u8>>,
}

impl std::fmt::Debug for SealedFolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedFolder")
            .field("tenant", &self.tenant)
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl SealedFolder {
    /// Seals `files` (name, contents) for `tenant`.
    pub fn seal<'a>(
        key: &SealingKey,
        tenant: &str,
        files: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Self> {
        check_name("tenant", tenant)?;
        let files = files
            .into_iter()
            .map(|(name, bytes)| Ok((name.to_string(), seal(key, tenant, name, bytes)?)))
            .collect::<Result<_>>()?;
        Ok(Self {
            tenant: tenant.into(),
            files,
        })
    }

    /// Wraps sealed files read from elsewhere (they are checked when
    /// unsealed).
    pub fn from_parts(tenant: &str, files: BTreeMap<String, Vec<u8>>) -> Result<Self> {
        check_name("tenant", tenant)?;
        for name in files.keys() {
            check_name("file", name)?;
        }
        Ok(Self {
            tenant: tenant.into(),
            files,
        })
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The sealed files by name.
    pub fn files(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.files
    }

    /// The same folder with only the files whose names `keep` accepts.
    pub fn only(&self, keep: impl Fn(&str) -> bool) -> Self {
        Self {
            tenant: self.tenant.clone(),
            files: self
                .files
                .iter()
                .filter(|(n, _)| keep(n))
                .map(|(n, b)| (n.clone(), b.clone()))
                .collect(),
        }
    }

    /// Unseals every file into memory.
    pub fn unseal(&self, key: &SealingKey) -> Result<UnsealedFolder> {
        let files = self
            .files
            .iter()
            .map(|(name, sealed)| Ok((name.clone(), unseal(key, &self.tenant, name, sealed)?)))
            .collect::<Result<_>>()?;
        Ok(UnsealedFolder {
            tenant: self.tenant.clone(),
            files,
        })
    }
}

/// A tenant's key folder unsealed in memory: every file zeroized on drop,
/// only the names shown by `Debug`.
pub struct UnsealedFolder {
    tenant: String,
    files: BTreeMap<String, Zeroizing<Vec<u8>>>,
}

impl std::fmt::Debug for UnsealedFolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnsealedFolder")
            .field("tenant", &self.tenant)
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl UnsealedFolder {
    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// A file's contents.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.files.get(name).map(|b| b.as_slice())
    }

    /// A file's contents, or [`ProxyError::MissingFile`].
    pub fn require(&self, name: &str) -> Result<&[u8]> {
        self.get(name).ok_or_else(|| ProxyError::MissingFile {
            tenant: self.tenant.clone(),
            file: name.into(),
        })
    }

    /// The file names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }
}

/// The files a key folder must have to be sealed.
pub const REQUIRED_FILES: [&str; 3] = ["preset", "secret.key", "public.key"];

/// Whether a key folder's file is public: one the host may hold in the
/// clear and upload to the server. An allow list of the names
/// `hecloud_client::keys` writes: `preset`, `public.key`, `relin.key`,
/// `galois-<g>.key` (`g` decimal digits), `session.spec`, the TFHE
/// `server.key` and a bootstrappable folder's encapsulation keys
/// (`encaps-down.key`, `encaps-up.key`: switching keys, evaluation keys
/// like the others). Everything else, `secret.key` first, is secret.
pub fn is_public_file(name: &str) -> bool {
    matches!(
        name,
        "preset"
            | "public.key"
            | "relin.key"
            | "session.spec"
            | "server.key"
            | "encaps-down.key"
            | "encaps-up.key"
    ) || name
        .strip_prefix("galois-")
        .and_then(|g| g.strip_suffix(".key"))
        .is_some_and(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
}

/// Reads a clear client key folder (as written by
/// `hecloud_client::keys::keygen`) into memory, zeroized on drop: every
/// regular file with a valid name (hidden files are skipped);
/// [`REQUIRED_FILES`] must be there.
pub fn read_clear_folder(
    tenant: &str,
    clear_dir: &Path,
) -> Result<BTreeMap<String, Zeroizing<Vec<u8>>>> {
    check_name("tenant", tenant)?;
    let mut clear: BTreeMap<String, Zeroizing<Vec<u8>>> = BTreeMap::new();
    for entry in std::fs::read_dir(clear_dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !entry.file_type()?.is_file() || check_name("file", &name).is_err() {
            continue;
        }
        clear.insert(name, Zeroizing::new(std::fs::read(entry.path())?));
    }
    for required in REQUIRED_FILES {
        if !clear.contains_key(required) {
            return Err(ProxyError::MissingFile {
                tenant: tenant.into(),
                file: required.into(),
            });
        }
    }
    Ok(clear)
}

/// Sealed key folders on disk: `<root>/<tenant>/<file>.sealed`.
#[derive(Debug, Clone)]
pub struct SealedKeyStore {
    root: PathBuf,
}

impl SealedKeyStore {
    /// A store under `root` (created when the first tenant is written).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder of `tenant`.
    pub fn tenant_dir(&self, tenant: &str) -> Result<PathBuf> {
        check_name("tenant", tenant)?;
        Ok(self.root.join(tenant))
    }

    /// Whether `tenant` has a sealed folder here.
    pub fn contains(&self, tenant: &str) -> Result<bool> {
        Ok(self.tenant_dir(tenant)?.is_dir())
    }

    /// Seals the client key folder `clear_dir` (as written by
    /// `hecloud_client::keys::keygen`) for `tenant` inside `enclave`
    /// ([`EnclaveOp::SealFolder`], one crossing), so the caller never holds
    /// the sealing key, and writes it (see [`SealedKeyStore::write`]).
    /// The folder is read by [`read_clear_folder`]; a tenant that already
    /// has a folder here is refused before anything is read. The clear
    /// folder is left as it is: deleting it is the caller's decision.
    pub fn seal_folder_in<E: Enclave + ?Sized>(
        &self,
        enclave: &E,
        tenant: &str,
        clear_dir: &Path,
    ) -> Result<SealedFolder> {
        if self.contains(tenant)? {
            return Err(ProxyError::Exists(
                self.tenant_dir(tenant)?.display().to_string(),
            ));
        }
        let files = read_clear_folder(tenant, clear_dir)?;
        let reply = enclave
            .call_one(EnclaveOp::SealFolder {
                tenant: tenant.into(),
                files,
            })
            .map_err(|e| match e {
                ProxyError::InBatch { source, .. } => *source,
                e => e,
            })?;
        let EnclaveReply::Sealed(folder) = reply else {
            return Err(ProxyError::Crypto(format!(
                "the enclave answered {reply:?} to seal-folder"
            )));
        };
        if folder.tenant() != tenant {
            return Err(ProxyError::WrongTenant(tenant.into()));
        }
        self.write(&folder)?;
        Ok(folder)
    }

    /// Seals the client key folder `clear_dir` for `tenant` with `key`
    /// held by the caller, and writes it. Prefer
    /// [`SealedKeyStore::seal_folder_in`], which keeps the key inside the
    /// enclave; this one is for tools that hold the key file anyway
    /// (tests, migrations). The folder is read by [`read_clear_folder`].
    pub fn seal_folder(
        &self,
        key: &SealingKey,
        tenant: &str,
        clear_dir: &Path,
    ) -> Result<SealedFolder> {
        let clear = read_clear_folder(tenant, clear_dir)?;
        let folder = SealedFolder::seal(
            key,
            tenant,
            clear.iter().map(|(n, b)| (n.as_str(), b.as_slice())),
        )?;
        self.write(&folder)?;
        Ok(folder)
    }

    /// Writes a sealed folder as `<root>/<tenant>/<file>.sealed` (folder
    /// 0700, files 0600); refuses a tenant that already has a folder.
    pub fn write(&self, folder: &SealedFolder) -> Result<()> {
        let dir = self.tenant_dir(folder.tenant())?;
        std::fs::create_dir_all(&self.root)?;
        let mut b = std::fs::DirBuilder::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            b.mode(0o700);
        }
        b.create(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => ProxyError::Exists(dir.display().to_string()),
            _ => e.into(),
        })?;
        for (name, sealed) in folder.files() {
            hecloud_protocol::fs::write_private(&dir.join(format!("{name}.{SEALED_EXT}")), sealed)?;
        }
        Ok(())
    }

    /// Reads `tenant`'s sealed files (still sealed: no key needed).
    pub fn read(&self, tenant: &str) -> Result<SealedFolder> {
        let dir = self.tenant_dir(tenant)?;
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let Some(file) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let Some(name) = file.strip_suffix(&format!(".{SEALED_EXT}")) else {
                continue;
            };
            if check_name("file", name).is_err() || !entry.file_type()?.is_file() {
                continue;
            }
            let len = entry.metadata()?.len();
            if len > MAX_SEALED_FILE {
                return Err(ProxyError::Crypto(format!(
                    "sealed file {file} of tenant {tenant:?} has {len} bytes (at most {MAX_SEALED_FILE})"
                )));
            }
            files.insert(name.to_string(), std::fs::read(entry.path())?);
        }
        SealedFolder::from_parts(tenant, files)
    }

    /// Reads and unseals `tenant`'s folder into memory (nothing is written
    /// back to disk).
    pub fn unseal(&self, key: &SealingKey, tenant: &str) -> Result<UnsealedFolder> {
        self.read(tenant)?.unseal(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_uploaded_files_are_public() {
        for name in [
            "preset",
            "public.key",
            "relin.key",
            "session.spec",
            "server.key",
            "galois-5.key",
            "galois-65535.key",
        ] {
            assert!(is_public_file(name), "{name}");
        }
        for name in [
            "secret.key",
            "Secret.key",
            "secret.key.bak",
            "public.key2",
            "galois-.key",
            "galois-1x.key",
            "galois-5.key.bak",
            "galois--5.key",
            "notes.txt",
            "",
        ] {
            assert!(!is_public_file(name), "{name}");
        }
    }

    /// The 64-bit tags in the header only name the failed check; the full
    /// names are bound in the associated data, so even a file whose tags
    /// collide with another tenant's (or file's) does not open there.
    #[test]
    fn names_are_bound_beyond_their_header_tags() {
        let key = SealingKey::generate().unwrap();
        let data = b"alice's secret key bytes";
        let alice = [tenant_tag("alice"), file_tag("secret.key")];
        let forged = seal_tagged(&key, "bob", "secret.key", data, alice).unwrap();
        assert!(matches!(
            unseal(&key, "alice", "secret.key", &forged),
            Err(ProxyError::Tampered)
        ));
        let pk_as_sk = seal_tagged(&key, "alice", "public.key", data, alice).unwrap();
        assert!(matches!(
            unseal(&key, "alice", "secret.key", &pk_as_sk),
            Err(ProxyError::Tampered)
        ));
        let honest = seal_tagged(&key, "alice", "secret.key", data, alice).unwrap();
        assert_eq!(
            &*unseal(&key, "alice", "secret.key", &honest).unwrap(),
            data
        );
    }
}
