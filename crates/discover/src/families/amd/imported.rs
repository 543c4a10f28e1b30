//! What an imported topology (`accel import hwloc`, `accel import nccl`) recorded about AMD GPUs,
//! read from the generic OS-device file ([`crate::osdevs`]) when the capture has no KFD
//! topology: the ROCm SMI devices under each GPU (hwloc's `rsmi<N>`: several under one PCI
//! function are its partitions, through the same partition model as KFD's), and xGMI from
//! hwloc's `XGMIBandwidth` and `XGMIHops` matrices or RCCL's `<xgmi>` elements.
//!
//! Units, as hwloc 3.0 documents them (doc/hwloc.doxy, "Distances", open-mpi/hwloc @ 3b37b024):
//! `XGMIBandwidth` holds *unidirectional* bandwidths in MB/s between ROCm SMI devices, 0 where
//! there is no direct link, the diagonal set artificially high (hwloc's RSMI backend writes
//! 100000 for every xGMI link it finds, whatever the link's real rate); `XGMIHops` counts hops,
//! 1 for a direct link, 0 for none and on the diagonal. hwloc adds both only when ROCm SMI found
//! an xGMI link, so ROCm SMI devices without the matrices mean no xGMI link, while a capture
//! without ROCm SMI devices leaves the links unknown.
//!
//! The `N` of `rsmi<N>` is ROCm SMI's device index, taken as the HIP ordinal: both enumerate the
//! GPU nodes of the KFD topology in order (an assumption where no KFD tree confirms it).

use std::collections::BTreeMap;

use accel_model::{Accelerator, Domain, Link, PciAddr, Warning};

use super::kinds::{C2C, SRC, XGMI, XGMI_HIVE};
use super::partition;
use crate::osdevs::{self, OsDevFile};
use crate::{Host, Report};

const BANDWIDTH: &str = "XGMIBandwidth";
const HOPS: &str = "XGMIHops";
/// RCCL's link elements under a `<gpu>`.
const XGMI_ELEMENT: &str = "xgmi";

/// Replaces the GPUs found on PCI alone (`accs`) by what the file's runtime devices say of them
/// (partitions, ordinals, memory, serials), and adds the links and hives it records.
pub fn apply(host: &Host, accs: Vec<Accelerator>, report: &mut Report) -> Vec<Accelerator> {
    let Some(file) = osdevs::read_quiet(host) else {
        unknown_links(&accs, None, report);
        return accs;
    };
    let mut out = Vec::new();
    // (PCI function, ROCm SMI name) -> accelerator id, for the matrices.
    let mut by_rsmi: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut hives: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for acc in accs {
        let Some(addr) = acc.pci else {
            out.push(acc);
            continue;
        };
        let devs = rsmi_devices(&file, addr);
        let parts = u32::try_from(devs.len()).unwrap_or(u32::MAX);
        for (k, (ordinal, dev)) in devs.iter().enumerate() {
            let mut a = acc.clone();
            if parts > 1 {
                let part = partition::Part {
                    physical: addr,
                    index: u32::try_from(k).unwrap_or(u32::MAX),
                    share: parts,
                    mode: partition::mode_for(parts).into(),
                    own_memory: None,
                    compute_units: None,
                };
                partition::make(&mut a, &part);
            } else if let Some(kib) = dev.infos.get("RSMIVRAMSize").and_then(|v| v.trim().parse::<u64>().ok()) {
                a.memory_bytes = Some(kib.saturating_mul(1024));
            }
            if let Some(serial) = dev.infos.get("AMDSerial").filter(|s| !s.trim().chars().all(|c| c == '0')) {
                a.serial.get_or_insert_with(|| serial.trim().to_owned());
            }
            partition::set_ordinal(&mut a, *ordinal);
            if let Some(hive) = dev.infos.get("XGMIHiveID").map(|h| h.trim()).filter(|h| h.chars().any(|c| c != '0')) {
                hives.entry(hive.to_owned()).or_default().push(a.id.clone());
            }
            by_rsmi.insert((addr.to_string(), dev.name.clone()), a.id.clone());
            out.push(a);
        }
        if devs.is_empty() {
            out.push(acc);
        }
    }
    for (hive, members) in hives.into_iter().filter(|(_, m)| m.len() > 1) {
        report.domains.push(Domain {
            kind: XGMI_HIVE,
            name: hive,
            source: "hwloc:XGMIHiveID".into(),
            accelerators: members,
            scale_up: true,
            // A hive joins the GPUs of one node only (`mod.rs` says why).
            nodes: Some(1),
        });
    }
    let physical: BTreeMap<String, String> = out
        .iter()
        .map(|a| (a.id.clone(), a.partition.as_ref().map_or_else(|| a.id.clone(), |p| p.physical_id.clone())))
        .collect();
    let tool = file.source.split_whitespace().next().unwrap_or("import").to_ascii_lowercase();
    let mut links_known = !by_rsmi.is_empty();
    if let Some(bw) = file.matrix(BANDWIDTH) {
        links_known = true;
        let hops = file.matrix(HOPS).filter(|h| h.objects == bw.objects);
        let ids: Vec<Option<&String>> = bw
            .objects
            .iter()
            .map(|o| by_rsmi.get(&(o.pci.clone().unwrap_or_default(), o.name.clone().unwrap_or_default())))
            .collect();
        for (i, a) in ids.iter().enumerate() {
            for (j, b) in ids.iter().enumerate().skip(i + 1) {
                let (Some(a), Some(b)) = (a, b) else { continue };
                let value = bw.value(i, j).unwrap_or(0).max(bw.value(j, i).unwrap_or(0));
                if value == 0 {
                    continue;
                }
                let kind = if physical[*a] == physical[*b] { C2C } else { XGMI };
                // Unidirectional MB/s to GB/s both ways.
                let mut link = Link::new((*a).clone(), (*b).clone(), kind, 1, Some(value as f64 * 2.0 / 1000.0));
                link.hops = hops.and_then(|h| h.value(i, j)).and_then(|v| u32::try_from(v).ok()).filter(|v| *v > 0);
                link.source = Some(format!("{tool}:{BANDWIDTH}"));
                report.links.push(link);
            }
        }
        report.attributes.insert(format!("{}{BANDWIDTH}", osdevs::READ_ATTRIBUTE), SRC.into());
        if hops.is_some() {
            report.attributes.insert(format!("{}{HOPS}", osdevs::READ_ATTRIBUTE), SRC.into());
        }
    }
    let elements: Vec<&osdevs::ToolLink> = file.links.iter().filter(|l| l.element == XGMI_ELEMENT).collect();
    if !elements.is_empty() {
        links_known = true;
        report.links.extend(element_links(host, &elements, &out, &format!("{tool}:{XGMI_ELEMENT}")));
        report.attributes.insert(format!("{}{XGMI_ELEMENT}", osdevs::READ_ATTRIBUTE), SRC.into());
    }
    if !links_known {
        unknown_links(&out, Some(&file.source), report);
    }
    out
}

