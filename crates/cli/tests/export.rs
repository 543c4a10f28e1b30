//! `accel export` and `accel --version` as a user meets them: help, files written whole, and the
//! exit status of bad input (2).

use std::process::{Command, Output};

fn accel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accel")).args(args).env_remove("ACCEL_SKU_DIR").output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Bad input: exit status 2 and one line on stderr naming the problem.
fn bad_input(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(err.contains(needle), "{err}");
}

#[test]
fn version_names_the_commit_and_features() {
    let v = stdout(&accel(&["--version"]));
    assert!(v.starts_with(concat!("accel ", env!("CARGO_PKG_VERSION"), " (git ")), "{v}");
    assert!(v.contains("; features: "), "{v}");
}

#[test]
fn export_help_teaches_each_format() {
    let help = stdout(&accel(&["export", "--help"]));
    for word in ["dra", "nfd", "slurm", "kueue", "kai"] {
        assert!(help.contains(word), "{word} missing: {help}");
    }
    assert!(stdout(&accel(&["export", "dra", "--help"])).contains("pcieRoot"));
    assert!(stdout(&accel(&["export", "nfd", "--help"])).contains("--output"));
    assert!(stdout(&accel(&["export", "slurm", "--help"])).contains("accel cluster --sample"));
}

#[test]
fn nfd_output_is_written_whole_and_leaves_no_temporary_file() {
    let dir = accel_testdata::TempDir::new("nfd");
    let file = dir.join("accel");
    std::fs::write(&file, "old=1\n").unwrap();
    let out = accel(&["export", "nfd", "--sample", "dgx-h100", "--output", file.to_str().unwrap()]);
    assert!(out.status.success() && out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\n# +expiry-time=") && text.contains("\nnvidia.com/gpu.count=8\n"), "{text}");
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["accel"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression (security): the NFD file was written through a predictable temporary name
/// (`.NAME.tmp.<pid>`) that `std::fs::write` followed if it was a symlink, so a local user who
/// could write to the features directory made `accel` (often root) overwrite any file. The
/// shell plants that link for its own pid and `exec`s accel under the same pid.
#[test]
fn nfd_output_never_follows_a_planted_temporary_name() {
    let dir = accel_testdata::TempDir::new("nfd-plant");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let script = format!(
        "ln -s {victim} {dir}/.features.tmp.$$ && exec {accel} export nfd --sample dgx-h100 --output {dir}/features",
        victim = victim.display(),
        dir = dir.display(),
        accel = env!("CARGO_BIN_EXE_accel"),
    );
    let out = Command::new("sh").arg("-c").arg(&script).env_remove("ACCEL_SKU_DIR").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n", "the write followed the planted link");
    assert!(std::fs::read_to_string(dir.join("features")).unwrap().contains("nvidia.com/gpu.count=8"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_exits_2() {
    bad_input(&accel(&["export", "dra", "--sample", "dgx-h100", "--driver", "Not_A_Domain"]), "DNS subdomain");
    bad_input(
        &accel(&["export", "dra", "--classes", "--sample", "dgx-h100", "--k8s-version", "2.0"]),
        "Kubernetes version \"2.0\": expected 1.MINOR",
    );
    bad_input(
        &accel(&["export", "slurm", "--cluster", "/nonexistent.json", "--out-dir", "/tmp/x"]),
        "cannot read cluster",
    );
    let dir = accel_testdata::TempDir::new("slurm");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"nodes\": 3}").unwrap();
    let out_dir = dir.join("out");
    bad_input(
        &accel(&["export", "slurm", "--cluster", bad.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()]),
        "parsing cluster",
    );
    assert!(!out_dir.exists(), "nothing written for bad input");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cluster of four GB200 trays under a two-leaf switch tree, `clique_trays` trays per NVLink
/// domain, written by `accel cluster`.
fn tray_cluster(dir: &std::path::Path, clique_trays: &str) -> String {
    let conf = dir.join("topology.conf");
    std::fs::write(
        &conf,
        "SwitchName=s1 Nodes=gb200-nvl72-tray-[0-1]\nSwitchName=s2 Nodes=gb200-nvl72-tray-[2-3]\nSwitchName=top Switches=s1,s2\n",
    )
    .unwrap();
    let args = ["cluster", "--sample", "gb200-nvl72-tray:4", "--clique-trays", clique_trays, "--topology"];
    let out = stdout(&accel(&[&args[..], &[conf.to_str().unwrap()]].concat()));
    let file = dir.join(format!("cluster-{clique_trays}.json"));
    std::fs::write(&file, out).unwrap();
    file.to_str().unwrap().to_owned()
}

#[test]
fn kueue_and_kai_topologies_and_their_node_labels() {
    let dir = accel_testdata::TempDir::new("kueue");
    let cluster = tray_cluster(&dir, "2");
    let labels = dir.join("label-nodes.sh");
    let yaml = stdout(&accel(&["export", "kueue", "--cluster", &cluster, "--node-labels", labels.to_str().unwrap()]));
    let levels = "  levels:\n  - nodeLabel: fabric.topograph.run/tier-1\n  - nodeLabel: fabric.topograph.run/tier-0\n  - nodeLabel: accelerator.topograph.run/domain\n  - nodeLabel: kubernetes.io/hostname\n";
    assert!(yaml.starts_with("---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\n"), "{yaml}");
    assert!(yaml.ends_with(levels), "{yaml}");
    let kai = stdout(&accel(&["export", "kai", "--cluster", &cluster, "--json"]));
    let kai: serde_json::Value = serde_json::from_str(&kai).unwrap();
    assert_eq!(kai["topology"]["apiVersion"], "kai.scheduler/v1alpha1");
    let tray3 = &kai["node_labels"]["gb200-nvl72-tray-3"];
    assert_eq!(tray3["fabric.topograph.run/tier-0"], "s2");
    assert_eq!(tray3["fabric.topograph.run/tier-1"], "top");
    // The label commands carry the same values, one line per node, and never the kubelet's own.
    let commands = std::fs::read_to_string(&labels).unwrap();
    assert_eq!(commands.lines().count(), 4, "{commands}");
    let line = commands.lines().find(|l| l.contains("gb200-nvl72-tray-3 ")).unwrap();
    let domain = tray3["accelerator.topograph.run/domain"].as_str().unwrap();
    assert!(line.contains(&format!("accelerator.topograph.run/domain={domain} ")), "{line}");
    assert!(line.ends_with("fabric.topograph.run/tier-0=s2 fabric.topograph.run/tier-1=top"), "{line}");
    assert!(!commands.contains("kubernetes.io/hostname"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_topology_whose_levels_do_not_nest_is_refused_naming_two_nodes() {
    let dir = accel_testdata::TempDir::new("kueue-nest");
    // Three trays per NVLink domain: trays 0-2 share one, but tray 2 hangs under leaf s2.
    let cluster = tray_cluster(&dir, "3");
    let labels = dir.join("label-nodes.sh");
    for format in ["kueue", "kai"] {
        let out = accel(&["export", format, "--cluster", &cluster, "--node-labels", labels.to_str().unwrap()]);
        bad_input(&out, "the levels do not nest: nodes gb200-nvl72-tray-0 and gb200-nvl72-tray-2 share accelerator.topograph.run/domain=");
        assert!(String::from_utf8_lossy(&out.stderr)
            .contains("fabric.topograph.run/tier-0 is s1 on gb200-nvl72-tray-0 and s2 on gb200-nvl72-tray-2"));
        assert!(out.stdout.is_empty() && !labels.exists(), "nothing written for a refused cluster");
    }
    bad_input(&accel(&["export", "kueue", "--cluster", &cluster, "--name", "Not A Name"]), "not a DNS label");
    std::fs::remove_dir_all(&dir).unwrap();
}
