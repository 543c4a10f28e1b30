//! Planner behaviour on small hand-built clusters: exact devices, fragmentation, locality,
//! domains, explanations, allocation state and determinism.

mod support;

use std::collections::BTreeMap;

use accel_plan::{Bundle, Cluster, ClusterNode, Connectivity, MachineRef, NicDistance, PlanError, Planner, Request};
use support::{build, infeasible, request, Spec};

fn cluster(nodes: &[(&str, Spec)]) -> Cluster {
    Cluster {
        machines: BTreeMap::new(),
        nodes: nodes
            .iter()
            .map(|(name, spec)| ClusterNode {
                name: (*name).to_owned(),
                labels: BTreeMap::new(),
                machine: MachineRef::Inline(Box::new(build(spec))),
                allocated: Vec::new(),
            })
            .collect(),
        ..Default::default()
    }
}

fn labels(p: &accel_plan::Placement, bundle: usize) -> (String, String) {
    let b = &p.bundles[bundle];
    (b.node.clone(), b.devices.iter().map(|d| d.label.as_str()).collect::<Vec<_>>().join(","))
}

#[test]
fn minimal_request_takes_one_numa_node() {
    let mut p = Planner::new(&cluster(&[("a", Spec::dgx())])).unwrap();
    let got = p.plan(&request(r#"{"bundles": [{"count": 4, "connectivity": "scale-up"}]}"#)).unwrap();
    assert_eq!(labels(&got, 0), ("a".into(), "GPU0,GPU1,GPU2,GPU3".into()));
    assert!(got.bundles[0].score.same_numa);
    assert_eq!(got.bundles[0].score.min_pair_gbps, 900.0);
}

#[test]
fn fragmented_node_is_filled_first_and_the_whole_one_kept() {
    let mut c = cluster(&[("a", Spec::dgx()), ("b", Spec::dgx())]);
    let ids: Vec<String> = (0..3).map(|i| build(&Spec::dgx()).accelerators[i].id.clone()).collect();
    c.nodes[0].allocated = ids;
    let mut p = Planner::new(&c).unwrap();
    let got = p.allocate(&request(r#"{"bundles": [{"count": 4, "connectivity": "scale-up"}]}"#)).unwrap();
    assert_eq!(labels(&got, 0), ("a".into(), "GPU4,GPU5,GPU6,GPU7".into()));
    // Node b is still whole for an 8-GPU job.
    let eight = p.plan(&request(r#"{"bundles": [{"count": 8, "connectivity": "scale-up"}]}"#)).unwrap();
    assert_eq!(eight.bundles[0].node, "b");
}

#[test]
fn scale_up_beats_pcie_and_islands_stay_whole() {
    let mut p = Planner::new(&cluster(&[("pcie", Spec::pcie(8)), ("hives", Spec::two_hives())])).unwrap();
    let got = p.allocate(&request(r#"{"bundles": [{"count": 2}]}"#)).unwrap();
    // 200 GB/s xGMI beats PCIe, and the pair comes out of one hive.
    assert_eq!(labels(&got, 0), ("hives".into(), "GPU0,GPU1".into()));
    let got = p.allocate(&request(r#"{"bundles": [{"count": 4, "connectivity": "island"}]}"#)).unwrap();
    assert_eq!(labels(&got, 0), ("hives".into(), "GPU4,GPU5,GPU6,GPU7".into()));
}

#[test]
fn infeasible_names_the_constraint_and_the_nearest_alternative() {
    let mut c = cluster(&[("hives", Spec::two_hives())]);
    c.nodes[0].allocated = vec![build(&Spec::two_hives()).accelerators[0].id.clone()];
    let mut p = Planner::new(&c).unwrap();
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 5, "connectivity": "scale-up"}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "connectivity");
    assert_eq!(
        why.message,
        "bundle 0: no node has 5 free accelerators all joined by scale-up links; best available: hives has 4 (GPU4,GPU5,GPU6,GPU7)"
    );
    let nearest = why.nearest.unwrap();
    assert!(nearest.starts_with("count 4 on hives (GPU4,GPU5,GPU6,GPU7)"), "{nearest}");
    assert!(nearest.contains("; or without the connectivity constraint: hives ("), "{nearest}");

    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 9}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "count");
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 2, "vendor": ["nvidia"]}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "capability");
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 8}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "free");
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 1, "nic": "pxb"}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "nic");
}

