//! Real NCCL and RCCL topology files (`test_data/nccl-topo/`, sources in its README) imported and
//! discovered: each fact asserted here was read off the file by hand. Broken and truncated files
//! are refused with the line named, and every check is also shown failing on a changed file.

use std::sync::Arc;

use accel_discover::{default_plugins, discover, Host};
use accel_model::{Endpoint, Machine, PathClass, PathClassifier, SkuRegistry};

fn read(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../test_data/nccl-topo").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn machine_of(text: &str) -> (accel_nccl::Import, Machine) {
    let import = accel_nccl::import(text.as_bytes()).expect("imports");
    let host = Host::in_memory(Arc::new(import.tree.clone()), SkuRegistry::builtin());
    let m = discover(&host, &default_plugins());
    (import, m)
}

fn machine(name: &str) -> Machine {
    machine_of(&read(name)).1
}

fn class(m: &Machine, a: Endpoint, b: Endpoint) -> String {
    PathClassifier::new(m).classify(a, b).to_string()
}

fn nic(m: &Machine, name: &str) -> Endpoint {
    Endpoint::Nic(m.nics.iter().position(|n| n.name == name).unwrap_or_else(|| panic!("no NIC {name}")))
}

fn gpu(m: &Machine, pci: &str) -> Endpoint {
    Endpoint::Accelerator(
        m.accelerators.iter().position(|a| a.pci.map(|p| p.to_string()).as_deref() == Some(pci)).unwrap(),
    )
}

fn warned(m: &Machine, text: &str) -> bool {
    m.warnings.iter().any(|w| w.message.contains(text))
}

/// IBM Cloud gx3d-160x1792x8h100: an NCCL 2.22 dump (host_hash) published as an NCCL_TOPO_FILE.
fn check_ibm_h100(m: &Machine) -> Result<(), String> {
    let ok = |c: bool, what: &str| if c { Ok(()) } else { Err(what.to_owned()) };
    ok(m.numa_nodes.iter().map(|n| n.cpus.to_string()).collect::<Vec<_>>() == ["0-79", "80-159"], "NUMA CPUs")?;
    ok(m.accelerators.len() == 8, "8 GPUs")?;
    ok(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("nvidia-h100-sxm")), "all H100 SXM")?;
    let numa: Vec<Option<u32>> = m.accelerators.iter().map(|a| a.numa_node).collect();
    ok(numa == [Some(0), Some(0), Some(0), Some(0), Some(1), Some(1), Some(1), Some(1)], "GPU NUMA nodes")?;
    // Each GPU's four <nvlink> to the NVSwitches count 5+5+4+4 = 18: NV18 between every pair.
    ok(m.links.len() == 28, "28 GPU pairs")?;
    ok(m.links.iter().all(|l| l.kind.as_str() == "nvswitch" && l.count == 18), "NV18 through NVSwitch")?;
    ok(m.links.iter().all(|l| l.source.as_deref() == Some("nccl:nvlink")), "link source")?;
    // Eight ConnectX (15b3:101e) RDMA devices at 200 Gb/s, mlx5_7 beside GPU dev 0 under one switch.
    ok(m.nics.len() == 8 && m.nics.iter().all(|n| n.rdma && n.speed_mbps == Some(200_000)), "8 RDMA NICs")?;
    ok(class(m, gpu(m, "0000:a4:00.0"), nic(m, "mlx5_7")) == "PIX", "GPU0-mlx5_7 PIX")?;
    ok(class(m, gpu(m, "0000:a4:00.0"), nic(m, "mlx5_0")) == "SYS", "GPU0-mlx5_0 SYS")?;
    // CUDA index from <gpu dev=>: the GPU at ea:00.0 is dev 7.
    let g7 = m.accelerators.iter().find(|a| a.pci.map(|p| p.to_string()).as_deref() == Some("0000:ea:00.0"));
    ok(g7.is_some_and(|g| g.vocabulary.isolation == ["7"]), "dev 7 at ea:00.0")?;
    Ok(())
}

#[test]
fn ibm_cloud_h100_dump() {
    let m = machine("ibm-gx3d-8xh100.xml");
    check_ibm_h100(&m).unwrap();
    assert!(!warned(&m, "unknown"), "{:#?}", m.warnings);
}

#[test]
fn rccl_mi300x_dump() {
    // An RCCL dump (version 2) of 8 MI300X (1002:74a1): every GPU lists seven <xgmi count=1>.
    let m = machine("rccl-8x-mi300x.xml");
    assert_eq!(m.accelerators.len(), 8);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("amd-mi300x")));
    assert_eq!(m.links.len(), 28);
    assert!(m.links.iter().all(|l| l.kind.as_str() == "xgmi" && l.count == 1));
    assert_eq!(m.nics.len(), 8);
    assert!(m.nics.iter().all(|n| n.speed_mbps == Some(400_000)));
    // GPU 0 (0c:00.0) and mlx5_0 (07:00.0) meet at the switch 05:00.0 after two more bridges.
    assert_eq!(class(&m, gpu(&m, "0000:0c:00.0"), nic(&m, "mlx5_0")), "PXB");
    let hip: Vec<&str> = m.accelerators.iter().map(|a| a.vocabulary.isolation[0].as_str()).collect();
    assert_eq!(hip, ["0", "1", "2", "3", "4", "5", "6", "7"]);
    assert_eq!(m.numa_nodes.len(), 2);
}

