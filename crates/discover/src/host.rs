//! The host context: the one struct every reader and plugin receives (root directory and file
//! tree, environment snapshot, SKU registry, NVML source, network settings), and the file
//! helpers that turn IO trouble into warnings.

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use accel_model::{SkuRegistry, Warning};

use crate::fs::{Fs, MemTree};

/// Platform look-ups over the network (GCE metadata, EC2 IMDS). Off unless a caller turns them on.
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub enabled: bool,
    /// GCE metadata server base URL (`http://metadata.google.internal`).
    pub gce_endpoint: String,
    /// EC2 instance metadata base URL (`http://169.254.169.254`).
    pub imds_endpoint: String,
    /// Total time all look-ups together may take.
    pub budget: Duration,
}

impl Default for NetConfig {
    fn default() -> NetConfig {
        NetConfig {
            enabled: false,
            gce_endpoint: "http://metadata.google.internal".into(),
            imds_endpoint: "http://169.254.169.254".into(),
            budget: Duration::from_secs(1),
        }
    }
}

/// Everything discovery may look at. Nothing in this crate reads `/` or `std::env` directly:
/// a new capability is a new field here.
#[derive(Clone)]
pub struct Host {
    root: PathBuf,
    fs: Fs,
    env: BTreeMap<String, String>,
    skus: SkuRegistry,
    /// Vendor runtimes a family opened on the live machine (a library handle), by family.
    runtimes: BTreeMap<&'static str, Arc<dyn std::any::Any + Send + Sync>>,
    net: NetConfig,
    /// When the network budget runs out: set by the first look-up, shared by clones.
    net_deadline: Arc<OnceLock<Instant>>,
    labels_file: Option<PathBuf>,
    /// An in-memory tree written out for external plugins, once, shared by clones and removed
    /// when the last clone goes.
    written: Arc<OnceLock<Option<Written>>>,
}

/// A private directory holding an in-memory tree; removed on drop.
#[derive(Debug)]
struct Written(PathBuf);

impl Drop for Written {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("root", &self.root)
            .field("in_memory", &matches!(self.fs, Fs::Memory(_)))
            .field("runtimes", &self.runtimes.keys().collect::<Vec<_>>())
            .field("net", &self.net)
            .field("labels_file", &self.labels_file)
            .finish()
    }
}

/// Longest attribute file we read; sysfs attributes are at most a page.
const MAX_ATTR_BYTES: u64 = 64 * 1024;

impl Host {
    /// A host rooted at `root` (`/` for the live machine), with an empty environment.
    pub fn new(root: impl Into<PathBuf>, skus: SkuRegistry) -> Host {
        let root = root.into();
        Host {
            fs: Fs::real(&root),
            root,
            env: BTreeMap::new(),
            skus,
            runtimes: BTreeMap::new(),
            net: NetConfig::default(),
            net_deadline: Arc::new(OnceLock::new()),
            labels_file: None,
            written: Arc::new(OnceLock::new()),
        }
    }

    /// A host backed by an in-memory tree (an embedded sample or a loaded bundle).
    pub fn in_memory(tree: Arc<MemTree>, skus: SkuRegistry) -> Host {
        Host { fs: Fs::Memory(tree), ..Host::new("/", skus) }
    }

