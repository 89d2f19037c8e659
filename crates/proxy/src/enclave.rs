//! The enclave boundary: every secret operation of the proxy sits behind
//! [`Enclave`], and one crossing of the boundary carries a whole batch of
//! operations ([`Enclave::call`]). Bringing a ciphertext in and decrypting
//! it, or loading a tenant and answering its refresh, is then one crossing
//! instead of one per function (call fusion); [`Enclave::crossings`]
//! counts them, so that a benchmark can compare the two.
//!
//! Unsealed secret keys live only inside the enclave object (in the
//! tenant's `SecretKey`s, zeroized on drop by `hecloud_rlwe`, and in the
//! [`UnsealedFolder`] while loading, zeroized on drop); `Debug` of an
//! enclave, an operation or a reply shows names and sizes, never a key or
//! a value.
//!
//! A tenant's keys are CKKS keys (real vectors: [`EnclaveOp::EncryptReal`])
//! or BGV keys (integer vectors mod t: [`EnclaveOp::EncryptInts`]), as its
//! key folder's `preset` says; [`EnclaveOp::Decrypt`] decrypts under the
//! tenant's scheme. Asking a tenant for the other scheme's operation is
//! refused ([`ProxyError::WrongScheme`]).
//!
//! [`PlainEnclave`] is the implementation for development and machines
//! without a TEE: it works fully, with its sealing key from a key file, and
//! reports [`Attestation::Unattested`]. It protects the keys at rest only
//! (sealed files); the host, its administrator and anything that can read
//! the process's memory see the keys and the data.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use hecloud_bgv::BgvParameters;
use hecloud_ckks::boot::BootPreset;
use hecloud_ckks::{CkksParameters, Encoder, Preset};
use hecloud_client::GrowingObject;
use hecloud_protocol::refresh::RefreshResponder;
use hecloud_protocol::{Message, SessionSpec};
use hecloud_rlwe::{Ciphertext, DecodeError, Encryptor, PublicKey, RlweError, SecretKey};
use tokio::sync::oneshot;
use zeroize::Zeroizing;

use crate::error::{ProxyError, Result};
use crate::seal::{
    REQUIRED_FILES, SealedFolder, SealingKey, UnsealedFolder, check_name, is_public_file,
};

/// Length of the report data bound into an attestation report.
pub const REPORT_DATA_LEN: usize = 64;

/// What an enclave can prove about itself.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attestation {
    /// Nothing: a plain process. Clients must refuse it unless told to
    /// allow an unattested proxy.
    Unattested,
    /// A report from the Linux configfs-tsm interface of a confidential VM.
    ConfigfsTsm {
        /// Who made the report (`sev_guest`, `tdx_guest`, ...).
        provider: String,
        /// The raw report (`outblob`).
        report: Vec<u8>,
        /// The provider's auxiliary data (`auxblob`), when it gives any:
        /// for `sev_guest`, the certificate table (VCEK, ASK, ARK) the
        /// host provisioned.
        auxblob: Option<Vec<u8>>,
    },
}

impl Attestation {
    /// Whether there is a report to verify.
    pub fn is_attested(&self) -> bool {
        !matches!(self, Self::Unattested)
    }
}

impl std::fmt::Debug for Attestation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unattested => f.write_str("Unattested"),
            Self::ConfigfsTsm {
                provider,
                report,
                auxblob,
            } => f
                .debug_struct("ConfigfsTsm")
                .field("provider", provider)
                .field("report_bytes", &report.len())
                .field("auxblob_bytes", &auxblob.as_ref().map(Vec::len))
                .finish(),
        }
    }
}

