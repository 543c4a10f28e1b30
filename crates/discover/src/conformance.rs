//! The conformance suite (docs/maturity.md, docs/contributing-hardware.md): every check that
//! applies to a plugin and a capture, run through the plugin protocol, so built-in and external
//! plugins are graded by one harness; and the maturity tier of each capability, on evidence.
//!
//! Tiers, per capability (`discover`, `topology`, `isolate`, `health`, `metrics`):
//! - **T3**: passes on at least one capture and fails on none;
//! - **T2**: T3, and at least one passing capture is real (a public or contributed capture whose
//!   provenance.toml says `real` and records its source, crate::provenance);
//! - **T1**: T2, and a `--live` run on real hardware with the plugin's devices passes, with the
//!   run's environment fingerprint attached;
//! - **none**: no capture holds the plugin's devices, the capability is not provided, or a check
//!   fails.
//!
//! Every check can fail: `crates/discover/tests/conformance_checks.rs` feeds each one a plugin or
//! capture that breaks it. Checks read the plugin's own answer (what discovery's validation
//! would otherwise repair or drop) against the capture it was given.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_model::{Accelerator, Machine, PathClassifier};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::exec::PluginError;
use crate::fs::MemTree;
use crate::provenance::{self, Provenance};
use crate::{discover, linux, Host, OpenOptions, Source, Vendor};

/// The capabilities a plugin is graded on.
pub const CAPABILITIES: [&str; 5] = ["discover", "topology", "isolate", "health", "metrics"];

/// Every check the suite runs, by capability: the table `conformance_checks.rs` must cover.
pub const CHECKS: [(&str, &str); 12] = [
    ("discover", "schema"),
    ("discover", "deterministic"),
    ("discover", "unique_ids"),
    ("discover", "in_pci_tree"),
    ("discover", "identified_or_warned"),
    ("discover", "robustness"),
    ("topology", "links_valid"),
    ("topology", "bandwidth_from_sku"),
    ("isolate", "visibility"),
    ("isolate", "bundle_order"),
    ("health", "health"),
    ("metrics", "metrics"),
];

/// A machine the suite runs on.
#[derive(Debug)]
pub struct Capture {
    pub name: String,
    pub host: Host,
    /// A real machine's capture (its provenance.toml says `real`), not a derived or synthetic one.
    pub real: bool,
    /// Its provenance: kind and summary.
    pub source: String,
    /// The live machine (`--live`).
    pub live: bool,
    /// The tree, when the capture is in memory: robustness checks mutate copies of it.
    tree: Option<Arc<MemTree>>,
}

impl Capture {
    /// An embedded sample.
    pub fn sample(name: &str, registry: accel_model::SkuRegistry) -> Option<Capture> {
        let tree = Arc::new(crate::samples::tree(name)?);
        let provenance = crate::samples::provenance(name)?.ok();
        let options = OpenOptions { registry, network: false, ..OpenOptions::default() };
        Some(Capture {
            name: name.to_owned(),
            host: Host::open(&Source::Sample(name.to_owned()), options).ok()?,
            real: is_real(provenance.as_ref()),
            source: source_line(provenance.as_ref()),
            live: false,
            tree: Some(tree),
        })
    }

    /// A capture on disk: a directory holding `sys/`, a `capture.bundle` file, or a directory
    /// holding one (`test_data/hosts/<name>`). Its provenance.toml (beside it or in its parent)
    /// says where it comes from. Opened like every other command opens a root (`Host::open`); the
    /// robustness check mutates an in-memory copy of the tree.
    pub fn path(path: &Path, registry: accel_model::SkuRegistry) -> Result<Capture, String> {
        // `examples/plugins/ascend/capture` is named `ascend`, `hosts/x/capture.bundle` is `x`.
        let named = if matches!(path.file_name().and_then(|n| n.to_str()), Some("capture" | "capture.bundle")) {
            path.parent().unwrap_or(path)
        } else {
            path
        };
        let name = named.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let provenance = read_provenance(path)?;
        let root = if path.is_file() {
            path.to_path_buf()
        } else if path.join("capture.bundle").is_file() && !path.join("sys").is_dir() {
            path.join("capture.bundle")
        } else if path.join("sys").is_dir() {
            path.to_path_buf()
        } else {
            return Err(format!("{} is neither a captured root (sys/) nor a capture bundle", path.display()));
        };
        let options = OpenOptions { registry, network: false, ..OpenOptions::default() };
        let host = Host::open(&Source::Root(root.clone()), options).map_err(|e| e.to_string())?;
        let tree = if root.is_file() {
            let bytes = crate::fs::read_regular(&root, crate::fs::MAX_BUNDLE_BYTES)
                .map_err(|e| format!("cannot read {}: {e}", root.display()))?;
            MemTree::parse_bundle(&bytes).map_err(|e| format!("{} is not a capture bundle: {e}", root.display()))?
        } else {
            MemTree::from_dir(&root, crate::fs::MAX_BUNDLE_BYTES)
                .map_err(|e| format!("cannot read {}: {e}", root.display()))?
        };
        Ok(Capture {
            name,
            host,
            real: is_real(provenance.as_ref()),
            source: source_line(provenance.as_ref()),
            live: false,
            tree: Some(Arc::new(tree)),
        })
    }

