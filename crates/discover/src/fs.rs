//! The file tree discovery reads: the real filesystem under a root, or an in-memory tree loaded
//! from a capture bundle (the samples embedded in the binary, and captures in tests).
//!
//! A bundle is a small text format of our own, so embedding a machine needs no archive crate:
//!
//! ```text
//! accel-capture 1
//! D /sys/devices/system/node
//! F /sys/devices/system/node/online 4
//! 0-1
//!
//! L /sys/bus/pci/devices/0000:18:00.0 ../../../devices/pci0000:00/0000:00:01.0/0000:18:00.0
//! ```
//!
//! `F path len` is followed by exactly `len` bytes and a newline; `L path target` is a symlink;
//! `D path` an (otherwise empty) directory. Paths are absolute in-machine paths without spaces.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The first line of every bundle.
pub const BUNDLE_MAGIC: &str = "accel-capture 1";

/// The largest bundle read (the biggest real capture is a few MiB).
pub const MAX_BUNDLE_BYTES: u64 = 256 << 20;

/// Where [`crate::Host`] reads its files.
#[derive(Debug, Clone)]
pub enum Fs {
    /// The real filesystem; paths are already under the host's root. For a root other than
    /// `/` (a captured tree), every access resolves inside it ([`Confined`]).
    Real(Option<Arc<Confined>>),
    /// An in-memory tree; paths are absolute in-machine paths.
    Memory(Arc<MemTree>),
}

/// A root directory that every access stays inside. Paths are opened relative to the root's
/// descriptor with `openat2(RESOLVE_BENEATH)`; a symlink that leads out (an absolute target such
/// as `/sys/devices/pci0000:00`, or `..` above the root) is noted ([`Confined::escapes`], a
/// warning in the machine) and resolved inside the root instead (`RESOLVE_IN_ROOT`), the way
/// [`MemTree`] and `Host::resolve_link` treat absolute links: never a read of the live machine.
/// Where the kernel lacks `openat2` (before 5.6), each component is resolved here.
#[derive(Debug)]
pub struct Confined {
    root: PathBuf,
    fd: io::Result<rustix::fd::OwnedFd>,
    escapes: Mutex<BTreeSet<PathBuf>>,
}

impl Confined {
    fn new(root: &Path) -> Confined {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(io::Error::from);
        Confined { root: root.to_path_buf(), fd, escapes: Mutex::new(BTreeSet::new()) }
    }

    /// Paths (under the root) whose resolution met a symlink leading out of the root.
    pub fn escapes(&self) -> Vec<PathBuf> {
        self.escapes.lock().map(|e| e.iter().cloned().collect()).unwrap_or_default()
    }

    pub(crate) fn note_escape(&self, path: &Path) {
        if let Ok(mut e) = self.escapes.lock() {
            e.insert(path.to_path_buf());
        }
    }

    /// `path` relative to the root (`.` for the root itself); a path outside it is re-rooted.
    fn relative(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => PathBuf::from("."),
            Ok(rel) => rel.to_path_buf(),
            Err(_) => {
                self.note_escape(path);
                path.components().filter(|c| matches!(c, Component::Normal(_))).collect()
            }
        }
    }

    /// Opens `path` (under the root) without leaving the root.
    fn open(&self, path: &Path, flags: rustix::fs::OFlags) -> io::Result<rustix::fd::OwnedFd> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let root = self.fd.as_ref().map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
        let rel = self.relative(path);
        let flags = flags | OFlags::CLOEXEC;
        let resolve = ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(root, &rel, flags, Mode::empty(), resolve | ResolveFlags::BENEATH) {
            Err(rustix::io::Errno::XDEV) => {
                self.note_escape(path);
                Ok(rustix::fs::openat2(root, &rel, flags, Mode::empty(), resolve | ResolveFlags::IN_ROOT)?)
            }
            Err(rustix::io::Errno::NOSYS) => {
                let inside = self.resolve_by_hand(path, &rel)?;
                Ok(rustix::fs::openat(root, &inside, flags | OFlags::NOFOLLOW, Mode::empty())?)
            }
            other => Ok(other?),
        }
    }

    /// Resolves every component of `rel` (at most 40 symlinks) as `RESOLVE_IN_ROOT` does:
    /// absolute targets restart at the root and `..` stops there. The result is relative to
    /// the root and holds no symlink.
    fn resolve_by_hand(&self, path: &Path, rel: &Path) -> io::Result<PathBuf> {
        // Owned components, last first: a link's target replaces the link's own component.
        fn parts(p: &Path) -> Vec<std::ffi::OsString> {
            p.components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n.to_os_string()),
                    Component::ParentDir => Some("..".into()),
                    _ => None,
                })
                .rev()
                .collect()
        }
        let mut todo = parts(rel);
        let mut out = PathBuf::new();
        let mut hops = 0;
        while let Some(part) = todo.pop() {
            if part == ".." {
                if !out.pop() {
                    self.note_escape(path);
                }
                continue;
            }
            out.push(&part);
            let full = self.root.join(&out);
            if std::fs::symlink_metadata(&full)?.file_type().is_symlink() {
                hops += 1;
                if hops > 40 {
                    return Err(io::Error::other("too many levels of symbolic links"));
                }
                let target = std::fs::read_link(&full)?;
                out.pop();
                if target.is_absolute() {
                    self.note_escape(path);
                    out = PathBuf::new();
                }
                todo.extend(parts(&target));
            }
        }
        Ok(if out.as_os_str().is_empty() { PathBuf::from(".") } else { out })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File(Vec<u8>),
    Link(PathBuf),
    Dir,
}

