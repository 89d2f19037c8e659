//! Sessions and objects: which parameter set a session computes under, which
//! evaluation keys it uses, and the descriptors of stored objects.
//!
//! ```
//! use hecloud_protocol::{CkksParamSpec, Message, ParamSpec, SessionSpec, TfheParamSpec};
//! use hecloud_ckks::Preset;
//! let spec = SessionSpec {
//!     params: ParamSpec {
//!         ckks: Some(CkksParamSpec::Preset(Preset::N16)),
//!         tfhe: Some(TfheParamSpec::Message2Carry2),
//!     },
//!     relin_key: None,
//!     galois_keys: vec![],
//!     tfhe_server_key: None,
//!     ..SessionSpec::default()
//! };
//! let bytes = spec.encode();
//! assert_eq!(SessionSpec::decode(&bytes).unwrap(), spec);
//! ```

use std::fmt;
use std::sync::Arc;

use hecloud_bgv::BgvParameters;
use hecloud_ckks::boot::BootstrapLiteral;
use hecloud_ckks::{CkksParameters, Preset};
use hecloud_rlwe::{ParametersLiteral, SecretDistribution, params::SIGMA};

use crate::codec::{DecodeError, DecodeResult, Message, MessageKind, Reader, Writer};
use crate::error::SessionError;

/// Most Galois keys one session may reference.
pub const MAX_GALOIS_KEYS: usize = 4096;
/// Most primes in a literal CKKS modulus chain (Q and P each).
pub const MAX_PRIMES: usize = 64;

/// The identity of a stored object: the BLAKE3 hash of its payload bytes
/// (content addressed: equal bytes, equal id).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub [u8; 32]);

impl ObjectId {
    /// The id of `payload`.
    pub fn of(payload: &[u8]) -> Self {
        Self(*blake3::hash(payload).as_bytes())
    }

    /// Lower-case hex (64 characters).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 64 hex characters.
    pub fn from_hex(s: &str) -> Option<Self> {
        let s = s.as_bytes();
        if s.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            let hex = std::str::from_utf8(&s[2 * i..2 * i + 2]).ok()?;
            *o = u8::from_str_radix(hex, 16).ok()?;
        }
        Some(Self(out))
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// A CKKS parameter set: a named 128-bit preset or a literal.
#[derive(Debug, Clone, PartialEq)]
pub enum CkksParamSpec {
    /// A named preset ([`Preset`]).
    Preset(Preset),
    /// A literal chain; built with the 128-bit check unless the server
    /// explicitly allows insecure sets (tests).
    Literal {
        /// log2 N (10..=17).
        log_n: u32,
        /// Bit sizes of the ciphertext primes, q_0 first.
        log_q: Vec<u32>,
        /// Bit sizes of the special primes.
        log_p: Vec<u32>,
        /// Hamming weight of a sparse ternary secret; `None`: uniform ternary.
        hamming_weight: Option<u32>,
        /// Key-switching digits; `None`: ⌈|Q|/|P|⌉.
        dnum: Option<u32>,
        /// log2 of the default scale.
        log_scale: u32,
    },
}

impl CkksParamSpec {
    /// The literal spec of `literal` with default scale 2^log_scale.
    pub fn from_literal(literal: &ParametersLiteral, log_scale: u32) -> Self {
        Self::Literal {
            log_n: literal.log_n,
            log_q: literal.log_q.clone(),
            log_p: literal.log_p.clone(),
            hamming_weight: match literal.secret {
                SecretDistribution::Ternary => None,
                SecretDistribution::TernaryHamming(h) => Some(h as u32),
            },
            dnum: literal.dnum.map(|d| d as u32),
            log_scale,
        }
    }

    /// Builds the parameters. Insecure literals are refused unless
    /// `allow_insecure` (tests and local demos only).
    pub fn build(&self, allow_insecure: bool) -> Result<Arc<CkksParameters>, SessionError> {
        match self {
            Self::Preset(p) => Ok(p.build()?),
            Self::Literal {
                log_n,
                log_q,
                log_p,
                hamming_weight,
                dnum,
                log_scale,
            } => {
                let lit = ParametersLiteral {
                    log_n: *log_n,
                    log_q: log_q.clone(),
                    log_p: log_p.clone(),
                    secret: match hamming_weight {
                        None => SecretDistribution::Ternary,
                        Some(h) => SecretDistribution::TernaryHamming(*h as usize),
                    },
                    sigma: SIGMA,
                    dnum: dnum.map(|d| d as usize),
                    plaintext_modulus: None,
                };
                Ok(if allow_insecure {
                    CkksParameters::new_insecure_for_tests(lit, *log_scale)?
                } else {
                    CkksParameters::new(lit, *log_scale)?
                })
            }
        }
    }

