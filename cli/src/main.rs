//! `crum`: run, checkpoint, restart and inspect programs (CUDA or not).
#![deny(unsafe_code)]

use clap::{Parser, Subcommand};

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
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _ = cli.verbose;
    match cli.command {}
}