/// An in-memory file tree: files, symlinks and directories by absolute path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemTree {
    entries: BTreeMap<PathBuf, Entry>,
    children: BTreeMap<PathBuf, BTreeSet<String>>,
}

/// Why a bundle could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("not an accel capture bundle (first line is not {BUNDLE_MAGIC:?})")]
    Magic,
    #[error("bundle line {line}: {message}")]
    Syntax { line: usize, message: String },
}

impl MemTree {
    pub fn new() -> MemTree {
        MemTree::default()
    }

    /// Adds a file (and its parent directories).
    pub fn add_file(&mut self, path: impl Into<PathBuf>, content: impl Into<Vec<u8>>) {
        let path = path.into();
        self.add_parents(&path);
        self.entries.insert(path, Entry::File(content.into()));
    }

    /// Adds a symlink whose target is relative to its directory, or absolute in the machine.
    pub fn add_link(&mut self, path: impl Into<PathBuf>, target: impl Into<PathBuf>) {
        let path = path.into();
        self.add_parents(&path);
        self.entries.insert(path, Entry::Link(target.into()));
    }

    pub fn add_dir(&mut self, path: impl Into<PathBuf>) {
        let path = path.into();
        self.add_parents(&path);
        self.entries.entry(path).or_insert(Entry::Dir);
    }

