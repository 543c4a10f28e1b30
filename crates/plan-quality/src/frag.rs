//! Fragmentation over a long synthetic stream: NVL72 domains and 8-GPU boxes, a day of jobs
//! (small ones in one tray, gangs in one NVLink clique, whole-domain jobs), placed three ways on
//! the identical stream: the planner with its domain bin-packing, the planner without it, and
//! first fit. A job that does not fit when it arrives is dropped.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Instant;

use accel_plan::{
    machine_domains, BinPack, Bundle, Cluster, Connectivity, PlanError, Planner, Request, XorShift, W_BINPACK,
};
use anyhow::{Context, Result};
use serde::Serialize;

use crate::clusters::{self, TRAY, TRAYS_PER_DOMAIN};

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// NVL72 domains (18 trays of 4 GPUs each).
    pub domains: usize,
    /// 8-GPU boxes beside them (dgx-h100 and hgx-b200, alternating).
    pub others: usize,
    /// Length of the stream.
    pub hours: f64,
    /// The first hours (from an empty cluster) are placed but not measured.
    pub warmup_hours: f64,
    /// Offered load: device-hours asked for over device-hours there are.
    pub load: f64,
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config { domains: 16, others: 32, hours: 24.0, warmup_hours: 3.0, load: 0.85, seed: 22 }
    }
}

/// The three kinds of job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// 1 to 4 GPUs in one tray (one bundle, scale-up).
    Small,
    /// 2 to 8 bundles of 4 scale-up GPUs in one NVLink clique (8 to 32 GPUs).
    Gang,
    /// A whole NVL72 domain: 18 bundles of 4 in one clique.
    Whole,
}

/// One job of the stream.
#[derive(Debug, Clone)]
pub struct Job {
    /// Seconds from the start.
    pub arrival: u64,
    pub duration: u64,
    pub kind: Kind,
    pub request: Request,
}

/// The job mix: (kind, share in percent, mean duration in minutes).
pub const MIX: [(Kind, u64, f64); 3] = [(Kind::Small, 80, 60.0), (Kind::Gang, 17, 180.0), (Kind::Whole, 3, 360.0)];

fn uniform(rng: &mut XorShift) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// An exponential draw with the given mean.
fn exponential(rng: &mut XorShift, mean: f64) -> f64 {
    -(1.0 - uniform(rng)).ln() * mean
}

/// `bundles` bundles of 4 scale-up devices in one domain of kind `clique`.
pub fn gang(bundles: usize, clique: &str) -> Request {
    let mut r = Request::new(vec![Bundle::new(4).connectivity(Connectivity::ScaleUp); bundles]);
    r.same = Some(clique.to_owned());
    r
}

/// The stream: Poisson arrivals at the rate that offers `cfg.load` of the cluster's
/// `devices`, kinds and durations (exponential, at least a minute) from [`MIX`]; gangs stay in
/// one domain of kind `clique`.
pub fn stream(cfg: &Config, devices: usize, clique: &str) -> Vec<Job> {
    let mut rng = XorShift::new(cfg.seed);
    // Mean GPU-minutes a job asks for: small 2.5 GPUs, gang 5 bundles of 4, whole 72.
    let gpus = |k: Kind| match k {
        Kind::Small => 2.5,
        Kind::Gang => 20.0,
        Kind::Whole => (TRAYS_PER_DOMAIN * 4) as f64,
    };
    let per_job: f64 = MIX.iter().map(|&(k, share, mins)| share as f64 / 100.0 * gpus(k) * mins).sum();
    let per_minute = cfg.load * devices as f64 / per_job;
    let end = cfg.hours * 3600.0;
    let mut t = 0.0;
    let mut jobs = Vec::new();
    loop {
        t += exponential(&mut rng, 60.0 / per_minute);
        if t >= end {
            return jobs;
        }
        let mut pick = rng.below(100);
        let &(kind, _, mins) = MIX
            .iter()
            .find(|(_, share, _)| {
                let hit = pick < *share;
                pick = pick.saturating_sub(*share);
                hit
            })
            .expect("shares add up to 100");
        let request = match kind {
            Kind::Small => Request::new(vec![Bundle::new(1 + rng.below(4) as u32).connectivity(Connectivity::ScaleUp)]),
            Kind::Gang => gang(2 + rng.below(7) as usize, clique),
            Kind::Whole => gang(TRAYS_PER_DOMAIN, clique),
        };
        let duration = exponential(&mut rng, mins * 60.0).max(60.0) as u64;
        jobs.push(Job { arrival: t as u64, duration, kind, request });
    }
}