    /// The live machine.
    pub fn live(host: Host) -> Capture {
        Capture { name: "live".into(), host, real: true, source: "this machine".into(), live: true, tree: None }
    }
}

/// The `provenance.toml` beside a capture (in the directory, or beside the bundle file), if any;
/// one that does not parse is an error naming it, not a capture of unknown origin.
fn read_provenance(path: &Path) -> Result<Option<Provenance>, String> {
    let dir = if path.is_file() { path.parent().unwrap_or(path) } else { path };
    let candidates = [dir.join(provenance::FILE), dir.parent().map(|p| p.join(provenance::FILE)).unwrap_or_default()];
    let Some(file) = candidates.iter().find(|p| p.is_file()) else { return Ok(None) };
    let bytes = crate::fs::read_regular(file, 1 << 20).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8", file.display()))?;
    Provenance::parse(&text).map(Some).map_err(|e| format!("{}: {e}", file.display()))
}

/// What the report names as the capture's source: its kind and summary.
fn source_line(provenance: Option<&Provenance>) -> String {
    match provenance {
        Some(p) => format!("{}: {}", p.kind.as_str(), p.summary),
        None => "no provenance.toml: origin unknown".into(),
    }
}

/// A capture is evidence of a real machine only when its `provenance.toml` says `real` (which
/// requires a recorded source); a derived or synthetic one, or one with no provenance, is not.
fn is_real(provenance: Option<&Provenance>) -> bool {
    provenance.is_some_and(|p| p.kind == provenance::Kind::Real)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub capability: String,
    pub name: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// Every check of one plugin on one capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureResult {
    pub capture: String,
    pub real: bool,
    pub source: String,
    #[serde(default)]
    pub live: bool,
    pub devices: usize,
    pub checks: Vec<Check>,
}

/// A capability's tier and the evidence for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    /// `T1`, `T2`, `T3` or `none`.
    pub tier: String,
    pub evidence: String,
}

/// One plugin's results and grades.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginResult {
    pub name: String,
    /// `built-in` or `external`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub captures: Vec<CaptureResult>,
    pub tiers: BTreeMap<String, Grade>,
}

/// The suite's output (`accel conformance --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Format version of this report.
    pub report_version: u32,
    pub protocol: u64,
    pub plugins: Vec<PluginResult>,
    /// The environment the suite ran in (`accel env --json`), for reproducing a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Value>,
}

fn check(capability: &str, name: &str, status: Status, detail: impl Into<String>) -> Check {
    Check { capability: capability.into(), name: name.into(), status, detail: detail.into() }
}

fn pass(capability: &str, name: &str) -> Check {
    check(capability, name, Status::Pass, "")
}

/// How many mutated copies of each in-memory capture the robustness check discovers.
pub const MUTATIONS: usize = 16;
/// The same for an external plugin, each of whose runs writes the mutated tree out and starts
/// a process: fewer rounds, the same kinds of damage.
pub const EXTERNAL_MUTATIONS: usize = 6;

