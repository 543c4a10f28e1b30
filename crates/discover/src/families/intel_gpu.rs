//! Intel data-center GPUs (Max, Flex; the xe and i915 drivers), memory summed over tiles;
//! isolated with `ZE_AFFINITY_MASK`.

use accel_model::{Accelerator, Machine};

use crate::plugin::{isolate_by_index, pci_accelerator, pci_functions};
use crate::{Host, Isolation, Report, Vendor};

const SRC: &str = "intel-gpu";

#[derive(Debug, Clone, Copy, Default)]
pub struct IntelGpu;

/// Where this family runs among the built-in plugins (lower first; the platform plugin runs
/// before all, the generic PCI fallback after all).
pub const ORDER: u32 = 60;

/// This family's plugin, for the built-in list (`plugin_list`).
pub fn plugin() -> Box<dyn Vendor> {
    Box::new(IntelGpu)
}

impl Vendor for IntelGpu {
    fn environment(&self, _host: &Host, _machine: &accel_model::Machine) -> crate::plugin::Environment {
        crate::plugin::Environment {
            modules: ["xe", "i915"].map(String::from).to_vec(),
            packages: Vec::new(),
            
            ..Default::default()
        }
    }

    fn capture(&self, _host: &Host, _machine: &accel_model::Machine) -> Vec<crate::plugin::Keep> {
        vec![crate::plugin::Keep::PciAttributes(
            ["lmem_total_bytes", "tile*/physical_vram_size_bytes"].map(String::from).to_vec(),
        )]
    }

    fn id(&self) -> &'static str {
        "intel-gpu"
    }

    fn vocabulary(&self) -> accel_model::Vocabulary {
        crate::plugin::vocabulary(
            "gpu",
            "GPU",
            Some("ZE_AFFINITY_MASK"),
            Some("GPU"),
            &["ZE_AFFINITY_MASK"],
            Some("gpu.intel.com/i915"),
        )
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        let mut report = Report::default();
        for node in pci_functions(platform, 0x8086, |c| c.base() == 0x03) {
            let driver = node.driver.as_deref().unwrap_or("");
            let mut acc = pci_accelerator(host, node, "intel", "intel-gpu");
            let dev = host.path(&format!("/sys/bus/pci/devices/{}", node.id));
            // xe: VRAM per tile; i915: lmem_total_bytes.
            let mut vram = 0u64;
            for tile in host.list_dir(&dev, SRC, &mut report.warnings).iter().filter(|n| n.starts_with("tile")) {
                vram += host
                    .parse_attr(&dev.join(tile).join("physical_vram_size_bytes"), SRC, &mut report.warnings, |t| {
                        t.parse::<u64>().ok()
                    })
                    .unwrap_or(0);
            }
            if vram == 0 {
                vram = host
                    .parse_attr(&dev.join("lmem_total_bytes"), SRC, &mut report.warnings, |t| t.parse::<u64>().ok())
                    .unwrap_or(0);
            }
            // Integrated graphics has no device memory and no registry entry: not an accelerator here.
            if acc.sku.is_none() && vram == 0 {
                continue;
            }
            if vram > 0 {
                acc.memory_bytes = Some(vram);
            }
            if !matches!(driver, "xe" | "i915" | "") {
                acc.product = format!("{} (driver {driver})", acc.product);
            }
            // Level Zero opens the render node: the one sysfs lists under the function's drm/,
            // else the minor probe order gives (from 128, PCI order, as the list here).
            let render = host
                .list_dir(&dev.join("drm"), SRC, &mut Vec::new())
                .into_iter()
                .find(|n| {
                    n.strip_prefix("renderD").is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
                })
                .unwrap_or_else(|| format!("renderD{}", 128 + report.accelerators.len()));
            acc.vocabulary.device_files = vec![format!("/dev/dri/{render}")];
            report.accelerators.push(acc);
        }
        report
    }

    fn isolate(&self, devices: &[&Accelerator]) -> Isolation {
        isolate_by_index(devices, &["ZE_AFFINITY_MASK"])
    }
}
