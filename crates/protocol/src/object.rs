//! Object payloads: decoding and checking the bytes of ciphertexts, plaintexts
//! and keys against a session's parameters, and the server-side key set.
//!
//! CKKS and BGV payloads are exactly the bytes of [`hecloud_rlwe::serial`]
//! (format version, kind, parameter hash, level, scale, length-checked
//! body); a BGV ciphertext's header also carries its factor (a unit of Z_t,
//! checked) and, in its scale field, log2 of its estimated noise. TFHE
//! payloads are a small container around TFHE-rs's own versioned, size-limited
//! serialization ([`tfhe::safe_serialization`]):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `HECT` |
//! | 4..6 | format version (u16, currently 2) |
//! | 6 | object kind ([`ObjectKind`] byte) |
//! | 7 | flags (0) |
//! | 8..40 | parameter hash ([`TfheParamSpec::hash`]) |
//! | 40..56 | key id: the [`KeyId`] of the client key ([`tfhe_key_id`]) |
//! | 56..60 | count (u32): bits of an integer, 1 otherwise |
//!
//! then `count` items, each a u32 length and that many bytes of
//! `safe_serialize` output; every TFHE-rs object is checked for conformance
//! with the parameter set (dimensions, moduli) before use.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, Weak};

use hecloud_bgv::BgvParameters;
use hecloud_circuits::packed::BgvMaskPolicy;
use hecloud_circuits::{EncryptedUint, MAX_WIDTH, MIN_WIDTH, TFHE_PARAMS, TfheEngine, Wire};
use hecloud_ckks::boot::{BootstrapLiteral, Bootstrapper, EncapsulationKeys};
use hecloud_ckks::{CkksParameters, Encoder, EvaluationKeys, Evaluator};
use hecloud_rlwe::serial::HEADER_LEN;
use hecloud_rlwe::{
    Ciphertext, GaloisKey, GaloisKeys, KeyId, Plaintext, PublicKey, RelinearizationKey,
    SwitchingKey,
};
use tfhe::Unversionize;
use tfhe::shortint::ciphertext::{MaxDegree, NoiseLevel};
use tfhe::shortint::{AtomicPatternParameters, ServerKey};

use crate::codec::{DecodeError, Reader, Writer};
use crate::error::{ObjectError, SessionError};
use crate::session::{
    ObjectDescriptor, ObjectId, ObjectKind, ParamSpec, SessionSpec, TfheParamSpec,
};
use crate::validate::{Capabilities, ValueType};

/// A TFHE-rs shortint ciphertext (one bit of an encrypted integer).
pub type TfheCiphertext = tfhe::shortint::Ciphertext;

/// Magic bytes of a TFHE container.
pub const TFHE_MAGIC: [u8; 4] = *b"HECT";
/// Version of the TFHE container.
pub const TFHE_FORMAT_VERSION: u16 = 2;
/// Length of a TFHE container's header.
pub const TFHE_HEADER_LEN: usize = 60;
/// Largest serialized TFHE-rs ciphertext accepted (a shortint ciphertext of
/// [`TFHE_PARAMS`] takes about 16 KiB).
pub const MAX_TFHE_CIPHERTEXT_BYTES: usize = 1 << 20;
/// Largest serialized TFHE-rs server key accepted.
pub const MAX_TFHE_SERVER_KEY_BYTES: usize = 1 << 30;

/// A decoded object, as the server holds it: ciphertexts, plaintexts and
/// public/evaluation keys only — there is no variant for a secret.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Object {
    /// A CKKS ciphertext.
    CkksCiphertext(Ciphertext),
    /// A CKKS plaintext.
    CkksPlaintext(Plaintext),
    /// A CKKS public key.
    CkksPublicKey(Box<PublicKey>),
    /// A CKKS relinearization key.
    CkksRelinKey(Box<RelinearizationKey>),
    /// A CKKS Galois key.
    CkksGaloisKey(Box<GaloisKey>),
    /// A CKKS key switching between two secrets, with its header's tag.
    CkksSwitchingKey(Box<SwitchingKey>, u64),
    /// A TFHE server key, with the id of the client key it was made from.
    TfheServerKey(Box<ServerKey>, KeyId),
    /// An encrypted unsigned integer (TFHE, bit i in ciphertext i), with
    /// the id of its client key.
    TfheUint(EncryptedUint<TfheCiphertext>, KeyId),
    /// One encrypted bit (TFHE), with the id of its client key.
    TfheBit(Wire<TfheCiphertext>, KeyId),
    /// A BGV ciphertext (an encrypted vector of integers mod t).
    BgvCiphertext(Ciphertext),
    /// A BGV public key.
    BgvPublicKey(Box<PublicKey>),
    /// A BGV relinearization key.
    BgvRelinKey(Box<RelinearizationKey>),
    /// A BGV Galois key.
    BgvGaloisKey(Box<GaloisKey>),
}

impl Object {
    /// The object's kind.
    pub fn kind(&self) -> ObjectKind {
        match self {
            Object::CkksCiphertext(_) => ObjectKind::CkksCiphertext,
            Object::CkksPlaintext(_) => ObjectKind::CkksPlaintext,
            Object::CkksPublicKey(_) => ObjectKind::CkksPublicKey,
            Object::CkksRelinKey(_) => ObjectKind::CkksRelinKey,
            Object::CkksGaloisKey(_) => ObjectKind::CkksGaloisKey,
            Object::CkksSwitchingKey(..) => ObjectKind::CkksSwitchingKey,
            Object::TfheServerKey(..) => ObjectKind::TfheServerKey,
            Object::TfheUint(..) => ObjectKind::TfheUint,
            Object::TfheBit(..) => ObjectKind::TfheBit,
            Object::BgvCiphertext(_) => ObjectKind::BgvCiphertext,
            Object::BgvPublicKey(_) => ObjectKind::BgvPublicKey,
            Object::BgvRelinKey(_) => ObjectKind::BgvRelinKey,
            Object::BgvGaloisKey(_) => ObjectKind::BgvGaloisKey,
        }
    }

    /// The type a graph sees for this object as a job input; `None` for keys.
    pub fn value_type(&self) -> Option<ValueType> {
        Some(match self {
            Object::CkksCiphertext(c) => ValueType::CkksCiphertext {
                level: c.level(),
                scale: c.scale(),
                degree: c.degree(),
            },
            Object::CkksPlaintext(p) => ValueType::CkksPlaintext {
                level: p.level(),
                scale: p.scale(),
            },
            Object::TfheUint(u, _) => ValueType::Uint { width: u.width() },
            Object::TfheBit(..) => ValueType::Bit,
            Object::BgvCiphertext(c) => ValueType::BgvCiphertext {
                level: c.level(),
                noise: c.scale(),
                factor: c.factor(),
                degree: c.degree(),
            },
            _ => return None,
        })
    }

    /// [`Object::to_bytes`] and the id of those bytes, in one pass where it
    /// counts: a CKKS ciphertext is hashed piece by piece as it is packed,
    /// while each piece is still in cache (see
    /// [`hecloud_rlwe::Ciphertext::write_pieces`]).
    pub fn to_bytes_with_id(&self) -> (Vec<u8>, ObjectId) {
        match self {
            Object::CkksCiphertext(c) | Object::BgvCiphertext(c) => {
                let mut out = Vec::with_capacity(c.serialized_len());
                let mut hasher = blake3::Hasher::new();
                c.write_pieces(|piece| {
                    hasher.update(piece);
                    out.extend_from_slice(piece);
                });
                (out, ObjectId(*hasher.finalize().as_bytes()))
            }
            other => {
                let out = other.to_bytes();
                let id = ObjectId::of(&out);
                (out, id)
            }
        }
    }

    /// The payload bytes (keys are written with seeds where they have them).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Object::CkksCiphertext(c) | Object::BgvCiphertext(c) => c.to_bytes(),
            Object::CkksPlaintext(p) => p.to_bytes(),
            Object::CkksPublicKey(k) | Object::BgvPublicKey(k) => k.to_bytes(),
            Object::CkksRelinKey(k) | Object::BgvRelinKey(k) => k.to_bytes(true),
            Object::CkksGaloisKey(k) | Object::BgvGaloisKey(k) => k.to_bytes(true),
            Object::CkksSwitchingKey(k, tag) => k.to_bytes(true, *tag),
            Object::TfheServerKey(k, key) => {
                tfhe_container(ObjectKind::TfheServerKey, *key, &[ser_sk(k)])
            }
            Object::TfheUint(u, key) => {
                let items: Vec<Vec<u8>> = u.bits().iter().map(|b| ser_ct(b.ciphertext())).collect();
                tfhe_container(ObjectKind::TfheUint, *key, &items)
            }
            Object::TfheBit(b, key) => {
                tfhe_container(ObjectKind::TfheBit, *key, &[ser_ct(b.ciphertext())])
            }
        }
    }
}

