//! The NVIDIA plugin: GPUs from NVML (live or recorded) with memory, UUID, serial, NVLink
//! (direct, through NVSwitch, C2C), the NVLink fabric clique and MIG devices (each reported as a
//! partition of its GPU); without NVML, from procfs (`/proc/driver/nvidia/gpus/*/information`)
//! with a warning that links are unknown. When NVML answers, it decides which GPUs exist for
//! this process (a container sees a subset of the host's PCI GPUs); isolation names GPUs and MIG
//! devices by UUID.

pub mod imported;
mod kinds;
pub mod metrics;
pub mod nvml;
pub mod nvml_live;

use std::collections::{BTreeMap, BTreeSet};

use accel_model::{
    Accelerator, Domain, Link, LinkKindInfo, Machine, Partition, PciAddr, Warning,
};

use crate::plugin::{isolate_by_index, link_gbps, pci_accelerator, pci_functions};
use crate::{Host, Isolation, Report, Vendor};

use kinds::SRC;
pub use kinds::{NVLINK, NVLINK_CLIQUE, NVSWITCH};
pub use nvml::NvmlHost;
use nvml::{parse_recorded, NvmlDevice, NvmlSnapshot, RemoteType};

/// Where a capture keeps its NVML recording.
pub const RECORDED_NVML: &str = "/accel/nvml.json";

#[derive(Debug, Clone, Copy, Default)]
pub struct Nvidia;

/// NVIDIA GPUs on PCI: vendor 0x10de, display or 3D class (NVSwitch chips are class 0x0680).
fn is_gpu_class(class: accel_model::PciClass) -> bool {
    class.base() == 0x03
}

/// Where this family runs among the built-in plugins (lower first; the platform plugin runs
/// before all, the generic PCI fallback after all).
pub const ORDER: u32 = 10;

/// This family's plugin, for the built-in list (`plugin_list`).
pub fn plugin() -> Box<dyn Vendor> {
    Box::new(Nvidia)
}

/// The CUDA version in `/usr/local/cuda/version.json` (`{"cuda": {"version": "12.8.1"}}`).
fn json_cuda_version(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("cuda").and_then(|c| c.get("version")).and_then(|v| v.as_str()).map(str::to_owned)
}

impl Vendor for Nvidia {
    fn environment(&self, host: &Host, machine: &accel_model::Machine) -> crate::plugin::Environment {
        let mut facts = Vec::new();
        let mut warnings = Vec::new();
        let mut read = |path: &str| host.read_text(&host.path(path), 64 * 1024, "env", &mut warnings);
        if let Some(v) = read("/proc/driver/nvidia/version") {
            facts.push((
                "driver.nvidia.proc".into(),
                v.lines().next().unwrap_or("").to_owned(),
                "/proc/driver/nvidia/version".into(),
            ));
        }
        if let Some(v) = host.nvml().and_then(|n| n.snapshot().ok()).and_then(|s| s.driver_version) {
            facts.push(("driver.nvidia.nvml".into(), v, "nvml".into()));
        }
        if let Some(v) = read("/usr/local/cuda/version.json") {
            let v = json_cuda_version(&v).unwrap_or(v);
            facts.push(("runtime.cuda".into(), v, "/usr/local/cuda/version.json".into()));
        }
        for pci in machine.accelerators.iter().filter(|a| a.plugin == self.id()).filter_map(|a| a.pci) {
            let info = format!("/proc/driver/nvidia/gpus/{pci}/information");
            if let Some(v) =
                read(&info).and_then(|t| t.lines().find_map(|l| l.strip_prefix("Video BIOS:").map(str::to_owned)))
            {
                facts.push((format!("firmware.{pci}.vbios"), v, info));
            }
        }
        crate::plugin::Environment {
            modules: ["nvidia"].map(String::from).to_vec(),
            packages: ["cuda-runtime-12-8", "cuda-toolkit"].map(String::from).to_vec(),
            variables: ["CUDA_MODULE_LOADING", "CUDA_DEVICE_ORDER"].map(String::from).to_vec(),
            facts,
        }
    }

