//! Scale-up links, runtime devices and partitions from real hwloc XMLs (`test_data/hwloc-xml/`,
//! sources in its README): hwloc's `NVLinkBandwidth`, `XGMIBandwidth` and `XGMIHops` matrices
//! become links between the right pairs; `nvml`/`rsmi` OS devices give runtime indices; several
//! `rsmi` devices under one GPU are its partitions, numbered as HIP numbers them and equal to what
//! the KFD reader gives for the same machine; an XML without a matrix says the links are
//! unknown. Each fact was read off the XML by hand.

use std::collections::BTreeMap;
use std::sync::Arc;

use accel_discover::fs::MemTree;
use accel_discover::{default_plugins, discover, Host};
use accel_model::{Accelerator, Link, Machine, SkuRegistry};

fn xml(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../test_data/hwloc-xml").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn tree(name: &str) -> MemTree {
    accel_hwloc::import(&xml(name)).expect("imports").tree
}

fn machine_of(tree: MemTree) -> Machine {
    discover(&Host::in_memory(Arc::new(tree), SkuRegistry::builtin()), &default_plugins())
}

fn machine(name: &str) -> Machine {
    machine_of(tree(name))
}

/// The links between two PCI functions' devices (whole devices or any of their partitions).
fn links_between<'m>(m: &'m Machine, a: &str, b: &str) -> Vec<&'m Link> {
    let at = |id: &str, pci: &str| m.accelerator(id).and_then(|x| x.pci).is_some_and(|p| p.to_string() == pci);
    m.links.iter().filter(|l| (at(&l.a, a) && at(&l.b, b)) || (at(&l.a, b) && at(&l.b, a))).collect()
}

fn warned(m: &Machine, text: &str) -> bool {
    m.warnings.iter().any(|w| w.message.contains(text))
}

#[test]
fn h100_sxm_nvlink_pairs_from_the_nvlink_bandwidth_matrix() {
    // Dell PowerEdge XE8640: 4x H100 SXM5 (10de:2330) at 4e, 5f, cb, db:00.0, each pair joined by
    // 150000 MB/s one way (hwloc: 6 NVLink 4 links of 25000), no NVSwitch.
    let m = machine("dell-xe8640-4xh100.xml");
    assert_eq!(m.host.product_name.as_deref(), Some("PowerEdge XE8640"));
    let gpus: Vec<&Accelerator> = m.accelerators.iter().collect();
    assert_eq!(gpus.len(), 4);
    assert!(gpus.iter().all(|g| g.sku.as_deref() == Some("nvidia-h100-sxm")), "{gpus:?}");
    assert_eq!(m.links.len(), 6, "{:#?}", m.links);
    for l in &m.links {
        assert_eq!((l.kind.as_str(), l.count, l.gbps), ("nvlink", 6, Some(300.0)), "{l:?}");
        assert_eq!(l.source.as_deref(), Some("hwloc:NVLinkBandwidth"));
        assert!(!l.is_declared());
    }
    assert_eq!(links_between(&m, "0000:4e:00.0", "0000:db:00.0").len(), 1);
    assert_eq!(m.attributes.get("topology.read.NVLinkBandwidth").map(String::as_str), Some("nvidia"));
    assert!(!warned(&m, "unknown"), "{:#?}", m.warnings);
    // The capture was sanitised: every UUID reads GPU-0000...; the GPUs are selected by their NVML
    // index, and CUDA's memory figure (83026944 KiB) replaces the registry's.
    assert!(warned(&m, "blank or shared"));
    assert!(gpus.iter().all(|g| g.uuid.is_none()));
    let by_pci: BTreeMap<String, Vec<String>> =
        gpus.iter().map(|g| (g.pci.unwrap().to_string(), g.vocabulary.isolation.clone())).collect();
    // nvml1 hangs under 5f:00.0 in the XML.
    assert_eq!(by_pci["0000:5f:00.0"], ["1"]);
    assert!(gpus.iter().all(|g| g.memory_bytes == Some(83026944 * 1024)));
}

