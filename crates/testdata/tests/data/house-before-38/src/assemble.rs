//! Import skeleton of crates/discover/src/assemble.rs at commit 9bf77bf (before issue 38): its
//! top-level `use` and `mod` items verbatim, and every `crate::`/`super::`/child-module path
//! of its other code (tests left out) as a statement, for the house rules' cycle check.

use std::collections::BTreeMap;
use accel_model::Machine;
use crate::{exec, linux, plugins_with_external, validate, Host, Vendor};

fn paths() {
    let _ = crate::osdevs::annotate;
    let _ = crate::health::evaluate;
}