    fn capture(&self, host: &Host, _machine: &accel_model::Machine) -> Vec<crate::plugin::Keep> {
        let mut keep = vec![
            crate::plugin::Keep::EachEntry { dir: "/proc/driver/nvidia/gpus".into(), file: "information".into() },
            crate::plugin::Keep::EachEntry { dir: "/proc/driver/nvidia/gpus".into(), file: "numa_status".into() },
        ];
        // What NVML said, recorded for replay; a capture of a capture keeps the recording.
        match host.nvml().map(|n| n.snapshot()) {
            Some(Ok(snapshot)) => keep.extend(
                serde_json::to_string_pretty(&snapshot)
                    .ok()
                    .map(|json| crate::plugin::Keep::Record { path: RECORDED_NVML.into(), bytes: json.into_bytes() }),
            ),
            _ => keep.push(crate::plugin::Keep::File(RECORDED_NVML.into())),
        }
        // Its readings too (error counters, for the health verdict), likewise.
        match host.nvml().and_then(|n| n.metrics()) {
            Some(m) => {
                keep.extend(serde_json::to_string_pretty(&m).ok().map(|json| crate::plugin::Keep::Record {
                    path: metrics::RECORDED.into(),
                    bytes: json.into_bytes(),
                }))
            }
            None => keep.push(crate::plugin::Keep::File(metrics::RECORDED.into())),
        }
        keep
    }

    fn open_live(&self, host: Host) -> Host {
        match nvml_live::open() {
            Some(nvml) => host.with_nvml(nvml),
            None => host,
        }
    }

    fn metrics(&self, host: &Host) -> Option<Result<crate::readings::Metrics, crate::protocol::PluginError>> {
        metrics::read(host)
    }

    fn link_kinds(&self) -> Vec<LinkKindInfo> {
        vec![
            LinkKindInfo::new(NVLINK, "NV", "NVLink (direct)"),
            LinkKindInfo::new(NVSWITCH, "NV", "NVLink through NVSwitch"),
        ]
    }

