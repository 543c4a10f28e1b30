//! `accel plan` and `accel bench plan`: place a request on a cluster (`accel cluster`, in
//! `cluster.rs`, builds one), and measure the planner's decision latency and quality.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use accel_model::Machine;
use accel_plan::XorShift;
use accel_plan::{
    Bundle, Cluster, ClusterNode, Connectivity, Groups, MachineRef, NicDistance, Placement, PlanError, Planner,
    Request, Strategy, Within,
};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The cluster, as `accel cluster` or `accel cluster build` writes it.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// The request, JSON or YAML (`.yaml`): `{"bundles": [{"count": 4, "connectivity": "scale-up"}]}`
    /// (docs/placement.md).
    #[arg(long, value_name = "FILE")]
    pub request: PathBuf,
    /// Fabric tiers to apply to the cluster first (as `accel cluster --topology`).
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// Print the placement (or the explanation) as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Planner decision latency on a synthetic cluster under a mixed request stream, and its
    /// choices against Ray's index-order first fit on fragmented clusters.
    Plan(BenchPlanArgs),
}

#[derive(Debug, Args)]
pub struct BenchPlanArgs {
    /// Nodes in the synthetic cluster (a mix of the embedded samples, racks of 32).
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Requests in the timed stream.
    #[arg(long, default_value_t = 5000)]
    pub requests: usize,
    /// Print one JSON object (`p50_ms`, `p99_ms`, ...).
    #[arg(long)]
    pub json: bool,
}

/// Reads a fabric topology (Slurm `topology.conf`, or accel's JSON when the name ends in
/// `.json`) and writes its tiers onto the cluster's nodes; warnings go to stderr.
pub(crate) fn apply_topology(cluster: &mut Cluster, path: &PathBuf) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading topology {}", path.display()))?;
    let fabric = if path.extension().and_then(|e| e.to_str()) == Some("json") {
        accel_plan::fabric::Fabric::from_json(&text)
    } else {
        accel_plan::fabric::Fabric::from_slurm_conf(&text)
    }
    .with_context(|| format!("topology {}", path.display()))?;
    for w in fabric.apply(cluster).with_context(|| format!("applying topology {}", path.display()))? {
        eprintln!("warning: topology {}: {w}", path.display());
    }
    Ok(())
}

fn read_json<T: serde::de::DeserializeOwned>(path: &PathBuf, what: &str) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {what} {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {what} {}", path.display()))
}

/// A request file: YAML when it ends in `.yaml` or `.yml`, JSON otherwise.
fn read_request(path: &PathBuf) -> Result<Request> {
    let yaml = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
    let text = std::fs::read_to_string(path).with_context(|| format!("reading request {}", path.display()))?;
    let parsed = if yaml {
        serde_norway::from_str(&text).map_err(|e| e.to_string())
    } else {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    };
    // A misspelt field names its nearest known one, as Python's InvalidRequest does.
    parsed.map_err(|e| anyhow::anyhow!("parsing request {}: {}", path.display(), accel_plan::names::with_hint(e)))
}

