//! Keys and key generation: secret, public, relinearization and Galois keys.
//!
//! Switching keys are gadget encryptions for hybrid key switching: for digit
//! j (primes Q_j of Q), `b_j = −a_j·s + e_j + P·g_j·s'` over Q·P with
//! `g_j ≡ 1 mod Q_j`, `g_j ≡ 0 mod the other primes`. Every `a_j` is expanded
//! from a 32-byte seed kept beside it, so keys serialize at about half size.

use std::collections::BTreeMap;
use std::sync::Arc;

use hecloud_math::{
    RnsBasis, RnsPoly, Sampler, poly::automorphism_permutation, sampling::expand_seed_uniform,
};
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::error::{Result, RlweError};
use crate::params::{Parameters, SecretDistribution};

/// Which secret key an object belongs to: 16 bytes of a domain-separated
/// BLAKE3 hash of the secret and its parameter set (one-way: it says which
/// key, not what the key is). Ciphertexts, public keys and switching keys
/// carry the id of the secret they were made under, so that objects of
/// different keys used together, which would give noise and no error of
/// their own, are refused ([`RlweError::KeyMismatch`]). [`KeyId::NONE`]
/// marks an object bound to no key (a ciphertext built from its
/// polynomials by hand), which goes with any.
///
/// ```
/// use hecloud_rlwe::*;
/// # let params = Parameters::new_insecure_for_tests(ParametersLiteral { log_n: 10,
/// #     log_q: vec![50, 40], log_p: vec![50], secret: SecretDistribution::Ternary,
/// #     sigma: params::SIGMA, dnum: None, plaintext_modulus: None }).unwrap();
/// let mut kg = KeyGenerator::new(&params);
/// let (a, b) = (kg.gen_secret_key().unwrap(), kg.gen_secret_key().unwrap());
/// assert_ne!(a.key_id(), b.key_id());
/// assert_eq!(kg.gen_public_key(&a).unwrap().key_id(), a.key_id());
/// assert_eq!(a.key_id().join(KeyId::NONE), Ok(a.key_id()));
/// assert!(a.key_id().join(b.key_id()).is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct KeyId(pub [u8; 16]);

impl KeyId {
    /// Bound to no key.
    pub const NONE: KeyId = KeyId([0; 16]);

    fn of_secret(params: &Parameters, coeffs: &[i8]) -> Self {
        let mut h = blake3::Hasher::new_derive_key("hecloud rlwe key id v1");
        h.update(params.hash());
        // Ternary coefficients as bytes, hashed in chunks so that no copy
        // of the secret is made.
        for chunk in coeffs.chunks(4096) {
            let mut bytes = [0u8; 4096];
            for (b, &c) in bytes.iter_mut().zip(chunk) {
                *b = c as u8;
            }
            h.update(&bytes[..chunk.len()]);
            bytes.zeroize();
        }
        let mut id = [0; 16];
        id.copy_from_slice(&h.finalize().as_bytes()[..16]);
        KeyId(id)
    }

    /// Whether this is [`KeyId::NONE`].
    pub fn is_none(&self) -> bool {
        *self == Self::NONE
    }

    /// The key of an object made from two objects of keys `self` and
    /// `other`: the one key they share, or the bound one where the other is
    /// [`KeyId::NONE`]; refused where both are bound to different keys.
    pub fn join(self, other: KeyId) -> Result<KeyId> {
        if self.is_none() {
            return Ok(other);
        }
        if !other.is_none() && other != self {
            return Err(RlweError::KeyMismatch {
                expected: self,
                found: other,
            });
        }
        Ok(self)
    }