    fn id(&self) -> &'static str {
        "nvidia"
    }

    fn vocabulary(&self) -> accel_model::Vocabulary {
        let mut v = crate::plugin::vocabulary(
            "gpu",
            "GPU",
            Some("CUDA_VISIBLE_DEVICES"),
            Some("GPU"),
            &["CUDA_VISIBLE_DEVICES"],
            Some("nvidia.com/gpu"),
        );
        // The vendor's own DRA kubelet plugin publishes these GPUs as ResourceSlices.
        v.dra_driver = Some("gpu.nvidia.com".into());
        v
    }

    /// GPU Feature Discovery's `nvidia.com/gpu.*` labels (values from accel's own data).
    fn k8s_labels(&self, machine: &Machine, devices: &[&Accelerator]) -> BTreeMap<String, String> {
        use crate::labels::label_value;
        let mut labels = BTreeMap::new();
        let Some(first) = devices.first() else { return labels };
        labels.insert("nvidia.com/gpu.count".into(), devices.len().to_string());
        labels.insert("nvidia.com/gpu.product".into(), label_value(&first.product.replace(' ', "-")));
        if let Some(m) = first.memory_bytes {
            labels.insert("nvidia.com/gpu.memory".into(), (m >> 20).to_string());
        }
        if let Some(f) = &first.family {
            labels.insert("nvidia.com/gpu.family".into(), label_value(f));
        }
        if let Some(p) = &machine.host.product_name {
            labels.insert("nvidia.com/gpu.machine".into(), label_value(p));
        }
        // GFD sets the clique only when every fabric-attached GPU agrees.
        let cliques: Vec<&str> =
            machine.domains.iter().filter(|d| d.kind == NVLINK_CLIQUE).map(|d| d.name.as_str()).collect();
        if let [one] = cliques.as_slice() {
            labels.insert("nvidia.com/gpu.clique".into(), label_value(one));
        }
        labels
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        let mut report = Report::default();
        let mut gpus: BTreeMap<PciAddr, Accelerator> = pci_functions(platform, 0x10de, is_gpu_class)
            .map(|n| (n.address.expect("filtered"), pci_accelerator(host, n, "nvidia", "nvidia")))
            .collect();
        // GPU memory the driver exposes as a NUMA node (`numa_status`, POWER9 and Grace): the
        // driver's listing also names GPUs whose PCI ids a capture stripped.
        let memory_nodes = read_numa_status(host, &mut report.warnings);
        for node in platform.pci.iter().filter(|n| n.vendor.is_none() && n.class.is_some_and(is_gpu_class)) {
            if let Some(addr) = node.address.filter(|a| memory_nodes.contains_key(a)) {
                let mut acc = pci_accelerator(host, node, "nvidia", "nvidia");
                acc.product = "NVIDIA GPU (PCI ids unreadable)".into();
                gpus.entry(addr).or_insert(acc);
            }
        }
        for (addr, node) in &memory_nodes {
            let Some(gpu) = gpus.get_mut(addr) else { continue };
            match platform.numa_node(*node) {
                Some(n) if n.cpus.is_empty() => gpu.memory_numa_node = Some(*node),
                _ => report.warnings.push(Warning {
                    source: SRC.into(),
                    path: Some(format!("/proc/driver/nvidia/gpus/{addr}/numa_status")),
                    message: format!("names NUMA node {node}, which is not a memory-only node here; ignored"),
                }),
            }
        }
        // The driver's /dev/nvidia<minor>, as procfs records it for each GPU (`Device Minor:`);
        // PCI order only where it records none. Set before NVML so MIG partitions share their
        // GPU's file.
        let proc_info = read_procfs(host, &mut report.warnings);
        assign_device_files(&proc_info, &mut gpus, &mut report.warnings);
        let snapshot = match host.nvml() {
            Some(source) => source.snapshot(),
            None => match host.read_text(&host.path(RECORDED_NVML), 16 << 20, SRC, &mut report.warnings) {
                Some(text) => parse_recorded(&text),
                None => Err("NVML is not available".to_owned()),
            },
        };
        let mut partitions = BTreeMap::new();
        match snapshot {
            Ok(snapshot) => {
                partitions = apply_nvml(host, platform, &snapshot, &mut gpus, &mut report);
                report.unusable = keep_visible(&snapshot, &mut gpus, &mut report.warnings);
            }
            Err(e) => {
                procfs(&proc_info, &mut gpus);
                let found = imported::apply(host, platform, &mut gpus, &mut report);
                if !gpus.is_empty() && !found.links_known {
                    let message = match found.source {
                        Some(tool) => format!(
                            "{tool} recorded no NVLink for these GPUs (no {} matrix or link element: taken \
                             without NVML); NVLink links and fabric are unknown",
                            imported::MATRIX
                        ),
                        None => format!("{e}; NVLink links and fabric are unknown (read from procfs only)"),
                    };
                    report.warnings.push(Warning { source: SRC.into(), path: None, message });
                }
            }
        }
        // A GPU split into MIG devices is reported as its partitions instead of as a whole.
        for (addr, gpu) in gpus {
            match partitions.remove(&addr) {
                Some(parts) => report.accelerators.extend(parts),
                None => report.accelerators.push(gpu),
            }
        }
        report
    }

    fn isolate(&self, devices: &[&Accelerator]) -> Isolation {
        // By UUID (`GPU-...`, and `MIG-...`, which CUDA takes only by UUID): a UUID names the
        // same device whatever subset of the host's GPUs this process sees (a container), where
        // an index would not. Falls back to NVML's index where a UUID is unknown (set at
        // discovery), else the position in PCI order (procfs without a UUID), with CUDA told to
        // count in PCI bus order as NVML does.
        let mut isolation = if devices.iter().any(|d| d.partition.is_some() || d.uuid.is_some()) {
            let list: Vec<String> = devices
                .iter()
                .flat_map(|d| d.uuid.clone().map_or_else(|| crate::plugin::isolation_values(d), |u| vec![u]))
                .collect();
            Isolation { env: [("CUDA_VISIBLE_DEVICES".to_owned(), list.join(","))].into(), warnings: Vec::new() }
        } else {
            isolate_by_index(devices, &["CUDA_VISIBLE_DEVICES"])
        };
        // Our indices are PCI bus order (as NVML's); CUDA's default order is "fastest first".
        isolation.env.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
        isolation
    }
}

