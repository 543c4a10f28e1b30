//! The host context: the one struct every reader and plugin receives (root directory,
//! environment snapshot, SKU registry), and the file helpers that turn IO trouble into warnings.

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};

use accel_model::{SkuRegistry, Warning};

/// Everything discovery may look at. Nothing in this crate reads `/` or `std::env` directly:
/// a new capability is a new field here.
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    env: BTreeMap<String, String>,
    skus: SkuRegistry,
}

/// Longest attribute file we read; sysfs attributes are at most a page.
const MAX_ATTR_BYTES: u64 = 64 * 1024;

impl Host {
    /// A host rooted at `root` (`/` for the live machine), with an empty environment.
    pub fn new(root: impl Into<PathBuf>, skus: SkuRegistry) -> Host {
        Host { root: root.into(), env: BTreeMap::new(), skus }
    }

    /// Sets the environment snapshot plugins may consult (`TPU_*`, `NVIDIA_VISIBLE_DEVICES`...).
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Host {
        self.env = env;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn env(&self, key: &str) -> Option<&str> {
        self.env.get(key).map(String::as_str)
    }

    pub fn skus(&self) -> &SkuRegistry {
        &self.skus
    }

    /// The path of an absolute in-machine path (`/sys/bus/pci`) under the root.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// How a path under the root reads in a warning: as the machine would name it.
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) => format!("/{}", rel.display()),
            Err(_) => path.display().to_string(),
        }
    }

    /// Reads a small text attribute, trimmed. A missing file is `None` silently; any other
    /// failure (permission, not UTF-8, too large) is `None` plus a warning.
    pub fn read_attr(&self, path: &Path, source: &str, warnings: &mut Vec<Warning>) -> Option<String> {
        match read_small(path) {
            Ok(text) => Some(text.trim().to_owned()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                warnings.push(self.warning(source, path, format!("unreadable: {e}")));
                None
            }
        }
    }

    /// Reads and parses an attribute; garbage becomes a warning naming the file and the text.
    pub fn parse_attr<T>(
        &self,
        path: &Path,
        source: &str,
        warnings: &mut Vec<Warning>,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let text = self.read_attr(path, source, warnings)?;
        let value = parse(&text);
        if value.is_none() {
            let shown: String = text.chars().take(60).collect();
            warnings.push(self.warning(source, path, format!("unparsable value {shown:?}")));
        }
        value
    }

    /// Sorted names in a directory; a missing directory is empty, other errors warn.
    pub fn list_dir(&self, path: &Path, source: &str, warnings: &mut Vec<Warning>) -> Vec<String> {
        match std::fs::read_dir(path) {
            Ok(entries) => {
                let mut names: Vec<String> =
                    entries.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect();
                names.sort();
                names
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                warnings.push(self.warning(source, path, format!("unreadable directory: {e}")));
                Vec::new()
            }
        }
    }

    /// Follows one symlink inside the root. Relative targets resolve lexically against the
    /// link's directory; absolute ones are re-rooted, so a capture never reaches the live `/`.
    /// `None` when `path` is not a symlink.
    pub fn resolve_link(&self, path: &Path) -> Option<PathBuf> {
        let target = std::fs::read_link(path).ok()?;
        let base =
            if target.is_absolute() { self.root.clone() } else { path.parent().unwrap_or(&self.root).to_path_buf() };
        Some(self.normalize(&base, &target))
    }

    fn normalize(&self, base: &Path, rel: &Path) -> PathBuf {
        let mut out = base.to_path_buf();
        for component in rel.components() {
            match component {
                Component::ParentDir => {
                    // Never climb above the root.
                    if out != self.root {
                        out.pop();
                    }
                }
                Component::Normal(part) => out.push(part),
                Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            }
        }
        out
    }

    pub fn warning(&self, source: &str, path: &Path, message: String) -> Warning {
        Warning { source: source.to_owned(), path: Some(self.display(path)), message }
    }
}

fn read_small(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    // sysfs hands over a whole attribute in the first read, so a short read means the end: this
    // saves the extra read-to-EOF call per file, which is most of discovery's system time.
    let mut bytes = vec![0u8; 4096];
    let mut len = 0;
    loop {
        let n = file.read(&mut bytes[len..])?;
        len += n;
        if len as u64 > MAX_ATTR_BYTES {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "larger than 64 KiB"));
        }
        if n == 0 || len < bytes.len() {
            break;
        }
        bytes.resize(bytes.len() * 2, 0);
    }
    bytes.truncate(len);
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}
