//! Secrets never leave the process: random secrets are put into the environment (the transport's
//! cluster secret, tokens, keys, passwords, one under a name a plugin claims as its visibility
//! variable), and every output is searched for them: `env`, `discover`, `topo`, `labels`, the
//! exports, a capture bundle, a live conformance report, the agent's API and its log, and what an
//! external plugin is handed.

use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn random_hex() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    format!("{:016x}{:08x}", h.finish(), std::process::id())
}

struct Env {
    dir: PathBuf,
    secrets: Vec<(String, String)>,
}

impl Env {
    fn new() -> Env {
        let dir = std::env::temp_dir().join(format!("accel-secrets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("plugins")).unwrap();
        let secrets: Vec<(String, String)> = [
            "ACCEL_TRANSPORT_SECRET",
            "ACCEL_AGENT_TOKEN",
            "NCCL_IB_KEY",
            "HF_TOKEN",
            "DB_PASSWORD",
            "ACME_SECRET_VISIBLE",
        ]
        .iter()
        .map(|k| (k.to_string(), format!("s3cret-{}", random_hex())))
        .collect();
        // A plugin that claims a secret-named variable as its visibility variable, and tries to
        // smuggle whatever secrets it was handed out through its device's product name.
        let plugin = dir.join("plugins/accel-plugin-acme");
        std::fs::write(
            &plugin,
            "#!/bin/sh\ncat > /dev/null\n[ \"$1\" = discover ] || exit 3\n\
             echo \"{\\\"protocol\\\": 1, \\\"accelerators\\\": [{\\\"id\\\": \\\"acme-0\\\", \\\"vendor\\\": \\\"acme\\\", \
             \\\"product\\\": \\\"Acme [$ACCEL_TRANSPORT_SECRET$HF_TOKEN$DB_PASSWORD]\\\", \\\"vocabulary\\\": {\\\"kind\\\": \\\"npu\\\", \
             \\\"label\\\": \\\"ACME\\\", \\\"visibility_env\\\": \\\"ACME_SECRET_VISIBLE\\\", \\\"isolation\\\": [\\\"0\\\"]}}]}\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        Env { dir, secrets }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_accel"));
        cmd.args(args).env_remove("ACCEL_SKU_DIR").env("ACCEL_PLUGIN_DIR", self.dir.join("plugins"));
        for (k, v) in &self.secrets {
            cmd.env(k, v);
        }
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Fails the test, naming the output, if any secret appears in `text`.
    fn assert_clean(&self, what: &str, text: &[u8]) {
        let text = String::from_utf8_lossy(text);
        for (k, v) in &self.secrets {
            assert!(!text.contains(v.as_str()), "{what} prints the value of {k}");
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn http_get(addr: &str, path: &str) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = Vec::new();
    s.read_to_end(&mut body).unwrap();
    assert!(body.starts_with(b"HTTP/1.1 200"), "{path}: {}", String::from_utf8_lossy(&body));
    body
}

#[test]
fn no_output_carries_a_secret() {
    let env = Env::new();
    let outputs: &[&[&str]] = &[
        &["env"],
        &["env", "--json"],
        &["discover", "--json"],
        &["topo"],
        &["topo", "--json"],
        &["labels", "--format", "ray"],
        &["labels", "--format", "k8s"],
        &["export", "dra"],
        &["export", "nfd"],
        &["conformance", "--live", "--json"],
        &["conformance", "--live"],
    ];
    for args in outputs {
        let out = env.run(args);
        let what = format!("accel {}", args.join(" "));
        env.assert_clean(&format!("{what} (stdout)"), &out.stdout);
        env.assert_clean(&format!("{what} (stderr)"), &out.stderr);
    }
    // The fingerprint still names the variables it redacts, so the test sees them go through.
    let fp = String::from_utf8(env.run(&["env", "--json"]).stdout).unwrap();
    assert!(fp.contains("env.NCCL_IB_KEY") && fp.contains("<redacted>"), "{fp}");
    assert!(fp.contains("env.ACME_SECRET_VISIBLE"), "the plugin's visibility variable is recorded: {fp}");
    // The plugin ran, and was handed none of the secrets.
    let topo = String::from_utf8(env.run(&["discover", "--json"]).stdout).unwrap();
    assert!(topo.contains("Acme []"), "{topo}");

    // A capture bundle (which the docs invite users to publish), every file of it.
    let capture = env.dir.join("capture");
    let out = env.run(&["capture", capture.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    env.assert_clean("accel capture (output)", &[out.stdout, out.stderr].concat());
    let mut files = Vec::new();
    files_under(&capture, &mut files);
    assert!(files.iter().any(|f| f.ends_with("capture.bundle")), "{files:?}");
    for f in files {
        env.assert_clean(&format!("capture file {}", f.display()), &std::fs::read(&f).unwrap());
    }

    // The agent, on this machine: every route, and its log.
    let mut agent = env
        .command(&["agent", "--listen", "127.0.0.1:0", "--interval", "0.2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(agent.stderr.take().unwrap());
    let mut first = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let addr = loop {
        first.clear();
        if log.read_line(&mut first).unwrap() == 0 || Instant::now() > deadline {
            let _ = agent.kill();
            panic!("the agent never said where it serves");
        }
        if let Some(rest) = first.trim().strip_prefix("accel agent: serving http://") {
            break rest.trim_end_matches('/').to_owned();
        }
        env.assert_clean("the agent's log", first.as_bytes());
    };
    std::thread::sleep(Duration::from_millis(500));
    let mut env_body = Vec::new();
    for path in ["/v1/env", "/v1/node", "/v1/readings", "/v1/health", "/v1/cluster", "/metrics", "/metrics/transport"] {
        let body = http_get(&addr, path);
        env.assert_clean(&format!("agent {path}"), &body);
        if path == "/v1/env" {
            env_body = body;
        }
    }
    assert!(String::from_utf8_lossy(&env_body).contains("<redacted>"));
    let _ = agent.kill();
    let _ = agent.wait();
    let mut rest = Vec::new();
    log.read_to_end(&mut rest).unwrap();
    env.assert_clean("the agent's log", &rest);

    // A fingerprint written by an older accel, which still held the secret, is redacted when read.
    let old = env.dir.join("old.json");
    let secret = &env.secrets[0].1;
    std::fs::write(
        &old,
        format!(r#"{{"fingerprint_version": 1, "fields": {{"env.ACCEL_TRANSPORT_SECRET": {{"value": "{secret}", "source": "environment"}}}}}}"#),
    )
    .unwrap();
    let empty = env.dir.join("empty.json");
    std::fs::write(&empty, r#"{"fingerprint_version": 1, "fields": {}}"#).unwrap();
    let out = env.run(&["env", "diff", old.to_str().unwrap(), empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    env.assert_clean("accel env diff", &[out.stdout.clone(), out.stderr].concat());
    assert!(String::from_utf8_lossy(&out.stdout).contains("env.ACCEL_TRANSPORT_SECRET: <redacted>"));
}
