//! A tiny HTTP/1.0 client over `std::net` for metadata servers (GCE, EC2 IMDS) and, through
//! [`exchange`] and [`exchange_over`] (a TLS client over the socket), `accel cluster build
//! --from-agent`: no TLS of its own, short timeouts, and one deadline shared by every look-up of a discovery run, so the
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
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
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

/// One HTTP/1.0 exchange, as [`exchange`] makes it.
#[derive(Debug, Clone)]
pub struct Exchange<'a> {
    /// `GET`, or `PUT` (sent with an empty body).
    pub method: &'a str,
    /// `host:port` to connect to (each address it resolves to is tried in turn).
    pub addr: &'a str,
    /// The `Host` header.
    pub host: &'a str,
    /// The request target (`/path`).
    pub path: &'a str,
    /// Extra header lines (a token goes here: no error quotes a header).
    pub headers: &'a [(&'a str, &'a str)],
    /// Everything, connecting included, ends by then.
    pub deadline: Instant,
    /// The longest one connect attempt may take.
    pub connect_timeout: Duration,
    /// The most the whole answer may hold.
    pub max_bytes: usize,
}

/// A connection [`exchange_over`] speaks through: a TCP socket, or a wrapper over one (TLS).
pub trait Conn: Read + Write {
    /// The socket below, whose timeouts bound every read and write.
    fn socket(&self) -> &TcpStream;
}

impl Conn for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

/// Sends one request and reads the whole answer before the deadline (re-arming the read
/// timeout with what is left, so a trickling server cannot outlast it): its status and body.
pub fn exchange(x: &Exchange<'_>) -> Result<(u16, Vec<u8>), NetError> {
    exchange_over(x, Ok)
}

/// [`exchange`] through what `wrap` makes of the connected socket (a TLS client over it). The
/// deadline bounds the wrapper's own traffic (a handshake) too.
pub fn exchange_over<C: Conn>(
    x: &Exchange<'_>,
    wrap: impl FnOnce(TcpStream) -> Result<C, NetError>,
) -> Result<(u16, Vec<u8>), NetError> {
    let left = |deadline: Instant| deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
    let io = |e: std::io::Error| NetError::Io(e.to_string());
    let mut stream = None;
    for addr in x.addr.to_socket_addrs().map_err(io)? {
        let timeout = left(x.deadline).ok_or(NetError::Budget)?.min(x.connect_timeout);
        if let Ok(s) = TcpStream::connect_timeout(&addr, timeout) {
            stream = Some(s);
            break;
        }
    }
    let stream = stream.ok_or_else(|| NetError::Io(format!("cannot connect to {}", x.addr)))?;
    let rest = left(x.deadline).ok_or(NetError::Budget)?;
    stream.set_write_timeout(Some(rest)).map_err(io)?;
    stream.set_read_timeout(Some(rest)).map_err(io)?;
    let mut conn = wrap(stream)?;
    let mut req = format!("{} {} HTTP/1.0\r\nHost: {}\r\nConnection: close\r\n", x.method, x.path, x.host);
    for (k, v) in x.headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if x.method == "PUT" {
        req.push_str("Content-Length: 0\r\n");
    }
    req.push_str("\r\n");
    let timed_out =
        |e: &std::io::Error| matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut);
    conn.write_all(req.as_bytes()).map_err(|e| if timed_out(&e) { NetError::Budget } else { io(e) })?;
    conn.flush().map_err(io)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        conn.socket().set_read_timeout(Some(left(x.deadline).ok_or(NetError::Budget)?)).map_err(io)?;
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > x.max_bytes {
                    return Err(NetError::TooLarge(x.max_bytes));
                }
            }
            Err(e) if timed_out(&e) => return Err(NetError::Budget),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A TLS peer that closed without its close_notify: the answer is what arrived (a
            // cut-off body fails where it is parsed).
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => break,
            Err(e) => return Err(io(e)),
        }
    }
    parse_response(&out)
}

/// One request (`GET` or `PUT` with an empty body) to a metadata server before `deadline`.
/// Returns the body of a 200.
pub fn request(method: &str, url: &str, headers: &[(&str, &str)], deadline: Instant) -> Result<String, NetError> {
    let (authority, path) = split_url(url).ok_or_else(|| NetError::Url(url.to_owned()))?;
    let host = authority.rsplit_once(':').map_or(authority.as_str(), |(h, _)| h);
    let (code, body) = exchange(&Exchange {
        method,
        addr: &authority,
        host,
        path: &path,
        headers,
        deadline,
        connect_timeout: CONNECT_TIMEOUT,
        max_bytes: MAX_RESPONSE,
    })?;
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
