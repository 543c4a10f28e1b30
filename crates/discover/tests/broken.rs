//! Broken input: malformed, truncated, looping or hostile sysfs trees give warnings and a partial
//! machine, never a panic or a hang.

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use accel_discover::{default_plugins, discover, Host};
use accel_model::{Machine, SkuRegistry};
use proptest::prelude::*;

struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let dir = std::env::temp_dir().join(format!("accel-broken-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Tree(dir)
    }

    fn file(&self, rel: &str, content: impl AsRef<[u8]>) -> &Tree {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
        self
    }

    fn link(&self, rel: &str, target: &str) -> &Tree {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
        self
    }

    fn discover(&self) -> Machine {
        discover(&Host::new(&self.0, SkuRegistry::builtin()), &default_plugins())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn warned(machine: &Machine, path_part: &str, message_part: &str) -> bool {
    machine
        .warnings
        .iter()
        .any(|w| w.path.as_deref().is_some_and(|p| p.contains(path_part)) && w.message.contains(message_part))
}

/// A device directory under a host bridge, linked from /sys/bus/pci/devices.
fn device(tree: &Tree, chain: &str, bdf: &str, attrs: &[(&str, &[u8])]) {
    let dir = format!("sys/devices/{chain}/{bdf}");
    for (name, value) in attrs {
        tree.file(&format!("{dir}/{name}"), value);
    }
    let depth = "../../..";
    tree.link(&format!("sys/bus/pci/devices/{bdf}"), &format!("{depth}/devices/{chain}/{bdf}"));
}

#[test]
fn garbage_becomes_warnings() {
    let t = Tree::new("garbage");
    t.file("sys/devices/system/node/node0/cpulist", "0-3\n")
        .file("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: lots kB\n")
        .file("sys/devices/system/node/node0/distance", "10 x\n")
        .file("sys/devices/system/node/node1/cpulist", "4-7\n")
        .file("sys/devices/system/node/node1/distance", "10\n")
        .file("sys/devices/system/node/nodeX/cpulist", "0\n")
        .file("sys/devices/system/node/possible", "0-1\n");
    // An H100 whose numa_node is -1: placed by local_cpulist.
    device(
        &t,
        "pci0000:00/0000:00:01.0",
        "0000:01:00.0",
        &[
            ("vendor", b"0x10de\n"),
            ("device", b"0x2330\n"),
            ("class", b"0x030200\n"),
            ("numa_node", b"-1\n"),
            ("local_cpulist", b"4-7\n"),
            ("current_link_speed", b"32.0 GT/s PCIe\n"),
            ("current_link_width", b"16\n"),
        ],
    );
    t.file("sys/devices/pci0000:00/0000:00:01.0/class", "0x060400\n");
    // Garbage ids, a class that is a directory, a numa node that does not exist, a huge file.
    device(
        &t,
        "pci0000:00/0000:00:02.0",
        "0000:02:00.0",
        &[
            ("vendor", b"zz\n"),
            ("device", b""),
            ("numa_node", b"7\n"),
            ("current_link_speed", b"Unknown\n"),
            ("local_cpus", &[0xff, 0xfe, 0x00]),
        ],
    );
    std::fs::create_dir_all(t.0.join("sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0/class")).unwrap();
    t.file("sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0/subsystem_vendor", vec![b'1'; 100_000]);
    // A 32-bit domain processing accelerator.
    device(
        &t,
        "pci10000:00",
        "10000:00:04.0",
        &[("vendor", b"0x1d0f\n"), ("device", b"0x7364\n"), ("class", b"0x120000\n")],
    );
    // Entries that are not addresses, a link to itself, an absolute link that must stay in the root.
    t.file("sys/bus/pci/devices/not-a-bdf", "");
    t.link("sys/bus/pci/devices/0000:09:00.0", "0000:09:00.0");
    t.link("sys/bus/pci/devices/0000:0a:00.0", "/sys/devices/pci0000:0a/0000:0a:00.0");
    t.file("sys/devices/pci0000:0a/0000:0a:00.0/class", "0x0b4000\n");
    // A netdev whose speed is garbage and one with no device link (virtual).
    t.link("sys/class/net/eth0", "../../devices/pci0000:00/0000:00:02.0/0000:02:00.0/net/eth0");
    t.file("sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0/net/eth0/speed", "-1\n");
    t.file("sys/class/net/lo/speed", "x");
    t.file("sys/class/dmi/id/product_name", [0xc3, 0x28]);

    let m = t.discover();

    assert_eq!(m.numa_nodes.iter().map(|n| n.id).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(m.numa_nodes[0].memory_bytes, None);
    assert!(m.numa_nodes[0].distances.is_empty() && m.numa_nodes[1].distances.is_empty());
    assert!(warned(&m, "node0/meminfo", "unparsable value"));
    assert!(warned(&m, "node0/distance", "unparsable value"));
    assert!(warned(&m, "node1/distance", "1 distances for 2 nodes"));
    assert!(warned(&m, "dmi/id/product_name", "not UTF-8"));

    let h100 = m.accelerators.iter().find(|a| a.pci.map(|p| p.to_string()) == Some("0000:01:00.0".into())).unwrap();
    assert_eq!(h100.sku.as_deref(), Some("nvidia-h100-sxm"));
    assert_eq!(h100.numa_node, Some(1), "placed by local_cpulist");
    let trn2 = m.accelerators.iter().find(|a| a.pci.map(|p| p.domain) == Some(0x10000)).unwrap();
    assert_eq!(trn2.vendor, "aws");
    // The re-rooted absolute link: found inside the tree, not on the live machine. A
    // co-processor no entry claims is a PCI function, named as one, not an accelerator.
    assert!(m.pci_node("0000:0a:00.0").is_some());
    assert!(m.attributes.contains_key("offload.0000:0a:00.0"), "{:?}", m.attributes);
    assert!(!m.accelerators.iter().any(|a| a.pci.map(|p| p.to_string()) == Some("0000:0a:00.0".into())));

    let bad = m.pci_node("0000:02:00.0").unwrap();
    assert_eq!((bad.vendor, bad.device, bad.class, bad.numa_node, bad.link), (None, None, None, None, None));
    assert!(warned(&m, "0000:02:00.0/vendor", "unparsable value \"zz\""));
    assert!(warned(&m, "0000:02:00.0/class", "unreadable"));
    assert!(warned(&m, "0000:02:00.0/numa_node", "names node 7, which does not exist"));
    assert!(warned(&m, "0000:02:00.0/subsystem_vendor", "larger than 64 KiB"));
    assert!(warned(&m, "not-a-bdf", "not a PCI address"));
    assert!(warned(&m, "0000:09:00.0", "unreadable"), "{:#?}", m.warnings);

    let eth0 = m.nics.iter().find(|n| n.netdev.as_deref() == Some("eth0")).unwrap();
    assert_eq!(eth0.speed_mbps, None);
    assert!(!m.nics.iter().any(|n| n.netdev.as_deref() == Some("lo")));
}

#[test]
fn an_empty_root_is_an_empty_machine() {
    let t = Tree::new("empty");
    std::fs::create_dir_all(t.0.join("sys")).unwrap();
    let m = t.discover();
    assert_eq!(m.numa_nodes.len(), 1, "one implicit node");
    assert!(m.pci.is_empty() && m.accelerators.is_empty() && m.nics.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever bytes the attribute files hold, discovery finishes without panicking.
    #[test]
    fn any_attribute_bytes_are_survivable(values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 10)) {
        let t = Tree::new("prop");
        let names = ["vendor", "device", "class", "numa_node", "local_cpulist", "local_cpus", "current_link_speed", "current_link_width", "subsystem_vendor", "max_link_width"];
        let attrs: Vec<(&str, &[u8])> = names.iter().zip(&values).map(|(n, v)| (*n, v.as_slice())).collect();
        device(&t, "pci0000:00/0000:00:01.0", "0000:01:00.0", &attrs);
        t.file("sys/devices/system/node/node0/cpulist", &values[4]);
        t.file("sys/devices/system/node/node0/distance", &values[3]);
        t.file("sys/devices/system/node/node0/meminfo", &values[0]);
        let m = t.discover();
        prop_assert!(m.pci.len() >= 2);
    }
}

/// Regression: an absolute symlink inside `--root` (such as `sys/devices/pci0000:00 ->
/// /sys/devices/pci0000:00`, or the NUMA directory) was followed by the kernel, so the live
/// machine's devices showed up in a "captured" one. Every read now resolves inside the root, and
/// the link out is a warning.
#[test]
fn absolute_symlinks_never_reach_the_live_machine() {
    let t = Tree::new("escape");
    // The captured machine has one NUMA node (cpus 0-3) and one PCI function, both under
    // directories that are absolute links to the live /sys.
    t.link("sys/devices/system", "/sys/devices/system");
    t.file("sys/devices/pci0000:00/0000:00:01.0/vendor", "0x10de\n");
    t.link("sys/bus/pci/devices/0000:00:01.0", "../../../devices/pci0000:00/0000:00:01.0");
    // A live PCI host bridge behind an absolute link, and a link to the live bus listing.
    t.link("sys/devices/pci0000:00/0000:00:01.0/live", "/sys/devices");
    let live_bdfs: Vec<String> = std::fs::read_dir("/sys/bus/pci/devices")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|b| b != "0000:00:01.0").collect())
        .unwrap_or_default();
    for bdf in live_bdfs.iter().take(3) {
        t.link(&format!("sys/bus/pci/devices/{bdf}"), &format!("/sys/bus/pci/devices/{bdf}"));
    }
    let m = t.discover();
    // Nothing of the live machine: no NUMA node read from the live /sys (the implicit one only,
    // with no CPUs from the live machine), no live PCI function.
    assert!(m.numa_nodes.iter().all(|n| n.cpus.is_empty()), "{:?}", m.numa_nodes);
    for bdf in live_bdfs.iter().take(3) {
        let node = m.pci_node(bdf);
        assert!(node.is_none_or(|n| n.vendor.is_none() && n.class.is_none()), "live {bdf} read: {node:?}");
    }
    let ours = m.pci_node("0000:00:01.0").expect("the captured function");
    assert_eq!(ours.vendor, Some(accel_model::PciId(0x10de)));
    let w: Vec<_> = m.warnings.iter().filter(|w| w.message.contains("symlinks lead out of the root")).collect();
    assert_eq!(w.len(), 1, "{:#?}", m.warnings);
    assert!(w[0].message.contains("/sys/devices/system"), "{:?}", w[0]);
}

/// The same rule for in-tree absolute links whose target exists in the capture: they resolve
/// inside the root (re-rooted), and the link is reported.
#[test]
fn absolute_symlink_inside_the_capture_is_rerooted_and_reported() {
    let t = Tree::new("reroot");
    t.file("sys/devices/real-node/node0/cpulist", "0-3\n");
    t.link("sys/devices/system/node", "/sys/devices/real-node");
    let m = t.discover();
    assert_eq!(m.numa_nodes.len(), 1);
    assert_eq!(m.numa_nodes[0].cpus.len(), 4, "read through the re-rooted link: {:?}", m.numa_nodes);
    assert!(m.warnings.iter().any(|w| w.message.contains("symlinks lead out of the root")), "{:#?}", m.warnings);
}

/// Regression (security): a FIFO inside a captured root hung discovery forever (the open waits
/// for a writer), and device nodes inside it were opened, as whoever runs accel (often root), so
/// their drivers ran. Now nothing but a regular file is opened: a FIFO, a character device and a
/// socket each become a warning naming the path, and discovery finishes.
#[test]
fn special_files_in_a_capture_are_warnings_never_opened() {
    use rustix::fs::{FileType, Mode};
    let t = Tree::new("special");
    t.file("sys/devices/system/node/node0/cpulist", "0-3\n");
    device(&t, "pci0000:00/0000:00:01.0", "0000:01:00.0", &[("device", b"0x2330\n"), ("class", b"0x030200\n")]);
    let dir = t.0.join("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0");
    let cwd = rustix::fs::CWD;
    // The vendor attribute is a FIFO nobody writes: an open without O_NONBLOCK never returns.
    rustix::fs::mknodat(cwd, dir.join("vendor"), FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    // numa_node is /dev/null's device node (1:3), local_cpulist a socket.
    let null = rustix::fs::makedev(1, 3);
    let made_char =
        rustix::fs::mknodat(cwd, dir.join("numa_node"), FileType::CharacterDevice, Mode::from_raw_mode(0o600), null)
            .is_ok();
    let _sock = std::os::unix::net::UnixListener::bind(dir.join("local_cpulist")).unwrap();
    let root = t.0.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(discover(&Host::new(&root, SkuRegistry::builtin()), &default_plugins()));
    });
    let m = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("discovery hung on a FIFO in the capture");
    assert!(warned(&m, "0000:01:00.0/vendor", "not a regular file (a FIFO)"), "{:#?}", m.warnings);
    assert!(warned(&m, "0000:01:00.0/local_cpulist", "not a regular file (a socket)"), "{:#?}", m.warnings);
    if made_char {
        assert!(warned(&m, "0000:01:00.0/numa_node", "not a regular file (a character device)"), "{:#?}", m.warnings);
    }
    // The regular attributes beside them are still read.
    let node = m.pci_node("0000:01:00.0").expect("the function is still reported");
    assert_eq!(node.device, Some(accel_model::PciId(0x2330)));
}
