//! The owner's answers to control requests, the ones that move no buffer bytes: `Free`,
//! `Release` (one finished read of a leased buffer), `Latest` (a channel's newest manifest) and
//! `Join` (a reader's place in a relayed broadcast, `relay`).
//! The TCP server hands every such frame here, after the handshake, so the lease and channel
//! logic stays out of the connection code.

use crate::channel::Channels;
use crate::error::{Error, Result};
use crate::frame::{self, code, Kind};
use crate::lease::Leases;
use crate::relay::{self, Fills, Relays, Sums};
use crate::shm::Arena;

/// An owner's leases, channels and relays.
#[derive(Debug, Default)]
pub struct Control {
    pub leases: Leases,
    pub channels: Channels,
    /// Schedules of this owner's buffers relayed by their readers.
    pub relays: Relays,
    /// This process's relay buffers still receiving (its server waits on them).
    pub fills: Fills,
    /// Digests of this owner's relayed buffers, for readers that stream from a relay.
    pub sums: Sums,
}

impl Control {
    /// Whether `kind` is a control request this module answers.
    pub fn handles(kind: Kind) -> bool {
        matches!(kind, Kind::Free | Kind::Release | Kind::Latest | Kind::Join)
    }

    /// Frees `buffer` and forgets its lease.
    pub fn free(&self, arena: &Arena, buffer: u64) -> Result<()> {
        self.leases.forget(buffer);
        arena.free(buffer)
    }

    /// The reply frame to a control request. Bad payloads are `Err` (the connection ends);
    /// requests about unknown buffers or channels are answered with an `Err` frame.
    pub fn answer(&self, kind: Kind, payload: &[u8], arena: &Arena, owner: &str) -> Result<(Kind, Vec<u8>)> {
        let not_there = |what: &str| (Kind::Err, frame::error_payload(code::FREED, what));
        Ok(match kind {
            Kind::Free => match self.free(arena, frame::u64_at(payload, 0)?) {
                Ok(()) => (Kind::Freed, vec![]),
                Err(_) => not_there("buffer is not published"),
            },
            Kind::Release => match self.leases.release(frame::u64_at(payload, 0)?, arena, owner) {
                Ok(freed) => (Kind::Freed, vec![u8::from(freed)]),
                Err(_) => not_there("buffer is not leased (freed, or never published with readers)"),
            },
            Kind::Latest => {
                let name =
                    std::str::from_utf8(payload).map_err(|_| Error::Protocol("channel name is not UTF-8".into()))?;
                match self.channels.latest(name) {
                    Some((version, manifest)) => (Kind::Ok, Channels::encode(version, &manifest)),
                    None => not_there("no such channel"),
                }
            }
            Kind::Join => {
                let (buffer, joiner) = relay::parse_join(payload)?;
                self.relays.prune(|b| arena.lookup(b).is_none());
                self.sums.prune(|b| arena.lookup(b).is_none());
                match arena.lookup(buffer) {
                    None => not_there("buffer is not published"),
                    Some((map, len)) => {
                        // Without a lease the readers are unknown: every one streams from the owner.
                        let readers = self.leases.total(buffer).unwrap_or(0);
                        let mut place = self.relays.join(buffer, readers, joiner);
                        if place.upstream.is_some() {
                            // Whoever the relay is, the reader checks its bytes against these.
                            place.digests = Some((*self.sums.get(buffer, &map, len)).clone());
                        } else if readers > self.relays.fanout() {
                            // Later joiners will stream from relays: digest while this one streams.
                            self.sums.prepare(buffer, map, len);
                        }
                        (Kind::Ok, place.encode())
                    }
                }
            }
            other => return Err(Error::Protocol(format!("{other:?} is not a control request"))),
        })
    }
}
