//! accel's exports to other schedulers' own hardware descriptions, as pure functions of a
//! discovered [`Machine`](accel_model::Machine) or a planner [`Cluster`](accel_plan::Cluster):
//!
//! - [`dra`]: Kubernetes Dynamic Resource Allocation `ResourceSlice`s (`resource.k8s.io/v1`);
//! - [`dra_classes`]: DRA `DeviceClass`es naming each family's vendor driver;
//! - [`nfd`]: a Node Feature Discovery `features.d` file;
//! - [`slurm`]: Slurm's `gres.conf`, `topology.conf` (tree) and `topology.yaml` (block, torus3d);
//! - [`topology`]: Kueue's and KAI Scheduler's `Topology` (levels are node labels) and the labels.
//!
//! Nothing here reads the host or the clock: the caller passes the machine, the node name and
//! the time. Facts come from the model, per-device names from each device's vocabulary (filled
//! by its discovery plugin): no vendor table lives here.

pub mod dra;
pub mod dra_classes;
pub mod nfd;
pub mod slurm;
pub mod topology;

/// What an export cannot do with the input it was given.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The input is valid but the export's format cannot express it (a limit is exceeded).
    #[error("{0}")]
    Limit(String),
    /// The input itself is wrong (a cluster file that names an unknown machine, ...).
    #[error("{0}")]
    Input(String),
    #[error("yaml: {0}")]
    Yaml(#[from] serde_norway::Error),
}

/// A DNS label (RFC 1123): at most 63 characters of `[a-z0-9-]`, alphanumeric at both ends.
/// Other characters become `-`; empty when nothing is left.
pub fn dns_label(text: &str) -> String {
    let mapped: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let mut out = String::new();
    for c in mapped.chars() {
        // Runs of separators collapse into one.
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let out: String = out.trim_matches('-').chars().take(63).collect();
    out.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::dns_label;

    #[test]
    fn dns_labels() {
        assert_eq!(dns_label("nvidia-0000:18:00.0"), "nvidia-0000-18-00-0");
        assert_eq!(dns_label("--A__b--"), "a-b");
        assert_eq!(dns_label(&"x".repeat(80)).len(), 63);
        assert_eq!(dns_label("::"), "");
    }
}
