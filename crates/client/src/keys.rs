//! CKKS key files of a key holder.
//!
//! `keygen` writes a folder:
//!
//! | file | content | leaves the client? |
//! | --- | --- | --- |
//! | `secret.key` | the secret key (mode 0600) | never |
//! | `public.key` | the public key (encryption) | no need |
//! | `relin.key`, `galois-<g>.key` | evaluation keys | uploaded |
//! | `session.spec` | the session spec naming them | uploaded |
//! | `preset` | the parameter preset name | — |
//!
//! The secret key is held in [`zeroize::Zeroizing`] buffers while read or
//! written, and the rlwe `SecretKey` zeroizes itself on drop.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hecloud_ckks::{CkksParameters, Encoder, KeySet, Preset};
use hecloud_protocol::{CkksParamSpec, Message, ObjectId, ParamSpec, SessionSpec};
use hecloud_rlwe::{Ciphertext, Decryptor, Encryptor, PublicKey, SecretKey};

use crate::{ClientError, Result};

fn crypto<E: std::fmt::Display>(e: E) -> ClientError {
    ClientError::Crypto(e.to_string())
}

/// Writes a file readable and writable by its owner only (0600 on Unix).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

/// Parses a preset name (`n13` … `n17`).
pub fn parse_preset(name: &str) -> Result<Preset> {
    Preset::ALL
        .into_iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| {
            ClientError::Invalid(format!(
                "unknown preset {name:?} (known: {})",
                Preset::ALL.map(|p| p.name()).join(", ")
            ))
        })
}

/// What `keygen` wrote.
#[derive(Debug)]
pub struct KeygenReport {
    /// Files written with their sizes.
    pub files: Vec<(PathBuf, u64)>,
    /// The session id.
    pub session: ObjectId,
}

/// Generates keys for `preset` with Galois keys for `rotations` and writes
/// them to `dir` (created; existing key files are not overwritten).
pub fn keygen(dir: &Path, preset: Preset, rotations: &[i64]) -> Result<KeygenReport> {
    if dir.join("secret.key").exists() {
        return Err(ClientError::Invalid(format!(
            "{} already holds a secret key; refusing to overwrite it",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir)?;
    let params = preset.build().map_err(crypto)?;
    let keys = KeySet::generate(&params, rotations, false).map_err(crypto)?;
    let mut files = vec![];
    let mut put = |name: &str, bytes: &[u8], private: bool| -> Result<()> {
        let p = dir.join(name);
        if private {
            write_private(&p, bytes)?;
        } else {
            std::fs::write(&p, bytes)?;
        }
        files.push((p, bytes.len() as u64));
        Ok(())
    };
    put("secret.key", &keys.secret_key().export_bytes(), true)?;
    put("public.key", &keys.public_key().to_bytes(), false)?;
    let ev = keys.evaluation_keys();
    let mut spec = SessionSpec {
        params: ParamSpec {
            ckks: Some(CkksParamSpec::Preset(preset)),
            tfhe: None,
        },
        ..SessionSpec::default()
    };
    if let Some(r) = &ev.relin {
        let b = r.to_bytes(true);
        spec.relin_key = Some(ObjectId::of(&b));
        put("relin.key", &b, false)?;
    }
    let mut els: Vec<usize> = ev.galois.elements().collect();
    els.sort();
    for g in els {
        let b = ev.galois.get(g).map_err(crypto)?.to_bytes(true);
        spec.galois_keys.push(ObjectId::of(&b));
        put(&format!("galois-{g}.key"), &b, false)?;
    }
    put("session.spec", &spec.encode(), false)?;
    put("preset", preset.name().as_bytes(), false)?;
    Ok(KeygenReport {
        files,
        session: spec.id(),
    })
}

/// A key folder opened for encryption and decryption.
pub struct KeyDir {
    /// The parameters.
    pub params: Arc<CkksParameters>,
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
        let params = parse_preset(name.trim())?.build().map_err(crypto)?;
        Ok(Self {
            params,
            dir: dir.to_path_buf(),
        })
    }

    /// The evaluation-key files and the session spec, in upload order
    /// (keys first, the session last), with their upload kinds.
    pub fn uploads(&self) -> Result<Vec<(PathBuf, &'static str)>> {
        let mut v = vec![];
        let mut gal: Vec<PathBuf> = std::fs::read_dir(&self.dir)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("galois-") && n.ends_with(".key"))
            })
            .collect();
        gal.sort();
        if self.dir.join("relin.key").exists() {
            v.push((self.dir.join("relin.key"), "ckks.relin_key"));
        }
        v.extend(gal.into_iter().map(|p| (p, "ckks.galois_key")));
        v.push((
            self.dir.join("session.spec"),
            hecloud_protocol::rpc::SESSION_KIND,
        ));
        Ok(v)
    }

    /// The session id.
    pub fn session(&self) -> Result<ObjectId> {
        let b = std::fs::read(self.dir.join("session.spec"))?;
        Ok(SessionSpec::decode(&b).map_err(crypto)?.id())
    }

    /// Encrypts reals (full slots, zero padded) with the public key.
    pub fn encrypt(&self, values: &[f64]) -> Result<Vec<u8>> {
        let pk = PublicKey::from_bytes(
            self.params.rlwe(),
            &std::fs::read(self.dir.join("public.key"))?,
        )
        .map_err(crypto)?;
        let pt = Encoder::new(&self.params)
            .encode_real(values, self.params.max_level(), self.params.default_scale())
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
        let pt = Decryptor::new(&sk).decrypt(&ct).map_err(crypto)?;
        Encoder::new(&self.params).decode_real(&pt).map_err(crypto)
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
        let vals = crate::workload::random_values(100);
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
}
