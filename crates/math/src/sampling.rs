//! Randomness behind explicit, seedable handles.
//!
//! A [`Sampler`] wraps ChaCha20, seeded from the operating system by default
//! or from a caller's 32-byte seed (reproducible tests, seeded ciphertexts).
//! Samplers of secret values avoid branches and table look-ups indexed by
//! secret data.

use std::mem::MaybeUninit;
use std::sync::Arc;

use aes::Aes256;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use zeroize::Zeroize;

use crate::backend::default_backend;
use crate::error::{MathError, Result};
use crate::poly::{Domain, RnsBasis, RnsPoly};

/// Standard deviation of the error distribution (HE Standard).
pub const SIGMA: f64 = 3.2;
/// Gaussian samples are bounded at ⌊6σ⌋ = 19.
pub const GAUSSIAN_BOUND: i64 = 19;

/// A seedable source of the distributions RLWE needs.
///
/// ```
/// use hecloud_math::Sampler;
/// let mut a = Sampler::from_seed([7; 32]);
/// let mut b = Sampler::from_seed([7; 32]);
/// assert_eq!(a.uniform_mod(97), b.uniform_mod(97)); // same seed, same stream
/// let e = a.gaussian(16);
/// assert!(e.iter().all(|x| x.abs() <= 19));
/// ```
#[derive(Debug)]
pub struct Sampler {
    rng: ChaCha20Rng,
}

/// Cumulative distribution of the discrete Gaussian on [−B, B]: entry k is
/// ⌊2^64 · P(X ≤ −B + k)⌋ for k in 0..2B.
fn gaussian_cdt() -> &'static [u64; 2 * GAUSSIAN_BOUND as usize] {
    static CDT: std::sync::OnceLock<[u64; 2 * GAUSSIAN_BOUND as usize]> =
        std::sync::OnceLock::new();
    CDT.get_or_init(|| {
        let b = GAUSSIAN_BOUND;
        let weight = |x: i64| (-(x * x) as f64 / (2.0 * SIGMA * SIGMA)).exp();
        let total: f64 = (-b..=b).map(weight).sum();
        let mut cdt = [0u64; 2 * GAUSSIAN_BOUND as usize];
        let mut acc = 0.0;
        for (k, slot) in cdt.iter_mut().enumerate() {
            acc += weight(-b + k as i64) / total;
            *slot = (acc * 2f64.powi(64)).min(u64::MAX as f64) as u64;
        }
        cdt
    })
}

impl Sampler {
    /// Seeded from the operating system's CSPRNG.
    pub fn from_os() -> Self {
        Self {
            rng: ChaCha20Rng::from_os_rng(),
        }
    }

    /// Seeded from a caller's 32-byte seed (deterministic stream).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            rng: ChaCha20Rng::from_seed(seed),
        }
    }

    /// 32 fresh random bytes (e.g. a seed for [`expand_seed_uniform`]).
    pub fn seed(&mut self) -> [u8; 32] {
        let mut s = [0u8; 32];
        self.rng.fill_bytes(&mut s);
        s
    }

    /// A uniform 64-bit word.
    pub fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// Uniform in [0, q) by rejection sampling on the smallest covering mask
    /// (the expected number of draws is below 2).
    pub fn uniform_mod(&mut self, q: u64) -> u64 {
        assert!(q > 0, "modulus must be positive");
        let mask = covering_mask(q);
        loop {
            let x = self.rng.next_u64() & mask;
            if x < q {
                return x;
            }
        }
    }

    /// A uniform polynomial over `basis`, tagged with `domain` (uniform
    /// residues are uniform in either domain).
    pub fn uniform_poly(&mut self, basis: &Arc<RnsBasis>, domain: Domain) -> RnsPoly {
        let n = basis.degree();
        let mut data = vec![0u64; basis.len() * n];
        for (limb, m) in data.chunks_exact_mut(n).zip(basis.moduli()) {
            for x in limb.iter_mut() {
                *x = self.uniform_mod(m.value());
            }
        }
        RnsPoly::from_limbs(basis, domain, data).expect("residues below their primes")
    }

    /// n coefficients uniform in {−1, 0, 1}. The mapping of a byte to a
    /// coefficient is branch-free; the only branch rejects the byte 255,
    /// which reveals nothing about the coefficients kept.
    pub fn ternary(&mut self, n: usize) -> Vec<i64> {
        // A byte below 255 is uniform on 0..255 = 3·85; map it to {−1, 0, 1}.
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let b = (self.rng.next_u32() & 0xff) as i64;
            if b < 255 {
                out.push(b % 3 - 1);
            }
        }
        out
    }

    /// n coefficients in {−1, 0, 1} with exactly `h` nonzero, uniform among
    /// such vectors (partial Fisher–Yates shuffle of positions).
    pub fn ternary_hamming(&mut self, n: usize, h: usize) -> Result<Vec<i64>> {
        if h > n {
            return Err(MathError::InvalidHammingWeight { h, n });
        }
        let mut pos: Vec<usize> = (0..n).collect();
        let mut out = vec![0i64; n];
        for i in 0..h {
            let j = i + self.uniform_mod((n - i) as u64) as usize;
            pos.swap(i, j);
            let sign = (self.rng.next_u32() & 1) as i64;
            out[pos[i]] = 1 - 2 * sign;
        }
        pos.zeroize();
        Ok(out)
    }

    /// One discrete Gaussian sample (σ = 3.2, |x| ≤ 19) by a full scan of the
    /// cumulative table: every entry is compared, so the time does not depend
    /// on the value drawn.
    pub fn gaussian_one(&mut self) -> i64 {
        let r = self.rng.next_u64();
        let count: i64 = gaussian_cdt().iter().map(|&c| (r >= c) as i64).sum();
        count - GAUSSIAN_BOUND
    }

    /// n discrete Gaussian samples.
    pub fn gaussian(&mut self, n: usize) -> Vec<i64> {
        (0..n).map(|_| self.gaussian_one()).collect()
    }
}

