//! `crum checkpoint` (not built yet: returns an error naming what is missing).

/// Arguments of `crum checkpoint`.
#[derive(clap::Args)]
pub struct Args {}

pub fn main(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`crum checkpoint` is not implemented yet")
}
