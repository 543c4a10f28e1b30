//! Transport configuration, built from explicit values or from a variable lookup the caller
//! passes in (the library never reads the process environment itself).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::auth::SECRET_MIN_LEN;
use crate::error::{Error, Result};

/// Everything the transport needs to know; `Config::from_lookup` documents the variables.
#[derive(Clone)]
pub struct Config {
    /// The cluster secret both ends of a TCP connection prove (never sent).
    pub secret: Vec<u8>,
    /// Where the TCP listener binds; loopback unless configured otherwise.
    pub bind: SocketAddr,
    /// The address put on references; defaults to the bound address.
    pub advertise: Option<String>,
    /// Bound on the shared memory held by this owner (outstanding plus pooled buffers).
    pub pool_bytes: u64,
    /// Bound on a consumer's cache of unused read-only mappings (the warm shared-memory path).
    pub map_cache_bytes: u64,
    /// Largest frame a server accepts and the chunk it streams in (consumers bound data frames by
    /// the room left in the destination instead, so ends with different settings interoperate).
    pub max_frame: u32,
    /// Directory of the shared-memory segments.
    pub shm_dir: PathBuf,
    /// Connect timeout of a consumer.
    pub connect_timeout: Duration,
    /// Read/write inactivity timeout of a consumer.
    pub io_timeout: Duration,
    /// Most concurrent authenticated server connections (connections still in their handshake
    /// do not count: they have their own bound, `max_handshakes`).
    pub max_connections: usize,
    /// Most server connections still in their handshake at once; when a new one arrives with
    /// every place taken, the oldest is dropped, so unauthenticated sockets can never keep an
    /// authenticated consumer out.
    pub max_handshakes: usize,
    /// How long a server gives a connection for its whole handshake, however slowly its bytes
    /// arrive (one deadline, not a per-read timeout).
    pub handshake_timeout: Duration,
    /// Whether the server streams with `sendfile` (no user-space copy) rather than writes.
    pub sendfile: bool,
    /// How long an owner waits for a consumer to confirm a spliced stream before it aborts the
    /// connection and retires the buffer (so a stalled consumer never reads recycled bytes).
    pub drain_timeout: Duration,
    /// Encrypt loopback connections too (connections beyond loopback always are).
    pub encrypt_loopback: bool,
    /// TCP connections a consumer streams one large buffer over at once (each a range of it).
    pub streams: usize,
    /// Idle segments of each size class (1 MiB and up) that the pool makes ahead of demand, in
    /// the background, after an allocation of that class (0: none).
    pub spares: usize,
    /// Readers that each node of a relayed broadcast serves: 1 is a chain, 2 a binary tree.
    pub relay_fanout: u32,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("secret", &"<redacted>")
            .field("bind", &self.bind)
            .field("advertise", &self.advertise)
            .field("pool_bytes", &self.pool_bytes)
            .field("max_frame", &self.max_frame)
            .field("shm_dir", &self.shm_dir)
            .finish_non_exhaustive()
    }
}

/// Default pool bound: 4 GiB.
pub const DEFAULT_POOL_BYTES: u64 = 4 << 30;
/// Default number of TCP streams per large fetch.
pub const DEFAULT_STREAMS: usize = 2;
/// Default number of idle segments made ahead of demand per size class.
pub const DEFAULT_SPARES: usize = 1;
/// Default bound on connections still in their handshake.
pub const DEFAULT_MAX_HANDSHAKES: usize = 64;
/// Default deadline of a server's whole handshake.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default frame limit and streaming chunk: 4 MiB.
pub const DEFAULT_MAX_FRAME: u32 = 4 << 20;

