//! Vendor plugins on bad input: truncated files, garbage values, NVML errors, metadata servers
//! that time out, answer 500 or garbage. Always warnings and a partial machine, never a panic or
//! a hang. The metadata tests run real TCP servers on 127.0.0.1.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_discover::families::nvidia::nvml::{NvmlDevice, NvmlFabric, NvmlMigDevice, NvmlSnapshot, RecordedNvml};
use accel_discover::families::nvidia::NvmlHost;
use accel_discover::fs::MemTree;
use accel_discover::{default_plugins, discover, Host, NetConfig};
use accel_model::{DomainKind, Machine, SkuRegistry};
use proptest::prelude::*;

fn run(tree: MemTree) -> Machine {
    discover(&Host::in_memory(Arc::new(tree), SkuRegistry::builtin()), &default_plugins())
}

fn warned(m: &Machine, part: &str) -> bool {
    m.warnings.iter().any(|w| w.to_string().contains(part))
}

/// One PCI function at `bdf` (its own host bridge) with a uevent.
fn pci(t: &mut MemTree, bdf: &str, id: &str, class: &str) {
    let bus = &bdf[..7];
    let dir = format!("/sys/devices/pci{bus}/{bdf}");
    t.add_file(format!("{dir}/uevent"), format!("PCI_CLASS={class}\nPCI_ID={id}\n"));
    t.add_link(format!("/sys/bus/pci/devices/{bdf}"), format!("../../..{}", &dir[4..]));
}

#[test]
fn nvml_garbage_falls_back_to_procfs() {
    let mut t = MemTree::new();
    pci(&mut t, "0000:18:00.0", "10DE:2330", "30200");
    t.add_file("/accel/nvml.json", "{\"devices\": [tru");
    t.add_file(
        "/proc/driver/nvidia/gpus/0000:18:00.0/information",
        "Model: NVIDIA H100\nGPU UUID: GPU-1\nBus Location: 0000:18:00.0\n",
    );
    let m = run(t);
    assert_eq!(m.accelerators.len(), 1);
    assert_eq!(m.accelerators[0].uuid.as_deref(), Some("GPU-1"));
    assert!(warned(&m, "recorded NVML JSON"));
    assert!(warned(&m, "links and fabric are unknown"));
}

#[test]
fn nvml_errors_become_warnings() {
    let mut t = MemTree::new();
    pci(&mut t, "0000:18:00.0", "10DE:2330", "30200");
    let tree = Arc::new(t);
    let fail = RecordedNvml(Err("nvmlInit: driver/library version mismatch".into()));
    let host = Host::in_memory(tree.clone(), SkuRegistry::builtin()).with_nvml(Arc::new(fail));
    let m = discover(&host, &default_plugins());
    assert_eq!(m.accelerators.len(), 1);
    assert!(warned(&m, "version mismatch"));
    // Per-call errors, a bad bus id, a GPU NVML sees and PCI does not, a failed fabric.
    let bad_fabric =
        NvmlFabric { cluster_uuid: "00000000-0000-0000-0000-000000000000".into(), clique_id: 0, state: 3, status: 0 };
    let snap = NvmlSnapshot {
        driver_version: None,
        devices: vec![
            NvmlDevice {
                index: 0,
                pci_bus_id: "00000000:18:00.0".into(),
                fabric: Some(bad_fabric),
                ..Default::default()
            },
            NvmlDevice { index: 1, pci_bus_id: "garbage".into(), ..Default::default() },
            NvmlDevice {
                index: 2,
                pci_bus_id: "00000000:99:00.0".into(),
                name: Some("GPU X".into()),
                ..Default::default()
            },
        ],
        errors: vec!["nvmlDeviceGetSerial(device 0): Not Supported".into()],
    };
    let host = Host::in_memory(tree, SkuRegistry::builtin()).with_nvml(Arc::new(RecordedNvml(Ok(snap))));
    let m = discover(&host, &default_plugins());
    assert_eq!(m.accelerators.len(), 2);
    assert!(warned(&m, "Not Supported"));
    assert!(warned(&m, "unparsable PCI bus id"));
    assert!(warned(&m, "clique ignored"));
    assert!(m.domains.iter().all(|d| d.kind != accel_discover::families::nvidia::NVLINK_CLIQUE));
}

