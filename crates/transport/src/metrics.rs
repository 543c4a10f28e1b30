//! Per-path, per-role transfer metrics (counters and a fixed-bucket latency histogram) and their
//! Prometheus text exposition. Lock-free atomics: recording costs a few relaxed adds.
//!
//! Every series carries two bounded labels: `path` (one of `Path::ALL`) and `role`: `fetch`
//! counts what this process received as a consumer, `serve` what it sent as an owner. An owner
//! sees only the reads that go through it (its TCP server); `local` and `shm` reads touch the
//! owner's memory directly, so only their consumer counts them.
//!
//! Only enabled paths have series: `local`, `shm` and `tcp` always; `nixl` and `cuda_ipc` once
//! the process found their backend working (`Metrics::enable`). A path that cannot run here
//! emits nothing, rather than zeros that would read as "real but idle".

use std::fmt::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::path::Path;
use crate::shm::PoolStats;

/// Upper bounds of the latency buckets, in seconds.
pub const BUCKETS: [f64; 16] =
    [1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0, 5.0];

/// Which end of a transfer this process was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The consumer: it asked for a buffer and received it.
    Fetch = 0,
    /// The owner: it sent one of its published buffers to a consumer.
    Serve = 1,
}

impl Role {
    /// Both roles, indexed by their discriminant.
    pub const ALL: [Role; 2] = [Role::Fetch, Role::Serve];

    /// Stable lowercase name: the `role` metric label.
    pub fn name(self) -> &'static str {
        match self {
            Role::Fetch => "fetch",
            Role::Serve => "serve",
        }
    }
}

#[derive(Debug, Default)]
struct PathMetrics {
    transfers: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    sum_ns: AtomicU64,
    /// Non-cumulative counts; the last slot is +Inf.
    buckets: [AtomicU64; BUCKETS.len() + 1],
}

/// A snapshot of one path's metrics in one role.
#[derive(Clone, Debug, PartialEq)]
pub struct PathStats {
    pub path: Path,
    pub role: Role,
    pub transfers: u64,
    pub bytes: u64,
    pub errors: u64,
    pub latency_sum_s: f64,
    /// Cumulative counts per bucket of `BUCKETS`, then +Inf.
    pub buckets: Vec<u64>,
}

/// Metrics of every path and role of one process.
#[derive(Debug)]
pub struct Metrics {
    paths: [[PathMetrics; Path::ALL.len()]; Role::ALL.len()],
    /// Bit per `Path` discriminant: which paths have series.
    enabled: AtomicU32,
    /// Automatic path choices, per path and reason code (`route::Reason`).
    choices: [[AtomicU64; crate::route::Reason::ALL.len()]; Path::ALL.len()],
}

impl Default for Metrics {
    fn default() -> Self {
        let always = [Path::Local, Path::Shm, Path::Tcp].iter().fold(0, |m, p| m | 1 << *p as u32);
        Metrics { paths: Default::default(), enabled: AtomicU32::new(always), choices: Default::default() }
    }
}

impl Metrics {
    /// Gives `path` its series (its backend works in this process).
    pub fn enable(&self, path: Path) {
        self.enabled.fetch_or(1 << path as u32, Relaxed);
    }

    /// Whether `path` has series.
    pub fn enabled(&self, path: Path) -> bool {
        self.enabled.load(Relaxed) & (1 << path as u32) != 0
    }

    /// Counts one automatic choice of `path` for `reason`.
    pub fn chose(&self, path: Path, reason: crate::route::Reason) {
        self.choices[path as usize][reason as usize].fetch_add(1, Relaxed);
    }

    /// Automatic choices made so far: (path, reason, count), non-zero only.
    pub fn choices(&self) -> Vec<(Path, crate::route::Reason, u64)> {
        let mut out = Vec::new();
        for p in Path::ALL {
            for r in crate::route::Reason::ALL {
                let n = self.choices[p as usize][r as usize].load(Relaxed);
                if n > 0 {
                    out.push((p, r, n));
                }
            }
        }
        out
    }

    fn slot(&self, role: Role, path: Path) -> &PathMetrics {
        &self.paths[role as usize][path as usize]
    }

    /// Records one successful transfer in `role`.
    pub fn record(&self, role: Role, path: Path, bytes: u64, took: Duration) {
        let m = self.slot(role, path);
        m.transfers.fetch_add(1, Relaxed);
        m.bytes.fetch_add(bytes, Relaxed);
        m.sum_ns.fetch_add(took.as_nanos() as u64, Relaxed);
        let s = took.as_secs_f64();
        let slot = BUCKETS.iter().position(|b| s <= *b).unwrap_or(BUCKETS.len());
        m.buckets[slot].fetch_add(1, Relaxed);
    }

