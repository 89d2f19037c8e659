//! Parameters: an unchecked [`ParametersLiteral`] is validated (structure and
//! 128-bit security) into immutable, shared [`Parameters`] that hold the RNS
//! bases of every level and the key-switching tables.

use std::sync::Arc;

use hecloud_math::{Modulus, RnsBasis, prime::ntt_primes};

use crate::error::{Result, RlweError};

/// HE Standard (homomorphicencryption.org, 2018) maximum log2(Q·P) for 128-bit
/// classical security with ternary secrets, N = 2^10 … 2^15, extended to 2^16
/// and 2^17 with the values OpenFHE uses.
pub const HE_STANDARD_128: [(u32, u32); 8] = [
    (10, 27),
    (11, 54),
    (12, 109),
    (13, 218),
    (14, 438),
    (15, 881),
    (16, 1747),
    (17, 3523),
];

/// The HE Standard maximum of log2(Q·P) for N = 2^log_n at 128-bit security,
/// `None` when N is outside the table.
///
/// ```
/// assert_eq!(hecloud_rlwe::params::max_log_qp(16), Some(1747));
/// assert_eq!(hecloud_rlwe::params::max_log_qp(9), None);
/// ```
pub fn max_log_qp(log_n: u32) -> Option<u32> {
    HE_STANDARD_128
        .iter()
        .find(|(l, _)| *l == log_n)
        .map(|(_, m)| *m)
}

/// Smallest Hamming weight the secure constructor accepts for sparse secrets
/// (the weight used by common bootstrappable 128-bit sets).
pub const MIN_SECURE_HAMMING_WEIGHT: usize = 192;

/// Distribution of the secret key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretDistribution {
    /// Uniform ternary coefficients in {-1, 0, 1}.
    Ternary,
    /// Ternary with exactly this many non-zero coefficients.
    TernaryHamming(usize),
}

/// The only error standard deviation the constant-time sampler implements.
pub const SIGMA: f64 = hecloud_math::sampling::SIGMA;

/// Unchecked, user-written parameters (validated by [`Parameters::new`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ParametersLiteral {
    /// log2 of the ring degree N.
    pub log_n: u32,
    /// Bit sizes of the ciphertext primes q_0, q_1, … (q_0 first).
    pub log_q: Vec<u32>,
    /// Bit sizes of the special primes P used by key switching.
    pub log_p: Vec<u32>,
    /// Secret distribution.
    pub secret: SecretDistribution,
    /// Standard deviation of the error (must be [`SIGMA`]).
    pub sigma: f64,
    /// Number of key-switching digits; `None` picks ⌈|Q| / |P|⌉, or more
    /// where digits of that many primes would be larger than P (see
    /// [`MAX_DIGIT_EXCESS_BITS`]).
    pub dnum: Option<usize>,
    /// BGV's plaintext modulus t; `None` for CKKS. With t, the message sits
    /// in the low digits: keys and fresh encryptions carry noise t·e, and
    /// every division (ModDown, the fused ModDown + rescale) subtracts a
    /// multiple of t, so that the value mod t survives. It is part of the
    /// parameters' identity ([`Parameters::hash`]).
    pub plaintext_modulus: Option<u64>,
}

/// Precomputed tables of one decomposition digit at one level.
#[derive(Debug)]
pub(crate) struct DigitTables {
    /// First and one-past-last prime index of the digit in Q_l.
    pub start: usize,
    pub end: usize,
    /// (Q_j / q_i)^-1 mod q_i with Shoup companion, for i in the digit.
    pub qhat_inv: Vec<(u64, u64)>,
    /// For each target t of Q_l ∪ P (index space of the level): (Q_j/q_i) mod t
    /// for i in the digit; empty for targets inside the digit.
    pub qhat_mod_t: Vec<Vec<u64>>,
    /// Q_j mod t for every target t (to center the digit).
    pub qj_mod_t: Vec<u64>,
    /// 1 / q_i as floats for i in the digit.
    pub q_inv_f64: Vec<f64>,
}