    fn write(&self, w: &mut Writer) {
        match self {
            Self::Preset(p) => {
                w.u8(1);
                w.u8(match p {
                    Preset::N13 => 13,
                    Preset::N14 => 14,
                    Preset::N15 => 15,
                    Preset::N16 => 16,
                    Preset::N17 => 17,
                });
            }
            Self::Literal {
                log_n,
                log_q,
                log_p,
                hamming_weight,
                dnum,
                log_scale,
            } => {
                w.u8(2);
                w.u32(*log_n);
                w.len(log_q.len());
                log_q.iter().for_each(|&x| w.u32(x));
                w.len(log_p.len());
                log_p.iter().for_each(|&x| w.u32(x));
                w.u32(hamming_weight.unwrap_or(0));
                w.u32(dnum.unwrap_or(0));
                w.u32(*log_scale);
            }
        }
    }

    fn read(r: &mut Reader<'_>) -> DecodeResult<Self> {
        match r.u8()? {
            1 => {
                let t = r.u8()?;
                let p = match t {
                    13 => Preset::N13,
                    14 => Preset::N14,
                    15 => Preset::N15,
                    16 => Preset::N16,
                    17 => Preset::N17,
                    _ => {
                        return Err(DecodeError::UnknownTag {
                            field: "ckks preset",
                            tag: t as u64,
                        });
                    }
                };
                Ok(Self::Preset(p))
            }
            2 => {
                let log_n = read_log_n(r)?;
                let log_q = read_primes(r, "log_q")?;
                let log_p = read_primes(r, "log_p")?;
                let h = r.u32()?;
                let d = r.u32()?;
                let log_scale = r.u32()?;
                Ok(Self::Literal {
                    log_n,
                    log_q,
                    log_p,
                    hamming_weight: (h != 0).then_some(h),
                    dnum: (d != 0).then_some(d),
                    log_scale,
                })
            }
            t => Err(DecodeError::UnknownTag {
                field: "ckks parameters",
                tag: t as u64,
            }),
        }
    }
}

/// A BGV parameter set: a named 128-bit preset ([`hecloud_bgv::Preset`],
/// `bgv-n13` … `bgv-n16`) or a literal chain with its plaintext modulus.
///
/// ```
/// use hecloud_protocol::BgvParamSpec;
/// let spec = BgvParamSpec::from_name("bgv-n13").unwrap();
/// assert_eq!(spec.build(false).unwrap().t(), 65537);
/// // A small literal builds only where the server allows insecure sets.
/// let lit = BgvParamSpec::Literal { log_n: 10, log_q: vec![60, 50], log_p: vec![60], t: 65537 };
/// assert!(lit.build(false).is_err());
/// assert!(lit.build(true).is_ok());
/// // A plaintext modulus without slots (a prime, but not 1 mod 2N) is refused.
/// let coefficients = BgvParamSpec::Literal { log_n: 10, log_q: vec![60, 50], log_p: vec![60], t: 65521 };
/// assert!(coefficients.build(true).is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum BgvParamSpec {
    /// A named preset.
    Preset(hecloud_bgv::Preset),
    /// A literal chain; built with the 128-bit check unless the server
    /// explicitly allows insecure sets (tests).
    Literal {
        /// log2 N (10..=17).
        log_n: u32,
        /// Bit sizes of the ciphertext primes, q_0 first.
        log_q: Vec<u32>,
        /// Bit sizes of the special primes.
        log_p: Vec<u32>,
        /// The plaintext modulus t.
        t: u64,
    },
}

impl BgvParamSpec {
    /// The preset of a name (`bgv-n13` … `bgv-n16`).
    pub fn from_name(name: &str) -> Option<Self> {
        hecloud_bgv::Preset::from_name(name).map(Self::Preset)
    }