#[test]
fn nvlink_direct_and_unknown_remotes() {
    use accel_discover::families::nvidia::nvml::{NvmlLink, RemoteType};
    let mut t = MemTree::new();
    for bdf in ["0000:18:00.0", "0000:19:00.0", "0000:1a:00.0"] {
        pci(&mut t, bdf, "10DE:2321", "30200");
    }
    pci(&mut t, "0000:05:00.0", "10DE:22A3", "68000");
    let link = |link, remote: &str, remote_type| NvmlLink {
        link,
        active: true,
        version: Some(4),
        remote_pci: (!remote.is_empty()).then(|| remote.to_owned()),
        remote_type,
    };
    // GPUs 0 and 1: four direct links, reported from both ends (live NVML says "unknown" and
    // the plugin finds the GPU by bus id). GPU 2: two links to a class-0x0680 function, one to a
    // hidden remote; GPU 0 also has one link to that switch.
    let mut d0: Vec<NvmlLink> = (0..4).map(|l| link(l, "00000000:19:00.0", RemoteType::Unknown)).collect();
    d0.push(link(4, "00000000:05:00.0", RemoteType::Unknown));
    let d1: Vec<NvmlLink> = (0..4).map(|l| link(l, "00000000:18:00.0", RemoteType::Gpu)).collect();
    let d2 = vec![
        link(0, "00000000:05:00.0", RemoteType::Unknown),
        link(1, "00000000:05:00.0", RemoteType::Unknown),
        link(2, "", RemoteType::Unknown),
    ];
    let dev = |index, bus: &str, nvlinks| NvmlDevice { index, pci_bus_id: bus.into(), nvlinks, ..Default::default() };
    let snap = NvmlSnapshot {
        devices: vec![dev(0, "00000000:18:00.0", d0), dev(1, "00000000:19:00.0", d1), dev(2, "00000000:1A:00.0", d2)],
        ..Default::default()
    };
    let host = Host::in_memory(Arc::new(t), SkuRegistry::builtin()).with_nvml(Arc::new(RecordedNvml(Ok(snap))));
    let m = discover(&host, &default_plugins());
    let links: Vec<(&str, &str, &str, u32)> =
        m.links.iter().map(|l| (l.a.as_str(), l.b.as_str(), l.kind.as_str(), l.count)).collect();
    assert_eq!(
        links,
        [
            ("nvidia-0000:18:00.0", "nvidia-0000:19:00.0", "nvlink", 4),
            ("nvidia-0000:18:00.0", "nvidia-0000:1a:00.0", "nvswitch", 1),
        ]
    );
    assert_eq!(m.links[0].gbps, Some(200.0), "H100 NVL: 600 GB/s over 12 links");
}

/// Two H100s on PCI and NVML devices for them, the first with `mig0`, the second with `mig1`.
fn mig_machine(mig0: (Option<bool>, Vec<NvmlMigDevice>), mig1: (Option<bool>, Vec<NvmlMigDevice>)) -> Machine {
    let mut t = MemTree::new();
    pci(&mut t, "0000:18:00.0", "10DE:2330", "30200");
    pci(&mut t, "0000:2a:00.0", "10DE:2330", "30200");
    // The driver's record of each GPU's /dev/nvidia<minor>, as on a live host.
    for (minor, bdf) in ["0000:18:00.0", "0000:2a:00.0"].iter().enumerate() {
        t.add_file(format!("/proc/driver/nvidia/gpus/{bdf}/information"), format!("Device Minor: \t {minor}\n"));
    }
    let dev = |index, bus: &str, (mig_enabled, mig_devices): (Option<bool>, Vec<NvmlMigDevice>)| NvmlDevice {
        index,
        pci_bus_id: bus.into(),
        uuid: Some(format!("GPU-{index}")),
        memory_bytes: Some(85520809984),
        mig_enabled,
        mig_devices,
        ..Default::default()
    };
    let snap = NvmlSnapshot {
        devices: vec![dev(0, "00000000:18:00.0", mig0), dev(1, "00000000:2A:00.0", mig1)],
        ..Default::default()
    };
    let host = Host::in_memory(Arc::new(t), SkuRegistry::builtin()).with_nvml(Arc::new(RecordedNvml(Ok(snap))));
    discover(&host, &default_plugins())
}

