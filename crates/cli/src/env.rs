//! `accel env` and `accel env diff`: the environment fingerprint
//! (accel_discover::fingerprint) of this machine or a capture, and what differs between two.

use std::io::Write;
use std::path::{Path, PathBuf};

use accel_discover::fingerprint::{self, Fingerprint};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Every field names its source (a file, dpkg, a vendor library, the environment), or says it is unknown.\n\nExamples:\n  accel env --json > a.json          this machine's fingerprint\n  accel env diff a.json b.json       what differs\n\nExit status:\n  0  success (`env diff`: the two fingerprints are the same)\n  1  `env diff`: something differs\n  2  invalid input or usage (bad arguments, an unreadable or malformed file, an unknown sample)"
)]
pub struct EnvArgs {
    #[command(subcommand)]
    pub command: Option<EnvCommand>,
    #[command(flatten)]
    pub source: crate::source::SourceArgs,
    /// Print JSON (`{fingerprint_version, fields: {name: {value?, source}}}`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// Compare two fingerprints (`accel env --json` output, or a conformance report embedding one).
    #[command(
        after_help = "Exit status:\n  0  the two fingerprints are the same\n  1  something differs (each difference is printed)\n  2  invalid input or usage (bad arguments, an unreadable or malformed file)"
    )]
    Diff {
        #[arg(value_name = "A.json")]
        a: PathBuf,
        #[arg(value_name = "B.json")]
        b: PathBuf,
    },
}

/// Returns false when `diff` found differences.
pub fn run(args: &EnvArgs, out: &mut impl Write) -> Result<bool> {
    if let Some(EnvCommand::Diff { a, b }) = &args.command {
        let (fa, fb) = (load(a)?, load(b)?);
        let changes = fingerprint::diff(&fa, &fb);
        out.write_all(fingerprint::diff_text(&changes).as_bytes())?;
        return Ok(changes.is_empty());
    }
    let host = crate::source::make_host(&args.source)?;
    let (plugins, _) = accel_discover::plugins_with_external(&crate::source::exec_options());
    let fp = fingerprint::collect(&host, &plugins);
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &fp)?;
        writeln!(out)?;
    } else {
        let width = fp.fields.keys().map(String::len).max().unwrap_or(0);
        for (key, field) in &fp.fields {
            match &field.value {
                Some(v) => writeln!(out, "{key:<width$}  {v}  ({})", field.source)?,
                None => writeln!(out, "{key:<width$}  -  ({})", field.source)?,
            }
        }
    }
    Ok(true)
}

/// A fingerprint file, or a document that embeds one under `fingerprint`.
pub(crate) fn load(path: &Path) -> Result<Fingerprint> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    fingerprint::from_document(value).map_err(|e| anyhow::anyhow!("{} {e}", path.display()))
}
