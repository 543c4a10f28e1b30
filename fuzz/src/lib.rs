//! What accel's fuzz targets share: an allocator that turns runaway memory into a crash, the
//! opt-in canary that proves a planted panic is caught, the strict-mode switch, and the inputs'
//! plumbing (an in-memory peer for the transport, capture trees in memory and on disk).
//!
//! The targets are in `fuzz_targets/`; `scripts/fuzz.sh` builds and runs them, and
//! `fuzz/README.md` says what each one feeds and checks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use accel_discover::fs::MemTree;
use accel_discover::Host;
use accel_model::SkuRegistry;

// ---------------------------------------------------------------------------------------------
// Bounded memory.

/// Most bytes the Rust side of a target may hold at once: a frame, an answer or a capture of a
/// few kilobytes never legitimately needs more. Past it an allocation fails, and Rust aborts
/// with "memory allocation of N bytes failed", which libFuzzer records as a crash. (libFuzzer's
/// own `-malloc_limit_mb` needs a sanitizer's allocator hooks, which a stable build lacks.)
pub const MEMORY_LIMIT: usize = 256 << 20;

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, refusing any request that would take the live total past
/// [`MEMORY_LIMIT`].
#[derive(Debug)]
pub struct Bounded;

fn reserve(bytes: usize) -> bool {
    let before = LIVE.fetch_add(bytes, Ordering::Relaxed);
    if before.saturating_add(bytes) > MEMORY_LIMIT {
        LIVE.fetch_sub(bytes, Ordering::Relaxed);
        return false;
    }
    true
}

fn unreserve(bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's layout and pointer unchanged;
// the only addition is bookkeeping, and a refused request returns null, which `GlobalAlloc`
// allows for any allocation failure.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size), passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            unreserve(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as in `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            unreserve(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (so from `System`) with this layout.
        unsafe { System.dealloc(ptr, layout) };
        unreserve(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old && !reserve(new_size - old) {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds `new_size`'s rules.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        match (p.is_null(), new_size > old) {
            (true, true) => unreserve(new_size - old),
            (false, false) => unreserve(old - new_size),
            _ => {}
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Bounded = Bounded;

/// Bytes the Rust side holds now.
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------------
// Switches (read here, in the harness, never in accel's libraries).

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// `ACCEL_FUZZ_CANARY=1`: the planted panic ([`canary`]) is armed.
pub fn canary_armed() -> bool {
    static ARMED: OnceLock<bool> = OnceLock::new();
    *ARMED.get_or_init(|| env_flag("ACCEL_FUZZ_CANARY"))
}

/// The planted bug that shows a target can fail: when armed, panics once the fuzzer reaches
/// `reached`. The frame target plants it behind a `Free` frame whose buffer id is at least
/// [`CANARY_BUFFER_MIN`], which no seed has: libFuzzer must find it by mutation (in seconds).
pub fn canary(reached: bool) {
    if reached && canary_armed() {
        panic!("accel-fuzz canary: the planted bug was reached (ACCEL_FUZZ_CANARY=1)");
    }
}

/// The smallest buffer id that trips the frame target's canary.
pub const CANARY_BUFFER_MIN: u64 = 1 << 63;

/// `ACCEL_FUZZ_STRICT=1`: besides "never panics", check the model's invariants and the
/// differential properties (in memory against on disk, recaptured against original). These are
/// findings to read, not CI gates: scripts/fuzz.sh runs without them unless asked.
pub fn strict() -> bool {
    static STRICT: OnceLock<bool> = OnceLock::new();
    *STRICT.get_or_init(|| env_flag("ACCEL_FUZZ_STRICT"))
}

// ---------------------------------------------------------------------------------------------
// A peer on the other end of a connection.

/// A stream whose incoming bytes are the fuzz input and whose outgoing bytes are kept (bounded).
#[derive(Debug)]
pub struct Wire<'a> {
    pub incoming: &'a [u8],
    pub outgoing: Vec<u8>,
}

impl<'a> Wire<'a> {
    pub fn new(incoming: &'a [u8]) -> Wire<'a> {
        Wire { incoming, outgoing: Vec::new() }
    }
}

impl Read for Wire<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.incoming.read(buf)
    }
}

impl Write for Wire<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.outgoing.len() + buf.len() > 1 << 20 {
            return Err(io::Error::other("the harness's peer keeps at most 1 MiB"));
        }
        self.outgoing.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Capture trees.

/// The registry every target uses: the built-in one, every vendor's file parsed once (a clone
/// of an unparsed registry would parse its TOML again on every input).
pub fn registry() -> SkuRegistry {
    static REGISTRY: OnceLock<SkuRegistry> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            let registry = SkuRegistry::builtin();
            registry.all();
            registry
        })
        .clone()
}

