//! Key files of a key holder.
//!
//! [`keygen`] writes a CKKS folder:
//!
//! | file | content | leaves the client? |
//! | --- | --- | --- |
//! | `secret.key` | the secret key (mode 0600) | never |
//! | `public.key` | the public key (encryption; the server re-randomizes refreshes with it) | uploaded |
//! | `relin.key`, `galois-<g>.key` | evaluation keys | uploaded |
//! | `session.spec` | the session spec naming them (and the public key in its refresh part) | uploaded |
//! | `preset` | the parameter preset name | — |
//!
//! [`boot_keygen`] writes a bootstrappable CKKS folder: the same files, the
//! Galois keys of the bootstrapping circuit, and `encaps-down.key`,
//! `encaps-up.key` (the encapsulation keys, uploaded), its `preset`
//! holding a bootstrappable preset name (`boot-n16`, `boot-test-n12`).
//!
//! [`bgv_keygen`] writes a BGV folder of the same files (the kinds
//! `bgv.relin_key`, `bgv.galois_key`), its `preset` holding a BGV preset
//! name (`bgv-n13` … `bgv-n16`).
//!
//! [`tfhe_keygen`] writes a TFHE folder: `secret.key` (the TFHE-rs client
//! key, 0600), `server.key` (uploaded), `session.spec` (uploaded) and
//! `preset` holding [`TFHE_PRESET`].
//!
//! The secret key is held in [`zeroize::Zeroizing`] buffers while read or
//! written, and the rlwe `SecretKey` zeroizes itself on drop.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hecloud_circuits::{BitEngine, EncryptedUint, TFHE_PARAMS, TfheEngine};
use hecloud_ckks::boot::{BootPreset, BootstrapLiteral, Bootstrapper, EncapsulationKeys};
use hecloud_ckks::refresh::MaskPolicy;
use hecloud_ckks::{CkksParameters, Encoder, KeySet, Preset};
use hecloud_protocol::fs::write_private;
use hecloud_protocol::object::{tfhe_key_id, tfhe_kind, unversion, versioned_bytes};
use hecloud_protocol::{
    BootstrapSpec, CkksParamSpec, Message, Object, ObjectId, ObjectKind, ParamSpec, RefreshSpec,
    SessionParams, SessionSpec, TfheParamSpec, rpc,
};
use hecloud_rlwe::{Ciphertext, Encryptor, KeyId, PublicKey, SecretKey};
use num_bigint::BigUint;

use crate::{ClientError, Result};

fn crypto<E: std::fmt::Display>(e: E) -> ClientError {
    ClientError::Crypto(e.to_string())
}

/// The one of `all` whose `name_of` is `name`; refused naming every known
/// one (`what`: the kind of preset, for the message).
fn named<P: Copy, const K: usize>(
    all: [P; K],
    name_of: fn(P) -> &'static str,
    name: &str,
    what: &str,
) -> Result<P> {
    all.into_iter()
        .find(|&p| name_of(p) == name)
        .ok_or_else(|| {
            ClientError::Invalid(format!(
                "unknown {what} {name:?} (known: {})",
                all.map(name_of).join(", ")
            ))
        })
}

/// Parses a preset name (`n13` … `n17`).
pub fn parse_preset(name: &str) -> Result<Preset> {
    named(Preset::ALL, Preset::name, name, "preset")
}

/// Parses a bootstrappable preset name (`boot-n16`, `boot-test-n12`).
pub fn parse_boot_preset(name: &str) -> Result<BootPreset> {
    named(
        BootPreset::ALL,
        BootPreset::name,
        name,
        "bootstrappable preset",
    )
}

/// The CKKS parameters a folder's preset name stands for, a CKKS preset
/// (`n13` … `n17`) or a bootstrappable one (`boot-…`), and the level
/// fresh encryptions go at (the top, or the bootstrapping's output level).
pub fn ckks_params_named(name: &str) -> Result<(Arc<CkksParameters>, usize)> {
    if name.starts_with("boot-") {
        let preset = parse_boot_preset(name)?;
        Ok((preset.params().map_err(crypto)?, preset.output_level()))
    } else {
        let params = parse_preset(name)?.build().map_err(crypto)?;
        let top = params.max_level();
        Ok((params, top))
    }
}

/// What `keygen` wrote.
#[derive(Debug)]
pub struct KeygenReport {
    /// Files written with their sizes.
    pub files: Vec<(PathBuf, u64)>,
    /// The session id.
    pub session: ObjectId,
}

/// A bootstrappable folder's choices ([`boot_keygen`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BootOptions {
    /// Where a job runs out of levels, the server bootstraps even when
    /// the folder's key holder could refresh.
    pub prefer_over_refresh: bool,
    /// Slots of the ciphertexts bootstrapped (a power of two from 2 to
    /// N/4); `None` (or N/2): full slots.
    pub slots: Option<usize>,
}

/// How the server is to mask this folder's ciphertexts when it asks the
/// key holder for a refresh (`docs/refresh.md`); written into the session
/// spec, so the server applies it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshOptions {
    /// Statistical hiding of the CKKS mask in bits (at least
    /// [`MaskPolicy::MIN_LAMBDA_S`]); `None` for the default, 64.
    pub lambda_s: Option<u32>,
    /// Circuit privacy: the server floods the noise before masking
    /// ([`MaskPolicy::circuit_private`], for BGV
    /// [`BgvMaskPolicy::circuit_private`](hecloud_circuits::packed::BgvMaskPolicy::circuit_private)).
    /// It costs CKKS precision and a BGV level per refresh.
    pub circuit_private: bool,
}

