//! A tiny HTTP/1.0 client over `std::net` for metadata servers (GCE, EC2 IMDS): plain `http://`
//! only, short timeouts, and one deadline shared by every look-up of a discovery run, so the
//! network never holds discovery up for longer than [`crate::NetConfig::budget`].

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The most a response may hold; metadata answers are small.
const MAX_RESPONSE: usize = 256 * 1024;
/// Longest single connect attempt, so one dead address leaves time for others.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(400);

/// A request that failed, with why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    #[error("network look-ups are disabled")]
    Disabled,
    #[error("time budget spent")]
    Budget,
    #[error("bad URL {0:?} (only http://host[:port]/path)")]
    Url(String),
    #[error("{0}")]
    Io(String),
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("malformed HTTP response")]
    Malformed,
}

/// Splits `http://host[:port]/path` into `(host:port, path)`.
pub fn split_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains(char::is_whitespace) || path.contains(char::is_whitespace) {
        return None;
    }
    let authority = if authority.contains(':') { authority.to_owned() } else { format!("{authority}:80") };
    Some((authority, path.to_owned()))
}

/// Parses a raw HTTP response: the status code and the body.
pub fn parse_response(bytes: &[u8]) -> Result<(u16, Vec<u8>), NetError> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").ok_or(NetError::Malformed)?;
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| NetError::Malformed)?;
    let status_line = head.lines().next().ok_or(NetError::Malformed)?;
    let mut parts = status_line.split_whitespace();
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/")) {
        return Err(NetError::Malformed);
    }
    let code: u16 = parts.next().and_then(|c| c.parse().ok()).ok_or(NetError::Malformed)?;
    Ok((code, bytes[end + 4..].to_vec()))
}

/// One request (`GET` or `PUT` with an empty body) before `deadline`. Returns the body of a 200.
pub fn request(method: &str, url: &str, headers: &[(&str, &str)], deadline: Instant) -> Result<String, NetError> {
    let (authority, path) = split_url(url).ok_or_else(|| NetError::Url(url.to_owned()))?;
    let left = |deadline: Instant| deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
    let io = |e: std::io::Error| NetError::Io(e.to_string());
    let mut stream = None;
    for addr in authority.to_socket_addrs().map_err(io)? {
        let timeout = left(deadline).ok_or(NetError::Budget)?.min(CONNECT_TIMEOUT);
        if let Ok(s) = TcpStream::connect_timeout(&addr, timeout) {
            stream = Some(s);
            break;
        }
    }
    let mut stream = stream.ok_or_else(|| NetError::Io(format!("cannot connect to {authority}")))?;
    let timeout = left(deadline).ok_or(NetError::Budget)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let host = authority.rsplit_once(':').map_or(authority.as_str(), |(h, _)| h);
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "PUT" {
        req.push_str("Content-Length: 0\r\n");
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).map_err(io)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // Re-arm the timeout with what is left, so a trickling server cannot outlast the deadline.
        let timeout = left(deadline).ok_or(NetError::Budget)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > MAX_RESPONSE {
                    return Err(NetError::Io("response too large".into()));
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(NetError::Budget)
            }
            Err(e) => return Err(io(e)),
        }
    }
    let (code, body) = parse_response(&out)?;
    if code != 200 {
        return Err(NetError::Status(code));
    }
    String::from_utf8(body).map_err(|_| NetError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn urls_and_responses() {
        assert_eq!(split_url("http://169.254.169.254/latest"), Some(("169.254.169.254:80".into(), "/latest".into())));
        assert_eq!(split_url("http://127.0.0.1:9"), Some(("127.0.0.1:9".into(), "/".into())));
        assert_eq!(split_url("https://x/"), None);
        assert_eq!(parse_response(b"HTTP/1.0 200 OK\r\nA: b\r\n\r\nbody").unwrap(), (200, b"body".to_vec()));
        assert_eq!(parse_response(b"garbage"), Err(NetError::Malformed));
        assert_eq!(parse_response(b"SMTP 200\r\n\r\n"), Err(NetError::Malformed));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(text in ".{0,80}", bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = split_url(&text);
            let _ = parse_response(&bytes);
        }
    }
}
