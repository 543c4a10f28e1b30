//! Smaller families: Intel data-center GPUs (xe and i915, memory summed over tiles) and Groq
//! LPUs (by PCI vendor 0x1de0).

use accel_model::{Accelerator, Machine};

use crate::plugin::{isolate_by_index, pci_accelerator, pci_functions};
use crate::{Host, Isolation, Report, Vendor};

const SRC: &str = "intel-gpu";

#[derive(Debug, Clone, Copy, Default)]
pub struct IntelGpu;

impl Vendor for IntelGpu {
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

#[derive(Debug, Clone, Copy, Default)]
pub struct Groq;

impl Vendor for Groq {
    fn id(&self) -> &'static str {
        "groq"
    }

    fn vocabulary(&self) -> accel_model::Vocabulary {
        crate::plugin::vocabulary("lpu", "LPU", None, None, &[], None)
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        Report {
            // The driver's /dev/groq<N>, numbered in probe (PCI) order.
            accelerators: pci_functions(platform, 0x1de0, |_| true)
                .enumerate()
                .map(|(i, n)| {
                    let mut acc = pci_accelerator(host, n, "groq", "groq");
                    acc.vocabulary.device_files = vec![format!("/dev/groq{i}")];
                    acc
                })
                .collect(),
            ..Report::default()
        }
    }

    fn isolate(&self, _devices: &[&Accelerator]) -> Isolation {
        // GroqWare selects devices by path; there is no visibility variable.
        Isolation::default()
    }
}
