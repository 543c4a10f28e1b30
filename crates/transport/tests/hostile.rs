//! Regression tests of the attacks of the transport's security audit (issue 17), each replayed
//! against real transports on loopback: sockets without the secret that trickle their handshake
//! to hold every connection place, a client with the secret guessing buffer ids, and another
//! local user planting files under segment names (at a freed name, at the names an owner would
//! take next). Each failed before its fix.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_transport::frame::{self, Kind, MAX_CONTROL};
use accel_transport::{sweep_orphans, Arena, Client, Error, Identity, Transport};

mod support;
use support::{publish, Scratch};

/// The user another local user is played by: `nobody`, where this test may give files away
/// (it runs as root); otherwise only the planted files' modes play the stranger.
const STRANGER: u32 = 65534;

fn scratch() -> Scratch {
    Scratch::new("accel-hostile")
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 % 241) as u8).collect()
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// An `Auth` frame as a client without the secret would send it, for trickling byte by byte.
fn bogus_auth() -> Vec<u8> {
    frame::encode(Kind::Auth, &[0x42; 64])
}

/// Sends the next byte of `bogus_auth` on each socket every `every`, until `stop`; sockets the
/// server closed are left alone.
fn trickle(sockets: Vec<TcpStream>, every: Duration, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let auth = bogus_auth();
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            for mut s in &sockets {
                let _ = s.write(&auth[i % auth.len()..i % auth.len() + 1]);
            }
            i += 1;
            std::thread::sleep(every);
        }
    })
}

/// Before the fix a connection took one of the `max_connections` places at accept and the
/// handshake timeout applied to each read: sockets that trickled a byte every few seconds held
/// every place, and consumers got "too many connections" without the attacker knowing the
/// secret. Now unauthenticated connections have their own bound (the oldest makes room) and
/// only authenticated ones take places.
#[test]
fn trickling_sockets_without_the_secret_never_keep_a_consumer_out() {
    let tmp = scratch();
    let mut cfg = tmp.config("trickle");
    cfg.max_connections = 4;
    cfg.max_handshakes = 4;
    let owner = Transport::start(cfg.clone()).unwrap();
    let data = pattern(1 << 20);
    let d = publish(&owner, &data);
    let attackers: Vec<TcpStream> = (0..16).map(|_| TcpStream::connect(owner.endpoint()).unwrap()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let trickler = trickle(attackers, Duration::from_millis(200), stop.clone());
    std::thread::sleep(Duration::from_millis(600)); // every attacker accepted, each trickling
    let consumer = Transport::start(cfg.clone()).unwrap();
    let mut got = vec![0u8; data.len()];
    let fetched = consumer.fetch_tcp(&d, &mut got);
    // A second consumer, and a second request on the first one's connection, get in as well.
    let other = Transport::start(cfg.clone()).unwrap();
    let mut again = vec![0u8; data.len()];
    let fetched_again = other.fetch_tcp(&d, &mut again).and_then(|()| consumer.check(&d));
    stop.store(true, Ordering::Relaxed);
    trickler.join().unwrap();
    fetched.expect("a consumer with the secret was kept out by sockets without it");
    fetched_again.unwrap();
    assert!(got == data && again == data);
    for t in [&owner, &consumer, &other] {
        t.shutdown();
    }
}

/// The whole handshake has one deadline: a socket that sends a byte every 200 ms is cut off
/// `handshake_timeout` after it connected (before the fix each byte restarted a 5 s timeout, so
/// it was never cut off).
#[test]
fn a_handshake_has_one_deadline_however_slowly_it_trickles() {
    let tmp = scratch();
    let mut cfg = tmp.config("deadline");
    cfg.handshake_timeout = Duration::from_millis(800);
    let owner = Transport::start(cfg.clone()).unwrap();
    let started = Instant::now();
    let mut s = TcpStream::connect(owner.endpoint()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
    assert_eq!(frame::read(&mut s, MAX_CONTROL).unwrap().0, Kind::Hello);
    let stop = Arc::new(AtomicBool::new(false));
    let trickler = trickle(vec![s.try_clone().unwrap()], Duration::from_millis(200), stop.clone());
    let mut byte = [0u8; 1];
    let outcome = s.read(&mut byte);
    let cut_after = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    trickler.join().unwrap();
    match outcome {
        Ok(0) => {}
        Err(e) if !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
        other => panic!("the server kept a trickling handshake open for {cut_after:?}: {other:?}"),
    }
    assert!(cut_after < Duration::from_secs(4), "cut off only after {cut_after:?}");
    owner.shutdown();
}

/// Buffer ids counted up from 1, so a client holding the secret read every buffer by guessing.
/// Now they are random 64-bit numbers: none is near another, and the ids a counter would have
/// handed out find nothing.
#[test]
fn buffer_ids_cannot_be_guessed() {
    let tmp = scratch();
    let cfg = tmp.config("ids");
    let owner = Transport::start(cfg.clone()).unwrap();
    let ds: Vec<_> = (0..32).map(|i| publish(&owner, &[i as u8; 100])).collect();
    let mut ids: Vec<u64> = ds.iter().map(|d| d.buffer).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), ds.len(), "two buffers share an id");
    assert!(!ids.contains(&0));
    let closest = ids.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(closest > 1 << 20, "ids {ids:?} are close together: predictable");
    for d in &ds {
        assert!(d.segment.ends_with(&format!("-{}", d.buffer)), "the segment name carries the id");
    }
    // A client with the secret asks for every id a counter would have handed out.
    let guesser = Client::new(&cfg);
    for guess in 1..=256u64 {
        match guesser.check(owner.endpoint(), owner.owner(), guess) {
            Err(Error::Freed { .. }) => {}
            other => panic!("guessed buffer id {guess}: {other:?}"),
        }
    }
    owner.shutdown();
}

