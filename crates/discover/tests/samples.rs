//! Every embedded sample: per-capture facts (device count, SKU, memory, NUMA node per device,
//! the full path-class matrix, NIC affinity, domains) as a snapshot in
//! `test_data/hosts/<name>/expected/summary.txt` (`UPDATE_EXPECT=1` rewrites it), hand-written
//! assertions of the published facts each README names, and the capture round trip: capturing a
//! sample and discovering the capture gives the same machine.

use std::fmt::Write;
use std::sync::Arc;

use accel_discover::families::nvidia::NvmlHost;
use accel_discover::fs::MemTree;
use accel_discover::{capture, default_plugins, discover, labels, samples, Host};
use accel_model::{DomainKind, Endpoint, Machine, PathClass, PathClassifier, SkuRegistry};
use expect_test::expect_file;

/// The facts the tests pin, in one readable page.
fn summary(m: &Machine) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "accelerators: {}", m.accelerators.len());
    for a in &m.accelerators {
        let line = format!(
            "  {} #{} sku={} memory={} numa={} {}",
            a.id,
            a.index,
            a.sku.as_deref().unwrap_or("-"),
            a.memory_bytes.map_or("-".into(), |b| b.to_string()),
            a.numa_node.map_or("-".into(), |n| n.to_string()),
            a.partition
                .as_ref()
                .map_or(String::new(), |p| format!("partition {} of {} ({})", p.index, p.physical_id, p.mode)),
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
    let _ = writeln!(s, "vocabulary (label, Ray resource x units, visibility):");
    for (a, label) in m.accelerators.iter().zip(m.device_labels()) {
        let v = &a.vocabulary;
        let _ = writeln!(
            s,
            "  {label} {} {}x{} {}={}",
            v.kind,
            v.ray_resource.as_deref().unwrap_or("-"),
            v.ray_units.unwrap_or(0.0),
            v.visibility_env.as_deref().unwrap_or("-"),
            v.isolation.join(","),
        );
    }
    let c = PathClassifier::new(m);
    let _ = writeln!(s, "matrix (accelerators, then NICs):");
    for row in c.matrix() {
        let _ = writeln!(s, "  {}", row.iter().map(|p| format!("{p:>6}")).collect::<String>());
    }
    let _ = writeln!(s, "nearest NICs:");
    for (i, a) in m.accelerators.iter().enumerate() {
        let best =
            (0..m.nics.len()).map(|n| c.classify(Endpoint::Accelerator(i), Endpoint::Nic(n))).min_by_key(|p| p.rank());
        let names: Vec<&str> = (0..m.nics.len())
            .filter(|&n| Some(c.classify(Endpoint::Accelerator(i), Endpoint::Nic(n))) == best)
            .map(|n| m.nics[n].name.as_str())
            .collect();
        let _ = writeln!(s, "  {} -> {} {}", a.id, best.map_or("-".into(), |b| b.to_string()), names.join(","));
    }
    let _ = writeln!(s, "domains:");
    for d in &m.domains {
        let _ = writeln!(s, "  {} {} ({}) {:?}", d.kind, d.name, d.source, d.accelerators);
    }
    let _ = writeln!(
        s,
        "attributes: {:?}",
        m.attributes.iter().filter(|(k, _)| !k.starts_with("gce.")).collect::<Vec<_>>()
    );
    let _ = writeln!(s, "warnings:");
    for w in &m.warnings {
        let _ = writeln!(s, "  {w}");
    }
    let _ = writeln!(s, "ray: {}", labels::ray_labels(m).to_args());
    s
}

fn machine(name: &str) -> Machine {
    samples::machine(name).unwrap_or_else(|| panic!("sample {name}"))
}

fn class(m: &Machine, a: usize, b: usize) -> String {
    PathClassifier::new(m).classify(Endpoint::Accelerator(a), Endpoint::Accelerator(b)).to_string()
}

fn nic_class(m: &Machine, a: usize, nic: &str) -> String {
    let n = m.nics.iter().position(|x| x.name == nic).unwrap_or_else(|| panic!("nic {nic}"));
    PathClassifier::new(m).classify(Endpoint::Accelerator(a), Endpoint::Nic(n)).to_string()
}

fn all_pairs(m: &Machine, want: &str) {
    for a in 0..m.accelerators.len() {
        for b in 0..m.accelerators.len() {
            if a != b {
                assert_eq!(class(m, a, b), want, "{a}-{b}");
            }
        }
    }
}

/// Captures too large to embed in the binary, read from test_data only.
const TEST_ONLY: &[&str] = &["mi300x-cpx", "dgx-h100-mig"];

fn test_only(name: &str) -> Machine {
    let tree = MemTree::parse_bundle(&accel_testdata::bundle(name)).unwrap();
    discover(&Host::in_memory(Arc::new(tree), SkuRegistry::builtin()), &default_plugins())
}

#[test]
fn snapshots() {
    for name in samples::names() {
        let path = accel_testdata::hosts_dir().join(name).join("expected/summary.txt");
        expect_file![path].assert_eq(&summary(&machine(name)));
    }
    for name in TEST_ONLY {
        let path = accel_testdata::hosts_dir().join(name).join("expected/summary.txt");
        expect_file![path].assert_eq(&summary(&test_only(name)));
    }
}

#[test]
fn mi300x_cpx_partitions() {
    // The real capture: 8 MI300X in CPX mode, 8 partitions each, except one GPU whose capture
    // lists 7 (KFD nodes 2-64: 63 partitions).
    let m = test_only("mi300x-cpx");
    assert_eq!(m.accelerators.len(), 63);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("amd-mi300x")));
    let mut physical: Vec<&str> =
        m.accelerators.iter().map(|a| a.partition.as_ref().unwrap().physical_id.as_str()).collect();
    physical.dedup();
    assert_eq!(physical.len(), 8);
    assert!(m.accelerators.iter().all(|a| a.partition.as_ref().unwrap().mode == "CPX"));
    let p = m.accelerators[3].partition.as_ref().unwrap();
    assert_eq!((p.physical_id.as_str(), p.index), ("amd-0000:05:00.0", 3));
    assert_eq!(m.accelerators[3].id, "amd-0000:05:00.0-p3");
    // Partitions of one package share its fabric (C2C); every pair across packages is one xGMI hop.
    let xgmi = m.links.iter().filter(|l| l.kind == accel_discover::families::amd::XGMI).count();
    assert_eq!(xgmi, 63 * 62 / 2 - (7 * 28 + 21));
    assert_eq!(m.links.len(), 63 * 62 / 2);
    assert_eq!(class(&m, 0, 1), "C2C1");
    let c2c = m.links.iter().find(|l| l.kind == accel_discover::families::amd::C2C).unwrap();
    assert_eq!(c2c.gbps, Some(1638.4));
    assert_eq!(class(&m, 0, 8), "XGMI1");
    let iso = accel_discover::isolate(&default_plugins(), &m, &[&m.accelerators[9].id]);
    assert_eq!(iso.env["HIP_VISIBLE_DEVICES"], "9");
    // Regression: every partition claimed the whole package's 192 GiB, so `min_memory_gb`
    // over-promised eightfold. Each reports its share and its own KFD node's compute units
    // (152 SIMDs / 4 per CU = 38 of MI300X's 304), the GPU listing 7 nodes included.
    for a in &m.accelerators {
        assert_eq!(a.memory_bytes, Some(192 << 30 >> 3), "{}", a.id);
        assert_eq!(a.partition.as_ref().unwrap().compute_units, Some(38), "{}", a.id);
    }
}