#[test]
fn rccl_mi250_sixteen_gcds() {
    // RCCL model of 8 MI250 (1002:740c), 16 GCDs; the two GCDs of a package (4e and 51:00.0)
    // are joined by <xgmi count=4>.
    let m = machine("rccl-16-gcd.xml");
    assert_eq!(m.accelerators.len(), 16);
    assert_eq!(m.links.len(), 56 / 2);
    let g = |p: &str| {
        m.accelerators.iter().find(|a| a.pci.map(|x| x.to_string()).as_deref() == Some(p)).unwrap().id.clone()
    };
    let pair = m.links.iter().find(|l| l.a == g("0000:4e:00.0") && l.b == g("0000:51:00.0")).unwrap();
    assert_eq!(pair.count, 4);
    assert_eq!(m.numa_nodes.len(), 4);
}

#[test]
fn aws_p4d_topo_file() {
    // aws-ofi-nccl's hand-written p4d.24xlarge NCCL_TOPO_FILE: 2 sockets, four fake switches
    // (ffff:ff:0N.0) each with two A100 (10de:20b0) and one EFA (1d0f:efa0); no <gpu>, no <nic>.
    let (import, m) = machine_of(&read("aws-p4d-24xlarge.xml"));
    assert_eq!(m.numa_nodes.iter().map(|n| n.cpus.to_string()).collect::<Vec<_>>(), ["0-23,48-71", "24-47,72-95"]);
    assert_eq!(m.accelerators.len(), 8);
    assert!(m.accelerators.iter().all(|a| a.sku.as_deref() == Some("nvidia-a100-sxm4-40gb")));
    let efa: Vec<_> = m.nics.iter().filter(|n| n.pci.is_some()).collect();
    assert_eq!(efa.len(), 4);
    // GPU 0 (10:1c.0) and the EFA at 10:1b.0 share switch 0; GPU 4 (90:1c.0) is on the other socket.
    let efa0 = Endpoint::Nic(
        m.nics.iter().position(|n| n.pci.map(|p| p.to_string()).as_deref() == Some("0000:10:1b.0")).unwrap(),
    );
    assert_eq!(class(&m, gpu(&m, "0000:10:1c.0"), efa0), "PIX");
    assert_eq!(class(&m, gpu(&m, "0000:90:1c.0"), efa0), "SYS");
    // Switches 0 and 1 of socket 0 are separate trees: NODE, not PHB.
    assert_eq!(class(&m, gpu(&m, "0000:10:1c.0"), gpu(&m, "0000:20:1c.0")), "NODE");
    assert!(import.warnings.iter().any(|w| w.contains("share a root bus")), "{:?}", import.warnings);
    assert!(m.links.is_empty());
    assert!(warned(&m, "NVLink links and fabric are unknown"));
}

#[test]
fn azure_ndv4_and_ndv5_topo_files() {
    // Azure's NDv4 file: 4 NUMA nodes of 24 CPUs, 8 GPUs and 8 InfiniBand functions given by
    // class only (0x030200, 0x020700), each GPU in its own PCI domain beside an IB one.
    let m = machine("azure-ndv4.xml");
    assert_eq!(m.numa_nodes.iter().map(|n| n.cpus.len()).collect::<Vec<_>>(), [24, 24, 24, 24]);
    assert_eq!(m.accelerators.len(), 8);
    // The file names no vendor: no SKU is guessed, each device is named in a warning, and the
    // import says the ids (GPUs' and NICs') are unknown.
    assert!(m.accelerators.iter().all(|a| a.sku.is_none()));
    assert!(warned(&m, "unreadable ids"));
    let (import, _) = machine_of(&read("azure-ndv4.xml"));
    assert!(
        import.warnings.iter().any(|w| w.starts_with("16 PCI functions have no vendor or device id")),
        "{:?}",
        import.warnings
    );
    assert_eq!(m.nics.len(), 8);
    assert!(m.nics.iter().all(|n| n.rdma), "InfiniBand class");
    let ib = Endpoint::Nic(
        m.nics.iter().position(|n| n.pci.map(|p| p.to_string()).as_deref() == Some("0103:00:00.0")).unwrap(),
    );
    assert_eq!(class(&m, gpu(&m, "0003:00:00.0"), ib), "PIX");
    // NDv5: 2 NUMA nodes of 48 CPUs, 8 GPUs and 8 IB, one of each per switch.
    let m = machine("azure-ndv5.xml");
    assert_eq!(m.numa_nodes.iter().map(|n| n.cpus.len()).collect::<Vec<_>>(), [48, 48]);
    assert_eq!((m.accelerators.len(), m.nics.len()), (8, 8));
}

