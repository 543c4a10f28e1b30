//! Path choice on the captured GPU machines (the discover crate's samples): the choice follows
//! each machine's topology, as `nvidia-smi topo -m` (our `accel topo`) shows it.

use accel_discover::samples;
use accel_model::{Endpoint, Machine, PathClass, PathClassifier};
use accel_transport::route::{choose, Available, Choice, End, Memory, Reason};
use accel_transport::Path;

const ALL: Available = Available { nixl: true, cuda_ipc: true };
const NIXL: Available = Available { nixl: true, cuda_ipc: false };
const IPC: Available = Available { nixl: false, cuda_ipc: true };
const NONE: Available = Available { nixl: false, cuda_ipc: false };

fn machine(name: &str) -> Machine {
    samples::machine(name).unwrap_or_else(|| panic!("sample {name}"))
}

/// Device `a` of the owner to device `b` of a consumer on the same node.
fn same_node(m: &Machine, a: usize, b: usize, avail: Available) -> Choice {
    let src = End { owner: "o", host: "h", memory: Memory::Device(a), machine: Some(m) };
    let dst = End { owner: "c", host: "h", memory: Memory::Device(b), machine: Some(m) };
    choose(&src, &dst, avail)
}

/// Device `a` of the owner to host memory of a consumer on another node.
fn other_node(m: &Machine, a: usize, avail: Available) -> Choice {
    let src = End { owner: "o", host: "h", memory: Memory::Device(a), machine: Some(m) };
    let dst = End { owner: "c", host: "g", memory: Memory::Host, machine: None };
    choose(&src, &dst, avail)
}

#[test]
fn dgx_h100_nvlink_between_gpus_and_gpudirect_through_the_pxb_nic() {
    let m = machine("dgx-h100");
    let c = same_node(&m, 0, 5, ALL);
    assert_eq!((c.path, c.reason), (Path::Nixl, Reason::ScaleUpLink), "{c:?}");
    assert!(c.detail.contains("NV18"), "{}", c.detail);
    // Without NIXL, CUDA IPC (its peer copies take NVLink); without either, host memory.
    assert_eq!(same_node(&m, 0, 5, IPC).path, Path::CudaIpc);
    assert_eq!((same_node(&m, 0, 5, NONE).path, same_node(&m, 0, 5, NONE).reason), (Path::Shm, Reason::NoDevicePath));
    // GPU 0 sits behind the same switches as mlx5_0 (PXB): GPUDirect RDMA.
    let c = other_node(&m, 0, ALL);
    assert_eq!((c.path, c.reason), (Path::Nixl, Reason::GpuDirectRdma), "{c:?}");
    assert!(c.detail.contains("mlx5_0 is PXB"), "{}", c.detail);
    let c = other_node(&m, 0, IPC);
    assert_eq!((c.path, c.reason), (Path::Tcp, Reason::NoDevicePath), "{c:?}");
}

#[test]
fn rtx_pro_6000_has_no_nvlink_so_gpus_use_cuda_ipc_over_pcie() {
    let m = machine("rtx-pro-6000-server");
    let c = same_node(&m, 0, 1, ALL);
    assert_eq!((c.path, c.reason), (Path::CudaIpc, Reason::PciePeer), "{c:?}");
    assert!(c.detail.contains("PIX"), "{}", c.detail);
    // Without CUDA IPC, NIXL still moves it peer to peer.
    assert_eq!(same_node(&m, 0, 1, NIXL).path, Path::Nixl);
    let c = other_node(&m, 0, ALL);
    assert_eq!((c.path, c.reason), (Path::Nixl, Reason::GpuDirectRdma), "{c:?}");
    assert!(c.detail.contains("mlx5_0 is PIX"), "{}", c.detail);
}

#[test]
fn host_memory_ignores_devices() {
    let m = machine("dgx-h100");
    let src = End { owner: "o", host: "h", memory: Memory::Host, machine: Some(&m) };
    let near = End { owner: "c", host: "h", memory: Memory::Host, machine: Some(&m) };
    let far = End { owner: "c", host: "g", memory: Memory::Host, machine: None };
    assert_eq!(choose(&src, &near, ALL).path, Path::Shm);
    assert_eq!(choose(&src, &far, ALL).reason, Reason::OtherHost);
    assert_eq!(choose(&src, &src, ALL).path, Path::Local);
}

/// Every accelerator of every captured machine: GPUDirect RDMA exactly when the classifier puts
/// an RDMA NIC at PIX or PXB from it; scale-up pairs over NIXL exactly when they share a link.
#[test]
fn every_sample_follows_its_topology() {
    let mut seen = [0usize; 3]; // gpudirect, no close NIC, scale-up pairs
    for name in samples::names() {
        let m = machine(name);
        let classifier = PathClassifier::new(&m);
        for a in 0..m.accelerators.len() {
            let nearest = (0..m.nics.len())
                .filter(|&i| m.nics[i].rdma)
                .map(|i| classifier.classify(Endpoint::Accelerator(a), Endpoint::Nic(i)))
                .min_by_key(|c| c.rank());
            let c = other_node(&m, a, ALL);
            if matches!(nearest, Some(PathClass::Pix | PathClass::Pxb)) {
                assert_eq!((c.path, c.reason), (Path::Nixl, Reason::GpuDirectRdma), "{name} {a}: {c:?}");
                seen[0] += 1;
            } else {
                assert_eq!((c.path, c.reason), (Path::Tcp, Reason::NoCloseRdmaNic), "{name} {a}: {c:?}");
                seen[1] += 1;
            }
            for b in 0..m.accelerators.len() {
                let linked = classifier.classify(Endpoint::Accelerator(a), Endpoint::Accelerator(b)).is_link();
                let c = same_node(&m, a, b, ALL);
                let want = if linked { (Path::Nixl, Reason::ScaleUpLink) } else { (Path::CudaIpc, Reason::PciePeer) };
                assert_eq!((c.path, c.reason), want, "{name} {a}->{b}: {c:?}");
                seen[2] += usize::from(linked);
            }
        }
    }
    assert!(seen.iter().all(|n| *n > 0), "the samples cover every case: {seen:?}");
}