fn ser_ct(x: &TfheCiphertext) -> Vec<u8> {
    let mut out = Vec::new();
    // Serializing into a Vec fails only past the size limit, set above any real object.
    if tfhe::safe_serialization::safe_serialize(x, &mut out, u64::MAX).is_err() {
        out.clear();
    }
    out
}

/// The bincode options of TFHE-rs objects in their versioned form (TFHE-rs's
/// `safe_serialize` needs a `Named` impl that its shortint keys lack):
/// fixed-width integers, no trailing bytes, a size limit when reading.
fn bin() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .reject_trailing_bytes()
}

/// A TFHE-rs object decoded from its versioned bincode form (as server keys
/// travel in a container, and as the client keeps its TFHE client key);
/// reads no more than `bytes` holds.
pub fn unversion<T: Unversionize>(bytes: &[u8]) -> Result<T, ObjectError> {
    use bincode::Options;
    let versioned: T::VersionedOwned = bin()
        .with_limit(bytes.len() as u64)
        .deserialize(bytes)
        .map_err(tfhe_err)?;
    T::unversionize(versioned).map_err(tfhe_err)
}

/// The versioned bincode form of a TFHE-rs object ([`unversion`] reads it).
pub fn versioned_bytes<T: tfhe::Versionize>(x: &T) -> Result<Vec<u8>, ObjectError> {
    use bincode::Options;
    bin().serialize(&x.versionize()).map_err(tfhe_err)
}

fn ser_sk(x: &ServerKey) -> Vec<u8> {
    // Serializing into memory cannot fail for a well-formed key.
    versioned_bytes(x).unwrap_or_default()
}

/// The kind of a TFHE object payload (integer, bit or server key), read from
/// its container header; `None` for anything else.
pub fn tfhe_kind(bytes: &[u8]) -> Option<ObjectKind> {
    if bytes.len() < TFHE_HEADER_LEN || bytes[..4] != TFHE_MAGIC {
        return None;
    }
    ObjectKind::from_u8(bytes[6]).ok().filter(|k| {
        matches!(
            k,
            ObjectKind::TfheUint | ObjectKind::TfheBit | ObjectKind::TfheServerKey
        )
    })
}

/// The object kind a payload's header names: a CKKS or BGV object (magic
/// `HECL`, see [`hecloud_rlwe::serial`]) or a TFHE container
/// ([`tfhe_kind`]). `None` for anything else, and for an exported secret
/// key, which is never an object. Reads only the header; the server still
/// checks the whole payload. A ciphertext whose header carries a factor
/// (its extra field, never 0 under a plaintext modulus) is a BGV
/// ciphertext; an RLWE key's header does not say its scheme, so keys read
/// as CKKS keys here (BGV keys are uploaded under their kind by the caller
/// that made them).
///
/// ```
/// use hecloud_protocol::{ObjectKind, object::payload_kind};
/// assert_eq!(payload_kind(b"not an object"), None);
/// ```
pub fn payload_kind(bytes: &[u8]) -> Option<ObjectKind> {
    if bytes.len() >= HEADER_LEN && bytes[..4] == hecloud_rlwe::serial::MAGIC {
        if bytes[6] == hecloud_rlwe::serial::Kind::Ciphertext as u8 && bytes[56..64] != [0; 8] {
            return Some(ObjectKind::BgvCiphertext);
        }
        // The RLWE kind bytes 1..=5 are numbered as the CKKS object kinds.
        return ObjectKind::from_u8(bytes[6])
            .ok()
            .filter(|k| (1..=5).contains(&(*k as u8)));
    }
    tfhe_kind(bytes)
}

/// The id of a TFHE client key, which its server key and ciphertexts carry
/// in their containers (as a CKKS or BGV object carries its secret's, see
/// [`hecloud_rlwe::KeyId`]): a domain-separated BLAKE3 hash of the key's
/// versioned bytes.
pub fn tfhe_key_id(client_key: &tfhe::shortint::ClientKey) -> Result<KeyId, ObjectError> {
    let bytes = zeroize::Zeroizing::new(versioned_bytes(client_key)?);
    let hash = blake3::Hasher::new_derive_key("hecloud tfhe key id v1")
        .update(&bytes)
        .finalize();
    let mut id = [0; 16];
    id.copy_from_slice(&hash.as_bytes()[..16]);
    Ok(KeyId(id))
}

fn tfhe_container(kind: ObjectKind, key: KeyId, items: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Writer::new();
    w.bytes_raw(&TFHE_MAGIC);
    w.u16(TFHE_FORMAT_VERSION);
    w.u8(kind as u8);
    w.u8(0);
    w.bytes_raw(&TfheParamSpec::Message2Carry2.hash());
    w.bytes_raw(&key.0);
    w.len(items.len());
    for i in items {
        w.bytes(i);
    }
    w.into_bytes()
}

/// The parameter sets of a session, built: enough to check and decode any
/// object payload of the session.
#[derive(Debug, Clone)]
pub struct SessionParams {
    /// CKKS parameters.
    pub ckks: Option<Arc<CkksParameters>>,
    /// TFHE parameter set.
    pub tfhe: Option<TfheParamSpec>,
    /// BGV parameters.
    pub bgv: Option<Arc<BgvParameters>>,
}

impl SessionParams {
    /// Builds the parameter sets of `spec` (insecure CKKS literals only with
    /// `allow_insecure`).
    pub fn build(spec: &ParamSpec, allow_insecure: bool) -> Result<Self, SessionError> {
        Ok(Self {
            ckks: match &spec.ckks {
                Some(c) => Some(c.build(allow_insecure)?),
                None => None,
            },
            tfhe: spec.tfhe,
            bgv: None,
        })
    }

    /// Builds every parameter set of a session spec: [`SessionParams::build`]
    /// of its [`ParamSpec`], and its BGV parameters.
    pub fn for_session(spec: &SessionSpec, allow_insecure: bool) -> Result<Self, SessionError> {
        let mut out = Self::build(&spec.params, allow_insecure)?;
        out.bgv = match &spec.bgv {
            Some(b) => Some(b.build(allow_insecure)?),
            None => None,
        };
        Ok(out)
    }

    fn bgv(&self, kind: ObjectKind) -> Result<&Arc<BgvParameters>, ObjectError> {
        self.bgv.as_ref().ok_or(ObjectError::NoParameters {
            scheme: "BGV",
            kind,
        })
    }

    /// The hash of the parameter set objects of `kind` belong to, if the
    /// session has it.
    pub fn param_hash(&self, kind: ObjectKind) -> Option<[u8; 32]> {
        if kind.is_bgv() {
            self.bgv.as_ref().map(|p| *p.rlwe().hash())
        } else if kind.rlwe_kind().is_some() {
            self.ckks.as_ref().map(|p| *p.rlwe().hash())
        } else {
            self.tfhe.map(|t| t.hash())
        }
    }

    fn ckks(&self, kind: ObjectKind) -> Result<&Arc<CkksParameters>, ObjectError> {
        self.ckks.as_ref().ok_or(ObjectError::NoParameters {
            scheme: "CKKS",
            kind,
        })
    }

