//! Transport metrics of the node's processes. A process cannot be scraped itself (Ray workers
//! come and go and open no HTTP port), so each one that wants to be seen writes its
//! `accel.transport.prometheus()` text to `<dir>/accel-transport-<pid>.prom`
//! (`accel.transport.write_metrics(dir)`, like node_exporter's textfile collector). The agent
//! serves the files of processes that are still alive at `/metrics/transport`, every series
//! labelled with its `pid`; a dead process's file is skipped (the agent is read-only and never
//! deletes it).
//!
//! Only files accel wrote are read: regular files owned by the agent's own user, opened without
//! following a symbolic link and without blocking (a FIFO answers at once and is skipped), at
//! most [`MAX_FILE`] bytes each and [`MAX_TOTAL`] in all. Anything else is skipped and counted
//! in `accel_transport_files_skipped{reason}`, never read.

use std::collections::BTreeMap;
use std::path::Path;

use crate::files::{self, Refused, Rules};

/// Largest file read per process; a larger one is skipped whole (a cut file would cut a line).
pub const MAX_FILE: u64 = 1 << 20;
/// Most bytes read from all files of one scrape.
pub const MAX_TOTAL: u64 = 16 << 20;

/// Why a file was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Skip {
    Refused(Refused),
    /// The scrape already read [`MAX_TOTAL`] bytes.
    OverTotal,
    NotUtf8,
}

impl Skip {
    fn label(self) -> &'static str {
        match self {
            Skip::Refused(Refused::NotRegular) => "not_regular",
            Skip::Refused(Refused::NotOwner) => "not_owner",
            Skip::Refused(Refused::TooLarge) => "too_large",
            Skip::Refused(Refused::Unreadable) => "unreadable",
            Skip::OverTotal => "over_total",
            Skip::NotUtf8 => "not_utf8",
        }
    }
}

/// The merged exposition (Prometheus text 0.0.4) of every live process's file in `dir`.
/// `alive(pid)` says whether a process still runs (`/proc/<pid>` on the live machine).
pub fn collect(dir: &Path, alive: &dyn Fn(u32) -> bool) -> String {
    collect_as(dir, alive, files::own_uid())
}

/// [`collect`], reading only files owned by `uid`.
pub fn collect_as(dir: &Path, alive: &dyn Fn(u32) -> bool, uid: u32) -> String {
    let Ok(entries) = std::fs::read_dir(dir) else { return String::new() };
    let mut files: Vec<(u32, std::path::PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid: u32 = name.strip_prefix("accel-transport-")?.strip_suffix(".prom")?.parse().ok()?;
            Some((pid, e.path()))
        })
        .filter(|(pid, _)| alive(*pid))
        .collect();
    files.sort();
    // family -> (HELP/TYPE lines, samples); a family's lines must stay together.
    let mut families: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut skipped: BTreeMap<Skip, u32> = BTreeMap::new();
    let mut total = 0u64;
    for (pid, path) in files {
        let budget = MAX_TOTAL - total;
        let read = files::read(&path, Rules { max: MAX_FILE.min(budget), owner: Some(uid), follow_links: false });
        let text = match read {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => {
                    *skipped.entry(Skip::NotUtf8).or_default() += 1;
                    continue;
                }
            },
            Err(Refused::TooLarge) if budget < MAX_FILE => {
                *skipped.entry(Skip::OverTotal).or_default() += 1;
                continue;
            }
            Err(why) => {
                *skipped.entry(Skip::Refused(why)).or_default() += 1;
                continue;
            }
        };
        total += text.len() as u64;
        let mut family = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ").or_else(|| line.strip_prefix("# TYPE ")) {
                family = rest.split_whitespace().next().unwrap_or("").to_owned();
                let entry = families.entry(family.clone()).or_default();
                if !entry.0.contains(line) {
                    entry.0.push_str(line);
                    entry.0.push('\n');
                }
                continue;
            }
            if line.is_empty() || line.starts_with('#') || !valid_sample(line) {
                continue;
            }
            let labelled = match line.find('{') {
                Some(i) if line[..i].bytes().all(name_byte) => {
                    format!("{}{{pid=\"{pid}\",{}", &line[..i], &line[i + 1..])
                }
                _ => match line.split_once(' ') {
                    Some((name, value)) if name.bytes().all(name_byte) => format!("{name}{{pid=\"{pid}\"}} {value}"),
                    _ => continue,
                },
            };
            let entry = families.entry(family.clone()).or_default();
            entry.1.push_str(&labelled);
            entry.1.push('\n');
        }
    }
    let mut out = String::new();
    for (_, (header, samples)) in families {
        if !samples.is_empty() {
            out.push_str(&header);
            out.push_str(&samples);
        }
    }
    if !skipped.is_empty() {
        out.push_str(
            "# HELP accel_transport_files_skipped Files in the transport directory the agent did not read, by reason\n",
        );
        out.push_str("# TYPE accel_transport_files_skipped gauge\n");
        for (why, n) in skipped {
            out.push_str(&format!("accel_transport_files_skipped{{reason=\"{}\"}} {n}\n", why.label()));
        }
    }
    out
}

fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

/// A sample line starts with a metric name and has a value after it.
fn valid_sample(line: &str) -> bool {
    line.as_bytes().first().is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_') && line.contains(' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_live_processes_with_a_pid_label() {
        let d = accel_testdata::TempDir::new("agent-transport");
        let text = "# HELP accel_transport_bytes_total Bytes.\n# TYPE accel_transport_bytes_total counter\naccel_transport_bytes_total{path=\"shm\",role=\"fetch\"} 7\n# TYPE accel_transport_pool_bytes gauge\naccel_transport_pool_bytes 3\n";
        std::fs::write(d.join("accel-transport-11.prom"), text).unwrap();
        std::fs::write(d.join("accel-transport-22.prom"), text).unwrap();
        std::fs::write(d.join("accel-transport-33.prom"), text).unwrap();
        std::fs::write(d.join("unrelated.prom"), "x 1\n").unwrap();
        let out = collect(&d, &|pid| pid != 33);
        assert_eq!(
            out,
            "# HELP accel_transport_bytes_total Bytes.\n# TYPE accel_transport_bytes_total counter\n\
             accel_transport_bytes_total{pid=\"11\",path=\"shm\",role=\"fetch\"} 7\n\
             accel_transport_bytes_total{pid=\"22\",path=\"shm\",role=\"fetch\"} 7\n\
             # TYPE accel_transport_pool_bytes gauge\naccel_transport_pool_bytes{pid=\"11\"} 3\naccel_transport_pool_bytes{pid=\"22\"} 3\n"
        );
        assert_eq!(collect(&d.join("missing"), &|_| true), "");
    }

    #[test]
    fn only_regular_files_of_our_own_user_are_read() {
        let d = accel_testdata::TempDir::new("agent-transport-skip");
        let me = rustix::process::geteuid().as_raw();
        std::fs::write(d.join("secret"), "secret_value 1\n").unwrap();
        std::os::unix::fs::symlink(d.join("secret"), d.join("accel-transport-1.prom")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("accel-transport-2.prom"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        std::fs::create_dir(d.join("accel-transport-3.prom")).unwrap();
        std::fs::write(d.join("accel-transport-4.prom"), "x".repeat(MAX_FILE as usize + 1)).unwrap();
        std::fs::write(d.join("accel-transport-5.prom"), "ok_total 5\n").unwrap();
        let out = collect_as(&d, &|_| true, me);
        assert_eq!(
            out,
            "ok_total{pid=\"5\"} 5\n\
             # HELP accel_transport_files_skipped Files in the transport directory the agent did not read, by reason\n\
             # TYPE accel_transport_files_skipped gauge\n\
             accel_transport_files_skipped{reason=\"not_regular\"} 3\n\
             accel_transport_files_skipped{reason=\"too_large\"} 1\n"
        );
        // Files of another user are not read either.
        let out = collect_as(&d, &|pid| pid == 5, me.wrapping_add(1));
        assert_eq!(out.lines().last(), Some("accel_transport_files_skipped{reason=\"not_owner\"} 1"), "{out}");
    }
}