impl RefreshOptions {
    /// The session's refresh part with these options; `flood_bits` is the
    /// width flooding would use.
    fn spec(&self, flood_bits: Option<u32>) -> Result<RefreshSpec> {
        let lambda_s = self.lambda_s.unwrap_or(MaskPolicy::DEFAULT_LAMBDA_S);
        MaskPolicy {
            lambda_s,
            ..MaskPolicy::default()
        }
        .validate()
        .map_err(crypto)?;
        Ok(RefreshSpec {
            lambda_s,
            flood_bits: flood_bits.filter(|_| self.circuit_private).unwrap_or(0),
            ..RefreshSpec::default()
        })
    }
}

/// Generates keys for `preset` with Galois keys for `rotations` and writes
/// them to `dir` (created; existing key files are not overwritten).
pub fn keygen(dir: &Path, preset: Preset, rotations: &[i64]) -> Result<KeygenReport> {
    keygen_with(dir, preset, rotations, &RefreshOptions::default())
}

/// [`keygen`] with the refresh masking of `refresh`.
pub fn keygen_with(
    dir: &Path,
    preset: Preset,
    rotations: &[i64],
    refresh: &RefreshOptions,
) -> Result<KeygenReport> {
    refuse_overwrite(dir)?;
    let params = preset.build().map_err(crypto)?;
    let refresh = refresh.spec(MaskPolicy::circuit_private(&params).flood_bits)?;
    std::fs::create_dir_all(dir)?;
    let mut keys = KeySet::generate(&params, rotations, false).map_err(crypto)?;
    let mut folder = KeyFolder { dir, files: vec![] };
    let spec = folder.put_ckks_keys(&mut keys, CkksParamSpec::Preset(preset), refresh)?;
    folder.finish(&spec, preset.name())
}

/// Generates a bootstrappable folder for `preset` ([`BootPreset`]): the
/// files [`keygen`] writes, with Galois keys for the bootstrapping
/// circuit's rotations and the conjugation besides `rotations`, and the
/// encapsulation keys of a fresh ephemeral sparse secret
/// (`encaps-down.key` over q₀·P, `encaps-up.key`; kind
/// `ckks.switching_key`). The session spec's bootstrapping part names the
/// circuit and those keys; its refresh part stays, so a key holder can
/// still refresh unless `prefer_bootstrap` says the planner bootstraps
/// anyway. At N = 2^16 this is about 2.7 GiB of keys to upload (the
/// rotation keys cut to the levels the circuit uses them at).
///
/// With `options.slots`, the circuit bootstraps ciphertexts of that many
/// slots (sparse packing: a power of two from 2 to N/4, fewer rotations in
/// the DFTs, one EvalMod for the real and imaginary parts); [`KeyDir`]
/// then encodes and decodes that many slots.
pub fn boot_keygen(
    dir: &Path,
    preset: BootPreset,
    rotations: &[i64],
    refresh: &RefreshOptions,
    options: &BootOptions,
) -> Result<KeygenReport> {
    refuse_overwrite(dir)?;
    let params = preset.params().map_err(crypto)?;
    let circuit = BootstrapLiteral {
        slots: options.slots.filter(|&n| n != params.slots()),
        ..preset.literal().2
    };
    let boot = Bootstrapper::new(&params, circuit).map_err(crypto)?;
    let refresh = refresh.spec(MaskPolicy::circuit_private(&params).flood_bits)?;
    // The circuit's keys cut to the levels it uses them at; the caller's
    // extra rotations whole.
    let mut rots = boot.rotation_levels();
    rots.extend(rotations.iter().map(|&k| (k, params.max_level())));
    std::fs::create_dir_all(dir)?;
    let mut keys = KeySet::generate_at_levels(&params, &rots, true).map_err(crypto)?;
    let encapsulation = match circuit.ephemeral_hamming {
        Some(h) => {
            Some(EncapsulationKeys::generate(&params, keys.secret_key(), h).map_err(crypto)?)
        }
        None => None,
    };
    let mut folder = KeyFolder { dir, files: vec![] };
    let (literal, log_scale, _) = preset.literal();
    let ckks = CkksParamSpec::from_literal(&literal, log_scale);
    let mut spec = folder.put_ckks_keys(&mut keys, ckks, refresh)?;
    let (to_sparse_key, from_sparse_key) = match &encapsulation {
        Some(e) => {
            let [down, up] = e.key_bytes(true);
            folder.put("encaps-down.key", &down, false)?;
            folder.put("encaps-up.key", &up, false)?;
            (Some(ObjectId::of(&down)), Some(ObjectId::of(&up)))
        }
        None => (None, None),
    };
    spec.bootstrap = Some(BootstrapSpec {
        circuit,
        to_sparse_key,
        from_sparse_key,
        prefer_over_refresh: options.prefer_over_refresh,
    });
    folder.finish(&spec, preset.name())
}

/// A key folder being written: every file and its size, for the report.
struct KeyFolder<'a> {
    dir: &'a Path,
    files: Vec<(PathBuf, u64)>,
}

