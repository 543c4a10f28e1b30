//! Each family's device numbering and device files come from where its runtime takes them (the
//! NVIDIA driver's recorded minor, NVML's index, the Neuron driver's `neuron<N>`, the chip's own
//! accel class device or IOMMU group, KFD's node order and render minor), tested on captures
//! whose numbering differs from PCI order, and on malformed files: warnings naming the file,
//! never a panic. Each test says what the old positional code got.

use std::sync::Arc;

use accel_discover::families::nvidia::nvml::{NvmlDevice, NvmlSnapshot, RecordedNvml};
use accel_discover::families::nvidia::NvmlHost;
use accel_discover::fs::MemTree;
use accel_discover::{default_plugins, discover, Host};
use accel_model::{Accelerator, Machine, SkuRegistry};

fn run(tree: MemTree) -> Machine {
    discover(&Host::in_memory(Arc::new(tree), SkuRegistry::builtin()), &default_plugins())
}

fn run_nvml(tree: MemTree, devices: Vec<NvmlDevice>) -> Machine {
    let snap = NvmlSnapshot { driver_version: None, devices, errors: Vec::new() };
    let host = Host::in_memory(Arc::new(tree), SkuRegistry::builtin()).with_nvml(Arc::new(RecordedNvml(Ok(snap))));
    discover(&host, &default_plugins())
}

/// A warning containing every one of `parts`.
fn warned(m: &Machine, parts: &[&str]) -> bool {
    m.warnings.iter().any(|w| {
        let text = w.to_string();
        parts.iter().all(|p| text.contains(p))
    })
}

/// One PCI function at `bdf` (its own host bridge) with a uevent; returns its sysfs directory.
fn pci(t: &mut MemTree, bdf: &str, id: &str, class: &str) -> String {
    let bus = &bdf[..7];
    let dir = format!("/sys/devices/pci{bus}/{bdf}");
    t.add_file(format!("{dir}/uevent"), format!("PCI_CLASS={class}\nPCI_ID={id}\n"));
    t.add_link(format!("/sys/bus/pci/devices/{bdf}"), format!("../../..{}", &dir[4..]));
    dir
}

/// The device with PCI address `bdf`.
fn at<'m>(m: &'m Machine, bdf: &str) -> &'m Accelerator {
    m.accelerators.iter().find(|a| a.pci.map(|p| p.to_string()).as_deref() == Some(bdf)).expect(bdf)
}

fn files(m: &Machine, bdf: &str) -> Vec<String> {
    at(m, bdf).vocabulary.device_files.clone()
}

fn isolation(m: &Machine, bdf: &str) -> Vec<String> {
    at(m, bdf).vocabulary.isolation.clone()
}

// --- NVIDIA ----------------------------------------------------------------------------------

const H100: &str = "10DE:2330";
const GPUS: [&str; 3] = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"];

fn nv_info(t: &mut MemTree, bdf: &str, minor: &str) {
    t.add_file(
        format!("/proc/driver/nvidia/gpus/{bdf}/information"),
        format!("Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-{bdf}\nBus Location: \t {bdf}\nDevice Minor: \t {minor}\n"),
    );
}

fn nv_tree(minors: &[Option<&str>]) -> MemTree {
    let mut t = MemTree::new();
    for (bdf, minor) in GPUS.iter().zip(minors) {
        pci(&mut t, bdf, H100, "30200");
        if let Some(m) = minor {
            nv_info(&mut t, bdf, m);
        }
    }
    t
}

fn nvml_dev(index: u32, bdf: &str, uuid: Option<&str>) -> NvmlDevice {
    NvmlDevice { index, pci_bus_id: format!("0000{bdf}"), uuid: uuid.map(Into::into), ..NvmlDevice::default() }
}

#[test]
fn nvidia_minors_come_from_procfs_not_pci_order() {
    // The driver recorded minors 2, 0, 1 for the GPUs in PCI order. The old code gave
    // /dev/nvidia0, 1, 2 (positions), with NVML and without it.
    let devices = GPUS.iter().enumerate().map(|(i, b)| nvml_dev(i as u32, b, Some(&format!("GPU-{i}")))).collect();
    for m in [
        run(nv_tree(&[Some("2"), Some("0"), Some("1")])),
        run_nvml(nv_tree(&[Some("2"), Some("0"), Some("1")]), devices),
    ] {
        assert_eq!(files(&m, GPUS[0]), ["/dev/nvidia2"]);
        assert_eq!(files(&m, GPUS[1]), ["/dev/nvidia0"]);
        assert_eq!(files(&m, GPUS[2]), ["/dev/nvidia1"]);
        assert!(!warned(&m, &["Device Minor"]), "{:#?}", m.warnings);
    }
}

