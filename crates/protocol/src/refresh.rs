//! The refresh protocol on the wire, sans I/O: the server masks a batch of
//! ciphertexts ([`RefreshRound`]), the key holder decrypts and encrypts
//! again ([`RefreshResponder`]), the server checks the reply against its
//! request and unmasks. Bytes in, bytes out: the server carries them on the
//! key-holder session stream ([`RefreshLink`]), a test or benchmark may call
//! the responder directly.
//!
//! Every request carries a random 128-bit id, the job it serves, the scheme,
//! the parameters' hash and the target level; the reply repeats the id, the
//! hash and the level and holds exactly one ciphertext per masked one, each
//! at the target level under those parameters. Anything else fails the
//! round with [`RefreshError::Mismatch`] and nothing of the reply is used.
//! A responder answers each request id once ([`RefreshError::Replay`]).
//! The math is in [`hecloud_ckks::refresh`] (statistical mask in the
//! coefficient domain) and [`hecloud_circuits::packed::RefreshMask`]
//! (uniform mask mod t); `docs/refresh.md` analyses what each party learns.
//!
//! ```
//! use std::sync::Arc;
//! use hecloud_ckks::{*, params::test_literal, refresh::MaskPolicy};
//! use hecloud_protocol::refresh::{RefreshResponder, RefreshRound};
//! let params = CkksParameters::new_insecure_for_tests(test_literal(10, 5), 40)?;
//! let keys = Arc::new(KeySet::generate(&params, &[], false)?);
//! let enc = Encoder::new(&params);
//! let ct = keys.encrypt(&enc.encode_real(&[1.5, -2.0], 2, params.default_scale())?)?;
//! // Server: mask, send the request's bytes.
//! let (round, request) = RefreshRound::ckks("job-1", &params, keys.public_key(), &[&ct], &MaskPolicy::default(), 5)?;
//! // Key holder: answer (once).
//! let sk = hecloud_rlwe::SecretKey::from_coefficients(params.rlwe(), &keys.secret_key().export_coefficients())?;
//! let holder = RefreshResponder::new().with_ckks(params.clone(), sk);
//! let reply = holder.answer(&request)?;
//! assert!(holder.answer(&request).is_err());
//! // Server: check and unmask.
//! let fresh = round.finish(&reply)?;
//! assert_eq!(fresh[0].level(), 5);
//! let y = enc.decode_real(&keys.decrypt(&fresh[0])?)?;
//! assert!((y[0] - 1.5).abs() < 1e-6 && (y[1] + 2.0).abs() < 1e-6);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hecloud_bgv::{BgvParameters, Encoder as BgvEncoder, Evaluator as BgvEvaluator};
use hecloud_circuits::packed::{BgvMaskPolicy, PackedError, RefreshMask, Refresher, reencrypt_to};
use hecloud_ckks::CkksParameters;
use hecloud_ckks::refresh::{CkksMask, MaskPolicy, reencrypt};
use hecloud_math::Sampler;
use hecloud_rlwe::{Ciphertext, Parameters, PublicKey, SecretKey};
use thiserror::Error;

use crate::codec::{DecodeError, DecodeResult, Message, MessageKind, Reader, Writer};

/// Callback kind of refresh requests on the key-holder session stream.
pub const CALLBACK_REFRESH: &str = "refresh";
/// Largest request or reply: a batch is split into rounds that fit. The
/// session stream's callbacks carry at most 64 MiB; one top-level
/// ciphertext's reply is 11.5 MB at N = 2^16 and 59 MB at N = 2^17.
pub const MAX_MESSAGE_BYTES: usize = 63 << 20;
/// Most ciphertexts in one round.
pub const MAX_BATCH: usize = 4096;
const MAX_JOB_ID: usize = 128;

/// Which scheme a round refreshes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshScheme {
    /// CKKS: statistical mask in the coefficient domain.
    Ckks = 0,
    /// BGV: uniform mask mod t.
    Bgv = 1,
}

