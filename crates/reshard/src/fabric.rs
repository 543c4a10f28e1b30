//! A fabric model: a plan's moves replayed over a described cluster, giving the time a sync
//! takes there and the floor under it. Every buffer the plan moves becomes flows between hosts
//! (a relayed buffer hops along its readers' hosts, each once; a direct one goes from its
//! provider to each remote reader), and each flow loads the resources it crosses: the sending
//! host's NICs out, the receiving host's NICs in (or, inside a scale-up domain, both hosts'
//! scale-up links), and where the hosts sit under different leaf switches, the leaves' uplinks
//! (their hosts' NIC rate divided by the oversubscription). The floor is the busiest resource at
//! line rate; the prediction runs every resource at `efficiency` of it (the goodput a transport
//! reaches, measured or published), adds the relays' pipeline fill (one chunk per extra hop)
//! and a fixed cost per step (control messages, the framework's calls). A fluid model: it
//! assumes every resource is busy for the whole step, which relays and many parallel buffers
//! approach, and knows nothing of congestion control or the CPU.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::plan::Plan;

fn one() -> f64 {
    1.0
}

/// A described cluster.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// NICs per host, and each NIC's line rate in Gbit/s (both directions: NICs are full duplex).
    pub nics: u32,
    pub nic_gbit: f64,
    /// Per-host NIC rate overrides (Gbit/s for the host, all NICs together).
    #[serde(default)]
    pub host_gbit: BTreeMap<String, f64>,
    /// Hosts that reach each other over scale-up links (an NVL72 rack, say), at
    /// `scale_up_gbyte` GB/s per host each way.
    #[serde(default)]
    pub domains: Vec<Vec<String>>,
    #[serde(default)]
    pub scale_up_gbyte: f64,
    /// Hosts under each leaf switch (hosts not listed share one leaf), and the leaves' uplink
    /// oversubscription (1: non-blocking).
    #[serde(default)]
    pub leaves: Vec<Vec<String>>,
    #[serde(default = "one")]
    pub oversubscription: f64,
    /// Fraction of line rate a transfer reaches (1: the floor itself).
    #[serde(default = "one")]
    pub efficiency: f64,
    /// Bytes a relay forwards at a time (the pipeline's unit); 0: no pipeline fill.
    #[serde(default)]
    pub chunk_bytes: u64,
    /// Seconds every step costs besides moving bytes.
    #[serde(default)]
    pub setup_s: f64,
}

/// What the model says of a plan on a fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// The busiest resource's bytes at line rate.
    pub floor_s: f64,
    /// At `efficiency`, plus pipeline fill and setup.
    pub seconds: f64,
    /// Which resource that is, and its bytes.
    pub bottleneck: String,
    pub bottleneck_bytes: u64,
    /// Bytes over NICs and over scale-up links in all.
    pub nic_bytes: u64,
    pub scale_up_bytes: u64,
    /// The longest relay chain (hops).
    pub hops: usize,
}

#[derive(Default)]
struct Loads {
    /// (resource name, bytes, capacity in bytes per second at line rate)
    map: BTreeMap<String, (u64, f64)>,
}

impl Loads {
    fn add(&mut self, name: String, bytes: u64, cap: f64) {
        let slot = self.map.entry(name).or_insert((0, cap));
        slot.0 += bytes;
    }
}

impl Fleet {
    fn host_rate(&self, host: &str) -> f64 {
        self.host_gbit.get(host).copied().unwrap_or(f64::from(self.nics) * self.nic_gbit) * 1e9 / 8.0
    }
}

