//! Who may read the agent: anyone on loopback without a token; with a token, only requests
//! carrying `Authorization: Bearer <token>` (compared in constant time). A listener reachable
//! from the network without a token and TLS is refused before it binds, a token or key file
//! others could read is refused, and every request must name the agent in its `Host` ([`HostPolicy`]), so a web
//! page cannot reach a loopback agent through DNS rebinding.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why the agent will not start.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AuthError {
    #[error(
        "refusing to listen on {0} without a token: a non-loopback address is reachable from the network; \
         pass --token-file FILE (a file holding a random secret), or listen on 127.0.0.1"
    )]
    NetworkWithoutToken(SocketAddr),
    #[error(
        "refusing to listen on {0} without TLS: a token sent in the clear can be read on the network; \
         pass --tls-cert FILE --tls-key FILE, or listen on 127.0.0.1"
    )]
    NetworkWithoutTls(SocketAddr),
    #[error("token file {0}: {1}")]
    TokenFile(String, String),
    #[error("--allow-host {0:?}: {1}")]
    AllowHost(String, &'static str),
}

/// Checks the listener: loopback needs nothing; any other address needs a token and TLS, so a
/// token never crosses the network in the clear.
pub fn check_listener(addr: SocketAddr, token: Option<&str>, tls: bool) -> Result<(), AuthError> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    if token.is_none() {
        return Err(AuthError::NetworkWithoutToken(addr));
    }
    if !tls {
        return Err(AuthError::NetworkWithoutTls(addr));
    }
    Ok(())
}

/// Largest token file read (the token is its first line).
const MAX_TOKEN_FILE: u64 = 4096;

/// Reads a secret file (a token, a TLS key): at most `max` bytes. The file must be a regular file
/// belonging to this process's user and unreadable by group and others (`chmod 600`): a secret
/// others can read guards nothing. The checks look at the opened file, so a swap between check
/// and read is moot. The error names no content.
pub fn read_private(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!("owned by uid {}, not by this process's user (uid {me})", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "readable or writable by group or others (mode {:04o}); run `chmod 600 {}`",
            meta.mode() & 0o7777,
            path.display()
        ));
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// Reads a token file (under [`read_private`]'s rules): its first line, trimmed; at least 16
/// printable ASCII characters without spaces.
pub fn read_token(path: &Path) -> Result<String, AuthError> {
    let err = |m: String| AuthError::TokenFile(path.display().to_string(), m);
    let bytes = read_private(path, MAX_TOKEN_FILE).map_err(err)?;
    let text = String::from_utf8_lossy(&bytes);
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.len() < 16 {
        return Err(err("the token must be at least 16 characters".into()));
    }
    if token.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(err("the token must be printable ASCII without spaces".into()));
    }
    Ok(token)
}

/// Which `Host` a request may name. A browser sends the name it resolved, so a page served from
/// `attacker.example` whose name is rebound to 127.0.0.1 still says `Host: attacker.example`;
/// refusing names the agent was not told about closes that door even without a token.
///
/// Allowed: `localhost`, every loopback address (127.0.0.0/8, `::1`), the address the agent is
/// bound to (any address literal when bound to a wildcard address: a literal names the server
/// itself and involves no DNS, so it cannot be rebound), and the names and addresses given with
/// `--allow-host`. The port is not checked. Names compare without regard to case.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    names: Vec<String>,
    addrs: Vec<IpAddr>,
    any_address: bool,
}

impl HostPolicy {
    /// `localhost` and the loopback addresses only.
    pub fn loopback() -> HostPolicy {
        HostPolicy { names: vec!["localhost".into()], addrs: Vec::new(), any_address: false }
    }

    /// The policy of an agent bound to `bound` that also serves `allowed` (names or addresses,
    /// without a port), each checked by [`allow_host`].
    pub fn new(bound: SocketAddr, allowed: &[String]) -> Result<HostPolicy, AuthError> {
        let mut policy = HostPolicy {
            names: vec!["localhost".into()],
            addrs: vec![bound.ip()],
            any_address: bound.ip().is_unspecified(),
        };
        for a in allowed {
            match allow_host(a)? {
                Allowed::Name(n) => policy.names.push(n),
                Allowed::Addr(ip) => policy.addrs.push(ip),
            }
        }
        Ok(policy)
    }

