//! `Transport`: one process's endpoint. It owns the arena and the TCP server for the buffers
//! this process publishes, the client for the buffers it consumes, and the metrics of both; and
//! `backends`, the one list of the pluggable device paths this build composes.

use std::sync::Arc;

use crate::config::Config;
use crate::control::Control;
use crate::error::{Error, Result};
use crate::frame::Kind;
use crate::identity::{host_id, process_alive, Identity};
use crate::mapping::{MapCache, Mapping};
use crate::metrics::Metrics;
use crate::path::{Backend, Descriptor};
use crate::relay::{self, Assignment, Digests, Fill, Peer, Verifier};
use crate::shm::{sweep_orphans, Allocation, Arena, PoolStats};
use crate::tcp::{Client, Server};

/// The pluggable backends of this build, each real: `cuda_ipc` with the `cuda-ipc` feature
/// (`cuIpcGetMemHandle`/`cuIpcOpenMemHandle` through a runtime-loaded libcuda, checked by
/// `scripts/device-check-cuda-ipc.sh`; unavailable without a GPU). NIXL is driven from Python
/// (`accel/_nixl.py`). Nothing here stands in for a path that is not built.
#[allow(clippy::vec_init_then_push)] // one push per backend, each behind its cargo feature
pub fn backends() -> Vec<Box<dyn Backend>> {
    #[allow(unused_mut)]
    let mut out: Vec<Box<dyn Backend>> = Vec::new();
    #[cfg(feature = "cuda-ipc")]
    out.push(Box::new(crate::cuda_ipc::CudaIpc));
    out
}

/// A buffer received as one reader of a relayed broadcast (`Transport::fetch_relayed`).
#[derive(Debug)]
pub struct Relayed {
    /// This process's copy: a buffer of its own arena, published to the readers it serves.
    pub alloc: Allocation,
    /// How many downstream readers stream it from here.
    pub serve: u32,
    /// The relay it streamed from (`None`: the owner).
    pub upstream: Option<Peer>,
    /// The relay failed, stalled or sent bytes that did not match the owner's digests, and the
    /// bytes came from the owner instead.
    pub fell_back: bool,
}

/// One process's transport endpoint.
#[derive(Debug)]
pub struct Transport {
    identity: Identity,
    owner: String,
    host: String,
    endpoint: String,
    config: Config,
    arena: Arc<Arena>,
    /// Leases and channels, shared with the server, which answers remote requests about them.
    control: Arc<Control>,
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
        let arena = Arc::new(Arena::new(&config.shm_dir, &identity, config.pool_bytes).with_spares(config.spares));
        let metrics = Arc::new(Metrics::default());
        let control = Arc::new(Control { relays: relay::Relays::new(config.relay_fanout), ..Control::default() });
        let server = Server::start(&config, &owner, arena.clone(), control.clone(), metrics.clone())?;
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
            control,
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
    /// The leases, channels and relays of this process.
    pub fn control(&self) -> &Control {
        &self.control
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
        self.client.fetch_striped(&d.endpoint, &d.owner, d.buffer, dst, self.config.streams)
    }

