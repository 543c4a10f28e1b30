//! The exact comparison: random gangs on a medium mixed cluster, each solved by the ILP
//! ([`crate::ilp`]) and placed by [`Planner::plan`], both scored by [`crate::objective`].

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use accel_plan::{Bundle, Cluster, Connectivity, Groups, NicDistance, Planner, Request, Strategy, Within, XorShift};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::clusters;
use crate::ilp::{Outcome, Problem, Skip};
use crate::objective::{of_placement, same};

/// The goal of issue 22: the planner equals the optimum on at least this share of instances.
pub const GOAL: f64 = 0.95;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub instances: usize,
    pub nodes: usize,
    pub seed: u64,
    /// Seconds the solver may take per instance.
    pub time_limit: f64,
    /// Instances with more options than this in all are skipped.
    pub max_options: usize,
    /// Also generate requests with sub-groups (`groups`) and a hard tier cap (`within`).
    pub groups: bool,
    /// Seconds past the solver's limit after which an isolated instance is stopped.
    pub planner_limit: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            instances: 200,
            nodes: 64,
            seed: 22,
            time_limit: 10.0,
            max_options: 30_000,
            groups: false,
            planner_limit: 30.0,
        }
    }
}

/// One generated instance.
#[derive(Debug, Clone)]
pub struct Instance {
    pub cluster: Cluster,
    pub request: Request,
}

/// Instance `index` of a run: each has its own generator, so that one can be rebuilt alone.
pub fn instance_at(cfg: &Config, index: usize) -> Result<Instance> {
    let mut rng = XorShift::new(
        cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (index as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
    );
    instance(&mut rng, cfg.nodes, cfg.groups)
}

/// A random gang on a fresh random cluster (see [`clusters::mixed`]): 2 to 32 bundles of 1 to 8
/// devices (a few with a different first bundle, as a driver), any, scale-up or island
/// connectivity, sometimes one NUMA node or a NIC at PXB; `same` rack or node or nothing;
/// sometimes `spread`. With `groups`, about half also get sub-groups or a hard tier cap.
pub fn instance(rng: &mut XorShift, nodes: usize, groups: bool) -> Result<Instance> {
    let cluster = clusters::mixed(nodes, 40, rng)?;
    let pick = |rng: &mut XorShift, list: &[u32]| list[rng.below(list.len() as u64) as usize];
    let n = pick(rng, &[2, 2, 3, 4, 4, 6, 8, 8, 12, 16, 24, 32]) as usize;
    let mut count = pick(rng, &[1, 2, 2, 4, 4, 8]);
    while count > 1 && n as u32 * count > 128 {
        count /= 2;
    }
    let mut bundle = Bundle::new(count);
    bundle.connectivity = match rng.below(100) {
        0..=34 => Connectivity::Any,
        35..=79 => Connectivity::ScaleUp,
        _ => Connectivity::Island,
    };
    bundle.same_numa = count <= 4 && rng.chance(10);
    if rng.chance(10) {
        bundle.nic = Some(NicDistance::Pxb);
    }
    // Every draw is made whether or not it is used, so that `groups` changes only the
    // instances it extends and the others stay the same.
    let (driver, same_draw, spread) = (rng.chance(20), rng.below(100), rng.chance(15));
    let (extend, group_not_tier, four, kind, replicas, leaf) =
        (rng.chance(50), rng.chance(70), rng.chance(50), rng.below(3) as usize, rng.chance(50), rng.chance(50));
    let extended = groups && extend;
    let mut bundles = vec![bundle; n];
    if driver && !extended {
        bundles[0] = Bundle::new(1);
    }
    let mut request = Request::new(bundles);
    request.same = match same_draw {
        0..=44 => None,
        45..=84 => Some("rack".to_owned()),
        _ if n as u32 * count <= 8 => Some("node".to_owned()),
        _ => Some("rack".to_owned()),
    };
    if request.same.as_deref() != Some("node") && spread {
        request.strategy = Strategy::Spread;
    }
    if extended {
        let size = if n % 4 == 0 && four { 4 } else { 2 };
        if group_not_tier && n >= 4 && n % size == 0 {
            request.groups = Some(Groups {
                size: size as u32,
                same: match kind {
                    0 => "rack".to_owned(),
                    1 => "node".to_owned(),
                    // The NVL72 trays' clique.
                    _ => cluster
                        .machines
                        .get(clusters::TRAY)
                        .and_then(clusters::scale_up_kind)
                        .unwrap_or_else(|| "rack".into()),
                },
                replicas: if replicas { Strategy::Spread } else { Strategy::Pack },
            });
            request.same = None;
        } else {
            let tier = if leaf { "leaf" } else { "spine" };
            // A hard `within` is `same` on a fabric tier: the planner takes one or the other.
            request.same = None;
            request.within = Some(Within { tier: tier.to_owned(), hard: true });
        }
    }
    Ok(Instance { cluster, request })
}

/// How one instance came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Both feasible, the planner's objective equal to the optimum.
    Equal,
    /// Both feasible, the planner below the optimum.
    Gap,
    /// Both infeasible.
    BothInfeasible,
    /// The planner reports infeasible, the ILP finds a placement (the planner's search is bounded).
    PlannerOnlyInfeasible,
    /// The ILP finds nothing, the planner places: a bug on one side.
    IlpOnlyInfeasible,
    /// The planner above the optimum, or its placement breaking a constraint: a bug on one side.
    PlannerInvalid,
    /// A node's option enumeration passed the search budget.
    SkippedBudget,
    /// More options than the limit.
    SkippedOptions,
    /// The solver did not prove optimality in time.
    TimeLimit,
    /// The planner ran past `Config::planner_limit` (its search did not stop).
    PlannerTimeout,
}

