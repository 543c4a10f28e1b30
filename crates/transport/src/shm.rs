//! The owner's shared-memory arena (the consumer's mapping of it is `mapping.rs`).
//!
//! Each buffer is one file in the shared-memory directory named
//! `accel-<pid namespace>-<pid>-<start>-<buffer id>`, sized to a pooled size class and pre-faulted with
//! `fallocate` + `MAP_POPULATE` (so a full `/dev/shm` is an error here, never a SIGBUS later).
//! Buffer ids are random 64-bit numbers (never 0), so neither an id nor a segment name can be
//! guessed; pooled segments wait under `accel-<...>-<start>-idle-<random>`. A name is only ever
//! taken exclusively (`O_CREAT | O_EXCL`, mode 0600, or a rename that never replaces), and one
//! already there (planted by another local user in the shared directory) makes the owner draw
//! another. A consumer opens a name without following links and maps it only if the file is a
//! regular file of its own user that no one else may read or write: a planted one is refused,
//! never read.
//! Advisory `flock`s make reuse safe: the owner holds `LOCK_EX` on a buffer until it is
//! published and again while it idles in the pool; a consumer holds `LOCK_SH` for as long as it
//! maps the buffer. A freed buffer is recycled (renamed, kept faulted) only if the owner wins
//! `LOCK_EX` and holds no view of it itself; otherwise its name is unlinked and the memory lives
//! on exactly as long as the consumers' mappings.
//!
//! Growth ahead of demand: when an allocation of 1 MiB or more leaves its size class without an
//! idle segment while another buffer of the class is still live (the pattern of leases and
//! channels: version N+1 is written while readers hold N), a background thread creates and
//! faults `spares` more (within the bound, never evicting anything), so the next buffer of that
//! size is warm. One buffer at a time (allocate, free, allocate) recycles and grows nothing. An
//! allocation that needs the room waits for a spare in the making, then evicts it.
#![allow(unsafe_code)]

use std::collections::HashMap;
#[cfg(test)]
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{io, Error, Result};
use crate::identity::{pid_namespace, process_alive, Identity, SEGMENT_PREFIX};

const PAGE: u64 = 4096;
/// Fresh names an owner tries before it gives up: each taken one was planted by someone.
const NAME_ATTEMPTS: usize = 16;

/// The pooled capacity for `len` bytes: whole pages, then eight steps per power of two above
/// 64 KiB, so at most 12.5% of a buffer is slack.
pub fn size_class(len: u64) -> u64 {
    let pages = len.max(1).div_ceil(PAGE) * PAGE;
    if pages <= 64 << 10 {
        return pages;
    }
    let step = (1u64 << (63 - pages.leading_zeros())) / 8;
    pages.div_ceil(step) * step
}

pub(crate) fn flock(file: &File, op: libc::c_int) -> bool {
    // SAFETY: flock only reads the descriptor number, which `file` keeps open.
    unsafe { libc::flock(file.as_raw_fd(), op) == 0 }
}

struct Segment {
    name: String,
    file: File,
    map: Arc<MmapRaw>,
    capacity: u64,
    /// Its pages may still sit in a socket queue nobody drains (a stalled consumer): never
    /// recycle it; unlink it when freed, and its memory goes with the last reference.
    retired: bool,
}

struct Live {
    seg: Segment,
    len: u64,
    published: bool,
}

#[derive(Default)]
struct Inner {
    live: HashMap<u64, Live>,
    idle: Vec<Segment>,
    /// Freed, but still mapped by a view (the owner's own or a consumer's): renamed so no
    /// reference opens it again, recycled once the last view is gone.
    held: Vec<Segment>,
    live_bytes: u64,
    idle_bytes: u64,
    held_bytes: u64,
    /// Capacity being created outside the lock, already counted against the limit.
    pending_bytes: u64,
    /// Of `pending_bytes`, spares made ahead of demand, by size class (an allocation short of
    /// room waits for them and then evicts them).
    spare_pending: HashMap<u64, usize>,
    /// Set at shutdown: a spare finished later is unlinked, not pooled.
    closed: bool,
}