fn mig(index: u32, uuid: Option<&str>, name: Option<&str>, memory: Option<u64>) -> NvmlMigDevice {
    NvmlMigDevice {
        index,
        uuid: uuid.map(Into::into),
        name: name.map(Into::into),
        memory_bytes: memory,
        ..Default::default()
    }
}

#[test]
fn mig_enabled_without_instances_is_the_whole_gpu() {
    let m = mig_machine((Some(true), vec![]), (Some(false), vec![]));
    assert_eq!(m.accelerators.len(), 2);
    assert!(m.accelerators.iter().all(|a| a.partition.is_none() && a.memory_bytes == Some(85520809984)));
    assert!(warned(&m, "GPU 0000:18:00.0 has MIG enabled but no MIG devices"));
    assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
}

#[test]
fn mig_garbage_is_skipped_with_warnings() {
    let good = mig(3, Some("MIG-abc"), Some("weird name"), None);
    let m = mig_machine(
        (
            Some(true),
            vec![
                mig(0, None, Some("x MIG 1g.10gb"), Some(1)),
                mig(1, Some(""), None, None),
                mig(2, Some("MIG-a,MIG-b"), None, None),
                good.clone(),
                mig(3, Some("MIG-dup"), None, None),
                mig(u32::MAX, Some("MIG-max"), Some("MIG "), Some(u64::MAX)),
            ],
        ),
        // MIG devices listed on a GPU whose MIG mode is off are ignored.
        (Some(false), vec![good]),
    );
    let ids: Vec<&str> = m.accelerators.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["nvidia-0000:18:00.0-mig3", "nvidia-0000:18:00.0-mig4294967295", "nvidia-0000:2a:00.0"]);
    let p = m.accelerators[0].partition.as_ref().unwrap();
    assert_eq!((p.physical_id.as_str(), p.index, p.mode.as_str()), ("nvidia-0000:18:00.0", 3, "MIG"));
    assert_eq!(m.accelerators[0].memory_bytes, None);
    assert_eq!(m.accelerators[1].memory_bytes, Some(u64::MAX));
    assert!(m.accelerators[2].partition.is_none());
    assert!(warned(&m, "MIG device 0 of GPU nvidia-0000:18:00.0: no usable UUID; skipped"));
    assert!(warned(&m, "MIG device 1 of GPU"));
    assert!(warned(&m, "MIG device 2 of GPU"));
    assert!(warned(&m, "MIG device 3 of GPU nvidia-0000:18:00.0: index listed twice"));
    assert!(warned(&m, "GPU 0000:2a:00.0 lists 1 MIG devices but MIG mode is not enabled"));
    // Only unusable MIG devices: the whole GPU, with a warning.
    let m = mig_machine((Some(true), vec![mig(0, None, None, None)]), (None, vec![]));
    assert_eq!(m.accelerators.len(), 2);
    assert!(warned(&m, "has MIG enabled but no MIG devices"));
}

#[test]
fn kfd_garbage() {
    let mut t = MemTree::new();
    let n = "/sys/class/kfd/kfd/topology/nodes";
    t.add_file(format!("{n}/0/properties"), "cpu_cores_count 8\nsimd_count 0\n");
    t.add_file(
        format!("{n}/1/properties"),
        "simd_count 104\ncpu_cores_count 0\ndevice_id 29711\nlocation_id 99999999\n",
    );
    t.add_file(
        format!("{n}/2/properties"),
        "simd_count 104\ndevice_id 29711\nlocation_id 17152\nunique_id -3\nhive_id banana\n",
    );
    t.add_file(format!("{n}/2/io_links/0/properties"), "type 11\nnode_to 77\n");
    t.add_file(format!("{n}/2/io_links/1/properties"), "");
    t.add_file(format!("{n}/3/properties"), "");
    let m = run(t);
    assert_eq!(m.accelerators.len(), 1, "{:?}", m.accelerators);
    assert!(m.links.is_empty());
    assert!(warned(&m, "do not form a PCI address"));
    assert!(warned(&m, "unparsable lines skipped"));
}