/// One instance's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Case {
    pub index: usize,
    pub bundles: usize,
    pub devices: u32,
    /// `same`, `spread`, `groups`, `within` as they apply.
    pub shape: String,
    /// The request has sub-groups or a tier cap.
    pub extended: bool,
    pub options: usize,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planner: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimum: Option<f64>,
    /// (optimum - planner) / optimum, for `gap`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap: Option<f64>,
    /// For `gap`: the planner's own score (state terms included, [`Problem::planner_score`])
    /// of its placement and of the optimum's assignment. When the first is at least the second,
    /// the gap is a trade the planner's objective makes on purpose; else its search missed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planner_own: Option<[f64; 2]>,
    /// Why the planner's placement is invalid (`planner_invalid`), or its error
    /// (`planner_only_infeasible`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub planner_ms: f64,
    /// Enumerating the options ([`Planner::options`]).
    pub options_ms: f64,
    /// Building the model and solving it.
    pub solver_ms: f64,
}

fn shape(r: &Request) -> String {
    let mut parts = Vec::new();
    if let Some(s) = &r.same {
        parts.push(format!("same={s}"));
    }
    if r.strategy == Strategy::Spread {
        parts.push("spread".to_owned());
    }
    if let Some(g) = &r.groups {
        parts.push(format!("groups={}x{}:{:?}", g.size, g.same, g.replicas).to_lowercase());
    }
    if let Some(w) = &r.within {
        parts.push(format!("within={}", w.tier));
    }
    if parts.is_empty() {
        "free".to_owned()
    } else {
        parts.join(",")
    }
}

