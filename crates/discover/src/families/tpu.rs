//! The Google TPU plugin: chips are PCI functions of vendor 0x1ae0 (one per chip; TPU7x's second
//! function is folded in), the slice (name, accelerator type, topology, worker id) comes from the
//! `TPU_*` environment or the GCE metadata `tpu-env` attribute, and ICI links join chips whose
//! coordinates on the host differ by one step.

use std::collections::{BTreeMap, BTreeSet};

use accel_model::{Accelerator, Domain, DomainKind, LinkKind, LinkKindInfo, Machine};

use crate::plugin::{isolate_by_index, pci_accelerator, pci_functions, sku_link};
use crate::{Host, Isolation, Report, Vendor};

#[derive(Debug, Clone, Copy, Default)]
pub struct Tpu;

/// Parses the `tpu-env` metadata attribute: `KEY: 'value'` lines (a flat YAML map).
pub fn parse_tpu_env(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        let k = k.trim();
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
            continue;
        }
        let v = v.trim();
        let v = v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')).unwrap_or(v);
        let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
        out.insert(k.to_owned(), v.to_owned());
    }
    out
}

/// `2,4,1` or `2x4` → `[2, 4, 1]`; `None` for anything else.
pub fn parse_bounds(text: &str) -> Option<[u32; 3]> {
    let parts: Vec<u32> = text
        .split([',', 'x'])
        .map(|p| p.trim().parse::<u32>().ok().filter(|&n| n > 0 && n <= 1024))
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [x] => Some([*x, 1, 1]),
        [x, y] => Some([*x, *y, 1]),
        [x, y, z] => Some([*x, *y, *z]),
        _ => None,
    }
}

/// ICI neighbours among `n` chips laid out in `bounds` (x fastest): pairs one step apart.
pub fn ici_pairs(n: usize, bounds: [u32; 3]) -> Vec<(usize, usize)> {
    let [x, y, _] = bounds.map(|b| b as usize);
    let coord = |i: usize| (i % x, (i / x) % y, i / (x * y));
    let mut out = Vec::new();
    for i in 0..n {
        for j in i + 1..n {
            let (a, b) = (coord(i), coord(j));
            let d = a.0.abs_diff(b.0) + a.1.abs_diff(b.1) + a.2.abs_diff(b.2);
            if d == 1 {
                out.push((i, j));
            }
        }
    }
    out
}

/// Chips per host when nothing says: the usual host shapes (Ray's defaults).
fn default_bounds(n: usize) -> [u32; 3] {
    match n {
        8 => [2, 4, 1],
        4 => [2, 2, 1],
        2 => [1, 2, 1],
        n => [n.max(1) as u32, 1, 1],
    }
}

/// The TPU slice (pod slice) a host belongs to: its chips reach the slice's others over ICI.
pub const TPU_SLICE: DomainKind = DomainKind::new("tpu_slice");
/// The link kind of TPU inter-chip interconnect.
pub const ICI: LinkKind = LinkKind::new("ici");

/// Where this family runs among the built-in plugins (lower first; the platform plugin runs
/// before all, the generic PCI fallback after all).
pub const ORDER: u32 = 30;

/// This family's plugin, for the built-in list (`plugin_list`).
pub fn plugin() -> Box<dyn Vendor> {
    Box::new(Tpu)
}

impl Vendor for Tpu {
    fn environment(&self, _host: &Host, _machine: &accel_model::Machine) -> crate::plugin::Environment {
        crate::plugin::Environment {
            modules: ["gasket", "apex", "accel"].map(String::from).to_vec(),
            packages: Vec::new(),

            ..Default::default()
        }
    }

    fn capture(&self, host: &Host, machine: &accel_model::Machine) -> Vec<crate::plugin::Keep> {
        // Each chip's IOMMU group as the kernel lists it (/sys/kernel/iommu_groups/<g>/devices/
        // <bdf>, links to the functions), found from the functions' iommu_group links.
        let groups: BTreeSet<String> = pci_functions(machine, 0x1ae0, |_| true)
            .filter_map(|n| n.address)
            .filter_map(|a| host.resolve_link(&host.path(&format!("/sys/bus/pci/devices/{a}/iommu_group"))))
            .filter_map(|g| Some(g.file_name()?.to_str()?.parse::<u32>().ok()?.to_string()))
            .collect();
        let mut keep: Vec<crate::plugin::Keep> = groups
            .into_iter()
            .map(|g| crate::plugin::Keep::ClassLinks(format!("/sys/kernel/iommu_groups/{g}/devices")))
            .collect();
        keep.extend([
            // Which /dev/accel<N> is which chip's (v2-v4).
            crate::plugin::Keep::ClassLinks("/sys/class/accel".into()),
            crate::plugin::Keep::DeviceNodes { dir: "/dev".into(), prefix: "accel".into(), digits: false },
            crate::plugin::Keep::DeviceNodes { dir: "/dev/vfio".into(), prefix: String::new(), digits: true },
        ]);
        keep
    }

