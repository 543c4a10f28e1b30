//! The transport from Python: one `Transport` per process (re-created after a fork), buffers
//! handed to Python as (address, length, read-only) so `accel._buffers` maps shared memory into
//! numpy without a copy (the buffer protocol is not in the limited API of Python 3.9, which this
//! abi3 module targets), and metrics. The Python layer (`accel.transport`) builds references
//! and arrays on top.

use std::sync::{Arc, Mutex};

use accel_transport::{sweep_orphans, Config, Descriptor, Mapping, Path, Role, Transport};
use memmap2::MmapRaw;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::transport_error;

static CURRENT: Mutex<Option<Arc<Transport>>> = Mutex::new(None);

/// The process's transport, started from `vars` on first use (and again in a forked child,
/// whose inherited transport belongs to the parent and is leaked, never dropped: dropping it
/// would unlink the parent's segments).
fn current(vars: Option<&Bound<'_, PyDict>>) -> PyResult<Arc<Transport>> {
    let mut slot = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = slot.as_ref() {
        if t.identity().pid == std::process::id() {
            return Ok(t.clone());
        }
        std::mem::forget(slot.take());
    }
    let vars = vars.ok_or_else(|| transport_error(accel_transport::Error::Config("transport not started".into())))?;
    let lookup = |k: &str| vars.get_item(k).ok().flatten().and_then(|v| v.extract::<String>().ok());
    let cfg = Config::from_lookup(lookup).map_err(transport_error)?;
    let t = Arc::new(Transport::start(cfg).map_err(transport_error)?);
    *slot = Some(t.clone());
    Ok(t)
}

pub(crate) fn started() -> PyResult<Arc<Transport>> {
    current(None)
}

