//! The one rule that names the constraint an infeasible request fails (docs/placement.md, "When
//! a request cannot be met"), one case per kind: `select`; a bundle that fits nowhere alone
//! (`count`, `capability`, `health`, `free`, `nic`, `connectivity`, `same_numa`, `cpus`); and
//! bundles that fit alone but not together: `groups`, `same` or `spread` when removing that one
//! lets the request fit, `capacity` when nothing but fewer bundles would.

mod support;

use std::collections::BTreeMap;

use accel_plan::{Cluster, ClusterNode, MachineRef, Planner};
use support::{build, infeasible, request, Spec};

/// A node: its name, its machine's shape and its labels.
type Node<'a> = (&'a str, Spec, &'a [(&'a str, &'a str)]);

/// A cluster of nodes.
fn cluster(nodes: &[Node<'_>]) -> Cluster {
    Cluster {
        nodes: nodes
            .iter()
            .map(|(name, spec, labels)| ClusterNode {
                name: (*name).to_owned(),
                labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>(),
                machine: MachineRef::Inline(Box::new(build(spec))),
                allocated: Vec::new(),
            })
            .collect(),
        ..Default::default()
    }
}

/// Plans `json` on `c` and checks the constraint named, and that the message starts as given.
fn check(c: &Cluster, json: &str, constraint: &str, message: &str) -> accel_plan::Infeasible {
    let mut p = Planner::new(c).unwrap();
    let why = infeasible(p.plan(&request(json)).unwrap_err());
    assert_eq!(why.constraint, constraint, "{json}: {why:?}");
    assert!(why.message.starts_with(message), "{json}: {}", why.message);
    why
}

fn dgx(name: &str) -> Node<'_> {
    (name, Spec::dgx(), &[("rack", "r1")])
}

fn trays(n: usize, per_clique: usize) -> Cluster {
    let names: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    let cliques: Vec<String> = (0..n).map(|i| format!("c{}", i / per_clique)).collect();
    let nodes: Vec<Node<'_>> =
        names.iter().zip(&cliques).map(|(name, clique)| (name.as_str(), Spec::tray(clique), &[][..])).collect();
    cluster(&nodes)
}

#[test]
fn select_names_a_value_no_node_carries() {
    check(
        &cluster(&[dgx("a")]),
        r#"{"bundles": [{"count": 1}], "select": {"rack": "r2"}}"#,
        "select",
        "no node carries rack=r2",
    );
}