/// Plants `bytes` at `path` as a stranger would: a file of another user where this test may
/// make one (root), else one whose mode lets others in.
fn plant_foreign(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    if is_root() {
        std::os::unix::fs::chown(path, Some(STRANGER), Some(STRANGER)).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    } else {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// After a free, another local user created a file under the freed buffer's name, and a stale
/// reference mapped it: the consumer read the stranger's bytes instead of learning the buffer
/// was freed. Now a segment is opened without following links and mapped only if it is a
/// regular file of this user with mode 0600; anything else is refused, never read.
#[test]
fn a_file_planted_at_a_freed_name_is_refused_never_read() {
    let tmp = scratch();
    let cfg = tmp.config("plant");
    let owner = Transport::start(cfg.clone()).unwrap();
    let consumer = Transport::start(cfg.clone()).unwrap();
    let data = pattern(64 << 10);
    let d = publish(&owner, &data);
    assert_eq!(consumer.open_shm(&d, false).unwrap().bytes(), &data[..]);
    owner.free(&d).unwrap();
    let path = cfg.shm_dir.join(&d.segment);
    let forged = vec![0xEEu8; data.len()];
    let mine = cfg.shm_dir.join("a-file-of-mine");
    std::fs::write(&mine, &forged).unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o600)).unwrap();
    type Plant = Box<dyn Fn(&Path)>;
    let plants: Vec<(&str, Plant)> = vec![
        ("another user's file", Box::new(|p: &Path| plant_foreign(p, &vec![0xEE; 64 << 10]))),
        (
            "a file others may open",
            Box::new(|p: &Path| {
                std::fs::write(p, vec![0xEE; 64 << 10]).unwrap();
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
            }),
        ),
        ("a link to a file of this user", Box::new(move |p: &Path| std::os::unix::fs::symlink(&mine, p).unwrap())),
        (
            "a FIFO",
            Box::new(|p: &Path| {
                assert!(std::process::Command::new("mkfifo").arg(p).status().unwrap().success());
            }),
        ),
    ];
    for (what, plant) in &plants {
        plant(&path);
        for writable in [false, true] {
            // In a thread: before the fix a FIFO blocked the open for ever.
            let (tx, rx) = std::sync::mpsc::channel();
            let (c, d2) = (Transport::start(cfg.clone()).unwrap(), d.clone());
            std::thread::spawn(move || {
                let got = c.open_shm(&d2, writable).map(|m| m.bytes().to_vec());
                let _ = tx.send(got);
            });
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Err(Error::Untrusted { reason, .. })) => assert!(!reason.is_empty()),
                Ok(Ok(bytes)) => panic!("{what}: a stale reference read {} planted bytes", bytes.len()),
                Ok(Err(e)) => panic!("{what}: expected the planted segment to be refused, got {e}"),
                Err(_) => panic!("{what}: opening the planted segment hung"),
            }
        }
        std::fs::remove_file(&path).unwrap();
    }
    // With nothing planted, the stale reference is what it is: freed.
    assert!(matches!(consumer.open_shm(&d, false), Err(Error::Freed { .. })));
    for t in [&owner, &consumer] {
        t.shutdown();
    }
}

/// Another local user created the names an owner would take next (the next ids of the counter,
/// the next pooled names), and `put` failed on the first one. Now names are random, taken only
/// exclusively, and a taken one makes the owner draw another: allocations, pooling and recycling
/// all go on, and no planted file is touched.
#[test]
fn allocations_go_on_when_the_next_names_are_planted() {
    let tmp = scratch();
    let cfg = tmp.config("next");
    let owner = Transport::start(cfg.clone()).unwrap();
    let consumer = Transport::start(cfg.clone()).unwrap();
    let first = publish(&owner, &pattern(4096));
    let prefix = first.segment.strip_suffix(&first.buffer.to_string()).unwrap().to_string();
    let mut planted = Vec::new();
    for k in 1..=64u64 {
        for name in [format!("{prefix}{}", first.buffer.wrapping_add(k)), format!("{prefix}idle{k}")] {
            let path = cfg.shm_dir.join(name);
            plant_foreign(&path, b"planted");
            planted.push(path);
        }
    }
    // A new size class (a segment is created) and a recycled one (a pooled segment renamed).
    let data = pattern(300_000);
    let d = publish(&owner, &data);
    assert_eq!(consumer.open_shm(&d, false).unwrap().bytes(), &data[..]);
    owner.free(&first).unwrap();
    let again = publish(&owner, &pattern(4096));
    assert_eq!(consumer.open_shm(&again, false).unwrap().bytes(), &pattern(4096)[..]);
    for path in &planted {
        assert_eq!(std::fs::read(path).unwrap(), b"planted", "{} was replaced", path.display());
        std::fs::remove_file(path).unwrap();
    }
    for t in [&owner, &consumer] {
        t.shutdown();
    }
}

/// The random names keep the parts the sweeper reads: the segments of an owner that exited,
/// live and pooled, are swept; a live owner's are kept.
#[test]
fn segments_under_random_names_are_swept_after_their_owner_exits() {
    let tmp = scratch();
    let dir = tmp.dir("sweep");
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 2..].split(' ').nth(19).unwrap().parse().unwrap();
    let arena = Arena::new(&dir, &Identity { pid: child.id(), start, nonce: 1 }, 1 << 30);
    let live = arena.alloc(4096).unwrap();
    arena.publish(live.buffer).unwrap();
    let pooled = arena.alloc(8192).unwrap();
    arena.free(pooled.buffer).unwrap();
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    assert_eq!(sweep_orphans(&dir), 0, "the owner still runs");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(sweep_orphans(&dir), 2);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    drop(arena);
}