    /// Every file's path, in order (for mutating a capture in robustness checks).
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.entries.iter().filter(|(_, e)| matches!(e, Entry::File(_))).map(|(p, _)| p.clone()).collect()
    }

    fn add_parents(&mut self, path: &Path) {
        let mut child = path;
        while let Some(parent) = child.parent() {
            if let Some(name) = child.file_name().and_then(|n| n.to_str()) {
                self.children.entry(parent.to_path_buf()).or_default().insert(name.to_owned());
            }
            if parent.as_os_str().is_empty() || parent == Path::new("/") {
                break;
            }
            self.entries.entry(parent.to_path_buf()).or_insert(Entry::Dir);
            child = parent;
        }
    }

    /// Every path with its kind (`'F'` file, `'L'` symlink, `'D'` directory), in path order.
    pub fn paths(&self) -> impl Iterator<Item = (&Path, char)> {
        self.entries.iter().map(|(p, e)| {
            let kind = match e {
                Entry::File(_) => 'F',
                Entry::Link(_) => 'L',
                Entry::Dir => 'D',
            };
            (p.as_path(), kind)
        })
    }

    /// A file's bytes exactly as stored (no symlink is followed).
    pub fn file(&self, path: &Path) -> Option<&[u8]> {
        match self.entries.get(path) {
            Some(Entry::File(bytes)) => Some(bytes),
            _ => None,
        }
    }

    /// Removes a path and everything below it.
    pub fn remove(&mut self, path: &Path) {
        let below: Vec<PathBuf> = self
            .entries
            .range(path.to_path_buf()..)
            .map(|(p, _)| p)
            .take_while(|p| p.starts_with(path))
            .cloned()
            .collect();
        for p in below {
            self.entries.remove(&p);
            self.children.remove(&p);
        }
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) {
            if let Some(set) = self.children.get_mut(parent) {
                set.remove(name);
            }
        }
    }

    /// Reads a directory tree (a captured root) into memory: regular files, symlinks as they are
    /// written, directories; nothing else, and nothing past `limit` bytes of file content in
    /// all (an error: a capture that large is not read partly).
    pub fn from_dir(dir: &Path, limit: u64) -> io::Result<MemTree> {
        let mut tree = MemTree::new();
        let mut total = 0u64;
        let mut todo = vec![PathBuf::from("/")];
        while let Some(rel) = todo.pop() {
            let here = dir.join(rel.strip_prefix("/").unwrap_or(&rel));
            let mut entries: Vec<_> = std::fs::read_dir(&here)?.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let path = rel.join(e.file_name());
                let kind = e.file_type()?;
                if kind.is_symlink() {
                    tree.add_link(path, std::fs::read_link(e.path())?);
                } else if kind.is_dir() {
                    tree.add_dir(path.clone());
                    todo.push(path);
                } else if kind.is_file() {
                    let bytes = read_regular(&e.path(), limit.saturating_sub(total))?;
                    total += bytes.len() as u64;
                    if total >= limit {
                        return Err(io::Error::other(format!("{} holds more than {limit} bytes", dir.display())));
                    }
                    tree.add_file(path, bytes);
                }
            }
        }
        Ok(tree)
    }

    /// Writes the tree under `dir` (which must exist and be empty), so an external plugin can
    /// read it as its `ACCEL_ROOT`. An absolute link target (a path in the captured machine) is
    /// rewritten relative to the link, so nothing points out of `dir` into the live machine;
    /// a path that would leave `dir` (`..` in a name) is skipped.
    pub fn write_to(&self, dir: &Path) -> io::Result<()> {
        for (path, entry) in &self.entries {
            let rel: PathBuf = path.components().filter(|c| matches!(c, Component::Normal(_))).collect();
            if rel.as_os_str().is_empty() || path.components().any(|c| matches!(c, Component::ParentDir)) {
                continue;
            }
            let at = dir.join(&rel);
            match entry {
                Entry::Dir => std::fs::create_dir_all(&at)?,
                Entry::File(bytes) => {
                    if let Some(parent) = at.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(&at, bytes)?;
                }
                Entry::Link(target) => {
                    if let Some(parent) = at.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    let up = rel.components().count().saturating_sub(1);
                    let target = if target.is_absolute() {
                        let mut t: PathBuf = std::iter::repeat_n("..", up).collect();
                        t.extend(target.components().filter(|c| matches!(c, Component::Normal(_))));
                        t
                    } else {
                        // A relative target that climbs above `dir` would reach the live machine.
                        let mut depth = up as isize;
                        for c in target.components() {
                            match c {
                                Component::ParentDir => depth -= 1,
                                Component::Normal(_) => depth += 1,
                                _ => {}
                            }
                            if depth < 0 {
                                break;
                            }
                        }
                        if depth < 0 {
                            continue;
                        }
                        target.clone()
                    };
                    std::os::unix::fs::symlink(target, &at)?;
                }
            }
        }
        Ok(())
    }

    /// Number of files, links and directories.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parses a bundle. Syntax errors are errors: a bundle is written by our own tools.
    pub fn parse_bundle(bytes: &[u8]) -> Result<MemTree, BundleError> {
        let mut tree = MemTree::new();
        let mut pos = 0;
        let mut line_no = 0;
        let next_line = |pos: &mut usize| -> Option<&[u8]> {
            if *pos >= bytes.len() {
                return None;
            }
            let end = bytes[*pos..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| *pos + i);
            let line = &bytes[*pos..end];
            *pos = end + 1;
            Some(line)
        };
        if next_line(&mut pos) != Some(BUNDLE_MAGIC.as_bytes()) {
            return Err(BundleError::Magic);
        }
        line_no += 1;
        while let Some(line) = next_line(&mut pos) {
            line_no += 1;
            if line.is_empty() {
                continue;
            }
            let syntax = |message: &str| BundleError::Syntax { line: line_no, message: message.to_owned() };
            let text = std::str::from_utf8(line).map_err(|_| syntax("not UTF-8"))?;
            let mut parts = text.splitn(3, ' ');
            let (kind, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if !path.starts_with('/') {
                return Err(syntax("path must be absolute"));
            }
            match kind {
                "F" => {
                    let len: usize = parts.next().and_then(|l| l.parse().ok()).ok_or_else(|| syntax("bad length"))?;
                    let end = pos.checked_add(len).filter(|&e| e <= bytes.len()).ok_or_else(|| syntax("truncated"))?;
                    tree.add_file(path, &bytes[pos..end]);
                    pos = end + 1;
                }
                "L" => tree.add_link(path, parts.next().ok_or_else(|| syntax("link without target"))?),
                "D" => tree.add_dir(path),
                _ => return Err(syntax("unknown entry kind")),
            }
        }
        Ok(tree)
    }

    /// Writes the tree as a bundle (entries in path order, so output is stable).
    pub fn to_bundle(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(BUNDLE_MAGIC.as_bytes());
        out.push(b'\n');
        for (path, entry) in &self.entries {
            let p = path.display();
            match entry {
                Entry::File(bytes) => {
                    out.extend_from_slice(format!("F {p} {}\n", bytes.len()).as_bytes());
                    out.extend_from_slice(bytes);
                    out.push(b'\n');
                }
                Entry::Link(target) => out.extend_from_slice(format!("L {p} {}\n", target.display()).as_bytes()),
                Entry::Dir if !self.children.contains_key(path) => out.extend_from_slice(format!("D {p}\n").as_bytes()),
                Entry::Dir => {}
            }
        }
        out
    }

    /// Follows symlinks in every component of `path` (at most 40 hops).
    fn resolve(&self, path: &Path, follow_last: bool) -> Option<PathBuf> {
        let mut todo: Vec<Component> = path.components().collect();
        todo.reverse();
        let mut out = PathBuf::from("/");
        let mut hops = 0;
        while let Some(c) = todo.pop() {
            match c {
                Component::Normal(part) => {
                    out.push(part);
                    let last = todo.is_empty();
                    if let Some(Entry::Link(target)) = self.entries.get(&out) {
                        if last && !follow_last {
                            break;
                        }
                        hops += 1;
                        if hops > 40 {
                            return None;
                        }
                        out.pop();
                        if target.is_absolute() {
                            out = PathBuf::from("/");
                        }
                        todo.extend(target.components().collect::<Vec<_>>().into_iter().rev());
                    }
                }
                Component::ParentDir => {
                    out.pop();
                }
                _ => {}
            }
        }
        Some(out)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.resolve(path, true).and_then(|p| self.entries.get(&p)) {
            Some(Entry::File(bytes)) => Ok(bytes.clone()),
            Some(_) => Err(io::Error::other("is a directory")),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let resolved = self.resolve(path, true).ok_or(io::ErrorKind::NotFound)?;
        match self.entries.get(&resolved) {
            Some(Entry::Dir) => {
                Ok(self.children.get(&resolved).map(|c| c.iter().cloned().collect()).unwrap_or_default())
            }
            Some(_) => Err(io::Error::other("not a directory")),
            None if resolved == Path::new("/") => {
                Ok(self.children.get(&resolved).map(|c| c.iter().cloned().collect()).unwrap_or_default())
            }
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        let resolved = self.resolve(path, false)?;
        match self.entries.get(&resolved) {
            Some(Entry::Link(target)) => Some(target.clone()),
            _ => None,
        }
    }
}

impl Fs {
    /// The real filesystem under `root`: unconfined for `/`, confined to the root otherwise.
    pub(crate) fn real(root: &Path) -> Fs {
        if root == Path::new("/") {
            Fs::Real(None)
        } else {
            Fs::Real(Some(Arc::new(Confined::new(root))))
        }
    }

    pub(crate) fn read(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        match self {
            Fs::Real(None) => read_small(path, limit),
            Fs::Real(Some(c)) => {
                let file = reopen_regular(c.open(path, rustix::fs::OFlags::PATH)?)?;
                read_until_short(|buf| Ok(rustix::io::read(&file, buf)?), limit)
            }
            Fs::Memory(tree) => {
                let bytes = tree.read(path)?;
                if bytes.len() as u64 > limit {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "too large"));
                }
                Ok(bytes)
            }
        }
    }

    /// Reads several small files of one directory. On the real filesystem the directory is
    /// opened once and each file relative to it: on deep sysfs paths the per-file path walk is
    /// about half the cost of reading an attribute.
    pub(crate) fn read_in_dir(&self, dir: &Path, names: &[&str], limit: u64) -> Vec<io::Result<Vec<u8>>> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let opened = match self {
            Fs::Real(None) => rustix::fs::open(dir, flags, Mode::empty()).map_err(io::Error::from),
            Fs::Real(Some(c)) => c.open(dir, flags),
            Fs::Memory(_) => return names.iter().map(|name| self.read(&dir.join(name), limit)).collect(),
        };
        match opened {
            Ok(fd) => names
                .iter()
                .map(|name| match self {
                    Fs::Real(Some(_)) => read_small_at(&fd, name, limit, true).or_else(|e| {
                        // The name is a symlink leading out of its directory: resolve it from the root.
                        if e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) {
                            self.read(&dir.join(name), limit)
                        } else {
                            Err(e)
                        }
                    }),
                    _ => read_small_at(&fd, name, limit, false),
                })
                .collect(),
            Err(e) => names.iter().map(|_| Err(io::Error::new(e.kind(), e.to_string()))).collect(),
        }
    }

    pub(crate) fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        match self {
            Fs::Real(None) => Ok(std::fs::read_dir(path)?
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()),
            Fs::Real(Some(c)) => {
                use rustix::fs::OFlags;
                let fd = c.open(path, OFlags::RDONLY | OFlags::DIRECTORY)?;
                let mut names = Vec::new();
                for entry in rustix::fs::Dir::new(fd)? {
                    let entry = entry?;
                    if let Ok(name) = entry.file_name().to_str() {
                        if name != "." && name != ".." {
                            names.push(name.to_owned());
                        }
                    }
                }
                Ok(names)
            }
            Fs::Memory(tree) => tree.read_dir(path),
        }
    }

    pub(crate) fn read_link(&self, path: &Path) -> Option<PathBuf> {
        match self {
            Fs::Real(None) => std::fs::read_link(path).ok(),
            Fs::Real(Some(c)) => {
                use rustix::fs::OFlags;
                let (parent, name) = (path.parent()?, path.file_name()?);
                let dir = c.open(parent, OFlags::PATH | OFlags::DIRECTORY).ok()?;
                let target = rustix::fs::readlinkat(&dir, name, Vec::new()).ok()?;
                Some(PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(
                    target.into_bytes(),
                )))
            }
            Fs::Memory(tree) => tree.read_link(path),
        }
    }

    pub(crate) fn is_dir(&self, path: &Path) -> bool {
        match self {
            Fs::Real(None) => path.is_dir(),
            Fs::Real(Some(c)) => c.open(path, rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY).is_ok(),
            Fs::Memory(tree) => tree
                .resolve(path, true)
                .is_some_and(|p| matches!(tree.entries.get(&p), Some(Entry::Dir)) || tree.children.contains_key(&p)),
        }
    }

    pub(crate) fn exists(&self, path: &Path) -> bool {
        match self {
            Fs::Real(None) => path.exists(),
            Fs::Real(Some(c)) => c.open(path, rustix::fs::OFlags::PATH).is_ok(),
            Fs::Memory(tree) => tree.resolve(path, true).is_some_and(|p| tree.entries.contains_key(&p)),
        }
    }
}

