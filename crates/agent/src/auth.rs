//! Who may read the agent: anyone on loopback without a token; with a token, only requests
//! carrying `Authorization: Bearer <token>` (compared in constant time). A listener reachable
//! from the network without a token is refused before it binds.

use std::net::SocketAddr;
use std::path::Path;

/// Why the agent will not start.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AuthError {
    #[error(
        "refusing to listen on {0} without a token: a non-loopback address is reachable from the network; \
         pass --token-file FILE (a file holding a random secret), or listen on 127.0.0.1"
    )]
    NetworkWithoutToken(SocketAddr),
    #[error("token file {0}: {1}")]
    TokenFile(String, String),
}

/// Checks the listener against the token: loopback needs none, anything else needs one.
pub fn check_listener(addr: SocketAddr, token: Option<&str>) -> Result<(), AuthError> {
    if token.is_none() && !addr.ip().is_loopback() {
        return Err(AuthError::NetworkWithoutToken(addr));
    }
    Ok(())
}

/// Reads a token file: its first line, trimmed; at least 16 bytes.
pub fn read_token(path: &Path) -> Result<String, AuthError> {
    let err = |m: String| AuthError::TokenFile(path.display().to_string(), m);
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.len() < 16 {
        return Err(err("the token must be at least 16 characters".into()));
    }
    if token.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(err("the token must be printable ASCII without spaces".into()));
    }
    Ok(token)
}

/// Whether an `Authorization` header value carries `token`, compared in constant time.
pub fn authorized(header: Option<&[u8]>, token: &str) -> bool {
    let Some(value) = header else { return false };
    let Some(given) = value.strip_prefix(b"Bearer ") else { return false };
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
        assert!(check_listener(lo, None).is_ok());
        assert!(check_listener(lo6, None).is_ok());
        let e = check_listener(any, None).unwrap_err();
        assert!(e.to_string().contains("--token-file"), "{e}");
        assert!(check_listener(any, Some("x")).is_ok());
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
    }

    #[test]
    fn token_files_are_checked() {
        let p = std::env::temp_dir().join(format!("accel-agent-token-{}", std::process::id()));
        std::fs::write(&p, "short\n").unwrap();
        assert!(read_token(&p).is_err());
        std::fs::write(&p, "0123456789abcdef0123\n").unwrap();
        assert_eq!(read_token(&p).unwrap(), "0123456789abcdef0123");
        assert!(read_token(Path::new("/nonexistent/token")).is_err());
    }
}