    /// Refused unless an object of key `found` can be used where this key
    /// is expected (equal keys, or either [`KeyId::NONE`]).
    pub fn check(self, found: KeyId) -> Result<()> {
        self.join(found).map(|_| ())
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_none() {
            return f.write_str("(none)");
        }
        self.0[..8].iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// The secret key s (ternary), zeroized on drop and redacted in `Debug`.
pub struct SecretKey {
    params: Arc<Parameters>,
    /// s over Q·P, NTT domain.
    pub(crate) s: RnsPoly,
    /// Signed coefficients of s (for export).
    pub(crate) coeffs: Vec<i8>,
    id: KeyId,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

impl Drop for SecretKey {
    fn drop(&mut self) {
        self.s.zeroize();
        self.coeffs.zeroize();
    }
}

impl ZeroizeOnDrop for SecretKey {}

impl SecretKey {
    /// The parameters.
    pub fn params(&self) -> &Arc<Parameters> {
        &self.params
    }

    /// The id every object made under this key carries.
    pub fn key_id(&self) -> KeyId {
        self.id
    }

    /// A secret key from its signed coefficients (each in {-1, 0, 1}); the
    /// counterpart of the explicit export.
    pub fn from_coefficients(params: &Arc<Parameters>, coeffs: &[i8]) -> Result<Self> {
        if coeffs.len() != params.n() {
            return Err(hecloud_math::MathError::LengthMismatch {
                expected: params.n(),
                found: coeffs.len(),
            }
            .into());
        }
        if coeffs.iter().any(|c| !(-1..=1).contains(c)) {
            return Err(RlweError::InvalidParameters(
                "secret coefficients must be ternary".into(),
            ));
        }
        let mut wide: Vec<i64> = coeffs.iter().map(|&c| c as i64).collect();
        let mut s = RnsPoly::from_signed(params.qp_basis(), &wide)?;
        wide.zeroize();
        s.to_ntt();
        Ok(Self {
            params: params.clone(),
            s,
            coeffs: coeffs.to_vec(),
            id: KeyId::of_secret(params, coeffs),
        })
    }

    /// The signed coefficients of s. An explicit export: the caller owns the
    /// secret from here on and should zeroize it.
    pub fn export_coefficients(&self) -> zeroize::Zeroizing<Vec<i8>> {
        zeroize::Zeroizing::new(self.coeffs.clone())
    }
}

/// The public key (b, a) = (−a·s + e, a) over Q·P (NTT domain).
#[derive(Debug, Clone, PartialEq)]
pub struct PublicKey {
    pub(crate) params: Arc<Parameters>,
    pub(crate) b: RnsPoly,
    pub(crate) a: RnsPoly,
    pub(crate) seed: [u8; 32],
    pub(crate) key: KeyId,
}

impl PublicKey {
    /// The parameters.
    pub fn params(&self) -> &Arc<Parameters> {
        &self.params
    }

    /// The id of its secret key, which its encryptions carry.
    pub fn key_id(&self) -> KeyId {
        self.key
    }

    /// The bytes its two polynomials take in memory.
    pub fn memory_bytes(&self) -> usize {
        size_of_val(self.b.data()) + size_of_val(self.a.data())
    }
}

/// A key-switching key from s' to s, one (b_j, a_j) pair per digit over Q·P.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchingKey {
    pub(crate) params: Arc<Parameters>,
    pub(crate) b: Vec<RnsPoly>,
    pub(crate) a: Vec<RnsPoly>,
    /// Seeds of the a_j (None when loaded from an unseeded form).
    pub(crate) seeds: Option<Vec<[u8; 32]>>,
    /// The id of s, the key it switches to.
    pub(crate) key: KeyId,
}

impl SwitchingKey {
    /// The parameters.
    pub fn params(&self) -> &Arc<Parameters> {
        &self.params
    }

    /// The id of the secret key it switches to: what its key-switched
    /// ciphertexts decrypt under.
    pub fn key_id(&self) -> KeyId {
        self.key
    }

    /// Refused unless a ciphertext of key `ct` may be switched with this
    /// key: a relinearization or Galois key switches back to the key it
    /// was made under, so a ciphertext under another one is refused
    /// ([`KeyId::check`]).
    pub fn check_operand(&self, ct: KeyId) -> Result<()> {
        self.key.check(ct)
    }

    /// Number of digits.
    pub fn digits(&self) -> usize {
        self.b.len()
    }

    /// The highest level it switches at: the parameters' top level, or
    /// the level it was cut to ([`Self::at_level`]).
    pub fn level(&self) -> usize {
        let limbs = self.b.first().map_or(0, |b| b.basis().len());
        limbs.saturating_sub(self.params.p_basis().len() + 1)
    }

    /// Refused with [`RlweError::KeyBelowLevel`] unless it switches at
    /// `level` (a key cut lower lacks the primes).
    pub fn reaches(&self, level: usize) -> Result<()> {
        let key = self.level();
        if key < level {
            return Err(RlweError::KeyBelowLevel { key, level });
        }
        Ok(())
    }

    /// The key for levels up to `level` only: the Q primes above it and
    /// the digits no such level has are dropped (what remains is the same
    /// key there, so key switching gives the same result). A key used
    /// only low in a circuit takes a fraction of the memory and bytes.
    /// Refused: a level above the key's own.
    ///
    /// ```
    /// use hecloud_rlwe::*;
    /// let params = Parameters::new_insecure_for_tests(ParametersLiteral {
    ///     log_n: 10, log_q: vec![50, 40, 40, 40], log_p: vec![50], dnum: Some(4),
    ///     secret: SecretDistribution::Ternary, sigma: params::SIGMA, plaintext_modulus: None,
    /// }).unwrap();
    /// let mut kg = KeyGenerator::new(&params);
    /// let sk = kg.gen_secret_key().unwrap();
    /// let rlk = kg.gen_relinearization_key(&sk).unwrap();
    /// let low = rlk.0.at_level(1).unwrap();
    /// assert_eq!(low.level(), 1);
    /// assert!(low.serialized_len(true) < rlk.0.serialized_len(true));
    /// assert!(rlk.0.at_level(4).is_err());
    /// ```
    pub fn at_level(&self, level: usize) -> Result<Self> {
        let own = self.level();
        if level > own {
            return Err(RlweError::LevelOutOfRange { level, max: own });
        }
        let lt = self.params.level(level)?;
        let digits = lt.digits.len();
        let cut = |x: &RnsPoly| cut_to_level(x, &lt.qp, own, level);
        Ok(Self {
            params: self.params.clone(),
            b: self.b.iter().take(digits).map(cut).collect(),
            a: self.a.iter().take(digits).map(cut).collect(),
            seeds: self.seeds.as_ref().map(|s| s[..digits].to_vec()),
            key: self.key,
        })
    }

    /// The key with `f` applied to each of its polynomials (a slot
    /// permutation: the seeds stay, as they describe the key in place),
    /// each held in a buffer of its own size (a pooled one may be larger,
    /// and keys live long).
    fn map_slots(&self, f: impl Fn(&RnsPoly) -> RnsPoly) -> Self {
        let exact = |p: &RnsPoly| {
            let q = f(p);
            let (basis, domain) = (q.basis().clone(), q.domain());
            let mut data = q.into_data();
            data.shrink_to_fit();
            RnsPoly::from_buffer_unchecked(&basis, domain, data)
        };
        Self {
            params: self.params.clone(),
            b: self.b.iter().map(exact).collect(),
            a: self.a.iter().map(exact).collect(),
            seeds: self.seeds.clone(),
            key: self.key,
        }
    }

    /// The bytes its polynomials take in memory: every b_j and a_j in
    /// full, whether the key was loaded seeded or not.
    ///
    /// ```
    /// use hecloud_rlwe::*;
    /// let params = Parameters::new_insecure_for_tests(ParametersLiteral {
    ///     log_n: 10, log_q: vec![50, 40], log_p: vec![50], dnum: Some(2),
    ///     secret: SecretDistribution::Ternary, sigma: params::SIGMA, plaintext_modulus: None,
    /// }).unwrap();
    /// let mut kg = KeyGenerator::new(&params);
    /// let sk = kg.gen_secret_key().unwrap();
    /// let rlk = kg.gen_relinearization_key(&sk).unwrap();
    /// // Two digits, each a (b, a) pair over three primes of 2^10 coefficients.
    /// assert_eq!(rlk.0.memory_bytes(), 2 * 2 * 3 * 1024 * 8);
    /// ```
    pub fn memory_bytes(&self) -> usize {
        self.b
            .iter()
            .chain(&self.a)
            .map(|p| size_of_val(p.data()))
            .sum()
    }

    /// Its serialized size in bytes (as relinearization and Galois keys
    /// write it; `seeded`: each a_j as its 32-byte seed).
    pub fn serialized_len(&self, seeded: bool) -> usize {
        let poly = self
            .b
            .first()
            .map_or(0, |b| crate::serial::packed_poly_bytes(b.basis()));
        let a = if seeded && self.seeds.is_some() {
            32
        } else {
            poly
        };
        crate::serial::HEADER_LEN + self.b.len() * (poly + a)
    }
}

/// `x` (over Q_from ∪ P) with only the limbs of Q_level ∪ P, over `basis`,
/// in a buffer of its own size.
pub(crate) fn cut_to_level(
    x: &RnsPoly,
    basis: &Arc<RnsBasis>,
    from: usize,
    level: usize,
) -> RnsPoly {
    let p = basis.len() - level - 1;
    let mut data = Vec::with_capacity(basis.len() * x.degree());
    for i in (0..=level).chain(from + 1..from + 1 + p) {
        data.extend_from_slice(x.limb(i));
    }
    RnsPoly::from_buffer_unchecked(basis, x.domain(), data)
}

/// Relinearization key: switches s² to s.
#[derive(Debug, Clone, PartialEq)]
pub struct RelinearizationKey(pub SwitchingKey);

/// A Galois key for X → X^g: switches s(X^g) to s.
///
/// It is held with its NTT slots moved by the automorphism's inverse
/// permutation π⁻¹: the key switch of an automorphism needs Σ π(d_j)·k_j
/// over the digits d_j, which is π(Σ d_j·π⁻¹(k_j)), so it permutes its two
/// outputs instead of every digit of its input (two polynomials instead of
/// one per digit). [`Self::to_bytes`] writes the key itself.
#[derive(Debug, Clone, PartialEq)]
pub struct GaloisKey {
    pub(crate) galois_element: usize,
    /// The switching key, slots moved by π⁻¹.
    pub(crate) key: SwitchingKey,
    /// NTT-slot permutation π of the automorphism, as u32 (N ≤ 2^17): the
    /// table is read beside every limb it moves, and half its bytes keep
    /// more of it and the limb in L2.
    pub(crate) perm: Arc<Vec<u32>>,
}

impl GaloisKey {
    /// The Galois element g.
    pub fn galois_element(&self) -> usize {
        self.galois_element
    }

    /// The switching key as key switching uses it: its NTT slots moved by
    /// the inverse of the automorphism's permutation (see the type's
    /// documentation; its size, digits and parameters are the key's).
    pub fn switching_key(&self) -> &SwitchingKey {
        &self.key
    }

    /// The key for levels up to `level` only ([`SwitchingKey::at_level`]).
    pub fn at_level(&self, level: usize) -> Result<Self> {
        Ok(Self {
            galois_element: self.galois_element,
            key: self.key.at_level(level)?,
            perm: self.perm.clone(),
        })
    }

    /// The switching key itself, slots in place (what serialization writes).
    pub(crate) fn unpermuted_key(&self) -> SwitchingKey {
        self.key
            .map_slots(|p| crate::ops::permute_slots(p, &self.perm))
    }

    /// Builds the key from its parts (generation and deserialization).
    pub(crate) fn from_parts(galois_element: usize, key: SwitchingKey) -> Result<Self> {
        let n = key.params.n();
        let perm: Vec<u32> = automorphism_permutation(n, galois_element)?
            .into_iter()
            .map(|p| u32::try_from(p).expect("N ≤ 2^17"))
            .collect();
        let mut inverse = vec![0; n];
        for (i, &p) in (0u32..).zip(&perm) {
            inverse[p as usize] = i;
        }
        let perm = Arc::new(perm);
        let key = key.map_slots(|p| crate::ops::permute_slots(p, &inverse));
        Ok(Self {
            galois_element: galois_element % (2 * n),
            key,
            perm,
        })
    }
}

/// A set of Galois keys indexed by Galois element.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GaloisKeys {
    keys: BTreeMap<usize, GaloisKey>,
}

impl GaloisKeys {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The keys, by Galois element.
    pub fn iter(&self) -> impl Iterator<Item = &GaloisKey> {
        self.keys.values()
    }