/// How jobs are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placer {
    /// The planner with the default domain bin-packing (`Cluster.binpack`, weight `W_BINPACK`).
    Binpack,
    /// The planner with `binpack.weight = 0` (the planner before bin-packing).
    NoBinpack,
    /// The first node in index order with enough free devices, its lowest free devices; for a
    /// gang, the first domain in order where every bundle fits that way.
    FirstFit,
}

impl Placer {
    pub const ALL: [Placer; 3] = [Placer::Binpack, Placer::NoBinpack, Placer::FirstFit];
}

/// Devices taken per node by one allocation.
type Taken = Vec<(usize, u64)>;

/// First fit's state: free device masks, in the nodes' device order.
#[derive(Debug)]
struct FirstFit {
    free: Vec<u64>,
    /// Nodes per domain of each kind a request may name, in order of each domain's first node.
    domains: HashMap<String, Vec<Vec<usize>>>,
}

impl FirstFit {
    fn new(cluster: &Cluster, labels: &[BTreeMap<String, String>]) -> Result<FirstFit> {
        let mut free = Vec::new();
        for node in &cluster.nodes {
            let n = cluster.machine(node)?.accelerators.len();
            free.push(if n == 64 { u64::MAX } else { (1u64 << n) - 1 });
        }
        let mut domains: HashMap<String, Vec<Vec<usize>>> = HashMap::new();
        let mut index: HashMap<(String, String), usize> = HashMap::new();
        for (i, l) in labels.iter().enumerate() {
            for (k, v) in l {
                let list = domains.entry(k.clone()).or_default();
                let at = *index.entry((k.clone(), v.clone())).or_insert_with(|| {
                    list.push(Vec::new());
                    list.len() - 1
                });
                list[at].push(i);
            }
        }
        Ok(FirstFit { free, domains })
    }

    /// Places each bundle in turn on the first of `nodes` with enough free devices.
    fn fit(&self, nodes: &[usize], request: &Request) -> Option<Taken> {
        let mut free = self.free.clone();
        let mut taken: Taken = Vec::new();
        for b in &request.bundles {
            let &n = nodes.iter().find(|&&n| free[n].count_ones() >= b.count)?;
            let mut mask = 0u64;
            let mut rest = free[n];
            for _ in 0..b.count {
                let d = rest & rest.wrapping_neg();
                mask |= d;
                rest &= !d;
            }
            free[n] &= !mask;
            taken.push((n, mask));
        }
        Some(taken)
    }

    fn allocate(&mut self, request: &Request) -> Option<Taken> {
        let all: Vec<usize> = (0..self.free.len()).collect();
        let taken = match &request.same {
            None => self.fit(&all, request),
            Some(kind) => self.domains.get(kind)?.iter().find_map(|nodes| self.fit(nodes, request)),
        }?;
        for &(n, mask) in &taken {
            self.free[n] &= !mask;
        }
        Some(taken)
    }

    fn release(&mut self, taken: &Taken) {
        for &(n, mask) in taken {
            self.free[n] |= mask;
        }
    }
}

/// One of the three ways to place.
#[derive(Debug)]
enum State {
    Planner { planner: Box<Planner>, by_name: HashMap<String, usize>, ids: Vec<HashMap<String, u32>> },
    FirstFit(FirstFit),
}

