//! `hecloud`: the command line of the hecloud encrypted-computation system.
#![forbid(unsafe_code)]

mod advise;
mod cmd;
mod demo;
mod proxy;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "hecloud",
    version,
    about = "Compute on encrypted data: client, proxy and server of the hecloud system",
    long_about = "hecloud computes on encrypted data: a client encrypts, an untrusted server \
                  computes on the ciphertexts, the client decrypts.\n\n\
                  Run `hecloud demo` for a tour on embedded defaults, or `hecloud bench --list` \
                  for the experiments that measure hecloud against its peers."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the end-to-end tour on embedded defaults and checks every result
    /// against a plaintext computation.
    Demo,
    /// Runs the hecloud server (untrusted compute node).
    Serve(cmd::ServeArgs),
    /// Runs the encryption proxy next to the server: it holds its
    /// tenants' keys sealed, takes plaintext from them over TLS, encrypts,
    /// runs their jobs on the server and decrypts (unattested without a
    /// TEE: clients refuse it unless `--allow-unattested`).
    Proxy(proxy::ProxyArgs),
    /// Runs an operation on plaintext inputs through a proxy
    /// (`--via-proxy`): plaintext in, plaintext out, one request.
    Run(proxy::RunArgs),
    /// Generates CKKS, BGV or TFHE keys into a folder (the secret key never leaves it).
    Keygen {
        /// Key folder.
        #[arg(long, default_value = "hecloud-keys")]
        dir: PathBuf,
        /// Parameter preset: CKKS `n13` … `n17`, bootstrappable CKKS
        /// `boot-n16` (or `boot-test-n12`, insecure, for tests), BGV
        /// `bgv-n13` … `bgv-n16` (integer vectors mod t), or `tfhe`.
        #[arg(long, default_value = "n14")]
        preset: String,
        /// Adds the Galois keys to sum this many slots (a power of two;
        /// 1024 by default with CKKS). With BGV, any value above 1 adds the
        /// keys of the slot sum (`--op bgv-slot-sum`), none by default.
        #[arg(long)]
        sum_slots: Option<usize>,
        /// With BGV: adds the Galois keys of the row rotations right by
        /// powers of two, which the packed-bit operations (`--op
        /// bgv-bits-…`) need.
        #[arg(long)]
        bits_in_slots: bool,
        /// Extra rotations (comma separated).
        #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
        rotations: Vec<i64>,
        /// Refresh: statistical hiding of the CKKS mask in bits (at least
        /// 40; 64 by default).
        #[arg(long)]
        lambda_s: Option<u32>,
        /// Refresh: the server floods its noise before masking, so the key
        /// holder learns nothing of the computation from it (costs CKKS
        /// precision and a BGV level per refresh; docs/refresh.md).
        #[arg(long)]
        circuit_private: bool,
        /// With a `boot-` preset: where a job runs out of levels, the
        /// server bootstraps even though this folder's key holder could
        /// refresh (jobs that must not wait for a key holder).
        #[arg(long)]
        prefer_bootstrap: bool,
        /// With a `boot-` preset: the bootstrapping circuit takes
        /// ciphertexts of this many slots (a power of two from 2 to N/4:
        /// sparse packing, a faster bootstrap); `encrypt` and `decrypt`
        /// with this folder then take that many values. Default: N/2.
        #[arg(long)]
        boot_slots: Option<usize>,
    },
    /// Encrypts real numbers (a text file, comma or whitespace separated),
    /// with a BGV key folder unsigned integers below t (one per slot) or,
    /// with `--bits-in-slots`, one unsigned integer of `--width` bits as
    /// bits in slots, or with a TFHE key folder one unsigned integer.
    Encrypt {
        /// Key folder.
        #[arg(long, default_value = "hecloud-keys")]
        keys: PathBuf,
        /// Input text file.
        input: PathBuf,
        /// Ciphertext file to write.
        #[arg(long, short)]
        out: PathBuf,
        /// Bits of a TFHE integer or of a BGV bits-in-slots number
        /// (2..=1024).
        #[arg(long, default_value_t = 32)]
        width: usize,
        /// With a BGV key folder: one integer, its bits in the slots
        /// (the operand of `--op bgv-bits-…`).
        #[arg(long)]
        bits_in_slots: bool,
    },
    /// Uploads files (ciphertexts, keys) to the server; resumable.
    Upload {
        #[command(flatten)]
        conn: cmd::Conn,
        /// Uploads the evaluation keys and session spec of a key folder.
        #[arg(long)]
        keys: Option<PathBuf>,
        /// Object kind (default: from the file name; ciphertext otherwise).
        #[arg(long)]
        kind: Option<String>,
        /// Files to upload.
        files: Vec<PathBuf>,
    },
    /// Submits a job.
    Submit {
        #[command(flatten)]
        conn: cmd::Conn,
        #[command(flatten)]
        args: cmd::SubmitArgs,
    },
    /// Shows (or follows, or cancels) a job.
    Status {
        #[command(flatten)]
        conn: cmd::Conn,
        /// Job id.
        job: String,
        /// Follow its progress until it ends.
        #[arg(long)]
        watch: bool,
        /// Cancel it.
        #[arg(long)]
        cancel: bool,
    },
    /// Downloads an object (checked against its content hash).
    Download {
        #[command(flatten)]
        conn: cmd::Conn,
        /// Object id.
        object: String,
        /// File to write.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Decrypts a ciphertext file and prints its first values (CKKS reals,
    /// BGV integers; a TFHE integer or bit, or with `--bits-in-slots` a BGV
    /// bits-in-slots number of `--width` bits: its value).
    Decrypt {
        /// Key folder.
        #[arg(long, default_value = "hecloud-keys")]
        keys: PathBuf,
        /// Ciphertext file.
        input: PathBuf,
        /// Values to print.
        #[arg(long, default_value_t = 8)]
        count: usize,
        /// With a BGV key folder: a bits-in-slots number of `--width` bits.
        #[arg(long)]
        bits_in_slots: bool,
        /// Bits of that number.
        #[arg(long, default_value_t = 32)]
        width: usize,
    },
    /// Which engine hecloud would use for a sum, comparison or min/max:
    /// the predicted time on each engine and why, from this machine's
    /// calibration (`hecloud bench addcmp`) or built-in figures.
    Advise(advise::AdviseArgs),
    /// Runs an experiment side by side with its peer libraries.
    ///
    /// Prints a table, writes `<out>/<experiment>.csv` and ends with one line
    /// `RESULT <experiment> key=value …` holding the headline figures.
    Bench {
        /// The experiment to run (see `--list`).
        #[arg(required_unless_present = "list")]
        experiment: Option<String>,
        /// A short version (a few minutes at most) that still prints every headline key.
        #[arg(long)]
        quick: bool,
        /// Folder for CSV and plot files.
        #[arg(long, default_value = "bench-results")]
        out: PathBuf,
        /// Lists the experiments and exits.
        #[arg(long)]
        list: bool,
    },
}