    /// The directory an external plugin reads as `ACCEL_ROOT`: the root itself (canonical), or,
    /// for an in-memory tree, a private copy of it written once (mode 0700, under `TMPDIR` when
    /// it is set, else in `/dev/shm` where that is a directory this user may write, else the
    /// system's temporary directory) and removed with the last clone of this host. Never the
    /// live `/` for a sample. `None` when the copy cannot be written. A copy lives for one run
    /// of a plugin; on a disk file system, making its few hundred files and links is most of
    /// what grading an external plugin costs (`accel conformance` writes one per mutated
    /// capture), and memory makes it cheap.
    pub fn plugin_root(&self) -> Option<PathBuf> {
        let Fs::Memory(tree) = &self.fs else {
            return Some(std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone()));
        };
        self.written
            .get_or_init(|| {
                use std::os::unix::fs::DirBuilderExt;
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let name = format!("accel-root-{}-{n}", std::process::id());
                let shm = std::path::Path::new("/dev/shm");
                let mut places = Vec::new();
                if std::env::var_os("TMPDIR").is_none() && shm.is_dir() {
                    places.push(shm.to_path_buf());
                }
                places.push(std::env::temp_dir());
                let dir = places.into_iter().map(|p| p.join(&name)).find(|dir| {
                    let _ = std::fs::remove_dir_all(dir);
                    std::fs::DirBuilder::new().mode(0o700).create(dir).is_ok()
                })?;
                let written = Written(dir);
                tree.write_to(&written.0).ok()?;
                Some(written)
            })
            .as_ref()
            .map(|w| w.0.clone())
    }

    /// Whether this is the live machine: the real `/`, not a captured tree.
    pub fn is_live(&self) -> bool {
        !self.is_in_memory() && self.root == Path::new("/")
    }

    /// Whether the tree is in memory (a sample or a bundle) rather than a directory.
    pub fn is_in_memory(&self) -> bool {
        matches!(self.fs, Fs::Memory(_))
    }

    /// A vendor runtime `family` opened (its library, loaded once), for that family's plugin to
    /// read instead of a recording: see [`Vendor::open_live`](crate::Vendor::open_live).
    pub fn with_runtime(mut self, family: &'static str, runtime: Arc<dyn std::any::Any + Send + Sync>) -> Host {
        self.runtimes.insert(family, runtime);
        self
    }

    /// The runtime `family` attached, if any.
    pub fn runtime(&self, family: &str) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.runtimes.get(family).map(|r| &**r)
    }

    pub fn with_net(mut self, net: NetConfig) -> Host {
        self.net = net;
        self
    }

    /// A Kubernetes downward-API labels file (`key="value"` lines) naming this node's domains.
    pub fn with_labels_file(mut self, path: Option<PathBuf>) -> Host {
        self.labels_file = path;
        self
    }

    pub fn net(&self) -> &NetConfig {
        &self.net
    }

    /// One HTTP request to a metadata server, within what is left of the network budget (the
    /// budget starts with the first request and covers every request of this host).
    pub fn http(&self, method: &str, url: &str, headers: &[(&str, &str)]) -> Result<String, crate::net::NetError> {
        if !self.net.enabled {
            return Err(crate::net::NetError::Disabled);
        }
        let deadline = *self.net_deadline.get_or_init(|| Instant::now() + self.net.budget);
        crate::net::request(method, url, headers, deadline)
    }

    pub fn labels_file(&self) -> Option<&Path> {
        self.labels_file.as_deref()
    }

    /// The target of a symlink exactly as stored (for copying it), `None` if not a symlink.
    pub fn raw_link(&self, path: &Path) -> Option<PathBuf> {
        self.fs.read_link(path)
    }

    /// Whether a path is a directory (following symlinks).
    pub fn is_dir(&self, path: &Path) -> bool {
        self.fs.is_dir(path)
    }

    /// Whether a path exists in the tree (following symlinks).
    pub fn exists(&self, path: &Path) -> bool {
        self.fs.exists(path)
    }

    /// Reads a whole file of up to `limit` bytes as text (`None` when missing; warns otherwise).
    pub fn read_text(&self, path: &Path, limit: u64, source: &str, warnings: &mut Vec<Warning>) -> Option<String> {
        match self.fs.read(path, limit).and_then(utf8) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                warnings.push(self.warning(source, path, format!("unreadable: {e}")));
                None
            }
        }
    }

    /// Sets the environment snapshot plugins may consult (`TPU_*`, `NVIDIA_VISIBLE_DEVICES`...).
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Host {
        self.env = env;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The whole environment snapshot (empty for a capture).
    pub fn env_vars(&self) -> &BTreeMap<String, String> {
        &self.env
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
        self.attr_text(path, self.fs.read(path, MAX_ATTR_BYTES), source, warnings)
    }

    /// [`Host::read_attr`] for several files of one directory, read in one pass.
    pub fn read_attrs(
        &self,
        dir: &Path,
        names: &[&str],
        source: &str,
        warnings: &mut Vec<Warning>,
    ) -> Vec<Option<String>> {
        let results = self.fs.read_in_dir(dir, names, MAX_ATTR_BYTES);
        names
            .iter()
            .zip(results)
            .map(|(name, result)| self.attr_text(&dir.join(name), result, source, warnings))
            .collect()
    }

    fn attr_text(
        &self,
        path: &Path,
        read: io::Result<Vec<u8>>,
        source: &str,
        warnings: &mut Vec<Warning>,
    ) -> Option<String> {
        match read.and_then(utf8) {
            // Some kernels end an attribute with a NUL after the newline (hwloc's capture of a
            // Kunpeng 920 shows it); readers in C never see it.
            Ok(text) => Some(text.trim_end_matches('\0').trim().to_owned()),
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
        let text = self.read_attr(path, source, warnings);
        self.parse_text(path, text, source, warnings, parse)
    }

    /// Parses an attribute already read from `path`; garbage becomes a warning.
    pub fn parse_text<T>(
        &self,
        path: &Path,
        text: Option<String>,
        source: &str,
        warnings: &mut Vec<Warning>,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let text = text?;
        let value = parse(&text);
        if value.is_none() {
            let shown: String = text.chars().take(60).collect();
            warnings.push(self.warning(source, path, format!("unparsable value {shown:?}")));
        }
        value
    }

    /// Sorted names in a directory; a missing directory is empty, other errors warn.
    pub fn list_dir(&self, path: &Path, source: &str, warnings: &mut Vec<Warning>) -> Vec<String> {
        match self.fs.read_dir(path) {
            Ok(mut names) => {
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
        let target = self.fs.read_link(path)?;
        if target.is_absolute() {
            if let Fs::Real(Some(confined)) = &self.fs {
                confined.note_escape(path);
            }
        }
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

    /// In-machine paths whose symlinks led out of a captured root (each was resolved inside
    /// it instead); empty for `/` and for in-memory trees, whose absolute links are in-machine.
    pub fn root_escapes(&self) -> Vec<String> {
        match &self.fs {
            Fs::Real(Some(confined)) => confined.escapes().iter().map(|p| self.display(p)).collect(),
            _ => Vec::new(),
        }
    }

    pub fn warning(&self, source: &str, path: &Path, message: String) -> Warning {
        Warning { source: source.to_owned(), path: Some(self.display(path)), message }
    }
}

fn utf8(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}
