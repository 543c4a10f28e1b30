//! `accel preflight`: the pre-flight screens (accel_discover::preflight) of this node, a capture
//! or a sample, against the machine the job expects and, optionally, its expected environment
//! fingerprint.

use std::io::Write;
use std::path::{Path, PathBuf};

use accel_discover::preflight::screen;
use accel_model::Machine;
use anyhow::{Context, Result};
use clap::Args;

use crate::exit::Unmet;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  accel discover --json > expected.json     on a node as the job expects it\n  accel env --json > expected-env.json\n  accel preflight --expect expected.json --fingerprint expected-env.json\n\nExit status:\n  0  every screen passed\n  1  a screen failed (each difference is printed)\n  2  invalid input or usage (bad arguments, an unreadable or malformed file, an unknown sample)"
)]
pub struct PreflightArgs {
    /// The machine the job expects, as `accel discover --json` writes it: its devices, their
    /// scale-up links and NIC speeds are what this node must have.
    #[arg(long, value_name = "MACHINE.json")]
    expect: PathBuf,
    /// The job's expected environment fingerprint (`accel env --json`, whole or cut down to the
    /// fields that matter): every field must have the same value here.
    #[arg(long, value_name = "ENV.json")]
    fingerprint: Option<PathBuf>,
    #[command(flatten)]
    source: crate::source::SourceArgs,
    /// Print the screens' verdict as JSON: `{passed, checks, failures: [{check, detail}]}`.
    #[arg(long)]
    json: bool,
}

/// Runs the screens; a failed screen is [`Unmet`] (exit status 1), after the verdict is printed.
pub fn run(args: &PreflightArgs, out: &mut impl Write) -> Result<()> {
    let expected = load_machine(&args.expect)?;
    let want = args.fingerprint.as_deref().map(crate::env::load).transpose()?;
    let host = crate::source::make_host(&args.source)?;
    let (plugins, _) = accel_discover::plugins_with_external(&crate::source::exec_options());
    let found = accel_discover::discover(&host, &plugins);
    let here = want.as_ref().map(|_| accel_discover::fingerprint::collect_with(&host, &found, &plugins));
    let verdict = screen(&found, &expected, here.as_ref().zip(want.as_ref()));
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &verdict)?;
        writeln!(out)?;
    } else {
        for f in &verdict.failures {
            writeln!(out, "FAIL {}: {}", f.check, f.detail)?;
        }
        writeln!(out, "{}: {}", if verdict.passed { "passed" } else { "failed" }, verdict.checks.join(", "))?;
    }
    if !verdict.passed {
        out.flush()?;
        return Err(Unmet(format!("pre-flight failed: {} difference(s)", verdict.failures.len())).into());
    }
    Ok(())
}

fn load_machine(path: &Path) -> Result<Machine> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a machine as `accel discover --json` writes it", path.display()))
}
