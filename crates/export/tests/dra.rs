//! The DRA export against the Kubernetes API types (k8s-openapi, Kubernetes 1.35): every
//! sample's ResourceSlices deserialise into `resource.k8s.io/v1` `ResourceSlice`, lose no field
//! on the way, and keep the API's validation limits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

mod support;

use accel_discover::{default_plugins, discover, fs::MemTree, samples, Host};
use accel_export::dra::{self, resource_slices, to_yaml};
use accel_model::{Machine, SkuRegistry};
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde::Deserialize;

/// A capture too large to embed: `dgx-h100-mig` (seven 1g.10gb and two 3g.40gb partitions) or
/// `mi300x-cpx` (real: 63 CPX partitions of 8 MI300X).
fn test_only(name: &str) -> Machine {
    let tree = MemTree::parse_bundle(&accel_testdata::bundle(name)).expect("valid bundle");
    discover(&Host::in_memory(Arc::new(tree), SkuRegistry::builtin()), &default_plugins())
}

/// A DNS label (RFC 1123).
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Parses the YAML stream into the API type, checks nothing was dropped, and checks the limits
/// the API server validates. Returns the typed slices.
fn check(machine: &Machine, node: &str) -> Vec<ResourceSlice> {
    let export = resource_slices(machine, node, "accel.io").expect("export");
    assert!(export.skipped.is_empty(), "{:?}", export.skipped);
    let ours = export.slices;
    let yaml = to_yaml(&ours).expect("yaml");
    let mut typed = Vec::new();
    for (doc, mine) in serde_norway::Deserializer::from_str(&yaml).zip(&ours) {
        let slice = ResourceSlice::deserialize(doc).expect("a resource.k8s.io/v1 ResourceSlice");
        // k8s-openapi skips unknown fields: equal JSON both ways means every field is the API's.
        let back = serde_json::to_value(&slice).unwrap();
        let mut expected = serde_json::to_value(mine).unwrap();
        // The API type serialises `metadata` with the fields it has; ours has only `name`.
        expected["metadata"] = back["metadata"].clone();
        assert_eq!(back, expected, "fields lost in the API type");
        typed.push(slice);
    }
    assert_eq!(typed.len(), ours.len());
    let count = typed.len() as i64;
    let mut counter_sets: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut names = BTreeSet::new();
    for slice in &typed {
        let spec = &slice.spec;
        assert_eq!(spec.driver, "accel.io");
        assert_eq!(spec.node_name.as_deref(), Some(node));
        assert!(spec.all_nodes.is_none() && spec.node_selector.is_none() && spec.per_device_node_selection.is_none());
        assert_eq!(spec.pool.resource_slice_count, count);
        let devices = spec.devices.as_deref().unwrap_or_default();
        let sets = spec.shared_counters.as_deref().unwrap_or_default();
        assert!(devices.is_empty() || sets.is_empty(), "a slice holds devices or counters, not both");
        assert!(sets.len() <= dra::MAX_COUNTER_SETS);
        for set in sets {
            assert!(is_dns_label(&set.name));
            let counters = set.counters.iter().map(|(k, v)| (k.clone(), v.value.0.clone())).collect();
            assert!(
                counter_sets.insert(set.name.clone(), counters).is_none(),
                "counter set names are unique in the pool"
            );
        }
        let consuming = devices.iter().any(|d| d.consumes_counters.is_some());
        assert!(devices.len() <= if consuming { dra::MAX_COUNTER_DEVICES } else { dra::MAX_DEVICES });
        for d in devices {
            assert!(is_dns_label(&d.name), "{:?} is not a DNS label", d.name);
            assert!(names.insert(d.name.clone()), "device names are unique in the pool");
            let attrs = d.attributes.as_ref().map_or(0, BTreeMap::len);
            let caps = d.capacity.as_ref().map_or(0, BTreeMap::len);
            assert!(attrs + caps <= dra::MAX_ATTRIBUTES, "{}: {} attributes and capacities", d.name, attrs + caps);
            for (key, attr) in d.attributes.iter().flatten() {
                let set = [attr.int.is_some(), attr.bool.is_some(), attr.string.is_some(), attr.version.is_some()];
                assert_eq!(set.iter().filter(|x| **x).count(), 1, "{key}: exactly one value");
                for s in [&attr.string, &attr.version].into_iter().flatten() {
                    assert!(s.len() <= dra::MAX_STRING, "{key}: {s:?} too long");
                }
                let name = key.rsplit('/').next().unwrap();
                assert!(!name.is_empty() && name.len() <= 32, "{key}: attribute names are C identifiers of <= 32");
            }
            assert!(d.consumes_counters.as_ref().map_or(0, Vec::len) <= 2);
        }
    }
    // Every consumption names a counter set of the pool and a counter it has.
    for slice in &typed {
        for d in slice.spec.devices.iter().flatten() {
            for c in d.consumes_counters.iter().flatten() {
                let set = counter_sets.get(&c.counter_set).expect("consumed counter set exists");
                for k in c.counters.keys() {
                    assert!(set.contains_key(k), "{}: counter {k} not in set {}", d.name, c.counter_set);
                }
            }
        }
    }
    typed
}