#[test]
fn dgx_h100_mig_partitions() {
    // dgx-h100 with GPU0 split into 7x 1g.10gb and GPU1 into 2x 3g.40gb; six GPUs whole.
    let m = test_only("dgx-h100-mig");
    assert_eq!(m.accelerators.len(), 7 + 2 + 6);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("nvidia-h100-sxm")));
    let of = |gpu: &str| -> Vec<&accel_model::Accelerator> {
        m.accelerators.iter().filter(|a| a.partition.as_ref().is_some_and(|p| p.physical_id == gpu)).collect()
    };
    let (gpu0, gpu1) = (of("nvidia-0000:18:00.0"), of("nvidia-0000:2a:00.0"));
    assert_eq!((gpu0.len(), gpu1.len()), (7, 2));
    for (k, a) in gpu0.iter().enumerate() {
        assert_eq!(a.id, format!("nvidia-0000:18:00.0-mig{k}"));
        // MIG devices are numbered after the node's eight physical GPUs (CUDA selects them by UUID).
        assert_eq!(a.index, 8 + k as u32);
        let p = a.partition.as_ref().unwrap();
        assert_eq!((p.index, p.mode.as_str()), (k as u32, "MIG 1g.10gb"));
        assert_eq!(a.memory_bytes, Some(10468982784), "9.75 GiB");
        assert!(a.uuid.as_deref().unwrap().starts_with("MIG-"));
        // Same PCI function, NUMA node and board serial as the parent GPU.
        assert_eq!(a.pci.unwrap().to_string(), "0000:18:00.0");
        assert_eq!((a.numa_node, a.serial.as_deref()), (Some(0), Some("1650000000")));
    }
    assert!(gpu1.iter().all(|a| a.partition.as_ref().unwrap().mode == "MIG 3g.40gb"));
    assert!(gpu1.iter().all(|a| a.memory_bytes == Some(42412802048)));
    assert_eq!(gpu1.iter().map(|a| a.index).collect::<Vec<_>>(), [15, 16]);
    // MIG-disabled GPUs are reported exactly as in dgx-h100, CUDA ordinals included: a split GPU
    // still counts as one.
    let plain = machine("dgx-h100");
    for (a, b) in m.accelerators[9..].iter().zip(&plain.accelerators[2..]) {
        assert_eq!(a, b);
    }
    // No P2P for MIG devices: split GPUs keep no NVLink; the six whole GPUs keep NV18.
    assert_eq!(m.links.len(), 15);
    assert!(m.links.iter().all(|l| !l.a.contains("-mig") && !l.b.contains("-mig")));
    assert_eq!(class(&m, 9, 10), "NV18");
    // Two MIG devices of one GPU: no link, same PCI function below a PCIe switch, so PIX.
    assert_eq!(class(&m, 0, 6), "PIX");
    // Across GPUs (their own host bridges, same socket) NODE, across sockets SYS.
    assert_eq!(class(&m, 0, 7), "NODE");
    assert_eq!(class(&m, 0, 9), "NODE");
    assert_eq!(class(&m, 0, 14), "SYS");
    assert_eq!(nic_class(&m, 3, "mlx5_0"), "PXB");
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    // Isolation by MIG UUID; with a whole GPU in the set, it is named by its GPU UUID.
    let iso = accel_discover::isolate(&default_plugins(), &m, &[&m.accelerators[1].id, &m.accelerators[8].id]);
    assert_eq!(
        iso.env["CUDA_VISIBLE_DEVICES"],
        format!("{},{}", m.accelerators[1].uuid.as_deref().unwrap(), m.accelerators[8].uuid.as_deref().unwrap())
    );
    assert_eq!(iso.env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    let iso = accel_discover::isolate(&default_plugins(), &m, &[&m.accelerators[0].id, &m.accelerators[9].id]);
    assert_eq!(
        iso.env["CUDA_VISIBLE_DEVICES"],
        "MIG-000051a0-0000-5000-8000-001650000000,GPU-62590080-0000-0000-0000-000000000002"
    );
    // The MIG fields survive a capture, whether NVML was recorded or (as live) a source.
    let bytes = accel_testdata::bundle("dgx-h100-mig");
    let tree = Arc::new(MemTree::parse_bundle(&bytes).unwrap());
    let text = String::from_utf8(bytes).unwrap();
    let (_, entry) = text.split_once("F /accel/nvml.json ").unwrap();
    let (len, rest) = entry.split_once('\n').unwrap();
    let text = &rest[..len.parse::<usize>().unwrap()];
    let source = accel_discover::families::nvidia::nvml::RecordedNvml(
        accel_discover::families::nvidia::nvml::parse_recorded(text),
    );
    for host in [
        Host::in_memory(tree.clone(), SkuRegistry::builtin()),
        Host::in_memory(tree.clone(), SkuRegistry::builtin()).with_nvml(Arc::new(source)),
    ] {
        let original = discover(&host, &default_plugins());
        assert_eq!(original, m);
        let (captured, warnings) = capture::capture(&host, &original, &default_plugins());
        assert!(warnings.is_empty(), "{warnings:?}");
        let bundle = captured.to_bundle();
        let replay = Host::in_memory(Arc::new(MemTree::parse_bundle(&bundle).unwrap()), SkuRegistry::builtin());
        assert_eq!(discover(&replay, &default_plugins()), m);
    }
}

