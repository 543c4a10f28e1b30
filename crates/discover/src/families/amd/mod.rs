//! The AMD plugin: GPUs from the KFD topology (`/sys/class/kfd/kfd/topology/nodes`), with xGMI
//! links from `io_links` (type 11), hives, and CPX/DPX partitions grouped by `unique_id`; VRAM
//! and partition modes from the amdgpu PCI sysfs files. A partition reports its own share: the
//! memory of its KFD node's banks (or the package's divided by the partition count) and its
//! node's compute units. GPUs on PCI that KFD does not list are
//! still reported, from PCI alone.

pub mod imported;
mod kinds;
pub mod metrics;
pub mod partition;

use std::collections::{BTreeMap, BTreeSet};

use accel_model::{Accelerator, Domain, Link, LinkKind, LinkKindInfo, Machine, PciAddr, Warning};

use crate::plugin::{isolate_by_index, link_gbps, pci_accelerator, pci_functions};
use crate::{Host, Isolation, Report, Vendor};

use kinds::SRC;
pub use kinds::{C2C, XGMI, XGMI_HIVE};

const KFD: &str = "/sys/class/kfd/kfd/topology/nodes";
/// `HSA_IOLINK_TYPE_XGMI` in `include/uapi/linux/kfd_sysfs.h`.
pub const IOLINK_XGMI: u64 = 11;
/// `HSA_IOLINK_TYPE_PCIEXPRESS`.
pub const IOLINK_PCIE: u64 = 2;

#[derive(Debug, Clone, Copy, Default)]
pub struct Amd;

/// Parses a KFD `properties` file: `key value` lines with unsigned decimal values. Lines that
/// do not fit are skipped (and counted, so the caller can warn).
pub fn parse_properties(text: &str) -> (BTreeMap<String, u64>, usize) {
    let mut out = BTreeMap::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next().and_then(|v| v.parse::<u64>().ok()), parts.next()) {
            (Some(k), Some(v), None) => {
                out.insert(k.to_owned(), v);
            }
            _ => bad += 1,
        }
    }
    (out, bad)
}

/// The PCI address KFD encodes in `domain` and `location_id` (`bus << 8 | device << 3 | function`).
pub fn kfd_pci_addr(domain: u64, location_id: u64) -> Option<PciAddr> {
    if domain > 0xffff_ffff || location_id > 0xffff {
        return None;
    }
    format!("{:04x}:{:02x}:{:02x}.{}", domain, location_id >> 8, (location_id >> 3) & 0x1f, location_id & 7)
        .parse()
        .ok()
}

#[derive(Debug)]
struct KfdNode {
    id: u32,
    props: BTreeMap<String, u64>,
    io_links: Vec<BTreeMap<String, u64>>,
    /// Sum of `mem_banks/*/properties` `size_in_bytes`: the memory this node (a partition) has.
    mem_bytes: Option<u64>,
}

impl KfdNode {
    fn get(&self, key: &str) -> u64 {
        self.props.get(key).copied().unwrap_or(0)
    }
    fn is_gpu(&self) -> bool {
        self.get("simd_count") > 0 && self.get("cpu_cores_count") == 0
    }
}

fn read_kfd(host: &Host, warnings: &mut Vec<Warning>) -> Vec<KfdNode> {
    let dir = host.path(KFD);
    let mut nodes = Vec::new();
    for name in host.list_dir(&dir, SRC, warnings) {
        let Ok(id) = name.parse::<u32>() else { continue };
        let node_dir = dir.join(&name);
        let path = node_dir.join("properties");
        let Some(text) = host.read_attr(&path, SRC, warnings) else { continue };
        let (props, bad) = parse_properties(&text);
        if bad > 0 {
            warnings.push(host.warning(SRC, &path, format!("{bad} unparsable lines skipped")));
        }
        let mut io_links = Vec::new();
        let links_dir = node_dir.join("io_links");
        for l in host.list_dir(&links_dir, SRC, warnings) {
            let p = links_dir.join(&l).join("properties");
            if let Some(text) = host.read_attr(&p, SRC, warnings) {
                io_links.push(parse_properties(&text).0);
            }
        }
        let banks_dir = node_dir.join("mem_banks");
        let mem_bytes = host
            .list_dir(&banks_dir, SRC, warnings)
            .iter()
            .filter_map(|b| host.read_attr(&banks_dir.join(b).join("properties"), SRC, warnings))
            .filter_map(|text| parse_properties(&text).0.get("size_in_bytes").copied())
            .fold(None, |sum: Option<u64>, b| Some(sum.unwrap_or(0).saturating_add(b)))
            .filter(|&b| b > 0);
        nodes.push(KfdNode { id, props, io_links, mem_bytes });
    }
    nodes.sort_by_key(|n| n.id);
    nodes
}