#[test]
fn neuron_and_gaudi_garbage() {
    let mut t = MemTree::new();
    pci(&mut t, "0000:10:00.0", "1D0F:7364", "88000");
    pci(&mut t, "0000:11:00.0", "1D0F:7364", "88000");
    let d = "/sys/devices/virtual/neuron_device";
    t.add_file(format!("{d}/neuron0/connected_devices"), "1, 9");
    t.add_file(format!("{d}/neuron0/core_count"), "eight");
    t.add_file(format!("{d}/neuron1/connected_devices"), "\u{1}\u{2}zz");
    pci(&mut t, "0000:20:00.0", "1DA3:1060", "120000");
    t.add_link("/sys/class/accel/accel0", "../../devices/pci0000:20/0000:20:00.0/accel/accel0");
    t.add_link("/sys/devices/pci0000:20/0000:20:00.0/accel/accel0/device", "../../../0000:20:00.0");
    t.add_file("/sys/devices/pci0000:20/0000:20:00.0/device_type", "GAUDI3");
    t.add_file("/sys/devices/pci0000:20/0000:20:00.0/module_id", "-1");
    let m = run(t);
    assert_eq!(m.accelerators.len(), 3);
    assert_eq!(m.links.len(), 1);
    assert!(warned(&m, "names device 9"));
    assert!(warned(&m, "unparsable value \"eight\""));
    assert!(warned(&m, "module_id"));
}

#[test]
fn intel_gpu_memory_per_tile_and_groq() {
    let mut t = MemTree::new();
    pci(&mut t, "0000:3a:00.0", "8086:0BD5", "38000");
    let dev = "/sys/devices/pci0000:3a/0000:3a:00.0";
    t.add_file(format!("{dev}/tile0/physical_vram_size_bytes"), "68719476736");
    t.add_file(format!("{dev}/tile1/physical_vram_size_bytes"), "68719476736");
    pci(&mut t, "0000:00:02.0", "8086:A780", "30000"); // integrated graphics: not an accelerator
    pci(&mut t, "0000:61:00.0", "1DE0:0000", "120000");
    let m = run(t);
    let ids: Vec<(&str, &str)> = m.accelerators.iter().map(|a| (a.vendor.as_str(), a.plugin.as_str())).collect();
    assert_eq!(ids, [("groq", "groq"), ("intel", "intel-gpu")]);
    assert_eq!(m.accelerators[1].memory_bytes, Some(2 * 68719476736));
    assert_eq!(m.accelerators[1].sku.as_deref(), Some("intel-max-1550"));
}

