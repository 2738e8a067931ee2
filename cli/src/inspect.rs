//! `crum inspect` (not built yet: returns an error naming what is missing).

/// Arguments of `crum inspect`.
#[derive(clap::Args)]
pub struct Args {}

pub fn main(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`crum inspect` is not implemented yet")
}
