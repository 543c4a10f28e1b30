//! The clusters the benchmarks run on, built from the embedded sample machines: a medium mixed
//! cluster with racks and fabric tiers, and NVL72 domains beside some 8-GPU boxes.

use std::collections::BTreeMap;

use accel_model::Machine;
use accel_plan::{Cluster, ClusterNode, MachineRef, XorShift};
use anyhow::{Context, Result};

/// The samples the mixed cluster draws from, with weights (as `accel bench plan` mixes them).
pub const MIX: &[(&str, u64)] = &[
    ("dgx-h100", 4),
    ("hgx-b200", 2),
    ("gb200-nvl72-tray", 2),
    ("mi300x", 2),
    ("mi210-2hive", 1),
    ("rtx-pro-6000-server", 1),
];

/// Nodes per rack (and per leaf switch) in the mixed cluster; racks per spine switch.
pub const RACK: usize = 8;
pub const RACKS_PER_SPINE: usize = 4;

/// The fabric tier label keys the mixed cluster carries: topograph's leaf and spine.
pub const LEAF: &str = accel_plan::fabric::TOPOGRAPH_TIERS[0];
pub const SPINE: &str = accel_plan::fabric::TOPOGRAPH_TIERS[1];

/// An embedded sample machine, as discovery reads it.
pub fn sample(name: &str) -> Result<Machine> {
    accel_discover::samples::machine(name).with_context(|| format!("no embedded sample named {name:?}"))
}

/// `nodes` nodes drawn from [`MIX`], `n0`, `n1`...: racks of [`RACK`] (label `rack`, and the leaf
/// tier), spines of [`RACKS_PER_SPINE`] racks, NVL72 trays of a rack sharing one
/// `nvlink_clique`. Each node has, with probability `taken_percent`, each of its devices taken
/// with probability one half.
pub fn mixed(nodes: usize, taken_percent: u64, rng: &mut XorShift) -> Result<Cluster> {
    let mut cluster = Cluster::default();
    for (name, _) in MIX {
        cluster.machines.insert((*name).to_owned(), sample(name)?);
    }
    let total: u64 = MIX.iter().map(|(_, w)| w).sum();
    for i in 0..nodes {
        let mut pick = rng.below(total);
        let (name, _) = *MIX
            .iter()
            .find(|(_, w)| {
                let hit = pick < *w;
                pick = pick.saturating_sub(*w);
                hit
            })
            .expect("weights cover the draw");
        let machine = &cluster.machines[name];
        let mut labels = BTreeMap::new();
        labels.insert("rack".to_owned(), format!("r{}", i / RACK));
        labels.insert(LEAF.to_owned(), format!("leaf{}", i / RACK));
        labels.insert(SPINE.to_owned(), format!("spine{}", i / (RACK * RACKS_PER_SPINE)));
        // Only the trays' scale-up domain spans nodes; an xGMI hive stays inside its node.
        if let Some(kind) = scale_up_kind(machine).filter(|_| name == TRAY) {
            labels.insert(kind, format!("clique-r{}", i / RACK));
        }
        let allocated = if rng.chance(taken_percent) {
            machine.accelerators.iter().filter(|_| rng.chance(50)).map(|a| a.id.clone()).collect()
        } else {
            Vec::new()
        };
        cluster.nodes.push(ClusterNode {
            name: format!("n{i}"),
            labels,
            machine: MachineRef::Name(name.to_owned()),
            allocated,
        });
    }
    Ok(cluster)
}

/// The NVL72 tray sample: 4 GPUs a node, 18 trays an NVLink clique.
pub const TRAY: &str = "gb200-nvl72-tray";
pub const TRAYS_PER_DOMAIN: usize = 18;
/// The kind of a machine's scale-up domain that spans nodes (an NVL72 tray's NVLink clique),
/// as the model names it: the label key `Cluster::add_nodes` gives such nodes.
pub fn scale_up_kind(machine: &Machine) -> Option<String> {
    machine.domains.iter().find(|d| d.scale_up).map(|d| d.kind.as_str().to_owned())
}

/// `domains` NVL72 domains of [`TRAYS_PER_DOMAIN`] trays each (one clique label each), then
/// `others` nodes alternating dgx-h100 and hgx-b200 (8 GPUs, all joined by NVSwitch).
pub fn nvl72(domains: usize, others: usize) -> Result<Cluster> {
    let mut cluster = Cluster::default();
    cluster.add_nodes(TRAY, sample(TRAY)?, domains * TRAYS_PER_DOMAIN, TRAYS_PER_DOMAIN);
    let boxes = ["dgx-h100", "hgx-b200"];
    for name in boxes {
        cluster.machines.insert(name.to_owned(), sample(name)?);
    }
    for k in 0..others {
        let name = boxes[k % 2];
        cluster.nodes.push(ClusterNode {
            name: format!("{name}-{k}"),
            labels: BTreeMap::new(),
            machine: MachineRef::Name(name.to_owned()),
            allocated: Vec::new(),
        });
    }
    Ok(cluster)
}

/// [`nvl72`] with its nodes in a random (seeded) order, as Ray lists nodes: by their random node
/// ids, not by rack. First fit and the planner's index-order ties then see the same order.
pub fn nvl72_shuffled(domains: usize, others: usize, seed: u64) -> Result<Cluster> {
    let mut cluster = nvl72(domains, others)?;
    let mut rng = XorShift::new(seed);
    for i in (1..cluster.nodes.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        cluster.nodes.swap(i, j);
    }
    Ok(cluster)
}
