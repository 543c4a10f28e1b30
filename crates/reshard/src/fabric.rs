//! A fabric model: a plan's moves replayed over a described cluster, giving the time a sync
//! takes there and the floor under it. Every buffer the plan moves becomes flows between hosts
//! (a relayed buffer hops along its readers' hosts, each once; a direct one goes from its
//! provider to each remote reader), and each flow loads the resources it crosses: the sending
//! host's NICs out, the receiving host's NICs in (or, inside a scale-up domain, both hosts'
//! scale-up links), and where the hosts sit under different leaf switches, the leaves' uplinks
//! (their hosts' NIC rate divided by the oversubscription). The floor is the busiest resource at
//! line rate; the link time runs every resource at `efficiency` of it (the goodput a transport
//! reaches, measured or published) and adds the relays' pipeline fill (one chunk per extra hop).
//!
//! Two things the transport does besides moving bytes are described too:
//! - **packing at the source** (`convert`): a source rank that quantises to FP8 first reads
//!   its whole box of each such tensor for the scales, then encodes every piece of every buffer
//!   that carries it; every piece of a tensor it does not quantise is copied into each buffer
//!   that carries it (counted where `copy_gbyte` is given). A rank packs on one thread
//!   (`Sender.publish`); a host runs `threads` of those at once. Unless `overlaps`, every buffer
//!   is packed before the first byte leaves (as `Sender.publish` does today), so the slowest
//!   host's packing adds to the link time.
//! - **admission** (`admission`): at most `receivers` destination ranks, or `bytes` in flight,
//!   per source host's link. The model admits ranks in order, as the driver does, in waves: a
//!   wave is every rank that fits beside the ones already admitted, and the next wave starts
//!   when it ends (the driver admits the next rank as soon as one lands, so where a wave's
//!   ranks finish at different times this is an upper bound). Each wave's links are replayed
//!   alone, and the waves add up.
//!
//! - **the hosts' CPU** (`cpu`): every byte that crosses a NIC costs CPU on both ends (packing,
//!   sealing and sending; receiving, checking and landing), at `transfer_gbyte` GB/s per core for
//!   the two ends together, half charged to each; a relay pays for each hop. Measured on the sync
//!   itself, the rate holds all of the sync's CPU work per byte, a converting plan's conversion
//!   included. A host has `cores` free for it; hosts listed together in `shared` are one
//!   machine's namespaces and share one `cores`. The bytes move no faster than the busiest pool
//!   does that work: the prediction is the longer of the conversion followed by (or overlapped
//!   with) the links, and that pool's time (wave by wave under admission). Where hosts have
//!   cores to spare, or the bytes go device to device, leave it out.
//!
//! A fixed cost per step (`setup_s`: control messages, the framework's calls) is added once. A
//! fluid model: it assumes every resource is busy for the whole of its phase, which relays and
//! many parallel buffers approach, and knows nothing of congestion control.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::plan::Plan;
use crate::Error;

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
    /// How fast the sources pack (convert to FP8, copy); required when the plan quantises.
    #[serde(default)]
    pub convert: Option<Convert>,
    /// The sync's admission limits per source host's link (none: every rank at once).
    #[serde(default)]
    pub admission: Option<Admission>,
    /// The hosts' CPU work per byte moved (none: CPU is never the bottleneck).
    #[serde(default)]
    pub cpu: Option<Cpu>,
}

/// The CPU the transport spends on the bytes it moves (see the module documentation).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    /// GB/s of NIC bytes one core carries, the sender's and the receiver's work together.
    pub transfer_gbyte: f64,
    /// Cores free for it on each host (on each machine of `shared`).
    pub cores: f64,
    /// Hosts that share one machine's `cores` (namespaces or containers of one machine).
    #[serde(default)]
    pub shared: Vec<Vec<String>>,
}

