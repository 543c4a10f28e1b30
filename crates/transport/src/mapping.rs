//! The consumer's side of shared memory: a `Mapping` of an owner's segment (opened without
//! following links, mapped only when the file is a regular file of this user that no one else
//! may read or write, and pinned by a `LOCK_SH` for as long as it lives), and the `MapCache`
//! of read-only mappings by inode that makes the warm same-host path free of page faults. The
//! owner's side, the arena, is `shm.rs`.

// mmap and the raw views of a mapping need unsafe; each block says why it is sound.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};

use memmap2::{MmapMut, MmapOptions, MmapRaw};

use crate::error::{io, Error, Result};
use crate::identity::SEGMENT_PREFIX;
use crate::shm::flock;

enum Map {
    Empty,
    ReadOnly(Arc<MmapRaw>),
    Private(MmapMut),
}

/// A consumer's cache of read-only mappings, keyed by inode, so that a buffer the owner
/// recycles is mapped once and then read with its page tables already filled (the warm path;
/// like an RDMA registration cache). Only the mapping is cached: the `LOCK_SH` that pins a
/// buffer is taken per `Mapping` and released with it, so caching never blocks recycling.
/// Entries whose file was unlinked and that nobody uses are dropped on the next miss; unused
/// entries beyond `limit` bytes are dropped least recently used first.
#[derive(Debug)]
pub struct MapCache {
    limit: u64,
    inner: Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    tick: u64,
    bytes: u64,
    entries: HashMap<(u64, u64), CacheEntry>,
}

#[derive(Debug)]
struct CacheEntry {
    map: Arc<MmapRaw>,
    /// A lock-free descriptor of the same inode (its own open file description), to see when
    /// the owner unlinks the file.
    file: File,
    used: u64,
}

impl MapCache {
    /// A cache holding at most `limit` bytes of mappings nobody uses.
    pub fn new(limit: u64) -> MapCache {
        MapCache { limit, inner: Mutex::default() }
    }

    fn map(&self, file: &File, meta: &std::fs::Metadata, len: u64) -> std::io::Result<Arc<MmapRaw>> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.tick += 1;
        let tick = g.tick;
        let key = (meta.dev(), meta.ino());
        if let Some(e) = g.entries.get_mut(&key) {
            if e.map.len() as u64 >= len {
                e.used = tick;
                return Ok(e.map.clone());
            }
        }
        let size = meta.len().max(len);
        // Map through a fresh open file description: a mapping pins the description it was made
        // from, and with it any flock, so mapping the locked one would pin the caller's lock.
        let reopened = File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        // Populated: the page tables of the whole (resident) buffer are filled in one call
        // instead of by a fault per 64 KiB on the first read (the cold path).
        let map = Arc::new(MmapOptions::new().len(size as usize).populate().map_raw_read_only(&reopened)?);
        if size <= self.limit {
            if let Some(old) = g.entries.insert(key, CacheEntry { map: map.clone(), file: reopened, used: tick }) {
                g.bytes -= old.map.len() as u64;
            }
            g.bytes += size;
            // Drop what is unlinked and unused, then the least recently used beyond the limit.
            let gone: Vec<_> = g
                .entries
                .iter()
                .filter(|(_, e)| Arc::strong_count(&e.map) == 1 && e.file.metadata().map_or(true, |m| m.nlink() == 0))
                .map(|(k, _)| *k)
                .collect();
            for k in gone {
                let e = g.entries.remove(&k).expect("listed above");
                g.bytes -= e.map.len() as u64;
            }
            while g.bytes > self.limit {
                let Some(k) = g
                    .entries
                    .iter()
                    .filter(|(k, e)| **k != key && Arc::strong_count(&e.map) == 1)
                    .min_by_key(|(_, e)| e.used)
                    .map(|(k, _)| *k)
                else {
                    break;
                };
                let e = g.entries.remove(&k).expect("found above");
                g.bytes -= e.map.len() as u64;
            }
        }
        Ok(map)
    }

    /// Bytes of mappings held.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }

    /// Drops every cached mapping (views in use keep theirs).
    pub fn clear(&self) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.entries.clear();
        g.bytes = 0;
    }
}

