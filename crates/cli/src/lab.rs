//! `accel lab ...`: the lab (docs/lab.md) lives in the Python package, so this execs
//! `$ACCEL_PYTHON -m accel.lab` (`python3` when unset; without the working directory on
//! `sys.path`, [`crate::python`]) with every argument passed through, `--help` included; its
//! exit status is the lab's.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

use anyhow::{Context, Result};
use clap::Args;

#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct LabArgs {
    /// Arguments of `python -m accel.lab`: `run`, `cancel`, `validate`, `analyze`, `submit`
    /// (`accel lab --help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// The interpreter that runs the lab: `ACCEL_PYTHON`, else `python3` on PATH.
fn python() -> OsString {
    std::env::var_os("ACCEL_PYTHON").filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".into())
}

/// Replaces this process with `python -m accel.lab ARGS...`; returns only when that fails.
pub fn run(args: LabArgs) -> Result<()> {
    let python = python();
    let err = crate::python::module(&python, "accel.lab").args(&args.args).exec();
    Err(err).with_context(|| {
        format!(
            "cannot run {} for `accel lab` (set ACCEL_PYTHON to a Python with the accel package: {})",
            python.to_string_lossy(),
            crate::python::INSTALL_PYTHON_PACKAGE
        )
    })
}