/// The server's request: masked ciphertexts and what the answer must match.
#[derive(Debug, Clone, PartialEq)]
pub struct RefreshRequest {
    /// Random, unique per request.
    pub request_id: [u8; 16],
    /// The job the refresh serves.
    pub job_id: String,
    /// The scheme.
    pub scheme: RefreshScheme,
    /// Hash of the parameters of every ciphertext.
    pub params_hash: [u8; 32],
    /// The level the fresh encryptions must have.
    pub target_level: u32,
    /// CKKS: the scale of each fresh encryption, the masked ciphertext's
    /// over a power of two ([`CkksMask::target_scale`]). BGV: empty.
    pub target_scales: Vec<f64>,
    /// The masked ciphertexts, serialized.
    pub ciphertexts: Vec<Vec<u8>>,
}

/// The key holder's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshReply {
    /// The request's id.
    pub request_id: [u8; 16],
    /// The request's parameter hash.
    pub params_hash: [u8; 32],
    /// The level of every ciphertext.
    pub target_level: u32,
    /// One fresh encryption per masked ciphertext, in order, serialized
    /// (seeded: half size).
    pub ciphertexts: Vec<Vec<u8>>,
}

fn write_cts(w: &mut Writer, cts: &[Vec<u8>]) {
    w.len(cts.len());
    cts.iter().for_each(|c| w.bytes(c));
}

fn read_cts(r: &mut Reader<'_>) -> DecodeResult<Vec<Vec<u8>>> {
    // Each at least its 4-byte length.
    let n = r.count("refresh ciphertexts", MAX_BATCH, 4)?;
    (0..n)
        .map(|_| {
            r.bytes("refresh ciphertext", MAX_MESSAGE_BYTES)
                .map(<[u8]>::to_vec)
        })
        .collect()
}

fn read_id(r: &mut Reader<'_>) -> DecodeResult<[u8; 16]> {
    Ok(r.take(16)?.try_into().expect("16 bytes taken"))
}

impl Message for RefreshRequest {
    const KIND: MessageKind = MessageKind::RefreshRequest;

    fn write_body(&self, w: &mut Writer) {
        w.bytes_raw(&self.request_id);
        w.str(&self.job_id);
        w.u8(self.scheme as u8);
        w.bytes_raw(&self.params_hash);
        w.u32(self.target_level);
        w.len(self.target_scales.len());
        self.target_scales.iter().for_each(|&x| w.f64(x));
        write_cts(w, &self.ciphertexts);
    }

    fn read_body(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let request_id = read_id(r)?;
        let job_id = r.str("job id", MAX_JOB_ID)?;
        let scheme = match r.u8()? {
            0 => RefreshScheme::Ckks,
            1 => RefreshScheme::Bgv,
            tag => {
                return Err(DecodeError::UnknownTag {
                    field: "refresh scheme",
                    tag: tag.into(),
                });
            }
        };
        Ok(Self {
            request_id,
            job_id,
            scheme,
            params_hash: r.hash()?,
            target_level: r.u32()?,
            target_scales: {
                let n = r.count("refresh target scales", MAX_BATCH, 8)?;
                (0..n).map(|_| r.f64()).collect::<DecodeResult<_>>()?
            },
            ciphertexts: read_cts(r)?,
        })
    }
}

impl Message for RefreshReply {
    const KIND: MessageKind = MessageKind::RefreshReply;

    fn write_body(&self, w: &mut Writer) {
        w.bytes_raw(&self.request_id);
        w.bytes_raw(&self.params_hash);
        w.u32(self.target_level);
        write_cts(w, &self.ciphertexts);
    }

    fn read_body(r: &mut Reader<'_>) -> DecodeResult<Self> {
        Ok(Self {
            request_id: read_id(r)?,
            params_hash: r.hash()?,
            target_level: r.u32()?,
            ciphertexts: read_cts(r)?,
        })
    }
}

