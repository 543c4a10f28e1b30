//! The vendor-plugin trait, what a plugin returns, and the explicit list of plugins.

use std::collections::BTreeMap;

use accel_model::{
    Accelerator, Domain, Link, LinkKind, LinkKindInfo, Machine, PciClass, PciId, PciNode, PciNodeKind, Vocabulary,
    Warning,
};

use serde_json::Value;

use crate::protocol::{PluginError, PROTOCOL};
use crate::Host;

/// One accelerator family's read-only view of a host.
pub trait Vendor: Send + Sync {
    /// Stable lowercase id (`nvidia`, `amd`, `generic-pci`): config key, metric label, log field.
    fn id(&self) -> &'static str;

    /// Finds this family's devices. Absence is not an error: no devices is an empty report.
    /// `platform` holds what the host layer and earlier plugins found.
    fn discover(&self, host: &Host, platform: &Machine) -> Report;

    /// What a worker needs in order to see exactly these devices. Returns data; never sets
    /// environment variables itself.
    fn isolate(&self, devices: &[&Accelerator]) -> Isolation;

    /// The vocabulary of this plugin's devices (kind, label, visibility variable, Ray resource).
    /// Discovery fills each reported device's empty vocabulary fields from it, so a plugin sets
    /// only what differs per device (isolation values, NeuronCore counts).
    fn vocabulary(&self) -> Vocabulary {
        Vocabulary::default()
    }

    /// How this plugin's link kinds are shown and valued (the `topo` legend and matrix tags).
    fn link_kinds(&self) -> Vec<LinkKindInfo> {
        Vec::new()
    }

    /// Node labels in the vendor's own Kubernetes scheme for its `devices` on `machine` (GPU
    /// Feature Discovery's `nvidia.com/gpu.*`, ...); `accel labels --format k8s` adds them.
    fn k8s_labels(&self, _machine: &Machine, _devices: &[&Accelerator]) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// What `accel capture` must keep of `host` for this family to be discovered again from the
    /// capture: its vendor trees, PCI attributes, device nodes, and the answers of its runtime
    /// recorded for replay. `machine` is what discovery found on the same host.
    fn capture(&self, _host: &Host, _machine: &Machine) -> Vec<Keep> {
        Vec::new()
    }

    /// What the environment fingerprint (`accel env`) records for this family on `host`: its
    /// driver modules, runtime packages and variables, and versions it reads itself.
    fn environment(&self, _host: &Host, _machine: &Machine) -> Environment {
        Environment::default()
    }

    /// On the live machine: attaches what the family opens once per process (its vendor
    /// library, [`Host::with_runtime`]) to the host every reader receives. `Host::open` calls it.
    fn open_live(&self, host: Host) -> Host {
        host
    }

    /// This family's readings now (the protocol's `metrics` verb): from the live machine, or
    /// from a recording in a captured tree. `None`: not provided (no reader, or nothing to
    /// read on this host). The agent serves these; conformance grades them.
    fn metrics(&self, _host: &Host) -> Option<Result<crate::readings::Metrics, PluginError>> {
        None
    }

    /// This family's health findings for its devices on `host` ([`crate::health`]): `None` when
    /// it has no source here. By default, its `metrics` readings judged by the error-counter
    /// rules; an external plugin answers its `health` verb.
    fn health(&self, host: &Host, _machine: &Machine) -> Option<Result<crate::health::Findings, PluginError>> {
        self.metrics(host).map(|r| r.map(|m| crate::health::from_readings(&m.readings)))
    }

    /// The plugin protocol's answer to `verb` (docs/plugin-protocol.md). Built-in plugins answer
    /// in process from `discover` and `isolate`, so one conformance harness grades built-in and
    /// external plugins alike; an external plugin runs its executable.
    fn call(
        &self,
        verb: &str,
        host: &Host,
        platform: &Machine,
        input: &serde_json::Value,
    ) -> Result<serde_json::Value, PluginError> {
        in_process(self, verb, host, platform, input)
    }
}

/// A vocabulary with the common fields: `kind`, `label`, the visibility variable, Ray's resource
/// (one unit per device) and the variables Ray manages for it, and the Kubernetes resource.
pub fn vocabulary(
    kind: &str,
    label: &str,
    visibility_env: Option<&str>,
    ray_resource: Option<&str>,
    ray_managed_env: &[&str],
    k8s_resource: Option<&str>,
) -> Vocabulary {
    Vocabulary {
        kind: kind.to_owned(),
        label: label.to_owned(),
        visibility_env: visibility_env.map(str::to_owned),
        visibility_separator: None,
        isolation: Vec::new(),
        ray_resource: ray_resource.map(str::to_owned),
        ray_units: ray_resource.map(|_| 1.0),
        ray_managed_env: ray_managed_env.iter().map(|v| (*v).to_owned()).collect(),
        ray_accelerator_type: None,
        k8s_resource: k8s_resource.map(str::to_owned),
        dra_driver: None,
        slurm_gres: None,
        device_files: Vec::new(),
    }
}

