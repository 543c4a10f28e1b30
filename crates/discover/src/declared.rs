//! Links declared by design: where a machine is a system the SKU registry knows by its DMI
//! product or board name (an EC2 instance type, a DGX) and discovery saw no scale-up link between
//! its accelerators (an hwloc XML taken without NVML, a container without the vendor runtime),
//! every pair of them gets the link the system's design fixes, marked `declared` with the
//! registry entry as its source. An observed link between any of them means the machine was
//! seen: then nothing is declared, and what was seen stands.

use accel_model::{Link, LinkOrigin, Machine, Warning};

use crate::Host;

/// Adds the declared links of the system `machine` is, if any (see the module doc).
pub fn add_declared_links(host: &Host, machine: &mut Machine) {
    let board = host.read_attr(&host.path("/sys/class/dmi/id/board_name"), "dmi", &mut Vec::new());
    let Some(system) = host.skus().system(machine.host.product_name.as_deref(), board.as_deref()) else { return };
    let devices: Vec<usize> = machine
        .accelerators
        .iter()
        .enumerate()
        .filter(|(_, a)| a.partition.is_none() && a.sku.as_ref().is_some_and(|s| system.skus.contains(s)))
        .map(|(i, _)| i)
        .collect();
    if devices.len() < 2 {
        return;
    }
    let ids: Vec<&str> = devices.iter().map(|&i| machine.accelerators[i].id.as_str()).collect();
    if machine.links.iter().any(|l| ids.contains(&l.a.as_str()) || ids.contains(&l.b.as_str())) {
        return;
    }
    let warn = |message: String| Warning { source: "declared".into(), path: None, message };
    if devices.len() > system.devices as usize {
        machine.warnings.push(warn(format!(
            "{} accelerators of {} where its design has {}; no links declared",
            devices.len(),
            system.name,
            system.devices
        )));
        return;
    }
    let source = match system.sources.first() {
        Some(url) => format!("{} ({url})", system.citation()),
        None => system.citation(),
    };
    let mut links = Vec::new();
    for (n, &i) in devices.iter().enumerate() {
        for &j in &devices[n + 1..] {
            let (a, b) = (&machine.accelerators[i], &machine.accelerators[j]);
            let scale_up = a.sku.as_deref().and_then(|s| host.skus().get(s)).and_then(|s| s.scale_up);
            let (count, gbps) = scale_up.map_or((1, None), |s| (s.links.max(1), Some(s.gbps)));
            let mut link = Link::new(a.id.clone(), b.id.clone(), system.link, count, gbps);
            link.origin = LinkOrigin::Declared;
            link.source = Some(source.clone());
            links.push(link);
        }
    }
    machine.warnings.push(warn(format!(
        "no scale-up link was observed between the {} accelerators of this {}; links between every pair declared \
         by its design ({source}), not observed",
        devices.len(),
        system.name
    )));
    machine.links.extend(links);
}