    fn link_kinds(&self) -> Vec<LinkKindInfo> {
        vec![LinkKindInfo::new(ICI, "ICI", "TPU inter-chip interconnect")]
    }

    fn id(&self) -> &'static str {
        "tpu"
    }

    fn vocabulary(&self) -> accel_model::Vocabulary {
        crate::plugin::vocabulary(
            "tpu",
            "TPU",
            Some("TPU_VISIBLE_CHIPS"),
            Some("TPU"),
            &["TPU_VISIBLE_CHIPS"],
            Some("google.com/tpu"),
        )
    }

    /// GKE's TPU labels: `tpu-v6e-slice`-style accelerator names from the `v6e-8` type.
    fn k8s_labels(&self, machine: &Machine, _devices: &[&Accelerator]) -> BTreeMap<String, String> {
        use crate::labels::label_value;
        let mut labels = BTreeMap::new();
        if let (Some(t), Some(topo)) =
            (machine.attributes.get("tpu.accelerator_type"), machine.attributes.get("tpu.topology"))
        {
            let generation = t.split('-').next().unwrap_or(t);
            let gke = match generation {
                "v5litepod" | "v5e" => "tpu-v5-lite-podslice".to_owned(),
                "v5p" => "tpu-v5p-slice".to_owned(),
                g => format!("tpu-{g}-slice"),
            };
            labels.insert("cloud.google.com/gke-tpu-accelerator".into(), label_value(&gke));
            labels.insert("cloud.google.com/gke-tpu-topology".into(), label_value(topo));
        }
        labels
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        let mut report = Report::default();
        let mut chips: BTreeMap<(u32, u8, u8), Accelerator> = BTreeMap::new();
        for node in pci_functions(platform, 0x1ae0, |_| true) {
            let addr = node.address.expect("filtered");
            chips
                .entry((addr.domain, addr.bus, addr.device))
                .or_insert_with(|| pci_accelerator(host, node, "google", "tpu"));
        }
        if chips.is_empty() {
            return report;
        }
        let mut accs: Vec<Accelerator> = chips.into_values().collect();
        // Each chip's device node, found from the chip's own PCI function, never by position:
        // /dev/accel<N> (v2-v4) where the class device /sys/class/accel/accel<N> has the chip's
        // function as its `device`; else the VFIO group (v5e and later, the function bound to
        // vfio-pci) named by the function's `iommu_group` link, /dev/vfio/<group>. Where /dev is
        // here to look in, the node must exist. Only a chip with neither falls back to
        // /dev/accel<position in PCI order>, with a warning.
        let check_dev = crate::plugin::has_dev(host);
        let class_accel = accel_class_nodes(host, &mut report.warnings);
        let group_of = iommu_groups(host, &mut report.warnings);
        let mut assumed = Vec::new();
        for (i, acc) in accs.iter_mut().enumerate() {
            let Some(pci) = acc.pci else { continue };
            let chip = (pci.domain, pci.bus, pci.device);
            let accel = class_accel.get(&chip).map(|n| format!("/dev/accel{n}"));
            let vfio = host
                .resolve_link(&host.path(&format!("/sys/bus/pci/devices/{pci}/iommu_group")))
                .and_then(|g| g.file_name()?.to_str()?.parse::<u32>().ok())
                .or_else(|| group_of.get(&pci).copied())
                .map(|g| format!("/dev/vfio/{g}"));
            let present = |f: &Option<String>| f.as_ref().filter(|f| !check_dev || host.exists(&host.path(f))).cloned();
            let file = present(&accel).or_else(|| present(&vfio)).or_else(|| {
                let positional = format!("/dev/accel{i}");
                (!check_dev || host.exists(&host.path(&positional))).then(|| {
                    assumed.push(format!("{pci}={positional}"));
                    positional
                })
            });
            acc.vocabulary.device_files = file.into_iter().collect();
        }
        if !assumed.is_empty() {
            report.warnings.push(accel_model::Warning {
                source: "tpu".into(),
                path: Some("/sys/class/accel".into()),
                message: format!(
                    "no accel class device or IOMMU group names the device node of chips {}: assumed from PCI order",
                    assumed.join(", ")
                ),
            });
        }
        // Slice facts: the environment (GKE, Ray) first, else GCE metadata.
        let meta = platform.attributes.get("gce.tpu-env").map(|t| parse_tpu_env(t)).unwrap_or_default();
        let fact = |env: &str, key: &str| -> Option<(String, String)> {
            match host.env(env).filter(|v| !v.is_empty()) {
                Some(v) => Some((v.to_owned(), format!("env:{env}"))),
                None => {
                    meta.get(key).filter(|v| !v.is_empty()).map(|v| (v.clone(), format!("gce-metadata:tpu-env:{key}")))
                }
            }
        };
        let accel_type = fact("TPU_ACCELERATOR_TYPE", "ACCELERATOR_TYPE");
        let topology = fact("TPU_TOPOLOGY", "TOPOLOGY");
        let worker = fact("TPU_WORKER_ID", "WORKER_ID");
        let name = fact("TPU_NAME", "NODE_ID");
        let per_host = fact("TPU_CHIPS_PER_HOST_BOUNDS", "CHIPS_PER_HOST_BOUNDS");
        for (key, value) in [
            ("tpu.accelerator_type", &accel_type),
            ("tpu.topology", &topology),
            ("tpu.worker_id", &worker),
            ("tpu.name", &name),
            ("tpu.chips_per_host_bounds", &per_host),
        ] {
            if let Some((v, _)) = value {
                report.attributes.insert(key.into(), v.clone());
            }
        }
        // The slice is a torus of chips: the Slurm export describes it from these.
        if let (Some((chips, _)), Some((per, _))) = (&topology, &per_host) {
            report.attributes.insert("torus.domain".into(), TPU_SLICE.as_str().to_owned());
            report.attributes.insert("torus.chips".into(), chips.clone());
            report.attributes.insert("torus.chips_per_host".into(), per.clone());
            if let Some((w, _)) = &worker {
                report.attributes.insert("torus.host".into(), w.clone());
            }
        }
        // Published as Ray labels (`accel.io/<name>`, see `labels::ray_labels`).
        for (name, value) in
            [("label.tpu-worker-id", &worker), ("label.tpu-topology", &topology), ("label.tpu-pod-type", &accel_type)]
        {
            if let Some((v, _)) = value {
                report.attributes.insert(name.into(), v.clone());
            }
        }
        if let Some((slice, source)) = name.clone().or(accel_type.clone()) {
            // How many hosts the slice spans: its chip torus over the chips each host holds
            // (a v6e-8 is one host; a v5p-32 spans four). Unknown without both.
            let hosts = match (topology.as_ref().and_then(|t| parse_bounds(&t.0)), per_host.as_ref().and_then(|p| parse_bounds(&p.0))) {
                (Some(chips), Some(per)) => Some((0..3).map(|i| chips[i].div_ceil(per[i])).product::<u32>()),
                _ => None,
            };
            report.domains.push(Domain {
                kind: TPU_SLICE,
                name: slice,
                source,
                accelerators: accs.iter().map(|a| a.id.clone()).collect(),
                scale_up: true,
                nodes: hosts,
            });
        }
        let bounds = per_host
            .as_ref()
            .and_then(|(b, _)| parse_bounds(b))
            .filter(|b| b.iter().product::<u32>() as usize == accs.len())
            .unwrap_or_else(|| default_bounds(accs.len()));
        report.links = ici_pairs(accs.len(), bounds).into_iter().map(|p| sku_link(host, &accs, p, ICI, 1)).collect();
        // The TPU runtime opens one device node per chip: /dev/accel<N> (v2-v4) or a VFIO group
        // (/dev/vfio/<N>, v5e and later). Fewer nodes than chips: some chips are not usable here.
        if crate::plugin::has_dev(host) {
            let mut warnings = Vec::new();
            let count = |dir: &str, prefix: &str, warnings: &mut Vec<_>| {
                host.list_dir(&host.path(dir), "tpu", warnings)
                    .iter()
                    .filter(|n| {
                        n.strip_prefix(prefix).is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
                    })
                    .count()
            };
            let nodes = count("/dev", "accel", &mut warnings) + count("/dev/vfio", "", &mut warnings);
            if nodes < accs.len() {
                let all: Vec<String> = accs.iter().filter_map(|a| a.pci.map(|p| p.to_string())).collect();
                report.warnings.push(accel_model::Warning {
                    source: "tpu".into(),
                    path: Some("/dev".into()),
                    message: format!(
                        "{} TPU chips on PCI ({}) but {nodes} /dev/accel* or /dev/vfio/* device nodes: some chips \
                         are not usable here (not passed into this container?)",
                        accs.len(),
                        all.join(", ")
                    ),
                });
            }
            report.warnings.extend(warnings);
        }
        report.accelerators = accs;
        report
    }

    fn isolate(&self, devices: &[&Accelerator]) -> Isolation {
        let mut isolation = isolate_by_index(devices, &["TPU_VISIBLE_CHIPS"]);
        // Sub-host slices, as Ray sets them: one chip or two chips on one host.
        let bounds = match devices.len() {
            1 => Some("1,1,1"),
            2 => Some("1,2,1"),
            4 => Some("2,2,1"),
            _ => None,
        };
        if let Some(b) = bounds {
            isolation.env.insert("TPU_CHIPS_PER_PROCESS_BOUNDS".into(), b.into());
            isolation.env.insert("TPU_PROCESS_BOUNDS".into(), "1,1,1".into());
        }
        isolation
    }
}