/// `accel plan`: prints the placement, or fails with the planner's explanation.
pub fn plan(args: &PlanArgs, out: &mut impl Write) -> Result<()> {
    let mut cluster: Cluster = read_json(&args.cluster, "cluster")?;
    if let Some(path) = &args.topology {
        apply_topology(&mut cluster, path)?;
    }
    let request = read_request(&args.request)?;
    let mut planner = Planner::new(&cluster)?;
    match planner.plan(&request) {
        Ok(placement) => {
            let envs = bundle_envs(&cluster, &placement)?;
            let declared = declared_links(&cluster, &placement)?;
            if args.json {
                let mut value = serde_json::to_value(&placement)?;
                if let Some(bundles) = value.get_mut("bundles").and_then(serde_json::Value::as_array_mut) {
                    for ((b, env), declared) in bundles.iter_mut().zip(&envs).zip(&declared) {
                        b["env"] = json!(env);
                        if !declared.is_empty() {
                            b["declared_links"] = json!(declared);
                        }
                    }
                }
                serde_json::to_writer_pretty(&mut *out, &value)?;
                writeln!(out)?;
            } else {
                out.write_all(render(&placement, &envs, &declared).as_bytes())?;
            }
            Ok(())
        }
        Err(PlanError::Infeasible(why)) => {
            if args.json {
                serde_json::to_writer_pretty(&mut *out, &json!({ "error": why }))?;
                writeln!(out)?;
                out.flush()?;
            }
            Err(crate::exit::Unmet(format!("cannot place the request: {why}")).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Each bundle's environment: what its devices' plugins (`isolate`, external ones through the
/// protocol) set for exactly those devices, in the bundle's order. Warnings go to stderr.
/// Each bundle's environment, from its node's machine as the cluster stores it: the same rule
/// and the same facts as the Ray path (`accel_discover::bundle::bundle_env`, with the built-in
/// plugins; no plugin is searched for or started).
fn bundle_envs(cluster: &Cluster, placement: &Placement) -> Result<Vec<std::collections::BTreeMap<String, String>>> {
    let builtin = accel_discover::default_plugins();
    let mut envs = Vec::new();
    for b in &placement.bundles {
        let node = cluster.nodes.iter().find(|n| n.name == b.node).context("a placed node is not in the cluster")?;
        let machine = cluster.machine(node)?;
        let devices: Vec<accel_discover::bundle::Planned<'_>> =
            b.devices.iter().map(|d| accel_discover::bundle::Planned { id: &d.id, nic: d.nic.as_deref() }).collect();
        let isolation = accel_discover::bundle::bundle_env(&builtin, machine, &devices);
        for w in &isolation.warnings {
            eprintln!("warning: bundle {}: {w}", b.bundle);
        }
        envs.push(isolation.env);
    }
    Ok(envs)
}

/// Per bundle, where the scale-up links between its devices were declared by design rather than
/// observed (`Link::origin`), their sources: a placement that rests on them says so.
fn declared_links(cluster: &Cluster, placement: &Placement) -> Result<Vec<Vec<String>>> {
    let mut out = Vec::new();
    for b in &placement.bundles {
        let node = cluster.nodes.iter().find(|n| n.name == b.node).context("a placed node is not in the cluster")?;
        let machine = cluster.machine(node)?;
        let ids: Vec<&str> = b.devices.iter().map(|d| d.id.as_str()).collect();
        let mut sources: Vec<String> = machine
            .links
            .iter()
            .filter(|l| l.is_declared() && ids.contains(&l.a.as_str()) && ids.contains(&l.b.as_str()))
            .map(|l| l.source.clone().unwrap_or_else(|| "the SKU registry".into()))
            .collect();
        sources.dedup();
        out.push(sources);
    }
    Ok(out)
}

/// The placement, a line per bundle, its environment, and the declared links it rests on.
pub fn render(p: &Placement, envs: &[std::collections::BTreeMap<String, String>], declared: &[Vec<String>]) -> String {
    let mut s = String::new();
    for (i, b) in p.bundles.iter().enumerate() {
        let devs: Vec<&str> = b.devices.iter().map(|d| d.label.as_str()).collect();
        let mut numa: Vec<u32> = b.devices.iter().filter_map(|d| d.numa_node).collect();
        numa.dedup();
        let nics: Vec<String> = b
            .devices
            .iter()
            .map(|d| format!("{}:{}", d.nic.as_deref().unwrap_or("-"), d.nic_path.as_deref().unwrap_or("-")))
            .collect();
        s += &format!(
            "bundle {}: {} {}  min {} GB/s  numa {:?}  nics {}  score {:.1}\n",
            b.bundle,
            b.node,
            devs.join(","),
            b.score.min_pair_gbps,
            numa,
            nics.join(","),
            b.score.total
        );
        if let Some(env) = envs.get(i).filter(|e| !e.is_empty()) {
            let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s += &format!("  env: {}\n", vars.join(" "));
        }
        for source in declared.get(i).into_iter().flatten() {
            s += &format!("  links: declared by design, not observed ({source})\n");
        }
    }
    s += &format!("total score {:.1}\n", p.score);
    s
}

/// The benchmark's generator: a fixed stream, so every run plans the same requests.
struct Rng(XorShift);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(XorShift::new(seed))
    }
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
}

/// The samples the benchmark cluster mixes, with weights.
const MIX: &[(&str, usize)] = &[
    ("dgx-h100", 4),
    ("hgx-b200", 2),
    ("gb200-nvl72-tray", 2),
    ("mi300x", 2),
    ("mi210-2hive", 1),
    ("rtx-pro-6000-server", 1),
];

fn bench_cluster(nodes: usize) -> Result<Cluster> {
    let mut cluster = Cluster::default();
    for (name, _) in MIX {
        cluster.machines.insert((*name).to_owned(), crate::source::sample_machine(name)?);
    }
    let total: usize = MIX.iter().map(|(_, w)| w).sum();
    let mut rng = Rng::new(0x5eed_acce_1000_0001);
    for i in 0..nodes {
        let mut pick = rng.below(total);
        let name = MIX
            .iter()
            .find(|(_, w)| {
                if pick < *w {
                    true
                } else {
                    pick -= w;
                    false
                }
            })
            .map_or("dgx-h100", |(n, _)| n);
        let mut labels = BTreeMap::new();
        labels.insert("rack".to_owned(), format!("r{}", i / 32));
        // A fat tree above the racks: a leaf switch per rack, a spine per 16 racks, a core per
        // 16 spines (topograph's label keys).
        for (tier, size) in accel_plan::fabric::TOPOGRAPH_TIERS.iter().zip([32, 512, 8192]) {
            let short = tier.rsplit('/').next().unwrap_or(tier);
            labels.insert((*tier).to_owned(), format!("{short}{}", i / size));
        }
        // A machine whose scale-up domain spans nodes (an NVL72 tray) shares it with its rack;
        // a node-local one (an xGMI hive) stays each node's own.
        let shared = |d: &&accel_model::Domain| d.scale_up && !d.node_local();
        for d in cluster.machines.get(name).into_iter().flat_map(|m| &m.domains).filter(shared) {
            labels.insert(d.kind.as_str().to_owned(), format!("{}-{}", d.kind.as_str(), i / 32));
        }
        cluster.nodes.push(ClusterNode {
            name: format!("n{i}"),
            labels,
            machine: MachineRef::Name(name.to_owned()),
            allocated: Vec::new(),
        });
    }
    Ok(cluster)
}

/// One request of the benchmark's stream, and its kind's name. `scale_up` is the domain kind of
/// the scale-up domains that span nodes (the NVL72 trays').
fn bench_request(rng: &mut Rng, scale_up: &str) -> (&'static str, Request) {
    let mut req = Request::default();
    let kind = match rng.below(100) {
        0..=37 => {
            req.bundles.push(Bundle::new(1 + rng.below(2) as u32));
            "small"
        }
        38..=61 => {
            req.bundles.push(Bundle::new(4).connectivity(Connectivity::ScaleUp));
            "4 scale-up"
        }
        62..=75 => {
            req.bundles.push(Bundle::new(8).connectivity(Connectivity::ScaleUp));
            "8 scale-up"
        }
        76..=85 => {
            let mut b = Bundle::new(2);
            b.nic = Some(NicDistance::Pxb);
            b.same_numa = true;
            req.bundles.push(b);
            "2 near a NIC"
        }
        86..=93 => {
            req.bundles = vec![Bundle::new(4).connectivity(Connectivity::ScaleUp); 2];
            req.same = Some("rack".into());
            req.strategy = Strategy::Spread;
            "2x4 in a rack"
        }
        _ => {
            // A training gang: 2 or 4 tensor-parallel groups of 2 trays' 4 GPUs each, every
            // group inside one NVLink domain, the replicas in different ones, under one spine
            // if possible (a soft tier cap).
            let groups = 2 * (1 + rng.below(2));
            req.bundles = vec![Bundle::new(4).connectivity(Connectivity::ScaleUp); groups * 2];
            req.groups = Some(Groups { size: 2, same: scale_up.into(), replicas: Strategy::Spread });
            req.within = Some(Within { tier: "spine".into(), hard: false });
            "TP groups"
        }
    };
    (kind, req)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Ray's placement inside a node, approximated: the first node in index order with enough free
/// devices, and its lowest-numbered free devices.
fn first_fit(planner: &Planner, cluster: &Cluster, count: usize) -> Option<(String, Vec<String>)> {
    cluster.nodes.iter().find_map(|n| {
        let free = planner.free_devices(&n.name).ok()?;
        (free.len() >= count).then(|| (n.name.clone(), free[..count].to_vec()))
    })
}

/// Fragmented clusters of four sample nodes with some devices taken: the planner's choice
/// against first fit, by score and minimum pairwise bandwidth.
fn against_first_fit() -> Result<serde_json::Value> {
    let names = ["rtx-pro-6000-server", "mi210-2hive", "dgx-h100", "mi300x", "hgx-b200"];
    let machines: Vec<Machine> = names.iter().map(|n| crate::source::sample_machine(n)).collect::<Result<_>>()?;
    let mut rng = Rng::new(42);
    let (mut ours_score, mut ff_score, mut ours_min, mut ff_min) = (0.0, 0.0, 0.0, 0.0);
    let (mut better_or_equal, mut cases) = (0usize, 0usize);
    let mut example = None;
    for case in 0..500 {
        let mut cluster = Cluster::default();
        for k in 0..4 {
            // The first case is fixed: a PCIe box first, then a fragmented DGX, then a whole one.
            let m = if case == 0 { [0, 1, 2, 2][k] } else { rng.below(machines.len()) };
            let machine = machines[m].clone();
            let taken = if case == 0 { [0, 1, 3, 0][k] } else { rng.below(6) };
            let allocated = machine.accelerators.iter().take(taken).map(|a| a.id.clone()).collect();
            cluster.nodes.push(ClusterNode {
                name: format!("{}-{k}", names[m]),
                labels: BTreeMap::new(),
                machine: MachineRef::Inline(Box::new(machine)),
                allocated,
            });
        }
        let count = if case == 0 { 4 } else { [2, 4][rng.below(2)] };
        let planner_state = Planner::new(&cluster)?;
        let Some((ff_node, ff_devs)) = first_fit(&planner_state, &cluster, count) else { continue };
        let mut planner = Planner::new(&cluster)?;
        let ours = planner.plan(&Request::new(vec![Bundle::new(count as u32)]))?;
        let ids: Vec<&str> = ff_devs.iter().map(String::as_str).collect();
        let ff = planner.score_of(&ff_node, &ids)?;
        let b = &ours.bundles[0];
        cases += 1;
        ours_score += b.score.total;
        ff_score += ff.total;
        ours_min += b.score.min_pair_gbps;
        ff_min += ff.min_pair_gbps;
        if b.score.min_pair_gbps >= ff.min_pair_gbps {
            better_or_equal += 1;
        }
        if case == 0 {
            example = Some(json!({
                "request": "4 devices, no connectivity constraint",
                "cluster": "rtx-pro-6000-server (free), mi210-2hive (GPU0 taken), dgx-h100 (GPU0-2 taken), dgx-h100 (free)",
                "first_fit": {"placement": format!("{ff_node} [{}]", planner.labels(&ff_node, &ids)?.join(",")), "score": ff.total, "min_pair_gbps": ff.min_pair_gbps},
                "planner": {"placement": format!("{} [{}]", b.node, b.devices.iter().map(|d| d.label.clone()).collect::<Vec<_>>().join(",")),
                            "score": b.score.total, "min_pair_gbps": b.score.min_pair_gbps},
            }));
        }
    }
    let n = cases.max(1) as f64;
    Ok(json!({
        "cases": cases,
        "mean_score": {"planner": ours_score / n, "first_fit": ff_score / n},
        "mean_min_pair_gbps": {"planner": ours_min / n, "first_fit": ff_min / n},
        "planner_min_pair_at_least_first_fit": better_or_equal,
        "example": example,
    }))
}

/// `accel bench plan`.
pub fn bench(args: &BenchPlanArgs, out: &mut impl Write) -> Result<()> {
    let started = Instant::now();
    let cluster = bench_cluster(args.nodes)?;
    let mut planner = Planner::new(&cluster)?;
    let scale_up = cluster
        .machines
        .get("gb200-nvl72-tray")
        .into_iter()
        .flat_map(|m| &m.domains)
        .find(|d| d.scale_up)
        .map(|d| d.kind.as_str().to_owned())
        .context("the benchmark's NVL72 tray sample has no scale-up domain")?;
    let build_ms = started.elapsed().as_secs_f64() * 1e3;
    let total_devices: usize =
        cluster.nodes.iter().map(|n| cluster.machine(n).map_or(0, |m| m.accelerators.len())).sum();
    let mut rng = Rng::new(7);
    let mut live: Vec<(u64, usize)> = Vec::new();
    let mut used = 0usize;
    let mut times = Vec::with_capacity(args.requests);
    let (mut infeasible, mut multi) = (0usize, 0usize);
    let mut by_kind: BTreeMap<&str, (Vec<f64>, usize)> = BTreeMap::new();
    // Fill to about 70% before the timed stream, then keep it there: each step releases one
    // allocation at random when above the target and places one new request.
    let target = total_devices * 7 / 10;
    let mut step = 0usize;
    while used < target && step < total_devices {
        step += 1;
        let (_, req) = bench_request(&mut rng, &scale_up);
        if let Ok(p) = planner.allocate(&req) {
            let n: usize = p.bundles.iter().map(|b| b.devices.len()).sum();
            used += n;
            live.push((p.id, n));
        }
    }
    let fill_ms = started.elapsed().as_secs_f64() * 1e3 - build_ms;
    for _ in 0..args.requests {
        if used >= target && !live.is_empty() {
            let (id, n) = live.swap_remove(rng.below(live.len()));
            planner.release(id)?;
            used -= n;
        }
        let (kind, req) = bench_request(&mut rng, &scale_up);
        multi += usize::from(req.bundles.len() > 1);
        let t = Instant::now();
        let result = planner.allocate(&req);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        times.push(ms);
        let entry = by_kind.entry(kind).or_insert_with(|| (Vec::new(), 0usize));
        entry.0.push(ms);
        entry.1 += usize::from(result.is_err());
        match result {
            Ok(p) => {
                let n: usize = p.bundles.iter().map(|b| b.devices.len()).sum();
                used += n;
                live.push((p.id, n));
            }
            Err(_) => infeasible += 1,
        }
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let report = json!({
        "nodes": args.nodes,
        "devices": total_devices,
        "requests": args.requests,
        "multi_bundle_requests": multi,
        "infeasible": infeasible,
        "utilisation": used as f64 / total_devices.max(1) as f64,
        "p50_ms": percentile(&sorted, 0.50),
        "p90_ms": percentile(&sorted, 0.90),
        "p99_ms": percentile(&sorted, 0.99),
        "max_ms": sorted.last().copied().unwrap_or(0.0),
        "mean_ms": mean,
        "build_ms": build_ms,
        "fill_ms": fill_ms,
        "vs_first_fit": against_first_fit()?,
        "by_kind": by_kind.iter_mut().map(|(k, (t, bad))| {
            t.sort_by(f64::total_cmp);
            (k.to_string(), json!({"requests": t.len(), "infeasible": bad, "p50_ms": percentile(t, 0.5),
                "p99_ms": percentile(t, 0.99), "max_ms": t.last().copied().unwrap_or(0.0)}))
        }).collect::<serde_json::Map<_, _>>(),
    });
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{} nodes, {} devices, {} requests ({} infeasible): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            args.nodes, total_devices, args.requests, infeasible, report["p50_ms"], report["p99_ms"], report["max_ms"]
        )?;
        writeln!(out, "against first fit: {}", report["vs_first_fit"])?;
    }
    Ok(())
}
