//! An external plugin for a family accel does not know (the example Huawei Ascend plugin,
//! examples/plugins/ascend, written from docs/plugin-protocol.md) reaches every output a
//! built-in family reaches, with no change to accel: `topo` with its own link kind, `discover`,
//! Ray labels with its resource and units, `plan` with the environment from its own `isolate`,
//! Kubernetes labels, DRA and NFD, and Slurm gres under its own name.

use std::path::PathBuf;
use std::process::{Command, Output};

use accel_testdata::TempDir;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/plugins/ascend")
}

fn accel(args: &[&str], plugin_dir: Option<&std::path::Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_accel"));
    cmd.args(args).env_remove("ACCEL_SKU_DIR").env_remove("ACCEL_PLUGIN_DIR");
    if let Some(dir) = plugin_dir {
        cmd.env("ACCEL_PLUGIN_DIR", dir);
    }
    cmd.output().unwrap()
}

fn stdout(out: Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn capture() -> String {
    example().join("capture").to_str().unwrap().to_owned()
}

#[test]
fn topo_shows_its_own_link_kind() {
    let topo = stdout(accel(&["topo", "--root", &capture()], Some(&example())));
    assert!(topo.contains("HCCS1"), "{topo}");
    assert!(topo.contains("HCCS# = Huawei Cache Coherence System (HCCS)"), "{topo}");
    // No legend line for kinds this machine does not have.
    assert!(!topo.contains("NV#") && !topo.contains("XGMI#"), "{topo}");
    let m: serde_json::Value =
        serde_json::from_str(&stdout(accel(&["discover", "--root", &capture(), "--json"], Some(&example())))).unwrap();
    assert_eq!(m["links"].as_array().unwrap().len(), 28, "8 NPUs, every pair");
    assert_eq!(m["link_kinds"][0]["kind"], "hccs");
    assert_eq!(m["k8s_labels"]["accelerator"], "huawei-Ascend910");
}

#[test]
fn ray_and_kubernetes_labels_carry_its_resource_and_labels() {
    let ray = stdout(accel(&["labels", "--root", &capture()], Some(&example())));
    assert!(ray.contains("\"NPU\":8.0") && ray.contains("accel.io/scaleup-kind=hccs"), "{ray}");
    assert!(!ray.contains("--num-gpus"), "NPUs are not Ray GPUs: {ray}");
    let k8s = stdout(accel(&["labels", "--root", &capture(), "--format", "k8s"], Some(&example())));
    assert!(k8s.contains("accelerator=huawei-Ascend910"), "{k8s}");
    let dir = TempDir::new("external-nfd");
    let file = dir.path().join("accel");
    stdout(accel(&["export", "nfd", "--root", &capture(), "--output", file.to_str().unwrap()], Some(&example())));
    let nfd = std::fs::read_to_string(&file).unwrap();
    assert!(nfd.contains("accelerator=huawei-Ascend910") && nfd.contains("accel.io/accelerator-count=8"), "{nfd}");
    let dra = stdout(accel(&["export", "dra", "--root", &capture()], Some(&example())));
    assert_eq!(dra.matches("string: Huawei Ascend 910B").count(), 8, "{dra}");
    assert_eq!(dra.matches("string: hccs").count(), 8, "its scale-up island, by its own kind: {dra}");
}

#[test]
fn its_k8s_resource_reaches_its_dra_device_class() {
    // The plugin declares `k8s_resource` and no DRA driver: its class selects accel's own
    // slices by vendor, is marked as needing a kubelet plugin, and from Kubernetes 1.37 serves
    // the plugin's extended resource.
    let args = ["export", "dra", "--classes", "--k8s-version", "1.37", "--root"];
    let classes = stdout(accel(&[&args[..], &[capture().as_str()]].concat(), Some(&example())));
    let docs: Vec<serde_json::Value> =
        classes.split("---\n").filter(|d| !d.trim().is_empty()).map(|d| serde_norway::from_str(d).unwrap()).collect();
    let doc = docs.iter().find(|d| d["kind"] == "DeviceClass").unwrap();
    // Its HCCS island of 8 gets a claim template that keeps a claim inside it.
    let island = docs.iter().find(|d| d["kind"] == "ResourceClaimTemplate").unwrap();
    assert_eq!(island["metadata"]["name"], "accel-npu-huawei-x8");
    assert_eq!(island["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"], "accel-npu-huawei");
    assert_eq!(doc["kind"], "DeviceClass");
    assert_eq!(doc["metadata"]["name"], "accel-npu-huawei");
    assert_eq!(doc["spec"]["extendedResourceName"], "huawei.com/Ascend910");
    assert_eq!(
        doc["spec"]["selectors"][0]["cel"]["expression"],
        r#"device.driver == "accel.io" && device.attributes["accel.io"].vendor == "huawei""#
    );
    assert!(doc["metadata"]["annotations"]["accel.io/needs-kubelet-plugin"].is_string());
    // Before 1.37 the class carries no extended resource.
    let older = stdout(accel(&["export", "dra", "--classes", "--root", &capture()], Some(&example())));
    assert!(!older.contains("extendedResourceName") && older.contains("accel-npu-huawei"), "{older}");
}

/// A cluster file of two Atlas nodes discovered through the plugin.
fn cluster(dir: &TempDir) -> PathBuf {
    let m: serde_json::Value =
        serde_json::from_str(&stdout(accel(&["discover", "--root", &capture(), "--json"], Some(&example())))).unwrap();
    let path = dir.path().join("cluster.json");
    let nodes = serde_json::json!({"nodes": [{"name": "atlas-0", "machine": m}, {"name": "atlas-1", "machine": m}]});
    std::fs::write(&path, nodes.to_string()).unwrap();
    path
}

#[test]
fn plan_prints_the_environment_from_the_nodes_own_plugin() {
    let dir = TempDir::new("external-plan");
    let cluster = cluster(&dir);
    let request = dir.path().join("request.json");
    std::fs::write(&request, r#"{"bundles": [{"count": 4, "dtypes": ["bf16"]}]}"#).unwrap();
    let args = ["plan", "--cluster", cluster.to_str().unwrap(), "--request", request.to_str().unwrap()];
    let placed: serde_json::Value =
        serde_json::from_str(&stdout(accel(&[&args[..], &["--json"]].concat(), Some(&example())))).unwrap();
    let bundle = &placed["bundles"][0];
    let ids: Vec<String> = bundle["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["label"].as_str().unwrap().trim_start_matches("NPU").to_owned())
        .collect();
    assert_eq!(bundle["env"]["ASCEND_RT_VISIBLE_DEVICES"], ids.join(","), "{placed}");
    assert_eq!(bundle["env"]["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"], "1", "{placed}");
    let human = stdout(accel(&args, Some(&example())));
    assert!(human.contains(&format!(" ASCEND_RT_VISIBLE_DEVICES={} ", ids.join(","))), "{human}");

    // The node's plugin, not the planning host's, decides the values: discovery stores each
    // device's isolation value as the node's plugin gives it, and `accel plan` reads that (as
    // the Ray path does), whatever plugin of that name this host has, or none, and without
    // starting one.
    let other = TempDir::new("external-plan-plugin");
    let script = std::fs::read_to_string(example().join("accel-plugin-ascend")).unwrap();
    let patched = script.replace("isolation=[str(logical)],", "isolation=[f\"npu-{logical}\"],");
    assert_ne!(patched, script, "the example's isolate line moved; update this test");
    let path = other.path().join("accel-plugin-ascend");
    std::fs::write(&path, patched).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let m: serde_json::Value =
        serde_json::from_str(&stdout(accel(&["discover", "--root", &capture(), "--json"], Some(other.path()))))
            .unwrap();
    let nodes = serde_json::json!({"nodes": [{"name": "atlas-0", "machine": m}]});
    std::fs::write(&cluster, nodes.to_string()).unwrap();
    let theirs: Vec<String> = ids.iter().map(|i| format!("npu-{i}")).collect();
    for here in [Some(example()), None] {
        let out = accel(&[&args[..], &["--json"]].concat(), here.as_deref());
        let placed: serde_json::Value = serde_json::from_str(&stdout(out)).unwrap();
        assert_eq!(placed["bundles"][0]["env"]["ASCEND_RT_VISIBLE_DEVICES"], theirs.join(","), "{placed}");
    }
    // Planning starts no plugin, so a broken one on this host changes nothing.
    let broken = TempDir::new("external-plan-broken");
    let path = broken.path().join("accel-plugin-ascend");
    std::fs::write(&path, "#!/bin/sh\nexit 7\n").unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = accel(&[&args[..], &["--json"]].concat(), Some(broken.path()));
    assert!(String::from_utf8_lossy(&out.stderr).is_empty(), "{out:?}");
    let placed: serde_json::Value = serde_json::from_str(&stdout(out)).unwrap();
    assert_eq!(placed["bundles"][0]["env"]["ASCEND_RT_VISIBLE_DEVICES"], theirs.join(","), "{placed}");
}

#[test]
fn slurm_gres_under_its_own_name() {
    let dir = TempDir::new("external-slurm");
    let cluster = cluster(&dir);
    let out = dir.path().join("slurm");
    stdout(accel(
        &["export", "slurm", "--cluster", cluster.to_str().unwrap(), "--out-dir", out.to_str().unwrap()],
        Some(&example()),
    ));
    let gres = std::fs::read_to_string(out.join("gres.conf")).unwrap();
    assert!(gres.contains("NodeName=atlas-0 Name=npu Type=ascend910b File=/dev/davinci0"), "{gres}");
    assert!(!gres.contains("Name=gpu"), "{gres}");
    let nodes = std::fs::read_to_string(out.join("nodes.conf")).unwrap();
    assert!(nodes.contains("GresTypes=npu") && nodes.contains("Gres=npu:ascend910b:8"), "{nodes}");
}

/// One HTTP/1.0 GET to the agent; the body.
fn get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n").map(|x| x.1.to_owned()).unwrap_or_default()
}

#[test]
fn agent_metrics_come_from_its_own_metrics_verb() {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_accel"))
        .args(["agent", "--root", &capture(), "--listen", "127.0.0.1:0", "--interval", "1"])
        .env("ACCEL_PLUGIN_DIR", example())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if log.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            panic!("the agent exited before serving");
        }
        if let Some(rest) = line.trim().strip_prefix("accel agent: serving http://") {
            break rest.trim_end_matches('/').to_owned();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
    // The first sample may still be running; wait for the NPU series (bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let metrics = loop {
        let m = get(&addr, "/metrics");
        if m.contains("0000:04:00.0") || std::time::Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let _ = child.kill();
    let _ = child.wait();
    // The recorded `npu-smi info` (examples/plugins/ascend/README.md): NPU 0 drew 105.8 W.
    let power: Vec<&str> = metrics.lines().filter(|l| l.contains("power") && l.contains("0000:04:00.0")).collect();
    assert!(power.iter().any(|l| l.ends_with(" 105.8")), "{metrics}");
    assert!(metrics.lines().any(|l| l.contains("0000:44:00.0") && !l.starts_with('#')), "{metrics}");
    assert!(
        !metrics.lines().any(|l| l.contains("power") && l.contains("0000:45:00.0")),
        "no reading for NPU 3 was recorded: {metrics}"
    );
}

/// `accel capture` keeps what the plugin declares (`capture` in its `version` answer): its
/// device nodes and its recorded `npu-smi` table, so the bundle is discovered like the
/// directory, and the plugin (run on a private copy of the bundle) finds its devices there too.
#[test]
fn capture_keeps_what_the_plugin_declares() {
    let dir = TempDir::new("ascend-capture");
    let out = dir.join("cap");
    stdout(accel(&["capture", out.to_str().unwrap(), "--root", &capture()], Some(&example())));
    let bundle = std::fs::read(out.join("capture.bundle")).unwrap();
    let tree = accel_discover::fs::MemTree::parse_bundle(&bundle).unwrap();
    let path = |p: &str| std::path::PathBuf::from(p);
    assert!(tree.file(&path("/accel/npu-smi-info.txt")).is_some_and(|t| !t.is_empty()), "npu-smi table kept");
    assert_eq!(tree.file(&path("/dev/davinci0")), Some(&b""[..]), "device node kept as an empty file");
    let npus = |root: &str| -> usize {
        let m: serde_json::Value =
            serde_json::from_str(&stdout(accel(&["discover", "--root", root, "--json"], Some(&example())))).unwrap();
        m["accelerators"].as_array().unwrap().iter().filter(|a| a["plugin"] == "ascend").count()
    };
    let from_dir = npus(&capture());
    assert!(from_dir > 0);
    assert_eq!(npus(out.join("capture.bundle").to_str().unwrap()), from_dir);
    // Without the plugin, the bundle holds none of its files.
    let bare = dir.join("bare");
    stdout(accel(&["capture", bare.to_str().unwrap(), "--root", &capture()], None));
    let tree = accel_discover::fs::MemTree::parse_bundle(&std::fs::read(bare.join("capture.bundle")).unwrap()).unwrap();
    assert!(tree.file(&path("/accel/npu-smi-info.txt")).is_none());
}

/// A plugin gets an allow-listed environment: the base set, `ACCEL_ROOT`, `ACCEL_PROTOCOL` and
/// what it declares in `version` (`env`), never an undeclared variable or a secret-named one,
/// even when declared.
#[test]
fn a_plugin_sees_only_its_allow_listed_environment() {
    let dir = TempDir::new("envdump");
    let plugin = dir.join("accel-plugin-envdump");
    std::fs::write(
        &plugin,
        r#"#!/bin/sh
cat > /dev/null
case "$1" in
  version) echo '{"protocol": 1, "name": "envdump", "version": "1", "env": ["DECLARED_VAR", "MY_SECRET_TOKEN"]}' ;;
  discover) printf '{"protocol": 1, "accelerators": [], "attributes": {"seen": "%s"}}\n' "$(env | cut -d= -f1 | sort | tr '\n' ' ')" ;;
  *) exit 3 ;;
esac
"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_accel"))
        .args(["discover", "--root", &capture(), "--json"])
        .env("ACCEL_PLUGIN_DIR", dir.path())
        .env("DECLARED_VAR", "1")
        .env("UNDECLARED_VAR", "1")
        .env("MY_SECRET_TOKEN", "hunter2")
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    let m: serde_json::Value = serde_json::from_str(&stdout(out)).unwrap();
    let seen: Vec<&str> = m["attributes"]["seen"].as_str().unwrap().split_whitespace().collect();
    for want in ["PATH", "ACCEL_ROOT", "ACCEL_PROTOCOL", "DECLARED_VAR", "LC_ALL"] {
        assert!(seen.contains(&want), "{want} missing: {seen:?}");
    }
    for never in ["UNDECLARED_VAR", "MY_SECRET_TOKEN", "ACCEL_PLUGIN_DIR", "CARGO_MANIFEST_DIR"] {
        assert!(!seen.contains(&never), "{never} passed on: {seen:?}");
    }
}