/// How much of the pool is in use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub live_buffers: u64,
    pub live_bytes: u64,
    pub idle_bytes: u64,
    pub held_bytes: u64,
    pub limit_bytes: u64,
}

/// A fresh buffer: its id and segment name, and the writable mapping (shared with the arena).
#[derive(Debug)]
pub struct Allocation {
    pub buffer: u64,
    pub segment: String,
    pub len: u64,
    pub map: Arc<MmapRaw>,
}

/// Smallest size class grown ahead of demand: below it a segment is cheap to make on the spot.
pub const SPARE_MIN_BYTES: u64 = 1 << 20;

/// One owner's buffers, bounded by `limit` bytes of capacity (outstanding plus pooled).
#[derive(Debug)]
pub struct Arena {
    dir: PathBuf,
    prefix: String,
    limit: u64,
    spares: usize,
    /// The state, and a signal for each spare that lands (shared with the threads making them).
    inner: Arc<(Mutex<Inner>, Condvar)>,
    /// Ids the unit tests hand out before random ones (to collide with planted names).
    #[cfg(test)]
    test_ids: Mutex<VecDeque<u64>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} live, {} idle", self.live.len(), self.idle.len())
    }
}

impl Arena {
    /// An empty arena for `owner` in `dir`, growing no spares.
    pub fn new(dir: &Path, owner: &Identity, limit: u64) -> Arena {
        Arena {
            dir: dir.to_path_buf(),
            prefix: owner.segment_prefix(),
            limit,
            spares: 0,
            inner: Arc::default(),
            #[cfg(test)]
            test_ids: Mutex::default(),
        }
    }

    /// A fresh buffer id: random, never 0 (which means "no buffer" on the wire).
    fn draw(&self) -> Result<u64> {
        #[cfg(test)]
        if let Some(id) = self.test_ids.lock().unwrap_or_else(|e| e.into_inner()).pop_front() {
            return Ok(id);
        }
        loop {
            let id = random_u64()?;
            if id != 0 {
                return Ok(id);
            }
        }
    }

    fn buffer_name(&self, buffer: u64) -> String {
        format!("{}{buffer}", self.prefix)
    }

    /// Renames segment `from` to a fresh name that nothing holds (`name` of a fresh random
    /// number), never replacing a file: returns the number and the name.
    fn rename_fresh(&self, from: &str, name: impl Fn(u64) -> String) -> Result<(u64, String)> {
        let mut last = None;
        for _ in 0..NAME_ATTEMPTS {
            let n = self.draw()?;
            let to = name(n);
            match rename_noreplace(&self.dir.join(from), &self.dir.join(&to)) {
                Ok(()) => return Ok((n, to)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(io(format!("rename segment {from} to {to}"))(e)),
            }
        }
        Err(taken(&self.dir, last))
    }

    /// Creates a buffer's segment of `cap` bytes under a fresh name: returns its id and segment.
    fn create_buffer(&self, cap: u64) -> Result<(u64, Segment)> {
        let mut last = None;
        for _ in 0..NAME_ATTEMPTS {
            let buffer = self.draw()?;
            match create(&self.dir, &self.buffer_name(buffer), cap) {
                Ok(seg) => return Ok((buffer, seg)),
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
                    last = Some(source)
                }
                Err(e) => return Err(e),
            }
        }
        Err(taken(&self.dir, last))
    }

