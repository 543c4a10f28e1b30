//! The path between two ends, chosen from the hardware model: same process -> local; two
//! accelerators of one node -> NIXL over their scale-up link (NVLink, xGMI) or CUDA IPC over
//! PCIe; device memory to another node -> GPUDirect RDMA through NIXL when an RDMA NIC sits at
//! PIX or PXB from the accelerator; shared memory or TCP otherwise. Every choice carries a
//! bounded reason code (a metric label) and a sentence naming the facts behind it.
//!
//! The facts come in as `accel_model::Machine`s (the bottom crate: data, no IO): the caller
//! (the Python bindings, or anything holding discovery's output) passes them. The transport
//! never discovers anything itself.

use accel_model::{Endpoint, Machine, PathClass, PathClassifier};

use crate::path::Path;

/// Where the bytes of one end live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Host memory (DRAM).
    Host,
    /// Memory of an accelerator: its position in `Machine::accelerators`.
    Device(usize),
}

/// One end of a transfer: its process, its host, its memory, and its machine when known.
#[derive(Clone, Copy, Debug)]
pub struct End<'a> {
    pub owner: &'a str,
    pub host: &'a str,
    pub memory: Memory,
    pub machine: Option<&'a Machine>,
}

/// Which optional backends work in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Available {
    pub nixl: bool,
    pub cuda_ipc: bool,
}

/// Why a path was chosen: a bounded metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    SameProcess = 0,
    SameHost = 1,
    ScaleUpLink = 2,
    PciePeer = 3,
    GpuDirectRdma = 4,
    NoCloseRdmaNic = 5,
    OtherHost = 6,
    NoDevicePath = 7,
}

impl Reason {
    /// Every reason, indexed by its discriminant.
    pub const ALL: [Reason; 8] = [
        Reason::SameProcess,
        Reason::SameHost,
        Reason::ScaleUpLink,
        Reason::PciePeer,
        Reason::GpuDirectRdma,
        Reason::NoCloseRdmaNic,
        Reason::OtherHost,
        Reason::NoDevicePath,
    ];

    /// Stable lowercase name: the `reason` metric label.
    pub fn name(self) -> &'static str {
        match self {
            Reason::SameProcess => "same_process",
            Reason::SameHost => "same_host",
            Reason::ScaleUpLink => "scale_up_link",
            Reason::PciePeer => "pcie_peer",
            Reason::GpuDirectRdma => "gpudirect_rdma",
            Reason::NoCloseRdmaNic => "no_close_rdma_nic",
            Reason::OtherHost => "other_host",
            Reason::NoDevicePath => "no_device_path",
        }
    }
}

/// A chosen path, with its reason code and the facts behind it in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub path: Path,
    pub reason: Reason,
    pub detail: String,
}

fn choice(path: Path, reason: Reason, detail: String) -> Choice {
    Choice { path, reason, detail }
}

fn device_name(m: &Machine, i: usize) -> String {
    m.accelerators.get(i).map_or_else(|| format!("accelerator {i}"), |a| format!("{} {}", a.vendor, a.index))
}

/// The RDMA NIC closest to accelerator `dev` of `m`: its name and path class.
fn closest_rdma_nic(m: &Machine, dev: usize) -> Option<(String, PathClass)> {
    let classifier = PathClassifier::new(m);
    m.nics
        .iter()
        .enumerate()
        .filter(|(_, n)| n.rdma)
        .map(|(i, n)| (n.name.clone(), classifier.classify(Endpoint::Accelerator(dev), Endpoint::Nic(i))))
        .min_by_key(|(_, class)| class.rank())
}

/// Whether a NIC at `class` from an accelerator can do GPUDirect RDMA well: behind the same
/// PCIe switch (PIX) or switches (PXB), never through the CPU's root complex.
fn gpudirect(class: PathClass) -> bool {
    matches!(class, PathClass::Pix | PathClass::Pxb)
}