/// Where this family runs among the built-in plugins (lower first; the platform plugin runs
/// before all, the generic PCI fallback after all).
pub const ORDER: u32 = 20;

/// This family's plugin, for the built-in list (`plugin_list`).
pub fn plugin() -> Box<dyn Vendor> {
    Box::new(Amd)
}

impl Vendor for Amd {
    fn environment(&self, host: &Host, _machine: &accel_model::Machine) -> crate::plugin::Environment {
        crate::plugin::Environment {
            modules: ["amdgpu"].map(String::from).to_vec(),
            packages: ["rocm-core", "rccl"].map(String::from).to_vec(),
            facts: crate::plugin::read_fact(host, "runtime.rocm", "/opt/rocm/.info/version").into_iter().collect(),
            variables: vec!["RCCL_".into()],
        }
    }

    fn capture(&self, _host: &Host, _machine: &accel_model::Machine) -> Vec<crate::plugin::Keep> {
        vec![
            crate::plugin::Keep::Tree { path: "/sys/class/kfd/kfd/topology".into(), depth: 5 },
            crate::plugin::Keep::PciAttributes(
                ["mem_info_vram_total", "unique_id", "current_compute_partition", "current_memory_partition"]
                    .map(String::from)
                    .to_vec(),
            ),
        ]
    }

    fn metrics(&self, host: &Host) -> Option<Result<crate::readings::Metrics, crate::protocol::PluginError>> {
        crate::readings::Metrics::found(metrics::read(host)).map(Ok)
    }

    fn link_kinds(&self) -> Vec<LinkKindInfo> {
        vec![
            LinkKindInfo::new(XGMI, "XGMI", "AMD Infinity Fabric (xGMI)"),
            LinkKindInfo::new(C2C, "C2C", "chip-to-chip (two dies of one package)"),
        ]
    }

