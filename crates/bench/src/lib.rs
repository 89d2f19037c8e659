//! hecloud's experiments: every `hecloud bench <experiment>` lives here.
//!
//! Each experiment times our code side by side with a peer library in the
//! same run, prints a readable table, writes `<out>/<experiment>.csv` and ends
//! with one `RESULT <experiment> key=value …` line (see [`report`]).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod addcmp;
pub mod boot;
pub mod ckks;
pub mod embedded;
pub mod netem;
pub mod ntt;
pub mod peers;
pub mod proxy;
pub mod refresh;
pub mod report;
pub mod service;
pub mod tfhe;
pub mod timing;
pub mod workload;

pub use report::BenchOptions;

/// An experiment: its name on the command line, what it measures, and how to run it.
#[derive(Debug, Clone, Copy)]
pub struct Experiment {
    /// Name used as `hecloud bench <name>`.
    pub name: &'static str,
    /// One line for `--help` and `hecloud bench --list`.
    pub about: &'static str,
    /// Runs the experiment; prints its table and RESULT line.
    pub run: fn(&BenchOptions) -> anyhow::Result<()>,
}

/// Every experiment, in the order `--list` shows them.
pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "ntt",
        about: "negacyclic NTT/INTT, RNS polynomial products and base conversion vs tfhe-ntt and Lattigo",
        run: ntt::run,
    },
    Experiment {
        name: "ckks",
        about: "RNS-CKKS keygen, encode, encrypt, mul+relin+rescale, rotate, sizes, precision vs Lattigo and SEAL",
        run: ckks::run,
    },
    Experiment {
        name: "tfhe",
        about: "encrypted sums of n integers and comparisons (issue 3) on TFHE vs TFHE-rs's integer API",
        run: tfhe::run,
    },
    Experiment {
        name: "addcmp",
        about: "the research's sums of n encrypted integers and comparisons: our BGV integer SIMD and TFHE vs Lattigo BGV, SEAL BFV, TFHE-rs and the paper's figures 8 and 18",
        run: addcmp::run,
    },
    Experiment {
        name: "service",
        about: "service overhead (serialize, transfer, store, dispatch) of a CKKS job; 16 concurrent clients",
        run: service::run,
    },
    Experiment {
        name: "refresh",
        about: "client-aided CKKS refresh through the service (loopback and wide-area key holder): time split, bytes, precision vs Lattigo's bootstrapping; a deep polynomial job refreshed vs bootstrapped",
        run: refresh::run,
    },
    Experiment {
        name: "proxy",
        about: "end to end through the encryption proxy vs the client's best path without one (paper D): N = 2^16 and 2^17, loopback and the emulated link; enclave crossings fused vs one per operation",
        run: proxy::run,
    },
    Experiment {
        name: "boot",
        about: "CKKS bootstrapping (128-bit N = 2^16 preset) vs Lattigo's default bootstrapping: time with 1 thread and all, precision, levels left, key bytes, peak memory",
        run: boot::run,
    },
];

/// Looks an experiment up by name.
///
/// ```
/// assert!(hecloud_bench::find("ntt").is_some());
/// assert!(hecloud_bench::find("nope").is_none());
/// ```
pub fn find(name: &str) -> Option<&'static Experiment> {
    EXPERIMENTS.iter().find(|e| e.name == name)
}
