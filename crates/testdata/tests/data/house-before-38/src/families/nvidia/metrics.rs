//! Import skeleton of crates/discover/src/families/nvidia/metrics.rs at commit 9bf77bf (before issue 38): its
//! top-level `use` and `mod` items verbatim, and every `crate::`/`super::`/child-module path
//! of its other code (tests left out) as a statement, for the house rules' cycle check.

use serde::{Deserialize, Serialize};
use crate::families::nvidia::NvmlHost;
use crate::protocol::PluginError;
use crate::readings::{normalize_pci, DeviceReading, LinkReading, Metrics, Readings};
use crate::Host;