    /// Decodes and checks a payload of `kind` (every length, residue and
    /// dimension checked; nothing in the bytes trusted).
    pub fn decode(&self, kind: ObjectKind, bytes: &[u8]) -> Result<Object, ObjectError> {
        match kind {
            ObjectKind::CkksCiphertext => Ok(Object::CkksCiphertext(Ciphertext::from_bytes(
                self.ckks(kind)?.rlwe(),
                bytes,
            )?)),
            ObjectKind::CkksPlaintext => Ok(Object::CkksPlaintext(Plaintext::from_bytes(
                self.ckks(kind)?.rlwe(),
                bytes,
            )?)),
            ObjectKind::CkksPublicKey => Ok(Object::CkksPublicKey(Box::new(
                PublicKey::from_bytes(self.ckks(kind)?.rlwe(), bytes)?,
            ))),
            ObjectKind::CkksRelinKey => Ok(Object::CkksRelinKey(Box::new(
                RelinearizationKey::from_bytes(self.ckks(kind)?.rlwe(), bytes)?,
            ))),
            ObjectKind::CkksGaloisKey => Ok(Object::CkksGaloisKey(Box::new(
                GaloisKey::from_bytes(self.ckks(kind)?.rlwe(), bytes)?,
            ))),
            ObjectKind::CkksSwitchingKey => {
                let p = self.ckks(kind)?.rlwe();
                // Over the whole chain, or over q₀·P (bootstrapping's key
                // to its sparse secret): the header's parameter hash says which.
                let over_chain = bytes.get(8..40).is_some_and(|h| h == &p.hash()[..]);
                let (key, tag) = if over_chain {
                    SwitchingKey::from_bytes(p, bytes)?
                } else {
                    SwitchingKey::from_bytes(&p.bottom()?, bytes)?
                };
                Ok(Object::CkksSwitchingKey(Box::new(key), tag))
            }
            ObjectKind::TfheServerKey | ObjectKind::TfheUint | ObjectKind::TfheBit => {
                let spec = self.tfhe.ok_or(ObjectError::NoParameters {
                    scheme: "TFHE",
                    kind,
                })?;
                decode_tfhe(spec, kind, bytes)
            }
            ObjectKind::BgvCiphertext => {
                let p = self.bgv(kind)?;
                let ct = Ciphertext::from_bytes(p.rlwe(), bytes)?;
                if !(ct.scale().is_finite() && ct.scale() > 0.0) {
                    return Err(DecodeError::InvalidField {
                        field: "noise",
                        reason: format!("{} is not a positive noise estimate", ct.scale()),
                    }
                    .into());
                }
                Ok(Object::BgvCiphertext(ct))
            }
            ObjectKind::BgvPublicKey => Ok(Object::BgvPublicKey(Box::new(PublicKey::from_bytes(
                self.bgv(kind)?.rlwe(),
                bytes,
            )?))),
            ObjectKind::BgvRelinKey => Ok(Object::BgvRelinKey(Box::new(
                RelinearizationKey::from_bytes(self.bgv(kind)?.rlwe(), bytes)?,
            ))),
            ObjectKind::BgvGaloisKey => Ok(Object::BgvGaloisKey(Box::new(GaloisKey::from_bytes(
                self.bgv(kind)?.rlwe(),
                bytes,
            )?))),
        }
    }

    /// The job-input types of stored objects from their descriptors, after
    /// checking that each is a job input (not a key) of these parameters.
    pub fn input_types(&self, objects: &[ObjectDescriptor]) -> Result<Vec<ValueType>, ObjectError> {
        objects
            .iter()
            .map(|d| {
                if self.param_hash(d.kind) != Some(d.param_hash) {
                    return Err(ObjectError::ParameterMismatch(d.id));
                }
                value_type_of(d)
            })
            .collect()
    }

    /// Decodes and checks a payload, and describes it (id, size, level, …).
    pub fn describe(
        &self,
        kind: ObjectKind,
        bytes: &[u8],
    ) -> Result<(ObjectDescriptor, Object), ObjectError> {
        let obj = self.decode(kind, bytes)?;
        Ok((
            self.descriptor(ObjectId::of(bytes), bytes.len() as u64, &obj),
            obj,
        ))
    }

    /// The descriptor of a decoded object whose id (the BLAKE3 of its
    /// bytes) and size are already known, e.g. to a store that checked
    /// them when the bytes arrived: saves hashing them again.
    pub fn descriptor(&self, id: ObjectId, size: u64, obj: &Object) -> ObjectDescriptor {
        let mut d = ObjectDescriptor {
            id,
            kind: obj.kind(),
            size,
            param_hash: [0; 32],
            level: 0,
            scale: 1.0,
            count: 1,
            galois_element: 0,
        };
        if let Some(h) = self.param_hash(obj.kind()) {
            d.param_hash = h;
        }
        match obj {
            Object::CkksCiphertext(c) => {
                d.level = c.level() as u32;
                d.scale = c.scale();
                d.count = c.polys().len() as u32;
            }
            Object::CkksPlaintext(p) => {
                d.level = p.level() as u32;
                d.scale = p.scale();
            }
            Object::CkksPublicKey(k) | Object::BgvPublicKey(k) => {
                d.level = k.params().max_level() as u32
            }
            Object::CkksRelinKey(k) | Object::BgvRelinKey(k) => {
                d.level = k.0.params().max_level() as u32;
                d.count = k.0.digits() as u32;
            }
            Object::CkksGaloisKey(k) | Object::BgvGaloisKey(k) => {
                d.level = k.switching_key().params().max_level() as u32;
                d.count = k.switching_key().digits() as u32;
                d.galois_element = k.galois_element() as u64;
            }
            Object::CkksSwitchingKey(k, _) => {
                d.level = k.params().max_level() as u32;
                d.count = k.digits() as u32;
            }
            Object::TfheServerKey(..) | Object::TfheBit(..) => {
                d.param_hash = TfheParamSpec::Message2Carry2.hash();
            }
            Object::TfheUint(u, _) => {
                d.param_hash = TfheParamSpec::Message2Carry2.hash();
                d.count = u.width() as u32;
            }
            Object::BgvCiphertext(c) => {
                d.level = c.level() as u32;
                d.scale = c.scale();
                d.count = c.polys().len() as u32;
                d.galois_element = c.factor();
            }
        }
        d
    }
}

/// The key ids of a scheme's relinearization and Galois keys.
fn evaluation_key_ids<'a>(
    relin: Option<&'a RelinearizationKey>,
    galois: Option<&'a GaloisKeys>,
) -> impl Iterator<Item = KeyId> + 'a {
    let galois = galois.into_iter().flat_map(GaloisKeys::iter);
    relin
        .map(|k| &k.0)
        .into_iter()
        .chain(galois.map(GaloisKey::switching_key))
        .map(SwitchingKey::key_id)
}

/// The one key of `keys` (all made under one secret), or a typed refusal.
fn one_key(
    scheme: &'static str,
    keys: impl IntoIterator<Item = KeyId>,
) -> Result<KeyId, SessionError> {
    keys.into_iter().try_fold(KeyId::NONE, |acc, k| {
        acc.join(k)
            .map_err(|_| SessionError::KeyMismatch { scheme })
    })
}

/// The job-input type of a stored object from its descriptor (so a graph can
/// be validated without loading its inputs).
pub fn value_type_of(d: &ObjectDescriptor) -> Result<ValueType, ObjectError> {
    Ok(match d.kind {
        ObjectKind::CkksCiphertext => ValueType::CkksCiphertext {
            level: d.level as usize,
            scale: d.scale,
            degree: (d.count as usize).saturating_sub(1),
        },
        ObjectKind::CkksPlaintext => ValueType::CkksPlaintext {
            level: d.level as usize,
            scale: d.scale,
        },
        ObjectKind::TfheUint => ValueType::Uint {
            width: d.count as usize,
        },
        ObjectKind::TfheBit => ValueType::Bit,
        ObjectKind::BgvCiphertext => ValueType::BgvCiphertext {
            level: d.level as usize,
            noise: d.scale,
            factor: d.galois_element,
            degree: (d.count as usize).saturating_sub(1),
        },
        kind => {
            return Err(ObjectError::WrongKind {
                kind,
                usage: "a job input",
            });
        }
    })
}

fn tfhe_err(e: impl std::fmt::Display) -> ObjectError {
    ObjectError::Tfhe(e.to_string())
}

fn decode_tfhe(spec: TfheParamSpec, kind: ObjectKind, bytes: &[u8]) -> Result<Object, ObjectError> {
    let mut r = Reader::new(bytes);
    if bytes.len() < TFHE_HEADER_LEN {
        return Err(DecodeError::Truncated {
            need: TFHE_HEADER_LEN,
            have: bytes.len(),
        }
        .into());
    }
    if r.take(4)? != TFHE_MAGIC {
        return Err(DecodeError::BadMagic.into());
    }
    let version = r.u16()?;
    if version != TFHE_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            found: version,
            supported: TFHE_FORMAT_VERSION,
        }
        .into());
    }
    let k = r.u8()?;
    if k != kind as u8 {
        return Err(DecodeError::WrongKind {
            expected: kind as u8,
            found: k,
        }
        .into());
    }
    if r.u8()? != 0 {
        return Err(DecodeError::InvalidField {
            field: "flags",
            reason: "no flag is defined".into(),
        }
        .into());
    }
    if r.hash()? != spec.hash() {
        return Err(tfhe_err("parameter hash does not match the session"));
    }
    let key = KeyId(r.take(16)?.try_into().expect("16 bytes"));
    let (lo, hi) = match kind {
        ObjectKind::TfheUint => (MIN_WIDTH, MAX_WIDTH),
        _ => (1, 1),
    };
    let count = r.u32()? as usize;
    if !(lo..=hi).contains(&count) {
        return Err(DecodeError::InvalidField {
            field: "count",
            reason: format!("{count} items where {lo}..={hi} are accepted"),
        }
        .into());
    }
    let obj = if kind == ObjectKind::TfheServerKey {
        let item = r.bytes("tfhe server key", MAX_TFHE_SERVER_KEY_BYTES)?;
        Object::TfheServerKey(Box::new(decode_server_key(item)?), key)
    } else {
        let mut bits = Vec::with_capacity(count.min(r.remaining() / 4));
        for _ in 0..count {
            let item = r.bytes("tfhe ciphertext", MAX_TFHE_CIPHERTEXT_BYTES)?;
            bits.push(decode_bit(item)?);
        }
        if kind == ObjectKind::TfheBit {
            Object::TfheBit(bits.pop().ok_or_else(|| tfhe_err("no bit"))?, key)
        } else {
            Object::TfheUint(EncryptedUint::from_bits(bits).map_err(tfhe_err)?, key)
        }
    };
    r.finish()?;
    Ok(obj)
}

