//! Regression tests of the transport's lifetime bugs and of its encrypted connections: a
//! consumer that stalls past the drain timeout, sweeps across pid namespaces, and frames sent
//! beyond loopback (here: loopback with encryption forced, the same code path), including the
//! striped fetches, lease releases and channel manifests that ride on them.

use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use accel_transport::frame::{self, Kind, MAX_CONTROL};
use accel_transport::{client_handshake, pid_namespace, sweep_orphans, Error, Transport};

mod support;
use support::{publish, publish_leased, Scratch, SECRET};

fn scratch() -> Scratch {
    Scratch::new("accel-lifetime")
}

/// The owner splices a buffer's pages into the socket; the consumer reads the reply header and
/// stalls past the drain timeout while the owner frees the buffer and fills new buffers of the
/// same size (the pool would recycle the same pages). On loopback those pages sit in the
/// consumer's receive queue, so before the fix the consumer then read the new bytes.
#[test]
fn a_consumer_stalled_past_the_drain_timeout_never_reads_recycled_bytes() {
    let tmp = scratch();
    let mut cfg = tmp.config("stall");
    cfg.drain_timeout = Duration::from_millis(200);
    let owner = Transport::start(cfg).unwrap();
    let n = 1 << 20;
    let d = publish(&owner, &vec![0xA5u8; n]);
    let mut s = TcpStream::connect(owner.endpoint()).unwrap();
    client_handshake(&mut s, SECRET).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = d.buffer.to_le_bytes().to_vec();
    req.extend_from_slice(&(n as u64).to_le_bytes());
    frame::write(&mut s, Kind::Get, &req).unwrap();
    assert_eq!(frame::read(&mut s, MAX_CONTROL).unwrap().0, Kind::Ok);
    std::thread::sleep(Duration::from_millis(800));
    owner.arena().free(d.buffer).unwrap();
    let mut reused = Vec::new();
    for _ in 0..3 {
        let a = owner.arena().alloc(n as u64).unwrap();
        // SAFETY: a fresh allocation of `n` bytes that only this test writes.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::write_bytes(a.map.as_mut_ptr(), 0x5A, n)
        };
        reused.push(a);
    }
    let mut rest = Vec::new();
    let outcome = s.read_to_end(&mut rest);
    let payload = rest.iter().filter(|b| **b == 0xA5).count();
    assert!(
        !rest.contains(&0x5A),
        "the stalled consumer read recycled bytes ({} of them)",
        rest.iter().filter(|b| **b == 0x5A).count()
    );
    // The owner cut it off: an error or a short stream, never a complete one it did not confirm.
    assert!(
        outcome.is_err() || payload < n,
        "the stream completed although the consumer stalled past the drain timeout"
    );
    // The connection was cut, the buffer retired: nothing pooled holds it.
    assert!(owner.pool().idle_bytes + owner.pool().held_bytes < n as u64 * 4);
}

#[test]
fn a_prompt_consumer_confirms_and_the_buffer_recycles() {
    let tmp = scratch();
    let mut cfg = tmp.config("prompt");
    cfg.drain_timeout = Duration::from_millis(200);
    let owner = Transport::start(cfg.clone()).unwrap();
    let consumer = Transport::start(tmp.config("prompt-c")).unwrap();
    let data: Vec<u8> = (0..(3 << 20)).map(|i| (i % 253) as u8).collect();
    let d = publish(&owner, &data);
    let mut got = vec![0u8; data.len()];
    consumer.fetch_tcp(&d, &mut got).unwrap();
    assert!(got == data);
    owner.arena().free(d.buffer).unwrap();
    let before = owner.pool();
    let _again = owner.arena().alloc(data.len() as u64).unwrap();
    assert!(before.held_bytes + before.idle_bytes > 0, "a confirmed buffer goes back to the pool: {before:?}");
}

#[test]
fn sweeps_judge_only_owners_of_their_own_pid_namespace() {
    let tmp = scratch();
    let cfg = tmp.config("pidns");
    let dir = cfg.shm_dir.clone();
    let dead_here = format!("accel-{}-999999-1-1", pid_namespace());
    // Pid 1 of another namespace runs (a container's init); here pid 1 is another process.
    let other_ns = format!("accel-{}-1-12345-1", pid_namespace() + 1);
    let old_format = "accel-1-12345-1";
    for name in [&dead_here[..], &other_ns, old_format] {
        std::fs::write(dir.join(name), b"x").unwrap();
    }
    assert_eq!(sweep_orphans(&dir), 1);
    let left: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(!dir.join(&dead_here).exists());
    // Names carry this namespace.
    let t = Transport::start(cfg).unwrap();
    let d = publish(&t, b"abc");
    assert!(d.segment.starts_with(&format!("accel-{}-{}-", pid_namespace(), std::process::id())), "{}", d.segment);
}

