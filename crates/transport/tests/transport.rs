//! End-to-end tests of the transport with real peers on loopback: handshakes, streaming,
//! pool bounds, recycling under consumer locks, orphan sweeping, peers that die mid-stream and
//! the owner's count of what it serves.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use accel_transport::frame::{self, Kind, MAX_CONTROL};
use accel_transport::{
    client_handshake, server_handshake, size_class, sweep_orphans, Client, Descriptor, Error, Identity, Path,
    PathStats, Role, Transport,
};

mod support;
use support::{publish, Scratch, SECRET};

fn scratch() -> Scratch {
    Scratch::new("accel-transport-test")
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn tcp_fetch_with_the_right_secret_and_nothing_without_it() {
    let tmp = scratch();
    let cfg = tmp.config("tcp");
    let owner = Transport::start(cfg.clone()).unwrap();
    let consumer = Transport::start(cfg.clone()).unwrap();
    for n in [0usize, 1, 4096, 100_000, (9 << 20) + 7] {
        let data = pattern(n);
        let d = publish(&owner, &data);
        let mut got = vec![0u8; n];
        consumer.fetch_tcp(&d, &mut got).unwrap();
        assert!(got == data, "{n} bytes differ");
        consumer.free(&d).unwrap();
        assert!(matches!(consumer.fetch_tcp(&d, &mut got), Err(Error::Freed { .. })));
    }
    let d = publish(&owner, &pattern(4096));
    let mut wrong = cfg.clone();
    wrong.secret = b"not-the-cluster-secret!!".to_vec();
    let thief = Transport::start(wrong).unwrap();
    let mut got = vec![0u8; 4096];
    match thief.fetch_tcp(&d, &mut got) {
        Err(Error::Auth(_)) => {}
        other => panic!("expected an authentication error, got {other:?}"),
    }
    assert!(got.iter().all(|b| *b == 0), "a client without the secret read data");
}

#[test]
fn raw_client_without_secret_is_refused_and_reads_nothing() {
    let tmp = scratch();
    let owner = Transport::start(tmp.config("raw")).unwrap();
    let d = publish(&owner, &pattern(4096));
    let mut s = TcpStream::connect(owner.endpoint()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _hello = frame::expect(&mut s, Kind::Hello, MAX_CONTROL).unwrap();
    // Skip authentication and ask for the buffer straight away.
    let mut req = d.buffer.to_le_bytes().to_vec();
    req.extend_from_slice(&d.len.to_le_bytes());
    frame::write(&mut s, Kind::Get, &req).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.len() < 64, "the server sent {} bytes to an unauthenticated client", rest.len());
    assert!(!rest.windows(16).any(|w| w == &pattern(4096)[..16]));
}

#[test]
fn oversize_frame_is_rejected_and_the_server_keeps_serving() {
    let tmp = scratch();
    let owner = Transport::start(tmp.config("oversize")).unwrap();
    let mut s = TcpStream::connect(owner.endpoint()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    client_handshake(&mut s, SECRET).unwrap();
    // A request header declaring 4 GiB - 1: the server must drop us without allocating it.
    s.write_all(&[0xff, 0xff, 0xff, 0xff, Kind::Get as u8]).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty());
    let consumer = Transport::start(tmp.config("oversize-c")).unwrap();
    let data = pattern(5000);
    let d = publish(&owner, &data);
    let mut got = vec![0u8; data.len()];
    consumer.fetch_tcp(&d, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn pool_is_bounded_and_freed_buffers_are_recycled() {
    let tmp = scratch();
    let mut cfg = tmp.config("pool");
    cfg.pool_bytes = 1 << 20;
    let t = Transport::start(cfg.clone()).unwrap();
    let a = t.arena().alloc(768 << 10).unwrap();
    match t.arena().alloc(512 << 10) {
        Err(Error::PoolExhausted { requested, limit, .. }) => assert_eq!((requested, limit), (512 << 10, 1 << 20)),
        other => panic!("expected PoolExhausted, got {other:?}"),
    }
    let (buffer, map) = (a.buffer, a.map);
    drop(map);
    t.arena().publish(buffer).unwrap();
    t.arena().free(buffer).unwrap();
    assert_eq!(t.pool().idle_bytes, 768 << 10);
    // Same class: recycled, not created.
    let b = t.arena().alloc(760 << 10).unwrap();
    assert_eq!((t.pool().idle_bytes, t.pool().live_bytes), (0, 768 << 10));
    drop(b);
    let files = || std::fs::read_dir(&cfg.shm_dir).unwrap().count();
    assert_eq!(files(), 1);
}

#[test]
fn the_pool_grows_a_spare_ahead_of_demand_within_its_bound() {
    let tmp = scratch();
    let mut cfg = tmp.config("spares");
    cfg.pool_bytes = 8 << 20;
    let files = || std::fs::read_dir(&cfg.shm_dir).unwrap().count();
    let t = Transport::start(cfg.clone()).unwrap();
    // One buffer at a time grows nothing: it recycles.
    let a = t.arena().alloc(2 << 20).unwrap();
    t.arena().settle();
    assert_eq!((t.pool().live_bytes, t.pool().idle_bytes), (2 << 20, 0));
    // A second live buffer of the class (a new version while readers hold the last): a spare
    // is made in the background for the third.
    let b = t.arena().alloc(2 << 20).unwrap();
    t.arena().settle();
    assert_eq!((t.pool().live_bytes, t.pool().idle_bytes), (4 << 20, 2 << 20));
    assert_eq!(files(), 3);
    // Within the bound only: 6 MiB in use and a 2 MiB spare fill 8 MiB, so no further spare...
    let c = t.arena().alloc(2 << 20).unwrap();
    t.arena().settle();
    assert_eq!((t.pool().live_bytes, t.pool().idle_bytes), (6 << 20, 2 << 20));
    // ...and a buffer of another class evicts the spare rather than failing.
    let d = t.arena().alloc(1 << 20).unwrap();
    t.arena().settle();
    assert_eq!((t.pool().live_bytes, t.pool().idle_bytes), (7 << 20, 0));
    assert!(matches!(t.arena().alloc(2 << 20), Err(Error::PoolExhausted { .. })));
    // Small classes are made on demand only.
    let mut small = cfg.clone();
    small.shm_dir = tmp.dir("spares-small");
    let s = Transport::start(small.clone()).unwrap();
    let e = s.arena().alloc(64 << 10).unwrap();
    s.arena().settle();
    assert_eq!(s.pool().idle_bytes, 0);
    // Shutdown leaves no file behind, even with a spare in the making.
    drop((a, b, c, d, e));
    t.shutdown();
    s.shutdown();
    assert_eq!(files(), 0);
    let t2 = Transport::start(cfg.clone()).unwrap();
    let _f = t2.arena().alloc(1 << 20).unwrap();
    let _g = t2.arena().alloc(1 << 20).unwrap();
    t2.shutdown();
    t2.arena().settle();
    drop(t2);
    assert_eq!(files(), 0, "segments left in {}", cfg.shm_dir.display());
}

#[test]
fn a_mapped_buffer_is_never_recycled_under_its_consumer() {
    let tmp = scratch();
    let cfg = tmp.config("mapped");
    let owner = Transport::start(cfg.clone()).unwrap();
    let consumer = Transport::start(cfg.clone()).unwrap();
    let data = pattern(100_000);
    let d = publish(&owner, &data);
    let m = consumer.open_shm(&d, false).unwrap();
    owner.free(&d).unwrap();
    assert_eq!(owner.pool().idle_bytes, 0, "a mapped buffer went back to the pool");
    let e = publish(&owner, &pattern(100_000).iter().map(|b| !b).collect::<Vec<_>>());
    assert_eq!(m.bytes(), &data[..], "the consumer's view changed under it");
    assert!(matches!(consumer.open_shm(&d, false), Err(Error::Freed { .. })));
    drop(m);
    // Unmapped: freeing recycles; the old name no longer opens.
    owner.free(&e).unwrap();
    // Both are back in the pool: `e` at once, the one the view held now that it is gone.
    assert_eq!((owner.pool().held_bytes, owner.pool().idle_bytes), (0, 2 * size_class(100_000)));
    assert!(matches!(consumer.open_shm(&e, false), Err(Error::Freed { .. })));
    // A writable mapping is private: the owner's bytes stay as they were.
    let f = publish(&owner, &data);
    let mut w = consumer.open_shm(&f, true).unwrap();
    // SAFETY: a private mapping of `f.len` bytes.
    #[allow(unsafe_code)]
    unsafe {
        *w.as_mut_ptr().unwrap() = 0xAA
    };
    assert_eq!(consumer.open_shm(&f, false).unwrap().bytes()[0], data[0]);
}

#[test]
fn orphans_of_dead_owners_are_swept_and_live_ones_kept() {
    let tmp = scratch();
    let dir = tmp.dir("sweep");
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 2..].split(' ').nth(19).unwrap().parse().unwrap();
    let me = Identity::current().unwrap();
    std::fs::write(dir.join(format!("accel-{}-{}-{start}-1", accel_transport::pid_namespace(), child.id())), b"x")
        .unwrap();
    std::fs::write(dir.join(format!("{}7", me.segment_prefix())), b"x").unwrap();
    std::fs::write(dir.join("unrelated"), b"x").unwrap();
    assert_eq!(sweep_orphans(&dir), 0);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(sweep_orphans(&dir), 1);
    let mut left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left.len(), 2);
}

#[test]
fn a_client_that_dies_mid_stream_does_not_hurt_the_server() {
    let tmp = scratch();
    let owner = Transport::start(tmp.config("crash")).unwrap();
    let data = pattern(32 << 20);
    let d = publish(&owner, &data);
    for _ in 0..3 {
        let mut s = TcpStream::connect(owner.endpoint()).unwrap();
        client_handshake(&mut s, SECRET).unwrap();
        let mut req = d.buffer.to_le_bytes().to_vec();
        req.extend_from_slice(&d.len.to_le_bytes());
        frame::write(&mut s, Kind::Get, &req).unwrap();
        let mut some = [0u8; 100_000];
        s.read_exact(&mut some).unwrap();
        drop(s);
    }
    let consumer = Transport::start(tmp.config("crash-c")).unwrap();
    let mut got = vec![0u8; data.len()];
    consumer.fetch_tcp(&d, &mut got).unwrap();
    assert!(got == data);
}

/// A scripted owner on loopback: it authenticates one consumer, reads its request, announces
/// `len` bytes and then behaves as `then` says. Returns the descriptor to ask it with.
fn fake_owner(
    len: u64,
    then: impl FnOnce(&mut TcpStream) + Send + 'static,
) -> (Descriptor, std::thread::JoinHandle<()>) {
    let owner = "1-2-0000000000000003";
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        server_handshake(&mut s, SECRET, owner).unwrap();
        let _req = frame::read(&mut s, MAX_CONTROL).unwrap();
        frame::write(&mut s, Kind::Ok, &len.to_le_bytes()).unwrap();
        then(&mut s);
    });
    let d = Descriptor {
        owner: owner.into(),
        host: "elsewhere".into(),
        endpoint,
        segment: "accel-1-2-1".into(),
        buffer: 1,
        len,
    };
    (d, fake)
}

