//! [`TfheEngine`]: wires as TFHE-rs shortint ciphertexts.
//!
//! # Parameters
//!
//! We use `PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128` (TFHE-rs 1.8, the
//! same set TFHE-rs's integer API uses by default): LWE ciphertexts under a
//! 2048-dimension key with a padding bit and a 4-bit plaintext space (message
//! modulus 4 × carry modulus 4 = 16 values), key switching to the small key
//! then programmable bootstrapping. Zama documents it as 128-bit secure with
//! p_fail = 2^-129.6 per bootstrap for lookup inputs whose noise is a dot
//! product of fresh ciphertexts of 2-norm ≤ 5. We use the whole 16-value space
//! for each wire (bits are values 0/1 in it; counts go up to 15) and check
//! every lookup input against that 2-norm bound (squared: [`NOISE_BUDGET`]),
//! so every bootstrap we run has p_fail ≤ 2^-129.6 ≤ 2^-128 — the same as
//! TFHE-rs's own radix operations. [TFHE-rs tracks noise with the 1-norm, which
//! bounds the 2-norm from above; we track the 2-norm itself.]
//!
//! Lookups whose input range is at most `16/k` use TFHE-rs's many-LUT
//! bootstrap to produce `k` outputs from one blind rotation.
//!
//! [`NOISE_BUDGET`]: crate::NOISE_BUDGET

use crate::engine::{
    BitEngine, Expr, Lut, LutOp, PLAINTEXT_SPACE, Plan, StatCounters, Stats, Wire, WireOf, plan,
};
use crate::error::{CircuitError, Result};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use tfhe::shortint::ciphertext::{Degree, NoiseLevel};
use tfhe::shortint::server_key::{LookupTableOwned, ManyLookupTableOwned};
use tfhe::shortint::{Ciphertext, ClientKey, ServerKey};

/// The TFHE-rs parameter set of [`TfheEngine`] (see the module docs).
pub const TFHE_PARAMS: tfhe::shortint::ClassicPBSParameters =
    tfhe::shortint::parameters::PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128;

enum Table {
    One(LookupTableOwned),
    Many(ManyLookupTableOwned),
}

/// Where the engine's server key lives: its own, or inside a TFHE-rs
/// integer server key it shares with integer code (one copy of the
/// bootstrapping key in memory for both).
#[derive(Clone)]
enum ServerKeyHandle {
    Shortint(Arc<ServerKey>),
    Integer(Arc<tfhe::integer::ServerKey>),
}

/// A [`BitEngine`] on TFHE-rs shortint ciphertexts.
///
/// Holds the server key, and on the client side the client key too. The
/// client key is never printed (`Debug` shows only whether it is present).
pub struct TfheEngine {
    client: Option<ClientKey>,
    server: ServerKeyHandle,
    stats: StatCounters,
    tables: RwLock<HashMap<Vec<Lut>, Arc<Table>>>,
}

impl std::fmt::Debug for TfheEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TfheEngine")
            .field("has_client_key", &self.client.is_some())
            .field("stats", &self.stats.get())
            .finish_non_exhaustive()
    }
}

impl TfheEngine {
    /// Generates a fresh client/server key pair (TFHE-rs's CSPRNG) for [`TFHE_PARAMS`].
    pub fn generate() -> Self {
        let (client, server) = tfhe::shortint::gen_keys(TFHE_PARAMS);
        Self::from_keys(Some(client), server)
    }

    /// An engine from existing keys; without a client key it can only compute.
    pub fn from_keys(client: Option<ClientKey>, server: ServerKey) -> Self {
        Self::with_handle(client, ServerKeyHandle::Shortint(Arc::new(server)))
    }

    /// An engine on the shortint key inside a TFHE-rs integer server key, so
    /// that integer code and this engine share one bootstrapping key. The key
    /// must use [`TFHE_PARAMS`].
    ///
    /// ```no_run
    /// use hecloud_circuits::{BitEngine, TFHE_PARAMS, TfheEngine};
    /// use std::sync::Arc;
    ///
    /// let cks = tfhe::integer::ClientKey::new(TFHE_PARAMS);
    /// let sks = Arc::new(tfhe::integer::ServerKey::new_radix_server_key(&cks));
    /// let engine = TfheEngine::from_integer_keys(Some(cks.into_raw_parts()), sks.clone());
    /// let one = engine.encrypt_bit(true).unwrap();
    /// assert!(!engine.decrypt_bit(&engine.not(&one).unwrap()).unwrap());
    /// ```
    pub fn from_integer_keys(
        client: Option<ClientKey>,
        server: Arc<tfhe::integer::ServerKey>,
    ) -> Self {
        Self::with_handle(client, ServerKeyHandle::Integer(server))
    }

