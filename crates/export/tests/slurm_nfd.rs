//! The Slurm files for sample clusters (topology.yaml against topology.yaml(5)'s schema; the
//! real slurmctld reads the rest in python/tests/test_export_slurm.py), and the NFD file format.

use std::collections::BTreeMap;

mod support;

use accel_discover::samples;
use accel_export::{nfd, slurm};
use accel_model::Machine;
use accel_plan::{Cluster, ClusterNode, MachineRef};
use serde::Deserialize;

fn cluster(spec: &[(&str, usize)], rack_size: Option<usize>) -> Cluster {
    let mut c = Cluster::default();
    for (name, count) in spec {
        c.add_nodes(name, samples::machine(name).unwrap(), *count, 18);
    }
    if let Some(size) = rack_size {
        c.label_racks(size);
    }
    c
}

/// topology.yaml(5) (Slurm 26.05), as strict types: an unknown or misplaced key fails.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Topology {
    topology: String,
    #[serde(default)]
    cluster_default: bool,
    tree: Option<Tree>,
    block: Option<Block>,
    torus3d: Option<Torus3d>,
    flat: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tree {
    switches: Vec<Switch>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Switch {
    switch: String,
    children: Option<String>,
    nodes: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Block {
    block_sizes: Vec<usize>,
    blocks: Vec<BlockEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockEntry {
    block: String,
    nodes: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Torus3d {
    toruses: Vec<Torus>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Torus {
    name: String,
    dims: Dims,
    nodes: String,
    placements: Vec<Placement>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Dims {
    x: u32,
    y: u32,
    z: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Placement {
    dims: Dims,
}

/// Parses topology.yaml and checks the rules the man page states.
fn check_yaml(text: &str) -> Vec<Topology> {
    // "topology" must be the first attribute of each entry.
    for entry in text.split("\n- ").skip(1) {
        assert!(entry.starts_with("topology: "), "entry does not start with topology: {entry}");
    }
    let list: Vec<Topology> = serde_norway::from_str(text).expect("topology.yaml(5) schema");
    assert_eq!(list.iter().filter(|t| t.cluster_default).count(), 1);
    for t in &list {
        let kinds = [t.tree.is_some(), t.block.is_some(), t.torus3d.is_some(), t.flat.is_some()];
        assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{}: exactly one type", t.topology);
        if let Some(tree) = &t.tree {
            for s in &tree.switches {
                assert!(s.switch.len() <= 64);
                assert!(s.children.is_some() || s.nodes.is_some());
            }
        }
        if let Some(block) = &t.block {
            let base = block.block_sizes[0];
            for w in block.block_sizes.windows(2) {
                assert!(w[1] > w[0] && (w[1] / w[0]).is_power_of_two());
            }
            let mut names = std::collections::BTreeSet::new();
            for b in &block.blocks {
                assert!(names.insert(&b.block), "block names are unique");
                assert!(b.nodes.split(',').count() >= base, "each block holds at least the base size");
            }
        }
        if let Some(torus) = &t.torus3d {
            for tor in &torus.toruses {
                let cells = tor.dims.x * tor.dims.y * tor.dims.z;
                assert_eq!(tor.nodes.split(',').count() as u32, cells, "{}: one node per cell", tor.name);
                for p in &tor.placements {
                    assert!(p.dims.x <= tor.dims.x && p.dims.y <= tor.dims.y && p.dims.z <= tor.dims.z);
                }
            }
        }
    }
    list
}

#[test]
fn dgx_racks_make_a_tree_and_gres_lines() {
    let files = slurm::export(&cluster(&[("dgx-h100", 4)], Some(2)), "/dev").unwrap();
    assert!(files.warnings.is_empty(), "{:?}", files.warnings);
    let gres: Vec<&str> = files.gres_conf.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(gres.len(), 32);
    assert_eq!(
        gres[0],
        "NodeName=dgx-h100-0 Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-111 Links=-1,18,18,18,18,18,18,18"
    );
    assert!(gres[7].starts_with("NodeName=dgx-h100-0 Name=gpu Type=h100 File=/dev/nvidia7 Cores=112-223 "));
    let conf: Vec<&str> = files.topology_conf.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        conf,
        [
            "SwitchName=rack-r0 Nodes=dgx-h100-0,dgx-h100-1",
            "SwitchName=rack-r1 Nodes=dgx-h100-2,dgx-h100-3",
            "SwitchName=root Switches=rack-r0,rack-r1"
        ]
    );
    let nodes: Vec<&str> = files.nodes_conf.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(nodes.len(), 4);
    assert!(nodes[0].starts_with("NodeName=dgx-h100-0 CPUs=224 Sockets=2 CoresPerSocket=112 ThreadsPerCore=1"));
    assert!(nodes[0].ends_with(" Gres=gpu:h100:8"), "{}", nodes[0]);
    let yaml = check_yaml(&files.topology_yaml);
    assert_eq!(yaml.len(), 1, "no cliques or slices: the tree only");
}

#[test]
fn gres_files_come_from_each_devices_vocabulary_under_dev_dir() {
    // AMD render nodes are KFD's drm_render_minor (this capture's order is 130, 131, 129, ...),
    // not 128 + index; --dev-dir re-roots /dev.
    let machine = samples::machine("mi210-2hive").unwrap();
    let expected: Vec<String> =
        machine.accelerators.iter().map(|a| a.vocabulary.device_files[0].replace("/dev/", "/srv/dev/")).collect();
    assert_eq!(expected[0], "/srv/dev/dri/renderD130");
    let files = slurm::export(&cluster(&[("mi210-2hive", 1)], None), "/srv/dev/").unwrap();
    let got: Vec<&str> =
        files.gres_conf.lines().filter_map(|l| l.split(' ').find_map(|w| w.strip_prefix("File="))).collect();
    assert_eq!(got, expected);

    // A device without device files is left out with a warning; one whose file is not a plain
    // /dev path (an external plugin's answer) is refused, never written into gres.conf.
    let mut machine = samples::machine("dgx-h100").unwrap();
    machine.accelerators[0].vocabulary.device_files.clear();
    machine.accelerators[1].vocabulary.device_files = vec!["/dev/../etc/passwd".into()];
    machine.accelerators[2].vocabulary.device_files = vec!["/dev/nvidia2 Cores=0".into()];
    let mut c = Cluster::default();
    c.add_nodes("dgx-h100", machine, 1, 18);
    let files = slurm::export(&c, "/dev").unwrap();
    assert_eq!(files.gres_conf.lines().filter(|l| !l.starts_with('#')).count(), 5, "{}", files.gres_conf);
    assert!(!files.gres_conf.contains("passwd") && !files.gres_conf.contains("nvidia2"), "{}", files.gres_conf);
    assert_eq!(files.warnings.len(), 3, "{:?}", files.warnings);
    assert!(files.warnings[0].contains("no known device file"), "{:?}", files.warnings);
    assert!(files.warnings[1].contains("not a plain path under /dev"), "{:?}", files.warnings);
}

#[test]
fn nvl72_cliques_make_blocks() {
    let files = slurm::export(&cluster(&[("gb200-nvl72-tray", 36)], Some(18)), "/dev").unwrap();
    let yaml = check_yaml(&files.topology_yaml);
    let block = yaml.iter().find_map(|t| t.block.as_ref()).expect("a block topology");
    assert_eq!(block.block_sizes, [18]);
    assert_eq!(block.blocks.len(), 2);
    assert!(block.blocks.iter().all(|b| b.nodes.split(',').count() == 18));
}

/// A four-host TPU v6e slice (4x4 chips, 2x2 per host), as GKE describes it to each worker.
fn tpu_worker(worker: u32) -> Machine {
    let mut m = samples::machine("tpu-v6e").unwrap();
    for (k, v) in
        [("torus.domain", "tpu_slice"), ("torus.chips", "4x4"), ("torus.chips_per_host", "2,2,1"), ("torus.host", "")]
    {
        m.attributes.insert(k.into(), if v.is_empty() { worker.to_string() } else { v.into() });
    }
    m.accelerators.truncate(4);
    // The slice spans four hosts (discovery derives this from the same two attributes).
    for d in m.domains.iter_mut().filter(|d| d.kind.as_str() == "tpu_slice") {
        d.nodes = Some(4);
    }
    m
}

#[test]
fn tpu_slices_make_a_torus() {
    let mut c = Cluster::default();
    // Listed out of worker order: the torus orders hosts by worker id.
    for w in [2, 0, 3, 1] {
        c.nodes.push(ClusterNode {
            name: format!("tpu-w{w}"),
            labels: BTreeMap::from([("tpu_slice".to_owned(), "slice-a".to_owned())]),
            machine: MachineRef::Inline(Box::new(tpu_worker(w))),
            allocated: Vec::new(),
        });
    }
    let files = slurm::export(&c, "/dev").unwrap();
    assert!(files.warnings.is_empty(), "{:?}", files.warnings);
    let yaml = check_yaml(&files.topology_yaml);
    let torus = &yaml.iter().find_map(|t| t.torus3d.as_ref()).expect("a torus3d topology").toruses[0];
    assert_eq!(torus.dims, Dims { x: 2, y: 2, z: 1 });
    assert_eq!(torus.nodes, "tpu-w0,tpu-w1,tpu-w2,tpu-w3");
    // A v6e chip's file is its VFIO group (the first chip's IOMMU group is 0 in the sample).
    assert!(files.gres_conf.contains("NodeName=tpu-w0 Name=tpu Type=tpu-v6e File=/dev/vfio/0"), "{}", files.gres_conf);
    // A slice whose node count does not match its shape is left out, with a warning.
    c.nodes.pop();
    let files = slurm::export(&c, "/dev").unwrap();
    assert_eq!(files.warnings.len(), 1, "{:?}", files.warnings);
    assert!(check_yaml(&files.topology_yaml).iter().all(|t| t.torus3d.is_none()));
}

#[test]
fn bad_cluster_input_is_an_error() {
    let mut c = cluster(&[("dgx-h100", 1)], None);
    c.nodes[0].name = "bad name".into();
    assert!(matches!(slurm::export(&c, "/dev"), Err(accel_export::ExportError::Input(_))));
    let mut c = cluster(&[("dgx-h100", 1)], None);
    c.nodes[0].machine = MachineRef::Name("nope".into());
    assert!(matches!(slurm::export(&c, "/dev"), Err(accel_export::ExportError::Input(_))));
    assert!(matches!(slurm::export(&Cluster::default(), "/dev"), Err(accel_export::ExportError::Input(_))));
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.len() <= 253
        && prefix
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
    name_ok && (key.rsplit_once('/').is_none() || prefix_ok)
}

fn is_label_value(v: &str) -> bool {
    v.len() <= 63 && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[test]
fn nfd_files_follow_the_local_source_format() {
    for name in samples::names() {
        let machine = samples::machine(name).unwrap();
        let text = nfd::features_file(&machine, 1_798_761_599).unwrap();
        assert!(text.len() <= nfd::MAX_BYTES);
        let mut lines = text.lines().filter(|l| !l.starts_with('#') || l.starts_with("# +"));
        assert_eq!(lines.next(), Some("# +expiry-time=2026-12-31T23:59:59Z"), "{name}");
        for line in lines {
            let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("{name}: {line:?} is not key=value"));
            assert!(is_label_key(k) && is_label_value(v), "{name}: {line:?}");
            // NFD denies kubernetes.io names outside its own feature and profile namespaces.
            if k.contains("kubernetes.io/") {
                assert!(k.starts_with("feature.node.kubernetes.io/"), "{name}: {k}");
            }
        }
    }
}

#[test]
fn nfd_uses_gfd_and_topograph_names() {
    let machine = samples::machine("gb200-nvl72-tray").unwrap();
    let text = nfd::features_file(&machine, 0).unwrap();
    let labels: BTreeMap<&str, &str> =
        text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split_once('=')).collect();
    assert_eq!(labels["nvidia.com/gpu.count"], "4");
    let clique = labels["nvidia.com/gpu.clique"];
    assert_eq!(labels["network.topology.nvidia.com/accelerator"], clique);
    assert_eq!(labels["accelerator.topograph.run/domain"], clique);
}

#[test]
fn nfd_topograph_network_layers() {
    let mut machine = samples::machine("dgx-h100").unwrap();
    for (layer, value) in [("layer-1", "nn-top"), ("layer-2", "nn-mid"), ("layer-3", "nn-leaf")] {
        machine.domains.push(accel_model::Domain {
            kind: accel_model::DomainKind::NETWORK_NODE,
            name: format!("{layer}:{value}"),
            source: "test".into(),
            accelerators: Vec::new(),
            scale_up: false,
            nodes: None,
        });
    }
    let labels = nfd::topograph_labels(&machine);
    assert_eq!(labels["network.topology.nvidia.com/leaf"], "nn-leaf");
    assert_eq!(labels["network.topology.nvidia.com/spine"], "nn-mid");
    assert_eq!(labels["network.topology.nvidia.com/core"], "nn-top");
    // topograph v1: closest first.
    assert_eq!(labels["fabric.topograph.run/tier-0"], "nn-leaf");
    assert_eq!(labels["fabric.topograph.run/tier-1"], "nn-mid");
    assert_eq!(labels["fabric.topograph.run/tier-2"], "nn-top");
    // And the planner reads them back as its tiers, closest first.
    let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
    assert_eq!(accel_plan::fabric::default_tiers(keys.clone())[0], "fabric.topograph.run/tier-0");
}

#[test]
fn nfd_refuses_files_over_64_kib() {
    let mut machine = samples::machine("dgx-h100").unwrap();
    // Long, distinct network-layer names each become a label key; enough of them overflow.
    for k in 0..2000 {
        machine.domains.push(accel_model::Domain {
            kind: accel_model::DomainKind::NETWORK_NODE,
            name: format!("layer-name-that-is-rather-long-{k:05}:v"),
            source: "test".into(),
            accelerators: Vec::new(),
            scale_up: false,
            nodes: None,
        });
    }
    let err = nfd::features_file(&machine, 0).unwrap_err();
    assert!(matches!(err, accel_export::ExportError::Limit(_)), "{err}");
}

#[test]
fn a_node_with_an_unhealthy_device_drains_with_its_reasons() {
    let mut c = Cluster::default();
    c.machines.insert("sick".into(), support::faulty_gb200());
    c.machines.insert("well".into(), samples::machine("gb200-nvl72-tray").unwrap());
    for (node, machine) in [("tray-0", "sick"), ("tray-1", "well")] {
        c.nodes.push(ClusterNode {
            name: node.into(),
            labels: BTreeMap::new(),
            machine: MachineRef::Name(machine.into()),
            allocated: Vec::new(),
        });
    }
    let files = slurm::export(&c, "/dev").unwrap();
    let drains: Vec<&str> = files.nodes_conf.lines().filter(|l| l.starts_with("DownNodes=")).collect();
    assert_eq!(
        drains,
        [concat!(
            r#"DownNodes=tray-0 State=DRAIN Reason="accel: GPU1 unhealthy: 3 uncorrectable ECC errors; "#,
            r#"GPU2 unhealthy: PCIe link x8 of x16; GPU3 unknown: nvidia:errors: its source said nothing of this device""#
        )]
    );
    // Allowing unknown health keeps GPU3 out of the reason, not the unhealthy ones.
    c.health.unknown = accel_plan::UnknownHealth::Allow;
    let files = slurm::export(&c, "/dev").unwrap();
    assert!(files.nodes_conf.contains("GPU2 unhealthy") && !files.nodes_conf.contains("GPU3"), "{}", files.nodes_conf);
}

/// GPU memory exposed as NUMA nodes (POWER9's six V100, nodes 250-255) is the GPUs' memory, not
/// the host's: RealMemory counts the two CPU nodes only (123.8 + 127.7 GiB in that capture).
#[test]
fn real_memory_leaves_out_gpu_memory_nodes() {
    let machine = samples::machine("hwloc-power9-v100-numa").unwrap();
    let gpu_memory: Vec<u32> = machine.numa_nodes.iter().filter(|n| n.memory_of.is_some()).map(|n| n.id).collect();
    assert_eq!(gpu_memory, [250, 251, 252, 253, 254, 255]);
    let host: u64 = machine.numa_nodes.iter().filter(|n| n.memory_of.is_none()).filter_map(|n| n.memory_bytes).sum();
    let all: u64 = machine.numa_nodes.iter().filter_map(|n| n.memory_bytes).sum();
    assert!(all > host);
    let files = slurm::export(&cluster(&[("hwloc-power9-v100-numa", 1)], None), "/dev").unwrap();
    assert!(files.nodes_conf.contains(&format!(" RealMemory={} ", host >> 20)), "{}", files.nodes_conf);
}
