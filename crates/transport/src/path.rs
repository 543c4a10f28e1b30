//! Transport paths, the descriptor of a buffer, and the `Backend` trait that device paths plug
//! into. The path is chosen from where the two ends are and, with the hardware model, how they
//! connect (`route`). This module knows no implementation: the endpoint lists those built
//! (`endpoint::backends`).

use crate::error::Result;

/// A way to move a buffer. Only real paths exist here: a path that is not built cannot be
/// named, chosen or counted (RDMA verbs of our own and NCCL are not built; GPUDirect RDMA and
/// NVLink go through NIXL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// Same process: the owner's own array, no copy.
    Local = 0,
    /// Same host: map the owner's shared-memory segment, no copy.
    Shm = 1,
    /// Other host: authenticated TCP stream into a fresh buffer (encrypted beyond loopback).
    Tcp = 2,
    /// NIXL (UCX underneath): one-sided READ of registered memory, DRAM over shared memory or
    /// TCP, VRAM over NVLink/CUDA IPC and RDMA where they exist. Driven from Python (the
    /// `nixl-cu12` wheel); opt-in on the owner, since UCX does not encrypt.
    Nixl = 3,
    /// CUDA IPC handles between processes on one GPU (cargo feature `cuda-ipc`).
    CudaIpc = 4,
}

impl Path {
    /// Every path, indexed by its discriminant.
    pub const ALL: [Path; 5] = [Path::Local, Path::Shm, Path::Tcp, Path::Nixl, Path::CudaIpc];

    /// Stable lowercase name: metric label, override value, reference hint.
    pub fn name(self) -> &'static str {
        match self {
            Path::Local => "local",
            Path::Shm => "shm",
            Path::Tcp => "tcp",
            Path::Nixl => "nixl",
            Path::CudaIpc => "cuda_ipc",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<Path> {
        Path::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The choice from locality alone (no hardware facts): same owner -> local, same host ->
    /// shm, else tcp. `route::choose` refines it with the topology.
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
#[derive(Clone, Debug, Default)]
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
        // Placeholders cannot be named: only real paths parse.
        assert_eq!(Path::parse("rdma"), None);
        assert_eq!(Path::parse("nccl"), None);
    }
}