fn decode_bit(item: &[u8]) -> Result<Wire<TfheCiphertext>, ObjectError> {
    let ct: TfheCiphertext =
        tfhe::safe_serialization::safe_deserialize(item, item.len() as u64).map_err(tfhe_err)?;
    let mut conf = TFHE_PARAMS.to_shortint_conformance_param();
    // A bit holds 0 or 1 (a trivial constant 0); its noise is at most nominal.
    if ct.degree.get() > 1 {
        return Err(tfhe_err(format!(
            "ciphertext of degree {} where a bit (degree ≤ 1) is expected",
            ct.degree.get()
        )));
    }
    if ct.noise_level() > NoiseLevel::NOMINAL {
        return Err(tfhe_err("ciphertext noise level above nominal"));
    }
    conf.degree = ct.degree;
    conf.noise_level = ct.noise_level();
    if !tfhe::conformance::ParameterSetConformant::is_conformant(&ct, &conf) {
        return Err(tfhe_err(
            "ciphertext does not conform to the parameter set (dimension, modulus or encoding)",
        ));
    }
    // Counted as a fresh ciphertext holding a bit, whatever the sender claims.
    Ok(Wire::from_parts(ct, 1, 1))
}

fn decode_server_key(item: &[u8]) -> Result<ServerKey, ObjectError> {
    let ap = AtomicPatternParameters::from(TFHE_PARAMS);
    let max_degree =
        MaxDegree::new(TFHE_PARAMS.message_modulus.0 * TFHE_PARAMS.carry_modulus.0 - 1);
    let sk: ServerKey = unversion(item)?;
    if !tfhe::conformance::ParameterSetConformant::is_conformant(&sk, &(ap, max_degree)) {
        return Err(tfhe_err(
            "server key does not conform to the parameter set (dimensions, moduli, degree)",
        ));
    }
    Ok(sk)
}

/// The server's key set of one session: parameters and evaluation keys
/// (CKKS relinearization and Galois keys, the TFHE server key). It holds no
/// secret.
#[derive(Debug)]
pub struct SessionKeys {
    params: SessionParams,
    ckks: Option<CkksRuntime>,
    tfhe: Option<TfheEngine>,
    /// The id of the client key the TFHE server key was made from.
    tfhe_key: KeyId,
    bgv: Option<BgvRuntime>,
    refresh: Option<RefreshKeys>,
    boot: Option<BootRuntime>,
}

/// The bootstrapper of `circuit` under `params`, shared by every session
/// that holds one: it depends on neither keys nor tenant, and it keeps
/// the DFT's encoded diagonals from one bootstrapping to the next (up to
/// [`Bootstrapper::KEPT_DIAGONAL_BYTES`], all 2.6 GiB of them at N = 2^16), which each
/// cached session would otherwise hold a copy of. Dropped with its last
/// session.
fn shared_bootstrapper(
    params: &Arc<CkksParameters>,
    circuit: BootstrapLiteral,
) -> hecloud_ckks::Result<Arc<Bootstrapper>> {
    type Key = ([u8; 32], u64, BootstrapLiteral);
    static SHARED: Mutex<Vec<(Key, Weak<Bootstrapper>)>> = Mutex::new(Vec::new());
    // Full slots given or left out are one circuit.
    let slots = circuit.slots.filter(|&s| s != params.slots());
    let key = (
        *params.rlwe().hash(),
        params.default_scale().to_bits(),
        BootstrapLiteral { slots, ..circuit },
    );
    let find = |shared: &mut Vec<(Key, Weak<Bootstrapper>)>| {
        shared.retain(|(_, b)| b.strong_count() > 0);
        shared
            .iter()
            .filter(|(k, _)| *k == key)
            .find_map(|(_, b)| b.upgrade())
    };
    if let Some(b) = find(&mut SHARED.lock().unwrap_or_else(|e| e.into_inner())) {
        return Ok(b);
    }
    // Built outside the lock (it takes a while at N = 2^16); a session
    // that raced this one may have stored its own meanwhile.
    let fresh = Arc::new(Bootstrapper::new(params, circuit)?);
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = find(&mut shared) {
        return Ok(b);
    }
    shared.push((key, Arc::downgrade(&fresh)));
    Ok(fresh)
}

/// A session's bootstrapping: the circuit and its encapsulation keys.
#[derive(Debug)]
pub(crate) struct BootRuntime {
    /// Shared by the sessions of one parameter set and circuit
    /// ([`shared_bootstrapper`]).
    pub bootstrapper: Arc<Bootstrapper>,
    pub encapsulation: Option<EncapsulationKeys>,
    prefer_over_refresh: bool,
}

/// The public keys a session's refreshes re-randomize with, and its mask
/// policy.
#[derive(Debug)]
pub(crate) struct RefreshKeys {
    pub ckks_pk: Option<PublicKey>,
    pub bgv_pk: Option<PublicKey>,
    pub policy: hecloud_ckks::refresh::MaskPolicy,
    pub bgv_policy: BgvMaskPolicy,
}

#[derive(Debug)]
pub(crate) struct CkksRuntime {
    pub evaluator: Evaluator,
    pub encoder: Encoder,
}

#[derive(Debug)]
pub(crate) struct BgvRuntime {
    pub evaluator: hecloud_bgv::Evaluator,
    pub keys: Arc<hecloud_bgv::EvaluationKeys>,
}