/// What the environment fingerprint records for a family ([`Vendor::environment`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// Kernel modules whose version (`/sys/module/<m>/version`) is the family's driver
    /// (`driver.<m>`).
    pub modules: Vec<String>,
    /// dpkg packages of its runtime (`package.<name>`).
    pub packages: Vec<String>,
    /// Environment variables that change what its runtime sees (`env.<VAR>`); a name ending in
    /// `_` is a prefix. (`*_VISIBLE_*` and the visibility variables are recorded for all.)
    pub variables: Vec<String>,
    /// Facts the family reads itself: (field name, value, where it came from).
    pub facts: Vec<(String, String, String)>,
}

/// A version file's first non-empty content as a fingerprint fact (name, value, its path).
pub fn read_fact(host: &Host, name: &str, path: &str) -> Option<(String, String, String)> {
    let text = host.read_text(&host.path(path), 64 * 1024, "env", &mut Vec::new())?;
    let value = text.trim();
    (!value.is_empty()).then(|| (name.to_owned(), value.to_owned(), path.to_owned()))
}

/// One thing a capture keeps for a family ([`Vendor::capture`]). Paths are in the machine
/// (`/sys/...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// A file, if present.
    File(String),
    /// Every file below a directory, to this depth (links are not followed); or one file.
    Tree { path: String, depth: u32 },
    /// These files of every PCI function's directory; a first component ending in `*` matches
    /// the entries with that prefix (`tile*/physical_vram_size_bytes`).
    PciAttributes(Vec<String>),
    /// The entries of a class directory (`/sys/class/accel`): each link, and its `device` link.
    ClassLinks(String),
    /// `file` in every entry of `dir` (`/proc/driver/<driver>/gpus/*/information`).
    EachEntry { dir: String, file: String },
    /// Device nodes in `dir` whose names start with `prefix` (all digits when `digits`),
    /// recorded as empty files: discovery reads only that they exist.
    DeviceNodes { dir: String, prefix: String, digits: bool },
    /// What a runtime or a network service answered, recorded at `path` for replay.
    Record { path: String, bytes: Vec<u8> },
}

/// A plugin's findings: a partial answer with warnings beats an all-or-nothing error.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub accelerators: Vec<Accelerator>,
    pub links: Vec<Link>,
    /// How the kinds in `links` are shown (an external plugin's `link_kinds`; a built-in one's
    /// come from [`Vendor::link_kinds`]).
    pub link_kinds: Vec<LinkKindInfo>,
    pub domains: Vec<Domain>,
    pub warnings: Vec<Warning>,
    /// Kubernetes node labels in the family's own scheme (an external plugin's `k8s_labels`; a
    /// built-in one's come from [`Vendor::k8s_labels`]).
    pub k8s_labels: BTreeMap<String, String>,
    /// Platform facts for [`Machine::attributes`] (later plugins see them).
    pub attributes: BTreeMap<String, String>,
    /// PCI functions of this plugin's family that its runtime says this process cannot use (a
    /// container given a subset of the host's devices): not reported, by this plugin or a later
    /// one (the generic PCI plugin).
    pub unusable: Vec<accel_model::PciAddr>,
}

/// Environment variables that confine a worker to a set of devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Isolation {
    pub env: BTreeMap<String, String>,
    /// What went wrong on the way (a plugin that did not answer, so the values came from the
    /// model), naming the plugin.
    pub warnings: Vec<Warning>,
}

/// An accelerator for a PCI function, filled from the PCI node and the SKU registry; plugins
/// then add what their vendor interface knows (memory, UUID, serial, partition).
pub fn pci_accelerator(host: &Host, node: &PciNode, vendor: &str, plugin: &str) -> Accelerator {
    let sku = node
        .vendor
        .zip(node.device)
        .and_then(|(v, d)| host.skus().lookup(v, d, node.subsystem_vendor.zip(node.subsystem_device)));
    Accelerator {
        id: format!("{vendor}-{}", node.id),
        index: 0,
        vendor: vendor.to_owned(),
        plugin: plugin.to_owned(),
        sku: sku.map(|s| s.id.clone()),
        product: match (sku, node.vendor.zip(node.device)) {
            (Some(s), _) => s.product.clone(),
            (None, Some((v, d))) => format!("unknown device {v}:{d}"),
            (None, None) => "unknown device (ids unreadable)".to_owned(),
        },
        family: sku.map(|s| s.family.clone()),
        architecture: sku.and_then(|s| s.architecture.clone()),
        pci: node.address,
        pci_vendor: node.vendor,
        pci_device: node.device,
        numa_node: node.numa_node,
        memory_bytes: sku.and_then(|s| s.memory_bytes),
        memory_numa_node: None,
        uuid: None,
        serial: None,
        partition: None,
        dtypes: sku.map(|s| s.dtypes.clone()).unwrap_or_default(),
        vocabulary: Vocabulary {
            ray_accelerator_type: sku.and_then(|s| s.ray_accelerator_type.clone()),
            ..Default::default()
        },
        health: None,
    }
}

