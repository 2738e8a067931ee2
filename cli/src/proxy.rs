//! `crum proxy` (not built yet: returns an error naming what is missing).

/// Arguments of `crum proxy`.
#[derive(clap::Args)]
pub struct Args {}

pub fn main(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`crum proxy` is not implemented yet")
}
