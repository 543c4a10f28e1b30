//! Import skeleton of crates/discover/src/families/nvidia/nvml.rs at commit 9bf77bf (before issue 38): its
//! top-level `use` and `mod` items verbatim, and every `crate::`/`super::`/child-module path
//! of its other code (tests left out) as a statement, for the house rules' cycle check.

use serde::{Deserialize, Serialize};

fn paths() {
    let _ = crate::families::nvidia::metrics::NvmlMetrics;
}