    /// Records one failure in `role`.
    pub fn record_error(&self, role: Role, path: Path) {
        self.slot(role, path).errors.fetch_add(1, Relaxed);
    }

    /// Records one successful transfer this process fetched (consumer side).
    pub fn transfer(&self, path: Path, bytes: u64, took: Duration) {
        self.record(Role::Fetch, path, bytes, took);
    }

    /// Records one failed fetch (consumer side).
    pub fn error(&self, path: Path) {
        self.record_error(Role::Fetch, path);
    }

    /// Records one buffer this process served as its owner.
    pub fn served(&self, path: Path, bytes: u64, took: Duration) {
        self.record(Role::Serve, path, bytes, took);
    }

    /// Records one failure while serving (a failed handshake, an unknown buffer, a peer that
    /// hung up mid-stream, a malformed request, a refused connection).
    pub fn serve_error(&self, path: Path) {
        self.record_error(Role::Serve, path);
    }

    /// A snapshot of one path in one role.
    pub fn get(&self, role: Role, path: Path) -> PathStats {
        let m = self.slot(role, path);
        let mut acc = 0;
        let buckets = m
            .buckets
            .iter()
            .map(|b| {
                acc += b.load(Relaxed);
                acc
            })
            .collect();
        PathStats {
            path,
            role,
            transfers: m.transfers.load(Relaxed),
            bytes: m.bytes.load(Relaxed),
            errors: m.errors.load(Relaxed),
            latency_sum_s: m.sum_ns.load(Relaxed) as f64 / 1e9,
            buckets,
        }
    }

    /// A snapshot of every enabled path in every role (fetch first, then serve).
    pub fn snapshot(&self) -> Vec<PathStats> {
        Role::ALL
            .iter()
            .flat_map(|&role| Path::ALL.iter().filter(|p| self.enabled(**p)).map(move |&path| self.get(role, path)))
            .collect()
    }