    /// The literal spec of `literal` (its plaintext modulus, 0 if none: refused
    /// when built).
    pub fn from_literal(literal: &ParametersLiteral) -> Self {
        Self::Literal {
            log_n: literal.log_n,
            log_q: literal.log_q.clone(),
            log_p: literal.log_p.clone(),
            t: literal.plaintext_modulus.unwrap_or(0),
        }
    }

    /// Builds the parameters. Insecure literals are refused unless
    /// `allow_insecure` (tests and local demos only), and so is a plaintext
    /// modulus without slots (a prime t ≡ 1 mod 2N is needed: a graph's
    /// BGV operations are slotwise).
    pub fn build(&self, allow_insecure: bool) -> Result<Arc<BgvParameters>, SessionError> {
        match self {
            Self::Preset(p) => Ok(p.build()?),
            Self::Literal {
                log_n,
                log_q,
                log_p,
                t,
            } => {
                let lit = ParametersLiteral {
                    log_n: *log_n,
                    log_q: log_q.clone(),
                    log_p: log_p.clone(),
                    secret: SecretDistribution::Ternary,
                    sigma: SIGMA,
                    dnum: None,
                    plaintext_modulus: Some(*t),
                };
                let p = if allow_insecure {
                    BgvParameters::new_insecure_for_tests(lit)?
                } else {
                    BgvParameters::new(lit)?
                };
                // Every BGV operation of a graph is slotwise: under a t
                // without slots, products, rotations and comparisons would
                // act on coefficients and return other values silently.
                if p.slots().is_none() {
                    return Err(hecloud_bgv::BgvError::NoBatching { t: p.t(), n: p.n() }.into());
                }
                Ok(p)
            }
        }
    }

    fn write(&self, w: &mut Writer) {
        match self {
            Self::Preset(p) => {
                w.u8(1);
                w.u8(match p {
                    hecloud_bgv::Preset::N13 => 13,
                    hecloud_bgv::Preset::N14 => 14,
                    hecloud_bgv::Preset::N15 => 15,
                    hecloud_bgv::Preset::N16 => 16,
                });
            }
            Self::Literal {
                log_n,
                log_q,
                log_p,
                t,
            } => {
                w.u8(2);
                w.u32(*log_n);
                w.len(log_q.len());
                log_q.iter().for_each(|&x| w.u32(x));
                w.len(log_p.len());
                log_p.iter().for_each(|&x| w.u32(x));
                w.u64(*t);
            }
        }
    }

    fn read(r: &mut Reader<'_>) -> DecodeResult<Self> {
        match r.u8()? {
            1 => {
                let tag = r.u8()?;
                let p = match tag {
                    13 => hecloud_bgv::Preset::N13,
                    14 => hecloud_bgv::Preset::N14,
                    15 => hecloud_bgv::Preset::N15,
                    16 => hecloud_bgv::Preset::N16,
                    _ => {
                        return Err(DecodeError::UnknownTag {
                            field: "bgv preset",
                            tag: tag as u64,
                        });
                    }
                };
                Ok(Self::Preset(p))
            }
            2 => {
                let log_n = read_log_n(r)?;
                let log_q = read_primes(r, "log_q")?;
                let log_p = read_primes(r, "log_p")?;
                let t = r.u64()?;
                if t < 2 {
                    return Err(DecodeError::InvalidField {
                        field: "plaintext modulus",
                        reason: format!("t = {t}"),
                    });
                }
                Ok(Self::Literal {
                    log_n,
                    log_q,
                    log_p,
                    t,
                })
            }
            tag => Err(DecodeError::UnknownTag {
                field: "bgv parameters",
                tag: tag as u64,
            }),
        }
    }
}

/// log2 N of a literal parameter set (10..=17).
fn read_log_n(r: &mut Reader<'_>) -> DecodeResult<u32> {
    let log_n = r.u32()?;
    if !(10..=17).contains(&log_n) {
        return Err(DecodeError::InvalidField {
            field: "log_n",
            reason: format!("{log_n} is outside 10..=17"),
        });
    }
    Ok(log_n)
}

/// Bit sizes of a literal's primes (17..=61 bits each, at most
/// [`MAX_PRIMES`]).
fn read_primes(r: &mut Reader<'_>, field: &'static str) -> DecodeResult<Vec<u32>> {
    let n = r.count(field, MAX_PRIMES, 4)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let b = r.u32()?;
        if !(17..=61).contains(&b) {
            return Err(DecodeError::InvalidField {
                field,
                reason: format!("prime of {b} bits (17..=61 accepted)"),
            });
        }
        v.push(b);
    }
    Ok(v)
}

