//! Relayed broadcast between real transports over loopback TCP: readers of a leased buffer
//! stream it from each other on the owner's schedule, a relay that is gone or stalls sends its
//! reader back to the owner, and every copy is byte for byte the owner's.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_transport::relay::{Assignment, Fill, Peer};
use accel_transport::{Descriptor, Error, Path, Role, Transport};
use support::{publish_leased, Scratch};

fn scratch() -> Scratch {
    Scratch::new("accel-transport-relay")
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 253) as u8).collect()
}

fn bytes(r: &accel_transport::Relayed, len: u64) -> Vec<u8> {
    // SAFETY: the allocation is at least `len` bytes and stays mapped while `r` lives.
    #[allow(unsafe_code)]
    unsafe {
        std::slice::from_raw_parts(r.alloc.map.as_ptr(), len as usize).to_vec()
    }
}

fn shutdown(ts: &[&Transport]) {
    for t in ts {
        t.shutdown();
    }
}

#[test]
fn a_chain_of_readers_relays_every_byte_and_the_owner_sends_it_once() {
    let tmp = scratch();
    let owner = Transport::start(tmp.config("chain-o")).unwrap();
    let data = pattern(40 << 20); // ten 4 MiB pieces: the relays forward while receiving
    let d = publish_leased(&owner, &data, 3);
    let readers: Vec<Transport> =
        ["chain-1", "chain-2", "chain-3"].iter().map(|t| Transport::start(tmp.config(t)).unwrap()).collect();
    let got: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = readers
            .iter()
            .map(|t| {
                let d = d.clone();
                s.spawn(move || {
                    let r = t.fetch_relayed(&d).unwrap();
                    t.release(&d).unwrap(); // one read of the owner's lease, as `get` does
                    r
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &got {
        assert_eq!(bytes(r, d.len), data, "a relayed copy differs from the owner's bytes");
        assert!(!r.fell_back);
    }
    // A chain (fanout 1): one reader streams from the owner, each other from a reader.
    let from_owner = got.iter().filter(|r| r.upstream.is_none()).count();
    assert_eq!(from_owner, 1);
    let mut serves: Vec<u32> = got.iter().map(|r| r.serve).collect();
    serves.sort();
    assert_eq!(serves, [0, 1, 1]);
    // The owner served its bytes once; the relays the rest.
    let served = |t: &Transport| t.metrics().get(Role::Serve, Path::Tcp).bytes;
    assert_eq!(served(&owner), d.len);
    assert_eq!(readers.iter().map(served).sum::<u64>(), 2 * d.len);
    // Every lease is spent: the owner's buffer and both relay copies are freed.
    assert!(owner.arena().lookup(d.buffer).is_none());
    let deadline = Instant::now() + Duration::from_secs(5);
    while readers.iter().any(|t| t.pool().live_buffers > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(readers.iter().map(|t| t.pool().live_buffers).sum::<u64>(), 0);
    drop(got);
    let mut all: Vec<&Transport> = readers.iter().collect();
    all.push(&owner);
    shutdown(&all);
}

/// Joins `d`'s schedule as a fake first reader at `peer`, so the next reader is sent there.
fn join_as(via: &Transport, d: &Descriptor, peer: &Peer) -> Assignment {
    via.join(d, peer).expect("the owner answers Join")
}

#[test]
fn a_relay_that_is_gone_or_stalls_sends_its_reader_to_the_owner() {
    let tmp = scratch();
    let owner = Transport::start(tmp.config("fb-o")).unwrap();
    let data = pattern(24 << 20);
    let d = publish_leased(&owner, &data, 3);
    let mut rcfg = tmp.config("fb-r");
    rcfg.drain_timeout = Duration::from_millis(800); // how long its relay copies wait for readers
    let reader = Transport::start(rcfg).unwrap();

    // The first reader's relay is at a port nobody listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = Peer { owner: "1-1-gone".into(), endpoint: dead.local_addr().unwrap().to_string(), buffer: 1 };
    drop(dead);
    assert_eq!(join_as(&reader, &d, &gone), Assignment { upstream: None, serve: 1, digests: None });
    let r = reader.fetch_relayed(&d).unwrap();
    assert_eq!(r.upstream.as_ref(), Some(&gone));
    assert!(r.fell_back);
    assert_eq!(bytes(&r, d.len), data);

    // A relay whose copy never fills: its server gives up after its drain timeout, and the
    // next reader goes to the owner.
    let mut cfg = tmp.config("fb-stall");
    cfg.drain_timeout = Duration::from_millis(300);
    let stalled = Transport::start(cfg).unwrap();
    let a = stalled.arena().alloc(d.len).unwrap();
    stalled.control().fills.insert(a.buffer, Arc::new(Fill::new(d.len)));
    stalled.arena().publish(a.buffer).unwrap();
    let peer = Peer { owner: stalled.owner().into(), endpoint: stalled.endpoint().into(), buffer: a.buffer };
    let d2 = publish_leased(&owner, &data, 2);
    assert_eq!(join_as(&reader, &d2, &peer).serve, 1);
    let started = Instant::now();
    let r2 = reader.fetch_relayed(&d2).unwrap();
    assert!(r2.fell_back && r2.upstream == Some(peer));
    assert_eq!(bytes(&r2, d2.len), data);
    assert!(started.elapsed() < Duration::from_secs(4), "waited {:?} on a stalled relay", started.elapsed());

    // A buffer that is not published cannot be joined.
    owner.free(&d2).unwrap();
    // (The reader's first copy stays published, awaiting the one reader it serves.)
    assert_eq!((r.serve, r2.serve), (1, 0));
    let before = reader.pool().live_buffers;
    assert!(matches!(reader.fetch_relayed(&d2), Err(Error::Freed { .. })));
    assert!(reader.pool().live_buffers <= before, "a failed relay fetch keeps no buffer");
    // The reader the first copy was to serve never came: the copy is freed after the drain
    // timeout, not kept for ever.
    let deadline = Instant::now() + Duration::from_secs(5);
    while reader.pool().live_buffers > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(reader.pool().live_buffers, 0);
    drop((r, r2));
    shutdown(&[&owner, &reader, &stalled]);
}

/// Anyone holding the cluster secret can join a broadcast's schedule and be named as the relay
/// of the next reader; before the fix that reader returned whatever the relay sent. Now the
/// owner sends each reader of a relay the digests of its buffer, and a relayed piece that does not
/// match sends the reader to the owner: its copy is the owner's bytes, whatever the relay sent
/// (every byte forged, or one byte of one stripe of a striped stream).
#[test]
fn a_relay_that_injects_bytes_never_reaches_its_reader() {
    let tmp = scratch();
    let owner = Transport::start(tmp.config("inj-o")).unwrap();
    let reader = Transport::start(tmp.config("inj-r")).unwrap();
    let evil = Transport::start(tmp.config("inj-e")).unwrap();
    let data = pattern(40 << 20); // two stripes of 20 MiB
    let mut one_byte = data.clone();
    one_byte[30 << 20] ^= 0xFF;
    for (what, forged) in [("every byte", vec![0xEEu8; data.len()]), ("one byte", one_byte)] {
        let d = publish_leased(&owner, &data, 2);
        // The relay's "copy": a buffer of the attacker's own, published like a relay's.
        let fake = support::publish(&evil, &forged);
        let peer = Peer { owner: evil.owner().into(), endpoint: evil.endpoint().into(), buffer: fake.buffer };
        join_as(&reader, &d, &peer);
        let r = reader.fetch_relayed(&d).unwrap();
        assert_eq!(r.upstream.as_ref(), Some(&peer), "{what}: the reader was sent to the attacker");
        assert!(bytes(&r, d.len) == data, "{what}: the reader returned bytes the relay injected");
        assert!(r.fell_back, "{what}: the forged stream was taken");
        reader.release(&d).unwrap();
        evil.free(&fake).unwrap();
    }
    shutdown(&[&owner, &reader, &evil]);
}
