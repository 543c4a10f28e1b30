//! `accel capture`: copies the allow-listed sysfs and procfs files discovery reads (the host
//! layer's, and what each family asks to keep: its vendor trees, its runtime's and the metadata
//! services' answers) from a host into an in-memory tree, written out as a bundle. Nothing else is copied: no `config` space, no serial numbers beyond what the report
//! already shows, no process data.

use std::path::{Path, PathBuf};

use accel_model::{Machine, PciAddr, Warning};

use crate::fs::MemTree;
use crate::plugin::Keep;
use crate::{Host, Vendor};

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

    /// One PCI function's directory: its attributes and the families' (`extra`), its driver link.
    fn pci_dir(&mut self, dir: &Path, extra: &[String]) {
        self.dir_files(dir, PCI_ATTRS);
        if let Some(target) = self.host.raw_link(&dir.join("driver")) {
            let at = self.machine_path(&dir.join("driver"));
            self.tree.add_link(at, target);
        }
        for rel in extra {
            match rel.split_once('/') {
                Some((first, rest)) if first.ends_with('*') => {
                    let prefix = first.trim_end_matches('*');
                    for entry in self.list(dir).into_iter().filter(|t| t.starts_with(prefix)) {
                        self.file(&dir.join(entry).join(rest));
                    }
                }
                _ => self.file(&dir.join(rel)),
            }
        }
    }

    /// What one family asked to keep.
    fn keep(&mut self, keep: Keep) {
        let p = |abs: &str| self.host.path(abs);
        match keep {
            Keep::File(path) => self.file(&p(&path)),
            Keep::Tree { path, depth } => {
                let path = p(&path);
                if self.host.is_dir(&path) {
                    self.tree_files(&path, depth);
                } else {
                    self.file(&path);
                }
            }
            Keep::PciAttributes(_) => {}
            Keep::ClassLinks(class) => {
                let dir = p(&class);
                for name in self.list(&dir) {
                    if let Some(target) = self.link(&dir.join(&name)) {
                        self.link(&target.join("device"));
                    }
                }
            }
            Keep::EachEntry { dir, file } => {
                let dir = p(&dir);
                for name in self.list(&dir) {
                    self.file(&dir.join(name).join(&file));
                }
            }
            Keep::DeviceNodes { dir, prefix, digits } => {
                let dir = p(&dir);
                for name in self.list(&dir) {
                    let rest = name.strip_prefix(prefix.as_str()).unwrap_or("");
                    let matches = name.starts_with(prefix.as_str())
                        && (!digits || (!rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit())));
                    if matches {
                        let at = self.machine_path(&dir.join(name));
                        self.tree.add_file(at, "");
                    }
                }
            }
            Keep::Record { path, bytes } => self.tree.add_file(path, bytes),
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

/// Copies what discovery of `host` reads: the host layer's files, and what each of `plugins`
/// asks to keep ([`Vendor::capture`]). `machine` (discovered from the same host) supplies the
/// answers to record.
pub fn capture(host: &Host, machine: &Machine, plugins: &[Box<dyn Vendor>]) -> (MemTree, Vec<Warning>) {
    let mut c = Copier { host, tree: MemTree::new(), warnings: Vec::new() };
    let keeps: Vec<Keep> = plugins.iter().flat_map(|plugin| plugin.capture(host, machine)).collect();
    let pci_extra: Vec<String> = keeps
        .iter()
        .filter_map(|k| match k {
            Keep::PciAttributes(files) => Some(files.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let p = |abs: &str| host.path(abs);
    c.dir_files(&p("/sys/class/dmi/id"), &["product_name", "sys_vendor"]);
    c.file(&p("/proc/sys/kernel/hostname"));
    // An imported capture's OS devices (`accel import hwloc`; crate::osdevs) travel with it.
    if host.exists(&p(crate::osdevs::OSDEVS_PATH)) {
        c.file(&p(crate::osdevs::OSDEVS_PATH));
    }
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
                    c.pci_dir(&parent, &pci_extra);
                    up = parent.parent().map(Path::to_path_buf);
                }
                c.pci_dir(&dir, &pci_extra);
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
    for keep in keeps {
        c.keep(keep);
    }
    (c.tree, c.warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/contributing-hardware.md ("What a capture must hold") names every file `accel
    /// capture` keeps: the host layer's and each built-in family's, on every sample.
    #[test]
    fn the_contributors_guide_names_every_file_a_capture_keeps() {
        let doc = include_str!("../../../docs/contributing-hardware.md");
        let section = doc.split("### What a capture must hold").nth(1).expect("the section exists");
        let section = section.split("\n## ").next().unwrap();
        let mut missing = Vec::new();
        let mut need = |what: &str| {
            if !section.contains(&format!("`{what}")) {
                missing.push(what.to_owned());
            }
        };
        for attr in PCI_ATTRS {
            need(attr);
        }
        for path in ["/sys/class/dmi/id/product_name", "/proc/sys/kernel/hostname", "/proc/meminfo"] {
            need(path);
        }
        need("/sys/devices/system/cpu/online");
        need(crate::osdevs::OSDEVS_PATH);
        for name in crate::samples::names() {
            let host = crate::samples::host(name, accel_model::SkuRegistry::builtin()).unwrap();
            let machine = crate::samples::machine(name).unwrap();
            for plugin in crate::default_plugins() {
                for keep in plugin.capture(&host, &machine) {
                    match keep {
                        Keep::File(p) | Keep::Tree { path: p, .. } | Keep::Record { path: p, .. } => need(&p),
                        // `/sys/kernel/iommu_groups/3/devices` is written with `<G>` for the group.
                        Keep::ClassLinks(p) => need(
                            &p.split('/')
                                .map(|c| if !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()) { "<G>" } else { c })
                                .collect::<Vec<_>>()
                                .join("/"),
                        ),
                        Keep::EachEntry { dir, file } => need(&format!("{dir}/<BDF>/{file}")),
                        Keep::DeviceNodes { dir, prefix, .. } => need(&format!("{dir}/{prefix}")),
                        Keep::PciAttributes(files) => files.iter().for_each(|f| need(f)),
                    }
                }
            }
        }
        missing.sort();
        missing.dedup();
        assert!(missing.is_empty(), "docs/contributing-hardware.md does not name: {missing:?}");
    }
}
