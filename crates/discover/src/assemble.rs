//! Assembles one [`Machine`]: the host layer first, then every plugin's report, checked
//! ([`crate::validate`]) and merged; then what only the whole machine can settle (link kinds,
//! Ray's shared variables, device numbering, isolation values).

use std::collections::BTreeMap;

use accel_model::Machine;

use crate::{exec, linux, plugins_with_external, validate, Host, Vendor};

/// Discovers one machine: the host layer first, then each plugin in order.
/// A plugin sees what the host layer and earlier plugins found. Every report, built-in or
/// external, passes the same checks before it enters the machine ([`validate`]): bounded
/// sizes, control characters escaped, unique ids, one plugin per PCI function, and links
/// between devices that exist, agreed by the plugins of both ends.
pub fn discover(host: &Host, plugins: &[Box<dyn Vendor>]) -> Machine {
    let mut machine = linux::read_platform(host);
    let mut unusable = std::collections::BTreeSet::new();
    let mut checker = validate::Checker::default();
    let mut declared = Vec::new();
    for plugin in plugins {
        let mut report = plugin.discover(host, &machine);
        unusable.extend(std::mem::take(&mut report.unusable));
        let usable = |a: &accel_model::Accelerator| !a.pci.is_some_and(|p| unusable.contains(&p));
        report.accelerators.retain(usable);
        let vocabulary = plugin.vocabulary();
        for acc in &mut report.accelerators {
            acc.vocabulary.fill_from(&vocabulary);
        }
        if report.link_kinds.is_empty() {
            report.link_kinds = plugin.link_kinds();
        }
        checker.accept(plugin.id(), &mut report);
        machine.accelerators.extend(report.accelerators);
        machine.domains.extend(report.domains);
        machine.warnings.extend(report.warnings);
        machine.attributes.extend(report.attributes);
        machine.k8s_labels.extend(report.k8s_labels);
        declared.extend(report.link_kinds);
        let mine: Vec<&accel_model::Accelerator> =
            machine.accelerators.iter().filter(|a| a.plugin == plugin.id()).collect();
        let own = if mine.is_empty() { BTreeMap::new() } else { plugin.k8s_labels(&machine, &mine) };
        for (k, v) in own {
            match validate::check_k8s_label(&k, &v) {
                Ok(()) => {
                    machine.k8s_labels.insert(k, v);
                }
                Err(why) => {
                    machine.warn(&format!("plugin:{}", plugin.id()), None, format!("Kubernetes label dropped: {why}"))
                }
            }
        }
    }
    // Links last: one may name a device of a plugin that ran later.
    checker.finish(&mut machine);
    crate::declared::add_declared_links(host, &mut machine);
    describe_link_kinds(&mut machine, &declared);
    let all = host.root_escapes();
    // Name each place once: a path under another listed one adds nothing.
    let escapes: Vec<String> = all
        .iter()
        .filter(|p| !all.iter().any(|q| q != *p && std::path::Path::new(p).starts_with(q)))
        .cloned()
        .collect();
    if !escapes.is_empty() {
        let shown: Vec<&str> = escapes.iter().take(5).map(String::as_str).collect();
        let more = if escapes.len() > 5 { format!(" and {} more", escapes.len() - 5) } else { String::new() };
        machine.warnings.push(accel_model::Warning {
            source: "host".into(),
            path: escapes.first().cloned(),
            message: format!(
                "symlinks lead out of the root ({}{more}); resolved inside the root, never on this machine",
                shown.join(", ")
            ),
        });
    }
    add_missing_functions(&mut machine);
    // What an imported topology tool saw per PCI function (`accel import hwloc`), after every
    // plugin has spoken, so a compute device none of them identified is named.
    crate::osdevs::annotate(host, &mut machine);
    own_memory_nodes(&mut machine);
    share_ray_managed_env(&mut machine, plugins);
    assign_indices(&mut machine);
    fill_isolation(&mut machine, plugins);
    let mut by_plugin = crate::health::ByPlugin::new();
    for plugin in plugins {
        if machine.accelerators.iter().any(|a| a.plugin == plugin.id()) {
            by_plugin.insert(plugin.id(), plugin.health(host, &machine));
        }
    }
    crate::health::evaluate(host.is_live(), &by_plugin, &mut machine);
    machine
}

