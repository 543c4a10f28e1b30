//! A Node Feature Discovery `features.d` file (NFD's local source): `key=value` lines under an
//! expiry directive, at most 64 KiB. The labels are [`accel_discover::labels::k8s_labels`]
//! (GPU Feature Discovery's `nvidia.com/gpu.*` names where they exist) plus NVIDIA topograph's
//! labels in both its forms: v1's closest-first `fabric.topograph.run/tier-N` and
//! `accelerator.topograph.run/domain` (`/sub-domain`), and v0's
//! `network.topology.nvidia.com/{accelerator,leaf,spine,core}`.

use std::collections::BTreeMap;

use accel_discover::labels::k8s_labels;
use accel_model::{DomainKind, Machine};

use crate::ExportError;

/// NFD ignores a features file larger than this.
pub const MAX_BYTES: usize = 64 * 1024;

/// topograph's label prefix (NVIDIA/topograph docs/reference/node-labels.md).
const TOPOGRAPH: &str = "network.topology.nvidia.com";

/// A label value as topograph writes it: as is when it is a valid label value, else `x` and
/// the FNV-1a 64-bit hash of it in hex.
pub fn topograph_value(text: &str) -> String {
    let valid = !text.is_empty()
        && text.len() <= 63
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        return text.to_owned();
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("x{hash:016x}")
}

/// topograph's labels: the scale-up domain that spans nodes (an NVLink clique, a TPU slice) as
/// v1's `accelerator.topograph.run/domain` and v0's `accelerator` (a second such domain as v1's
/// `sub-domain`), and the network layers above the node (EC2 network nodes, deepest first) as
/// v1's `fabric.topograph.run/tier-0`, `tier-1`, ... and v0's `leaf`, `spine` and `core`. Keys:
/// dsx-ai-factory/topograph `pkg/engines/k8s/labeler.go` and `pkg/topology` (v1), NVIDIA/topograph
/// `docs/reference/node-labels.md` (v0).
pub fn topograph_labels(machine: &Machine) -> BTreeMap<String, String> {
    use accel_plan::fabric::{TOPOGRAPH_DOMAIN, TOPOGRAPH_SUB_DOMAIN, TOPOGRAPH_TIER_PREFIX};
    let mut out = BTreeMap::new();
    // topograph groups nodes into blocks by `accelerator`: a node-local domain (an xGMI hive)
    // would be a block of one node, so only a domain that can span nodes is published.
    let mut spanning = machine.domains.iter().filter(|d| d.scale_up && !d.node_local());
    if let Some(clique) = spanning.next() {
        out.insert(format!("{TOPOGRAPH}/accelerator"), topograph_value(&clique.name));
        out.insert(TOPOGRAPH_DOMAIN.to_owned(), topograph_value(&clique.name));
        if let Some(sub) = spanning.find(|d| d.kind != clique.kind) {
            out.insert(TOPOGRAPH_SUB_DOMAIN.to_owned(), topograph_value(&sub.name));
        }
    }
    // `layer-1:nn-...` (top) ... `layer-3:nn-...` (closest to the instance).
    let mut layers: Vec<(&str, &str)> = machine
        .domains
        .iter()
        .filter(|d| d.kind == DomainKind::NETWORK_NODE)
        .filter_map(|d| d.name.split_once(':'))
        .collect();
    layers.sort();
    for (tier, (_, value)) in ["leaf", "spine", "core"].iter().zip(layers.iter().rev()) {
        out.insert(format!("{TOPOGRAPH}/{tier}"), topograph_value(value));
    }
    for (i, (_, value)) in layers.iter().rev().enumerate() {
        out.insert(format!("{TOPOGRAPH_TIER_PREFIX}{i}"), topograph_value(value));
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch.
pub fn rfc3339(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// The features file, expiring at `expires_unix`. Fails when it would exceed [`MAX_BYTES`].
pub fn features_file(machine: &Machine, expires_unix: u64) -> Result<String, ExportError> {
    let mut labels = k8s_labels(machine);
    labels.extend(topograph_labels(machine));
    let mut out = format!("# Written by `accel export nfd`.\n# +expiry-time={}\n", rfc3339(expires_unix));
    for (k, v) in &labels {
        out += &format!("{k}={v}\n");
    }
    if out.len() > MAX_BYTES {
        return Err(ExportError::Limit(format!(
            "the features file would be {} bytes; NFD reads at most {MAX_BYTES}",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_599), "2026-12-31T23:59:59Z");
    }

    #[test]
    fn topograph_values() {
        assert_eq!(topograph_value("nn-1234"), "nn-1234");
        // FNV-1a 64 of the empty string is the offset basis.
        assert_eq!(topograph_value(""), "xcbf29ce484222325");
        let long = "a".repeat(64);
        assert!(topograph_value(&long).starts_with('x'));
        assert_eq!(topograph_value(&long).len(), 17);
    }
}
