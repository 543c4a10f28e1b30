//! FP8 quantisation speed (docs/BENCHMARKS.md): 8192 x 8192 bf16 elements, their 128x128 block
//! scales, then the whole box quantised to E4M3, against a memcpy of the same bytes.
//!
//!     cargo run --release -p accel-reshard --example fp8_speed
//!
//! The last line is JSON, the median of three rounds on one thread: what the fabric model's
//! `convert` describes (`scripts/bench_weight_sync_frontier.py` reads it).

use std::time::Instant;

use accel_reshard::fp8::{encode, piece_bytes, quantize, scales, Local, Scale, E4M3};

fn main() {
    let (rows, cols) = (8192u64, 8192u64);
    let mut state = 1u64;
    let src: Vec<u8> = (0..rows * cols * 2)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 56) as u8 & 0x7f
        })
        .collect();
    let shape = [rows, cols];
    let local = Local { bytes: &src, dtype: "bf16", shape: &shape, origin: &[0, 0] };
    let boxed = [[0, rows], [0, cols]];
    let mut out = vec![0u8; piece_bytes(&boxed, Scale::Block).0 as usize];
    let mut copy = vec![0u8; src.len()];
    let (mut scale_rates, mut quant_rates) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        let grid = scales(&local, Scale::Block, E4M3).expect("scales");
        let s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        quantize(&local, Scale::Block, E4M3, &grid, &boxed, &mut out).expect("quantise");
        let q = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut acc = 0u32;
        for i in 0..(rows * cols) as u32 {
            acc = acc.wrapping_add(u32::from(encode(f32::from_bits(i.wrapping_mul(2654435761) >> 2), E4M3)));
        }
        let e = t.elapsed().as_secs_f64();
        let t = Instant::now();
        copy.copy_from_slice(&src);
        let m = t.elapsed().as_secs_f64();
        std::hint::black_box((&copy, acc));
        println!("encode alone {:.1} ns/element", e * 1e9 / (rows * cols) as f64);
        let gb = src.len() as f64 / 1e9;
        println!("scales {:.2} GB/s, quantise {:.2} GB/s, memcpy {:.2} GB/s (of bf16 input)", gb / s, gb / q, gb / m);
        scale_rates.push(gb / s);
        quant_rates.push(gb / q);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("{{\"scales_gbyte\": {:.4}, \"quantize_gbyte\": {:.4}}}", median(scale_rates), median(quant_rates));
}