    /// Whether a `Host` header value (or a request URI's authority) names this agent.
    pub fn allows(&self, host: &str) -> bool {
        let Some(name) = strip_port(host) else { return false };
        if let Some(inner) = name.strip_prefix('[') {
            let Some(v6) = inner.strip_suffix(']').and_then(|a| a.parse::<std::net::Ipv6Addr>().ok()) else {
                return false;
            };
            return self.allows_ip(IpAddr::V6(v6));
        }
        if let Ok(v4) = name.parse::<std::net::Ipv4Addr>() {
            return self.allows_ip(IpAddr::V4(v4));
        }
        self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    }

    fn allows_ip(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_loopback() || self.any_address || self.addrs.iter().any(|a| a.to_canonical() == ip)
    }
}

/// `host[:port]` without its port; `None` when the port is not a number.
fn strip_port(host: &str) -> Option<&str> {
    let (name, port) = match host.rfind(':') {
        // An IPv6 literal keeps its colons inside the brackets.
        Some(i) if !host[i..].contains(']') => (&host[..i], Some(&host[i + 1..])),
        _ => (host, None),
    };
    match port {
        Some(p) if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) => None,
        _ if name.is_empty() => None,
        _ => Some(name),
    }
}

/// One `--allow-host` value, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Allowed {
    /// A DNS name, lower-cased.
    Name(String),
    Addr(IpAddr),
}

/// Checks an `--allow-host` value: a DNS name (letters, digits, `-` and `.`) or an IP address
/// (an IPv6 one with or without brackets), without a port.
pub fn allow_host(value: &str) -> Result<Allowed, AuthError> {
    let err = |m| AuthError::AllowHost(value.to_owned(), m);
    let bare = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')).unwrap_or(value);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(Allowed::Addr(ip));
    }
    if value.is_empty() || value.len() > 253 {
        return Err(err("a host name is 1 to 253 characters"));
    }
    if value.contains(':') {
        return Err(err("give the name or address without a port"));
    }
    if !value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        || value.split('.').any(|label| label.is_empty() || label.len() > 63)
    {
        return Err(err("not a host name (letters, digits, '-' and '.') or an IP address"));
    }
    Ok(Allowed::Name(value.to_ascii_lowercase()))
}

/// Whether an `Authorization` header value carries `token` as a bearer credential: the scheme
/// compares without regard to case (RFC 9110, 11.1), the token exactly and in constant time.
pub fn authorized(header: Option<&[u8]>, token: &str) -> bool {
    let Some(value) = header else { return false };
    let Some(space) = value.iter().position(|&b| b == b' ') else { return false };
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return false;
    }
    let given = rest.trim_ascii();
    constant_time_eq(given, token.as_bytes())
}

