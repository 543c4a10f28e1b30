//! The transport's one error type; every variant says what failed and for which owner or buffer.

/// Errors of the transport.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "shared-memory pool exhausted: {requested} bytes requested, {in_use} of {limit} bytes \
         held by outstanding references (free references or raise ACCEL_TRANSPORT_POOL_BYTES)"
    )]
    PoolExhausted { requested: u64, in_use: u64, limit: u64 },
    #[error("the owner of this reference ({owner}) has exited")]
    OwnerGone { owner: String },
    #[error("buffer {buffer} of owner {owner} was freed (or never published)")]
    Freed { owner: String, buffer: u64 },
    #[error("stale reference: its owner {expected} is gone; {endpoint} now serves owner {found}")]
    Stale { expected: String, found: String, endpoint: String },
    #[error("shared-memory segment {path} refused, not read: {reason} (planted by another user?)")]
    Untrusted { path: String, reason: String },
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: u64, max: u64 },
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("invalid transport configuration: {0}")]
    Config(String),
    #[error("transport path {0} is not available in this build or on this machine")]
    Unsupported(&'static str),
}

/// What an authentication failure between two processes tells the user: how each side chose its
/// secret, and how to make them agree.
pub const SECRET_HINT: &str = "both ends need the same cluster secret, which each process takes from, in order: \
     ACCEL_TRANSPORT_SECRET; the file named by ACCEL_TRANSPORT_SECRET_FILE (default \
     ~/.config/accel/transport-secret); inside a Ray cluster, the one accel keeps in Ray's KV \
     (namespace accel); else a random one its child processes inherit. To fix it, give both \
     ends the same variable, or the same file on every node (mode 0600), or, inside one Ray \
     cluster, neither";

/// The transport's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps an IO error with what was being done.
pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
