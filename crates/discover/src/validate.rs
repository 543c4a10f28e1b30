//! The checks every plugin's report passes before it enters the model, built-in and external
//! alike (docs/plugin-protocol.md, "What accel checks"): bounded sizes, no control characters,
//! unique ids, one plugin per PCI function, and links between devices that exist, agreed by the
//! plugins of both ends.
//!
//! Each rejected element costs one warning naming the plugin (`plugin:<name>`); the rest of
//! the report, and of discovery, goes on. Every check is a hash lookup, so a report at the
//! limits costs time and memory in proportion to its size.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use accel_model::{Accelerator, Link, LinkKind, Machine, PciAddr, Warning};

use crate::Report;

/// The most devices one plugin may report; the rest are dropped. The largest nodes today
/// have 64 (eight MI300X in CPX mode; eight H100 split into seven MIG devices each have 56),
/// and `accel topo` prints a matrix of the square of this.
pub const MAX_DEVICES: usize = 1024;
/// The most links one plugin may report.
pub const MAX_LINKS: usize = 65536;
/// The most domains one plugin may report.
pub const MAX_DOMAINS: usize = 256;
/// The most warnings an external plugin's answer may carry (the checks' own, and one per
/// element the answer loses, come on top).
pub const MAX_WARNINGS: usize = 256;
/// The most platform attributes one plugin may report.
pub const MAX_ATTRIBUTES: usize = 256;
/// The most entries in one of a device's lists (`dtypes`, `isolation`, `ray_managed_env`,
/// `device_files`).
pub const MAX_LIST: usize = 64;
/// The most characters in an id, a name, a product or a vocabulary string (after escaping).
pub const MAX_NAME: usize = 256;
/// The most characters in a warning's message or path.
pub const MAX_MESSAGE: usize = 1024;
/// The most link kinds one plugin may describe.
pub const MAX_LINK_KINDS: usize = 64;
/// The most Kubernetes node labels one plugin may give.
pub const MAX_K8S_LABELS: usize = 256;
/// Label key prefixes that are accel's own or another tool's, never a plugin's.
const RESERVED_LABEL_PREFIXES: [&str; 3] = ["accel.io/", "feature.node.kubernetes.io/", "kubernetes.io/"];

/// Why `key=value` is not a Kubernetes node label a plugin may set, if it is not: the key is an
/// optional DNS-subdomain prefix and a name of at most 63 characters, the value at most 63
/// characters of `[A-Za-z0-9._-]` with alphanumerics at both ends, and the prefix is not
/// reserved.
pub fn check_k8s_label(key: &str, value: &str) -> Result<(), String> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 63
            && n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            && n.starts_with(|c: char| c.is_ascii_alphanumeric())
            && n.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let (prefix, name) = key.rsplit_once('/').map_or((None, key), |(p, n)| (Some(p), n));
    if let Some(p) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        if p.len() > 253 || !p.split('.').all(label_ok) {
            return Err(format!("key prefix {:?} is not a DNS subdomain", escape_controls(p, false)));
        }
    }
    if !name_ok(name) {
        return Err(format!("key {:?} is not a label name", escape_controls(key, false)));
    }
    if RESERVED_LABEL_PREFIXES.iter().any(|r| key.starts_with(r) || key.contains(&format!(".{r}"))) {
        return Err(format!("key {key} is under a prefix that belongs to accel or Kubernetes"));
    }
    if !value.is_empty() && !name_ok(value) {
        return Err(format!("value {:?} of {key} is not a label value", escape_controls(value, false)));
    }
    Ok(())
}

/// The most characters in an attribute value (a metadata document such as `gce.tpu-env`).
pub const MAX_DOCUMENT: usize = 65536;

/// `text` with every control character (C0, DEL, C1) written as `\u{..}`, so no terminal,
/// label or file sees it raw. Line feeds and tabs stay where `keep_lines` (documents).
pub fn escape_controls(text: &str, keep_lines: bool) -> std::borrow::Cow<'_, str> {
    let escaped = |c: char| c.is_control() && !(keep_lines && matches!(c, '\n' | '\t'));
    if !text.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Counts what cleaning a report changed, naming the first place of each kind.
#[derive(Default)]
struct Clean {
    escaped: usize,
    first_escaped: Option<String>,
    cut: usize,
    first_cut: Option<String>,
}

