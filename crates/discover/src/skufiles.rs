//! Loading user SKU files: every `*.toml` in a directory (`ACCEL_SKU_DIR`) and explicit files
//! (`--sku-file`), merged over the built-in registry at start-up.

use std::path::{Path, PathBuf};

use accel_model::{SkuError, SkuRegistry};

#[derive(Debug, thiserror::Error)]
pub enum SkuLoadError {
    #[error("cannot read SKU file {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Invalid(#[from] SkuError),
}

/// The variable that names a directory of extra SKU files.
pub const SKU_DIR_VAR: &str = "ACCEL_SKU_DIR";

/// The SKU directory `env` names ([`SKU_DIR_VAR`]; unset or empty: none).
pub fn sku_dir(env: &std::collections::BTreeMap<String, String>) -> Option<PathBuf> {
    env.get(SKU_DIR_VAR).filter(|d| !d.is_empty()).map(PathBuf::from)
}

/// The built-in registry, then the directory's files in name order, then the explicit files.
/// A broken file is an error, not a warning: silently ignoring a vendor's data would mislabel devices.
pub fn load_registry(dir: Option<&Path>, files: &[PathBuf]) -> Result<SkuRegistry, SkuLoadError> {
    let mut registry = SkuRegistry::builtin();
    let mut paths = Vec::new();
    if let Some(dir) = dir {
        let entries = std::fs::read_dir(dir).map_err(|source| SkuLoadError::Read { path: dir.to_owned(), source })?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        found.sort();
        paths.extend(found);
    }
    paths.extend(files.iter().cloned());
    for path in paths {
        let text =
            std::fs::read_to_string(&path).map_err(|source| SkuLoadError::Read { path: path.clone(), source })?;
        let origin = path.display().to_string();
        registry.merge(SkuRegistry::parse(&origin, &text)?);
        registry.merge_systems(SkuRegistry::parse_systems(&origin, &text)?);
    }
    Ok(registry)
}