/// Runs the suite: every plugin of `plugins` named in `only` (all when empty) on every capture
/// where it finds devices. `external` names the plugins that are executables.
pub fn run(plugins: &[Box<dyn Vendor>], external: &[&str], only: &[String], captures: &[Capture]) -> Report {
    let mut results = Vec::new();
    let machines: Vec<Machine> = captures.iter().map(|c| discover(&c.host, plugins)).collect();
    for plugin in plugins.iter().filter(|p| only.is_empty() || only.iter().any(|o| o == p.id())) {
        let name = plugin.id();
        let is_external = external.contains(&name);
        let version = captures
            .first()
            .and_then(|c| plugin.call("version", &c.host, &Machine::new(Default::default()), &Value::Null).ok())
            .and_then(|v| v.get("version").and_then(Value::as_str).map(str::to_owned));
        let mut per_capture = Vec::new();
        for (capture, machine) in captures.iter().zip(&machines) {
            let devices: Vec<&Accelerator> = machine.accelerators.iter().filter(|a| a.plugin == name).collect();
            if devices.is_empty() {
                continue;
            }
            let mut checks = Vec::new();
            let rounds = if is_external { EXTERNAL_MUTATIONS } else { MUTATIONS };
            // The plugin's own answer, asked once for the checks that judge it directly.
            let (platform, answer) = raw_answer(plugin.as_ref(), capture);
            checks.extend(discover_checks(
                std::slice::from_ref(plugin),
                capture,
                machine,
                &devices,
                rounds,
                (&platform, &answer),
            ));
            let answer = answer.unwrap_or(Value::Null);
            checks.extend(topology_checks(plugin.as_ref(), &answer, capture, machine, &devices));
            checks.extend(isolate_checks(plugin.as_ref(), capture, &devices));
            checks.extend(reading_checks(plugin.as_ref(), capture, machine, &devices));
            per_capture.push(CaptureResult {
                capture: capture.name.clone(),
                real: capture.real,
                source: capture.source.clone(),
                live: capture.live,
                devices: devices.len(),
                checks,
            });
        }
        let tiers = CAPABILITIES.iter().map(|c| ((*c).to_owned(), grade(c, &per_capture))).collect();
        results.push(PluginResult {
            name: name.to_owned(),
            kind: if is_external { "external" } else { "built-in" }.into(),
            version,
            captures: per_capture,
            tiers,
        });
    }
    Report { report_version: 1, protocol: crate::exec::PROTOCOL, plugins: results, fingerprint: None }
}

/// The tier a capability earns from the captures' checks.
pub fn grade(capability: &str, captures: &[CaptureResult]) -> Grade {
    let mut passing: Vec<&CaptureResult> = Vec::new();
    for c in captures {
        let mine: Vec<&Check> = c.checks.iter().filter(|k| k.capability == capability).collect();
        if let Some(failed) = mine.iter().find(|k| k.status == Status::Fail) {
            return Grade {
                tier: "none".into(),
                evidence: format!("{} fails on {}: {}", failed.name, c.capture, failed.detail),
            };
        }
        if mine.iter().any(|k| k.status == Status::Pass) {
            passing.push(c);
        }
    }
    let names = |cs: &[&CaptureResult]| cs.iter().map(|c| c.capture.as_str()).collect::<Vec<_>>().join(", ");
    let live: Vec<&CaptureResult> = passing.iter().copied().filter(|c| c.live).collect();
    let real: Vec<&CaptureResult> = passing.iter().copied().filter(|c| c.real && !c.live).collect();
    if passing.is_empty() {
        let why = if captures.is_empty() { "no capture holds its devices" } else { "not provided" };
        return Grade { tier: "none".into(), evidence: why.into() };
    }
    if !live.is_empty() && !real.is_empty() {
        return Grade { tier: "T1".into(), evidence: format!("live run passes; real captures: {}", names(&real)) };
    }
    if !real.is_empty() {
        return Grade { tier: "T2".into(), evidence: format!("real captures: {}", names(&real)) };
    }
    Grade { tier: "T3".into(), evidence: format!("captures: {}", names(&passing)) }
}

/// The plugin's own `discover` answer on the capture, with the platform it was given.
fn raw_answer(plugin: &dyn Vendor, capture: &Capture) -> (Machine, Result<Value, PluginError>) {
    let platform = linux::read_platform(&capture.host);
    let input = serde_json::json!({"protocol": crate::exec::PROTOCOL, "machine": platform});
    let answer = plugin.call("discover", &capture.host, &platform, &input);
    (platform, answer)
}

fn answer_list<'a>(answer: &'a Value, key: &str) -> &'a [Value] {
    answer.get(key).and_then(Value::as_array).map_or(&[][..], Vec::as_slice)
}