/// Why a refresh failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RefreshError {
    /// Bytes that are not a request or reply.
    #[error("malformed refresh message: {0}")]
    Decode(#[from] DecodeError),
    /// A reply that does not answer the request (id, parameters, level,
    /// count, or a ciphertext that is not what it must be).
    #[error("the key holder's reply does not match the request: {0}")]
    Mismatch(String),
    /// A request id the responder has answered before.
    #[error("refresh request {0} was answered before (replay)")]
    Replay(String),
    /// A request for a job the responder does not serve.
    #[error("refresh request for job {0}, which this key holder does not serve")]
    UnknownJob(String),
    /// A request under parameters the responder holds no key for.
    #[error("no {0} secret key for these parameters")]
    NoKey(&'static str),
    /// The masking or re-encryption refused (no headroom, bad policy, …).
    #[error(transparent)]
    Ckks(#[from] hecloud_ckks::CkksError),
    /// The BGV masking or re-encryption refused.
    #[error(transparent)]
    Bgv(#[from] PackedError),
    /// The link failed: no key holder, it refused, timed out or went away.
    #[error("refresh round trip failed: {0}")]
    Link(String),
    /// A request that asks for more than the protocol carries.
    #[error("refresh request too large: {0}")]
    TooLarge(String),
}

/// Result alias of the refresh protocol.
pub type Result<T> = std::result::Result<T, RefreshError>;

/// What the server keeps of a round until the reply comes: the masks.
enum Masks {
    Ckks(Vec<CkksMask>),
    Bgv(Vec<RefreshMask>, BgvEvaluator),
}

/// The server's side of one round: built with the masked request, finished
/// with the key holder's reply.
pub struct RefreshRound {
    request_id: [u8; 16],
    params: Arc<Parameters>,
    target_level: usize,
    masks: Masks,
}

impl std::fmt::Debug for RefreshRound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefreshRound")
            .field("request_id", &hex(&self.request_id))
            .field("target_level", &self.target_level)
            .finish_non_exhaustive()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn check_target(params: &Parameters, target_level: usize) -> Result<()> {
    if target_level > params.max_level() {
        return Err(RefreshError::TooLarge(format!(
            "target level {target_level} above the parameters' top level {}",
            params.max_level()
        )));
    }
    Ok(())
}

fn check_batch(n: usize) -> Result<()> {
    if n == 0 || n > MAX_BATCH {
        return Err(RefreshError::TooLarge(format!(
            "{n} ciphertexts in one round (1 to {MAX_BATCH})"
        )));
    }
    Ok(())
}

fn new_request_id() -> [u8; 16] {
    let mut rng = Sampler::from_os();
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    id[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
    id
}

impl RefreshRound {
    /// Masks CKKS ciphertexts (each at a level with headroom for `policy`)
    /// for fresh encryptions at `target_level`; returns the round and the
    /// request's bytes.
    pub fn ckks(
        job_id: &str,
        params: &Arc<CkksParameters>,
        pk: &PublicKey,
        cts: &[&Ciphertext],
        policy: &MaskPolicy,
        target_level: usize,
    ) -> Result<(Self, Vec<u8>)> {
        check_batch(cts.len())?;
        check_target(params.rlwe(), target_level)?;
        let (masked, masks): (Vec<_>, Vec<_>) = cts
            .iter()
            .map(|ct| CkksMask::apply(params, pk, ct, policy))
            .collect::<std::result::Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let scales = masks.iter().map(CkksMask::target_scale).collect();
        Self::build(
            job_id,
            RefreshScheme::Ckks,
            params.rlwe(),
            (&masked, scales),
            target_level,
            Masks::Ckks(masks),
        )
    }

    /// Masks BGV ciphertexts (switched to level 0 first, the fewest bytes,
    /// or with flooding to the lowest level that holds it) for fresh
    /// encryptions at `target_level`.
    pub fn bgv(
        job_id: &str,
        eval: &BgvEvaluator,
        encoder: &BgvEncoder,
        pk: &PublicKey,
        cts: &[&Ciphertext],
        policy: &BgvMaskPolicy,
        target_level: usize,
    ) -> Result<(Self, Vec<u8>)> {
        check_batch(cts.len())?;
        let params: &Arc<BgvParameters> = eval.params();
        check_target(params.rlwe(), target_level)?;
        let (masked, masks): (Vec<_>, Vec<_>) = cts
            .iter()
            .map(|ct| RefreshMask::apply_with(eval, encoder, pk, ct, policy))
            .collect::<std::result::Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        Self::build(
            job_id,
            RefreshScheme::Bgv,
            params.rlwe(),
            (&masked, vec![]),
            target_level,
            Masks::Bgv(masks, eval.clone()),
        )
    }

    fn build(
        job_id: &str,
        scheme: RefreshScheme,
        params: &Arc<Parameters>,
        (masked, target_scales): (&[Ciphertext], Vec<f64>),
        target_level: usize,
        masks: Masks,
    ) -> Result<(Self, Vec<u8>)> {
        if job_id.len() > MAX_JOB_ID {
            return Err(RefreshError::TooLarge("job id".into()));
        }
        let request = RefreshRequest {
            request_id: new_request_id(),
            job_id: job_id.into(),
            scheme,
            params_hash: *params.hash(),
            target_level: target_level as u32,
            target_scales,
            ciphertexts: masked.iter().map(Ciphertext::to_bytes).collect(),
        };
        let bytes = request.encode();
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(RefreshError::TooLarge(format!(
                "a request of {} bytes (at most {MAX_MESSAGE_BYTES}); send fewer ciphertexts per round",
                bytes.len()
            )));
        }
        let round = Self {
            request_id: request.request_id,
            params: params.clone(),
            target_level,
            masks,
        };
        Ok((round, bytes))
    }

    /// Ciphertexts in the round.
    pub fn len(&self) -> usize {
        match &self.masks {
            Masks::Ckks(m) => m.len(),
            Masks::Bgv(m, _) => m.len(),
        }
    }

    /// Whether the round is empty (never: a round holds at least one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the key holder's reply against the request and removes the
    /// masks: the fresh encryptions of the original values, in order.
    pub fn finish(self, reply: &[u8]) -> Result<Vec<Ciphertext>> {
        let reply = RefreshReply::decode(reply)?;
        let mismatch = |what: String| Err(RefreshError::Mismatch(what));
        if reply.request_id != self.request_id {
            return mismatch(format!(
                "it answers request {}, not {}",
                hex(&reply.request_id),
                hex(&self.request_id)
            ));
        }
        if reply.params_hash != *self.params.hash() {
            return mismatch("it is under other parameters".into());
        }
        if reply.target_level as usize != self.target_level {
            return mismatch(format!(
                "level {} where {} was asked",
                reply.target_level, self.target_level
            ));
        }
        if reply.ciphertexts.len() != self.len() {
            return mismatch(format!(
                "{} ciphertexts for {} sent",
                reply.ciphertexts.len(),
                self.len()
            ));
        }
        let fresh = reply
            .ciphertexts
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let ct = Ciphertext::from_bytes(&self.params, b).map_err(|e| {
                    RefreshError::Mismatch(format!("ciphertext {i} does not decode: {e}"))
                })?;
                if ct.level() != self.target_level || ct.degree() != 1 {
                    return Err(RefreshError::Mismatch(format!(
                        "ciphertext {i} at level {} of degree {} (level {} of degree 1 asked)",
                        ct.level(),
                        ct.degree(),
                        self.target_level
                    )));
                }
                Ok(ct)
            })
            .collect::<Result<Vec<_>>>()?;
        match &self.masks {
            Masks::Ckks(masks) => masks
                .iter()
                .zip(&fresh)
                .enumerate()
                .map(|(i, (m, ct))| {
                    m.remove(ct).map_err(|e| {
                        RefreshError::Mismatch(format!("ciphertext {i} cannot be unmasked: {e}"))
                    })
                })
                .collect(),
            Masks::Bgv(masks, eval) => masks
                .iter()
                .zip(fresh)
                .map(|(m, mut ct)| {
                    // The metadata is the server's to set: a fresh
                    // secret-key encryption's noise estimate and factor,
                    // whatever the reply's header claims.
                    ct.set_scale(eval.params().noise().fresh_sk());
                    ct.set_factor(1);
                    Ok(m.remove(eval, &ct)?)
                })
                .collect(),
        }
    }
}

/// The key holder's side: answers refresh requests with the secret keys it
/// holds, each request id once, optionally only for named jobs.
#[derive(Default)]
pub struct RefreshResponder {
    ckks: Option<(Arc<CkksParameters>, SecretKey)>,
    bgv: Option<Arc<hecloud_bgv::KeySet>>,
    jobs: Option<Mutex<HashSet<String>>>,
    answered: Mutex<HashSet<[u8; 16]>>,
    ciphertexts: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

impl std::fmt::Debug for RefreshResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefreshResponder")
            .field("ckks", &self.ckks.is_some())
            .field("bgv", &self.bgv.is_some())
            .field("stats", &self.stats())
            .finish()
    }
}