impl Clean {
    /// Escapes control characters in `s` and cuts it to `max` characters.
    fn text(&mut self, s: &mut String, max: usize, keep_lines: bool, place: impl Fn() -> String) {
        if let std::borrow::Cow::Owned(e) = escape_controls(s, keep_lines) {
            *s = e;
            self.escaped += 1;
            self.first_escaped.get_or_insert_with(&place);
        }
        if s.len() > max {
            if let Some((at, _)) = s.char_indices().nth(max) {
                s.truncate(at);
                self.cut += 1;
                self.first_cut.get_or_insert_with(&place);
            }
        }
    }

    fn opt(&mut self, s: &mut Option<String>, max: usize, place: impl Fn() -> String) {
        if let Some(s) = s {
            self.text(s, max, false, place);
        }
    }

    /// Cuts `list` to `max_len` entries and cleans each.
    fn list(&mut self, list: &mut Vec<String>, max_len: usize, place: impl Fn() -> String) {
        if list.len() > max_len {
            list.truncate(max_len);
            self.cut += 1;
            self.first_cut.get_or_insert_with(&place);
        }
        for (i, s) in list.iter_mut().enumerate() {
            self.text(s, MAX_NAME, false, || format!("{}[{i}]", place()));
        }
    }

    fn accelerator(&mut self, acc: &mut Accelerator, i: usize) {
        let at = |field: &str| format!("accelerators[{i}].{field}");
        self.text(&mut acc.id, MAX_NAME, false, || at("id"));
        self.text(&mut acc.vendor, MAX_NAME, false, || at("vendor"));
        self.opt(&mut acc.sku, MAX_NAME, || at("sku"));
        self.text(&mut acc.product, MAX_NAME, false, || at("product"));
        self.opt(&mut acc.family, MAX_NAME, || at("family"));
        self.opt(&mut acc.architecture, MAX_NAME, || at("architecture"));
        self.opt(&mut acc.uuid, MAX_NAME, || at("uuid"));
        self.opt(&mut acc.serial, MAX_NAME, || at("serial"));
        if let Some(p) = &mut acc.partition {
            self.text(&mut p.physical_id, MAX_NAME, false, || at("partition.physical_id"));
            self.text(&mut p.mode, MAX_NAME, false, || at("partition.mode"));
        }
        self.list(&mut acc.dtypes, MAX_LIST, || at("dtypes"));
        let v = &mut acc.vocabulary;
        self.text(&mut v.kind, MAX_NAME, false, || at("vocabulary.kind"));
        self.text(&mut v.label, MAX_NAME, false, || at("vocabulary.label"));
        self.opt(&mut v.visibility_env, MAX_NAME, || at("vocabulary.visibility_env"));
        self.list(&mut v.isolation, MAX_LIST, || at("vocabulary.isolation"));
        self.opt(&mut v.ray_resource, MAX_NAME, || at("vocabulary.ray_resource"));
        self.list(&mut v.ray_managed_env, MAX_LIST, || at("vocabulary.ray_managed_env"));
        self.opt(&mut v.ray_accelerator_type, MAX_NAME, || at("vocabulary.ray_accelerator_type"));
        self.opt(&mut v.k8s_resource, MAX_NAME, || at("vocabulary.k8s_resource"));
        self.opt(&mut v.dra_driver, MAX_NAME, || at("vocabulary.dra_driver"));
        self.opt(&mut v.visibility_separator, MAX_NAME, || at("vocabulary.visibility_separator"));
        self.opt(&mut v.slurm_gres, MAX_NAME, || at("vocabulary.slurm_gres"));
        self.list(&mut v.device_files, MAX_LIST, || at("vocabulary.device_files"));
    }

    /// Cleans every string of `report`.
    fn report(&mut self, report: &mut Report) {
        for (i, acc) in report.accelerators.iter_mut().enumerate() {
            self.accelerator(acc, i);
        }
        for (i, link) in report.links.iter_mut().enumerate() {
            self.text(&mut link.a, MAX_NAME, false, || format!("links[{i}].a"));
            self.text(&mut link.b, MAX_NAME, false, || format!("links[{i}].b"));
            if let Some(source) = &mut link.source {
                self.text(source, MAX_NAME, false, || format!("links[{i}].source"));
            }
            // A plugin reports what it saw: only the registry declares links by design.
            link.origin = accel_model::LinkOrigin::Observed;
        }
        for (i, k) in report.link_kinds.iter_mut().enumerate() {
            self.text(&mut k.name, MAX_NAME, false, || format!("link_kinds[{i}].name"));
            if k.short.as_str().len() > 8 {
                k.short = k.kind.default_short();
                self.cut += 1;
                self.first_cut.get_or_insert_with(|| format!("link_kinds[{i}].short"));
            }
        }
        for (i, d) in report.domains.iter_mut().enumerate() {
            self.text(&mut d.name, MAX_NAME, false, || format!("domains[{i}].name"));
            self.text(&mut d.source, MAX_NAME, false, || format!("domains[{i}].source"));
            self.list(&mut d.accelerators, MAX_DEVICES, || format!("domains[{i}].accelerators"));
        }
        for (i, w) in report.warnings.iter_mut().enumerate() {
            self.text(&mut w.source, MAX_NAME, false, || format!("warnings[{i}].source"));
            self.opt(&mut w.path, MAX_MESSAGE, || format!("warnings[{i}].path"));
            self.text(&mut w.message, MAX_MESSAGE, false, || format!("warnings[{i}].message"));
        }
        let attributes = std::mem::take(&mut report.attributes);
        for (mut k, mut v) in attributes {
            let key = k.clone();
            self.text(&mut k, MAX_NAME, false, || format!("attributes key {:?}", escape_controls(&key, false)));
            self.text(&mut v, MAX_DOCUMENT, true, || format!("attributes.{k}"));
            report.attributes.insert(k, v);
        }
    }
}

