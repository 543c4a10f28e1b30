//! Test-only access to the captured machines in `test_data/hosts`: extracts a capture once
//! into the target directory and returns the root to point discovery at.

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod lstopo;

/// A fresh directory of a test's own under the system's temporary directory
/// (`accel-<name>-<pid>`), removed with everything in it when dropped, whether the test passes
/// or fails: a test run leaves nothing behind.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("accel-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The repository's `test_data/hosts` directory.
pub fn hosts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../test_data/hosts")
}

/// Names of every captured machine that ships a `capture.tar.*`.
pub fn hosts() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(hosts_dir())
        .expect("test_data/hosts exists")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("capture.tar.bz2").exists() || e.path().join("capture.tar.gz").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// The extracted root of a capture (the directory holding `sys/` and `proc/`).
///
/// Extraction goes to a fresh temporary directory that is then renamed into place, so test
/// binaries running in parallel never see a half-extracted tree.
pub fn root(name: &str) -> PathBuf {
    let src = hosts_dir().join(name);
    let archive = ["capture.tar.bz2", "capture.tar.gz"]
        .iter()
        .map(|f| src.join(f))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no capture archive for host {name}"));
    extract(&archive, "accel-hosts", name)
}

/// The repository's `test_data/hwloc-linux` directory: hwloc's own Linux test captures.
pub fn hwloc_linux_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../test_data/hwloc-linux")
}

/// Every capture of `test_data/hwloc-linux` (`NAME.tar.bz2`), by name.
pub fn hwloc_linux() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(hwloc_linux_dir())
        .expect("test_data/hwloc-linux exists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok()?.strip_suffix(".tar.bz2").map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// The extracted root of a `test_data/hwloc-linux` capture.
pub fn hwloc_linux_root(name: &str) -> PathBuf {
    extract(&hwloc_linux_dir().join(format!("{name}.tar.bz2")), "accel-hwloc-linux", name)
}

/// Extracts `archive` once into `target/<group>/<name>` and returns the root in it.
fn extract(archive: &Path, group: &str, name: &str) -> PathBuf {
    let base = target_dir().join(group);
    let dest = base.join(name);
    if let Some(root) = find_root(&dest) {
        return root;
    }
    std::fs::create_dir_all(&base).expect("create the extraction directory under target/");
    let tmp = base.join(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("create temp dir");
    let status = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(&tmp)
        .status()
        .expect("run tar (needed to extract captures)");
    assert!(status.success(), "tar failed on {}", archive.display());
    if std::fs::rename(&tmp, &dest).is_err() {
        // Another process won the race; use its copy.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    find_root(&dest).unwrap_or_else(|| panic!("capture {name} has no sys/ directory"))
}

/// The capture's root: the directory itself, or its single top-level directory.
fn find_root(dir: &Path) -> Option<PathBuf> {
    if dir.join("sys").is_dir() {
        return Some(dir.to_path_buf());
    }
    std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| p.join("sys").is_dir())
}

fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target")
}

/// The bytes of a capture bundle: `capture.bundle`, or `capture.bundle.gz` unpacked with `gzip`.
pub fn bundle(name: &str) -> Vec<u8> {
    let dir = hosts_dir().join(name);
    if let Ok(bytes) = std::fs::read(dir.join("capture.bundle")) {
        return bytes;
    }
    let gz = dir.join("capture.bundle.gz");
    let out = Command::new("gzip").arg("-dc").arg(&gz).output().expect("run gzip (needed to unpack captures)");
    assert!(out.status.success(), "gzip failed on {}", gz.display());
    out.stdout
}

/// Reads a started `accel agent`'s stderr (piped) until it says where it serves, 60 s at most,
/// then keeps draining it in a thread so the agent never blocks on a full pipe. Kills the agent
/// and panics when it never says.
pub fn agent_address(child: &mut std::process::Child) -> std::net::SocketAddr {
    use std::io::BufRead;
    let mut log = std::io::BufReader::new(child.stderr.take().expect("the agent's stderr is piped"));
    let mut line = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let addr = loop {
        line.clear();
        if log.read_line(&mut line).unwrap_or(0) == 0 || std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent never said where it serves: {line}");
        }
        let served = line.trim().strip_prefix("accel agent: serving ");
        if let Some(rest) = served.and_then(|r| r.strip_prefix("http://").or_else(|| r.strip_prefix("https://"))) {
            break rest.trim_end_matches('/').parse().expect("the agent prints an address");
        }
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut log, &mut std::io::sink());
    });
    addr
}

/// A test CA and a server certificate it signed for `localhost` and 127.0.0.1, made by Debian's
/// `openssl` in `dir`: (CA certificate, server certificate, server key with mode 0600), PEM.
pub fn tls_files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl (Debian's openssl)");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=accel test CA"],
    ]
    .concat());
    run(&[&["req"][..], &ec, &["-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(
        dir.join("node.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "node.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "node.pem",
        "-days",
        "2",
        "-extfile",
        "node.ext",
    ]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("node.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir.join("ca.pem"), dir.join("node.pem"), dir.join("node.key"))
}
