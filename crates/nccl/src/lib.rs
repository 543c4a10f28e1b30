//! Imports an NCCL or RCCL topology file (what `NCCL_TOPO_DUMP_FILE` writes, and the
//! `NCCL_TOPO_FILE` inputs clouds publish) as an accel capture: the sysfs files accel's host
//! layer reads, synthesised from the file, in a [`MemTree`] that `accel` reads like any captured
//! root (`accel import nccl`, then `accel topo --root BUNDLE`).
//!
//! [`xml`] reads the file into plain facts; [`tree`] writes them as files, and each
//! accelerator's runtime record and link elements into the generic OS-device file, which the
//! families read (docs/nccl.md). What the file does not say is not invented.

pub mod tree;
pub mod xml;

use accel_discover::fs::MemTree;

pub use tree::Summary;
pub use xml::{ImportError, MAX_XML_BYTES};

/// The imported capture.
#[derive(Debug, Clone)]
pub struct Import {
    pub tree: MemTree,
    /// What was left out, repaired or made up, one line each.
    pub warnings: Vec<String>,
    pub summary: Summary,
    /// The `<system version=>` attribute.
    pub version: String,
}

/// Imports an NCCL topology file.
pub fn import(xml: &[u8]) -> Result<Import, ImportError> {
    let topo = xml::parse(xml)?;
    let mut warnings = topo.warnings.clone();
    let (tree, summary) = tree::build(&topo, &mut warnings);
    Ok(Import { tree, warnings, summary, version: topo.version.clone() })
}
