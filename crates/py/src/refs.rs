//! References and what takes one: `Ref` (a `#[pyclass]` around the transport's `Descriptor`,
//! plus what the array needs: shape, dtype, kind, path, NIXL ticket, device, lease);
//! `transport_get`, a read in one crossing (path choice, fetch, timing, metrics and the lease's
//! release, all in Rust; only a NIXL read, through NIXL's Python API, takes a second call,
//! `transport_finish`); `transport_route` and `transport_free`.

use std::time::{Duration, Instant};

use accel_transport::{Descriptor, Error, Path, Transport};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple, PyType};

use crate::errors::transport_error;
use crate::transport::{started, Keep, SharedBuffer};

/// The variable that forces a path for every reference without its own (`ACCEL_TRANSPORT_PATH`).
const PATH_VAR: &str = "ACCEL_TRANSPORT_PATH";
/// The variable that makes leased TCP reads relayed by default (`ACCEL_TRANSPORT_RELAY=1`).
const RELAY_VAR: &str = "ACCEL_TRANSPORT_RELAY";

/// A reference to a published buffer: small, picklable, immutable; holding it keeps nothing
/// alive. `accel.transport.Ref` is this class (with the Python-side `route` properties).
#[pyclass(module = "accel.transport", name = "Ref", frozen, subclass)]
#[derive(Debug)]
pub struct Ref {
    pub(crate) desc: Descriptor,
    shape: Vec<u64>,
    dtype: Py<PyAny>,
    kind: String,
    path: String,
    nixl: Vec<u8>,
    device: i64,
    readers: u32,
}