#[test]
fn tpu_bad_environment() {
    let mut t = MemTree::new();
    for i in 0..4 {
        pci(&mut t, &format!("0000:0{i}:04.0"), "1AE0:006F", "120000");
    }
    let mut env = std::collections::BTreeMap::new();
    env.insert("TPU_CHIPS_PER_HOST_BOUNDS".to_owned(), "9,9,9".to_owned());
    env.insert("TPU_WORKER_ID".to_owned(), "x;rm -rf".to_owned());
    let host = Host::in_memory(Arc::new(t), SkuRegistry::builtin()).with_env(env);
    let m = discover(&host, &default_plugins());
    assert_eq!(m.accelerators.len(), 4);
    assert_eq!(m.links.len(), 4, "bounds that do not fit fall back to 2x2");
    let labels = accel_discover::labels::ray_labels(&m).labels;
    assert_eq!(labels["accel.io/tpu-worker-id"], "x-rm--rf");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn vendor_files_never_panic(
        props in proptest::collection::vec(any::<u8>(), 0..200),
        nvml in ".{0,200}",
        neuron in ".{0,40}",
        labels in ".{0,120}",
        tpu in ".{0,120}",
        gaudi in ".{0,30}",
        tile in ".{0,30}",
    ) {
        let mut t = MemTree::new();
        pci(&mut t, "0000:18:00.0", "10DE:2330", "30200");
        pci(&mut t, "0000:43:00.0", "1002:740F", "38000");
        pci(&mut t, "0000:10:00.0", "1D0F:7364", "88000");
        pci(&mut t, "0000:05:04.0", "1AE0:006F", "120000");
        t.add_file("/sys/class/dmi/id/sys_vendor", "Google");
        let n = "/sys/class/kfd/kfd/topology/nodes";
        t.add_file(format!("{n}/1/properties"), props.clone());
        t.add_file(format!("{n}/1/io_links/0/properties"), props);
        t.add_file("/accel/nvml.json", nvml);
        t.add_file("/sys/devices/virtual/neuron_device/neuron0/connected_devices", neuron);
        t.add_file("/accel/k8s/labels", labels);
        t.add_file("/accel/gce/tpu-env", tpu);
        pci(&mut t, "0000:20:00.0", "1DA3:1060", "120000");
        t.add_link("/sys/class/accel/accel0", "../../devices/pci0000:20/0000:20:00.0/accel/accel0");
        t.add_link("/sys/devices/pci0000:20/0000:20:00.0/accel/accel0/device", "../../../0000:20:00.0");
        t.add_file("/sys/devices/pci0000:20/0000:20:00.0/device_type", gaudi.clone());
        t.add_file("/sys/devices/pci0000:20/0000:20:00.0/module_id", gaudi.clone());
        t.add_file("/sys/devices/pci0000:20/0000:20:00.0/pci_addr", gaudi);
        pci(&mut t, "0000:3a:00.0", "8086:0BD5", "38000");
        t.add_file("/sys/devices/pci0000:3a/0000:3a:00.0/tile0/physical_vram_size_bytes", tile.clone());
        t.add_file("/sys/devices/pci0000:3a/0000:3a:00.0/lmem_total_bytes", tile);
        let _ = run(t);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// A recording whose MIG fields hold anything: discovery and isolation never panic, ids stay
    /// unique, and every partition can be isolated by its UUID.
    #[test]
    fn mig_fields_never_panic(
        enabled in proptest::option::of(any::<bool>()),
        devices in proptest::collection::vec(
            (0u32..10, proptest::option::of(".{0,40}"), proptest::option::of(".{0,60}"),
             proptest::option::of(".{0,20}"), proptest::option::of(any::<u64>())),
            0..10,
        ),
    ) {
        let migs: Vec<NvmlMigDevice> = devices
            .into_iter()
            .map(|(index, uuid, name, profile, memory_bytes)| NvmlMigDevice {
                index, uuid, name, profile, memory_bytes, ..Default::default()
            })
            .collect();
        let m = mig_machine((enabled, migs), (Some(true), vec![]));
        let mut ids: Vec<&str> = m.accelerators.iter().map(|a| a.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), m.accelerators.len());
        let all: Vec<&str> = m.accelerators.iter().map(|a| a.id.as_str()).collect();
        let iso = accel_discover::isolate(&default_plugins(), &m, &all);
        let visible = &iso.env["CUDA_VISIBLE_DEVICES"];
        prop_assert_eq!(visible.split(',').count(), m.accelerators.len());
        // Recorded JSON with the same garbage loads or is refused, never panics.
        let json = serde_json::json!({"devices": [{"index": 0, "pci_bus_id": "0", "mig_enabled": enabled,
            "mig_devices": [{"index": 0, "uuid": visible, "profile": visible}]}]});
        prop_assert!(accel_discover::families::nvidia::nvml::parse_recorded(&json.to_string()).is_ok());
    }
}

/// A metadata server on 127.0.0.1 that answers every connection with `reply` (or never, when
/// `None`), for `connections` connections.
fn server(reply: Option<&'static [u8]>, connections: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(connections) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf);
            match reply {
                Some(r) => {
                    let _ = s.write_all(r);
                }
                None => held.push(s),
            }
        }
        std::thread::sleep(Duration::from_secs(5));
    });
    format!("http://{addr}")
}

