//! Leases: a buffer published for a known number of readers frees itself after the last one.
//!
//! The owner records `readers` when it publishes; each consumer, once it holds its copy or its
//! mapping (whose `LOCK_SH` keeps the bytes alive on its own), releases one read. The read that
//! brings the count to zero frees the buffer in the arena, so a loop that publishes with
//! `readers=N` never needs a manual `free`.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::shm::Arena;

/// The outstanding reads of this owner's leased buffers.
#[derive(Debug, Default)]
pub struct Leases {
    /// Reads still expected, and the lease's reads in all, per buffer.
    left: Mutex<HashMap<u64, (u32, u32)>>,
}

impl Leases {
    /// Expects `readers` reads of `buffer` (0 means no lease: the buffer lives until freed).
    pub fn set(&self, buffer: u64, readers: u32) {
        let mut g = self.left.lock().unwrap_or_else(|e| e.into_inner());
        if readers == 0 {
            g.remove(&buffer);
        } else {
            g.insert(buffer, (readers, readers));
        }
    }

    /// Reads still expected of `buffer`, if it is leased.
    pub fn left(&self, buffer: u64) -> Option<u32> {
        self.left.lock().unwrap_or_else(|e| e.into_inner()).get(&buffer).map(|l| l.0)
    }

    /// The reads `buffer` was leased for in all, if it is leased.
    pub fn total(&self, buffer: u64) -> Option<u32> {
        self.left.lock().unwrap_or_else(|e| e.into_inner()).get(&buffer).map(|l| l.1)
    }

    /// Records one finished read of `buffer`; the last one frees it in `arena`. Returns whether
    /// it was freed. A buffer without a lease, or one already freed, is `Freed`: a reader that
    /// releases more often than the lease allows learns it instead of freeing someone else's.
    pub fn release(&self, buffer: u64, arena: &Arena, owner: &str) -> Result<bool> {
        let last = {
            let mut g = self.left.lock().unwrap_or_else(|e| e.into_inner());
            let Some((left, _)) = g.get_mut(&buffer) else {
                return Err(Error::Freed { owner: owner.into(), buffer });
            };
            *left -= 1;
            let last = *left == 0;
            if last {
                g.remove(&buffer);
            }
            last
        };
        if last {
            arena.free(buffer)?;
        }
        Ok(last)
    }

    /// Forgets the lease of a buffer freed by other means.
    pub fn forget(&self, buffer: u64) {
        self.left.lock().unwrap_or_else(|e| e.into_inner()).remove(&buffer);
    }
}