/// Reads a file named outside any root (a bundle, a labels file, a capture's README): a FIFO,
/// a device node or a socket is an error at once, never a blocked read; at most `limit` bytes.
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_small(path, limit)
}

fn read_small(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    let file = rustix::fs::open(path, OFlags::RDONLY | NEVER_BLOCK, Mode::empty())?;
    require_regular(&file)?;
    read_until_short(|buf| Ok(rustix::io::read(&file, buf)?), limit)
}

/// Open flags for every read: a FIFO opens without waiting for a writer, and no terminal
/// becomes ours. The file is then checked to be a regular one before a byte is read.
const NEVER_BLOCK: rustix::fs::OFlags =
    rustix::fs::OFlags::NONBLOCK.union(rustix::fs::OFlags::NOCTTY).union(rustix::fs::OFlags::CLOEXEC);

/// Fails unless `fd` is a regular file: a FIFO would block a read forever, a device node or a
/// socket is not an attribute. Discovery turns the error into a warning naming the path.
fn require_regular(fd: &rustix::fd::OwnedFd) -> io::Result<()> {
    use rustix::fs::FileType;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode);
    let what = match kind {
        FileType::RegularFile => return Ok(()),
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Socket => "a socket",
        FileType::Directory => "a directory",
        _ => "a special file",
    };
    Err(io::Error::new(io::ErrorKind::InvalidData, format!("not a regular file ({what}): not read")))
}