/// The runtime devices under one PCI function, by index, in index order: hwloc's ROCm SMI
/// devices (`rsmi<N>`), else an RCCL dump's `<gpu dev=N>` (a HIP ordinal).
fn rsmi_devices(file: &OsDevFile, addr: PciAddr) -> Vec<(u32, &osdevs::OsDev)> {
    let all = file.osdevs_of(&addr.to_string());
    let mut devs: Vec<(u32, &osdevs::OsDev)> = all
        .iter()
        .filter_map(|d| d.name.strip_prefix("rsmi").and_then(|n| n.parse::<u32>().ok()).map(|n| (n, d)))
        .collect();
    if devs.is_empty() {
        devs = all
            .iter()
            .filter(|d| d.subtype.as_deref() == Some("NCCL") && d.types.iter().any(|t| t == "gpu"))
            .filter_map(|d| d.infos.get("dev").and_then(|n| n.trim().parse::<u32>().ok()).map(|n| (n, d)))
            .collect();
    }
    devs.sort_by_key(|(n, _)| *n);
    devs
}

/// Whether the file lists a ROCm SMI device on this function (the runtime saw a GPU there).
pub fn has_runtime_device(host: &Host, addr: PciAddr) -> bool {
    osdevs::read_quiet(host).is_some_and(|f| !rsmi_devices(&f, addr).is_empty())
}

/// RCCL's `<xgmi target= count=>` under each GPU: a link to the GPU at the target, with the
/// count written (both ends list it: the larger count is kept).
fn element_links(host: &Host, elements: &[&osdevs::ToolLink], accs: &[Accelerator], source: &str) -> Vec<Link> {
    let whole: BTreeMap<PciAddr, &Accelerator> =
        accs.iter().filter(|a| a.partition.is_none()).filter_map(|a| Some((a.pci?, a))).collect();
    let mut pairs: BTreeMap<(PciAddr, PciAddr), u32> = BTreeMap::new();
    for l in elements {
        let (Ok(me), Some(Ok(to))) = (l.pci.parse::<PciAddr>(), l.target.as_deref().map(|t| t.trim().parse::<PciAddr>()))
        else {
            continue;
        };
        if me == to || !whole.contains_key(&me) || !whole.contains_key(&to) {
            continue;
        }
        let key = if me < to { (me, to) } else { (to, me) };
        let e = pairs.entry(key).or_default();
        *e = (*e).max(l.count.unwrap_or(1));
    }
    pairs
        .into_iter()
        .map(|((a, b), count)| {
            let (ga, gb) = (whole[&a], whole[&b]);
            let mut link =
                Link::new(ga.id.clone(), gb.id.clone(), XGMI, count, crate::plugin::link_gbps(host, ga, count));
            link.source = Some(source.to_owned());
            link
        })
        .collect()
}

/// The warning that no reader here could see xGMI.
fn unknown_links(accs: &[Accelerator], tool: Option<&str>, report: &mut Report) {
    if accs.is_empty() {
        return;
    }
    let from = tool.map_or_else(
        || "no KFD topology in this capture".to_owned(),
        |t| format!("{t} recorded no ROCm SMI devices and no xGMI matrix"),
    );
    report.warnings.push(Warning {
        source: SRC.into(),
        path: None,
        message: format!("{from}; xGMI links are unknown for GPUs read from PCI alone"),
    });
}