impl KeyFolder<'_> {
    fn put(&mut self, name: &str, bytes: &[u8], private: bool) -> Result<()> {
        let p = self.dir.join(name);
        if private {
            write_private(&p, bytes)?;
        } else {
            std::fs::write(&p, bytes)?;
        }
        self.files.push((p, bytes.len() as u64));
        Ok(())
    }

    /// Writes what every CKKS folder holds: the secret key (0600), the
    /// public key and the evaluation keys of `keys` (moved out of it, not
    /// copied: gigabytes at N = 2^16). Returns the session spec naming them,
    /// over `ckks`, with the public key in its refresh part.
    fn put_ckks_keys(
        &mut self,
        keys: &mut KeySet,
        ckks: CkksParamSpec,
        refresh: RefreshSpec,
    ) -> Result<SessionSpec> {
        self.put("secret.key", &keys.secret_key().export_bytes(), true)?;
        let pk = self.put_public_key(keys.public_key())?;
        let ev = keys.take_evaluation_keys();
        let (relin_key, galois_keys) = self.put_evaluation_keys(ev.relin.as_ref(), &ev.galois)?;
        Ok(SessionSpec {
            params: ParamSpec {
                ckks: Some(ckks),
                tfhe: None,
            },
            relin_key,
            galois_keys,
            refresh: Some(RefreshSpec {
                ckks_public_key: Some(pk),
                ..refresh
            }),
            ..SessionSpec::default()
        })
    }

    /// Writes the public key; its id for the session's refresh part.
    fn put_public_key(&mut self, pk: &PublicKey) -> Result<ObjectId> {
        let b = pk.to_bytes();
        self.put("public.key", &b, false)?;
        Ok(ObjectId::of(&b))
    }

    /// Writes the relinearization and Galois keys (seeded form); their ids
    /// for the session spec.
    fn put_evaluation_keys(
        &mut self,
        relin: Option<&hecloud_rlwe::RelinearizationKey>,
        galois: &hecloud_rlwe::GaloisKeys,
    ) -> Result<(Option<ObjectId>, Vec<ObjectId>)> {
        let relin_id = match relin {
            Some(r) => {
                let b = r.to_bytes(true);
                self.put("relin.key", &b, false)?;
                Some(ObjectId::of(&b))
            }
            None => None,
        };
        let mut els: Vec<usize> = galois.elements().collect();
        els.sort();
        let mut galois_ids = Vec::with_capacity(els.len());
        for g in els {
            let b = galois.get(g).map_err(crypto)?.to_bytes(true);
            galois_ids.push(ObjectId::of(&b));
            self.put(&format!("galois-{g}.key"), &b, false)?;
        }
        Ok((relin_id, galois_ids))
    }

    /// Writes the session spec and the preset's name.
    fn finish(mut self, spec: &SessionSpec, preset: &str) -> Result<KeygenReport> {
        self.put("session.spec", &spec.encode(), false)?;
        self.put("preset", preset.as_bytes(), false)?;
        Ok(KeygenReport {
            files: self.files,
            session: spec.id(),
        })
    }
}

/// A key folder opened for encryption and decryption.
pub struct KeyDir {
    /// The parameters.
    pub params: Arc<CkksParameters>,
    /// The level [`Self::encrypt`] encrypts at: the top, or in a
    /// bootstrappable folder the level bootstrapping leaves.
    pub encrypt_level: usize,
    /// The slots [`Self::encrypt`] encodes and [`Self::decrypt`] decodes:
    /// N/2, or a sparse bootstrappable folder's.
    pub slots: usize,
    dir: PathBuf,
}

impl std::fmt::Debug for KeyDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyDir")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl KeyDir {
    /// Opens a folder written by [`keygen`].
    pub fn open(dir: &Path) -> Result<Self> {
        let name = std::fs::read_to_string(dir.join("preset"))?;
        let (params, encrypt_level) = ckks_params_named(name.trim())?;
        // A sparse bootstrapping circuit packs its ciphertexts sparsely.
        let spec =
            SessionSpec::decode(&std::fs::read(dir.join("session.spec"))?).map_err(crypto)?;
        let slots = spec.sparse_slots().unwrap_or(params.slots());
        Ok(Self {
            params,
            encrypt_level,
            slots,
            dir: dir.to_path_buf(),
        })
    }

    /// The evaluation-key files and the session spec, in upload order
    /// (keys first, the session last), with their upload kinds.
    pub fn uploads(&self) -> Result<Vec<(PathBuf, &'static str)>> {
        folder_uploads(
            &self.dir,
            [
                ObjectKind::CkksRelinKey,
                ObjectKind::CkksGaloisKey,
                ObjectKind::CkksPublicKey,
            ],
        )
    }

    /// A key holder answering this folder's refresh requests (the secret
    /// key read now, held in memory until the responder is dropped).
    pub fn refresh_responder(&self) -> Result<hecloud_protocol::refresh::RefreshResponder> {
        let raw = zeroize::Zeroizing::new(std::fs::read(self.dir.join("secret.key"))?);
        let sk = SecretKey::import_bytes(self.params.rlwe(), &raw).map_err(crypto)?;
        Ok(hecloud_protocol::refresh::RefreshResponder::new().with_ckks(self.params.clone(), sk))
    }

    /// The session id.
    pub fn session(&self) -> Result<ObjectId> {
        session_of(&self.dir)
    }

    /// The encoder of [`Self::slots`] slots.
    fn encoder(&self) -> Result<Encoder> {
        Encoder::with_slots(&self.params, self.slots).map_err(crypto)
    }

    /// Encrypts reals ([`Self::slots`] of them, zero padded) with the
    /// public key, at [`Self::encrypt_level`].
    pub fn encrypt(&self, values: &[f64]) -> Result<Vec<u8>> {
        let pk = PublicKey::from_bytes(
            self.params.rlwe(),
            &std::fs::read(self.dir.join("public.key"))?,
        )
        .map_err(crypto)?;
        let pt = self
            .encoder()?
            .encode_real(values, self.encrypt_level, self.params.default_scale())
            .map_err(crypto)?;
        Ok(Encryptor::new(self.params.rlwe())
            .encrypt_pk(&pk, &pt)
            .map_err(crypto)?
            .to_bytes())
    }

    /// Decrypts a ciphertext payload with the secret key.
    pub fn decrypt(&self, bytes: &[u8]) -> Result<Vec<f64>> {
        let raw = zeroize::Zeroizing::new(std::fs::read(self.dir.join("secret.key"))?);
        let sk = SecretKey::import_bytes(self.params.rlwe(), &raw).map_err(crypto)?;
        drop(raw);
        let ct = Ciphertext::from_bytes(self.params.rlwe(), bytes).map_err(crypto)?;
        hecloud_ckks::keys::decrypt_decode_real(&self.params, &sk, &self.encoder()?, &ct)
            .map_err(crypto)
    }
}