/// The warning for a list cut to its limit: `dropped` elements of `what` past `max`.
pub(crate) fn over_limit(source: &str, what: &str, dropped: usize, max: usize) -> Warning {
    let what = if what == "accelerators" { "devices" } else { what };
    warn(source, format!("{dropped} {what} over the limit of {max} dropped"))
}

/// Drops the elements of `list` past `max`, saying how many went.
fn bound<T>(list: &mut Vec<T>, max: usize, what: &str, warnings: &mut Vec<Warning>, source: &str) {
    if list.len() > max {
        warnings.push(over_limit(source, what, list.len() - max, max));
        list.truncate(max);
    }
}

fn warn(source: &str, message: String) -> Warning {
    Warning { source: source.to_owned(), path: None, message }
}

/// A link's identity: its ends in order, and its kind.
type Key<'l> = (&'l str, &'l str, LinkKind);

fn key(l: &Link) -> Key<'_> {
    if l.a <= l.b {
        (&l.a, &l.b, l.kind)
    } else {
        (&l.b, &l.a, l.kind)
    }
}

/// Who claimed a PCI function: the plugin, and whether every device on it so far is a
/// partition (only partitions of one plugin share a function).
struct Claim {
    plugin: String,
    partitions: bool,
}

/// What discovery has accepted so far, across plugins: each report is checked against it, and
/// links wait in it until every plugin has answered (a link may name a later plugin's device).
#[derive(Default)]
pub(crate) struct Checker {
    /// Every accepted device id, with its plugin.
    ids: HashMap<String, String>,
    pci: HashMap<PciAddr, Claim>,
    /// Each plugin's links (bounded and cleaned), in report order.
    links: Vec<(String, Link)>,
}