/// Chooses the path from `src` (the owner) to `dst` (the consumer).
pub fn choose(src: &End<'_>, dst: &End<'_>, avail: Available) -> Choice {
    if src.owner == dst.owner {
        return choice(Path::Local, Reason::SameProcess, "same process: the owner's own buffer".into());
    }
    if src.host == dst.host {
        return same_host(src, dst, avail);
    }
    // Device memory leaving the node: GPUDirect RDMA needs an RDMA NIC close to every device end.
    let mut rdma = Vec::new();
    for end in [src, dst] {
        let (Memory::Device(dev), Some(m)) = (end.memory, end.machine) else { continue };
        match closest_rdma_nic(m, dev) {
            Some((nic, class)) if gpudirect(class) => {
                rdma.push(format!("{nic} is {class} from {}", device_name(m, dev)))
            }
            Some((nic, class)) => {
                return choice(
                    Path::Tcp,
                    Reason::NoCloseRdmaNic,
                    format!(
                        "the closest RDMA NIC, {nic}, is {class} from {} (GPUDirect RDMA needs PIX or PXB)",
                        device_name(m, dev)
                    ),
                )
            }
            None => {
                return choice(
                    Path::Tcp,
                    Reason::NoCloseRdmaNic,
                    format!("no RDMA NIC on the node of {}", device_name(m, dev)),
                )
            }
        }
    }
    if rdma.is_empty() {
        return choice(Path::Tcp, Reason::OtherHost, "another host: TCP (encrypted beyond loopback)".into());
    }
    if !avail.nixl {
        return choice(
            Path::Tcp,
            Reason::NoDevicePath,
            format!("{}, but NIXL is not available here: TCP through host memory", rdma.join("; ")),
        );
    }
    choice(Path::Nixl, Reason::GpuDirectRdma, format!("GPUDirect RDMA through NIXL: {}", rdma.join("; ")))
}

fn same_host(src: &End<'_>, dst: &End<'_>, avail: Available) -> Choice {
    let (Memory::Device(a), Memory::Device(b), Some(m)) = (src.memory, dst.memory, src.machine.or(dst.machine)) else {
        return choice(Path::Shm, Reason::SameHost, "same host: a mapping of the owner's shared memory".into());
    };
    let class = PathClassifier::new(m).classify(Endpoint::Accelerator(a), Endpoint::Accelerator(b));
    let pair = if a == b {
        format!("{} (same device)", device_name(m, a))
    } else {
        format!("{} and {} are {class}", device_name(m, a), device_name(m, b))
    };
    let (preferred, reason, how) = if class.is_link() {
        // NIXL's UCX moves device memory over the scale-up link (cuda_ipc transport, NVLink).
        ([(avail.nixl, Path::Nixl), (avail.cuda_ipc, Path::CudaIpc)], Reason::ScaleUpLink, "over the scale-up link")
    } else {
        ([(avail.cuda_ipc, Path::CudaIpc), (avail.nixl, Path::Nixl)], Reason::PciePeer, "peer to peer over PCIe")
    };
    match preferred.iter().find(|(ok, _)| *ok) {
        Some((_, path)) => choice(*path, reason, format!("{pair}: {} {how}", path.name())),
        None => choice(
            Path::Shm,
            Reason::NoDevicePath,
            format!("{pair}, but neither NIXL nor CUDA IPC works here: through host shared memory"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end<'a>(owner: &'a str, host: &'a str, memory: Memory, machine: Option<&'a Machine>) -> End<'a> {
        End { owner, host, memory, machine }
    }

    const ALL: Available = Available { nixl: true, cuda_ipc: true };

    #[test]
    fn locality_without_devices() {
        let c = |o: &str, h: &str| choose(&end("a", "h", Memory::Host, None), &end(o, h, Memory::Host, None), ALL);
        assert_eq!(c("a", "h").path, Path::Local);
        assert_eq!((c("b", "h").path, c("b", "h").reason), (Path::Shm, Reason::SameHost));
        assert_eq!((c("b", "g").path, c("b", "g").reason), (Path::Tcp, Reason::OtherHost));
    }

    #[test]
    fn reasons_have_distinct_names() {
        let names: std::collections::HashSet<_> = Reason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }
}