/// A key folder's uploads in order, with their kinds (`[relin, galois,
/// public]` of its scheme): the relinearization key, the Galois keys, the
/// public key when the session's refresh part names it (folders written
/// before sessions had one leave it out), the session spec last.
fn folder_uploads(dir: &Path, kinds: [ObjectKind; 3]) -> Result<Vec<(PathBuf, &'static str)>> {
    let names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    let spec = SessionSpec::decode(&std::fs::read(dir.join("session.spec"))?).map_err(crypto)?;
    Ok(
        uploads_in_order(names.iter().map(String::as_str), &spec, kinds)
            .into_iter()
            .map(|(n, kind)| (dir.join(n), kind))
            .collect(),
    )
}

/// The upload kinds (`[relin, galois, public]`) of a key folder's
/// evaluation and public keys under `spec`: the BGV kinds when the
/// session is a BGV one, the CKKS kinds otherwise.
pub fn key_kinds(spec: &SessionSpec) -> [ObjectKind; 3] {
    if spec.bgv.is_some() {
        [
            ObjectKind::BgvRelinKey,
            ObjectKind::BgvGaloisKey,
            ObjectKind::BgvPublicKey,
        ]
    } else {
        [
            ObjectKind::CkksRelinKey,
            ObjectKind::CkksGaloisKey,
            ObjectKind::CkksPublicKey,
        ]
    }
}

/// Which of a key folder's files (`names`) a key holder uploads for the
/// session `spec`, in upload order, with their kinds (`kinds`: `[relin,
/// galois, public]` of its scheme, see [`key_kinds`]): `relin.key`, the
/// `galois-<g>.key` files (sorted by name), the encapsulation keys of a
/// bootstrappable folder (each of these when `names` holds it), then
/// `public.key` when the session's refresh part names a public key, and
/// `session.spec` last (these two whether or not `names` holds them: the
/// session needs them). Never `secret.key`. For a folder held in memory
/// (the encryption proxy's) as for one on disk.
pub fn uploads_in_order<'a>(
    names: impl IntoIterator<Item = &'a str>,
    spec: &SessionSpec,
    kinds: [ObjectKind; 3],
) -> Vec<(&'a str, &'static str)> {
    let [relin, galois, public] = kinds.map(rpc::object_kind_name);
    let names: Vec<&str> = names.into_iter().collect();
    let mut v = vec![];
    let mut gal: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.starts_with("galois-") && n.ends_with(".key"))
        .collect();
    gal.sort();
    if let Some(n) = names.iter().copied().find(|&n| n == "relin.key") {
        v.push((n, relin));
    }
    v.extend(gal.into_iter().map(|n| (n, galois)));
    for name in ["encaps-down.key", "encaps-up.key"] {
        if let Some(n) = names.iter().copied().find(|&n| n == name) {
            v.push((n, rpc::object_kind_name(ObjectKind::CkksSwitchingKey)));
        }
    }
    if spec
        .refresh
        .as_ref()
        .is_some_and(|r| r.ckks_public_key.is_some() || r.bgv_public_key.is_some())
    {
        v.push(("public.key", public));
    }
    v.push(("session.spec", rpc::SESSION_KIND));
    v
}

/// The id of the session spec in a key folder (CKKS or TFHE), without
/// opening its keys.
pub fn session_of(dir: &Path) -> Result<ObjectId> {
    let b = std::fs::read(dir.join("session.spec"))?;
    Ok(SessionSpec::decode(&b).map_err(crypto)?.id())
}

/// The session spec of a TFHE key holder whose server key has id `server_key`.
pub fn tfhe_session_spec(server_key: ObjectId) -> SessionSpec {
    SessionSpec {
        params: ParamSpec {
            ckks: None,
            tfhe: Some(TfheParamSpec::Message2Carry2),
        },
        tfhe_server_key: Some(server_key),
        ..SessionSpec::default()
    }
}

/// The `preset` of a TFHE key folder.
pub const TFHE_PRESET: &str = "tfhe";

/// Whether `dir` is a TFHE key folder (its `preset` file says [`TFHE_PRESET`]).
pub fn is_tfhe_dir(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("preset")).is_ok_and(|p| p.trim() == TFHE_PRESET)
}

fn refuse_overwrite(dir: &Path) -> Result<()> {
    if dir.join("secret.key").exists() {
        return Err(ClientError::Invalid(format!(
            "{} already holds a secret key; refusing to overwrite it",
            dir.display()
        )));
    }
    Ok(())
}

/// Largest TFHE client key file read (the key itself takes a few KiB).
const MAX_TFHE_CLIENT_KEY_BYTES: u64 = 1 << 20;