    /// The Prometheus text exposition (format 0.0.4) of these metrics and the pool: one
    /// HELP/TYPE per family, every series labelled `path` and `role`.
    pub fn render_prometheus(&self, pool: Option<PoolStats>) -> String {
        let snap = self.snapshot();
        let mut out = String::new();
        let labels = |s: &PathStats| format!("path=\"{}\",role=\"{}\"", s.path.name(), s.role.name());
        let counter = |out: &mut String, name: &str, help: &str, get: &dyn Fn(&PathStats) -> u64| {
            let _ = writeln!(out, "# HELP accel_transport_{name} {help}\n# TYPE accel_transport_{name} counter");
            for s in &snap {
                let _ = writeln!(out, "accel_transport_{name}{{{}}} {}", labels(s), get(s));
            }
        };
        counter(
            &mut out,
            "transfers_total",
            "Completed transfers (role fetch: received as a consumer; serve: sent as the owner).",
            &|s| s.transfers,
        );
        counter(&mut out, "bytes_total", "Bytes received (role fetch) or sent (role serve).", &|s| s.bytes);
        counter(&mut out, "errors_total", "Failed transfers (role serve: also failed handshakes).", &|s| s.errors);
        let _ = writeln!(
            out,
            "# HELP accel_transport_latency_seconds Time to deliver a buffer (role serve: from the request to the last byte sent).\n\
             # TYPE accel_transport_latency_seconds histogram"
        );
        for s in &snap {
            let l = labels(s);
            for (le, n) in BUCKETS.iter().zip(&s.buckets) {
                let _ = writeln!(out, "accel_transport_latency_seconds_bucket{{{l},le=\"{le}\"}} {n}");
            }
            let _ = writeln!(out, "accel_transport_latency_seconds_bucket{{{l},le=\"+Inf\"}} {}", s.transfers);
            let _ = writeln!(out, "accel_transport_latency_seconds_sum{{{l}}} {}", s.latency_sum_s);
            let _ = writeln!(out, "accel_transport_latency_seconds_count{{{l}}} {}", s.transfers);
        }
        let choices = self.choices();
        if !choices.is_empty() {
            let _ = writeln!(
                out,
                "# HELP accel_transport_path_choices_total Automatic path choices, by the path and the topology fact behind it.\n\
                 # TYPE accel_transport_path_choices_total counter"
            );
            for (p, r, n) in choices {
                let _ = writeln!(
                    out,
                    "accel_transport_path_choices_total{{path=\"{}\",reason=\"{}\"}} {n}",
                    p.name(),
                    r.name()
                );
            }
        }
        if let Some(pool) = pool {
            let _ = writeln!(
                out,
                "# HELP accel_transport_pool_bytes Shared memory of this owner: live (referenced), idle (pooled), held (freed, still mapped).\n\
                 # TYPE accel_transport_pool_bytes gauge\n\
                 accel_transport_pool_bytes{{state=\"live\"}} {}\n\
                 accel_transport_pool_bytes{{state=\"idle\"}} {}\n\
                 accel_transport_pool_bytes{{state=\"held\"}} {}\n\
                 # HELP accel_transport_pool_limit_bytes Bound on the shared memory of this owner.\n\
                 # TYPE accel_transport_pool_limit_bytes gauge\n\
                 accel_transport_pool_limit_bytes {}\n\
                 # HELP accel_transport_live_buffers Outstanding references of this owner.\n\
                 # TYPE accel_transport_live_buffers gauge\n\
                 accel_transport_live_buffers {}",
                pool.live_bytes, pool.idle_bytes, pool.held_bytes, pool.limit_bytes, pool.live_buffers
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative_and_rendered() {
        let m = Metrics::default();
        m.transfer(Path::Shm, 4096, Duration::from_micros(20));
        m.transfer(Path::Shm, 4096, Duration::from_secs(30));
        m.error(Path::Tcp);
        let shm = m.get(Role::Fetch, Path::Shm);
        assert_eq!((shm.transfers, shm.bytes), (2, 8192));
        assert_eq!(shm.buckets[1], 1); // le=2.5e-5
        assert_eq!(*shm.buckets.last().unwrap(), 2);
        let text = m.render_prometheus(None);
        assert!(
            text.contains("accel_transport_latency_seconds_bucket{path=\"shm\",role=\"fetch\",le=\"0.000025\"} 1"),
            "{text}"
        );
        assert!(text.contains("accel_transport_latency_seconds_bucket{path=\"shm\",role=\"fetch\",le=\"+Inf\"} 2"));
        assert!(text.contains("accel_transport_errors_total{path=\"tcp\",role=\"fetch\"} 1"));
    }

    #[test]
    fn roles_are_separate_series_of_one_family() {
        let m = Metrics::default();
        m.served(Path::Tcp, 1000, Duration::from_millis(2));
        m.serve_error(Path::Tcp);
        m.transfer(Path::Tcp, 10, Duration::from_millis(1));
        let (serve, fetch) = (m.get(Role::Serve, Path::Tcp), m.get(Role::Fetch, Path::Tcp));
        assert_eq!((serve.transfers, serve.bytes, serve.errors), (1, 1000, 1));
        assert_eq!((fetch.transfers, fetch.bytes, fetch.errors), (1, 10, 0));
        assert_eq!(m.snapshot().len(), 3 * Role::ALL.len(), "local, shm and tcp until another path is enabled");
        assert!(!m.render_prometheus(None).contains("path=\"nixl\""), "a path not enabled emits no series");
        m.enable(Path::Nixl);
        assert_eq!(m.snapshot().len(), 4 * Role::ALL.len());
        m.chose(Path::Shm, crate::route::Reason::SameHost);
        let text = m.render_prometheus(Some(PoolStats::default()));
        assert!(text.contains("accel_transport_bytes_total{path=\"tcp\",role=\"serve\"} 1000"), "{text}");
        assert!(text.contains("accel_transport_errors_total{path=\"tcp\",role=\"serve\"} 1"));
        assert!(text.contains("accel_transport_latency_seconds_count{path=\"tcp\",role=\"serve\"} 1"));
        assert!(text.contains("accel_transport_bytes_total{path=\"nixl\",role=\"fetch\"} 0"));
        assert!(text.contains("accel_transport_path_choices_total{path=\"shm\",reason=\"same_host\"} 1"), "{text}");
        // Valid exposition: each family has exactly one HELP and one TYPE, before its samples,
        // and every sample belongs to a declared family.
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(!declared.contains(&name.to_string()), "{name} declared twice");
                declared.push(name.to_string());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
                assert_eq!(declared.last().map(String::as_str), Some(family), "{line} outside its family");
            }
        }
        assert_eq!(text.matches("# HELP ").count(), declared.len());
    }
}
