//! Encoders: integer vectors mod t to plaintexts and back.
//!
//! The batch encoder (t prime, t ≡ 1 mod 2N) places N values in the slots
//! of a 2 × N/2 matrix: slot i of row 0 is the evaluation at ψ^(5^i) and
//! slot i of row 1 at ψ^(−5^i), for ψ a primitive 2N-th root of unity mod
//! t. Additions and products act slot-wise, X → X^(5^k) rotates both rows
//! left by k, and X → X^(2N−1) swaps the rows. The coefficient encoder
//! (any t, including 2^k) puts the values in the coefficients.

use std::collections::HashMap;
use std::sync::Arc;

use hecloud_math::{NttTable, RnsPoly};
use hecloud_rlwe::Plaintext as RlwePlaintext;
use zeroize::Zeroize;

use crate::error::{BgvError, Result};
use crate::params::BgvParameters;

/// A BGV plaintext: N coefficients mod t (what the encoders produce), lifted
/// to an RLWE plaintext at the level and factor of the ciphertext it meets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plaintext {
    coeffs: Vec<u64>,
}

// A plaintext is somebody's secret: a refresh mask, a model's weights.
impl Drop for Plaintext {
    fn drop(&mut self) {
        self.coeffs.zeroize();
    }
}

impl Plaintext {
    /// The coefficients, in [0, t).
    pub fn coefficients(&self) -> &[u64] {
        &self.coeffs
    }

    /// The RLWE plaintext of `factor`·m over Q_level: coefficients centered
    /// in (−t/2, t/2], NTT domain.
    pub fn lift(
        &self,
        params: &Arc<BgvParameters>,
        level: usize,
        factor: u64,
    ) -> Result<RlwePlaintext> {
        let t = params.t_modulus();
        let half = t.value() / 2;
        let signed: Vec<i64> = self
            .coeffs
            .iter()
            .map(|&c| {
                let c = t.mul(c, factor);
                if c > half {
                    -((t.value() - c) as i64)
                } else {
                    c as i64
                }
            })
            .collect();
        let mut poly = RnsPoly::from_signed(params.rlwe().q_at(level)?, &signed)?;
        poly.to_ntt();
        Ok(RlwePlaintext::new(params.rlwe(), poly, level, 1.0)?)
    }
}

/// Encodes and decodes vectors of integers mod t.
///
/// ```
/// use hecloud_bgv::{BgvParameters, Encoder, params::test_literal};
/// let params = BgvParameters::new_insecure_for_tests(test_literal(10, 1, 65537)).unwrap();
/// let enc = Encoder::new(&params);
/// let pt = enc.encode(&[1, 2, 3, 65536]).unwrap();
/// assert_eq!(&enc.decode(&pt).unwrap()[..5], &[1, 2, 3, 65536, 0]);
/// assert!(enc.encode(&[65537]).is_err()); // does not fit t
/// ```
#[derive(Debug, Clone)]
pub struct Encoder {
    params: Arc<BgvParameters>,
    /// Position in the NTT output (mod t) of each slot (row 0 then row 1);
    /// empty without batching.
    slot_pos: Vec<usize>,
}

impl Encoder {
    /// An encoder for `params` (batching when t allows it).
    pub fn new(params: &Arc<BgvParameters>) -> Self {
        let slot_pos = params
            .batch_table()
            .map(|table| slot_positions(table))
            .unwrap_or_default();
        Self {
            params: params.clone(),
            slot_pos,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &Arc<BgvParameters> {
        &self.params
    }

    fn check_values(&self, values: &[u64]) -> Result<()> {
        let n = self.params.n();
        if values.len() > n {
            return Err(BgvError::TooManyValues {
                given: values.len(),
                slots: n,
            });
        }
        let t = self.params.t();
        match values.iter().position(|&v| v >= t) {
            Some(index) => Err(BgvError::ValueOutOfRange {
                value: values[index],
                index,
                t,
            }),
            None => Ok(()),
        }
    }

    /// Batch-encodes up to N values (each below t) into the slots; the
    /// remaining slots are 0.
    pub fn encode(&self, values: &[u64]) -> Result<Plaintext> {
        let table = self.params.batch_table()?;
        self.check_values(values)?;
        let mut evals = vec![0u64; self.params.n()];
        for (&v, &pos) in values.iter().zip(&self.slot_pos) {
            evals[pos] = v;
        }
        table.inverse(&mut evals);
        Ok(Plaintext { coeffs: evals })
    }

    /// The same value in every slot.
    pub fn encode_constant(&self, value: u64) -> Result<Plaintext> {
        self.check_values(&[value])?;
        let mut coeffs = vec![0u64; self.params.n()];
        coeffs[0] = value;
        Ok(Plaintext { coeffs })
    }

    /// The N slot values of a plaintext.
    pub fn decode(&self, pt: &Plaintext) -> Result<Vec<u64>> {
        let table = self.params.batch_table()?;
        let mut evals = pt.coeffs.clone();
        table.forward(&mut evals);
        Ok(self.slot_pos.iter().map(|&p| evals[p]).collect())
    }

    /// Encodes up to N values (each below t) as coefficients.
    pub fn encode_coefficients(&self, values: &[u64]) -> Result<Plaintext> {
        self.check_values(values)?;
        let mut coeffs = values.to_vec();
        coeffs.resize(self.params.n(), 0);
        Ok(Plaintext { coeffs })
    }

    /// A plaintext from N coefficients mod t (as decryption yields them).
    pub(crate) fn from_coefficients(coeffs: Vec<u64>) -> Plaintext {
        Plaintext { coeffs }
    }
}

/// For each slot (row 0: exponent 5^i, row 1: −5^i), the index of the NTT
/// output that evaluates at ψ^exponent, read off the transform of X.
fn slot_positions(table: &NttTable) -> Vec<usize> {
    let (t, n) = (table.modulus(), table.degree());
    let two_n = 2 * n;
    let mut exponent_of = HashMap::with_capacity(two_n);
    let mut p = 1u64;
    for k in 0..two_n {
        exponent_of.insert(p, k);
        p = t.mul(p, table.psi());
    }
    // The forward NTT evaluates at the odd powers of ψ in its own order:
    // read it off the transform of the monomial X.
    let mut x = vec![0u64; n];
    x[1] = 1;
    table.forward(&mut x);
    let mut pos_of = vec![usize::MAX; two_n];
    for (j, v) in x.iter().enumerate() {
        pos_of[exponent_of[v]] = j;
    }
    let half = n / 2;
    let mut out = Vec::with_capacity(n);
    let mut g = 1usize;
    let mut row0 = Vec::with_capacity(half);
    for _ in 0..half {
        row0.push(g);
        g = g * 5 % two_n;
    }
    out.extend(row0.iter().map(|&e| pos_of[e]));
    out.extend(row0.iter().map(|&e| pos_of[two_n - e]));
    out
}
