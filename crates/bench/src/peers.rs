//! Peer libraries run side by side with ours. Rust peers are crates.io
//! dependencies; others are small programs under `bench/peers/<name>/` that
//! the bench builds itself, fetching the peer from its package registry.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `bench/peers/<name>` of this checkout (or of `$HECLOUD_PEERS_DIR`).
pub fn peer_dir(name: &str) -> PathBuf {
    let root = std::env::var_os("HECLOUD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/peers"));
    root.join(name)
}

/// Builds the Go program in `bench/peers/<name>` into `build/<bin>` (the Go
/// toolchain fetches the peer module from the Go module proxy on first use)
/// and returns the binary's path.
pub fn build_go(name: &str, bin: &str) -> anyhow::Result<PathBuf> {
    let dir = peer_dir(name);
    let out = format!("build/{bin}");
    let status = Command::new("go")
        .args(["build", "-o", &out, "."])
        .current_dir(&dir)
        .status()
        .map_err(|e| anyhow::anyhow!("cannot run `go` (is Go installed?): {e}"))?;
    anyhow::ensure!(
        status.success(),
        "building the Go peer in {} failed",
        dir.display()
    );
    Ok(dir.join(out))
}

/// Runs a Go peer binary on one goroutine (`GOMAXPROCS=1`, like our
/// single-thread figures) and returns its standard output.
pub fn run_go(bin: &Path, args: &[String]) -> anyhow::Result<String> {
    run_go_threads(bin, args, 1)
}

/// [`run_go`] on `threads` goroutines (`GOMAXPROCS`), for figures taken
/// with that many threads on both sides.
pub fn run_go_threads(bin: &Path, args: &[String], threads: usize) -> anyhow::Result<String> {
    stdout_of(
        Command::new(bin)
            .args(args)
            .env("GOMAXPROCS", threads.max(1).to_string()),
        bin,
    )
}