impl Config {
    /// A loopback configuration with the given secret and defaults elsewhere.
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        Config {
            secret: secret.into(),
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            pool_bytes: DEFAULT_POOL_BYTES,
            map_cache_bytes: DEFAULT_POOL_BYTES,
            max_frame: DEFAULT_MAX_FRAME,
            shm_dir: PathBuf::from("/dev/shm"),
            connect_timeout: Duration::from_millis(1000),
            io_timeout: Duration::from_millis(5000),
            max_connections: 256,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            sendfile: true,
            drain_timeout: Duration::from_secs(30),
            encrypt_loopback: false,
            streams: DEFAULT_STREAMS,
            spares: DEFAULT_SPARES,
            relay_fanout: 1,
        }
    }

    /// Reads `ACCEL_TRANSPORT_SECRET` (required), `_BIND`, `_ADVERTISE`, `_POOL_BYTES`,
    /// `_MAP_CACHE_BYTES`, `_MAX_FRAME`, `_SHM_DIR`, `_IO_TIMEOUT_MS`, `_DRAIN_TIMEOUT_MS`,
    /// `_HANDSHAKE_TIMEOUT_MS` (a server's deadline for a connection's whole handshake),
    /// `_MAX_HANDSHAKES` (connections a server holds in their handshake at once),
    /// `_SENDFILE` (0 to stream with plain writes), `_ENCRYPT` (`always` to encrypt loopback
    /// connections too), `_STREAMS` (TCP connections per large fetch) and `_SPARES` (idle
    /// segments made ahead of demand per size class) and `_RELAY_FANOUT` (readers each node of a
    /// relayed broadcast serves) through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |name: &str| lookup(&format!("ACCEL_TRANSPORT_{name}")).filter(|v| !v.is_empty());
        let secret = var("SECRET").ok_or_else(|| Error::Config("ACCEL_TRANSPORT_SECRET is not set".into()))?;
        let mut cfg = Config::new(secret.into_bytes());
        if let Some(bind) = var("BIND") {
            cfg.bind = bind.parse().map_err(|e| Error::Config(format!("ACCEL_TRANSPORT_BIND={bind}: {e}")))?;
        }
        cfg.advertise = var("ADVERTISE");
        if let Some(v) = var("POOL_BYTES") {
            cfg.pool_bytes = parse_num(&v, "ACCEL_TRANSPORT_POOL_BYTES")?;
        }
        if let Some(v) = var("MAP_CACHE_BYTES") {
            cfg.map_cache_bytes = parse_num(&v, "ACCEL_TRANSPORT_MAP_CACHE_BYTES")?;
        }
        if let Some(v) = var("MAX_FRAME") {
            cfg.max_frame = u32::try_from(parse_num(&v, "ACCEL_TRANSPORT_MAX_FRAME")?)
                .map_err(|_| Error::Config("ACCEL_TRANSPORT_MAX_FRAME must fit in 32 bits".into()))?;
        }
        if let Some(v) = var("SHM_DIR") {
            cfg.shm_dir = PathBuf::from(v);
        }
        if let Some(v) = var("SENDFILE") {
            cfg.sendfile = !matches!(v.as_str(), "0" | "false" | "no" | "off");
        }
        if let Some(v) = var("DRAIN_TIMEOUT_MS") {
            cfg.drain_timeout = Duration::from_millis(parse_num(&v, "ACCEL_TRANSPORT_DRAIN_TIMEOUT_MS")?);
        }
        if let Some(v) = var("ENCRYPT") {
            cfg.encrypt_loopback = match v.as_str() {
                "always" => true,
                "auto" => false,
                other => {
                    return Err(Error::Config(format!("ACCEL_TRANSPORT_ENCRYPT={other}: expected auto or always")))
                }
            };
        }
        if let Some(v) = var("STREAMS") {
            cfg.streams = usize::try_from(parse_num(&v, "ACCEL_TRANSPORT_STREAMS")?)
                .ok()
                .filter(|n| (1..=64).contains(n))
                .ok_or_else(|| Error::Config(format!("ACCEL_TRANSPORT_STREAMS={v}: 1 to 64")))?;
        }
        if let Some(v) = var("SPARES") {
            cfg.spares = usize::try_from(parse_num(&v, "ACCEL_TRANSPORT_SPARES")?)
                .ok()
                .filter(|n| *n <= 8)
                .ok_or_else(|| Error::Config(format!("ACCEL_TRANSPORT_SPARES={v}: 0 to 8")))?;
        }
        if let Some(v) = var("RELAY_FANOUT") {
            cfg.relay_fanout = u32::try_from(parse_num(&v, "ACCEL_TRANSPORT_RELAY_FANOUT")?)
                .ok()
                .filter(|n| (1..=64).contains(n))
                .ok_or_else(|| Error::Config(format!("ACCEL_TRANSPORT_RELAY_FANOUT={v}: 1 to 64")))?;
        }
        if let Some(v) = var("HANDSHAKE_TIMEOUT_MS") {
            cfg.handshake_timeout = Duration::from_millis(parse_num(&v, "ACCEL_TRANSPORT_HANDSHAKE_TIMEOUT_MS")?)
                .max(Duration::from_millis(1));
        }
        if let Some(v) = var("MAX_HANDSHAKES") {
            cfg.max_handshakes = usize::try_from(parse_num(&v, "ACCEL_TRANSPORT_MAX_HANDSHAKES")?)
                .ok()
                .filter(|n| (1..=4096).contains(n))
                .ok_or_else(|| Error::Config(format!("ACCEL_TRANSPORT_MAX_HANDSHAKES={v}: 1 to 4096")))?;
        }
        if let Some(v) = var("IO_TIMEOUT_MS") {
            cfg.io_timeout = Duration::from_millis(parse_num(&v, "ACCEL_TRANSPORT_IO_TIMEOUT_MS")?);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the values that would otherwise fail later and less clearly.
    pub fn validate(&self) -> Result<()> {
        if self.secret.len() < SECRET_MIN_LEN {
            return Err(Error::Config(format!("the secret must be at least {SECRET_MIN_LEN} bytes")));
        }
        if self.max_handshakes == 0 || self.handshake_timeout.is_zero() {
            return Err(Error::Config("max_handshakes and handshake_timeout must be positive".into()));
        }
        if self.max_frame < 4096 {
            return Err(Error::Config("max_frame must be at least 4096 bytes".into()));
        }
        Ok(())
    }
}

/// Parses a byte count with an optional K/M/G suffix (binary units).
fn parse_num(text: &str, name: &str) -> Result<u64> {
    let t = text.trim();
    let (digits, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| Error::Config(format!("{name}={text}: not a byte count")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_variables() {
        let vars = [
            ("ACCEL_TRANSPORT_SECRET", "0123456789abcdef"),
            ("ACCEL_TRANSPORT_POOL_BYTES", "2G"),
            ("ACCEL_TRANSPORT_BIND", "10.0.0.1:7000"),
        ];
        let cfg = Config::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).unwrap();
        assert_eq!(cfg.pool_bytes, 2 << 30);
        assert_eq!(cfg.bind.to_string(), "10.0.0.1:7000");
        assert!(!format!("{cfg:?}").contains("0123456789abcdef"));
    }

    #[test]
    fn requires_a_secret() {
        assert!(matches!(Config::from_lookup(|_| None), Err(Error::Config(_))));
        assert!(Config::new(b"short".to_vec()).validate().is_err());
    }
}