#[test]
fn aws_p5_and_g5_topo_files_without_attributes() {
    // p5.48xlarge: eight switches (four per socket) with four NICs each, only bus ids; GPUs left
    // out of the file; no affinity, so the CPUs are unknown.
    let (import, m) = machine_of(&read("aws-p5-48xlarge.xml"));
    assert_eq!(import.summary.pci_functions, 40);
    assert_eq!(m.numa_nodes.len(), 2);
    assert!(m.accelerators.is_empty());
    assert!(import.warnings.iter().any(|w| w.contains("no affinity")), "{:?}", import.warnings);
    // g5.48xlarge: nine bare <pci busid> entries under two CPUs.
    let (import, m) = machine_of(&read("aws-g5-48xlarge.xml"));
    assert_eq!(import.summary.pci_functions, 9);
    assert_eq!(m.pci.iter().filter(|n| n.address.is_some()).count(), 9);
}

#[test]
fn a_fact_check_fails_on_a_changed_file() {
    // GPU 7 moved to the other CPU's affinity: the NUMA check fails.
    let text = read("ibm-gx3d-8xh100.xml");
    let changed = text.replace("numaid=\"1\"", "numaid=\"0\"");
    let (_, m) = machine_of(&changed);
    assert!(check_ibm_h100(&m).is_err());
    // One NVSwitch link of GPU 0 dropped: 17 links, not NV18.
    let dropped = text.replacen("<nvlink target=\"0000:f6:00.0\" count=\"4\" tclass=\"0x068000\"/>", "", 1);
    assert_ne!(dropped, text);
    let (_, m) = machine_of(&dropped);
    assert_eq!(check_ibm_h100(&m), Err("NV18 through NVSwitch".to_owned()));
}

#[test]
fn malformed_and_truncated_files_name_the_line() {
    let text = read("ibm-gx3d-8xh100.xml");
    // Truncated in the middle of an element.
    let cut = &text[..text.len() / 2];
    let e = accel_nccl::import(cut.as_bytes()).unwrap_err().to_string();
    assert!(e.starts_with("line ") && e.contains("not well-formed XML"), "{e}");
    // A bad bus id, named with its line.
    let bad = text.replacen("busid=\"0000:a4:00.0\"", "busid=\"zz\"", 1);
    let line = bad.lines().position(|l| l.contains("busid=\"zz\"")).unwrap() + 1;
    let e = accel_nccl::import(bad.as_bytes()).unwrap_err().to_string();
    assert_eq!(e, format!("line {line}: <pci busid=\"zz\">: not a PCI address"));
    // Not an NCCL file at all.
    let e = accel_nccl::import(b"<topology version=\"2.0\"/>").unwrap_err().to_string();
    assert!(e.contains("not <system>"), "{e}");
    // A <gpu> outside any <pci>, as some hand-written examples have it.
    let e = accel_nccl::import(b"<system version=\"1\">\n<cpu numaid=\"0\">\n<gpu dev=\"0\"/>\n</cpu></system>")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "line 3: a <gpu> outside any <pci>");
    // Nesting past the limit, and a non-numeric NUMA id.
    let deep = format!("<system><cpu numaid=\"0\">{}</cpu></system>", "<pci busid=\"0000:00:00.0\">".repeat(100));
    assert!(accel_nccl::import(deep.as_bytes()).unwrap_err().to_string().contains("nest deeper"));
    let e = accel_nccl::import(b"<system><cpu numaid=\"x\"/></system>").unwrap_err().to_string();
    assert!(e.contains("numaid"), "{e}");
}

mod never_panics {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = accel_nccl::import(&bytes);
        }

        #[test]
        fn on_mangled_dumps(cut in 0usize..8938, junk in "[<>/= a-z0-9\"]{0,20}") {
            let text = super::read("ibm-gx3d-8xh100.xml");
            let cut = cut.min(text.len());
            let mangled = format!("{}{junk}{}", &text[..cut], &text[cut..]);
            let _ = accel_nccl::import(mangled.as_bytes());
        }
    }
}

#[test]
fn path_class_of_an_unrelated_pair_is_sys() {
    // Sanity for the helper above: GPU 0 and GPU 4 of the p4d file are on different sockets.
    let m = machine("aws-p4d-24xlarge.xml");
    assert_eq!(PathClassifier::new(&m).classify(gpu(&m, "0000:10:1c.0"), gpu(&m, "0000:90:1c.0")), PathClass::Sys);
}