#[test]
fn dgx2_gpus_are_joined_through_nvswitch() {
    // DGX-2H: every V100 has 6 x 25000 MB/s to six of the 12 NVSwitch functions, none to a GPU.
    let m = machine("nvidiaDGX2.xml");
    assert_eq!(m.accelerators.len(), 16);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("nvidia-v100-sxm3-32gb")));
    assert_eq!(m.links.len(), 16 * 15 / 2);
    assert!(m.links.iter().all(|l| l.kind.as_str() == "nvswitch" && l.count == 6 && l.gbps == Some(300.0)));
    // Observed links: the registry's DGX-2H entry declares nothing over them.
    assert!(m.links.iter().all(|l| !l.is_declared()));
}

#[test]
fn power8_p100_pairs_and_no_cpu_link() {
    // POWER8 + 4x P100 SXM2: GPUs 0-1 and 2-3 share 40000 MB/s (2 NVLink 1 links of 20000); each
    // GPU's other links go to a Package (the CPU), which is not a GPU link.
    let m = machine("power8gpudistances.xml");
    assert_eq!(m.accelerators.len(), 4);
    assert_eq!(m.links.len(), 2, "{:#?}", m.links);
    let l = links_between(&m, "0002:01:00.0", "0003:01:00.0");
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].kind.as_str(), l[0].count, l[0].gbps), ("nvlink", 2, Some(80.0)));
    assert_eq!(links_between(&m, "000a:01:00.0", "000b:01:00.0").len(), 1);
    assert!(links_between(&m, "0002:01:00.0", "000a:01:00.0").is_empty());
}

#[test]
fn mi300a_in_spx_mode_four_apus_joined_by_xgmi() {
    // HPE Cray EX255a (LLNL Tuolumne) in SPX: four MI300A (1002:74a0) in PCI domains 0-3, rsmi0-3,
    // every pair 100000 MB/s one way and 1 hop; one hive.
    let m = machine("hpe-ex255a-4xmi300a-spx.xml");
    assert_eq!(m.accelerators.len(), 4);
    let pcis: Vec<String> = m.accelerators.iter().map(|a| a.pci.unwrap().to_string()).collect();
    assert_eq!(pcis, ["0000:02:00.0", "0001:02:00.0", "0002:02:00.0", "0003:02:00.0"]);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("amd-mi300a") && a.partition.is_none()));
    let hip: Vec<&str> = m.accelerators.iter().map(|a| a.vocabulary.isolation[0].as_str()).collect();
    assert_eq!(hip, ["0", "1", "2", "3"]);
    assert_eq!(m.links.len(), 6);
    for l in &m.links {
        assert_eq!((l.kind.as_str(), l.count, l.gbps, l.hops), ("xgmi", 1, Some(200.0), Some(1)), "{l:?}");
        assert_eq!(l.source.as_deref(), Some("hwloc:XGMIBandwidth"));
    }
    let hive = m.domains.iter().find(|d| d.kind.as_str() == "xgmi_hive").expect("a hive");
    assert_eq!(hive.accelerators.len(), 4);
    assert_eq!(m.attributes.get("topology.read.XGMIHops").map(String::as_str), Some("amd"));
}

#[test]
fn mi300a_in_cpx_mode_six_partitions_per_apu_in_hip_order() {
    // The same node in CPX: six rsmi devices under each MI300A (rsmi0-5 under 0000:02:00.0 ...
    // rsmi18-23 under 0003:02:00.0); every pair of the 24 at 100000 MB/s.
    let m = machine("hpe-ex255a-4xmi300a-cpx.xml");
    assert_eq!(m.accelerators.len(), 24);
    for (n, gpu) in ["0000:02:00.0", "0001:02:00.0", "0002:02:00.0", "0003:02:00.0"].iter().enumerate() {
        let parts: Vec<&Accelerator> =
            m.accelerators.iter().filter(|a| a.pci.map(|p| p.to_string()).as_deref() == Some(*gpu)).collect();
        assert_eq!(parts.len(), 6, "{gpu}");
        for (k, p) in parts.iter().enumerate() {
            let part = p.partition.as_ref().unwrap();
            assert_eq!((part.index as usize, part.mode.as_str()), (k, "CPX"));
            assert_eq!(part.physical_id, format!("amd-{gpu}"));
            assert_eq!(p.id, format!("amd-{gpu}-p{k}"));
            // HIP numbers the partitions of GPU n as 6n..6n+5.
            assert_eq!(p.vocabulary.isolation, [(6 * n + k).to_string()]);
            assert_eq!(p.index as usize, 6 * n + k);
        }
    }
    let c2c = m.links.iter().filter(|l| l.kind.as_str() == "c2c").count();
    let xgmi = m.links.iter().filter(|l| l.kind.as_str() == "xgmi").count();
    assert_eq!((c2c, xgmi), (4 * 15, 24 * 23 / 2 - 4 * 15));
}