    /// Adds (or replaces) a key.
    pub fn insert(&mut self, key: GaloisKey) {
        self.keys.insert(key.galois_element, key);
    }

    /// The key for Galois element `g`.
    pub fn get(&self, g: usize) -> Result<&GaloisKey> {
        self.keys.get(&g).ok_or(RlweError::MissingGaloisKey(g))
    }

    /// The Galois elements present.
    pub fn elements(&self) -> impl Iterator<Item = usize> + '_ {
        self.keys.keys().copied()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The bytes its keys take in memory ([`SwitchingKey::memory_bytes`]).
    pub fn memory_bytes(&self) -> usize {
        self.keys.values().map(|k| k.key.memory_bytes()).sum()
    }
}

/// The Galois element 5^k mod 2N rotating the N/2 slot rows by `k` (negative
/// k rotates the other way).
///
/// ```
/// use hecloud_rlwe::keys::galois_element_for_rotation;
/// assert_eq!(galois_element_for_rotation(1, 1024), 5);
/// assert_eq!(galois_element_for_rotation(0, 1024), 1);
/// let g = galois_element_for_rotation(-1, 1024);
/// assert_eq!(g * 5 % 2048, 1);
/// ```
pub fn galois_element_for_rotation(k: i64, n: usize) -> usize {
    let two_n = 2 * n as u64;
    let order = (n / 2) as i64; // order of 5 modulo 2N
    let e = k.rem_euclid(order) as u64;
    let mut r = 1u64;
    let mut b = 5u64;
    let mut e = e;
    while e > 0 {
        if e & 1 == 1 {
            r = r * b % two_n;
        }
        b = b * b % two_n;
        e >>= 1;
    }
    r as usize
}

/// The Galois element 2N − 1 (X → X^-1), complex conjugation of CKKS slots.
pub fn galois_element_conjugate(n: usize) -> usize {
    2 * n - 1
}

/// Generates keys with a CSPRNG seeded by the OS (or a fixed seed for tests).
#[derive(Debug)]
pub struct KeyGenerator {
    params: Arc<Parameters>,
    sampler: Sampler,
}

/// An error polynomial over `basis` in the NTT domain: e, or t·e under a
/// plaintext modulus t (BGV keeps the message in the low digits).
pub(crate) fn gaussian_ntt(
    sampler: &mut Sampler,
    basis: &Arc<RnsBasis>,
    params: &Parameters,
) -> Result<RnsPoly> {
    let e = sampler.gaussian(basis.degree());
    let mut p = RnsPoly::from_signed(basis, &e)?;
    if let Some(t) = params.plaintext_modulus() {
        p.mul_scalar_assign(t);
    }
    p.to_ntt();
    Ok(p)
}

impl KeyGenerator {
    /// A key generator drawing from the OS CSPRNG.
    pub fn new(params: &Arc<Parameters>) -> Self {
        Self {
            params: params.clone(),
            sampler: Sampler::from_os(),
        }
    }

