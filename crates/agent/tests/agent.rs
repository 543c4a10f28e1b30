//! The agent as a client meets it: readers replaying recorded readings, the exposition, and the
//! HTTP API (auth, read-only, no CORS) over a real TCP socket.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use accel_agent::readers::{Readers, Sample};
use accel_discover::fs::MemTree;
use accel_discover::{default_plugins, discover, Host};
use accel_model::SkuRegistry;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn readers(host: Host) -> Readers {
    Readers::new(host, default_plugins())
}

/// The gb200 sample with its recorded NVML readings, as `accel agent --sample` builds it.
fn gb200() -> (accel_model::Machine, Readers) {
    let host = accel_discover::samples::host("gb200-nvl72-tray", SkuRegistry::builtin()).unwrap();
    let machine = discover(&host, &default_plugins());
    (machine, readers(host))
}

#[test]
fn amdgpu_sysfs_recording_replays() {
    let host = Host::new(fixture("amdgpu-vega56"), SkuRegistry::builtin());
    let s = readers(host).sample();
    assert_eq!(s.readings.devices.len(), 1, "{s:?}");
    let d = &s.readings.devices[0];
    assert_eq!(d.pci, "0000:0b:00.0");
    assert_eq!(d.utilization_ratio, Some(0.0));
    assert_eq!(d.memory_total_bytes, Some(8573157376));
    assert_eq!(d.memory_used_bytes, Some(16613376));
    assert_eq!(d.power_watts, Some(8.0));
    assert_eq!(d.temperature_celsius, Some(38.0), "junction preferred");
    assert_eq!(d.clock_hz["sm"], 26_000_000);
    assert_eq!(d.clock_hz["memory"], 167_000_000);
    assert_eq!(d.errors["ecc_corrected_total"], 1);
    assert_eq!(d.errors["ecc_uncorrected_total"], 0);
    assert!(s.readings.links.is_empty(), "no xGMI counters in text sysfs");
    assert_eq!(s.readers[0].name, "amd");
    assert_eq!(s.readers[0].source, "recording");
}

#[test]
fn gaudi_sysfs_reader_follows_the_habanalabs_abi() {
    // File names and units from the kernel's sysfs-driver-habanalabs ABI and hwmon; the values
    // are made up for this format test (no public Gaudi reading was found).
    let mut t = MemTree::new();
    let dev = "/sys/devices/pci0000:00/0000:00:01.0/0000:33:00.0";
    t.add_link("/sys/class/accel/accel0/device", format!("../../..{}", &dev[4..]));
    t.add_file(format!("{dev}/uevent"), "DRIVER=habanalabs\n");
    t.add_file(format!("{dev}/clk_cur_freq_mhz"), "1600\n");
    t.add_file(format!("{dev}/hwmon/hwmon2/temp1_input"), "41000\n");
    t.add_file(format!("{dev}/hwmon/hwmon2/power1_input"), "120000000\n");
    let host = Host::in_memory(Arc::new(t), SkuRegistry::builtin());
    let (r, w) = accel_discover::families::gaudi::metrics::read(&host);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(r.devices.len(), 1);
    assert_eq!(r.devices[0].pci, "0000:33:00.0");
    assert_eq!(r.devices[0].clock_hz["soc"], 1_600_000_000);
    assert_eq!(r.devices[0].temperature_celsius, Some(41.0));
    assert_eq!(r.devices[0].power_watts, Some(120.0));
    assert_eq!(r.devices[0].memory_used_bytes, None, "habanalabs sysfs has no memory usage");
}

#[test]
fn a_node_without_vendor_interfaces_emits_no_device_series() {
    let host = accel_discover::samples::host("mi300x", SkuRegistry::builtin()).unwrap();
    let machine = discover(&host, &default_plugins());
    let s = readers(host).sample();
    assert!(s.readings.devices.is_empty());
    let text = accel_agent::metrics::render(&machine, &s);
    assert!(text.contains("accel_device_info{"), "{text}");
    for family in ["accel_hw_power_watts", "accel_hw_gpu_utilization_ratio", "accel_hw_gpu_link_io_bytes"] {
        assert!(!text.contains(family), "{family} emitted without a reading");
    }
}