/// `alone` is the graded plugin by itself: determinism and robustness are its own, and running
/// only it keeps the mutation runs cheap.
fn discover_checks(
    alone: &[Box<dyn Vendor>],
    capture: &Capture,
    machine: &Machine,
    devices: &[&Accelerator],
    rounds: usize,
    (platform, answer): (&Machine, &Result<Value, PluginError>),
) -> Vec<Check> {
    const C: &str = "discover";
    let mut out = Vec::new();
    let null = Value::Null;
    let answer = match answer {
        Ok(answer) => {
            let errors = crate::schema::validate("discover.response", answer);
            out.push(if errors.is_empty() {
                pass(C, "schema")
            } else {
                check(C, "schema", Status::Fail, errors.join("; "))
            });
            answer
        }
        Err(e) => {
            out.push(check(C, "schema", Status::Fail, e.to_string()));
            &null
        }
    };
    let runs = parallel(vec![(), ()], |()| discover(&capture.host, alone));
    let (first, again) = (&runs[0], &runs[1]);
    let same = serde_json::to_string(&again.accelerators).ok() == serde_json::to_string(&first.accelerators).ok()
        && serde_json::to_string(&again.links).ok() == serde_json::to_string(&first.links).ok();
    out.push(if same { pass(C, "deterministic") } else { check(C, "deterministic", Status::Fail, "two runs differ") });

    // Ids as the plugin gave them, before discovery drops the repeats.
    let mut seen = std::collections::BTreeSet::new();
    let repeated: Vec<&str> = answer_list(answer, "accelerators")
        .iter()
        .filter_map(|d| d.get("id").and_then(Value::as_str))
        .filter(|id| !seen.insert(*id))
        .collect();
    out.push(if repeated.is_empty() {
        pass(C, "unique_ids")
    } else {
        check(C, "unique_ids", Status::Fail, format!("repeated ids: {}", repeated.join(", ")))
    });

    // Against the capture's own PCI tree: discovery adds a placeholder for a device at an
    // address the tree lacks, so the assembled machine cannot say.
    let outside: Vec<String> = answer_list(answer, "accelerators")
        .iter()
        .filter_map(|d| d.get("pci").and_then(Value::as_str))
        .filter(|p| p.parse::<accel_model::PciAddr>().map_or(true, |a| platform.pci_device(a).is_none()))
        .map(str::to_owned)
        .collect();
    out.push(if platform.pci.is_empty() {
        check(C, "in_pci_tree", Status::Skip, "the capture holds no PCI tree")
    } else if outside.is_empty() {
        pass(C, "in_pci_tree")
    } else {
        check(C, "in_pci_tree", Status::Fail, format!("not in the PCI tree: {}", outside.join(", ")))
    });

    let unknown: Vec<&str> = devices
        .iter()
        .filter(|d| d.sku.is_none() && d.product.starts_with("unknown"))
        .filter(|d| {
            let pci = d.pci.map(|a| a.to_string()).unwrap_or_default();
            !machine.warnings.iter().any(|w| {
                w.message.contains(&d.id)
                    || (!pci.is_empty()
                        && (w.message.contains(&pci) || w.path.as_deref().is_some_and(|p| p.contains(&pci))))
            })
        })
        .map(|d| d.id.as_str())
        .collect();
    out.push(if unknown.is_empty() {
        pass(C, "identified_or_warned")
    } else {
        check(C, "identified_or_warned", Status::Fail, format!("unknown and not warned: {}", unknown.join(", ")))
    });
    out.push(robustness(alone, capture, rounds));
    out
}

