//! Descriptors a forked child must not keep: the owner's listener and its served connections.
//! A child of `fork()` (Python's `os.fork`, multiprocessing's fork start method) inherits every
//! descriptor; if it kept the listener, a consumer would still connect after the owner died and
//! wait for a handshake that never comes, instead of being refused at once (`OwnerGone`).
//! A `pthread_atfork` child handler closes every registered descriptor in the child only (the
//! parent's stay open). The table is a fixed array of atomics: the handler runs between `fork`
//! and the child's first step and may take no lock.
#![allow(unsafe_code)]

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

const SLOTS: usize = 1024;
static FDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
static INSTALL: Once = Once::new();

extern "C" fn close_in_child() {
    for slot in &FDS {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: closes the child's copy of a descriptor the parent registered; nothing in
            // the child uses it (the threads that did were not forked).
            unsafe { libc::close(fd) };
        }
    }
}

/// Keeps `fd` registered until dropped (drop before the descriptor is closed).
#[derive(Debug)]
pub struct Guard(Option<usize>);

/// Registers `fd` to be closed in forked children. When the table is full the descriptor is
/// simply not registered (a child then keeps it, the behaviour without this module).
pub fn register(fd: RawFd) -> Guard {
    INSTALL.call_once(|| {
        // SAFETY: registers a handler that only swaps atomics and calls close(2), both
        // async-signal-safe, as a child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(close_in_child)) };
    });
    for (i, slot) in FDS.iter().enumerate() {
        if slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return Guard(Some(i));
        }
    }
    Guard(None)
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            FDS[i].store(-1, Ordering::Release);
        }
    }
}
