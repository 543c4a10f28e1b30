//! Where a command's machine comes from: the `--root`/`--sample`/`--labels-file` and
//! `--sku-file` arguments every reading command shares, the SKU registry (with
//! `ACCEL_SKU_DIR`), the external plugins' search (`ACCEL_PLUGIN_DIR`, `PATH`) and the host they
//! open.

use std::collections::BTreeMap;
use std::path::PathBuf;

use accel_discover::{load_registry, Host};
use accel_model::{Machine, SkuRegistry};
use anyhow::{Context, Result};
use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct SourceArgs {
    /// Read the machine from a capture instead of `/`: a directory holding sys/ and proc/, a
    /// `capture.bundle` (from `accel capture` or `accel import hwloc`), or a directory holding one.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub(crate) root: PathBuf,
    /// Read an embedded sample machine instead (`accel samples` lists them, real or synthetic).
    #[arg(long, value_name = "NAME", conflicts_with = "root")]
    pub(crate) sample: Option<String>,
    /// Skip network look-ups (GCE metadata, EC2 IMDS). Always skipped for --root and --sample.
    #[arg(long)]
    pub(crate) no_network: bool,
    /// Kubernetes node labels (downward-API file, `key="value"` lines) naming zone, rack, block.
    #[arg(long, value_name = "FILE")]
    pub(crate) labels_file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RegistryArgs {
    /// Extra SKU file (TOML) merged over the built-in registry; may be repeated.
    #[arg(long = "sku-file", value_name = "FILE")]
    pub(crate) sku_files: Vec<PathBuf>,
}

pub(crate) fn registry(args: &RegistryArgs) -> Result<SkuRegistry> {
    let dir = accel_discover::sku_dir(&std::env::vars().collect());
    load_registry(dir.as_deref(), &args.sku_files).context("loading the SKU registry")
}

/// An embedded sample's machine, or the error naming the nearest sample.
pub(crate) fn sample_machine(name: &str) -> Result<Machine> {
    accel_discover::samples::machine(name).with_context(|| accel_discover::samples::unknown(name))
}

pub(crate) fn discover_machine(args: &SourceArgs) -> Result<Machine> {
    Ok(accel_discover::discover_all(&make_host(args)?, &exec_options()))
}

/// External plugins are found through the process environment (`ACCEL_PLUGIN_DIR`, `PATH`).
pub(crate) fn exec_options() -> accel_discover::exec::ExecOptions {
    accel_discover::exec::ExecOptions::from_env(&std::env::vars().collect())
}

/// The host to discover: an embedded sample, a capture bundle file, a captured directory, or
/// the live machine (the only one that gets the process environment, NVML and the network).
pub(crate) fn make_host(args: &SourceArgs) -> Result<Host> {
    if let Some(file) = &args.labels_file {
        // A misspelt path must not pass for a node without labels.
        std::fs::metadata(file).with_context(|| format!("reading labels file {}", file.display()))?;
    }
    let source = match &args.sample {
        Some(name) => accel_discover::Source::Sample(name.clone()),
        None => accel_discover::Source::from_root(&args.root),
    };
    let options = accel_discover::OpenOptions {
        registry: registry(&args.registry)?,
        labels_file: args.labels_file.clone(),
        network: !args.no_network,
        env: std::env::vars().collect::<BTreeMap<_, _>>(),
    };
    Ok(Host::open(&source, options)?)
}