/// The TFHE parameter set (only one so far: the one the circuits use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TfheParamSpec {
    /// [`hecloud_circuits::TFHE_PARAMS`]: TFHE-rs shortint
    /// `PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128`.
    Message2Carry2,
}

impl TfheParamSpec {
    /// The identity objects of this set are checked against (the analogue of
    /// the RLWE parameter hash).
    pub fn hash(self) -> [u8; 32] {
        match self {
            Self::Message2Carry2 => *blake3::hash(
                b"hecloud tfhe-rs 1.8 shortint PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128",
            )
            .as_bytes(),
        }
    }
}

/// The parameter sets of a session: CKKS, TFHE, or both.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParamSpec {
    /// The CKKS parameter set, if the session computes with CKKS.
    pub ckks: Option<CkksParamSpec>,
    /// The TFHE parameter set, if the session runs integer circuits.
    pub tfhe: Option<TfheParamSpec>,
}

impl ParamSpec {
    /// Writes the spec (no envelope).
    pub fn write(&self, w: &mut Writer) {
        match &self.ckks {
            None => w.u8(0),
            Some(c) => {
                w.u8(1);
                c.write(w);
            }
        }
        w.u8(match self.tfhe {
            None => 0,
            Some(TfheParamSpec::Message2Carry2) => 1,
        });
    }

    /// Reads a spec written by [`ParamSpec::write`].
    pub fn read(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let ckks = match r.u8()? {
            0 => None,
            1 => Some(CkksParamSpec::read(r)?),
            t => {
                return Err(DecodeError::UnknownTag {
                    field: "ckks presence",
                    tag: t as u64,
                });
            }
        };
        let tfhe = match r.u8()? {
            0 => None,
            1 => Some(TfheParamSpec::Message2Carry2),
            t => {
                return Err(DecodeError::UnknownTag {
                    field: "tfhe parameters",
                    tag: t as u64,
                });
            }
        };
        Ok(Self { ckks, tfhe })
    }
}

fn write_opt_id(w: &mut Writer, id: &Option<ObjectId>) {
    match id {
        None => w.u8(0),
        Some(id) => {
            w.u8(1);
            w.bytes_raw(&id.0);
        }
    }
}

fn read_opt_id(r: &mut Reader<'_>, field: &'static str) -> DecodeResult<Option<ObjectId>> {
    Ok(if r.bool(field)? {
        Some(ObjectId(r.hash()?))
    } else {
        None
    })
}

/// What a session computes under: its parameter sets and the evaluation keys
/// (stored objects, by id) the server may use. No secret is ever part of it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionSpec {
    /// Parameter sets.
    pub params: ParamSpec,
    /// The CKKS relinearization key.
    pub relin_key: Option<ObjectId>,
    /// The CKKS Galois keys (rotations, conjugation).
    pub galois_keys: Vec<ObjectId>,
    /// The TFHE server key.
    pub tfhe_server_key: Option<ObjectId>,
    /// The BGV parameter set, if the session computes on BGV integer
    /// vectors. (It sits here rather than in [`ParamSpec`], whose fields
    /// callers name in full; a session without BGV encodes as before.)
    pub bgv: Option<BgvParamSpec>,
    /// The BGV relinearization key.
    pub bgv_relin_key: Option<ObjectId>,
    /// The BGV Galois keys (row rotations, the column swap).
    pub bgv_galois_keys: Vec<ObjectId>,
    /// Client-aided refresh: the public keys the server re-randomizes with
    /// and the mask policy. `None`: refresh nodes are refused.
    pub refresh: Option<RefreshSpec>,
    /// Bootstrapping: the circuit and its encapsulation keys (its rotation
    /// keys, the conjugation key and the relinearization key are among the
    /// keys above). `None`: bootstrap nodes are refused.
    pub bootstrap: Option<BootstrapSpec>,
}

