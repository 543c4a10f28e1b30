//! Relayed broadcast: the readers of a leased buffer pass it on to each other, so its owner
//! sends it `fanout` times instead of once per reader, and every hop streams a piece on as soon
//! as it has landed (pipelined), as the RL weight-sync systems do (a static schedule computed
//! once, chunks forwarded while the rest still arrives).
//!
//! The schedule is a heap-ordered tree over the order in which readers join: the owner is node
//! 0, the k-th joiner is node k, its parent is node `(k - 1) / fanout`, and it serves the
//! joiners `k * fanout + 1 ..= k * fanout + fanout` that exist among the lease's readers, so
//! each joiner learns on joining exactly how many downstream readers to expect (`fanout = 1` is
//! a chain). A joiner receives into a buffer of its own arena, published at once with a `Fill`
//! that its server waits on piece by piece; a downstream reader whose upstream fails or stalls
//! fetches from the owner instead, so a relay can slow a broadcast down but never break it.
//!
//! Nor can a relay change what a reader gets. Anyone holding the cluster secret can join a
//! schedule and be named as a relay, so relayed bytes are never taken on trust: the owner sends a
//! reader that streams from a relay the SHA-256 digest of every piece of its buffer (`Digests`,
//! in the `Join` reply, over the authenticated connection to the owner), and the reader checks
//! each piece as soon as all of it has arrived, before its own server forwards a byte of it. A
//! piece that does not match ends the relayed stream, and the reader fetches from the owner.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use memmap2::MmapRaw;
use ring::digest::{digest, SHA256, SHA256_OUTPUT_LEN};

use crate::error::{Error, Result};
use crate::frame;

/// Which byte ranges of a buffer being received have landed: a relay's server streams a piece
/// only once it is here.
#[derive(Debug)]
pub struct Fill {
    total: u64,
    state: Mutex<FillState>,
    landed: Condvar,
}

#[derive(Debug, Default)]
struct FillState {
    /// Sorted, disjoint, non-adjacent `[start, end)` ranges that have landed.
    have: Vec<(u64, u64)>,
    failed: bool,
}

