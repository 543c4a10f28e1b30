//! Builds small machines for planner tests: GPUs under PCIe switches (optionally with an RDMA
//! NIC beside them), NUMA nodes, and scale-up links between chosen pairs.

#![allow(dead_code)]

use accel_model::{
    Accelerator, CpuSet, Domain, DomainKind, HostInfo, Link, LinkKind, Machine, Nic, NumaNode, PciNode, PciNodeKind,
};

#[derive(Debug, Clone)]
pub struct Spec {
    pub vendor: &'static str,
    pub sku: Option<&'static str>,
    pub gpus: usize,
    /// NUMA node of each GPU.
    pub numa: Vec<u32>,
    /// Scale-up links: (a, b, GB/s).
    pub links: Vec<(usize, usize, f64)>,
    /// GPUs with an RDMA NIC under their own PCIe switch (PIX).
    pub nics: Vec<usize>,
    pub memory_gb: u64,
    pub clique: Option<String>,
}

impl Spec {
    /// An 8-GPU NVSwitch node in the shape of a DGX H100: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1,
    /// every pair at 900 GB/s, a NIC at PIX for each GPU.
    pub fn dgx() -> Spec {
        Spec {
            vendor: "nvidia",
            sku: None,
            gpus: 8,
            numa: vec![0, 0, 0, 0, 1, 1, 1, 1],
            links: all_pairs(&[0, 1, 2, 3, 4, 5, 6, 7], 900.0),
            nics: (0..8).collect(),
            memory_gb: 80,
            clique: None,
        }
    }

    /// A GB200-like tray: 4 GPUs all joined at 1800 GB/s, in NVLink clique `clique`.
    pub fn tray(clique: &str) -> Spec {
        let mut s = Spec::dgx();
        s.gpus = 4;
        s.numa = vec![0, 0, 1, 1];
        s.links = all_pairs(&[0, 1, 2, 3], 1800.0);
        s.nics = (0..4).collect();
        s.clique = Some(clique.to_owned());
        s
    }

    /// Two xGMI hives of four, no NICs.
    pub fn two_hives() -> Spec {
        let mut links = all_pairs(&[0, 1, 2, 3], 200.0);
        links.extend(all_pairs(&[4, 5, 6, 7], 200.0));
        Spec {
            vendor: "amd",
            sku: None,
            gpus: 8,
            numa: vec![0, 0, 0, 0, 1, 1, 1, 1],
            links,
            nics: Vec::new(),
            memory_gb: 64,
            clique: None,
        }
    }

    /// PCIe only: no scale-up links.
    pub fn pcie(gpus: usize) -> Spec {
        Spec {
            vendor: "nvidia",
            sku: None,
            gpus,
            numa: (0..gpus).map(|i| (i * 2 / gpus.max(1)) as u32).collect(),
            links: Vec::new(),
            nics: Vec::new(),
            memory_gb: 96,
            clique: None,
        }
    }
}

impl Spec {
    /// One node with the shape of four MI308X in CPX mode: 32 partitions on 4 NUMA nodes of
    /// 16 cores, every pair joined by the package fabric or xGMI.
    pub fn partitions32() -> Spec {
        let all: Vec<usize> = (0..32).collect();
        Spec {
            vendor: "amd",
            sku: None,
            gpus: 32,
            numa: (0..32).map(|i| (i / 8) as u32).collect(),
            links: all_pairs(&all, 128.0),
            nics: Vec::new(),
            memory_gb: 24,
            clique: None,
        }
    }
}

/// A request from its JSON text.
pub fn request(json: &str) -> accel_plan::Request {
    accel_plan::Request::from_json(json).unwrap()
}

/// The explanation of an infeasible request; any other outcome fails the test.
pub fn infeasible(e: accel_plan::PlanError) -> accel_plan::Infeasible {
    match e {
        accel_plan::PlanError::Infeasible(i) => i,
        other => panic!("expected an infeasible request, got {other}"),
    }
}

pub fn all_pairs(gpus: &[usize], gbps: f64) -> Vec<(usize, usize, f64)> {
    let mut out = Vec::new();
    for (i, &a) in gpus.iter().enumerate() {
        for &b in &gpus[i + 1..] {
            out.push((a, b, gbps));
        }
    }
    out
}

