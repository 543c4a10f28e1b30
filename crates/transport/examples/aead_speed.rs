//! Throughput of the AEAD record layer in memory (seal and open), no sockets.
use accel_transport::secure::{Nonces, Secure, Side};
use std::io::{Read, Write};
fn main() {
    let n = Nonces { server: [1; 32], client: [2; 32] };
    let data = vec![7u8; 64 << 20];
    let mut wire = Vec::with_capacity(70 << 20);
    let t = std::time::Instant::now();
    Secure::new(&mut wire, b"0123456789abcdef", &n, Side::Client).write_all(&data).unwrap();
    let seal = t.elapsed();
    let t = std::time::Instant::now();
    let mut out = vec![0u8; data.len()];
    Secure::new(&wire[..], b"0123456789abcdef", &n, Side::Server).read_exact(&mut out).unwrap();
    println!(
        "seal {:.2} GB/s, open {:.2} GB/s",
        64.0 * 1.048576e6 / seal.as_secs_f64() / 1e9,
        64.0 * 1.048576e6 / t.elapsed().as_secs_f64() / 1e9
    );
}
