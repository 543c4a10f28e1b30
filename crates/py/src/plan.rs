//! Placement from Python: a `Planner` over a cluster (JSON in, JSON out), the placement of a
//! whole Ray placement group in one call (`plan_for_ray`: each bundle's node, selector, Ray
//! resources and environment, from the target node's stored facts), and the embedded samples.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use accel_discover::bundle::{ray_bundle, Planned};
use accel_model::Machine;
use accel_plan::{Cluster, ClusterNode, MachineRef, Placement, PlanError, Request};
use pyo3::prelude::*;

use crate::errors::{placement_error, to_py};

/// The built-in plugins, built once when the module loads: a bundle's environment asks their
/// `isolate` (pure functions of a node's stored device facts), never a plugin found on this
/// process's `PATH`.
static BUILTIN: OnceLock<Vec<Box<dyn accel_discover::Vendor>>> = OnceLock::new();

pub(crate) fn builtin_plugins() -> &'static [Box<dyn accel_discover::Vendor>] {
    BUILTIN.get_or_init(accel_discover::default_plugins)
}

fn plan_error(e: PlanError) -> PyErr {
    let message = e.to_string();
    match e {
        PlanError::Infeasible(why) => {
            placement_error(message, serde_json::to_string(&why).unwrap_or_else(|_| "{}".into()))
        }
        PlanError::Unknown { field, value, suggestion, .. } => invalid(message, &field, Some(&value), suggestion),
        PlanError::Request(_) => invalid(message, "request", None, None),
        PlanError::Cluster(_) => invalid(message, "cluster", None, None),
        PlanError::UnknownNode(node) => invalid(message, "node", Some(&node), None),
        PlanError::UnknownDevice { device, .. } => invalid(message, "device", Some(&device), None),
        PlanError::UnknownAllocation(id) => invalid(message, "allocation", Some(&id.to_string()), None),
    }
}

/// A mistake in the input (Python's `accel.InvalidRequest`): where, what, and the nearest
/// known name.
fn invalid(message: String, field: &str, value: Option<&str>, suggestion: Option<String>) -> PyErr {
    let details = serde_json::json!({"invalid": {"field": field, "value": value, "suggestion": suggestion}});
    placement_error(message, details.to_string())
}

fn parse<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> PyResult<T> {
    serde_json::from_str(text).map_err(|e| {
        let (value, suggestion) = accel_plan::names::unknown_in_message(&e.to_string()).unzip();
        let message = accel_plan::names::with_hint(format!("invalid {what}: {e}"));
        invalid(message, what, value.as_deref(), suggestion.flatten())
    })
}

/// An unknown sample name: the error, with the nearest name.
fn no_sample(name: &str) -> PyErr {
    let names = accel_discover::samples::names();
    let suggestion = accel_plan::names::suggest(name, names.iter().copied());
    let hint = suggestion.as_ref().map(|s| format!("; did you mean {s:?}?")).unwrap_or_default();
    invalid(format!("no sample named {name:?}{hint} (known: {})", names.join(", ")), "sample", Some(name), suggestion)
}

/// Allocation state over one cluster (`accel_plan::Planner`), with the cluster's machines (a
/// bundle's environment comes from its node's machine).
#[pyclass(name = "Planner", module = "accel._native")]
struct PyPlanner {
    inner: accel_plan::Planner,
    cluster: Cluster,
    /// Node name -> index in `cluster.nodes`.
    nodes: HashMap<String, usize>,
}

impl PyPlanner {
    fn build(py: Python<'_>, cluster: Cluster) -> PyResult<Self> {
        let inner = py.detach(|| accel_plan::Planner::new(&cluster)).map_err(plan_error)?;
        let nodes = cluster.nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        Ok(PyPlanner { inner, cluster, nodes })
    }

    fn machine(&self, node: &str) -> PyResult<&Machine> {
        let i = *self.nodes.get(node).ok_or_else(|| plan_error(PlanError::UnknownNode(node.to_owned())))?;
        self.cluster.machine(&self.cluster.nodes[i]).map_err(plan_error)
    }

    /// What Ray needs for each bundle of `placement`, from each target node's machine.
    fn ray_bundles(&self, placement: &Placement) -> PyResult<Vec<accel_discover::bundle::RayBundle>> {
        let builtin = builtin_plugins();
        placement
            .bundles
            .iter()
            .map(|b| {
                let devices: Vec<Planned<'_>> =
                    b.devices.iter().map(|d| Planned { id: &d.id, nic: d.nic.as_deref() }).collect();
                Ok(ray_bundle(builtin, &b.node, self.machine(&b.node)?, &devices))
            })
            .collect()
    }
}