    /// A deterministic key generator (tests, reproducible examples only).
    pub fn from_seed(params: &Arc<Parameters>, seed: [u8; 32]) -> Self {
        Self {
            params: params.clone(),
            sampler: Sampler::from_seed(seed),
        }
    }

    /// A fresh secret key from the parameters' distribution.
    ///
    /// ```
    /// # use hecloud_rlwe::{*, params::SIGMA};
    /// # let params = Parameters::new_insecure_for_tests(ParametersLiteral { log_n: 10,
    /// #     log_q: vec![50, 40], log_p: vec![50], secret: SecretDistribution::Ternary,
    /// #     sigma: SIGMA, dnum: None, plaintext_modulus: None }).unwrap();
    /// let mut kg = KeyGenerator::new(&params);
    /// let sk = kg.gen_secret_key().unwrap();
    /// assert_eq!(format!("{sk:?}"), "SecretKey(<redacted>)");
    /// ```
    pub fn gen_secret_key(&mut self) -> Result<SecretKey> {
        let n = self.params.n();
        let mut c = match self.params.literal().secret {
            SecretDistribution::Ternary => self.sampler.ternary(n),
            SecretDistribution::TernaryHamming(h) => self.sampler.ternary_hamming(n, h)?,
        };
        let small: Vec<i8> = c.iter().map(|&x| x as i8).collect();
        c.zeroize();
        let sk = SecretKey::from_coefficients(&self.params, &small);
        let mut small = small;
        small.zeroize();
        sk
    }