/// One operation inside the enclave.
#[derive(Clone)]
#[non_exhaustive]
pub enum EnclaveOp {
    /// Unseals a tenant's key folder into the enclave (replacing keys the
    /// tenant had loaded). The folder must hold a CKKS preset folder
    /// (`preset` naming `n13` … `n17`, or a bootstrappable `boot-n16`,
    /// `boot-test-n12`, whose session spec says the slots) or a BGV one
    /// (`bgv-n13` … `bgv-n16`), as `hecloud keygen` writes them:
    /// `preset`, `secret.key`, `public.key`.
    LoadTenant {
        /// The tenant.
        tenant: String,
        /// Its sealed folder.
        folder: SealedFolder,
    },
    /// Forgets a tenant's keys (zeroized).
    UnloadTenant {
        /// The tenant.
        tenant: String,
    },
    /// Seals a new client key folder for the tenant under the enclave's
    /// sealing key, which never leaves the enclave: the sealed folder
    /// ([`EnclaveReply::Sealed`]), for the host to store. The files must
    /// include [`REQUIRED_FILES`] and have valid names; nothing is loaded.
    SealFolder {
        /// The tenant.
        tenant: String,
        /// The clear files by name (zeroized on drop).
        files: BTreeMap<String, Zeroizing<Vec<u8>>>,
    },
    /// Unseals a tenant's folder and returns its public files, the ones
    /// the host uploads to the server ([`EnclaveReply::PublicFiles`]): only
    /// the names that [`is_public_file`] accepts (`preset`, `public.key`,
    /// `relin.key`, `galois-<g>.key`, `session.spec`, `server.key`), never
    /// `secret.key` (not even unsealed for this) or a file of another name.
    /// The tenant need not be loaded: the enclave keeps no copy of these
    /// files, so the host passes the sealed folder it stores.
    PublicFiles {
        /// The tenant.
        tenant: String,
        /// Its sealed folder.
        folder: SealedFolder,
    },
    /// Encrypts reals (slots beyond them 0) with the tenant's secret key (its
    /// uniform half a seed: half the bytes to upload) at
    /// the top level and the default scale: the ciphertext's bytes (a
    /// `ckks.ciphertext`). A BGV tenant refuses it
    /// ([`ProxyError::WrongScheme`]).
    EncryptReal {
        /// The tenant.
        tenant: String,
        /// At most N/2 finite values (zeroized on drop).
        values: Zeroizing<Vec<f64>>,
    },
    /// [`EnclaveOp::EncryptReal`], the ciphertext's bytes handed out as
    /// they are made: the enclave makes a [`GrowingObject`] of the
    /// ciphertext's length, hands it to `to` before it encrypts, then
    /// appends each limb as it is encrypted, so the host uploads the first
    /// limbs while the last are made. The reply is
    /// [`EnclaveReply::Streamed`]. Refused (nothing handed) as
    /// `EncryptReal` refuses; a failure half way drops the writer, which
    /// fails the upload.
    EncryptRealStreamed {
        /// The tenant.
        tenant: String,
        /// At most N/2 finite values (zeroized on drop).
        values: Zeroizing<Vec<f64>>,
        /// Where the object goes.
        to: StreamTo,
    },
    /// Encrypts integers mod t (slots beyond them 0) with a BGV tenant's
    /// secret key (seeded, as [`EnclaveOp::EncryptReal`]) at the top level:
    /// the ciphertext's bytes (a `bgv.ciphertext`). A value not below the
    /// plaintext modulus t, or more values than the N slots, is refused
    /// ([`ProxyError::Crypto`], naming the index, not the value); a CKKS
    /// tenant refuses the operation ([`ProxyError::WrongScheme`]).
    EncryptInts {
        /// The tenant.
        tenant: String,
        /// At most N values, each below t (zeroized on drop).
        values: Zeroizing<Vec<u64>>,
    },
    /// Decrypts a ciphertext's bytes with the tenant's secret key: for a
    /// CKKS tenant every slot's real part ([`EnclaveReply::Reals`]), for a
    /// BGV tenant every slot's integer mod t ([`EnclaveReply::Ints`]). A
    /// ciphertext of another parameter set fails with
    /// [`ProxyError::ForeignParameters`], one under another secret key of
    /// the same parameters with [`ProxyError::ForeignKey`].
    Decrypt {
        /// The tenant.
        tenant: String,
        /// A serialized ciphertext under the tenant's parameters.
        ciphertext: Vec<u8>,
    },
    /// Answers a refresh request (`hecloud_protocol::refresh`) of one of the
    /// tenant's jobs; each request id is answered once.
    AnswerRefresh {
        /// The tenant.
        tenant: String,
        /// The request's bytes.
        request: Vec<u8>,
    },
}

