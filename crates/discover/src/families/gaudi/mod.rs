//! The Intel Gaudi plugin: habanalabs devices from the accel class
//! (`/sys/class/accel/accel<N>/device/{device_type,module_id,pci_addr}`) or, without the driver,
//! PCI vendor 0x1da3. The sysfs does not say which RoCE port reaches which peer, so scale-up links
//! are derived: on an 8-card board (HLS-2, HLS-3), every pair is linked by the SKU's scale-up
//! ports split evenly over the 7 peers (21 ports → `ROCE3`).

pub mod metrics;

use std::collections::BTreeMap;

use accel_model::{Accelerator, LinkKind, LinkKindInfo, Machine, PciAddr};

use crate::plugin::{isolate_by_index, pci_accelerator, pci_functions, sku_link};
use crate::{Host, Isolation, Report, Vendor};

const SRC: &str = "gaudi";

#[derive(Debug, Clone, Copy, Default)]
pub struct Gaudi;

/// The link kind of Gaudi scale-up RoCE (integrated ports).
pub const ROCE: LinkKind = LinkKind::new("roce");

/// Where this family runs among the built-in plugins (lower first; the platform plugin runs
/// before all, the generic PCI fallback after all).
pub const ORDER: u32 = 50;

/// This family's plugin, for the built-in list (`plugin_list`).
pub fn plugin() -> Box<dyn Vendor> {
    Box::new(Gaudi)
}

impl Vendor for Gaudi {
    fn environment(&self, _host: &Host, _machine: &accel_model::Machine) -> crate::plugin::Environment {
        crate::plugin::Environment {
            modules: ["habanalabs"].map(String::from).to_vec(),
            packages: ["habanalabs-firmware"].map(String::from).to_vec(),
            
            ..Default::default()
        }
    }

    fn capture(&self, _host: &Host, _machine: &accel_model::Machine) -> Vec<crate::plugin::Keep> {
        vec![
            crate::plugin::Keep::ClassLinks("/sys/class/accel".into()),
            crate::plugin::Keep::PciAttributes(["device_type", "module_id", "pci_addr"].map(String::from).to_vec()),
            crate::plugin::Keep::DeviceNodes { dir: "/dev".into(), prefix: "accel".into(), digits: false },
        ]
    }

    fn metrics(&self, host: &Host) -> Option<Result<crate::readings::Metrics, crate::protocol::PluginError>> {
        crate::readings::Metrics::found(metrics::read(host)).map(Ok)
    }

    fn link_kinds(&self) -> Vec<LinkKindInfo> {
        vec![LinkKindInfo::new(ROCE, "ROCE", "Gaudi scale-up RoCE (integrated ports)")]
    }

    fn id(&self) -> &'static str {
        "gaudi"
    }

    fn vocabulary(&self) -> accel_model::Vocabulary {
        crate::plugin::vocabulary(
            "hpu",
            "HPU",
            Some("HABANA_VISIBLE_MODULES"),
            Some("HPU"),
            &["HABANA_VISIBLE_MODULES"],
            Some("habana.ai/gaudi"),
        )
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        let mut report = Report::default();
        let mut accs: BTreeMap<PciAddr, Accelerator> = pci_functions(platform, 0x1da3, |_| true)
            .map(|n| (n.address.expect("filtered"), pci_accelerator(host, n, "intel", "gaudi")))
            .collect();
        let dir = host.path("/sys/class/accel");
        let check_dev = crate::plugin::has_dev(host);
        let mut hidden = Vec::new();
        for name in host.list_dir(&dir, SRC, &mut report.warnings) {
            let dev = dir.join(&name).join("device");
            let Some(ty) = host.read_attr(&dev.join("device_type"), SRC, &mut report.warnings) else { continue };
            let addr = host
                .parse_attr(&dev.join("pci_addr"), SRC, &mut report.warnings, |t| t.parse::<PciAddr>().ok())
                .or_else(|| host.resolve_link(&dev).and_then(|p| p.file_name()?.to_str()?.parse().ok()));
            let Some(acc) = addr.and_then(|a| accs.get_mut(&a)) else { continue };
            // The habanalabs runtime opens /dev/accel/accel<N> (older drivers: /dev/hl<N>).
            let file = format!("/dev/accel/{name}");
            let legacy = name.strip_prefix("accel").map(|n| format!("/dev/hl{n}"));
            let opened = host.exists(&host.path(&file)) || legacy.as_ref().is_some_and(|l| host.exists(&host.path(l)));
            acc.vocabulary.device_files = match legacy {
                Some(l) if check_dev && !host.exists(&host.path(&file)) && host.exists(&host.path(&l)) => vec![l],
                _ => vec![file],
            };
            if check_dev && !opened {
                hidden.extend(acc.pci.map(|p| p.to_string()));
            }
            if acc.sku.is_none() {
                acc.product = format!("Intel {ty}");
            }
            if let Some(module) =
                host.parse_attr(&dev.join("module_id"), SRC, &mut report.warnings, |t| t.parse::<u32>().ok())
            {
                report.attributes.insert(format!("gaudi.module_id.{}", acc.id), module.to_string());
                // HABANA_VISIBLE_MODULES takes module ids, which need not follow PCI order.
                acc.vocabulary.isolation = vec![module.to_string()];
            }
        }
        report.warnings.extend(crate::plugin::not_visible(
            SRC,
            "/dev/accel/accel*",
            &hidden,
            "the runtime cannot use them",
        ));
        let accs: Vec<Accelerator> = accs.into_values().collect();
        let same_sku = accs.windows(2).all(|w| w[0].sku == w[1].sku);
        let scale_up = accs.first().and_then(|a| host.skus().get(a.sku.as_deref()?)).and_then(|s| s.scale_up);
        if let (8, true, Some(s)) = (accs.len(), same_sku, scale_up) {
            let per_peer = s.links / 7;
            for i in 0..accs.len() {
                for j in i + 1..accs.len() {
                    report.links.push(sku_link(host, &accs, (i, j), ROCE, per_peer));
                }
            }
        }
        report.accelerators = accs;
        report
    }

    fn isolate(&self, devices: &[&Accelerator]) -> Isolation {
        // Module ids where the driver gave them (set at discovery), else the index.
        isolate_by_index(devices, &["HABANA_VISIBLE_MODULES"])
    }
}
