//! Fuzz target `frame`: bytes a transport peer could send. The first byte picks what reads them:
//!
//! - 0: frames. The incremental parser (`frame::parse`) and the blocking reader (`frame::read`)
//!   must agree frame by frame; each payload is decoded as its receiver decodes it (`Get`, `Ok`,
//!   `Err`, `Join` replies and requests, which must round-trip; a `Join` reply's digests drive a
//!   reader's `relay::Verifier`, which must hand out each piece once), and control requests are
//!   answered by an owner (`Control::answer`), whose replies must fit the limit clients read
//!   them with.
//! - 1: the handshake, both ends (`client_handshake`, `server_handshake`) against those bytes.
//! - 2: the AEAD record layer (`secure::Secure`) reading them raw, frames above it.
//! - 3: the same bytes sealed into records by a writer (chunked by the second byte) and read
//!   back: the frames above the record layer are exactly those of the plain bytes.
//!
//! Never a panic, and never more memory than a frame limit allows (`accel_fuzz::Bounded`).

#![no_main]

use std::io::{Read, Write};
use std::path::Path;
use std::sync::OnceLock;

use accel_fuzz::{canary, Wire, CANARY_BUFFER_MIN};
use accel_transport::frame::{self, Kind, HEADER_LEN, MAX_CONTROL};
use accel_transport::secure::{Nonces, Secure, Side};
use accel_transport::{relay, Arena, Config, Control, Identity};
use libfuzzer_sys::fuzz_target;

const SECRET: &[u8] = b"accel-fuzz-cluster-secret";
const NONCES: Nonces = Nonces { server: [7; 32], client: [9; 32] };

/// The frame limits a receiver uses: control frames, the smallest `max_frame` a config accepts,
/// and the default `max_frame` (data streams).
fn limit(selector: u8) -> u32 {
    match selector % 3 {
        0 => MAX_CONTROL,
        1 => 4096,
        _ => Config::new(SECRET.to_vec()).max_frame,
    }
}

/// An owner's control state: one channel published, one buffer leased to two readers, and an
/// empty arena (no segment is ever created: it never allocates).
struct Owner {
    control: Control,
    arena: Arena,
}

impl Owner {
    fn new() -> Owner {
        static ID: OnceLock<Identity> = OnceLock::new();
        let id = ID.get_or_init(|| Identity::current().expect("/proc/self/stat is readable"));
        let control = Control::default();
        control.channels.publish("weights", 3, b"{\"tensors\": []}".to_vec()).expect("a valid channel");
        control.leases.set(1, 2);
        Owner { control, arena: Arena::new(Path::new("/nonexistent/accel-fuzz"), id, 1 << 20) }
    }
}

/// Decodes one payload as its receiver does; checks round trips and reply sizes.
fn decode(kind: Kind, payload: &[u8], max: u32, owner: &Owner) {
    match kind {
        Kind::Hello => {
            if let Some((_nonce, id)) = payload.split_at_checked(32) {
                let id = String::from_utf8_lossy(id);
                let _ = Identity::parse(&id);
            }
        }
        Kind::Get => {
            for at in [0, 8, 16, 24] {
                let _ = frame::u64_at(payload, at);
            }
        }
        Kind::Ok => {
            let _ = frame::u64_at(payload, 0);
            if let Ok(a) = relay::Assignment::decode(payload) {
                if let Some(d) = &a.digests {
                    verify(d);
                }
                assert_eq!(relay::Assignment::decode(&a.encode()).ok(), Some(a), "Join reply round trip");
            }
        }
        Kind::Err => {
            let _ = frame::remote_error(payload).to_string();
        }
        Kind::Join => {
            if let Ok((buffer, peer)) = relay::parse_join(payload) {
                let again = relay::parse_join(&relay::join_request(buffer, &peer)).ok();
                assert_eq!(again, Some((buffer, peer)), "Join request round trip");
            }
        }
        Kind::Free => canary(frame::u64_at(payload, 0).is_ok_and(|b| b >= CANARY_BUFFER_MIN)),
        _ => {}
    }
    if Control::handles(kind) {
        if let Ok((_, reply)) = owner.control.answer(kind, payload, &owner.arena, "fuzz-owner") {
            // Clients read every control reply with MAX_CONTROL; the server reads requests with it.
            if max == MAX_CONTROL {
                assert!(reply.len() <= MAX_CONTROL as usize, "a {kind:?} reply of {} bytes", reply.len());
            }
        }
    }
}