#[test]
fn nic_at_pix_picks_the_gpus_beside_a_nic() {
    let mut spec = Spec::dgx();
    spec.nics = vec![5, 6];
    let mut p = Planner::new(&cluster(&[("a", spec)])).unwrap();
    let got = p.plan(&request(r#"{"bundles": [{"count": 2, "nic": "pix"}]}"#)).unwrap();
    assert_eq!(labels(&got, 0).1, "GPU5,GPU6");
    assert_eq!(got.bundles[0].devices[0].nic.as_deref(), Some("mlx5_5"));
    assert_eq!(got.bundles[0].devices[0].nic_path.as_deref(), Some("PIX"));
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 3, "nic": "pix"}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "nic");
}

#[test]
fn gang_stays_in_one_clique() {
    let tray = Spec::tray;
    let mut c = cluster(&[("a0", tray("A")), ("a1", tray("A")), ("b0", tray("B")), ("b1", tray("B"))]);
    c.nodes[0].allocated = vec![build(&tray("A")).accelerators[0].id.clone()];
    let mut p = Planner::new(&c).unwrap();
    let gang = r#"{"bundles": [{"count": 4}, {"count": 4}], "same": "nvlink_clique", "strategy": "spread"}"#;
    let got = p.allocate(&request(gang)).unwrap();
    let nodes: Vec<&str> = got.bundles.iter().map(|b| b.node.as_str()).collect();
    assert_eq!(nodes, ["b0", "b1"]);
    // Clique A has 7 free devices for 8: the two bundles fit alone but not together, clique
    // or none (docs/placement.md: `capacity`), and one of them does.
    let why = infeasible(p.plan(&request(gang)).unwrap_err());
    assert_eq!(why.constraint, "capacity", "{why:?}");
    assert!(why.message.starts_with("the 2 bundles (8 devices) fit one at a time but not together"), "{}", why.message);
    assert_eq!(why.nearest.as_deref(), Some("the first 1 of 2 bundles fit, on 1 node"));
    // Without the clique constraint, a 3 + 4 gang would fit across cliques.
    let select = r#"{"bundles": [{"count": 3}], "select": {"nvlink_clique": "A"}}"#;
    assert_eq!(p.plan(&request(select)).unwrap().bundles[0].node, "a0");
}

