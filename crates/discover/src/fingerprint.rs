//! The environment fingerprint (`accel env`): kernel, OS and libc; drivers, firmware and VBIOS;
//! runtimes; communication libraries; Python packages; the relevant environment variables; and
//! a hash of the topology. Every field says where its value came from, or that it is unknown,
//! so a failing run can be reproduced. Read through [`Host`] only: on a capture it describes
//! the captured machine.

use accel_model::{Machine, PathClassifier};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::exec::is_secret_name;
use crate::Host;

/// One fact and its provenance. `value` is absent when unknown, and `source` then says
/// `unknown` (with what was looked at).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub source: String,
}

impl Field {
    fn known(value: impl Into<String>, source: impl Into<String>) -> Field {
        Field { value: Some(value.into()), source: source.into() }
    }

    fn unknown(looked_at: &str) -> Field {
        Field { value: None, source: format!("unknown (looked at {looked_at})") }
    }
}

/// Format version of the fingerprint document.
pub const FINGERPRINT_VERSION: u32 = 1;

/// The fingerprint: fields by dotted name (`kernel.release`, `driver.nvidia`,
/// `python.ray`, `env.CUDA_VISIBLE_DEVICES`, `topology.hash`), in name order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub fingerprint_version: u32,
    pub fields: BTreeMap<String, Field>,
}

/// Packages whose dpkg version names the C library or a communication library; the families
/// add their runtimes' (`Vendor::environment`).
const DPKG: &[&str] = &["libc6", "libnccl2", "libucx0", "ucx", "libfabric1", "hwloc"];
/// Python distributions worth naming.
const PYTHON: &[&str] = &["ray", "torch", "jax", "jaxlib", "libtpu", "nixl", "numpy", "vllm"];

/// Collects the fingerprint of the machine behind `host`, discovering it with `plugins` (built-in
/// and external alike) for the topology hash and the visibility variables.
pub fn collect(host: &Host, plugins: &[Box<dyn crate::Vendor>]) -> Fingerprint {
    let machine = crate::discover(host, plugins);
    collect_with(host, &machine, plugins)
}

/// The fingerprint, given the machine already discovered on `host` with `plugins` (each
/// family adds its drivers, runtimes and variables: `Vendor::environment`).
pub fn collect_with(host: &Host, machine: &Machine, plugins: &[Box<dyn crate::Vendor>]) -> Fingerprint {
    let families: Vec<crate::plugin::Environment> = plugins.iter().map(|p| p.environment(host, machine)).collect();
    let mut f = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut read = |path: &str| host.read_text(&host.path(path), 64 * 1024, "env", &mut warnings);
    let text = |v: Option<String>, path: &str| match v.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()) {
        Some(t) => Field::known(t, path),
        None => Field::unknown(path),
    };
    f.insert("kernel.release".into(), text(read("/proc/sys/kernel/osrelease"), "/proc/sys/kernel/osrelease"));
    f.insert("kernel.version".into(), text(read("/proc/sys/kernel/version"), "/proc/sys/kernel/version"));
    let os = read("/etc/os-release").and_then(|t| os_release(&t));
    f.insert("os".into(), text(os, "/etc/os-release PRETTY_NAME"));
    for module in families.iter().flat_map(|e| &e.modules) {
        let path = format!("/sys/module/{module}/version");
        if let Some(v) = read(&path) {
            f.insert(format!("driver.{module}"), text(Some(v), &path));
        }
    }
    for (key, value, source) in families.iter().flat_map(|e| &e.facts) {
        if !value.trim().is_empty() {
            f.insert(key.clone(), Field::known(value.trim(), source.clone()));
        }
    }
    let status =
        host.read_text(&host.path("/var/lib/dpkg/status"), 64 << 20, "env", &mut Vec::new()).unwrap_or_default();
    let packages = dpkg_versions(&status);
    let names = DPKG.iter().copied().chain(families.iter().flat_map(|e| e.packages.iter().map(String::as_str)));
    for name in names {
        let field = match packages.get(name) {
            Some(v) => Field::known(v.clone(), format!("dpkg:{name}")),
            None if name == "libc6" => Field::unknown("dpkg:libc6"),
            None => continue,
        };
        let key = if name == "libc6" { "libc".to_owned() } else { format!("package.{name}") };
        f.insert(key, field);
    }
    python(host, &mut f);
    firmware(host, machine, &mut f);
    for (key, value) in host.env_vars() {
        let family = families.iter().flat_map(|e| &e.variables).any(|v| {
            if v.ends_with('_') {
                key.starts_with(v.as_str())
            } else {
                key == v
            }
        });
        if relevant(key)
            || family
            || machine.accelerators.iter().any(|a| a.vocabulary.visibility_env.as_deref() == Some(key))
        {
            let value = if is_secret_name(key) { REDACTED.to_owned() } else { value.clone() };
            f.insert(format!("env.{key}"), Field::known(value, "environment"));
        }
    }
    f.insert(
        "topology.hash".into(),
        Field::known(topology_hash(machine), "accel discovery (FNV-1a 64 of devices, links, path matrix)"),
    );
    f.insert("accel.version".into(), Field::known(env!("CARGO_PKG_VERSION"), "accel build"));
    Fingerprint { fingerprint_version: FINGERPRINT_VERSION, fields: f }
}

