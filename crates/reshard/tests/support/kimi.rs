//! A Kimi-K2-shaped model and two shardings of it, for the planner's scale test and benchmark.
//!
//! Shapes from Kimi-K2's public config (moonshotai/Kimi-K2-Instruct `config.json`, the
//! DeepSeek-V3 architecture): hidden 7168, 61 layers (the first dense, intermediate 18432; the
//! rest MoE with 384 routed experts of intermediate 2048 and one shared expert), MLA attention
//! with 64 heads (q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128), vocabulary
//! 163840, untied embeddings. About 1.03e12 parameters in 69,975 tensors.
//!
//! Source (a trainer, bf16, 256 ranks on 32 hosts of 8): pipeline parallel 4 (16, 15, 15 and 15
//! layers; the embedding on stage 0, the head and final norm on stage 3), and inside a stage of
//! 64 ranks tensor parallel 8 x data parallel 8 for attention, dense and shared-expert weights
//! (small ones replicated) and expert parallel 64 for the routed experts (6 whole experts a rank).
//!
//! Destination (inference, FP8 E4M3 with 128x128 block scales for the matrices, 128 ranks on 16
//! hosts): tensor parallel 16 x data parallel 8 for attention and the dense weights, expert
//! parallel 32 x tensor parallel 4 for the routed experts (12 experts a group of 4 ranks, each
//! cut in four along its 2048 dimension); norms, the router, the embedding and the head stay bf16.

#![allow(dead_code)]

use std::collections::BTreeMap;

use accel_reshard::{Layout, RankSpec, Scale, TensorSpec};

pub const HIDDEN: u64 = 7168;
pub const LAYERS: u64 = 61;
pub const EXPERTS: u64 = 384;
pub const MOE_INTER: u64 = 2048;
pub const DENSE_INTER: u64 = 18432;
pub const VOCAB: u64 = 163840;

/// How a tensor is split: whole, or along one dimension by a tensor-parallel group.
#[derive(Clone, Copy)]
enum Split {
    Whole,
    Dim(usize),
}

/// One tensor of the model: name, shape, how TP splits it, whether it is an expert's matrix
/// (layer, expert) or a matrix inference quantises.
struct T {
    name: String,
    shape: Vec<u64>,
    split: Split,
    expert: Option<(u64, u64)>,
    layer: Option<u64>,
    quantised: bool,
}

fn tensors() -> Vec<T> {
    let mut out = Vec::new();
    let mut push = |name: String, shape: &[u64], split: Split, layer: Option<u64>, expert: Option<(u64, u64)>| {
        let quantised = shape.len() == 2
            && !name.contains("embed")
            && !name.contains("lm_head")
            && !name.ends_with("mlp.gate.weight");
        out.push(T { name, shape: shape.to_vec(), split, expert, layer, quantised });
    };
    push("model.embed_tokens.weight".into(), &[VOCAB, HIDDEN], Split::Dim(0), None, None);
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}");
        let a = |n: &str| format!("{p}.self_attn.{n}");
        push(a("q_a_proj.weight"), &[1536, HIDDEN], Split::Whole, Some(l), None);
        push(a("q_a_layernorm.weight"), &[1536], Split::Whole, Some(l), None);
        push(a("q_b_proj.weight"), &[64 * 192, 1536], Split::Dim(0), Some(l), None);
        push(a("kv_a_proj_with_mqa.weight"), &[512 + 64, HIDDEN], Split::Whole, Some(l), None);
        push(a("kv_a_layernorm.weight"), &[512], Split::Whole, Some(l), None);
        push(a("kv_b_proj.weight"), &[64 * 256, 512], Split::Dim(0), Some(l), None);
        push(a("o_proj.weight"), &[HIDDEN, 64 * 128], Split::Dim(1), Some(l), None);
        push(format!("{p}.input_layernorm.weight"), &[HIDDEN], Split::Whole, Some(l), None);
        push(format!("{p}.post_attention_layernorm.weight"), &[HIDDEN], Split::Whole, Some(l), None);
        if l == 0 {
            for (n, shape, d) in [
                ("gate_proj", [DENSE_INTER, HIDDEN], 0),
                ("up_proj", [DENSE_INTER, HIDDEN], 0),
                ("down_proj", [HIDDEN, DENSE_INTER], 1),
            ] {
                push(format!("{p}.mlp.{n}.weight"), &shape, Split::Dim(d), Some(l), None);
            }
            continue;
        }
        push(format!("{p}.mlp.gate.weight"), &[EXPERTS, HIDDEN], Split::Whole, Some(l), None);
        push(format!("{p}.mlp.gate.e_score_correction_bias"), &[EXPERTS], Split::Whole, Some(l), None);
        for (n, shape, d) in [
            ("gate_proj", [MOE_INTER, HIDDEN], 0),
            ("up_proj", [MOE_INTER, HIDDEN], 0),
            ("down_proj", [HIDDEN, MOE_INTER], 1),
        ] {
            push(format!("{p}.mlp.shared_experts.{n}.weight"), &shape, Split::Dim(d), Some(l), None);
        }
        for e in 0..EXPERTS {
            for (n, shape, d) in [
                ("gate_proj", [MOE_INTER, HIDDEN], 0),
                ("up_proj", [MOE_INTER, HIDDEN], 0),
                ("down_proj", [HIDDEN, MOE_INTER], 1),
            ] {
                push(format!("{p}.mlp.experts.{e}.{n}.weight"), &shape, Split::Dim(d), Some(l), Some((l, e)));
            }
        }
    }
    push("model.norm.weight".into(), &[HIDDEN], Split::Whole, None, None);
    push("lm_head.weight".into(), &[VOCAB, HIDDEN], Split::Dim(0), None, None);
    out
}