/// Runs a peer's command: its standard output, or its standard error in
/// the failure.
fn stdout_of(cmd: &mut Command, bin: &Path) -> anyhow::Result<String> {
    let out = cmd.output()?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// Reads one JSON object line that a peer printed.
pub fn parse_json<T: serde::de::DeserializeOwned>(line: &str) -> anyhow::Result<T> {
    serde_json::from_str(line.trim()).map_err(|e| anyhow::anyhow!("peer printed {line:?}: {e}"))
}

/// Reads a peer's JSON lines, one per case asked: refused unless there are
/// exactly `expected` of them.
fn parse_json_lines<T: serde::de::DeserializeOwned>(
    text: &str,
    expected: usize,
    peer: &str,
) -> anyhow::Result<Vec<T>> {
    let all: Vec<T> = text
        .lines()
        .map(parse_json)
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(
        all.len() == expected,
        "{peer} printed {} results for {expected} cases",
        all.len()
    );
    Ok(all)
}

/// The TenSEAL version the SEAL peers are written against.
const TENSEAL: &str = "tenseal==0.3.18";

/// The Python of `bench/peers/seal/.venv`, with TenSEAL (SEAL 4.x and its
/// low-level binding `tenseal.sealapi`) installed from PyPI on first use.
/// Every SEAL peer script runs in it.
pub fn tenseal_python() -> anyhow::Result<PathBuf> {
    let dir = peer_dir("seal");
    let py = dir.join(".venv/bin/python");
    let ok = |py: &Path| {
        Command::new(py)
            .args(["-c", "import tenseal, tenseal.sealapi"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !ok(&py) {
        let status = Command::new("python3")
            .args(["-m", "venv", ".venv"])
            .current_dir(&dir)
            .status()
            .map_err(|e| anyhow::anyhow!("cannot run `python3`: {e}"))?;
        anyhow::ensure!(status.success(), "python3 -m venv failed");
        let status = Command::new(dir.join(".venv/bin/pip"))
            .args(["install", "-q", TENSEAL])
            .current_dir(&dir)
            .status()?;
        anyhow::ensure!(status.success(), "pip install {TENSEAL} failed");
    }
    anyhow::ensure!(ok(&py), "TenSEAL is not importable in {}", py.display());
    Ok(py)
}

/// Runs the SEAL peer script `bench/peers/seal/<script>` with `args` in the
/// TenSEAL venv (see [`tenseal_python`]) on one thread and returns its
/// standard output.
pub fn run_tenseal(script: &str, args: &[String]) -> anyhow::Result<String> {
    let py = tenseal_python()?;
    let out = Command::new(py)
        .arg(peer_dir("seal").join(script))
        .args(args)
        .env("OMP_NUM_THREADS", "1")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "SEAL peer {script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// One timed operation of the BGV/BFV peers (`bench/peers/lattigo-bgv`,
/// `bench/peers/seal/seal_bfv.py`), each run on one thread with its result
/// decrypted and checked against the plaintexts by the peer itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOp {
    /// Adds `n` ciphertexts: n − 1 in-place additions into an accumulator.
    Sum {
        /// Number of ciphertexts.
        n: usize,
    },
    /// One ciphertext × ciphertext product with relinearization.
    Mul,
    /// One row rotation by one slot, with its Galois key.
    Rotate,
}

impl IntOp {
    /// The name the peers use for the operation.
    pub fn name(self) -> &'static str {
        match self {
            IntOp::Sum { .. } => "sum",
            IntOp::Mul => "mul",
            IntOp::Rotate => "rotate",
        }
    }
}

/// Bit sizes of the RNS primes a BGV/BFV peer is to use instead of its
/// default (SEAL's 128-bit `CoeffModulus::BFVDefault` for N, in both peers).
/// The peers refuse sizes above the HE Standard's 128-bit bound on log QP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moduli {
    /// Bit sizes of the ciphertext primes Q.
    pub log_q: Vec<u32>,
    /// Bit sizes of the key-switching primes P (SEAL takes exactly one).
    pub log_p: Vec<u32>,
}

/// The JSON line a BGV/BFV peer prints for one [`IntOp`].
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct IntOpTime {
    /// The operation's name ([`IntOp::name`]).
    pub op: String,
    /// log2 of the ring degree N.
    pub logn: u32,
    /// Median time of the operation in milliseconds (for a sum: of all
    /// n − 1 additions together).
    pub ms: f64,
    /// The plaintext modulus.
    pub t: u64,
    /// Bit sizes of the Q primes.
    pub logq: Vec<u32>,
    /// Bit sizes of the P primes (SEAL's single special prime).
    pub logp: Vec<u32>,
    /// Number of ciphertexts added (sums only).
    #[serde(default)]
    pub n: Option<usize>,
}

/// Reads a BGV/BFV peer's output (one JSON line) and checks that it answers
/// `op` at `log_n`.
pub fn parse_int_op(text: &str, op: IntOp, log_n: u32) -> anyhow::Result<IntOpTime> {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| anyhow::anyhow!("the peer printed nothing"))?;
    let r: IntOpTime = parse_json(line)?;
    anyhow::ensure!(
        r.op == op.name() && r.logn == log_n,
        "asked for {} at logn {log_n}, the peer answered {line:?}",
        op.name()
    );
    if let IntOp::Sum { n } = op {
        anyhow::ensure!(r.n == Some(n), "asked for a sum of {n}, got {line:?}");
    }
    anyhow::ensure!(
        r.ms.is_finite() && r.ms >= 0.0,
        "the peer printed no time: {line:?}"
    );
    Ok(r)
}

/// `a,b,c` for a peer's command line.
fn comma_list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Flags for `op` at `log_n` common to both BGV/BFV peers (`--flag value`
/// pairs: Go's `flag` package takes the double dash too).
fn int_op_flags(op: IntOp, log_n: u32, samples: usize, moduli: Option<&Moduli>) -> Vec<String> {
    let mut args = vec![
        "--logn".to_string(),
        log_n.to_string(),
        "--samples".into(),
        samples.to_string(),
    ];
    if let IntOp::Sum { n } = op {
        args.extend(["--n".into(), n.to_string()]);
    }
    if let Some(m) = moduli {
        args.extend([
            "--logq".into(),
            comma_list(&m.log_q),
            "--logp".into(),
            comma_list(&m.log_p),
        ]);
    }
    args
}

pub mod lattigo_bgv {
    //! Lattigo v6.2.0 BGV (Go), through `bench/peers/lattigo-bgv`, run with
    //! `GOMAXPROCS=1`. Default moduli: SEAL's 128-bit BFV defaults (N = 2^13:
    //! 43, 43, 44, 44 + 44 bits; N = 2^14: 48 × 3, 49 × 5 + 49 bits), primes
    //! just below 2^bits; t = 65537. A sum is n − 1 in-place `Add`s of fresh
    //! ciphertexts, a product one `MulRelin` at the top level, a rotation
    //! `RotateColumns(ct, 1)` (one slot, each row).

    use super::*;

    /// Times `op` at N = 2^`log_n`: the median of `samples` runs, checked by
    /// decryption in the peer.
    pub fn time(
        op: IntOp,
        log_n: u32,
        samples: usize,
        moduli: Option<&Moduli>,
    ) -> anyhow::Result<IntOpTime> {
        let bin = build_go("lattigo-bgv", "lattigo-bgv-peer")?;
        let mut args = vec!["-op".to_string(), op.name().into()];
        args.extend(int_op_flags(op, log_n, samples, moduli));
        parse_int_op(&run_go(&bin, &args)?, op, log_n)
    }
}

pub mod seal_bfv {
    //! SEAL 4.x BFV through TenSEAL's `bfv_vector`
    //! (`bench/peers/seal/seal_bfv.py`, in the venv of [`tenseal_python`]),
    //! single-threaded. Default moduli: SEAL's `CoeffModulus::BFVDefault`;
    //! t = 65537. A sum is n − 1 in-place `add_`s, each through TenSEAL's
    //! Python wrapper; a product an in-place `mul_`, which TenSEAL
    //! relinearizes automatically (SEAL's `multiply_inplace` +
    //! `relinearize_inplace`); a rotation `rotate_rows(ct, 1)` through
    //! `tenseal.sealapi` (TenSEAL's vectors have no rotation).

    use super::*;

    /// Times `op` at N = 2^`log_n`: the median of `samples` runs, checked by
    /// decryption in the peer. SEAL takes a single P prime.
    pub fn time(
        op: IntOp,
        log_n: u32,
        samples: usize,
        moduli: Option<&Moduli>,
    ) -> anyhow::Result<IntOpTime> {
        let mut args = vec![op.name().to_string()];
        args.extend(int_op_flags(op, log_n, samples, moduli));
        parse_int_op(&run_tenseal("seal_bfv.py", &args)?, op, log_n)
    }
}

pub mod tfhe_ntt_avx2 {
    //! tfhe-ntt 0.7.1 without its AVX-512 feature (`bench/peers/tfhe-ntt-avx2`),
    //! the peer of our AVX2 backend on any x86-64 CPU: the workspace's
    //! tfhe-ntt has AVX-512 on (tfhe's default features turn it on), and
    //! picks it at run time where the CPU has it.

    use super::*;

    /// Fastest forward and inverse NTT of one limb, in ns.
    #[derive(Debug, Clone, Copy, serde::Deserialize)]
    pub struct NttTimes {
        /// Forward NTT.
        pub fwd_ns: f64,
        /// Inverse NTT (without the division by n).
        pub inv_ns: f64,
    }

    /// Builds the peer with cargo (crates.io on first use) and times each
    /// (log n, q) on one thread: fastest of `samples` batches of at least
    /// `batch_us` µs, as [`crate::timing::min_time`].
    pub fn ntt_times(
        cases: &[(u32, u64)],
        samples: usize,
        batch_us: u64,
    ) -> anyhow::Result<Vec<NttTimes>> {
        let dir = peer_dir("tfhe-ntt-avx2");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--release",
                "--locked",
                "--quiet",
                "--target-dir",
                "build",
            ])
            .current_dir(&dir)
            .status()
            .map_err(|e| anyhow::anyhow!("cannot run cargo: {e}"))?;
        anyhow::ensure!(status.success(), "building {} failed", dir.display());
        let mut args = vec![samples.to_string(), batch_us.to_string()];
        args.extend(cases.iter().map(|(l, q)| format!("{l}:{q}")));
        let bin = dir.join("build/release/tfhe-ntt-avx2-peer");
        let text = stdout_of(Command::new(&bin).args(&args), &bin)?;
        parse_json_lines(&text, cases.len(), "the tfhe-ntt AVX2 peer")
    }
}

