//! What a planned bundle's workers need on their node, from that node's stored facts (the
//! `Machine` its own discovery wrote): the environment (each device's visibility, Ray's
//! switches, the CPUs of the devices' NUMA nodes, their RDMA NICs) and the Ray resources. The
//! one rule for `accel plan` and the Ray path (`accel._native`), so both print the same.
//!
//! Nothing here scans a plugin directory or starts a plugin: the built-in families' `isolate`
//! are pure functions of the stored device facts, and any other plugin's devices are isolated
//! by the values their own node's discovery stored on them (`Vocabulary::isolation`).

use std::collections::BTreeMap;

use accel_model::{CpuSet, Machine};

use crate::labels::{bundle_resources, label_value, NODE_LABEL};
use crate::plugin::{isolate_parts, Isolation, Vendor};

/// The variable that carries a bundle's CPUs (`0-71`); its workers pin themselves to them.
pub const CPUS_VAR: &str = "ACCEL_CPUS";
/// NCCL's (and RCCL's) RDMA NIC list: `=mlx5_0,mlx5_1` (exact names).
pub const NCCL_HCA_VAR: &str = "NCCL_IB_HCA";
/// UCX's (and so NIXL's) device list: `mlx5_0:1,mlx5_1:1` (port 1).
pub const UCX_DEVICES_VAR: &str = "UCX_NET_DEVICES";

/// One planned device: its id, and the RDMA NIC the planner gave it (`None`: none near).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned<'a> {
    pub id: &'a str,
    pub nic: Option<&'a str>,
}

/// The environment of a bundle of `devices` on `machine`, in device order: the devices'
/// visibility variables and Ray's `RAY_EXPERIMENTAL_NOSET_*` switches ([`crate::isolate`]
/// with `builtin`, the compiled-in plugins; other plugins' devices from their stored
/// isolation values), the CPUs of their NUMA nodes in [`CPUS_VAR`], and their NICs in
/// [`NCCL_HCA_VAR`] and [`UCX_DEVICES_VAR`]. Devices `machine` does not have are skipped.
pub fn bundle_env(builtin: &[Box<dyn Vendor>], machine: &Machine, devices: &[Planned<'_>]) -> Isolation {
    let ids: Vec<&str> = devices.iter().map(|d| d.id).collect();
    let mut out = visibility(builtin, machine, &ids);
    let numa: Vec<u32> = ids.iter().filter_map(|id| machine.accelerator(id)?.numa_node).collect();
    let cpus: Vec<u32> = machine
        .numa_nodes
        .iter()
        .filter(|n| numa.contains(&n.id))
        .flat_map(|n| n.cpus.cpus().iter().copied())
        .collect();
    let cpus = CpuSet::new(cpus);
    if !cpus.is_empty() {
        out.env.insert(CPUS_VAR.into(), cpus.to_string());
    }
    let mut nics: Vec<&str> = Vec::new();
    for nic in devices.iter().filter_map(|d| d.nic) {
        if !nics.contains(&nic) {
            nics.push(nic);
        }
    }
    if !nics.is_empty() {
        out.env.insert(NCCL_HCA_VAR.into(), format!("={}", nics.join(",")));
        let ucx: Vec<String> = nics.iter().map(|n| format!("{n}:1")).collect();
        out.env.insert(UCX_DEVICES_VAR.into(), ucx.join(","));
    }
    out
}

/// The visibility part of [`bundle_env`]: the variables that confine a worker to `ids` (in
/// that order) and Ray's switches, from `builtin`'s `isolate` and, for any other plugin's
/// devices, their stored isolation values.
pub fn visibility(builtin: &[Box<dyn Vendor>], machine: &Machine, ids: &[&str]) -> Isolation {
    isolate_parts(builtin, machine, ids).0
}

/// What Ray needs for one planned bundle: where it goes and what it holds.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RayBundle {
    /// The bundle's `bundle_label_selector`: the planned node by its `accel.io/node` label.
    pub selector: BTreeMap<String, String>,
    /// Each device's Ray resource in its units (`GPU: 2`) and one per-device resource each.
    pub resources: BTreeMap<String, f64>,
    /// The per-device resources alone (capacity 1 each on the node).
    pub device_resources: Vec<String>,
    /// [`bundle_env`].
    pub env: BTreeMap<String, String>,
}

/// [`RayBundle`] for `devices` of `machine`, on the node named `node`.
pub fn ray_bundle(builtin: &[Box<dyn Vendor>], node: &str, machine: &Machine, devices: &[Planned<'_>]) -> RayBundle {
    let ids: Vec<&str> = devices.iter().map(|d| d.id).collect();
    let accs: Vec<&accel_model::Accelerator> = ids.iter().filter_map(|id| machine.accelerator(id)).collect();
    RayBundle {
        selector: BTreeMap::from([(NODE_LABEL.to_owned(), label_value(node))]),
        resources: bundle_resources(&accs),
        device_resources: accs.iter().map(|a| crate::labels::device_resource(a)).collect(),
        env: bundle_env(builtin, machine, devices).env,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned<'a>(m: &'a Machine, devices: &[usize], nics: &[Option<&'a str>]) -> Vec<Planned<'a>> {
        devices.iter().zip(nics).map(|(&i, &nic)| Planned { id: &m.accelerators[i].id, nic }).collect()
    }

    #[test]
    fn cpus_and_nics_follow_the_devices() {
        let m = crate::samples::machine("gb200-nvl72-tray").unwrap();
        let env =
            bundle_env(&crate::default_plugins(), &m, &planned(&m, &[1, 2], &[Some("mlx5_1"), Some("mlx5_2")])).env;
        assert_eq!(env[CPUS_VAR], "0-143");
        assert_eq!(env[NCCL_HCA_VAR], "=mlx5_1,mlx5_2");
        assert_eq!(env[UCX_DEVICES_VAR], "mlx5_1:1,mlx5_2:1");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        let one = bundle_env(&crate::default_plugins(), &m, &planned(&m, &[0], &[None])).env;
        assert_eq!(one[CPUS_VAR], "0-71");
        assert!(!one.contains_key(NCCL_HCA_VAR) && !one.contains_key(UCX_DEVICES_VAR));
    }

    #[test]
    fn a_plugin_not_built_in_is_isolated_by_its_stored_values() {
        let mut m = crate::samples::machine("mi300x").unwrap();
        for a in &mut m.accelerators {
            a.plugin = "elsewhere".into();
            a.vocabulary.visibility_env = Some("X_VISIBLE".into());
            a.vocabulary.isolation = vec![format!("x{}", a.index)];
        }
        let iso = bundle_env(&crate::default_plugins(), &m, &planned(&m, &[3, 1], &[None, None]));
        assert_eq!(iso.env["X_VISIBLE"], "x3,x1");
        assert!(iso.warnings.is_empty(), "{:?}", iso.warnings);
        let b = ray_bundle(&crate::default_plugins(), "node a", &m, &planned(&m, &[3], &[None]));
        assert_eq!(b.selector[NODE_LABEL], "node-a");
        assert_eq!(b.device_resources, vec!["accel_dev_amd_3".to_owned()]);
        assert_eq!(b.resources["GPU"], 1.0);
    }
}