/// What a session needs for bootstrapping ([`hecloud_ckks::boot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootstrapSpec {
    /// The circuit (checked against the CKKS parameters when the session's
    /// keys load).
    pub circuit: BootstrapLiteral,
    /// The key from the secret to the circuit's ephemeral sparse secret,
    /// over q₀·P (a [`ObjectKind::CkksSwitchingKey`]); needed when the
    /// circuit has an ephemeral secret.
    pub to_sparse_key: Option<ObjectId>,
    /// The key back from the ephemeral secret, over the whole chain.
    pub from_sparse_key: Option<ObjectId>,
    /// Whether the planner inserts bootstrapping rather than refresh where
    /// a graph runs out of levels, even though a key holder could refresh
    /// (a job that must not depend on one being online). Without a refresh
    /// part, bootstrapping is the planner's only choice anyway.
    pub prefer_over_refresh: bool,
}

/// The flag of [`BootstrapLiteral::eval_mod_at_integers`] in the degree's
/// field of a [`BootstrapSpec`].
const AT_INTEGERS: u32 = 1 << 31;

impl BootstrapSpec {
    fn write(&self, w: &mut Writer) {
        let c = &self.circuit;
        for x in [c.cts_levels, c.stc_levels] {
            w.u32(u32::try_from(x).unwrap_or(u32::MAX));
        }
        // The fit at the integers is the degree's top bit (degrees stay far
        // below it), so that specs without it keep their encoding and id.
        let degree =
            u32::try_from(c.eval_mod_degree).map_or(AT_INTEGERS - 1, |d| d.min(AT_INTEGERS - 1));
        let fit = if c.eval_mod_at_integers {
            AT_INTEGERS
        } else {
            0
        };
        w.u32(degree | fit);
        w.u32(u32::try_from(c.ephemeral_hamming.unwrap_or(0)).unwrap_or(u32::MAX));
        w.u32(c.eval_mod_bound);
        w.u32(c.double_angles);
        w.u32(c.log_message_ratio);
        write_opt_id(w, &self.to_sparse_key);
        write_opt_id(w, &self.from_sparse_key);
        w.bool(self.prefer_over_refresh);
        w.u32(c.slots.map_or(0, |s| u32::try_from(s).unwrap_or(u32::MAX)));
        // Last and only when set, so that specs without it keep their
        // encoding and their id.
        if c.arcsine_degree != 0 {
            w.u32(u32::try_from(c.arcsine_degree).unwrap_or(u32::MAX));
        }
    }

    fn read(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let mut usize_field = || r.u32().map(|x| x as usize);
        let cts_levels = usize_field()?;
        let stc_levels = usize_field()?;
        let degree = usize_field()?;
        let hamming = usize_field()?;
        let circuit = BootstrapLiteral {
            cts_levels,
            stc_levels,
            eval_mod_degree: degree & (AT_INTEGERS as usize - 1),
            eval_mod_at_integers: degree & AT_INTEGERS as usize != 0,
            ephemeral_hamming: (hamming != 0).then_some(hamming),
            eval_mod_bound: r.u32()?,
            double_angles: r.u32()?,
            log_message_ratio: r.u32()?,
            slots: None,
            arcsine_degree: 0,
        };
        let to_sparse_key = read_opt_id(r, "to-sparse key presence")?;
        let from_sparse_key = read_opt_id(r, "from-sparse key presence")?;
        let prefer_over_refresh = r.bool("bootstrapping preference")?;
        let slots = r.u32()? as usize;
        // The bootstrapping part ends the spec: a field after `slots` is the
        // arcsine degree, written only when not 0 (one encoding per spec).
        let arcsine_degree = if r.remaining() == 0 {
            0
        } else {
            match r.u32()? {
                0 => {
                    return Err(DecodeError::InvalidField {
                        field: "arcsine degree",
                        reason: "0 is written by leaving the field out".into(),
                    });
                }
                d => d as usize,
            }
        };
        Ok(Self {
            circuit: BootstrapLiteral {
                slots: (slots != 0).then_some(slots),
                arcsine_degree,
                ..circuit
            },
            to_sparse_key,
            from_sparse_key,
            prefer_over_refresh,
        })
    }
}

/// What a session needs for client-aided refresh ([`crate::refresh`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RefreshSpec {
    /// The CKKS public key (CKKS refresh needs it).
    pub ckks_public_key: Option<ObjectId>,
    /// The BGV public key (BGV refresh needs it).
    pub bgv_public_key: Option<ObjectId>,
    /// Statistical hiding of the CKKS mask in bits; 0 for the default
    /// ([`hecloud_ckks::refresh::MaskPolicy::DEFAULT_LAMBDA_S`]).
    pub lambda_s: u32,
    /// Width of the CKKS circuit-privacy flooding noise in bits; 0 for
    /// none. Any other value floods BGV refreshes too, at the width BGV's
    /// parameters call for
    /// ([`BgvMaskPolicy::circuit_private`](hecloud_circuits::packed::BgvMaskPolicy::circuit_private)).
    pub flood_bits: u32,
}