    fn id(&self) -> &'static str {
        "amd"
    }

    fn vocabulary(&self) -> accel_model::Vocabulary {
        let mut v = crate::plugin::vocabulary(
            "gpu",
            "GPU",
            Some("HIP_VISIBLE_DEVICES"),
            Some("GPU"),
            &["HIP_VISIBLE_DEVICES"],
            Some("amd.com/gpu"),
        );
        // The vendor's own DRA kubelet plugin publishes these GPUs as ResourceSlices.
        v.dra_driver = Some("gpu.amd.com".into());
        v
    }

    /// The names ROCm's node labeller (k8s-device-plugin) publishes.
    fn k8s_labels(&self, _machine: &Machine, devices: &[&Accelerator]) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        if let Some(first) = devices.first() {
            labels.insert(
                "amd.com/gpu.product-name".into(),
                crate::labels::label_value(&first.product.replace(' ', "_")),
            );
            if let Some(d) = first.pci_device {
                labels.insert("amd.com/gpu.device-id".into(), d.to_string());
            }
        }
        labels
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        let mut report = Report::default();
        let kfd = read_kfd(host, &mut report.warnings);
        let cpu_nodes: Vec<u32> = kfd.iter().filter(|n| n.get("cpu_cores_count") > 0).map(|n| n.id).collect();
        let gpu_nodes: Vec<&KfdNode> = kfd.iter().filter(|n| n.is_gpu()).collect();
        // Partitions of one physical GPU share unique_id (and the PCI device, function = partition).
        let mut group_size: BTreeMap<u64, u32> = BTreeMap::new();
        for n in &gpu_nodes {
            if n.get("unique_id") != 0 {
                *group_size.entry(n.get("unique_id")).or_default() += 1;
            }
        }
        // A package whose capture lacks some partition nodes still has as many partitions as its
        // siblings of the same device id (all GPUs of a node share the partition mode).
        let mut parts_of_device: BTreeMap<u64, u32> = BTreeMap::new();
        for n in &gpu_nodes {
            let parts = group_size.get(&n.get("unique_id")).copied().unwrap_or(1);
            let e = parts_of_device.entry(n.get("device_id")).or_default();
            *e = (*e).max(parts);
        }
        let mut by_node: BTreeMap<u32, String> = BTreeMap::new();
        let mut physical_of: BTreeMap<String, u64> = BTreeMap::new();
        let mut seen_part: BTreeMap<u64, u32> = BTreeMap::new();
        let mut claimed: BTreeSet<PciAddr> = BTreeSet::new();
        // ROCr uses a KFD node only if it can open its render node: in a container given some of
        // the host's GPUs, KFD lists them all but /dev/dri holds only those passed in.
        let check_dev = crate::plugin::has_dev(host);
        let mut hidden = Vec::new();
        // KFD's `hive_id`: the xGMI hive each GPU belongs to (0: none).
        let mut hives: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        // The HIP/ROCr device index: ROCr registers a GPU agent per KFD node in node-id order
        // (ROCR-Runtime amd_topology.cpp, `BuildTopology`: `for (node_id = 0; node_id <
        // props.NumNodes; node_id++)`), skipping those it cannot open, and HIP counts those
        // agents. So it is the rank among usable GPU nodes in KFD order, not in PCI order.
        let mut ordinal = 0u32;
        for n in &gpu_nodes {
            let minor = n.get("drm_render_minor");
            if check_dev && minor > 0 && !host.exists(&host.path(&render_node(minor))) {
                if let Some(addr) = kfd_pci_addr(n.get("domain"), n.get("location_id")) {
                    let physical = kfd_pci_addr(n.get("domain"), n.get("location_id") & !7).unwrap_or(addr);
                    claimed.insert(physical);
                    report.unusable.push(physical);
                    hidden.push(format!("{addr} (renderD{minor})"));
                }
                continue;
            }
            let hip_index = ordinal;
            ordinal += 1;
            // A properties file without `location_id` (truncated) must not become 0000:00:00.0.
            let located = n.props.contains_key("location_id");
            let Some(addr) = kfd_pci_addr(n.get("domain"), n.get("location_id")).filter(|_| located) else {
                report.warnings.push(Warning {
                    source: SRC.into(),
                    path: Some(format!("{KFD}/{}/properties", n.id)),
                    message: "domain/location_id do not form a PCI address; node skipped".into(),
                });
                continue;
            };
            let physical_addr: PciAddr = kfd_pci_addr(n.get("domain"), n.get("location_id") & !7).unwrap_or(addr);
            let unique = n.get("unique_id");
            let parts = group_size.get(&unique).copied().unwrap_or(1);
            let node = platform.pci_device(physical_addr).or_else(|| platform.pci_device(addr));
            let mut acc = match node {
                Some(node) => pci_accelerator(host, node, "amd", "amd"),
                None => {
                    let dev = accel_model::PciId((n.get("device_id") & 0xffff) as u16);
                    let mut fake =
                        accel_model::PciNode::new(physical_addr.to_string(), accel_model::PciNodeKind::Endpoint, None);
                    fake.vendor = Some(accel_model::PciId(0x1002));
                    fake.device = Some(dev);
                    pci_accelerator(host, &fake, "amd", "amd")
                }
            };
            // NUMA: the PCI node's, else the CPU node KFD links this GPU to over PCIe.
            if acc.numa_node.is_none() {
                acc.numa_node = n
                    .io_links
                    .iter()
                    .filter(|l| l.get("type") == Some(&IOLINK_PCIE))
                    .filter_map(|l| l.get("node_to").and_then(|&t| u32::try_from(t).ok()))
                    .find_map(|t| cpu_nodes.iter().position(|&c| c == t))
                    .and_then(|p| u32::try_from(p).ok())
                    .filter(|p| platform.numa_node(*p).is_some() || platform.numa_nodes.len() <= 1);
            }
            let sys = host.path(&format!("/sys/bus/pci/devices/{physical_addr}"));
            if let Some(vram) =
                host.parse_attr(&sys.join("mem_info_vram_total"), SRC, &mut report.warnings, |t| t.parse::<u64>().ok())
            {
                acc.memory_bytes = Some(vram);
            }
            if unique != 0 {
                acc.serial = Some(format!("{unique:016x}"));
            }
            if parts > 1 {
                let k = seen_part.entry(unique).or_default();
                let mode = host
                    .read_attr(&sys.join("current_compute_partition"), SRC, &mut report.warnings)
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| partition::mode_for(parts).into());
                // The partition's share, not the whole package: its own KFD node's memory banks
                // when they hold less than the package, else the package divided evenly; compute
                // units from its own node (SIMDs / SIMDs per CU).
                let share = parts.max(parts_of_device.get(&n.get("device_id")).copied().unwrap_or(1));
                let compute_units = (n.get("simd_per_cu") > 0)
                    .then(|| n.get("simd_count") / n.get("simd_per_cu"))
                    .and_then(|c| u32::try_from(c).ok());
                let part = partition::Part {
                    physical: physical_addr,
                    index: *k,
                    share,
                    mode,
                    own_memory: n.mem_bytes,
                    compute_units,
                };
                partition::make(&mut acc, &part);
                *k += 1;
            }
            acc.pci = Some(physical_addr);
            // ROCr opens this node's render node (each partition has its own); KFD names it.
            if minor > 0 {
                acc.vocabulary.device_files = vec![render_node(minor)];
            }
            partition::set_ordinal(&mut acc, hip_index);
            if report.accelerators.iter().any(|a| a.id == acc.id) {
                // Two KFD nodes naming one PCI function without a partition id to tell them apart.
                report.warnings.push(Warning {
                    source: SRC.into(),
                    path: Some(format!("{KFD}/{}/properties", n.id)),
                    message: format!("repeats the PCI function of {}; node skipped", acc.id),
                });
                continue;
            }
            let hive = n.get("hive_id");
            if hive != 0 {
                hives.entry(hive).or_default().push(acc.id.clone());
            }
            claimed.insert(physical_addr);
            by_node.insert(n.id, acc.id.clone());
            physical_of.insert(acc.id.clone(), unique);
            report.accelerators.push(acc);
        }
        report.warnings.extend(crate::plugin::not_visible(SRC, "/dev/dri/renderD*", &hidden, "they are not reported"));
        // A hive of more than one GPU is the xGMI fabric's domain (a scale-up domain; KFD gives
        // every hive a random 64-bit id, so two machines never share one by chance). xGMI
        // joins the GPUs of one node only: a hive never spans nodes (`nodes: 1`), so clones of
        // one capture in a cluster get hives of their own (`Domain::scoped_name`).
        for (hive, members) in hives.into_iter().filter(|(_, m)| m.len() > 1) {
            report.domains.push(Domain {
                kind: XGMI_HIVE,
                name: format!("{hive:016x}"),
                source: "kfd:hive_id".into(),
                accelerators: members,
                scale_up: true,
                nodes: Some(1),
            });
        }
        // xGMI links between different physical GPUs; between partitions of one package the
        // io_link is the package's own fabric, reported as a C2C link (as NVLink-C2C joins dies).
        let mut pairs: BTreeMap<(String, String), (LinkKind, Option<u64>)> = BTreeMap::new();
        for n in &gpu_nodes {
            let Some(from) = by_node.get(&n.id) else { continue };
            for l in n.io_links.iter().filter(|l| l.get("type") == Some(&IOLINK_XGMI)) {
                let Some(to) = l.get("node_to").and_then(|&t| u32::try_from(t).ok()).and_then(|t| by_node.get(&t))
                else {
                    continue;
                };
                if to == from {
                    continue;
                }
                let same_package = physical_of[from] != 0 && physical_of[from] == physical_of[to];
                let kind = if same_package { C2C } else { XGMI };
                let key = if from < to { (from.clone(), to.clone()) } else { (to.clone(), from.clone()) };
                let bw = l.get("max_bandwidth").copied().filter(|&b| b > 0);
                pairs.entry(key).or_insert((kind, bw));
            }
        }
        let accs: BTreeMap<&str, &Accelerator> = report.accelerators.iter().map(|a| (a.id.as_str(), a)).collect();
        let links: Vec<Link> = pairs
            .into_iter()
            .map(|((a, b), (kind, bw))| {
                // KFD's bandwidth is MB/s one way; the model wants GB/s both ways.
                let sku = || if kind == XGMI { link_gbps(host, accs[a.as_str()], 1) } else { None };
                let gbps = bw.map(|mbps| mbps as f64 * 2.0 / 1000.0).or_else(sku);
                Link::new(a, b, kind, 1, gbps)
            })
            .collect();
        report.links = links;
        // AMD GPUs on PCI without a KFD node (driver not loaded): report them from PCI.
        let mut missing = Vec::new();
        let mut from_pci = Vec::new();
        for node in pci_functions(platform, 0x1002, |c| c.base() == 0x03 || c.base() == 0x12) {
            let addr = node.address.expect("filtered");
            if claimed.contains(&addr) {
                continue;
            }
            let acc = pci_accelerator(host, node, "amd", "amd");
            // An imported topology's ROCm SMI device there says the runtime saw a GPU.
            let runtime = gpu_nodes.is_empty() && imported::has_runtime_device(host, addr);
            if acc.sku.is_some() || node.class.is_some_and(|c| c.base() == 0x12) || runtime {
                missing.push(addr.to_string());
                from_pci.push(acc);
            }
        }
        // Without KFD, what an imported topology recorded (runtime devices, partitions, xGMI).
        if gpu_nodes.is_empty() {
            from_pci = imported::apply(host, from_pci, &mut report);
        }
        report.accelerators.extend(from_pci);
        if !missing.is_empty() && !gpu_nodes.is_empty() {
            report.warnings.push(Warning {
                source: SRC.into(),
                path: Some(KFD.into()),
                message: format!("GPUs {} are on PCI but not in the KFD topology", missing.join(", ")),
            });
        }
        report
    }

    fn isolate(&self, devices: &[&Accelerator]) -> Isolation {
        // HIP_VISIBLE_DEVICES only: with ROCR_VISIBLE_DEVICES also set, HIP would count its indices
        // within the ROCr-visible set, not among all devices.
        isolate_by_index(devices, &["HIP_VISIBLE_DEVICES"])
    }
}

/// The DRM render node of KFD's `drm_render_minor`: the device file ROCr opens.
fn render_node(minor: u64) -> String {
    format!("/dev/dri/renderD{minor}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn properties_and_addresses() {
        let (p, bad) = parse_properties("hive_id 12609507387757274807\nlocation_id 17152\nname gfx\n\n");
        assert_eq!(p["hive_id"], 12609507387757274807);
        assert_eq!(bad, 1);
        assert_eq!(kfd_pci_addr(0, 17152), Some("0000:43:00.0".parse().unwrap()));
        assert_eq!(kfd_pci_addr(0, 1283), Some("0000:05:00.3".parse().unwrap()));
        assert_eq!(kfd_pci_addr(0, 1 << 20), None);
    }

    proptest! {
        #[test]
        fn parsers_never_panic(text in ".{0,80}", d: u64, l: u64) {
            let _ = parse_properties(&text);
            let _ = kfd_pci_addr(d, l);
        }
    }
}