#[test]
fn every_sample_has_a_readme_naming_sources() {
    for name in samples::names() {
        let readme = std::fs::read_to_string(accel_testdata::hosts_dir().join(name).join("README.md")).unwrap();
        assert!(
            readme.contains("https://") || readme.contains(" @ ") || readme.contains("ROCm/"),
            "{name}: README names no source"
        );
        assert!(readme.to_lowercase().contains("licen"), "{name}: README names no licence");
    }
}

#[test]
fn capture_round_trip() {
    for name in samples::names() {
        let host = samples::host(name, SkuRegistry::builtin()).unwrap();
        let original = discover(&host, &default_plugins());
        let (tree, warnings) = capture::capture(&host, &original, &default_plugins());
        assert!(warnings.is_empty(), "{name}: {warnings:?}");
        let bundle = tree.to_bundle();
        let replay = Host::in_memory(Arc::new(MemTree::parse_bundle(&bundle).unwrap()), SkuRegistry::builtin());
        assert_eq!(discover(&replay, &default_plugins()), original, "{name}");
    }
}

#[test]
fn embedded_real_captures_match_their_tarballs() {
    // The hwloc samples are `accel capture` copies of the real trees: same machine either way.
    for name in accel_testdata::hosts() {
        let Some(sample) = samples::machine(&name) else { continue };
        let real = discover(&Host::new(accel_testdata::root(&name), SkuRegistry::builtin()), &default_plugins());
        assert_eq!(sample, real, "{name}");
    }
    assert!(samples::names().contains(&"hwloc-2p8co2t-8ve"));
}