/// accel's own settings that change what a run sees. An allow-list: a new `ACCEL_*` variable
/// is not recorded until it is named here, so a secret added later never leaks by pattern.
const ACCEL_SETTINGS: &[&str] = &[
    "ACCEL_SKU_DIR",
    "ACCEL_PLUGIN_DIR",
    "ACCEL_PLUGIN_TIMEOUT_MS",
    "ACCEL_GCE_METADATA_URL",
    "ACCEL_IMDS_URL",
    "ACCEL_TRANSPORT_PATH",
    "ACCEL_TRANSPORT_BIND",
    "ACCEL_TRANSPORT_ADVERTISE",
    "ACCEL_TRANSPORT_ENCRYPT",
    "ACCEL_TRANSPORT_NIXL",
    "ACCEL_TRANSPORT_RELAY",
    "ACCEL_TRANSPORT_RELAY_FANOUT",
    "ACCEL_TRANSPORT_STREAMS",
    "ACCEL_TRANSPORT_SENDFILE",
    "ACCEL_TRANSPORT_POOL_BYTES",
    "ACCEL_TRANSPORT_SPARES",
    "ACCEL_TRANSPORT_MAP_CACHE_BYTES",
    "ACCEL_TRANSPORT_MAX_FRAME",
    "ACCEL_TRANSPORT_SHM_DIR",
    "ACCEL_TRANSPORT_IO_TIMEOUT_MS",
    "ACCEL_TRANSPORT_DRAIN_TIMEOUT_MS",
];

/// What a redacted value reads as, wherever it is printed.
pub const REDACTED: &str = "<redacted>";

/// The fields of a fingerprint made elsewhere (a file for `accel env diff`, a conformance
/// report), with every secret-named variable's value redacted: older accel versions recorded
/// every `ACCEL_*` variable, the transport secret among them.
pub fn redacted(mut fp: Fingerprint) -> Fingerprint {
    for (key, field) in &mut fp.fields {
        if key.strip_prefix("env.").is_some_and(is_secret_name) && field.value.is_some() {
            field.value = Some(REDACTED.to_owned());
        }
    }
    fp
}

/// Variables that change what a run sees: families by pattern (no vendor list), and accel's own
/// settings by name.
fn relevant(key: &str) -> bool {
    key.contains("_VISIBLE_")
        || key.starts_with("NCCL_")
        || key.starts_with("UCX_")
        || key.starts_with("FI_")
        || ACCEL_SETTINGS.contains(&key)
}

fn os_release(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim_matches('"').to_owned())
}

