//! The `accel` binary: parses arguments, wires discovery, the registry and the renderers together.

mod plan;
mod topo;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use accel_discover::{default_plugins, discover, load_registry, Host};
use accel_model::{Machine, SkuRegistry};
use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

/// accel: see a node's accelerators, how they are linked, and where they sit relative to CPUs,
/// NUMA nodes and NICs, for every vendor.
#[derive(Debug, Parser)]
#[command(name = "accel", version, propagate_version = true, max_term_width = 100)]
#[command(
    after_help = "Examples:\n  accel topo                      matrix of this machine\n  accel discover --json           full machine description as JSON\n  accel topo --root ./capture     a captured machine (a copy of /sys and /proc)\n  accel skus                      the SKU registry\n\nEnvironment:\n  ACCEL_SKU_DIR   directory of extra SKU files (*.toml) merged over the built-in registry"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Discover the machine: NUMA, PCI tree, accelerators, NICs, links, domains.
    Discover(DiscoverArgs),
    /// Show the topology matrix in the style of `nvidia-smi topo -m`, for every vendor.
    Topo(TopoArgs),
    /// List the SKU registry: the accelerators accel recognises, with their sources.
    Skus(SkusArgs),
    /// List the captured machines embedded in this binary (use with `--sample NAME`).
    Samples,
    /// Build a cluster (JSON) from embedded samples: `--sample dgx-h100:4,mi300x:2`.
    Cluster(plan::ClusterArgs),
    /// Place a request on a cluster: exact devices per bundle, or why it cannot be met.
    Plan(plan::PlanArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        command: plan::BenchCommand,
    },
}

#[derive(Debug, Args)]
struct SourceArgs {
    /// Read the machine from this directory instead of `/` (a captured tree holding sys/ and proc/).
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// Read an embedded captured machine instead (see `accel samples`).
    #[arg(long, value_name = "NAME", conflicts_with = "root")]
    sample: Option<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

#[derive(Debug, Args)]
struct RegistryArgs {
    /// Extra SKU file (TOML) merged over the built-in registry; may be repeated.
    #[arg(long = "sku-file", value_name = "FILE")]
    sku_files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
struct DiscoverArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Print JSON (schema in docs/schema.md) instead of a summary.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct TopoArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Print the matrix as JSON: endpoint names, path classes, CPU and NUMA affinity.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct SkusArgs {
    #[command(flatten)]
    registry: RegistryArgs,
    /// Print the registry as JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed pipe (`accel topo | head`) is not an error worth a message.
            if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) {
                return ExitCode::SUCCESS;
            }
            eprintln!("accel: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    // Buffered: discovery output is hundreds of lines, one write each on a line-buffered stdout.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match cli.command {
        Command::Discover(args) => {
            let machine = discover_machine(&args.source)?;
            if args.json {
                serde_json::to_writer_pretty(&mut out, &machine)?;
                writeln!(out)?;
            } else {
                out.write_all(topo::summary(&machine).as_bytes())?;
            }
        }
        Command::Topo(args) => {
            let machine = discover_machine(&args.source)?;
            if args.json {
                serde_json::to_writer_pretty(&mut out, &topo::matrix_json(&machine))?;
                writeln!(out)?;
            } else {
                out.write_all(topo::render(&machine).as_bytes())?;
            }
        }
        Command::Cluster(args) => {
            serde_json::to_writer(&mut out, &plan::build_cluster(&args)?)?;
            writeln!(out)?;
        }
        Command::Plan(args) => plan::plan(&args, &mut out)?,
        Command::Bench { command: plan::BenchCommand::Plan(args) } => plan::bench(&args, &mut out)?,
        Command::Samples => {
            for name in accel_discover::samples::names() {
                writeln!(out, "{name}")?;
            }
        }
        Command::Skus(args) => {
            let registry = registry(&args.registry)?;
            if args.json {
                serde_json::to_writer_pretty(&mut out, &registry.all())?;
                writeln!(out)?;
            } else {
                out.write_all(topo::skus(&registry).as_bytes())?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

fn registry(args: &RegistryArgs) -> Result<SkuRegistry> {
    let dir = std::env::var_os("ACCEL_SKU_DIR").filter(|d| !d.is_empty()).map(PathBuf::from);
    load_registry(dir.as_deref(), &args.sku_files).context("loading the SKU registry")
}

fn discover_machine(args: &SourceArgs) -> Result<Machine> {
    if let Some(name) = &args.sample {
        let Some(host) = accel_discover::samples::host(name, registry(&args.registry)?) else {
            bail!("no sample named {name:?}; `accel samples` lists them");
        };
        return Ok(discover(&host, &default_plugins()));
    }
    check_root(&args.root)?;
    let registry = registry(&args.registry)?;
    let mut host = Host::new(&args.root, registry);
    if args.root == Path::new("/") {
        // Only the live machine's environment describes it; a capture carries its own.
        host = host.with_env(std::env::vars().collect::<BTreeMap<_, _>>());
    }
    Ok(discover(&host, &default_plugins()))
}

fn check_root(root: &Path) -> Result<()> {
    std::fs::read_dir(root).with_context(|| format!("cannot read root {}", root.display()))?;
    if !root.join("sys").is_dir() {
        bail!("{} has no sys/ directory: not a Linux root or a captured machine", root.display());
    }
    Ok(())
}
