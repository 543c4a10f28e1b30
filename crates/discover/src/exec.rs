//! Out-of-process plugins, protocol version 1 (docs/plugin-protocol.md): any executable named
//! `accel-plugin-<name>` in `ACCEL_PLUGIN_DIR` or on `PATH`. accel runs it with one verb
//! (`version`, `discover`, `isolate`, `metrics`, `health`) and reads one JSON document from its
//! stdout, like a CNI plugin. A plugin that hangs, crashes, prints garbage or prints too much
//! costs a warning naming it, and at most the protocol timeout.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use accel_model::{Accelerator, Domain, Link, Machine, Warning};
use serde::Deserialize;
use serde_json::Value;

pub use crate::protocol::{PluginError, PROTOCOL};
use crate::{Host, Isolation, Report, Vendor};

/// The executable name prefix.
pub const PREFIX: &str = "accel-plugin-";
/// How long one call may take unless `ACCEL_PLUGIN_TIMEOUT_MS` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most a plugin may print on stdout for one call.
pub const MAX_OUTPUT: usize = 4 << 20;
/// What is kept of a plugin's stderr (for the warning); the rest is read and dropped.
const MAX_STDERR: usize = 4096;

/// How external plugins are found and run.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Directories searched first (`ACCEL_PLUGIN_DIR`, colon-separated), then `PATH`.
    pub dirs: Vec<PathBuf>,
    pub timeout: Duration,
    /// Search-path entries left out before the search, each with a warning ([`find`] reports
    /// them): a relative `PATH` entry names whatever directory accel happens to run in.
    pub skipped: Vec<Warning>,
}

impl ExecOptions {
    /// From a process environment: `ACCEL_PLUGIN_DIR`, `PATH`, `ACCEL_PLUGIN_TIMEOUT_MS`.
    pub fn from_env(env: &BTreeMap<String, String>) -> ExecOptions {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut skipped = Vec::new();
        for var in ["ACCEL_PLUGIN_DIR", "PATH"] {
            if let Some(v) = env.get(var) {
                for d in v.split(':').filter(|d| !d.is_empty()).map(PathBuf::from) {
                    // ACCEL_PLUGIN_DIR is named on purpose; a relative PATH entry is an accident
                    // that lets whoever owns the working directory plant a plugin.
                    if var == "PATH" && d.is_relative() {
                        skipped.push(warn(
                            "search",
                            format!(
                                "PATH entry {:?} not searched for plugins: it is relative",
                                d.display().to_string()
                            ),
                        ));
                        continue;
                    }
                    // A directory listed twice (PATH often repeats one) is searched once.
                    if !dirs.contains(&d) {
                        dirs.push(d);
                    }
                }
            }
        }
        let timeout = env
            .get("ACCEL_PLUGIN_TIMEOUT_MS")
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        ExecOptions { dirs, timeout, skipped }
    }
}

/// One external plugin.
#[derive(Debug, Clone)]
pub struct ExecPlugin {
    name: &'static str,
    path: PathBuf,
    timeout: Duration,
    /// The plugin's `version` answer (what it declares: `env`, `capture`), asked once.
    version: Arc<OnceLock<Value>>,
}

/// What every plugin gets of accel's environment, besides `ACCEL_ROOT`, `ACCEL_PROTOCOL` and
/// the variables it declares: the search path, the home directory and the locale.
pub const BASE_ENV: [&str; 5] = ["PATH", "HOME", "LANG", "LANGUAGE", "TZ"];

/// The most variables one plugin may declare.
pub const MAX_DECLARED_ENV: usize = 64;

/// Whether a plugin may receive `key`: the base set, the locale (`LC_*`), or one it declared
/// that is not secret-shaped.
fn passed_on(key: &str, declared: &[String]) -> bool {
    BASE_ENV.contains(&key) || key.starts_with("LC_") || declared.iter().any(|d| d == key)
}

/// The `capture` list of a `version` answer: absolute in-machine directories or files the
/// plugin reads (`/proc/driver/npu`, `/accel/npu-smi-info.txt`), of `[A-Za-z0-9._/:-]` without
/// `..`, at most [`MAX_DECLARED_ENV`]; `accel capture` keeps everything below each (8 levels).
/// A name ending in `*` (`/dev/davinci*`) is device nodes: kept as empty files.
pub fn declared_capture(version: &Value) -> Vec<String> {
    version
        .get("capture")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(Value::as_str)
        .filter(|p| {
            p.starts_with('/')
                && p.len() <= 256
                && !p.split('/').any(|c| c == "..")
                && p.trim_end_matches('*').chars().all(|c| c.is_ascii_alphanumeric() || "._/:-".contains(c))
        })
        .take(MAX_DECLARED_ENV)
        .map(str::to_owned)
        .collect()
}