/// Equality whose running time depends only on the lengths, not on where the bytes differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    // Keep the optimiser from turning the loop into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_listener_needs_a_token() {
        let lo: SocketAddr = "127.0.0.1:9477".parse().unwrap();
        let lo6: SocketAddr = "[::1]:9477".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:9477".parse().unwrap();
        assert!(check_listener(lo, None, false).is_ok());
        assert!(check_listener(lo6, None, false).is_ok());
        let e = check_listener(any, None, true).unwrap_err();
        assert!(e.to_string().contains("--token-file"), "{e}");
        let e = check_listener(any, Some("x"), false).unwrap_err();
        assert!(e.to_string().contains("--tls-cert"), "a plain listener beyond loopback: {e}");
        assert!(check_listener(any, Some("x"), true).is_ok());
    }

    #[test]
    fn bearer_tokens_compare_exactly() {
        let t = "0123456789abcdef";
        assert!(authorized(Some(b"Bearer 0123456789abcdef"), t));
        assert!(!authorized(Some(b"Bearer 0123456789abcdeF"), t));
        assert!(!authorized(Some(b"Bearer 0123456789abcde"), t));
        assert!(!authorized(Some(b"Bearer 0123456789abcdef0"), t));
        assert!(!authorized(Some(b"Basic 0123456789abcdef"), t));
        assert!(!authorized(None, t));
        // The scheme is case-insensitive; the token is not.
        assert!(authorized(Some(b"bearer 0123456789abcdef"), t));
        assert!(authorized(Some(b"BEARER  0123456789abcdef"), t));
        assert!(!authorized(Some(b"bearer 0123456789ABCDEF"), t));
        assert!(!authorized(Some(b"Bearer"), t));
        assert!(!authorized(Some(b"Bearer0123456789abcdef"), t));
    }

    fn write_mode(path: &Path, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn token_files_are_checked() {
        let d = accel_testdata::TempDir::new("agent-token");
        let p = d.path().join("token");
        write_mode(&p, "short\n", 0o600);
        assert!(read_token(&p).is_err());
        write_mode(&p, "0123456789abcdef0123\n", 0o600);
        assert_eq!(read_token(&p).unwrap(), "0123456789abcdef0123");
        write_mode(&p, "0123456789abcdef0123\n", 0o400);
        assert_eq!(read_token(&p).unwrap(), "0123456789abcdef0123");
        assert!(read_token(Path::new("/nonexistent/token")).is_err());
        assert!(read_token(d.path()).unwrap_err().to_string().contains("not a regular file"));
    }

    #[test]
    fn a_token_file_others_can_read_is_refused() {
        let d = accel_testdata::TempDir::new("agent-token-mode");
        let p = d.path().join("token");
        for mode in [0o666, 0o644, 0o640, 0o604, 0o620, 0o602, 0o610] {
            write_mode(&p, "0123456789abcdef0123\n", mode);
            let e = read_token(&p).unwrap_err().to_string();
            assert!(e.contains(&p.display().to_string()), "names the file: {e}");
            assert!(e.contains(&format!("chmod 600 {}", p.display())), "says what to do: {e}");
            assert!(e.contains(&format!("{mode:04o}")), "{e}");
        }
    }

    #[test]
    fn a_token_file_of_another_user_is_refused() {
        let d = accel_testdata::TempDir::new("agent-token-owner");
        let me = rustix::process::geteuid().as_raw();
        let p = if me == 0 {
            // As root: a file given away to `nobody`.
            let p = d.path().join("token");
            write_mode(&p, "0123456789abcdef0123\n", 0o600);
            std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
            p
        } else {
            // Otherwise: a file root owns.
            std::path::PathBuf::from("/etc/passwd")
        };
        let e = read_token(&p).unwrap_err().to_string();
        assert!(e.contains("owned by uid") && e.contains(&format!("(uid {me})")), "{e}");
    }

    #[test]
    fn hosts_are_loopback_localhost_the_bound_address_and_the_allowed_names() {
        let lo: SocketAddr = "127.0.0.1:9477".parse().unwrap();
        let p = HostPolicy::new(lo, &[]).unwrap();
        for ok in ["localhost", "LocalHost:9477", "127.0.0.1", "127.0.0.1:9477", "127.8.9.1:1", "[::1]", "[::1]:9477"] {
            assert!(p.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9477",
            "localhost.",
            "localhost.evil.example",
            "10.0.0.5:9477",
            "[::2]:9477",
            "127.1",
            "localhost:http",
            "localhost:",
            ":9477",
            "",
            "[::1",
            "::1",
            "localhost:9477:1",
        ] {
            assert!(!p.allows(bad), "{bad}");
        }
        let bound: SocketAddr = "10.0.0.5:9477".parse().unwrap();
        let p = HostPolicy::new(bound, &["agent.example".into(), "fd00::7".into(), "[fd00::8]".into()]).unwrap();
        for ok in ["10.0.0.5:9477", "agent.example:9477", "AGENT.example", "[fd00::7]:1", "[fd00::8]", "localhost"] {
            assert!(p.allows(ok), "{ok}");
        }
        for bad in ["10.0.0.6", "other.example", "agent.example.evil"] {
            assert!(!p.allows(bad), "{bad}");
        }
        // A wildcard listener is reached at any of the node's addresses; names stay closed.
        let p = HostPolicy::new("0.0.0.0:9477".parse().unwrap(), &[]).unwrap();
        assert!(p.allows("10.1.2.3:9477") && p.allows("[fe80::1]"));
        assert!(!p.allows("node-1.cluster:9477"));
    }

    #[test]
    fn allow_host_values_are_checked() {
        assert_eq!(allow_host("Node-1.Cluster").unwrap(), Allowed::Name("node-1.cluster".into()));
        assert_eq!(allow_host("[::1]").unwrap(), Allowed::Addr("::1".parse().unwrap()));
        for bad in ["", "node:9477", "a..b", "*.example", "evil/x", "é.example", ".example"] {
            let e = allow_host(bad).unwrap_err();
            assert!(e.to_string().starts_with("--allow-host"), "{e}");
        }
        assert!(HostPolicy::new("127.0.0.1:1".parse().unwrap(), &["x y".into()]).is_err());
    }
}
