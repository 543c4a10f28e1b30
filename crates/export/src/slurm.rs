//! Slurm configuration for a cluster (the planner's [`Cluster`], as `accel cluster` writes it):
//!
//! - `gres.conf`: one `NodeName Name Type File Cores Links` line per accelerator, `Name` being
//!   the gres name its plugin gives (`gpu`, or the device kind: `tpu`, an external plugin's `npu`);
//! - `nodes.conf`: the `NodeName` lines (`CPUs`, `Sockets`, `RealMemory`, `Gres`) that make the
//!   gres count, for `slurm.conf` to `Include`, and a `DownNodes=... State=DRAIN Reason=...`
//!   line for a node with an unhealthy device (or one of unknown health; fail closed);
//! - `topology.conf`: a tree, one switch per rack under a root switch;
//! - `topology.yaml` (Slurm 25.05+): the same tree as the default topology, plus `block` for
//!   NVLink cliques (NVL72) and `torus3d` for TPU slices (26.05+).
//!
//! Core numbering: Slurm's `Cores=` takes logical core indices, socket by socket. Discovery
//! reads CPUs per NUMA node but not SMT siblings, so `nodes.conf` describes each NUMA node with
//! CPUs as one socket of single-thread cores, and `Cores=` indexes that description.

use std::collections::{BTreeMap, BTreeSet};

use accel_discover::labels::{label_value, ray_accelerator_type};
use accel_model::{Accelerator, Health, Machine};
use accel_plan::{node_domains, Cluster};
use serde::Serialize;

use crate::ExportError;

/// The generated files, and what could not be expressed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlurmFiles {
    pub gres_conf: String,
    pub nodes_conf: String,
    pub topology_conf: String,
    pub topology_yaml: String,
    /// Accelerators or domains left out, each with the reason.
    pub warnings: Vec<String>,
}

/// One node's share of the files.
struct NodeInfo<'a> {
    name: &'a str,
    machine: &'a Machine,
    /// Domain values by kind name (`rack`, `nvlink_clique`, `tpu_slice`), labels over the machine's.
    domains: BTreeMap<String, String>,
}

/// Builds every file for `cluster`; device files are named under `dev_dir` (normally `/dev`).
pub fn export(cluster: &Cluster, dev_dir: &str) -> Result<SlurmFiles, ExportError> {
    let mut nodes = Vec::new();
    for node in &cluster.nodes {
        check_name(&node.name)?;
        let machine = cluster.machine(node).map_err(|e| ExportError::Input(e.to_string()))?;
        let mut domains = node_domains(machine, &node.name);
        domains.extend(node.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        nodes.push(NodeInfo { name: &node.name, machine, domains });
    }
    if nodes.is_empty() {
        return Err(ExportError::Input("the cluster has no nodes".into()));
    }
    let mut files = SlurmFiles::default();
    let dev_dir = dev_dir.trim_end_matches('/');
    files.gres_conf = "# Written by `accel export slurm`: one line per accelerator (gres.conf(5)).\n".into();
    files.nodes_conf =
        "# Written by `accel export slurm`: the nodes and their gres; `Include` it from slurm.conf.\n".into();
    let mut names: Vec<String> =
        nodes.iter().flat_map(|n| n.machine.accelerators.iter().map(gres_name)).collect::<Vec<_>>();
    names.sort();
    names.dedup();
    if !names.is_empty() {
        files.nodes_conf += &format!("# slurm.conf also needs: GresTypes={}\n", names.join(","));
    }
    for node in &nodes {
        node_lines(node, dev_dir, &mut files);
        files.nodes_conf += &drain_line(node, cluster.health.allow_unknown());
    }
    let tree = tree(&nodes);
    files.topology_conf = topology_conf(&tree);
    files.topology_yaml = topology_yaml(&nodes, &tree, &mut files.warnings)?;
    Ok(files)
}

/// A Slurm node name: no spaces, commas, brackets or `=` (hostlist syntax).
fn check_name(name: &str) -> Result<(), ExportError> {
    let ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ExportError::Input(format!("node name {name:?} is not a Slurm node name ([A-Za-z0-9._-])")))
    }
}

