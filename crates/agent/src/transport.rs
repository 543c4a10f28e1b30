//! Transport metrics of the node's processes. A process cannot be scraped itself (Ray workers
//! come and go and open no HTTP port), so each one that wants to be seen writes its
//! `accel.transport.prometheus()` text to `<dir>/accel-transport-<pid>.prom`
//! (`accel.transport.write_metrics(dir)`, like node_exporter's textfile collector). The agent
//! serves the files of processes that are still alive at `/metrics/transport`, every series
//! labelled with its `pid`; a dead process's file is skipped (the agent is read-only and never
//! deletes it).

use std::collections::BTreeMap;
use std::path::Path;

/// Largest file read per process.
const MAX_FILE: u64 = 1 << 20;

/// The merged exposition (Prometheus text 0.0.4) of every live process's file in `dir`.
/// `alive(pid)` says whether a process still runs (`/proc/<pid>` on the live machine).
pub fn collect(dir: &Path, alive: &dyn Fn(u32) -> bool) -> String {
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
    for (pid, path) in files {
        let Ok(f) = std::fs::File::open(&path) else { continue };
        let mut text = String::new();
        if std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_FILE), &mut text).is_err() {
            continue;
        }
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
        let d = std::env::temp_dir().join(format!("accel-agent-transport-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
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
}