    fn with_handle(client: Option<ClientKey>, server: ServerKeyHandle) -> Self {
        Self {
            client,
            server,
            stats: StatCounters::default(),
            tables: RwLock::new(HashMap::new()),
        }
    }

    /// An engine with the same keys (shared, not copied) and fresh counters,
    /// to measure circuits that run concurrently on separate counters.
    pub fn fork(&self) -> Self {
        Self::with_handle(self.client.clone(), self.server.clone())
    }

    /// The client key, if the engine has one (a key holder's engine).
    pub fn client_key(&self) -> Option<&ClientKey> {
        self.client.as_ref()
    }

    /// The server key (to hand to a server-side engine).
    pub fn server_key(&self) -> &ServerKey {
        match &self.server {
            ServerKeyHandle::Shortint(k) => k,
            ServerKeyHandle::Integer(k) => k.as_ref().as_ref(),
        }
    }

    fn table(&self, luts: &[Lut]) -> Arc<Table> {
        if let Some(t) = self.tables.read().ok().and_then(|m| m.get(luts).cloned()) {
            return t;
        }
        let t = Arc::new(if let [l] = luts {
            let l = *l;
            Table::One(self.server_key().generate_lookup_table(move |x| l.eval(x)))
        } else {
            let fs: Vec<Box<dyn Fn(u64) -> u64>> = luts
                .iter()
                .map(|&l| Box::new(move |x| l.eval(x)) as Box<dyn Fn(u64) -> u64>)
                .collect();
            let refs: Vec<&dyn Fn(u64) -> u64> = fs.iter().map(|f| f.as_ref()).collect();
            Table::Many(self.server_key().generate_many_lookup_table(&refs))
        });
        if let Ok(mut m) = self.tables.write() {
            m.insert(luts.to_vec(), t.clone());
        }
        t
    }

    /// The linear combination as a shortint ciphertext with degree `max`.
    fn combine(&self, expr: &Expr<'_, Ciphertext>, max: u64) -> Ciphertext {
        let mut acc = self.server_key().create_trivial(0);
        {
            let out = acc.ct.as_mut();
            for &(w, c) in &expr.terms {
                let c = c as u64;
                for (o, &x) in out.iter_mut().zip(w.ct.ct.as_ref()) {
                    *o = o.wrapping_add(x.wrapping_mul(c));
                }
            }
            // Encoding with a padding bit: Δ = 2^63 / 16.
            let delta = (1u64 << 63) / PLAINTEXT_SPACE;
            if let Some(body) = out.last_mut() {
                *body = body.wrapping_add((expr.offset as u64).wrapping_mul(delta));
            }
        }
        acc.degree = Degree::new(max);
        acc.set_noise_level_to_nominal();
        if expr.terms.iter().all(|(w, _)| w.noise == 0) {
            acc.set_noise_level(NoiseLevel::ZERO, self.server_key().max_noise_level);
        }
        acc
    }

    fn run_group(&self, input: &Ciphertext, luts: &[Lut]) -> Vec<Ciphertext> {
        match &*self.table(luts) {
            Table::One(t) => vec![self.server_key().apply_lookup_table(input, t)],
            Table::Many(t) => self.server_key().apply_many_lookup_table(input, t),
        }
    }

