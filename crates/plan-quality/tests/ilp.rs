//! The ILP against brute force on tiny instances: equal optima, the same infeasible ones, never
//! below a valid planner placement; and each deliberately broken formulation is caught.

use std::collections::BTreeMap;
use std::path::Path;

use accel_model::Machine;
use accel_plan::{
    Bundle, Cluster, ClusterNode, Connectivity, Groups, MachineRef, Planner, Request, Strategy, XorShift,
};
use accel_plan_quality::clusters::sample;
use accel_plan_quality::exact::{self, Verdict};
use accel_plan_quality::ilp::{Drop, Outcome, Problem};
use accel_plan_quality::objective::{of_placement, same};

/// A tiny instance: 2-3 nodes (NVL72 trays, 8-GPU boxes) with all but 2-4 devices taken, racks
/// of two nodes; 2-3 bundles of 1-2 devices; `same` rack or node or none, sometimes `spread` or
/// sub-groups.
fn tiny(rng: &mut XorShift, machines: &[(&str, Machine)]) -> (Cluster, Request) {
    let mut cluster = Cluster::default();
    for (name, m) in machines {
        cluster.machines.insert((*name).to_owned(), m.clone());
    }
    for i in 0..2 + rng.below(2) as usize {
        let (name, m) = &machines[rng.below(machines.len() as u64) as usize];
        let n = m.accelerators.len();
        let keep = 2 + rng.below(3) as usize;
        let start = rng.below(n as u64) as usize;
        let free: Vec<usize> = (0..keep).map(|k| (start + k * 3) % n).collect();
        let allocated = (0..n).filter(|d| !free.contains(d)).map(|d| m.accelerators[d].id.clone()).collect();
        let mut labels = BTreeMap::new();
        labels.insert("rack".to_owned(), format!("r{}", i / 2));
        cluster.nodes.push(ClusterNode {
            name: format!("n{i}"),
            labels,
            machine: MachineRef::Name((*name).to_owned()),
            allocated,
        });
    }
    let n = 2 + rng.below(2) as usize;
    let bundles = (0..n)
        .map(|_| {
            let mut b = Bundle::new(1 + rng.below(2) as u32);
            if rng.chance(40) {
                b.connectivity = Connectivity::ScaleUp;
            }
            b.same_numa = rng.chance(15);
            b
        })
        .collect();
    let mut request = Request::new(bundles);
    request.same = match rng.below(4) {
        0 => Some("rack".to_owned()),
        1 => Some("node".to_owned()),
        _ => None,
    };
    if request.same.as_deref() != Some("node") && rng.chance(25) {
        request.strategy = Strategy::Spread;
    }
    if rng.chance(25) {
        request.same = None;
        request.groups = Some(Groups {
            size: if n == 2 && rng.chance(50) { 2 } else { 1 },
            same: if rng.chance(50) { "node" } else { "rack" }.to_owned(),
            replicas: if rng.chance(50) { Strategy::Spread } else { Strategy::Pack },
        });
    }
    (cluster, request)
}

fn machines() -> Vec<(&'static str, Machine)> {
    ["gb200-nvl72-tray", "dgx-h100", "mi300x", "rtx-pro-6000-server"]
        .into_iter()
        .map(|n| (n, sample(n).unwrap()))
        .collect()
}

/// The value an outcome claims, `None` when infeasible.
fn claimed(o: &Outcome) -> Option<f64> {
    match o {
        Outcome::Optimal { value, .. } => Some(*value),
        Outcome::Infeasible => None,
        Outcome::TimeLimit => panic!("a tiny instance ran past the time limit"),
    }
}

/// Each (cluster, request, problem) of the tiny set.
fn cases(count: usize) -> Vec<(Cluster, Request, Problem)> {
    let machines = machines();
    let mut rng = XorShift::new(0x22_1dea);
    (0..count)
        .map(|_| {
            let (cluster, request) = tiny(&mut rng, &machines);
            let mut planner = Planner::new(&cluster).unwrap();
            let problem = Problem::build(&cluster, &mut planner, &request, 10_000).unwrap().unwrap();
            (cluster, request, problem)
        })
        .collect()
}