/// Whether a variable's name says it holds a secret (`SECRET`, `TOKEN`, `KEY`, `PASSWORD`,
/// `PASSWD`, `CREDENTIAL`, any case): a plugin never receives it, and its value is never printed
/// (`accel env` redacts it even where the name is allowed: an `NCCL_*` or `UCX_*` variable, or a
/// visibility variable a plugin names). The one rule; the lab's Python asks it too.
pub fn is_secret_name(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    ["SECRET", "TOKEN", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL"].iter().any(|w| upper.contains(w))
}

/// The `env` list of a `version` answer: names of `[A-Z0-9_]` (not starting with a digit), none
/// that looks like a secret, at most [`MAX_DECLARED_ENV`].
pub fn declared_env(version: &Value) -> Vec<String> {
    version
        .get("env")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(Value::as_str)
        .filter(|k| {
            !k.is_empty()
                && k.len() <= 128
                && k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && !is_secret_name(k)
        })
        .take(MAX_DECLARED_ENV)
        .map(str::to_owned)
        .collect()
}

/// Every `accel-plugin-<name>` executable in `options.dirs`, the first of each name winning,
/// sorted by name. `reserved` names (the built-in plugins') are skipped with a warning.
pub fn find(options: &ExecOptions, reserved: &[&str]) -> (Vec<ExecPlugin>, Vec<Warning>) {
    let mut found: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut warnings = options.skipped.clone();
    for dir in &options.dirs {
        if world_writable(dir) {
            warnings.push(warn(
                "search",
                format!("{} not searched for plugins: any local user can write to it", dir.display()),
            ));
            continue;
        }
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut names: Vec<(String, PathBuf)> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
            .filter(|(n, _)| n.starts_with(PREFIX) && n.len() > PREFIX.len())
            .collect();
        names.sort();
        for (file, path) in names {
            let name = file[PREFIX.len()..].to_owned();
            if found.contains_key(&name) || !is_executable(&path) {
                continue;
            }
            if world_writable(&path) {
                warnings.push(warn(&name, format!("{} ignored: any local user can write to it", path.display())));
                continue;
            }
            if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
                warnings
                    .push(warn(&name, format!("{} ignored: a plugin name is lowercase a-z, 0-9, -", path.display())));
                continue;
            }
            if reserved.contains(&name.as_str()) {
                warnings.push(warn(&name, format!("{} ignored: {name} is a built-in plugin", path.display())));
                continue;
            }
            found.insert(name, path);
        }
    }
    let plugins = found
        .into_iter()
        .map(|(name, path)| ExecPlugin {
            name: Box::leak(name.into_boxed_str()),
            path,
            timeout: options.timeout,
            version: Arc::default(),
        })
        .collect();
    (plugins, warnings)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether anyone may write to `path` (mode `o+w`, symlinks followed): a plugin from there could
/// be anyone's.
fn world_writable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o002 != 0)
}

fn warn(name: &str, message: String) -> Warning {
    Warning { source: format!("plugin:{name}"), path: None, message }
}