fn pci(id: String, kind: PciNodeKind, parent: Option<String>, numa: Option<u32>) -> PciNode {
    let mut n = PciNode::new(id, kind, parent);
    n.numa_node = numa;
    n
}

pub fn build(spec: &Spec) -> Machine {
    let mut m = Machine::new(HostInfo::default());
    let numa_count = spec.numa.iter().copied().max().map_or(1, |x| x + 1);
    for id in 0..numa_count {
        m.numa_nodes.push(NumaNode::new(id, CpuSet::new((id * 16..id * 16 + 16).collect()), None, Default::default()));
    }
    for g in 0..spec.gpus {
        // Bus numbers: host bridge g*16, root port at bus g*16, switch up g*16+1, down g*16+2;
        // past 15 GPUs the next PCI domain.
        let (dom, bus) = (g / 15, (g % 15) * 16 + 1);
        let numa = Some(spec.numa[g]);
        let hb = format!("pci{dom:04x}:{:02x}", bus - 1);
        let rp = format!("{dom:04x}:{:02x}:01.0", bus - 1);
        let up = format!("{dom:04x}:{:02x}:00.0", bus);
        let down_gpu = format!("{dom:04x}:{:02x}:00.0", bus + 1);
        let down_nic = format!("{dom:04x}:{:02x}:01.0", bus + 1);
        let gpu = format!("{dom:04x}:{:02x}:00.0", bus + 2);
        let nic = format!("{dom:04x}:{:02x}:00.0", bus + 3);
        m.pci.push(pci(hb.clone(), PciNodeKind::HostBridge, None, numa));
        m.pci.push(pci(rp.clone(), PciNodeKind::Bridge, Some(hb), numa));
        m.pci.push(pci(up.clone(), PciNodeKind::Bridge, Some(rp), numa));
        m.pci.push(pci(down_gpu.clone(), PciNodeKind::Bridge, Some(up.clone()), numa));
        m.pci.push(pci(gpu.clone(), PciNodeKind::Endpoint, Some(down_gpu), numa));
        m.accelerators.push(Accelerator {
            id: format!("{}-{gpu}", spec.vendor),
            index: g as u32,
            vendor: spec.vendor.into(),
            plugin: "test".into(),
            sku: spec.sku.map(str::to_owned),
            product: "test gpu".into(),
            family: Some("testfam".into()),
            architecture: None,
            pci: Some(gpu.parse().unwrap()),
            pci_vendor: None,
            pci_device: None,
            numa_node: numa,
            memory_bytes: Some(spec.memory_gb * 1_000_000_000),
            memory_numa_node: None,
            uuid: None,
            serial: None,
            partition: None,
            // What discovery resolves from the SKU.
            dtypes: spec
                .sku
                .and_then(|s| accel_model::SkuRegistry::builtin().get(s).map(|s| s.dtypes.clone()))
                .unwrap_or_default(),
            vocabulary: accel_model::Vocabulary { label: "GPU".into(), ..Default::default() },
            health: None,
        });
        if spec.nics.contains(&g) {
            m.pci.push(pci(down_nic.clone(), PciNodeKind::Bridge, Some(up), numa));
            m.pci.push(pci(nic.clone(), PciNodeKind::Endpoint, Some(down_nic), numa));
            m.nics.push(Nic {
                name: format!("mlx5_{g}"),
                netdev: None,
                rdma_device: Some(format!("mlx5_{g}")),
                rdma: true,
                pci: Some(nic.parse().unwrap()),
                speed_mbps: Some(400_000),
                numa_node: numa,
            });
        }
    }
    let id = |i: usize| m.accelerators[i].id.clone();
    let links: Vec<Link> = spec
        .links
        .iter()
        .map(|&(a, b, gbps)| {
            let (a, b) = (id(a.min(b)), id(a.max(b)));
            Link::new(a, b, LinkKind::new("nvlink"), 1, Some(gbps))
        })
        .collect();
    m.links = links;
    if let Some(name) = &spec.clique {
        m.domains.push(Domain {
            kind: DomainKind::new("nvlink_clique"),
            scale_up: true,
            name: name.clone(),
            source: "test".into(),
            accelerators: Vec::new(),
            nodes: None,
        });
    }
    m
}