impl EnclaveOp {
    /// The operation's name (for logs and errors).
    pub fn name(&self) -> &'static str {
        match self {
            Self::LoadTenant { .. } => "load-tenant",
            Self::UnloadTenant { .. } => "unload-tenant",
            Self::SealFolder { .. } => "seal-folder",
            Self::PublicFiles { .. } => "public-files",
            Self::EncryptReal { .. } => "encrypt-real",
            Self::EncryptRealStreamed { .. } => "encrypt-real-streamed",
            Self::EncryptInts { .. } => "encrypt-ints",
            Self::Decrypt { .. } => "decrypt",
            Self::AnswerRefresh { .. } => "answer-refresh",
        }
    }

    /// The tenant it acts for.
    pub fn tenant(&self) -> &str {
        match self {
            Self::LoadTenant { tenant, .. }
            | Self::UnloadTenant { tenant }
            | Self::SealFolder { tenant, .. }
            | Self::PublicFiles { tenant, .. }
            | Self::EncryptReal { tenant, .. }
            | Self::EncryptRealStreamed { tenant, .. }
            | Self::EncryptInts { tenant, .. }
            | Self::Decrypt { tenant, .. }
            | Self::AnswerRefresh { tenant, .. } => tenant,
        }
    }
}

impl std::fmt::Debug for EnclaveOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct(self.name());
        d.field("tenant", &self.tenant());
        match self {
            Self::LoadTenant { folder, .. } => d.field("files", &folder.files().len()),
            Self::UnloadTenant { .. } => &mut d,
            Self::SealFolder { files, .. } => d.field("files", &files.keys().collect::<Vec<_>>()),
            Self::PublicFiles { folder, .. } => d.field("files", &folder.files().len()),
            Self::EncryptReal { values, .. } | Self::EncryptRealStreamed { values, .. } => {
                d.field("values", &values.len())
            }
            Self::EncryptInts { values, .. } => d.field("values", &values.len()),
            Self::Decrypt { ciphertext, .. } => d.field("ciphertext_bytes", &ciphertext.len()),
            Self::AnswerRefresh { request, .. } => d.field("request_bytes", &request.len()),
        };
        d.finish()
    }
}

/// What an operation returned, in the order of the batch.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub enum EnclaveReply {
    /// A tenant was loaded with keys of this preset.
    Loaded {
        /// The preset name (`n13` ... `n17`, `bgv-n13` ... `bgv-n16`).
        preset: String,
    },
    /// A tenant was unloaded (`false`: it was not loaded).
    Unloaded(bool),
    /// A key folder sealed inside the enclave.
    Sealed(SealedFolder),
    /// A tenant's public files by name (no secret among them).
    PublicFiles(BTreeMap<String, Vec<u8>>),
    /// A ciphertext's bytes.
    Ciphertext(Vec<u8>),
    /// A ciphertext of this many bytes was appended to the object handed
    /// out ([`EnclaveOp::EncryptRealStreamed`]).
    Streamed(u64),
    /// Decrypted reals, one per slot (zeroized on drop, redacted in
    /// `Debug`).
    Reals(Zeroizing<Vec<f64>>),
    /// Decrypted integers mod t, one per slot, of a BGV tenant (zeroized
    /// on drop, redacted in `Debug`).
    Ints(Zeroizing<Vec<u64>>),
    /// A refresh reply's bytes.
    RefreshReply(Vec<u8>),
}

impl std::fmt::Debug for EnclaveReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Loaded { preset } => f.debug_struct("Loaded").field("preset", preset).finish(),
            Self::Unloaded(was) => f.debug_tuple("Unloaded").field(was).finish(),
            Self::Sealed(folder) => f.debug_tuple("Sealed").field(folder).finish(),
            Self::PublicFiles(files) => f
                .debug_tuple("PublicFiles")
                .field(&files.iter().map(|(n, b)| (n, b.len())).collect::<Vec<_>>())
                .finish(),
            Self::Ciphertext(b) => write!(f, "Ciphertext({} bytes)", b.len()),
            Self::Streamed(n) => write!(f, "Streamed({n} bytes)"),
            Self::Reals(v) => write!(f, "Reals({} values, redacted)", v.len()),
            Self::Ints(v) => write!(f, "Ints({} values, redacted)", v.len()),
            Self::RefreshReply(b) => write!(f, "RefreshReply({} bytes)", b.len()),
        }
    }
}

