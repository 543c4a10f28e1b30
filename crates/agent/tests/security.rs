//! The attacks of the security audit (issue 17), replayed against a real agent on loopback:
//! DNS rebinding through the `Host` header, idle and slow-header sockets, oversized heads and
//! bodies, label values that forge series, and a transport directory holding a FIFO and a link
//! to a secret. Every socket read is bounded in time.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use accel_agent::readers::Readers;
use accel_discover::{default_plugins, discover};
use accel_model::SkuRegistry;

/// A change to the discovered machine before it is served.
type EditMachine = Box<dyn FnOnce(&mut accel_model::Machine)>;

/// What a test changes in the agent it starts.
#[derive(Default)]
struct Setup {
    token: Option<String>,
    allow_hosts: Vec<String>,
    limits: Option<accel_agent::Limits>,
    transport_dir: Option<PathBuf>,
    machine: Option<EditMachine>,
}

/// The gb200 sample with its recorded readings, served on 127.0.0.1 and an OS-chosen port.
fn start(setup: Setup) -> SocketAddr {
    let host = accel_discover::samples::host("gb200-nvl72-tray", SkuRegistry::builtin()).unwrap();
    let mut machine = discover(&host, &default_plugins());
    if let Some(change) = setup.machine {
        change(&mut machine);
    }
    let readers = Readers::new(host, default_plugins());
    let config = accel_agent::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        node_name: "tray-0".into(),
        machine,
        env: "{}".into(),
        readers,
        token: setup.token,
        cluster_file: None,
        transport_dir: setup.transport_dir,
        interval: Duration::from_secs(60),
        allow_hosts: setup.allow_hosts,
        limits: setup.limits.unwrap_or_default(),
        tls: None,
        lab: None,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || accel_agent::serve(config, |a| tx.send(a).unwrap()).unwrap());
    rx.recv_timeout(Duration::from_secs(30)).unwrap()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends `request` as is; returns (status, lower-cased head, body). Status 0: closed unanswered.
fn raw(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut s = connect(addr);
    s.write_all(request.as_bytes()).unwrap();
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes);
    parse_response(&bytes)
}

fn parse_response(bytes: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return (0, text, String::new()) };
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

fn get(addr: SocketAddr, path: &str, host: &str) -> (u16, String, String) {
    raw(addr, &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"))
}

/// Whether the server closes `s` within `limit` (EOF or reset); bytes it sends first are read.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
}

const ROUTES: &[&str] = &[
    "/",
    "/app.js",
    "/style.css",
    "/v1/node",
    "/v1/health",
    "/v1/env",
    "/v1/readings",
    "/v1/cluster",
    "/metrics",
    "/metrics/transport",
    "/no-such-path",
];