/// Generates TFHE keys ([`TFHE_PARAMS`]) into `dir` (created; an existing
/// secret key is not overwritten).
pub fn tfhe_keygen(dir: &Path) -> Result<KeygenReport> {
    refuse_overwrite(dir)?;
    std::fs::create_dir_all(dir)?;
    let (ck, sk) = tfhe::shortint::gen_keys(TFHE_PARAMS);
    let secret = zeroize::Zeroizing::new(versioned_bytes(&ck).map_err(crypto)?);
    let server = Object::TfheServerKey(Box::new(sk), tfhe_key_id(&ck).map_err(crypto)?).to_bytes();
    let spec = tfhe_session_spec(ObjectId::of(&server));
    let mut files = vec![];
    for (name, bytes, private) in [
        ("secret.key", &secret[..], true),
        ("server.key", &server[..], false),
        ("session.spec", &spec.encode()[..], false),
        ("preset", TFHE_PRESET.as_bytes(), false),
    ] {
        let p = dir.join(name);
        if private {
            write_private(&p, bytes)?;
        } else {
            std::fs::write(&p, bytes)?;
        }
        files.push((p, bytes.len() as u64));
    }
    Ok(KeygenReport {
        files,
        session: spec.id(),
    })
}

/// The files of a TFHE key folder to upload (server key, then session
/// spec), with their kinds; the secret key is not read.
pub fn tfhe_uploads(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    vec![
        (
            dir.join("server.key"),
            rpc::object_kind_name(ObjectKind::TfheServerKey),
        ),
        (dir.join("session.spec"), rpc::SESSION_KIND),
    ]
}

/// A TFHE key folder opened for encryption and decryption of integers.
pub struct TfheKeyDir {
    dir: PathBuf,
    client: tfhe::shortint::ClientKey,
    /// The client key's id, which its objects carry.
    key: KeyId,
    engine: std::sync::OnceLock<TfheEngine>,
}

impl std::fmt::Debug for TfheKeyDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TfheKeyDir")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl TfheKeyDir {
    /// Opens a folder written by [`tfhe_keygen`], reading its client key.
    pub fn open(dir: &Path) -> Result<Self> {
        if !is_tfhe_dir(dir) {
            return Err(ClientError::Invalid(format!(
                "{} is not a TFHE key folder",
                dir.display()
            )));
        }
        let raw = zeroize::Zeroizing::new(std::fs::read(dir.join("secret.key"))?);
        if raw.len() as u64 > MAX_TFHE_CLIENT_KEY_BYTES {
            return Err(ClientError::Crypto(format!(
                "secret.key: {} bytes, more than a TFHE client key takes",
                raw.len()
            )));
        }
        let client: tfhe::shortint::ClientKey =
            unversion(&raw).map_err(|e| ClientError::Crypto(format!("secret.key: {e}")))?;
        if client.parameters() != TFHE_PARAMS.into() {
            return Err(ClientError::Crypto(
                "secret.key: not a key of the TFHE parameter set hecloud uses".into(),
            ));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            key: tfhe_key_id(&client).map_err(crypto)?,
            client,
            engine: std::sync::OnceLock::new(),
        })
    }

    /// The session id.
    pub fn session(&self) -> Result<ObjectId> {
        session_of(&self.dir)
    }

    /// An engine on the folder's keys, made once (the server key is read
    /// too: the engine needs one, though encryption and decryption only use
    /// the client key).
    fn engine(&self) -> Result<&TfheEngine> {
        if let Some(e) = self.engine.get() {
            return Ok(e);
        }
        let bytes = std::fs::read(self.dir.join("server.key"))?;
        let sk = match tfhe_params()
            .decode(ObjectKind::TfheServerKey, &bytes)
            .map_err(|e| ClientError::Crypto(format!("server.key: {e}")))?
        {
            Object::TfheServerKey(sk, key) if key == self.key => *sk,
            Object::TfheServerKey(..) => {
                return Err(ClientError::Crypto(
                    "server.key: made from another client key than secret.key".into(),
                ));
            }
            _ => {
                return Err(ClientError::Crypto(
                    "server.key: not a TFHE server key".into(),
                ));
            }
        };
        Ok(self
            .engine
            .get_or_init(|| TfheEngine::from_keys(Some(self.client.clone()), sk)))
    }

    /// Encrypts `value` as a `width`-bit integer (an object of kind
    /// `tfhe.uint`).
    pub fn encrypt(&self, value: &BigUint, width: usize) -> Result<Vec<u8>> {
        if value.bits() > width as u64 {
            // The size, never the plaintext itself (errors get logged).
            return Err(ClientError::Invalid(format!(
                "a value of {} bits does not fit in {width} bits",
                value.bits()
            )));
        }
        let u = EncryptedUint::encrypt_biguint(self.engine()?, value, width).map_err(crypto)?;
        Ok(Object::TfheUint(u, self.key).to_bytes())
    }

    /// Decrypts a `tfhe.uint` or `tfhe.bit` object: the integer, or 0/1.
    pub fn decrypt(&self, bytes: &[u8]) -> Result<BigUint> {
        let kind = tfhe_kind(bytes)
            .ok_or_else(|| ClientError::Invalid("not a TFHE integer or bit object".into()))?;
        let obj = tfhe_params().decode(kind, bytes).map_err(crypto)?;
        // Checked before the engine reads the server key (115 MiB).
        if let Object::TfheUint(_, key) | Object::TfheBit(_, key) = &obj {
            self.key.check(*key).map_err(|_| {
                ClientError::Crypto(format!(
                    "the object is under TFHE key {key}, this folder's key is {}",
                    self.key
                ))
            })?;
        }
        let e = self.engine()?;
        match obj {
            Object::TfheUint(u, _) => u.decrypt_biguint(e).map_err(crypto),
            Object::TfheBit(b, _) => {
                Ok(BigUint::from(u8::from(e.decrypt_bit(&b).map_err(crypto)?)))
            }
            _ => Err(ClientError::Invalid(
                "not a TFHE integer or bit object".into(),
            )),
        }
    }
}