/// Where a streamed encryption hands its object
/// ([`EnclaveOp::EncryptRealStreamed`]): the other end is the receiver
/// [`StreamTo::new`] returns, which errs if the operation ends without
/// handing one.
#[derive(Clone)]
pub struct StreamTo(Arc<Mutex<Option<oneshot::Sender<Arc<GrowingObject>>>>>);

impl StreamTo {
    /// A destination and the receiver of its object.
    pub fn new() -> (Self, oneshot::Receiver<Arc<GrowingObject>>) {
        let (tx, rx) = oneshot::channel();
        (Self(Arc::new(Mutex::new(Some(tx)))), rx)
    }

    /// Hands `object` out (once: a second object is refused).
    fn hand(&self, object: Arc<GrowingObject>) -> Result<()> {
        let tx = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        // A receiver gone (the request was cancelled) is no error here: the
        // encryption then goes nowhere.
        match tx {
            Some(tx) => {
                let _ = tx.send(object);
                Ok(())
            }
            None => Err(ProxyError::Crypto("a stream destination used twice".into())),
        }
    }
}

impl std::fmt::Debug for StreamTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamTo")
    }
}

/// The TEE boundary: every secret operation of the proxy.
pub trait Enclave: Send + Sync + std::fmt::Debug {
    /// Runs a batch of operations in one crossing of the boundary, in
    /// order; one reply per operation. The first failing operation stops
    /// the batch with [`ProxyError::InBatch`] (the operations before it
    /// took effect). Every call counts one crossing, failed or empty.
    fn call(&self, batch: Vec<EnclaveOp>) -> Result<Vec<EnclaveReply>>;

    /// Crossings of the boundary so far.
    fn crossings(&self) -> u64;

    /// What the enclave can prove, with `report_data` (the hash binding
    /// the proxy's TLS key and a client nonce, see `crate::attest`) in the
    /// report where there is one.
    fn attestation(&self, report_data: &[u8; REPORT_DATA_LEN]) -> Result<Attestation>;

    /// One operation in its own crossing.
    fn call_one(&self, op: EnclaveOp) -> Result<EnclaveReply> {
        let mut r = self.call(vec![op])?;
        r.pop()
            .ok_or_else(|| ProxyError::Crypto("the enclave returned no reply".into()))
    }
}

/// A tenant's keys inside the enclave.
struct Tenant {
    /// The preset's name (`n13`, `bgv-n13`, ...).
    preset: String,
    keys: SchemeKeys,
    responder: RefreshResponder,
}

/// A tenant's secret keys and what encrypts and decrypts with them, by
/// scheme.
enum SchemeKeys {
    Ckks {
        params: Arc<CkksParameters>,
        /// Built once: its tables take milliseconds at N = 2^16. Of the
        /// folder's slots: N/2, or a sparse bootstrapping circuit's.
        encoder: Encoder,
        /// Where fresh encryptions go: the top, or in a bootstrappable
        /// folder the level bootstrapping leaves.
        level: usize,
        secret_key: SecretKey,
    },
    Bgv {
        params: Arc<BgvParameters>,
        encoder: hecloud_bgv::Encoder,
        /// The secret key (and the public key made from it, unused here:
        /// no evaluation keys); shared with the refresh responder.
        keys: Arc<hecloud_bgv::KeySet>,
    },
}

impl SchemeKeys {
    fn scheme(&self) -> &'static str {
        match self {
            Self::Ckks { .. } => SCHEME_CKKS,
            Self::Bgv { .. } => SCHEME_BGV,
        }
    }
}

/// The scheme name of real vectors ([`ProxyError::WrongScheme`]).
pub const SCHEME_CKKS: &str = "CKKS (real vectors)";
/// The scheme name of integer vectors ([`ProxyError::WrongScheme`]).
pub const SCHEME_BGV: &str = "BGV (integer vectors mod t)";

fn crypto<E: std::fmt::Display>(e: E) -> ProxyError {
    ProxyError::Crypto(e.to_string())
}

/// Largest difference between a value encrypted at load and its decryption
/// for the key pair to count as matching.
const KEY_CHECK_TOLERANCE: f64 = 1e-3;

/// The integers encrypted with a BGV folder's public key at load and
/// decrypted with its secret key: they must come back for the key pair to
/// count as matching (a wrong pair gives each one with probability 1/t).
const BGV_KEY_CHECK: [u64; 8] = [1, 2, 3, 5, 8, 13, 21, 34];