impl ExecPlugin {
    /// A plugin at an explicit path (conformance of one executable, tests).
    pub fn at(name: &str, path: impl Into<PathBuf>, timeout: Duration) -> ExecPlugin {
        ExecPlugin {
            name: Box::leak(name.to_owned().into_boxed_str()),
            path: path.into(),
            timeout,
            version: Arc::default(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `verb` with `root` as `ACCEL_ROOT` and `input` on stdin, and returns the one JSON
    /// document it printed, after checking its `protocol`.
    pub fn run(&self, verb: &str, root: Option<&Path>, input: &Value) -> Result<Value, PluginError> {
        // A plugin gets an allow-listed environment (never a secret): the base set, and what
        // its `version` answer declares (asked once, with the base set only).
        let declared = if verb == "version" { Vec::new() } else { declared_env(self.version_answer()) };
        let name = self.name.to_owned();
        let mut cmd = Command::new(&self.path);
        cmd.arg(verb).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.env_clear();
        for (key, value) in std::env::vars_os() {
            if key.to_str().is_some_and(|k| passed_on(k, &declared)) {
                cmd.env(key, value);
            }
        }
        cmd.env("ACCEL_PROTOCOL", PROTOCOL.to_string());
        match root {
            Some(r) => cmd.env("ACCEL_ROOT", r),
            None => cmd.env_remove("ACCEL_ROOT"),
        };
        // Its own process group, so a timeout kills whatever it started too.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| PluginError::Spawn {
            name: name.clone(),
            path: self.path.display().to_string(),
            message: e.to_string(),
        })?;
        let deadline = Instant::now() + self.timeout;
        let input = serde_json::to_vec(input).unwrap_or_default();
        if let Some(mut stdin) = child.stdin.take() {
            // A plugin that never reads its input must not block accel: write from a thread.
            std::thread::spawn(move || {
                let _ = stdin.write_all(&input);
            });
        }
        let (tx, rx) = mpsc::channel::<Result<Vec<u8>, ()>>();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let r = stdout.take(MAX_OUTPUT as u64 + 1).read_to_end(&mut buf);
                let _ = tx.send(if r.is_ok() && buf.len() <= MAX_OUTPUT { Ok(buf) } else { Err(()) });
            });
        }
        let (etx, erx) = mpsc::channel::<Vec<u8>>();
        if let Some(mut stderr) = child.stderr.take() {
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                let mut chunk = [0u8; 8192];
                while let Ok(n) = stderr.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    let room = MAX_STDERR.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..n.min(room)]);
                }
                let _ = etx.send(kept);
            });
        }
        let kill = |child: &mut std::process::Child| {
            let _ = rustix::process::kill_process_group(
                rustix::process::Pid::from_child(child),
                rustix::process::Signal::KILL,
            );
            let _ = child.kill();
            let _ = child.wait();
        };
        let out = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Ok(out)) => out,
            Ok(Err(())) => {
                kill(&mut child);
                return Err(PluginError::TooLarge { name, verb: verb.into(), limit: MAX_OUTPUT });
            }
            Err(_) => {
                kill(&mut child);
                return Err(PluginError::Timeout { name, verb: verb.into(), ms: self.timeout.as_millis() });
            }
        };
        // stdout is closed; the process should be exiting. Wait for it within the same deadline.
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
                _ => {
                    kill(&mut child);
                    return Err(PluginError::Timeout { name, verb: verb.into(), ms: self.timeout.as_millis() });
                }
            }
        };
        if !status.success() {
            let stderr = erx.recv_timeout(Duration::from_millis(100)).unwrap_or_default();
            let text = String::from_utf8_lossy(&stderr);
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            let first: String = first.chars().take(200).collect();
            let stderr = if first.is_empty() { String::new() } else { format!(": {first}") };
            if status.code() == Some(3) {
                return Err(PluginError::Unsupported { name, verb: verb.into() });
            }
            return Err(PluginError::Failed { name, verb: verb.into(), status: status.to_string(), stderr });
        }
        let value: Value = serde_json::from_slice(&out).map_err(|e| PluginError::Garbage {
            name: name.clone(),
            verb: verb.into(),
            message: e.to_string(),
        })?;
        match value.get("protocol") {
            Some(Value::Number(n)) if n.as_u64() == Some(PROTOCOL) => Ok(value),
            other => Err(PluginError::Protocol {
                name,
                verb: verb.into(),
                got: other.map_or("none".into(), |v| v.to_string()),
            }),
        }
    }

    /// The plugin's `version` answer, asked once (`null` when it gives none).
    fn version_answer(&self) -> &Value {
        self.version.get_or_init(|| self.run("version", None, &Value::Null).unwrap_or(Value::Null))
    }

    /// The directory a plugin reads as `ACCEL_ROOT`: [`Host::plugin_root`].
    fn root(host: &Host) -> Option<PathBuf> {
        host.plugin_root()
    }
}

/// The most variables one `isolate` answer may set.
pub const MAX_ISOLATE_VARS: usize = 64;

/// The `isolate` answer's `env`: at most [`MAX_ISOLATE_VARS`] variables, each name of
/// `[A-Za-z0-9_]` not starting with a digit, each value a string without control characters of at
/// most 4096 bytes. `Err` says what is wrong; nothing of a wrong answer is used.
pub fn parse_isolate(value: &Value) -> Result<BTreeMap<String, String>, String> {
    let env = value.get("env").and_then(Value::as_object).ok_or("no `env` object")?;
    if env.len() > MAX_ISOLATE_VARS {
        return Err(format!("{} variables, more than {MAX_ISOLATE_VARS}", env.len()));
    }
    let mut out = BTreeMap::new();
    for (k, v) in env {
        let name_ok = !k.is_empty()
            && k.len() <= 256
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !k.starts_with(|c: char| c.is_ascii_digit());
        if !name_ok {
            return Err(format!("{:?} is not a variable name", crate::validate::escape_controls(k, false)));
        }
        let v = v.as_str().ok_or_else(|| format!("{k} is not a string"))?;
        if v.len() > 4096 || v.chars().any(char::is_control) {
            return Err(format!("the value of {k} is longer than 4096 bytes or holds control characters"));
        }
        out.insert(k.clone(), v.to_owned());
    }
    Ok(out)
}

