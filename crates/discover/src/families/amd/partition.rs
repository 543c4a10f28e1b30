//! The one partition model of AMD GPUs, shared by every reader (the KFD topology, an imported
//! topology's ROCm SMI devices): a GPU in a compute-partition mode (DPX, TPX, QPX, CPX) is
//! reported as its partitions, each a device of its own to HIP, with the id, share of memory,
//! mode and ordinal given here, so that every reader of the same machine gives the same answer.

use accel_model::{Accelerator, Partition, PciAddr};

/// The mode name for a number of partitions per GPU, where the driver's
/// `current_compute_partition` is not at hand: 2 DPX, 3 TPX, 4 QPX, more CPX (6 on MI300A, 8 on
/// MI300X: one per XCD).
pub fn mode_for(parts: u32) -> &'static str {
    match parts {
        2 => "DPX",
        3 => "TPX",
        4 => "QPX",
        _ => "CPX",
    }
}

/// What a reader knows of one partition.
#[derive(Debug, Clone)]
pub struct Part {
    /// The physical GPU's PCI function (function 0).
    pub physical: PciAddr,
    /// Its index within the GPU, from 0.
    pub index: u32,
    /// How many partitions share the GPU's memory (its mode's count).
    pub share: u32,
    pub mode: String,
    /// Memory the reader saw for this partition alone, if any.
    pub own_memory: Option<u64>,
    pub compute_units: Option<u32>,
}

/// Turns `acc`, the whole GPU as the registry and PCI give it, into one partition: its id
/// `amd-<physical>-p<index>`, its share of the memory (its own when smaller than the whole, else
/// the whole divided evenly), its partition record. HIP numbers partitions as devices of their
/// own (`own_ordinal`).
pub fn make(acc: &mut Accelerator, part: &Part) {
    acc.id = format!("amd-{}-p{}", part.physical, part.index);
    let whole = acc.memory_bytes;
    acc.memory_bytes = match (part.own_memory, whole) {
        (Some(own), Some(whole)) if own < whole => Some(own),
        (_, Some(whole)) => Some(whole / u64::from(part.share.max(1))),
        (own, None) => own,
    };
    acc.partition = Some(Partition {
        physical_id: format!("amd-{}", part.physical),
        index: part.index,
        mode: part.mode.clone(),
        compute_units: part.compute_units,
        own_ordinal: true,
    });
    acc.pci = Some(part.physical);
}

/// The HIP ordinal of a device (whole or partition): its isolation value.
pub fn set_ordinal(acc: &mut Accelerator, hip_index: u32) {
    acc.vocabulary.isolation = vec![hip_index.to_string()];
}