/// Solves and plans one instance: enumerates the options, solves the ILP, calls `solved` with
/// the case so far (its verdict `planner_timeout`, which stands if the planner never returns),
/// then plans.
pub fn run_case(index: usize, inst: &Instance, cfg: &Config, mut solved: impl FnMut(&Case)) -> Result<Case> {
    let r = &inst.request;
    let mut case = Case {
        index,
        bundles: r.bundles.len(),
        devices: r.bundles.iter().map(|b| b.count).sum(),
        shape: shape(r),
        extended: r.groups.is_some() || r.within.is_some(),
        options: 0,
        verdict: Verdict::Equal,
        planner: None,
        optimum: None,
        gap: None,
        planner_own: None,
        note: None,
        planner_ms: 0.0,
        options_ms: 0.0,
        solver_ms: 0.0,
    };
    let mut enumerator = Planner::new(&inst.cluster)?;
    let t = Instant::now();
    let built = Problem::build(&inst.cluster, &mut enumerator, r, cfg.max_options)?;
    case.options_ms = t.elapsed().as_secs_f64() * 1e3;
    let problem = match built {
        Ok(p) => p,
        Err(Skip::Budget) => {
            case.verdict = Verdict::SkippedBudget;
            return Ok(case);
        }
        Err(Skip::TooMany(n)) => {
            case.options = n;
            case.verdict = Verdict::SkippedOptions;
            return Ok(case);
        }
    };
    case.options = problem.option_count();
    let t = Instant::now();
    let outcome = problem.solve(cfg.time_limit, None)?;
    case.solver_ms = t.elapsed().as_secs_f64() * 1e3;
    // What stands if the planner never returns.
    case.verdict = match outcome {
        Outcome::TimeLimit => Verdict::TimeLimit,
        _ => Verdict::PlannerTimeout,
    };
    solved(&case);
    // A fresh planner, so that the enumeration's caches do not speed it up.
    let mut planner = Planner::new(&inst.cluster)?;
    let t = Instant::now();
    let planned = planner.plan(r);
    case.planner_ms = t.elapsed().as_secs_f64() * 1e3;
    let planner_value = match &planned {
        Ok(p) => {
            let checked = problem.assignment_of(p).and_then(|a| problem.check(&a));
            if let Err(e) = checked {
                case.note = Some(e);
            }
            Some(of_placement(p))
        }
        Err(_) => None,
    };
    case.planner = planner_value;
    case.verdict = match (&outcome, planner_value) {
        (Outcome::TimeLimit, _) => Verdict::TimeLimit,
        (Outcome::Infeasible, None) => Verdict::BothInfeasible,
        (Outcome::Infeasible, Some(_)) => {
            if case.note.is_some() {
                Verdict::PlannerInvalid
            } else {
                Verdict::IlpOnlyInfeasible
            }
        }
        (Outcome::Optimal { .. }, None) => {
            case.note = planned.as_ref().err().map(ToString::to_string);
            Verdict::PlannerOnlyInfeasible
        }
        (Outcome::Optimal { value, assignment }, Some(pv)) => {
            let rescored = problem.value(assignment);
            anyhow::ensure!(
                same(rescored, *value),
                "instance {index}: the solver's objective {value} differs from its assignment's {rescored}"
            );
            anyhow::ensure!(problem.check(assignment).is_ok(), "instance {index}: the solver broke a constraint");
            case.optimum = Some(rescored);
            if case.note.is_some() {
                Verdict::PlannerInvalid
            } else if same(pv, rescored) {
                Verdict::Equal
            } else if pv > rescored {
                case.note = Some(format!("planner {pv} above the optimum {rescored}"));
                Verdict::PlannerInvalid
            } else {
                case.gap = Some((rescored - pv) / rescored.abs().max(1e-9));
                if let Ok(p) = &planned {
                    case.planner_own = Some([p.score, problem.planner_score(&inst.cluster, assignment)?]);
                }
                Verdict::Gap
            }
        }
    };
    Ok(case)
}

/// Medians and counts over a set of cases.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub instances: usize,
    pub skipped_budget: usize,
    pub skipped_options: usize,
    pub time_limit: usize,
    /// Instances both sides decided (not skipped, no time limit).
    pub decided: usize,
    pub equal: usize,
    pub gap: usize,
    pub both_infeasible: usize,
    pub planner_only_infeasible: usize,
    pub ilp_only_infeasible: usize,
    pub planner_invalid: usize,
    /// The planner did not return within the limit (counted as not equal).
    pub planner_timeout: usize,
    /// (equal + both infeasible) / decided.
    pub equal_rate: f64,
    /// equal / instances where both placed.
    pub equal_rate_feasible: f64,
    pub mean_gap: f64,
    pub worst_gap: f64,
    /// Gaps the planner's own objective (state terms included) prefers: deliberate trades.
    pub gap_trades: usize,
    /// Gaps where the planner's own objective rates the optimum higher: search misses.
    pub gap_misses: usize,
    /// Medians over the decided instances where the planner returned.
    pub median_planner_ms: f64,
    pub median_options_ms: f64,
    pub median_solver_ms: f64,
    /// Median of solver_ms / planner_ms per decided instance.
    pub median_solver_over_planner: f64,
    pub goal_met: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