/// Expands a 32-byte seed into a uniform polynomial over `basis`, tagged NTT
/// (the convention for the `a` part of seeded keys and ciphertexts: only the
/// seed is stored or sent). Deterministic: the same seed gives the same
/// polynomial on every machine.
///
/// Limb `i` comes from AES-256 in counter mode keyed by the seed, counter
/// blocks `(i, j)` (two little-endian u64) for j = 0, 1, …; the keystream is
/// read as little-endian 64-bit words masked to the prime's bit length,
/// words at or above the prime rejected. AES-CTR is a PRF on AES-NI/VAES
/// hardware at several GB/s per core (TFHE-rs expands its seeded masks the
/// same way); separate counters per limb let the limbs expand in parallel.
///
/// ```
/// use hecloud_math::{sampling::expand_seed_uniform, RnsBasis, prime::ntt_primes};
/// let basis = RnsBasis::new(16, &ntt_primes(40, 16, 2, &[]).unwrap()).unwrap();
/// assert_eq!(expand_seed_uniform(&[1; 32], &basis), expand_seed_uniform(&[1; 32], &basis));
/// ```
pub fn expand_seed_uniform(seed: &[u8; 32], basis: &Arc<RnsBasis>) -> RnsPoly {
    let cipher = Aes256::new(&(*seed).into());
    // SAFETY: `fill_uniform` runs until its whole limb is written, so the
    // buffer need not be zeroed first (a memset of 15 MiB at N = 2^16 with
    // 28 primes).
    unsafe {
        RnsPoly::from_limb_writer(basis, Domain::Ntt, |i, q, limb| {
            let mut stream = AesCtr::new(&cipher, i as u64);
            fill_uniform(&mut stream, q, limb);
        })
    }
}

/// Limb `i` (prime `q`) of [`expand_seed_uniform`] into `dst`, the same
/// residues: for a caller that makes a polynomial a limb at a time and
/// keeps no whole uniform polynomial (63 MB at N = 2^17 with 60 primes).
///
/// ```
/// use hecloud_math::{sampling::{expand_seed_uniform, expand_seed_uniform_limb}, RnsBasis, prime::ntt_primes};
/// let basis = RnsBasis::new(16, &ntt_primes(40, 16, 2, &[]).unwrap()).unwrap();
/// let mut limb = vec![0; 16];
/// expand_seed_uniform_limb(&[1; 32], 1, basis.moduli()[1].value(), &mut limb);
/// assert_eq!(limb, expand_seed_uniform(&[1; 32], &basis).limb(1));
/// ```
pub fn expand_seed_uniform_limb(seed: &[u8; 32], i: usize, q: u64, dst: &mut [u64]) {
    let cipher = Aes256::new(&(*seed).into());
    let mut stream = AesCtr::new(&cipher, i as u64);
    // SAFETY: `MaybeUninit<u64>` has the layout of `u64`, and `fill_uniform`
    // only writes initialised values.
    let out = unsafe { &mut *(dst as *mut [u64] as *mut [MaybeUninit<u64>]) };
    fill_uniform(&mut stream, q, out);
}

/// The smallest all-ones mask covering `[0, q)`: rejection sampling on
/// masked words accepts with probability above 1/2.
fn covering_mask(q: u64) -> u64 {
    u64::MAX >> (q - 1).leading_zeros().min(63)
}

/// AES blocks drawn per refill in [`fill_uniform`] (4 KiB of keystream).
const KEYSTREAM_BLOCKS: usize = 256;
/// Keystream words per refill.
const KEYSTREAM_WORDS: usize = 2 * KEYSTREAM_BLOCKS;