fn foreign_or_crypto(e: RlweError) -> ProxyError {
    match e {
        RlweError::Decode(DecodeError::ParameterHash) => ProxyError::ForeignParameters,
        RlweError::KeyMismatch { .. } => ProxyError::ForeignKey,
        e => crypto(e),
    }
}

impl Tenant {
    /// The keys of an unsealed CKKS or BGV folder, checked to be a pair.
    fn from_folder(folder: &UnsealedFolder) -> Result<Self> {
        let name = std::str::from_utf8(folder.require("preset")?)
            .map_err(|_| ProxyError::Unsupported("the preset file is not UTF-8".into()))?
            .trim()
            .to_string();
        if let Some(preset) = hecloud_bgv::Preset::from_name(&name) {
            return Self::bgv(folder, preset);
        }
        // A CKKS or bootstrappable preset, at the level its fresh
        // encryptions go (the client SDK's rule).
        if let Ok((params, level)) = hecloud_client::keys::ckks_params_named(&name) {
            return Self::ckks(folder, name, params, level);
        }
        Err(ProxyError::Unsupported(format!(
            "preset {name:?} is neither a CKKS preset ({}, {}) nor a BGV one ({}); TFHE folders are not held by the proxy yet",
            Preset::ALL.map(|p| p.name()).join(", "),
            BootPreset::ALL.map(|p| p.name()).join(", "),
            hecloud_bgv::Preset::ALL.map(|p| p.name()).join(", ")
        )))
    }

    /// A CKKS tenant (`preset` named by its folder) encrypting at `level`.
    fn ckks(
        folder: &UnsealedFolder,
        preset: String,
        params: Arc<CkksParameters>,
        level: usize,
    ) -> Result<Self> {
        let slots = match folder.get("session.spec") {
            Some(b) => SessionSpec::decode(b).map_err(crypto)?.sparse_slots(),
            None => None,
        };
        let encoder = match slots {
            Some(n) => Encoder::with_slots(&params, n).map_err(crypto)?,
            None => Encoder::new(&params),
        };
        let secret = folder.require("secret.key")?;
        let sk = || SecretKey::import_bytes(params.rlwe(), secret).map_err(crypto);
        let public_key =
            PublicKey::from_bytes(params.rlwe(), folder.require("public.key")?).map_err(crypto)?;
        // The server re-randomizes refreshes with the public key: it must
        // be the secret key's.
        let pt = encoder
            .encode_real(&[1.0], level, params.default_scale())
            .map_err(crypto)?;
        let t = Self {
            preset,
            responder: RefreshResponder::new().with_ckks(params.clone(), sk()?),
            keys: SchemeKeys::Ckks {
                secret_key: sk()?,
                encoder,
                level,
                params: params.clone(),
            },
        };
        let probe_ct = Encryptor::new(params.rlwe())
            .encrypt_pk(&public_key, &pt)
            .map_err(crypto)?;
        // Under another key the probe is refused as foreign (or, with a
        // forged key id, decrypts to noise, which decoding refuses): a
        // mismatch either way.
        let probe = t
            .decrypt(&probe_ct.to_bytes())
            .map_err(|_| mismatched_keys())?;
        let EnclaveReply::Reals(probe) = probe else {
            return Err(ProxyError::Crypto(
                "a CKKS tenant decrypted no reals".into(),
            ));
        };
        if (probe[0] - 1.0).abs() > KEY_CHECK_TOLERANCE {
            return Err(mismatched_keys());
        }
        Ok(t)
    }