#[test]
fn dgx_h100() {
    let m = machine("dgx-h100");
    assert_eq!(m.accelerators.len(), 8);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("nvidia-h100-sxm")));
    assert!(m.accelerators.iter().all(|a| a.memory_bytes == Some(85520809984)));
    assert_eq!(m.accelerators.iter().map(|a| a.numa_node.unwrap()).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1]);
    all_pairs(&m, "NV18");
    // 8 compute ports and 2 dual-port storage cards (the DGX BasePOD spec).
    assert_eq!(m.nics.len(), 12);
    assert!(m.nics.iter().all(|n| n.rdma && n.speed_mbps == Some(400_000)));
    // As in the published `nvidia-smi topo -m` (vllm-project/vllm#13855): own NIC PXB, other
    // NICs of the socket NODE, the other socket SYS.
    assert_eq!(nic_class(&m, 0, "mlx5_0"), "PXB");
    assert_eq!(nic_class(&m, 1, "mlx5_3"), "PXB");
    assert_eq!(nic_class(&m, 0, "mlx5_3"), "NODE");
    assert_eq!(nic_class(&m, 0, "mlx5_6"), "SYS");
    assert_eq!(nic_class(&m, 7, "mlx5_11"), "PXB");
    assert!(m.links.iter().all(|l| l.gbps == Some(900.0)));
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
}

