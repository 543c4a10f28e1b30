//! The `accel` binary: parses arguments, wires discovery, the registry and the renderers together.

mod agent;
mod cluster;
mod conformance;
mod env;
mod exit;
mod export;
mod import;
mod lab;
mod plan;
mod preflight;
mod python;
mod source;
mod topo;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use accel_model::Machine;
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use source::{discover_machine, exec_options, make_host, registry, RegistryArgs, SourceArgs};

/// `accel --version`: the crate version, the git commit and the optional features built in.
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let features = accel_discover::FEATURES.join(",");
    format!(
        "{} (git {}; features: {})",
        env!("CARGO_PKG_VERSION"),
        env!("ACCEL_GIT_COMMIT"),
        if features.is_empty() { "none" } else { &features }
    )
});

/// accel: see a node's accelerators, how they are linked, and where they sit relative to CPUs,
/// NUMA nodes and NICs, for every vendor.
#[derive(Debug, Parser)]
#[command(name = "accel", version = VERSION.as_str(), propagate_version = true, max_term_width = 100)]
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
    /// List the machines embedded in this binary (use with `--sample NAME`), each `real` (read
    /// from a real machine), `derived` (every fact traced to a public artifact) or `synthetic`.
    Samples,
    /// Print node labels and resources for a scheduler: `ray start` arguments or Kubernetes labels
    /// (of this node, a capture, a sample, or with `--predict` a node not yet seen).
    Labels(LabelsArgs),
    /// Capture this machine (allow-listed sysfs/procfs files, NVML, metadata) into OUT_DIR.
    Capture(CaptureArgs),
    /// Build a cluster (JSON) from embedded samples (`--sample dgx-h100:4,mi300x:2`) or from
    /// real machines (`build`: captures, node agents, a Ray cluster).
    Cluster(cluster::ClusterArgs),
    /// Place a request on a cluster: exact devices per bundle, or why it cannot be met.
    Plan(plan::PlanArgs),
    /// Grade plugins: run the conformance suite on captures (and --live) and print the tiers.
    Conformance(conformance::ConformanceArgs),
    /// The environment fingerprint (drivers, firmware, runtimes, libraries, variables), or
    /// `env diff A.json B.json`.
    Env(env::EnvArgs),
    /// Pre-flight screens before a job: every device healthy, the expected links up, NICs at the
    /// expected speed, the environment fingerprint as expected; each difference named.
    Preflight(preflight::PreflightArgs),
    /// The lab: suites on contributed hardware through Ray, their results and what they say
    /// (runs `python -m accel.lab`; `accel lab --help`).
    Lab(lab::LabArgs),
    /// Export this node (or a cluster) to Kubernetes DRA, Node Feature Discovery, Slurm, Kueue or
    /// KAI Scheduler.
    Export {
        #[command(subcommand)]
        command: export::ExportCommand,
    },
    /// Run the node agent: HTTP API, accelerator and link metrics, and the cluster dashboard.
    Agent(agent::AgentArgs),
    /// Import another tool's record of a machine as a capture bundle: `import hwloc FILE.xml`,
    /// `import nccl FILE.xml`.
    Import {
        #[command(subcommand)]
        command: import::ImportCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        command: plan::BenchCommand,
    },
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LabelFormat {
    /// `--labels='...' --resources='...'` for `ray start`.
    Ray,
    /// `key=value` lines with NFD / GPU Feature Discovery names.
    K8s,
}

#[derive(Debug, Args)]
struct LabelsArgs {
    #[command(flatten)]
    source: SourceArgs,
    #[arg(long, value_enum, default_value = "ray")]
    format: LabelFormat,
    /// Keep devices whose health is unknown (a family with no health source here) as Ray
    /// resources. By default they are left out like unhealthy ones (fail closed) and named in
    /// `accel.io/unhealthy-devices`
    #[arg(long)]
    allow_unknown_health: bool,
    /// Predict the labels and resources of a node not yet seen, from the SKU registry alone: an
    /// instance type (`p5en.48xlarge`, the DMI product name its nodes report), a system id
    /// (`aws-p5en-48xlarge`, `accel skus`) or a SKU id with a device count
    /// (`nvidia-h200-sxm:8`). What depends on the node itself (its name, the clique and switches
    /// it joins, the memory its driver reports) is left out and named on stderr
    #[arg(long, value_name = "SKU|INSTANCE_TYPE", conflicts_with_all = ["root", "sample", "labels_file"])]
    predict: Option<String>,
}

#[derive(Debug, Args)]
struct CaptureArgs {
    /// Directory to write `capture.bundle` and a README template into (created if missing).
    #[arg(value_name = "OUT_DIR")]
    out_dir: PathBuf,
    #[command(flatten)]
    source: SourceArgs,
}

#[derive(Debug, Args)]
struct SkusArgs {
    #[command(flatten)]
    registry: RegistryArgs,
    /// Print the registry as JSON.
    #[arg(long)]
    json: bool,
}