    fn bgv(folder: &UnsealedFolder, preset: hecloud_bgv::Preset) -> Result<Self> {
        let params = preset.build().map_err(crypto)?;
        let sk = SecretKey::import_bytes(params.rlwe(), folder.require("secret.key")?)
            .map_err(crypto)?;
        let public_key =
            PublicKey::from_bytes(params.rlwe(), folder.require("public.key")?).map_err(crypto)?;
        let keys = Arc::new(hecloud_bgv::KeySet::for_key_holder(&params, sk).map_err(crypto)?);
        let encoder = hecloud_bgv::Encoder::new(&params);
        // The server re-randomizes refreshes with the folder's public key
        // (not the one the key set made): it must be the secret key's.
        let pt = encoder.encode(&BGV_KEY_CHECK).map_err(crypto)?;
        let probe_ct = hecloud_bgv::keys::encrypt_pk(&params, &public_key, &pt, params.max_level())
            .map_err(crypto)?;
        let t = Self {
            preset: preset.name().into(),
            responder: RefreshResponder::new().with_bgv(keys.clone()),
            keys: SchemeKeys::Bgv {
                params,
                encoder,
                keys,
            },
        };
        // Under another key the probe is refused as foreign (or decrypts
        // to other integers): a mismatch either way.
        let probe = t
            .decrypt(&probe_ct.to_bytes())
            .map_err(|_| mismatched_keys())?;
        let EnclaveReply::Ints(probe) = probe else {
            return Err(ProxyError::Crypto(
                "a BGV tenant decrypted no integers".into(),
            ));
        };
        if probe.get(..BGV_KEY_CHECK.len()) != Some(&BGV_KEY_CHECK[..]) {
            return Err(mismatched_keys());
        }
        Ok(t)
    }

    fn wrong_scheme(&self, tenant: &str, asked: &'static str) -> ProxyError {
        ProxyError::WrongScheme {
            tenant: tenant.into(),
            holds: self.keys.scheme(),
            asked,
        }
    }

    /// Encrypts `values` with the secret key, as the client's own best
    /// path does (less noise, and the uniform half travels as a seed: half
    /// the bytes to the server), a limb at a time: `begin` gets the
    /// ciphertext's length before any piece (its error stops the
    /// encryption), `piece` each piece in order (after its first error the
    /// rest go nowhere, and that error is returned).
    fn encrypt_pieces(
        &self,
        tenant: &str,
        values: &[f64],
        begin: impl FnOnce(u64) -> Result<()>,
        mut piece: impl FnMut(Vec<u8>) -> Result<()>,
    ) -> Result<u64> {
        let SchemeKeys::Ckks {
            params,
            encoder,
            level,
            secret_key,
        } = &self.keys
        else {
            return Err(self.wrong_scheme(tenant, SCHEME_CKKS));
        };
        let slots = encoder.slots();
        // An empty vector would still cost a whole encryption (and its
        // upload): a request of a few bytes could ask for many.
        if values.is_empty() || values.len() > slots {
            return Err(ProxyError::Crypto(format!(
                "{} values for {slots} slots (1 to {slots} accepted)",
                values.len()
            )));
        }
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(ProxyError::Crypto(format!("value {i} is not finite")));
        }
        // Encoded first: values the encoding refuses start no upload.
        let form = encoder
            .coefficients_real(values, *level, params.default_scale())
            .map_err(crypto)?;
        let len = params.rlwe().seeded_ciphertext_bytes(*level) as u64;
        begin(len)?;
        // The first error stops the pieces from going anywhere.
        let mut failed = Ok(());
        hecloud_ckks::keys::encrypt_coefficients_sk_pieces(
            params,
            secret_key,
            &form,
            *level,
            |p| {
                if failed.is_ok() {
                    failed = piece(p);
                }
            },
        )
        .map_err(crypto)?;
        failed.map(|()| len)
    }

    fn encrypt(&self, tenant: &str, values: &[f64]) -> Result<Vec<u8>> {
        let out = std::cell::RefCell::new(Vec::new());
        self.encrypt_pieces(
            tenant,
            values,
            |len| {
                out.borrow_mut().reserve_exact(len as usize);
                Ok(())
            },
            |p| {
                out.borrow_mut().extend_from_slice(&p);
                Ok(())
            },
        )?;
        Ok(out.into_inner())
    }

    fn encrypt_streamed(&self, tenant: &str, values: &[f64], to: &StreamTo) -> Result<u64> {
        let writer = std::cell::RefCell::new(None);
        self.encrypt_pieces(
            tenant,
            values,
            |len| {
                let (object, w) = GrowingObject::new(len);
                *writer.borrow_mut() = Some(w);
                to.hand(object)
            },
            |p| match writer.borrow_mut().as_mut() {
                Some(w) => w.push(p).map_err(crypto),
                None => Err(ProxyError::Crypto("a piece before the object".into())),
            },
        )
    }

    fn encrypt_ints(&self, tenant: &str, values: &[u64]) -> Result<Vec<u8>> {
        let SchemeKeys::Bgv {
            params,
            encoder,
            keys,
        } = &self.keys
        else {
            return Err(self.wrong_scheme(tenant, SCHEME_BGV));
        };
        let (n, t) = (params.n(), params.t());
        if values.is_empty() || values.len() > n {
            return Err(ProxyError::Crypto(format!(
                "{} values for {n} slots (1 to {n} accepted)",
                values.len()
            )));
        }
        // Checked here so that the message names the index, never the
        // value (the encoder's own error would carry it).
        if let Some(i) = values.iter().position(|&v| v >= t) {
            return Err(ProxyError::Crypto(format!(
                "value {i} is not below the plaintext modulus t = {t}"
            )));
        }
        let pt = encoder.encode(values).map_err(crypto)?;
        Ok(keys
            .encrypt_sk(&pt, params.max_level())
            .map_err(crypto)?
            .to_bytes())
    }

    fn decrypt(&self, bytes: &[u8]) -> Result<EnclaveReply> {
        match &self.keys {
            SchemeKeys::Ckks {
                params,
                encoder,
                secret_key,
                ..
            } => {
                let ct = Ciphertext::from_bytes(params.rlwe(), bytes).map_err(foreign_or_crypto)?;
                hecloud_ckks::keys::decrypt_decode_real(params, secret_key, encoder, &ct)
                    .map(|v| EnclaveReply::Reals(Zeroizing::new(v)))
                    .map_err(|e| match e {
                        hecloud_ckks::CkksError::Rlwe(e) => foreign_or_crypto(e),
                        e => crypto(e),
                    })
            }
            SchemeKeys::Bgv {
                params,
                encoder,
                keys,
            } => {
                let ct = Ciphertext::from_bytes(params.rlwe(), bytes).map_err(foreign_or_crypto)?;
                // The plaintext zeroizes itself on drop.
                let pt = keys.decrypt(&ct).map_err(|e| match e {
                    hecloud_bgv::BgvError::Rlwe(e) => foreign_or_crypto(e),
                    e => crypto(e),
                })?;
                encoder
                    .decode(&pt)
                    .map(|v| EnclaveReply::Ints(Zeroizing::new(v)))
                    .map_err(crypto)
            }
        }
    }
}