/// Part `i` of `n` equal parts of `[0, extent)`.
fn part(extent: u64, n: u64, i: u64) -> [u64; 2] {
    [extent * i / n, extent * (i + 1) / n]
}

fn whole(shape: &[u64]) -> Vec<[u64; 2]> {
    shape.iter().map(|&n| [0, n]).collect()
}

fn cut(shape: &[u64], dim: usize, n: u64, i: u64) -> Vec<[u64; 2]> {
    let mut b = whole(shape);
    b[dim] = part(shape[dim], n, i);
    b
}

/// The layer range of pipeline stage `s` of 4 (16, 15, 15, 15 layers).
fn stage_of(layer: u64) -> u64 {
    if layer < 16 {
        0
    } else {
        1 + (layer - 16) / 15
    }
}

/// The trainer's layout: 256 bf16 ranks (see the module documentation).
pub fn source() -> Layout {
    let ts = tensors();
    let mut ranks: Vec<RankSpec> =
        (0..256).map(|r| RankSpec { host: format!("trainer{}", r / 8), slices: BTreeMap::new() }).collect();
    for t in &ts {
        let stage = match (t.layer, t.name.as_str()) {
            (Some(l), _) => stage_of(l),
            (None, n) if n.contains("embed") => 0,
            _ => 3,
        };
        for local in 0..64u64 {
            let rank = (stage * 64 + local) as usize;
            let tp = local % 8;
            let b = match (t.expert, t.split) {
                (Some((_, e)), _) => {
                    if e / 6 != local {
                        continue;
                    }
                    whole(&t.shape)
                }
                (None, Split::Whole) => whole(&t.shape),
                (None, Split::Dim(d)) => cut(&t.shape, d, 8, tp),
            };
            ranks[rank].slices.insert(t.name.clone(), b);
        }
    }
    Layout { tensors: ts.iter().map(|t| TensorSpec::new(t.name.clone(), &t.shape, "bf16")).collect(), ranks }
}

/// The inference layout: 128 ranks, FP8 E4M3 block-scaled matrices (see the module documentation).
pub fn destination() -> Layout {
    let ts = tensors();
    let mut ranks: Vec<RankSpec> =
        (0..128).map(|r| RankSpec { host: format!("infer{}", r / 8), slices: BTreeMap::new() }).collect();
    for t in &ts {
        for rank in 0..128u64 {
            let b = match (t.expert, t.split) {
                (Some((_, e)), Split::Dim(d)) => {
                    if e / 12 != rank / 4 {
                        continue;
                    }
                    cut(&t.shape, d, 4, rank % 4)
                }
                (_, Split::Whole) => whole(&t.shape),
                (None, Split::Dim(d)) => cut(&t.shape, d, 16, rank % 16),
            };
            ranks[rank as usize].slices.insert(t.name.clone(), b);
        }
    }
    let tensors = ts
        .iter()
        .map(|t| {
            let mut spec = TensorSpec::new(t.name.clone(), &t.shape, if t.quantised { "f8e4m3" } else { "bf16" });
            spec.scale = t.quantised.then_some(Scale::Block);
            spec
        })
        .collect();
    Layout { tensors, ranks }
}

/// Parameters of the model.
pub fn parameters(l: &Layout) -> u64 {
    l.tensors.iter().map(|t| t.shape.iter().product::<u64>()).sum()
}