/// How fast the sources pack their buffers (see the module documentation).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Convert {
    /// GB/s of source-dtype input one thread reads to find the scales (required when the plan
    /// quantises).
    #[serde(default)]
    pub scales_gbyte: Option<f64>,
    /// GB/s of source-dtype input one thread encodes to FP8, with the scales written (required
    /// when the plan quantises).
    #[serde(default)]
    pub quantize_gbyte: Option<f64>,
    /// GB/s of buffer bytes one thread copies for the tensors it does not quantise (none: the
    /// copies are not counted).
    #[serde(default)]
    pub copy_gbyte: Option<f64>,
    /// Source ranks packing at once on one host: its cores (or GPUs) free for it, a fraction
    /// where hosts share cores. Each source rank packs on one thread.
    pub threads: f64,
    /// Whether sending starts before every buffer is packed (false: `Sender.publish`).
    #[serde(default)]
    pub overlaps: bool,
}

/// Admission limits per source host's link, as `accel.ray.Admission` applies them.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Admission {
    #[serde(default)]
    pub receivers: Option<u32>,
    #[serde(default)]
    pub bytes: Option<u64>,
}

/// What the model says of a plan on a fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// The busiest resource's bytes at line rate.
    pub floor_s: f64,
    /// The links at `efficiency` with pipeline fill, or the busiest CPU pool where that is
    /// longer (wave after wave under admission), the conversion (added, or overlapped) and setup.
    pub seconds: f64,
    /// Which resource that is, and its bytes.
    pub bottleneck: String,
    pub bottleneck_bytes: u64,
    /// Bytes over NICs and over scale-up links in all.
    pub nic_bytes: u64,
    pub scale_up_bytes: u64,
    /// The longest relay chain (hops).
    pub hops: usize,
    /// The links' part of `seconds` (every admission wave's).
    pub links_s: f64,
    /// The slowest host's packing (its conversion, and its copies where `copy_gbyte` is
    /// given), the source-dtype bytes all sources read to convert, and the bytes they copy.
    pub convert_s: f64,
    pub convert_bytes: u64,
    pub copy_bytes: u64,
    /// Admission waves (1 without admission).
    pub waves: usize,
    /// The busiest CPU pool's transfer work at its cores (every admission wave's; 0 without
    /// `cpu`), and which pool that is.
    pub cpu_s: f64,
    pub cpu_pool: String,
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

    fn check(&self) -> Result<(), Error> {
        let bad = |what: &str| Err(Error::Fleet(what.to_string()));
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !(positive(self.efficiency) && self.efficiency <= 1.0) {
            return bad("efficiency must be in (0, 1]");
        }
        if !(positive(self.oversubscription) && self.setup_s.is_finite() && self.setup_s >= 0.0) {
            return bad("oversubscription must be positive and setup_s at least 0");
        }
        if let Some(c) = &self.convert {
            let rates = [c.scales_gbyte, c.quantize_gbyte, c.copy_gbyte];
            if !(rates.into_iter().flatten().all(positive) && positive(c.threads)) {
                return bad("convert: scales_gbyte, quantize_gbyte, copy_gbyte and threads must be positive");
            }
        }
        if let Some(c) = &self.cpu {
            if !(positive(c.transfer_gbyte) && positive(c.cores)) {
                return bad("cpu: transfer_gbyte and cores must be positive");
            }
        }
        if let Some(Admission { receivers: Some(0), .. } | Admission { bytes: Some(0), .. }) = &self.admission {
            return bad("admission: receivers and bytes must be at least 1 (leave one out for no bound)");
        }
        Ok(())
    }
}

/// One replay of the links: the busiest resource, bytes by kind, relay depth.
struct Replay {
    floor: f64,
    name: String,
    top: u64,
    nic: u64,
    scale: u64,
    hops: usize,
    seconds: f64,
    /// The busiest CPU pool's seconds (0 without `cpu`) and its name.
    cpu_s: f64,
    cpu_pool: String,
}