#[test]
fn gb200_sample_renders_every_family_with_device_labels() {
    let (machine, readers) = gb200();
    let s: Sample = readers.sample();
    assert_eq!(s.readings.devices.len(), 4);
    assert_eq!(s.readings.links.len(), 4 * 18, "NV18: every GPU's 18 links, as the model has them");
    let text = accel_agent::metrics::render(&machine, &s);
    let line = |prefix: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(prefix) && l.contains(r#"pci="0008:01:00.0""#))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .to_owned()
    };
    let power = line("accel_hw_power_watts{");
    assert!(power.ends_with(" 72.02"), "{power}");
    for label in
        [r#"vendor="nvidia""#, r#"uuid="GPU-1652000000-0000-0000-0000-000000000000""#, r#"index="0""#, "model="]
    {
        assert!(power.contains(label), "{label} missing: {power}");
    }
    let limit = line("accel_hw_gpu_memory_limit_bytes{");
    let model = machine.accelerators[0].memory_bytes.unwrap();
    assert_eq!(limit.rsplit(' ').next().unwrap().parse::<f64>().unwrap(), model as f64, "{limit}");
    assert!(line("accel_hw_temperature_celsius{").ends_with(" 33.0"));
    assert!(
        line("accel_hw_gpu_clock_hertz{").contains(r#"clock="memory""#)
            || line("accel_hw_gpu_clock_hertz{").contains(r#"clock="sm""#)
    );
    assert!(text.contains(r#"error_type="ecc_uncorrected"} 0"#), "{text}");
    let tx = text
        .lines()
        .find(|l| {
            l.starts_with("accel_hw_gpu_link_io_bytes_total{")
                && l.contains(r#"link="0""#)
                && l.contains("transmit")
                && l.contains("0008:01:00.0")
        })
        .unwrap();
    assert!(tx.ends_with(&format!(" {}", 1390774681u64 * 1024)), "{tx}");
    assert!(
        text.contains(r#"accel_topology_links{a="nvidia-0008:01:00.0",b="nvidia-0009:01:00.0",kind="nvswitch"} 18"#),
        "{text}"
    );
    assert!(text.contains(r#"accel_reader_up{reader="nvidia",source="recording"} 1"#));
    assert!(text.trim_end().ends_with("# EOF"));
    // Every family that appears has one HELP and one TYPE line.
    for l in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = l.split_whitespace().nth(2).unwrap();
        assert_eq!(text.matches(&format!("# TYPE {name} ")).count(), 1, "{name}");
    }
}

#[test]
fn partitioned_devices_join_by_partition() {
    let tree = MemTree::parse_bundle(&accel_testdata::bundle("mi300x-cpx")).unwrap();
    let machine = discover(&Host::in_memory(Arc::new(tree), SkuRegistry::builtin()), &default_plugins());
    assert_eq!(machine.accelerators.len(), 63);
    let doc = r#"{"protocol":1,"devices":[
        {"pci":"0000:05:00.0","partition":3,"memory_used_bytes":5},
        {"pci":"0000:05:00.0","power_watts":750.0},
        {"pci":"0000:ff:00.0","power_watts":1.0}]}"#;
    let sample = Sample { readings: serde_json::from_str(doc).unwrap(), ..Default::default() };
    let text = accel_agent::metrics::render(&machine, &sample);
    let used = text.lines().find(|l| l.starts_with("accel_hw_gpu_memory_usage_bytes{")).unwrap();
    assert!(used.contains(r#"index="3""#) && used.contains(r#"vendor="amd""#), "{used}");
    let power = |pci: &str| text.lines().find(|l| l.starts_with("accel_hw_power_watts{") && l.contains(pci)).unwrap();
    let whole = power("0000:05:00.0");
    assert!(whole.contains(r#"index="""#) && whole.contains(r#"vendor="amd""#), "{whole}");
    assert!(power("0000:ff:00.0").contains(r#"vendor="""#));
    let warnings = text.lines().find(|l| l.starts_with("accel_reader_warnings")).unwrap();
    assert!(warnings.ends_with(" 1.0"), "the unmatched reading is a warning: {warnings}");
    assert_eq!(text.matches("accel_device_info{").count(), 63);
}

// --- HTTP ------------------------------------------------------------------------------------

fn start(token: Option<&str>) -> SocketAddr {
    let (machine, readers) = gb200();
    let (tx, rx) = std::sync::mpsc::channel();
    let env =
        serde_json::to_string(&accel_discover::fingerprint::collect_with(&readers.host, &machine, &readers.plugins))
            .unwrap();
    let config = accel_agent::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        node_name: "tray-0".into(),
        machine,
        env,
        readers,
        token: token.map(str::to_owned),
        cluster_file: None,
        transport_dir: None,
        interval: Duration::from_secs(60),
        allow_hosts: Vec::new(),
        limits: accel_agent::Limits::default(),
        tls: None,
        lab: None,
    };
    std::thread::spawn(move || accel_agent::serve(config, |a| tx.send(a).unwrap()).unwrap());
    rx.recv_timeout(Duration::from_secs(30)).unwrap()
}

/// One HTTP/1.1 request; returns (status, headers lower-cased, body).
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.to_owned() };
    (status, head.to_ascii_lowercase(), body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

#[test]
fn api_serves_the_model_metrics_health_and_dashboard() {
    let addr = start(None);
    let (code, head, body) = http(addr, "GET", "/v1/node", &[]);
    assert_eq!(code, 200);
    assert!(head.contains("content-type: application/json"));
    let node: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(node["accelerators"].as_array().unwrap().len(), 4);
    // The fingerprint of the served machine: its topology hash is known even for a capture.
    let (code, _, body) = http(addr, "GET", "/v1/env", &[]);
    assert_eq!(code, 200, "{body}");
    let env: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(env["fields"]["topology.hash"]["value"].as_str().is_some_and(|h| !h.is_empty()), "{env}");
    let (code, head, body) = http(addr, "GET", "/metrics", &[]);
    assert_eq!(code, 200);
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.contains("accel_hw_power_watts{"));
    let (code, _, body) = http(addr, "GET", "/v1/health", &[]);
    assert_eq!(code, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "ok");
    let (code, head, body) = http(addr, "GET", "/", &[]);
    assert_eq!(code, 200);
    assert!(head.contains("text/html") && body.contains("/app.js"));
    assert!(head.contains("content-security-policy: default-src 'self'"), "{head}");
    let (code, _, js) = http(addr, "GET", "/app.js", &[]);
    assert_eq!(code, 200);
    // The only absolute URL in the script is the SVG namespace name, which is never fetched.
    let urls: Vec<&str> =
        js.split(['"', '\'', ' ']).filter(|w| w.starts_with("http://") || w.starts_with("https://")).collect();
    assert_eq!(urls, ["http://www.w3.org/2000/svg"], "the dashboard loads nothing from elsewhere");
    let (code, _, body) = http(addr, "GET", "/v1/cluster", &[]);
    assert_eq!(code, 200);
    let cluster: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(cluster["nodes"][0]["name"], "tray-0");
    assert_eq!(cluster["nodes"][0]["readings"]["devices"].as_array().unwrap().len(), 4);
    assert_eq!(http(addr, "GET", "/nope", &[]).0, 404);
}

#[test]
fn api_is_read_only_and_sends_no_cors_headers() {
    let addr = start(None);
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        assert_eq!(http(addr, method, "/v1/node", &[]).0, 405, "{method}");
    }
    let (code, head, _) = http(addr, "GET", "/v1/node", &[("Origin", "http://evil.example")]);
    assert_eq!(code, 200);
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    let (code, head, _) = http(
        addr,
        "OPTIONS",
        "/v1/node",
        &[("Origin", "http://evil.example"), ("Access-Control-Request-Method", "GET")],
    );
    assert_ne!(code, 200);
    assert!(!head.contains("access-control-allow"), "{head}");
}

#[test]
fn a_token_guards_the_api_but_not_the_page_assets() {
    let token = "s3cret-token-0123456789";
    let addr = start(Some(token));
    let (code, head, _) = http(addr, "GET", "/metrics", &[]);
    assert_eq!(code, 401);
    assert!(head.contains("www-authenticate: bearer"));
    assert_eq!(http(addr, "GET", "/v1/node", &[("Authorization", "Bearer wrong-token-0123456789")]).0, 401);
    assert_eq!(http(addr, "GET", "/v1/node", &[("Authorization", &format!("Bearer {token}"))]).0, 200);
    assert_eq!(http(addr, "GET", "/metrics", &[("Authorization", &format!("Bearer {token}"))]).0, 200);
    assert_eq!(http(addr, "GET", "/", &[]).0, 200);
}

#[test]
fn a_network_listener_without_a_token_does_not_start() {
    let (machine, readers) = gb200();
    let config = accel_agent::Config {
        listen: "0.0.0.0:0".parse().unwrap(),
        node_name: "n".into(),
        machine,
        env: "{}".into(),
        readers,
        token: None,
        cluster_file: None,
        transport_dir: None,
        interval: Duration::from_secs(5),
        allow_hosts: Vec::new(),
        limits: accel_agent::Limits::default(),
        tls: None,
        lab: None,
    };
    let err = accel_agent::serve(config, |_| panic!("must not bind")).unwrap_err();
    assert!(err.to_string().contains("--token-file"), "{err}");
}