/// Mutated copies of the capture (files deleted, truncated, duplicated, replaced by garbage,
/// symlinks broken) must each be discovered within a bound, without a panic, into a machine that
/// keeps the model's invariants. External plugins are also run on an empty and a garbage root.
fn robustness(alone: &[Box<dyn Vendor>], capture: &Capture, rounds: usize) -> Check {
    let plugin = alone[0].as_ref();
    const C: &str = "discover";
    const BOUND: Duration = Duration::from_secs(20);
    let mut failures = Vec::new();
    let mut runs = 0;
    if let Some(tree) = &capture.tree {
        let files = tree.file_paths();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15 ^ files.len() as u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // The mutated trees first (one seeded sequence, so a run is reproducible), then every
        // round at once: each is its own host, and an external plugin's rounds are mostly
        // waiting for its processes.
        let mut mutated = Vec::new();
        for i in 0..rounds {
            if files.is_empty() {
                break;
            }
            let mut t = (**tree).clone();
            for _ in 0..4 {
                let path = &files[(next() as usize) % files.len()];
                let content = t.file(path).map(<[u8]>::to_vec).unwrap_or_default();
                match (i + next() as usize) % 5 {
                    0 => t.remove(path),
                    1 => t.add_file(path.clone(), content[..content.len() / 2].to_vec()),
                    2 => t.add_file(path.clone(), [content.clone(), content].concat()),
                    3 => t.add_file(path.clone(), (0..64).map(|_| (next() & 0xff) as u8).collect::<Vec<u8>>()),
                    _ => t.add_link(path.clone(), "/../../nowhere/../sys"),
                }
            }
            mutated.push(t);
        }
        let outcomes = parallel(mutated, |t| {
            let host = Host::in_memory(Arc::new(t), capture.host.skus().clone());
            let start = Instant::now();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| discover(&host, alone)));
            (result.map(|m| invariants(&m)), start.elapsed())
        });
        for (i, (result, took)) in outcomes.into_iter().enumerate() {
            runs += 1;
            match result {
                Err(_) => failures.push(format!("mutation {i}: panic")),
                Ok(kept) => {
                    if took > BOUND {
                        failures.push(format!("mutation {i}: took {:.1} s", took.as_secs_f64()));
                    }
                    if let Err(e) = kept {
                        failures.push(format!("mutation {i}: {e}"));
                    }
                }
            }
        }
    }
    runs += root_checks(plugin, capture.host.skus(), &mut failures);
    if failures.is_empty() {
        check(C, "robustness", Status::Pass, format!("{runs} hostile inputs"))
    } else {
        check(C, "robustness", Status::Fail, failures.join("; "))
    }
}

/// `f` over `items` on threads of their own (as many at a time as there are CPUs, from 2 to
/// [`PARALLEL`]), results in order:
/// a check's plugin calls are independent, and an external plugin's are mostly process start-up.
fn parallel<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let mut out = Vec::with_capacity(items.len());
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        let width = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, PARALLEL);
        let batch: Vec<T> = items.by_ref().take(width).collect();
        std::thread::scope(|s| {
            let handles: Vec<_> = batch.into_iter().map(|item| s.spawn(|| f(item))).collect();
            out.extend(handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))));
        });
    }
    out
}

/// The most plugin calls of one check that run at once.
const PARALLEL: usize = 4;

/// The plugin on an empty root and on a root of garbage files answers in time with a valid
/// document, or fails cleanly (a warning, never a hang).
fn root_checks(plugin: &dyn Vendor, registry: &accel_model::SkuRegistry, failures: &mut Vec<String>) -> usize {
    let base = std::env::temp_dir().join(format!("accel-conformance-{}-{}", plugin.id(), std::process::id()));
    let garbage = base.join("garbage");
    let empty = base.join("empty");
    let _ = std::fs::create_dir_all(empty.join("sys"));
    let dev = garbage.join("sys/bus/pci/devices/0000:00:01.0");
    let _ = std::fs::create_dir_all(&dev);
    for f in ["vendor", "device", "class", "numa_node", "uevent"] {
        let _ = std::fs::write(dev.join(f), b"\xff\xfe garbage \x00");
    }
    let mut runs = 0;
    for root in [&empty, &garbage] {
        let host = Host::new(root, registry.clone());
        let platform = linux::read_platform(&host);
        let input = serde_json::json!({"protocol": crate::exec::PROTOCOL, "machine": platform});
        runs += 1;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            plugin.call("discover", &host, &platform, &input)
        }));
        match result {
            Err(_) => failures.push(format!("{}: panic", root.display())),
            Ok(Ok(v)) => {
                let errors = crate::schema::validate("discover.response", &v);
                if !errors.is_empty() {
                    failures.push(format!("{}: {}", root.display(), errors.join("; ")));
                }
            }
            Ok(Err(PluginError::Timeout { .. })) | Ok(Err(PluginError::TooLarge { .. })) => {
                failures.push(format!("{}: no bounded answer", root.display()));
            }
            Ok(Err(_)) => {}
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    runs
}