#[test]
fn hgx_b200_and_rtx() {
    let m = machine("hgx-b200");
    assert_eq!(m.accelerators.len(), 8);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("nvidia-b200")));
    all_pairs(&m, "NV18");
    assert!(m.links.iter().all(|l| l.gbps == Some(1800.0)));
    let m = machine("rtx-pro-6000-server");
    assert_eq!(m.accelerators.len(), 8);
    assert!(m.links.is_empty());
    assert_eq!(class(&m, 0, 1), "PIX");
    assert_eq!(class(&m, 0, 2), "NODE");
    assert_eq!(class(&m, 0, 4), "SYS");
    assert_eq!(nic_class(&m, 0, "mlx5_0"), "PIX");
}

#[test]
fn gb200_tray_clique() {
    let m = machine("gb200-nvl72-tray");
    assert_eq!(m.accelerators.len(), 4);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("nvidia-gb200")));
    all_pairs(&m, "NV18");
    let cliques: Vec<_> =
        m.domains.iter().filter(|d| d.kind == accel_discover::families::nvidia::NVLINK_CLIQUE).collect();
    assert_eq!(cliques.len(), 1);
    assert_eq!(cliques[0].name, "5f6a7b8c-1d2e-4f30-9a1b-2c3d4e5f6071.32766");
    assert_eq!(cliques[0].source, "nvml-fabric");
    assert_eq!(cliques[0].accelerators.len(), 4);
}

#[test]
fn amd() {
    let m = machine("mi300x");
    assert_eq!(m.accelerators.len(), 8);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("amd-mi300x")));
    all_pairs(&m, "XGMI1");
    assert_eq!(m.links.len(), 28);
    assert_eq!(nic_class(&m, 0, "mlx5_0"), "PIX");
    let m = machine("mi355x");
    all_pairs(&m, "XGMI1");
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("amd-mi355x")));
    // The real KFD capture: two hives of four, PCIe (SYS, no PCI tree) between them.
    let m = machine("mi210-2hive");
    assert_eq!(m.accelerators.len(), 8);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("amd-mi210")));
    assert_eq!(m.links.len(), 12);
    assert_eq!(class(&m, 0, 3), "XGMI1");
    assert_eq!(class(&m, 0, 4), "SYS");
    assert_eq!(class(&m, 4, 7), "XGMI1");
    assert_eq!(m.accelerators[2].pci.unwrap().to_string(), "0000:43:00.0");
    assert!(m.links.iter().all(|l| l.gbps == Some(100.0)));
}

#[test]
fn tpu_trn2_gaudi3_mixed() {
    let m = machine("tpu-v6e");
    assert_eq!(m.accelerators.len(), 8);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("google-tpu-v6e")));
    assert_eq!(class(&m, 0, 1), "ICI1");
    assert_eq!(class(&m, 0, 2), "ICI1");
    assert_eq!(class(&m, 0, 3), "NODE");
    assert_eq!(m.links.len(), 10);
    assert_eq!(m.attributes["tpu.worker_id"], "0");
    assert_eq!(m.attributes["tpu.topology"], "2x4");
    let slice = m.domains.iter().find(|d| d.kind == accel_discover::families::tpu::TPU_SLICE).unwrap();
    assert_eq!((slice.name.as_str(), slice.source.as_str()), ("demo-v6e-8", "gce-metadata:tpu-env:NODE_ID"));
    let zone = m.domains.iter().find(|d| d.kind == DomainKind::ZONE).unwrap();
    assert_eq!((zone.name.as_str(), zone.source.as_str()), ("us-east5-b", "gce-metadata:instance/zone"));

    let m = machine("trn2");
    assert_eq!(m.accelerators.len(), 16);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("aws-trainium2")));
    assert_eq!(m.links.len(), 32, "4x4 torus");
    assert_eq!(class(&m, 0, 1), "NL1");
    assert_eq!(class(&m, 0, 12), "NL1");
    // 8 physical cores per device, grouped two by two by the runtime's default LNC=2.
    assert_eq!(m.attributes["aws.neuron_cores"], "64");
    assert_eq!(m.attributes["aws.neuron_physical_cores"], "128");
    assert_eq!(m.nics.len(), 16);
    assert!(m.domains.iter().any(|d| d.kind == DomainKind::ZONE && d.source.starts_with("ec2-imds")));

    let m = machine("gaudi3");
    assert_eq!(m.accelerators.len(), 8);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("intel-gaudi3")));
    all_pairs(&m, "ROCE3");
    assert_eq!(m.attributes.len(), 8, "module ids");

    let m = machine("nvidia-amd-mixed");
    let vendors: Vec<(&str, u32)> = m.accelerators.iter().map(|a| (a.vendor.as_str(), a.index)).collect();
    assert_eq!(vendors, [("amd", 0), ("amd", 1), ("nvidia", 0), ("nvidia", 1)]);
    assert_eq!(class(&m, 0, 1), "XGMI1");
    assert_eq!(class(&m, 2, 3), "PIX");
    assert_eq!(class(&m, 0, 2), "SYS");
    let iso = accel_discover::isolate(&default_plugins(), &m, &[&m.accelerators[1].id, &m.accelerators[3].id]);
    assert_eq!(iso.env["HIP_VISIBLE_DEVICES"], "1");
    assert_eq!(iso.env["CUDA_VISIBLE_DEVICES"], m.accelerators[3].uuid.clone().unwrap(), "NVIDIA by UUID");
    assert_eq!(iso.env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
}