#[pymethods]
impl PyPlanner {
    // Building, planning and allocating run without the GIL (`py.detach`): a Ray driver's
    // other threads keep running while a large request is searched.
    #[new]
    fn new(py: Python<'_>, cluster_json: &str) -> PyResult<Self> {
        let cluster: Cluster = parse(cluster_json, "cluster")?;
        Self::build(py, cluster)
    }

    /// A planner over Ray's nodes: `(name, Ray labels, machine JSON)` each, as the nodes
    /// published them; the `accel.io/*` labels become planner labels
    /// (`accel_discover::labels::planner_labels`).
    #[staticmethod]
    fn from_ray_nodes(py: Python<'_>, nodes: Vec<(String, BTreeMap<String, String>, String)>) -> PyResult<Self> {
        let mut cluster = Cluster::default();
        for (name, labels, machine) in nodes {
            let machine: Machine = parse(&machine, "machine")?;
            cluster.nodes.push(ClusterNode {
                labels: accel_discover::labels::planner_labels(&labels),
                name,
                machine: MachineRef::Inline(Box::new(machine)),
                allocated: Vec::new(),
            });
        }
        Self::build(py, cluster)
    }

    /// Plans a placement group without committing: JSON `{"placement": ..., "ray": [...]}`, with
    /// one entry per bundle in `ray` (`accel_discover::bundle::RayBundle`: selector, resources,
    /// device resources, environment).
    fn plan_for_ray(&mut self, py: Python<'_>, request_json: &str) -> PyResult<String> {
        let request: Request = parse(request_json, "request")?;
        let inner = &mut self.inner;
        let placement = py.detach(|| inner.plan(&request)).map_err(plan_error)?;
        let ray = self.ray_bundles(&placement)?;
        let out = serde_json::json!({"placement": placement, "ray": ray});
        Ok(out.to_string())
    }

    /// Makes the free devices of every node exactly those whose per-device Ray resource is
    /// free in `available` (node name -> Ray's available resources); a node missing from it
    /// has none free.
    fn sync_ray(&mut self, available: HashMap<String, HashMap<String, f64>>) -> PyResult<()> {
        for node in &self.cluster.nodes {
            let machine = self.cluster.machine(node).map_err(plan_error)?;
            let free: Vec<&str> = match available.get(&node.name) {
                None => Vec::new(),
                Some(avail) => machine
                    .accelerators
                    .iter()
                    .filter(|a| avail.get(&accel_discover::labels::device_resource(a)).is_some_and(|&n| n >= 1.0))
                    .map(|a| a.id.as_str())
                    .collect(),
            };
            self.inner.sync_free(&node.name, &free).map_err(plan_error)?;
        }
        Ok(())
    }

    /// Plans without committing; returns the placement as JSON.
    fn plan(&mut self, py: Python<'_>, request_json: &str) -> PyResult<String> {
        let request: Request = parse(request_json, "request")?;
        let inner = &mut self.inner;
        let placement = py.detach(|| inner.plan(&request)).map_err(plan_error)?;
        serde_json::to_string(&placement).map_err(to_py(|m| placement_error(m, "{}".into())))
    }

    /// Plans and commits; returns the placement (with its allocation id) as JSON.
    fn allocate(&mut self, py: Python<'_>, request_json: &str) -> PyResult<String> {
        let request: Request = parse(request_json, "request")?;
        let inner = &mut self.inner;
        let placement = py.detach(|| inner.allocate(&request)).map_err(plan_error)?;
        serde_json::to_string(&placement).map_err(to_py(|m| placement_error(m, "{}".into())))
    }

    /// Search steps the last `plan` or `allocate` took (bounded per search by the planner's
    /// step budget).
    fn last_search_steps(&self) -> u64 {
        self.inner.last_search_steps()
    }

    fn release(&mut self, id: u64) -> PyResult<()> {
        self.inner.release(id).map_err(plan_error)
    }

    /// Places the lost bundles of an allocation again inside their domain; returns the whole
    /// placement as JSON, or raises with the explanation.
    fn repair(&mut self, py: Python<'_>, id: u64, lost: Vec<usize>) -> PyResult<String> {
        let inner = &mut self.inner;
        let placement = py.detach(|| inner.repair(id, &lost)).map_err(plan_error)?;
        serde_json::to_string(&placement).map_err(to_py(|m| placement_error(m, "{}".into())))
    }

    /// Marks devices (ids or labels such as `GPU3`) as used outside the planner.
    fn mark_used(&mut self, node: &str, devices: Vec<String>) -> PyResult<()> {
        let ids: Vec<&str> = devices.iter().map(String::as_str).collect();
        self.inner.mark_used(node, &ids).map_err(plan_error)
    }

    /// Sets exactly which devices of a node are free.
    fn sync_free(&mut self, node: &str, devices: Vec<String>) -> PyResult<()> {
        let ids: Vec<&str> = devices.iter().map(String::as_str).collect();
        self.inner.sync_free(node, &ids).map_err(plan_error)
    }

