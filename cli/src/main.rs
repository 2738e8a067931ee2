//! `crum`: run, checkpoint, restart and inspect programs (CUDA or not).
//!
//! Each subcommand lives in its own module with an `Args` struct (clap derive) and a
//! `main(args) -> anyhow::Result<i32>` that returns the process exit code.
#![deny(unsafe_code)]

use clap::{Parser, Subcommand};

mod checkpoint;
mod fingerprint;
mod inspect;
mod proxy;
mod ps;
mod restart;
mod run;
mod trust;

#[derive(Parser)]
#[command(name = "crum", version, about = "Transparent checkpoint-restart for CUDA applications")]
struct Cli {
    /// More log output on stderr (-v info, -vv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program under crum (CUDA calls go to a proxy; checkpoints possible).
    Run(run::Args),
    /// Checkpoint a running program; prints the image directory.
    Checkpoint(checkpoint::Args),
    /// Restart a program from an image directory.
    Restart(restart::Args),
    /// Describe an image directory.
    Inspect(inspect::Args),
    /// List programs running under crum.
    Ps(ps::Args),
    /// The device proxy (started by `crum run` / `crum restart`; not for direct use).
    #[command(hide = true)]
    Proxy(proxy::Args),
    /// Whether a usable GPU is here: exit 0, or 1 with the reason on stdout (run by
    /// `crum restart` so that its own process, which becomes the program, never loads the
    /// driver; not for direct use).
    #[command(hide = true)]
    ProbeCuda,
    /// Print the fingerprint of a static CUDA runtime (libcudart_static.a), to find it in
    /// stripped executables (scripts/cudart-fingerprints.sh; not for direct use).
    #[command(hide = true, name = "cudart-fingerprint")]
    CudartFingerprint(FingerprintArgs),
}

#[derive(clap::Args)]
struct FingerprintArgs {
    /// The runtime's version, as the fingerprint names it (e.g. 13.5.37).
    #[arg(long = "cuda-version")]
    version: String,
    /// libcudart_static.a
    archive: std::path::PathBuf,
}

fn print_fingerprint(a: FingerprintArgs) -> anyhow::Result<i32> {
    use anyhow::Context as _;
    let data = std::fs::read(&a.archive).with_context(|| format!("reading {}", a.archive.display()))?;
    let fp = fingerprint::fingerprint_archive(&a.version, &data)
        .with_context(|| format!("fingerprinting {}", a.archive.display()))?;
    print!("{}", fp.to_text());
    Ok(0)
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("CRUM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn main() {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Run(a) => run::main(a),
        Command::Checkpoint(a) => checkpoint::main(a),
        Command::Restart(a) => restart::main(a),
        Command::Inspect(a) => inspect::main(a),
        Command::Ps(a) => ps::main(a),
        Command::Proxy(a) => proxy::main(a),
        Command::ProbeCuda => Ok(match crum_proxy::backend::probe_cuda() {
            None => 0,
            Some(reason) => {
                println!("{reason}");
                1
            }
        }),
        Command::CudartFingerprint(a) => print_fingerprint(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("crum: error: {e:#}");
            std::process::exit(1);
        }
    }
}
