//! Discovery from Python: `discover_json(root, sku_files)` returns the machine as JSON text
//! (the Python layer turns it into dicts).

use std::path::PathBuf;

use accel_discover::{discover_all, load_registry, Host, OpenOptions, Source};
use pyo3::prelude::*;

use crate::errors::{discovery_error, to_py};

/// Discovers the machine under `root` (`/` for this machine) and returns its JSON description;
/// `sku_dir` defaults to `$ACCEL_SKU_DIR` (`accel_discover::sku_dir`, as the CLI reads it).
#[pyfunction]
#[pyo3(signature = (root = None, sku_files = Vec::new(), sku_dir = None))]
fn discover_json(
    py: Python<'_>,
    root: Option<PathBuf>,
    sku_files: Vec<PathBuf>,
    sku_dir: Option<PathBuf>,
) -> PyResult<String> {
    let root = root.unwrap_or_else(|| PathBuf::from("/"));
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let sku_dir = sku_dir.or_else(|| accel_discover::sku_dir(&env));
    let registry = load_registry(sku_dir.as_deref(), &sku_files).map_err(to_py(discovery_error))?;
    let exec = accel_discover::exec::ExecOptions::from_env(&env);
    let options = OpenOptions { registry, env, ..OpenOptions::default() };
    let machine = py.detach(|| {
        // The same host the CLI opens: NVML and the metadata look-ups on the live machine.
        Host::open(&Source::from_root(&root), options).map(|host| discover_all(&host, &exec))
    });
    let machine = machine.map_err(to_py(discovery_error))?;
    serde_json::to_string(&machine).map_err(to_py(discovery_error))
}

/// The environment fingerprint (`accel env --json`) of this machine, an embedded sample or a
/// captured root, as JSON: the CLI's rule, in process (the lab needs no `accel` binary).
#[pyfunction]
#[pyo3(signature = (root = None, sample = None))]
fn env_json(py: Python<'_>, root: Option<PathBuf>, sample: Option<String>) -> PyResult<String> {
    let fp = on_host(py, root, sample, accel_discover::fingerprint::collect)?;
    serde_json::to_string(&fp).map_err(to_py(discovery_error))
}

/// Runs `f` on the host of this machine (`root` None), a captured root or an embedded sample,
/// opened as the CLI opens it (`$ACCEL_SKU_DIR`, external plugins from the environment), with
/// every plugin, outside the GIL.
fn on_host<T: Send>(
    py: Python<'_>,
    root: Option<PathBuf>,
    sample: Option<String>,
    f: impl FnOnce(&Host, &[Box<dyn accel_discover::Vendor>]) -> T + Send,
) -> PyResult<T> {
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let registry = load_registry(accel_discover::sku_dir(&env).as_deref(), &[]).map_err(to_py(discovery_error))?;
    let exec = accel_discover::exec::ExecOptions::from_env(&env);
    let source = match sample {
        Some(name) => Source::Sample(name),
        None => Source::from_root(&root.unwrap_or_else(|| PathBuf::from("/"))),
    };
    let options = OpenOptions { registry, env, ..OpenOptions::default() };
    let out = py.detach(|| {
        Host::open(&source, options).map(|host| {
            let (plugins, _) = accel_discover::plugins_with_external(&exec);
            f(&host, &plugins)
        })
    });
    out.map_err(to_py(discovery_error))
}

/// `accel env diff A B` in process: `(same, text)` for two fingerprint documents (JSON text).
#[pyfunction]
fn env_diff(a_json: &str, b_json: &str) -> PyResult<(bool, String)> {
    let load = |text: &str, what: &str| {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| discovery_error(format!("{what} is not JSON: {e}")))?;
        accel_discover::fingerprint::from_document(value).map_err(|e| discovery_error(format!("{what} {e}")))
    };
    let changes = accel_discover::fingerprint::diff(&load(a_json, "A")?, &load(b_json, "B")?);
    Ok((changes.is_empty(), accel_discover::fingerprint::diff_text(&changes)))
}

/// Whether a variable's name says it holds a secret (`accel_discover::exec::is_secret_name`, the
/// rule the plugin runner's allow-list and the fingerprint apply).
#[pyfunction]
fn is_secret_name(name: &str) -> bool {
    accel_discover::exec::is_secret_name(name)
}

/// One node probe (REP #71's `ProbeResult`, `accel_discover::probe`) of this machine, an
/// embedded sample or a captured root, as JSON: the families' own readers, fail closed.
#[pyfunction]
#[pyo3(signature = (root = None, sample = None))]
fn probe_json(py: Python<'_>, root: Option<PathBuf>, sample: Option<String>) -> PyResult<String> {
    let result = on_host(py, root, sample, accel_discover::probe::probe)?;
    serde_json::to_string(&result).map_err(to_py(discovery_error))
}

/// One step of the monitor: `(tracker, result)` after `result` (a `probe_json` document) is
/// observed by `tracker` (its JSON, or None for a new one recovering after `recover_after`
/// passing probes), and `machine` (a published machine's JSON, or None) with the events
/// applied. Returns JSON `{"tracker", "result", "machine", "changed"}`.
#[pyfunction]
#[pyo3(signature = (tracker, result, recover_after = 3, machine = None))]
fn monitor_step(tracker: Option<&str>, result: &str, recover_after: u32, machine: Option<&str>) -> PyResult<String> {
    use accel_discover::probe::{apply, ProbeResult, Tracker};
    let bad = |what: &str, e: serde_json::Error| discovery_error(format!("{what}: {e}"));
    let mut t: Tracker = match tracker {
        Some(text) => serde_json::from_str(text).map_err(|e| bad("tracker", e))?,
        None => Tracker::new(recover_after),
    };
    let mut r: ProbeResult = serde_json::from_str(result).map_err(|e| bad("probe result", e))?;
    t.observe(&mut r);
    let (machine, changed) = match machine {
        Some(text) => {
            let mut m: accel_model::Machine = serde_json::from_str(text).map_err(|e| bad("machine", e))?;
            let changed = apply(&mut m, &r);
            (Some(m), changed)
        }
        None => (None, Vec::new()),
    };
    let out = serde_json::json!({"tracker": t, "result": r, "machine": machine, "changed": changed});
    Ok(out.to_string())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(probe_json, m)?)?;
    m.add_function(wrap_pyfunction!(monitor_step, m)?)?;
    m.add_function(wrap_pyfunction!(discover_json, m)?)?;
    m.add_function(wrap_pyfunction!(is_secret_name, m)?)?;
    m.add_function(wrap_pyfunction!(env_json, m)?)?;
    m.add_function(wrap_pyfunction!(env_diff, m)?)?;
    Ok(())
}
