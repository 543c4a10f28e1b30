//! `accel capture`: copies the allow-listed sysfs and procfs files discovery reads (plus the NVML
//! snapshot and the metadata answers) from a host into an in-memory tree, written out as a
//! bundle. Nothing else is copied: no `config` space, no serial numbers beyond what the report
//! already shows, no process data.

use std::path::{Path, PathBuf};

use accel_model::{DomainKind, Machine, PciAddr, Warning};

use crate::fs::MemTree;
use crate::nvidia::RECORDED_NVML;
use crate::platform::{RECORDED_GCE, RECORDED_IMDS, RECORDED_LABELS};
use crate::Host;

const SRC: &str = "capture";

/// Attributes copied from every PCI function directory.
const PCI_ATTRS: &[&str] = &[
    "uevent",
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "numa_node",
    "local_cpulist",
    "local_cpus",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    // amdgpu
    "mem_info_vram_total",
    "unique_id",
    "current_compute_partition",
    "current_memory_partition",
    // i915
    "lmem_total_bytes",
    // habanalabs
    "device_type",
    "module_id",
    "pci_addr",
];

struct Copier<'h> {
    host: &'h Host,
    tree: MemTree,
    warnings: Vec<Warning>,
}

impl Copier<'_> {
    /// The in-machine path of a path under the host's root.
    fn machine_path(&self, p: &Path) -> PathBuf {
        PathBuf::from(self.host.display(p))
    }

    fn file(&mut self, p: &Path) {
        if let Some(text) = self.host.read_text(p, 1 << 20, SRC, &mut self.warnings) {
            let at = self.machine_path(p);
            self.tree.add_file(at, text);
        }
    }

    /// Copies a symlink as it is and returns where it leads (under the root).
    fn link(&mut self, p: &Path) -> Option<PathBuf> {
        let target = self.host.raw_link(p)?;
        let at = self.machine_path(p);
        self.tree.add_link(at, target);
        self.host.resolve_link(p)
    }

    /// One PCI function's directory: its attributes, its driver link, xe tile memory.
    fn pci_dir(&mut self, dir: &Path) {
        self.dir_files(dir, PCI_ATTRS);
        if let Some(target) = self.host.raw_link(&dir.join("driver")) {
            let at = self.machine_path(&dir.join("driver"));
            self.tree.add_link(at, target);
        }
        for tile in self.list(dir).into_iter().filter(|t| t.starts_with("tile")) {
            self.file(&dir.join(tile).join("physical_vram_size_bytes"));
        }
    }

    fn dir_files(&mut self, dir: &Path, names: &[&str]) {
        for n in names {
            self.file(&dir.join(n));
        }
    }

    fn list(&mut self, dir: &Path) -> Vec<String> {
        self.host.list_dir(dir, SRC, &mut self.warnings)
    }

    /// Every file below `dir` (bounded depth), for small vendor trees such as KFD and Neuron.
    fn tree_files(&mut self, dir: &Path, depth: u32) {
        if depth == 0 {
            return;
        }
        for name in self.list(dir) {
            let p = dir.join(&name);
            if self.host.raw_link(&p).is_some() {
                continue;
            }
            if self.host.is_dir(&p) {
                self.tree_files(&p, depth - 1);
            } else {
                self.file(&p);
            }
        }
    }
}