#[test]
fn mi250x_gcds_joined_by_xgmi() {
    // HPE Cray EX235A (LLNL Tioga EAS): 8 MI250X GCDs (1002:7408), hwloc 2.8 wrote 100000 MB/s
    // between every pair (its RSMI backend's one rate, whatever the link).
    let m = machine("hpe-ex235a-4xmi250x.xml");
    assert_eq!(m.accelerators.len(), 8);
    assert_eq!(m.links.len(), 28);
    assert!(m.links.iter().all(|l| l.kind.as_str() == "xgmi" && l.hops == Some(1)));
}

#[test]
fn a_pcie_only_xml_gives_no_links_and_says_they_are_unknown() {
    // ProLiant SL390s: three NVIDIA GPUs (and the board's Radeon ES1000 VGA), hwloc without NVML:
    // no matrix, no nvml devices.
    let m = machine("24em64t-2n6c2t-pci.xml");
    assert_eq!(m.accelerators.iter().filter(|a| a.vendor == "nvidia").count(), 3);
    assert!(m.links.is_empty());
    assert!(warned(&m, "recorded no NVLink"), "{:#?}", m.warnings);
    assert!(warned(&m, "links and fabric are unknown"));
}

#[test]
fn a_matrix_no_plugin_reads_is_named_never_guessed() {
    let text = String::from_utf8(xml("dell-xe8640-4xh100.xml")).unwrap();
    let renamed = text.replace("name=\"NVLinkBandwidth\"", "name=\"FooLinkBandwidth\"");
    let m = machine_of(accel_hwloc::import(renamed.as_bytes()).unwrap().tree);
    assert!(m.links.is_empty());
    assert!(warned(&m, "\"FooLinkBandwidth\""), "{:#?}", m.warnings);
    assert!(warned(&m, "recorded no NVLink"));
}

#[test]
fn broken_matrices_are_left_out_with_a_warning() {
    let text = String::from_utf8(xml("hpe-ex255a-4xmi300a-spx.xml")).unwrap();
    // An index naming no object; then one value too few.
    let bad = text.replace(
        "<indexes length=\"16\">919 920 921 922 </indexes>",
        "<indexes length=\"16\">919 920 921 9999 </indexes>",
    );
    assert_ne!(bad, text, "the XML changed under the test");
    let import = accel_hwloc::import(bad.as_bytes()).unwrap();
    assert!(import.warnings.iter().any(|w| w.contains("9999")), "{:?}", import.warnings);
    let m = machine_of(import.tree);
    assert!(m.links.iter().all(|l| l.source.as_deref() != Some("hwloc:XGMIBandwidth")));
}

/// The KFD topology the same MI300A node would show in CPX mode, built from the XML's facts:
/// per GPU six KFD nodes sharing one `unique_id`, the partition in the function bits of
/// `location_id`, and an xGMI io_link to every other GPU's partitions.
fn kfd_for(m: &Machine, tree: &mut MemTree) {
    let base = "/sys/class/kfd/kfd/topology/nodes";
    let cpus = m.numa_nodes.len();
    for (i, n) in m.numa_nodes.iter().enumerate() {
        tree.add_file(format!("{base}/{i}/properties"), format!("cpu_cores_count {}\nsimd_count 0\n", n.cpus.len()));
    }
    let parts: Vec<&Accelerator> = m.accelerators.iter().collect();
    for (k, p) in parts.iter().enumerate() {
        let pci = p.pci.unwrap();
        let index = p.partition.as_ref().unwrap().index;
        let unique = 0x1000 + u64::from(pci.domain);
        let props = format!(
            "cpu_cores_count 0\nsimd_count 912\nsimd_per_cu 4\ndevice_id {}\nunique_id {unique}\ndomain {}\n\
             location_id {}\nhive_id 1234\ndrm_render_minor 0\n",
            0x74a0,
            pci.domain,
            (u32::from(pci.bus) << 8) | (u32::from(pci.device) << 3) | index
        );
        tree.add_file(format!("{base}/{}/properties", cpus + k), props);
        for (j, _) in parts.iter().enumerate().filter(|(j, _)| *j != k) {
            tree.add_file(
                format!("{base}/{}/io_links/{j}/properties", cpus + k),
                format!("type 11\nnode_to {}\nmax_bandwidth 0\n", cpus + j),
            );
        }
    }
}