impl SessionKeys {
    /// Loads the keys `spec` references. `fetch` returns the payload of an
    /// object id (or `None` if it is not stored); every payload is checked
    /// against its id (content hash) and decoded against the parameters.
    pub fn load(
        spec: &SessionSpec,
        params: SessionParams,
        mut fetch: impl FnMut(&ObjectId) -> Option<Vec<u8>>,
    ) -> Result<Self, SessionError> {
        let mut get = |id: &ObjectId, kind: ObjectKind| -> Result<Object, SessionError> {
            let bytes = fetch(id).ok_or(SessionError::MissingObject(*id))?;
            if ObjectId::of(&bytes) != *id {
                return Err(SessionError::HashMismatch(*id));
            }
            params
                .decode(kind, &bytes)
                .map_err(|source| SessionError::Object { id: *id, source })
        };
        let mut eval = EvaluationKeys::default();
        if let Some(id) = &spec.relin_key
            && let Object::CkksRelinKey(k) = get(id, ObjectKind::CkksRelinKey)?
        {
            eval.relin = Some(*k);
        }
        let mut seen = BTreeSet::new();
        let mut galois = GaloisKeys::new();
        for id in &spec.galois_keys {
            if let Object::CkksGaloisKey(k) = get(id, ObjectKind::CkksGaloisKey)? {
                if !seen.insert(k.galois_element()) {
                    return Err(SessionError::DuplicateGaloisKey(k.galois_element() as u64));
                }
                galois.insert(*k);
            }
        }
        eval.galois = galois;
        let (tfhe, tfhe_key) = match &spec.tfhe_server_key {
            Some(id) => match get(id, ObjectKind::TfheServerKey)? {
                Object::TfheServerKey(k, key) => (Some(TfheEngine::from_keys(None, *k)), key),
                _ => (None, KeyId::NONE),
            },
            None => (None, KeyId::NONE),
        };
        let mut bgv = hecloud_bgv::EvaluationKeys {
            relin: None,
            galois: GaloisKeys::new(),
        };
        if let Some(id) = &spec.bgv_relin_key
            && let Object::BgvRelinKey(k) = get(id, ObjectKind::BgvRelinKey)?
        {
            bgv.relin = Some(*k);
        }
        let mut seen = BTreeSet::new();
        for id in &spec.bgv_galois_keys {
            if let Object::BgvGaloisKey(k) = get(id, ObjectKind::BgvGaloisKey)? {
                if !seen.insert(k.galois_element()) {
                    return Err(SessionError::DuplicateGaloisKey(k.galois_element() as u64));
                }
                bgv.galois.insert(*k);
            }
        }
        let refresh = match &spec.refresh {
            Some(rs) => {
                let mut pk = |id: &Option<ObjectId>, kind| match id {
                    Some(id) => match get(id, kind)? {
                        Object::CkksPublicKey(k) | Object::BgvPublicKey(k) => Ok(Some(*k)),
                        _ => Ok(None),
                    },
                    None => Ok::<_, SessionError>(None),
                };
                let ckks_pk = pk(&rs.ckks_public_key, ObjectKind::CkksPublicKey)?;
                let bgv_pk = pk(&rs.bgv_public_key, ObjectKind::BgvPublicKey)?;
                Some((ckks_pk, bgv_pk, rs.mask_policy()))
            }
            None => None,
        };
        let boot = match &spec.bootstrap {
            Some(b) => {
                let mut key = |id: &Option<ObjectId>| match id {
                    Some(id) => match get(id, ObjectKind::CkksSwitchingKey)? {
                        Object::CkksSwitchingKey(k, tag) => Ok(Some((*k, tag))),
                        _ => Ok(None),
                    },
                    None => Ok::<_, SessionError>(None),
                };
                Some((key(&b.to_sparse_key)?, key(&b.from_sparse_key)?, b))
            }
            None => None,
        };
        let mut keys = Self::from_parts(params, eval, tfhe)?
            .with_bgv_keys(Arc::new(bgv))?
            .with_tfhe_key_id(tfhe_key);
        if let Some((c, b, policy)) = refresh {
            keys = keys.with_refresh(c, b, policy)?;
        }
        if let Some((to_sparse, from_sparse, b)) = boot {
            let p = keys
                .params
                .ckks
                .clone()
                .ok_or(SessionError::NoParameters("CKKS"))?;
            let encapsulation = match (to_sparse, from_sparse) {
                (Some(down), Some(up)) => Some(
                    EncapsulationKeys::from_keys(&p, down, up).map_err(SessionError::Bootstrap)?,
                ),
                (None, None) => None,
                _ => {
                    return Err(SessionError::Bootstrap(
                        hecloud_ckks::CkksError::MissingKey(
                            "one of the two encapsulation keys is named without the other".into(),
                        ),
                    ));
                }
            };
            keys = keys.with_bootstrap(b.circuit, encapsulation, b.prefer_over_refresh)?;
        }
        keys.ckks_key_id()?;
        keys.bgv_key_id()?;
        Ok(keys)
    }

    /// Enables bootstrap nodes: the circuit of `circuit` for the session's
    /// CKKS parameters and the encapsulation keys of its ephemeral secret
    /// (`None` when it has none). Refused: no CKKS parameters, a circuit
    /// the parameters cannot hold, a rotation, conjugation or
    /// relinearization key it needs missing from the evaluation keys,
    /// encapsulation keys missing or of another secret weight.
    pub fn with_bootstrap(
        mut self,
        circuit: BootstrapLiteral,
        encapsulation: Option<EncapsulationKeys>,
        prefer_over_refresh: bool,
    ) -> Result<Self, SessionError> {
        let rt = self
            .ckks
            .as_ref()
            .ok_or(SessionError::NoParameters("CKKS"))?;
        let p = rt.evaluator.params().clone();
        let bootstrapper = shared_bootstrapper(&p, circuit).map_err(SessionError::Bootstrap)?;
        bootstrapper
            .check_keys(&rt.evaluator)
            .map_err(SessionError::Bootstrap)?;
        let h = encapsulation.as_ref().map(EncapsulationKeys::hamming);
        if h != circuit.ephemeral_hamming {
            return Err(SessionError::Bootstrap(
                hecloud_ckks::CkksError::MissingKey(format!(
                    "the circuit's ephemeral secret has Hamming weight {:?}, the encapsulation keys {h:?}",
                    circuit.ephemeral_hamming
                )),
            ));
        }
        // A sparse circuit's ciphertexts pack its slots: vectors the server
        // encodes for them (a graph's plaintext operands) must too, or the
        // client's decoder averages them away.
        if bootstrapper.slots() != p.slots()
            && let Some(rt) = &mut self.ckks
        {
            rt.encoder =
                Encoder::with_slots(&p, bootstrapper.slots()).map_err(SessionError::Bootstrap)?;
        }
        self.boot = Some(BootRuntime {
            bootstrapper,
            encapsulation,
            prefer_over_refresh,
        });
        Ok(self)
    }

    /// Enables refresh nodes: the public keys that re-randomize before
    /// masking (each needs its scheme's parameters) and the CKKS mask
    /// policy (refused below the minimum hiding). A policy with flooding
    /// floods BGV refreshes too, at BGV's own width
    /// ([`BgvMaskPolicy::circuit_private`]).
    pub fn with_refresh(
        mut self,
        ckks_pk: Option<PublicKey>,
        bgv_pk: Option<PublicKey>,
        policy: hecloud_ckks::refresh::MaskPolicy,
    ) -> Result<Self, SessionError> {
        policy.validate()?;
        if ckks_pk.is_some() && self.params.ckks.is_none() {
            return Err(SessionError::NoParameters("CKKS"));
        }
        if bgv_pk.is_some() && self.params.bgv.is_none() {
            return Err(SessionError::NoParameters("BGV"));
        }
        // Flooding asked for is circuit privacy in both schemes; BGV's
        // width follows from its parameters, not from the CKKS width.
        let bgv_policy = match (&self.params.bgv, policy.flood_bits) {
            (Some(p), Some(_)) => BgvMaskPolicy::circuit_private(p),
            _ => BgvMaskPolicy::none(),
        };
        self.refresh = Some(RefreshKeys {
            ckks_pk,
            bgv_pk,
            policy,
            bgv_policy,
        });
        Ok(self)
    }

    /// Sets the BGV evaluation keys (checked already, e.g. generated in the
    /// same process); refused when the session has no BGV parameters but
    /// keys are given.
    pub fn with_bgv_keys(
        mut self,
        keys: Arc<hecloud_bgv::EvaluationKeys>,
    ) -> Result<Self, SessionError> {
        match &self.params.bgv {
            Some(p) => {
                self.bgv = Some(BgvRuntime {
                    evaluator: hecloud_bgv::Evaluator::new(p, keys.clone()),
                    keys,
                });
            }
            None => {
                if keys.relin.is_some() || !keys.galois.is_empty() {
                    return Err(SessionError::NoParameters("BGV"));
                }
            }
        }
        Ok(self)
    }

    /// A key set from decoded parts (keys already checked, e.g. generated in
    /// the same process).
    pub fn from_parts(
        params: SessionParams,
        eval: EvaluationKeys,
        tfhe: Option<TfheEngine>,
    ) -> Result<Self, SessionError> {
        let ckks = match &params.ckks {
            Some(p) => Some(CkksRuntime {
                evaluator: Evaluator::new(p, eval),
                encoder: Encoder::new(p),
            }),
            None => {
                if eval.relin.is_some() || !eval.galois.is_empty() {
                    return Err(SessionError::NoParameters("CKKS"));
                }
                None
            }
        };
        if tfhe.is_some() && params.tfhe.is_none() {
            return Err(SessionError::NoParameters("TFHE"));
        }
        let bgv = params.bgv.as_ref().map(|p| {
            let keys = Arc::new(hecloud_bgv::EvaluationKeys {
                relin: None,
                galois: GaloisKeys::new(),
            });
            BgvRuntime {
                evaluator: hecloud_bgv::Evaluator::new(p, keys.clone()),
                keys,
            }
        });
        Ok(Self {
            params,
            ckks,
            tfhe,
            tfhe_key: KeyId::NONE,
            bgv,
            refresh: None,
            boot: None,
        })
    }

    /// Sets the id of the client key its TFHE server key was made from
    /// ([`tfhe_key_id`]; [`SessionKeys::load`] reads it from the server
    /// key's container): the key its TFHE inputs must be under and its
    /// TFHE outputs are written under.
    pub fn with_tfhe_key_id(mut self, key: KeyId) -> Self {
        self.tfhe_key = key;
        self
    }

    /// The key id of [`Self::with_tfhe_key_id`] ([`KeyId::NONE`] unless set).
    pub fn tfhe_key_id(&self) -> KeyId {
        self.tfhe_key
    }

    /// The parameters.
    pub fn params(&self) -> &SessionParams {
        &self.params
    }