/// Copies what discovery of `host` reads. `machine` (discovered from the same host) supplies the
/// network answers to record.
pub fn capture(host: &Host, machine: &Machine) -> (MemTree, Vec<Warning>) {
    let mut c = Copier { host, tree: MemTree::new(), warnings: Vec::new() };
    let p = |abs: &str| host.path(abs);
    c.dir_files(&p("/sys/class/dmi/id"), &["product_name", "sys_vendor"]);
    c.file(&p("/proc/sys/kernel/hostname"));
    c.file(&p("/proc/meminfo"));
    c.file(&p("/sys/devices/system/cpu/online"));
    let nodes = p("/sys/devices/system/node");
    for n in c.list(&nodes).into_iter().filter(|n| n.starts_with("node")) {
        c.dir_files(&nodes.join(n), &["cpulist", "meminfo", "distance"]);
    }
    // The PCI tree: each function's link and the attributes of its directory and its parents.
    let bus = p("/sys/bus/pci/devices");
    for name in c.list(&bus) {
        let entry = bus.join(&name);
        match c.link(&entry) {
            Some(dir) => {
                // Bridges on the path that /sys/bus/pci/devices does not list are still read by
                // discovery (the tree comes from the path), so copy every BDF directory above too.
                let mut up = dir.parent().map(Path::to_path_buf);
                while let Some(parent) = up.filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.len() >= 12 && n.parse::<PciAddr>().is_ok())
                }) {
                    c.pci_dir(&parent);
                    up = parent.parent().map(Path::to_path_buf);
                }
                c.pci_dir(&dir);
            }
            None => c.dir_files(&entry, PCI_ATTRS),
        }
    }
    for class in ["/sys/class/net", "/sys/class/infiniband"] {
        let dir = p(class);
        for name in c.list(&dir) {
            let Some(target) = c.link(&dir.join(&name)) else { continue };
            // Virtual interfaces (lo, bridges) are not NICs and refuse `speed` with EINVAL.
            if !target.to_string_lossy().contains("/pci") {
                continue;
            }
            c.file(&target.join("speed"));
            c.file(&target.join("ports/1/rate"));
            if c.host.raw_link(&target.join("device")).is_some() {
                c.link(&target.join("device"));
            }
        }
    }
    // Vendor trees.
    c.tree_files(&p("/sys/class/kfd/kfd/topology"), 5);
    c.tree_files(&p("/sys/devices/virtual/neuron_device"), 4);
    let accel = p("/sys/class/accel");
    for name in c.list(&accel) {
        if let Some(target) = c.link(&accel.join(&name)) {
            c.link(&target.join("device"));
        }
    }
    let gpus = p("/proc/driver/nvidia/gpus");
    for name in c.list(&gpus) {
        c.file(&gpus.join(name).join("information"));
    }
    for dev in ["/dev/vfio", "/dev"] {
        let dir = p(dev);
        for name in c.list(&dir) {
            let keep =
                if dev == "/dev" { name.starts_with("accel") } else { name.chars().all(|ch| ch.is_ascii_digit()) };
            if keep {
                let at = c.machine_path(&dir.join(name));
                c.tree.add_file(at, "");
            }
        }
    }
    // What NVML and the network said, recorded for replay.
    if let Some(Ok(snapshot)) = host.nvml().map(|n| n.snapshot()) {
        if let Ok(json) = serde_json::to_string_pretty(&snapshot) {
            c.tree.add_file(RECORDED_NVML, json);
        }
    } else {
        c.file(&p(RECORDED_NVML));
    }
    if let Some(env) = machine.attributes.get("gce.tpu-env") {
        c.tree.add_file(format!("{RECORDED_GCE}/tpu-env"), env.as_str());
    }
    for d in &machine.domains {
        if d.kind == DomainKind::ZONE && d.source.starts_with("gce-metadata") {
            c.tree.add_file(format!("{RECORDED_GCE}/zone"), format!("zones/{}", d.name));
        }
        if d.kind == DomainKind::ZONE && d.source.starts_with("ec2-imds") {
            c.tree.add_file(format!("{RECORDED_IMDS}/availability-zone"), d.name.as_str());
        }
    }
    match host.labels_file() {
        Some(path) => {
            if let Ok(text) = crate::platform::read_outside(path) {
                c.tree.add_file(RECORDED_LABELS, text);
            }
        }
        None => c.file(&p(RECORDED_LABELS)),
    }
    (c.tree, c.warnings)
}