impl State {
    fn new(placer: Placer, cluster: &Cluster, labels: &[BTreeMap<String, String>]) -> Result<State> {
        let mut cluster = cluster.clone();
        match placer {
            Placer::FirstFit => return Ok(State::FirstFit(FirstFit::new(&cluster, labels)?)),
            Placer::Binpack => cluster.binpack = BinPack { weight: W_BINPACK, kinds: Vec::new() },
            Placer::NoBinpack => cluster.binpack = BinPack { weight: 0.0, kinds: Vec::new() },
        }
        let planner = Box::new(Planner::new(&cluster)?);
        let by_name = cluster.nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        let mut ids = Vec::new();
        for node in &cluster.nodes {
            let m = cluster.machine(node)?;
            ids.push(m.accelerators.iter().enumerate().map(|(i, a)| (a.id.clone(), i as u32)).collect());
        }
        Ok(State::Planner { planner, by_name, ids })
    }

    /// Places a request: the allocation's id (for the planner) and the devices it took; `None`
    /// when it does not fit.
    fn allocate(&mut self, request: &Request) -> Result<Option<(u64, Taken)>> {
        match self {
            State::FirstFit(ff) => Ok(ff.allocate(request).map(|t| (0, t))),
            State::Planner { planner, by_name, ids } => {
                let p = match planner.allocate(request) {
                    Ok(p) => p,
                    Err(PlanError::Infeasible(_)) => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                let mut taken: Taken = Vec::new();
                for b in &p.bundles {
                    let n = by_name[&b.node];
                    let mask = b.devices.iter().fold(0u64, |m, d| m | 1 << ids[n][&d.id]);
                    taken.push((n, mask));
                }
                Ok(Some((p.id, taken)))
            }
        }
    }

    fn release(&mut self, id: u64, taken: &Taken) -> Result<()> {
        match self {
            State::FirstFit(ff) => ff.release(taken),
            State::Planner { planner, .. } => planner.release(id)?,
        }
        Ok(())
    }
}

/// Counts per kind of job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PerKind {
    pub small: usize,
    pub gang: usize,
    pub whole: usize,
}

impl PerKind {
    fn add(&mut self, k: Kind) {
        match k {
            Kind::Small => self.small += 1,
            Kind::Gang => self.gang += 1,
            Kind::Whole => self.whole += 1,
        }
    }
}

/// One placer's run of the stream.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub placer: Placer,
    pub offered: PerKind,
    pub placed: PerKind,
    pub rejected: PerKind,
    /// Device-hours the stream offered over the measured window's device-hours (equal across runs).
    pub offered_load: f64,
    /// Time-weighted share of the NVL72 domains whose every device is free, over the measured window.
    pub mean_whole_free: f64,
    /// That share when the stream ends.
    pub end_whole_free: f64,
    /// Time-weighted share of all devices in use, over the measured window.
    pub utilisation: f64,
    /// Time-weighted share of NVL72 devices in use.
    pub nvl72_utilisation: f64,
    /// Wall time of every placement call together.
    pub place_ms: f64,
}

/// Every placer's runs.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub domains: usize,
    pub others: usize,
    pub devices: usize,
    pub hours: f64,
    pub warmup_hours: f64,
    pub load: f64,
    /// Streams run (seeds `seed`, `seed + 1`...).
    pub streams: usize,
    pub seed: u64,
    /// Jobs in all streams together.
    pub jobs: usize,
    /// Per placer, over all streams: counts summed, shares averaged.
    pub runs: Vec<Run>,
    /// Each stream's runs, in the same order.
    pub per_stream: Vec<Vec<Run>>,
}