/// The AES-CTR keystream of one limb: counter blocks `(limb, j)`.
struct AesCtr<'a> {
    cipher: &'a Aes256,
    limb: u64,
    next: u64,
}

impl<'a> AesCtr<'a> {
    fn new(cipher: &'a Aes256, limb: u64) -> Self {
        Self {
            cipher,
            limb,
            next: 0,
        }
    }

    /// Encrypts the next `blocks.len()` counter blocks into `blocks`.
    fn fill(&mut self, blocks: &mut [aes::Block]) {
        for b in blocks.iter_mut() {
            b[..8].copy_from_slice(&self.limb.to_le_bytes());
            b[8..].copy_from_slice(&self.next.to_le_bytes());
            self.next += 1;
        }
        self.cipher.encrypt_blocks(blocks);
    }
}

/// The two little-endian words of a keystream block.
fn block_words(b: &aes::Block) -> [u64; 2] {
    let (lo, hi) = b.split_at(8);
    [lo, hi].map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// The scalar reference of
/// [`Backend::keep_below`](crate::backend::Backend::keep_below). Each word
/// is written, the cursor moves only past accepted ones (no branch on the
/// keystream). The cursor is at most the index of the word at hand: the
/// `min` only spares the bounds check.
pub(crate) fn keep_below_scalar(
    src: &[u8],
    mask: u64,
    q: u64,
    dst: &mut [MaybeUninit<u64>],
) -> usize {
    let (words, rest) = src.as_chunks::<8>();
    assert!(rest.is_empty(), "whole words");
    assert!(dst.len() >= words.len(), "room for every word");
    let Some(last) = words.len().checked_sub(1) else {
        return 0;
    };
    let dst = &mut dst[..words.len()];
    let mut j = 0;
    for w in words {
        let x = u64::from_le_bytes(*w) & mask;
        dst[j.min(last)].write(x);
        j += usize::from(x < q);
    }
    j
}

/// Fills `out` with residues uniform in [0, q) by rejection on masked
/// keystream words (below two words per residue on average).
fn fill_uniform(stream: &mut AesCtr<'_>, q: u64, out: &mut [MaybeUninit<u64>]) {
    let mask = covering_mask(q);
    let mut blocks = [aes::Block::default(); KEYSTREAM_BLOCKS];
    let mut filled = 0;
    while filled < out.len() {
        stream.fill(&mut blocks);
        if let Some(dst) = out[filled..].get_mut(..KEYSTREAM_WORDS) {
            let words = aes::Block::slice_as_flattened(&blocks);
            filled += default_backend().keep_below(words, mask, q, dst);
        } else {
            for x in blocks.iter().flat_map(block_words).map(|x| x & mask) {
                if x < q {
                    out[filled].write(x);
                    filled += 1;
                    if filled == out.len() {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prime::ntt_primes;

    fn mean_var(x: &[i64]) -> (f64, f64) {
        let n = x.len() as f64;
        let mean = x.iter().sum::<i64>() as f64 / n;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        (mean, var)
    }

    #[test]
    fn gaussian_statistics() {
        let mut s = crate::testing::sampler();
        let x = s.gaussian(200_000);
        let (mean, var) = mean_var(&x);
        // Standard error of the mean is σ/√n ≈ 0.007; of the variance ≈ 0.03.
        assert!(mean.abs() < 0.05, "mean {mean}");
        assert!((var - SIGMA * SIGMA).abs() < 0.25, "variance {var}");
        assert!(x.iter().all(|v| v.abs() <= GAUSSIAN_BOUND));
        assert!(x.iter().any(|&v| v.abs() >= 8), "tails never sampled");
    }

    #[test]
    fn ternary_statistics() {
        let mut s = crate::testing::sampler();
        let x = s.ternary(90_000);
        for v in [-1, 0, 1] {
            let frac = x.iter().filter(|&&t| t == v).count() as f64 / x.len() as f64;
            assert!((frac - 1.0 / 3.0).abs() < 0.01, "P({v}) = {frac}");
        }
        let (mean, var) = mean_var(&x);
        assert!(
            mean.abs() < 0.02 && (var - 2.0 / 3.0).abs() < 0.02,
            "{mean} {var}"
        );
    }

    #[test]
    fn hamming_weight_is_exact() {
        let mut s = crate::testing::sampler();
        for (n, h) in [(16, 0), (16, 16), (1024, 64), (1 << 16, 192)] {
            let x = s.ternary_hamming(n, h).unwrap();
            assert_eq!(x.len(), n);
            assert_eq!(x.iter().filter(|&&v| v != 0).count(), h);
            assert!(x.iter().all(|v| (-1..=1).contains(v)));
        }
        assert_eq!(
            s.ternary_hamming(8, 9),
            Err(MathError::InvalidHammingWeight { h: 9, n: 8 })
        );
    }

    #[test]
    fn uniform_is_in_range_and_balanced() {
        let mut s = crate::testing::sampler();
        let q = ntt_primes(60, 1024, 1, &[]).unwrap()[0];
        let x: Vec<u64> = (0..100_000).map(|_| s.uniform_mod(q)).collect();
        assert!(x.iter().all(|&v| v < q));
        let below_half = x.iter().filter(|&&v| v < q / 2).count() as f64 / x.len() as f64;
        assert!((below_half - 0.5).abs() < 0.01, "{below_half}");
        for q in [1u64, 2, 3, (1 << 62) - 1] {
            assert!((0..1000).all(|_| s.uniform_mod(q) < q));
        }
    }

    #[test]
    fn seeds_are_deterministic_and_distinct() {
        let basis = RnsBasis::new(64, &ntt_primes(50, 64, 2, &[]).unwrap()).unwrap();
        let a = expand_seed_uniform(&[3; 32], &basis);
        assert_eq!(a, expand_seed_uniform(&[3; 32], &basis));
        assert_ne!(a, expand_seed_uniform(&[4; 32], &basis));
        assert_eq!(a.domain(), Domain::Ntt);
        let mut s = crate::testing::sampler();
        assert_ne!(s.seed(), s.seed());
    }

    /// The scalar rejection loop keeps the masked words below q, in order,
    /// for primes accepting most words and about half of them (the vector
    /// loops are held to it by the backend parity suite).
    #[test]
    fn keep_below_keeps_the_words_below_q() {
        let mut s = crate::testing::sampler();
        for q in [(1 << 49) + 1, (1u64 << 50) - 27, 65537, u64::MAX - 58] {
            let mask = covering_mask(q);
            let mut blocks = [aes::Block::default(); KEYSTREAM_BLOCKS];
            for b in blocks.iter_mut() {
                for x in b.iter_mut() {
                    *x = s.next_u64() as u8;
                }
            }
            let want: Vec<u64> = blocks
                .iter()
                .flat_map(block_words)
                .map(|x| x & mask)
                .filter(|&x| x < q)
                .collect();
            let mut out = vec![MaybeUninit::new(0); KEYSTREAM_WORDS];
            let words = aes::Block::slice_as_flattened(&blocks);
            let n = keep_below_scalar(words, mask, q, &mut out);
            let got: Vec<u64> = out[..n]
                .iter()
                .map(|x| unsafe { x.assume_init() })
                .collect();
            assert_eq!(got, want, "q = {q}");
        }
    }

    /// The expansion follows its documented definition, word by word: an
    /// independent re-implementation, one AES block at a time, must agree.
    #[test]
    fn seed_expansion_matches_its_definition() {
        let primes = ntt_primes(50, 1 << 15, 3, &[]).unwrap();
        let basis = RnsBasis::new(1 << 15, &primes).unwrap();
        let seed = [9u8; 32];
        let got = expand_seed_uniform(&seed, &basis);
        for (i, (&q, limb)) in primes
            .iter()
            .zip(got.data().chunks_exact(1 << 15))
            .enumerate()
        {
            let aes = Aes256::new(&seed.into());
            let words = (0u64..).flat_map(|j| {
                let mut block = [0u8; 16];
                block[..8].copy_from_slice(&(i as u64).to_le_bytes());
                block[8..].copy_from_slice(&j.to_le_bytes());
                let mut block = block.into();
                aes.encrypt_block(&mut block);
                let b: [u8; 16] = block.into();
                [
                    u64::from_le_bytes(b[..8].try_into().unwrap()),
                    u64::from_le_bytes(b[8..].try_into().unwrap()),
                ]
            });
            let mask = u64::MAX >> (q - 1).leading_zeros();
            let want: Vec<u64> = words
                .map(|w| w & mask)
                .filter(|&x| x < q)
                .take(1 << 15)
                .collect();
            assert_eq!(limb, &want[..], "limb {i}");
        }
        // The block cipher is AES-256 (FIPS-197, appendix C.3).
        let key: [u8; 32] = std::array::from_fn(|i| i as u8);
        let mut block: aes::Block = std::array::from_fn::<u8, 16, _>(|i| (i * 0x11) as u8).into();
        Aes256::new(&key.into()).encrypt_block(&mut block);
        assert_eq!(
            block[..],
            [
                0x8e, 0xa2, 0xb7, 0xca, 0x51, 0x67, 0x45, 0xbf, 0xea, 0xfc, 0x49, 0x90, 0x4b, 0x49,
                0x60, 0x89
            ]
        );
    }
}
