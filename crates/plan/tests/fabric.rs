//! Fabric tiers: reading topology.conf (tree and block), accel's topology file and node labels,
//! the hostlist expander, applying a fabric to a cluster, and the tier distance. The files under
//! tests/data/fabric/ are checked against their `.expected` renderings (`UPDATE_EXPECT=1`
//! rewrites them); every error check has broken input here that makes it fail.

use std::collections::BTreeMap;
use std::path::Path;

use accel_plan::fabric::{expand_hostlist, resolve_tier, tiers_crossed, Fabric, MAX_HOSTLIST_NAMES, TOPOGRAPH_TIERS};
use accel_plan::{Cluster, ClusterNode, MachineRef, PlanError};

/// The rendering the `.expected` files hold: the tiers by their last `/` segment, then one line
/// per node with its value per tier.
fn render(f: &Fabric) -> String {
    let short = |t: &str| t.rsplit('/').next().unwrap_or(t).to_owned();
    let mut out = format!("tiers: {}\n", f.tiers.iter().map(|t| short(t)).collect::<Vec<_>>().join(" "));
    for (node, values) in &f.nodes {
        out += node;
        for tier in &f.tiers {
            if let Some(v) = values.get(tier) {
                out += &format!(" {}={v}", short(tier));
            }
        }
        out += "\n";
    }
    out
}

/// Reads `tests/data/fabric/<file>` and compares its rendering with `<stem>.expected`.
fn check(file: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fabric");
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let fabric = if file.ends_with(".json") { Fabric::from_json(&text) } else { Fabric::from_slurm_conf(&text) };
    let got = render(&fabric.unwrap_or_else(|e| panic!("{file}: {e}")));
    let expected = dir.join(file.rsplit_once('.').unwrap().0.to_owned() + ".expected");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&expected, &got).unwrap();
    }
    let want = std::fs::read_to_string(&expected).unwrap_or_default();
    assert_eq!(got, want, "{file} no longer reads to {}", expected.display());
}

