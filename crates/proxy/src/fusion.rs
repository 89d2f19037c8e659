//! Call fusion measured: the same operations run as one batched call (one
//! crossing of the enclave boundary) and as one call per operation, with
//! the crossings and the wall time of each ([`measure_fusion`]).
//!
//! The operations run twice, so they must be repeatable: loads, public
//! files, encryptions and decryptions are; a refresh answer is not (each
//! request is answered once, so the second run fails), and sealing twice
//! gives two different sealed folders (fresh nonces).

use std::time::{Duration, Instant};

use crate::enclave::{Enclave, EnclaveOp};
use crate::error::{ProxyError, Result};

/// What [`measure_fusion`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusionReport {
    /// Operations in the batch.
    pub operations: usize,
    /// Crossings of the batched run (1).
    pub fused_crossings: u64,
    /// Crossings of the run with one call per operation (one each).
    pub separate_crossings: u64,
    /// Wall time of the batched run.
    pub fused_time: Duration,
    /// Wall time of the run with one call per operation.
    pub separate_time: Duration,
}

/// Runs `batch` in `enclave` first as one call, then as one call per
/// operation, in order. The crossings are read from
/// [`Enclave::crossings`] before and after each run, so calls from other
/// threads meanwhile would be counted too; the times cover the calls only
/// (the operations are cloned before the clock starts). The first failure
/// stops the measure with [`ProxyError::InBatch`] at the operation's index
/// in `batch`, whichever run it failed in.
pub fn measure_fusion<E: Enclave + ?Sized>(
    enclave: &E,
    batch: &[EnclaveOp],
) -> Result<FusionReport> {
    let ops = batch.to_vec();
    let before = enclave.crossings();
    let start = Instant::now();
    enclave.call(ops)?;
    let fused_time = start.elapsed();
    let fused_crossings = enclave.crossings().saturating_sub(before);

    let ops = batch.to_vec();
    let before = enclave.crossings();
    let start = Instant::now();
    for (index, op) in ops.into_iter().enumerate() {
        enclave.call_one(op).map_err(|e| match e {
            ProxyError::InBatch { source, .. } => ProxyError::InBatch { index, source },
            e => ProxyError::InBatch {
                index,
                source: Box::new(e),
            },
        })?;
    }
    let separate_time = start.elapsed();
    let separate_crossings = enclave.crossings().saturating_sub(before);
    Ok(FusionReport {
        operations: batch.len(),
        fused_crossings,
        separate_crossings,
        fused_time,
        separate_time,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::enclave::{Attestation, EnclaveReply, REPORT_DATA_LEN};

    /// An enclave that only counts: every operation unloads nothing, and
    /// an operation for tenant `bad` fails.
    #[derive(Debug, Default)]
    struct Counting(AtomicU64);

    impl Enclave for Counting {
        fn call(&self, batch: Vec<EnclaveOp>) -> Result<Vec<EnclaveReply>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            batch
                .iter()
                .enumerate()
                .map(|(index, op)| match op.tenant() {
                    "bad" => Err(ProxyError::InBatch {
                        index,
                        source: Box::new(ProxyError::UnknownTenant("bad".into())),
                    }),
                    _ => Ok(EnclaveReply::Unloaded(false)),
                })
                .collect()
        }

        fn crossings(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }

        fn attestation(&self, _: &[u8; REPORT_DATA_LEN]) -> Result<Attestation> {
            Ok(Attestation::Unattested)
        }
    }

    fn unload(tenant: &str) -> EnclaveOp {
        EnclaveOp::UnloadTenant {
            tenant: tenant.into(),
        }
    }

    #[test]
    fn one_crossing_fused_and_one_per_operation_separate() {
        let e = Counting::default();
        for n in [0usize, 1, 2, 7] {
            let batch: Vec<EnclaveOp> = (0..n).map(|i| unload(&format!("t{i}"))).collect();
            let before = e.crossings();
            let r = measure_fusion(&e, &batch).unwrap();
            assert_eq!(r.operations, n);
            assert_eq!(r.fused_crossings, 1);
            assert_eq!(r.separate_crossings, n as u64);
            assert_eq!(e.crossings(), before + 1 + n as u64);
        }
    }

    #[test]
    fn a_failure_names_its_index_in_the_batch() {
        let e = Counting::default();
        let batch = vec![unload("a"), unload("b"), unload("bad"), unload("c")];
        match measure_fusion(&e, &batch) {
            Err(ProxyError::InBatch { index, source }) => {
                assert_eq!(index, 2);
                assert!(
                    matches!(*source, ProxyError::UnknownTenant(_)),
                    "{source:?}"
                );
            }
            r => panic!("not an InBatch error: {r:?}"),
        }
        // The fused run failed first: one crossing, no separate run.
        assert_eq!(e.crossings(), 1);
    }
}
