//! `accel import hwloc FILE.xml` and `accel import nccl FILE.xml`: another tool's record of a
//! machine turned into a capture bundle that accel reads like any root (`accel topo --root
//! BUNDLE`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use accel_discover::{default_plugins, discover, Host};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// hwloc's topology XML (`lstopo --of xml --whole-io`, XML format 2.0 or 3.0) as a capture
    /// bundle.
    ///
    /// The bundle holds the sysfs and procfs files accel reads, synthesised from the XML: the PCI
    /// tree nested by bridge (ids, class, locality), NUMA nodes (CPUs, memory, distances), the
    /// netdevs and RDMA devices under their PCI functions, DMI strings and the hostname. The OS
    /// devices hwloc recorded (GPU and runtime names, UUIDs, ports) go, with all their info
    /// attributes, into `/accel/hwloc-osdevs.json`. What the XML does not show is not invented:
    /// no PCIe lane width (hwloc keeps only GB/s), no driver files. Warnings (what was left out,
    /// devices no plugin identifies) go to stderr.
    #[command(
        after_help = "Examples:\n  lstopo --of xml --whole-io machine.xml\n  accel import hwloc machine.xml -o machine.bundle\n  accel topo --root machine.bundle\n  accel import hwloc machine.xml > machine.bundle"
    )]
    Hwloc(HwlocArgs),
    /// An NCCL or RCCL topology file (what `NCCL_TOPO_DUMP_FILE=FILE` writes, or an
    /// `NCCL_TOPO_FILE` input such as a cloud's) as a capture bundle.
    ///
    /// The bundle holds the NUMA nodes (from each `<cpu numaid affinity>`), the PCI tree (bus ids,
    /// ids and class where written, link speed and width as the maximum NCCL read, locality from
    /// the enclosing CPU), the NICs (an RDMA device where NCCL recorded a port GUID, else a
    /// netdev, with its speed) and, in `/accel/hwloc-osdevs.json`, each GPU's record (`dev`,
    /// `sm`, `rank`, RCCL's `gcn`) and link elements (`<nvlink>`, `<xgmi>`, `<c2c>`) for the
    /// families to read. What the file does not say is not invented: a class-only entry gets no
    /// vendor, a GPU no SKU; each is a warning. A malformed or truncated file is one error
    /// naming the line (exit status 2).
    #[command(
        after_help = "Examples:\n  NCCL_TOPO_DUMP_FILE=system.xml all_reduce_perf -g 8   # any NCCL program\n  accel import nccl system.xml -o machine.bundle\n  accel topo --root machine.bundle"
    )]
    Nccl(HwlocArgs),
}

#[derive(Debug, Args)]
pub struct HwlocArgs {
    /// The XML file.
    #[arg(value_name = "FILE.xml")]
    file: PathBuf,
    /// Write the bundle to this file (through a temporary file and a rename) instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "BUNDLE")]
    output: Option<PathBuf>,
}

pub fn run(command: ImportCommand, out: &mut impl Write) -> Result<()> {
    let (args, limit) = match &command {
        ImportCommand::Hwloc(a) => (a, accel_hwloc::MAX_XML_BYTES),
        ImportCommand::Nccl(a) => (a, accel_nccl::MAX_XML_BYTES),
    };
    let bytes = accel_discover::fs::read_regular(&args.file, limit as u64)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let cannot = || format!("cannot import {}", args.file.display());
    let (tree, warnings, what, summary) = match &command {
        ImportCommand::Hwloc(_) => {
            let i = accel_hwloc::import(&bytes).with_context(cannot)?;
            (i.tree, i.warnings, format!("hwloc XML {}", i.version), i.summary.to_string())
        }
        ImportCommand::Nccl(_) => {
            let i = accel_nccl::import(&bytes).with_context(cannot)?;
            (i.tree, i.warnings, format!("NCCL topology XML {}", i.version), i.summary.to_string())
        }
    };
    for w in &warnings {
        eprintln!("accel: warning: {w}");
    }
    // Discover the result once, so a device the tool saw that no plugin identifies is named now.
    let tree = Arc::new(tree);
    let host = Host::in_memory(tree.clone(), accel_model::SkuRegistry::builtin());
    // Discovery reads the OS-device file too (`osdevs::annotate`), so its warnings are here.
    let machine = discover(&host, &default_plugins());
    for w in &machine.warnings {
        eprintln!("accel: warning: {w}");
    }
    let bundle = tree.to_bundle();
    let report = format!("imported {what} ({summary}; {} accelerators found)", machine.accelerators.len());
    match &args.output {
        Some(path) => {
            write_atomic(path, &bundle)?;
            writeln!(out, "{report} into {}", path.display())?;
        }
        None => {
            out.write_all(&bundle)?;
            eprintln!("accel: {report}");
        }
    }
    Ok(())
}

/// Writes through a temporary file beside `path` and a rename, so a reader never sees half.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().with_context(|| format!("{} names no file", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::Error::new(e).context(format!("cannot write {}", path.display()))
    })
}
