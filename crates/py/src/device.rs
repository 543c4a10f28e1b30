//! Device memory from Python: DLPack tensors from any producer (torch, numpy, cupy, jax), in
//! every dtype DLPack names and on any device (where the memory is, its dtype as a layout name,
//! bf16 and FP8 included without an integer view, shape and strides; nothing is copied, and the
//! capsule comes back to the caller, whose holding it keeps the producer's memory alive), and
//! the route between two ends given both machines (`accel_transport::route`), for the weight
//! sync's per-piece choice.

use std::ffi::c_void;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// DLPack 0.x: the tensor first.
#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: *mut c_void,
}

/// DLPack 1.x: version, context, deleter and flags before the tensor.
#[repr(C)]
struct DLManagedTensorVersioned {
    major: u32,
    minor: u32,
    manager_ctx: *mut c_void,
    deleter: *mut c_void,
    flags: u64,
    dl_tensor: DLTensor,
}

const READ_ONLY: u64 = 1;

/// The dtype name of a DLPack dtype (DLPack 1.1's codes): a layout's, or `u16`/`u32`/`u64`
/// (raw storage, e.g. bf16 bits in numpy), or why there is none.
pub fn dtype_name(code: u8, bits: u8, lanes: u16) -> Result<&'static str, String> {
    let name = match (code, bits) {
        (0, 8) => "i8",
        (0, 16) => "i16",
        (0, 32) => "i32",
        (0, 64) => "i64",
        (1, 8) => "u8",
        (1, 16) => "u16",
        (1, 32) => "u32",
        (1, 64) => "u64",
        (2, 16) => "f16",
        (2, 32) => "f32",
        (2, 64) => "f64",
        (4, 16) => "bf16",
        (6, 8) => "bool",
        (10, 8) => "f8e4m3",
        (12, 8) => "f8e5m2",
        _ => return Err(format!("DLPack dtype code {code} of {bits} bits has no accel dtype")),
    };
    if lanes != 1 {
        return Err(format!("DLPack vector dtypes ({lanes} lanes) are not supported"));
    }
    Ok(name)
}

/// What `dlpack_describe` returns: the capsule (hold it while using the memory), device type
/// and index (DLPack's: 1 CPU, 2 CUDA, 3 CUDA host, 10 ROCm, ...), the first element's address,
/// the dtype's layout name, the shape, the strides in elements (None: C order), read-only.
type Described<'py> = (Bound<'py, PyAny>, i32, i32, usize, &'static str, Vec<i64>, Option<Vec<i64>>, bool);

/// Describes `obj`'s memory through its `__dlpack__` (versioned when the producer speaks
/// DLPack 1, the legacy capsule otherwise).
#[pyfunction]
pub fn dlpack_describe<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Described<'py>> {
    if !obj.hasattr("__dlpack__")? {
        return Err(PyTypeError::new_err(format!("{} does not export DLPack (__dlpack__)", obj.get_type().name()?)));
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (1, 0))?;
    let capsule = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0("__dlpack__")?,
        Err(e) => return Err(e),
    };
    let cap = capsule.cast::<PyCapsule>().map_err(|_| PyTypeError::new_err("__dlpack__ did not return a capsule"))?;
    let (tensor, readonly): (&DLTensor, bool) = if let Ok(p) = cap.pointer_checked(Some(c"dltensor_versioned")) {
        // SAFETY: a capsule named "dltensor_versioned" holds a DLManagedTensorVersioned, alive
        // while the capsule is (we hold it, unconsumed).
        let m = unsafe { &*(p.as_ptr() as *const DLManagedTensorVersioned) };
        if m.major != 1 {
            return Err(PyValueError::new_err(format!("DLPack {}.{} is not supported (1.x is)", m.major, m.minor)));
        }
        (&m.dl_tensor, m.flags & READ_ONLY != 0)
    } else if let Ok(p) = cap.pointer_checked(Some(c"dltensor")) {
        // SAFETY: a capsule named "dltensor" holds a DLManagedTensor, alive while the capsule is.
        let m = unsafe { &*(p.as_ptr() as *const DLManagedTensor) };
        (&m.dl_tensor, false)
    } else {
        return Err(PyValueError::new_err("a DLPack capsule that was already consumed, or not a DLPack capsule"));
    };
    let ndim = usize::try_from(tensor.ndim).map_err(|_| PyValueError::new_err("a negative DLPack ndim"))?;
    if ndim > 64 {
        return Err(PyValueError::new_err(format!("{ndim} dimensions")));
    }
    let read = |p: *const i64| -> Vec<i64> {
        if p.is_null() || ndim == 0 {
            Vec::new()
        } else {
            // SAFETY: DLPack's shape and strides arrays hold `ndim` entries.
            unsafe { std::slice::from_raw_parts(p, ndim) }.to_vec()
        }
    };
    let shape = read(tensor.shape);
    if shape.len() != ndim || shape.iter().any(|&d| d < 0) {
        return Err(PyValueError::new_err("a DLPack tensor without a valid shape"));
    }
    let strides = (!tensor.strides.is_null()).then(|| read(tensor.strides));
    let dtype = dtype_name(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes).map_err(PyValueError::new_err)?;
    let address = (tensor.data as usize).wrapping_add(tensor.byte_offset as usize);
    Ok((capsule, tensor.device.device_type, tensor.device.device_id, address, dtype, shape, strides, readonly))
}

fn machine(text: Option<&str>) -> PyResult<Option<accel_model::Machine>> {
    text.map(|t| serde_json::from_str(t).map_err(|e| PyValueError::new_err(format!("machine JSON: {e}")))).transpose()
}

/// The path from a buffer of `src` to `dst`, each `(owner, host, device or -1, machine JSON or
/// None)`, from the topology: `(path, reason, detail)`. `nixl` and `cuda_ipc` say which of
/// those backends work.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn transport_route_ends(
    src: (String, String, i64, Option<String>),
    dst: (String, String, i64, Option<String>),
    nixl: bool,
    cuda_ipc: bool,
) -> PyResult<(&'static str, &'static str, String)> {
    use accel_transport::route::{choose, Available, End, Memory};
    let (sm, dm) = (machine(src.3.as_deref())?, machine(dst.3.as_deref())?);
    let memory = |d: i64| usize::try_from(d).map_or(Memory::Host, Memory::Device);
    let a = End { owner: &src.0, host: &src.1, memory: memory(src.2), machine: sm.as_ref() };
    let b = End { owner: &dst.0, host: &dst.1, memory: memory(dst.2), machine: dm.as_ref() };
    let c = choose(&a, &b, Available { nixl, cuda_ipc });
    Ok((c.path.name(), c.reason.name(), c.detail))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(dlpack_describe, m)?)?;
    m.add_function(wrap_pyfunction!(transport_route_ends, m)?)?;
    Ok(())
}