/// The error message for broken input, which must contain every one of `parts`.
fn fails(result: Result<Fabric, PlanError>, parts: &[&str]) {
    let message = match result {
        Ok(f) => panic!("expected an error containing {parts:?}, got\n{}", render(&f)),
        Err(e) => e.to_string(),
    };
    for part in parts {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
}

fn hosts(expr: &str) -> Vec<String> {
    expand_hostlist(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn cluster(nodes: &[(&str, &[(&str, &str)])]) -> Cluster {
    Cluster {
        nodes: nodes
            .iter()
            .map(|(name, l)| ClusterNode {
                name: (*name).to_owned(),
                labels: labels(l),
                machine: MachineRef::Name("m".into()),
                allocated: Vec::new(),
            })
            .collect(),
        ..Cluster::default()
    }
}

#[test]
fn slurm_two_level_tree() {
    check("two-level.conf");
}

#[test]
fn slurm_three_level_tree_with_mixed_heights() {
    check("three-level.conf");
}

#[test]
fn slurm_fat_tree_whose_leaves_have_several_parents() {
    check("fat-tree.conf");
}

#[test]
fn slurm_blocks() {
    check("block.conf");
}

#[test]
fn accel_topology_file() {
    check("small.json");
}

#[test]
fn tiers_are_topograph_keys_then_numbered() {
    let mut conf = String::from("SwitchName=l Nodes=n1\n");
    let mut below = "l".to_owned();
    for k in 2..=5 {
        conf += &format!("SwitchName=t{k} Switches={below}\n");
        below = format!("t{k}");
    }
    let f = Fabric::from_slurm_conf(&conf).unwrap();
    assert_eq!(f.tiers[..3], TOPOGRAPH_TIERS);
    assert_eq!(f.tiers[3..], ["tier4", "tier5"]);
    assert_eq!(f.nodes["n1"]["tier5"], "t5");
}

#[test]
fn tree_and_blocks_in_one_file() {
    let f = Fabric::from_slurm_conf("SwitchName=l1 Nodes=n[1-2]\nBlockName=b1 Nodes=n1\n").unwrap();
    assert_eq!(render(&f), "tiers: leaf block\nn1 leaf=l1 block=b1\nn2 leaf=l1\n");
}

#[test]
fn an_empty_leaf_switch_counts_for_its_parents_height() {
    // Slurm takes a switch with neither Nodes= nor Switches= as an empty leaf.
    let f =
        Fabric::from_slurm_conf("SwitchName=empty\nSwitchName=l Nodes=n1\nSwitchName=top Switches=empty,l\n").unwrap();
    assert_eq!(render(&f), "tiers: leaf spine\nn1 leaf=l spine=top\n");
}

#[test]
fn slurm_conf_errors_name_the_line() {
    let conf = |text: &str| Fabric::from_slurm_conf(text);
    fails(
        conf("SwitchName=a Nodes=n[1-4]\nSwitchName=b Nodes=n[4-5]\n"),
        &["line 2", "node n4 is under two leaf switches: a (line 1) and b"],
    );
    fails(conf("SwitchName=a Nodes=n1\nSwitchName=b Switches=a,c\n"), &["line 2", "names switch c", "no SwitchName"]);
    fails(
        conf("SwitchName=l Nodes=n1\nSwitchName=a Switches=l,b\nSwitchName=b Switches=a\n"),
        &["switches form a cycle: a -> b -> a"],
    );
    fails(conf("SwitchName=top Switches=a\nSwitchName=a Switches=a\n"), &["line 2", "cycle: a -> a"]);
    fails(conf("# c\nSwitchName=a Nodes=n[1-\n"), &["line 2", "Nodes=", "invalid hostlist \"n[1-\"", "without ']'"]);
    fails(conf("SwitchName=a Switches=s[2-1]\n"), &["line 1", "Switches=", "runs backwards"]);
    fails(conf("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n"), &["line 2", "already defined on line 1"]);
    fails(conf("SwitchName=a Nodes=n1 Switches=b\nSwitchName=b Nodes=n2\n"), &["line 1", "both Nodes= and Switches="]);
    fails(conf("SwitchName=a Nodes=n1 nodes=n2\n"), &["line 1", "nodes= is given twice"]);
    fails(conf("SwitchName=a Nodes\n"), &["line 1", "expected key=value, found \"Nodes\""]);
    fails(conf("SwitchName=a\\\nNodes=n1\n"), &["line 1", "expected key=value", "SwitchName=aNodes=n1"]);
    fails(conf("SwitchName= Nodes=n1\n"), &["line 1", "SwitchName= has no name"]);
    fails(
        conf("RingName=r0 Nodes=n[1-8]\n"),
        &["line 1", "expected SwitchName=, BlockName= or BlockSizes=, found RingName="],
    );
    fails(conf("SwitchName=a BlockName=b Nodes=n1\n"), &["not both"]);
    fails(
        conf("BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n2\n"),
        &["line 2", "node n2 is in two blocks: b1 (line 1) and b2"],
    );
    fails(conf("BlockName=b1 Nodes=n1\nBlockName=b1 Nodes=n2\n"), &["line 2", "block b1 is already defined on line 1"]);
    fails(conf("BlockName=b1\n"), &["line 1", "block b1 has no Nodes="]);
    fails(conf("BlockName=b1 Nodes=n1\nblocksizes=4,x\n"), &["line 2", "blocksizes= holds \"x\""]);
    fails(conf("BlockName=b1 Nodes=n1\nBlockSizes=0\n"), &["line 2", "not a positive number"]);
    fails(conf("# nothing\n\n"), &["no SwitchName= or BlockName= lines"]);
    let mut tall = String::from("SwitchName=s0 Nodes=n1\n");
    for k in 1..=16 {
        tall += &format!("SwitchName=s{k} Switches=s{}\n", k - 1);
    }
    fails(conf(&tall), &["17 tiers tall, more than 16"]);
    // Many leaves each asking for a large range: the budget is the whole file's, not a line's.
    let big: String = (0..3).map(|k| format!("SwitchName=l{k} Nodes=b{k}n[1-400000]\n")).collect();
    fails(conf(&big), &["line 3", &format!("more than {MAX_HOSTLIST_NAMES} names")]);
}

#[test]
fn slurm_conf_layout() {
    // Comments anywhere, blank lines, continuations, keys in any case, unknown keys, CRLF.
    let text = "  # header\r\n\r\nswitchNAME=a   nodes=n[1-2],\\\r\nn3 LinkSpeed=100 Whatever=x # trailing\r\n";
    let f = Fabric::from_slurm_conf(text).unwrap();
    assert_eq!(render(&f), "tiers: leaf\nn1 leaf=a\nn2 leaf=a\nn3 leaf=a\n");
    // A node listed twice under the same leaf is harmless.
    assert!(Fabric::from_slurm_conf("SwitchName=a Nodes=n1,n[1-2]\n").is_ok());
}

#[test]
fn hostlists() {
    assert_eq!(hosts("tux[0-3,7]"), ["tux0", "tux1", "tux2", "tux3", "tux7"]);
    assert_eq!(hosts("gpu[01-03]")[..], ["gpu01", "gpu02", "gpu03"]);
    assert_eq!(hosts("gpu[08-10]"), ["gpu08", "gpu09", "gpu10"]);
    assert_eq!(hosts("n[1-10]")[8..], ["n9", "n10"]);
    assert_eq!(hosts("n[001-2]"), ["n001", "n002"]);
    assert_eq!(hosts("a,b[1-2],c"), ["a", "b1", "b2", "c"]);
    assert_eq!(hosts("r[1-2]n[1-2]"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
    assert_eq!(hosts("node[1-2]-ib"), ["node1-ib", "node2-ib"]);
    assert_eq!(hosts("x[3,1]"), ["x3", "x1"]);
    assert_eq!(hosts("[1-2]"), ["1", "2"]);
    assert_eq!(hosts("plain.example.com"), ["plain.example.com"]);
    assert_eq!(hosts("n[0-999999]").len(), MAX_HOSTLIST_NAMES);
    for (bad, why) in [
        ("", "empty"),
        ("a,,b", "an empty name"),
        ("a,", "an empty name"),
        ("a[1-2", "'[' without ']'"),
        ("a1-2]", "']' without '['"),
        ("a[[1]]", "do not nest"),
        ("a[]", "not a number"),
        ("a[1-x]", "\"x\", not a number"),
        ("a[1-2-3]", "\"2-3\", not a number"),
        ("a[-1]", "\"\", not a number"),
        ("a[3-1]", "runs backwards"),
        ("a b", "unexpected ' '"),
        ("a[99999999999999999999]", "too large"),
        ("n[0-1000000]", "more than 1000000 names"),
        ("a[0-999]b[0-999]c[0-1]", "more than 1000000 names"),
        ("a[0-18446744073709551615]", "more than 1000000 names"),
        ("a[0-9]b[0-9]c[0-9]d[0-9]e[0-9]f[0-9]g[0-9]", "more than 1000000 names"),
    ] {
        let e = expand_hostlist(bad).expect_err(bad).to_string();
        assert!(e.contains(why) && e.contains(&format!("{bad:?}")), "{bad:?}: {e}");
    }
    let long = format!("{}[1-2]", "x".repeat(255));
    assert!(expand_hostlist(&long).unwrap_err().to_string().contains("longer than 255 bytes"));
    assert_eq!(hosts(&"x".repeat(255)).len(), 1);
}

#[test]
fn topology_file_errors() {
    let json = |text: &str| Fabric::from_json(text);
    fails(json(r#"{"tiers": ["leaf"], "nodes": {}, "extra": 1}"#), &["topology file", "unknown field `extra`"]);
    fails(json(r#"{"nodes": {}}"#), &["missing field `tiers`"]);
    fails(json(r#"{"tiers": ["leaf"], "nodes": {"n1": {"spine": "s"}}}"#), &["nodes \"n1\"", "unknown tier \"spine\""]);
    fails(json(r#"{"tiers": ["leaf", "leaf"]}"#), &["tier \"leaf\" is listed twice"]);
    fails(json(r#"{"tiers": [""]}"#), &["a tier key is empty"]);
    fails(
        json(r#"{"tiers": ["a/leaf"], "nodes": {"n1": {"leaf": "x", "a/leaf": "x"}}}"#),
        &["tier \"a/leaf\" is given twice"],
    );
    fails(
        json(r#"{"tiers": ["leaf"], "nodes": {"n[1-3]": {"leaf": "a"}, "n2": {"leaf": "b"}}}"#),
        &["node \"n2\" is listed twice: in \"n2\" and in \"n[1-3]\""],
    );
    fails(json(r#"{"tiers": ["leaf"], "nodes": {"n[1-": {"leaf": "a"}}}"#), &["invalid hostlist \"n[1-\""]);
    fails(json(r#"{"tiers": ["leaf"], "nodes": {"n1": {"leaf": ""}}}"#), &["node \"n1\" has an empty value"]);
    // Serializing gives the plain per-node form, which reads back to the same fabric.
    let f = json(r#"{"tiers": ["x/leaf"], "nodes": {"n[1-2]": {"leaf": "a"}}}"#).unwrap();
    let text = serde_json::to_string(&f).unwrap();
    assert_eq!(text, r#"{"tiers":["x/leaf"],"nodes":{"n1":{"x/leaf":"a"},"n2":{"x/leaf":"a"}}}"#);
    assert_eq!(Fabric::from_json(&text).unwrap(), f);
}

#[test]
fn labels_round_trip_through_apply() {
    let fabric =
        Fabric::from_slurm_conf("SwitchName=l1 Nodes=a,b\nSwitchName=l2 Nodes=c\nSwitchName=s Switches=l[1-2]\n")
            .unwrap();
    let mut c = cluster(&[("a", &[("rack", "r1")]), ("b", &[]), ("c", &[])]);
    assert_eq!(fabric.apply(&mut c).unwrap(), Vec::<String>::new());
    assert_eq!(c.tiers, TOPOGRAPH_TIERS[..2]);
    assert_eq!(c.nodes[0].labels["rack"], "r1");
    assert_eq!(c.nodes[0].labels[TOPOGRAPH_TIERS[0]], "l1");
    assert_eq!(c.nodes[2].labels[TOPOGRAPH_TIERS[1]], "s");
    assert_eq!(Fabric::from_labels(&c), fabric);
    // Applying the same fabric again changes nothing and is no conflict.
    let before = c.clone();
    assert!(fabric.apply(&mut c).unwrap().is_empty());
    assert_eq!(c, before);
}

#[test]
fn apply_warns_about_nodes_on_one_side_only() {
    let fabric =
        Fabric::from_json(r#"{"tiers": ["leaf"], "nodes": {"n[1-2]": {"leaf": "l1"}, "ghost[1-12]": {"leaf": "l2"}}}"#)
            .unwrap();
    let mut c = cluster(&[("n1", &[]), ("n2", &[]), ("extra", &[])]);
    let warnings = fabric.apply(&mut c).unwrap();
    assert_eq!(
        warnings,
        [
            "the fabric names 12 nodes the cluster lacks: ghost1, ghost10, ghost11, ghost12, ghost2, ghost3, ghost4, \
         ghost5, ghost6, ghost7, ... (2 more)",
            "no tier labels for 1 node of the cluster, which the fabric does not mention: extra",
        ]
    );
    assert_eq!(c.nodes[1].labels["leaf"], "l1");
    assert!(c.nodes[2].labels.is_empty());
}

#[test]
fn apply_refuses_a_conflicting_label_and_writes_nothing() {
    let fabric =
        Fabric::from_json(r#"{"tiers": ["leaf", "spine"], "nodes": {"n[1-2]": {"leaf": "l1", "spine": "s1"}}}"#)
            .unwrap();
    let mut c = cluster(&[("n1", &[]), ("n2", &[("spine", "s9")])]);
    let before = c.clone();
    let e = fabric.apply(&mut c).unwrap_err().to_string();
    assert!(e.contains("node \"n2\" carries spine=\"s9\", but the fabric says \"s1\""), "{e}");
    assert_eq!(c, before);
    // A fabric built by hand is checked too.
    let mut hand = Fabric { tiers: vec!["leaf".into()], nodes: BTreeMap::new() };
    hand.nodes.insert("n1".into(), labels(&[("spine", "s1")]));
    let e = hand.apply(&mut c).unwrap_err().to_string();
    assert!(e.contains("node \"n1\" has a value for \"spine\", which is not one of the tiers"), "{e}");
}

#[test]
fn from_labels_finds_default_tiers_or_uses_the_clusters() {
    let c = cluster(&[
        ("a", &[(TOPOGRAPH_TIERS[0], "l1"), (TOPOGRAPH_TIERS[2], "c1"), ("block", "b1"), ("rack", "r1")]),
        ("b", &[(TOPOGRAPH_TIERS[0], "")]),
    ]);
    let f = Fabric::from_labels(&c);
    assert_eq!(f.tiers, [TOPOGRAPH_TIERS[0], TOPOGRAPH_TIERS[2], "block"]);
    assert_eq!(render(&f), "tiers: leaf core block\na leaf=l1 core=c1 block=b1\nb\n");
    let mut c = c;
    c.tiers = vec!["rack".into()];
    assert_eq!(render(&Fabric::from_labels(&c)), "tiers: rack\na rack=r1\nb\n");
}

#[test]
fn tiers_crossed_counts_up_to_the_lowest_shared_tier() {
    let f = Fabric::from_slurm_conf(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fabric/three-level.conf"))
            .unwrap(),
    )
    .unwrap();
    let crossed = |a: &str, b: &str| tiers_crossed(&f.tiers, &f.nodes[a], &f.nodes[b]);
    assert_eq!(crossed("dgx001", "dgx004"), 1, "same leaf");
    assert_eq!(crossed("dgx001", "dgx005"), 2, "same spine");
    assert_eq!(crossed("dgx001", "dgx009"), 3, "same core");
    assert_eq!(crossed("dgx001", "login1"), 3, "the login leaf hangs off the core");
    assert_eq!(crossed("dgx001", "mgmt01"), 4, "nothing shared");
    assert_eq!(crossed("login1", "mgmt01"), 4);
    // A tier both lack is not shared.
    assert_eq!(tiers_crossed(&f.tiers, &BTreeMap::new(), &BTreeMap::new()), 4);
    assert_eq!(tiers_crossed(&[], &BTreeMap::new(), &BTreeMap::new()), 1);
}

#[test]
fn resolve_tier_takes_the_key_or_its_last_segment() {
    let tiers: Vec<String> =
        TOPOGRAPH_TIERS.iter().map(|t| (*t).to_owned()).chain(["block".into(), "x/block".into()]).collect();
    assert_eq!(resolve_tier(&tiers, "spine"), Some(TOPOGRAPH_TIERS[1]));
    assert_eq!(resolve_tier(&tiers, TOPOGRAPH_TIERS[2]), Some(TOPOGRAPH_TIERS[2]));
    assert_eq!(resolve_tier(&tiers, "block"), Some("block"), "an exact key wins over a last segment");
    assert_eq!(resolve_tier(&tiers, "topology.nvidia.com/leaf"), None, "only the last segment");
    assert_eq!(resolve_tier(&tiers, "rack"), None);
}