/// Runs `streams` streams (seeds `cfg.seed` on) once per placer in `placers`.
pub fn run(cfg: &Config, streams: usize, placers: &[Placer]) -> Result<Report> {
    let cluster = clusters::nvl72_shuffled(cfg.domains, cfg.others, cfg.seed)?;
    let view = View::new(&cluster)?;
    let mut per_stream = Vec::new();
    let mut jobs = 0;
    for k in 0..streams {
        let cfg = Config { seed: cfg.seed + k as u64, ..cfg.clone() };
        let stream = stream(&cfg, view.devices(), &view.clique);
        jobs += stream.len();
        per_stream
            .push(placers.iter().map(|&p| simulate(&cfg, &cluster, &view, &stream, p)).collect::<Result<Vec<_>>>()?);
    }
    let runs = (0..placers.len()).map(|i| combine(per_stream.iter().map(|runs| &runs[i]))).collect();
    Ok(Report {
        domains: view.nvl72.len(),
        others: cluster.nodes.len() - view.nvl72.values().map(Vec::len).sum::<usize>(),
        devices: view.devices(),
        hours: cfg.hours,
        warmup_hours: cfg.warmup_hours,
        load: cfg.load,
        streams,
        seed: cfg.seed,
        jobs,
        runs,
        per_stream,
    })
}

/// One placer's runs of several streams as one: counts and times summed, shares averaged.
fn combine<'a>(runs: impl Iterator<Item = &'a Run>) -> Run {
    let runs: Vec<&Run> = runs.collect();
    let n = runs.len().max(1) as f64;
    let per = |g: fn(&Run) -> &PerKind| PerKind {
        small: runs.iter().map(|r| g(r).small).sum(),
        gang: runs.iter().map(|r| g(r).gang).sum(),
        whole: runs.iter().map(|r| g(r).whole).sum(),
    };
    let mean = |f: fn(&Run) -> f64| runs.iter().map(|r| f(r)).sum::<f64>() / n;
    Run {
        placer: runs.first().map_or(Placer::FirstFit, |r| r.placer),
        offered: per(|r| &r.offered),
        placed: per(|r| &r.placed),
        rejected: per(|r| &r.rejected),
        offered_load: mean(|r| r.offered_load),
        mean_whole_free: mean(|r| r.mean_whole_free),
        end_whole_free: mean(|r| r.end_whole_free),
        utilisation: mean(|r| r.utilisation),
        nvl72_utilisation: mean(|r| r.nvl72_utilisation),
        place_ms: runs.iter().map(|r| r.place_ms).sum(),
    }
}

/// What the harness reads of a cluster: each node's labels as the planner sees them, its device
/// count, and the NVL72 domains (the clique values of [`TRAY`] nodes) with their nodes.
#[derive(Debug)]
pub struct View {
    labels: Vec<BTreeMap<String, String>>,
    size: Vec<u32>,
    nvl72: BTreeMap<String, Vec<usize>>,
    /// The trays' clique kind (label key).
    pub clique: String,
}