/// The gres `Type` of a device: Ray's accelerator type where it has one (`h100`), else the SKU
/// id, else the vendor; a partition adds its mode (`h100-mig-1g.10gb`).
pub fn gres_type(acc: &Accelerator) -> String {
    let base = ray_accelerator_type(acc).or_else(|| acc.sku.clone()).unwrap_or_else(|| acc.vendor.clone());
    let full = match &acc.partition {
        Some(p) => format!("{base}-{}", p.mode),
        None => base,
    };
    label_value(&full.to_ascii_lowercase())
}

/// The gres name of a device: its vocabulary's (`gpu`, or the device kind), reduced to what
/// Slurm takes in a gres name (lowercase letters, digits, `_`).
pub fn gres_name(acc: &Accelerator) -> String {
    let name: String = acc
        .vocabulary
        .gres_name()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(32)
        .collect();
    if name.trim_matches('_').is_empty() {
        "accel".into()
    } else {
        name
    }
}

/// The CPU-ful NUMA nodes, each described as one socket: (numa id, first core index, cores).
fn sockets(machine: &Machine) -> (Vec<(u32, u32, u32)>, u32) {
    let mut with_cpus: Vec<_> = machine.numa_nodes.iter().filter(|n| !n.cpus.is_empty()).collect();
    with_cpus.sort_by_key(|n| n.id);
    let per_socket = with_cpus.iter().map(|n| n.cpus.len() as u32).max().unwrap_or(1);
    let list = with_cpus.iter().enumerate().map(|(k, n)| (n.id, k as u32 * per_socket, n.cpus.len() as u32)).collect();
    (list, per_socket)
}

fn node_lines(node: &NodeInfo, dev_dir: &str, files: &mut SlurmFiles) {
    let machine = node.machine;
    let (sockets, per_socket) = sockets(machine);
    let exported: Vec<(&Accelerator, String)> = machine
        .accelerators
        .iter()
        .filter_map(|acc| match acc.vocabulary.device_files.first().map(|f| device_file(f, dev_dir)) {
            Some(Ok(file)) => Some((acc, file)),
            Some(Err(bad)) => {
                files.warnings.push(format!(
                    "{}: {}: device file {bad:?} is not a plain path under /dev; left out of gres.conf",
                    node.name, acc.id
                ));
                None
            }
            None => {
                files.warnings.push(format!("{}: {}: no known device file; left out of gres.conf", node.name, acc.id));
                None
            }
        })
        .collect();
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (i, (acc, file)) in exported.iter().enumerate() {
        let ty = gres_type(acc);
        let name = gres_name(acc);
        *counts.entry((name.clone(), ty.clone())).or_default() += 1;
        let mut line = format!("NodeName={} Name={name} Type={ty} File={file}", node.name);
        if let Some(&(_, first, n)) = acc.numa_node.and_then(|id| sockets.iter().find(|s| s.0 == id)) {
            line += &format!(" Cores={}", range(first, n));
        }
        let links: Vec<String> = exported
            .iter()
            .enumerate()
            .map(|(j, (other, _))| if i == j { "-1".to_owned() } else { link_count(machine, acc, other).to_string() })
            .collect();
        if exported.len() > 1 {
            line += &format!(" Links={}", links.join(","));
        }
        files.gres_conf += &line;
        files.gres_conf.push('\n');
    }
    let sockets_n = sockets.len().max(1) as u32;
    let mut line = format!(
        "NodeName={} CPUs={} Sockets={sockets_n} CoresPerSocket={per_socket} ThreadsPerCore=1",
        node.name,
        sockets_n * per_socket
    );
    // Host memory only: a NUMA node that is a device's memory (GPU HBM on Grace, POWER9) is not
    // Slurm's RealMemory.
    let memory: u64 = machine.numa_nodes.iter().filter(|n| n.memory_of.is_none()).filter_map(|n| n.memory_bytes).sum();
    if memory > 0 {
        line += &format!(" RealMemory={}", memory >> 20);
    }
    if !counts.is_empty() {
        let gres: Vec<String> = counts.iter().map(|((name, t), n)| format!("{name}:{t}:{n}")).collect();
        line += &format!(" Gres={}", gres.join(","));
    }
    files.nodes_conf += &line;
    files.nodes_conf.push('\n');
}