/// NVML decides which GPUs exist for this process: in a container, sysfs lists every GPU of
/// the host while NVML (and CUDA) see only those passed in. GPUs on PCI that NVML does not list
/// are dropped, with a warning naming them, so no index, Ray resource or visibility value points
/// at a device this process cannot use. A snapshot with no devices and errors is a failed NVML,
/// not an empty machine: PCI stands, with the errors as warnings.
fn keep_visible(
    snap: &NvmlSnapshot,
    gpus: &mut BTreeMap<PciAddr, Accelerator>,
    warnings: &mut Vec<Warning>,
) -> Vec<PciAddr> {
    if snap.devices.is_empty() && !snap.errors.is_empty() {
        return Vec::new();
    }
    let listed: BTreeSet<PciAddr> = snap.devices.iter().filter_map(|d| parse_bus_id(&d.pci_bus_id)).collect();
    let hidden: Vec<PciAddr> = gpus.keys().filter(|a| !listed.contains(a)).copied().collect();
    if hidden.is_empty() {
        return hidden;
    }
    for addr in &hidden {
        gpus.remove(addr);
    }
    let names: Vec<String> = hidden.iter().map(ToString::to_string).collect();
    warnings.push(Warning {
        source: SRC.into(),
        path: None,
        message: format!(
            "GPUs {} are on PCI but not visible to NVML (not passed into this container?); they are not reported",
            names.join(", ")
        ),
    });
    hidden
}

fn parse_bus_id(text: &str) -> Option<PciAddr> {
    text.trim().to_ascii_lowercase().parse().ok()
}

