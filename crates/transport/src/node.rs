//! `Transport`: one process's endpoint. It owns the arena and the TCP server for the buffers
//! this process publishes, the client for the buffers it consumes, and the metrics of both.

use std::sync::Arc;

use crate::backend::Descriptor;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::identity::{host_id, process_alive, Identity};
use crate::metrics::Metrics;
use crate::shm::{sweep_orphans, Arena, MapCache, Mapping, PoolStats};
use crate::tcp::{Client, Server};

/// One process's transport endpoint.
#[derive(Debug)]
pub struct Transport {
    identity: Identity,
    owner: String,
    host: String,
    endpoint: String,
    config: Config,
    arena: Arc<Arena>,
    client: Client,
    maps: MapCache,
    /// Shared with the server, which counts what it serves (role `serve`).
    metrics: Arc<Metrics>,
    _server: Server,
}

impl Transport {
    /// Sweeps orphaned segments, then starts the arena and the listener.
    pub fn start(config: Config) -> Result<Transport> {
        config.validate()?;
        sweep_orphans(&config.shm_dir);
        let identity = Identity::current()?;
        let owner = identity.id();
        let arena = Arc::new(Arena::new(&config.shm_dir, &identity, config.pool_bytes));
        let metrics = Arc::new(Metrics::default());
        let server = Server::start(&config, &owner, arena.clone(), metrics.clone())?;
        let endpoint = match &config.advertise {
            Some(a) if a.contains(':') => a.clone(),
            Some(a) => format!("{a}:{}", server.addr().port()),
            None => server.addr().to_string(),
        };
        Ok(Transport {
            host: host_id(),
            client: Client::new(&config),
            maps: MapCache::new(config.map_cache_bytes),
            metrics,
            identity,
            owner,
            endpoint,
            config,
            arena,
            _server: server,
        })
    }

    /// This owner's id (`<pid>-<start>-<nonce>`).
    pub fn owner(&self) -> &str {
        &self.owner
    }
    /// This host's id.
    pub fn host(&self) -> &str {
        &self.host
    }
    /// The advertised TCP endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
    /// The identity behind `owner`.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }
    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// The metrics of this process: what it fetched as a consumer and what its server served.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
    /// The arena of this owner.
    pub fn arena(&self) -> &Arena {
        &self.arena
    }
    /// Bytes of read-only mappings this consumer caches.
    pub fn cached_map_bytes(&self) -> u64 {
        self.maps.bytes()
    }
    /// Pool usage.
    pub fn pool(&self) -> PoolStats {
        self.arena.stats()
    }

    /// Maps a same-host buffer. Fails with `OwnerGone` if its owner exited and `Freed` if the
    /// owner lives but the buffer is not published.
    pub fn open_shm(&self, d: &Descriptor, writable: bool) -> Result<Mapping> {
        let alive = Identity::parse(&d.owner).is_some_and(|id| process_alive(id.pid, id.start));
        if !alive {
            return Err(Error::OwnerGone { owner: d.owner.clone() });
        }
        match Mapping::open(&self.config.shm_dir, &d.segment, d.len, writable, &self.maps)? {
            Some(m) => Ok(m),
            // Gone because its owner died meanwhile (and a sweep took the segment)?
            None if !Identity::parse(&d.owner).is_some_and(|id| process_alive(id.pid, id.start)) => {
                Err(Error::OwnerGone { owner: d.owner.clone() })
            }
            None => Err(Error::Freed { owner: d.owner.clone(), buffer: d.buffer }),
        }
    }

    /// Streams a buffer over TCP into `dst`.
    pub fn fetch_tcp(&self, d: &Descriptor, dst: &mut [u8]) -> Result<()> {
        self.client.fetch(&d.endpoint, &d.owner, d.buffer, dst)
    }

    /// Whether a buffer is still published (`Freed` if not, `OwnerGone` if its owner exited):
    /// locally if this process owns it, otherwise by asking its owner.
    pub fn check(&self, d: &Descriptor) -> Result<()> {
        if d.owner == self.owner {
            return match self.arena.lookup(d.buffer) {
                Some(_) => Ok(()),
                None => Err(Error::Freed { owner: d.owner.clone(), buffer: d.buffer }),
            };
        }
        self.client.check(&d.endpoint, &d.owner, d.buffer)
    }

    /// Frees a buffer: locally if this process owns it, otherwise by asking its owner.
    pub fn free(&self, d: &Descriptor) -> Result<()> {
        if d.owner == self.owner {
            self.arena.free(d.buffer)
        } else {
            self.client.free(&d.endpoint, &d.owner, d.buffer)
        }
    }

    /// Unlinks every segment of this owner and drops cached connections (process exit).
    pub fn shutdown(&self) {
        self.arena.shutdown();
        self.client.clear();
        self.maps.clear();
    }
}