/// Ray counts `neuron_cores` in logical NeuronCores: a trn2.48xlarge has 16 devices of 8 physical
/// cores, which the runtime's default LNC=2 presents as 4 each, so 64, and each device's
/// NEURON_RT_VISIBLE_CORES range starts after the cores of the ones before it. With
/// NEURON_LOGICAL_NC_CONFIG=1 in the environment, 128.
#[test]
fn trn2_counts_neuron_cores_in_cores() {
    let m = machine("trn2");
    let units: f64 = m
        .accelerators
        .iter()
        .filter(|a| a.vocabulary.ray_resource.as_deref() == Some("neuron_cores"))
        .map(|a| a.vocabulary.ray_units.unwrap_or(0.0))
        .sum();
    assert_eq!(units, 64.0);
    let iso = accel_discover::isolate(&default_plugins(), &m, &[&m.accelerators[1].id, &m.accelerators[3].id]);
    assert_eq!(iso.env["NEURON_RT_VISIBLE_CORES"], "4-7,12-15");
    let host = accel_discover::samples::host("trn2", SkuRegistry::builtin())
        .unwrap()
        .with_env([("NEURON_LOGICAL_NC_CONFIG".to_owned(), "1".to_owned())].into());
    let lnc1 = discover(&host, &default_plugins());
    assert_eq!(lnc1.attributes["aws.neuron_cores"], "128");
    let iso = accel_discover::isolate(&default_plugins(), &lnc1, &[&lnc1.accelerators[1].id]);
    assert_eq!(iso.env["NEURON_RT_VISIBLE_CORES"], "8-15");
}

/// HABANA_VISIBLE_MODULES takes module ids, which on this sample differ from PCI order.
#[test]
fn gaudi_isolates_by_module_id() {
    let m = machine("gaudi2-modules");
    assert_eq!(m.accelerators.len(), 8);
    let modules: Vec<&str> = m.accelerators.iter().map(|a| a.vocabulary.isolation[0].as_str()).collect();
    assert_eq!(modules, ["3", "1", "0", "2", "7", "5", "4", "6"]);
    let iso = accel_discover::isolate(&default_plugins(), &m, &[&m.accelerators[0].id, &m.accelerators[2].id]);
    assert_eq!(iso.env["HABANA_VISIBLE_MODULES"], "3,0");
}

#[test]
fn path_classes_are_symmetric_everywhere() {
    for name in samples::names() {
        let m = machine(name);
        let matrix = PathClassifier::new(&m).matrix();
        for (i, row) in matrix.iter().enumerate() {
            assert_eq!(row[i], PathClass::SelfPath);
            for (j, c) in row.iter().enumerate() {
                assert_eq!(*c, matrix[j][i], "{name} {i} {j}");
            }
        }
    }
}
