//! What an imported topology (`accel import hwloc`, `accel import nccl`) recorded about NVIDIA
//! GPUs, read from the generic OS-device file ([`crate::osdevs`]) when no NVML answers: the
//! runtime devices under each GPU (hwloc's `nvml<N>` and `cuda<N>` OS devices with their UUID,
//! serial and memory; NCCL's `<gpu dev=>`), and NVLink from hwloc's `NVLinkBandwidth` matrix or
//! NCCL's `<nvlink>` elements.
//!
//! Units, as hwloc 3.0 documents them (doc/hwloc.doxy, "Distances", open-mpi/hwloc @ 3b37b024):
//! `NVLinkBandwidth` holds *unidirectional* bandwidths in MB/s, 0 where two objects have no
//! direct NVLink, several links aggregated, the diagonal set artificially high. GPUs come first
//! (NVML OS devices), then non-GPU objects: a `Package` (a POWER CPU's NVLink port) or a
//! `PCIDev` (an NVSwitch). hwloc reports only GPU-to-switch links, so GPUs that reach switches
//! are joined through the switch fabric, as NVML's own links are read. The link count is the
//! bandwidth divided by one link's rate from the GPU's SKU; where the SKU gives none, the count
//! is 1 and a warning says so.

use std::collections::{BTreeMap, BTreeSet};

use accel_model::{Accelerator, Link, Machine, PciAddr, Warning};

use crate::osdevs::{self, OsDevFile};
use crate::{Host, Report};

use super::kinds::{NVLINK, NVSWITCH, SRC};

/// The matrix hwloc's NVML backend writes.
pub const MATRIX: &str = "NVLinkBandwidth";
/// NCCL's link elements under a `<gpu>`.
const NVLINK_ELEMENT: &str = "nvlink";
const C2C_ELEMENT: &str = "c2c";

/// What the imported file said about links.
#[derive(Debug, Default)]
pub struct Found {
    /// The tool that wrote the file (`hwloc XML 2.0`), when there was one.
    pub source: Option<String>,
    /// Whether it carried NVLink evidence (a matrix or link elements), even if it shows no link.
    pub links_known: bool,
}

/// Applies the file's runtime devices and links to the GPUs found on PCI.
pub fn apply(host: &Host, platform: &Machine, gpus: &mut BTreeMap<PciAddr, Accelerator>, report: &mut Report) -> Found {
    let Some(file) = osdevs::read_quiet(host) else { return Found::default() };
    runtime_devices(&file, gpus, &mut report.warnings);
    let mut found = Found { source: Some(file.source.clone()), links_known: false };
    let mut evidence = Evidence::default();
    if let Some(matrix) = file.matrix(MATRIX) {
        found.links_known = true;
        read_matrix(matrix, gpus, &mut evidence);
        report.attributes.insert(format!("{}{MATRIX}", osdevs::READ_ATTRIBUTE), SRC.into());
    }
    let elements: Vec<&osdevs::ToolLink> = file.links.iter().filter(|l| l.element == NVLINK_ELEMENT).collect();
    if !elements.is_empty() {
        found.links_known = true;
        read_elements(&elements, platform, gpus, &mut evidence, &mut report.warnings);
        report.attributes.insert(format!("{}{NVLINK_ELEMENT}", osdevs::READ_ATTRIBUTE), SRC.into());
    }
    // Grace's chip-to-chip links join a GPU to its CPU, not to another GPU: kept as a fact.
    for c2c in file.links.iter().filter(|l| l.element == C2C_ELEMENT) {
        let what = [c2c.count.map(|c| format!("{c} links")), c2c.attributes.get("bw").map(|b| format!("bw {b}"))];
        let what: Vec<String> = what.into_iter().flatten().collect();
        report.attributes.insert(format!("{SRC}.c2c.{}", c2c.pci), what.join(", "));
        report.attributes.insert(format!("{}{C2C_ELEMENT}", osdevs::READ_ATTRIBUTE), SRC.into());
    }
    let source = format!("{}:{}", tool_name(&file.source), if file.matrix(MATRIX).is_some() { MATRIX } else { NVLINK_ELEMENT });
    report.links.extend(evidence.links(host, gpus, &source, &mut report.warnings));
    found
}

/// `hwloc XML 2.0` -> `hwloc`, `NCCL topology XML 1` -> `nccl`.
pub fn tool_name(source: &str) -> String {
    source.split_whitespace().next().unwrap_or("import").to_ascii_lowercase()
}