#[pymethods]
impl Ref {
    #[new]
    #[pyo3(signature = (owner, host, endpoint, segment, buffer, nbytes, shape, dtype, kind = "numpy".to_owned(), path = "auto".to_owned(), nixl = None, device = -1, readers = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        owner: String,
        host: String,
        endpoint: String,
        segment: String,
        buffer: u64,
        nbytes: u64,
        shape: Vec<u64>,
        dtype: Py<PyAny>,
        kind: String,
        path: String,
        nixl: Option<&[u8]>,
        device: i64,
        readers: u32,
    ) -> Ref {
        let desc = Descriptor { owner, host, endpoint, segment, buffer, len: nbytes };
        Ref { desc, shape, dtype, kind, path, nixl: nixl.unwrap_or_default().to_vec(), device, readers }
    }

    /// The owner: `<pid>-<start time>-<incarnation nonce>` (a restarted owner is another).
    #[getter]
    fn owner(&self) -> &str {
        &self.desc.owner
    }
    /// The owner's host: hostname/boot id/pid namespace.
    #[getter]
    fn host(&self) -> &str {
        &self.desc.host
    }
    /// The owner's TCP listener, `host:port`.
    #[getter]
    fn endpoint(&self) -> &str {
        &self.desc.endpoint
    }
    /// The shared-memory segment's name.
    #[getter]
    fn segment(&self) -> &str {
        &self.desc.segment
    }
    #[getter]
    fn buffer(&self) -> u64 {
        self.desc.buffer
    }
    #[getter]
    fn nbytes(&self) -> u64 {
        self.desc.len
    }
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }
    /// numpy's dtype descriptor: a string like `<f4`, or a list for a structured dtype.
    #[getter]
    fn dtype(&self, py: Python<'_>) -> Py<PyAny> {
        self.dtype.clone_ref(py)
    }
    /// What `get` hands back: `numpy`, `torch`, `dlpack` or `bytes`.
    #[getter]
    fn kind(&self) -> &str {
        &self.kind
    }
    /// A forced path, or `auto`.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }
    /// The NIXL ticket (agent, partial metadata, address) when registered, else empty.
    #[getter]
    fn nixl<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.nixl)
    }
    /// The accelerator (index in the owner's Machine) holding it; -1: host memory.
    #[getter]
    fn device(&self) -> i64 {
        self.device
    }
    /// A lease: the buffer frees itself after this many reads (0: until freed).
    #[getter]
    fn readers(&self) -> u32 {
        self.readers
    }

    /// Pickles as its class and its fields (a pickled reference is about 300 bytes).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        use pyo3::IntoPyObjectExt;
        let py = slf.py();
        let r = slf.get();
        let fields = [
            r.desc.owner.clone().into_bound_py_any(py)?,
            r.desc.host.clone().into_bound_py_any(py)?,
            r.desc.endpoint.clone().into_bound_py_any(py)?,
            r.desc.segment.clone().into_bound_py_any(py)?,
            r.desc.buffer.into_bound_py_any(py)?,
            r.desc.len.into_bound_py_any(py)?,
            PyTuple::new(py, &r.shape)?.into_any(),
            r.dtype.bind(py).clone(),
            r.kind.clone().into_bound_py_any(py)?,
            r.path.clone().into_bound_py_any(py)?,
            PyBytes::new(py, &r.nixl).into_any(),
            r.device.into_bound_py_any(py)?,
            r.readers.into_bound_py_any(py)?,
        ];
        let args = PyTuple::new(py, fields)?;
        Ok((slf.get_type(), args))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let r = slf.get();
        let dtype = r.dtype.bind(slf.py()).repr()?;
        Ok(format!(
            "Ref(owner={:?}, host={:?}, endpoint={:?}, segment={:?}, buffer={}, nbytes={}, shape={:?}, dtype={dtype}, \
             kind={:?}, path={:?}, device={}, readers={})",
            r.desc.owner,
            r.desc.host,
            r.desc.endpoint,
            r.desc.segment,
            r.desc.buffer,
            r.desc.len,
            r.shape,
            r.kind,
            r.path,
            r.device,
            r.readers
        ))
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(o) = other.cast::<Ref>() else { return Ok(false) };
        let o = o.get();
        let (a, b) = (&self.desc, &o.desc);
        let same = (&a.owner, &a.host, &a.endpoint, &a.segment, a.buffer, a.len)
            == (&b.owner, &b.host, &b.endpoint, &b.segment, b.buffer, b.len)
            && (&self.shape, &self.kind, &self.path, &self.nixl, self.device, self.readers)
                == (&o.shape, &o.kind, &o.path, &o.nixl, o.device, o.readers);
        Ok(same && self.dtype.bind(py).eq(o.dtype.bind(py))?)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&self.desc.owner, self.desc.buffer, &self.desc.segment).hash(&mut h);
        h.finish()
    }
}

/// The path a read of `r` takes in this process: `path` (unless empty), else the reference's
/// own (unless `auto`), else `ACCEL_TRANSPORT_PATH`, else the automatic choice from where the
/// two ends are (host memory: local, shm or tcp; NIXL is opt-in, never chosen on its own),
/// counted in the metrics when `count`.
fn choose(t: &Transport, r: &Ref, path: Option<&str>, count: bool) -> PyResult<Path> {
    let env = std::env::var(PATH_VAR).ok().filter(|p| !p.is_empty());
    let chosen = match path.filter(|p| !p.is_empty()) {
        Some(p) => p.to_owned(),
        None if r.path != "auto" && !r.path.is_empty() => r.path.clone(),
        None => env.unwrap_or_else(|| "auto".into()),
    };
    if chosen == "auto" {
        use accel_transport::route::{choose, Available, End, Memory};
        let src = End { owner: &r.desc.owner, host: &r.desc.host, memory: Memory::Host, machine: None };
        let dst = End { owner: t.owner(), host: t.host(), memory: Memory::Host, machine: None };
        let c = choose(&src, &dst, Available { nixl: false, cuda_ipc: false });
        if count {
            t.metrics().chose(c.path, c.reason);
        }
        return Ok(c.path);
    }
    Path::parse(&chosen).ok_or_else(|| {
        let names: Vec<&str> = Path::ALL.iter().map(|p| p.name()).collect();
        PyValueError::new_err(format!("unknown path {chosen:?}; expected one of {} or 'auto'", names.join(", ")))
    })
}

