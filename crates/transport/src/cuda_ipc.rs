//! The CUDA IPC path (cargo feature `cuda-ipc`): an owner exports a device allocation as a
//! 64-byte `cuIpcGetMemHandle` handle, a process on the same host and GPU opens it with
//! `cuIpcOpenMemHandle` and reads it without a host round trip. libcuda is loaded at run time
//! (cudarc's dynamic loading), so the feature builds and the crate runs on machines without
//! CUDA: there the backend reports itself unavailable.
#![allow(unsafe_code)]

use cudarc::driver::sys::{self, CUdeviceptr, CUipcMemHandle, CUresult};

use crate::error::{Error, Result};
use crate::path::{Backend, Descriptor, Path};

/// Bytes of an IPC handle.
pub const HANDLE_LEN: usize = 64;

fn check(what: &'static str, r: CUresult) -> Result<()> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Protocol(format!("{what} failed: {r:?}")))
    }
}

/// Whether libcuda loads and sees at least one device.
pub fn available() -> bool {
    // SAFETY: probing for the library has no preconditions; cuInit/cuDeviceGetCount only
    // run once it is known to be present.
    unsafe {
        if !sys::is_culib_present() || sys::cuInit(0) != CUresult::CUDA_SUCCESS {
            return false;
        }
        let mut n = 0;
        sys::cuDeviceGetCount(&mut n) == CUresult::CUDA_SUCCESS && n > 0
    }
}

/// Makes device `ordinal`'s primary context current on this thread.
pub fn bind_device(ordinal: i32) -> Result<()> {
    if !available() {
        return Err(Error::Unsupported("cuda_ipc"));
    }
    // SAFETY: out-pointers are valid locals; the primary context is retained for the process.
    unsafe {
        let mut dev = 0;
        check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal))?;
        let mut ctx = std::ptr::null_mut();
        check("cuDevicePrimaryCtxRetain", sys::cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
        check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))
    }
}

/// Exports the device allocation starting at `dptr` (current context).
pub fn export(dptr: CUdeviceptr) -> Result<[u8; HANDLE_LEN]> {
    // SAFETY: the handle is plain bytes; all zeros is a valid value.
    let mut h: CUipcMemHandle = unsafe { std::mem::zeroed() };
    // SAFETY: `h` is a valid out-pointer; the driver checks `dptr`.
    check("cuIpcGetMemHandle", unsafe { sys::cuIpcGetMemHandle(&mut h, dptr) })?;
    let mut out = [0u8; HANDLE_LEN];
    for (o, b) in out.iter_mut().zip(h.reserved.iter()) {
        *o = *b as u8;
    }
    Ok(out)
}

/// An opened IPC handle: the peer's allocation mapped into this process's current context.
#[derive(Debug)]
pub struct Opened {
    pub dptr: CUdeviceptr,
}

/// Opens a handle exported by another process.
pub fn open(handle: &[u8; HANDLE_LEN]) -> Result<Opened> {
    // SAFETY: the handle is plain bytes; all zeros is a valid value.
    let mut h: CUipcMemHandle = unsafe { std::mem::zeroed() };
    for (o, b) in h.reserved.iter_mut().zip(handle.iter()) {
        *o = *b as _;
    }
    let mut dptr: CUdeviceptr = 0;
    // SAFETY: `dptr` is a valid out-pointer; the driver validates the handle.
    check("cuIpcOpenMemHandle", unsafe {
        sys::cuIpcOpenMemHandle_v2(&mut dptr, h, sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32)
    })?;
    Ok(Opened { dptr })
}

impl Opened {
    /// Copies the first `dst.len()` bytes to host memory.
    pub fn read(&self, dst: &mut [u8]) -> Result<()> {
        // SAFETY: `dst` is valid for `dst.len()` bytes; the driver checks the device range.
        check("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), self.dptr, dst.len()) })
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        // SAFETY: `dptr` came from cuIpcOpenMemHandle and is closed once.
        unsafe {
            sys::cuIpcCloseMemHandle(self.dptr);
        }
    }
}

/// Parses a handle carried as hex in a descriptor's `segment`.
pub fn parse_handle(hex: &str) -> Result<[u8; HANDLE_LEN]> {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| Error::Protocol("bad CUDA IPC handle".into()))?;
    bytes.try_into().map_err(|_| Error::Protocol("a CUDA IPC handle is 64 bytes".into()))
}

/// The CUDA IPC backend: `Descriptor::segment` holds the hex handle.
#[derive(Debug, Default)]
pub struct CudaIpc;

impl Backend for CudaIpc {
    fn path(&self) -> Path {
        Path::CudaIpc
    }
    fn available(&self) -> bool {
        available()
    }
    fn fetch(&self, desc: &Descriptor, dst: &mut [u8]) -> Result<()> {
        open(&parse_handle(&desc.segment)?)?.read(dst)
    }
}