/// The parameters of a TFHE key holder's session (to decode its objects).
pub fn tfhe_params() -> SessionParams {
    SessionParams {
        ckks: None,
        tfhe: Some(TfheParamSpec::Message2Carry2),
        bgv: None,
    }
}

/// Whether `dir` is a BGV key folder (its `preset` names a BGV preset).
pub fn is_bgv_dir(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("preset"))
        .is_ok_and(|p| hecloud_bgv::Preset::from_name(p.trim()).is_some())
}

/// Parses a BGV preset name (`bgv-n13` … `bgv-n16`).
pub fn parse_bgv_preset(name: &str) -> Result<hecloud_bgv::Preset> {
    named(
        hecloud_bgv::Preset::ALL,
        hecloud_bgv::Preset::name,
        name,
        "BGV preset",
    )
}

/// Generates BGV keys for `preset` into `dir` (created; an existing secret
/// key is not overwritten): secret (0600), public and relinearization keys,
/// with `slot_sums` the Galois keys of the row rotations left by powers of
/// two and of the column swap (what a slot sum needs; log2(N) keys, each
/// about as large as the relinearization key), and with `bits_in_slots`
/// those of the row rotations right by powers of two
/// ([`hecloud_circuits::packed::slot_rotations`]: what the packed-bit
/// operations `bgv-bits-…` need; log2(N) − 1 keys).
pub fn bgv_keygen(
    dir: &Path,
    preset: hecloud_bgv::Preset,
    slot_sums: bool,
    bits_in_slots: bool,
) -> Result<KeygenReport> {
    bgv_keygen_with(
        dir,
        preset,
        slot_sums,
        bits_in_slots,
        &RefreshOptions::default(),
    )
}

/// [`bgv_keygen`] with the refresh masking of `refresh` (only
/// [`RefreshOptions::circuit_private`] applies to BGV: its mask hides
/// perfectly).
pub fn bgv_keygen_with(
    dir: &Path,
    preset: hecloud_bgv::Preset,
    slot_sums: bool,
    bits_in_slots: bool,
    refresh: &RefreshOptions,
) -> Result<KeygenReport> {
    refuse_overwrite(dir)?;
    let params = preset.build().map_err(crypto)?;
    let flood = hecloud_circuits::packed::BgvMaskPolicy::circuit_private(&params).flood_bits;
    let refresh = refresh.spec(flood)?;
    std::fs::create_dir_all(dir)?;
    let mut rotations = if slot_sums {
        hecloud_bgv::keys::power_of_two_rotations(params.n())
    } else {
        vec![]
    };
    if bits_in_slots {
        rotations.extend(hecloud_circuits::packed::slot_rotations(params.n()));
    }
    let keys = hecloud_bgv::KeySet::generate(&params, &rotations, slot_sums).map_err(crypto)?;
    let mut folder = KeyFolder { dir, files: vec![] };
    folder.put(
        "secret.key",
        &zeroize::Zeroizing::new(keys.secret_key().export_bytes()),
        true,
    )?;
    let pk = folder.put_public_key(keys.public_key())?;
    let ev = keys.evaluation_keys();
    let (bgv_relin_key, bgv_galois_keys) =
        folder.put_evaluation_keys(ev.relin.as_ref(), &ev.galois)?;
    let spec = SessionSpec {
        bgv: Some(hecloud_protocol::BgvParamSpec::Preset(preset)),
        bgv_relin_key,
        bgv_galois_keys,
        refresh: Some(RefreshSpec {
            bgv_public_key: Some(pk),
            ..refresh
        }),
        ..SessionSpec::default()
    };
    folder.finish(&spec, preset.name())
}

/// A BGV key folder opened for encryption and decryption of integer vectors.
pub struct BgvKeyDir {
    /// The parameters.
    pub params: Arc<hecloud_bgv::BgvParameters>,
    dir: PathBuf,
}