#[test]
fn nvidia_without_a_uuid_is_selected_by_nvml_index() {
    // NVML lists the GPUs without UUIDs, with its own indices (1, 0: what nvidia-smi and CUDA
    // with PCI_BUS_ID order would use on this host). The old code put our position (0, 1) in
    // CUDA_VISIBLE_DEVICES.
    let mut t = MemTree::new();
    for bdf in &GPUS[..2] {
        pci(&mut t, bdf, H100, "30200");
    }
    let m = run_nvml(t, vec![nvml_dev(1, GPUS[0], None), nvml_dev(0, GPUS[1], None)]);
    assert_eq!(isolation(&m, GPUS[0]), ["1"]);
    assert_eq!(isolation(&m, GPUS[1]), ["0"]);
    let nvidia = default_plugins().into_iter().find(|p| p.id() == "nvidia").unwrap();
    let both: Vec<&Accelerator> = vec![at(&m, GPUS[1]), at(&m, GPUS[0])];
    assert_eq!(nvidia.isolate(&both).env["CUDA_VISIBLE_DEVICES"], "0,1");
    // Mixed: a GPU with a UUID is still selected by it.
    let m =
        run_nvml(nv_tree(&[None, None, None]), vec![nvml_dev(0, GPUS[0], Some("GPU-a")), nvml_dev(2, GPUS[1], None)]);
    assert_eq!(isolation(&m, GPUS[0]), ["GPU-a"]);
    assert_eq!(isolation(&m, GPUS[1]), ["2"]);
}

#[test]
fn nvidia_malformed_minors_warn_and_fall_back() {
    // Garbage in one file, the same minor in two others: each named, and PCI order used only
    // where it names no recorded minor.
    let mut t = nv_tree(&[Some("seven"), Some("1"), Some("1")]);
    pci(&mut t, "0000:4a:00.0", H100, "30200");
    nv_info(&mut t, "0000:4a:00.0", "0");
    let m = run(t);
    assert!(warned(&m, &["/proc/driver/nvidia/gpus/0000:18:00.0/information", "unparsable Device Minor \"seven\""]));
    assert!(warned(
        &m,
        &["all record Device Minor 1", "/proc/driver/nvidia/gpus/0000:2a:00.0/information", "0000:3a:00.0/information"]
    ));
    // 4a's recorded 0 stands; 18 (position 0) would collide with it, so it gets no file.
    assert_eq!(files(&m, "0000:4a:00.0"), ["/dev/nvidia0"]);
    assert!(files(&m, GPUS[0]).is_empty());
    assert!(warned(&m, &["0000:18:00.0", "PCI order names another GPU's"]));
    assert_eq!(files(&m, GPUS[1]), ["/dev/nvidia1"]);
    assert_eq!(files(&m, GPUS[2]), ["/dev/nvidia2"]);
    assert!(warned(&m, &["0000:2a:00.0, 0000:3a:00.0", "assumed from PCI order"]));
}

#[test]
fn nvidia_missing_procfs_falls_back_to_pci_order_with_a_warning() {
    // No information file for one GPU, none at all on another host. The old code gave the
    // same files but said nothing.
    let m = run(nv_tree(&[Some("0"), None, Some("2")]));
    assert_eq!(files(&m, GPUS[1]), ["/dev/nvidia1"]);
    assert!(warned(
        &m,
        &["no usable Device Minor for GPUs 0000:2a:00.0 (/proc/driver/nvidia/gpus/<bdf>/information", "assumed"]
    ));
    let m = run(nv_tree(&[None, None, None]));
    assert_eq!(files(&m, GPUS[2]), ["/dev/nvidia2"]);
    assert!(warned(&m, &["0000:18:00.0, 0000:2a:00.0, 0000:3a:00.0", "assumed from PCI order"]));
    // A file without the line names the file.
    let mut t = nv_tree(&[Some("0"), Some("1"), None]);
    t.add_file("/proc/driver/nvidia/gpus/0000:3a:00.0/information", "Model: NVIDIA H100\nBus Location: 0000:3a:00.0\n");
    let m = run(t);
    assert!(warned(&m, &["/proc/driver/nvidia/gpus/0000:3a:00.0/information", "has no Device Minor line"]));
}

