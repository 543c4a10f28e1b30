//! Import skeleton of crates/discover/src/exec.rs at commit 9bf77bf (before issue 38): its
//! top-level `use` and `mod` items verbatim, and every `crate::`/`super::`/child-module path
//! of its other code (tests left out) as a statement, for the house rules' cycle check.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};
use accel_model::{Accelerator, Domain, Link, Machine, Warning};
use serde::Deserialize;
use serde_json::Value;
pub use crate::protocol::{PluginError, PROTOCOL};
use crate::{Host, Isolation, Report, Vendor};

fn paths() {
    let _ = crate::fingerprint::is_secret_name;
    let _ = crate::validate::escape_controls;
    use crate::validate::{over_limit, MAX_ATTRIBUTES, MAX_DEVICES, MAX_DOMAINS, MAX_LINKS, MAX_WARNINGS};
    let _ = crate::plugin::Keep;
    let _ = crate::readings::Metrics;
    let _ = crate::readings::Readings;
    let _ = crate::health::Findings;
    let _ = crate::health::from_readings;
    let _ = crate::health::from_answer;
    let _ = crate::plugin::isolate_from_model;
}