    /// Receives leased buffer `d` as one reader of a relayed broadcast (module `relay`): joins
    /// its owner's schedule, streams from the relay it names (or the owner) into a new buffer of
    /// this arena, forwarding each piece as it lands to the readers this process serves, and
    /// falls back to the owner if the relay fails. A relay's bytes are checked piece by piece
    /// against the digests the owner sent with the assignment before they are forwarded or
    /// returned; a piece that does not match ends the relayed stream and the owner sends the
    /// buffer instead, so a relay never injects a byte. The new buffer stays published for those
    /// readers and is freed after their reads, or `drain_timeout` after it filled at the latest
    /// (a reader that has not finished by then goes to the owner); with none to serve it is
    /// freed at once, its memory kept by `alloc.map` for as long as the caller holds it.
    pub fn fetch_relayed(&self, d: &Descriptor) -> Result<Relayed> {
        let alloc = self.arena.alloc(d.len)?;
        let fill = Arc::new(Fill::new(d.len));
        self.control.fills.insert(alloc.buffer, fill.clone());
        let me = Peer { owner: self.owner.clone(), endpoint: self.endpoint.clone(), buffer: alloc.buffer };
        let joined = self.arena.publish(alloc.buffer).and_then(|()| self.join(d, &me));
        let place = match joined {
            Ok(place) => place,
            Err(e) => {
                self.abandon(alloc.buffer, &fill);
                return Err(e);
            }
        };
        if place.serve > 0 {
            self.control.leases.set(alloc.buffer, place.serve);
        }
        // SAFETY: the allocation is at least `d.len` bytes; this process writes it only here, and
        // its server reads a piece only after `fill` says the piece has landed.
        #[allow(unsafe_code)]
        let dst = unsafe { std::slice::from_raw_parts_mut(alloc.map.as_mut_ptr(), d.len as usize) };
        let base = alloc.map.as_ptr() as usize;
        let landed = |at: u64, len: u64| {
            fill.mark(at, len);
            Ok(())
        };
        let streams = self.config.streams;
        let from_relay = place.upstream.as_ref().map(|up| {
            let sums = place.digests.as_ref().filter(|s| s.total == d.len).ok_or_else(|| {
                Error::Protocol("the owner named a relay without the digests to check its bytes".into())
            });
            let got = sums.and_then(|sums| {
                // The streams count arrivals; each completed piece goes to a hashing thread that
                // checks it against the owner's digest and only then marks it landed (so this
                // process's server forwards it), while the streams go on receiving: the digest is
                // off the critical path, and no unchecked byte is ever forwarded or kept.
                let verifier = Verifier::new(sums);
                let failed = std::sync::atomic::AtomicBool::new(false);
                let (tx, rx) = std::sync::mpsc::channel::<usize>();
                std::thread::scope(|scope| {
                    let hasher = scope.spawn(|| -> Result<()> {
                        for i in rx {
                            if let Err(e) = check_piece(sums, base, i, &fill, &up.owner) {
                                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                        Ok(())
                    });
                    let streamed = {
                        let tx = &tx;
                        let checked = |at: u64, len: u64| {
                            // Once a piece or a stripe fails every stripe stops: the owner sends the buffer.
                            if failed.load(std::sync::atomic::Ordering::Relaxed) {
                                return Err(Error::Protocol("the relayed stream failed its digest check".into()));
                            }
                            for i in verifier
                                .arrived(at, len)
                                .inspect_err(|_| failed.store(true, std::sync::atomic::Ordering::Relaxed))?
                            {
                                tx.send(i).map_err(|_| Error::Protocol("the digest check stopped".into()))?;
                            }
                            Ok(())
                        };
                        self.client.fetch_striped_with(&up.endpoint, &up.owner, up.buffer, &mut *dst, streams, &checked)
                    };
                    drop(tx);
                    let hashed =
                        hasher.join().unwrap_or_else(|_| Err(Error::Protocol("the digest check panicked".into())));
                    streamed?;
                    hashed?;
                    if verifier.all_arrived() {
                        Ok(())
                    } else {
                        Err(Error::Protocol("a relayed stream ended before every piece was checked".into()))
                    }
                })
            });
            // One read of the relay's lease, whatever happened: it frees the relay's copy sooner.
            let freed = || Error::Freed { owner: up.owner.clone(), buffer: up.buffer };
            drop(self.client.request(&up.endpoint, &up.owner, Kind::Release, &up.buffer.to_le_bytes(), freed));
            got
        });
        let fell_back = matches!(from_relay, Some(Err(_)));
        let got = match from_relay {
            Some(Ok(())) => Ok(()),
            // No relay, or it failed: the owner (pieces already here are rewritten with the same bytes).
            _ => self.client.fetch_striped_with(&d.endpoint, &d.owner, d.buffer, dst, streams, &landed),
        };
        if let Err(e) = got {
            self.abandon(alloc.buffer, &fill);
            return Err(e);
        }
        self.control.fills.remove(alloc.buffer);
        if place.serve == 0 {
            self.control.free(&self.arena, alloc.buffer)?;
        } else {
            self.linger(alloc.buffer);
        }
        Ok(Relayed { alloc, serve: place.serve, upstream: place.upstream, fell_back })
    }

    /// Joins the relayed broadcast of leased buffer `d` at its owner as reader `me` (a relay
    /// buffer of this process, or of another): where to stream from and how many to serve.
    pub fn join(&self, d: &Descriptor, me: &Peer) -> Result<Assignment> {
        let freed = || Error::Freed { owner: d.owner.clone(), buffer: d.buffer };
        match self.client.request(&d.endpoint, &d.owner, Kind::Join, &relay::join_request(d.buffer, me), freed)? {
            (Kind::Ok, p) => Assignment::decode(&p),
            (k, _) => Err(Error::Protocol(format!("expected Ok, got {k:?}"))),
        }
    }

    /// A relay buffer that will not fill: its readers give up waiting and go to the owner.
    fn abandon(&self, buffer: u64, fill: &Fill) {
        fill.fail();
        self.control.fills.remove(buffer);
        let _ = self.control.free(&self.arena, buffer);
    }

    /// Frees relay buffer `buffer` if its readers have not all released it `drain_timeout` from
    /// now (a reader that died mid-stream never will).
    fn linger(&self, buffer: u64) {
        let (control, arena, deadline) =
            (self.control.clone(), self.arena.clone(), std::time::Instant::now() + self.config.drain_timeout);
        let watch = move || {
            while control.leases.left(buffer).is_some() {
                if std::time::Instant::now() >= deadline {
                    let _ = control.free(&arena, buffer);
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        };
        if std::thread::Builder::new().name("accel-relay-linger".into()).spawn(watch).is_err() {
            let _ = self.control.free(&self.arena, buffer); // no watcher: readers go to the owner
        }
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
            self.control.free(&self.arena, d.buffer)
        } else {
            self.client.free(&d.endpoint, &d.owner, d.buffer)
        }
    }

    /// Publishes this owner's buffer `buffer` for exactly `readers` reads (0: until freed).
    pub fn publish_leased(&self, buffer: u64, readers: u32) -> Result<()> {
        self.control.leases.set(buffer, readers);
        self.arena.publish(buffer).inspect_err(|_| self.control.leases.forget(buffer))
    }

    /// Records one finished read of a leased buffer, locally or at its owner; the last read
    /// frees it. Returns whether this read was the last.
    pub fn release(&self, d: &Descriptor) -> Result<bool> {
        if d.owner == self.owner {
            return self.control.leases.release(d.buffer, &self.arena, &self.owner);
        }
        let freed = || Error::Freed { owner: d.owner.clone(), buffer: d.buffer };
        match self.client.request(&d.endpoint, &d.owner, Kind::Release, &d.buffer.to_le_bytes(), freed)? {
            (Kind::Freed, p) => Ok(p.first() == Some(&1)),
            (k, _) => Err(Error::Protocol(format!("expected Freed, got {k:?}"))),
        }
    }

    /// Records `manifest` as version `version` of this owner's channel `name`.
    pub fn channel_publish(&self, name: &str, version: u64, manifest: Vec<u8>) -> Result<()> {
        self.control.channels.publish(name, version, manifest)
    }

    /// The latest version and manifest of channel `name` of `owner` (at `endpoint`): read in
    /// place for this process's own channels, asked over the authenticated connection
    /// otherwise. `None` while the channel has no version.
    pub fn channel_latest(&self, owner: &str, endpoint: &str, name: &str) -> Result<Option<(u64, Vec<u8>)>> {
        if owner == self.owner {
            return Ok(self.control.channels.latest(name));
        }
        let none = || Error::Freed { owner: owner.into(), buffer: 0 };
        match self.client.request(endpoint, owner, Kind::Latest, name.as_bytes(), none) {
            Ok((Kind::Ok, p)) if p.len() >= 8 => {
                let version = crate::frame::u64_at(&p, 0)?;
                Ok(Some((version, p[8..].to_vec())))
            }
            Ok((k, _)) => Err(Error::Protocol(format!("expected a channel manifest, got {k:?}"))),
            Err(Error::Freed { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads this owner still expects of a leased buffer.
    pub fn lease_left(&self, buffer: u64) -> Option<u32> {
        self.control.leases.left(buffer)
    }

    /// Unlinks every segment of this owner and drops cached connections (process exit).
    pub fn shutdown(&self) {
        self.arena.shutdown();
        self.client.clear();
        self.maps.clear();
    }
}

/// Checks piece `i` of a relayed stream, landed in whole in the buffer at address `base`,
/// against the owner's digest, and marks it in `fill` (so this process's server forwards it)
/// only if it matches. `Err` names the relay whose bytes failed.
fn check_piece(sums: &Digests, base: usize, i: usize, fill: &Fill, relay: &str) -> Result<()> {
    let (start, n) = sums.range(i);
    // SAFETY: piece `i` lies within the allocation (the digests cover exactly the buffer's
    // bytes) and all of it has arrived; no stream writes it again without failing the fetch
    // (`Verifier::arrived`), and the streams write only other pieces meanwhile.
    #[allow(unsafe_code)]
    let piece = unsafe { std::slice::from_raw_parts((base + start as usize) as *const u8, n as usize) };
    if !sums.matches(i, piece) {
        return Err(Error::Protocol(format!(
            "relay {relay} sent bytes that do not match the owner's digest (piece {i}); fetching from the owner"
        )));
    }
    fill.mark(start, n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::Path;

    #[test]
    fn only_built_backends_are_listed() {
        assert!(backends().iter().all(|b| b.path() == Path::CudaIpc));
        assert_eq!(backends().len(), usize::from(cfg!(feature = "cuda-ipc")));
    }
}
