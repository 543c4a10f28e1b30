//! `accel cluster build` as a user meets it (issue 18): captures of several different machines
//! (`accel capture OUT --sample NAME`) and a running node agent become one cluster file, which
//! `accel plan`, `accel export slurm` and `accel export dra` then read; and every bad input is
//! one line with exit status 2.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

fn accel(args: &[&str]) -> Output {
    accel_env(args, &[])
}

fn accel_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_accel"));
    cmd.args(args).env_remove("ACCEL_SKU_DIR").env_remove("ACCEL_AGENT_TOKEN").env_remove("ACCEL_PYTHON");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The one-line error of a command that must fail with status 2.
fn usage_error(out: Output) -> String {
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("accel: error: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `accel capture DIR --sample NAME` into `dir/<out>`.
fn capture(dir: &Path, sample: &str, out: &str) -> PathBuf {
    let path = dir.join(out);
    ok(accel(&["capture", s(&path), "--sample", sample]));
    path
}

#[test]
fn captures_of_different_machines_become_one_cluster_for_plan_and_exports() {
    let dir = accel_testdata::TempDir::new("cli-cluster-build");
    let dgx = capture(&dir, "dgx-h100", "dgx");
    let mi300x = capture(&dir, "mi300x", "mi300x-box");
    let trn2 = capture(&dir, "trn2", "trn");
    // Another machine's capture under a name of our choosing (its hostname is a sample's too).
    let h100b = capture(&dir, "dgx-h100", "second-dgx");

    // `--root` takes each form a capture comes in: the directory and the bundle give one machine.
    let from_dir = ok(accel(&["topo", "--root", s(&mi300x), "--json"]));
    assert_eq!(from_dir, ok(accel(&["topo", "--root", s(&mi300x.join("capture.bundle")), "--json"])));
    assert!(from_dir.contains("GPU7"), "{from_dir}");

    let labels = dir.join("labels.txt");
    std::fs::write(&labels, "# node  labels\ndgx-h100 zone=z1\nmi300x rack=r9 zone=z2\ngpu-7 zone=z1\n").unwrap();
    let cluster = dir.join("cluster.json");
    let bundle = mi300x.join("capture.bundle");
    let named = format!("gpu-7={}", s(&h100b));
    let said = ok(accel(&[
        "cluster",
        "build",
        s(&dgx),
        s(&bundle),
        s(&trn2),
        &named,
        "--labels",
        s(&labels),
        "--rack-size",
        "2",
        "-o",
        s(&cluster),
    ]));
    assert_eq!(said.trim(), format!("wrote {}: 4 nodes (dgx-h100, mi300x, trn2, gpu-7)", s(&cluster)));
    let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cluster).unwrap()).unwrap();
    let nodes = value["nodes"].as_array().unwrap();
    let names: Vec<&str> = nodes.iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["dgx-h100", "mi300x", "trn2", "gpu-7"], "hostnames, in argument order");
    assert_eq!(nodes[0]["labels"], serde_json::json!({"rack": "r0", "zone": "z1"}));
    assert_eq!(nodes[1]["labels"], serde_json::json!({"rack": "r9", "zone": "z2"}), "the file wins over --rack-size");
    assert_eq!(nodes[2]["labels"], serde_json::json!({"rack": "r1"}));
    let accelerators = |node: &str| value["machines"][node]["accelerators"].as_array().unwrap().len();
    assert_eq!(
        [accelerators("dgx-h100"), accelerators("mi300x"), accelerators("trn2"), accelerators("gpu-7")],
        [8, 8, 16, 8]
    );

    // The planner reads it: an AMD scale-up bundle in zone z2, and a spread pair of H100 nodes.
    let request = dir.join("request.json");
    std::fs::write(
        &request,
        r#"{"bundles": [{"count": 4, "connectivity": "scale-up", "vendor": ["amd"]}], "select": {"zone": "z2"}}"#,
    )
    .unwrap();
    let placed = ok(accel(&["plan", "--cluster", s(&cluster), "--request", s(&request)]));
    assert!(placed.starts_with("bundle 0: mi300x GPU0,GPU1,GPU2,GPU3"), "{placed}");
    assert!(placed.contains("HIP_VISIBLE_DEVICES=0,1,2,3"), "{placed}");
    std::fs::write(&request, r#"{"bundles": [{"count": 8, "sku": ["nvidia-h100-sxm"]}, {"count": 8, "sku": ["nvidia-h100-sxm"]}], "same": "zone", "strategy": "spread"}"#).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&ok(accel(&["plan", "--cluster", s(&cluster), "--request", s(&request), "--json"])))
            .unwrap();
    let mut used: Vec<&str> = json["bundles"].as_array().unwrap().iter().map(|b| b["node"].as_str().unwrap()).collect();
    used.sort();
    assert_eq!(used, ["dgx-h100", "gpu-7"]);

    // Slurm: every node, its gres count, and one File= line per device.
    let slurm = dir.join("slurm");
    ok(accel(&["export", "slurm", "--cluster", s(&cluster), "--out-dir", s(&slurm)]));
    let nodes_conf = std::fs::read_to_string(slurm.join("nodes.conf")).unwrap();
    for line in ["NodeName=dgx-h100 ", "NodeName=mi300x ", "NodeName=trn2 ", "NodeName=gpu-7 "] {
        assert!(nodes_conf.contains(line), "{line} in {nodes_conf}");
    }
    assert!(nodes_conf.contains("Gres=gpu:h100:8"), "{nodes_conf}");
    assert!(nodes_conf.contains("Gres=neuron:"), "{nodes_conf}");
    let gres = std::fs::read_to_string(slurm.join("gres.conf")).unwrap();
    let files = |node: &str| {
        gres.lines().filter(|l| l.starts_with(&format!("NodeName={node} ")) && l.contains(" File=/dev/")).count()
    };
    assert_eq!([files("dgx-h100"), files("mi300x"), files("trn2"), files("gpu-7")], [8, 8, 16, 8], "{gres}");
    assert!(gres.contains("NodeName=dgx-h100 Name=gpu Type=h100 File=/dev/nvidia0 "), "{gres}");
    let topology = std::fs::read_to_string(slurm.join("topology.conf")).unwrap();
    assert!(topology.contains("SwitchName=rack-r9 Nodes=mi300x"), "{topology}");

    // DRA: one ResourceSlice set per node, each named after its node.
    let yaml = ok(accel(&["export", "dra", "--cluster", s(&cluster)]));
    let node_names: Vec<&str> = yaml.lines().filter_map(|l| l.trim().strip_prefix("nodeName: ")).collect();
    assert_eq!(node_names, ["dgx-h100", "mi300x", "trn2", "gpu-7"], "{yaml}");
    assert_eq!(yaml.matches("\n  - name: nvidia-").count(), 16, "{yaml}");
    assert_eq!(yaml.matches("\n  - name: amd-").count(), 8, "{yaml}");
    let out = accel(&["export", "dra", "--cluster", s(&cluster), "--sample", "mi300x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

#[test]
fn an_imported_hwloc_xml_is_a_capture_like_any_other() {
    let dir = accel_testdata::TempDir::new("cli-cluster-build-hwloc");
    let xml = accel_testdata::hosts_dir().join("../hwloc-xml/aws-p4d-24xlarge.xml");
    let bundle = dir.join("p4d.bundle");
    ok(accel(&["import", "hwloc", s(&xml), "-o", s(&bundle)]));
    let dgx = capture(&dir, "dgx-h100", "dgx");
    let cluster = dir.join("cluster.json");
    ok(accel(&["cluster", "build", &format!("p4d={}", s(&bundle)), s(&dgx), "-o", s(&cluster)]));
    let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cluster).unwrap()).unwrap();
    assert_eq!(value["nodes"][0]["name"], "p4d");
    let a100s = value["machines"]["p4d"]["accelerators"].as_array().unwrap();
    assert_eq!(a100s.iter().filter(|a| a["vendor"] == "nvidia").count(), 8);
    let slurm = dir.join("slurm");
    ok(accel(&["export", "slurm", "--cluster", s(&cluster), "--out-dir", s(&slurm)]));
    let gres = std::fs::read_to_string(slurm.join("gres.conf")).unwrap();
    assert_eq!(gres.lines().filter(|l| l.starts_with("NodeName=p4d Name=gpu ")).count(), 8, "{gres}");
}

#[test]
fn bad_captures_and_labels_are_one_clear_line() {
    let dir = accel_testdata::TempDir::new("cli-cluster-build-bad");
    let a = capture(&dir, "dgx-h100", "a");
    let b = capture(&dir, "dgx-h100", "b");
    let c = capture(&dir, "mi300x", "c");
    let build = |extra: &[&str]| accel(&[&["cluster", "build"], extra].concat());

    // Two machines with one hostname: both named, with the way out.
    let err = usage_error(build(&[s(&a), s(&b)]));
    assert!(err.contains("two nodes named \"dgx-h100\""), "{err}");
    assert!(err.contains(&format!("capture {}", s(&a))) && err.contains(&format!("capture {}", s(&b))), "{err}");
    assert!(err.contains("NAME=CAPTURE"), "{err}");
    ok(build(&[s(&a), &format!("other={}", s(&b))]));

    let missing = dir.join("no-such-capture");
    let err = usage_error(build(&[s(&a), s(&missing)]));
    assert!(err.contains(&format!("capture {}", s(&missing))), "{err}");

    // A corrupt bundle, as a file and inside a capture directory.
    let corrupt = dir.join("corrupt.bundle");
    std::fs::write(&corrupt, "this is not a capture bundle\n").unwrap();
    let err = usage_error(build(&[s(&corrupt)]));
    assert!(err.contains("is not a capture bundle"), "{err}");
    let corrupt_dir = dir.join("corrupt-dir");
    std::fs::create_dir(&corrupt_dir).unwrap();
    std::fs::write(corrupt_dir.join("capture.bundle"), [0xff, 0x00, 0x13]).unwrap();
    let err = usage_error(build(&[s(&corrupt_dir)]));
    assert!(err.contains("capture.bundle is not a capture bundle"), "{err}");
    // An empty directory is neither a capture nor a bundle's folder.
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = usage_error(build(&[s(&empty)]));
    assert!(err.contains("no sys/ directory (and no capture.bundle)"), "{err}");

    // Labels naming a node the cluster lacks, and malformed ones, name the file and the line.
    let labels = dir.join("labels.txt");
    std::fs::write(&labels, "dgx-h100 rack=r1\ndgx-h10 rack=r2\n").unwrap();
    let err = usage_error(build(&[s(&a), s(&c), "--labels", s(&labels)]));
    assert!(err.contains("names node \"dgx-h10\", which is not in the cluster (nodes: dgx-h100, mi300x)"), "{err}");
    std::fs::write(&labels, "dgx-h100 rack\n").unwrap();
    let err = usage_error(build(&[s(&a), "--labels", s(&labels)]));
    assert!(err.contains("line 1: \"rack\" is not key=value"), "{err}");
    std::fs::write(&labels, r#"{"mi300x": {"zone": "z1"}, "ghost": {"zone": "z2"}}"#).unwrap();
    let err = usage_error(build(&[s(&c), "--labels", s(&labels)]));
    assert!(err.contains("names node \"ghost\""), "{err}");
    let err = usage_error(build(&[s(&a), "--labels", s(&dir.join("no-labels.txt"))]));
    assert!(err.contains("reading labels"), "{err}");

    let err = usage_error(build(&[]));
    assert!(err.contains("nothing to build from"), "{err}");
    assert!(usage_error(build(&[s(&a), "--rack-size", "0"])).contains("--rack-size"));
}

#[test]
fn the_sample_form_still_works_and_help_teaches_both() {
    let value: serde_json::Value =
        serde_json::from_str(&ok(accel(&["cluster", "--sample", "dgx-h100:2", "--rack-size", "1"]))).unwrap();
    assert_eq!(value["nodes"][1]["name"], "dgx-h100-1");
    assert_eq!(value["nodes"][1]["labels"]["rack"], "r1");
    assert_eq!(accel(&["cluster"]).status.code(), Some(2), "--sample or build is needed");
    assert_eq!(accel(&["cluster", "--sample", "dgx-h100", "build", "x"]).status.code(), Some(2));
    let help = ok(accel(&["cluster", "--help"]));
    assert!(help.contains("accel cluster build"), "{help}");
    let help = ok(accel(&["cluster", "build", "--help"]));
    for needle in [
        "--from-agent",
        "--from-ray",
        "ACCEL_AGENT_TOKEN",
        "ACCEL_PYTHON",
        "gpu-a  rack=r1",
        "accel export dra --cluster",
    ] {
        assert!(help.contains(needle), "{needle} in {help}");
    }
}

/// A running agent, killed when dropped.
struct Agent {
    child: Child,
    addr: SocketAddr,
}

impl Agent {
    fn start(args: &[&str]) -> Agent {
        Agent::start_on("127.0.0.1:0", args)
    }

    fn start_on(listen: &str, args: &[&str]) -> Agent {
        let mut child = Command::new(env!("CARGO_BIN_EXE_accel"))
            .args(["agent", "--listen", listen, "--interval", "60"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let addr = accel_testdata::agent_address(&mut child);
        Agent { child, addr }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-shot HTTP server on loopback that answers `answer` to every connection (two at most).
fn fake_agent(answer: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(2) {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(&answer);
        }
    });
    format!("http://{addr}")
}

#[test]
fn running_agents_join_the_cluster_with_their_token_never_shown() {
    let dir = accel_testdata::TempDir::new("cli-cluster-build-agent");
    let token_file = dir.join("token");
    let token = "s3cret-token-0123456789abcdef";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let agent =
        Agent::start(&["--sample", "gb200-nvl72-tray", "--node-name", "tray-3", "--token-file", s(&token_file)]);
    let url = format!("http://{}", agent.addr);
    let trn2 = capture(&dir, "trn2", "trn2");

    let cluster = dir.join("cluster.json");
    ok(accel(&["cluster", "build", s(&trn2), "--from-agent", &url, "--token-file", s(&token_file), "-o", s(&cluster)]));
    let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cluster).unwrap()).unwrap();
    assert_eq!(value["nodes"][1]["name"], "tray-3", "the agent's --node-name");
    assert_eq!(value["machines"]["tray-3"]["accelerators"].as_array().unwrap().len(), 4);
    // The token from the environment works the same; `localhost` is a name the agent answers to.
    let out = ok(accel_env(
        &["cluster", "build", "--from-agent", &format!("http://localhost:{}/", agent.addr.port())],
        &[("ACCEL_AGENT_TOKEN", token)],
    ));
    assert!(out.contains("\"tray-3\""));
    let request = dir.join("request.json");
    std::fs::write(&request, r#"{"bundles": [{"count": 4, "connectivity": "scale-up", "family": ["blackwell"]}]}"#)
        .unwrap();
    assert!(ok(accel(&["plan", "--cluster", s(&cluster), "--request", s(&request)])).starts_with("bundle 0: tray-3 "));

    // No token, a wrong one: refused, said plainly, and the token never printed.
    let err = usage_error(accel(&["cluster", "build", "--from-agent", &url]));
    assert!(err.contains(&format!("agent {url}: /v1/node: 401: the agent wants its token")), "{err}");
    let wrong = "wrong-token-0123456789abcdef";
    let out = accel_env(&["cluster", "build", "--from-agent", &url], &[("ACCEL_AGENT_TOKEN", wrong)]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains(wrong) && !text.contains(token), "{text}");
    assert!(usage_error(out).contains("the agent refused the token"));
    // A token file others can read is refused before anything is sent.
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let err = usage_error(accel(&["cluster", "build", "--from-agent", &url, "--token-file", s(&token_file)]));
    assert!(err.contains("chmod 600") && !err.contains(token), "{err}");

    // Bad answers name the URL: not JSON, not a machine, too big, not HTTP; and bad URLs.
    let garbage = fake_agent(b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<html>hello</html>".to_vec());
    let err = usage_error(accel(&["cluster", "build", "--from-agent", &garbage]));
    assert!(err.contains(&format!("agent {garbage}: /v1/node is not a machine description")), "{err}");
    let not_machine = fake_agent(b"HTTP/1.0 200 OK\r\n\r\n{\"nodes\": []}".to_vec());
    assert!(
        usage_error(accel(&["cluster", "build", "--from-agent", &not_machine])).contains("not a machine description")
    );
    let mut huge = b"HTTP/1.0 200 OK\r\n\r\n".to_vec();
    huge.resize(huge.len() + (33 << 20), b' ');
    let big = fake_agent(huge);
    let err = usage_error(accel(&["cluster", "build", "--from-agent", &big]));
    assert!(err.contains(&format!("agent {big}: /v1/node: the answer is larger than 32 MiB")), "{err}");
    let teapot = fake_agent(b"HTTP/1.0 418 I'm a teapot\r\n\r\n".to_vec());
    assert!(usage_error(accel(&["cluster", "build", "--from-agent", &teapot])).contains("/v1/node: HTTP status 418"));
    let misdirected = fake_agent(b"HTTP/1.0 421 Misdirected Request\r\n\r\n".to_vec());
    let err = usage_error(accel(&["cluster", "build", "--from-agent", &misdirected]));
    assert!(err.contains("421: the agent does not answer to the name") && err.contains("--allow-host"), "{err}");
    let smtp = fake_agent(b"220 mail.example ESMTP\r\n".to_vec());
    assert!(usage_error(accel(&["cluster", "build", "--from-agent", &smtp])).contains("not an HTTP answer"));
    let err = usage_error(accel(&["cluster", "build", "--from-agent", "https://node-1.example:9477"]));
    assert!(err.contains("https:// needs --ca-file"), "{err}");
    let err = usage_error(accel(&["cluster", "build", "--from-agent", "node-1:9477"]));
    assert!(err.contains("agent node-1:9477: not an http:// or https:// URL"), "{err}");
    // A token never goes in the clear beyond loopback: refused before connecting.
    let out =
        accel_env(&["cluster", "build", "--from-agent", "http://192.0.2.1:9477"], &[("ACCEL_AGENT_TOKEN", token)]);
    let err = usage_error(out);
    assert!(err.contains("refusing to send the token in the clear") && !err.contains(token), "{err}");
}

#[test]
fn an_agent_over_tls_is_read_with_its_ca_and_a_plain_network_bind_is_refused() {
    let dir = accel_testdata::TempDir::new("cli-cluster-build-tls");
    let (ca, cert, key) = accel_testdata::tls_files(dir.path());
    let token_file = dir.join("token");
    let token = "tls-token-0123456789abcdef";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let agent = Agent::start(&[
        "--sample",
        "mi300x",
        "--node-name",
        "mi-tls",
        "--token-file",
        s(&token_file),
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&key),
    ]);
    for url in [format!("https://127.0.0.1:{}", agent.addr.port()), format!("https://localhost:{}/", agent.addr.port())]
    {
        let out =
            ok(accel(&["cluster", "build", "--from-agent", &url, "--token-file", s(&token_file), "--ca-file", s(&ca)]));
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["nodes"][0]["name"], "mi-tls", "{url}");
        assert!(!out.contains(token));
    }
    // Another CA's certificate, or plain HTTP to a TLS port, is an error.
    let other = accel_testdata::TempDir::new("cli-cluster-build-tls-other");
    let (other_ca, _, _) = accel_testdata::tls_files(other.path());
    let url = format!("https://127.0.0.1:{}", agent.addr.port());
    let err = usage_error(accel(&[
        "cluster",
        "build",
        "--from-agent",
        &url,
        "--token-file",
        s(&token_file),
        "--ca-file",
        s(&other_ca),
    ]));
    assert!(err.contains("/v1/node") && (err.contains("certificate") || err.contains("UnknownIssuer")), "{err}");
    let err =
        usage_error(accel(&["cluster", "build", "--from-agent", &format!("http://127.0.0.1:{}", agent.addr.port())]));
    assert!(err.contains("/v1/node"), "{err}");
    // Beyond loopback, a token without TLS is refused before binding; with TLS the agent starts.
    let refused = accel(&["agent", "--listen", "0.0.0.0:0", "--token-file", s(&token_file)]);
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("without TLS") && err.contains("--tls-cert"), "{err}");
    let open_key = dir.join("open.key");
    std::fs::copy(&key, &open_key).unwrap();
    std::fs::set_permissions(&open_key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let refused = accel(&[
        "agent",
        "--listen",
        "0.0.0.0:0",
        "--token-file",
        s(&token_file),
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&open_key),
    ]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(refused.status.code() == Some(2) && err.contains("chmod 600"), "a key others can read: {err}");
    let wide = Agent::start_on(
        "0.0.0.0:0",
        &["--sample", "mi300x", "--token-file", s(&token_file), "--tls-cert", s(&cert), "--tls-key", s(&key)],
    );
    let url = format!("https://127.0.0.1:{}", wide.addr.port());
    ok(accel(&["cluster", "build", "--from-agent", &url, "--token-file", s(&token_file), "--ca-file", s(&ca)]));
}

#[test]
fn the_five_aws_captures_place_eight_gpu_scale_up_bundles_on_declared_links() {
    // The real EC2 hwloc XMLs were taken without NVML: no link evidence. p5en, p6-b200 and
    // p6-b300 are NVSwitch boards by design (the SKU registry's systems), so their links are
    // declared, and an 8-GPU scale-up bundle fits each; the placement says the links are
    // declared, not observed.
    let dir = accel_testdata::TempDir::new("cli-cluster-build-aws");
    let names = [
        "aws-p4d-24xlarge",
        "aws-p5en-48xlarge",
        "aws-p6-b200-48xlarge",
        "aws-p6-b300-48xlarge",
        "aws-p6e-gb200-36xlarge",
    ];
    let mut args = vec!["cluster".to_owned(), "build".to_owned()];
    for name in names {
        let path = capture(&dir, name, name);
        args.push(format!("{name}={}", s(&path)));
    }
    let cluster = dir.join("cluster.json");
    args.extend(["-o".to_owned(), s(&cluster).to_owned()]);
    ok(accel(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cluster).unwrap()).unwrap();
    let p5en_links = value["machines"]["aws-p5en-48xlarge"]["links"].as_array().unwrap();
    assert_eq!(p5en_links.len(), 28);
    assert!(p5en_links.iter().all(|l| l["origin"] == "declared" && l["kind"] == "nvswitch" && l["count"] == 18));

    // `accel topo` marks them and names their source.
    let topo = ok(accel(&["topo", "--sample", "aws-p5en-48xlarge"]));
    assert!(topo.contains("NV18*") && topo.contains("declared by design, not observed (builtin:aws.toml"), "{topo}");
    let request = dir.join("request.json");
    for (node, sku) in [
        ("aws-p5en-48xlarge", "nvidia-h200-sxm"),
        ("aws-p6-b200-48xlarge", "nvidia-b200"),
        ("aws-p6-b300-48xlarge", "nvidia-b300"),
    ] {
        std::fs::write(
            &request,
            format!(r#"{{"bundles": [{{"count": 8, "connectivity": "scale-up", "sku": ["{sku}"]}}]}}"#),
        )
        .unwrap();
        let placed = ok(accel(&["plan", "--cluster", s(&cluster), "--request", s(&request)]));
        assert!(placed.starts_with(&format!("bundle 0: {node} GPU0,GPU1,GPU2,GPU3,GPU4,GPU5,GPU6,GPU7")), "{placed}");
        assert!(placed.contains("links: declared by design, not observed (builtin:aws.toml system"), "{placed}");
        let json: serde_json::Value =
            serde_json::from_str(&ok(accel(&["plan", "--cluster", s(&cluster), "--request", s(&request), "--json"])))
                .unwrap();
        assert!(json["bundles"][0]["declared_links"][0].as_str().unwrap().contains(&node.replace('.', "-")));
    }
    // p6e-gb200 has four GPUs: an 8-GPU scale-up bundle of GB200 does not fit anywhere.
    std::fs::write(&request, r#"{"bundles": [{"count": 8, "connectivity": "scale-up", "sku": ["nvidia-gb200"]}]}"#)
        .unwrap();
    let out = accel(&["plan", "--cluster", s(&cluster), "--request", s(&request)]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
}