#[test]
fn ilp_equals_brute_force_and_is_never_below_the_planner() {
    let (mut feasible, mut infeasible, mut compared) = (0, 0, 0);
    for (i, (cluster, request, problem)) in cases(48).iter().enumerate() {
        let brute = problem.brute_force();
        let outcome = problem.solve(10.0, None).unwrap();
        match (&outcome, &brute) {
            (Outcome::Optimal { value, assignment }, Some((best, _))) => {
                assert!(same(*value, *best), "case {i}: ILP {value} vs brute force {best}; {request:?}");
                assert!(same(problem.value(assignment), *value), "case {i}: the ILP's value is not its assignment's");
                problem.check(assignment).unwrap_or_else(|e| panic!("case {i}: the ILP broke {e}"));
                feasible += 1;
            }
            (Outcome::Infeasible, None) => infeasible += 1,
            (got, want) => panic!("case {i}: ILP {got:?}, brute force {want:?}; {request:?}"),
        }
        // A valid placement of the planner never beats the optimum.
        if let Ok(p) = Planner::new(cluster).unwrap().plan(request) {
            let valid = problem.assignment_of(&p).and_then(|a| problem.check(&a));
            if valid.is_ok() {
                let optimum =
                    claimed(&outcome).unwrap_or_else(|| panic!("case {i}: the planner placed what the ILP cannot"));
                assert!(
                    of_placement(&p) <= optimum + 1e-6 * optimum.abs().max(1.0),
                    "case {i}: planner above the optimum"
                );
                compared += 1;
            }
        }
    }
    assert!(
        feasible >= 20 && infeasible >= 3 && compared >= 20,
        "feasible {feasible}, infeasible {infeasible}, compared {compared}"
    );
}

/// Each broken formulation disagrees with brute force somewhere, in the direction it must: a
/// dropped constraint only raises the optimum, a dropped objective term only lowers it.
#[test]
fn broken_formulations_are_caught() {
    let all = cases(48);
    for (drop, raises) in [(Drop::DeviceOnce, true), (Drop::Same, true), (Drop::PackTerm, false)] {
        let mut caught = 0;
        for (_, _, problem) in &all {
            let Some((best, _)) = problem.brute_force() else { continue };
            let Some(value) = claimed(&problem.solve(10.0, Some(drop)).unwrap()) else {
                assert!(raises, "{drop:?}: infeasible where brute force places");
                continue;
            };
            if !same(value, best) {
                assert_eq!(value > best, raises, "{drop:?}: {value} against {best}");
                caught += 1;
            }
        }
        assert!(caught > 0, "{drop:?} was never caught");
    }
}

/// The benchmark's own loop on a few small instances, each in a child process as the binary
/// runs them: the counts add up and nothing is invalid on either side.
#[test]
fn exact_run_on_small_instances() {
    let cfg = exact::Config {
        instances: 4,
        nodes: 8,
        seed: 4,
        time_limit: 10.0,
        max_options: 5_000,
        groups: false,
        planner_limit: 10.0,
    };
    let report = exact::run(&cfg, Some(Path::new(env!("CARGO_BIN_EXE_accel-plan-quality"))), |_| {}).unwrap();
    let s = &report.plain;
    assert_eq!(s.instances, 4);
    assert_eq!(
        s.decided,
        s.equal
            + s.gap
            + s.both_infeasible
            + s.planner_only_infeasible
            + s.ilp_only_infeasible
            + s.planner_invalid
            + s.planner_timeout
    );
    for c in &report.cases {
        assert!(!matches!(c.verdict, Verdict::IlpOnlyInfeasible | Verdict::PlannerInvalid), "{c:?}");
        if let (Some(p), Some(o)) = (c.planner, c.optimum) {
            assert!(p <= o + 1e-6 * o.abs().max(1.0), "{c:?}");
        }
    }
}