/// `Package:` / `Version:` pairs of dpkg's status file.
fn dpkg_versions(status: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stanza in status.split("\n\n") {
        let mut name = None;
        let mut version = None;
        let mut installed = false;
        for line in stanza.lines() {
            if let Some(v) = line.strip_prefix("Package: ") {
                name = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("Version: ") {
                version = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("Status: ") {
                installed = v.ends_with(" installed");
            }
        }
        if let (Some(n), Some(v), true) = (name, version, installed) {
            out.insert(n, v);
        }
    }
    out
}

/// Python and its packages, from the `*.dist-info` directories of the virtual environment
/// (`VIRTUAL_ENV`) and the system's site directories.
fn python(host: &Host, f: &mut BTreeMap<String, Field>) {
    let mut warnings = Vec::new();
    let mut lib_dirs: Vec<String> = Vec::new();
    if let Some(venv) = host.env("VIRTUAL_ENV") {
        lib_dirs.push(format!("{venv}/lib"));
    }
    lib_dirs.extend(["/usr/local/lib".to_owned(), "/usr/lib".to_owned()]);
    let mut python_version: Option<(String, String)> = None;
    for lib in &lib_dirs {
        let mut names = host.list_dir(&host.path(lib), "env", &mut warnings);
        names.sort();
        for py in names.iter().rev().filter(|n| n.starts_with("python3")) {
            if python_version.is_none() && py.len() > "python3".len() {
                python_version = Some((py.trim_start_matches("python").to_owned(), format!("{lib}/{py}")));
            }
            for site in ["site-packages", "dist-packages"] {
                let dir = format!("{lib}/{py}/{site}");
                for entry in host.list_dir(&host.path(&dir), "env", &mut warnings) {
                    let Some(stem) = entry.strip_suffix(".dist-info") else { continue };
                    let Some((name, version)) = stem.rsplit_once('-') else { continue };
                    let name = name.to_lowercase().replace('_', "-");
                    if PYTHON.contains(&name.as_str()) {
                        f.entry(format!("python.{name}"))
                            .or_insert_with(|| Field::known(version, format!("{dir}/{entry}")));
                    }
                }
            }
        }
        if host.env("VIRTUAL_ENV").is_some_and(|v| lib.starts_with(v)) && python_version.is_some() {
            // The environment's own interpreter wins over the system's.
            break;
        }
    }
    f.insert(
        "python.version".into(),
        match python_version {
            Some((v, src)) => Field::known(v, src),
            None => Field::unknown("lib/python3.*"),
        },
    );
    for name in PYTHON {
        f.entry(format!("python.{name}")).or_insert_with(|| Field::unknown("site-packages/*.dist-info"));
    }
}

/// Per-device firmware and VBIOS, where the driver publishes them.
fn firmware(host: &Host, machine: &Machine, f: &mut BTreeMap<String, Field>) {
    let mut warnings = Vec::new();
    for acc in &machine.accelerators {
        let Some(pci) = acc.pci else { continue };
        for file in ["vbios_version", "fw_version", "firmware_version"] {
            let path = format!("/sys/bus/pci/devices/{pci}/{file}");
            if let Some(v) = host.read_text(&host.path(&path), 4096, "env", &mut warnings) {
                f.insert(format!("firmware.{pci}.{file}"), Field::known(v.trim(), path));
            }
        }
    }
}

/// FNV-1a 64 over the devices (id, SKU, PCI), links and path matrix: equal hashes mean the same
/// topology as accel sees it.
pub fn topology_hash(machine: &Machine) -> String {
    let mut text = String::new();
    for a in &machine.accelerators {
        text.push_str(&format!("{}|{}|{:?}\n", a.id, a.sku.as_deref().unwrap_or("-"), a.pci));
    }
    for l in &machine.links {
        text.push_str(&format!("{}|{}|{}|{}\n", l.a, l.b, l.kind, l.count));
    }
    for row in PathClassifier::new(machine).matrix() {
        let row: Vec<String> = row.iter().map(|c| c.to_string()).collect();
        text.push_str(&row.join(","));
        text.push('\n');
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// What differs between two fingerprints: `(field, a, b)`, `None` where a side lacks the value.
pub fn diff(a: &Fingerprint, b: &Fingerprint) -> Vec<(String, Option<String>, Option<String>)> {
    let keys: std::collections::BTreeSet<&String> = a.fields.keys().chain(b.fields.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let va = a.fields.get(k).and_then(|f| f.value.clone());
            let vb = b.fields.get(k).and_then(|f| f.value.clone());
            (va != vb).then(|| (k.clone(), va, vb))
        })
        .collect()
}

/// `diff`'s answer as `accel env diff` prints it: `field: a -> b` per difference (`(unknown)`
/// for a side without the value), or `no differences`.
pub fn diff_text(changes: &[(String, Option<String>, Option<String>)]) -> String {
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unknown)".into());
    if changes.is_empty() {
        return "no differences\n".into();
    }
    changes.iter().map(|(key, a, b)| format!("{key}: {} -> {}\n", show(a), show(b))).collect()
}

/// The fingerprint of a JSON document: a fingerprint (`accel env --json`), or a document that
/// embeds one under `fingerprint` (a conformance report); secret-named values redacted.
pub fn from_document(value: serde_json::Value) -> Result<Fingerprint, String> {
    let inner = if value.get("fields").is_some() { value } else { value["fingerprint"].clone() };
    serde_json::from_value(inner).map(redacted).map_err(|_| "holds no environment fingerprint".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(
            os_release("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n").as_deref(),
            Some("Debian GNU/Linux 13 (trixie)")
        );
        let status = "Package: libc6\nStatus: install ok installed\nVersion: 2.41-12\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n";
        let v = dpkg_versions(status);
        assert_eq!(v.get("libc6").map(String::as_str), Some("2.41-12"));
        assert!(!v.contains_key("gone"));
        assert!(relevant("CUDA_VISIBLE_DEVICES") && relevant("NCCL_DEBUG") && !relevant("HOME"));
    }

    #[test]
    fn secrets_are_never_recorded() {
        assert!(!relevant("ACCEL_TRANSPORT_SECRET") && !relevant("ACCEL_ANYTHING_NEW"));
        assert!(relevant("ACCEL_TRANSPORT_BIND"));
        for name in ["ACCEL_TRANSPORT_SECRET", "NCCL_IB_KEY", "ucx_password", "HF_TOKEN", "X_CREDENTIALS"] {
            assert!(is_secret_name(name), "{name}");
        }
        assert!(!is_secret_name("NCCL_DEBUG") && !is_secret_name("CUDA_VISIBLE_DEVICES"));
        // An allowed family, a secret name: recorded, value redacted. A plugin naming the secret as
        // its visibility variable gets the same.
        let env: BTreeMap<String, String> = [
            ("NCCL_IB_KEY", "s3cr3t-one"),
            ("ACCEL_TRANSPORT_SECRET", "s3cr3t-two"),
            ("NCCL_DEBUG", "INFO"),
            ("ACCEL_TRANSPORT_BIND", "127.0.0.1:0"),
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let host = Host::in_memory(Default::default(), accel_model::SkuRegistry::builtin()).with_env(env);
        let machine = Machine::new(Default::default());
        // A family's own variables are recorded because the family declares them.
        assert!(!collect_with(&host, &machine, &[]).fields.contains_key("env.CUDA_DEVICE_ORDER"));
        let fp = collect_with(&host, &machine, &crate::default_plugins());
        assert_eq!(fp.fields["env.CUDA_DEVICE_ORDER"].value.as_deref(), Some("PCI_BUS_ID"));
        let text = serde_json::to_string(&fp).unwrap();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert_eq!(fp.fields["env.NCCL_IB_KEY"].value.as_deref(), Some(REDACTED));
        assert!(!fp.fields.contains_key("env.ACCEL_TRANSPORT_SECRET"));
        assert_eq!(fp.fields["env.NCCL_DEBUG"].value.as_deref(), Some("INFO"));
        assert_eq!(fp.fields["env.ACCEL_TRANSPORT_BIND"].value.as_deref(), Some("127.0.0.1:0"));
        // A fingerprint from an older version that still holds one is redacted on the way in.
        let mut old = fp.clone();
        old.fields.insert("env.ACCEL_TRANSPORT_SECRET".into(), Field::known("s3cr3t-two", "environment"));
        let text = serde_json::to_string(&redacted(old)).unwrap();
        assert!(!text.contains("s3cr3t") && text.contains(REDACTED), "{text}");
    }
}
