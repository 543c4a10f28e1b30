//! Imports a topology that hwloc recorded (`lstopo --of xml --whole-io`, XML format 2.0 or
//! 3.0) as an accel capture: the sysfs and procfs files accel's host layer reads, synthesised
//! from the XML, in a [`MemTree`] that `accel` reads like any captured root (`accel import
//! hwloc`, then `accel topo --root BUNDLE`).
//!
//! [`xml`] reads the document into plain facts; [`tree`] writes them as files. What the XML
//! does not say is not invented (see docs/hwloc.md, "Importing hwloc XML").

pub mod tree;
pub mod xml;

use accel_discover::fs::MemTree;

pub use tree::Summary;
pub use xml::{ImportError, MAX_XML_BYTES};

/// The imported capture.
#[derive(Debug, Clone)]
pub struct Import {
    pub tree: MemTree,
    /// What was left out or repaired, one line each.
    pub warnings: Vec<String>,
    pub summary: Summary,
    /// The XML's `version` attribute.
    pub version: String,
}

/// Imports an hwloc XML document.
pub fn import(xml: &[u8]) -> Result<Import, ImportError> {
    let topo = xml::parse(xml)?;
    let mut warnings = topo.warnings.clone();
    let (tree, summary) = tree::build(&topo, &mut warnings);
    Ok(Import { tree, warnings, summary, version: topo.version.clone() })
}