/// What a responder has answered so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// Requests answered.
    pub requests: u64,
    /// Ciphertexts refreshed.
    pub ciphertexts: u64,
    /// Request bytes received.
    pub bytes_in: u64,
    /// Reply bytes sent.
    pub bytes_out: u64,
}

impl RefreshResponder {
    /// A responder with no keys yet (it refuses everything).
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers CKKS requests under `params` with the secret key `sk`.
    pub fn with_ckks(mut self, params: Arc<CkksParameters>, sk: SecretKey) -> Self {
        self.ckks = Some((params, sk));
        self
    }

    /// Answers BGV requests under `keys`' parameters.
    pub fn with_bgv(mut self, keys: Arc<hecloud_bgv::KeySet>) -> Self {
        self.bgv = Some(keys);
        self
    }

    /// Answers only requests of the jobs named by [`RefreshResponder::serve_job`]
    /// (by default, requests of any job of the session's tenant).
    pub fn only_named_jobs(mut self) -> Self {
        self.jobs = Some(Mutex::new(HashSet::new()));
        self
    }

    /// Adds a job to those served (see [`RefreshResponder::only_named_jobs`]).
    pub fn serve_job(&self, job_id: &str) {
        if let Some(j) = &self.jobs {
            j.lock().unwrap().insert(job_id.into());
        }
    }