/// What keeps a `SharedBuffer`'s bytes alive.
#[derive(Debug)]
pub(crate) enum Keep {
    /// A buffer of this owner's arena.
    Owner(#[allow(dead_code)] Arc<MmapRaw>),
    /// A mapping of another owner's segment.
    Consumer(#[allow(dead_code)] Mapping),
    /// Memory of this process alone (a copy, or a stream's destination).
    Owned(#[allow(dead_code)] Vec<u8>),
}

/// Bytes of shared memory, handed to Python as `address`, `len()` and `readonly`: the mapping
/// lives as long as this object, and `accel._buffers` makes every numpy view over it hold this
/// object (through the view's base chain), so a view keeps the mapping alive. Never write
/// through a read-only one: its pages may be mapped without write permission.
#[pyclass(module = "accel._native", frozen, weakref)]
#[derive(Debug)]
pub struct SharedBuffer {
    pub(crate) ptr: usize,
    pub(crate) len: usize,
    pub(crate) readonly: bool,
    pub(crate) _keep: Keep,
}

#[pymethods]
impl SharedBuffer {
    fn __len__(&self) -> usize {
        self.len
    }

    /// The address of the first byte (valid while this object lives).
    #[getter]
    fn address(&self) -> usize {
        self.ptr
    }

    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }
}

/// Starts (or returns) this process's transport; `vars` holds the ACCEL_TRANSPORT_* settings.
/// Returns `(owner, host, endpoint)`.
#[pyfunction]
fn transport_start(vars: &Bound<'_, PyDict>) -> PyResult<(String, String, String)> {
    let t = current(Some(vars))?;
    Ok((t.owner().to_string(), t.host().to_string(), t.endpoint().to_string()))
}

/// Allocates an unpublished buffer: `(buffer id, segment name, writable SharedBuffer)`.
#[pyfunction]
fn transport_alloc(py: Python<'_>, nbytes: u64) -> PyResult<(u64, String, SharedBuffer)> {
    let t = started()?;
    let a = py.detach(|| t.arena().alloc(nbytes)).map_err(transport_error)?;
    let buf = SharedBuffer {
        ptr: a.map.as_mut_ptr() as usize,
        len: nbytes as usize,
        readonly: false,
        _keep: Keep::Owner(a.map),
    };
    Ok((a.buffer, a.segment, buf))
}

/// Makes a buffer readable by other processes; with `readers` > 0 it frees itself after that
/// many reads have been released (`transport_release`).
#[pyfunction]
#[pyo3(signature = (buffer, readers=0))]
fn transport_publish(buffer: u64, readers: u32) -> PyResult<()> {
    started()?.publish_leased(buffer, readers).map_err(transport_error)
}

/// Records `manifest` as version `version` of this owner's channel `name`.
#[pyfunction]
fn transport_channel_publish(name: &str, version: u64, manifest: Vec<u8>) -> PyResult<()> {
    started()?.channel_publish(name, version, manifest).map_err(transport_error)
}

/// The latest `(version, manifest)` of channel `name` of `owner`, or `None` before its first.
#[pyfunction]
fn transport_channel_latest(
    py: Python<'_>,
    owner: String,
    endpoint: String,
    name: String,
) -> PyResult<Option<(u64, pyo3::Py<pyo3::types::PyBytes>)>> {
    let t = started()?;
    let got = py.detach(|| t.channel_latest(&owner, &endpoint, &name)).map_err(transport_error)?;
    Ok(got.map(|(v, m)| (v, pyo3::types::PyBytes::new(py, &m).unbind())))
}

/// Frees one of this owner's own buffers (unpublished or published).
#[pyfunction]
fn transport_discard(py: Python<'_>, buffer: u64) -> PyResult<()> {
    let t = started()?;
    let d = Descriptor { owner: t.owner().to_owned(), buffer, ..Descriptor::default() };
    py.detach(|| t.free(&d)).map_err(transport_error)
}

/// Gives `path` its metric series in this process (its backend works here).
#[pyfunction]
fn transport_enable_path(path: &str) -> PyResult<()> {
    let p = Path::parse(path).ok_or_else(|| PyValueError::new_err(format!("unknown path {path:?}")))?;
    started()?.metrics().enable(p);
    Ok(())
}

/// Metrics and pool usage as a dict: `paths` (per path, what this process fetched as a
/// consumer), `served` (per path, what its server sent as the owner), `pool`.
#[pyfunction]
fn transport_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let t = started()?;
    let out = PyDict::new(py);
    for (key, role) in [("paths", Role::Fetch), ("served", Role::Serve)] {
        let paths = PyDict::new(py);
        for path in Path::ALL.into_iter().filter(|p| t.metrics().enabled(*p)) {
            let s = t.metrics().get(role, path);
            let d = PyDict::new(py);
            d.set_item("transfers", s.transfers)?;
            d.set_item("bytes", s.bytes)?;
            d.set_item("errors", s.errors)?;
            d.set_item("latency_sum_s", s.latency_sum_s)?;
            let le: Vec<f64> = accel_transport::BUCKETS.iter().copied().chain([f64::INFINITY]).collect();
            d.set_item("latency_buckets", le.into_iter().zip(s.buckets).collect::<Vec<_>>())?;
            paths.set_item(path.name(), d)?;
        }
        out.set_item(key, paths)?;
    }
    let pool = t.pool();
    let p = PyDict::new(py);
    p.set_item("live_buffers", pool.live_buffers)?;
    p.set_item("live_bytes", pool.live_bytes)?;
    p.set_item("idle_bytes", pool.idle_bytes)?;
    p.set_item("held_bytes", pool.held_bytes)?;
    p.set_item("limit_bytes", pool.limit_bytes)?;
    out.set_item("pool", p)?;
    let choices = PyDict::new(py);
    for (path, reason, n) in t.metrics().choices() {
        choices.set_item((path.name(), reason.name()), n)?;
    }
    out.set_item("choices", choices)?;
    out.set_item("cached_map_bytes", t.cached_map_bytes())?;
    out.set_item("owner", t.owner())?;
    out.set_item("endpoint", t.endpoint())?;
    Ok(out)
}

/// The Prometheus text exposition of this process's transport.
#[pyfunction]
fn transport_prometheus() -> PyResult<String> {
    let t = started()?;
    Ok(t.metrics().render_prometheus(Some(t.pool())))
}

/// Removes segments in `dir` whose owner exited; returns how many.
#[pyfunction]
fn transport_sweep(dir: std::path::PathBuf) -> usize {
    sweep_orphans(&dir)
}

/// Drops this owner's pooled buffers (after any spare in the making lands).
#[pyfunction]
fn transport_trim(py: Python<'_>) -> PyResult<()> {
    let t = started()?;
    py.detach(|| t.arena().trim());
    Ok(())
}

/// Waits until no spare of the pool is in the making.
#[pyfunction]
fn transport_settle(py: Python<'_>) -> PyResult<()> {
    let t = started()?;
    py.detach(|| t.arena().settle());
    Ok(())
}

/// Unlinks every segment of this process (exit hook). Views already mapped stay valid.
#[pyfunction]
fn transport_shutdown() {
    let slot = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = slot.as_ref().filter(|t| t.identity().pid == std::process::id()) {
        t.shutdown();
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SharedBuffer>()?;
    m.add_function(wrap_pyfunction!(transport_start, m)?)?;
    m.add_function(wrap_pyfunction!(transport_alloc, m)?)?;
    m.add_function(wrap_pyfunction!(transport_publish, m)?)?;
    m.add_function(wrap_pyfunction!(transport_discard, m)?)?;
    m.add_function(wrap_pyfunction!(transport_channel_publish, m)?)?;
    m.add_function(wrap_pyfunction!(transport_channel_latest, m)?)?;
    m.add_function(wrap_pyfunction!(transport_enable_path, m)?)?;
    m.add_function(wrap_pyfunction!(transport_stats, m)?)?;
    m.add_function(wrap_pyfunction!(transport_prometheus, m)?)?;
    m.add_function(wrap_pyfunction!(transport_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(transport_trim, m)?)?;
    m.add_function(wrap_pyfunction!(transport_settle, m)?)?;
    m.add_function(wrap_pyfunction!(transport_shutdown, m)?)?;
    Ok(())
}