/// A captured directory (files, symlinks, directories) as an in-memory tree, paths made absolute
/// in the machine. For the plugin target's platform (`examples/plugins/ascend/capture`).
pub fn tree_from_dir(root: &Path) -> io::Result<MemTree> {
    fn walk(root: &Path, dir: &Path, tree: &mut MemTree) -> io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let at = Path::new("/").join(path.strip_prefix(root).map_err(io::Error::other)?);
            let kind = std::fs::symlink_metadata(&path)?.file_type();
            if kind.is_symlink() {
                tree.add_link(at, std::fs::read_link(&path)?);
            } else if kind.is_dir() {
                tree.add_dir(at);
                walk(root, &path, tree)?;
            } else {
                tree.add_file(at, std::fs::read(&path)?);
            }
        }
        Ok(())
    }
    let mut tree = MemTree::new();
    walk(root, root, &mut tree)?;
    Ok(tree)
}

/// A fresh directory for one input's tree on disk, removed when dropped. It lives under
/// `ACCEL_FUZZ_SCRATCH` (scripts/fuzz.sh points it into `fuzz/target/`), else beside the target
/// binary (in `fuzz/target/` too): never in `/tmp`.
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new() -> io::Result<Scratch> {
        static BASE: OnceLock<PathBuf> = OnceLock::new();
        let base = BASE.get_or_init(|| match std::env::var_os("ACCEL_FUZZ_SCRATCH") {
            Some(dir) => PathBuf::from(dir),
            None => std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|d| d.join("scratch")))
                .unwrap_or_else(|| PathBuf::from("fuzz-scratch")),
        });
        let dir = base.join(format!("tree-{}", std::process::id()));
        // A crash leaves the previous input's tree behind; start clean.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // `remove_dir_all` never follows the tree's symlinks.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether every component after the leading `/` is a plain name: nothing that climbs out.
fn plain(path: &Path) -> bool {
    let mut c = path.components();
    c.next() == Some(Component::RootDir) && c.all(|c| matches!(c, Component::Normal(_)))
}

/// Writes `tree` under `dir`: directories and files first, symlinks last, so no write of the
/// harness ever goes through a symlink of the input (whose targets may name the live `/`).
/// Entries below a symlink, or with a path that is not plain, are skipped. Returns how many
/// entries were not written (0: the directory holds the whole tree).
pub fn materialize(tree: &Arc<MemTree>, dir: &Path) -> usize {
    let host = Host::in_memory(tree.clone(), SkuRegistry::default());
    let links: Vec<&Path> = tree.paths().filter(|(_, k)| *k == 'L').map(|(p, _)| p).collect();
    let under_link = |p: &Path| links.iter().any(|l| p != *l && p.starts_with(l));
    let at = |p: &Path| dir.join(p.strip_prefix("/").unwrap_or(p));
    let mut missed = 0;
    for pass in ['D', 'F', 'L'] {
        for (path, kind) in tree.paths() {
            if kind != pass || path == Path::new("/") {
                continue;
            }
            if !plain(path) || under_link(path) {
                missed += 1;
                continue;
            }
            let ok = match kind {
                'D' => std::fs::create_dir_all(at(path)).is_ok(),
                'F' => {
                    let bytes = tree.file(path).unwrap_or_default();
                    at(path).parent().is_some_and(|p| std::fs::create_dir_all(p).is_ok())
                        && std::fs::write(at(path), bytes).is_ok()
                }
                _ => match host.raw_link(path) {
                    Some(target) => {
                        at(path).parent().is_some_and(|p| std::fs::create_dir_all(p).is_ok())
                            && std::os::unix::fs::symlink(target, at(path)).is_ok()
                    }
                    None => false,
                },
            };
            missed += usize::from(!ok);
        }
    }
    missed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_refuses_past_the_limit() {
        let mut v: Vec<u8> = Vec::new();
        assert!(v.try_reserve_exact(MEMORY_LIMIT + 1).is_err());
        assert!(v.try_reserve_exact(1 << 20).is_ok());
        assert!(live_bytes() >= 1 << 20);
    }

    #[test]
    fn materialize_never_writes_through_a_link_or_above_the_root() {
        let mut tree = MemTree::new();
        tree.add_file("/sys/a", "1");
        tree.add_link("/sys/out", "/");
        tree.add_file("/sys/out/escaped", "x");
        tree.add_file("/sys/../../escaped", "x");
        let tree = Arc::new(tree);
        let scratch = Scratch::new().unwrap();
        // Skipped: `/sys/out/escaped` (below a link), `/sys/../../escaped` and the two directories
        // its parents make (`/sys/..`, `/sys/../..`).
        assert_eq!(materialize(&tree, &scratch.0), 4);
        assert_eq!(std::fs::read_to_string(scratch.0.join("sys/a")).unwrap(), "1");
        assert!(std::fs::symlink_metadata(scratch.0.join("sys/out")).unwrap().file_type().is_symlink());
        assert!(!Path::new("/escaped").exists());
        assert!(!scratch.0.parent().unwrap().join("escaped").exists());
    }
}