/// `DownNodes=<node> State=DRAIN Reason="..."` when a device of the node is unhealthy (or its
/// health unknown, unless the cluster allows that): Slurm cannot drain one gres, so the node
/// drains with each such device and its first reason (`sinfo -R` shows it). Empty otherwise.
fn drain_line(node: &NodeInfo, allow_unknown: bool) -> String {
    let labels = node.machine.device_labels();
    let sick: Vec<String> = node
        .machine
        .accelerators
        .iter()
        .zip(&labels)
        .filter(|(acc, _)| {
            !Health::placeable(acc.health.as_ref(), allow_unknown || node.machine.allows_unknown_health())
        })
        .map(|(acc, label)| format!("{label} {}", acc.health.as_ref().map(Health::summary).unwrap_or_default()))
        .collect();
    if sick.is_empty() {
        return String::new();
    }
    // slurm.conf quotes the reason: no quotes, `#` or line breaks inside.
    let reason: String = format!("accel: {}", sick.join("; "))
        .chars()
        .map(|c| if c == '"' || c == '#' || c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    format!("DownNodes={} State=DRAIN Reason=\"{reason}\"\n", node.name)
}

/// A device's file (`/dev/nvidia0`, from its vocabulary) under `dev_dir` instead of `/dev`;
/// `Err` with the path when it is not a plain path under `/dev` (a plugin's answer goes into a
/// config file: no `..`, spaces or other characters gres.conf would misread).
fn device_file(file: &str, dev_dir: &str) -> Result<String, String> {
    let rest = file.strip_prefix("/dev/").ok_or_else(|| file.to_owned())?;
    let plain = rest.split('/').all(|part| {
        !part.is_empty()
            && !part.starts_with('.')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
    });
    if plain {
        Ok(format!("{dev_dir}/{rest}"))
    } else {
        Err(file.to_owned())
    }
}

fn range(first: u32, n: u32) -> String {
    if n <= 1 {
        first.to_string()
    } else {
        format!("{first}-{}", first + n - 1)
    }
}

/// Bonded scale-up links between two devices (0 when none; partitions have none of their own).
fn link_count(machine: &Machine, a: &Accelerator, b: &Accelerator) -> u32 {
    machine.links.iter().filter(|l| (l.a == a.id && l.b == b.id) || (l.a == b.id && l.b == a.id)).map(|l| l.count).sum()
}

/// The tree: switches (name, child switches, nodes), leaves first, the root last.
struct Tree {
    switches: Vec<(String, Vec<String>, Vec<String>)>,
}

/// One leaf switch per rack (nodes without a rack share one named `norack`), and a root above
/// them when there is more than one.
fn tree(nodes: &[NodeInfo]) -> Tree {
    let mut racks: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in nodes {
        let rack = node.domains.get("rack").map(|r| format!("rack-{}", label_value(r))).unwrap_or("norack".into());
        racks.entry(rack).or_default().push(node.name.to_owned());
    }
    let mut switches: Vec<(String, Vec<String>, Vec<String>)> =
        racks.iter().map(|(r, n)| (r.clone(), Vec::new(), n.clone())).collect();
    if racks.len() > 1 {
        switches.push(("root".into(), racks.keys().cloned().collect(), Vec::new()));
    }
    Tree { switches }
}

fn topology_conf(tree: &Tree) -> String {
    let mut out =
        String::from("# Written by `accel export slurm`: topology/tree, one switch per rack (topology.conf(5)).\n");
    for (name, children, nodes) in &tree.switches {
        out += &format!("SwitchName={name}");
        if !children.is_empty() {
            out += &format!(" Switches={}", children.join(","));
        }
        if !nodes.is_empty() {
            out += &format!(" Nodes={}", nodes.join(","));
        }
        out.push('\n');
    }
    out
}

/// One entry of topology.yaml (topology.yaml(5)); `topology` must come first.
#[derive(Debug, Serialize)]
struct Topology {
    topology: String,
    cluster_default: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tree: Option<TreeSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    block: Option<BlockSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    torus3d: Option<Torus3dSpec>,
}

#[derive(Debug, Serialize)]
struct TreeSpec {
    switches: Vec<SwitchSpec>,
}

#[derive(Debug, Serialize)]
struct SwitchSpec {
    switch: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    children: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<String>,
}

#[derive(Debug, Serialize)]
struct BlockSpec {
    block_sizes: Vec<usize>,
    blocks: Vec<Block>,
}

#[derive(Debug, Serialize)]
struct Block {
    block: String,
    nodes: String,
}

#[derive(Debug, Serialize)]
struct Torus3dSpec {
    toruses: Vec<Torus>,
}

#[derive(Debug, Serialize)]
struct Torus {
    name: String,
    dims: Dims,
    nodes: String,
    placements: Vec<Placement>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct Dims {
    x: u32,
    y: u32,
    z: u32,
}

#[derive(Debug, Serialize)]
struct Placement {
    dims: Dims,
}

fn topology_yaml(nodes: &[NodeInfo], tree: &Tree, warnings: &mut Vec<String>) -> Result<String, ExportError> {
    let mut topologies = vec![Topology {
        topology: "racks".into(),
        cluster_default: true,
        tree: Some(TreeSpec {
            switches: tree
                .switches
                .iter()
                .rev()
                .map(|(name, children, members)| SwitchSpec {
                    switch: name.clone(),
                    children: (!children.is_empty()).then(|| children.join(",")),
                    nodes: (!members.is_empty()).then(|| members.join(",")),
                })
                .collect(),
        }),
        block: None,
        torus3d: None,
    }];
    // One block topology per kind of scale-up domain the machines carry that can span nodes (an
    // NVLink clique: NVL72), named after the kind. A node-local one (an xGMI hive, a one-host
    // TPU slice) would be a block of one node, which says nothing Slurm does not know.
    let mut scale_up: Vec<String> = nodes
        .iter()
        .flat_map(|n| {
            n.machine.domains.iter().filter(|d| d.scale_up && !d.node_local()).map(|d| d.kind.as_str().to_owned())
        })
        .collect();
    scale_up.sort();
    scale_up.dedup();
    let toroidal = torus_kinds(nodes);
    for kind in scale_up.iter().filter(|k| !toroidal.contains(*k)) {
        let domains = group(nodes, kind);
        if domains.is_empty() {
            continue;
        }
        let base = domains.values().map(Vec::len).min().unwrap_or(1);
        topologies.push(Topology {
            topology: kind.replace('_', "-"),
            cluster_default: false,
            tree: None,
            block: Some(BlockSpec {
                block_sizes: vec![base],
                blocks: domains
                    .iter()
                    .map(|(name, members)| Block {
                        block: label_value(name),
                        nodes: members.iter().map(|n| n.name).collect::<Vec<_>>().join(","),
                    })
                    .collect(),
            }),
            torus3d: None,
        });
    }
    for kind in &toroidal {
        let mut toruses = Vec::new();
        for (domain, members) in group(nodes, kind) {
            match torus(&domain, &members) {
                Ok(t) => toruses.push(t),
                Err(why) => warnings.push(format!("{kind} {domain}: {why}; left out of topology.yaml")),
            }
        }
        if !toruses.is_empty() {
            topologies.push(Topology {
                topology: kind.replace('_', "-"),
                cluster_default: false,
                tree: None,
                block: None,
                torus3d: Some(Torus3dSpec { toruses }),
            });
        }
    }
    let body = serde_norway::to_string(&topologies)?;
    Ok(format!(
        "# Written by `accel export slurm` (topology.yaml(5); block needs Slurm 25.05+, torus3d 26.05+).\n{body}"
    ))
}

/// The domain kinds the machines describe as a torus (attribute `torus.domain`, set by the
/// family whose scale-up is one, with `torus.chips`, `torus.chips_per_host` and `torus.host`):
/// Slurm gets a 3-D torus of hosts for each such domain instead of a block.
fn torus_kinds(nodes: &[NodeInfo]) -> BTreeSet<String> {
    let spans = |n: &NodeInfo, kind: &str| n.machine.domains.iter().any(|d| d.kind.as_str() == kind && !d.node_local());
    nodes.iter().filter_map(|n| n.machine.attributes.get("torus.domain").filter(|k| spans(n, k)).cloned()).collect()
}

/// Nodes by the value of one domain kind.
fn group<'a>(nodes: &'a [NodeInfo<'a>], kind: &str) -> BTreeMap<String, Vec<&'a NodeInfo<'a>>> {
    let mut out: BTreeMap<String, Vec<&NodeInfo>> = BTreeMap::new();
    for node in nodes {
        if let Some(v) = node.domains.get(kind) {
            out.entry(v.clone()).or_default().push(node);
        }
    }
    out
}

/// Parses `4x4`, `2x2x4` or `2,2,1` into three dimensions (missing ones are 1).
fn dims(text: &str) -> Option<[u32; 3]> {
    let parts: Vec<u32> = text.split(['x', ',']).map(|p| p.trim().parse().ok()).collect::<Option<_>>()?;
    if parts.is_empty() || parts.len() > 3 || parts.contains(&0) {
        return None;
    }
    let mut out = [1; 3];
    out[..parts.len()].copy_from_slice(&parts);
    Some(out)
}

/// A toroidal domain as a torus of hosts: the chip torus divided by the chips per host, hosts in
/// `torus.host` order (x fastest, as Slurm maps them).
fn torus(slice: &str, members: &[&NodeInfo]) -> Result<Torus, String> {
    let attr = |node: &NodeInfo, key: &str| node.machine.attributes.get(key).cloned();
    let first = members[0];
    let topo = attr(first, "torus.chips").and_then(|t| dims(&t)).ok_or("no chip torus (torus.chips)")?;
    let per_host = attr(first, "torus.chips_per_host")
        .and_then(|t| dims(&t))
        .ok_or("no chips-per-host bounds (torus.chips_per_host)")?;
    let hosts: Vec<u32> = (0..3).map(|i| topo[i].div_ceil(per_host[i])).collect();
    let want = hosts.iter().product::<u32>() as usize;
    if want != members.len() {
        return Err(format!(
            "topology {} with {} chips per host makes {want} hosts, but the cluster has {} nodes in it",
            topo.map(|d| d.to_string()).join("x"),
            per_host.map(|d| d.to_string()).join("x"),
            members.len()
        ));
    }
    let mut ordered: Vec<(u32, &str)> = members
        .iter()
        .map(|n| (attr(n, "torus.host").and_then(|w| w.parse().ok()).unwrap_or(u32::MAX), n.name))
        .collect();
    ordered.sort();
    let dims = Dims { x: hosts[0], y: hosts[1], z: hosts[2] };
    // Jobs take the whole slice, or a single host of it.
    let mut placements = vec![Placement { dims }];
    if want > 1 {
        placements.push(Placement { dims: Dims { x: 1, y: 1, z: 1 } });
    }
    Ok(Torus {
        name: label_value(slice),
        dims,
        nodes: ordered.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(","),
        placements,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dims() {
        assert_eq!(dims("4x4"), Some([4, 4, 1]));
        assert_eq!(dims("2,2,1"), Some([2, 2, 1]));
        assert_eq!(dims("2x2x4"), Some([2, 2, 4]));
        assert_eq!(dims("0x4"), None);
        assert_eq!(dims("axb"), None);
    }

    #[test]
    fn ranges() {
        assert_eq!(range(0, 1), "0");
        assert_eq!(range(56, 56), "56-111");
    }
}
