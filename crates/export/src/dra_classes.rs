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
        let kind = if v.kind.is_empty() { "accelerator" } else { v.kind.as_str() };
        let vendor = label_value(&acc.vendor).to_ascii_lowercase();
        let name = dns_label(&format!("accel-{kind}-{vendor}"));
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