/// The `discover` answer, parsed into a report: devices that do not fit the model are
/// dropped with a warning each, and every device is stamped with the plugin's name. Only the
/// first [`validate::MAX_DEVICES`](crate::validate) devices (links, domains, warnings,
/// attributes: their limits) are parsed; one warning counts the rest of each list.
pub fn parse_discover(name: &str, value: &Value) -> Report {
    use crate::validate::{over_limit, MAX_ATTRIBUTES, MAX_DEVICES, MAX_DOMAINS, MAX_LINKS, MAX_WARNINGS};
    let mut report = Report::default();
    let source = format!("plugin:{name}");
    let mut notes = Vec::new();
    let mut list = |key: &str, max: usize| -> &[Value] {
        let all = value.get(key).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        if all.len() > max {
            notes.push(over_limit(&source, key, all.len() - max, max));
        }
        &all[..all.len().min(max)]
    };
    let (devices, links, domains, warnings) = (
        list("accelerators", MAX_DEVICES),
        list("links", MAX_LINKS),
        list("domains", MAX_DOMAINS),
        list("warnings", MAX_WARNINGS),
    );
    for dev in devices {
        let mut dev = dev.clone();
        if let Some(obj) = dev.as_object_mut() {
            obj.entry("index").or_insert(Value::from(0));
            obj.insert("plugin".into(), Value::from(name));
        }
        match serde_json::from_value::<Accelerator>(dev) {
            Ok(acc) => report.accelerators.push(acc),
            Err(e) => report.warnings.push(warn(name, format!("device dropped: {e}"))),
        }
    }
    for link in links {
        match Link::deserialize(link) {
            Ok(l) => report.links.push(l),
            Err(e) => report.warnings.push(warn(name, format!("link dropped: {e}"))),
        }
    }
    for domain in domains {
        match Domain::deserialize(domain) {
            Ok(d) => report.domains.push(d),
            Err(e) => report.warnings.push(warn(name, format!("domain dropped: {e}"))),
        }
    }
    for w in warnings {
        let message = w.get("message").and_then(Value::as_str).unwrap_or("(no message)");
        let path = w.get("path").and_then(Value::as_str).map(str::to_owned);
        report.warnings.push(Warning { source: source.clone(), path, message: message.to_owned() });
    }
    for info in value.get("link_kinds").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
        match accel_model::LinkKindInfo::deserialize(info) {
            Ok(k) => report.link_kinds.push(k),
            Err(e) => report.warnings.push(warn(name, format!("link kind dropped: {e}"))),
        }
    }
    if let Some(labels) = value.get("k8s_labels").and_then(Value::as_object) {
        for (k, v) in labels {
            match v.as_str() {
                Some(v) => {
                    report.k8s_labels.insert(k.clone(), v.to_owned());
                }
                None => report.warnings.push(warn(name, format!("Kubernetes label {k:?} dropped: not a string"))),
            }
        }
    }
    if let Some(attrs) = value.get("attributes").and_then(Value::as_object) {
        let texts: Vec<(&String, &str)> = attrs.iter().filter_map(|(k, v)| Some((k, v.as_str()?))).collect();
        if texts.len() > MAX_ATTRIBUTES {
            report.warnings.push(over_limit(&source, "attributes", texts.len() - MAX_ATTRIBUTES, MAX_ATTRIBUTES));
        }
        for (k, v) in texts.into_iter().take(MAX_ATTRIBUTES) {
            report.attributes.insert(k.clone(), v.to_owned());
        }
    }
    report.warnings.extend(notes);
    report
}