pub mod lattigo {
    //! Lattigo v6.2.0 (Go), through `bench/peers/lattigo`.

    use super::*;

    /// Median times of one Lattigo ring operation over all limbs, in ns:
    /// one JSON line of the peer (whose other fields are ignored).
    #[derive(Debug, Clone, Copy, serde::Deserialize)]
    pub struct RingTimes {
        /// Forward NTT.
        pub fwd_ns: f64,
        /// Inverse NTT.
        pub inv_ns: f64,
        /// Pointwise (Montgomery) product.
        pub mul_ns: f64,
    }

    /// Times Lattigo's ring NTT for each (log n, primes) on one goroutine.
    pub fn ring_times(specs: &[(u32, Vec<u64>)], quick: bool) -> anyhow::Result<Vec<RingTimes>> {
        let bin = build_go("lattigo", "lattigo-peer")?;
        let args: Vec<String> = specs
            .iter()
            .map(|(logn, qs)| {
                let qs: Vec<String> = qs.iter().map(u64::to_string).collect();
                format!("{logn}:{}", qs.join(","))
            })
            .collect();
        let (batch, samples) = if quick { ("2", "20") } else { ("3", "60") };
        let mut all = vec![
            "-min-batch-ms".into(),
            batch.into(),
            "-samples".into(),
            samples.into(),
        ];
        all.extend(args);
        parse_json_lines(&run_go(&bin, &all)?, specs.len(), "the Lattigo peer")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn reads_json_lines() {
        let l = r#"{"logn":16,"limbs":1,"fwd_ns":1186916.9,"inv_ns":1156393.15,"mul_ns":7e4}"#;
        let t: lattigo::RingTimes = parse_json(l).unwrap();
        assert_eq!(t.fwd_ns, 1186916.9);
        assert_eq!(t.inv_ns, 1156393.15);
        assert_eq!(t.mul_ns, 70000.0);
        let m: BTreeMap<String, f64> = parse_json(l).unwrap();
        assert_eq!(m["logn"], 16.0);
        assert!(!m.contains_key("missing"));
        let e = parse_json::<lattigo::RingTimes>(r#"{"fwd_ns":1}"#).unwrap_err();
        assert!(e.to_string().contains("inv_ns"), "{e}");
    }

    #[test]
    fn reads_int_op_lines() {
        // As printed by the Lattigo BGV peer (keys sorted, extra log_qp).
        let go = r#"{"log_qp":217.99999977561694,"logn":13,"logp":[44],"logq":[43,43,44,44],"ms":93.2,"n":1024,"op":"sum","t":65537}"#;
        let r = parse_int_op(go, IntOp::Sum { n: 1024 }, 13).unwrap();
        assert_eq!(r.ms, 93.2);
        assert_eq!((r.logn, r.t, r.n), (13, 65537, Some(1024)));
        assert_eq!((r.logq, r.logp), (vec![43, 43, 44, 44], vec![44]));
        // As printed by the SEAL peer (Python's json.dumps, trailing newline).
        let py = "{\"op\": \"mul\", \"logn\": 14, \"t\": 65537, \"logq\": [48, 49], \"logp\": [49], \"ms\": 101.8}\n";
        let r = parse_int_op(py, IntOp::Mul, 14).unwrap();
        assert_eq!((r.op.as_str(), r.ms, r.n), ("mul", 101.8, None));
        assert!(parse_int_op(py, IntOp::Rotate, 14).is_err());
        assert!(parse_int_op(py, IntOp::Mul, 13).is_err());
        assert!(parse_int_op(go, IntOp::Sum { n: 512 }, 13).is_err());
        assert!(parse_int_op("", IntOp::Mul, 14).is_err());
        let e = parse_int_op(r#"{"op":"mul","logn":14}"#, IntOp::Mul, 14).unwrap_err();
        assert!(e.to_string().contains("ms"), "{e}");
    }

    #[test]
    fn int_op_command_lines() {
        let m = Moduli {
            log_q: vec![43, 44],
            log_p: vec![44],
        };
        assert_eq!(
            int_op_flags(IntOp::Sum { n: 8 }, 13, 3, Some(&m)).join(" "),
            "--logn 13 --samples 3 --n 8 --logq 43,44 --logp 44"
        );
        assert_eq!(
            int_op_flags(IntOp::Rotate, 14, 5, None).join(" "),
            "--logn 14 --samples 5"
        );
    }

    /// Runs the four peers once (network on first use; never in CI):
    /// `cargo test --workspace --release --locked --lib -- --ignored peers_end_to_end --nocapture`.
    #[test]
    #[ignore = "builds and runs the Lattigo and SEAL peers"]
    fn peers_end_to_end() {
        let ms = |time: fn(IntOp, u32, usize, Option<&Moduli>) -> anyhow::Result<IntOpTime>,
                  op,
                  log_n| time(op, log_n, 5, None).unwrap().ms;
        let sum = IntOp::Sum { n: 1024 };
        let l_sum = ms(lattigo_bgv::time, sum, 13);
        let l_mul = ms(lattigo_bgv::time, IntOp::Mul, 14);
        let l_rot = ms(lattigo_bgv::time, IntOp::Rotate, 14);
        let s_sum = ms(seal_bfv::time, sum, 13);
        let s_mul = ms(seal_bfv::time, IntOp::Mul, 14);
        let s_rot = ms(seal_bfv::time, IntOp::Rotate, 14);
        println!(
            "lattigo bgv: sum(2^13, 1024) {l_sum:.2} ms, mul(2^14) {l_mul:.2} ms, rotate(2^14) {l_rot:.2} ms"
        );
        println!(
            "seal bfv:    sum(2^13, 1024) {s_sum:.2} ms, mul(2^14) {s_mul:.2} ms, rotate(2^14) {s_rot:.2} ms"
        );
    }
}

pub mod lattigo_boot {
    //! Lattigo v6.2.0 CKKS bootstrapping (Go), through
    //! `bench/peers/lattigo-boot`, with Lattigo's default sparse-secret set
    //! `N16QP1546H192H32` (residual Q: 60 + 9 × 40 bits, scale 2^40,
    //! H = 192, ephemeral H = 32). Below N = 2^16 the peer shrinks that set
    //! the way Lattigo's own tests do (insecure; only for quick checks).
    //!
    //! `boot` bootstraps one full-slot random complex vector encrypted at
    //! level 0; `deep` applies a degree-63 Chebyshev approximation of
    //! sin(πx)/2 on [−1, 1] four times, bootstrapping whenever the levels
    //! left cannot hold the next application, and measures the precision
    //! against the float64 composition of sin(πx)/2 itself.

    use super::*;

    /// Below this much available memory ([`free_memory_bytes`]) the bench
    /// skips Lattigo's bootstrapping and prints why, rather than have the
    /// kernel kill the run. At N = 2^16 the bootstrapping keys alone take
    /// 7.3 GiB and Go's collector lets the heap grow to about twice the live
    /// data: the peer peaked at 16.5 GiB (VmHWM) in both modes. Capping the
    /// heap instead (`GOMEMLIMIT=11GiB`: 11.6 GiB peak) made bootstrapping
    /// 1.7× slower, which would misrepresent Lattigo.
    pub const MIN_FREE_BYTES: u64 = 18 << 30;

    /// The JSON line of `lattigo-boot-peer -mode boot`.
    #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
    pub struct BootFigures {
        /// log2 of the ring degree N.
        pub logn: u32,
        /// Number of complex slots bootstrapped (N/2).
        pub slots: usize,
        /// Median time of the timed bootstrappings, in milliseconds.
        pub boot_ms: f64,
        /// Each timed bootstrapping's time in milliseconds, sorted.
        pub boot_ms_runs: Vec<f64>,
        /// Time to generate the bootstrapping evaluation keys, in milliseconds.
        pub keygen_ms: f64,
        /// Serialized size of the bootstrapping evaluation keys in bytes.
        pub key_bytes: u64,
        /// Level of the ciphertext after bootstrapping.
        pub levels_left: u32,
        /// Mean log2 precision of the real parts after bootstrapping.
        pub precision_mean_bits: f64,
        /// Minimum log2 precision of the real parts after bootstrapping.
        pub precision_min_bits: f64,
        /// Peak resident memory of the peer process (VmHWM) in bytes.
        pub peak_rss_bytes: u64,
    }

    /// The JSON line of `lattigo-boot-peer -mode deep`.
    #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
    pub struct DeepFigures {
        /// log2 of the ring degree N.
        pub logn: u32,
        /// Number of slots, each holding a real value in [−1, 1].
        pub slots: usize,
        /// The approximated function, e.g. `sin(pi*x)/2`.
        pub function: String,
        /// Degree of the Chebyshev approximation (63).
        pub degree: u32,
        /// How many times the polynomial is applied in a row (4).
        pub applications: u32,
        /// The approximation's coefficients in the Chebyshev basis T_0..T_degree on [−1, 1],
        /// so that our side can evaluate exactly the same polynomial.
        pub chebyshev_coeffs: Vec<f64>,
        /// Wall time of the whole workload (bootstrappings and polynomials), in milliseconds.
        pub total_ms: f64,
        /// Number of bootstrappings the workload needed.
        pub boots: u32,
        /// Time spent bootstrapping, in milliseconds.
        pub boot_ms_total: f64,
        /// Time spent evaluating the polynomial, in milliseconds.
        pub eval_ms_total: f64,
        /// Level of the result.
        pub levels_left: u32,
        /// Mean log2 precision of the result against the float64 composition.
        pub precision_mean_bits: f64,
        /// Minimum log2 precision of the result against the float64 composition.
        pub precision_min_bits: f64,
        /// Peak resident memory of the peer process (VmHWM) in bytes.
        pub peak_rss_bytes: u64,
    }

    /// Bootstraps at N = 2^`log_n` (16, or 12 to 15 for quick insecure
    /// checks) with `threads` goroutines: `warmup` untimed bootstrappings
    /// of the same ciphertext in the same process, then `runs` timed ones,
    /// whose median is `boot_ms`.
    pub fn boot(log_n: u32, threads: usize, warmup: u32, runs: u32) -> anyhow::Result<BootFigures> {
        let args = [
            "-warmup".to_string(),
            warmup.to_string(),
            "-runs".to_string(),
            runs.to_string(),
        ];
        let r: BootFigures = parse_json(&run(log_n, "boot", threads, &args)?)?;
        anyhow::ensure!(r.logn == log_n, "asked for logn {log_n}, got {r:?}");
        Ok(r)
    }

    /// Runs the deep workload (degree 63, applied 4 times) at N = 2^`log_n`
    /// with `threads` goroutines.
    pub fn deep(log_n: u32, threads: usize) -> anyhow::Result<DeepFigures> {
        let r: DeepFigures = parse_json(&run(log_n, "deep", threads, &[])?)?;
        anyhow::ensure!(r.logn == log_n, "asked for logn {log_n}, got {r:?}");
        anyhow::ensure!(
            r.chebyshev_coeffs.len() == r.degree as usize + 1,
            "the peer printed {} coefficients for degree {}",
            r.chebyshev_coeffs.len(),
            r.degree
        );
        Ok(r)
    }

    /// `MemAvailable` of `/proc/meminfo` in bytes; `None` where there is no
    /// such file (not Linux) or it cannot be read.
    pub fn free_memory_bytes() -> Option<u64> {
        mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
    }

    fn mem_available(meminfo: &str) -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let mut fields = line.split_whitespace().skip(1);
        let kib: u64 = fields.next()?.parse().ok()?;
        Some(kib << 10)
    }

    /// Builds and runs the peer, returning its one non-empty output line.
    fn run(log_n: u32, mode: &str, threads: usize, extra: &[String]) -> anyhow::Result<String> {
        let bin = build_go("lattigo-boot", "lattigo-boot-peer")?;
        let mut args = vec![
            "-logn".to_string(),
            log_n.to_string(),
            "-mode".into(),
            mode.into(),
        ];
        args.extend_from_slice(extra);
        let text = run_go_threads(&bin, &args, threads)?;
        text.lines()
            .find(|l| !l.trim().is_empty())
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("the Lattigo bootstrapping peer printed nothing"))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn reads_boot_and_deep_lines() {
            // As printed by the peer at logn 12 (keys sorted by Go's encoder).
            let b = r#"{"boot_ms":1063.881472,"boot_ms_runs":[1041.5,1063.881472,1120.25],"key_bytes":285290453,"keygen_ms":1682.259052,"levels_left":9,"logn":12,"peak_rss_bytes":632176640,"precision_mean_bits":28.019146394200867,"precision_min_bits":25.318740192984947,"slots":2048}"#;
            let r: BootFigures = parse_json(b).unwrap();
            assert_eq!((r.logn, r.slots, r.levels_left), (12, 2048, 9));
            assert_eq!((r.key_bytes, r.peak_rss_bytes), (285290453, 632176640));
            assert_eq!(r.boot_ms, 1063.881472);
            assert_eq!(r.boot_ms_runs, [1041.5, 1063.881472, 1120.25]);
            assert!(r.precision_min_bits < r.precision_mean_bits);
            let coeffs: Vec<String> = (0..64).map(|i| format!("{}", i as f64 / 100.0)).collect();
            let d = format!(
                r#"{{"applications":4,"boot_ms_total":3401.3,"boots":3,"chebyshev_coeffs":[{}],"degree":63,"eval_ms_total":511.1,"function":"sin(pi*x)/2","levels_left":3,"logn":12,"peak_rss_bytes":712929280,"precision_mean_bits":30.99,"precision_min_bits":23.16,"slots":2048,"total_ms":3912.4}}"#,
                coeffs.join(",")
            );
            let r: DeepFigures = parse_json(&d).unwrap();
            assert_eq!((r.boots, r.degree, r.applications), (3, 63, 4));
            assert_eq!(r.function, "sin(pi*x)/2");
            assert_eq!(r.chebyshev_coeffs.len(), 64);
            assert_eq!(r.chebyshev_coeffs[63], 0.63);
            assert_eq!(r.total_ms, 3912.4);
            let e = parse_json::<DeepFigures>(b).unwrap_err();
            assert!(e.to_string().contains("missing field"), "{e}");
        }

        #[test]
        fn reads_mem_available() {
            let m = "MemTotal:       24608144 kB\nMemFree:        11767004 kB\nMemAvailable:   23940188 kB\n";
            assert_eq!(mem_available(m), Some(23940188 << 10));
            assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
            assert!(free_memory_bytes().is_none_or(|b| b > 0));
        }

        /// The whole path at an insecure small size (N = 2^12, about ten
        /// seconds; the module proxy on first use). Skipped without Go.
        #[test]
        #[ignore = "builds and runs the Lattigo bootstrapping peer (Go module proxy)"]
        fn small_end_to_end() {
            if Command::new("go").arg("version").output().is_err() {
                eprintln!("skipped: no `go` on PATH to build the Lattigo peer");
                return;
            }
            let b = boot(12, 2, 1, 3).unwrap();
            assert_eq!((b.slots, b.levels_left), (2048, 9));
            assert_eq!(b.boot_ms_runs.len(), 3);
            assert_eq!(b.boot_ms, b.boot_ms_runs[1]);
            assert!(b.boot_ms_runs.is_sorted(), "{b:?}");
            assert!(b.precision_mean_bits > 20.0, "{b:?}");
            let d = deep(12, 2).unwrap();
            assert_eq!(d.boots, 3);
            assert!(d.precision_min_bits > 15.0, "{d:?}");
            println!("{b:?}\n{d:?}");
        }

        /// Lattigo's default parameters, full size (1.5 minutes per mode
        /// and 16.5 GiB peak on 2 cores): `cargo test --workspace --release --locked --lib --
        /// --ignored lattigo_boot_full --nocapture`.
        #[test]
        #[ignore = "N = 2^16 bootstrapping: minutes and many GiB"]
        fn lattigo_boot_full() {
            if let Some(free) = free_memory_bytes().filter(|&f| f < MIN_FREE_BYTES) {
                eprintln!(
                    "skipped: {} GiB available, {} GiB needed",
                    free >> 30,
                    MIN_FREE_BYTES >> 30
                );
                return;
            }
            let b = boot(16, 2, 1, 1).unwrap();
            println!("{b:?}");
            let d = deep(16, 2).unwrap();
            println!("{d:?}");
        }
    }
}
