//! The per-family facts the exports need that the model does not carry yet: the device file a
//! family's driver creates for each device (Slurm's `gres.conf` `File=`). This is the only
//! family-keyed table in the exports; it is keyed by the discovery plugin's id and moves onto
//! the plugins' own vocabulary once they return it with each device.

use accel_model::{Accelerator, Machine};

/// How one plugin's devices appear under `/dev`.
struct DeviceFiles {
    plugin: &'static str,
    /// File name under the device directory; `{n}` is replaced by `first + ordinal`.
    pattern: &'static str,
    first: u32,
    /// Whether each partition has its own device file (AMD CPX: one render node each) or
    /// shares its physical device's (NVIDIA MIG: `/dev/nvidiaN` plus capabilities).
    per_partition: bool,
}

/// Sources: the NVIDIA driver's `/dev/nvidia<minor>`, amdgpu's and i915/xe's DRM render nodes
/// (minors from 128), the TPU driver's `/dev/accel<n>`, the Neuron driver's `/dev/neuron<n>`,
/// habanalabs' `/dev/accel/accel<n>` and Groq's `/dev/groq<n>`. Minors follow probe order,
/// which is PCI bus order on the machines we have captures of; the ordinal is accel's index.
const DEVICE_FILES: &[DeviceFiles] = &[
    DeviceFiles { plugin: "nvidia", pattern: "nvidia{n}", first: 0, per_partition: false },
    DeviceFiles { plugin: "amd", pattern: "dri/renderD{n}", first: 128, per_partition: true },
    DeviceFiles { plugin: "intel-gpu", pattern: "dri/renderD{n}", first: 128, per_partition: true },
    DeviceFiles { plugin: "tpu", pattern: "accel{n}", first: 0, per_partition: false },
    DeviceFiles { plugin: "neuron", pattern: "neuron{n}", first: 0, per_partition: false },
    DeviceFiles { plugin: "gaudi", pattern: "accel/accel{n}", first: 0, per_partition: false },
    DeviceFiles { plugin: "groq", pattern: "groq{n}", first: 0, per_partition: false },
];

/// The device file of `acc` relative to the device directory (`nvidia0`, `dri/renderD129`), or
/// `None` for a family whose device files accel does not know.
pub fn device_file(machine: &Machine, acc: &Accelerator) -> Option<String> {
    let entry = DEVICE_FILES.iter().find(|e| e.plugin == acc.plugin)?;
    let ordinal = match &acc.partition {
        Some(p) if !entry.per_partition => physical_ordinal(machine, acc, &p.physical_id)?,
        _ => acc.index,
    };
    Some(entry.pattern.replace("{n}", &(entry.first + ordinal).to_string()))
}

/// The ordinal of a partitioned device's physical device among the plugin's physical devices,
/// in PCI bus order (the order the driver numbers them in).
fn physical_ordinal(machine: &Machine, acc: &Accelerator, physical_id: &str) -> Option<u32> {
    let mut physical: Vec<(Option<accel_model::PciAddr>, &str)> = machine
        .accelerators
        .iter()
        .filter(|a| a.plugin == acc.plugin)
        .map(|a| (a.pci, a.partition.as_ref().map_or(a.id.as_str(), |p| p.physical_id.as_str())))
        .collect();
    physical.sort();
    physical.dedup();
    physical.iter().position(|(_, id)| *id == physical_id).map(|i| i as u32)
}
