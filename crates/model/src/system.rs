//! Systems whose scale-up links are fixed by their design (a cloud instance type, a DGX, an HGX
//! baseboard), as registry data: `[[system]]` tables in the SKU files. Discovery declares their
//! links where a capture holds no link evidence; links seen on the machine always win.

use serde::{Deserialize, Serialize};

use crate::LinkKind;

/// One system, as the registry knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct System {
    /// A lowercase slug (`aws-p5en-48xlarge`).
    pub id: String,
    /// What it is, in words (`Amazon EC2 p5en.48xlarge`).
    pub name: String,
    /// DMI `product_name` values that identify it (EC2 writes the instance type there; a DGX
    /// its model).
    #[serde(default)]
    pub product_names: Vec<String>,
    /// DMI `board_name` values that identify it (an HGX baseboard).
    #[serde(default)]
    pub board_names: Vec<String>,
    /// The registry ids of the accelerators it holds (one of them): the first is what the
    /// system ships (what `accel labels --predict` assumes), later ones are variants discovery
    /// also accepts as this system's.
    pub skus: Vec<String>,
    /// How many it holds.
    pub devices: u32,
    /// The link kind that joins every pair of them (`nvswitch`); the count and bandwidth of each
    /// pair come from the accelerator's SKU (`scale_up`), so the fact lives in one place.
    pub link: LinkKind,
    pub sources: Vec<String>,
    /// Where this entry was loaded from. Set by the registry.
    #[serde(default, skip_deserializing)]
    pub origin: String,
}

impl System {
    /// Whether a machine with these DMI strings is this system (exact, case-sensitive matches of
    /// non-empty values).
    pub fn matches(&self, product_name: Option<&str>, board_name: Option<&str>) -> bool {
        let hit = |names: &[String], value: Option<&str>| {
            value.map(str::trim).filter(|v| !v.is_empty()).is_some_and(|v| names.iter().any(|n| n == v))
        };
        hit(&self.product_names, product_name) || hit(&self.board_names, board_name)
    }

    /// The source a declared link names: the entry and its origin.
    pub fn citation(&self) -> String {
        format!("{} system {}", self.origin, self.id)
    }
}
