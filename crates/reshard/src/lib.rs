//! Weight-sync planning: from a source layout (how a trainer's ranks hold a model's tensors) and
//! a destination layout (how inference ranks must hold them), the moves that take every byte
//! each destination needs from one source that holds it, computed once and reused every step.
//!
//! A layout lists the tensors (name, global shape, dtype, and for FP8 destinations their scale)
//! and, for each rank, the box of each tensor it holds (a `[start, stop)` range per dimension;
//! a rank holds its box as one C-order array). Pure functions, no IO: the Python package
//! (`accel.weights`) packs, moves and unpacks the bytes over the transport.
//!
//! The plan's shape: destination ranks with identical boxes form a *class* (replicas of one
//! inference shard) and receive identical bytes. Tensors with one geometry (shape, distinct
//! source boxes, distinct wanted boxes) share a *template* of pieces, so planning and the plan
//! grow with the distinct geometries and the pieces to place, not with the model's bytes. For
//! each source rank and each class it serves, one *buffer* packs its pieces. Every piece of a
//! destination comes from exactly one source rank: where several ranks hold the same box
//! (data-parallel replicas), the planner picks the one that keeps the busiest link least busy
//! (module `balance`). Plans serialise (`codec`) and expand per rank on demand. FP8
//! destinations are quantised at the source (`fp8`), once per class. `fabric` replays a plan
//! over a described cluster to predict a sync's time and its floor.

mod balance;
mod codec;
mod dtype;
pub mod fabric;
pub mod fp8;
mod layout;
mod plan;

pub use balance::Links;
pub use codec::{decode, encode};
pub use dtype::{convertible, is_fp8, itemsize, wire, DTYPES};
pub use fabric::{predict, Admission, Convert, Cpu, Fleet, Prediction};
pub use fp8::Scale;
pub use layout::{Layout, RankSpec, TensorSpec};
pub use plan::{plan, Buffer, Fetch, Piece, Plan, PlanTensor, ALIGN};

/// What is wrong with a pair of layouts (each names the tensor and rank), or with cached bytes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("invalid {side} layout: {message}")]
    Layout { side: &'static str, message: String },
    #[error("tensor {tensor:?}: {message}")]
    Mismatch { tensor: String, message: String },
    #[error(
        "tensor {tensor:?}: destination rank {rank} needs {missing} element(s) that no source rank holds \
         (its box {boxed})"
    )]
    Uncovered { tensor: String, rank: usize, missing: u64, boxed: String },
    #[error("cached plan: {0}")]
    Cache(String),
    #[error("{0}")]
    Membership(String),
    #[error("invalid fleet: {0}")]
    Fleet(String),
}