/// Precomputed tables of one level.
#[derive(Debug)]
pub(crate) struct LevelTables {
    /// Q_l = q_0 … q_l.
    pub q: Arc<RnsBasis>,
    /// Q_l ∪ P.
    pub qp: Arc<RnsBasis>,
    /// Decomposition digits of Q_l.
    pub digits: Vec<DigitTables>,
    /// Division by q_l·P onto Q_{l-1} (fused ModDown + rescale), for l ≥ 1.
    pub rescale_down: Option<ModDownTables>,
}

/// Tables to divide by the product R of some primes (P for ModDown, q_l·P
/// for the fused ModDown + rescale) and keep the others.
#[derive(Debug)]
pub(crate) struct ModDownTables {
    /// (R / r_m)^-1 mod r_m with Shoup companion.
    pub phat_inv: Vec<(u64, u64)>,
    /// (R / r_m) mod q_i, indexed [i][m].
    pub phat_mod_q: Vec<Vec<u64>>,
    /// R^-1 mod q_i with Shoup companion.
    pub p_inv: Vec<(u64, u64)>,
    /// R mod q_i.
    pub r_mod_q: Vec<u64>,
    /// 1 / r_m as floats (for the exact, rounding conversion).
    pub r_inv_f64: Vec<f64>,
}

/// Validated, immutable RLWE parameters, shared behind `Arc`.
///
/// ```
/// use hecloud_rlwe::{Parameters, ParametersLiteral, SecretDistribution};
/// let lit = ParametersLiteral {
///     log_n: 13,
///     log_q: vec![50, 40, 40],
///     log_p: vec![50],
///     secret: SecretDistribution::Ternary,
///     sigma: 3.2,
///     dnum: None,
///     plaintext_modulus: None,
/// };
/// let params = Parameters::new(lit.clone()).unwrap();
/// assert_eq!(params.max_level(), 2);
/// assert!(params.log_qp() <= 218.0);
/// // Too large a modulus for N = 2^13 is refused…
/// let mut weak = lit.clone();
/// weak.log_q = vec![50; 6];
/// assert!(Parameters::new(weak.clone()).is_err());
/// // …unless asked for by the explicitly insecure constructor.
/// assert!(Parameters::new_insecure_for_tests(weak).is_ok());
/// ```
#[derive(Debug)]
pub struct Parameters {
    literal: ParametersLiteral,
    n: usize,
    q: Arc<RnsBasis>,
    p: Arc<RnsBasis>,
    qp: Arc<RnsBasis>,
    levels: Vec<LevelTables>,
    mod_down: ModDownTables,
    /// P mod q_i for every prime q_i of Q (key generation's P·s, the
    /// undivided terms' P·c).
    p_mod_q: Vec<u64>,
    alpha: usize,
    dnum: usize,
    hash: [u8; 32],
    secure: bool,
}

impl PartialEq for Parameters {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
    }
}
impl Eq for Parameters {}

fn invalid(msg: impl Into<String>) -> RlweError {
    RlweError::InvalidParameters(msg.into())
}

/// How many bits a key-switching digit's modulus may exceed P by. Key
/// switching adds noise of about (D/P)·σ·√(N·dnum) for the largest digit
/// modulus D: up to P that stays near the ModDown's rounding, and every bit
/// of D beyond P doubles it. A few bits cost a few bits of precision (the
/// N = 2^14 CKKS preset's first digit, 105 bits over P's 100); tens of
/// bits drown the message with no error anywhere, so such a layout is
/// refused.
pub const MAX_DIGIT_EXCESS_BITS: f64 = 8.0;