/// PCI endpoints of one vendor whose class passes `class_ok`.
pub fn pci_functions<'m>(
    platform: &'m Machine,
    vendor: u16,
    class_ok: impl Fn(PciClass) -> bool + 'm,
) -> impl Iterator<Item = &'m PciNode> + 'm {
    platform.pci.iter().filter(move |n| {
        n.kind == PciNodeKind::Endpoint
            && n.vendor == Some(PciId(vendor))
            && n.address.is_some()
            && n.class.is_none_or(&class_ok)
    })
}

/// A scale-up link between `accs[i]` and `accs[j]`, with the bandwidth the first one's SKU gives
/// `count` links.
pub fn sku_link(host: &Host, accs: &[Accelerator], (i, j): (usize, usize), kind: LinkKind, count: u32) -> Link {
    Link::new(accs[i].id.clone(), accs[j].id.clone(), kind, count, link_gbps(host, &accs[i], count))
}

/// Isolation by the devices' isolation values (their index where the plugin set none), in
/// bundle order, joined by the first device's separator, in each of `vars`.
pub fn isolate_by_index(devices: &[&Accelerator], vars: &[&str]) -> Isolation {
    let list: Vec<String> = devices.iter().flat_map(|d| isolation_values(d)).collect();
    let sep = devices.first().map_or(",", |d| d.vocabulary.separator());
    Isolation { env: vars.iter().map(|v| ((*v).to_owned(), list.join(sep))).collect(), warnings: Vec::new() }
}

/// Isolation from the model alone: each device's isolation values, in bundle order, in its
/// visibility variable, joined by its separator. For devices whose plugin is not here (a
/// machine read from JSON) or did not answer.
pub fn isolate_from_model(devices: &[&Accelerator]) -> Isolation {
    let mut by_var: Vec<(&str, &str, Vec<String>)> = Vec::new();
    for d in devices {
        let Some(var) = d.vocabulary.visibility_env.as_deref() else { continue };
        match by_var.iter_mut().find(|(v, _, _)| *v == var) {
            Some((_, _, values)) => values.extend(isolation_values(d)),
            None => by_var.push((var, d.vocabulary.separator(), isolation_values(d))),
        }
    }
    let env = by_var.into_iter().map(|(var, sep, values)| (var.to_owned(), values.join(sep))).collect();
    Isolation { env, warnings: Vec::new() }
}

/// Bandwidth of `count` links of an accelerator's SKU, where the registry knows its scale-up.
pub fn link_gbps(host: &Host, acc: &Accelerator, count: u32) -> Option<f64> {
    let sku = host.skus().get(acc.sku.as_deref()?)?;
    sku.scale_up.map(|s| s.gbps_per_link() * f64::from(count))
}

/// Whether the root has a `/dev` to check runtime device nodes in (the live machine, a
/// container); captures carry none, and then nothing is checked.
pub(crate) fn has_dev(host: &Host) -> bool {
    host.is_dir(&host.path("/dev"))
}

/// The warning for devices on PCI that the vendor runtime cannot open here (no device node: a
/// container given a subset of the host's devices), naming them.
pub(crate) fn not_visible(source: &str, node: &str, hidden: &[String], consequence: &str) -> Option<Warning> {
    (!hidden.is_empty()).then(|| Warning {
        source: source.into(),
        path: Some(node.into()),
        message: format!(
            "devices {} are on PCI but have no {node} device node (not passed into this container?); {consequence}",
            hidden.join(", ")
        ),
    })
}

/// The values a device contributes to its visibility variable: its vocabulary's, else its index.
pub fn isolation_values(acc: &Accelerator) -> Vec<String> {
    if acc.vocabulary.isolation.is_empty() {
        vec![acc.index.to_string()]
    } else {
        acc.vocabulary.isolation.clone()
    }
}