fn mismatched_keys() -> ProxyError {
    ProxyError::Unsupported("the folder's public key does not belong to its secret key".into())
}

/// The plain-process enclave: no TEE, sealing key from a key file,
/// [`Attestation::Unattested`]. See the module doc for what it protects.
pub struct PlainEnclave {
    key: SealingKey,
    tenants: RwLock<HashMap<String, Tenant>>,
    crossings: AtomicU64,
}

impl std::fmt::Debug for PlainEnclave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut tenants: Vec<(String, String)> = self
            .tenants
            .read()
            .map(|t| {
                t.iter()
                    .map(|(n, t)| (n.clone(), t.preset.clone()))
                    .collect()
            })
            .unwrap_or_default();
        tenants.sort();
        f.debug_struct("PlainEnclave")
            .field("tenants", &tenants)
            .field("crossings", &self.crossings())
            .finish_non_exhaustive()
    }
}

impl PlainEnclave {
    /// An enclave sealing under `key`.
    pub fn new(key: SealingKey) -> Self {
        Self {
            key,
            tenants: RwLock::new(HashMap::new()),
            crossings: AtomicU64::new(0),
        }
    }

    /// An enclave with its sealing key read from a key file
    /// ([`SealingKey::from_file`]).
    pub fn from_key_file(path: &Path) -> Result<Self> {
        Ok(Self::new(SealingKey::from_file(path)?))
    }