fn main() -> ExitCode {
    // Errors reach the user as one readable chain, never as a backtrace.
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo => demo::run(),
        Command::Serve(a) => cmd::serve(a),
        Command::Proxy(a) => proxy::serve(a),
        Command::Run(a) => proxy::run(a),
        Command::Keygen {
            dir,
            preset,
            sum_slots,
            bits_in_slots,
            rotations,
            lambda_s,
            circuit_private,
            prefer_bootstrap,
            boot_slots,
        } => cmd::keygen(
            &dir,
            &preset,
            sum_slots,
            bits_in_slots,
            &rotations,
            &hecloud_client::keys::RefreshOptions {
                lambda_s,
                circuit_private,
            },
            &hecloud_client::keys::BootOptions {
                prefer_over_refresh: prefer_bootstrap,
                slots: boot_slots,
            },
        ),
        Command::Encrypt {
            keys,
            input,
            out,
            width,
            bits_in_slots,
        } => cmd::encrypt(&keys, &input, &out, width, bits_in_slots),
        Command::Upload {
            conn,
            keys,
            kind,
            files,
        } => cmd::upload(&conn, keys.as_deref(), kind.as_deref(), &files),
        Command::Submit { conn, args } => cmd::submit(&conn, &args),
        Command::Status {
            conn,
            job,
            watch,
            cancel,
        } => cmd::status(&conn, &job, watch, cancel),
        Command::Download { conn, object, out } => cmd::download(&conn, &object, &out),
        Command::Decrypt {
            keys,
            input,
            count,
            bits_in_slots,
            width,
        } => cmd::decrypt(&keys, &input, count, bits_in_slots.then_some(width)),
        Command::Advise(a) => advise::run(&a),
        Command::Bench {
            experiment,
            quick,
            out,
            list,
        } => {
            if list {
                for e in hecloud_bench::EXPERIMENTS {
                    println!("{:<10} {}", e.name, e.about);
                }
                return Ok(());
            }
            // The services a bench starts log only when asked (their
            // debug logs time each request's phases).
            if std::env::var_os("HECLOUD_LOG").is_some() {
                cmd::init_logging();
            }
            let name = experiment.unwrap_or_default();
            let Some(exp) = hecloud_bench::find(&name) else {
                let known: Vec<_> = hecloud_bench::EXPERIMENTS.iter().map(|e| e.name).collect();
                anyhow::bail!("unknown experiment `{name}`; known: {}", known.join(", "));
            };
            (exp.run)(&hecloud_bench::BenchOptions {
                quick,
                out_dir: out,
            })
        }
    }
}
