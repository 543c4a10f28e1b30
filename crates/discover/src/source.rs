//! Where a machine comes from: the live host, a captured directory or bundle, or an embedded
//! sample. [`Host::open`] is the one way the CLI and the Python package turn a source into a
//! [`Host`], so both get the same NVML, metadata and plugin set-up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use accel_model::SkuRegistry;

use crate::fs::MemTree;
use crate::{Host, NetConfig};

/// A machine to discover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// This machine (`/`): the only source that gets the process environment, NVML and the
    /// network.
    Live,
    /// A captured directory holding `sys/` (and `proc/`), a `capture.bundle` file, or a
    /// directory holding `capture.bundle` (what `accel capture OUT` writes) but no `sys/`.
    Root(PathBuf),
    /// A captured machine embedded in the binary (`samples::names()`).
    Sample(String),
}

impl Source {
    /// `/` is the live machine; anything else is a capture.
    pub fn from_root(root: &Path) -> Source {
        if root == Path::new("/") {
            Source::Live
        } else {
            Source::Root(root.to_owned())
        }
    }
}

/// What [`Host::open`] needs besides the source.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub registry: SkuRegistry,
    /// Kubernetes node labels (downward-API file) naming zone, rack, block.
    pub labels_file: Option<PathBuf>,
    /// Metadata look-ups (GCE, IMDS) on the live machine.
    pub network: bool,
    /// The process environment, handed in (discovery never reads `std::env`). Used for the live
    /// machine only: a capture carries its own. `ACCEL_GCE_METADATA_URL` and `ACCEL_IMDS_URL`
    /// override the metadata endpoints.
    pub env: BTreeMap<String, String>,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions { registry: SkuRegistry::builtin(), labels_file: None, network: true, env: BTreeMap::new() }
    }
}

/// A source that cannot be opened: the user's input is wrong, not the machine's data.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{}", crate::samples::unknown(.0))]
    NoSample(String),
    #[error("cannot read root {path}: {source}")]
    Unreadable { path: String, source: std::io::Error },
    #[error("{0} is not a capture bundle: {1}")]
    NotBundle(String, String),
    #[error("{0} has no sys/ directory (and no capture.bundle): not a Linux root or a captured machine")]
    NoSys(String),
}

impl Host {
    /// The host for `source`: an embedded sample, a capture bundle file, a captured directory,
    /// or the live machine (with the process environment, NVML when the library loads, and the
    /// metadata servers when `network` is on).
    pub fn open(source: &Source, options: OpenOptions) -> Result<Host, OpenError> {
        let OpenOptions { registry, labels_file, network, env } = options;
        let host = match source {
            Source::Sample(name) => {
                crate::samples::host(name, registry).ok_or_else(|| OpenError::NoSample(name.clone()))?
            }
            Source::Root(root) if root.is_file() => open_bundle(root, registry)?,
            // `accel capture OUT` writes OUT/capture.bundle: OUT itself names the capture.
            Source::Root(root) if !root.join("sys").is_dir() && root.join(BUNDLE_NAME).is_file() => {
                open_bundle(&root.join(BUNDLE_NAME), registry)?
            }
            Source::Root(root) => {
                check_root(root)?;
                Host::new(root, registry)
            }
            Source::Live => {
                let root = Path::new("/");
                check_root(root)?;
                let mut net = NetConfig { enabled: network, ..Default::default() };
                if let Some(url) = env.get("ACCEL_GCE_METADATA_URL").filter(|u| !u.is_empty()) {
                    net.gce_endpoint.clone_from(url);
                }
                if let Some(url) = env.get("ACCEL_IMDS_URL").filter(|u| !u.is_empty()) {
                    net.imds_endpoint.clone_from(url);
                }
                // Each family attaches its live runtime (a vendor library) once, here.
                crate::default_plugins()
                    .iter()
                    .fold(Host::new(root, registry).with_env(env).with_net(net), |host, p| p.open_live(host))
            }
        };
        Ok(host.with_labels_file(labels_file))
    }
}

/// The file `accel capture OUT` writes into OUT.
pub const BUNDLE_NAME: &str = "capture.bundle";

/// The in-memory host of a capture bundle file.
fn open_bundle(path: &Path, registry: SkuRegistry) -> Result<Host, OpenError> {
    let bytes = crate::fs::read_regular(path, crate::fs::MAX_BUNDLE_BYTES)
        .map_err(|source| OpenError::Unreadable { path: path.display().to_string(), source })?;
    let tree =
        MemTree::parse_bundle(&bytes).map_err(|e| OpenError::NotBundle(path.display().to_string(), e.to_string()))?;
    Ok(Host::in_memory(Arc::new(tree), registry))
}

fn check_root(root: &Path) -> Result<(), OpenError> {
    std::fs::read_dir(root).map_err(|source| OpenError::Unreadable { path: root.display().to_string(), source })?;
    if !root.join("sys").is_dir() {
        return Err(OpenError::NoSys(root.display().to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(root: &Path) -> Result<Host, OpenError> {
        Host::open(&Source::from_root(root), OpenOptions { network: false, ..OpenOptions::default() })
    }

    #[test]
    fn a_bundle_file_and_a_directory_holding_one_open_alike() {
        let dir = accel_testdata::TempDir::new("discover-source-bundle-dir");
        let bytes = crate::samples::tree("mi300x").unwrap().to_bundle();
        std::fs::write(dir.join(BUNDLE_NAME), &bytes).unwrap();
        let plugins = crate::default_plugins();
        let from_dir = crate::discover(&open(&dir).unwrap(), &plugins);
        let from_file = crate::discover(&open(&dir.join(BUNDLE_NAME)).unwrap(), &plugins);
        assert_eq!(from_dir.accelerators.len(), 8);
        assert_eq!(serde_json::to_value(&from_dir).unwrap(), serde_json::to_value(&from_file).unwrap());

        // A sys/ beside it wins: that directory is a captured tree, not a bundle's folder.
        std::fs::create_dir(dir.join("sys")).unwrap();
        assert!(crate::discover(&open(&dir).unwrap(), &plugins).accelerators.is_empty());

        // Neither: the error says what was looked for.
        let empty = accel_testdata::TempDir::new("discover-source-empty-dir");
        let err = open(&empty).err().unwrap().to_string();
        assert!(err.contains("no sys/ directory (and no capture.bundle)"), "{err}");
        // A corrupt bundle in the directory is named as such.
        std::fs::write(empty.join(BUNDLE_NAME), b"not a bundle").unwrap();
        let err = open(&empty).err().unwrap().to_string();
        assert!(err.contains("capture.bundle is not a capture bundle"), "{err}");
    }
}