/// Primes per key-switching digit for the Q primes `q` and P primes `p`:
/// ⌈|Q|/dnum⌉ for a given dnum, which must keep every digit's modulus
/// within [`MAX_DIGIT_EXCESS_BITS`] of P; without one, those of
/// dnum = ⌈|Q|/|P|⌉ (digits of about as many primes as P has) or fewer,
/// until the digits fit, so that Q primes larger than P's are not grouped
/// into digits larger than P.
fn digit_size(q: &[u64], p: &[u64], dnum: Option<usize>) -> Result<usize> {
    let bits = |primes: &[u64]| primes.iter().map(|&x| (x as f64).log2()).sum::<f64>();
    let log_p = bits(p);
    let largest = |alpha: usize| q.chunks(alpha).map(bits).fold(0.0, f64::max);
    let fits = |alpha: usize| largest(alpha) <= log_p + MAX_DIGIT_EXCESS_BITS;
    let alpha = match dnum {
        Some(dnum) => q.len().div_ceil(dnum),
        None => {
            let mut alpha = q.len().div_ceil(q.len().div_ceil(p.len()));
            while alpha > 1 && !fits(alpha) {
                alpha -= 1;
            }
            alpha
        }
    };
    if !fits(alpha) {
        return Err(invalid(format!(
            "a key-switching digit of {:.1} bits ({alpha} Q primes) over P's {log_p:.1} bits: \
             key switching noise would grow by 2^{:.0} (at most {MAX_DIGIT_EXCESS_BITS} bits over \
             P are allowed); take more digits (dnum) or a larger P",
            largest(alpha),
            largest(alpha) - log_p,
        )));
    }
    Ok(alpha)
}

impl Parameters {
    /// Validates `literal` and checks it against the HE Standard table for
    /// 128-bit security; weaker sets are refused.
    pub fn new(literal: ParametersLiteral) -> Result<Arc<Self>> {
        Self::build(literal, true)
    }

    /// Like [`Parameters::new`] but without the security check: for tests and
    /// examples with tiny rings only. The returned parameters report
    /// [`Parameters::is_secure`] `false`.
    pub fn new_insecure_for_tests(literal: ParametersLiteral) -> Result<Arc<Self>> {
        Self::build(literal, false)
    }

    fn build(literal: ParametersLiteral, check_security: bool) -> Result<Arc<Self>> {
        Self::build_over(literal, None, check_security)
    }

