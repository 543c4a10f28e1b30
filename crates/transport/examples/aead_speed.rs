//! Throughput of the AEAD record layer in memory (seal and open), no sockets, against a plain
//! copy of the same bytes in the same run: `cargo run --release -p accel-transport --example aead_speed`.
use accel_transport::secure::{Nonces, Secure, Side};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const SIZE: usize = 64 << 20;

fn gbps(d: Duration) -> f64 {
    SIZE as f64 / d.as_secs_f64() / 1e9
}

/// Best of five: the first rounds fault the buffers in.
fn best(mut f: impl FnMut()) -> Duration {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .expect("five rounds")
}

fn main() {
    let n = Nonces { server: [1; 32], client: [2; 32] };
    let data = vec![7u8; SIZE];
    // The sealed stream is the data plus 20 bytes per record.
    let mut wire = vec![0u8; SIZE + SIZE / 1024];
    let mut out = vec![0u8; SIZE];
    let mut sealed = 0;
    let seal = best(|| {
        let mut w = &mut wire[..];
        Secure::new(&mut w, b"0123456789abcdef", &n, Side::Client).write_all(&data).expect("room for every record");
        sealed = SIZE + SIZE / 1024 - w.len();
    });
    let open = best(|| {
        Secure::new(&wire[..sealed], b"0123456789abcdef", &n, Side::Server).read_exact(&mut out).expect("opens");
    });
    assert_eq!(out, data);
    let copy = best(|| out.copy_from_slice(&data));
    println!(
        "64 MiB: seal {:.2} GB/s, open {:.2} GB/s, memcpy {:.2} GB/s (seal {:.2}x, open {:.2}x of memcpy)",
        gbps(seal),
        gbps(open),
        gbps(copy),
        copy.as_secs_f64() / seal.as_secs_f64(),
        copy.as_secs_f64() / open.as_secs_f64()
    );
}