/// A fresh writable buffer of this process (a stream's destination).
fn owned(mut v: Vec<u8>) -> SharedBuffer {
    SharedBuffer { ptr: v.as_mut_ptr() as usize, len: v.len(), readonly: false, _keep: Keep::Owned(v) }
}

/// Where a read lands: the caller's array, or a buffer this returns.
enum Dst {
    Out(usize, usize),
    New,
}

impl Dst {
    /// The caller's bytes.
    ///
    /// # Safety
    /// `Out` names a writable array that the caller holds, unread and unwritten by anyone
    /// else, until the read returns (`accel._buffers.get` passes `out` and keeps it).
    unsafe fn out<'a>(address: usize, len: usize) -> &'a mut [u8] {
        if len == 0 {
            &mut []
        } else {
            // SAFETY: as this function's contract says.
            unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len) }
        }
    }
}

/// Copies `src` into the caller's array, or hands back a view of it.
fn deliver(src: &[u8], dst: &Dst, view: impl FnOnce() -> SharedBuffer) -> Result<Option<SharedBuffer>, Error> {
    match *dst {
        Dst::Out(address, len) => {
            if len != src.len() {
                return Err(Error::Protocol(format!("out holds {len} bytes, the buffer {}", src.len())));
            }
            // SAFETY: `Dst::out`'s contract.
            unsafe { Dst::out(address, len) }.copy_from_slice(src);
            Ok(None)
        }
        Dst::New => Ok(Some(view())),
    }
}

/// Reads `r` on `path` into `dst`; `None` when the bytes went into the caller's array. A view
/// of bytes that are not this read's own (the owner's buffer, a mapping, a relay copy) is
/// read-only unless `private` (a private copy-on-write mapping).
fn read(
    t: &Transport,
    r: &Ref,
    path: Path,
    private: bool,
    dst: &Dst,
    relayed: bool,
) -> Result<Option<SharedBuffer>, Error> {
    let d = &r.desc;
    let len = usize::try_from(d.len).map_err(|_| Error::Protocol("buffer too large for this process".into()))?;
    match path {
        Path::Local => {
            if d.owner != t.owner() {
                return Err(Error::Config("path 'local' needs the owner's own process".into()));
            }
            let (map, have) =
                t.arena().lookup(d.buffer).ok_or_else(|| Error::Freed { owner: d.owner.clone(), buffer: d.buffer })?;
            if have < d.len {
                return Err(Error::Protocol(format!(
                    "buffer {} holds {have} bytes, the reference {}",
                    d.buffer, d.len
                )));
            }
            // SAFETY: the arena's mapping is at least `len` bytes and lives while `map` does;
            // the owner's own published buffer is not written by the transport.
            let bytes = unsafe { std::slice::from_raw_parts(map.as_ptr(), len) };
            deliver(bytes, dst, || SharedBuffer {
                ptr: map.as_mut_ptr() as usize,
                len,
                readonly: true,
                _keep: Keep::Owner(map.clone()),
            })
        }
        Path::Shm => {
            let private = private && matches!(dst, Dst::New);
            let mut m = t.open_shm(d, private)?;
            if matches!(dst, Dst::Out(..)) {
                // SAFETY: the mapping is `m.len()` bytes and lives while `m` does.
                let bytes = unsafe { std::slice::from_raw_parts(m.as_ptr(), m.len()) };
                return deliver(bytes, dst, || unreachable!("`out` takes no view"));
            }
            let ptr = m.as_mut_ptr().map_or(m.as_ptr() as usize, |p| p as usize);
            let len = m.len();
            Ok(Some(SharedBuffer { ptr, len, readonly: !private, _keep: Keep::Consumer(m) }))
        }
        Path::Tcp if relayed => {
            let got = t.fetch_relayed(d)?;
            // SAFETY: this process's own arena buffer of `len` bytes, alive while `map` is.
            let bytes = unsafe { std::slice::from_raw_parts(got.alloc.map.as_ptr(), len) };
            let map = got.alloc.map.clone();
            deliver(bytes, dst, || SharedBuffer {
                ptr: map.as_mut_ptr() as usize,
                len,
                readonly: true,
                _keep: Keep::Owner(map.clone()),
            })
        }
        _ => {
            let fetch = |out: &mut [u8]| -> Result<(), Error> {
                if path == Path::Tcp {
                    return t.fetch_tcp(d, out);
                }
                let backend = accel_transport::backends().into_iter().find(|b| b.path() == path && b.available());
                match backend {
                    Some(b) => b.fetch(d, out),
                    None => Err(Error::Unsupported(path.name())),
                }
            };
            match *dst {
                Dst::Out(address, out_len) => {
                    if out_len != len {
                        return Err(Error::Protocol(format!("out holds {out_len} bytes, the buffer {len}")));
                    }
                    // SAFETY: `Dst::out`'s contract.
                    fetch(unsafe { Dst::out(address, out_len) })?;
                    Ok(None)
                }
                Dst::New => {
                    let mut v = vec![0u8; len];
                    fetch(&mut v)?;
                    Ok(Some(owned(v)))
                }
            }
        }
    }
}

