//! Weight-sync planning from Python: the plan between two layouts as an object (`ReshardPlan`:
//! its summary, each rank's part expanded on demand, its bytes for a cache), the dtype table,
//! and FP8 quantisation of a source rank's pieces over arrays the caller holds.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::json;

use accel_reshard::{fp8, Buffer, Layout, Plan, Scale, DTYPES};

fn layout(text: &str, side: &str) -> PyResult<Layout> {
    serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("invalid {side} layout: {e}")))
}

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A plan (`accel_reshard::Plan`), held in Rust: what Python needs comes out as JSON per call.
#[pyclass(frozen, module = "accel._native")]
#[derive(Debug)]
pub struct ReshardPlan {
    plan: Plan,
}

fn buffer_json(b: &Buffer) -> serde_json::Value {
    json!({
        "class": b.class,
        "readers": b.readers,
        "relay": b.relay,
        "nbytes": b.nbytes,
        "pieces": b.pieces.iter().map(|p| json!([p.tensor, p.boxed, p.offset, p.nbytes, p.scales_at])).collect::<Vec<_>>(),
    })
}

#[pymethods]
impl ReshardPlan {
    /// The plan's totals as JSON: tensors (name, dtypes, scale), classes, links, bytes, ranks,
    /// templates, pieces placed and memory.
    fn summary(&self) -> String {
        let p = &self.plan;
        let (templates, pieces) = p.counts();
        json!({
            "tensors": p.tensors.iter().map(|t| json!([t.name, t.src_dtype, t.dst_dtype, t.scale])).collect::<Vec<_>>(),
            "classes": p.classes,
            "links": p.links,
            "bytes": p.bytes,
            "sources": p.source_ranks(),
            "destinations": p.destination_ranks(),
            "templates": templates,
            "pieces": pieces,
            "memory": p.memory(),
        })
        .to_string()
    }

    /// Source rank `rank`'s buffers as JSON (pieces as `[tensor, box, offset, nbytes, scales_at]`).
    fn source(&self, py: Python<'_>, rank: usize) -> PyResult<String> {
        if rank >= self.plan.source_ranks() {
            return Err(PyValueError::new_err(format!("no source rank {rank}")));
        }
        let bufs = py.detach(|| self.plan.source(rank));
        Ok(serde_json::Value::from(bufs.iter().map(buffer_json).collect::<Vec<_>>()).to_string())
    }

    /// Destination rank `rank`'s buffers as JSON, each with `src` and `buffer` (its index there).
    fn destination(&self, py: Python<'_>, rank: usize) -> String {
        let part = py.detach(|| self.plan.destination(rank));
        let out: Vec<serde_json::Value> = part
            .iter()
            .map(|(f, b)| {
                let mut v = buffer_json(b);
                v["src"] = f.src.into();
                v["buffer"] = f.buffer.into();
                v
            })
            .collect();
        serde_json::Value::from(out).to_string()
    }

    /// The plan with one more destination rank on `host`, a replica of rank `like`, and that
    /// rank's index (nothing is planned again).
    fn with_replica(&self, like: usize, host: &str) -> PyResult<(ReshardPlan, usize)> {
        let (plan, rank) = self.plan.with_replica(like, host).map_err(value_error)?;
        Ok((ReshardPlan { plan }, rank))
    }

    /// The plan without destination rank `rank` (its slot stays empty).
    fn without_replica(&self, rank: usize) -> PyResult<ReshardPlan> {
        Ok(ReshardPlan { plan: self.plan.without_replica(rank).map_err(value_error)? })
    }

    /// The fabric model's prediction (`accel_reshard::fabric`) for this plan on the fleet
    /// described by `fleet` (JSON), as JSON.
    fn predict(&self, fleet: &str) -> PyResult<String> {
        let fleet: accel_reshard::Fleet =
            serde_json::from_str(fleet).map_err(|e| PyValueError::new_err(format!("invalid fleet: {e}")))?;
        serde_json::to_string(&accel_reshard::predict(&self.plan, &fleet).map_err(value_error)?).map_err(value_error)
    }

    /// The plan as bytes (`reshard_plan_load` reads them back), tagged with `tag`.
    fn to_bytes<'py>(&self, py: Python<'py>, tag: &str) -> Bound<'py, PyBytes> {
        let bytes = py.detach(|| accel_reshard::encode(&self.plan, tag));
        PyBytes::new(py, &bytes)
    }
}

