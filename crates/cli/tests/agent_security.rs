//! `accel agent` under the audit's process-level attacks (issue 17), against the built binary on
//! loopback: descriptor exhaustion by idle sockets, memory held by slow headers, SIGTERM with
//! connections open, and the refused token files and `--allow-host` values. Bounded in time: a
//! child that outlives its test is killed.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running agent, killed when dropped.
struct Agent {
    child: Child,
    addr: SocketAddr,
}

impl Agent {
    /// `accel agent --sample gb200-nvl72-tray --listen 127.0.0.1:0 ARGS`, with the open-file
    /// limit set to `nofile` when given (through the shell's `ulimit`).
    fn start(nofile: Option<u32>, args: &[&str]) -> Agent {
        let bin = env!("CARGO_BIN_EXE_accel");
        let mut cmd = Command::new("sh");
        let limit = nofile.map(|n| format!("ulimit -n {n} && ")).unwrap_or_default();
        cmd.arg("-c")
            .arg(format!("{limit}exec \"$0\" agent --sample gb200-nvl72-tray --listen 127.0.0.1:0 \"$@\""))
            .arg(bin)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let addr = accel_testdata::agent_address(&mut child);
        Agent { child, addr }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A kibibyte figure of /proc/PID/status (`VmRSS`, `VmHWM`).
    fn status_kib(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = text.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Sends SIGTERM; how long the agent took to exit, or `None` past `limit` (then killed).
    fn terminate(&mut self, limit: Duration) -> Option<Duration> {
        let sent = Instant::now();
        let ok = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().unwrap().success();
        assert!(ok, "kill -TERM failed");
        while sent.elapsed() < limit {
            if self.child.try_wait().unwrap().is_some() {
                return Some(sent.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// `GET /v1/health`; the status code, 0 when unanswered within the read timeout.
fn health(addr: SocketAddr) -> u16 {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else { return 0 };
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    if s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_err() {
        return 0;
    }
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[test]
fn idle_sockets_beyond_the_descriptor_limit_do_not_starve_health() {
    // The audit's attack at a smaller scale: more idle sockets than the agent has descriptors.
    let agent = Agent::start(Some(64), &[]);
    // (Against the old agent the later connects themselves time out: its backlog fills.)
    let idle: Vec<TcpStream> =
        (0..200).filter_map(|_| TcpStream::connect_timeout(&agent.addr, Duration::from_secs(2)).ok()).collect();
    for i in 0..10 {
        assert_eq!(health(agent.addr), 200, "health request {i} with {} idle sockets open", idle.len());
    }
    drop(idle);
}

#[test]
fn slow_headers_do_not_grow_memory_without_bound() {
    let agent = Agent::start(None, &[]);
    std::thread::sleep(Duration::from_millis(300));
    let before = agent.status_kib("VmRSS:");
    // 300 sockets, each sending up to 256 KiB of one header line without ever ending the head:
    // hyper's default buffer would keep up to ~400 KiB of each (the audit's 326 MB). A write
    // fails once the agent has refused the head and closed.
    let mut socks: Vec<TcpStream> = (0..300).map(|_| connect(agent.addr)).collect();
    let mut open = vec![true; socks.len()];
    for s in &mut socks {
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ");
    }
    let chunk = [b'a'; 8192];
    for _ in 0..32 {
        for (s, open) in socks.iter_mut().zip(&mut open) {
            if *open && s.write_all(&chunk).is_err() {
                *open = false;
            }
        }
    }
    // The agent reads what the kernel holds for it at its own pace: give it time to.
    std::thread::sleep(Duration::from_secs(2));
    let peak = agent.status_kib("VmHWM:");
    assert_eq!(health(agent.addr), 200);
    let grown_mib = peak.saturating_sub(before) / 1024;
    assert!(grown_mib < 32, "RSS grew by {grown_mib} MiB under slow headers (from {before} KiB)");
    drop(socks);
}

/// Whether the server has closed `s` (EOF or reset) within `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let _ = s.set_nonblocking(false);
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn sigterm_stops_the_agent_with_connections_open() {
    let mut agent = Agent::start(None, &[]);
    let mut idle: Vec<TcpStream> = (0..20).map(|_| connect(agent.addr)).collect();
    // Half a request head: graceful shutdown used to wait for the rest forever.
    let mut partial: Vec<TcpStream> = (0..5).map(|_| connect(agent.addr)).collect();
    for s in &mut partial {
        s.write_all(b"GET /v1/node HTTP/1.1\r\nHost: loc").unwrap();
    }
    // A kept-alive connection that has been answered once.
    let mut kept = connect(agent.addr);
    kept.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut buf = [0u8; 2048];
    assert!(kept.read(&mut buf).unwrap() > 0);
    let took = agent.terminate(Duration::from_secs(10));
    let took = took.expect("the agent was still running 10 s after SIGTERM");
    assert!(took < Duration::from_secs(2), "SIGTERM took {took:?}");
    for s in idle.iter_mut().chain(&mut partial) {
        assert!(closed_within(s, Duration::from_secs(1)));
    }
}

/// Runs `accel ARGS` to completion, or kills it after 20 s (an agent that should have refused to
/// start but serves instead).
fn accel(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_accel"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn usage_error(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    err
}

#[test]
fn a_token_file_others_can_read_is_refused_before_binding() {
    use std::os::unix::fs::PermissionsExt;
    let dir = accel_testdata::TempDir::new("cli-agent-security-token");
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123456789\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o666)).unwrap();
    let path = token.to_str().unwrap();
    let err =
        usage_error(&accel(&["agent", "--sample", "gb200-nvl72-tray", "--listen", "0.0.0.0:0", "--token-file", path]));
    assert!(err.contains(path) && err.contains(&format!("chmod 600 {path}")) && err.contains("0666"), "{err}");
}

#[test]
fn allow_host_is_documented_and_checked() {
    let help = accel(&["agent", "--help"]);
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("--allow-host <NAME>") && help.contains("421"), "{help}");
    let err = usage_error(&accel(&["agent", "--sample", "gb200-nvl72-tray", "--allow-host", "node-1:9477"]));
    assert!(err.contains("--allow-host \"node-1:9477\"") && err.contains("without a port"), "{err}");
}

#[test]
fn an_allowed_name_is_served_and_others_are_refused() {
    let agent = Agent::start(None, &["--allow-host", "node-1.example"]);
    let get = |host: &str| {
        let mut s = connect(agent.addr);
        write!(s, "GET /v1/node HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
        let mut bytes = Vec::new();
        let _ = s.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).split_whitespace().nth(1).and_then(|c| c.parse::<u16>().ok()).unwrap_or(0)
    };
    assert_eq!(get("node-1.example:9477"), 200);
    assert_eq!(get(&agent.addr.to_string()), 200);
    assert_eq!(get("attacker.example"), 421);
}
