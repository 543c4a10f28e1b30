//! Helpers shared by the transport's integration tests: a config with its own shm directory,
//! and publishing bytes from an owner (plainly or leased) to get their descriptor.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;

use accel_transport::{Config, Descriptor, Transport};

pub const SECRET: &[u8] = b"test-cluster-secret-0123456789";

/// A fresh, empty shm directory for one test: `<tmp>/<prefix>-<tag>-<pid>`. The directories
/// of earlier test processes that have exited (`<prefix>-*-<pid>`) are removed first: a test
/// process ends without unlinking its owners' segments, which would otherwise pile up in `<tmp>`
/// run after run (hundreds of MiB each time).
pub fn shm_dir(prefix: &str, tag: &str) -> PathBuf {
    sweep_dead(prefix);
    let dir = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes `<tmp>/<prefix>-<anything>-<pid>` directories whose process no longer runs.
fn sweep_dead(prefix: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else { continue };
        let Some(pid) = rest.rsplit('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A config with the test secret and its own shm directory.
pub fn config_in(dir: PathBuf) -> Config {
    let mut c = Config::new(SECRET);
    c.shm_dir = dir;
    c
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