impl Vendor for ExecPlugin {
    fn id(&self) -> &'static str {
        self.name
    }

    fn call(&self, verb: &str, host: &Host, _platform: &Machine, input: &Value) -> Result<Value, PluginError> {
        let root = ExecPlugin::root(host);
        if root.is_none() && verb != "version" {
            return Ok(serde_json::json!({"protocol": PROTOCOL, "accelerators": [], "devices": []}));
        }
        self.run(verb, root.as_deref(), input)
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        let Some(root) = ExecPlugin::root(host) else { return Report::default() };
        let input = serde_json::json!({"protocol": PROTOCOL, "machine": platform});
        // Discovery checks the answer against itself and the other plugins (`validate`).
        match self.run("discover", Some(&root), &input) {
            Ok(value) => parse_discover(self.name, &value),
            Err(e) => Report { warnings: vec![warn(self.name, e.to_string())], ..Report::default() },
        }
    }

    fn capture(&self, _host: &Host, _machine: &Machine) -> Vec<crate::plugin::Keep> {
        use crate::plugin::Keep;
        declared_capture(self.version_answer())
            .into_iter()
            .map(|path| match path.strip_suffix('*').and_then(|p| p.rsplit_once('/')) {
                Some((dir, prefix)) => {
                    Keep::DeviceNodes { dir: dir.to_owned(), prefix: prefix.to_owned(), digits: false }
                }
                None => Keep::Tree { path, depth: 8 },
            })
            .collect()
    }

    fn metrics(&self, host: &Host) -> Option<Result<crate::readings::Metrics, PluginError>> {
        let root = ExecPlugin::root(host)?;
        match self.run("metrics", Some(&root), &serde_json::json!({"protocol": PROTOCOL})) {
            Err(PluginError::Unsupported { .. }) => None,
            Err(e) => Some(Err(e)),
            Ok(value) => Some(
                serde_json::from_value::<crate::readings::Readings>(value)
                    .map(|readings| crate::readings::Metrics { readings, warnings: Vec::new() })
                    .map_err(|e| PluginError::Garbage {
                        name: self.name.into(),
                        verb: "metrics".into(),
                        message: format!("malformed metrics document: {e}"),
                    }),
            ),
        }
    }

    fn health(&self, host: &Host, _machine: &Machine) -> Option<Result<crate::health::Findings, PluginError>> {
        // The `health` verb where the plugin answers it; its metrics' error counters otherwise.
        let root = ExecPlugin::root(host)?;
        match self.run("health", Some(&root), &serde_json::json!({"protocol": PROTOCOL})) {
            Err(PluginError::Unsupported { .. }) => {
                self.metrics(host).map(|r| r.map(|m| crate::health::from_readings(&m.readings)))
            }
            Err(e) => Some(Err(e)),
            Ok(value) => Some(health_findings(&value).map_err(|why| PluginError::Garbage {
                name: self.name.into(),
                verb: "health".into(),
                message: format!("malformed health answer: {why}"),
            })),
        }
    }

    fn isolate(&self, devices: &[&Accelerator]) -> Isolation {
        // The plugin's own answer for the ordered bundle; the model's values if it gives none.
        let input = serde_json::json!({"protocol": PROTOCOL, "devices": devices});
        let why = match self.run("isolate", None, &input) {
            Ok(value) => match parse_isolate(&value) {
                Ok(env) => return Isolation { env, warnings: Vec::new() },
                Err(why) => {
                    PluginError::Garbage { name: self.name.into(), verb: "isolate".into(), message: why }.to_string()
                }
            },
            Err(e) => e.to_string(),
        };
        let mut isolation = crate::plugin::isolate_from_model(devices);
        isolation.warnings.push(warn(self.name, format!("{why}; isolation values from discovery used instead")));
        isolation
    }
}

/// The findings of an external plugin's `health` answer (`{"devices": [{"pci", "healthy",
/// "reason"?}]}`).
pub fn health_findings(answer: &serde_json::Value) -> Result<crate::health::Findings, String> {
    let devices = answer.get("devices").and_then(|d| d.as_array()).ok_or("no `devices` array")?;
    let mut out = crate::health::Findings::new();
    for d in devices {
        let pci = d.get("pci").and_then(|p| p.as_str()).ok_or("a device without `pci`")?;
        let healthy = d.get("healthy").and_then(|h| h.as_bool()).ok_or("a device without a boolean `healthy`")?;
        let f = out.entry(crate::readings::normalize_pci(pci)).or_default();
        if !healthy {
            let reason = d.get("reason").and_then(|r| r.as_str()).unwrap_or("reported unhealthy by its plugin");
            f.reasons.push(crate::validate::escape_controls(reason, false).chars().take(256).collect());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_answers_parse_and_bad_ones_are_refused() {
        let ok = serde_json::json!({"protocol": 1, "devices": [
            {"pci": "0000:3B:00.0", "healthy": false, "reason": "HBM\u{1b}[1m degraded"},
            {"pci": "0000:3c:00.0", "healthy": true}]});
        let f = health_findings(&ok).unwrap();
        assert_eq!(f["0000:3b:00.0"].reasons.len(), 1);
        assert!(!f["0000:3b:00.0"].reasons[0].contains('\u{1b}'));
        assert!(f["0000:3c:00.0"].reasons.is_empty());
        assert!(health_findings(&serde_json::json!({"devices": [{"pci": "x"}]})).is_err());
        assert!(health_findings(&serde_json::json!({})).is_err());
    }
}
