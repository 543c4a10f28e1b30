//! Direct tensor transport: an owner publishes buffers from a pooled shared-memory arena, and
//! consumers reach them in place (same process), by mapping them (same host) or over an
//! authenticated TCP stream (other hosts; encrypted beyond loopback), and the path between two
//! ends is chosen from the hardware model (`route`). Plain Rust: std threads, blocking sockets,
//! no pyo3.

mod auth;
mod channel;
mod config;
mod conn;
mod control;
#[cfg(feature = "cuda-ipc")]
pub mod cuda_ipc;
mod endpoint;
mod error;
mod forkguard;
pub mod frame;
mod identity;
mod lease;
mod mapping;
mod metrics;
mod path;
pub mod relay;
pub mod route;
pub mod secure;
mod shm;
mod tcp;

pub use auth::{client_handshake, server_handshake, SECRET_MIN_LEN};
pub use channel::{Channels, MAX_MANIFEST};
pub use config::Config;
pub use control::Control;
pub use endpoint::{backends, Relayed, Transport};
pub use error::{Error, Result};
pub use identity::{host_id, pid_namespace, process_alive, Identity, SEGMENT_PREFIX};
pub use lease::Leases;
pub use mapping::{MapCache, Mapping};
pub use metrics::{Metrics, PathStats, Role, BUCKETS};
pub use path::{Backend, Descriptor, Path};
pub use shm::{size_class, sweep_orphans, Allocation, Arena, PoolStats};
pub use tcp::{Client, Server};
