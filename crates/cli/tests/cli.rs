//! The command line as a user meets it: help, errors, the registry and user SKU files.

use std::path::Path;
use std::process::{Command, Output};

fn accel(args: &[&str], sku_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_accel"));
    cmd.args(args).env_remove("ACCEL_SKU_DIR");
    if let Some(dir) = sku_dir {
        cmd.env("ACCEL_SKU_DIR", dir);
    }
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// A failure is one line on stderr, naming the problem, with a non-zero exit.
fn one_line_error(out: &Output) -> String {
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    err
}

#[test]
fn help_teaches_every_command() {
    let top = stdout(&accel(&["--help"], None));
    for word in ["discover", "topo", "skus", "ACCEL_SKU_DIR", "Examples"] {
        assert!(top.contains(word), "{word} missing from --help");
    }
    for cmd in ["discover", "topo"] {
        let help = stdout(&accel(&[cmd, "--help"], None));
        assert!(help.contains("--root") && help.contains("--json") && help.contains("--sku-file"), "{help}");
    }
    assert!(stdout(&accel(&["skus", "--help"], None)).contains("--json"));
}

#[test]
fn bad_arguments_and_roots_fail_cleanly() {
    let err = one_line_error(&accel(&["topo", "--root", "/nonexistent/capture"], None));
    assert!(err.contains("cannot read root /nonexistent/capture"), "{err}");
    let empty = tempdir("empty-root");
    let err = one_line_error(&accel(&["discover", "--root", empty.to_str().unwrap()], None));
    assert!(err.contains("has no sys/ directory"), "{err}");
    let out = accel(&["topo", "--frobnicate"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--frobnicate'"));
    let bad_sku = empty.join("bad.toml");
    std::fs::write(&bad_sku, "[[sku]]\nid = 3\n").unwrap();
    let err = one_line_error(&accel(&["skus", "--sku-file", bad_sku.to_str().unwrap()], None));
    assert!(err.contains("bad.toml"), "{err}");
}

#[test]
fn skus_lists_the_registry_with_sources() {
    let json: serde_json::Value = serde_json::from_str(&stdout(&accel(&["skus", "--json"], None))).unwrap();
    let skus = json.as_array().unwrap();
    assert!(skus.len() >= 30);
    assert!(skus.iter().all(|s| !s["sources"].as_array().unwrap().is_empty()));
    let h100 = skus.iter().find(|s| s["id"] == "nvidia-h100-sxm").expect("H100 SXM listed");
    assert_eq!(h100["pci"][0]["device"], "0x2330");
    let text = stdout(&accel(&["skus"], None));
    assert!(text.contains("nvidia-h100-sxm") && text.contains("SKUs."));
}

/// A vendor's SKU file dropped into ACCEL_SKU_DIR turns an unclaimed co-processor into a known
/// accelerator, without a rebuild; without it the function stays what it is, an offload function
/// in the PCI tree and the attributes, with no accelerator, resource or label. (hwloc's capture
/// of a Xeon host with a Xeon Phi coprocessor, 8086:225c, class 0x0b40.)
#[test]
fn sku_dir_teaches_new_hardware() {
    let root = accel_testdata::hwloc_linux_root("32em64t-2n8c+dax+nvme+mic+dimms");
    let root = root.to_str().unwrap();
    let before: serde_json::Value =
        serde_json::from_str(&stdout(&accel(&["discover", "--root", root, "--json"], None))).unwrap();
    assert!(before["accelerators"].as_array().unwrap().is_empty());
    assert!(before["pci"].as_array().unwrap().iter().any(|n| n["id"] == "0000:83:00.0" && n["class"] == "0x0b4000"));
    let offload = before["attributes"]["offload.0000:83:00.0"].as_str().unwrap();
    assert!(offload.starts_with("Co-Processor 8086:225c"), "{offload}");
    let labels = stdout(&accel(&["labels", "--root", root], None));
    assert!(!labels.contains("accelerator-count"), "{labels}");
    // No Ray resource, and no DRA device either.
    let ray = stdout(&accel(&["labels", "--root", root, "--format", "ray"], None));
    assert!(!ray.contains("accel_dev_"), "{ray}");
    let cluster_dir = tempdir("sku-dir-cluster");
    let cluster = cluster_dir.join("cluster.json");
    let built = accel(&["cluster", "build", &format!("mic={root}"), "-o", cluster.to_str().unwrap()], None);
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let dra = accel(&["export", "dra", "--cluster", cluster.to_str().unwrap()], None);
    assert!(
        !String::from_utf8_lossy(&dra.stdout).contains("ResourceSlice"),
        "{}",
        String::from_utf8_lossy(&dra.stdout)
    );

    let dir = tempdir("sku-dir");
    std::fs::write(
        dir.join("phi.toml"),
        r#"
[[sku]]
id = "intel-xeon-phi-coprocessor"
vendor = "intel"
product = "Intel Xeon Phi Coprocessor"
family = "knights-corner"
memory_bytes = 8589934592
sources = ["https://github.com/pciutils/pciids/blob/master/pci.ids"]
[[sku.pci]]
vendor = 0x8086
device = 0x225c
"#,
    )
    .unwrap();
    let after: serde_json::Value =
        serde_json::from_str(&stdout(&accel(&["discover", "--root", root, "--json"], Some(&dir)))).unwrap();
    let acc = &after["accelerators"][0];
    assert_eq!(acc["product"], "Intel Xeon Phi Coprocessor");
    assert_eq!(acc["sku"], "intel-xeon-phi-coprocessor");
    assert_eq!(acc["memory_bytes"], 8589934592u64);
    assert!(after["attributes"].get("offload.0000:83:00.0").is_none());
    let skus = stdout(&accel(&["skus"], Some(&dir)));
    assert!(skus.contains("intel-xeon-phi-coprocessor"));
}

/// A user SKU file reaches every consumer: discovery resolves its dtypes onto the devices, the
/// planner meets a `dtypes` constraint from them (it keeps no registry of its own), and the
/// labels carry its Ray accelerator type.
#[test]
fn user_sku_file_works_end_to_end() {
    let dir = tempdir("sku-e2e");
    let sku = dir.join("nec.toml");
    std::fs::write(
        &sku,
        r#"
[[sku]]
id = "nec-sx-aurora-ve-type20"
vendor = "nec"
product = "NEC SX-Aurora TSUBASA Vector Engine Type 20"
family = "sx-aurora"
dtypes = ["fp64", "fp32", "bf16"]
ray_accelerator_type = "NEC-VE-20"
sources = ["https://www.nec.com/en/global/solutions/hpc/sx/vector_engine.html"]
[[sku.pci]]
vendor = 0x1bcf
device = 0x001c
"#,
    )
    .unwrap();
    let sku = sku.to_str().unwrap();
    let source = ["--sample", "hwloc-2p8co2t-8ve"];
    let discover = |extra: &[&str]| -> serde_json::Value {
        let args: Vec<&str> = ["discover", "--json"].iter().chain(&source).chain(extra).copied().collect();
        serde_json::from_str(&stdout(&accel(&args, None))).unwrap()
    };
    let plan = |machine: serde_json::Value| -> Output {
        let cluster = dir.join("cluster.json");
        std::fs::write(&cluster, serde_json::json!({"nodes": [{"name": "n0", "machine": machine}]}).to_string())
            .unwrap();
        let request = dir.join("request.json");
        std::fs::write(&request, r#"{"bundles": [{"count": 2, "dtypes": ["bf16"]}]}"#).unwrap();
        accel(&["plan", "--cluster", cluster.to_str().unwrap(), "--request", request.to_str().unwrap(), "--json"], None)
    };
    let with = discover(&["--sku-file", sku]);
    assert_eq!(with["accelerators"][0]["dtypes"], serde_json::json!(["fp64", "fp32", "bf16"]));
    let placed: serde_json::Value = serde_json::from_str(&stdout(&plan(with))).unwrap();
    assert_eq!(placed["bundles"][0]["devices"].as_array().unwrap().len(), 2, "{placed}");
    // Without the file the devices have the built-in entry's dtypes (no bf16), and the same
    // request cannot be met.
    assert!(!plan(discover(&[])).status.success());
    let labels = stdout(&accel(&["labels", "--sample", "hwloc-2p8co2t-8ve", "--sku-file", sku], None));
    assert!(labels.contains("accel.io/accelerator-type=NEC-VE-20"), "{labels}");
}

/// `accel topo` on this machine works and, without accelerators, still shows its structure.
#[test]
fn topo_on_the_live_machine() {
    let text = stdout(&accel(&["topo"], None));
    assert!(text.contains("NUMA nodes (") && text.contains("PCI tree ("), "{text}");
    let discovered: serde_json::Value = serde_json::from_str(&stdout(&accel(&["discover", "--json"], None))).unwrap();
    if discovered["accelerators"].as_array().unwrap().is_empty() {
        assert!(text.contains("No accelerators found."), "{text}");
    }
}

fn tempdir(name: &str) -> accel_testdata::TempDir {
    accel_testdata::TempDir::new(&format!("cli-test-{name}"))
}

#[test]
fn agent_refuses_a_network_listener_without_a_token() {
    let out = accel(&["agent", "--sample", "gb200-nvl72-tray", "--listen", "0.0.0.0:0"], None);
    assert_eq!(out.status.code(), Some(2), "invalid usage exits 2");
    let err = one_line_error(&out);
    assert!(err.contains("refusing to listen on 0.0.0.0:0 without a token") && err.contains("--token-file"), "{err}");
    let dir = tempdir("agent-token");
    let short = dir.join("token");
    std::fs::write(&short, "tooshort\n").unwrap();
    std::fs::set_permissions(&short, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let out = accel(&["agent", "--listen", "0.0.0.0:0", "--token-file", short.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).contains("at least 16 characters"));
    assert!(stdout(&accel(&["agent", "--help"], None)).contains("--token-file"));
}

#[test]
fn labels_predict_a_node_before_it_exists() {
    // The instance type gives the same labels as the real capture of one, bar the memory.
    let predicted = stdout(&accel(&["labels", "--predict", "p5en.48xlarge", "--format", "k8s"], None));
    let found = stdout(&accel(&["labels", "--sample", "aws-p5en-48xlarge", "--format", "k8s"], None));
    let without_memory =
        |t: &str| t.lines().filter(|l| !l.starts_with("nvidia.com/gpu.memory=")).collect::<Vec<_>>().join("\n");
    assert_eq!(without_memory(&predicted), without_memory(&found));
    let out = accel(&["labels", "--predict", "aws-p5en-48xlarge"], None);
    assert!(stdout(&out).starts_with("--num-gpus=8 --labels='accel.io/accelerator-count=8,"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("predicted from system aws-p5en-48xlarge, sku nvidia-h200-sxm; not predicted: "), "{err}");
    // Unknown names and a node source beside --predict are usage errors (2), with a hint.
    let out = accel(&["labels", "--predict", "p5en.48xlarg"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).contains("did you mean \"p5en.48xlarge\"?"));
    assert_eq!(accel(&["labels", "--predict", "p5en.48xlarge", "--sample", "dgx-h100"], None).status.code(), Some(2));
}

#[test]
fn preflight_names_the_nic_link_and_fingerprint_that_differ() {
    let dir = accel_testdata::TempDir::new("preflight");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let machine = stdout(&accel(&["discover", "--sample", "dgx-h100", "--json"], None));
    let env = stdout(&accel(&["env", "--sample", "dgx-h100", "--json"], None));
    let (expect, fp) = (write("expected.json", &machine), write("env.json", &env));
    let ok = accel(&["preflight", "--expect", &expect, "--fingerprint", &fp, "--sample", "dgx-h100"], None);
    assert_eq!(stdout(&ok), "passed: health, devices, links, nics, fingerprint\n");
    // The job expects faster NICs, more links and another accel build.
    let mut m: serde_json::Value = serde_json::from_str(&machine).unwrap();
    m["nics"][0]["speed_mbps"] = 800_000.into();
    m["links"][0]["count"] = 24.into();
    let mut f: serde_json::Value = serde_json::from_str(&env).unwrap();
    f["fields"]["accel.version"]["value"] = "9.9.9".into();
    let (expect, fp) = (write("expected.json", &m.to_string()), write("env.json", &f.to_string()));
    let out = accel(&["preflight", "--expect", &expect, "--fingerprint", &fp, "--sample", "dgx-h100"], None);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    for line in [
        "FAIL links: link GPU0-GPU1 nvswitch has 18 links up, expected 24",
        "FAIL nics: NIC mlx5_0 runs at 400000 Mb/s, expected 800000 Mb/s",
        &format!("FAIL fingerprint: accel.version is {}, expected 9.9.9", env!("CARGO_PKG_VERSION")),
        "failed: health, devices, links, nics, fingerprint",
    ] {
        assert!(text.contains(line), "{line:?} missing from {text}");
    }
    assert!(one_line_error(&out).contains("pre-flight failed: 3 difference(s)"));
    // A file that is no machine is invalid input (2), not a failed screen.
    let bad = write("bad.json", "{\"nodes\": 1}");
    let out = accel(&["preflight", "--expect", &bad, "--sample", "dgx-h100"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).contains("is not a machine as `accel discover --json` writes it"));
    std::fs::remove_dir_all(&dir).unwrap();
}