/// What two readers must agree on for each device: id, ordinal, PCI function, partition,
/// isolation values, memory.
type View = (String, u32, Option<String>, Option<accel_model::Partition>, Vec<String>, Option<u64>);

#[test]
fn the_cpx_partitions_equal_what_the_kfd_reader_gives_for_the_same_mode() {
    let from_hwloc = machine("hpe-ex255a-4xmi300a-cpx.xml");
    let mut t = tree("hpe-ex255a-4xmi300a-cpx.xml");
    // Without the hwloc OS-device file, discovery has only KFD's word.
    t.remove(std::path::Path::new(accel_discover::osdevs::OSDEVS_PATH));
    kfd_for(&from_hwloc, &mut t);
    let from_kfd = machine_of(t);
    let view = |m: &Machine| -> Vec<View> {
        m.accelerators
            .iter()
            .map(|a| {
                let mut p = a.partition.clone();
                // KFD gives compute units (SIMDs / SIMDs per CU); hwloc does not record them.
                if let Some(p) = &mut p {
                    p.compute_units = None;
                }
                (a.id.clone(), a.index, a.pci.map(|x| x.to_string()), p, a.vocabulary.isolation.clone(), a.memory_bytes)
            })
            .collect()
    };
    assert_eq!(view(&from_kfd).len(), 24);
    assert_eq!(view(&from_hwloc), view(&from_kfd));
    let kinds = |m: &Machine| {
        let mut k: Vec<(String, String, String)> =
            m.links.iter().map(|l| (l.a.clone(), l.b.clone(), l.kind.as_str().to_owned())).collect();
        k.sort();
        k
    };
    assert_eq!(kinds(&from_hwloc), kinds(&from_kfd));
}

#[test]
fn gpu_memory_numa_nodes_belong_to_their_gpu_from_hwloc_as_from_sysfs() {
    // hwloc's own capture of a POWER9 with six V100 whose memory is NUMA nodes 250-255: Debian's
    // lstopo writes them as `GPUMemory` nodes with a `PCIBusID` info; imported, each is that GPU's
    // memory node, exactly as discovery of the same tree reads `/proc/driver/nvidia/.../numa_status`.
    let root = accel_testdata::root("hwloc-power9-v100-numa");
    let out = std::process::Command::new("lstopo")
        .args(["--of", "xml", "--whole-io", "-"])
        .env("HWLOC_FSROOT", &root)
        .env("HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES", "1")
        .output()
        .expect("lstopo (Debian's hwloc package)");
    assert!(out.status.success());
    let imported = machine_of(accel_hwloc::import(&out.stdout).unwrap().tree);
    let sysfs = discover(&Host::new(&root, SkuRegistry::builtin()), &default_plugins());
    let owners = |m: &Machine| -> Vec<(u32, Option<String>)> {
        m.numa_nodes
            .iter()
            .filter(|n| n.cpus.is_empty())
            .map(|n| {
                (n.id, n.memory_of.as_ref().and_then(|id| m.accelerator(id)).and_then(|a| a.pci).map(|p| p.to_string()))
            })
            .collect()
    };
    let from_sysfs = owners(&sysfs);
    assert_eq!(from_sysfs.len(), 6);
    assert!(from_sysfs.iter().all(|(_, pci)| pci.is_some()), "{from_sysfs:?}");
    // numa_status of 0004:05:00.0 says node 255.
    assert!(from_sysfs.contains(&(255, Some("0004:05:00.0".to_owned()))));
    assert_eq!(owners(&imported), from_sysfs);
    // No GPU takes a memory-only node as its CPU locality.
    for m in [&imported, &sysfs] {
        assert!(m.accelerators.iter().all(|a| a.numa_node.is_some_and(|n| n == 0 || n == 8)), "{:?}", m.accelerators);
    }
}