    /// One layer; with a flag, it is read before every bootstrap, since one
    /// wide layer (the first stage of a counter tree over thousands of
    /// operands) may hold minutes of bootstraps.
    fn run_layer(
        &self,
        ops: &[LutOp<'_, Ciphertext>],
        cancel: Option<&AtomicBool>,
    ) -> Result<Vec<Vec<WireOf<Self>>>> {
        let cancelled = || cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        if cancelled() {
            return Err(CircuitError::Cancelled);
        }
        let plans: Vec<Plan> = ops.iter().map(plan).collect::<Result<_>>()?;
        // Linear combinations are cheap (a few thousand additions): computed here.
        let inputs: Vec<Ciphertext> = ops
            .iter()
            .zip(&plans)
            .map(|(op, p)| self.combine(&op.expr, p.max))
            .collect();
        // One job per bootstrap, all run in parallel.
        let jobs: Vec<(usize, usize)> = plans
            .iter()
            .enumerate()
            .flat_map(|(i, p)| (0..p.bootstraps).map(move |g| (i, g)))
            .collect();
        let run = |&(i, g): &(usize, usize)| {
            if cancelled() {
                return None;
            }
            let per = plans[i].per_bootstrap;
            let luts = &ops[i].luts[g * per..((g + 1) * per).min(ops[i].luts.len())];
            Some(self.run_group(&inputs[i], luts))
        };
        // A lone bootstrap runs on the calling thread: handing it to the pool
        // costs a wake-up and a cold worker cache for no parallelism.
        let results: Option<Vec<Vec<Ciphertext>>> = if jobs.len() == 1 {
            jobs.iter().map(run).collect()
        } else {
            jobs.par_iter().map(run).collect()
        };
        let results = results.ok_or(CircuitError::Cancelled)?;
        let mut out: Vec<Vec<WireOf<Self>>> = plans
            .iter()
            .map(|p| Vec::with_capacity(p.out_max.len()))
            .collect();
        for (&(i, _), cts) in jobs.iter().zip(results) {
            let k = out[i].len();
            for (j, ct) in cts.into_iter().enumerate() {
                let m = plans[i].out_max[k + j];
                out[i].push(Wire::from_parts(ct, m, 1));
            }
        }
        self.stats.record(&plans);
        Ok(out)
    }
}

impl BitEngine for TfheEngine {
    type Ct = Ciphertext;

    fn name(&self) -> &'static str {
        "tfhe"
    }

    fn encrypt_value(&self, v: u64, max: u64) -> Result<WireOf<Self>> {
        if max >= PLAINTEXT_SPACE || v > max {
            return Err(CircuitError::OutOfPlaintextSpace {
                min: v as i64,
                max: v as i64,
                space: max.min(PLAINTEXT_SPACE - 1) + 1,
            });
        }
        let ck = self.client.as_ref().ok_or(CircuitError::NoClientKey)?;
        // encrypt_without_padding would drop the padding bit; `encrypt` keeps it and
        // accepts values up to message·carry − 1 through the carry space.
        let mut ct = ck.encrypt(0);
        let delta = (1u64 << 63) / PLAINTEXT_SPACE;
        if let Some(body) = ct.ct.as_mut().last_mut() {
            *body = body.wrapping_add(v.wrapping_mul(delta));
        }
        // The degree is public metadata: set it to the public bound, not the value.
        ct.degree = Degree::new(max);
        Ok(Wire::from_parts(ct, max, 1))
    }

    fn decrypt_value(&self, w: &WireOf<Self>) -> Result<u64> {
        let ck = self.client.as_ref().ok_or(CircuitError::NoClientKey)?;
        Ok(ck.decrypt_message_and_carry(&w.ct))
    }

    fn constant(&self, v: u64) -> WireOf<Self> {
        let v = v % PLAINTEXT_SPACE;
        let mut ct = self.server_key().create_trivial(0);
        let delta = (1u64 << 63) / PLAINTEXT_SPACE;
        if let Some(body) = ct.ct.as_mut().last_mut() {
            *body = body.wrapping_add(v.wrapping_mul(delta));
        }
        ct.degree = Degree::new(v);
        Wire::from_parts(ct, v, 0)
    }

    fn linear(&self, expr: &Expr<'_, Ciphertext>) -> Result<WireOf<Self>> {
        let (_, hi) = expr.checked_range()?;
        Ok(Wire::from_parts(self.combine(expr, hi), hi, expr.noise()))
    }

    fn eval_layer(&self, ops: &[LutOp<'_, Ciphertext>]) -> Result<Vec<Vec<WireOf<Self>>>> {
        self.run_layer(ops, None)
    }

    fn eval_layer_cancellable(
        &self,
        ops: &[LutOp<'_, Ciphertext>],
        cancel: &AtomicBool,
    ) -> Result<Vec<Vec<WireOf<Self>>>> {
        self.run_layer(ops, Some(cancel))
    }

    fn stats(&self) -> Stats {
        self.stats.get()
    }
}