#[test]
fn nvidia_mig_partitions_share_their_gpus_recorded_minor() {
    use accel_discover::families::nvidia::nvml::NvmlMigDevice;
    let mut dev = nvml_dev(0, GPUS[0], Some("GPU-0"));
    dev.mig_enabled = Some(true);
    dev.mig_devices = vec![NvmlMigDevice { index: 0, uuid: Some("MIG-a".into()), ..NvmlMigDevice::default() }];
    let m = run_nvml(nv_tree(&[Some("5"), Some("0"), Some("1")]), vec![dev]);
    let mig = m.accelerators.iter().find(|a| a.partition.is_some()).expect("MIG device");
    assert_eq!(mig.vocabulary.device_files, ["/dev/nvidia5"]);
}

// --- Neuron ----------------------------------------------------------------------------------

const TRN2: &str = "1D0F:7364";
const NEURON: &str = "/sys/devices/virtual/neuron_device";
const NEURON_PCI: [&str; 4] = ["0000:10:00.0", "0000:11:00.0", "0000:12:00.0", "0000:13:00.0"];

fn neuron_tree(ids: &[u32]) -> MemTree {
    let mut t = MemTree::new();
    for bdf in NEURON_PCI {
        pci(&mut t, bdf, TRN2, "88000");
    }
    for n in ids {
        t.add_file(format!("{NEURON}/neuron{n}/core_count"), "8");
        t.add_file(format!("{NEURON}/neuron{n}/connected_devices"), "");
    }
    t
}

#[test]
fn neuron_ids_from_device_links_not_pci_order() {
    // neuron0 is the last PCI function, neuron1 the first (as on trn2, where the driver numbers
    // devices by firmware routing id). The old code gave 10:00.0 /dev/neuron0 and cores 0-7.
    let mut t = neuron_tree(&[0, 1, 2, 3]);
    for (n, bdf) in [(0, "0000:13:00.0"), (1, "0000:10:00.0"), (2, "0000:12:00.0"), (3, "0000:11:00.0")] {
        t.add_link(format!("{NEURON}/neuron{n}/device"), format!("../../../pci0000:{}/{bdf}", &bdf[5..7]));
    }
    t.add_file(format!("{NEURON}/neuron0/connected_devices"), "1");
    let m = run(t);
    assert_eq!(files(&m, "0000:10:00.0"), ["/dev/neuron1"]);
    // Logical NeuronCores: 8 physical per Trainium2, 4 at the runtime's default LNC=2.
    assert_eq!(isolation(&m, "0000:10:00.0"), ["4-7"]);
    assert_eq!(files(&m, "0000:11:00.0"), ["/dev/neuron3"]);
    assert_eq!(isolation(&m, "0000:11:00.0"), ["12-15"]);
    assert_eq!(files(&m, "0000:13:00.0"), ["/dev/neuron0"]);
    assert_eq!(isolation(&m, "0000:13:00.0"), ["0-3"]);
    // neuron0's neighbour 1 is the device at 10:00.0 (the old code linked 10:00.0 and 11:00.0).
    let ids: Vec<(&str, &str)> = m.links.iter().map(|l| (l.a.as_str(), l.b.as_str())).collect();
    assert_eq!(ids, [("aws-0000:10:00.0", "aws-0000:13:00.0")]);
    assert!(!warned(&m, &["paired in PCI order"]), "{:#?}", m.warnings);
}

#[test]
fn neuron_ids_are_the_drivers_even_without_links() {
    // Ids 0, 1, 4, 5 (two devices failed to probe, or were numbered by routing id): the files and
    // core ids are the driver's N (times 4 logical cores at LNC=2), paired in PCI order with a
    // warning. The old code gave /dev/neuron2 and cores 16-23 (physical) to the third device.
    let m = run(neuron_tree(&[0, 1, 4, 5]));
    assert_eq!(files(&m, "0000:12:00.0"), ["/dev/neuron4"]);
    assert_eq!(isolation(&m, "0000:12:00.0"), ["16-19"]);
    assert_eq!(isolation(&m, "0000:13:00.0"), ["20-23"]);
    assert!(warned(&m, &[NEURON, "paired in PCI order", "0000:12:00.0=neuron4"]));
}