    /// Counts so far.
    pub fn stats(&self) -> ResponderStats {
        ResponderStats {
            requests: self.answered.lock().unwrap().len() as u64,
            ciphertexts: self.ciphertexts.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
        }
    }

    /// Answers one request: decrypts each masked ciphertext and encrypts it
    /// again at the target level. Refused: malformed bytes, a request id
    /// seen before, a job not served, parameters without a key here.
    pub fn answer(&self, request: &[u8]) -> Result<Vec<u8>> {
        let req = RefreshRequest::decode(request)?;
        if let Some(jobs) = &self.jobs
            && !jobs.lock().unwrap().contains(&req.job_id)
        {
            return Err(RefreshError::UnknownJob(req.job_id));
        }
        // Recorded before the work, so that a duplicate arriving meanwhile
        // is refused too.
        if !self.answered.lock().unwrap().insert(req.request_id) {
            return Err(RefreshError::Replay(hex(&req.request_id)));
        }
        let level = req.target_level as usize;
        let decode = |params: &Arc<Parameters>, i: usize, b: &[u8]| {
            Ciphertext::from_bytes(params, b).map_err(|e| {
                RefreshError::Mismatch(format!("masked ciphertext {i} does not decode: {e}"))
            })
        };
        let fresh: Vec<Vec<u8>> = match req.scheme {
            RefreshScheme::Ckks => {
                let (params, sk) = self
                    .ckks
                    .as_ref()
                    .filter(|(p, _)| *p.rlwe().hash() == req.params_hash)
                    .ok_or(RefreshError::NoKey("CKKS"))?;
                let p = params.rlwe();
                if req.target_scales.len() != req.ciphertexts.len() {
                    return Err(RefreshError::Mismatch(format!(
                        "{} target scales for {} ciphertexts",
                        req.target_scales.len(),
                        req.ciphertexts.len()
                    )));
                }
                req.ciphertexts
                    .iter()
                    .zip(&req.target_scales)
                    .enumerate()
                    .map(|(i, (b, &scale))| {
                        let masked = decode(p, i, b)?;
                        Ok(reencrypt(params, sk, &masked, level, scale)?.to_bytes())
                    })
                    .collect::<Result<_>>()?
            }
            RefreshScheme::Bgv => {
                let keys = self
                    .bgv
                    .as_ref()
                    .filter(|k| *k.params().rlwe().hash() == req.params_hash)
                    .ok_or(RefreshError::NoKey("BGV"))?;
                let p = keys.params().rlwe();
                req.ciphertexts
                    .iter()
                    .enumerate()
                    .map(|(i, b)| Ok(reencrypt_to(keys, &decode(p, i, b)?, level)?.to_bytes()))
                    .collect::<Result<_>>()?
            }
        };
        let reply = RefreshReply {
            request_id: req.request_id,
            params_hash: req.params_hash,
            target_level: req.target_level,
            ciphertexts: fresh,
        }
        .encode();
        if reply.len() > MAX_MESSAGE_BYTES {
            return Err(RefreshError::TooLarge(format!(
                "a reply of {} bytes (at most {MAX_MESSAGE_BYTES}); the server must send fewer ciphertexts per round",
                reply.len()
            )));
        }
        self.ciphertexts
            .fetch_add(req.ciphertexts.len() as u64, Ordering::Relaxed);
        self.bytes_in
            .fetch_add(request.len() as u64, Ordering::Relaxed);
        self.bytes_out
            .fetch_add(reply.len() as u64, Ordering::Relaxed);
        Ok(reply)
    }
}