/// The model's invariants (as issue 8's property tests state them).
pub fn invariants(m: &Machine) -> Result<(), String> {
    let json = serde_json::to_string(m).map_err(|e| format!("not serialisable: {e}"))?;
    let back: Machine = serde_json::from_str(&json).map_err(|e| format!("does not round-trip: {e}"))?;
    if &back != m {
        return Err("JSON round trip changes the machine".into());
    }
    let mut ids: Vec<&str> = m.accelerators.iter().map(|a| a.id.as_str()).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Err("duplicate accelerator ids".into());
    }
    for l in &m.links {
        if m.accelerator(&l.a).is_none() || m.accelerator(&l.b).is_none() {
            return Err(format!("link {}-{} names a missing device", l.a, l.b));
        }
    }
    // A capture without a PCI tree (a KFD-only capture) cannot place devices in it.
    for a in m.accelerators.iter().filter(|_| !m.pci.is_empty()) {
        if a.pci.is_some_and(|p| m.pci_device(p).is_none()) {
            return Err(format!("{} is not in the PCI tree", a.id));
        }
    }
    let matrix = PathClassifier::new(m).matrix();
    for (i, row) in matrix.iter().enumerate() {
        for (j, c) in row.iter().enumerate() {
            if matrix[j][i] != *c {
                return Err(format!("path matrix not symmetric at {i},{j}"));
            }
        }
    }
    Ok(())
}

fn topology_checks(
    plugin: &dyn Vendor,
    answer: &Value,
    capture: &Capture,
    machine: &Machine,
    devices: &[&Accelerator],
) -> Vec<Check> {
    const C: &str = "topology";
    let mut out = Vec::new();
    // The links as the plugin gave them: discovery drops a bad one with a warning, so the
    // machine cannot say. A link to another plugin's device needs that plugin's consent, which
    // one plugin's answer cannot show: only links within the answer are judged.
    let ids: std::collections::BTreeSet<&str> =
        answer_list(answer, "accelerators").iter().filter_map(|d| d.get("id").and_then(Value::as_str)).collect();
    let others: std::collections::BTreeSet<&str> =
        machine.accelerators.iter().filter(|a| a.plugin != plugin.id()).map(|a| a.id.as_str()).collect();
    let mut problems = Vec::new();
    let mut pairs = std::collections::BTreeSet::new();
    let links = answer_list(answer, "links");
    for l in links {
        let end = |k: &str| l.get(k).and_then(Value::as_str).unwrap_or("");
        let (a, b) = (end("a"), end("b"));
        let kind = l.get("kind").and_then(Value::as_str).unwrap_or("");
        if a == b {
            problems.push(format!("{a} linked to itself"));
        } else if !(ids.contains(a) || others.contains(a)) || !(ids.contains(b) || others.contains(b)) {
            problems.push(format!("link {a}-{b} names a missing device"));
        } else if !pairs.insert((a.min(b), a.max(b), kind)) {
            problems.push(format!("link {a}-{b} ({kind}) listed twice"));
        }
    }
    out.push(if problems.is_empty() {
        check(C, "links_valid", Status::Pass, format!("{} links", links.len()))
    } else {
        check(C, "links_valid", Status::Fail, problems.join("; "))
    });
    let mine: Vec<&accel_model::Link> =
        machine.links.iter().filter(|l| devices.iter().any(|d| d.id == l.a || d.id == l.b)).collect();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for l in &mine {
        let Some(a) = machine.accelerator(&l.a) else { continue };
        let Some(scale_up) = a.sku.as_deref().and_then(|s| capture.host.skus().get(s)).and_then(|s| s.scale_up) else {
            continue;
        };
        let want = scale_up.gbps_per_link() * f64::from(l.count);
        checked += 1;
        if l.gbps.is_none_or(|g| (g - want).abs() > 1e-6 * want.max(1.0)) {
            let have = l.gbps.map_or_else(|| "no bandwidth".to_owned(), |g| format!("{g} GB/s"));
            wrong.push(format!("{}-{}: {have}, SKU says {want} GB/s", l.a, l.b));
        }
    }
    out.push(match (checked, wrong.is_empty()) {
        (0, _) => check(C, "bandwidth_from_sku", Status::Skip, "no link of a SKU with scale-up data"),
        (n, true) => check(C, "bandwidth_from_sku", Status::Pass, format!("{n} links")),
        (_, false) => check(C, "bandwidth_from_sku", Status::Fail, wrong.join("; ")),
    });
    out
}

/// The plugin's `isolate` answer for one ordered bundle, checked against the protocol.
fn ask_isolate(
    plugin: &dyn Vendor,
    capture: &Capture,
    bundle: &[&Accelerator],
) -> Result<BTreeMap<String, String>, String> {
    let input = serde_json::json!({"protocol": crate::exec::PROTOCOL, "devices": bundle});
    let platform = Machine::new(Default::default());
    let answer = plugin.call("isolate", &capture.host, &platform, &input).map_err(|e| e.to_string())?;
    let errors = crate::schema::validate("isolate.response", &answer);
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    crate::exec::parse_isolate(&answer)
}