/// A GCE-looking machine with a TPU, discovered with the network on and both endpoints at `url`.
fn gce(url: &str, budget: Duration) -> (Machine, Duration) {
    let mut t = MemTree::new();
    t.add_file("/sys/class/dmi/id/sys_vendor", "Google");
    t.add_file("/sys/class/dmi/id/product_name", "Google Compute Engine");
    pci(&mut t, "0000:05:04.0", "1AE0:006F", "120000");
    let net = NetConfig { enabled: true, gce_endpoint: url.into(), imds_endpoint: url.into(), budget };
    let host = Host::in_memory(Arc::new(t), SkuRegistry::builtin()).with_net(net);
    let start = Instant::now();
    let m = discover(&host, &default_plugins());
    (m, start.elapsed())
}

#[test]
fn metadata_good() {
    let url = server(Some(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nprojects/42/zones/us-east5-b"), 2);
    let (m, _) = gce(&url, Duration::from_secs(1));
    let zone = m.domains.iter().find(|d| d.kind == DomainKind::ZONE).expect("zone");
    assert_eq!(zone.name, "us-east5-b");
    assert_eq!(zone.source, "gce-metadata:instance/zone");
}

#[test]
fn metadata_500_and_garbage() {
    let url = server(Some(b"HTTP/1.1 500 Internal Server Error\r\n\r\noops"), 2);
    let (m, _) = gce(&url, Duration::from_secs(1));
    assert!(warned(&m, "HTTP status 500"), "{:?}", m.warnings);
    assert!(m.domains.is_empty());
    let url = server(Some(b"\x00\xffnot http at all"), 2);
    let (m, _) = gce(&url, Duration::from_secs(1));
    assert!(warned(&m, "malformed HTTP response"), "{:?}", m.warnings);
    let url = server(Some(b"HTTP/1.0 200 OK\r\n\r\n<html>zones</html> \x01"), 2);
    let (m, _) = gce(&url, Duration::from_secs(1));
    assert!(m.domains.iter().all(|d| d.kind != DomainKind::ZONE), "garbage zone accepted: {:?}", m.domains);
}

#[test]
fn metadata_that_never_answers_stays_within_budget() {
    let url = server(None, 4);
    let (m, took) = gce(&url, Duration::from_millis(300));
    assert!(took < Duration::from_millis(800), "took {took:?}");
    assert!(warned(&m, "time budget spent") || warned(&m, "cannot connect"), "{:?}", m.warnings);
}

#[test]
fn network_is_off_by_default() {
    let url = server(Some(b"HTTP/1.0 200 OK\r\n\r\nprojects/1/zones/z"), 1);
    let mut t = MemTree::new();
    t.add_file("/sys/class/dmi/id/sys_vendor", "Google");
    let host = Host::in_memory(Arc::new(t), SkuRegistry::builtin());
    assert!(!host.net().enabled);
    let _ = url;
    let m = discover(&host, &default_plugins());
    assert!(m.domains.is_empty() && m.warnings.is_empty(), "{m:?}");
}

#[test]
fn imds_zone_and_labels_file() {
    let url = server(Some(b"HTTP/1.0 200 OK\r\n\r\nus-west-2a"), 2);
    let mut t = MemTree::new();
    t.add_file("/sys/class/dmi/id/sys_vendor", "Amazon EC2");
    let dir = accel_testdata::TempDir::new("labels");
    let labels = dir.join("labels");
    std::fs::write(&labels, "accel.io/rack=\"r7\"\ntopology.k8s.aws/network-node-layer-3=\"nn-abc\"\n").unwrap();
    let net = NetConfig { enabled: true, imds_endpoint: url, ..Default::default() };
    let host = Host::in_memory(Arc::new(t), SkuRegistry::builtin()).with_net(net).with_labels_file(Some(labels));
    let m = discover(&host, &default_plugins());
    let _ = std::fs::remove_dir_all(&dir);
    let kinds: Vec<(DomainKind, &str, &str)> =
        m.domains.iter().map(|d| (d.kind, d.name.as_str(), d.source.as_str())).collect();
    assert_eq!(
        kinds,
        [
            (DomainKind::RACK, "r7", "k8s-label:accel.io/rack"),
            (DomainKind::NETWORK_NODE, "layer-3:nn-abc", "k8s-label:topology.k8s.aws/network-node-layer-3"),
            (DomainKind::ZONE, "us-west-2a", "ec2-imds:placement/availability-zone"),
        ]
    );
}

/// The dgx-h100 sample as a container that was given two of its eight GPUs: sysfs still lists
/// all eight, NVML (the recording, as `nvidia-smi` inside the container would see it) lists two.
fn dgx_container(keep: &[usize]) -> (Machine, Vec<NvmlDevice>) {
    let tree = accel_discover::samples::tree("dgx-h100").unwrap();
    let host = Host::in_memory(Arc::new(tree.clone()), SkuRegistry::builtin());
    let mut warnings = Vec::new();
    let text = host.read_text(&host.path("/accel/nvml.json"), 16 << 20, "test", &mut warnings).unwrap();
    let full = accel_discover::families::nvidia::nvml::parse_recorded(&text).unwrap();
    let seen: Vec<NvmlDevice> =
        keep.iter().enumerate().map(|(i, &k)| NvmlDevice { index: i as u32, ..full.devices[k].clone() }).collect();
    let snap = NvmlSnapshot { devices: seen.clone(), ..full };
    let host = host.with_nvml(Arc::new(RecordedNvml(Ok(snap))));
    (discover(&host, &default_plugins()), seen)
}

/// Regression: NVIDIA indices came from sysfs PCI order and isolation used them, so in a
/// container (sysfs: every host GPU; NVML and CUDA: a subset) `CUDA_VISIBLE_DEVICES` named the
/// wrong GPUs and Ray got resources for GPUs the process cannot use, with no warning.
#[test]
fn nvml_decides_which_gpus_exist_in_a_container() {
    let (m, seen) = dgx_container(&[2, 5]);
    let nvidia: Vec<&accel_model::Accelerator> = m.accelerators.iter().filter(|a| a.vendor == "nvidia").collect();
    assert_eq!(nvidia.len(), 2);
    for (acc, dev) in nvidia.iter().zip(&seen) {
        assert_eq!(acc.uuid, dev.uuid);
        assert_eq!(acc.index, dev.index, "indices follow what this process sees");
        assert_eq!(acc.pci.unwrap().to_string(), dev.pci_bus_id.to_ascii_lowercase()[4..]);
    }
    // The six others are named in one warning.
    let w = m.warnings.iter().find(|w| w.message.contains("not visible to NVML")).expect("warning");
    assert_eq!(w.message.matches("0000:").count(), 6, "{w}");
    // Isolation by UUID: right whatever CUDA's numbering inside the container.
    let ids: Vec<&str> = nvidia.iter().map(|a| a.id.as_str()).collect();
    let iso = accel_discover::isolate(&default_plugins(), &m, &ids[1..]);
    assert_eq!(iso.env["CUDA_VISIBLE_DEVICES"], seen[1].uuid.clone().unwrap());
    // Ray resources only for the two usable GPUs.
    let ray = accel_discover::labels::ray_labels(&m);
    let devs: Vec<&String> = ray.resources.keys().filter(|k| k.starts_with("accel_dev_nvidia_")).collect();
    assert_eq!(devs, ["accel_dev_nvidia_0", "accel_dev_nvidia_1"]);
    // The PCI tree still holds every GPU's function (topology stays whole).
    assert_eq!(
        m.pci
            .iter()
            .filter(|n| n.vendor == Some(accel_model::PciId(0x10de)) && n.class.is_some_and(|c| c.base() == 3))
            .count(),
        8
    );
}

/// NVML with every GPU: nothing dropped, no warning, UUIDs in CUDA_VISIBLE_DEVICES.
#[test]
fn nvml_with_every_gpu_drops_nothing() {
    let (m, seen) = dgx_container(&[0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(m.accelerators.len(), 8);
    assert!(!warned(&m, "not visible to NVML"));
    let ids: Vec<&str> = m.accelerators.iter().map(|a| a.id.as_str()).collect();
    let iso = accel_discover::isolate(&default_plugins(), &m, &ids[..2]);
    let want: Vec<String> = seen[..2].iter().map(|d| d.uuid.clone().unwrap()).collect();
    assert_eq!(iso.env["CUDA_VISIBLE_DEVICES"], want.join(","));
}

/// A sample with a `/dev` holding only `nodes`, as a container given some of the devices.
fn with_dev(sample: &str, nodes: &[&str]) -> Machine {
    let mut tree = accel_discover::samples::tree(sample).unwrap();
    tree.remove(std::path::Path::new("/dev"));
    tree.add_dir("/dev");
    for n in nodes {
        tree.add_file(*n, "");
    }
    run(tree)
}

/// The same rule for every vendor with a runtime device list: devices on PCI that the runtime
/// cannot open here are named in a warning. AMD (KFD + render nodes) reports only the usable
/// ones; TPU, Neuron and Gaudi warn.
#[test]
fn runtime_device_nodes_name_what_this_process_cannot_use() {
    let full = run(accel_discover::samples::tree("mi300x").unwrap());
    assert_eq!(full.accelerators.len(), 8);
    assert!(!warned(&full, "device node"), "no /dev in a capture: nothing checked");
    let m = with_dev("mi300x", &["/dev/dri/renderD128", "/dev/dri/renderD130"]);
    assert_eq!(m.accelerators.len(), 2, "{:#?}", m.warnings);
    assert_eq!(m.accelerators.iter().map(|a| a.index).collect::<Vec<_>>(), [0, 1]);
    let w = m.warnings.iter().find(|w| w.message.contains("/dev/dri/renderD*")).expect("amd warning");
    assert_eq!(w.message.matches("(renderD").count(), 6, "{w}");
    let ray = accel_discover::labels::ray_labels(&m);
    assert_eq!(ray.resources.keys().filter(|k| k.starts_with("accel_dev_amd_")).count(), 2);

    let trn = with_dev("trn2", &["/dev/neuron0", "/dev/neuron1"]);
    let w = trn.warnings.iter().find(|w| w.message.contains("/dev/neuron*")).expect("neuron warning");
    assert_eq!(w.message.matches(':').count() / 2, 14, "{w}");

    let gaudi = with_dev("gaudi3", &["/dev/accel/accel0", "/dev/hl1"]);
    let w = gaudi.warnings.iter().find(|w| w.message.contains("/dev/accel/accel*")).expect("gaudi warning");
    assert_eq!(w.message.matches("0000:").count(), 6, "{w}");

    let tpu = with_dev("tpu-v6e", &["/dev/vfio/0", "/dev/vfio/1", "/dev/vfio/vfio"]);
    assert!(warned(&tpu, "but 2 /dev/accel* or /dev/vfio/* device nodes"), "{:#?}", tpu.warnings);
    // Every node present: no warning.
    let all: Vec<String> = (0..8).map(|i| format!("/dev/vfio/{i}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    assert!(!warned(&with_dev("tpu-v6e", &all), "device nodes"));
}

/// Found by the mutation properties: two KFD nodes naming one PCI function with no partition
/// id (`unique_id`) to tell them apart gave two accelerators with one id; and a GPU that only
/// its runtime reports (here KFD, no PCI sysfs) had a PCI address missing from the tree.
#[test]
fn repeated_kfd_node_is_skipped_and_runtime_only_gpus_join_the_tree() {
    let mut t = MemTree::new();
    let node = "cpu_cores_count 0\nsimd_count 304\nsimd_per_cu 4\nlocation_id 17152\ndomain 0\ndevice_id 29857\n";
    t.add_file("/sys/class/kfd/kfd/topology/nodes/1/properties", node);
    t.add_file("/sys/class/kfd/kfd/topology/nodes/2/properties", node);
    let m = run(t);
    assert_eq!(m.accelerators.len(), 1, "{:#?}", m.accelerators);
    assert!(warned(&m, "repeats the PCI function of amd-0000:43:00.0"));
    assert!(m.pci_node("0000:43:00.0").is_some(), "runtime-only GPU in the PCI tree");
    assert!(warned(&m, "not in the PCI tree"));
}
