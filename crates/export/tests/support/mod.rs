//! A real capture with faults put in, shared by the export tests of health.

use std::sync::Arc;

use accel_discover::{default_plugins, discover, fs::MemTree, Host};
use accel_model::{Machine, SkuRegistry};

/// The GB200 tray's real capture with faults put into its NVML recording and its PCI tree:
/// GPU1 has uncorrectable ECC errors, GPU2 trained at x8 of x16, and GPU3's recorded readings
/// are missing (its health source says nothing of it).
#[allow(dead_code)] // each test binary uses what it needs
pub fn faulty_gb200() -> Machine {
    let mut tree = MemTree::parse_bundle(&accel_testdata::bundle("gb200-nvl72-tray")).expect("valid bundle");
    let path = std::path::Path::new("/accel/nvml-metrics.json");
    let mut doc: serde_json::Value = serde_json::from_slice(tree.file(path).expect("a recording")).unwrap();
    let devices = doc["devices"].as_array_mut().unwrap();
    devices[1]["ecc_uncorrected_volatile"] = 3.into();
    devices.truncate(3);
    tree.add_file(path, serde_json::to_vec(&doc).unwrap());
    tree.add_file("/sys/devices/pci0018:00/0018:00:00.0/0018:01:00.0/current_link_width", "8\n");
    discover(&Host::in_memory(Arc::new(tree), SkuRegistry::builtin()), &default_plugins())
}
