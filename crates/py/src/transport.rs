//! The transport from Python: one `Transport` per process (re-created after a fork), buffers
//! handed to Python as (address, length, read-only) so `accel._buffers` maps shared memory into
//! numpy without a copy (the buffer protocol is not in the limited API of Python 3.9, which this
//! abi3 module targets), and metrics. The Python layer (`accel.transport`) builds references
//! and arrays on top.

use std::sync::{Arc, Mutex};
use std::time::Duration;

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

fn started() -> PyResult<Arc<Transport>> {
    current(None)
}

#[derive(Debug)]
enum Keep {
    Owner(#[allow(dead_code)] Arc<MmapRaw>),
    Consumer(#[allow(dead_code)] Mapping),
}

/// Bytes of shared memory, handed to Python as `address`, `len()` and `readonly`: the mapping
/// lives as long as this object, and `accel._buffers` makes every numpy view over it hold this
/// object (through the view's base chain), so a view keeps the mapping alive. Never write
/// through a read-only one: its pages may be mapped without write permission.
#[pyclass(module = "accel._native", frozen, weakref)]
#[derive(Debug)]
pub struct SharedBuffer {
    ptr: usize,
    len: usize,
    readonly: bool,
    _keep: Keep,
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

/// Records one finished read of a leased buffer (at its owner); returns whether it was the
/// last, which freed the buffer.
#[pyfunction]
fn transport_release(py: Python<'_>, owner: String, endpoint: String, buffer: u64) -> PyResult<bool> {
    let t = started()?;
    let d = descriptor(owner, endpoint, String::new(), buffer, 0);
    py.detach(|| t.release(&d)).map_err(transport_error)
}

/// Reads this owner still expects of one of its leased buffers (`None`: not leased).
#[pyfunction]
fn transport_lease_left(buffer: u64) -> PyResult<Option<u32>> {
    Ok(started()?.lease_left(buffer))
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

/// A view of this owner's own published buffer (the local path: no copy).
#[pyfunction]
fn transport_local(buffer: u64, writable: bool) -> PyResult<SharedBuffer> {
    let t = started()?;
    let (map, len) = t
        .arena()
        .lookup(buffer)
        .ok_or_else(|| transport_error(accel_transport::Error::Freed { owner: t.owner().to_string(), buffer }))?;
    Ok(SharedBuffer { ptr: map.as_mut_ptr() as usize, len: len as usize, readonly: !writable, _keep: Keep::Owner(map) })
}

fn descriptor(owner: String, endpoint: String, segment: String, buffer: u64, nbytes: u64) -> Descriptor {
    Descriptor { owner, host: String::new(), endpoint, segment, buffer, len: nbytes }
}

/// Frees a buffer, locally or by asking its owner.
#[pyfunction]
fn transport_free(py: Python<'_>, owner: String, endpoint: String, buffer: u64) -> PyResult<()> {
    let t = started()?;
    let d = descriptor(owner, endpoint, String::new(), buffer, 0);
    py.detach(|| t.free(&d)).map_err(transport_error)
}

/// Maps a same-host buffer (read-only, or private copy-on-write when `writable`).
#[pyfunction]
fn transport_open_shm(
    owner: String,
    segment: String,
    buffer: u64,
    nbytes: u64,
    writable: bool,
) -> PyResult<SharedBuffer> {
    let t = started()?;
    let d = descriptor(owner, String::new(), segment, buffer, nbytes);
    let mut m = t.open_shm(&d, writable).map_err(transport_error)?;
    let ptr = match m.as_mut_ptr() {
        Some(p) => p as usize,
        None => m.as_ptr() as usize,
    };
    Ok(SharedBuffer { ptr, len: m.len(), readonly: !writable, _keep: Keep::Consumer(m) })
}

/// Streams a buffer over TCP into the `nbytes` writable bytes at `address`: the caller
/// (`accel._buffers`) passes the start of a writable C-contiguous array of exactly the buffer's
/// size and holds that array until this returns.
#[pyfunction]
fn transport_fetch_tcp(
    py: Python<'_>,
    owner: String,
    endpoint: String,
    buffer: u64,
    address: usize,
    nbytes: usize,
) -> PyResult<()> {
    if address == 0 && nbytes > 0 {
        return Err(PyValueError::new_err("the destination address is null"));
    }
    let t = started()?;
    let d = descriptor(owner, endpoint, String::new(), buffer, nbytes as u64);
    py.detach(|| {
        let dst: &mut [u8] = if nbytes == 0 {
            &mut []
        } else {
            // SAFETY: the caller holds a writable array of `nbytes` bytes at `address` until
            // this returns, and no one else writes it meanwhile.
            unsafe { std::slice::from_raw_parts_mut(address as *mut u8, nbytes) }
        };
        t.fetch_tcp(&d, dst)
    })
    .map_err(transport_error)
}

/// Receives leased buffer `buffer` of `owner` (`nbytes` bytes) as one reader of a relayed
/// broadcast: `(read-only SharedBuffer of this process's copy, readers it serves, the relay it
/// streamed from as "owner@endpoint" or None for the owner, whether it fell back to the owner)`.
#[pyfunction]
fn transport_fetch_relayed(
    py: Python<'_>,
    owner: String,
    endpoint: String,
    buffer: u64,
    nbytes: u64,
) -> PyResult<(SharedBuffer, u32, Option<String>, bool)> {
    let t = started()?;
    let d = descriptor(owner, endpoint, String::new(), buffer, nbytes);
    let r = py.detach(|| t.fetch_relayed(&d)).map_err(transport_error)?;
    let buf = SharedBuffer {
        ptr: r.alloc.map.as_mut_ptr() as usize,
        len: nbytes as usize,
        readonly: true,
        _keep: Keep::Owner(r.alloc.map),
    };
    Ok((buf, r.serve, r.upstream.map(|p| format!("{}@{}", p.owner, p.endpoint)), r.fell_back))
}

/// The path for a buffer of `owner` on `host`, as seen from this process.
#[pyfunction]
fn transport_choose(owner: &str, host: &str) -> PyResult<&'static str> {
    let t = started()?;
    Ok(Path::choose(t.owner(), t.host(), owner, host).name())
}

/// The path from a buffer of `owner` on `host` (in accelerator `src_device` of `machine_json`,
/// or host memory when negative) to this process (into `dst_device`), from the topology:
/// `(path, reason, detail)`. With `count`, the choice is counted in this process's metrics.
#[pyfunction]
#[pyo3(signature = (owner, host, src_device, dst_device, machine_json, nixl, cuda_ipc, count))]
#[allow(clippy::too_many_arguments)]
fn transport_route(
    owner: &str,
    host: &str,
    src_device: i64,
    dst_device: i64,
    machine_json: Option<&str>,
    nixl: bool,
    cuda_ipc: bool,
    count: bool,
) -> PyResult<(&'static str, &'static str, String)> {
    use accel_transport::route::{choose, Available, End, Memory};
    let t = started()?;
    let machine: Option<accel_model::Machine> = match machine_json {
        Some(text) => {
            Some(serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("machine JSON: {e}")))?)
        }
        None => None,
    };
    let memory = |d: i64| usize::try_from(d).map_or(Memory::Host, Memory::Device);
    let src = End { owner, host, memory: memory(src_device), machine: machine.as_ref() };
    let dst = End { owner: t.owner(), host: t.host(), memory: memory(dst_device), machine: machine.as_ref() };
    let c = choose(&src, &dst, Available { nixl, cuda_ipc });
    if count {
        t.metrics().chose(c.path, c.reason);
    }
    Ok((c.path.name(), c.reason.name(), c.detail))
}

/// Gives `path` its metric series in this process (its backend works here).
#[pyfunction]
fn transport_enable_path(path: &str) -> PyResult<()> {
    let p = Path::parse(path).ok_or_else(|| PyValueError::new_err(format!("unknown path {path:?}")))?;
    started()?.metrics().enable(p);
    Ok(())
}

/// Confirms with its owner that a buffer is still published (raises BufferFreed, OwnerGone).
#[pyfunction]
fn transport_check(py: Python<'_>, owner: String, endpoint: String, buffer: u64) -> PyResult<()> {
    let t = started()?;
    let d = descriptor(owner, endpoint, String::new(), buffer, 0);
    py.detach(|| t.check(&d)).map_err(transport_error)
}

/// Records a fetch (`ok`) or a failed one on `path` in this process's metrics (role `fetch`).
#[pyfunction]
fn transport_record(path: &str, nbytes: u64, seconds: f64, ok: bool) -> PyResult<()> {
    let p = Path::parse(path).ok_or_else(|| PyValueError::new_err(format!("unknown path {path:?}")))?;
    let t = started()?;
    if ok {
        t.metrics().transfer(p, nbytes, Duration::from_secs_f64(seconds.max(0.0)));
    } else {
        t.metrics().error(p);
    }
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
    m.add_function(wrap_pyfunction!(transport_free, m)?)?;
    m.add_function(wrap_pyfunction!(transport_release, m)?)?;
    m.add_function(wrap_pyfunction!(transport_lease_left, m)?)?;
    m.add_function(wrap_pyfunction!(transport_channel_publish, m)?)?;
    m.add_function(wrap_pyfunction!(transport_channel_latest, m)?)?;
    m.add_function(wrap_pyfunction!(transport_local, m)?)?;
    m.add_function(wrap_pyfunction!(transport_open_shm, m)?)?;
    m.add_function(wrap_pyfunction!(transport_fetch_tcp, m)?)?;
    m.add_function(wrap_pyfunction!(transport_choose, m)?)?;
    m.add_function(wrap_pyfunction!(transport_route, m)?)?;
    m.add_function(wrap_pyfunction!(transport_enable_path, m)?)?;
    m.add_function(wrap_pyfunction!(transport_check, m)?)?;
    m.add_function(wrap_pyfunction!(transport_record, m)?)?;
    m.add_function(wrap_pyfunction!(transport_stats, m)?)?;
    m.add_function(wrap_pyfunction!(transport_prometheus, m)?)?;
    m.add_function(wrap_pyfunction!(transport_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(transport_trim, m)?)?;
    m.add_function(wrap_pyfunction!(transport_settle, m)?)?;
    m.add_function(wrap_pyfunction!(transport_fetch_relayed, m)?)?;
    m.add_function(wrap_pyfunction!(transport_shutdown, m)?)?;
    Ok(())
}