    /// Keeps up to `spares` idle segments of each size class from 1 MiB that was just allocated,
    /// made in the background (module docs).
    pub fn with_spares(mut self, spares: usize) -> Arena {
        self.spares = spares;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves freed segments that nobody maps any more into the pool.
    fn reclaim(g: &mut Inner) {
        let mut i = 0;
        while i < g.held.len() {
            let seg = &g.held[i];
            if Arc::strong_count(&seg.map) == 1 && flock(&seg.file, libc::LOCK_EX | libc::LOCK_NB) {
                let seg = g.held.swap_remove(i);
                g.held_bytes -= seg.capacity;
                g.idle_bytes += seg.capacity;
                g.idle.push(seg);
            } else {
                i += 1;
            }
        }
    }

    /// Takes a buffer of `len` bytes from the pool or creates one, under a fresh random id. It
    /// stays private (consumers cannot open it) until `publish`.
    pub fn alloc(&self, len: u64) -> Result<Allocation> {
        let cap = size_class(len);
        let mut g = self.lock();
        Self::reclaim(&mut g);
        if let Some(i) = g.idle.iter().position(|s| s.capacity == cap) {
            let seg = g.idle.swap_remove(i);
            g.idle_bytes -= cap;
            match self.rename_fresh(&seg.name, |id| self.buffer_name(id)) {
                Ok((buffer, name)) => return Ok(self.admit(&mut g, buffer, Segment { name, ..seg }, len)),
                // The pooled segment cannot take a new name: let it go and make a fresh one.
                Err(_) => drop(std::fs::remove_file(self.dir.join(&seg.name))),
            }
        }
        loop {
            while g.live_bytes + g.idle_bytes + g.pending_bytes + cap > self.limit && !g.idle.is_empty() {
                let seg = g.idle.swap_remove(0);
                g.idle_bytes -= seg.capacity;
                let _ = std::fs::remove_file(self.dir.join(&seg.name));
            }
            // Still short: let go of freed segments that views hold; their memory leaves the
            // pool and lives exactly as long as those views.
            while g.live_bytes + g.idle_bytes + g.held_bytes + g.pending_bytes + cap > self.limit && !g.held.is_empty()
            {
                let seg = g.held.swap_remove(0);
                g.held_bytes -= seg.capacity;
                let _ = std::fs::remove_file(self.dir.join(&seg.name));
            }
            let in_use = g.live_bytes + g.pending_bytes;
            if in_use + g.idle_bytes + g.held_bytes + cap <= self.limit {
                break;
            }
            if g.spare_pending.is_empty() {
                return Err(Error::PoolExhausted { requested: len, in_use, limit: self.limit });
            }
            // A spare in the making holds the room: once it lands it can be evicted.
            g = self.inner.1.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.pending_bytes += cap;
        drop(g);
        let made = self.create_buffer(cap);
        g = self.lock();
        g.pending_bytes -= cap;
        let (buffer, seg) = made?;
        Ok(self.admit(&mut g, buffer, seg, len))
    }

    /// Records `seg`, named after `buffer`, as a live buffer of `len` bytes. The exclusive
    /// creation or rename of its name proved that no live buffer has the id.
    fn admit(&self, g: &mut Inner, buffer: u64, seg: Segment, len: u64) -> Allocation {
        let (map, segment, cap) = (seg.map.clone(), seg.name.clone(), seg.capacity);
        g.live_bytes += cap;
        g.live.insert(buffer, Live { seg, len, published: false });
        self.grow_ahead(g, cap);
        Allocation { buffer, segment, len, map }
    }

    /// Starts making spares of class `cap` when two or more buffers of it are live, fewer than
    /// `spares` are idle or on the way, and the bound has room for them without evicting anything.
    fn grow_ahead(&self, g: &mut Inner, cap: u64) {
        if cap < SPARE_MIN_BYTES || g.closed || g.live.values().filter(|l| l.seg.capacity == cap).count() < 2 {
            return;
        }
        let idle = g.idle.iter().filter(|s| s.capacity == cap).count();
        let coming = g.spare_pending.get(&cap).copied().unwrap_or(0);
        for _ in idle + coming..self.spares {
            if g.live_bytes + g.idle_bytes + g.held_bytes + g.pending_bytes + cap > self.limit {
                return;
            }
            let Ok(n) = random_u64() else { return };
            let name = idle_name(&self.prefix, n);
            g.pending_bytes += cap;
            *g.spare_pending.entry(cap).or_default() += 1;
            let (dir, inner) = (self.dir.clone(), self.inner.clone());
            let spawned = std::thread::Builder::new().name("accel-spare".into()).spawn(move || {
                let made = create(&dir, &name, cap);
                let (lock, landed) = &*inner;
                let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
                spare_landed(&mut g, cap);
                match made {
                    Ok(seg) if !g.closed => {
                        g.idle_bytes += cap;
                        g.idle.push(seg);
                    }
                    Ok(_) => {
                        let _ = std::fs::remove_file(dir.join(&name));
                    }
                    // A spare is only an optimization (and its random name is taken only if
                    // someone planted it): the next alloc makes its own.
                    Err(_) => {}
                }
                landed.notify_all();
            });
            if spawned.is_err() {
                spare_landed(g, cap);
                return;
            }
        }
    }

    /// Waits until no spare is in the making (tests, and callers that measure the pool).
    pub fn settle(&self) {
        let mut g = self.lock();
        while !g.spare_pending.is_empty() {
            g = self.inner.1.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Makes a buffer readable by consumers.
    pub fn publish(&self, buffer: u64) -> Result<()> {
        let mut g = self.lock();
        let live = g.live.get_mut(&buffer).ok_or_else(|| Error::Freed { owner: self.prefix.clone(), buffer })?;
        if !live.published {
            live.published = true;
            flock(&live.seg.file, libc::LOCK_UN);
        }
        Ok(())
    }

    /// The mapping and length of a published buffer.
    pub fn lookup(&self, buffer: u64) -> Option<(Arc<MmapRaw>, u64)> {
        let g = self.lock();
        g.live.get(&buffer).filter(|l| l.published).map(|l| (l.seg.map.clone(), l.len))
    }

    /// Like `lookup`, with a descriptor of the segment file (for `sendfile`).
    pub fn lookup_file(&self, buffer: u64) -> Option<(Arc<MmapRaw>, u64, File)> {
        let g = self.lock();
        let l = g.live.get(&buffer).filter(|l| l.published)?;
        Some((l.seg.map.clone(), l.len, l.seg.file.try_clone().ok()?))
    }

    /// Frees a buffer. Its name goes at once, so no reference opens it again; its memory goes
    /// back to the pool as soon as no view maps it (now, or at a later `alloc`).
    pub fn free(&self, buffer: u64) -> Result<()> {
        let mut g = self.lock();
        let Live { seg, .. } =
            g.live.remove(&buffer).ok_or_else(|| Error::Freed { owner: self.prefix.clone(), buffer })?;
        g.live_bytes -= seg.capacity;
        if seg.retired {
            let _ = std::fs::remove_file(self.dir.join(&seg.name));
            return Ok(());
        }
        let Ok((_, idle)) = self.rename_fresh(&seg.name, |n| idle_name(&self.prefix, n)) else {
            let _ = std::fs::remove_file(self.dir.join(&seg.name));
            return Ok(());
        };
        g.held_bytes += seg.capacity;
        g.held.push(Segment { name: idle, ..seg });
        Self::reclaim(&mut g);
        Ok(())
    }

    /// Never recycles the segment behind `map` (live or freed): a socket may still reference its
    /// pages. A freed one is unlinked now; a live one when it is freed.
    pub fn retire(&self, map: &Arc<MmapRaw>) {
        let mut g = self.lock();
        if let Some(live) = g.live.values_mut().find(|l| Arc::ptr_eq(&l.seg.map, map)) {
            live.seg.retired = true;
        } else if let Some(i) = g.held.iter().position(|s| Arc::ptr_eq(&s.map, map)) {
            let seg = g.held.swap_remove(i);
            g.held_bytes -= seg.capacity;
            let _ = std::fs::remove_file(self.dir.join(&seg.name));
        }
    }

    /// Pool usage.
    pub fn stats(&self) -> PoolStats {
        let g = self.lock();
        PoolStats {
            live_buffers: g.live.len() as u64,
            live_bytes: g.live_bytes,
            idle_bytes: g.idle_bytes,
            held_bytes: g.held_bytes,
            limit_bytes: self.limit,
        }
    }

    /// Returns the pooled (idle) buffers to the system, spares in the making included once they
    /// land, and unlinks freed ones that views still hold (their memory goes with the last view).
    pub fn trim(&self) {
        self.settle();
        self.drop_pooled();
    }

    fn drop_pooled(&self) {
        let mut g = self.lock();
        let Inner { idle, held, .. } = &mut *g;
        for seg in idle.drain(..).chain(held.drain(..)) {
            let _ = std::fs::remove_file(self.dir.join(&seg.name));
        }
        g.idle_bytes = 0;
        g.held_bytes = 0;
    }

    /// Unlinks every segment of this owner (process exit). Mappings stay valid; a spare still
    /// in the making is unlinked when it lands.
    pub fn shutdown(&self) {
        self.lock().closed = true;
        self.drop_pooled();
        let mut g = self.lock();
        for (_, live) in g.live.drain() {
            let _ = std::fs::remove_file(self.dir.join(&live.seg.name));
        }
        g.live_bytes = 0;
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Un-counts one spare of class `cap` in the making.
fn spare_landed(g: &mut Inner, cap: u64) {
    g.pending_bytes -= cap;
    if let Some(n) = g.spare_pending.get_mut(&cap) {
        *n -= 1;
        if *n == 0 {
            g.spare_pending.remove(&cap);
        }
    }
}

/// The first `len` bytes of a published buffer's mapping (from `Arena::lookup`), to read: the
/// owner's digests of a relayed buffer are computed over them.
pub(crate) fn published(map: &MmapRaw, len: u64) -> &[u8] {
    let len = (len as usize).min(map.len());
    // SAFETY: `map` is a live mapping of at least `len` bytes, borrowed for the slice's lifetime;
    // a published buffer is only read (a racing writer could change bytes, never invalidate them).
    unsafe { std::slice::from_raw_parts(map.as_ptr(), len) }
}

/// The name of a pooled segment: `<prefix>idle-<random>`.
fn idle_name(prefix: &str, n: u64) -> String {
    format!("{prefix}idle-{n:016x}")
}

/// A random u64 from the operating system's CSPRNG.
fn random_u64() -> Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| Error::Io {
        context: "draw a random segment id".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(u64::from_le_bytes(b))
}

/// The error after every fresh name tried was already there.
fn taken(dir: &Path, last: Option<std::io::Error>) -> Error {
    Error::Io {
        context: format!(
            "{NAME_ATTEMPTS} fresh random segment names in {} were all taken (is someone planting them?)",
            dir.display()
        ),
        source: last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AlreadyExists)),
    }
}

/// Renames `from` to `to` unless `to` exists (`AlreadyExists` then), atomically where the file
/// system supports `RENAME_NOREPLACE` (tmpfs, ext4, xfs, btrfs), else checked just before.
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let cstr = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (f, t) = (cstr(from)?, cstr(to)?);
    // SAFETY: both are NUL-terminated paths that live across the call; renameat2 only reads them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
        return Err(e);
    }
    if to.symlink_metadata().is_ok() {
        return Err(std::io::ErrorKind::AlreadyExists.into());
    }
    std::fs::rename(from, to)
}

/// Creates the segment file `name` of `cap` bytes in `dir`, reserved and faulted in, holding
/// `LOCK_EX` (it is private until published). The name is taken exclusively (`O_EXCL`, which
/// follows no link), mode 0600; a name already there is `AlreadyExists` and left alone.
fn create(dir: &Path, name: &str, cap: u64) -> Result<Segment> {
    let path = dir.join(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(io(format!("create {}", path.display())))?;
    flock(&file, libc::LOCK_EX | libc::LOCK_NB);
    let fail = |e: std::io::Error| {
        let _ = std::fs::remove_file(&path);
        Error::Io { context: format!("allocate {cap} bytes of shared memory in {}", dir.display()), source: e }
    };
    // SAFETY: fallocate on an open descriptor; it only reserves the file's pages.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, cap as libc::off_t) };
    if rc != 0 {
        return Err(fail(std::io::Error::last_os_error()));
    }
    let map = map_prefaulted(&file, cap).map_err(fail)?;
    Ok(Segment { name: name.to_string(), file, map: Arc::new(map), capacity: cap, retired: false })
}

/// Maps `cap` bytes of a new segment writable and faults them in. Huge pages are asked for
/// first (`MADV_HUGEPAGE`: used where the kernel's `shmem_enabled` allows them, ignored
/// elsewhere), which is why the pages are faulted with `MADV_POPULATE_WRITE` after the advice
/// rather than with `MAP_POPULATE` before it; kernels without it (before 5.14) get `MAP_POPULATE`.
fn map_prefaulted(file: &File, cap: u64) -> std::io::Result<MmapRaw> {
    let map = MmapOptions::new().len(cap as usize).map_raw(file)?;
    let _ = map.advise(memmap2::Advice::HugePage);
    // SAFETY: madvise over exactly the mapping just made, which `map` keeps alive.
    let rc = unsafe { libc::madvise(map.as_mut_ptr().cast(), cap as usize, libc::MADV_POPULATE_WRITE) };
    if rc == 0 {
        return Ok(map);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EINVAL) {
        return Err(err);
    }
    drop(map);
    MmapOptions::new().len(cap as usize).populate().map_raw(file)
}

/// Removes segments in `dir` whose owner process has exited. Returns how many it removed.
/// Only owners of this pid namespace are judged: a pid of another namespace means another
/// process here, so their segments (and names of any other shape) are left alone.
pub fn sweep_orphans(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mine = format!("{SEGMENT_PREFIX}{}-", pid_namespace());
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&mine)) else { continue };
        let mut parts = rest.splitn(3, '-');
        let (Some(pid), Some(start)) =
            (parts.next().and_then(|p| p.parse().ok()), parts.next().and_then(|s| s.parse().ok()))
        else {
            continue;
        };
        if !process_alive(pid, start) && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_bound_slack() {
        assert_eq!(size_class(0), 4096);
        assert_eq!(size_class(4097), 8192);
        assert_eq!(size_class(64 << 10), 64 << 10);
        assert_eq!(size_class(1 << 30), 1 << 30);
        for len in [65_537u64, 1_000_000, 3 << 20, (1 << 30) + 1] {
            let c = size_class(len);
            assert!(c >= len && c - len <= len / 8 + PAGE, "{len} -> {c}");
        }
    }

    /// A name someone planted (here: the ids and pooled names the arena is made to draw) makes
    /// the owner draw another, for a new segment, a pooled one and a recycled one; the planted
    /// files are never touched, and when every name it tries is taken it fails cleanly.
    #[test]
    fn a_planted_name_makes_the_owner_draw_another() {
        let dir = std::env::temp_dir().join(format!("accel-shm-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let arena = Arena::new(&dir, &Identity::current().unwrap(), 1 << 30);
        let plant = |name: String| {
            let p = dir.join(name);
            std::fs::write(&p, b"planted").unwrap();
            p
        };
        let queue = |ids: &[u64]| arena.test_ids.lock().unwrap().extend(ids);
        let mut planted = vec![plant(arena.buffer_name(11))];
        queue(&[11, 12]);
        let a = arena.alloc(4096).unwrap();
        assert_eq!((a.buffer, a.segment.as_str()), (12, arena.buffer_name(12).as_str()));
        // Freed into the pool under a drawn idle name: the first is taken.
        planted.push(plant(idle_name(&arena.prefix, 21)));
        queue(&[21, 22]);
        arena.publish(12).unwrap();
        drop(a);
        arena.free(12).unwrap();
        assert_eq!(arena.stats().idle_bytes, 4096);
        assert!(dir.join(idle_name(&arena.prefix, 22)).exists());
        // Taken from the pool under a drawn buffer id: the first is taken.
        planted.push(plant(arena.buffer_name(31)));
        queue(&[31, 32]);
        let b = arena.alloc(4096).unwrap();
        assert_eq!((b.buffer, arena.stats().idle_bytes), (32, 0));
        // Every name tried is taken: an error, and the pool's books stay right.
        planted.push(plant(arena.buffer_name(41)));
        queue(&[41; NAME_ATTEMPTS]);
        match arena.alloc(8192) {
            Err(Error::Io { context, .. }) => assert!(context.contains("planting"), "{context}"),
            other => panic!("{other:?}"),
        }
        assert_eq!((arena.stats().live_buffers, arena.stats().live_bytes), (1, 4096));
        for p in &planted {
            assert_eq!(std::fs::read(p).unwrap(), b"planted");
        }
        drop(b);
        drop(arena);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