#[test]
fn a_rebound_host_name_is_refused_on_every_route() {
    let addr = start(Setup::default());
    let port = addr.port();
    for path in ROUTES {
        // The page at http://attacker.example:PORT/ whose name now resolves to 127.0.0.1.
        let (code, _, body) = get(addr, path, &format!("attacker.example:{port}"));
        assert_eq!(code, 421, "{path}: {body}");
        assert!(!body.contains("accelerators") && !body.contains("accel_"), "{path} leaked: {body}");
        let (code, _, _) = get(addr, path, &format!("localhost:{port}"));
        assert_eq!(code, if *path == "/no-such-path" { 404 } else { 200 }, "{path}");
    }
    for host in ["localhost", "127.0.0.1", &format!("127.0.0.1:{port}"), "127.3.2.1", &format!("[::1]:{port}")] {
        assert_eq!(get(addr, "/v1/node", host).0, 200, "{host}");
    }
    for host in ["attacker.example", "localhost.attacker.example", "10.0.0.5:9477", "localhost."] {
        assert_eq!(get(addr, "/v1/node", host).0, 421, "{host}");
    }
    // HTTP/1.1 without a Host, two Hosts, and an absolute URI naming another host.
    assert_eq!(raw(addr, "GET /v1/node HTTP/1.1\r\nConnection: close\r\n\r\n").0, 421);
    assert_eq!(
        raw(addr, "GET /v1/node HTTP/1.1\r\nHost: localhost\r\nHost: attacker.example\r\nConnection: close\r\n\r\n").0,
        421
    );
    let (code, _, _) =
        raw(addr, "GET http://attacker.example/v1/node HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert!(code == 421 || code == 400, "absolute URI to another host: {code}");
    // Other methods are refused for the wrong host before anything else.
    assert_eq!(raw(addr, "POST /v1/node HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n").0, 421);
    // HTTP/1.0 had no Host; a client that sends none is not a browser.
    assert_eq!(raw(addr, "GET /v1/health HTTP/1.0\r\n\r\n").0, 200);
}

#[test]
fn allowed_names_are_served_and_the_token_is_still_required() {
    let token = "s3cret-token-0123456789";
    let addr = start(Setup {
        token: Some(token.into()),
        allow_hosts: vec!["agent.example".into(), "10.9.8.7".into()],
        ..Setup::default()
    });
    let with_token = |host: &str| {
        raw(
            addr,
            &format!(
                "GET /v1/node HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
            ),
        )
        .0
    };
    assert_eq!(with_token("agent.example:9477"), 200);
    assert_eq!(with_token("AGENT.EXAMPLE"), 200);
    assert_eq!(with_token("10.9.8.7:9477"), 200);
    assert_eq!(with_token("other.example"), 421, "the token does not open other names");
    assert_eq!(get(addr, "/v1/node", "agent.example").0, 401);
    assert_eq!(get(addr, "/", "attacker.example").0, 421, "the dashboard too");
}

#[test]
fn idle_and_slow_header_sockets_are_closed_and_do_not_crowd_out_requests() {
    let limits = accel_agent::Limits {
        max_connections: 32,
        header_timeout: Duration::from_millis(1500),
        stall_timeout: Duration::from_secs(3),
        ..accel_agent::Limits::default()
    };
    let addr = start(Setup { limits: Some(limits), ..Setup::default() });
    // Twice the cap of idle sockets, then sockets that send a header byte every 300 ms.
    let mut idle: Vec<TcpStream> = (0..64).map(|_| connect(addr)).collect();
    let mut slow: Vec<TcpStream> = (0..8).map(|_| connect(addr)).collect();
    for s in &mut slow {
        s.write_all(b"GET /v1/node HTTP/1.1\r\nHost: localhost\r\nX-Slow: ").unwrap();
    }
    let opened = Instant::now();
    // Meanwhile a client with a question is answered.
    for _ in 0..5 {
        assert_eq!(get(addr, "/v1/health", "localhost").0, 200);
    }
    // The oldest idle sockets made room for the newer ones: closed already.
    assert!(closed_within(&mut idle[0], Duration::from_millis(500)), "the oldest idle socket is still open");
    let mut slow_closed = vec![false; slow.len()];
    while opened.elapsed() < Duration::from_secs(6) && slow_closed.iter().any(|c| !c) {
        std::thread::sleep(Duration::from_millis(300));
        for (s, closed) in slow.iter_mut().zip(&mut slow_closed) {
            if !*closed && s.write_all(b"a").is_err() {
                *closed = true;
            }
        }
    }
    // A trickle does not reset the header timeout: every slow socket is gone within a few
    // seconds (writes fail once the peer has closed and reset).
    for (s, closed) in slow.iter_mut().zip(&slow_closed) {
        assert!(*closed || closed_within(s, Duration::from_secs(2)), "a slow-header socket outlived its deadline");
    }
    // Every idle socket is closed by the header timeout.
    for (i, s) in idle.iter_mut().enumerate() {
        assert!(closed_within(s, Duration::from_secs(3)), "idle socket {i} still open");
    }
}

#[test]
fn a_keep_alive_connection_is_closed_when_idle() {
    let limits = accel_agent::Limits { header_timeout: Duration::from_millis(800), ..accel_agent::Limits::default() };
    let addr = start(Setup { limits: Some(limits), ..Setup::default() });
    let mut s = connect(addr);
    s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    let started = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(5)), "kept alive forever");
    assert!(started.elapsed() >= Duration::from_millis(500), "closed before the idle timeout");
}

#[test]
fn an_oversized_head_is_refused_before_it_is_buffered() {
    let addr = start(Setup::default());
    let mut s = connect(addr);
    s.write_all(b"GET /v1/node HTTP/1.1\r\nHost: localhost\r\nX-Big: ").unwrap();
    // 256 KiB of one header (hyper's default buffer would hold about 400 KiB of it).
    let chunk = [b'a'; 4096];
    let mut refused = false;
    for _ in 0..64 {
        if s.write_all(&chunk).is_err() {
            refused = true;
            break;
        }
    }
    let mut answer = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let read = s.read_to_end(&mut answer);
    let closed =
        read.is_ok() || read.as_ref().is_err_and(|e| !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut));
    assert!(refused || closed, "the server is still buffering the head");
    if !answer.is_empty() {
        assert_eq!(parse_response(&answer).0, 431, "{}", String::from_utf8_lossy(&answer));
    }
}

#[test]
fn a_request_body_is_refused() {
    let addr = start(Setup::default());
    let mut s = connect(addr);
    // A body announced and sent slowly: the answer must not wait for it.
    s.write_all(b"GET /v1/node HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n\r\nxx").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 8192];
    let n = s.read(&mut buf).unwrap_or(0);
    assert_eq!(parse_response(&buf[..n]).0, 413, "{}", String::from_utf8_lossy(&buf[..n]));
    assert!(closed_within(&mut s, Duration::from_secs(2)), "the body is not waited for");
    let (code, _, _) =
        raw(addr, "GET /v1/node HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_eq!(code, 413);
}

