//! Placement from Python: a `Planner` over a cluster (JSON in, JSON out), the visibility
//! environment of a device set (the discovery plugins' `isolate`), and the embedded samples.

use accel_discover::{isolate, plugins_with_external};
use accel_model::Machine;
use accel_plan::{Cluster, PlanError, Request};
use pyo3::prelude::*;

use crate::errors::{placement_error, to_py};

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

/// Allocation state over one cluster (`accel_plan::Planner`).
#[pyclass(name = "Planner", module = "accel._native")]
struct PyPlanner {
    inner: accel_plan::Planner,
}

#[pymethods]
impl PyPlanner {
    // Building, planning and allocating run without the GIL (`py.detach`): a Ray driver's
    // other threads keep running while a large request is searched.
    #[new]
    fn new(py: Python<'_>, cluster_json: &str) -> PyResult<Self> {
        let cluster: Cluster = parse(cluster_json, "cluster")?;
        let inner = py.detach(|| accel_plan::Planner::new(&cluster)).map_err(plan_error)?;
        Ok(PyPlanner { inner })
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

/// The environment variables that confine a worker to `ids` of `machine`, in that order: each
/// device's plugin's `isolate` (built-in, or external on `ACCEL_PLUGIN_DIR`/`PATH`), merged, with
/// Ray's own rewriting switched off (`accel_discover::isolate`, as `accel plan` prints it).
#[pyfunction]
fn isolate_env(machine_json: &str, ids: Vec<String>) -> PyResult<std::collections::BTreeMap<String, String>> {
    let machine: Machine = parse(machine_json, "machine")?;
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let (plugins, _) = plugins_with_external(&accel_discover::exec::ExecOptions::from_env(&env));
    Ok(isolate(&plugins, &machine, &ids).env)
}

/// `ray start` labels, custom resources and GPU count of a machine with its planner labels
/// (`accel_discover::labels::ray_labels_for_node`), as `(labels, resources, num_gpus)`.
#[pyfunction]
#[pyo3(signature = (machine_json, labels=std::collections::BTreeMap::new(), node=""))]
#[allow(clippy::type_complexity)]
fn ray_node(
    machine_json: &str,
    labels: std::collections::BTreeMap<String, String>,
    node: &str,
) -> PyResult<(std::collections::BTreeMap<String, String>, std::collections::BTreeMap<String, f64>, f64)> {
    let machine: Machine = parse(machine_json, "machine")?;
    let node = accel_discover::labels::ray_labels_for_node(&machine, node, &labels);
    Ok((node.labels, node.resources, node.num_gpus))
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
    m.add_function(wrap_pyfunction!(isolate_env, m)?)?;
    m.add_function(wrap_pyfunction!(ray_node, m)?)?;
    m.add_function(wrap_pyfunction!(sample_names, m)?)?;
    m.add_function(wrap_pyfunction!(sample_machine_json, m)?)?;
    Ok(())
}