/// Counts one finished read of a leased buffer at its owner; a buffer freed by other means, or
/// an owner gone, leaves nothing to count.
fn release(t: &Transport, r: &Ref) -> PyResult<()> {
    if r.readers == 0 {
        return Ok(());
    }
    match t.release(&r.desc) {
        Ok(_) | Err(Error::Freed { .. } | Error::OwnerGone { .. }) => Ok(()),
        Err(e) => Err(transport_error(e)),
    }
}

/// Reads `r` into this process in one call: chooses the path ([`choose`], counted), fetches
/// (a view of the owner's or a mapped buffer, a stream into a new buffer or into `out`, a
/// relayed copy), records the read's time or its failure, and releases a leased read. Returns
/// the path, the bytes (`None` when they went into `out`, or for `nixl`, which the caller
/// reads through NIXL's Python API and then reports with `transport_finish`), and whether the
/// caller must copy them: a private array (`copy`, or `writable`) was asked for and the bytes
/// are a read-only view of someone else's (the owner's own buffer is never handed out
/// writable).
///
/// `out` is `(address, nbytes)` of a writable C-contiguous array the caller holds until this
/// returns. `relay` (default: `ACCEL_TRANSPORT_RELAY=1`) relays a TCP read of a buffer leased
/// to two or more readers. A `torch` reference is read writable unless copied (torch has no
/// read-only tensors).
#[pyfunction]
#[pyo3(signature = (r, path = None, writable = false, copy = false, out = None, relay = None))]
pub fn transport_get(
    py: Python<'_>,
    r: &Bound<'_, Ref>,
    path: Option<&str>,
    writable: bool,
    copy: bool,
    out: Option<(usize, usize)>,
    relay: Option<bool>,
) -> PyResult<(&'static str, Option<SharedBuffer>, bool)> {
    let t = started()?;
    let r = r.get();
    let chosen = choose(&t, r, path, true)?;
    if chosen == Path::Nixl {
        return Ok((chosen.name(), None, false));
    }
    let relay = relay.unwrap_or_else(|| std::env::var(RELAY_VAR).is_ok_and(|v| v == "1"));
    let relayed = relay && chosen == Path::Tcp && r.readers >= 2;
    if relayed && out.is_some() {
        return Err(PyValueError::new_err(
            "relay=True returns this process's own copy, which other readers stream from: no out=",
        ));
    }
    if let Some((0, n)) = out.filter(|&(_, n)| n > 0) {
        return Err(PyValueError::new_err(format!("the destination of {n} bytes is at a null address")));
    }
    let writable = writable || (r.kind == "torch" && !copy);
    let dst = match out {
        Some((address, n)) => Dst::Out(address, n),
        None => Dst::New,
    };
    let t0 = Instant::now();
    let got = py.detach(|| read(&t, r, chosen, writable && !copy, &dst, relayed));
    match got {
        Ok(buf) => {
            t.metrics().transfer(chosen, r.desc.len, t0.elapsed());
            release(&t, r)?;
            let copy = buf.as_ref().is_some_and(|b| b.readonly && (copy || writable));
            Ok((chosen.name(), buf, copy))
        }
        Err(e) => {
            t.metrics().error(chosen);
            Err(transport_error(e))
        }
    }
}