#[test]
fn encrypted_connections_carry_data_and_refuse_plaintext_frames() {
    let tmp = scratch();
    let mut cfg = tmp.config("enc");
    cfg.encrypt_loopback = true;
    let owner = Transport::start(cfg.clone()).unwrap();
    let consumer = Transport::start(tmp.config("enc-c")).unwrap();
    // The consumer encrypts as well: both ends decide from the same flag or address.
    let mut ccfg = tmp.config("enc-c2");
    ccfg.encrypt_loopback = true;
    let consumer2 = Transport::start(ccfg).unwrap();
    let data: Vec<u8> = (0..(5 << 20) + 3).map(|i| (i * 7 % 256) as u8).collect();
    let d = publish(&owner, &data);
    let mut got = vec![0u8; data.len()];
    consumer2.fetch_tcp(&d, &mut got).unwrap();
    assert!(got == data);
    consumer2.check(&d).unwrap();
    // A consumer speaking plaintext after the handshake is cut off and frees nothing.
    assert!(consumer.fetch_tcp(&d, &mut got).is_err());
    let mut s = TcpStream::connect(owner.endpoint()).unwrap();
    client_handshake(&mut s, SECRET).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    frame::write(&mut s, Kind::Free, &d.buffer.to_le_bytes()).unwrap();
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    assert!(owner.arena().lookup(d.buffer).is_some(), "an injected plaintext Free freed the buffer");
    consumer2.check(&d).unwrap();
    consumer2.free(&d).unwrap();
    assert!(matches!(consumer2.check(&d), Err(Error::Freed { .. })));
}

fn tcp_serve_errors(t: &Transport) -> u64 {
    t.metrics()
        .snapshot()
        .iter()
        .filter(|s| s.path == accel_transport::Path::Tcp && s.role == accel_transport::Role::Serve)
        .map(|s| s.errors)
        .sum()
}

/// Issue 12's streaming paths over issue 13's connections: striped (ranged) fetches, lease
/// releases and channel manifests all run through the encrypted `Conn` when encryption is on,
/// and a plaintext client after the handshake can neither release a lease nor read a manifest.
#[test]
fn striped_fetches_leases_and_channels_run_encrypted() {
    let tmp = scratch();
    let mut cfg = tmp.config("enc-streams");
    cfg.encrypt_loopback = true;
    let owner = Transport::start(cfg).unwrap();
    let mut ccfg = tmp.config("enc-streams-c");
    ccfg.encrypt_loopback = true;
    ccfg.streams = 4;
    let consumer = Transport::start(ccfg).unwrap();
    let data: Vec<u8> = (0..(33 << 20) + 4097).map(|i| (i * 13 % 251) as u8).collect();
    let d = publish_leased(&owner, &data, 2);
    let mut got = vec![0u8; data.len()];
    consumer.fetch_tcp(&d, &mut got).unwrap();
    assert!(got == data, "a striped fetch over encrypted connections delivers the buffer");
    assert!(!consumer.release(&d).unwrap(), "one of two reads, released over an encrypted connection");
    owner.channel_publish("policy", 7, b"manifest-v7".to_vec()).unwrap();
    assert_eq!(
        consumer.channel_latest(owner.owner(), owner.endpoint(), "policy").unwrap(),
        Some((7, b"manifest-v7".to_vec()))
    );
    // Plaintext frames after the handshake: refused, nothing released, nothing leaked.
    for (kind, payload) in [(Kind::Release, d.buffer.to_le_bytes().to_vec()), (Kind::Latest, b"policy".to_vec())] {
        let mut s = TcpStream::connect(owner.endpoint()).unwrap();
        client_handshake(&mut s, SECRET).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        frame::write(&mut s, kind, &payload).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
        assert!(!sink.windows(11).any(|w| w == b"manifest-v7"), "a plaintext {kind:?} read the manifest");
    }
    assert_eq!(owner.lease_left(d.buffer), Some(1), "an injected plaintext Release counted a read");
    assert!(consumer.release(&d).unwrap(), "the last read frees the buffer");
    assert!(owner.arena().lookup(d.buffer).is_none());
}

/// On loopback the owner splices every range of a striped fetch with `sendfile`; each stream's
/// consumer confirms with `Received`, so none is cut off at the drain timeout and the buffer
/// recycles (a missing confirmation would retire it and count a serve error).
#[test]
fn every_stream_of_a_striped_fetch_confirms_its_range() {
    let tmp = scratch();
    let mut cfg = tmp.config("striped-recv");
    cfg.drain_timeout = Duration::from_millis(2000);
    let owner = Transport::start(cfg).unwrap();
    let mut ccfg = tmp.config("striped-recv-c");
    ccfg.streams = 4;
    let consumer = Transport::start(ccfg).unwrap();
    let data: Vec<u8> = (0..(32 << 20) + 5).map(|i| (i * 3 % 241) as u8).collect();
    let d = publish(&owner, &data);
    let mut got = vec![0u8; data.len()];
    for _ in 0..3 {
        got.fill(0);
        consumer.fetch_tcp(&d, &mut got).unwrap();
        assert!(got == data);
    }
    // Give the owner's connection threads the drain timeout to act, had a confirmation been lost.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(tcp_serve_errors(&owner), 0, "a stream was cut off waiting for its Received");
    owner.arena().free(d.buffer).unwrap();
    let pool = owner.pool();
    assert!(
        pool.held_bytes + pool.idle_bytes >= data.len() as u64,
        "a confirmed buffer goes back to the pool: {pool:?}"
    );
}