#[test]
fn neuron_malformed_links_and_counts_warn() {
    // A link to a function that is no Neuron device, two links to one function, and a count
    // that does not match: each warns, naming the path; nothing panics.
    let mut t = neuron_tree(&[0, 1, 2, 3]);
    t.add_link(format!("{NEURON}/neuron0/device"), "../../../pci0000:99/0000:99:00.0");
    t.add_link(format!("{NEURON}/neuron1/device"), "../../../pci0000:12/0000:12:00.0");
    t.add_link(format!("{NEURON}/neuron2/device"), "../../../pci0000:12/0000:12:00.0");
    let m = run(t);
    assert!(warned(&m, &["neuron0/device", "leads to no Neuron PCI function"]));
    assert!(warned(&m, &["neuron2/device", "another device names"]));
    assert_eq!(files(&m, "0000:12:00.0"), ["/dev/neuron1"]);
    assert!(warned(&m, &["paired in PCI order"]));
    let m = run(neuron_tree(&[0, 1]));
    assert!(warned(&m, &["2 neuron devices in sysfs for 4 on PCI"]));
    let m = run(neuron_tree(&[]));
    assert_eq!(files(&m, "0000:13:00.0"), ["/dev/neuron3"]);
    assert!(warned(&m, &["sysfs missing", "assumed from PCI order"]));
}

// --- TPU -------------------------------------------------------------------------------------

const V6E: &str = "1AE0:006F";
const CHIPS: [&str; 4] = ["0000:01:00.0", "0000:11:00.0", "0000:21:00.0", "0000:31:00.0"];

fn tpu_tree() -> MemTree {
    let mut t = MemTree::new();
    for bdf in CHIPS {
        pci(&mut t, bdf, V6E, "120000");
    }
    t
}

#[test]
fn tpu_vfio_groups_from_each_chips_iommu_group() {
    // Groups 7, 3, 5, 1 for the chips in PCI order. The old code, on a capture without /dev,
    // gave /dev/accel0..3 (positions, and the wrong kind of node).
    for with_dev in [false, true] {
        let mut t = tpu_tree();
        for (bdf, g) in CHIPS.iter().zip([7, 3, 5, 1]) {
            let dir = format!("/sys/devices/pci{}/{bdf}", &bdf[..7]);
            t.add_link(format!("{dir}/iommu_group"), format!("../../../kernel/iommu_groups/{g}"));
            if with_dev {
                t.add_file(format!("/dev/vfio/{g}"), "");
            }
        }
        let m = run(t);
        let got: Vec<Vec<String>> = CHIPS.iter().map(|c| files(&m, c)).collect();
        assert_eq!(got, [["/dev/vfio/7"], ["/dev/vfio/3"], ["/dev/vfio/5"], ["/dev/vfio/1"]]);
        assert!(!warned(&m, &["assumed from PCI order"]), "{:#?}", m.warnings);
    }
}

#[test]
fn tpu_vfio_groups_from_the_kernels_group_list() {
    // What a capture keeps: /sys/kernel/iommu_groups/<g>/devices/<bdf>, groups 2, 9, 4, 6 for
    // the chips in PCI order. The old code gave /dev/accel0..3.
    let mut t = tpu_tree();
    for (bdf, g) in CHIPS.iter().zip([2, 9, 4, 6]) {
        let dir = format!("/sys/devices/pci{}/{bdf}", &bdf[..7]);
        t.add_link(format!("/sys/kernel/iommu_groups/{g}/devices/{bdf}"), format!("../../../..{}", &dir[4..]));
    }
    let m = run(t);
    let got: Vec<Vec<String>> = CHIPS.iter().map(|c| files(&m, c)).collect();
    assert_eq!(got, [["/dev/vfio/2"], ["/dev/vfio/9"], ["/dev/vfio/4"], ["/dev/vfio/6"]]);
}

#[test]
fn tpu_accel_nodes_from_the_class_device() {
    // v4-style /dev/accel<N>, numbered 2, 0, 3, 1 for the chips in PCI order. The old code gave
    // /dev/accel0..3 by position.
    let mut t = tpu_tree();
    for (bdf, n) in CHIPS.iter().zip([2, 0, 3, 1]) {
        let dir = format!("/sys/devices/pci{}/{bdf}", &bdf[..7]);
        t.add_link(
            format!("/sys/class/accel/accel{n}"),
            format!("../../devices/pci{}/{bdf}/accel/accel{n}", &bdf[..7]),
        );
        t.add_link(format!("{dir}/accel/accel{n}/device"), "../../../".to_owned() + bdf);
        t.add_file(format!("/dev/accel{n}"), "");
    }
    let m = run(t);
    let got: Vec<Vec<String>> = CHIPS.iter().map(|c| files(&m, c)).collect();
    assert_eq!(got, [["/dev/accel2"], ["/dev/accel0"], ["/dev/accel3"], ["/dev/accel1"]]);
}

