//! Per-path transfer metrics (counters and a fixed-bucket latency histogram) and their
//! Prometheus text exposition. Lock-free atomics: recording costs a few relaxed adds.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::backend::Path;
use crate::shm::PoolStats;

/// Upper bounds of the latency buckets, in seconds.
pub const BUCKETS: [f64; 16] =
    [1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0, 5.0];

#[derive(Debug, Default)]
struct PathMetrics {
    transfers: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    sum_ns: AtomicU64,
    /// Non-cumulative counts; the last slot is +Inf.
    buckets: [AtomicU64; BUCKETS.len() + 1],
}

/// A snapshot of one path's metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct PathStats {
    pub path: Path,
    pub transfers: u64,
    pub bytes: u64,
    pub errors: u64,
    pub latency_sum_s: f64,
    /// Cumulative counts per bucket of `BUCKETS`, then +Inf.
    pub buckets: Vec<u64>,
}

/// Metrics of every path of one process.
#[derive(Debug, Default)]
pub struct Metrics {
    paths: [PathMetrics; Path::ALL.len()],
}

impl Metrics {
    /// Records one successful transfer.
    pub fn transfer(&self, path: Path, bytes: u64, took: Duration) {
        let m = &self.paths[path as usize];
        m.transfers.fetch_add(1, Relaxed);
        m.bytes.fetch_add(bytes, Relaxed);
        m.sum_ns.fetch_add(took.as_nanos() as u64, Relaxed);
        let s = took.as_secs_f64();
        let slot = BUCKETS.iter().position(|b| s <= *b).unwrap_or(BUCKETS.len());
        m.buckets[slot].fetch_add(1, Relaxed);
    }

    /// Records one failed transfer.
    pub fn error(&self, path: Path) {
        self.paths[path as usize].errors.fetch_add(1, Relaxed);
    }

    /// A snapshot of every path.
    pub fn snapshot(&self) -> Vec<PathStats> {
        Path::ALL
            .iter()
            .map(|&path| {
                let m = &self.paths[path as usize];
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
                    transfers: m.transfers.load(Relaxed),
                    bytes: m.bytes.load(Relaxed),
                    errors: m.errors.load(Relaxed),
                    latency_sum_s: m.sum_ns.load(Relaxed) as f64 / 1e9,
                    buckets,
                }
            })
            .collect()
    }

    /// The Prometheus text exposition (format 0.0.4) of these metrics and the pool.
    pub fn render_prometheus(&self, pool: Option<PoolStats>) -> String {
        let snap = self.snapshot();
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, get: &dyn Fn(&PathStats) -> u64| {
            let _ = writeln!(out, "# HELP accel_transport_{name} {help}\n# TYPE accel_transport_{name} counter");
            for s in &snap {
                let _ = writeln!(out, "accel_transport_{name}{{path=\"{}\"}} {}", s.path.name(), get(s));
            }
        };
        counter(&mut out, "transfers_total", "Completed transfers.", &|s| s.transfers);
        counter(&mut out, "bytes_total", "Bytes delivered.", &|s| s.bytes);
        counter(&mut out, "errors_total", "Failed transfers.", &|s| s.errors);
        let _ = writeln!(
            out,
            "# HELP accel_transport_latency_seconds Time to deliver a buffer.\n\
             # TYPE accel_transport_latency_seconds histogram"
        );
        for s in &snap {
            let p = s.path.name();
            for (le, n) in BUCKETS.iter().zip(&s.buckets) {
                let _ = writeln!(out, "accel_transport_latency_seconds_bucket{{path=\"{p}\",le=\"{le}\"}} {n}");
            }
            let _ = writeln!(out, "accel_transport_latency_seconds_bucket{{path=\"{p}\",le=\"+Inf\"}} {}", s.transfers);
            let _ = writeln!(out, "accel_transport_latency_seconds_sum{{path=\"{p}\"}} {}", s.latency_sum_s);
            let _ = writeln!(out, "accel_transport_latency_seconds_count{{path=\"{p}\"}} {}", s.transfers);
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
        let shm = m.snapshot().into_iter().find(|s| s.path == Path::Shm).unwrap();
        assert_eq!((shm.transfers, shm.bytes), (2, 8192));
        assert_eq!(shm.buckets[1], 1); // le=2.5e-5
        assert_eq!(*shm.buckets.last().unwrap(), 2);
        let text = m.render_prometheus(None);
        assert!(text.contains("accel_transport_latency_seconds_bucket{path=\"shm\",le=\"0.000025\"} 1"), "{text}");
        assert!(text.contains("accel_transport_latency_seconds_bucket{path=\"shm\",le=\"+Inf\"} 2"));
        assert!(text.contains("accel_transport_errors_total{path=\"tcp\"} 1"));
    }
}
