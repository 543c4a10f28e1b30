//! The slow-handshake attack of issue 17, measured on loopback: `--sockets` connections without
//! the secret each send one byte of a handshake every `--every-ms` (staggered, and reconnected
//! at their next turn when the owner drops them), while a consumer with the secret fetches a
//! 1 MiB buffer over a fresh connection (a full handshake each time) every 500 ms. Prints each
//! fetch's latency and a markdown summary. Bounded: `--warmup-s` plus `--fetches` half-seconds.
//!
//! `cargo run --release -p accel-transport --example trickle -- --sockets 300 --every-ms 3000 --fetches 20`
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_transport::frame::{self, Kind};
use accel_transport::{Client, Config, Transport};

const LEN: usize = 1 << 20;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} takes a number, not {v:?}")))
        .unwrap_or(default)
}

fn main() {
    let sockets = arg("--sockets", 300) as usize;
    let every = Duration::from_millis(arg("--every-ms", 3000));
    let fetches = arg("--fetches", 20) as usize;
    let warmup = Duration::from_secs(arg("--warmup-s", 4));
    let dir = std::env::temp_dir().join(format!("accel-trickle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch shm directory");
    let mut cfg = Config::new(b"trickle-bench-secret-0123456789".to_vec());
    cfg.shm_dir = dir.clone();
    let owner = Transport::start(cfg.clone()).expect("owner starts");
    let a = owner.arena().alloc(LEN as u64).expect("1 MiB");
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    // SAFETY: a fresh allocation of LEN bytes that nothing else sees yet.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), a.map.as_mut_ptr(), LEN)
    };
    owner.arena().publish(a.buffer).expect("publish");
    let endpoint = owner.endpoint().to_string();

    let stop = Arc::new(AtomicBool::new(false));
    let (writes, redials) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let attacker = {
        let (stop, writes, redials, endpoint) = (stop.clone(), writes.clone(), redials.clone(), endpoint.clone());
        std::thread::spawn(move || {
            let auth = frame::encode(Kind::Auth, &[0x42; 64]);
            let mut open: Vec<Option<(TcpStream, usize)>> = (0..sockets).map(|_| None).collect();
            let gap = every / sockets.max(1) as u32;
            let mut first = true;
            while !stop.load(Ordering::Relaxed) {
                for slot in open.iter_mut() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let alive = match slot {
                        Some((s, at)) => {
                            let sent = s.write(&auth[*at % auth.len()..*at % auth.len() + 1]).is_ok_and(|n| n == 1);
                            *at += 1;
                            sent
                        }
                        None => false,
                    };
                    if alive {
                        writes.fetch_add(1, Ordering::Relaxed);
                    } else {
                        // Dropped by the owner (or never opened): dial again, as an attacker would.
                        if !first {
                            redials.fetch_add(1, Ordering::Relaxed);
                        }
                        *slot = TcpStream::connect(&endpoint).ok().map(|s| (s, 0));
                    }
                    std::thread::sleep(gap);
                }
                first = false;
            }
        })
    };
    std::thread::sleep(warmup);
    let mut took = Vec::new();
    let mut failed = Vec::new();
    for i in 1..=fetches {
        let client = Client::new(&cfg); // no cached connection: a full handshake every time
        let mut got = vec![0u8; LEN];
        let t = Instant::now();
        let outcome = match client.fetch(&endpoint, owner.owner(), a.buffer, &mut got) {
            Ok(()) if got == data => Ok(t.elapsed()),
            Ok(()) => Err("wrong bytes".to_string()),
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(d) => {
                println!("fetch {i}: {:.1} ms", d.as_secs_f64() * 1e3);
                took.push(d);
            }
            Err(e) => {
                println!("fetch {i}: failed after {:.1} ms: {e}", t.elapsed().as_secs_f64() * 1e3);
                failed.push(e);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().expect("attacker thread");
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let pct = |p: f64| took.get(((took.len() as f64 - 1.0) * p).round() as usize).copied().map_or(f64::NAN, ms);
    println!();
    println!("| trickling sockets | byte every | fetches ok | failed | median | p90 | max | attacker bytes sent | attacker redials |");
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {sockets} | {} ms | {} of {fetches} | {} | {:.1} ms | {:.1} ms | {:.1} ms | {} | {} |",
        every.as_millis(),
        took.len(),
        failed.len(),
        pct(0.5),
        pct(0.9),
        took.last().copied().map_or(f64::NAN, ms),
        writes.load(Ordering::Relaxed),
        redials.load(Ordering::Relaxed),
    );
    if let Some(e) = failed.first() {
        println!("\nfirst failure: {e}");
    }
    owner.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