fn attr<'a>(slices: &'a [ResourceSlice], key: &str) -> Vec<&'a k8s_openapi::api::resource::v1::DeviceAttribute> {
    slices
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
        .filter_map(|d| d.attributes.as_ref()?.get(key))
        .collect()
}

#[test]
fn every_sample_validates() {
    for name in samples::names() {
        let machine = samples::machine(name).unwrap();
        let slices = check(&machine, "node-1");
        let devices: usize = slices.iter().map(|s| s.spec.devices.as_ref().map_or(0, Vec::len)).sum();
        assert_eq!(devices, machine.accelerators.len(), "{name}: every accelerator is a device");
    }
}

#[test]
fn standard_attributes_come_from_the_model() {
    let machine = samples::machine("dgx-h100").unwrap();
    let slices = check(&machine, "dgx-1");
    let bus: Vec<&str> =
        attr(&slices, "resource.kubernetes.io/pciBusID").iter().filter_map(|a| a.string.as_deref()).collect();
    let want: Vec<String> = machine.accelerators.iter().map(|a| a.pci.unwrap().to_string()).collect();
    assert_eq!(bus, want);
    for a in attr(&slices, "resource.kubernetes.io/pcieRoot") {
        assert!(a.string.as_deref().unwrap().starts_with("pci0000:"), "{a:?}");
    }
    let numa: Vec<i64> = attr(&slices, "resource.kubernetes.io/numaNode").iter().filter_map(|a| a.int).collect();
    let want: Vec<i64> = machine.accelerators.iter().map(|a| a.numa_node.unwrap().into()).collect();
    assert_eq!(numa, want);
    // Eight GPUs on one NVSwitch island.
    let sizes: Vec<i64> = attr(&slices, "scaleUpIslandSize").iter().filter_map(|a| a.int).collect();
    assert_eq!(sizes, vec![8; 8]);
    let mem = &slices[0].spec.devices.as_ref().unwrap()[0].capacity.as_ref().unwrap()["memory"];
    assert_eq!(mem.value.0, dra::quantity(machine.accelerators[0].memory_bytes.unwrap()));
}

#[test]
fn nvl72_tray_carries_its_clique() {
    let machine = samples::machine("gb200-nvl72-tray").unwrap();
    let slices = check(&machine, "tray-1");
    let cliques: BTreeSet<&str> = attr(&slices, "scaleUpDomain").iter().filter_map(|a| a.string.as_deref()).collect();
    assert_eq!(cliques.len(), 1, "{cliques:?}");
}

#[test]
fn an_xgmi_hive_is_qualified_by_its_node() {
    // Two nodes of one MI355X capture share its KFD hive id; a hive never spans nodes.
    let machine = samples::machine("mi355x").unwrap();
    for node in ["mi355x-0", "mi355x-1"] {
        let slices = check(&machine, node);
        let hives: BTreeSet<&str> = attr(&slices, "scaleUpDomain").iter().filter_map(|a| a.string.as_deref()).collect();
        assert_eq!(hives, BTreeSet::from([format!("{node}.8a3f5e2d1c0b0a09").as_str()]));
    }
}

#[test]
fn mig_partitions_consume_shared_counters() {
    let machine = test_only("dgx-h100-mig");
    let slices = check(&machine, "dgx-mig");
    // First the counter slice, then the whole GPUs, then the partitions.
    let sets = slices[0].spec.shared_counters.as_ref().expect("counter slice first");
    assert_eq!(sets.len(), 2, "two GPUs are split");
    let seven = sets.iter().find(|s| s.counters["partitions"].value.0 == "7").expect("the 1g.10gb GPU");
    let mig: Vec<_> =
        slices.iter().flat_map(|s| s.spec.devices.iter().flatten()).filter(|d| d.consumes_counters.is_some()).collect();
    assert_eq!(mig.len(), 9);
    let on_seven = mig.iter().filter(|d| d.consumes_counters.as_ref().unwrap()[0].counter_set == seven.name).count();
    assert_eq!(on_seven, 7);
    let modes: BTreeSet<&str> = attr(&slices, "partitionMode").iter().filter_map(|a| a.string.as_deref()).collect();
    assert_eq!(modes, BTreeSet::from(["MIG 1g.10gb", "MIG 3g.40gb"]));
}

