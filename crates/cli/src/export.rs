//! `accel export dra|nfd|slurm|kueue|kai`: this node (or a cluster) in other schedulers' own
//! formats.

use std::io::Write;
use std::path::{Path, PathBuf};

use accel_export::topology::{self as topo, Scheduler};
use accel_export::{dra, dra_classes, nfd, slurm, ExportError};
use accel_model::Machine;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::source::{discover_machine, SourceArgs};

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// Kubernetes DRA: `resource.k8s.io/v1` ResourceSlice YAML for this node's accelerators
    /// (or, with `--cluster`, every node's).
    ///
    /// One pool named after the node; standard attributes (`resource.kubernetes.io/pcieRoot`,
    /// `pciBusID`, `numaNode`) plus model, SKU, architecture, memory, scale-up island and clique;
    /// partitions (MIG, CPX) consume shared counters. Apply with `kubectl apply -f -`.
    #[command(
        after_help = "Examples:\n  accel export dra --sample gb200-nvl72-tray\n  accel export dra --classes --k8s-version 1.37   DeviceClasses for the vendors' drivers\n  accel export dra --driver gpu.example.com | kubectl apply -f -\n  accel cluster build node-a/ node-b/ -o cluster.json\n  accel export dra --cluster cluster.json          one pool per node, named after it"
    )]
    Dra(DraArgs),
    /// Node Feature Discovery: a `features.d` file (`key=value` lines with an expiry).
    ///
    /// Label names follow GPU Feature Discovery (`nvidia.com/gpu.*`) and NVIDIA topograph
    /// (`network.topology.nvidia.com/*`) where they exist, `accel.io/*` otherwise.
    #[command(
        after_help = "Examples:\n  accel export nfd\n  accel export nfd --output /etc/kubernetes/node-feature-discovery/features.d/accel"
    )]
    Nfd(NfdArgs),
    /// Slurm: gres.conf, nodes.conf, topology.conf (tree) and topology.yaml (block, torus3d).
    ///
    /// Reads a cluster as `accel cluster` or `accel cluster build` writes it (node labels
    /// `rack`, `nvlink_clique`, `tpu_slice` override the machines' own domains). `Include
    /// nodes.conf` from slurm.conf.
    #[command(
        after_help = "Examples:\n  accel cluster --sample dgx-h100:4 --rack-size 2 > cluster.json\n  accel cluster build node-a/ node-b/ --labels labels.txt -o cluster.json\n  accel export slurm --cluster cluster.json --out-dir /etc/slurm"
    )]
    Slurm(SlurmArgs),
    /// Kueue: a `Topology` (`kueue.x-k8s.io/v1beta2`) whose levels are the fabric's tiers, the
    /// scale-up domain and `kubernetes.io/hostname`, and the node labels it names.
    ///
    /// Levels, root first: `fabric.topograph.run/tier-N` (topograph v1's keys; tier 0 closest to
    /// the node), `accelerator.topograph.run/domain`, `kubernetes.io/hostname`. They must nest: a
    /// cluster where they do not is refused, naming the two nodes. Reference the Topology from a
    /// ResourceFlavor's `spec.topologyName`.
    #[command(
        after_help = "Examples:\n  accel cluster build a/ b/ c/ --topology fabric.json -o cluster.json\n  accel export kueue --cluster cluster.json --node-labels label-nodes.sh | kubectl apply -f -\n  sh label-nodes.sh                                 kubectl label node ... for every node"
    )]
    Kueue(TopologyArgs),
    /// KAI Scheduler: a `Topology` (`kai.scheduler/v1alpha1`) with the same levels as `kueue`,
    /// and the node labels it names.
    #[command(
        after_help = "Examples:\n  accel export kai --cluster cluster.json --node-labels label-nodes.sh | kubectl apply -f -\n  accel export kai --cluster cluster.json --json    the Topology and every node's labels"
    )]
    Kai(TopologyArgs),
}