/// Replays the moves to the destination ranks `keep` admits (all: `None`).
fn replay(plan: &Plan, fleet: &Fleet, keep: Option<&[bool]>) -> Replay {
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
    // Under admission, each class's reader hosts among the admitted ranks.
    let (_, dst_hosts, classes) = plan.rank_hosts();
    let admitted: Option<Vec<Vec<u32>>> = keep.map(|keep| {
        classes
            .iter()
            .map(|ranks| {
                let mut h: Vec<u32> = ranks.iter().filter(|&&d| keep[d]).map(|&d| dst_hosts[d]).collect();
                h.sort_unstable();
                h.dedup();
                h
            })
            .collect()
    });
    // Each host's CPU pool, where the fleet describes CPU: its machine's (`shared`) or its own.
    let pool: Option<Vec<String>> = fleet.cpu.as_ref().map(|c| {
        hosts
            .iter()
            .map(|h| match c.shared.iter().find(|m| m.iter().any(|x| x == h)) {
                Some(m) => format!("CPU of the machine of {}", m.join(", ")),
                None => format!("CPU of {h}"),
            })
            .collect()
    });
    let mut cpu: BTreeMap<&str, f64> = BTreeMap::new();
    let mut loads = Loads::default();
    let (mut nic, mut scale) = (0u64, 0u64);
    let mut hops = 0usize;
    let mut flow = |a: usize, b: usize, bytes: u64, loads: &mut Loads| {
        if let Some(pool) = &pool {
            for end in [a, b] {
                *cpu.entry(pool[end].as_str()).or_default() += bytes as f64 / 2.0;
            }
        }
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
    plan.each_move(|provider_host, class, readers, bytes, relayed| {
        let readers = admitted.as_ref().map_or(readers, |a| &a[class]);
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
    let (mut cpu_s, mut cpu_pool) = (0.0f64, String::new());
    if let Some(c) = &fleet.cpu {
        for (p, bytes) in cpu {
            let t = bytes / (c.transfer_gbyte * 1e9) / c.cores;
            if t > cpu_s {
                (cpu_s, cpu_pool) = (t, p.to_string());
            }
        }
    }
    Replay { floor, name, top, nic, scale, hops, seconds: floor / fleet.efficiency + fill, cpu_s, cpu_pool }
}

/// The slowest host's packing (seconds), the bytes read to convert in all, and the bytes
/// copied in all.
fn packing(plan: &Plan, fleet: &Fleet) -> Result<(f64, u64, u64), Error> {
    let per_rank = plan.packing_bytes();
    let converted: u64 = per_rank.iter().map(|&(s, q, _)| s + q).sum();
    let copied: u64 = per_rank.iter().map(|&(_, _, k)| k).sum();
    let rates = fleet.convert.as_ref().map(|c| (c.scales_gbyte, c.quantize_gbyte));
    let (scales, quantize) = match rates {
        Some((Some(s), Some(q))) => (s, q),
        _ if converted > 0 => {
            return Err(Error::Fleet(format!(
                "the plan quantises at its sources ({converted} bytes read per step): describe the conversion \
                 (convert: scales_gbyte, quantize_gbyte, threads)"
            )))
        }
        // Nothing to convert: no rate is needed.
        _ => (f64::INFINITY, f64::INFINITY),
    };
    let Some(c) = &fleet.convert else {
        return Ok((0.0, converted, copied));
    };
    let copy = c.copy_gbyte.unwrap_or(f64::INFINITY);
    let (src_hosts, _, _) = plan.rank_hosts();
    // Per host: (the longest rank, the sum of its ranks' seconds).
    let mut hosts: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
    for (r, &(s, q, k)) in per_rank.iter().enumerate() {
        let t = s as f64 / (scales * 1e9) + q as f64 / (quantize * 1e9) + k as f64 / (copy * 1e9);
        let slot = hosts.entry(src_hosts[r]).or_default();
        *slot = (slot.0.max(t), slot.1 + t);
    }
    let slowest = hosts.values().map(|&(longest, sum)| longest.max(sum / c.threads)).fold(0.0, f64::max);
    Ok((slowest, converted, copied))
}

/// The destination ranks of each admission wave (see the module documentation).
fn waves(plan: &Plan, adm: &Admission) -> Vec<Vec<usize>> {
    let (src_hosts, dst_hosts, classes) = plan.rank_hosts();
    // What each rank reads over each source host's link (buffers from its own host use none).
    let mut need: Vec<BTreeMap<u32, u64>> = vec![BTreeMap::new(); dst_hosts.len()];
    plan.each_need_bytes(|src, class, bytes| {
        for &d in &classes[class] {
            if src_hosts[src] != dst_hosts[d] {
                *need[d].entry(src_hosts[src]).or_default() += bytes;
            }
        }
    });
    let mut pending: Vec<usize> = classes.iter().flatten().copied().collect();
    pending.sort_unstable();
    let mut out = Vec::new();
    while !pending.is_empty() {
        let mut load: BTreeMap<u32, (u32, u64)> = BTreeMap::new();
        let mut wave = Vec::new();
        pending.retain(|&d| {
            let fits = need[d].iter().all(|(h, &b)| {
                let (count, used) = load.get(h).copied().unwrap_or_default();
                adm.receivers.is_none_or(|k| count < k) && adm.bytes.is_none_or(|cap| used == 0 || used + b <= cap)
            });
            if fits {
                for (&h, &b) in &need[d] {
                    let slot = load.entry(h).or_default();
                    *slot = (slot.0 + 1, slot.1 + b);
                }
                wave.push(d);
            }
            !fits
        });
        out.push(wave);
    }
    out
}

/// Replays `plan`'s moves over `fleet` (see the module documentation). An error names what
/// the fleet lacks or gets wrong: a rate that is not positive, or no `convert` for a plan
/// that quantises.
pub fn predict(plan: &Plan, fleet: &Fleet) -> Result<Prediction, Error> {
    fleet.check()?;
    let all = replay(plan, fleet, None);
    let (convert_s, convert_bytes, copy_bytes) = packing(plan, fleet)?;
    // Each wave: the longer of its links and its busiest CPU pool.
    let (links_s, cpu_s, bound_s, waves) = match &fleet.admission {
        None => (all.seconds, all.cpu_s, all.seconds.max(all.cpu_s), 1),
        Some(adm) => {
            let waves = waves(plan, adm);
            let mut keep = vec![false; plan.destination_ranks()];
            let (mut links, mut cpu, mut transfer) = (0.0, 0.0, 0.0);
            for wave in &waves {
                keep.iter_mut().for_each(|k| *k = false);
                wave.iter().for_each(|&d| keep[d] = true);
                let r = replay(plan, fleet, Some(&keep));
                (links, cpu, transfer) = (links + r.seconds, cpu + r.cpu_s, transfer + r.seconds.max(r.cpu_s));
            }
            (links, cpu, transfer, waves.len())
        }
    };
    let overlaps = fleet.convert.as_ref().is_some_and(|c| c.overlaps);
    let chain = if overlaps { links_s.max(convert_s) } else { links_s + convert_s };
    let busy = chain.max(bound_s);
    Ok(Prediction {
        floor_s: all.floor,
        seconds: busy + fleet.setup_s,
        bottleneck: all.name,
        bottleneck_bytes: all.top,
        nic_bytes: all.nic,
        scale_up_bytes: all.scale,
        hops: all.hops,
        links_s,
        convert_s,
        convert_bytes,
        copy_bytes,
        waves,
        cpu_s,
        cpu_pool: all.cpu_pool,
    })
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
        let got = predict(&p, &f).unwrap();
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
        let nic = predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8}"#)).unwrap();
        assert!(nic.bottleneck.starts_with("NICs") && nic.scale_up_bytes == 0);
        let nvl = predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8, "domains": [["a", "b"]], "scale_up_gbyte": 100}"#))
            .unwrap();
        assert_eq!((nvl.nic_bytes, nvl.scale_up_bytes), (0, 4 << 20));
        assert!(nvl.floor_s < nic.floor_s / 50.0);
        let leaves =
            predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8, "leaves": [["a"], ["b"]], "oversubscription": 4}"#))
                .unwrap();
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
        let got = predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8, "chunk_bytes": 1048576}"#)).unwrap();
        assert_eq!((got.hops, got.bottleneck_bytes), (3, 4 << 20)); // every link carries it once
        assert!((got.seconds - got.floor_s - 2.0 * 1048576.0 / 1e9).abs() < 1e-12);
    }

    fn bf16_to_fp8(src_hosts: &[&str], dst_hosts: &[&str]) -> Plan {
        let mut src = layout(src_hosts, 1024);
        src.tensors = vec![TensorSpec::new("w", &[1024, 1024], "bf16")];
        let mut dst = layout(dst_hosts, 1024);
        dst.tensors =
            vec![TensorSpec { scale: Some(crate::fp8::Scale::Block), ..TensorSpec::new("w", &[1024, 1024], "f8e4m3") }];
        plan(&src, &dst).unwrap()
    }

    #[test]
    fn quantising_sources_add_their_conversion_unless_it_overlaps() {
        // Two source hosts of one rank each, bf16 1024 x 1024 (2 MiB) to FP8 on two hosts:
        // each source reads its 1 MiB box once for the scales and encodes it once (one class
        // per destination rank, each taking its own rows).
        let p = bf16_to_fp8(&["a", "b"], &["c", "d"]);
        let links = r#""nics": 1, "nic_gbit": 8, "setup_s": 0.5"#;
        let f = fleet(&format!(
            r#"{{{links}, "convert": {{"scales_gbyte": 0.002, "quantize_gbyte": 0.001, "threads": 1}}}}"#
        ));
        let got = predict(&p, &f).unwrap();
        assert_eq!(got.convert_bytes, 4 << 20);
        let want = (1 << 20) as f64 / 2e6 + (1 << 20) as f64 / 1e6;
        assert!((got.convert_s - want).abs() < 1e-9, "{got:?}");
        assert!((got.seconds - (got.links_s + want + 0.5)).abs() < 1e-9);
        // Two source ranks on one host with half a core between them: four times as long.
        let shared = predict(
            &bf16_to_fp8(&["a", "a"], &["c", "d"]),
            &fleet(&format!(
                r#"{{{links}, "convert": {{"scales_gbyte": 0.002, "quantize_gbyte": 0.001, "threads": 0.5}}}}"#
            )),
        )
        .unwrap();
        assert!((shared.convert_s - 4.0 * want).abs() < 1e-9);
        let overlapped = predict(&p, &fleet(&format!(
            r#"{{{links}, "convert": {{"scales_gbyte": 0.002, "quantize_gbyte": 0.001, "threads": 1, "overlaps": true}}}}"#
        )))
        .unwrap();
        assert!((overlapped.seconds - (want.max(got.links_s) + 0.5)).abs() < 1e-9);
    }

    #[test]
    fn sources_copying_their_buffers_add_the_copies_where_a_copy_rate_is_given() {
        // One source host packs a 2 MiB buffer for each of two hosts: 4 MiB copied.
        let p = plan(&layout(&["a"], 1024), &layout(&["b", "c"], 1024)).unwrap();
        let links = r#""nics": 1, "nic_gbit": 8, "setup_s": 0.5"#;
        let free = predict(&p, &fleet(&format!("{{{links}}}"))).unwrap();
        assert_eq!((free.convert_s, free.convert_bytes, free.copy_bytes), (0.0, 0, 4 << 20));
        let f = fleet(&format!(r#"{{{links}, "convert": {{"copy_gbyte": 0.001, "threads": 1}}}}"#));
        let got = predict(&p, &f).unwrap();
        let want = (4 << 20) as f64 / 1e6;
        assert!((got.convert_s - want).abs() < 1e-9, "{got:?}");
        assert!((got.seconds - (free.seconds + want)).abs() < 1e-9, "{got:?}");
        // A quantising plan copies nothing, and needs the conversion's rates beside the copies'.
        let q = bf16_to_fp8(&["a"], &["b", "c"]);
        let err = predict(&q, &f).unwrap_err().to_string();
        assert!(err.contains("quantises at its sources") && err.contains("scales_gbyte"), "{err}");
        let both = r#""convert": {"scales_gbyte": 1, "quantize_gbyte": 1, "copy_gbyte": 0.001, "threads": 1}"#;
        let conv = predict(&q, &fleet(&format!("{{{links}, {both}}}"))).unwrap();
        assert_eq!(conv.copy_bytes, 0);
        assert!((conv.convert_s - conv.convert_bytes as f64 / 1e9).abs() < 1e-12, "{conv:?}");
        let zero = fleet(&format!(r#"{{{links}, "convert": {{"copy_gbyte": 0, "threads": 1}}}}"#));
        assert!(predict(&p, &zero).unwrap_err().to_string().contains("copy_gbyte"));
    }

    #[test]
    fn a_fleet_that_cannot_convert_or_has_no_rate_is_an_error() {
        let p = bf16_to_fp8(&["a"], &["c"]);
        let none = predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8}"#)).unwrap_err().to_string();
        assert!(none.contains("quantises at its sources") && none.contains("convert"), "{none}");
        let zero = r#"{"nics": 1, "nic_gbit": 8, "convert": {"scales_gbyte": 0, "quantize_gbyte": 1, "threads": 1}}"#;
        assert!(predict(&p, &fleet(zero)).unwrap_err().to_string().contains("must be positive"));
        let threads =
            r#"{"nics": 1, "nic_gbit": 8, "convert": {"scales_gbyte": 1, "quantize_gbyte": 1, "threads": 0}}"#;
        assert!(predict(&p, &fleet(threads)).is_err());
        let admit = r#"{"nics": 1, "nic_gbit": 8, "admission": {"receivers": 0}}"#;
        assert!(predict(&plan(&layout(&["a"], 1024), &layout(&["b"], 1024)).unwrap(), &fleet(admit)).is_err());
        assert!(predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8, "efficiency": 0}"#)).is_err());
    }

    #[test]
    fn the_hosts_cpu_bounds_the_transfer_where_it_is_slower_than_the_links() {
        // One source host sends 2 MiB to each of two hosts (4 MiB over NICs in all).
        let p = plan(&layout(&["a"], 1024), &layout(&["b", "c"], 1024)).unwrap();
        let links = predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8}"#)).unwrap();
        assert_eq!((links.cpu_s, links.nic_bytes), (0.0, 4 << 20));
        // Plenty of CPU: the links decide. Each host its own core at 1 GB/s of NIC bytes: the
        // source pays half of 4 MiB, the busiest pool.
        let own =
            predict(&p, &fleet(r#"{"nics": 1, "nic_gbit": 8, "cpu": {"transfer_gbyte": 1, "cores": 1}}"#)).unwrap();
        assert_eq!(own.cpu_pool, "CPU of a");
        assert!((own.cpu_s - (2 << 20) as f64 / 1e9).abs() < 1e-12 && own.seconds == links.seconds, "{own:?}");
        // The three hosts are one machine's namespaces with a quarter of a core between them:
        // all of the 4 MiB's work (both ends) at 0.25 core, four times the links' time.
        let shared = r#"{"nics": 1, "nic_gbit": 8, "setup_s": 0.1,
            "cpu": {"transfer_gbyte": 1, "cores": 0.25, "shared": [["a", "b", "c"]]}}"#;
        let got = predict(&p, &fleet(shared)).unwrap();
        assert_eq!(got.cpu_pool, "CPU of the machine of a, b, c");
        let want = (4 << 20) as f64 / 1e9 / 0.25;
        assert!((got.cpu_s - want).abs() < 1e-12 && (got.seconds - (want + 0.1)).abs() < 1e-12, "{got:?}");
        assert!((got.cpu_s / got.links_s - 4.0).abs() < 1e-9 && got.links_s == links.links_s);
        // A converting plan: the longer of the conversion then the links, and the CPU pool
        // (whose rate holds the conversion's work).
        let q = bf16_to_fp8(&["a"], &["b", "c"]);
        let conv = r#""convert": {"scales_gbyte": 1, "quantize_gbyte": 1, "threads": 1}"#;
        let on = |rate: f64| {
            let cpu = format!(r#""cpu": {{"transfer_gbyte": {rate}, "cores": 1, "shared": [["a", "b", "c"]]}}"#);
            predict(&q, &fleet(&format!(r#"{{"nics": 1, "nic_gbit": 8, {conv}, {cpu}}}"#))).unwrap()
        };
        let slow = on(0.01);
        assert!(slow.cpu_s > slow.links_s + slow.convert_s && slow.seconds == slow.cpu_s, "{slow:?}");
        let fast = on(100.0);
        assert!(
            fast.cpu_s < fast.links_s && (fast.seconds - (fast.convert_s + fast.links_s)).abs() < 1e-12,
            "{fast:?}"
        );
        let bad = r#"{"nics": 1, "nic_gbit": 8, "cpu": {"transfer_gbyte": 1, "cores": 0}}"#;
        assert!(predict(&p, &fleet(bad)).unwrap_err().to_string().contains("cpu: transfer_gbyte and cores"));
    }

    #[test]
    fn admission_runs_ranks_that_share_a_source_link_in_waves() {
        // Two source hosts, four destination hosts each reading a quarter from both: with one
        // receiver per source link, the four go one after another; with two, in two waves.
        let src = layout(&["a", "b"], 1024);
        let dst = Layout { tensors: src.tensors.clone(), ..layout(&["c", "d", "e", "f"], 1024) };
        let dst = Layout {
            ranks: dst
                .ranks
                .into_iter()
                .enumerate()
                .map(|(i, r)| RankSpec {
                    slices: [("w".to_string(), vec![[0, 1024], [i as u64 * 256, (i as u64 + 1) * 256]])].into(),
                    ..r
                })
                .collect(),
            ..dst
        };
        let p = plan(&src, &dst).unwrap();
        let base = r#""nics": 1, "nic_gbit": 8, "setup_s": 0.1"#;
        let free = predict(&p, &fleet(&format!("{{{base}}}"))).unwrap();
        assert_eq!(free.waves, 1);
        let one = predict(&p, &fleet(&format!(r#"{{{base}, "admission": {{"receivers": 1}}}}"#))).unwrap();
        let two = predict(&p, &fleet(&format!(r#"{{{base}, "admission": {{"receivers": 2}}}}"#))).unwrap();
        assert_eq!((one.waves, two.waves), (4, 2));
        // Alone, a rank's 1 MiB comes in over its own NIC (the sources' NICs carry half each).
        let rank = (1 << 20) as f64 / 1e9;
        assert!((one.links_s - 4.0 * rank).abs() < 1e-9 && (one.seconds - one.links_s - 0.1).abs() < 1e-9, "{one:?}");
        assert!((two.links_s - 2.0 * 2.0 * (1 << 19) as f64 / 1e9).abs() < 1e-9, "{two:?}");
        assert!((free.links_s - 4.0 * (1 << 19) as f64 / 1e9).abs() < 1e-9 && free.floor_s == one.floor_s);
        // A byte bound of one rank's need per link is one receiver per link here.
        let bytes = predict(&p, &fleet(&format!(r#"{{{base}, "admission": {{"bytes": 524288}}}}"#))).unwrap();
        assert_eq!(bytes.waves, 4);
    }
}