/// Per pair of GPUs, direct links; per GPU, links to switches. Counts where the file gives
/// them, else unidirectional MB/s to divide by a link's rate.
#[derive(Debug, Default)]
struct Evidence {
    direct: BTreeMap<(PciAddr, PciAddr), Amount>,
    switched: BTreeMap<PciAddr, Amount>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Amount {
    count: Option<u32>,
    mbps: Option<u64>,
}

impl Amount {
    fn add(&mut self, other: Amount) {
        self.count = match (self.count, other.count) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.mbps = match (self.mbps, other.mbps) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
    }
}

impl Evidence {
    fn links(
        &self,
        host: &Host,
        gpus: &BTreeMap<PciAddr, Accelerator>,
        source: &str,
        warnings: &mut Vec<Warning>,
    ) -> Vec<Link> {
        let mut out = Vec::new();
        let mut uncounted = BTreeSet::new();
        let mut count_of = |acc: &Accelerator, amount: Amount| -> u32 {
            if let Some(c) = amount.count {
                return c;
            }
            // One link's unidirectional MB/s: half its bidirectional GB/s, times 1000.
            let per_link = host
                .skus()
                .get(acc.sku.as_deref().unwrap_or(""))
                .and_then(|s| s.scale_up)
                .map(|s| s.gbps_per_link() * 500.0)
                .filter(|r| *r > 0.0);
            match (amount.mbps, per_link) {
                (Some(mbps), Some(rate)) => ((mbps as f64 / rate).round() as u32).max(1),
                _ => {
                    uncounted.insert(acc.id.clone());
                    1
                }
            }
        };
        let gbps = |acc: &Accelerator, amount: Amount, count: u32| match amount.mbps {
            // Unidirectional MB/s to GB/s both ways.
            Some(mbps) => Some(mbps as f64 * 2.0 / 1000.0),
            None => crate::plugin::link_gbps(host, acc, count),
        };
        for ((a, b), amount) in &self.direct {
            let (Some(ga), Some(gb)) = (gpus.get(a), gpus.get(b)) else { continue };
            let count = count_of(ga, *amount);
            let mut link = Link::new(ga.id.clone(), gb.id.clone(), NVLINK, count, gbps(ga, *amount, count));
            link.source = Some(source.to_owned());
            out.push(link);
        }
        let switched: Vec<(&PciAddr, &Amount)> = self.switched.iter().filter(|(a, _)| gpus.contains_key(a)).collect();
        for (i, (a, amount_a)) in switched.iter().enumerate() {
            for (b, amount_b) in &switched[i + 1..] {
                let (ga, gb) = (&gpus[*a], &gpus[*b]);
                let (ca, cb) = (count_of(ga, **amount_a), count_of(gb, **amount_b));
                let (narrow, count) = if ca <= cb { (**amount_a, ca) } else { (**amount_b, cb) };
                let mut link =
                    Link::new(ga.id.clone(), gb.id.clone(), NVSWITCH, count, gbps(if ca <= cb { ga } else { gb }, narrow, count));
                link.source = Some(source.to_owned());
                out.push(link);
            }
        }
        if !uncounted.is_empty() {
            warnings.push(Warning {
                source: SRC.into(),
                path: None,
                message: format!(
                    "NVLink link count unknown for {} (the SKU registry gives no per-link rate); counted as 1 \
                     link with the recorded bandwidth",
                    uncounted.into_iter().collect::<Vec<_>>().join(", ")
                ),
            });
        }
        out
    }
}

/// hwloc's matrix: GPU objects are OS devices under a GPU's PCI function; switches are PCI
/// devices that are not GPUs; a `Package` is a CPU port, not a GPU link.
fn read_matrix(matrix: &osdevs::Matrix, gpus: &BTreeMap<PciAddr, Accelerator>, evidence: &mut Evidence) {
    enum End {
        Gpu(PciAddr),
        Switch,
        Other,
    }
    let ends: Vec<End> = matrix
        .objects
        .iter()
        .map(|o| match (o.kind.as_str(), o.pci.as_deref().and_then(|p| p.parse::<PciAddr>().ok())) {
            (_, Some(addr)) if gpus.contains_key(&addr) => End::Gpu(addr),
            ("PCIDev", Some(_)) => End::Switch,
            _ => End::Other,
        })
        .collect();
    for (i, from) in ends.iter().enumerate() {
        let End::Gpu(a) = from else { continue };
        for (j, to) in ends.iter().enumerate() {
            let value = matrix.value(i, j).unwrap_or(0);
            if i == j || value == 0 {
                continue;
            }
            let amount = Amount { count: None, mbps: Some(value) };
            match to {
                End::Gpu(b) if a < b => evidence.direct.entry((*a, *b)).or_default().add(amount),
                End::Switch => evidence.switched.entry(*a).or_default().add(amount),
                _ => {}
            }
        }
    }
}

/// NCCL's `<nvlink target= count= tclass=>` under each GPU: a GPU target is a direct link; a
/// target of class 0x0680 (bridge, other), or one NCCL could not see (`fffffff:ff:ff.0` in a
/// VM), is an NVSwitch, as NCCL itself reads it.
fn read_elements(
    elements: &[&osdevs::ToolLink],
    platform: &Machine,
    gpus: &BTreeMap<PciAddr, Accelerator>,
    evidence: &mut Evidence,
    warnings: &mut Vec<Warning>,
) {
    let mut direct: BTreeMap<(PciAddr, PciAddr), u32> = BTreeMap::new();
    for l in elements {
        let Some(me) = l.pci.parse::<PciAddr>().ok().filter(|a| gpus.contains_key(a)) else { continue };
        let count = l.count.unwrap_or(1);
        let target = l.target.as_deref().and_then(|t| t.trim().to_ascii_lowercase().parse::<PciAddr>().ok());
        let class_is_switch = l.target_class.as_deref().is_some_and(|c| c.to_ascii_lowercase().starts_with("0x0680"));
        let platform_switch =
            target.and_then(|t| platform.pci_device(t)).and_then(|n| n.class).is_some_and(|c| c.base_sub() == 0x0680);
        match target {
            Some(t) if gpus.contains_key(&t) && t != me => {
                // Each end lists the link: keep the larger count seen from either end.
                let key = if me < t { (me, t) } else { (t, me) };
                let e = direct.entry(key).or_default();
                *e = (*e).max(count);
            }
            _ if class_is_switch || platform_switch || target.is_none() => {
                evidence.switched.entry(me).or_default().add(Amount { count: Some(count), mbps: None })
            }
            _ => warnings.push(Warning {
                source: SRC.into(),
                path: None,
                message: format!(
                    "GPU {me}: NVLink to {} (class {}) is neither a GPU nor a switch; left out",
                    l.target.as_deref().unwrap_or("?"),
                    l.target_class.as_deref().unwrap_or("unknown")
                ),
            }),
        }
    }
    for (key, count) in direct {
        evidence.direct.entry(key).or_default().add(Amount { count: Some(count), mbps: None });
    }
}

/// An identifier a sanitised capture replaced by zeros (`GPU-00000000-...`, `0000000000000`)
/// names nothing.
fn is_blank(id: &str) -> bool {
    id.trim().trim_start_matches("GPU-").chars().all(|c| c == '0' || c == '-')
}

/// The runtime devices the tool saw under each GPU: the NVML index (what CUDA counts in PCI bus
/// order) where no UUID selects the GPU, the UUID and serial unless blank or shared, memory from
/// the CUDA or OpenCL device (KiB), the model where the registry does not know the GPU.
fn runtime_devices(file: &OsDevFile, gpus: &mut BTreeMap<PciAddr, Accelerator>, warnings: &mut Vec<Warning>) {
    let info = |addr: &PciAddr, key: &str| -> Option<String> {
        file.osdevs_of(&addr.to_string()).iter().find_map(|d| d.infos.get(key).cloned())
    };
    let uuids: Vec<String> = gpus.keys().filter_map(|a| info(a, "NVIDIAUUID")).collect();
    let mut blank = Vec::new();
    for (addr, acc) in gpus.iter_mut() {
        let devs = file.osdevs_of(&addr.to_string());
        if let Some(uuid) = info(addr, "NVIDIAUUID") {
            if is_blank(&uuid) || uuids.iter().filter(|u| **u == uuid).count() > 1 {
                blank.push(addr.to_string());
            } else if acc.uuid.is_none() {
                acc.uuid = Some(uuid);
            }
        }
        if let Some(serial) = info(addr, "NVIDIASerial").filter(|s| !is_blank(s)) {
            acc.serial.get_or_insert(serial);
        }
        let kib = ["CUDAGlobalMemorySize", "OpenCLGlobalMemorySize"]
            .iter()
            .find_map(|k| info(addr, k))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(kib) = kib.filter(|k| *k > 0) {
            acc.memory_bytes = Some(kib.saturating_mul(1024));
        }
        if acc.sku.is_none() {
            if let Some(model) = info(addr, "GPUModel") {
                acc.product = model;
            }
        }
        // The runtime's own index: hwloc's `nvml<N>`, or NCCL's `<gpu dev=N>` (a CUDA index).
        let index = devs
            .iter()
            .find_map(|d| d.name.strip_prefix("nvml").and_then(|n| n.parse::<u32>().ok()))
            .or_else(|| devs.iter().find_map(|d| d.infos.get("dev").and_then(|n| n.parse::<u32>().ok())));
        if let (Some(i), None) = (index, &acc.uuid) {
            acc.vocabulary.isolation = vec![i.to_string()];
        }
        let cuda = devs.iter().filter(|d| d.name.starts_with("cuda")).count();
        if cuda > 1 {
            warnings.push(Warning {
                source: SRC.into(),
                path: Some(osdevs::OSDEVS_PATH.into()),
                message: format!(
                    "GPU {addr}: the topology tool lists {cuda} CUDA devices (MIG instances?) without their UUIDs, \
                     which CUDA needs to select them; reported as the whole GPU"
                ),
            });
        }
    }
    if !blank.is_empty() {
        warnings.push(Warning {
            source: SRC.into(),
            path: Some(osdevs::OSDEVS_PATH.into()),
            message: format!(
                "GPUs {}: the recorded UUID is blank or shared (a sanitised capture); selected by index instead",
                blank.join(", ")
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_ids() {
        assert!(is_blank("GPU-00000000-0000-0000-0000-000000000000"));
        assert!(is_blank("0000000000000"));
        assert!(!is_blank("GPU-9e8f0000-1111-2222-3333-444444444444"));
        assert!(!is_blank("1324521010492"));
    }
}
