//! The planner's cost at frontier scale (docs/BENCHMARKS.md, "Weight-sync plans at frontier
//! scale"): the Kimi-K2-shaped pair of layouts of `tests/kimi.rs`, planned cold several times,
//! then encoded and decoded (the cache across processes), printed as one JSON line.
//!
//!     cargo run --release -p accel-reshard --example plan_scale [rounds [scales_gbyte quantize_gbyte]]
//!
//! The fabric model's Kimi-K2 prediction needs the sources' FP8 conversion described: on the
//! GPUs (an assumed rate, stated below: accel has no GPU quantisation kernel yet), and, where
//! the two rates of one CPU thread are given (`fp8_speed` measures them), on the host CPU as
//! accel quantises today (one thread per source rank, 8 ranks a node, before sending).

#[path = "../tests/support/kimi.rs"]
mod kimi;

use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let t0 = Instant::now();
    let (src, dst) = (kimi::source(), kimi::destination());
    let layouts = t0.elapsed().as_secs_f64();
    let mut cold = Vec::new();
    let mut planned = None;
    for _ in 0..rounds {
        let t = Instant::now();
        let p = accel_reshard::plan(&src, &dst).expect("the layouts plan");
        cold.push(t.elapsed().as_secs_f64());
        planned = Some(p);
    }
    let p = planned.expect("at least one round");
    let bytes = accel_reshard::encode(&p, "kimi");
    let (mut enc, mut dec, mut part) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let b = accel_reshard::encode(&p, "kimi");
        enc.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let (_, back) = accel_reshard::decode(&b).expect("decodes");
        dec.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let n = back.destination(0).len() + back.source(0).len();
        part.push(t.elapsed().as_secs_f64());
        assert!(n > 0);
    }
    // The fabric model on a described fleet: 32 + 16 H100 nodes, each with 8 NICs of 400 Gbit/s,
    // one non-blocking fabric, transfers at 85% of line rate (nixlbench reached 85% on 400G:
    // ai-dynamo/nixl PR #1647), the transport's 4 MiB relay pieces.
    // Conversion on the GPUs: assumed 1500 GB/s of bf16 input for both passes (the scales pass
    // reads 2 bytes an element, the encoding 2 and writes 1: about half of an H100 SXM's
    // 3.35 TB/s), one GPU per rank, before sending. An assumption, not a measurement.
    let links = r#""nics": 8, "nic_gbit": 400, "efficiency": 0.85, "chunk_bytes": 4194304"#;
    let on = |scales: f64, quantize: f64| -> accel_reshard::Fleet {
        serde_json::from_str(&format!(
            r#"{{{links}, "convert": {{"scales_gbyte": {scales}, "quantize_gbyte": {quantize}, "threads": 8}}}}"#
        ))
        .expect("the fleet parses")
    };
    let t = Instant::now();
    let model = accel_reshard::predict(&p, &on(1500.0, 1500.0)).expect("the fleet is complete");
    let model_s = t.elapsed().as_secs_f64();
    let rate = |i: usize| std::env::args().nth(i).and_then(|a| a.parse::<f64>().ok());
    let cpu = match (rate(2), rate(3)) {
        (Some(s), Some(q)) => {
            serde_json::to_string(&accel_reshard::predict(&p, &on(s, q)).expect("the fleet is complete"))
                .expect("a prediction serialises")
        }
        _ => "null".to_string(),
    };
    let t = Instant::now();
    let all = p.sources_all();
    let expand_all = t.elapsed().as_secs_f64();
    let (templates, needs) = p.counts();
    println!(
        "{{\"tensors\": {}, \"parameters\": {}, \"src_ranks\": {}, \"dst_ranks\": {}, \"layouts_s\": {layouts:.4}, \
         \"plan_cold_s\": {:.4}, \"plan_cold_all\": {:?}, \"encode_s\": {:.4}, \"decode_s\": {:.4}, \"one_rank_part_s\": {:.4}, \
         \"expand_all_sources_s\": {expand_all:.4}, \"templates\": {templates}, \"pieces\": {needs}, \"memory_bytes\": {}, \
         \"encoded_bytes\": {}, \"bytes_moved\": {}, \"buffers\": {}, \"threads\": {}, \"model_s\": {model_s:.4}, \"prediction\": {}, \"prediction_cpu\": {cpu}}}",
        src.tensors.len(),
        kimi::parameters(&src),
        src.ranks.len(),
        dst.ranks.len(),
        median(cold.clone()),
        cold,
        median(enc),
        median(dec),
        median(part),
        p.memory(),
        bytes.len(),
        p.bytes,
        all.iter().map(Vec::len).sum::<usize>(),
        std::thread::available_parallelism().map_or(1, |c| c.get()),
        serde_json::to_string(&model).expect("a prediction serialises"),
    );
}