impl std::fmt::Debug for BgvKeyDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BgvKeyDir")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl BgvKeyDir {
    /// Opens a folder written by [`bgv_keygen`].
    pub fn open(dir: &Path) -> Result<Self> {
        let name = std::fs::read_to_string(dir.join("preset"))?;
        let params = parse_bgv_preset(name.trim())?.build().map_err(crypto)?;
        Ok(Self {
            params,
            dir: dir.to_path_buf(),
        })
    }

    /// The plaintext modulus t: every value is below it.
    pub fn t(&self) -> u64 {
        self.params.t()
    }

    /// The session id.
    pub fn session(&self) -> Result<ObjectId> {
        session_of(&self.dir)
    }

    /// The evaluation-key files and the session spec, in upload order, with
    /// their upload kinds.
    pub fn uploads(&self) -> Result<Vec<(PathBuf, &'static str)>> {
        folder_uploads(
            &self.dir,
            [
                ObjectKind::BgvRelinKey,
                ObjectKind::BgvGaloisKey,
                ObjectKind::BgvPublicKey,
            ],
        )
    }

    /// A key holder answering this folder's refresh requests.
    pub fn refresh_responder(&self) -> Result<hecloud_protocol::refresh::RefreshResponder> {
        let raw = zeroize::Zeroizing::new(std::fs::read(self.dir.join("secret.key"))?);
        let sk = SecretKey::import_bytes(self.params.rlwe(), &raw).map_err(crypto)?;
        drop(raw);
        let keys =
            hecloud_bgv::KeySet::from_secret_key(&self.params, sk, &[], false).map_err(crypto)?;
        Ok(hecloud_protocol::refresh::RefreshResponder::new().with_bgv(Arc::new(keys)))
    }

    /// Encrypts up to N integers, each below t, in the slots (the rest 0)
    /// with the public key: the bytes of a `bgv.ciphertext` object.
    pub fn encrypt(&self, values: &[u64]) -> Result<Vec<u8>> {
        let t = self.params.t();
        if let Some(i) = values.iter().position(|&v| v >= t) {
            return Err(ClientError::Invalid(format!(
                "value {i} does not fit the plaintext modulus t = {t}"
            )));
        }
        if values.len() > self.params.n() {
            return Err(ClientError::Invalid(format!(
                "{} values for {} slots",
                values.len(),
                self.params.n()
            )));
        }
        let pk = PublicKey::from_bytes(
            self.params.rlwe(),
            &std::fs::read(self.dir.join("public.key"))?,
        )
        .map_err(crypto)?;
        let pt = hecloud_bgv::Encoder::new(&self.params)
            .encode(values)
            .map_err(|e| ClientError::Invalid(e.to_string()))?;
        let ct = hecloud_bgv::keys::encrypt_pk(&self.params, &pk, &pt, self.params.max_level())
            .map_err(crypto)?;
        Ok(Object::BgvCiphertext(ct).to_bytes())
    }

    /// Encrypts `value` as a bits-in-slots number of `width` bits (2..=1024,
    /// at most N/2): bit i (LSB first) in slot i of row 0, every other slot
    /// 0 — the operand of the `bgv-bits-…` operations.
    pub fn encrypt_bits(&self, value: &BigUint, width: usize) -> Result<Vec<u8>> {
        let row = self.params.row_size();
        if !(hecloud_circuits::MIN_WIDTH..=hecloud_circuits::MAX_WIDTH).contains(&width)
            || width > row
        {
            return Err(ClientError::Invalid(format!(
                "width {width}: bits in slots take {}..={} bits and at most N/2 = {row}",
                hecloud_circuits::MIN_WIDTH,
                hecloud_circuits::MAX_WIDTH
            )));
        }
        if value.bits() > width as u64 {
            return Err(ClientError::Invalid(format!(
                "a value of {} bits does not fit {width} bits",
                value.bits()
            )));
        }
        let bits: Vec<u64> = (0..width as u64).map(|i| u64::from(value.bit(i))).collect();
        self.encrypt(&bits)
    }

    /// Decrypts a bits-in-slots number of `width` bits
    /// ([`crate::bgv::decode_bits`]).
    pub fn decrypt_bits(&self, bytes: &[u8], width: usize) -> Result<BigUint> {
        crate::bgv::decode_bits(&self.decrypt(bytes)?, width)
    }

    /// Decrypts a bits-in-slots comparison of `width`-bit numbers: its
    /// answer bit ([`crate::bgv::decode_bit`]).
    pub fn decrypt_bit(&self, bytes: &[u8], width: usize) -> Result<bool> {
        crate::bgv::decode_bit(&self.decrypt(bytes)?, width)
    }

    /// Decrypts a `bgv.ciphertext` payload with the secret key: the N slot
    /// values, each below t.
    pub fn decrypt(&self, bytes: &[u8]) -> Result<Vec<u64>> {
        let raw = zeroize::Zeroizing::new(std::fs::read(self.dir.join("secret.key"))?);
        let sk = SecretKey::import_bytes(self.params.rlwe(), &raw).map_err(crypto)?;
        drop(raw);
        let sp = SessionParams {
            ckks: None,
            tfhe: None,
            bgv: Some(self.params.clone()),
        };
        let ct = match sp
            .decode(ObjectKind::BgvCiphertext, bytes)
            .map_err(crypto)?
        {
            Object::BgvCiphertext(c) => c,
            _ => return Err(ClientError::Invalid("not a BGV ciphertext".into())),
        };
        // Decryption needs the secret key only; the key set around it
        // makes a public and a relinearization key it does not use.
        let keys =
            hecloud_bgv::KeySet::from_secret_key(&self.params, sk, &[], false).map_err(crypto)?;
        let pt = keys.decrypt(&ct).map_err(crypto)?;
        hecloud_bgv::Encoder::new(&self.params)
            .decode(&pt)
            .map_err(crypto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_key_file_is_private_and_roundtrips() {
        let dir = tempfile::tempdir().unwrap();
        let kd = dir.path().join("k");
        let r = keygen(&kd, Preset::N13, &[1, 2]).unwrap();
        assert!(r.files.iter().any(|(p, _)| p.ends_with("secret.key")));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(kd.join("secret.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let k = KeyDir::open(&kd).unwrap();
        assert_eq!(k.session().unwrap(), r.session);
        let vals: Vec<f64> = (0..100).map(|i| (i as f64 * 0.37).sin() * 10.0).collect();
        let back = k.decrypt(&k.encrypt(&vals).unwrap()).unwrap();
        for (a, b) in vals.iter().zip(&back) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        // No upload carries the secret key.
        assert!(
            k.uploads()
                .unwrap()
                .iter()
                .all(|(p, _)| !p.ends_with("secret.key"))
        );
        // Refuses to overwrite.
        assert!(keygen(&kd, Preset::N13, &[]).is_err());
    }

    #[test]
    fn uploads_in_order_name_the_kinds_of_the_folders_scheme() {
        let dir = tempfile::tempdir().unwrap();
        let bgv = dir.path().join("bgv");
        bgv_keygen(&bgv, hecloud_bgv::Preset::N13, true, false).unwrap();
        let spec = SessionSpec::decode(&std::fs::read(bgv.join("session.spec")).unwrap()).unwrap();
        let kinds = key_kinds(&spec);
        assert_eq!(kinds[0], ObjectKind::BgvRelinKey);
        // A folder held in memory, its names in any order: the same
        // uploads as the folder on disk.
        let mut names: Vec<String> = std::fs::read_dir(&bgv)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.reverse();
        let order = uploads_in_order(names.iter().map(String::as_str), &spec, kinds);
        let on_disk = BgvKeyDir::open(&bgv).unwrap().uploads().unwrap();
        assert_eq!(order.len(), on_disk.len());
        for ((n, kind), (p, k)) in order.iter().zip(&on_disk) {
            assert_eq!((bgv.join(n), kind), (p.clone(), k));
        }
        assert_eq!(order[0], ("relin.key", "bgv.relin_key"));
        assert_eq!(order[order.len() - 2], ("public.key", "bgv.public_key"));
        assert_eq!(order[order.len() - 1].0, "session.spec");
        assert!(
            order
                .iter()
                .all(|(n, _)| *n != "secret.key" && *n != "preset")
        );
        // A CKKS session gets the CKKS kinds.
        let ckks = dir.path().join("ckks");
        keygen(&ckks, Preset::N13, &[1]).unwrap();
        let spec = SessionSpec::decode(&std::fs::read(ckks.join("session.spec")).unwrap()).unwrap();
        let order = uploads_in_order(
            [
                "secret.key",
                "galois-5.key",
                "relin.key",
                "public.key",
                "preset",
            ],
            &spec,
            key_kinds(&spec),
        );
        assert_eq!(
            order,
            [
                ("relin.key", "ckks.relin_key"),
                ("galois-5.key", "ckks.galois_key"),
                ("public.key", "ckks.public_key"),
                ("session.spec", "session"),
            ]
        );
    }

    #[test]
    fn refresh_options_reach_the_session_spec() {
        let dir = tempfile::tempdir().unwrap();
        let spec_of = |d: &Path| {
            SessionSpec::decode(&std::fs::read(d.join("session.spec")).unwrap())
                .unwrap()
                .refresh
                .unwrap()
        };
        let plain = dir.path().join("plain");
        keygen(&plain, Preset::N13, &[]).unwrap();
        let r = spec_of(&plain);
        assert_eq!((r.lambda_s, r.flood_bits), (64, 0));
        let private = dir.path().join("private");
        let opts = RefreshOptions {
            lambda_s: Some(80),
            circuit_private: true,
        };
        keygen_with(&private, Preset::N13, &[], &opts).unwrap();
        let r = spec_of(&private);
        let params = Preset::N13.build().unwrap();
        assert_eq!(r.lambda_s, 80);
        assert_eq!(
            Some(r.flood_bits),
            MaskPolicy::circuit_private(&params).flood_bits
        );
        let bgv = dir.path().join("bgv");
        bgv_keygen_with(&bgv, hecloud_bgv::Preset::N13, false, false, &opts).unwrap();
        assert_ne!(spec_of(&bgv).flood_bits, 0);
        // Too little hiding is refused before any key is made.
        let weak = RefreshOptions {
            lambda_s: Some(39),
            ..opts
        };
        let none = dir.path().join("weak");
        assert!(keygen_with(&none, Preset::N13, &[], &weak).is_err());
        assert!(!none.exists());
    }

    #[test]
    fn tfhe_key_folder_is_private_and_roundtrips_integers() {
        use rand_core::{OsRng, TryRngCore};
        let dir = tempfile::tempdir().unwrap();
        let kd = dir.path().join("t");
        let r = tfhe_keygen(&kd).unwrap();
        assert!(is_tfhe_dir(&kd));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(kd.join("secret.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let k = TfheKeyDir::open(&kd).unwrap();
        assert_eq!(k.session().unwrap(), r.session);
        let random = BigUint::from(OsRng.try_next_u64().unwrap());
        let top = (BigUint::from(1u8) << 100u32) - 1u8;
        for (v, width) in [(random, 64), (BigUint::from(0u8), 2), (top, 100)] {
            let ct = k.encrypt(&v, width).unwrap();
            assert_eq!(tfhe_kind(&ct), Some(ObjectKind::TfheUint));
            assert_eq!(k.decrypt(&ct).unwrap(), v, "width {width}");
        }
        // Too wide for its width; not a TFHE object; no secret uploaded.
        assert!(k.encrypt(&BigUint::from(4u8), 2).is_err());
        assert!(k.decrypt(b"HECL not a TFHE object").is_err());
        // An object under another client key (its container's key id
        // says which): refused, not decrypted to garbage bits.
        let mut foreign = k.encrypt(&BigUint::from(3u8), 2).unwrap();
        foreign[40] ^= 1;
        let e = k.decrypt(&foreign).unwrap_err();
        assert!(e.to_string().contains("this folder's key"), "{e}");
        // A server key of another folder beside this secret key.
        let other = dir.path().join("t2");
        tfhe_keygen(&other).unwrap();
        std::fs::copy(other.join("server.key"), kd.join("server.key")).unwrap();
        let e = TfheKeyDir::open(&kd)
            .unwrap()
            .encrypt(&BigUint::from(1u8), 2)
            .unwrap_err();
        assert!(e.to_string().contains("another client key"), "{e}");
        assert!(
            tfhe_uploads(&kd)
                .iter()
                .all(|(p, _)| !p.ends_with("secret.key"))
        );
        // A CKKS folder is not a TFHE one, and keys are never overwritten.
        assert!(tfhe_keygen(&kd).is_err());
        let ckks = dir.path().join("c");
        keygen(&ckks, Preset::N13, &[]).unwrap();
        assert!(!is_tfhe_dir(&ckks));
        assert!(TfheKeyDir::open(&ckks).is_err());
    }
}