/// Every PCI function's IOMMU group from the kernel's list of groups
/// (`/sys/kernel/iommu_groups/<g>/devices/<bdf>`, Documentation/ABI/testing/sysfs-kernel-iommu_groups):
/// what a capture keeps of the function's `iommu_group` link.
fn iommu_groups(host: &Host, warnings: &mut Vec<accel_model::Warning>) -> BTreeMap<accel_model::PciAddr, u32> {
    let dir = host.path("/sys/kernel/iommu_groups");
    let mut out = BTreeMap::new();
    for g in host.list_dir(&dir, "tpu", warnings) {
        let Ok(group) = g.parse::<u32>() else { continue };
        for name in host.list_dir(&dir.join(&g).join("devices"), "tpu", warnings) {
            if let Ok(addr) = name.parse::<accel_model::PciAddr>() {
                out.insert(addr, group);
            }
        }
    }
    out
}

/// `/sys/class/accel/accel<N>` entries whose `device` link is a TPU chip's PCI function, by chip
/// (domain, bus, device): the N of its `/dev/accel<N>`. A chip two entries name keeps neither.
fn accel_class_nodes(host: &Host, warnings: &mut Vec<accel_model::Warning>) -> BTreeMap<(u32, u8, u8), u32> {
    let dir = host.path("/sys/class/accel");
    let mut out: BTreeMap<(u32, u8, u8), u32> = BTreeMap::new();
    let mut repeated = Vec::new();
    for name in host.list_dir(&dir, "tpu", warnings) {
        let Some(n) = name.strip_prefix("accel").and_then(|k| k.parse::<u32>().ok()) else { continue };
        let Some(target) = host.resolve_link(&dir.join(&name).join("device")) else { continue };
        let Some(addr) =
            target.file_name().and_then(|f| f.to_str()).and_then(|f| f.parse::<accel_model::PciAddr>().ok())
        else {
            continue;
        };
        let vendor = host.read_attr(&target.join("vendor"), "tpu", warnings);
        if vendor.as_deref().is_some_and(|v| !v.eq_ignore_ascii_case("0x1ae0")) {
            continue;
        }
        let chip = (addr.domain, addr.bus, addr.device);
        if out.insert(chip, n).is_some_and(|old| old != n) {
            repeated.push(chip);
        }
    }
    for chip in repeated {
        out.remove(&chip);
        warnings.push(host.warning(
            "tpu",
            &dir,
            format!(
                "two accel class devices name the chip at {:04x}:{:02x}:{:02x}; neither is used",
                chip.0, chip.1, chip.2
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn env_bounds_pairs() {
        let env = parse_tpu_env("ACCELERATOR_TYPE: 'v4-256'\nTOPOLOGY: '4x4x8'\nWORKER_ID: '0'\nbad\nlower: 'x'\n");
        assert_eq!(env["ACCELERATOR_TYPE"], "v4-256");
        assert!(!env.contains_key("lower"));
        assert_eq!(parse_bounds("2,2,1"), Some([2, 2, 1]));
        assert_eq!(parse_bounds("4x4x8"), Some([4, 4, 8]));
        assert_eq!(parse_bounds("0,1"), None);
        assert_eq!(ici_pairs(4, [2, 2, 1]), vec![(0, 1), (0, 2), (1, 3), (2, 3)]);
        assert_eq!(ici_pairs(8, [2, 4, 1]).len(), 10);
    }

    proptest! {
        #[test]
        fn parsers_never_panic(text in ".{0,80}", n in 0usize..40, x in 1u32..5, y in 1u32..5) {
            let _ = parse_tpu_env(&text);
            let _ = parse_bounds(&text);
            let _ = ici_pairs(n, [x, y, 1]);
        }
    }
}