#[test]
fn count_more_devices_than_any_node_has() {
    check(&cluster(&[dgx("a")]), r#"{"bundles": [{"count": 9}]}"#, "count", "bundle 0: no node has 9 accelerators");
}

#[test]
fn capability_a_vendor_the_cluster_lacks() {
    let why =
        check(&cluster(&[dgx("a")]), r#"{"bundles": [{"count": 1, "vendor": ["amd"]}]}"#, "capability", "bundle 0");
    assert_eq!(why.bundle, Some(0));
}

#[test]
fn health_devices_left_out_as_unhealthy() {
    let mut c = cluster(&[dgx("a")]);
    if let MachineRef::Inline(m) = &mut c.nodes[0].machine {
        for a in m.accelerators.iter_mut().skip(2) {
            a.health = Some(accel_model::Health {
                state: accel_model::HealthState::Unhealthy,
                reasons: vec!["XID 79".into()],
                ..Default::default()
            });
        }
    }
    let why = check(&c, r#"{"bundles": [{"count": 4}]}"#, "health", "bundle 0: no node has 4 healthy accelerators");
    assert!(why.nearest.unwrap().contains("repair or replace"));
}

#[test]
fn free_devices_in_use() {
    let mut c = cluster(&[dgx("a")]);
    c.nodes[0].allocated = build(&Spec::dgx()).accelerators[..6].iter().map(|a| a.id.clone()).collect();
    check(&c, r#"{"bundles": [{"count": 4}]}"#, "free", "bundle 0: no node has 4 free accelerators");
}

#[test]
fn nic_no_rdma_nic_near() {
    let c = cluster(&[("p", Spec::pcie(8), &[])]);
    check(&c, r#"{"bundles": [{"count": 2, "nic": "pxb"}]}"#, "nic", "bundle 0: no node has 2 free matching");
}

#[test]
fn connectivity_no_scale_up_link() {
    let c = cluster(&[("p", Spec::pcie(8), &[])]);
    check(&c, r#"{"bundles": [{"count": 2, "connectivity": "scale-up"}]}"#, "connectivity", "bundle 0");
}

#[test]
fn same_numa_more_than_one_numa_node_holds() {
    check(&cluster(&[dgx("a")]), r#"{"bundles": [{"count": 5, "same_numa": true}]}"#, "same_numa", "bundle 0");
}

#[test]
fn cpus_more_cores_than_the_numa_nodes_have() {
    // Each NUMA node of the test machines has 16 cores.
    check(&cluster(&[dgx("a")]), r#"{"bundles": [{"count": 1, "cpus": 40}]}"#, "cpus", "bundle 0");
}

#[test]
fn same_one_domain_too_small_for_the_gang() {
    // Two cliques of one tray each: two 4-GPU bundles fit, but not in one clique.
    let why = check(
        &trays(2, 1),
        r#"{"bundles": [{"count": 4}, {"count": 4}], "same": "nvlink_clique"}"#,
        "same",
        "no nvlink_clique domain can hold all 2 bundles together",
    );
    assert!(why.nearest.unwrap().starts_with("without same=nvlink_clique: bundle 0 on"));
}

#[test]
fn spread_fewer_nodes_than_bundles() {
    let why = check(
        &cluster(&[dgx("a")]),
        r#"{"bundles": [{"count": 2}, {"count": 2}], "strategy": "spread"}"#,
        "spread",
        "the 2 bundles need 2 different nodes",
    );
    assert!(why.nearest.unwrap().starts_with("with pack instead of spread"));
}

#[test]
fn groups_sub_groups_larger_than_a_domain() {
    // Sub-groups of 8 GPUs, cliques of 4: the bundles fit, the sub-groups do not.
    let json = r#"{"bundles": [{"count": 2}, {"count": 2}, {"count": 2}, {"count": 2}],
                   "groups": {"size": 4, "same": "nvlink_clique"}}"#;
    let why = check(
        &trays(2, 1),
        json,
        "groups",
        "no nvlink_clique domain is left for every sub-group of 4 bundles (8 devices)",
    );
    assert_eq!(why.nearest.as_deref(), Some("without groups: 4 bundles on 2 nodes"));
}

#[test]
fn capacity_bundles_that_fit_alone_but_not_together() {
    let why = check(
        &cluster(&[dgx("a"), dgx("b")]),
        r#"{"bundles": [{"count": 8}, {"count": 8}, {"count": 8}]}"#,
        "capacity",
        "the 3 bundles (24 devices) fit one at a time but not together",
    );
    assert_eq!(why.nearest.as_deref(), Some("the first 2 of 3 bundles fit, on 2 nodes"));
    assert_eq!(why.bundle, None);
}

#[test]
fn capacity_eighteen_bundles_in_three_sub_groups_on_sixteen_gpus() {
    // The case the issue names: 18 one-GPU bundles in 3 sub-groups of 6, 16 free GPUs (four
    // trays, two cliques of 8). Every bundle fits alone and two sub-groups fit: not `groups`
    // with "0 of 3 placed" and no nearest, but `capacity`, with the part that fits.
    let json = format!(
        r#"{{"bundles": [{}], "groups": {{"size": 6, "same": "nvlink_clique"}}}}"#,
        vec![r#"{"count": 1}"#; 18].join(", ")
    );
    let why = check(&trays(4, 2), &json, "capacity", "the 18 bundles (18 devices) fit one at a time but not together");
    assert_eq!(why.nearest.as_deref(), Some("2 of 3 sub-groups (12 bundles) fit, on 4 nodes"));
}

#[test]
fn a_binding_constraint_is_named_only_when_removing_it_helps() {
    // Same clique and spread, 7 free devices for 8: capacity, whatever binds the bundles.
    let mut c = trays(2, 2);
    c.nodes[0].allocated = vec![build(&Spec::tray("c0")).accelerators[0].id.clone()];
    let json = r#"{"bundles": [{"count": 4}, {"count": 4}], "same": "nvlink_clique", "strategy": "spread"}"#;
    check(&c, json, "capacity", "the 2 bundles (8 devices)");
    // Both `same` and `spread` bind, and only removing both lets it fit: the first is named.
    let c = trays(2, 1);
    let json =
        r#"{"bundles": [{"count": 2}, {"count": 2}, {"count": 2}], "same": "nvlink_clique", "strategy": "spread"}"#;
    let why = check(&c, json, "same", "no nvlink_clique domain can hold all 3 bundles together");
    assert!(why.nearest.unwrap().starts_with("without same, spread:"));
}