impl RefreshSpec {
    /// The CKKS mask policy this spec asks for.
    pub fn mask_policy(&self) -> hecloud_ckks::refresh::MaskPolicy {
        use hecloud_ckks::refresh::MaskPolicy;
        MaskPolicy {
            lambda_s: if self.lambda_s == 0 {
                MaskPolicy::DEFAULT_LAMBDA_S
            } else {
                self.lambda_s
            },
            value_bits: None,
            flood_bits: (self.flood_bits != 0).then_some(self.flood_bits),
        }
    }
}

impl SessionSpec {
    /// The session's identity: the BLAKE3 hash of its encoding.
    pub fn id(&self) -> ObjectId {
        ObjectId::of(&self.encode())
    }

    /// The slots the session's CKKS ciphertexts are packed in when its
    /// bootstrapping circuit is sparse; `None`: N/2 (full slots).
    pub fn sparse_slots(&self) -> Option<usize> {
        self.bootstrap.as_ref().and_then(|b| b.circuit.slots)
    }

    fn has_bgv_part(&self) -> bool {
        self.bgv.is_some() || self.bgv_relin_key.is_some() || !self.bgv_galois_keys.is_empty()
    }
}

impl Message for SessionSpec {
    const KIND: MessageKind = MessageKind::SessionSpec;

    fn write_body(&self, w: &mut Writer) {
        self.params.write(w);
        write_opt_id(w, &self.relin_key);
        w.len(self.galois_keys.len());
        self.galois_keys.iter().for_each(|id| w.bytes_raw(&id.0));
        write_opt_id(w, &self.tfhe_server_key);
        // The BGV part: present only in sessions that use BGV (announced by
        // the envelope's flag), so that every other session keeps its
        // encoding and its id.
        if self.has_bgv_part() {
            match &self.bgv {
                None => w.u8(0),
                Some(b) => {
                    w.u8(1);
                    b.write(w);
                }
            }
            write_opt_id(w, &self.bgv_relin_key);
            w.len(self.bgv_galois_keys.len());
            self.bgv_galois_keys
                .iter()
                .for_each(|id| w.bytes_raw(&id.0));
        }
        if let Some(rs) = &self.refresh {
            write_opt_id(w, &rs.ckks_public_key);
            write_opt_id(w, &rs.bgv_public_key);
            w.u32(rs.lambda_s);
            w.u32(rs.flood_bits);
        }
        if let Some(b) = &self.bootstrap {
            b.write(w);
        }
    }

    fn envelope_flags(&self) -> u8 {
        let bgv = if self.has_bgv_part() { FLAG_BGV } else { 0 };
        let refresh = if self.refresh.is_some() {
            FLAG_REFRESH
        } else {
            0
        };
        let bootstrap = if self.bootstrap.is_some() {
            FLAG_BOOTSTRAP
        } else {
            0
        };
        bgv | refresh | bootstrap
    }

    fn read_flagged(r: &mut Reader<'_>, flags: u8) -> DecodeResult<Self> {
        if flags & !(FLAG_BGV | FLAG_REFRESH | FLAG_BOOTSTRAP) != 0 {
            return Err(DecodeError::InvalidField {
                field: "flags",
                reason: format!(
                    "{flags:#x} (only bit 0, a BGV part, bit 1, a refresh part, and bit 2, a bootstrapping part, are defined)"
                ),
            });
        }
        let mut spec = Self::read_body(r)?;
        if flags & FLAG_BGV != 0 {
            spec.read_bgv_part(r)?;
        }
        if flags & FLAG_REFRESH != 0 {
            spec.refresh = Some(RefreshSpec {
                ckks_public_key: read_opt_id(r, "ckks public key presence")?,
                bgv_public_key: read_opt_id(r, "bgv public key presence")?,
                lambda_s: r.u32()?,
                flood_bits: r.u32()?,
            });
        }
        if flags & FLAG_BOOTSTRAP != 0 {
            spec.bootstrap = Some(BootstrapSpec::read(r)?);
        }
        Ok(spec)
    }
    fn read_body(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let params = ParamSpec::read(r)?;
        let relin_key = read_opt_id(r, "relin key presence")?;
        let n = r.count("galois keys", MAX_GALOIS_KEYS, 32)?;
        let mut galois_keys = Vec::with_capacity(n);
        for _ in 0..n {
            galois_keys.push(ObjectId(r.hash()?));
        }
        let tfhe_server_key = read_opt_id(r, "tfhe server key presence")?;
        Ok(Self {
            params,
            relin_key,
            galois_keys,
            tfhe_server_key,
            ..Self::default()
        })
    }
}