    /// [`Self::build`] over the given primes (Q's then P's, of the
    /// literal's sizes) instead of picking them.
    fn build_over(
        literal: ParametersLiteral,
        primes: Option<Vec<u64>>,
        check_security: bool,
    ) -> Result<Arc<Self>> {
        let log_n = literal.log_n;
        if !(hecloud_math::ntt::MIN_LOG_N..=hecloud_math::ntt::MAX_LOG_N).contains(&log_n) {
            return Err(invalid(format!("log N = {log_n} is outside 4..=17")));
        }
        let n = 1usize << log_n;
        if literal.log_q.is_empty() {
            return Err(invalid("at least one Q prime is needed"));
        }
        if literal.log_p.is_empty() {
            return Err(invalid("at least one P prime is needed for key switching"));
        }
        if literal.log_q.len() + literal.log_p.len() > 256 {
            return Err(invalid("more than 256 primes"));
        }
        if let Some(b) = literal
            .log_q
            .iter()
            .chain(&literal.log_p)
            .find(|b| !(20..=61).contains(*b))
        {
            return Err(invalid(format!("prime size {b} is outside 20..=61 bits")));
        }
        if (literal.sigma - SIGMA).abs() > 1e-9 {
            return Err(invalid(format!(
                "σ = {} is not supported (the constant-time sampler uses σ = {SIGMA})",
                literal.sigma
            )));
        }
        if let SecretDistribution::TernaryHamming(h) = literal.secret {
            if h == 0 || h > n {
                return Err(invalid(format!("Hamming weight {h} outside 1..={n}")));
            }
            if check_security && h < MIN_SECURE_HAMMING_WEIGHT {
                return Err(invalid(format!(
                    "Hamming weight {h} below the secure minimum {MIN_SECURE_HAMMING_WEIGHT}"
                )));
            }
        }
        if let Some(t) = literal.plaintext_modulus
            && !(2..1 << 61).contains(&t)
        {
            return Err(invalid(format!("plaintext modulus {t} outside 2..2^61")));
        }
        let lq = literal.log_q.len();
        if let Some(dnum) = literal.dnum
            && (dnum == 0 || dnum > lq)
        {
            return Err(invalid(format!("dnum = {dnum} outside 1..={lq}")));
        }
        // Exact log2(QP) from the bit sizes is an upper bound; check it first
        // so that absurd sets are refused before generating primes.
        let bits_bound: u32 = literal.log_q.iter().chain(&literal.log_p).sum();
        let max = max_log_qp(log_n);
        if check_security && max.is_none_or(|m| bits_bound as f64 - 1.0 > m as f64) {
            return Err(RlweError::Insecure {
                log_n,
                log_qp: bits_bound as f64,
                max: max.unwrap_or(0),
            });
        }
        // Primes: for each entry, the largest unused NTT prime of that size
        // (never t itself, which must stay invertible mod every prime).
        let t = literal.plaintext_modulus;
        let used = match primes {
            Some(primes) => primes,
            None => {
                let mut used: Vec<u64> = Vec::new();
                for &b in literal.log_q.iter().chain(&literal.log_p) {
                    let exclude: Vec<u64> = used.iter().copied().chain(t).collect();
                    used.push(ntt_primes(b, n, 1, &exclude)?[0]);
                }
                used
            }
        };
        if let Some(t) = t
            && let Some(q) = used.iter().find(|&&q| t % q == 0)
        {
            return Err(invalid(format!(
                "plaintext modulus {t} is a multiple of the prime {q}"
            )));
        }
        let alpha = digit_size(&used[..lq], &used[lq..], literal.dnum)?;
        let dnum = lq.div_ceil(alpha);
        let q = RnsBasis::new(n, &used[..lq])?;
        let p = RnsBasis::new(n, &used[lq..])?;
        let qp = q.concat(&p)?;
        let log_qp = qp.log_q();
        if check_security && max.is_none_or(|m| log_qp > m as f64) {
            return Err(RlweError::Insecure {
                log_n,
                log_qp,
                max: max.unwrap_or(0),
            });
        }
        let mut levels = Vec::with_capacity(lq);
        for l in 0..lq {
            levels.push(level_tables(&q, &p, l, alpha, t)?);
        }
        let mod_down = mod_down_tables(p.moduli(), q.moduli(), t)?;
        let p_mod_q = q
            .moduli()
            .iter()
            .map(|qi| prod_mod(qi, p.moduli(), usize::MAX))
            .collect();
        let hash = param_hash(&literal, &used, dnum);
        Ok(Arc::new(Self {
            literal,
            n,
            q,
            p,
            qp,
            levels,
            mod_down,
            p_mod_q,
            alpha,
            dnum,
            hash,
            secure: check_security,
        }))
    }

    /// The parameters of level 0 alone: q₀ and the same P, N, σ and
    /// secret distribution, one digit. Keys over q₀·P only are what a
    /// sparse secret can safely be used with (bootstrapping's sparse-secret
    /// encapsulation switches a level-0 ciphertext to one, as Lattigo
    /// does); a ciphertext at level 0 is the same polynomials under both.
    /// Built unchecked: their security is that of the much smaller modulus
    /// q₀·P. Refused for a BGV set.
    pub fn bottom(&self) -> Result<Arc<Self>> {
        if self.plaintext_modulus().is_some() {
            return Err(invalid("level-0 parameters of a BGV set"));
        }
        let mut lit = self.literal.clone();
        lit.log_q.truncate(1);
        lit.dnum = Some(1);
        // The same primes, not the ones the sizes would pick: without the
        // Q primes above q₀, a P prime of the same size as one of them
        // would come out as another prime.
        let primes = std::iter::once(&self.q.moduli()[0])
            .chain(self.p.moduli())
            .map(|m| m.value())
            .collect();
        Self::build_over(lit, Some(primes), false)
    }

    /// The literal these parameters were built from.
    pub fn literal(&self) -> &ParametersLiteral {
        &self.literal
    }

    /// Ring degree N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// log2 N.
    pub fn log_n(&self) -> u32 {
        self.literal.log_n
    }

    /// Highest level (number of Q primes − 1).
    pub fn max_level(&self) -> usize {
        self.q.len() - 1
    }

