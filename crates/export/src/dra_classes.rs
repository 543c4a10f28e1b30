//! Kubernetes DRA `DeviceClass`es (`resource.k8s.io/v1`) for the device families of one or more
//! machines, each naming the DRA driver that publishes the devices:
//!
//! - a family that declares its vendor's own driver (`vocabulary.dra_driver`: `gpu.nvidia.com`,
//!   `gpu.amd.com`) gets a class selecting that driver's devices; its kubelet plugin publishes
//!   the ResourceSlices, and accel writes only the class;
//! - a family without one (an external plugin's, a TPU) gets a class selecting accel's own
//!   slices ([`crate::dra::DEFAULT_DRIVER`], `accel export dra`) by vendor, annotated
//!   [`NEEDS_PLUGIN`]: no kubelet plugin serves `accel.io`, and accel ships none, so a pod that
//!   claims such a device does not start until one does.
//!
//! From Kubernetes 1.37 on, a family's `k8s_resource` (its device plugin's extended resource,
//! `nvidia.com/gpu`, an external plugin's own) becomes the class's `extendedResourceName`
//! (KEP-5004), so pods that ask for `nvidia.com/gpu: 1` are served through DRA.

use std::collections::BTreeMap;

use accel_discover::labels::label_value;
use accel_model::Machine;
use serde_json::{json, Value};

use crate::dra::DEFAULT_DRIVER;
use crate::{dns_label, ExportError};

/// The annotation on a class whose devices only accel's own slices describe.
pub const NEEDS_PLUGIN: &str = "accel.io/needs-kubelet-plugin";
/// The first Kubernetes minor version whose classes carry `extendedResourceName`.
pub const EXTENDED_RESOURCE_MINOR: u32 = 37;

/// A Kubernetes version, `1.MINOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct K8sVersion {
    pub minor: u32,
}

impl std::str::FromStr for K8sVersion {
    type Err = ExportError;
    fn from_str(text: &str) -> Result<K8sVersion, ExportError> {
        let bad = || ExportError::Input(format!("Kubernetes version {text:?}: expected 1.MINOR, 1.34 or later"));
        let minor = text.trim().trim_start_matches('v').strip_prefix("1.").ok_or_else(bad)?;
        let minor = minor.split('.').next().unwrap_or_default().parse::<u32>().map_err(|_| bad())?;
        (minor >= 34).then_some(K8sVersion { minor }).ok_or_else(bad)
    }
}

/// One class per (driver, device kind, vendor) among the machines' accelerators, in name order.
pub fn device_classes(machines: &[&Machine], version: K8sVersion) -> Result<Vec<Value>, ExportError> {
    let mut classes: BTreeMap<String, Value> = BTreeMap::new();
    for acc in machines.iter().flat_map(|m| &m.accelerators) {
        let v = &acc.vocabulary;
        let vendor = label_value(&acc.vendor).to_ascii_lowercase();
        let name = class_name(acc);
        if classes.contains_key(&name) {
            continue;
        }
        // As `accel export dra` writes the `vendor` attribute.
        let vendor_attr: String = acc.vendor.chars().take(crate::dra::MAX_STRING).collect();
        let (driver, expression, annotations) = match &v.dra_driver {
            Some(driver) => (driver.clone(), format!("device.driver == {driver:?}"), json!({})),
            None => (
                DEFAULT_DRIVER.to_owned(),
                format!(
                    "device.driver == {DEFAULT_DRIVER:?} && device.attributes[{DEFAULT_DRIVER:?}].vendor == {vendor_attr:?}"
                ),
                json!({NEEDS_PLUGIN: format!(
                    "no DRA driver is known for {vendor}: `accel export dra` writes these devices' ResourceSlices under {DEFAULT_DRIVER}, and no kubelet plugin that accel ships serves that driver"
                )}),
            ),
        };
        let mut metadata = json!({"name": name, "labels": {"accel.io/driver": dns_label(&driver)}});
        if annotations.as_object().is_some_and(|a| !a.is_empty()) {
            metadata["annotations"] = annotations;
        }
        let mut spec = json!({"selectors": [{"cel": {"expression": expression}}]});
        if let (true, Some(resource)) = (version.minor >= EXTENDED_RESOURCE_MINOR, &v.k8s_resource) {
            spec["extendedResourceName"] = Value::String(resource.clone());
        }
        classes.insert(
            name,
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": metadata, "spec": spec}),
        );
    }
    Ok(classes.into_values().collect())
}

/// `ResourceClaimTemplate`s (namespace-less: `kubectl apply -n NS`) that keep a claim's devices
/// together through `matchAttribute` constraints, for each class [`device_classes`] writes:
///
/// - `<class>-x<N>`, for a family that accel's own slices describe and whose devices form
///   scale-up islands of N: N devices of one island (`accel.io/scaleUpIsland`). A vendor's
///   driver publishes no such attribute (NVIDIA's `gpu.nvidia.com` GPUs carry none), so its
///   families get none;
/// - `<class>-with-nic`, when `nic_class` names the cluster's DeviceClass of RDMA NICs (a NIC
///   DRA driver's): one device and one NIC on the same PCIe root
///   (`resource.kubernetes.io/pcieRoot`, which both accel's slices and NVIDIA's driver publish).
pub fn claim_templates(machines: &[&Machine], nic_class: Option<&str>) -> Result<Vec<Value>, ExportError> {
    if let Some(nic) = nic_class.filter(|n| dns_label(n) != *n) {
        return Err(ExportError::Input(format!("--nic-class {nic:?} is not a DNS label (lowercase a-z, 0-9, '-')")));
    }
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    let request = |name: &str, class: &str, count: usize| json!({"name": name, "exactly": {"deviceClassName": class, "count": count}});
    let template = |name: &str, requests: Vec<Value>, attribute: &str| {
        let names: Vec<&Value> = requests.iter().map(|r| &r["name"]).collect();
        json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {
                "requests": requests,
                "constraints": [{"requests": names, "matchAttribute": attribute}],
            }}},
        })
    };
    for machine in machines {
        let islands = accel_discover::labels::islands(machine);
        for acc in &machine.accelerators {
            let class = class_name(acc);
            if let Some(nic) = nic_class {
                let name = format!("{class}-with-nic");
                let requests = vec![request("accelerator", &class, 1), request("nic", nic, 1)];
                out.entry(name.clone()).or_insert_with(|| template(&name, requests, "resource.kubernetes.io/pcieRoot"));
            }
            if acc.vocabulary.dra_driver.is_some() {
                continue;
            }
            if let Some((_, members)) = islands.iter().find(|(_, m)| m.contains(&acc.id)) {
                let name = format!("{class}-x{}", members.len());
                let attribute = format!("{DEFAULT_DRIVER}/scaleUpIsland");
                out.entry(name.clone()).or_insert_with(|| {
                    template(&name, vec![request("accelerators", &class, members.len())], &attribute)
                });
            }
        }
    }
    Ok(out.into_values().collect())
}

/// The class of a device: `accel-<kind>-<vendor>`.
fn class_name(acc: &accel_model::Accelerator) -> String {
    let kind = if acc.vocabulary.kind.is_empty() { "accelerator" } else { acc.vocabulary.kind.as_str() };
    dns_label(&format!("accel-{kind}-{}", label_value(&acc.vendor).to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!("1.37".parse::<K8sVersion>().unwrap().minor, 37);
        assert_eq!("v1.36.2".parse::<K8sVersion>().unwrap().minor, 36);
        for bad in ["2.0", "1.33", "1.x", ""] {
            assert!(bad.parse::<K8sVersion>().is_err(), "{bad}");
        }
    }
}