/// Exit status: 0 success, 1 a valid request that cannot be met (`exit::Unmet`), 2 invalid
/// input or usage (every other error, and clap's usage errors); see `exit`.
fn main() -> ExitCode {
    exit::report(run(exit::parse::<Cli>()))
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
        Command::Cluster(args) => cluster::run(&args, &mut out)?,
        Command::Plan(args) => plan::plan(&args, &mut out)?,
        Command::Conformance(args) => {
            if !conformance::run(&args, &mut out)? {
                out.flush()?;
                std::process::exit(1);
            }
        }
        Command::Env(args) => {
            if !env::run(&args, &mut out)? {
                out.flush()?;
                std::process::exit(1);
            }
        }
        Command::Preflight(args) => preflight::run(&args, &mut out)?,
        Command::Export { command } => export::run(command, &mut out).map_err(export::classify)?,
        Command::Agent(args) => agent::run(args)?,
        Command::Lab(args) => lab::run(args)?,
        Command::Import { command } => import::run(command, &mut out)?,
        Command::Bench { command: plan::BenchCommand::Plan(args) } => plan::bench(&args, &mut out)?,
        Command::Labels(args) => {
            let mut machine = match &args.predict {
                Some(what) => {
                    let registry = source::registry(&args.source.registry)?;
                    let (plugins, _) = accel_discover::plugins_with_external(&exec_options());
                    let p = accel_discover::predict::predict(&registry, &plugins, what)?;
                    eprintln!(
                        "accel: predicted from {}; not predicted: {}",
                        p.from.join(", "),
                        p.unpredictable.join("; ")
                    );
                    p.machine
                }
                None => discover_machine(&args.source)?,
            };
            if args.allow_unknown_health {
                machine.attributes.insert(accel_model::HEALTH_UNKNOWN_ATTR.into(), "allow".into());
            }
            match args.format {
                LabelFormat::Ray => writeln!(out, "{}", accel_discover::labels::ray_labels(&machine).to_args())?,
                LabelFormat::K8s => {
                    for (k, v) in accel_discover::labels::k8s_labels(&machine) {
                        writeln!(out, "{k}={v}")?;
                    }
                }
            }
        }
        Command::Capture(args) => {
            let host = make_host(&args.source)?;
            let machine = accel_discover::discover_all(&host, &exec_options());
            let (plugins, _) = accel_discover::plugins_with_external(&exec_options());
            let (mut tree, warnings) = accel_discover::capture::capture(&host, &machine, &plugins);
            // The environment it came from travels with it (`accel env diff` reads it).
            let fingerprint = accel_discover::fingerprint::collect_with(&host, &machine, &plugins);
            tree.add_file("/accel/env.json", serde_json::to_vec_pretty(&fingerprint)?);
            std::fs::create_dir_all(&args.out_dir)
                .with_context(|| format!("cannot create {}", args.out_dir.display()))?;
            let bundle = args.out_dir.join("capture.bundle");
            std::fs::write(&bundle, tree.to_bundle()).with_context(|| format!("cannot write {}", bundle.display()))?;
            let provenance = capture_provenance(&args.source, &machine)?;
            let readme = args.out_dir.join("README.md");
            if !readme.exists() {
                std::fs::write(&readme, capture_readme(&machine, provenance.as_ref()))
                    .with_context(|| format!("cannot write {}", readme.display()))?;
            }
            let provenance_file = args.out_dir.join(accel_discover::provenance::FILE);
            match &provenance {
                Some(p) if !provenance_file.exists() => std::fs::write(&provenance_file, p.to_toml())
                    .with_context(|| format!("cannot write {}", provenance_file.display()))?,
                Some(_) => {}
                None => eprintln!(
                    "accel: warning: the source of {} has no provenance.toml: write one (real, derived or \
                     synthetic; docs/contributing-hardware.md) before grading or contributing it",
                    bundle.display()
                ),
            }
            for w in warnings {
                eprintln!("accel: warning: {w}");
            }
            writeln!(
                out,
                "captured {} files ({} accelerators) into {}",
                tree.len(),
                machine.accelerators.len(),
                bundle.display()
            )?;
        }
        Command::Samples => {
            // One line per sample: its name, then what it is evidence of (provenance.toml).
            for name in accel_discover::samples::names() {
                match accel_discover::samples::provenance(name) {
                    Some(Ok(p)) => writeln!(out, "{name:<26} {:<9} {}", p.kind.as_str(), p.summary)?,
                    _ => writeln!(out, "{name:<26} {:<9} provenance.toml missing or invalid", "unknown")?,
                }
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

/// What a capture is evidence of: the live machine is real; a sample keeps its own provenance;
/// a captured root keeps the provenance.toml beside it, if it has one (else unknown: `None`).
fn capture_provenance(
    source: &SourceArgs,
    machine: &Machine,
) -> Result<Option<accel_discover::provenance::Provenance>> {
    use accel_discover::provenance::{Provenance, FILE};
    if let Some(name) = &source.sample {
        let p = accel_discover::samples::provenance(name).with_context(|| accel_discover::samples::unknown(name))?;
        return Ok(Some(p.with_context(|| format!("sample {name}: provenance.toml"))?));
    }
    if source.root == std::path::Path::new("/") {
        let host = machine.host.hostname.as_deref().unwrap_or("an unnamed host");
        return Ok(Some(Provenance::live_capture(host, VERSION.as_str())));
    }
    let dir = if source.root.is_file() { source.root.parent().unwrap_or(&source.root) } else { &source.root };
    let file = dir.join(FILE);
    if !file.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    Ok(Some(Provenance::parse(&text).with_context(|| format!("{}", file.display()))?))
}

fn capture_readme(machine: &Machine, provenance: Option<&accel_discover::provenance::Provenance>) -> String {
    let product = machine.host.product_name.as_deref().unwrap_or("unknown machine");
    let kind = provenance.map_or("origin unknown", |p| p.kind.as_str());
    format!(
        "# {product} ({kind})\n\nWritten by `accel capture` ({} accelerators); provenance.toml says what it is \
         evidence of. Before contributing it, say here who captured it, when, the driver versions, and \
         that it may be published under Apache-2.0.\n",
        machine.accelerators.len()
    )
}