impl SessionSpec {
    fn read_bgv_part(&mut self, r: &mut Reader<'_>) -> DecodeResult<()> {
        if r.remaining() == 0 {
            return Err(DecodeError::InvalidField {
                field: "flags",
                reason: "a BGV part is announced and none follows".into(),
            });
        }
        self.bgv = if r.bool("bgv presence")? {
            Some(BgvParamSpec::read(r)?)
        } else {
            None
        };
        self.bgv_relin_key = read_opt_id(r, "bgv relin key presence")?;
        let n = r.count("bgv galois keys", MAX_GALOIS_KEYS, 32)?;
        self.bgv_galois_keys.reserve(n);
        for _ in 0..n {
            self.bgv_galois_keys.push(ObjectId(r.hash()?));
        }
        if !self.has_bgv_part() {
            return Err(DecodeError::InvalidField {
                field: "bgv part",
                reason: "announced but empty (the flag is set only when it holds something)".into(),
            });
        }
        Ok(())
    }
}

/// Envelope flag of a session spec followed by a BGV part.
const FLAG_BGV: u8 = 1;
/// Envelope flag of a session spec followed by a refresh part.
const FLAG_REFRESH: u8 = 2;
/// Envelope flag of a session spec followed by a bootstrapping part.
const FLAG_BOOTSTRAP: u8 = 4;

/// Kinds of stored objects. The numbering is part of the wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A CKKS ciphertext ([`hecloud_rlwe::Ciphertext::to_bytes`]).
    CkksCiphertext = 1,
    /// A CKKS plaintext ([`hecloud_rlwe::Plaintext::to_bytes`]).
    CkksPlaintext = 2,
    /// A CKKS public key.
    CkksPublicKey = 3,
    /// A CKKS relinearization key.
    CkksRelinKey = 4,
    /// A CKKS Galois key (one Galois element).
    CkksGaloisKey = 5,
    /// A CKKS key switching between two secrets (bootstrapping's
    /// encapsulation keys, [`BootstrapSpec`]): over the session's chain or
    /// over its q₀·P; the header's extra field holds a tag (the ephemeral
    /// secret's Hamming weight).
    CkksSwitchingKey = 6,
    /// A TFHE server key (bootstrapping and key-switching keys).
    TfheServerKey = 16,
    /// An encrypted unsigned integer, one TFHE ciphertext per bit.
    TfheUint = 17,
    /// One encrypted bit (TFHE).
    TfheBit = 18,
    /// A BGV ciphertext: an encrypted vector of integers mod t (the
    /// [`hecloud_rlwe::serial`] format; the header's extra field holds the
    /// factor, a unit of Z_t, and its scale field log2 of the estimated noise).
    BgvCiphertext = 32,
    /// A BGV public key.
    BgvPublicKey = 33,
    /// A BGV relinearization key.
    BgvRelinKey = 34,
    /// A BGV Galois key (one Galois element: a row rotation or the column swap).
    BgvGaloisKey = 35,
}

impl ObjectKind {
    /// Parses a kind byte.
    pub fn from_u8(t: u8) -> DecodeResult<Self> {
        Ok(match t {
            1 => Self::CkksCiphertext,
            2 => Self::CkksPlaintext,
            3 => Self::CkksPublicKey,
            4 => Self::CkksRelinKey,
            5 => Self::CkksGaloisKey,
            6 => Self::CkksSwitchingKey,
            16 => Self::TfheServerKey,
            17 => Self::TfheUint,
            18 => Self::TfheBit,
            32 => Self::BgvCiphertext,
            33 => Self::BgvPublicKey,
            34 => Self::BgvRelinKey,
            35 => Self::BgvGaloisKey,
            36..=47 => {
                return Err(DecodeError::InvalidField {
                    field: "object kind",
                    reason: format!(
                        "kind {t} is reserved for BGV objects this build does not know"
                    ),
                });
            }
            _ => {
                return Err(DecodeError::UnknownTag {
                    field: "object kind",
                    tag: t as u64,
                });
            }
        })
    }