/// Replays `plan`'s moves over `fleet` (see the module documentation).
pub fn predict(plan: &Plan, fleet: &Fleet) -> Prediction {
    let hosts = &plan.hosts;
    let domain: Vec<Option<usize>> =
        hosts.iter().map(|h| fleet.domains.iter().position(|d| d.iter().any(|x| x == h))).collect();
    let leaf: Vec<usize> = hosts
        .iter()
        .map(|h| fleet.leaves.iter().position(|l| l.iter().any(|x| x == h)).unwrap_or(fleet.leaves.len()))
        .collect();
    let mut leaf_rate: BTreeMap<usize, f64> = BTreeMap::new();
    for (i, h) in hosts.iter().enumerate() {
        *leaf_rate.entry(leaf[i]).or_default() += fleet.host_rate(h);
    }
    let mut loads = Loads::default();
    let (mut nic, mut scale) = (0u64, 0u64);
    let mut hops = 0usize;
    let mut flow = |a: usize, b: usize, bytes: u64, loads: &mut Loads| {
        if domain[a].is_some() && domain[a] == domain[b] {
            let cap = fleet.scale_up_gbyte * 1e9;
            loads.add(format!("scale-up out of {}", hosts[a]), bytes, cap);
            loads.add(format!("scale-up into {}", hosts[b]), bytes, cap);
            scale += bytes;
            return;
        }
        loads.add(format!("NICs out of {}", hosts[a]), bytes, fleet.host_rate(&hosts[a]));
        loads.add(format!("NICs into {}", hosts[b]), bytes, fleet.host_rate(&hosts[b]));
        nic += bytes;
        if leaf[a] != leaf[b] {
            let up = leaf_rate[&leaf[a]] / fleet.oversubscription;
            let down = leaf_rate[&leaf[b]] / fleet.oversubscription;
            loads.add(format!("leaf {} uplink", leaf[a]), bytes, up);
            loads.add(format!("leaf {} downlink", leaf[b]), bytes, down);
        }
    };
    plan.each_move(|provider_host, readers, bytes, relayed| {
        let remote: Vec<usize> = {
            let mut r: Vec<usize> = readers.iter().map(|&h| h as usize).filter(|&h| h != provider_host).collect();
            r.dedup();
            r
        };
        if relayed {
            let mut from = provider_host;
            for &h in &remote {
                flow(from, h, bytes, &mut loads);
                from = h;
            }
            hops = hops.max(remote.len());
        } else {
            for &h in &remote {
                flow(provider_host, h, bytes, &mut loads);
            }
            hops = hops.max(usize::from(!remote.is_empty()));
        }
    });
    let (mut floor, mut name, mut top) = (0.0f64, String::from("none"), 0u64);
    let mut slowest_rate = f64::INFINITY;
    for (n, &(bytes, cap)) in &loads.map {
        let t = if cap > 0.0 { bytes as f64 / cap } else { f64::INFINITY };
        slowest_rate = slowest_rate.min(cap);
        if t > floor {
            (floor, name, top) = (t, n.clone(), bytes);
        }
    }
    let fill = if fleet.chunk_bytes > 0 && hops > 1 && slowest_rate.is_finite() {
        (hops - 1) as f64 * fleet.chunk_bytes as f64 / (slowest_rate * fleet.efficiency)
    } else {
        0.0
    };
    Prediction {
        floor_s: floor,
        seconds: floor / fleet.efficiency + fill + fleet.setup_s,
        bottleneck: name,
        bottleneck_bytes: top,
        nic_bytes: nic,
        scale_up_bytes: scale,
        hops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{plan, Layout, RankSpec, TensorSpec};

    fn fleet(json: &str) -> Fleet {
        serde_json::from_str(json).unwrap()
    }

    fn layout(hosts: &[&str], rows: u64) -> Layout {
        let n = hosts.len() as u64;
        let ranks = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| RankSpec {
                host: h.to_string(),
                slices: [("w".to_string(), vec![[rows * i as u64 / n, rows * (i as u64 + 1) / n], [0, 1024]])].into(),
            })
            .collect();
        Layout { tensors: vec![TensorSpec::new("w", &[rows, 1024], "f32")], ranks }
    }

    #[test]
    fn the_floor_is_the_busiest_link_and_efficiency_and_setup_add_on() {
        // One source host, two destination hosts each wanting half: the source's NICs carry all.
        let p = plan(&layout(&["a"], 1024), &layout(&["b", "c"], 1024)).unwrap();
        let f = fleet(r#"{"nics": 1, "nic_gbit": 8, "efficiency": 0.5, "setup_s": 0.25}"#);
        let got = predict(&p, &f);
        assert_eq!(got.bottleneck, "NICs out of a");
        assert_eq!(got.bottleneck_bytes, 4 << 20);
        assert!((got.floor_s - (4 << 20) as f64 / 1e9).abs() < 1e-12);
        assert!((got.seconds - (got.floor_s * 2.0 + 0.25)).abs() < 1e-12);
    }

    #[test]
    fn scale_up_domains_and_oversubscribed_leaves_change_the_bottleneck() {
        let src = layout(&["a", "b"], 1024);
        let dst = layout(&["b", "a"], 1024); // a sends its half to b, b to a
        let p = plan(&src, &dst).unwrap();
        let nic = predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8}"#));
        assert!(nic.bottleneck.starts_with("NICs") && nic.scale_up_bytes == 0);
        let nvl = predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8, "domains": [["a", "b"]], "scale_up_gbyte": 100}"#));
        assert_eq!((nvl.nic_bytes, nvl.scale_up_bytes), (0, 4 << 20));
        assert!(nvl.floor_s < nic.floor_s / 50.0);
        let leaves =
            predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8, "leaves": [["a"], ["b"]], "oversubscription": 4}"#));
        assert!(leaves.bottleneck.starts_with("leaf") && (leaves.floor_s / nic.floor_s - 4.0).abs() < 1e-9);
    }

    #[test]
    fn relays_load_each_hop_once_and_fill_the_pipeline() {
        // Three destination hosts want the whole tensor: a chain from the source.
        let p = plan(
            &layout(&["s"], 1024),
            &Layout {
                ranks: (0..3)
                    .map(|i| RankSpec { host: format!("d{i}"), ..layout(&["x"], 1024).ranks[0].clone() })
                    .collect(),
                ..layout(&["x"], 1024)
            },
        )
        .unwrap();
        let got = predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8, "chunk_bytes": 1048576}"#));
        assert_eq!((got.hops, got.bottleneck_bytes), (3, 4 << 20)); // every link carries it once
        assert!((got.seconds - got.floor_s - 2.0 * 1048576.0 / 1e9).abs() < 1e-12);
    }
}
