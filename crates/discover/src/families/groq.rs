//! Groq LPUs, by PCI vendor 0x1de0: the driver's `/dev/groq<N>` in probe (PCI) order; GroqWare
//! selects devices by path, so there is no visibility variable.

use accel_model::{Accelerator, Machine};

use crate::plugin::{pci_accelerator, pci_functions};
use crate::{Host, Isolation, Report, Vendor};

#[derive(Debug, Clone, Copy, Default)]
pub struct Groq;

/// Where this family runs among the built-in plugins (lower first; the platform plugin runs
/// before all, the generic PCI fallback after all).
pub const ORDER: u32 = 70;

/// This family's plugin, for the built-in list (`plugin_list`).
pub fn plugin() -> Box<dyn Vendor> {
    Box::new(Groq)
}

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
