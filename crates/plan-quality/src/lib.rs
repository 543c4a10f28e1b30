//! Quality benchmarks for accel's planner (issue 22): its gang placements against an exact ILP
//! optimum of the same objective ([`exact`]), and the fragmentation a long job stream leaves
//! under the planner with and without domain bin-packing and under first fit ([`frag`]).
//!
//! Everything is deterministic: clusters come from the embedded sample machines, requests and
//! streams from seeded [`accel_plan::XorShift`] generators. Times are measured and reported,
//! never asserted.

pub mod clusters;
pub mod exact;
pub mod frag;
pub mod ilp;
pub mod objective;