/// A memory-only NUMA node that holds an accelerator's memory (GPU HBM on POWER9 and Grace)
/// belongs to that device: the node names it, and no device or function takes it for its CPU
/// locality (a device pointing at such a node gets its nearest CPU node by distance instead,
/// or none).
fn own_memory_nodes(machine: &mut Machine) {
    let owners: Vec<(u32, String)> =
        machine.accelerators.iter().filter_map(|a| Some((a.memory_numa_node?, a.id.clone()))).collect();
    for (node, id) in owners {
        if let Some(n) = machine.numa_nodes.iter_mut().find(|n| n.id == node && n.cpus.is_empty()) {
            n.memory_of.get_or_insert(id);
        }
    }
    let memory_only: Vec<u32> = machine.numa_nodes.iter().filter(|n| n.memory_of.is_some()).map(|n| n.id).collect();
    let nearest = |node: u32, machine: &Machine| -> Option<u32> {
        let from = machine.numa_node(node)?;
        let mut best: Vec<(u32, u32)> = machine
            .numa_nodes
            .iter()
            .filter(|n| !n.cpus.is_empty())
            .filter_map(|n| from.distances.get(&n.id).map(|d| (*d, n.id)))
            .collect();
        best.sort_unstable();
        match best.as_slice() {
            [(d, id), rest @ ..] if rest.first().is_none_or(|(d2, _)| d2 > d) => Some(*id),
            _ => None,
        }
    };
    let fixes: Vec<(usize, Option<u32>)> = machine
        .accelerators
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.numa_node.filter(|n| memory_only.contains(n)).map(|n| (i, nearest(n, machine))))
        .collect();
    for (i, node) in fixes {
        machine.accelerators[i].numa_node = node;
    }
}

/// Gives every device with a visibility variable its isolation values: what its plugin's
/// `isolate` puts in that variable for the device alone (its index, a UUID, a module id).
fn fill_isolation(machine: &mut Machine, plugins: &[Box<dyn Vendor>]) {
    for i in 0..machine.accelerators.len() {
        let acc = &machine.accelerators[i];
        let Some(var) = acc.vocabulary.visibility_env.clone() else { continue };
        if !acc.vocabulary.isolation.is_empty() {
            continue;
        }
        let Some(plugin) = plugins.iter().find(|p| p.id() == acc.plugin) else { continue };
        if let Some(value) = plugin.isolate(&[acc]).env.get(&var) {
            machine.accelerators[i].vocabulary.isolation = value.split(',').map(str::to_owned).collect();
        }
    }
}

/// Discovers with the built-in plugins and the external ones `options` finds
/// (`accel-plugin-<name>` in `ACCEL_PLUGIN_DIR` or on `PATH`), as the CLI and Python do.
pub fn discover_all(host: &Host, options: &exec::ExecOptions) -> Machine {
    let (plugins, warnings) = plugins_with_external(options);
    let mut machine = discover(host, &plugins);
    machine.warnings.extend(warnings);
    machine
}

/// Ray picks one manager per resource by probing the node (for `GPU`: NVIDIA's, AMD's or
/// Intel's), so any plugin's variable for that resource may be the one Ray rewrites. Every
/// device therefore lists, in `ray_managed_env`, the variables of every plugin (and device)
/// that shares its Ray resource, in plugin order, and accel switches them all off when it
/// sets visibility.
fn share_ray_managed_env(machine: &mut Machine, plugins: &[Box<dyn Vendor>]) {
    let mut shared: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |resource: &str, vars: &[String]| {
        let i = match shared.iter().position(|(r, _)| r == resource) {
            Some(i) => i,
            None => {
                shared.push((resource.to_owned(), Vec::new()));
                shared.len() - 1
            }
        };
        for v in vars {
            if !shared[i].1.contains(v) {
                shared[i].1.push(v.clone());
            }
        }
    };
    for plugin in plugins {
        let v = plugin.vocabulary();
        if let Some(r) = &v.ray_resource {
            add(r, &v.ray_managed_env);
        }
    }
    for acc in &machine.accelerators {
        if let Some(r) = &acc.vocabulary.ray_resource {
            add(r, &acc.vocabulary.ray_managed_env);
        }
    }
    for acc in &mut machine.accelerators {
        let Some(r) = &acc.vocabulary.ray_resource else { continue };
        if let Some((_, vars)) = shared.iter().find(|(s, _)| s == r) {
            acc.vocabulary.ray_managed_env.clone_from(vars);
        }
    }
}