/// The path a read of `r` would take here (`Ref.chosen_path`), not counted.
#[pyfunction]
pub fn transport_path(r: &Bound<'_, Ref>) -> PyResult<&'static str> {
    let t = started()?;
    Ok(choose(&t, r.get(), None, false)?.name())
}

/// After a NIXL read of `r` (`transport_get` answered `nixl`): with `check`, confirms with the
/// owner that the buffer is still published (a freed id never comes back, so the bytes read
/// are the buffer's; raises `BufferFreed` or `OwnerGone`); then records the read (`ok`, taking
/// `seconds`) or its failure, and releases a leased read.
#[pyfunction]
pub fn transport_finish(py: Python<'_>, r: &Bound<'_, Ref>, seconds: f64, ok: bool, check: bool) -> PyResult<()> {
    let t = started()?;
    let r = r.get();
    if check {
        if let Err(e) = py.detach(|| t.check(&r.desc)) {
            t.metrics().error(Path::Nixl);
            return Err(transport_error(e));
        }
    }
    if !ok {
        t.metrics().error(Path::Nixl);
        return Ok(());
    }
    t.metrics().transfer(Path::Nixl, r.desc.len, Duration::from_secs_f64(seconds.max(0.0)));
    release(&t, r)
}

/// Frees a buffer, locally or by asking its owner.
#[pyfunction]
pub fn transport_free(py: Python<'_>, r: &Bound<'_, Ref>) -> PyResult<()> {
    let t = started()?;
    let d = &r.get().desc;
    py.detach(|| t.free(d)).map_err(transport_error)
}

/// The path from `r`'s buffer (in accelerator `device` of `machine_json`, or host memory
/// when negative) to this process (into `dst_device`), from the topology: `(path, reason,
/// detail)`. `nixl` and `cuda_ipc` say which of those backends work here.
#[pyfunction]
pub fn transport_route(
    r: &Bound<'_, Ref>,
    dst_device: i64,
    machine_json: Option<&str>,
    nixl: bool,
    cuda_ipc: bool,
) -> PyResult<(&'static str, &'static str, String)> {
    use accel_transport::route::{choose, Available, End, Memory};
    let t = started()?;
    let r = r.get();
    let machine: Option<accel_model::Machine> = match machine_json {
        Some(text) => {
            Some(serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("machine JSON: {e}")))?)
        }
        None => None,
    };
    let memory = |d: i64| usize::try_from(d).map_or(Memory::Host, Memory::Device);
    let src = End { owner: &r.desc.owner, host: &r.desc.host, memory: memory(r.device), machine: machine.as_ref() };
    let dst = End { owner: t.owner(), host: t.host(), memory: memory(dst_device), machine: machine.as_ref() };
    let c = choose(&src, &dst, Available { nixl, cuda_ipc });
    Ok((c.path.name(), c.reason.name(), c.detail))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Ref>()?;
    m.add_function(wrap_pyfunction!(transport_free, m)?)?;
    m.add_function(wrap_pyfunction!(transport_route, m)?)?;
    m.add_function(wrap_pyfunction!(transport_get, m)?)?;
    m.add_function(wrap_pyfunction!(transport_path, m)?)?;
    m.add_function(wrap_pyfunction!(transport_finish, m)?)?;
    let paths: Vec<&str> = Path::ALL.iter().map(|p| p.name()).collect();
    m.add("TRANSPORT_PATHS", paths)?;
    Ok(())
}