pub fn summarise(cases: &[&Case]) -> Summary {
    let count = |v: Verdict| cases.iter().filter(|c| c.verdict == v).count();
    let decided: Vec<&&Case> = cases
        .iter()
        .filter(|c| !matches!(c.verdict, Verdict::SkippedBudget | Verdict::SkippedOptions | Verdict::TimeLimit))
        .collect();
    // Times: the instances where both sides finished.
    let timed: Vec<&&&Case> = decided.iter().filter(|c| c.verdict != Verdict::PlannerTimeout).collect();
    let gaps: Vec<f64> = cases.iter().filter_map(|c| c.gap).collect();
    let (equal, both_inf, gap) = (count(Verdict::Equal), count(Verdict::BothInfeasible), count(Verdict::Gap));
    let equal_rate = (equal + both_inf) as f64 / decided.len().max(1) as f64;
    Summary {
        instances: cases.len(),
        skipped_budget: count(Verdict::SkippedBudget),
        skipped_options: count(Verdict::SkippedOptions),
        time_limit: count(Verdict::TimeLimit),
        decided: decided.len(),
        equal,
        gap,
        both_infeasible: both_inf,
        planner_only_infeasible: count(Verdict::PlannerOnlyInfeasible),
        ilp_only_infeasible: count(Verdict::IlpOnlyInfeasible),
        planner_invalid: count(Verdict::PlannerInvalid),
        planner_timeout: count(Verdict::PlannerTimeout),
        equal_rate,
        equal_rate_feasible: equal as f64 / (equal + gap).max(1) as f64,
        mean_gap: if gaps.is_empty() { 0.0 } else { gaps.iter().sum::<f64>() / gaps.len() as f64 },
        worst_gap: gaps.iter().copied().fold(0.0, f64::max),
        gap_trades: cases
            .iter()
            .filter_map(|c| c.planner_own)
            .filter(|[own, opt]| *own >= *opt - 1e-6 * opt.abs().max(1.0))
            .count(),
        gap_misses: cases
            .iter()
            .filter_map(|c| c.planner_own)
            .filter(|[own, opt]| *own < *opt - 1e-6 * opt.abs().max(1.0))
            .count(),
        median_planner_ms: median(timed.iter().map(|c| c.planner_ms).collect()),
        median_options_ms: median(timed.iter().map(|c| c.options_ms).collect()),
        median_solver_ms: median(timed.iter().map(|c| c.solver_ms).collect()),
        median_solver_over_planner: median(timed.iter().map(|c| c.solver_ms / c.planner_ms.max(1e-6)).collect()),
        goal_met: !decided.is_empty() && equal_rate >= GOAL,
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub nodes: usize,
    pub seed: u64,
    pub time_limit_s: f64,
    pub max_options: usize,
    /// Requests without sub-groups or a tier cap: the goal is judged on these.
    pub plain: Summary,
    /// Requests with sub-groups or a hard tier cap (only with `--groups`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extended: Option<Summary>,
    pub cases: Vec<Case>,
}

/// Runs `cfg.instances` instances; `progress` hears about each. With `isolate` (this program's
/// path), each instance runs in a child process (`accel-plan-quality ilp-case`) stopped after
/// the solver's and the planner's limits, so that a search that never ends costs one instance,
/// not the run.
pub fn run(cfg: &Config, isolate: Option<&Path>, mut progress: impl FnMut(&Case)) -> Result<Report> {
    let mut cases = Vec::new();
    for i in 0..cfg.instances {
        let case = match isolate {
            None => run_case(i, &instance_at(cfg, i)?, cfg, |_| {})?,
            Some(exe) => run_isolated(exe, cfg, i)?,
        };
        progress(&case);
        cases.push(case);
    }
    let plain: Vec<&Case> = cases.iter().filter(|c| !c.extended).collect();
    let extended: Vec<&Case> = cases.iter().filter(|c| c.extended).collect();
    Ok(Report {
        nodes: cfg.nodes,
        seed: cfg.seed,
        time_limit_s: cfg.time_limit,
        max_options: cfg.max_options,
        plain: summarise(&plain),
        extended: cfg.groups.then(|| summarise(&extended)),
        cases,
    })
}

/// The arguments of `accel-plan-quality ilp-case` for instance `index`.
pub fn case_args(cfg: &Config, index: usize) -> Vec<String> {
    let mut args = vec![
        "ilp-case".to_owned(),
        format!("--index={index}"),
        format!("--nodes={}", cfg.nodes),
        format!("--seed={}", cfg.seed),
        format!("--time-limit={}", cfg.time_limit),
        format!("--max-options={}", cfg.max_options),
    ];
    if cfg.groups {
        args.push("--groups".to_owned());
    }
    args
}

/// Runs one instance in a child process, which prints the case as a JSON line after the solver
/// and again after the planner; the last complete line stands.
fn run_isolated(exe: &Path, cfg: &Config, index: usize) -> Result<Case> {
    let mut child = Command::new(exe)
        .args(case_args(cfg, index))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let mut stdout = child.stdout.take().context("child stdout")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    // The solver may overshoot its limit a little (it checks the clock between steps).
    let limit = Duration::from_secs_f64(cfg.time_limit * 1.5 + cfg.planner_limit + 5.0);
    let started = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if started.elapsed() > limit {
            child.kill()?;
            child.wait()?;
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let text = reader.join().map_err(|_| anyhow::anyhow!("reader panicked"))??;
    let last = text.lines().rev().find(|l| l.starts_with('{'));
    match last {
        Some(line) => Ok(serde_json::from_str(line)?),
        None => bail!("instance {index}: the child printed nothing (it failed or ran past {limit:?} before solving)"),
    }
}