/// Describes each kind the machine's links use, by the first plugin that declared it, and gives
/// a link that reports no bandwidth its kind's nominal rate (count times GB/s per link).
fn describe_link_kinds(machine: &mut Machine, declared: &[accel_model::LinkKindInfo]) {
    let mut used: Vec<accel_model::LinkKind> = machine.links.iter().map(|l| l.kind).collect();
    used.sort();
    used.dedup();
    machine.link_kinds = used.iter().filter_map(|k| declared.iter().find(|d| d.kind == *k).cloned()).collect();
    for link in &mut machine.links {
        if link.gbps.is_none() {
            let per_link = machine.link_kinds.iter().find(|d| d.kind == link.kind).and_then(|d| d.gbps_per_link);
            link.gbps = per_link.map(|g| g * f64::from(link.count));
        }
    }
}

/// An accelerator that a vendor runtime reports at a PCI address the PCI tree lacks (a
/// KFD-only capture, a container's partial `/sys`) gets a parentless endpoint there, so every
/// accelerator's PCI function is in the tree; with no path to a host bridge its locality stays
/// unknown (`SYS`, or `NODE` by NUMA node), as before.
fn add_missing_functions(machine: &mut Machine) {
    let mut added = Vec::new();
    for acc in &machine.accelerators {
        let Some(addr) = acc.pci else { continue };
        let id = addr.to_string();
        if machine.pci_node(&id).is_some() || added.iter().any(|n: &accel_model::PciNode| n.id == id) {
            continue;
        }
        let mut node = accel_model::PciNode::new(id, accel_model::PciNodeKind::Endpoint, None);
        node.vendor = acc.pci_vendor;
        node.device = acc.pci_device;
        node.numa_node = acc.numa_node;
        added.push(node);
    }
    if added.is_empty() {
        return;
    }
    added.sort_by_key(|n| n.address);
    let names: Vec<&str> = added.iter().map(|n| n.id.as_str()).collect();
    machine.warnings.push(accel_model::Warning {
        source: "host".into(),
        path: Some("/sys/bus/pci/devices".into()),
        message: format!(
            "accelerators at {} are not in the PCI tree (known from their vendor runtime only); their PCI locality is unknown",
            names.join(", ")
        ),
    });
    machine.pci.extend(added);
}

/// Orders accelerators by vendor and PCI address (partitions by their index) and numbers them
/// within each vendor, the order `CUDA_DEVICE_ORDER=PCI_BUS_ID` and its kin use.
///
/// A partition the runtime selects by UUID only (`own_ordinal` false: MIG) is not an ordinal, so
/// a device split into such partitions still takes one ordinal, and whole devices after it keep
/// their real numbers; those partitions are numbered after every physical device of their
/// vendor on the node, so that each index stays unique (per-device Ray resources are named by
/// it). Partitions that are devices of their own to the runtime (AMD CPX/DPX) are numbered in
/// place.
fn assign_indices(machine: &mut Machine) {
    machine.accelerators.sort_by(|a, b| {
        let key = |x: &accel_model::Accelerator| {
            (x.vendor.clone(), x.pci, x.partition.as_ref().map(|p| p.index), x.id.clone())
        };
        key(a).cmp(&key(b))
    });
    let by_uuid = |a: &accel_model::Accelerator| a.partition.as_ref().is_some_and(|p| !p.own_ordinal);
    let mut ordinals = std::collections::HashMap::<String, u32>::new();
    let mut last_physical = std::collections::HashMap::<String, String>::new();
    for acc in machine.accelerators.iter_mut() {
        let physical = match &acc.partition {
            Some(p) if !p.own_ordinal => p.physical_id.clone(),
            _ => acc.id.clone(),
        };
        let n = ordinals.entry(acc.vendor.clone()).or_default();
        if last_physical.get(&acc.vendor) != Some(&physical) {
            *n += 1;
            last_physical.insert(acc.vendor.clone(), physical);
        }
        acc.index = *n - 1;
    }
    let mut next = ordinals;
    for acc in machine.accelerators.iter_mut().filter(|a| by_uuid(a)) {
        let n = next.get_mut(&acc.vendor).expect("counted above");
        acc.index = *n;
        *n += 1;
    }
    for link in &mut machine.links {
        if link.a > link.b {
            std::mem::swap(&mut link.a, &mut link.b);
        }
    }
    machine.links.sort_by(|x, y| (&x.a, &x.b, x.kind).cmp(&(&y.a, &y.b, y.kind)));
}