/// Opens for reading the file behind an `O_PATH` descriptor, only if it is a regular file. In a
/// captured root nothing else is opened at all: opening a device node runs its driver (as
/// whoever runs accel, often root), and a FIFO blocks. The inode is pinned by the `O_PATH`
/// descriptor, so what is checked is what is opened (through `/proc/self/fd`).
fn reopen_regular(path_fd: rustix::fd::OwnedFd) -> io::Result<rustix::fd::OwnedFd> {
    use rustix::fd::AsRawFd;
    use rustix::fs::{Mode, OFlags};
    require_regular(&path_fd)?;
    let proc_path = format!("/proc/self/fd/{}", path_fd.as_raw_fd());
    let file = rustix::fs::open(proc_path.as_str(), OFlags::RDONLY | NEVER_BLOCK, Mode::empty())?;
    require_regular(&file)?;
    Ok(file)
}

/// Reads `name` relative to an open directory (`openat`): the kernel resolves one component,
/// not the whole path from the root.
/// Confined: a name that is a symlink leading out of `dir` fails with `EXDEV`.
fn read_small_at(dir: &rustix::fd::OwnedFd, name: &str, limit: u64, confined: bool) -> io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let file = if confined {
        // Opened as a path first, so a device node's driver never sees an open.
        let flags = OFlags::PATH | OFlags::CLOEXEC;
        let path_fd = match rustix::fs::openat2(
            dir,
            name,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        ) {
            // Without openat2, a symlinked name is resolved from the root (`EXDEV` says so):
            // `O_PATH | O_NOFOLLOW` opens the link itself, which is never read.
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::LOOP) => {
                let fd = rustix::fs::openat(dir, name, flags | OFlags::NOFOLLOW, Mode::empty())?;
                let kind = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
                if kind == rustix::fs::FileType::Symlink {
                    return Err(rustix::io::Errno::XDEV.into());
                }
                fd
            }
            other => other?,
        };
        reopen_regular(path_fd)?
    } else {
        let file = rustix::fs::openat(dir, name, OFlags::RDONLY | NEVER_BLOCK, Mode::empty())?;
        require_regular(&file)?;
        file
    };
    read_until_short(|buf| Ok(rustix::io::read(&file, buf)?), limit)
}