#[test]
fn tpu_malformed_sources_warn() {
    // Two class devices name one chip: neither is used; a chip with no source at all falls
    // back to its PCI position, with a warning naming it.
    let mut t = tpu_tree();
    for n in [0, 5] {
        t.add_link(
            format!("/sys/class/accel/accel{n}"),
            format!("../../devices/pci0000:01/0000:01:00.0/accel/accel{n}"),
        );
        t.add_link(format!("/sys/devices/pci0000:01/0000:01:00.0/accel/accel{n}/device"), "../../../0000:01:00.0");
    }
    t.add_link("/sys/devices/pci0000:11/0000:11:00.0/iommu_group", "../../../kernel/iommu_groups/banana");
    let m = run(t);
    assert!(warned(&m, &["two accel class devices name the chip at 0000:01:00", "/sys/class/accel"]));
    assert_eq!(files(&m, CHIPS[0]), ["/dev/accel0"]);
    assert_eq!(files(&m, CHIPS[1]), ["/dev/accel1"]);
    assert!(warned(&m, &["0000:01:00.0=/dev/accel0", "0000:11:00.0=/dev/accel1", "assumed from PCI order"]));
}

// --- AMD -------------------------------------------------------------------------------------

const KFD: &str = "/sys/class/kfd/kfd/topology/nodes";

fn kfd_gpu(t: &mut MemTree, node: u32, bus: u64, minor: u64) {
    t.add_file(
        format!("{KFD}/{node}/properties"),
        format!(
            "cpu_cores_count 0\nsimd_count 416\ndevice_id 29711\nlocation_id {}\ndomain 0\ndrm_render_minor {minor}\nunique_id {}\n",
            bus << 8,
            1000 + node
        ),
    );
}

#[test]
fn amd_hip_index_follows_kfd_node_order_and_each_gpu_keeps_its_render_minor() {
    // KFD node 1 is the GPU at 9a:00.0, node 2 the one at 18:00.0 (KFD order is not PCI order).
    // ROCr numbers agents in KFD order, so HIP index 0 is 9a:00.0. The old code gave
    // HIP_VISIBLE_DEVICES 0 to 18:00.0 (PCI order).
    let mut t = MemTree::new();
    t.add_file(format!("{KFD}/0/properties"), "cpu_cores_count 32\nsimd_count 0\n");
    kfd_gpu(&mut t, 1, 0x9a, 128);
    kfd_gpu(&mut t, 2, 0x18, 129);
    kfd_gpu(&mut t, 3, 0x5d, 130);
    let m = run(t);
    assert_eq!(files(&m, "0000:9a:00.0"), ["/dev/dri/renderD128"]);
    assert_eq!(files(&m, "0000:18:00.0"), ["/dev/dri/renderD129"]);
    assert_eq!(isolation(&m, "0000:9a:00.0"), ["0"]);
    assert_eq!(isolation(&m, "0000:18:00.0"), ["1"]);
    assert_eq!(isolation(&m, "0000:5d:00.0"), ["2"]);
    let amd = default_plugins().into_iter().find(|p| p.id() == "amd").unwrap();
    let bundle = [at(&m, "0000:18:00.0"), at(&m, "0000:5d:00.0")];
    assert_eq!(amd.isolate(&bundle).env["HIP_VISIBLE_DEVICES"], "1,2");
}

#[test]
fn amd_hidden_gpus_are_not_counted_but_unlocated_ones_are() {
    // In a container /dev/dri holds only renderD130: ROCr skips the first two nodes, so the
    // GPU at 5d:00.0 is HIP device 0. A node with a broken location is still an agent to ROCr
    // and takes its number (with a warning naming its file).
    let mut t = MemTree::new();
    kfd_gpu(&mut t, 1, 0x9a, 128);
    kfd_gpu(&mut t, 2, 0x18, 129);
    t.add_file(format!("{KFD}/3/properties"), "cpu_cores_count 0\nsimd_count 416\ndrm_render_minor 131\n");
    kfd_gpu(&mut t, 4, 0x5d, 130);
    t.add_file("/dev/dri/renderD130", "");
    t.add_file("/dev/dri/renderD131", "");
    let m = run(t);
    assert_eq!(isolation(&m, "0000:5d:00.0"), ["1"]);
    assert!(warned(&m, &["/sys/class/kfd/kfd/topology/nodes/3/properties", "do not form a PCI address"]));
}
