//! The generic PCI plugin: any display or processing-accelerator function that no vendor plugin
//! claimed becomes an accelerator, with its SKU looked up in the registry. An offload function
//! (a co-processor such as Intel QAT or DLB, an SDXI data mover, an encryption controller) is an
//! accelerator only where the registry knows its ids; otherwise it stays what it is, a PCI
//! function, named in the machine's attributes (`offload.<address>`).

use accel_model::{vendor_name, Accelerator, Machine, PciClass, PciId, PciNode, PciNodeKind, Warning};

use crate::{Host, Isolation, Report, Vendor};

/// Reports PCI functions of class 0x0300/0x0302/0x0380 (display) and 0x12xx (processing
/// accelerator), and offload functions (`is_offload_class`) the registry knows.
#[derive(Debug, Clone, Copy, Default)]
pub struct GenericPci;

/// Vendors whose VGA functions are server management or emulated displays, never compute:
/// ASPEED and Nuvoton BMCs, Matrox G200e, Cirrus Logic and Bochs/QEMU, Red Hat virtio-gpu,
/// VMware SVGA, Microsoft Hyper-V, Amazon EC2's emulated VGA (1d0f:1111; only VGA-class functions
/// are filtered, never Amazon's accelerators), and Intel's integrated graphics (Intel GPUs with device memory
/// are reported by the `intel-gpu` plugin, which runs first). Unless the registry knows the
/// device, these are not reported.
const DISPLAY_ONLY_VENDORS: &[u16] = &[0x1a03, 0x1050, 0x102b, 0x1013, 0x1234, 0x1b36, 0x15ad, 0x1414, 0x8086, 0x1d0f];

/// Whether a PCI class is one the generic plugin treats as an accelerator (offload classes only
/// with a registry entry).
pub fn is_accelerator_class(class: PciClass) -> bool {
    matches!(class.base_sub(), 0x0300 | 0x0302 | 0x0380) || class.base() == 0x12 || is_offload_class(class)
}

/// Offload functions: 0x0b40 co-processor (Intel QAT and DLB, NEC's Vector Engine), 0x1201 SDXI
/// data mover, 0x10xx encryption controller. Not accelerators unless a family or the registry
/// claims their ids.
pub fn is_offload_class(class: PciClass) -> bool {
    matches!(class.base_sub(), 0x0b40 | 0x1201) || class.base() == 0x10
}

impl Vendor for GenericPci {
    fn id(&self) -> &'static str {
        "generic-pci"
    }

    fn vocabulary(&self) -> accel_model::Vocabulary {
        crate::plugin::vocabulary("accelerator", "ACC", None, None, &[], None)
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        let mut report = Report::default();
        let claimed: Vec<_> = platform.accelerators.iter().filter_map(|a| a.pci).collect();
        for node in &platform.pci {
            let (Some(addr), Some(class)) = (node.address, node.class) else { continue };
            if node.kind != PciNodeKind::Endpoint || !is_accelerator_class(class) || claimed.contains(&addr) {
                continue;
            }
            match accelerator(host, node, &mut report.warnings) {
                Some(acc) => report.accelerators.push(acc),
                None if is_offload_class(class) => {
                    let ids = node
                        .vendor
                        .zip(node.device)
                        .map_or_else(|| "ids unreadable".to_owned(), |(v, d)| format!("{v}:{d}"));
                    report.attributes.insert(
                        format!("offload.{addr}"),
                        format!(
                            "{} {ids}: an offload function, not an accelerator (no family or SKU entry claims it)",
                            class.name()
                        ),
                    );
                }
                None => {}
            }
        }
        report
    }

    fn isolate(&self, _devices: &[&Accelerator]) -> Isolation {
        // Devices found only by PCI class have no standard visibility variable.
        Isolation::default()
    }
}

fn accelerator(host: &Host, node: &PciNode, warnings: &mut Vec<Warning>) -> Option<Accelerator> {
    let addr = node.address?;
    let vendor = node.vendor.unwrap_or(PciId(0));
    let device = node.device.unwrap_or(PciId(0));
    let subsystem = node.subsystem_vendor.zip(node.subsystem_device);
    let sku = host.skus().lookup(vendor, device, subsystem);
    if sku.is_none() && node.class.is_some_and(is_offload_class) {
        return None;
    }
    let is_vga = node.class.is_some_and(|c| c.base_sub() == 0x0300);
    if sku.is_none() && is_vga && DISPLAY_ONLY_VENDORS.contains(&vendor.0) {
        return None;
    }
    let vendor_id = match (sku, node.vendor) {
        (Some(s), _) => s.vendor.clone(),
        (None, Some(v)) => vendor_name(v),
        (None, None) => "pci-unknown".to_owned(),
    };
    if sku.is_none() {
        warnings.push(Warning {
            source: "generic-pci".into(),
            path: Some(format!("/sys/bus/pci/devices/{addr}")),
            message: format!(
                "unknown accelerator {} (subsystem {}, class 0x{:06x}); add it to the SKU registry",
                node.vendor
                    .zip(node.device)
                    .map_or_else(|| "with unreadable ids".to_owned(), |(v, d)| format!("{v}:{d}")),
                subsystem.map_or_else(|| "unknown".to_owned(), |(v, d)| format!("{v}:{d}")),
                node.class?.0,
            ),
        });
    }
    Some(crate::pci_accelerator(host, node, &vendor_id, "generic-pci"))
}