    /// The key every CKKS ciphertext of this session must be under: the
    /// one secret its CKKS relinearization, Galois, refresh and
    /// bootstrapping keys were all made under ([`KeyId::NONE`] for a
    /// session with none of them). Refused: keys of different secrets.
    pub fn ckks_key_id(&self) -> Result<KeyId, SessionError> {
        let eval = self.ckks.as_ref().map(|rt| rt.evaluator.keys());
        let pk = self.refresh.as_ref().and_then(|r| r.ckks_pk.as_ref());
        let boot = self.boot.as_ref().and_then(|b| b.encapsulation.as_ref());
        one_key(
            "CKKS",
            evaluation_key_ids(eval.and_then(|k| k.relin.as_ref()), eval.map(|k| &k.galois))
                .chain(pk.map(PublicKey::key_id))
                .chain(boot.map(EncapsulationKeys::key_id)),
        )
    }

    /// Refused, with the first offending input's position and the reason:
    /// a job input under another key than the session's (CKKS and BGV
    /// ciphertexts against [`Self::ckks_key_id`] and [`Self::bgv_key_id`],
    /// TFHE objects against [`Self::tfhe_key_id`]), which would compute
    /// noise with no error of its own; the session's keys themselves of
    /// two secrets. Each scheme's id is computed once, at its first input.
    pub fn check_input_keys(&self, inputs: &[Object]) -> Result<(), (usize, String)> {
        let (ckks, bgv) = (std::cell::OnceCell::new(), std::cell::OnceCell::new());
        for (i, input) in inputs.iter().enumerate() {
            let (found, key) = match input {
                Object::CkksCiphertext(ct) => {
                    (ct.key_id(), ckks.get_or_init(|| self.ckks_key_id()))
                }
                Object::BgvCiphertext(ct) => (ct.key_id(), bgv.get_or_init(|| self.bgv_key_id())),
                Object::TfheUint(_, k) | Object::TfheBit(_, k) => (*k, &Ok(self.tfhe_key)),
                _ => continue,
            };
            let key = key.as_ref().map_err(|e| (i, e.to_string()))?;
            key.check(found).map_err(|_| {
                (
                    i,
                    format!("encrypted under key {found}, the session's keys are under key {key}"),
                )
            })?;
        }
        Ok(())
    }

    /// [`Self::ckks_key_id`] for BGV: the key of the session's BGV
    /// relinearization, Galois and refresh keys.
    pub fn bgv_key_id(&self) -> Result<KeyId, SessionError> {
        let eval = self.bgv.as_ref().map(|rt| &rt.keys);
        let pk = self.refresh.as_ref().and_then(|r| r.bgv_pk.as_ref());
        one_key(
            "BGV",
            evaluation_key_ids(eval.and_then(|k| k.relin.as_ref()), eval.map(|k| &k.galois))
                .chain(pk.map(PublicKey::key_id)),
        )
    }

    /// The bytes its keys take in memory: the CKKS and BGV evaluation
    /// keys, refresh public keys and encapsulation keys expanded as they
    /// are held (seeded uploads are twice as large here), the TFHE server
    /// key by its serialized size. Not counted: the bootstrapper its
    /// sessions share (with its kept diagonals, see
    /// `Bootstrapper::KEPT_DIAGONAL_BYTES`) and small per-key tables.
    pub fn memory_bytes(&self) -> u64 {
        let ckks = self.ckks.as_ref().map_or(0, |rt| {
            let k = rt.evaluator.keys();
            k.relin.as_ref().map_or(0, |r| r.0.memory_bytes()) + k.galois.memory_bytes()
        });
        let bgv = self.bgv.as_ref().map_or(0, |rt| {
            rt.keys.relin.as_ref().map_or(0, |r| r.0.memory_bytes()) + rt.keys.galois.memory_bytes()
        });
        let refresh = self.refresh.as_ref().map_or(0, |r| {
            [&r.ckks_pk, &r.bgv_pk]
                .into_iter()
                .flatten()
                .map(PublicKey::memory_bytes)
                .sum()
        });
        let boot = self
            .boot
            .as_ref()
            .and_then(|b| b.encapsulation.as_ref())
            .map_or(0, EncapsulationKeys::memory_bytes);
        let tfhe = self
            .tfhe
            .as_ref()
            .map_or(0, |e| bincode::serialized_size(e.server_key()).unwrap_or(0));
        (ckks + bgv + refresh + boot) as u64 + tfhe
    }

    /// What graphs may use: schemes and keys present.
    pub fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities {
            ckks: self.params.ckks.clone(),
            ..Capabilities::default()
        };
        if let Some(rt) = &self.ckks {
            c.relin_key = rt.evaluator.keys().relin.is_some();
            c.galois_elements = rt.evaluator.keys().galois.elements().collect();
        }
        c.tfhe_server_key = self.tfhe.is_some();
        c.bgv = self.params.bgv.clone();
        if let Some(rt) = &self.bgv {
            c.bgv_relin_key = rt.keys.relin.is_some();
            c.bgv_galois_elements = rt.keys.galois.elements().collect();
        }
        c.sparse_slots = self
            .ckks
            .as_ref()
            .map(|rt| rt.encoder.slots())
            .filter(|&s| Some(s) != self.params.ckks.as_ref().map(|p| p.slots()));
        c.bootstrap = self.boot.as_ref().map(|b| crate::validate::BootstrapCaps {
            output_level: b.bootstrapper.output_level(),
            max_input_scale: b.bootstrapper.max_input_scale(),
            prefer_over_refresh: b.prefer_over_refresh,
            key_switches: b.bootstrapper.key_switches(),
        });
        if let Some(r) = &self.refresh {
            c.refresh_ckks = r.ckks_pk.is_some();
            c.refresh_bgv = r.bgv_pk.is_some();
            c.mask_policy = r.policy;
            c.bgv_mask_policy = r.bgv_policy;
        }
        c
    }

    pub(crate) fn refresh_keys(&self) -> Option<&RefreshKeys> {
        self.refresh.as_ref()
    }

    pub(crate) fn boot_runtime(&self) -> Option<&BootRuntime> {
        self.boot.as_ref()
    }

    pub(crate) fn bgv_runtime(&self) -> Option<&BgvRuntime> {
        self.bgv.as_ref()
    }

    pub(crate) fn ckks_runtime(&self) -> Option<&CkksRuntime> {
        self.ckks.as_ref()
    }

    pub(crate) fn tfhe_engine(&self) -> Option<&TfheEngine> {
        self.tfhe.as_ref()
    }

    /// Bootstraps and layers the session's TFHE engine has run so far, all
    /// jobs together (`None` without a TFHE server key): for metrics, and to
    /// watch a long integer node advance.
    pub fn tfhe_stats(&self) -> Option<hecloud_circuits::Stats> {
        use hecloud_circuits::BitEngine;
        self.tfhe.as_ref().map(BitEngine::stats)
    }
}

/// Size of a serialized CKKS ciphertext of `components` polynomials at `level`.
pub fn ckks_ciphertext_bytes(params: &CkksParameters, level: usize, components: usize) -> u64 {
    (HEADER_LEN + params.rlwe().poly_bytes(level) * components) as u64
}

/// Flag bit of a CKKS header whose uniform polynomials travel as seeds
/// (the [`hecloud_rlwe::serial`] format).
const CKKS_FLAG_SEEDED: u8 = 1;

/// Checks an object payload as its bytes arrive (an upload), so that bytes
/// that are not what their kind says are refused before they are stored,
/// not when a job first reads them. It holds nothing but the header and
/// decodes nothing, so it costs next to nothing per byte:
///
/// * every kind: the header as soon as it is in (magic, format version,
///   the kind byte against the announced kind, flags, the fields the kind
///   fixes), and that exactly the announced length arrives;
/// * CKKS and BGV kinds: level, scale, count, and the factor field (set
///   in a BGV ciphertext, not in a CKKS one); when the parameter hash is one of
///   the `known` sets (those of the tenant's sessions), the scheme and the level against
///   the chain and the announced length against the exact length the
///   header implies. An object uploaded before any session of its
///   parameters is only checked as far as its header goes: keys are
///   necessarily uploaded before the session that names them;
/// * TFHE kinds: the parameter hash (there is one TFHE set), the item
///   count, and the framing: every item's length within its limit and the
///   last item ending at the last byte.
///
/// Residues, TFHE-rs objects and key material are checked when the object
/// is decoded ([`SessionParams::decode`]).
#[derive(Debug)]
pub struct PayloadCheck {
    kind: ObjectKind,
    total: u64,
    received: u64,
    /// The header, while it is incomplete.
    head: Vec<u8>,
    known: Vec<Arc<hecloud_rlwe::Parameters>>,
    stage: Stage,
    /// The first refusal: every later call returns it.
    failed: Option<DecodeError>,
}