#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// The cluster, as `accel cluster` or `accel cluster build` writes it (its `tiers` and node
    /// labels give the fabric; topograph's labels are read too).
    #[arg(long, value_name = "FILE")]
    cluster: PathBuf,
    /// The Topology's name.
    #[arg(long, value_name = "NAME", default_value = "accel")]
    name: String,
    /// Also write `kubectl label node` lines for every node's level labels to FILE.
    #[arg(long, value_name = "FILE")]
    node_labels: Option<PathBuf>,
    /// Print `{"topology": ..., "node_labels": {node: {key: value}}}` as JSON instead of YAML.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct DraArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// DRA driver name (a DNS subdomain); unqualified attribute names take its domain.
    #[arg(long, value_name = "NAME", default_value = dra::DEFAULT_DRIVER)]
    driver: String,
    /// The Kubernetes node name (default: the machine's hostname).
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
    /// Every node of this cluster (as `accel cluster` or `accel cluster build` writes it)
    /// instead of one machine: one ResourceSlice set per node, named after the node.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["root", "sample", "node_name", "labels_file"])]
    cluster: Option<PathBuf>,
    /// Write DeviceClasses instead of ResourceSlices: one per device family, selecting the
    /// vendor's own DRA driver where the family names one (`gpu.nvidia.com`, `gpu.amd.com`),
    /// else accel's slices under `accel.io`, annotated as needing a kubelet plugin accel does not
    /// ship; and ResourceClaimTemplates whose `matchAttribute` constraints keep a claim in one
    /// scale-up island (accel's slices) or a device with its NIC (`--nic-class`).
    #[arg(long)]
    classes: bool,
    /// The cluster's Kubernetes version (`1.MINOR`): from 1.37 on, `--classes` gives each class
    /// its family's `k8s_resource` as `extendedResourceName`.
    #[arg(long, value_name = "1.MINOR", default_value = "1.36", requires = "classes")]
    k8s_version: String,
    /// With `--classes`: the cluster's DeviceClass of RDMA NICs (its NIC DRA driver's), for a
    /// `<class>-with-nic` ResourceClaimTemplate that keeps a device and a NIC on one PCIe root.
    #[arg(long, value_name = "CLASS", requires = "classes")]
    nic_class: Option<String>,
}

#[derive(Debug, Args)]
pub struct NfdArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Write the file here (through a temporary file and a rename) instead of stdout.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Seconds until NFD drops the labels unless the file is rewritten.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    ttl: u64,
}

#[derive(Debug, Args)]
pub struct SlurmArgs {
    /// The cluster, as `accel cluster` or `accel cluster build` writes it.
    #[arg(long, value_name = "FILE")]
    cluster: PathBuf,
    /// Directory to write the files into (created if missing).
    #[arg(long, value_name = "DIR")]
    out_dir: PathBuf,
    /// Where the device files are: each device's `/dev/...` file (its vocabulary's
    /// `device_files`) is written under this directory as gres.conf `File=`.
    #[arg(long, value_name = "DIR", default_value = "/dev")]
    dev_dir: String,
}

/// Export's errors under the exit-status rule (`exit`): a node that exceeds a format's limits is
/// a valid request that cannot be met (1); bad input stays invalid input (2).
pub fn classify(e: anyhow::Error) -> anyhow::Error {
    match e.downcast_ref::<ExportError>() {
        Some(ExportError::Limit(_) | ExportError::Yaml(_)) => crate::exit::Unmet(format!("{e:#}")).into(),
        _ => e,
    }
}