// --- /metrics label values --------------------------------------------------------------------

/// One parsed sample line of the text exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
}

/// Parses a sample line strictly (the OpenMetrics/Prometheus text grammar for names, label
/// values with `\\`, `\"` and `\n` escapes, and a number); `None` when it is not one.
fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))?;
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        loop {
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let eq = rest.find('=')?;
            let key = &rest[..eq];
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return None;
            }
            let mut chars = rest[eq + 1..].strip_prefix('"')?.char_indices();
            let mut value = String::new();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        _ => return None,
                    },
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.to_owned(), value));
            rest = &rest[eq + 1..][1 + end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    let value = rest.strip_prefix(' ')?;
    value.split(' ').next()?.parse::<f64>().ok()?;
    Some(Sample { name: name.to_owned(), labels })
}

#[test]
fn label_values_cannot_forge_series_or_break_the_scrape() {
    let product = "H100 \"SXM\" \\ x\n} fake_series 1\naccel_reader_up{reader=\"nvml\"} 0";
    let addr = start(Setup {
        machine: Some(Box::new(move |m: &mut accel_model::Machine| {
            m.accelerators[0].sku = None;
            m.accelerators[0].product = product.to_owned();
        })),
        ..Setup::default()
    });
    let (code, _, text) = get(addr, "/metrics", "localhost");
    assert_eq!(code, 200);
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            assert!(
                line == "# EOF"
                    || line.starts_with("# HELP accel_")
                    || line.starts_with("# TYPE accel_")
                    || line.starts_with("# UNIT accel_"),
                "a forged comment line: {line:?}"
            );
            continue;
        }
        samples.push(parse_sample(line).unwrap_or_else(|| panic!("not a sample line: {line:?}\n{text}")));
    }
    assert!(samples.iter().all(|s| s.name.starts_with("accel_")), "a forged series");
    let info: Vec<&Sample> = samples.iter().filter(|s| s.name == "accel_device_info").collect();
    assert_eq!(info.len(), 4, "one series per accelerator");
    let model = |s: &Sample| s.labels.iter().find(|(k, _)| k == "model").map(|(_, v)| v.clone()).unwrap();
    assert_eq!(info.iter().filter(|s| model(s) == product).count(), 1, "the value survives the round trip");
    let up: Vec<&Sample> = samples.iter().filter(|s| s.name == "accel_reader_up").collect();
    assert_eq!(up.len(), 1, "{text}");
}

#[test]
fn label_values_are_escaped_by_the_exposition_rules() {
    let mut out = String::new();
    accel_agent::metrics::escape_label_value("a\\b\"c\nd", &mut out).unwrap();
    assert_eq!(out, r#"a\\b\"c\nd"#);
}

// --- /metrics/transport -----------------------------------------------------------------------

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0)
        .unwrap();
}

#[test]
fn the_transport_directory_serves_no_fifo_and_no_link() {
    let dir = accel_testdata::TempDir::new("agent-security-transport");
    let secret = accel_testdata::TempDir::new("agent-security-transport-secret");
    // Names of processes that are alive: ours, our parent's and init's.
    let (me, parent) = (std::process::id(), std::os::unix::process::parent_id());
    std::fs::write(secret.path().join("token"), "secret_token_0123456789 1\n").unwrap();
    std::os::unix::fs::symlink(secret.path().join("token"), dir.path().join("accel-transport-1.prom")).unwrap();
    mkfifo(&dir.path().join(format!("accel-transport-{parent}.prom")));
    std::fs::write(dir.path().join(format!("accel-transport-{me}.prom")), "accel_transport_pool_bytes 3\n").unwrap();
    let addr = start(Setup { transport_dir: Some(dir.to_path_buf()), ..Setup::default() });
    // Many scrapes at once, each of which used to park a thread on the FIFO for good.
    let scrapes: Vec<_> =
        (0..32).map(|_| std::thread::spawn(move || get(addr, "/metrics/transport", "localhost"))).collect();
    for s in scrapes {
        let (code, _, body) = s.join().unwrap();
        assert_eq!(code, 200, "{body}");
        assert!(!body.contains("secret_token"), "followed the link: {body}");
        assert!(body.contains(&format!("accel_transport_pool_bytes{{pid=\"{me}\"}} 3")), "{body}");
        assert!(body.contains("accel_transport_files_skipped{reason=\"not_regular\"} 2"), "{body}");
    }
    let (code, _, body) = get(addr, "/v1/health", "localhost");
    assert_eq!(code, 200, "{body}");
}