impl Checker {
    /// Checks `report` from `plugin` in place: what breaks a rule is dropped with a warning
    /// (added to `report.warnings`), and its links wait for [`Checker::finish`].
    pub(crate) fn accept(&mut self, plugin: &str, report: &mut Report) {
        let source = format!("plugin:{plugin}");
        let mut notes = Vec::new();
        bound(&mut report.accelerators, MAX_DEVICES, "devices", &mut notes, &source);
        bound(&mut report.links, MAX_LINKS, "links", &mut notes, &source);
        bound(&mut report.domains, MAX_DOMAINS, "domains", &mut notes, &source);
        if report.attributes.len() > MAX_ATTRIBUTES {
            let dropped = report.attributes.len() - MAX_ATTRIBUTES;
            let keep: BTreeMap<String, String> =
                std::mem::take(&mut report.attributes).into_iter().take(MAX_ATTRIBUTES).collect();
            report.attributes = keep;
            notes.push(over_limit(&source, "attributes", dropped, MAX_ATTRIBUTES));
        }
        bound(&mut report.link_kinds, MAX_LINK_KINDS, "link kinds", &mut notes, &source);
        if report.k8s_labels.len() > MAX_K8S_LABELS {
            let dropped = report.k8s_labels.len() - MAX_K8S_LABELS;
            report.k8s_labels = std::mem::take(&mut report.k8s_labels).into_iter().take(MAX_K8S_LABELS).collect();
            notes.push(over_limit(&source, "Kubernetes labels", dropped, MAX_K8S_LABELS));
        }
        report.k8s_labels.retain(|k, v| match check_k8s_label(k, v) {
            Ok(()) => true,
            Err(why) => {
                notes.push(warn(&source, format!("Kubernetes label dropped: {why}")));
                false
            }
        });
        let mut clean = Clean::default();
        clean.report(report);
        if let Some(first) = clean.first_escaped {
            notes.push(warn(
                &source,
                format!("control characters escaped in {} strings (first: {first})", clean.escaped),
            ));
        }
        if let Some(first) = clean.first_cut {
            notes.push(warn(
                &source,
                format!("{} strings or lists over their length limits truncated (first: {first})", clean.cut),
            ));
        }
        let mut kept = Vec::with_capacity(report.accelerators.len());
        for mut acc in std::mem::take(&mut report.accelerators) {
            plugin.clone_into(&mut acc.plugin);
            if let Some(owner) = self.ids.get(&acc.id) {
                notes
                    .push(warn(&source, format!("device {} dropped: plugin {owner} already reported that id", acc.id)));
                continue;
            }
            if let Some(addr) = acc.pci {
                match self.pci.get_mut(&addr) {
                    Some(claim) if claim.plugin != plugin => {
                        let owner = &claim.plugin;
                        notes.push(warn(
                            &source,
                            format!("device {} dropped: PCI function {addr} belongs to plugin {owner}", acc.id),
                        ));
                        continue;
                    }
                    Some(claim) if !(claim.partitions && acc.partition.is_some()) => {
                        notes.push(warn(
                            &source,
                            format!(
                                "device {} dropped: PCI function {addr} already has a device of this plugin (only partitions share one)",
                                acc.id
                            ),
                        ));
                        continue;
                    }
                    Some(_) => {}
                    None => {
                        let claim = Claim { plugin: plugin.to_owned(), partitions: acc.partition.is_some() };
                        self.pci.insert(addr, claim);
                    }
                }
            }
            self.ids.insert(acc.id.clone(), plugin.to_owned());
            kept.push(acc);
        }
        report.accelerators = kept;
        self.links.extend(std::mem::take(&mut report.links).into_iter().map(|l| (plugin.to_owned(), l)));
        report.warnings.extend(notes);
    }

    /// Adds the links that pass to `machine`, once every plugin has answered: both ends exist
    /// (accelerators or NICs), one end is the reporting plugin's device, and a link to another
    /// plugin's device is reported by that plugin too (the two reports are kept as one link).
    pub(crate) fn finish(self, machine: &mut Machine) {
        // The owner of each endpoint: a plugin for an accelerator, none for a NIC (the host's).
        let mut owner: HashMap<&str, Option<&str>> = machine.nics.iter().map(|n| (n.name.as_str(), None)).collect();
        owner.extend(machine.accelerators.iter().map(|a| (a.id.as_str(), Some(a.plugin.as_str()))));
        let reported: HashSet<(&str, Key)> = self.links.iter().map(|(p, l)| (p.as_str(), key(l))).collect();
        let mut seen: HashMap<Key, &str> = HashMap::new();
        let mut kept = Vec::new();
        let mut notes = Vec::new();
        for (plugin, link) in &self.links {
            let k = key(link);
            let refuse = |why: String| {
                let message = format!("link {} to {} ({}) dropped: {why}", link.a, link.b, link.kind);
                warn(&format!("plugin:{plugin}"), message)
            };
            if link.a == link.b {
                notes.push(refuse("it joins a device to itself".into()));
                continue;
            }
            let (Some(&oa), Some(&ob)) = (owner.get(link.a.as_str()), owner.get(link.b.as_str())) else {
                let missing = if owner.contains_key(link.a.as_str()) { &link.b } else { &link.a };
                notes.push(refuse(format!("no device or NIC {missing} in the machine")));
                continue;
            };
            let mine = Some(plugin.as_str());
            if oa != mine && ob != mine {
                notes.push(refuse("neither end is a device of this plugin".into()));
                continue;
            }
            // The plugin of the other end, where that is not this plugin (nor a NIC).
            let other = [(oa, &link.a), (ob, &link.b)]
                .into_iter()
                .find_map(|(o, id)| Some((o.filter(|o| Some(*o) != mine)?, id)));
            if let Some((other, id)) = other {
                if !reported.contains(&(other, k)) {
                    notes.push(refuse(format!("{id} is a device of plugin {other}, which does not report this link")));
                    continue;
                }
            }
            match seen.get(&k) {
                Some(first) if *first == plugin.as_str() => notes.push(refuse("reported twice".into())),
                // The other end's plugin reported it first: one link, agreed by both.
                Some(_) => {}
                None => {
                    seen.insert(k, plugin);
                    kept.push(link.clone());
                }
            }
        }
        machine.links.extend(kept);
        machine.warnings.extend(notes);
    }
}