    /// A secret key with exactly `h` nonzero ternary coefficients,
    /// whatever the parameters' distribution (bootstrapping's ephemeral
    /// sparse secret).
    pub fn gen_sparse_secret_key(&mut self, h: usize) -> Result<SecretKey> {
        let mut c = self.sampler.ternary_hamming(self.params.n(), h)?;
        let mut small: Vec<i8> = c.iter().map(|&x| x as i8).collect();
        c.zeroize();
        let sk = SecretKey::from_coefficients(&self.params, &small);
        small.zeroize();
        sk
    }

    /// A switching key from `from` to `to` (both of these parameters): a
    /// ciphertext under `from` key-switched with it decrypts under `to`.
    pub fn gen_switching_key_between(
        &mut self,
        from: &SecretKey,
        to: &SecretKey,
    ) -> Result<SwitchingKey> {
        self.check(from)?;
        self.gen_switching_key(&from.s, to)
    }

    /// The public key of `sk`, over Q·P so that encryption can divide its
    /// noise by P (as Lattigo does): fresh public-key ciphertexts then carry
    /// little more noise than secret-key ones.
    pub fn gen_public_key(&mut self, sk: &SecretKey) -> Result<PublicKey> {
        self.check(sk)?;
        let basis = self.params.qp_basis().clone();
        let seed = self.sampler.seed();
        let a = expand_seed_uniform(&seed, &basis);
        let mut b = gaussian_ntt(&mut self.sampler, &basis, &self.params)?;
        let as_ = a.mul(&sk.s)?;
        b.sub_assign(&as_)?;
        Ok(PublicKey {
            params: self.params.clone(),
            b,
            a,
            seed,
            key: sk.id,
        })
    }