/// Digests an owner sent (`Join` reply): a reader's `Verifier` over a buffer of their length
/// (when small) hands out every piece exactly once as the buffer arrives in order.
fn verify(d: &relay::Digests) {
    for i in 0..d.sums.len().min(64) {
        let _ = d.range(i);
        let _ = d.matches(i, b"");
    }
    if d.total > 1 << 16 {
        return;
    }
    let v = relay::Verifier::new(d);
    let chunk = (d.total / 16).max(1) + d.piece % 7;
    let mut done = Vec::new();
    let mut at = 0;
    while at < d.total {
        done.extend(v.arrived(at, chunk).expect("each byte arrives once"));
        at += chunk;
    }
    assert_eq!(done, (0..d.sums.len()).collect::<Vec<_>>(), "pieces handed out: {d:?}");
    assert!(v.all_arrived());
}

/// Every frame of `data`, by the parser and by the reader, which must agree.
fn frames(data: &[u8], max: u32, owner: &Owner) -> Vec<(Kind, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut reader = data;
    loop {
        match (frame::parse(rest, max), frame::read(&mut reader, max)) {
            (Ok(Some((kind, payload, used))), Ok((k, p))) => {
                assert_eq!((kind, payload), (k, &p[..]), "parse and read disagree");
                assert!(payload.len() <= max as usize);
                assert_eq!(used, HEADER_LEN + payload.len());
                decode(kind, payload, max, owner);
                out.push((k, p));
                rest = &rest[used..];
            }
            // Incomplete (the reader meets the end) or malformed: both stop here.
            (Ok(None), Err(_)) | (Err(_), Err(_)) => return out,
            (parsed, read) => panic!("parse and read disagree: {parsed:?} / {read:?}"),
        }
    }
}

/// Frames read through an AEAD reader until it fails or ends.
fn frames_over<R: Read>(mut r: R, max: u32) -> Vec<(Kind, Vec<u8>)> {
    let mut out = Vec::new();
    while let Ok(f) = frame::read(&mut r, max) {
        out.push(f);
    }
    out
}

fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let max = limit(mode >> 2);
    match mode & 3 {
        0 => {
            frames(rest, max, &Owner::new());
        }
        1 => {
            let _ = accel_transport::client_handshake(&mut Wire::new(rest), SECRET);
            let _ = accel_transport::server_handshake(&mut Wire::new(rest), SECRET, "fuzz-owner");
        }
        2 => {
            frames_over(Secure::new(rest, SECRET, &NONCES, Side::Server), max);
            let mut all = Vec::new();
            let _ = Secure::new(rest, SECRET, &NONCES, Side::Client).read_to_end(&mut all);
        }
        _ => {
            let Some((&chunking, plain)) = rest.split_first() else { return };
            let chunk = 1 + usize::from(chunking) * 7;
            let mut wire = Vec::new();
            let mut w = Secure::new(&mut wire, SECRET, &NONCES, Side::Client);
            for part in plain.chunks(chunk) {
                w.write_all(part).expect("writing to a Vec");
            }
            let mut back = Vec::new();
            Secure::new(&wire[..], SECRET, &NONCES, Side::Server).read_to_end(&mut back).expect("own records");
            assert_eq!(back, plain, "sealed and opened bytes differ");
            let expected = frames(plain, max, &Owner::new());
            let got = frames_over(Secure::new(&wire[..], SECRET, &NONCES, Side::Server), max);
            assert_eq!(got, expected, "frames over the record layer differ from the plain frames");
        }
    }
}

fuzz_target!(|data: &[u8]| run(data));