    /// The full ciphertext basis Q.
    pub fn q_basis(&self) -> &Arc<RnsBasis> {
        &self.q
    }

    /// The special primes P.
    pub fn p_basis(&self) -> &Arc<RnsBasis> {
        &self.p
    }

    /// Q ∪ P, the basis of switching keys.
    pub fn qp_basis(&self) -> &Arc<RnsBasis> {
        &self.qp
    }

    /// Q_l = q_0 … q_l, the basis of a ciphertext at `level`.
    pub fn q_at(&self, level: usize) -> Result<&Arc<RnsBasis>> {
        Ok(&self.level(level)?.q)
    }

    /// Q_l ∪ P at `level`.
    pub fn qp_at(&self, level: usize) -> Result<&Arc<RnsBasis>> {
        Ok(&self.level(level)?.qp)
    }

    pub(crate) fn level(&self, level: usize) -> Result<&LevelTables> {
        self.levels.get(level).ok_or(RlweError::LevelOutOfRange {
            level,
            max: self.max_level(),
        })
    }

    pub(crate) fn mod_down(&self) -> &ModDownTables {
        &self.mod_down
    }

    /// P mod q_i, indexed by i.
    pub(crate) fn p_mod_q(&self) -> &[u64] {
        &self.p_mod_q
    }

    /// The prime q_i.
    pub fn q_modulus(&self, i: usize) -> Option<&Modulus> {
        self.q.moduli().get(i)
    }

    /// Number of key-switching digits at `level` (what a key cut to it
    /// holds, `SwitchingKey::at_level`).
    pub fn dnum_at(&self, level: usize) -> Result<usize> {
        Ok(self.level(level)?.digits.len())
    }

    /// Number of key-switching digits (dnum) at the top level.
    pub fn dnum(&self) -> usize {
        self.dnum
    }

    /// Primes per key-switching digit.
    pub fn alpha(&self) -> usize {
        self.alpha
    }

    /// log2(Q·P).
    pub fn log_qp(&self) -> f64 {
        self.qp.log_q()
    }

    /// log2(Q).
    pub fn log_q(&self) -> f64 {
        self.q.log_q()
    }

    /// BLAKE3 hash of the canonical description (N, primes, secret, σ, dnum):
    /// the identity serialized objects are checked against.
    pub fn hash(&self) -> &[u8; 32] {
        &self.hash
    }

    /// BGV's plaintext modulus t (`None` for CKKS).
    pub fn plaintext_modulus(&self) -> Option<u64> {
        self.literal.plaintext_modulus
    }

    /// Whether the set passed the 128-bit security check.
    pub fn is_secure(&self) -> bool {
        self.secure
    }

    /// Serialized size in bytes of one polynomial at `level` over Q_l
    /// (residues packed at the bit length of their prime); 0 past the top level.
    pub fn poly_bytes(&self, level: usize) -> usize {
        self.q_at(level)
            .map_or(0, |b| crate::serial::packed_poly_bytes(b))
    }

    /// Serialized size in bytes of a fresh seeded secret-key encryption at
    /// `level` (header, seed, c_0): what
    /// [`crate::Encryptor::encrypt_sk_pieces`] makes; 0 past the top level.
    pub fn seeded_ciphertext_bytes(&self, level: usize) -> usize {
        match self.poly_bytes(level) {
            0 => 0,
            poly => crate::serial::HEADER_LEN + 32 + poly,
        }
    }
}

fn param_hash(lit: &ParametersLiteral, primes: &[u64], dnum: usize) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"hecloud-rlwe parameters v1");
    h.update(&lit.log_n.to_le_bytes());
    h.update(&(lit.log_q.len() as u32).to_le_bytes());
    h.update(&(lit.log_p.len() as u32).to_le_bytes());
    for q in primes {
        h.update(&q.to_le_bytes());
    }
    match lit.secret {
        SecretDistribution::Ternary => h.update(&[0u8]),
        SecretDistribution::TernaryHamming(w) => h.update(&[1u8]).update(&(w as u64).to_le_bytes()),
    };
    h.update(&lit.sigma.to_bits().to_le_bytes());
    h.update(&(dnum as u64).to_le_bytes());
    // Absent for CKKS, so that CKKS identities predate BGV unchanged.
    if let Some(t) = lit.plaintext_modulus {
        h.update(b"t").update(&t.to_le_bytes());
    }
    *h.finalize().as_bytes()
}