    fn check(&self, sk: &SecretKey) -> Result<()> {
        if sk.params.hash() != self.params.hash() {
            return Err(RlweError::ParameterMismatch);
        }
        Ok(())
    }

    /// A switching key from `s_from` (NTT over Q·P) to `sk`.
    pub(crate) fn gen_switching_key(
        &mut self,
        s_from: &RnsPoly,
        sk: &SecretKey,
    ) -> Result<SwitchingKey> {
        self.check(sk)?;
        let params = self.params.clone();
        let qp = params.qp_basis().clone();
        let n = params.n();
        let top = params.level(params.max_level())?;
        let (mut bs, mut as_, mut seeds) = (vec![], vec![], vec![]);
        for d in &top.digits {
            let seed = self.sampler.seed();
            let a = expand_seed_uniform(&seed, &qp);
            let mut b = gaussian_ntt(&mut self.sampler, &qp, &params)?;
            b.sub_assign(&a.mul(&sk.s)?)?;
            for (i, &pq) in params
                .p_mod_q()
                .iter()
                .enumerate()
                .take(d.end)
                .skip(d.start)
            {
                let m = qp.moduli()[i];
                let (c, cs) = (pq, m.shoup(pq));
                let src = &s_from.data()[i * n..(i + 1) * n];
                let dst = &mut b.data_mut()[i * n..(i + 1) * n];
                for (o, &x) in dst.iter_mut().zip(src) {
                    *o = m.add(*o, m.mul_shoup(x, c, cs));
                }
            }
            bs.push(b);
            as_.push(a);
            seeds.push(seed);
        }
        Ok(SwitchingKey {
            params,
            b: bs,
            a: as_,
            seeds: Some(seeds),
            key: sk.id,
        })
    }