impl View {
    pub fn new(cluster: &Cluster) -> Result<View> {
        let tray = cluster.machines.get(TRAY).context("no NVL72 tray machine in the cluster")?;
        let clique = clusters::scale_up_kind(tray).context("the NVL72 tray has no scale-up domain")?;
        let mut view = View { labels: Vec::new(), size: Vec::new(), nvl72: BTreeMap::new(), clique };
        for (i, node) in cluster.nodes.iter().enumerate() {
            let m = cluster.machine(node)?;
            let mut l = machine_domains(m);
            l.extend(node.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            if matches!(&node.machine, accel_plan::MachineRef::Name(n) if n == TRAY) {
                let d = l.get(&view.clique).context("an NVL72 tray without a clique")?;
                view.nvl72.entry(d.clone()).or_default().push(i);
            }
            view.labels.push(l);
            view.size.push(m.accelerators.len() as u32);
        }
        Ok(view)
    }

    pub fn devices(&self) -> usize {
        self.size.iter().map(|&s| s as usize).sum()
    }

    /// NVL72 domains.
    pub fn domains(&self) -> usize {
        self.nvl72.len()
    }
}

/// Places `jobs` (in arrival order) on `cluster` with one placer; `cfg` gives the measured
/// window.
pub fn simulate(cfg: &Config, cluster: &Cluster, view: &View, jobs: &[Job], placer: Placer) -> Result<Run> {
    let (size, nvl72) = (&view.size, &view.nvl72);
    let nvl72_devices: u32 = nvl72.values().flatten().map(|&n| size[n]).sum();
    let mut state = State::new(placer, cluster, &view.labels)?;
    let mut free: Vec<u32> = size.clone();
    let devices: u32 = size.iter().sum();
    let (start, end) = ((cfg.warmup_hours * 3600.0) as u64, (cfg.hours * 3600.0) as u64);
    let window = end.saturating_sub(start).max(1) as f64;
    let mut run = Run {
        placer,
        offered: PerKind::default(),
        placed: PerKind::default(),
        rejected: PerKind::default(),
        offered_load: 0.0,
        mean_whole_free: 0.0,
        end_whole_free: 0.0,
        utilisation: 0.0,
        nvl72_utilisation: 0.0,
        place_ms: 0.0,
    };
    let whole_free = |free: &[u32]| -> f64 {
        let whole = nvl72.values().filter(|nodes| nodes.iter().all(|&n| free[n] == size[n])).count();
        whole as f64 / nvl72.len().max(1) as f64
    };
    let nvl72_busy = |free: &[u32]| nvl72.values().flatten().map(|&n| size[n] - free[n]).sum::<u32>();
    // Departures: (time, sequence) -> (allocation id, devices).
    let mut ends: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut live: HashMap<usize, (u64, Taken)> = HashMap::new();
    let mut now = 0u64;
    // Integrates the current state from `now` to `t` over the measured window.
    let advance = |now: &mut u64, t: u64, free: &[u32], run: &mut Run| {
        let (a, b) = ((*now).max(start), t.min(end));
        if b > a {
            let w = (b - a) as f64 / window;
            run.mean_whole_free += w * whole_free(free);
            run.utilisation += w * f64::from(devices - free.iter().sum::<u32>()) / f64::from(devices.max(1));
            run.nvl72_utilisation += w * f64::from(nvl72_busy(free)) / f64::from(nvl72_devices.max(1));
        }
        *now = t;
    };
    for (seq, job) in jobs.iter().enumerate() {
        while let Some(&Reverse((t, s))) = ends.peek() {
            if t > job.arrival {
                break;
            }
            ends.pop();
            advance(&mut now, t, &free, &mut run);
            let (id, taken) = live.remove(&s).expect("a live allocation");
            state.release(id, &taken)?;
            for &(n, mask) in &taken {
                free[n] += mask.count_ones();
            }
        }
        advance(&mut now, job.arrival, &free, &mut run);
        run.offered.add(job.kind);
        let asked: u32 = job.request.bundles.iter().map(|b| b.count).sum();
        let (a, b) = (job.arrival.max(start), (job.arrival + job.duration).min(end));
        if b > a {
            run.offered_load += f64::from(asked) * (b - a) as f64 / 3600.0;
        }
        let t = Instant::now();
        let placed = state.allocate(&job.request)?;
        run.place_ms += t.elapsed().as_secs_f64() * 1e3;
        match placed {
            Some((id, taken)) => {
                run.placed.add(job.kind);
                for &(n, mask) in &taken {
                    free[n] -= mask.count_ones();
                }
                ends.push(Reverse((job.arrival + job.duration, seq)));
                live.insert(seq, (id, taken));
            }
            None => run.rejected.add(job.kind),
        }
    }
    // Jobs still running at the end keep running; the window closes at `end`.
    while let Some(Reverse((t, s))) = ends.pop() {
        if t > end {
            break;
        }
        advance(&mut now, t, &free, &mut run);
        let (_, taken) = live.remove(&s).expect("a live allocation");
        for &(n, mask) in &taken {
            free[n] += mask.count_ones();
        }
    }
    advance(&mut now, end, &free, &mut run);
    run.end_whole_free = whole_free(&free);
    run.offered_load /= window / 3600.0 * f64::from(devices.max(1));
    Ok(run)
}
