//! `run`, the exec guard.

use anyhow::{Result, bail};

use crate::cli::RunArgs;
use crate::exit::Exit;
use crate::store::Location;

pub fn run(_location: &Location, _args: RunArgs) -> Result<Exit> {
    bail!("run is not available yet")
}