/// What `bundle` must see in its visibility variable: each device's isolation values, in
/// bundle order, joined by the vocabulary's separator.
fn expected_visibility(bundle: &[&Accelerator]) -> Option<(String, String)> {
    let var = bundle.first()?.vocabulary.visibility_env.clone()?;
    let sep = bundle[0].vocabulary.separator();
    let values: Vec<String> = bundle.iter().flat_map(|d| crate::plugin::isolation_values(d)).collect();
    Some((var, values.join(sep)))
}

fn isolate_checks(plugin: &dyn Vendor, capture: &Capture, devices: &[&Accelerator]) -> Vec<Check> {
    const C: &str = "isolate";
    let mut out = Vec::new();
    let with_var: Vec<&Accelerator> =
        devices.iter().copied().filter(|d| d.vocabulary.visibility_env.is_some()).collect();
    if with_var.is_empty() {
        out.push(check(C, "visibility", Status::Skip, "no visibility variable"));
        out.push(check(C, "bundle_order", Status::Skip, "no visibility variable"));
        return out;
    }
    let judge = |bundle: &[&Accelerator]| -> Option<String> {
        let (var, want) = expected_visibility(bundle)?;
        let ids: Vec<&str> = bundle.iter().map(|d| d.id.as_str()).collect();
        match ask_isolate(plugin, capture, bundle) {
            Ok(env) if env.get(&var) == Some(&want) => None,
            Ok(env) => Some(format!(
                "[{}]: {var} is {}, the bundle's isolation values say {want:?}",
                ids.join(","),
                env.get(&var).map_or_else(|| "not set".to_owned(), |v| format!("{v:?}"))
            )),
            Err(e) => Some(format!("[{}]: {e}", ids.join(","))),
        }
    };
    let problems: Vec<String> = parallel(with_var.clone(), |d| judge(&[d])).into_iter().flatten().collect();
    out.push(if problems.is_empty() {
        check(C, "visibility", Status::Pass, format!("{} devices", with_var.len()))
    } else {
        check(C, "visibility", Status::Fail, problems.join("; "))
    });
    // Whole bundles: every device in discovery's order, then reversed (rank i gets the i-th).
    if with_var.len() < 2 {
        out.push(check(C, "bundle_order", Status::Skip, "one device: no bundle to order"));
    } else {
        let reversed: Vec<&Accelerator> = with_var.iter().rev().copied().collect();
        let problems: Vec<String> = parallel(vec![&with_var[..], &reversed[..]], judge).into_iter().flatten().collect();
        out.push(if problems.is_empty() {
            check(C, "bundle_order", Status::Pass, format!("{} devices, both orders", with_var.len()))
        } else {
            check(C, "bundle_order", Status::Fail, problems.join("; "))
        });
    }
    out
}

/// `health` and `metrics`, each its own capability: the answer's schema, and every device it
/// names is one discovery reported for this plugin. Built-in families' readers answer through
/// the same verb (`Vendor::metrics`).
fn reading_checks(plugin: &dyn Vendor, capture: &Capture, machine: &Machine, devices: &[&Accelerator]) -> Vec<Check> {
    let mut out = Vec::new();
    let pcis: Vec<String> = devices.iter().filter_map(|d| d.pci.map(|p| p.to_string())).collect();
    for verb in ["health", "metrics"] {
        let input = serde_json::json!({"protocol": crate::exec::PROTOCOL});
        match plugin.call(verb, &capture.host, machine, &input) {
            Err(PluginError::Unsupported { .. }) => out.push(check(verb, verb, Status::Skip, "not provided")),
            Err(e) => out.push(check(verb, verb, Status::Fail, e.to_string())),
            Ok(answer) => {
                let mut errors = crate::schema::validate(&format!("{verb}.response"), &answer);
                for key in ["devices", "links"] {
                    for d in answer_list(&answer, key) {
                        if let Some(p) = d["pci"].as_str() {
                            if !pcis.iter().any(|x| x == p) {
                                errors.push(format!("names {p}, which discovery did not report for this plugin"));
                            }
                        }
                    }
                }
                out.push(if errors.is_empty() {
                    check(verb, verb, Status::Pass, format!("{} devices", answer_list(&answer, "devices").len()))
                } else {
                    check(verb, verb, Status::Fail, errors.join("; "))
                });
            }
        }
    }
    out
}