/// Where a [`PayloadCheck`] stands.
#[derive(Debug)]
enum Stage {
    /// The header is still coming.
    Header,
    /// The header was checked, and with it everything there is to check
    /// in the body (CKKS).
    Body,
    /// TFHE items: how many are still to start, the largest accepted, the
    /// length prefix read so far and the bytes of the current item still
    /// to come.
    Items {
        left: usize,
        max: u64,
        prefix: Vec<u8>,
        remaining: u64,
    },
}

fn is_ckks(kind: ObjectKind) -> bool {
    kind.rlwe_kind().is_some()
}

/// The CKKS kind whose payload has the shape of `kind`'s (RLWE kinds).
fn rlwe_shape(kind: ObjectKind) -> ObjectKind {
    match kind {
        ObjectKind::BgvCiphertext => ObjectKind::CkksCiphertext,
        ObjectKind::BgvPublicKey => ObjectKind::CkksPublicKey,
        ObjectKind::BgvRelinKey => ObjectKind::CkksRelinKey,
        ObjectKind::BgvGaloisKey => ObjectKind::CkksGaloisKey,
        k => k,
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> DecodeError {
    DecodeError::InvalidField {
        field,
        reason: reason.into(),
    }
}

/// What a kind byte of an object header names, in words (for refusals).
fn kind_words(byte: u8, ckks: bool) -> String {
    if ckks && byte == hecloud_rlwe::serial::Kind::SecretKey as u8 {
        return "an exported secret key (which never belongs on a server)".into();
    }
    match ObjectKind::from_u8(byte) {
        Ok(k) => format!("a {k:?}"),
        Err(_) => format!("kind {byte}"),
    }
}

impl PayloadCheck {
    /// A check of a payload of `kind` announced `total` bytes long; `known`
    /// are the CKKS parameter sets it may belong to (it may belong to
    /// another: see the type's notes).
    pub fn new(kind: ObjectKind, total: u64, known: Vec<Arc<hecloud_rlwe::Parameters>>) -> Self {
        Self {
            kind,
            total,
            received: 0,
            head: Vec::new(),
            known,
            stage: Stage::Header,
            failed: None,
        }
    }

    fn header_len(&self) -> usize {
        if is_ckks(self.kind) {
            HEADER_LEN
        } else {
            TFHE_HEADER_LEN
        }
    }

    /// Takes the next bytes; fails as soon as they show the payload is not
    /// a well-formed object of its kind and length.
    pub fn push(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.take(data);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    fn take(&mut self, mut data: &[u8]) -> Result<(), DecodeError> {
        if data.len() as u64 > self.total - self.received {
            return Err(DecodeError::TrailingBytes(
                (self.received + data.len() as u64 - self.total) as usize,
            ));
        }
        self.received += data.len() as u64;
        if matches!(self.stage, Stage::Header) {
            let take = (self.header_len() - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.head.len() < self.header_len() {
                return Ok(());
            }
            let head = std::mem::take(&mut self.head);
            self.stage = if is_ckks(self.kind) {
                self.check_ckks_header(&head)?;
                Stage::Body
            } else {
                self.check_tfhe_header(&head)?
            };
        }
        if let Stage::Items {
            left,
            max,
            prefix,
            remaining,
        } = &mut self.stage
        {
            while !data.is_empty() {
                if *remaining > 0 {
                    let n = (*remaining).min(data.len() as u64);
                    *remaining -= n;
                    data = &data[n as usize..];
                } else if *left == 0 {
                    return Err(DecodeError::TrailingBytes(data.len()));
                } else {
                    let n = (4 - prefix.len()).min(data.len());
                    prefix.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    if prefix.len() == 4 {
                        let len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
                        if u64::from(len) > *max {
                            return Err(DecodeError::TooLong {
                                field: "tfhe item",
                                len: len.into(),
                                max: *max,
                            });
                        }
                        prefix.clear();
                        *remaining = len.into();
                        *left -= 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Succeeds once every announced byte is in and the payload ended where
    /// its header said it would.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let truncated = |need: u64| DecodeError::Truncated {
            need: need as usize,
            have: self.received as usize,
        };
        if self.received < self.total {
            return Err(truncated(self.total));
        }
        match &self.stage {
            Stage::Header => Err(truncated(self.header_len() as u64)),
            Stage::Body => Ok(()),
            Stage::Items {
                left,
                prefix,
                remaining,
                ..
            } => {
                if *left == 0 && prefix.is_empty() && *remaining == 0 {
                    Ok(())
                } else {
                    Err(invalid(
                        "length",
                        format!(
                            "the bytes end inside a TFHE item ({left} more announced by the header)"
                        ),
                    ))
                }
            }
        }
    }

    fn check_kind_byte(&self, found: u8, ckks: bool) -> Result<(), DecodeError> {
        if found == self.kind.rlwe_kind().unwrap_or(self.kind as u8) {
            return Ok(());
        }
        Err(invalid(
            "object kind",
            format!(
                "the bytes hold {} where the upload announces a {:?}",
                kind_words(found, ckks),
                self.kind
            ),
        ))
    }

    fn check_ckks_header(&self, h: &[u8]) -> Result<(), DecodeError> {
        use hecloud_rlwe::serial::{FORMAT_VERSION, MAGIC, MAX_CIPHERTEXT_COMPONENTS};
        let u32_at = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        if h[..4] != MAGIC {
            return Err(invalid(
                "magic",
                "not a CKKS object (its bytes do not start with `HECL`)",
            ));
        }
        let version = u16::from_le_bytes([h[4], h[5]]);
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        self.check_kind_byte(h[6], true)?;
        let flags = h[7];
        let seeded = flags == CKKS_FLAG_SEEDED;
        let level = u32_at(40) as usize;
        let mut scale = [0u8; 8];
        scale.copy_from_slice(&h[44..52]);
        let scale = f64::from_le_bytes(scale);
        let count = u32_at(52) as usize;
        let extra = u64::from_le_bytes([h[56], h[57], h[58], h[59], h[60], h[61], h[62], h[63]]);
        // A BGV ciphertext carries its factor (never 0), a CKKS one nothing.
        match self.kind {
            ObjectKind::BgvCiphertext if extra == 0 => {
                return Err(invalid(
                    "factor",
                    "a BGV ciphertext without a factor (a CKKS ciphertext?)",
                ));
            }
            ObjectKind::CkksCiphertext if extra != 0 => {
                return Err(invalid(
                    "factor",
                    "a CKKS ciphertext with a factor (a BGV ciphertext?)",
                ));
            }
            _ => {}
        }
        let shape = rlwe_shape(self.kind);
        let flags_ok = match shape {
            ObjectKind::CkksPlaintext => flags == 0,
            ObjectKind::CkksPublicKey => seeded,
            _ => flags == 0 || seeded,
        };
        if !flags_ok {
            return Err(invalid(
                "flags",
                format!("{flags:#x} for a {:?}", self.kind),
            ));
        }
        let count_ok = match shape {
            ObjectKind::CkksCiphertext => {
                (2..=MAX_CIPHERTEXT_COMPONENTS).contains(&count) && !(seeded && count != 2)
            }
            ObjectKind::CkksPlaintext => count == 1,
            ObjectKind::CkksPublicKey => count == 2,
            _ => count >= 1,
        };
        if !count_ok {
            return Err(invalid("count", format!("{count} for a {:?}", self.kind)));
        }
        let carries_scale = matches!(
            shape,
            ObjectKind::CkksCiphertext | ObjectKind::CkksPlaintext
        );
        if carries_scale && !(scale.is_finite() && scale > 0.0) {
            return Err(invalid(
                "scale",
                format!("{scale} is not a positive finite number"),
            ));
        }
        if self.total <= HEADER_LEN as u64 {
            return Err(DecodeError::Truncated {
                need: HEADER_LEN + 1,
                have: self.total as usize,
            });
        }
        let mut p = self
            .known
            .iter()
            .find(|p| p.hash()[..] == h[8..40])
            .cloned();
        if p.is_none() && self.kind == ObjectKind::CkksSwitchingKey {
            // Bootstrapping's key to its sparse secret lives over q₀·P.
            p = self
                .known
                .iter()
                .filter_map(|k| k.bottom().ok())
                .find(|b| b.hash()[..] == h[8..40]);
        }
        let Some(p) = p else {
            return Ok(());
        };
        // Public keys are whole; switching keys may be cut to a lower
        // level (`SwitchingKey::at_level`).
        let whole_key = shape == ObjectKind::CkksPublicKey;
        if (whole_key && level != p.max_level()) || level > p.max_level() {
            return Err(invalid(
                "level",
                format!(
                    "{level} for a {:?} of parameters whose top level is {}",
                    self.kind,
                    p.max_level()
                ),
            ));
        }
        let key_poly =
            hecloud_rlwe::serial::packed_poly_bytes(p.qp_at(level).map_err(|_| {
                invalid("level", format!("{level} outside the parameters' levels"))
            })?);
        if self.kind.is_bgv() != p.plaintext_modulus().is_some() {
            return Err(invalid(
                "parameter hash",
                format!("a {:?} of parameters of another scheme", self.kind),
            ));
        }
        let body = match shape {
            ObjectKind::CkksCiphertext if seeded => p.poly_bytes(level) + 32,
            ObjectKind::CkksCiphertext => p.poly_bytes(level) * count,
            ObjectKind::CkksPlaintext => p.poly_bytes(level),
            ObjectKind::CkksPublicKey => key_poly + 32,
            _ => {
                let digits = p.dnum_at(level).unwrap_or(0);
                if count != digits {
                    return Err(invalid(
                        "count",
                        format!(
                            "{count} digits where the parameters have {digits} at level {level}"
                        ),
                    ));
                }
                count * (key_poly + if seeded { 32 } else { key_poly })
            }
        };
        let need = (HEADER_LEN + body) as u64;
        if self.total != need {
            return Err(invalid(
                "length",
                format!(
                    "{} bytes announced where its header (level {level}, count {count}) needs {need}",
                    self.total
                ),
            ));
        }
        Ok(())
    }

    fn check_tfhe_header(&self, h: &[u8]) -> Result<Stage, DecodeError> {
        if h[..4] != TFHE_MAGIC {
            return Err(invalid(
                "magic",
                "not a TFHE object (its bytes do not start with `HECT`)",
            ));
        }
        let version = u16::from_le_bytes([h[4], h[5]]);
        if version != TFHE_FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                supported: TFHE_FORMAT_VERSION,
            });
        }
        self.check_kind_byte(h[6], false)?;
        if h[7] != 0 {
            return Err(invalid("flags", "no flag is defined"));
        }
        if h[8..40] != TfheParamSpec::Message2Carry2.hash() {
            return Err(invalid(
                "parameter hash",
                "not the TFHE parameter set of this server",
            ));
        }
        let count = u32::from_le_bytes([h[56], h[57], h[58], h[59]]) as usize;
        let (lo, hi) = match self.kind {
            ObjectKind::TfheUint => (MIN_WIDTH, MAX_WIDTH),
            _ => (1, 1),
        };
        if !(lo..=hi).contains(&count) {
            return Err(invalid(
                "count",
                format!("{count} items where {lo}..={hi} are accepted"),
            ));
        }
        let need = (TFHE_HEADER_LEN + 4 * count) as u64;
        if self.total < need {
            return Err(DecodeError::Truncated {
                need: need as usize,
                have: self.total as usize,
            });
        }
        let max = if self.kind == ObjectKind::TfheServerKey {
            MAX_TFHE_SERVER_KEY_BYTES
        } else {
            MAX_TFHE_CIPHERTEXT_BYTES
        };
        Ok(Stage::Items {
            left: count,
            max: max as u64,
            prefix: Vec::new(),
            remaining: 0,
        })
    }
}

#[cfg(test)]
mod payload_check_tests {
    use super::*;

    fn ciphertext() -> (Arc<CkksParameters>, Vec<u8>) {
        let params =
            CkksParameters::new_insecure_for_tests(hecloud_ckks::params::test_literal(11, 3), 40)
                .unwrap();
        let keys = hecloud_ckks::KeySet::generate(&params, &[], false).unwrap();
        let pt = Encoder::new(&params)
            .encode_real(&[1.0, 2.0], params.max_level(), params.default_scale())
            .unwrap();
        let ct = keys.encrypt(&pt).unwrap().to_bytes();
        (params, ct)
    }

    /// `bytes` as a `kind` pushed in pieces of `split`.
    fn check(
        kind: ObjectKind,
        bytes: &[u8],
        known: &[Arc<hecloud_rlwe::Parameters>],
        split: usize,
    ) -> Result<(), DecodeError> {
        let mut c = PayloadCheck::new(kind, bytes.len() as u64, known.to_vec());
        for piece in bytes.chunks(split) {
            c.push(piece)?;
        }
        c.finish()
    }

    #[test]
    fn a_ciphertext_passes_in_any_split_and_a_cut_or_mislabelled_one_does_not() {
        let (params, ct) = ciphertext();
        let known = [params.rlwe().clone()];
        for split in [1, 7, 64, 1000, ct.len()] {
            check(ObjectKind::CkksCiphertext, &ct, &known, split).unwrap();
            check(ObjectKind::CkksCiphertext, &ct, &[], split).unwrap();
        }
        for kind in [
            ObjectKind::CkksPlaintext,
            ObjectKind::CkksRelinKey,
            ObjectKind::TfheUint,
        ] {
            assert!(check(kind, &ct, &known, 100).is_err(), "{kind:?}");
        }
        for len in [0, 10, 64, ct.len() - 1] {
            assert!(check(ObjectKind::CkksCiphertext, &ct[..len], &known, 9).is_err());
        }
        // Of parameters it does not know, only the header is checked.
        check(ObjectKind::CkksCiphertext, &ct[..ct.len() - 1], &[], 9).unwrap();
        let mut junk = ct.clone();
        junk[0] ^= 1;
        assert!(check(ObjectKind::CkksCiphertext, &junk, &[], 9).is_err());
    }

    #[test]
    fn a_tfhe_container_must_end_with_its_last_item() {
        let mut w = Writer::new();
        w.bytes_raw(&TFHE_MAGIC);
        w.u16(TFHE_FORMAT_VERSION);
        w.u8(ObjectKind::TfheUint as u8);
        w.u8(0);
        w.bytes_raw(&TfheParamSpec::Message2Carry2.hash());
        w.bytes_raw(&[0; 16]);
        w.len(2);
        w.bytes(b"abc");
        w.bytes(b"");
        let b = w.into_bytes();
        for split in [1, 5, 60, b.len()] {
            check(ObjectKind::TfheUint, &b, &[], split).unwrap();
            assert!(check(ObjectKind::TfheBit, &b, &[], split).is_err());
            assert!(check(ObjectKind::TfheUint, &b[..b.len() - 5], &[], split).is_err());
            let mut long = b.clone();
            long.push(0);
            assert!(check(ObjectKind::TfheUint, &long, &[], split).is_err());
        }
    }
}

#[cfg(test)]
mod shared_bootstrapper_tests {
    use super::*;
    use hecloud_ckks::KeySet;
    use hecloud_ckks::boot::BootPreset;

    #[test]
    fn sessions_of_one_circuit_share_its_bootstrapper() {
        let (literal, log_scale, circuit) = BootPreset::TestN12.literal();
        let params = CkksParameters::new_insecure_for_tests(literal, log_scale).unwrap();
        let levels = Bootstrapper::new(&params, circuit)
            .unwrap()
            .rotation_levels();
        let keys = KeySet::generate_at_levels(&params, &levels, true).unwrap();
        let h = circuit.ephemeral_hamming.unwrap();
        let encapsulation = EncapsulationKeys::generate(&params, keys.secret_key(), h).unwrap();
        let session = |circuit: BootstrapLiteral| {
            let sp = SessionParams {
                ckks: Some(params.clone()),
                tfhe: None,
                bgv: None,
            };
            SessionKeys::from_parts(sp, keys.evaluation_keys(), None)
                .unwrap()
                .with_bootstrap(circuit, Some(encapsulation.clone()), false)
                .unwrap()
        };
        let boot = |s: &SessionKeys| s.boot_runtime().unwrap().bootstrapper.clone();
        // Circuits no other test uses (the list is process-wide): a
        // larger message ratio, then that and full slots spelled out.
        let mine = BootstrapLiteral {
            log_message_ratio: circuit.log_message_ratio + 1,
            ..circuit
        };
        let (a, b) = (session(mine), session(mine));
        assert!(Arc::ptr_eq(&boot(&a), &boot(&b)));
        let full = BootstrapLiteral {
            slots: Some(params.slots()),
            ..mine
        };
        assert!(Arc::ptr_eq(&boot(&a), &boot(&session(full))));
        // Another circuit gets its own.
        let other = BootstrapLiteral {
            log_message_ratio: circuit.log_message_ratio + 2,
            ..circuit
        };
        assert!(!Arc::ptr_eq(&boot(&a), &boot(&session(other))));
        // Released with its last session.
        let weak = Arc::downgrade(&boot(&a));
        drop((a, b));
        assert!(weak.upgrade().is_none());
    }
}