/// ∏_{k ∈ set, k ≠ skip} q_k mod m.
fn prod_mod(m: &Modulus, set: &[Modulus], skip: usize) -> u64 {
    set.iter()
        .enumerate()
        .filter(|(k, _)| *k != skip)
        .fold(1 % m.value(), |acc, (_, q)| m.mul(acc, m.reduce(q.value())))
}

fn level_tables(
    q: &Arc<RnsBasis>,
    p: &Arc<RnsBasis>,
    l: usize,
    alpha: usize,
    t: Option<u64>,
) -> Result<LevelTables> {
    let ql = q.prefix(l + 1)?;
    let qp = ql.concat(p)?;
    let targets: Vec<Modulus> = qp.moduli().to_vec();
    let mut digits = Vec::new();
    let mut start = 0;
    while start <= l {
        let end = (start + alpha).min(l + 1);
        let dm = &ql.moduli()[start..end];
        let qhat_inv = dm
            .iter()
            .enumerate()
            .map(|(k, m)| {
                let inv = m.inv(prod_mod(m, dm, k))?;
                Ok((inv, m.shoup(inv)))
            })
            .collect::<Result<Vec<_>>>()?;
        let qhat_mod_t = targets
            .iter()
            .enumerate()
            .map(|(t, tm)| {
                if (start..end).contains(&t) {
                    Vec::new()
                } else {
                    (0..dm.len()).map(|k| prod_mod(tm, dm, k)).collect()
                }
            })
            .collect();
        let qj_mod_t = targets
            .iter()
            .map(|tm| prod_mod(tm, dm, usize::MAX))
            .collect();
        let q_inv_f64 = dm.iter().map(|m| 1.0 / m.value() as f64).collect();
        digits.push(DigitTables {
            start,
            end,
            qhat_inv,
            qhat_mod_t,
            qj_mod_t,
            q_inv_f64,
        });
        start = end;
    }
    let rescale_down = if l >= 1 {
        let mut removed = vec![ql.moduli()[l]];
        removed.extend_from_slice(p.moduli());
        Some(mod_down_tables(&removed, &ql.moduli()[..l], t)?)
    } else {
        None
    };
    Ok(LevelTables {
        q: ql,
        qp,
        digits,
        rescale_down,
    })
}