#[test]
fn amd_cpx_partitions_fill_the_counter_and_device_limits() {
    let machine = test_only("mi300x-cpx");
    let slices = check(&machine, "mi300x-cpx");
    // 8 physical GPUs: 8 counter sets, the most one slice holds; 63 partitions consuming them
    // fit the 64-device limit of such a slice.
    assert_eq!(slices.len(), 2);
    assert_eq!(slices[0].spec.shared_counters.as_ref().unwrap().len(), 8);
    assert_eq!(slices[1].spec.devices.as_ref().unwrap().len(), 63);
    let per_gpu: BTreeSet<&str> = slices[0]
        .spec
        .shared_counters
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| s.counters["partitions"].value.0.as_str())
        .collect();
    assert_eq!(per_gpu, BTreeSet::from(["7", "8"]));
}

#[test]
fn large_nodes_split_into_slices_of_128() {
    let mut machine = samples::machine("dgx-h100").unwrap();
    let base = machine.accelerators.clone();
    machine.accelerators.clear();
    machine.links.clear();
    for k in 0..25u32 {
        for acc in &base {
            let mut acc = acc.clone();
            acc.id = format!("{}-copy{k}", acc.id);
            acc.index += 8 * k;
            machine.accelerators.push(acc);
        }
    }
    let slices = check(&machine, "big");
    assert_eq!(slices.len(), 2);
    assert_eq!(slices[0].spec.devices.as_ref().unwrap().len(), 128);
    assert_eq!(slices[1].spec.devices.as_ref().unwrap().len(), 72);
}

#[test]
fn bad_driver_and_node_names_are_input_errors() {
    let machine = samples::machine("dgx-h100").unwrap();
    for (node, driver) in [("n", "Not_A_Domain"), ("n", ""), ("::", "accel.io")] {
        let err = resource_slices(&machine, node, driver).unwrap_err();
        assert!(matches!(err, accel_export::ExportError::Input(_)), "{err}");
    }
}

/// Regression (security): one plugin whose device ids collide in DNS labels (or have none)
/// failed the whole export, so a bad external plugin took every node's slices down. Now its
/// devices alone are left out, each named with its plugin, and everything else is published.
#[test]
fn a_bad_plugin_costs_its_own_devices_not_the_export() {
    let mut machine = samples::machine("dgx-h100").unwrap();
    let good = machine.accelerators.len();
    let mut clash = machine.accelerators[0].clone();
    clash.vendor = "rogue".into();
    clash.id = clash.id.to_uppercase().replace(':', "_");
    clash.index = 100;
    let mut nameless = clash.clone();
    nameless.id = ":::".into();
    nameless.index = 101;
    machine.accelerators.extend([clash, nameless]);
    let export = resource_slices(&machine, "node-a", "accel.io").expect("the export goes on");
    let published: usize = export.slices.iter().map(|s| s.spec.devices.len()).sum();
    assert_eq!(published, good);
    assert_eq!(export.skipped.len(), 2, "{:?}", export.skipped);
    assert!(export.skipped.iter().all(|l| l.starts_with("rogue device")), "{:?}", export.skipped);
}

#[test]
fn unhealthy_devices_are_tainted_and_healthy_ones_are_not() {
    let m = support::faulty_gb200();
    let states: Vec<&str> = m.accelerators.iter().map(|a| a.health.as_ref().unwrap().state.as_str()).collect();
    assert_eq!(states, ["healthy", "unhealthy", "unhealthy", "unknown"], "{:?}", m.accelerators);
    let typed = check(&m, "tray-0");
    let taints: Vec<(String, String)> = typed
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
        .flat_map(|d| d.taints.iter().flatten().map(|t| (t.key.clone(), t.value.clone().unwrap_or_default())))
        .collect();
    assert_eq!(
        taints,
        [
            ("accel.io/unhealthy".into(), "3-uncorrectable-ECC-errors".into()),
            ("accel.io/unhealthy".into(), "PCIe-link-x8-of-x16".into()),
            ("accel.io/health-unknown".into(), "nvidia-errors--its-source-said-nothing-of-this-device".into()),
        ]
    );
    // The real, unaltered capture has no taint.
    let clean = samples::machine("gb200-nvl72-tray").unwrap();
    assert!(check(&clean, "tray-0").iter().flat_map(|s| s.spec.devices.iter().flatten()).all(|d| d.taints.is_none()));
}