/// How the server reaches a key holder during a job: one round trip of
/// request bytes for reply bytes (the session stream in the server; a
/// direct call to a [`RefreshResponder`] in tests and benchmarks).
pub trait RefreshLink: Send + Sync {
    /// The job the refreshes serve (bound into every request).
    fn job_id(&self) -> &str;
    /// Sends a request and waits for the reply (or the reason there is none).
    fn round_trip(&self, request: Vec<u8>) -> std::result::Result<Vec<u8>, String>;
}

/// A link straight to a responder in this process (tests, benchmarks, a
/// key holder next to the server).
#[derive(Debug)]
pub struct DirectLink<'a> {
    /// The job id bound into requests.
    pub job_id: String,
    /// The responder.
    pub responder: &'a RefreshResponder,
}

impl RefreshLink for DirectLink<'_> {
    fn job_id(&self) -> &str {
        &self.job_id
    }

    fn round_trip(&self, request: Vec<u8>) -> std::result::Result<Vec<u8>, String> {
        self.responder.answer(&request).map_err(|e| e.to_string())
    }
}

/// Splits `cts` into runs whose request and reply both fit a message.
fn batches<'c>(
    params: &Parameters,
    cts: &[&'c Ciphertext],
    target_level: usize,
) -> Vec<Vec<&'c Ciphertext>> {
    // A seeded reply holds c_0 at the target level and a seed.
    let reply_each = params.poly_bytes(target_level) + 256;
    let mut out: Vec<Vec<&Ciphertext>> = Vec::new();
    let (mut req, mut rep) = (0usize, 0usize);
    for &ct in cts {
        let each = ct.serialized_len() + 256;
        let full = out.last().is_none_or(|b| {
            b.len() >= MAX_BATCH
                || req + each > MAX_MESSAGE_BYTES - 4096
                || rep + reply_each > MAX_MESSAGE_BYTES - 4096
        });
        if full {
            out.push(Vec::new());
            (req, rep) = (0, 0);
        }
        out.last_mut().expect("pushed").push(ct);
        (req, rep) = (req + each, rep + reply_each);
    }
    out
}