/// The plan that moves `src` into `dst` (layout JSON); a `ValueError` names the mistake.
#[pyfunction]
fn reshard_plan(py: Python<'_>, src: String, dst: String) -> PyResult<ReshardPlan> {
    let (src, dst) = (layout(&src, "source")?, layout(&dst, "destination")?);
    let plan = py.detach(|| accel_reshard::plan(&src, &dst)).map_err(value_error)?;
    Ok(ReshardPlan { plan })
}

/// A plan and its tag from `ReshardPlan.to_bytes`; a `ValueError` for anything else.
#[pyfunction]
fn reshard_plan_load(py: Python<'_>, data: Vec<u8>) -> PyResult<(String, ReshardPlan)> {
    let (tag, plan) = py.detach(|| accel_reshard::decode(&data)).map_err(value_error)?;
    Ok((tag, ReshardPlan { plan }))
}

/// Every dtype a layout may name: (name, bytes per element, floating point).
#[pyfunction]
fn reshard_dtypes() -> Vec<(&'static str, u64, bool)> {
    DTYPES.to_vec()
}

fn scale(name: &str) -> PyResult<Scale> {
    match name {
        "tensor" => Ok(Scale::Tensor),
        "block" => Ok(Scale::Block),
        other => Err(PyValueError::new_err(format!("unknown FP8 scale {other:?} (tensor or block)"))),
    }
}

fn format(name: &str) -> PyResult<fp8::Format> {
    fp8::format(name).ok_or_else(|| PyValueError::new_err(format!("{name:?} is not an FP8 dtype (f8e4m3, f8e5m2)")))
}

/// A source rank's local array handed over as `(address, nbytes)`.
///
/// # Safety
/// The caller (`accel.weights`) holds a C-contiguous array of `nbytes` bytes at `address`,
/// unwritten by anyone until the call returns.
unsafe fn bytes<'a>(address: usize, nbytes: usize) -> &'a [u8] {
    if nbytes == 0 || address == 0 {
        &[]
    } else {
        // SAFETY: as this function's contract says.
        unsafe { std::slice::from_raw_parts(address as *const u8, nbytes) }
    }
}

/// The FP8 scales of every group of a source rank's local array (`array`: its address and
/// bytes, C order; `shape`, `origin`: its extent and where it starts in the tensor).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn reshard_fp8_scales(
    py: Python<'_>,
    array: (usize, usize),
    dtype: &str,
    shape: Vec<u64>,
    origin: Vec<u64>,
    scale_kind: &str,
    fp8_dtype: &str,
) -> PyResult<Vec<f32>> {
    let (kind, f) = (scale(scale_kind)?, format(fp8_dtype)?);
    // SAFETY: `accel.weights` passes an array it holds for the length of this call.
    let src = unsafe { bytes(array.0, array.1) };
    let local = fp8::Local { bytes: src, dtype, shape: &shape, origin: &origin };
    py.detach(|| fp8::scales(&local, kind, f)).map_err(value_error)
}

/// Quantises the piece `boxed` of a source rank's local array into `out` (address and bytes of
/// the packed buffer's slice), with `grid` from `reshard_fp8_scales`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn reshard_fp8_pack(
    py: Python<'_>,
    array: (usize, usize),
    dtype: &str,
    shape: Vec<u64>,
    origin: Vec<u64>,
    scale_kind: &str,
    fp8_dtype: &str,
    grid: Vec<f32>,
    boxed: Vec<[u64; 2]>,
    out: (usize, usize),
) -> PyResult<()> {
    let (kind, f) = (scale(scale_kind)?, format(fp8_dtype)?);
    if out.0 == 0 && out.1 > 0 {
        return Err(PyValueError::new_err("the destination is at a null address"));
    }
    // SAFETY: `accel.weights` passes the source array and a slice of a buffer it packs, both
    // held (and written by nobody else) for the length of this call.
    let (src, dst) = unsafe {
        (
            bytes(array.0, array.1),
            if out.1 == 0 { &mut [][..] } else { std::slice::from_raw_parts_mut(out.0 as *mut u8, out.1) },
        )
    };
    let local = fp8::Local { bytes: src, dtype, shape: &shape, origin: &origin };
    py.detach(|| fp8::quantize(&local, kind, f, &grid, &boxed, dst)).map_err(value_error)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ReshardPlan>()?;
    m.add_function(wrap_pyfunction!(reshard_plan, m)?)?;
    m.add_function(wrap_pyfunction!(reshard_plan_load, m)?)?;
    m.add_function(wrap_pyfunction!(reshard_dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(reshard_fp8_scales, m)?)?;
    m.add_function(wrap_pyfunction!(reshard_fp8_pack, m)?)?;
    Ok(())
}
