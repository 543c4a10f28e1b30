//! Import skeleton of crates/discover/src/fingerprint.rs at commit 9bf77bf (before issue 38): its
//! top-level `use` and `mod` items verbatim, and every `crate::`/`super::`/child-module path
//! of its other code (tests left out) as a statement, for the house rules' cycle check.

use accel_model::{Machine, PathClassifier};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use crate::Host;

fn paths() {
    let _ = crate::Vendor;
    let _ = crate::discover;
    let _ = crate::plugin::Environment;
}