/// Refreshes CKKS ciphertexts over `link` to `target_level` under the
/// session's mask `policy`, in as few rounds as the message limit allows;
/// the results in order.
pub fn refresh_ckks(
    link: &dyn RefreshLink,
    params: &Arc<CkksParameters>,
    pk: &PublicKey,
    policy: &MaskPolicy,
    cts: &[&Ciphertext],
    target_level: usize,
) -> Result<Vec<Ciphertext>> {
    let mut out = Vec::with_capacity(cts.len());
    for batch in batches(params.rlwe(), cts, target_level) {
        let (round, req) =
            RefreshRound::ckks(link.job_id(), params, pk, &batch, policy, target_level)?;
        let reply = link.round_trip(req).map_err(RefreshError::Link)?;
        out.extend(round.finish(&reply)?);
    }
    Ok(out)
}

/// Refreshes BGV ciphertexts over `link` to `target_level`, flooded per
/// `policy`.
pub fn refresh_bgv(
    link: &dyn RefreshLink,
    eval: &BgvEvaluator,
    encoder: &BgvEncoder,
    pk: &PublicKey,
    cts: &[&Ciphertext],
    policy: &BgvMaskPolicy,
    target_level: usize,
) -> Result<Vec<Ciphertext>> {
    let mut out = Vec::with_capacity(cts.len());
    for batch in batches(eval.params().rlwe(), cts, target_level) {
        let (round, req) = RefreshRound::bgv(
            link.job_id(),
            eval,
            encoder,
            pk,
            &batch,
            policy,
            target_level,
        )?;
        let reply = link.round_trip(req).map_err(RefreshError::Link)?;
        out.extend(round.finish(&reply)?);
    }
    Ok(out)
}

/// The BGV [`Refresher`] of the packed circuits, over a link: each batch of
/// a circuit layer is one round trip (or a few, for a large batch), fresh
/// encryptions at the top level.
pub struct RemoteRefresher<'a> {
    link: &'a dyn RefreshLink,
    pk: &'a PublicKey,
    eval: BgvEvaluator,
    encoder: BgvEncoder,
    policy: BgvMaskPolicy,
}

impl std::fmt::Debug for RemoteRefresher<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRefresher")
            .field("job_id", &self.link.job_id())
            .finish_non_exhaustive()
    }
}

impl<'a> RemoteRefresher<'a> {
    /// A refresher over `link` for ciphertexts under `eval`'s parameters,
    /// re-randomizing with the public key `pk`.
    pub fn new(link: &'a dyn RefreshLink, eval: &BgvEvaluator, pk: &'a PublicKey) -> Self {
        Self {
            link,
            pk,
            encoder: BgvEncoder::new(eval.params()),
            eval: eval.clone(),
            policy: BgvMaskPolicy::none(),
        }
    }

    /// Floods each refresh per `policy` (circuit privacy).
    pub fn with_policy(mut self, policy: BgvMaskPolicy) -> Self {
        self.policy = policy;
        self
    }
}

impl Refresher for RemoteRefresher<'_> {
    fn refresh(&self, ct: &Ciphertext) -> hecloud_circuits::packed::Result<Ciphertext> {
        Ok(self.refresh_many(std::slice::from_ref(ct))?.remove(0))
    }

    fn refresh_many(
        &self,
        cts: &[Ciphertext],
    ) -> hecloud_circuits::packed::Result<Vec<Ciphertext>> {
        let refs: Vec<&Ciphertext> = cts.iter().collect();
        let top = self.eval.params().max_level();
        refresh_bgv(
            self.link,
            &self.eval,
            &self.encoder,
            self.pk,
            &refs,
            &self.policy,
            top,
        )
        .map_err(|e| PackedError::Refresh(e.to_string()))
    }
}
