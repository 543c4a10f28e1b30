//! The plugin protocol's `metrics` verb: every executable `accel-plugin-<name>` in
//! `ACCEL_PLUGIN_DIR` is run as `accel-plugin-<name> metrics` (with `ACCEL_ROOT` set), and its
//! one JSON document on stdout is a [`Readings`]. Output over [`MAX_OUTPUT`] bytes, a run past
//! the timeout, a failed exit or malformed JSON is a warning naming the plugin, never a crash;
//! the plugin is killed when it overruns.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::readings::{Readings, PROTOCOL};

/// Largest document read from one plugin (SHARED-FORMATS: 4 MiB).
pub const MAX_OUTPUT: u64 = 4 << 20;
/// Prefix of a plugin executable's file name.
pub const PREFIX: &str = "accel-plugin-";

/// The plugin executables in `dir`, sorted by name.
pub fn find(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(PREFIX) && n.len() > PREFIX.len()))
        .filter(|e| is_executable(&e.path()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs one plugin's `metrics` verb. `Err` is the warning text.
pub fn run(plugin: &Path, root: &Path, timeout: Duration) -> Result<Readings, String> {
    let name = plugin.file_name().and_then(|n| n.to_str()).unwrap_or("plugin").to_owned();
    let mut child = Command::new(plugin)
        .arg("metrics")
        .env("ACCEL_ROOT", root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{name}: cannot start: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    // Read on a thread so a plugin that never closes stdout cannot hold the reader past the
    // timeout; one byte past the limit is enough to know it overran.
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let r = stdout.take(MAX_OUTPUT + 1).read_to_end(&mut buf);
        r.map(|_| buf)
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{name}: no answer within {} ms (killed)", timeout.as_millis()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("{name}: {e}")),
        }
    };
    // The child exited; its stdout is closed unless it passed it on to a grandchild, so the
    // reader finishes (a grandchild holding it open would block it: bounded by the size limit).
    let buf = reader.join().map_err(|_| format!("{name}: reader failed"))?.map_err(|e| format!("{name}: {e}"))?;
    if buf.len() as u64 > MAX_OUTPUT {
        return Err(format!("{name}: output larger than {} bytes, ignored", MAX_OUTPUT));
    }
    if !status.success() {
        return Err(format!("{name}: metrics exited with {status}"));
    }
    let readings: Readings =
        serde_json::from_slice(&buf).map_err(|e| format!("{name}: malformed metrics document: {e}"))?;
    if readings.protocol != PROTOCOL {
        return Err(format!("{name}: protocol {} not supported (this agent reads {PROTOCOL})", readings.protocol));
    }
    Ok(readings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn plugin(dir: &Path, name: &str, script: &str) -> PathBuf {
        let p = dir.join(format!("{PREFIX}{name}"));
        std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn tmpdir(tag: &str) -> accel_testdata::TempDir {
        accel_testdata::TempDir::new(&format!("agent-plugins-{tag}"))
    }

    #[test]
    fn reads_a_document_and_passes_the_root() {
        let dir = tmpdir("ok");
        let d = dir.path();
        let p = plugin(
            d,
            "demo",
            r#"[ "$1" = metrics ] || exit 3
printf '{"protocol":1,"devices":[{"pci":"0000:3b:00.0","power_watts":300.5,"uuid":"%s"}]}' "$ACCEL_ROOT""#,
        );
        std::fs::write(d.join("accel-plugin-notexec"), "x").unwrap();
        std::fs::write(d.join("other"), "x").unwrap();
        assert_eq!(find(d), vec![p.clone()]);
        let r = run(&p, Path::new("/the/root"), Duration::from_secs(5)).unwrap();
        assert_eq!(r.devices[0].power_watts, Some(300.5));
        assert_eq!(r.devices[0].uuid.as_deref(), Some("/the/root"));
    }

    #[test]
    fn failures_are_warnings_naming_the_plugin() {
        let dir = tmpdir("bad");
        let d = dir.path();
        let slow = plugin(d, "slow", "sleep 5");
        let t = Instant::now();
        let e = run(&slow, Path::new("/"), Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("accel-plugin-slow") && e.contains("killed"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3));
        let big = plugin(d, "big", "head -c 5000000 /dev/zero");
        assert!(run(&big, Path::new("/"), Duration::from_secs(10)).unwrap_err().contains("larger than"));
        let junk = plugin(d, "junk", "echo '{not json'");
        assert!(run(&junk, Path::new("/"), Duration::from_secs(5)).unwrap_err().contains("malformed"));
        let fail = plugin(d, "fail", "exit 4");
        assert!(run(&fail, Path::new("/"), Duration::from_secs(5)).unwrap_err().contains("exited"));
        let v2 = plugin(d, "v2", "echo '{\"protocol\":2}'");
        assert!(run(&v2, Path::new("/"), Duration::from_secs(5)).unwrap_err().contains("protocol 2"));
    }
}
