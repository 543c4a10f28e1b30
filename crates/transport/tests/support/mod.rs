//! Helpers shared by the transport's integration tests: a test's scratch space holding its shm
//! directories (removed when the test ends), and publishing bytes from an owner (plainly or
//! leased) to get their descriptor.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use accel_transport::{Config, Descriptor, Transport};

pub const SECRET: &[u8] = b"test-cluster-secret-0123456789";

/// The scratch space of one test, `<tmp>/<prefix>-<n>-<pid>`, holding one shm directory per
/// tag. Dropping it removes it with every segment in it, whether the test passed or failed, so a
/// test run leaves nothing in `<tmp>`; bind it first in a test, so that it drops after the
/// transports that use it. Scratch spaces of earlier test processes that were killed before
/// they could drop theirs (`<prefix>-*-<pid>` of a pid that no longer runs) are removed first.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(prefix: &str) -> Scratch {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        sweep_dead(prefix);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("{prefix}-{n}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Scratch(root)
    }

    /// The shm directory `tag` of this test, created empty on first use.
    pub fn dir(&self, tag: &str) -> PathBuf {
        let dir = self.0.join(tag);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A config with the test secret and the shm directory `tag`.
    pub fn config(&self, tag: &str) -> Config {
        let mut c = Config::new(SECRET);
        c.shm_dir = self.dir(tag);
        c
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes `<tmp>/<prefix>-<anything>-<pid>` directories whose process no longer runs.
fn sweep_dead(prefix: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else { continue };
        let Some(pid) = rest.rsplit('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Publishes `data` from `t` and returns its descriptor.
pub fn publish(t: &Transport, data: &[u8]) -> Descriptor {
    publish_with(t, data, None)
}

/// Publishes `data` from `t`, freed after `readers` gets.
pub fn publish_leased(t: &Transport, data: &[u8], readers: u32) -> Descriptor {
    publish_with(t, data, Some(readers))
}

fn publish_with(t: &Transport, data: &[u8], readers: Option<u32>) -> Descriptor {
    let a = t.arena().alloc(data.len() as u64).unwrap();
    // SAFETY: the allocation is at least `data.len()` bytes and nobody else sees it yet.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), a.map.as_mut_ptr(), data.len())
    };
    match readers {
        Some(n) => t.publish_leased(a.buffer, n).unwrap(),
        None => t.arena().publish(a.buffer).unwrap(),
    }
    Descriptor {
        owner: t.owner().into(),
        host: t.host().into(),
        endpoint: t.endpoint().into(),
        segment: a.segment,
        buffer: a.buffer,
        len: data.len() as u64,
    }
}