    fn free_devices(&self, node: &str) -> PyResult<Vec<String>> {
        self.inner.free_devices(node).map_err(plan_error)
    }

    fn __len__(&self) -> usize {
        self.inner.node_count()
    }
}

/// The variables that confine a worker to `ids` of `machine` (in that order), with Ray's
/// switches, from the machine's stored facts (`accel_discover::bundle::visibility`; no plugin of
/// this process is searched for or started).
#[pyfunction]
fn visibility_env(machine_json: &str, ids: Vec<String>) -> PyResult<BTreeMap<String, String>> {
    let machine: Machine = parse(machine_json, "machine")?;
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    Ok(accel_discover::bundle::visibility(builtin_plugins(), &machine, &ids).env)
}

/// `ray start` labels, custom resources and GPU count of the machine of the Ray node `name`
/// with its planner labels (`accel_discover::labels::ray_node`), as `(labels, resources,
/// num_gpus)`.
#[pyfunction]
#[pyo3(signature = (machine_json, name, labels=BTreeMap::new()))]
#[allow(clippy::type_complexity)]
fn ray_node(
    machine_json: &str,
    name: &str,
    labels: BTreeMap<String, String>,
) -> PyResult<(BTreeMap<String, String>, BTreeMap<String, f64>, f64)> {
    let machine: Machine = parse(machine_json, "machine")?;
    let node = accel_discover::labels::ray_node(&machine, name, &labels);
    Ok((node.labels, node.resources, node.num_gpus))
}

/// A label value as Kubernetes and Ray take it (`accel_discover::labels::label_value`).
#[pyfunction]
fn label_value(text: &str) -> String {
    accel_discover::labels::label_value(text)
}

/// A device's own Ray resource (`accel_discover::labels::device_resource_name`).
#[pyfunction]
fn device_resource(vendor: &str, index: u32) -> String {
    accel_discover::labels::device_resource_name(vendor, index)
}

/// The planner labels of a Ray node's labels (`accel_discover::labels::planner_labels`).
#[pyfunction]
fn planner_labels(labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
    accel_discover::labels::planner_labels(&labels)
}

/// The CPUs of a Linux cpulist (`0-3,8`), as `accel_model::CpuSet` reads it; `ValueError` for
/// a malformed one.
#[pyfunction]
fn parse_cpulist(text: &str) -> PyResult<Vec<u32>> {
    accel_model::CpuSet::parse_list(text)
        .map(|set| set.cpus().to_vec())
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// Names of the embedded sample machines.
#[pyfunction]
fn sample_names() -> Vec<&'static str> {
    accel_discover::samples::names()
}

/// An embedded sample machine as JSON; `InvalidRequest` (with the nearest name) for an unknown one.
#[pyfunction]
fn sample_machine_json(py: Python<'_>, name: &str) -> PyResult<String> {
    let machine = py.detach(|| accel_discover::samples::machine(name)).ok_or_else(|| no_sample(name))?;
    serde_json::to_string(&machine).map_err(to_py(|m| placement_error(m, "{}".into())))
}

/// A cluster of embedded samples as JSON (`accel_plan::Cluster::add_nodes`, as `accel cluster`).
#[pyfunction]
#[pyo3(signature = (spec, rack_size = None, clique_trays = 18))]
fn sample_cluster_json(
    py: Python<'_>,
    spec: Vec<(String, usize)>,
    rack_size: Option<usize>,
    clique_trays: usize,
) -> PyResult<String> {
    let mut cluster = Cluster::default();
    for (name, count) in spec {
        let machine = py.detach(|| accel_discover::samples::machine(&name)).ok_or_else(|| no_sample(&name))?;
        cluster.add_nodes(&name, machine, count, clique_trays);
    }
    if let Some(size) = rack_size {
        cluster.label_racks(size);
    }
    serde_json::to_string(&cluster).map_err(to_py(|m| placement_error(m, "{}".into())))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sample_cluster_json, m)?)?;
    m.add_class::<PyPlanner>()?;
    m.add_function(wrap_pyfunction!(visibility_env, m)?)?;
    m.add_function(wrap_pyfunction!(ray_node, m)?)?;
    m.add_function(wrap_pyfunction!(label_value, m)?)?;
    m.add_function(wrap_pyfunction!(device_resource, m)?)?;
    m.add_function(wrap_pyfunction!(planner_labels, m)?)?;
    m.add_function(wrap_pyfunction!(parse_cpulist, m)?)?;
    m.add("NODE_LABEL", accel_discover::labels::NODE_LABEL)?;
    m.add("CPUS_VAR", accel_discover::bundle::CPUS_VAR)?;
    m.add_function(wrap_pyfunction!(sample_names, m)?)?;
    m.add_function(wrap_pyfunction!(sample_machine_json, m)?)?;
    Ok(())
}