/// Applies the snapshot to the GPUs found on PCI (adding any NVML lists that PCI does not), and
/// returns the MIG partitions of every GPU that is split into MIG devices.
fn apply_nvml(
    host: &Host,
    platform: &Machine,
    snap: &NvmlSnapshot,
    gpus: &mut BTreeMap<PciAddr, Accelerator>,
    report: &mut Report,
) -> BTreeMap<PciAddr, Vec<Accelerator>> {
    let mut partitions: BTreeMap<PciAddr, Vec<Accelerator>> = BTreeMap::new();
    for e in &snap.errors {
        report.warnings.push(Warning { source: SRC.into(), path: None, message: format!("NVML: {e}") });
    }
    // GPU bus id -> accelerator id, for every device NVML lists.
    let mut by_pci: BTreeMap<PciAddr, String> = BTreeMap::new();
    for dev in &snap.devices {
        let Some(addr) = parse_bus_id(&dev.pci_bus_id) else {
            report.warnings.push(Warning {
                source: SRC.into(),
                path: None,
                message: format!("NVML device {} has an unparsable PCI bus id {:?}", dev.index, dev.pci_bus_id),
            });
            continue;
        };
        let acc = gpus.entry(addr).or_insert_with(|| {
            // NVML sees a GPU the PCI tree does not (a container with a partial /sys).
            let node = accel_model::PciNode::new(addr.to_string(), accel_model::PciNodeKind::Endpoint, None);
            let mut a = pci_accelerator(host, &node, "nvidia", "nvidia");
            a.product = dev.name.clone().unwrap_or_else(|| "NVIDIA GPU".into());
            a
        });
        if acc.sku.is_none() {
            if let Some(name) = &dev.name {
                acc.product = name.clone();
            }
        }
        acc.uuid = dev.uuid.clone().or(acc.uuid.take());
        if acc.uuid.is_none() {
            // No UUID to select it by: NVML's own index, which CUDA (in PCI bus order) and
            // nvidia-smi share, never our position in the list.
            acc.vocabulary.isolation = vec![dev.index.to_string()];
        }
        acc.serial = dev.serial.clone().filter(|s| !s.is_empty() && s != "N/A");
        if dev.memory_bytes.is_some() {
            acc.memory_bytes = dev.memory_bytes;
        }
        let parent = acc.clone();
        by_pci.insert(addr, acc.id.clone());
        let warn = |message: String| Warning { source: SRC.into(), path: None, message };
        if dev.mig_enabled != Some(true) {
            if !dev.mig_devices.is_empty() {
                report.warnings.push(warn(format!(
                    "GPU {addr} lists {} MIG devices but MIG mode is not enabled; they are ignored",
                    dev.mig_devices.len()
                )));
            }
            continue;
        }
        let parts = mig_partitions(&parent, dev, &mut report.warnings);
        if parts.is_empty() {
            report
                .warnings
                .push(warn(format!("GPU {addr} has MIG enabled but no MIG devices; it is reported as the whole GPU")));
        } else {
            partitions.insert(addr, parts);
        }
    }
    // NVLink: direct GPU links counted per peer, NVSwitch links per GPU.
    let mut direct: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut switch_links: BTreeMap<String, u32> = BTreeMap::new();
    for dev in &snap.devices {
        let Some(me) = parse_bus_id(&dev.pci_bus_id).and_then(|a| by_pci.get(&a)) else { continue };
        for link in dev.nvlinks.iter().filter(|l| l.active) {
            let remote = link.remote_pci.as_deref().and_then(parse_bus_id);
            let remote_gpu = remote.and_then(|r| by_pci.get(&r));
            match (link.remote_type, remote_gpu) {
                (RemoteType::Gpu, Some(peer)) | (RemoteType::Unknown, Some(peer)) if peer != me => {
                    let key = if me < peer { (me.clone(), peer.clone()) } else { (peer.clone(), me.clone()) };
                    *direct.entry(key).or_default() += 1;
                }
                (RemoteType::Switch, _) => *switch_links.entry(me.clone()).or_default() += 1,
                // Unknown remotes are classified as NCCL does: a hidden remote (empty bus id, as in
                // VMs) or a PCI function of class 0x0680 (bridge, other) is an NVSwitch.
                (RemoteType::Unknown, None) => {
                    let class = remote.and_then(|r| platform.pci_device(r)).and_then(|n| n.class);
                    if remote.is_none() || class.is_some_and(|c| c.base_sub() == 0x0680) {
                        *switch_links.entry(me.clone()).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
    }
    let accs: BTreeMap<&str, &Accelerator> = gpus.values().map(|a| (a.id.as_str(), a)).collect();
    let mut links = Vec::new();
    for ((a, b), count) in direct {
        // Both ends report the link: each physical link was counted twice.
        let count = count.div_ceil(2);
        let gbps = accs.get(a.as_str()).and_then(|acc| link_gbps(host, acc, count));
        links.push(Link::new(a, b, NVLINK, count, gbps));
    }
    let switched: Vec<(&String, &u32)> = switch_links.iter().collect();
    for (i, (a, ca)) in switched.iter().enumerate() {
        for (b, cb) in &switched[i + 1..] {
            let count = (**ca).min(**cb);
            let gbps = accs.get(a.as_str()).and_then(|acc| link_gbps(host, acc, count));
            links.push(Link::new((*a).clone(), (*b).clone(), NVSWITCH, count, gbps));
        }
    }
    // MIG devices have no GPU-to-GPU peer access (neither NVLink nor PCIe, NVIDIA's MIG user
    // guide): a GPU split into MIG devices keeps no scale-up link and joins no NVLink clique.
    let split: BTreeSet<&str> = partitions.keys().filter_map(|addr| by_pci.get(addr)).map(String::as_str).collect();
    links.retain(|l| !split.contains(l.a.as_str()) && !split.contains(l.b.as_str()));
    report.links.extend(links);
    // The NVLink clique: GPUs whose fabric registration completed, grouped by cluster and clique.
    let mut cliques: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for dev in &snap.devices {
        let (Some(fabric), Some(id)) = (&dev.fabric, parse_bus_id(&dev.pci_bus_id).and_then(|a| by_pci.get(&a))) else {
            continue;
        };
        match fabric.clique() {
            Some(_) if split.contains(id.as_str()) => {}
            Some(name) => {
                cliques.entry(name).or_default().insert(id.clone());
            }
            None if fabric.state == nvml::NvmlFabric::STATE_COMPLETED => report.warnings.push(Warning {
                source: SRC.into(),
                path: None,
                message: format!(
                    "GPU {id}: NVLink fabric registration completed with status {} and cluster {:?}; clique ignored",
                    fabric.status, fabric.cluster_uuid
                ),
            }),
            None => {}
        }
    }
    for (name, members) in cliques {
        report.domains.push(Domain {
            kind: NVLINK_CLIQUE,
            name,
            source: "nvml-fabric".into(),
            accelerators: members.into_iter().collect(),
            scale_up: true,
            // An NVL72 clique holds 1 to 18 trays: the cluster says how many share this one.
            nodes: None,
        });
    }
    partitions
}

/// The MIG devices of one GPU as partitions of it: same PCI address, NUMA node, SKU and serial
/// as the parent; their own id (`<parent id>-mig<N>`), UUID and memory. A MIG device without a
/// usable UUID cannot be selected (CUDA takes MIG devices by UUID only) and is skipped with a
/// warning, as is a repeated index.
fn mig_partitions(parent: &Accelerator, dev: &NvmlDevice, warnings: &mut Vec<Warning>) -> Vec<Accelerator> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for mig in &dev.mig_devices {
        let mut warn = |what: &str| {
            warnings.push(Warning {
                source: SRC.into(),
                path: None,
                message: format!("MIG device {} of GPU {}: {what}; skipped", mig.index, parent.id),
            });
        };
        let usable = |u: &&str| {
            !u.is_empty() && u.len() <= 128 && !u.chars().any(|c| c == ',' || c.is_whitespace() || c.is_control())
        };
        let Some(uuid) = mig.uuid.as_deref().map(str::trim).filter(usable) else {
            warn("no usable UUID");
            continue;
        };
        if !seen.insert(mig.index) {
            warn("index listed twice");
            continue;
        }
        let mut acc = parent.clone();
        acc.id = format!("{}-mig{}", parent.id, mig.index);
        acc.uuid = Some(uuid.to_owned());
        // Selected by its own UUID, never by the parent's index.
        acc.vocabulary.isolation.clear();
        acc.memory_bytes = mig.memory_bytes;
        acc.partition = Some(Partition {
            physical_id: parent.id.clone(),
            index: mig.index,
            mode: mig.profile_name().map_or_else(|| "MIG".to_owned(), |p| format!("MIG {p}")),
            compute_units: None,
            // CUDA selects a MIG device by UUID; it is not a CUDA ordinal.
            own_ordinal: false,
        });
        out.push(acc);
    }
    out
}

/// What `/proc/driver/nvidia/gpus/<bdf>/information` says: `Model:`, `GPU UUID:`, `Bus Location:`,
/// `Device Minor:`. The driver writes each line as `seq_printf(s, "Device Minor: \t %u\n",
/// nvl->minor_num)` (NVIDIA/open-gpu-kernel-modules, kernel-open/nvidia/nv-procfs.c,
/// `nv_procfs_read_gpu_info`); the minor is the N of `/dev/nvidia<N>`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProcInfo {
    pub model: Option<String>,
    pub uuid: Option<String>,
    pub bus: Option<PciAddr>,
    /// `Device Minor:` as a number, `Err(text)` when the line is there but not a number.
    pub minor: Option<Result<u32, String>>,
}

pub fn parse_proc_information(text: &str) -> ProcInfo {
    let mut info = ProcInfo::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match key.trim() {
            "Model" if !value.is_empty() => info.model = Some(value.to_owned()),
            "GPU UUID" if value.starts_with("GPU-") => info.uuid = Some(value.to_owned()),
            "Bus Location" => info.bus = parse_bus_id(value),
            // The driver's minors are below 255 (`/dev/nvidia255` is nvidiactl).
            "Device Minor" => {
                info.minor = Some(value.parse::<u32>().ok().filter(|&m| m < 255).ok_or_else(|| value.to_owned()))
            }
            _ => {}
        }
    }
    info
}

/// Every GPU's procfs `information`, by PCI address, with the file it came from.
fn read_procfs(host: &Host, warnings: &mut Vec<Warning>) -> BTreeMap<PciAddr, (ProcInfo, String)> {
    let mut out = BTreeMap::new();
    let dir = host.path("/proc/driver/nvidia/gpus");
    for name in host.list_dir(&dir, SRC, warnings) {
        let path = dir.join(&name).join("information");
        let Some(text) = host.read_attr(&path, SRC, warnings) else { continue };
        let info = parse_proc_information(&text);
        let Some(addr) = info.bus.or_else(|| parse_bus_id(&name)) else {
            warnings.push(host.warning(SRC, &path, "names no PCI address (Bus Location); ignored".into()));
            continue;
        };
        out.insert(addr, (info, host.display(&path)));
    }
    out
}

/// The NUMA node of each GPU's memory, from `/proc/driver/nvidia/gpus/<bdf>/numa_status`
/// (`Node:      255`; the driver writes it where GPU memory is a NUMA node, as on POWER9 and
/// Grace; hwloc's Linux backend reads the same line).
fn read_numa_status(host: &Host, warnings: &mut Vec<Warning>) -> BTreeMap<PciAddr, u32> {
    let dir = host.path("/proc/driver/nvidia/gpus");
    let mut out = BTreeMap::new();
    for name in host.list_dir(&dir, SRC, warnings) {
        let path = dir.join(&name).join("numa_status");
        let Some(text) = host.read_attr(&path, SRC, warnings) else { continue };
        let node = text.lines().find_map(|l| l.trim().strip_prefix("Node:")).and_then(|v| v.trim().parse::<u32>().ok());
        match (parse_bus_id(&name), node) {
            (Some(addr), Some(node)) => {
                out.insert(addr, node);
            }
            _ => warnings.push(host.warning(SRC, &path, "no `Node:` line for a PCI address; ignored".into())),
        }
    }
    out
}

/// Each GPU's `/dev/nvidia<minor>` from its procfs `Device Minor:`. A GPU whose file is missing,
/// unparsable or repeats another GPU's minor falls back to its position in PCI order (the
/// driver's probe order on a host that hides none), with a warning naming the file and saying
/// so; a fallback that would collide with a recorded minor gets no device file.
fn assign_device_files(
    proc_info: &BTreeMap<PciAddr, (ProcInfo, String)>,
    gpus: &mut BTreeMap<PciAddr, Accelerator>,
    warnings: &mut Vec<Warning>,
) {
    let warn = |path: Option<String>, message: String| Warning { source: SRC.into(), path, message };
    let mut recorded: BTreeMap<PciAddr, u32> = BTreeMap::new();
    let mut owners: BTreeMap<u32, Vec<PciAddr>> = BTreeMap::new();
    for addr in gpus.keys() {
        match proc_info.get(addr) {
            Some((ProcInfo { minor: Some(Ok(m)), .. }, _)) => {
                recorded.insert(*addr, *m);
                owners.entry(*m).or_default().push(*addr);
            }
            Some((ProcInfo { minor: Some(Err(text)), .. }, path)) => {
                let shown: String = text.chars().take(40).collect();
                warnings.push(warn(Some(path.clone()), format!("unparsable Device Minor {shown:?}")));
            }
            Some((_, path)) => warnings.push(warn(Some(path.clone()), "has no Device Minor line".into())),
            None => {}
        }
    }
    for (minor, addrs) in owners.iter().filter(|(_, a)| a.len() > 1) {
        let names: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        let paths: Vec<&str> = addrs.iter().filter_map(|a| proc_info.get(a)).map(|(_, p)| p.as_str()).collect();
        warnings.push(warn(
            paths.first().map(|p| (*p).to_owned()),
            format!(
                "GPUs {} all record Device Minor {minor} ({}); none of them is trusted",
                names.join(", "),
                paths.join(", ")
            ),
        ));
        for a in addrs {
            recorded.remove(a);
        }
    }
    let taken: BTreeSet<u32> = recorded.values().copied().collect();
    let mut assumed = Vec::new();
    let mut unknown = Vec::new();
    for (position, (addr, gpu)) in gpus.iter_mut().enumerate() {
        let minor = match recorded.get(addr) {
            Some(m) => *m,
            None => {
                let Ok(p) = u32::try_from(position) else { continue };
                if taken.contains(&p) {
                    unknown.push(addr.to_string());
                    continue;
                }
                assumed.push(addr.to_string());
                p
            }
        };
        gpu.vocabulary.device_files = vec![format!("/dev/nvidia{minor}")];
    }
    if !assumed.is_empty() {
        warnings.push(warn(
            Some("/proc/driver/nvidia/gpus".into()),
            format!(
                "no usable Device Minor for GPUs {} (/proc/driver/nvidia/gpus/<bdf>/information missing or \
                 unusable): their /dev/nvidia<N> is assumed from PCI order",
                assumed.join(", ")
            ),
        ));
    }
    if !unknown.is_empty() {
        warnings.push(warn(
            Some("/proc/driver/nvidia/gpus".into()),
            format!(
                "no usable Device Minor for GPUs {}, and PCI order names another GPU's; no device file",
                unknown.join(", ")
            ),
        ));
    }
}

/// Without NVML: UUID and model from procfs.
fn procfs(proc_info: &BTreeMap<PciAddr, (ProcInfo, String)>, gpus: &mut BTreeMap<PciAddr, Accelerator>) {
    for (addr, (info, _)) in proc_info {
        if let Some(acc) = gpus.get_mut(addr) {
            acc.uuid.clone_from(&info.uuid);
            if acc.sku.is_none() {
                if let Some(model) = &info.model {
                    acc.product.clone_from(model);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_version_from_its_json() {
        assert_eq!(
            json_cuda_version(r#"{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}}"#).as_deref(),
            Some("12.8.1")
        );
        assert_eq!(json_cuda_version("12.8"), None);
    }
    use proptest::prelude::*;

    #[test]
    fn proc_information() {
        let text =
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   0\nGPU UUID: \t GPU-9e8f\nBus Location: \t 0000:1b:00.0\n";
        let info = parse_proc_information(text);
        assert_eq!(info.model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(info.uuid.as_deref(), Some("GPU-9e8f"));
        assert_eq!(info.bus, Some("0000:1b:00.0".parse().unwrap()));
        assert_eq!(info.minor, None);
        assert_eq!(parse_proc_information("garbage"), ProcInfo::default());
        assert_eq!(parse_proc_information("Device Minor: \t 3\n").minor, Some(Ok(3)));
        assert_eq!(parse_proc_information("Device Minor: x\n").minor, Some(Err("x".into())));
        assert_eq!(parse_proc_information("Device Minor: 255\n").minor, Some(Err("255".into())));
        assert_eq!(parse_bus_id("00000000:1B:00.0"), Some("0000:1b:00.0".parse().unwrap()));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(text in ".{0,80}") {
            let _ = parse_proc_information(&text);
            let _ = parse_bus_id(&text);
        }
    }
}