#[test]
fn an_owner_that_dies_mid_stream_fails_the_fetch_quickly() {
    let tmp = scratch();
    let (d, fake) = fake_owner(1 << 20, |s| {
        s.write_all(&frame::header(Kind::Data, 1 << 20)).unwrap();
        s.write_all(&[7u8; 1000]).unwrap();
        // The owner "dies": the socket closes mid-frame.
    });
    let consumer = Transport::start(tmp.config("dies")).unwrap();
    let started = Instant::now();
    let mut got = vec![0u8; 1 << 20];
    match consumer.fetch_tcp(&d, &mut got) {
        Err(Error::OwnerGone { .. }) => {}
        other => panic!("expected OwnerGone, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    fake.join().unwrap();
    // Nobody listens there any more: a clean OwnerGone as well.
    assert!(matches!(consumer.fetch_tcp(&d, &mut got), Err(Error::OwnerGone { .. })));
}

#[test]
fn a_reference_to_a_previous_incarnation_is_stale() {
    let tmp = scratch();
    let owner = Transport::start(tmp.config("stale")).unwrap();
    let consumer = Transport::start(tmp.config("stale-c")).unwrap();
    let mut d = publish(&owner, &pattern(10));
    d.owner = format!("{}-{}-{:016x}", owner.identity().pid, owner.identity().start, owner.identity().nonce ^ 1);
    let mut got = vec![0u8; 10];
    match consumer.fetch_tcp(&d, &mut got) {
        Err(Error::Stale { found, .. }) => assert_eq!(found, owner.owner()),
        other => panic!("expected Stale, got {other:?}"),
    }
}

#[test]
fn recycled_buffers_reuse_the_consumers_cached_mapping_and_unlinked_ones_leave_it() {
    let tmp = scratch();
    let cfg = tmp.config("cache");
    let owner = Transport::start(cfg.clone()).unwrap();
    let consumer = Transport::start(cfg.clone()).unwrap();
    let a = publish(&owner, &[1u8; 100_000]);
    drop(consumer.open_shm(&a, false).unwrap());
    let cached = consumer.cached_map_bytes();
    assert!(cached >= 100_000);
    owner.free(&a).unwrap();
    assert!(owner.pool().idle_bytes > 0, "an unmapped buffer goes back to the pool");
    // The recycled segment is mapped from the cache and shows the new contents.
    let b = publish(&owner, &[2u8; 100_000]);
    assert_eq!(owner.pool().idle_bytes, 0);
    assert!(consumer.open_shm(&b, false).unwrap().bytes().iter().all(|x| *x == 2));
    assert_eq!(consumer.cached_map_bytes(), cached);
    assert!(matches!(consumer.open_shm(&a, false), Err(Error::Freed { .. })));
    // Once the owner unlinks it, the next miss drops the entry.
    owner.free(&b).unwrap();
    owner.arena().trim();
    let c = publish(&owner, &[3u8; 10]);
    drop(consumer.open_shm(&c, false).unwrap());
    assert_eq!(consumer.cached_map_bytes(), 4096);
}

#[test]
fn owners_and_consumers_with_different_chunk_sizes_interoperate() {
    let tmp = scratch();
    let consumer = Transport::start(tmp.config("chunks-c")).unwrap();
    for sendfile in [true, false] {
        let mut small = tmp.config("chunks");
        small.max_frame = 4096;
        small.sendfile = sendfile;
        let owner = Transport::start(small).unwrap();
        let data = pattern((1 << 20) + 3);
        let d = publish(&owner, &data);
        let mut got = vec![0u8; data.len()];
        consumer.fetch_tcp(&d, &mut got).unwrap();
        assert!(got == data, "sendfile: {sendfile}");
    }
}

#[test]
fn an_owner_sending_more_than_the_reference_says_is_cut_off() {
    let tmp = scratch();
    let (d, fake) = fake_owner(16, |s| {
        // Declares a 1 GiB chunk for a 16-byte buffer.
        s.write_all(&frame::header(Kind::Data, 1 << 30)).unwrap();
        let _ = s.read(&mut [0u8; 1]);
    });
    let consumer = Transport::start(tmp.config("liar")).unwrap();
    let mut got = vec![0u8; 16];
    match consumer.fetch_tcp(&d, &mut got) {
        Err(Error::FrameTooLarge { len, max }) => assert_eq!((len, max), (1 << 30, 16)),
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
    drop(consumer);
    fake.join().unwrap();
}

/// The owner's count of what its server served over TCP, once it reaches `done` (the server
/// records after its last write, which can be after the consumer has returned).
fn served_until(owner: &Transport, done: impl Fn(&PathStats) -> bool) -> PathStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = owner.metrics().get(Role::Serve, Path::Tcp);
        if done(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_owner_counts_what_it_serves_and_every_failed_connection() {
    let tmp = scratch();
    let cfg = tmp.config("served");
    let owner = Transport::start(cfg.clone()).unwrap();
    let data = pattern(100_000);
    let d = publish(&owner, &data);
    let client = Client::new(&cfg);
    let mut got = vec![0u8; data.len()];
    client.fetch(&d.endpoint, &d.owner, d.buffer, &mut got).unwrap();
    assert!(got == data);
    let s = served_until(&owner, |s| s.transfers == 1);
    assert_eq!((s.transfers, s.bytes, s.errors), (1, 100_000, 0), "{s:?}");
    assert_eq!(*s.buckets.last().unwrap(), 1);
    assert!(s.latency_sum_s > 0.0);
    let text = owner.metrics().render_prometheus(Some(owner.pool()));
    assert!(text.contains("accel_transport_bytes_total{path=\"tcp\",role=\"serve\"} 100000"), "{text}");
    assert!(text.contains("accel_transport_latency_seconds_count{path=\"tcp\",role=\"serve\"} 1"));
    assert!(text.contains("accel_transport_transfers_total{path=\"tcp\",role=\"fetch\"} 0"), "served is not fetched");

    // A consumer closing its connection between requests is the normal end: no error.
    drop(client);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(owner.metrics().get(Role::Serve, Path::Tcp).errors, 0);

    // An unknown buffer id: one error, nothing more served.
    let consumer = Transport::start(cfg.clone()).unwrap();
    consumer.free(&d).unwrap(); // a free is not a transfer
    assert!(matches!(consumer.fetch_tcp(&d, &mut got), Err(Error::Freed { .. })));
    let s = served_until(&owner, |s| s.errors == 1);
    assert_eq!((s.transfers, s.bytes, s.errors), (1, 100_000, 1), "{s:?}");

    // A failed handshake: a client with the wrong secret, then one that connects and leaves.
    let mut wrong = cfg.clone();
    wrong.secret = b"not-the-cluster-secret!!".to_vec();
    let thief = Transport::start(wrong).unwrap();
    let d = publish(&owner, &data);
    assert!(matches!(thief.fetch_tcp(&d, &mut got), Err(Error::Auth(_))));
    assert_eq!(served_until(&owner, |s| s.errors == 2).errors, 2);
    drop(TcpStream::connect(owner.endpoint()).unwrap());
    assert_eq!(served_until(&owner, |s| s.errors == 3).errors, 3);

    // A peer that hangs up mid-stream.
    let big = publish(&owner, &pattern(32 << 20));
    let mut s = TcpStream::connect(owner.endpoint()).unwrap();
    client_handshake(&mut s, SECRET).unwrap();
    let mut req = big.buffer.to_le_bytes().to_vec();
    req.extend_from_slice(&big.len.to_le_bytes());
    frame::write(&mut s, Kind::Get, &req).unwrap();
    s.read_exact(&mut [0u8; 100_000]).unwrap();
    drop(s);
    let s = served_until(&owner, |s| s.errors == 4);
    assert_eq!((s.transfers, s.bytes, s.errors), (1, 100_000, 4), "{s:?}");

    // The server still serves, and counts, afterwards; the consumer's own server served nothing.
    consumer.fetch_tcp(&d, &mut got).unwrap();
    let s = served_until(&owner, |s| s.transfers == 2);
    assert_eq!((s.transfers, s.bytes, s.errors), (2, 200_000, 4), "{s:?}");
    let c = consumer.metrics().get(Role::Serve, Path::Tcp);
    assert_eq!((c.transfers, c.bytes, c.errors), (0, 0, 0), "{c:?}");
}

#[test]
fn a_leased_buffer_frees_itself_after_its_readers() {
    let tmp = scratch();
    let cfg = tmp.config("lease");
    let owner = Transport::start(cfg.clone()).unwrap();
    let consumer = Transport::start(cfg).unwrap();
    let data = pattern(1 << 20);
    let a = owner.arena().alloc(data.len() as u64).unwrap();
    #[allow(unsafe_code)]
    // SAFETY: the allocation is `data.len()` bytes and unpublished.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), a.map.as_mut_ptr(), data.len())
    };
    owner.publish_leased(a.buffer, 2).unwrap();
    let d = Descriptor {
        owner: owner.owner().into(),
        host: owner.host().into(),
        endpoint: owner.endpoint().into(),
        segment: a.segment.clone(),
        buffer: a.buffer,
        len: data.len() as u64,
    };
    // Read 1 over TCP, read 2 through a mapping that outlives the lease.
    let mut got = vec![0u8; data.len()];
    consumer.fetch_tcp(&d, &mut got).unwrap();
    assert_eq!(got, data);
    assert!(!consumer.release(&d).unwrap(), "one of two reads");
    assert_eq!(owner.lease_left(a.buffer), Some(1));
    let view = consumer.open_shm(&d, false).unwrap();
    assert!(consumer.release(&d).unwrap(), "the last read frees the buffer");
    assert_eq!(owner.pool().live_buffers, 0);
    assert_eq!(view.bytes(), &data[..], "a mapped view keeps its bytes after the lease ends");
    assert!(matches!(consumer.fetch_tcp(&d, &mut got), Err(Error::Freed { .. })));
    assert!(matches!(consumer.release(&d), Err(Error::Freed { .. })), "no read beyond the lease");
    // The owner releasing its own reads counts the same way.
    let b = owner.arena().alloc(10).unwrap();
    owner.publish_leased(b.buffer, 1).unwrap();
    let own = Descriptor { buffer: b.buffer, ..d.clone() };
    assert!(owner.release(&own).unwrap());
    assert!(owner.arena().lookup(b.buffer).is_none());
}

#[test]
fn channel_manifests_reach_consumers_and_only_move_forward() {
    let tmp = scratch();
    let cfg = tmp.config("channel");
    let owner = Transport::start(cfg.clone()).unwrap();
    let consumer = Transport::start(cfg).unwrap();
    assert_eq!(consumer.channel_latest(owner.owner(), owner.endpoint(), "policy").unwrap(), None);
    owner.channel_publish("policy", 1, b"v1".to_vec()).unwrap();
    owner.channel_publish("policy", 2, b"v2".to_vec()).unwrap();
    assert!(owner.channel_publish("policy", 2, b"again".to_vec()).is_err());
    let got = consumer.channel_latest(owner.owner(), owner.endpoint(), "policy").unwrap();
    assert_eq!(got, Some((2, b"v2".to_vec())));
    assert_eq!(owner.channel_latest(owner.owner(), owner.endpoint(), "policy").unwrap(), Some((2, b"v2".to_vec())));
    assert_eq!(consumer.channel_latest(owner.owner(), owner.endpoint(), "other").unwrap(), None);
    // A raw client without the secret learns nothing about channels.
    let mut s = TcpStream::connect(owner.endpoint()).unwrap();
    let _hello = frame::expect(&mut s, Kind::Hello, MAX_CONTROL).unwrap();
    frame::write(&mut s, Kind::Latest, b"policy").unwrap();
    let mut rest = Vec::new();
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.read_to_end(&mut rest);
    assert!(!rest.windows(2).any(|w| w == b"v2"), "manifest leaked before authentication");
}

#[test]
fn a_striped_fetch_streams_ranges_over_several_connections() {
    let tmp = scratch();
    let cfg = tmp.config("striped");
    let owner = Transport::start(cfg.clone()).unwrap();
    let client = Client::new(&cfg);
    for n in [(33 << 20) + 4097, 16 << 20, 1000] {
        let data = pattern(n);
        let d = publish(&owner, &data);
        for streams in [1, 3, 8] {
            let mut got = vec![0u8; n];
            client.fetch_striped(&d.endpoint, &d.owner, d.buffer, &mut got, streams).unwrap();
            assert!(got == data, "{n} bytes over {streams} streams");
        }
    }
    // A range past the end is refused with an error frame; the connection stays usable.
    let d = publish(&owner, &pattern(4096));
    let mut s = TcpStream::connect(owner.endpoint()).unwrap();
    client_handshake(&mut s, SECRET).unwrap();
    let mut req = d.buffer.to_le_bytes().to_vec();
    for v in [4096u64, 4000, 200] {
        req.extend_from_slice(&v.to_le_bytes());
    }
    frame::write(&mut s, Kind::Get, &req).unwrap();
    assert_eq!(frame::read(&mut s, MAX_CONTROL).unwrap().0, Kind::Err);
    let mut req = d.buffer.to_le_bytes().to_vec();
    for v in [4096u64, 96, 4000] {
        req.extend_from_slice(&v.to_le_bytes());
    }
    frame::write(&mut s, Kind::Get, &req).unwrap();
    assert_eq!(frame::read(&mut s, MAX_CONTROL).unwrap(), (Kind::Ok, 4000u64.to_le_bytes().to_vec()));
}