/// Tables to divide by the product R of `removed` primes, onto `targets`.
///
/// With a plaintext modulus t the division is BGV's: x ↦ (x − t·[t⁻¹x]_R)/R,
/// which subtracts a multiple of t (so x mod t is kept, times R⁻¹) and is
/// the plain one (x − [x]_R)/R with t⁻¹ folded into the first step of the
/// base conversion and t into its weights.
fn mod_down_tables(
    removed: &[Modulus],
    targets: &[Modulus],
    t: Option<u64>,
) -> Result<ModDownTables> {
    let t = t.unwrap_or(1);
    let phat_inv = removed
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let inv = m.inv(m.mul(prod_mod(m, removed, k), m.reduce(t)))?;
            Ok((inv, m.shoup(inv)))
        })
        .collect::<Result<Vec<_>>>()?;
    let phat_mod_q = targets
        .iter()
        .map(|qi| {
            (0..removed.len())
                .map(|k| qi.mul(prod_mod(qi, removed, k), qi.reduce(t)))
                .collect()
        })
        .collect();
    let p_inv = targets
        .iter()
        .map(|qi| {
            let inv = qi.inv(prod_mod(qi, removed, usize::MAX))?;
            Ok((inv, qi.shoup(inv)))
        })
        .collect::<Result<Vec<_>>>()?;
    let r_mod_q = targets
        .iter()
        .map(|qi| qi.mul(prod_mod(qi, removed, usize::MAX), qi.reduce(t)))
        .collect();
    let r_inv_f64 = removed.iter().map(|m| 1.0 / m.value() as f64).collect();
    Ok(ModDownTables {
        phat_inv,
        phat_mod_q,
        p_inv,
        r_mod_q,
        r_inv_f64,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small insecure literal for tests.
    pub fn small(log_n: u32, levels: usize, dnum: Option<usize>) -> ParametersLiteral {
        let mut log_q = vec![55];
        log_q.extend(std::iter::repeat_n(45, levels));
        ParametersLiteral {
            log_n,
            log_q,
            log_p: vec![58, 58],
            secret: SecretDistribution::Ternary,
            sigma: SIGMA,
            dnum,
            plaintext_modulus: None,
        }
    }

    #[test]
    fn security_table_is_enforced() {
        for (log_n, max) in HE_STANDARD_128 {
            let b = match log_n {
                ..=12 => 25,
                13..=15 => 40,
                _ => 60,
            };
            let count = (max / b) as usize;
            let lit = |count: usize| ParametersLiteral {
                log_n,
                log_q: vec![b; count - 1],
                log_p: vec![b],
                secret: SecretDistribution::Ternary,
                sigma: SIGMA,
                dnum: None,
                plaintext_modulus: None,
            };
            if (11..=15).contains(&log_n) {
                // Just under the limit: accepted.
                let params = Parameters::new(lit(count)).unwrap();
                assert!(params.log_qp() <= max as f64);
                assert!(params.is_secure());
            }
            // Over the limit: refused.
            assert!(matches!(
                Parameters::new(lit(count + 1)),
                Err(RlweError::Insecure { .. })
            ));
        }
        // Below the table: refused by the secure constructor only.
        let tiny = small(9, 2, None);
        assert!(matches!(
            Parameters::new(tiny.clone()),
            Err(RlweError::Insecure { .. })
        ));
        let p = Parameters::new_insecure_for_tests(tiny).unwrap();
        assert!(!p.is_secure());
    }

    /// The level-0 parameters keep q₀ and P even where a Q prime above
    /// q₀ has a P prime's size (bootstrapping's 61-bit EvalMod primes
    /// under 61-bit P primes): picked again by size, P would come out as
    /// the primes Q took first, and keys over it would not match.
    #[test]
    fn bottom_keeps_q0_and_p_where_q_shares_p_sizes() {
        let mut lit = small(10, 2, None);
        lit.log_q = vec![55, 58, 58];
        let params = Parameters::new_insecure_for_tests(lit).unwrap();
        let bottom = params.bottom().unwrap();
        let values = |b: &RnsBasis| b.moduli().iter().map(|m| m.value()).collect::<Vec<_>>();
        assert_eq!(values(bottom.q_basis()), values(params.q_basis())[..1]);
        assert_eq!(values(bottom.p_basis()), values(params.p_basis()));
        assert_eq!(bottom.max_level(), 0);
    }

    #[test]
    fn literal_errors_are_typed() {
        let base = small(10, 2, None);
        let bad = |f: &dyn Fn(&mut ParametersLiteral)| {
            let mut l = base.clone();
            f(&mut l);
            Parameters::new_insecure_for_tests(l).unwrap_err()
        };
        assert!(matches!(
            bad(&|l| l.log_n = 3),
            RlweError::InvalidParameters(_)
        ));
        assert!(matches!(
            bad(&|l| l.log_n = 40),
            RlweError::InvalidParameters(_)
        ));
        assert!(matches!(
            bad(&|l| l.log_q.clear()),
            RlweError::InvalidParameters(_)
        ));
        assert!(matches!(
            bad(&|l| l.log_p.clear()),
            RlweError::InvalidParameters(_)
        ));
        assert!(matches!(
            bad(&|l| l.log_q[0] = 62),
            RlweError::InvalidParameters(_)
        ));
        assert!(matches!(
            bad(&|l| l.sigma = 1.0),
            RlweError::InvalidParameters(_)
        ));
        assert!(matches!(
            bad(&|l| l.dnum = Some(0)),
            RlweError::InvalidParameters(_)
        ));
        assert!(matches!(
            bad(&|l| l.secret = SecretDistribution::TernaryHamming(5000)),
            RlweError::InvalidParameters(_)
        ));
        let mut sparse = small(14, 3, None);
        sparse.secret = SecretDistribution::TernaryHamming(64);
        assert!(Parameters::new(sparse).is_err());
    }

    #[test]
    fn digits_cover_each_level_and_hash_identifies() {
        // P of 3 × 58 bits: digits of 3 and 2 Q primes (145 and 100 bits)
        // fit it.
        let wide_p = |dnum| ParametersLiteral {
            log_p: vec![58; 3],
            ..small(10, 6, dnum)
        };
        let p = Parameters::new_insecure_for_tests(wide_p(Some(3))).unwrap();
        assert_eq!(p.alpha(), 3);
        assert_eq!(p.dnum(), 3);
        for l in 0..=p.max_level() {
            let t = p.level(l).unwrap();
            assert_eq!(t.digits.first().unwrap().start, 0);
            assert_eq!(t.digits.last().unwrap().end, l + 1);
            assert_eq!(t.qp.len(), l + 1 + 3);
        }
        assert!(p.level(7).is_err());
        let p2 = Parameters::new_insecure_for_tests(wide_p(Some(4))).unwrap();
        assert_ne!(p.hash(), p2.hash());
        let p3 = Parameters::new_insecure_for_tests(wide_p(Some(3))).unwrap();
        assert_eq!(p.hash(), p3.hash());
    }

    /// Digits larger than P drown the message in key switching noise:
    /// refused when asked for, avoided when dnum is left to the layout.
    #[test]
    fn digits_larger_than_p_are_refused_or_avoided() {
        let digit_bits = |p: &Parameters| {
            let q = p.q_basis().moduli();
            q.chunks(p.alpha())
                .map(|c| c.iter().map(|m| (m.value() as f64).log2()).sum::<f64>())
                .fold(0.0, f64::max)
        };
        let log_p = |p: &Parameters| {
            p.p_basis()
                .moduli()
                .iter()
                .map(|m| (m.value() as f64).log2())
                .sum::<f64>()
        };
        // P of 2 × 58 bits: digits of 3 primes (55 + 2 × 45 = 145 bits)
        // are 29 bits over it.
        match Parameters::new_insecure_for_tests(small(10, 6, Some(3))) {
            Err(RlweError::InvalidParameters(m)) => assert!(m.contains("digit"), "{m}"),
            other => panic!("{other:?}"),
        }
        // ⌈7/2⌉ = 4 digits of 2 primes (100 bits): they fit.
        let p = Parameters::new_insecure_for_tests(small(10, 6, None)).unwrap();
        assert_eq!((p.alpha(), p.dnum()), (2, 4));
        assert!(digit_bits(&p) <= log_p(&p) + MAX_DIGIT_EXCESS_BITS);
        // Ten 60-bit Q primes over a P of 5 × 49 bits: by count 2 digits of
        // 5 primes (300 bits); by bits 3 digits of at most 4 (240 ≤ 245).
        // Over a P of 2 × 30: one prime per digit.
        let lit = |log_p: Vec<u32>| ParametersLiteral {
            log_q: vec![60; 10],
            log_p,
            ..small(12, 0, None)
        };
        let p = Parameters::new_insecure_for_tests(lit(vec![49; 5])).unwrap();
        assert_eq!((p.alpha(), p.dnum()), (4, 3));
        let p = Parameters::new_insecure_for_tests(lit(vec![30; 2])).unwrap();
        assert_eq!((p.alpha(), p.dnum()), (1, 10));
        assert!(digit_bits(&p) <= log_p(&p) + MAX_DIGIT_EXCESS_BITS);
        // A single Q prime far over P cannot be split: refused.
        assert!(Parameters::new_insecure_for_tests(lit(vec![40])).is_err());
    }
}