/// The command that writes docs/maturity.md (a test renders the page and compares).
pub const MATURITY_COMMAND: &str = "ACCEL_PLUGIN_DIR=examples/plugins/ascend accel conformance \\\n  --samples --capture examples/plugins/ascend/capture --markdown > docs/maturity.md";

/// `docs/maturity.md`, generated from a report (never written by hand).
pub fn markdown(report: &Report, command: &str) -> String {
    let mut s = String::new();
    s.push_str("# Plugin maturity\n\n");
    s.push_str("Generated from the conformance suite's JSON output; do not edit. Regenerate with\n\n");
    s.push_str(&format!("```sh\n{command}\n```\n\n"));
    s.push_str("Tiers per capability, on evidence (docs/contributing-hardware.md): **T3** passes on captures;\n");
    s.push_str("**T2** also passes on a real capture whose source is recorded; **T1** also passes `--live` on\n");
    s.push_str("real hardware with the run's environment fingerprint attached. `none`: no capture holds the\n");
    s.push_str("plugin's devices, the capability is not provided, or a check fails. A capture is real when\n");
    s.push_str("its `provenance.toml` says `real` and names its source (`accel samples` prints each sample's\n");
    s.push_str("kind); a capability is T2 only where a real capture holds the plugin's devices and exercises\n");
    s.push_str("it (the evidence below names those captures), derived and synthetic ones give T3 at most.\n\n");
    s.push_str("What moves a family up (docs/contributing-hardware.md, \"Tier\"):\n\n");
    s.push_str("- **to T3**: a capture holding its devices, real or written from public facts, on which the\n");
    s.push_str("  capability's checks pass (`accel conformance --plugin NAME --capture DIR`);\n");
    s.push_str("- **T3 to T2**: a real capture (`accel capture` on a machine with the devices, or a real\n");
    s.push_str("  published `lstopo` XML imported) whose `provenance.toml` says `kind = \"real\"` and names its\n");
    s.push_str("  source, on which the capability's checks pass; only the capabilities it exercises move;\n");
    s.push_str("- **T2 to T1**: a passing `--live` run on a machine with the devices (the vendor CI workflow,\n");
    s.push_str("  `ci/vendor-conformance.yml`), its environment fingerprint attached, besides the real capture.\n\n");
    s.push_str(&format!(
        "| plugin | kind | {} |\n|---|---|{}\n",
        CAPABILITIES.join(" | "),
        "---|".repeat(CAPABILITIES.len())
    ));
    for p in &report.plugins {
        let tiers: Vec<String> =
            CAPABILITIES.iter().map(|c| p.tiers.get(*c).map_or("none".to_owned(), |g| g.tier.clone())).collect();
        s.push_str(&format!("| {} | {} | {} |\n", p.name, p.kind, tiers.join(" | ")));
    }
    s.push_str("\n## Evidence\n");
    for p in &report.plugins {
        s.push_str(&format!("\n### {}\n\n", p.name));
        for c in CAPABILITIES {
            if let Some(g) = p.tiers.get(c) {
                s.push_str(&format!("- {c}: {} ({})\n", g.tier, g.evidence));
            }
        }
        for c in &p.captures {
            let passed = c.checks.iter().filter(|k| k.status == Status::Pass).count();
            let skipped = c.checks.iter().filter(|k| k.status == Status::Skip).count();
            let failed: Vec<&str> =
                c.checks.iter().filter(|k| k.status == Status::Fail).map(|k| k.name.as_str()).collect();
            s.push_str(&format!(
                "- `{}` ({} devices{}): {passed} checks pass, {skipped} skipped{}\n",
                c.capture,
                c.devices,
                if c.real { ", real" } else { "" },
                if failed.is_empty() { String::new() } else { format!(", failed: {}", failed.join(", ")) }
            ));
        }
    }
    s
}

/// The embedded samples when `samples` is set, then the captures given on the command line.
pub fn captures(paths: &[PathBuf], samples: bool, registry: &accel_model::SkuRegistry) -> Result<Vec<Capture>, String> {
    let names = if samples { crate::samples::names() } else { Vec::new() };
    let mut out: Vec<Capture> = names.into_iter().filter_map(|n| Capture::sample(n, registry.clone())).collect();
    for p in paths {
        out.push(Capture::path(p, registry.clone())?);
    }
    Ok(out)
}