    /// The relinearization key of `sk` (switches s² to s).
    pub fn gen_relinearization_key(&mut self, sk: &SecretKey) -> Result<RelinearizationKey> {
        let mut s2 = sk.s.mul(&sk.s)?;
        let k = self.gen_switching_key(&s2, sk);
        s2.zeroize();
        Ok(RelinearizationKey(k?))
    }

    /// The Galois key of `sk` for X → X^g (g odd).
    pub fn gen_galois_key(&mut self, sk: &SecretKey, g: usize) -> Result<GaloisKey> {
        let n = self.params.n();
        let g = g % (2 * n);
        let mut sg = sk.s.automorphism(g)?;
        let k = self.gen_switching_key(&sg, sk);
        sg.zeroize();
        GaloisKey::from_parts(g, k?)
    }

    /// Galois keys for rotations by each `k` of `rotations` (slot rotations
    /// of N/2-slot rows), plus conjugation if `conjugate`.
    pub fn gen_galois_keys(
        &mut self,
        sk: &SecretKey,
        rotations: &[i64],
        conjugate: bool,
    ) -> Result<GaloisKeys> {
        let top = self.params.max_level();
        let at: Vec<(i64, usize)> = rotations.iter().map(|&k| (k, top)).collect();
        self.gen_galois_keys_at_levels(sk, &at, conjugate)
    }

    /// [`Self::gen_galois_keys`] with each rotation's key cut to the
    /// highest level it is used at (`(rotation, level)` pairs; a rotation
    /// listed twice keeps the higher level; [`GaloisKey::at_level`]). The
    /// conjugation key is whole. Refused: a level above the top.
    pub fn gen_galois_keys_at_levels(
        &mut self,
        sk: &SecretKey,
        rotations: &[(i64, usize)],
        conjugate: bool,
    ) -> Result<GaloisKeys> {
        let (n, top) = (self.params.n(), self.params.max_level());
        let mut levels: BTreeMap<usize, usize> = BTreeMap::new();
        for &(k, level) in rotations {
            if level > top {
                return Err(RlweError::LevelOutOfRange { level, max: top });
            }
            let g = galois_element_for_rotation(k, n);
            if g != 1 {
                let l = levels.entry(g).or_insert(level);
                *l = (*l).max(level);
            }
        }
        if conjugate {
            levels.insert(galois_element_conjugate(n), top);
        }
        let mut out = GaloisKeys::new();
        for (g, level) in levels {
            let key = self.gen_galois_key(sk, g)?;
            out.insert(if level < top {
                key.at_level(level)?
            } else {
                key
            });
        }
        Ok(out)
    }
}
