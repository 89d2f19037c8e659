//! `hecloud`: the command line of the hecloud encrypted-computation system.

mod demo;

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