    /// Whether objects of this kind are keys (not job inputs).
    pub fn is_key(self) -> bool {
        matches!(
            self,
            Self::CkksPublicKey
                | Self::CkksRelinKey
                | Self::CkksGaloisKey
                | Self::CkksSwitchingKey
                | Self::TfheServerKey
                | Self::BgvPublicKey
                | Self::BgvRelinKey
                | Self::BgvGaloisKey
        )
    }

    /// Whether objects of this kind are BGV objects.
    pub fn is_bgv(self) -> bool {
        (32..=47).contains(&(self as u8))
    }

    /// The [`hecloud_rlwe::serial::Kind`] byte in the header of this kind's
    /// payload (CKKS and BGV kinds), `None` for TFHE kinds.
    pub fn rlwe_kind(self) -> Option<u8> {
        use hecloud_rlwe::serial::Kind;
        Some(match self {
            Self::CkksCiphertext | Self::BgvCiphertext => Kind::Ciphertext as u8,
            Self::CkksPlaintext => Kind::Plaintext as u8,
            Self::CkksPublicKey | Self::BgvPublicKey => Kind::PublicKey as u8,
            Self::CkksRelinKey | Self::BgvRelinKey => Kind::RelinearizationKey as u8,
            Self::CkksGaloisKey | Self::BgvGaloisKey => Kind::GaloisKey as u8,
            Self::CkksSwitchingKey => Kind::SwitchingKey as u8,
            Self::TfheServerKey | Self::TfheUint | Self::TfheBit => return None,
        })
    }
}

/// What the server knows about a stored object, read from its payload (never
/// from a client's claim).
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectDescriptor {
    /// Content hash of the payload.
    pub id: ObjectId,
    /// Kind.
    pub kind: ObjectKind,
    /// Payload size in bytes.
    pub size: u64,
    /// Hash of the parameter set the object belongs to.
    pub param_hash: [u8; 32],
    /// CKKS or BGV level (ciphertexts, plaintexts; the top level for keys), else 0.
    pub level: u32,
    /// CKKS scale (ciphertexts, plaintexts); log2 of the estimated noise of
    /// a BGV ciphertext; else 1.
    pub scale: f64,
    /// Ciphertext components, key digits, integer width in bits, 1 for a bit.
    pub count: u32,
    /// The Galois element of a Galois key, the factor of a BGV ciphertext
    /// (a unit of Z_t), else 0.
    pub galois_element: u64,
}

impl Message for ObjectDescriptor {
    const KIND: MessageKind = MessageKind::ObjectDescriptor;

    fn write_body(&self, w: &mut Writer) {
        write_descriptor(w, self);
    }

    fn read_body(r: &mut Reader<'_>) -> DecodeResult<Self> {
        read_descriptor(r)
    }
}

pub(crate) fn write_descriptor(w: &mut Writer, d: &ObjectDescriptor) {
    w.bytes_raw(&d.id.0);
    w.u8(d.kind as u8);
    w.u64(d.size);
    w.bytes_raw(&d.param_hash);
    w.u32(d.level);
    w.f64(d.scale);
    w.u32(d.count);
    w.u64(d.galois_element);
}

pub(crate) fn read_descriptor(r: &mut Reader<'_>) -> DecodeResult<ObjectDescriptor> {
    let id = ObjectId(r.hash()?);
    let kind = ObjectKind::from_u8(r.u8()?)?;
    let size = r.u64()?;
    let param_hash = r.hash()?;
    let level = r.u32()?;
    let scale = r.f64()?;
    if !(scale.is_finite() && scale > 0.0) {
        return Err(DecodeError::InvalidField {
            field: "scale",
            reason: format!("{scale} is not a positive finite number"),
        });
    }
    let count = r.u32()?;
    let galois_element = r.u64()?;
    Ok(ObjectDescriptor {
        id,
        kind,
        size,
        param_hash,
        level,
        scale,
        count,
        galois_element,
    })
}