pub fn run(command: ExportCommand, out: &mut impl Write) -> Result<()> {
    match command {
        ExportCommand::Dra(args) => {
            let nodes = match &args.cluster {
                Some(path) => {
                    let cluster = read_cluster(path)?;
                    cluster
                        .nodes
                        .iter()
                        .map(|n| Ok((n.name.clone(), cluster.machine(n)?.clone())))
                        .collect::<Result<Vec<_>, accel_plan::PlanError>>()
                        .map_err(|e| ExportError::Input(format!("cluster {}: {e}", path.display())))?
                }
                None => {
                    let machine = discover_machine(&args.source)?;
                    vec![(args.node_name.clone().unwrap_or_else(|| node_name(&machine)), machine)]
                }
            };
            if args.classes {
                let version: dra_classes::K8sVersion = args.k8s_version.parse()?;
                let machines: Vec<&Machine> = nodes.iter().map(|(_, m)| m).collect();
                let mut classes = dra_classes::device_classes(&machines, version)?;
                classes.extend(dra_classes::claim_templates(&machines, args.nic_class.as_deref())?);
                for class in &classes {
                    let text = serde_norway::to_string(class).map_err(ExportError::from)?;
                    out.write_all(format!("---\n{text}").as_bytes())?;
                }
                if classes.is_empty() {
                    eprintln!("accel: note: no accelerators found, so no DeviceClass");
                }
                return Ok(());
            }
            let mut slices = Vec::new();
            for (node, machine) in &nodes {
                let dra::Slices { slices: more, skipped } = dra::resource_slices(machine, node, &args.driver)?;
                for line in &skipped {
                    eprintln!("accel: warning: {line}");
                }
                slices.extend(more);
            }
            if slices.is_empty() {
                eprintln!("accel: note: no accelerators found, so no ResourceSlice");
            }
            out.write_all(dra::to_yaml(&slices)?.as_bytes())?;
        }
        ExportCommand::Nfd(args) => {
            let machine = discover_machine(&args.source)?;
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let text = nfd::features_file(&machine, now.saturating_add(args.ttl))?;
            match &args.output {
                Some(path) => write_atomic(path, &text)?,
                None => out.write_all(text.as_bytes())?,
            }
        }
        ExportCommand::Kueue(args) => topology(Scheduler::Kueue, &args, out)?,
        ExportCommand::Kai(args) => topology(Scheduler::Kai, &args, out)?,
        ExportCommand::Slurm(args) => {
            let cluster = read_cluster(&args.cluster)?;
            let files = slurm::export(&cluster, &args.dev_dir)?;
            std::fs::create_dir_all(&args.out_dir)
                .with_context(|| format!("cannot create {}", args.out_dir.display()))?;
            for (name, text) in [
                ("gres.conf", &files.gres_conf),
                ("nodes.conf", &files.nodes_conf),
                ("topology.conf", &files.topology_conf),
                ("topology.yaml", &files.topology_yaml),
            ] {
                write_atomic(&args.out_dir.join(name), text)?;
                writeln!(out, "wrote {}", args.out_dir.join(name).display())?;
            }
            for w in &files.warnings {
                eprintln!("accel: warning: {w}");
            }
        }
    }
    Ok(())
}

/// `accel export kueue|kai`.
fn topology(scheduler: Scheduler, args: &TopologyArgs, out: &mut impl Write) -> Result<()> {
    let cluster = read_cluster(&args.cluster)?;
    let name = accel_export::dns_label(&args.name);
    if name != args.name {
        return Err(
            ExportError::Input(format!("--name {:?} is not a DNS label (lowercase a-z, 0-9, '-')", args.name)).into()
        );
    }
    let levels = topo::levels(&cluster).map_err(|e| match e {
        ExportError::Input(m) => ExportError::Input(format!("cluster {}: {m}", args.cluster.display())),
        e => e,
    })?;
    let object = topo::topology(scheduler, &name, &levels);
    if let Some(path) = &args.node_labels {
        write_atomic(path, &topo::label_commands(&levels))?;
    }
    if args.json {
        let doc = serde_json::json!({"topology": object, "node_labels": levels.nodes});
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        out.write_all(format!("---\n{}", serde_norway::to_string(&object).map_err(ExportError::from)?).as_bytes())?;
    }
    Ok(())
}

/// A cluster file, as `accel cluster` writes it.
fn read_cluster(path: &Path) -> Result<accel_plan::Cluster, ExportError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ExportError::Input(format!("cannot read cluster {}: {e}", path.display())))?;
    accel_plan::Cluster::from_json(&text)
        .map_err(|e| ExportError::Input(format!("parsing cluster {}: {e}", path.display())))
}

/// The machine's hostname, else `node`.
fn node_name(machine: &Machine) -> String {
    machine.host.hostname.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| "node".into())
}

/// Writes `text` to a hidden temporary file beside `path` (NFD skips dot files), then renames
/// it over `path`, so a reader never sees half a file.
pub(crate) fn write_atomic(path: &Path, text: &str) -> Result<()> {
    use std::hash::{BuildHasher, Hasher};
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().with_context(|| format!("{} names no file", path.display()))?;
    // The temporary file is created exclusively (O_EXCL never follows a symlink) under a name
    // nobody can predict: a local user who can write to the directory can neither redirect the
    // write into another file nor block it by taking the name first.
    let mut attempt = 0;
    let (tmp, mut file) = loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
        let tmp = dir.join(format!(".{}.tmp.{:016x}", name.to_string_lossy(), h.finish()));
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&tmp) {
            Ok(file) => break (tmp, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create a temporary file beside {}", path.display()))
            }
        }
    };
    let result = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("cannot write {}", path.display()));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
