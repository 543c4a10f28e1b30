//! Import skeleton of crates/discover/src/families/nvidia/nvml_live.rs at commit 9bf77bf (before issue 38): its
//! top-level `use` and `mod` items verbatim, and every `crate::`/`super::`/child-module path
//! of its other code (tests left out) as a statement, for the house rules' cycle check.

use std::sync::Arc;
use crate::families::nvidia::nvml::NvmlSource;

fn paths() {
    use crate::families::nvidia::metrics::{NvmlDeviceMetrics, NvmlLinkMetrics, NvmlMetrics};
    use crate::families::nvidia::nvml::{NvmlDevice, NvmlLink, NvmlSnapshot, NvmlSource, RemoteType};
    use crate::families::nvidia::nvml::{NvmlFabric, NvmlMigDevice};
}