/// A built-in plugin's protocol answers, in process: the same documents an executable prints.
pub fn in_process<V: Vendor + ?Sized>(
    plugin: &V,
    verb: &str,
    host: &Host,
    platform: &Machine,
    input: &Value,
) -> Result<Value, PluginError> {
    match verb {
        "version" => Ok(serde_json::json!({
            "protocol": PROTOCOL,
            "name": plugin.id(),
            "version": env!("CARGO_PKG_VERSION"),
            "verbs": ["version", "discover", "isolate"],
        })),
        "discover" => {
            let mut report = plugin.discover(host, platform);
            let vocabulary = plugin.vocabulary();
            for acc in &mut report.accelerators {
                acc.vocabulary.fill_from(&vocabulary);
            }
            let mut seen = platform.clone();
            seen.accelerators.extend(report.accelerators.iter().cloned());
            seen.domains.extend(report.domains.iter().cloned());
            seen.attributes.extend(report.attributes.clone());
            let devices: Vec<&Accelerator> = report.accelerators.iter().collect();
            Ok(serde_json::json!({
                "protocol": PROTOCOL,
                "accelerators": report.accelerators,
                "links": report.links,
                "link_kinds": plugin.link_kinds(),
                "k8s_labels": plugin.k8s_labels(&seen, &devices),
                "domains": report.domains,
                "warnings": report.warnings,
                "attributes": report.attributes,
            }))
        }
        "isolate" => {
            let devices: Vec<Accelerator> =
                input.get("devices").cloned().and_then(|d| serde_json::from_value(d).ok()).ok_or_else(|| {
                    PluginError::Garbage {
                        name: plugin.id().into(),
                        verb: verb.into(),
                        message: "isolate input has no valid `devices`".into(),
                    }
                })?;
            let refs: Vec<&Accelerator> = devices.iter().collect();
            Ok(serde_json::json!({"protocol": PROTOCOL, "env": plugin.isolate(&refs).env}))
        }
        "metrics" => match plugin.metrics(host) {
            None => Err(PluginError::Unsupported { name: plugin.id().into(), verb: verb.into() }),
            Some(Err(e)) => Err(e),
            Some(Ok(m)) => {
                let readings = crate::readings::Readings { protocol: PROTOCOL as u32, ..m.readings };
                Ok(serde_json::to_value(readings).unwrap_or(Value::Null))
            }
        },
        _ => Err(PluginError::Unsupported { name: plugin.id().into(), verb: verb.into() }),
    }
}

/// What a worker needs in order to see exactly the accelerators `ids` of `machine`, in that
/// order: each plugin's `isolate` answers for the ordered devices it reported (an external
/// plugin through the protocol), the variables are merged, and every variable Ray would
/// otherwise rewrite for those devices is switched off (`RAY_EXPERIMENTAL_NOSET_<VAR>=1`).
/// Devices whose plugin has no visibility mechanism contribute nothing.
///
/// Devices of a plugin that is not in `plugins` (a machine read from JSON on a host without
/// that plugin) are isolated from the model alone: their isolation values, in `ids` order,
/// joined by their separator, in their visibility variable; the warnings say so.
pub fn isolate(plugins: &[Box<dyn Vendor>], machine: &Machine, ids: &[&str]) -> Isolation {
    let (mut out, orphans) = isolate_parts(plugins, machine, ids);
    if !orphans.is_empty() {
        out.warnings.push(accel_model::Warning {
            source: "isolate".into(),
            path: None,
            message: format!(
                "plugin {} not found here; its devices isolated from their discovered values",
                orphans.join(", ")
            ),
        });
    }
    out
}

/// [`isolate`] without its warning: the isolation, and the plugins (by id) whose devices were
/// isolated from their stored values because `plugins` does not hold them.
pub(crate) fn isolate_parts(plugins: &[Box<dyn Vendor>], machine: &Machine, ids: &[&str]) -> (Isolation, Vec<String>) {
    let mut out = Isolation::default();
    let devices: Vec<&accel_model::Accelerator> = ids.iter().filter_map(|id| machine.accelerator(id)).collect();
    let mut orphans = Vec::new();
    let mut done: Vec<&str> = Vec::new();
    for acc in &devices {
        if done.contains(&acc.plugin.as_str()) {
            continue;
        }
        done.push(&acc.plugin);
        let mine: Vec<&accel_model::Accelerator> = devices.iter().copied().filter(|a| a.plugin == acc.plugin).collect();
        match plugins.iter().find(|p| p.id() == acc.plugin) {
            Some(plugin) => {
                let got = plugin.isolate(&mine);
                out.env.extend(got.env);
                out.warnings.extend(got.warnings);
            }
            None => orphans.extend(mine),
        }
    }
    let mut names: Vec<String> = orphans.iter().map(|a| a.plugin.clone()).collect();
    names.dedup();
    if !orphans.is_empty() {
        let got = isolate_from_model(&orphans);
        for (k, v) in got.env {
            out.env.entry(k).or_insert(v);
        }
    }
    for acc in &devices {
        for var in &acc.vocabulary.ray_managed_env {
            out.env.insert(format!("RAY_EXPERIMENTAL_NOSET_{var}"), "1".into());
        }
    }
    (out, names)
}
