//! Transport paths and the `Backend` trait that every path beyond the built-in three plugs into
//! (RDMA/UCX, CUDA IPC, NCCL). The path is chosen from where the two ends are.

use crate::error::{Error, Result};

/// A way to move a buffer, in order of preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// Same process: the owner's own array, no copy.
    Local = 0,
    /// Same host: map the owner's shared-memory segment, no copy.
    Shm = 1,
    /// Other host: authenticated TCP stream into a fresh buffer.
    Tcp = 2,
    /// RDMA through UCX (planned; see `backends`).
    Rdma = 3,
    /// CUDA IPC handles between processes on one GPU (cargo feature `cuda-ipc`).
    CudaIpc = 4,
    /// NCCL send/recv within a communicator (planned).
    Nccl = 5,
}

impl Path {
    /// Every path, indexed by its discriminant.
    pub const ALL: [Path; 6] = [Path::Local, Path::Shm, Path::Tcp, Path::Rdma, Path::CudaIpc, Path::Nccl];

    /// Stable lowercase name: metric label, override value, reference hint.
    pub fn name(self) -> &'static str {
        match self {
            Path::Local => "local",
            Path::Shm => "shm",
            Path::Tcp => "tcp",
            Path::Rdma => "rdma",
            Path::CudaIpc => "cuda_ipc",
            Path::Nccl => "nccl",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<Path> {
        Path::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The automatic choice: same owner -> local, same host -> shm, else tcp.
    pub fn choose(my_owner: &str, my_host: &str, owner: &str, host: &str) -> Path {
        if my_owner == owner {
            Path::Local
        } else if my_host == host {
            Path::Shm
        } else {
            Path::Tcp
        }
    }
}

/// Where a buffer lives, as a reference describes it.
#[derive(Clone, Debug)]
pub struct Descriptor {
    pub owner: String,
    pub host: String,
    pub endpoint: String,
    pub segment: String,
    pub buffer: u64,
    pub len: u64,
}

/// A data path that copies a remote buffer into local memory. Shared memory and TCP are built
/// in (`Transport::open_shm`, `Client::fetch`); device and fabric paths implement this trait.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Which path this is.
    fn path(&self) -> Path;
    /// Whether the path works in this process (library present, device visible).
    fn available(&self) -> bool;
    /// Copies the buffer `desc` into `dst` (`dst.len() == desc.len`).
    fn fetch(&self, desc: &Descriptor, dst: &mut [u8]) -> Result<()>;
}

/// A path that this build or machine does not offer: always unavailable.
#[derive(Debug)]
struct Planned(Path, &'static str);

impl Backend for Planned {
    fn path(&self) -> Path {
        self.0
    }
    fn available(&self) -> bool {
        false
    }
    fn fetch(&self, _: &Descriptor, _: &mut [u8]) -> Result<()> {
        Err(Error::Unsupported(self.1))
    }
}

/// The pluggable backends of this build, available or not.
///
/// - `rdma`: UCX active messages through a runtime-loaded libucp (`sideway`/own bindgen), not
///   built: this machine has no RDMA device and no soft-RoCE module to test it on.
/// - `cuda_ipc`: with the `cuda-ipc` feature, `cuIpcGetMemHandle`/`cuIpcOpenMemHandle` through a
///   runtime-loaded libcuda (`cuda_ipc.rs`), checked by `scripts/device-check-cuda-ipc.sh`;
///   without a GPU it reports itself unavailable.
/// - `nccl`: send/recv through a runtime-loaded libnccl, planned.
pub fn backends() -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(Planned(Path::Rdma, "rdma")),
        #[cfg(feature = "cuda-ipc")]
        Box::new(crate::cuda_ipc::CudaIpc),
        #[cfg(not(feature = "cuda-ipc"))]
        Box::new(Planned(Path::CudaIpc, "cuda_ipc (build with the cuda-ipc feature)")),
        Box::new(Planned(Path::Nccl, "nccl")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_follows_locality() {
        assert_eq!(Path::choose("a", "h", "a", "h"), Path::Local);
        assert_eq!(Path::choose("a", "h", "b", "h"), Path::Shm);
        assert_eq!(Path::choose("a", "h", "b", "g"), Path::Tcp);
        for p in Path::ALL {
            assert_eq!(Path::parse(p.name()), Some(p));
        }
        // No RDMA or NCCL here; CUDA IPC only where a GPU is.
        assert!(backends().iter().filter(|b| b.path() != Path::CudaIpc).all(|b| !b.available()));
    }
}