    /// The names of the loaded tenants, sorted.
    pub fn tenants(&self) -> Vec<String> {
        let mut v: Vec<String> = self.read().keys().cloned().collect();
        v.sort();
        v
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Tenant>> {
        // A panic while holding the lock cannot leave a tenant half
        // inserted: the map is only changed by single insert/remove calls.
        self.tenants.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Tenant>> {
        self.tenants.write().unwrap_or_else(|e| e.into_inner())
    }

    fn with_tenant<T>(&self, tenant: &str, f: impl FnOnce(&Tenant) -> Result<T>) -> Result<T> {
        let map = self.read();
        let t = map
            .get(tenant)
            .ok_or_else(|| ProxyError::UnknownTenant(tenant.into()))?;
        f(t)
    }

    fn run(&self, op: EnclaveOp) -> Result<EnclaveReply> {
        check_name("tenant", op.tenant())?;
        match op {
            EnclaveOp::LoadTenant { tenant, folder } => {
                if folder.tenant() != tenant {
                    return Err(ProxyError::WrongTenant(tenant));
                }
                let unsealed = folder.unseal(&self.key)?;
                let t = Tenant::from_folder(&unsealed)?;
                drop(unsealed);
                let preset = t.preset.clone();
                self.write().insert(tenant, t);
                Ok(EnclaveReply::Loaded { preset })
            }
            EnclaveOp::UnloadTenant { tenant } => Ok(EnclaveReply::Unloaded(
                self.write().remove(&tenant).is_some(),
            )),
            EnclaveOp::SealFolder { tenant, files } => {
                for required in REQUIRED_FILES {
                    if !files.contains_key(required) {
                        return Err(ProxyError::MissingFile {
                            tenant,
                            file: required.into(),
                        });
                    }
                }
                SealedFolder::seal(
                    &self.key,
                    &tenant,
                    files.iter().map(|(n, b)| (n.as_str(), b.as_slice())),
                )
                .map(EnclaveReply::Sealed)
            }
            EnclaveOp::PublicFiles { tenant, folder } => {
                if folder.tenant() != tenant {
                    return Err(ProxyError::WrongTenant(tenant));
                }
                // Only the public files are unsealed: the secret key is not
                // even decrypted for this operation.
                let public = folder.only(is_public_file);
                let unsealed = public.unseal(&self.key)?;
                Ok(EnclaveReply::PublicFiles(
                    unsealed
                        .names()
                        .map(|n| (n.to_string(), unsealed.get(n).unwrap_or_default().to_vec()))
                        .collect(),
                ))
            }
            EnclaveOp::EncryptReal { tenant, values } => self
                .with_tenant(&tenant, |t| t.encrypt(&tenant, &values))
                .map(EnclaveReply::Ciphertext),
            EnclaveOp::EncryptRealStreamed { tenant, values, to } => self
                .with_tenant(&tenant, |t| t.encrypt_streamed(&tenant, &values, &to))
                .map(EnclaveReply::Streamed),
            EnclaveOp::EncryptInts { tenant, values } => self
                .with_tenant(&tenant, |t| t.encrypt_ints(&tenant, &values))
                .map(EnclaveReply::Ciphertext),
            EnclaveOp::Decrypt { tenant, ciphertext } => {
                self.with_tenant(&tenant, |t| t.decrypt(&ciphertext))
            }
            EnclaveOp::AnswerRefresh { tenant, request } => self
                .with_tenant(&tenant, |t| Ok(t.responder.answer(&request)?))
                .map(EnclaveReply::RefreshReply),
        }
    }
}

impl Enclave for PlainEnclave {
    fn call(&self, batch: Vec<EnclaveOp>) -> Result<Vec<EnclaveReply>> {
        use rayon::prelude::*;
        self.crossings.fetch_add(1, Ordering::Relaxed);
        let run = |(index, op)| {
            self.run(op).map_err(|e| ProxyError::InBatch {
                index,
                source: Box::new(e),
            })
        };
        // Encryptions and decryptions read the tenants only: a request's
        // inputs are encrypted side by side. Anything else runs in order
        // (a load must come before the operations that need it).
        let independent = batch.iter().all(|op| {
            matches!(
                op,
                EnclaveOp::EncryptReal { .. }
                    | EnclaveOp::EncryptRealStreamed { .. }
                    | EnclaveOp::EncryptInts { .. }
                    | EnclaveOp::Decrypt { .. }
            )
        });
        if independent && batch.len() > 1 {
            batch.into_par_iter().enumerate().map(run).collect()
        } else {
            batch.into_iter().enumerate().map(run).collect()
        }
    }

    fn crossings(&self) -> u64 {
        self.crossings.load(Ordering::Relaxed)
    }

    fn attestation(&self, _report_data: &[u8; REPORT_DATA_LEN]) -> Result<Attestation> {
        Ok(Attestation::Unattested)
    }
}