/// A consumer's mapping of a published buffer, holding `LOCK_SH` while it lives.
pub struct Mapping {
    map: Map,
    len: usize,
    _file: Option<File>,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapping({} bytes, writable: {})", self.len, self.writable())
    }
}

impl Mapping {
    /// Maps `len` bytes of segment `name` in `dir`. `writable` gives a private copy-on-write
    /// mapping (the owner never sees the writes); otherwise the mapping is read-only.
    /// `Ok(None)` means the buffer is not there: freed, never published, or not on this host.
    pub fn open(dir: &Path, name: &str, len: u64, writable: bool, cache: &MapCache) -> Result<Option<Mapping>> {
        if name.contains('/') || !name.starts_with(SEGMENT_PREFIX) {
            return Err(Error::Protocol(format!("bad segment name {name:?}")));
        }
        let path = dir.join(name);
        let untrusted = |reason: String| Error::Untrusted { path: path.display().to_string(), reason };
        // No link is followed, and a FIFO planted under the name cannot block the open.
        let file = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(untrusted("it is a symbolic link".into())),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(untrusted("this user may not read it".into()))
            }
            Err(e) => return Err(io(format!("open {}", path.display()))(e)),
        };
        // What was opened, not what the name says now: an owner's segment is a regular file of
        // this user (same-host consumers run as their owner's user) that nobody else may open.
        let by_fd = file.metadata().map_err(io(format!("stat {}", path.display())))?;
        trusted(&by_fd).map_err(untrusted)?;
        // The owner holds LOCK_EX on buffers it has not published or has freed into the pool.
        if !flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
            return Ok(None);
        }
        // Under our shared lock the name can no longer move; check it still names our file.
        let Ok(by_name) = std::fs::symlink_metadata(&path) else { return Ok(None) };
        if by_name.ino() != by_fd.ino() || by_name.dev() != by_fd.dev() {
            return Ok(None);
        }
        if by_fd.len() < len {
            return Err(Error::Protocol(format!(
                "segment {name} holds {} bytes, the reference says {len}",
                by_fd.len()
            )));
        }
        let map = if len == 0 {
            Map::Empty
        } else if writable {
            // SAFETY: MAP_PRIVATE: writes stay in this process; the owner never truncates a
            // segment while a consumer holds LOCK_SH, so the pages stay backed.
            Map::Private(unsafe { MmapOptions::new().len(len as usize).map_copy(&file) }.map_err(io("map segment"))?)
        } else {
            Map::ReadOnly(cache.map(&file, &by_fd, len).map_err(io("map segment"))?)
        };
        Ok(Some(Mapping { map, len: len as usize, _file: Some(file) }))
    }

    /// Start of the mapped bytes (dangling but non-null when empty).
    pub fn as_ptr(&self) -> *const u8 {
        match &self.map {
            Map::Empty => std::ptr::NonNull::dangling().as_ptr(),
            Map::ReadOnly(m) => m.as_ptr(),
            Map::Private(m) => m.as_ptr(),
        }
    }

    /// Start of the mapped bytes for writing; `None` for read-only mappings.
    pub fn as_mut_ptr(&mut self) -> Option<*mut u8> {
        match &mut self.map {
            Map::Private(m) => Some(m.as_mut_ptr()),
            Map::Empty => Some(std::ptr::NonNull::dangling().as_ptr()),
            Map::ReadOnly(_) => None,
        }
    }

    /// Mapped length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether writes are allowed (private copy-on-write).
    pub fn writable(&self) -> bool {
        !matches!(self.map, Map::ReadOnly(_))
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes long and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }
}

/// Whether an opened segment file can be an owner's: a regular file of this process's effective
/// user with no permission bits for group or others. `Err` says why not.
fn trusted(meta: &std::fs::Metadata) -> std::result::Result<(), String> {
    // SAFETY: geteuid has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.uid() != me {
        return Err(format!("it belongs to uid {}, not to this user (uid {me})", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!("its mode {:o} lets other users in (an owner's segments are 0600)", meta.mode() & 0o777));
    }
    Ok(())
}