/// sysfs hands over a whole attribute in the first read, so a short read means the end: this
/// saves the extra read-to-EOF call per file, which is much of discovery's system time.
fn read_until_short(mut read: impl FnMut(&mut [u8]) -> io::Result<usize>, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; 4096];
    let mut len = 0;
    loop {
        let n = read(&mut bytes[len..])?;
        len += n;
        if len as u64 > limit {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("larger than {} KiB", limit / 1024)));
        }
        if n == 0 || len < bytes.len() {
            break;
        }
        bytes.resize(bytes.len() * 2, 0);
    }
    bytes.truncate(len);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_links() {
        let mut t = MemTree::new();
        t.add_file("/sys/devices/pci0000:00/0000:00:01.0/numa_node", "0\n");
        t.add_link("/sys/bus/pci/devices/0000:00:01.0", "../../../devices/pci0000:00/0000:00:01.0");
        t.add_link("/abs", "/sys/devices");
        t.add_dir("/proc/empty");
        let t2 = MemTree::parse_bundle(&t.to_bundle()).unwrap();
        assert_eq!(t, t2);
        assert_eq!(t.read(Path::new("/sys/bus/pci/devices/0000:00:01.0/numa_node")).unwrap(), b"0\n");
        assert_eq!(t.read_dir(Path::new("/abs")).unwrap(), vec!["pci0000:00"]);
        assert_eq!(t.read_dir(Path::new("/proc/empty")).unwrap(), Vec::<String>::new());
        assert!(t.read_link(Path::new("/sys/bus/pci/devices/0000:00:01.0")).is_some());
        assert_eq!(t.read(Path::new("/nope")).unwrap_err().kind(), io::ErrorKind::NotFound);
        let mut cyc = MemTree::new();
        cyc.add_link("/a", "/b");
        cyc.add_link("/b", "/a");
        assert!(cyc.read(Path::new("/a/x")).is_err());
    }

    #[test]
    fn bad_bundles() {
        assert_eq!(MemTree::parse_bundle(b"zip"), Err(BundleError::Magic));
        assert!(MemTree::parse_bundle(b"accel-capture 1\nF /a 99\nxx").is_err());
        assert!(MemTree::parse_bundle(b"accel-capture 1\nQ /a\n").is_err());
        assert!(MemTree::parse_bundle(b"accel-capture 1\nF a 1\nx\n").is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut input = b"accel-capture 1\n".to_vec();
            input.extend(bytes);
            let _ = MemTree::parse_bundle(&input);
        }
    }
}