#[test]
fn pack_prefers_one_node_and_spread_separates() {
    let mut p = Planner::new(&cluster(&[("a", Spec::dgx()), ("b", Spec::dgx())])).unwrap();
    let pack = p.plan(&request(r#"{"bundles": [{"count": 2}, {"count": 2}]}"#)).unwrap();
    assert_eq!(pack.bundles[0].node, pack.bundles[1].node);
    let spread = p.plan(&request(r#"{"bundles": [{"count": 2}, {"count": 2}], "strategy": "spread"}"#)).unwrap();
    assert_ne!(spread.bundles[0].node, spread.bundles[1].node);
    let same = p.plan(&request(r#"{"bundles": [{"count": 4}, {"count": 4}], "same": "node"}"#)).unwrap();
    assert_eq!(same.bundles[0].node, same.bundles[1].node);
}

#[test]
fn capability_filters() {
    let mut amd = Spec::two_hives();
    amd.memory_gb = 192;
    let mut p = Planner::new(&cluster(&[("n", Spec::dgx()), ("m", amd)])).unwrap();
    let got = p.plan(&request(r#"{"bundles": [{"count": 2, "min_memory_gb": 100}]}"#)).unwrap();
    assert_eq!(got.bundles[0].node, "m");
    let got =
        p.plan(&request(r#"{"bundles": [{"count": 2, "vendor": ["amd"], "same_numa": true, "cpus": 16}]}"#)).unwrap();
    assert_eq!(got.bundles[0].node, "m");
    let why =
        infeasible(p.plan(&request(r#"{"bundles": [{"count": 2, "same_numa": true, "cpus": 20}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "cpus");
}

#[test]
fn allocate_release_and_determinism() {
    let c = cluster(&[("a", Spec::dgx()), ("b", Spec::two_hives()), ("c", Spec::pcie(4))]);
    let stream = [
        r#"{"bundles": [{"count": 2, "connectivity": "scale-up"}]}"#,
        r#"{"bundles": [{"count": 1}]}"#,
        r#"{"bundles": [{"count": 4, "connectivity": "island"}]}"#,
        r#"{"bundles": [{"count": 3}]}"#,
        r#"{"bundles": [{"count": 2, "connectivity": {"min_gbps": 150}}]}"#,
    ];
    let run = || {
        let mut p = Planner::new(&c).unwrap();
        let mut out = Vec::new();
        for r in stream {
            out.push(p.allocate(&request(r)).map(|pl| (pl.id, labels(&pl, 0))).map_err(|e| e.to_string()));
        }
        (p, out)
    };
    let (mut p, first) = run();
    let (_, second) = run();
    assert_eq!(first, second);
    let (id, (node, _)) = first[2].clone().unwrap();
    let before = p.free_devices(&node).unwrap().len();
    p.release(id).unwrap();
    assert_eq!(p.free_devices(&node).unwrap().len(), before + 4);
    assert!(matches!(p.release(id), Err(PlanError::UnknownAllocation(_))));
}

#[test]
fn request_parsing() {
    let r = request(
        r#"{"bundles": [{"count": 2, "connectivity": {"min_gbps": 100}, "nic": "pxb", "dtypes": ["fp8"]}], "same": "rack"}"#,
    );
    assert_eq!(r.bundles[0].connectivity, Connectivity::MinGbps(100.0));
    assert_eq!(r.bundles[0].nic, Some(NicDistance::Pxb));
    assert!(Request::from_json(r#"{"bundles": [{"count": 2, "connectivity": "nvlink"}]}"#).is_err());
    assert!(Request::from_json(r#"{"bundles": [{"count": 2, "colour": "red"}]}"#).is_err());
    let mut p = Planner::new(&cluster(&[("a", Spec::dgx())])).unwrap();
    assert!(matches!(p.plan(&Request { bundles: vec![Bundle::new(0)], ..r.clone() }), Err(PlanError::Request(_))));
}

#[test]
fn cluster_json_round_trip_with_inline_and_shared_machines() {
    let mut c = cluster(&[("a", Spec::dgx())]);
    c.machines.insert("hives".into(), build(&Spec::two_hives()));
    c.nodes.push(ClusterNode {
        name: "b".into(),
        labels: BTreeMap::from([("rack".to_owned(), "r1".to_owned())]),
        machine: MachineRef::Name("hives".into()),
        allocated: Vec::new(),
    });
    let text = serde_json::to_string(&c).unwrap();
    let back = Cluster::from_json(&text).unwrap();
    assert_eq!(back, c);
    let mut p = Planner::new(&back).unwrap();
    let got = p.plan(&request(r#"{"bundles": [{"count": 2, "vendor": ["amd"]}], "select": {"rack": "r1"}}"#)).unwrap();
    assert_eq!(got.bundles[0].node, "b");
}

#[test]
fn select_a_node_by_name() {
    let mut p = Planner::new(&cluster(&[("a", Spec::dgx()), ("b", Spec::dgx())])).unwrap();
    let got = p.plan(&request(r#"{"bundles": [{"count": 2}, {"count": 3}], "select": {"node": "b"}}"#)).unwrap();
    assert!(got.bundles.iter().all(|b| b.node == "b"));
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 2}], "select": {"node": "c"}}"#)).unwrap_err());
    assert_eq!(why.constraint, "select");
    assert_eq!(why.message, "no node carries node=c");
}

/// Regression: a `cpus` constraint no node can meet used to enumerate every subset of a node
/// with many partitions (C(32, 12) = 225 million) because the step budget only started after a
/// first candidate. It is now rejected before the search, and every search is bounded.
#[test]
fn impossible_cpus_on_many_partitions_is_rejected_before_the_search() {
    let mut p = Planner::new(&cluster(&[("mi308x", support::Spec::partitions32())])).unwrap();
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 12, "cpus": 100000}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "cpus");
    assert!(why.message.contains("100000 CPU cores"), "{}", why.message);
    // The explanation still names the nearest feasible alternative (without the cpus constraint).
    assert!(why.nearest.as_deref().is_some_and(|n| n.contains("without the cpus constraint")), "{why:?}");
    // Bounded: the explanation's searches, each at most SEARCH_BUDGET steps.
    assert!(p.last_search_steps() <= 8 * u64::from(accel_plan::SEARCH_BUDGET), "{}", p.last_search_steps());
}

/// Regression: cores that exist, but not on few enough NUMA nodes, are found infeasible by the
/// search itself, and the search stops at its budget without a candidate.
#[test]
fn cpus_only_reachable_with_more_numa_nodes_stays_bounded() {
    let mut p = Planner::new(&cluster(&[("mi308x", support::Spec::partitions32())])).unwrap();
    // 64 cores in all (4 NUMA nodes of 16): 3 devices can span at most 48.
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 3, "cpus": 64}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "cpus");
    assert!(p.last_search_steps() <= 8 * u64::from(accel_plan::SEARCH_BUDGET), "{}", p.last_search_steps());
    // And a feasible one on the same node: 4 devices across 4 NUMA nodes.
    let got = p.plan(&request(r#"{"bundles": [{"count": 4, "cpus": 64}]}"#)).unwrap();
    let numa: std::collections::BTreeSet<_> = got.bundles[0].devices.iter().map(|d| d.numa_node).collect();
    assert_eq!(numa.len(), 4);
}

/// The budget counts from the first step: a bundle whose devices never form a valid set (here
/// no 17 of 48 devices are pairwise linked: a complete 16-partite link graph, 3^16 cliques of
/// 16) stops after SEARCH_BUDGET steps and says "infeasible, budget exhausted" with its
/// explanation.
#[test]
fn search_without_any_candidate_stops_at_the_budget() {
    let mut spec = support::Spec::partitions32();
    spec.gpus = 48;
    spec.numa = (0..48).map(|i| (i / 12) as u32).collect();
    spec.links = (0..48)
        .flat_map(|a| (a + 1..48).map(move |b| (a, b)))
        .filter(|(a, b)| a % 16 != b % 16)
        .map(|(a, b)| (a, b, 128.0))
        .collect();
    let mut p = Planner::new(&cluster(&[("n", spec)])).unwrap();
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 17, "connectivity": "scale-up"}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "connectivity");
    assert!(why.budget_exhausted, "{why:?}");
    assert!(why.message.contains("budget exhausted"), "{}", why.message);
    assert!(p.last_search_steps() <= 8 * u64::from(accel_plan::SEARCH_BUDGET), "{}", p.last_search_steps());
    assert!(p.last_search_steps() > u64::from(accel_plan::SEARCH_BUDGET));
}

/// A DGX whose GPU3 reported XID 79 and whose GPU5's health source failed.
fn sick_dgx() -> Cluster {
    let mut c = cluster(&[("a", Spec::dgx())]);
    let MachineRef::Inline(m) = &mut c.nodes[0].machine else { unreachable!() };
    let verdict =
        |state, reason: &str| accel_model::Health { state, reasons: vec![reason.into()], ..Default::default() };
    m.accelerators[3].health = Some(verdict(accel_model::HealthState::Unhealthy, "XID 79"));
    m.accelerators[5].health = Some(verdict(accel_model::HealthState::Unknown, "nvidia:errors: NVML call failed"));
    c
}

#[test]
fn unhealthy_and_unknown_devices_are_never_placed() {
    let mut p = Planner::new(&sick_dgx()).unwrap();
    let got = p.plan(&request(r#"{"bundles": [{"count": 6}]}"#)).unwrap();
    assert_eq!(labels(&got, 0).1, "GPU0,GPU1,GPU2,GPU4,GPU6,GPU7");
    assert_eq!(p.free_devices("a").unwrap().len(), 6);
    // An outside source of truth cannot hand them back.
    let all: Vec<String> = build(&Spec::dgx()).accelerators.iter().map(|a| a.id.clone()).collect();
    p.sync_free("a", &all.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
    assert_eq!(p.free_devices("a").unwrap().len(), 6);
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 8}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "health", "{why:?}");
    let nearest = why.nearest.unwrap();
    assert!(nearest.contains("a GPU3 (unhealthy: XID 79)") && nearest.contains("a GPU5 (unknown"), "{nearest}");
}

#[test]
fn unknown_health_is_placed_only_when_the_cluster_allows_it() {
    let mut c = sick_dgx();
    c.health.unknown = accel_plan::UnknownHealth::Allow;
    let mut p = Planner::new(&c).unwrap();
    let got = p.plan(&request(r#"{"bundles": [{"count": 7}]}"#)).unwrap();
    assert_eq!(labels(&got, 0).1, "GPU0,GPU1,GPU2,GPU4,GPU5,GPU6,GPU7");
    // And the policy is read from a cluster file.
    let text = serde_json::to_string(&c).unwrap();
    assert!(text.contains(r#""health":{"unknown":"allow"}"#), "{text}");
    assert_eq!(Cluster::from_json(&text).unwrap().health.unknown, accel_plan::UnknownHealth::Allow);
}

#[test]
fn a_misspelt_name_is_invalid_with_a_suggestion_not_infeasible() {
    let mut p = Planner::new(&cluster(&[("a", Spec::dgx())])).unwrap();
    match p.plan(&request(r#"{"bundles": [{"count": 2, "vendor": ["nvidai"]}]}"#)).unwrap_err() {
        PlanError::Unknown { field, suggestion, .. } => {
            assert_eq!((field.as_str(), suggestion.as_deref()), ("vendor", Some("nvidia")))
        }
        other => panic!("expected an unknown name, got {other}"),
    }
    let e = p.plan(&request(r#"{"bundles": [{"count": 2}], "same": "rakc"}"#)).unwrap_err();
    assert_eq!(e.to_string(), r#"unknown domain "rakc"; did you mean "rack"?"#);
    // A vendor the registry knows but the cluster lacks is a shortage.
    let why = infeasible(p.plan(&request(r#"{"bundles": [{"count": 2, "vendor": ["amd"]}]}"#)).unwrap_err());
    assert_eq!(why.constraint, "capability");
}