impl Fill {
    /// An empty fill of `total` bytes.
    pub fn new(total: u64) -> Fill {
        Fill { total, state: Mutex::default(), landed: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FillState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `[at, at + len)` has landed.
    pub fn mark(&self, at: u64, len: u64) {
        let (mut start, mut end) = (at, at.saturating_add(len).min(self.total));
        if start >= end {
            return;
        }
        let mut g = self.lock();
        // Merge with every range that overlaps or touches the new one.
        g.have.retain(|&(s, e)| {
            if e < start || s > end {
                return true;
            }
            start = start.min(s);
            end = end.max(e);
            false
        });
        let i = g.have.partition_point(|&(s, _)| s < start);
        g.have.insert(i, (start, end));
        drop(g);
        self.landed.notify_all();
    }

    /// The upstream failed: every waiter gives up.
    pub fn fail(&self) {
        self.lock().failed = true;
        self.landed.notify_all();
    }

    /// Whether every byte has landed.
    pub fn complete(&self) -> bool {
        self.lock().have.first() == Some(&(0, self.total)) || self.total == 0
    }

    /// Waits until `[at, at + len)` has landed: `true`, or `false` if the fill failed or
    /// `timeout` passed first.
    pub fn wait(&self, at: u64, len: u64, timeout: Duration) -> bool {
        let end = at.saturating_add(len).min(self.total);
        let deadline = Instant::now() + timeout;
        let mut g = self.lock();
        loop {
            if g.have.iter().any(|&(s, e)| s <= at && end <= e) || at >= end {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if g.failed || left.is_zero() {
                return false;
            }
            g = self.landed.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// One relay: a reader's own buffer holding (or receiving) a copy of the broadcast buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub owner: String,
    pub endpoint: String,
    pub buffer: u64,
}

/// What the owner tells a joining reader: where to stream from (`None`: the owner itself), how
/// many downstream readers will stream from it, and, with a relay to stream from, the digests to
/// check the relay's bytes against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub upstream: Option<Peer>,
    pub serve: u32,
    pub digests: Option<Digests>,
}

impl Assignment {
    /// `Join`'s reply payload: u32 serve, u64 upstream buffer (0: the owner); with an upstream,
    /// u32 digest count (0: none), then, if any, u64 buffer length, u64 piece length and the
    /// digests (32 bytes each), then the upstream's owner id and endpoint separated by a newline.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.serve.to_le_bytes().to_vec();
        match &self.upstream {
            None => out.extend_from_slice(&0u64.to_le_bytes()),
            Some(p) => {
                out.extend_from_slice(&p.buffer.to_le_bytes());
                match &self.digests {
                    None => out.extend_from_slice(&0u32.to_le_bytes()),
                    Some(d) => {
                        out.extend_from_slice(&(d.sums.len() as u32).to_le_bytes());
                        out.extend_from_slice(&d.total.to_le_bytes());
                        out.extend_from_slice(&d.piece.to_le_bytes());
                        d.sums.iter().for_each(|sum| out.extend_from_slice(sum));
                    }
                }
                out.extend_from_slice(format!("{}\n{}", p.owner, p.endpoint).as_bytes());
            }
        }
        out
    }

    /// Parses `encode`'s output; digests whose count does not fit the lengths they name are an
    /// error, never a partial check.
    pub fn decode(p: &[u8]) -> Result<Assignment> {
        let short = || Error::Protocol("short Join reply".into());
        let serve = u32::from_le_bytes(p.get(..4).and_then(|b| b.try_into().ok()).ok_or_else(short)?);
        let buffer = frame::u64_at(p, 4)?;
        if buffer == 0 {
            return Ok(Assignment { upstream: None, serve, digests: None });
        }
        let count = u32::from_le_bytes(p.get(12..16).and_then(|b| b.try_into().ok()).ok_or_else(short)?) as usize;
        let (digests, rest) = if count == 0 {
            (None, &p[16..])
        } else {
            let (total, piece) = (frame::u64_at(p, 16)?, frame::u64_at(p, 24)?);
            if piece == 0 || total.div_ceil(piece) != count as u64 {
                return Err(Error::Protocol("Join reply: digests do not cover the buffer".into()));
            }
            let end = count.checked_mul(SHA256_OUTPUT_LEN).and_then(|n| n.checked_add(32)).ok_or_else(short)?;
            let table = p.get(32..end).ok_or_else(short)?;
            let sums = table.chunks_exact(SHA256_OUTPUT_LEN).map(|c| c.try_into().expect("32-byte chunks")).collect();
            (Some(Digests { total, piece, sums }), &p[end..])
        };
        let (owner, endpoint) = parse_peer(rest)?;
        Ok(Assignment { upstream: Some(Peer { owner, endpoint, buffer }), serve, digests })
    }
}

/// Bytes of buffer each digest covers, at least: a large buffer gets larger pieces, so that its
/// digests fit in one control frame (`MAX_PIECES` of them).
pub const DIGEST_PIECE: u64 = 4 << 20;
/// Most digests of one buffer (32 KiB of them, within a control frame).
pub const MAX_PIECES: u64 = 1024;

/// The SHA-256 digest of every piece of a buffer (the last piece may be short), computed by its
/// owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digests {
    /// Bytes of the buffer.
    pub total: u64,
    /// Bytes of each piece.
    pub piece: u64,
    pub sums: Vec<[u8; SHA256_OUTPUT_LEN]>,
}

impl Digests {
    /// The piece length for a buffer of `total` bytes: `DIGEST_PIECE`, doubled until at most
    /// `MAX_PIECES` pieces cover it.
    pub fn piece_for(total: u64) -> u64 {
        let mut piece = DIGEST_PIECE;
        while total.div_ceil(piece) > MAX_PIECES {
            piece *= 2;
        }
        piece
    }

    /// The digests of `data`.
    pub fn of(data: &[u8]) -> Digests {
        let piece = Digests::piece_for(data.len() as u64);
        let sums = data
            .chunks(piece as usize)
            .map(|c| digest(&SHA256, c).as_ref().try_into().expect("SHA-256 is 32 bytes"))
            .collect();
        Digests { total: data.len() as u64, piece, sums }
    }

    /// Offset and length of piece `i`.
    pub fn range(&self, i: usize) -> (u64, u64) {
        let at = i as u64 * self.piece;
        (at, self.piece.min(self.total.saturating_sub(at)))
    }

    /// Whether `bytes` are piece `i` as the owner had it.
    pub fn matches(&self, i: usize, bytes: &[u8]) -> bool {
        self.sums.get(i).is_some_and(|sum| digest(&SHA256, bytes).as_ref() == sum)
    }
}

/// Counts what has arrived of each piece of a buffer streaming in from a relay, so that each
/// piece is checked against its digest as soon as all of it is there (the stripes of a striped
/// fetch fill pieces from several threads).
#[derive(Debug)]
pub struct Verifier {
    piece: u64,
    total: u64,
    /// Bytes arrived of each piece; `u64::MAX` once it was handed out for checking.
    got: Mutex<Vec<u64>>,
}

impl Verifier {
    /// Counts arrivals against the pieces of `digests`.
    pub fn new(digests: &Digests) -> Verifier {
        Verifier { piece: digests.piece, total: digests.total, got: Mutex::new(vec![0; digests.sums.len()]) }
    }

    /// Records that `[at, at + len)` arrived and returns the pieces it completed, each exactly
    /// once. Bytes arriving for a piece already handed out (written over bytes that were checked)
    /// are an error: the caller must not trust that piece, or the buffer, any more.
    pub fn arrived(&self, at: u64, len: u64) -> Result<Vec<usize>> {
        let end = at.saturating_add(len).min(self.total);
        let mut g = self.got.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = Vec::new();
        let mut pos = at;
        while pos < end {
            let i = (pos / self.piece) as usize;
            let piece_end = ((i as u64 + 1) * self.piece).min(self.total);
            let upto = end.min(piece_end);
            match g.get_mut(i) {
                Some(n) if *n == u64::MAX => {
                    return Err(Error::Protocol(format!("relayed piece {i} arrived again after it was checked")))
                }
                Some(n) => {
                    *n += upto - pos;
                    if *n >= piece_end - i as u64 * self.piece {
                        *n = u64::MAX;
                        done.push(i);
                    }
                }
                None => break,
            }
            pos = upto;
        }
        Ok(done)
    }

    /// Whether every piece was handed out for checking.
    pub fn all_arrived(&self) -> bool {
        self.got.lock().unwrap_or_else(|e| e.into_inner()).iter().all(|n| *n == u64::MAX)
    }
}

/// The owner's digests of its relayed buffers, each computed once (in the background from the
/// first `Join`, so the reader that needs them first rarely waits).
#[derive(Debug, Default)]
pub struct Sums {
    by_buffer: Mutex<HashMap<u64, Arc<OnceLock<Arc<Digests>>>>>,
}

impl Sums {
    fn slot(&self, buffer: u64) -> Arc<OnceLock<Arc<Digests>>> {
        self.by_buffer.lock().unwrap_or_else(|e| e.into_inner()).entry(buffer).or_default().clone()
    }

    /// The digests of published buffer `buffer` (`len` bytes mapped at `map`): computed now, or
    /// waited for if another thread is computing them.
    pub fn get(&self, buffer: u64, map: &MmapRaw, len: u64) -> Arc<Digests> {
        self.slot(buffer).get_or_init(|| Arc::new(Digests::of(crate::shm::published(map, len)))).clone()
    }

    /// Starts computing the digests of `buffer` in the background (nothing if that fails: the
    /// first reader that needs them computes them).
    pub fn prepare(&self, buffer: u64, map: Arc<MmapRaw>, len: u64) {
        let slot = self.slot(buffer);
        if slot.get().is_none() {
            let _ = std::thread::Builder::new().name("accel-relay-digest".into()).spawn(move || {
                slot.get_or_init(|| Arc::new(Digests::of(crate::shm::published(&map, len))));
            });
        }
    }

    /// Drops the digests of every buffer for which `gone` holds.
    pub fn prune(&self, gone: impl Fn(u64) -> bool) {
        self.by_buffer.lock().unwrap_or_else(|e| e.into_inner()).retain(|b, _| !gone(*b));
    }
}

/// `Join`'s request payload: u64 broadcast buffer, u64 the joiner's relay buffer, then its owner
/// id and endpoint separated by a newline.
pub fn join_request(buffer: u64, me: &Peer) -> Vec<u8> {
    let mut out = buffer.to_le_bytes().to_vec();
    out.extend_from_slice(&me.buffer.to_le_bytes());
    out.extend_from_slice(format!("{}\n{}", me.owner, me.endpoint).as_bytes());
    out
}

/// Parses `join_request`'s output into the broadcast buffer and the joiner.
pub fn parse_join(p: &[u8]) -> Result<(u64, Peer)> {
    let buffer = frame::u64_at(p, 0)?;
    let relay = frame::u64_at(p, 8)?;
    let (owner, endpoint) = parse_peer(&p[16..])?;
    Ok((buffer, Peer { owner, endpoint, buffer: relay }))
}

fn parse_peer(p: &[u8]) -> Result<(String, String)> {
    let text = std::str::from_utf8(p).map_err(|_| Error::Protocol("relay peer is not UTF-8".into()))?;
    let (owner, endpoint) = text.split_once('\n').ok_or_else(|| Error::Protocol("malformed relay peer".into()))?;
    if owner.is_empty() || endpoint.is_empty() {
        return Err(Error::Protocol("malformed relay peer".into()));
    }
    Ok((owner.to_string(), endpoint.to_string()))
}

/// The owner's schedules, one per broadcast buffer being relayed.
#[derive(Debug)]
pub struct Relays {
    fanout: u32,
    /// Joiners of each buffer in join order (node k is `[k - 1]`).
    joined: Mutex<HashMap<u64, Vec<Peer>>>,
}

impl Default for Relays {
    fn default() -> Relays {
        Relays::new(1)
    }
}

impl Relays {
    /// Schedules in which every node serves up to `fanout` downstream readers (at least 1).
    pub fn new(fanout: u32) -> Relays {
        Relays { fanout: fanout.max(1), joined: Mutex::default() }
    }

    /// Readers each node serves: the first `fanout` joiners stream from the owner.
    pub fn fanout(&self) -> u32 {
        self.fanout
    }

    /// Places a reader of `buffer`, leased to `readers` reads in all, in its tree. A joiner past
    /// the lease's reader count streams from the owner and serves nobody.
    pub fn join(&self, buffer: u64, readers: u32, joiner: Peer) -> Assignment {
        let mut g = self.joined.lock().unwrap_or_else(|e| e.into_inner());
        let nodes = g.entry(buffer).or_default();
        let k = nodes.len() as u64 + 1;
        let (n, f) = (u64::from(readers), u64::from(self.fanout));
        if k > n {
            return Assignment { upstream: None, serve: 0, digests: None };
        }
        let parent = (k - 1) / f;
        let upstream = (parent > 0).then(|| nodes[(parent - 1) as usize].clone());
        let serve = n.saturating_sub(k * f).min(f) as u32;
        nodes.push(joiner);
        Assignment { upstream, serve, digests: None }
    }

    /// Drops the schedules of every buffer for which `gone` holds.
    pub fn prune(&self, gone: impl Fn(u64) -> bool) {
        self.joined.lock().unwrap_or_else(|e| e.into_inner()).retain(|b, _| !gone(*b));
    }
}

/// The fills of this process's relay buffers still receiving, looked up by its server.
#[derive(Debug, Default)]
pub struct Fills {
    by_buffer: Mutex<HashMap<u64, Arc<Fill>>>,
}

impl Fills {
    /// Registers the fill of `buffer` (before the buffer is published).
    pub fn insert(&self, buffer: u64, fill: Arc<Fill>) {
        self.by_buffer.lock().unwrap_or_else(|e| e.into_inner()).insert(buffer, fill);
    }

    /// The fill of `buffer`, if it is still receiving.
    pub fn get(&self, buffer: u64) -> Option<Arc<Fill>> {
        self.by_buffer.lock().unwrap_or_else(|e| e.into_inner()).get(&buffer).cloned()
    }

    /// Forgets the fill of `buffer` (complete or failed).
    pub fn remove(&self, buffer: u64) {
        self.by_buffer.lock().unwrap_or_else(|e| e.into_inner()).remove(&buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(i: u64) -> Peer {
        Peer { owner: format!("o{i}"), endpoint: format!("127.0.0.1:{i}"), buffer: i }
    }

    #[test]
    fn chains_and_trees_place_every_reader_once() {
        // A chain: each joiner streams from the previous one and serves the next, the last
        // serves nobody.
        let chain = Relays::new(1);
        let got: Vec<_> = (1..=4).map(|i| chain.join(9, 4, peer(i))).collect();
        let place = |upstream, serve| Assignment { upstream, serve, digests: None };
        assert_eq!(got[0], place(None, 1));
        assert_eq!(got[1], place(Some(peer(1)), 1));
        assert_eq!(got[2], place(Some(peer(2)), 1));
        assert_eq!(got[3], place(Some(peer(3)), 0));
        // A fifth reader of a 4-reader lease goes to the owner.
        assert_eq!(chain.join(9, 4, peer(5)), place(None, 0));
        // A binary tree of 6 readers: the owner serves 1 and 2; 1 serves 3 and 4; 2 serves 5, 6.
        let tree = Relays::new(2);
        let got: Vec<_> = (1..=6).map(|i| tree.join(7, 6, peer(i))).collect();
        let ups: Vec<_> = got.iter().map(|a| a.upstream.as_ref().map(|p| p.buffer)).collect();
        assert_eq!(ups, [None, None, Some(1), Some(1), Some(2), Some(2)]);
        let serves: Vec<_> = got.iter().map(|a| a.serve).collect();
        assert_eq!(serves, [2, 2, 0, 0, 0, 0]);
        // Every reader's upstream serves exactly as many as point at it.
        for (i, a) in got.iter().enumerate() {
            let pointing = got.iter().filter(|b| b.upstream.as_ref().map(|p| p.buffer) == Some(i as u64 + 1)).count();
            assert_eq!(a.serve as usize, pointing);
        }
        tree.prune(|b| b == 7);
        assert_eq!(tree.join(7, 6, peer(1)).upstream, None);
    }

    #[test]
    fn wire_forms_round_trip_and_reject_garbage() {
        let a = Assignment { upstream: Some(peer(3)), serve: 2, digests: None };
        assert_eq!(Assignment::decode(&a.encode()).unwrap(), a);
        let o = Assignment { upstream: None, serve: 0, digests: None };
        assert_eq!(Assignment::decode(&o.encode()).unwrap(), o);
        let data = vec![7u8; (9 << 20) + 5];
        let checked = Assignment { digests: Some(Digests::of(&data)), ..a.clone() };
        let wire = checked.encode();
        assert_eq!(Assignment::decode(&wire).unwrap(), checked);
        // Every truncation, and a count that does not fit the lengths, is an error.
        for cut in 0..wire.len() {
            assert!(Assignment::decode(&wire[..cut]).is_err() || cut >= wire.len() - 20, "cut {cut}");
        }
        let mut lying = wire.clone();
        lying[12] = 2; // two digests for a buffer of three pieces
        assert!(Assignment::decode(&lying).is_err());
        assert_eq!(parse_join(&join_request(5, &peer(8))).unwrap(), (5, peer(8)));
        assert!(Assignment::decode(&[1, 2]).is_err());
        assert!(parse_join(&[0; 16]).is_err());
        let mut bad = join_request(5, &peer(8));
        bad.truncate(18);
        assert!(parse_join(&bad).is_err());
    }

    #[test]
    fn digests_check_every_piece_once_it_has_all_arrived() {
        let mut data: Vec<u8> = (0..(10 << 20) + 3).map(|i| (i % 251) as u8).collect();
        let d = Digests::of(&data);
        assert_eq!((d.piece, d.sums.len()), (DIGEST_PIECE, 3));
        assert_eq!(d.range(2), (8 << 20, (2 << 20) + 3));
        assert!((0..3).all(|i| {
            let (at, n) = d.range(i);
            d.matches(i, &data[at as usize..(at + n) as usize])
        }));
        data[5 << 20] ^= 1;
        assert!(!d.matches(1, &data[4 << 20..8 << 20]));
        // Pieces come out as they complete, across frames that straddle them, each once.
        let v = Verifier::new(&d);
        assert_eq!(v.arrived(0, 3 << 20).unwrap(), Vec::<usize>::new());
        assert!(!v.all_arrived());
        assert_eq!(v.arrived(3 << 20, 4 << 20).unwrap(), vec![0]);
        assert_eq!(v.arrived(7 << 20, (3 << 20) + 3).unwrap(), vec![1, 2]);
        assert!(v.all_arrived());
        // Bytes written over a checked piece (a relay resending) are never taken.
        assert!(v.arrived(5 << 20, 10).is_err());
        // A huge buffer gets larger pieces, never more than MAX_PIECES of them.
        assert_eq!(Digests::piece_for(1 << 40), (1 << 40) / MAX_PIECES);
        assert_eq!(Digests::piece_for(0), DIGEST_PIECE);
    }

    #[test]
    fn a_fill_releases_waiters_piece_by_piece_and_on_failure() {
        let f = Arc::new(Fill::new(100));
        assert!(!f.wait(0, 10, Duration::from_millis(10)));
        f.mark(50, 50);
        assert!(f.wait(60, 40, Duration::ZERO));
        assert!(!f.complete());
        let g = f.clone();
        let waiter = std::thread::spawn(move || g.wait(0, 60, Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        f.mark(0, 20);
        f.mark(20, 30); // touches both neighbours: one range [0, 100)
        assert!(waiter.join().unwrap());
        assert!(f.complete());
        let h = Arc::new(Fill::new(10));
        let h2 = h.clone();
        let waiter = std::thread::spawn(move || h2.wait(0, 10, Duration::from_secs(10)));
        h.fail();
        assert!(!waiter.join().unwrap());
    }
}
