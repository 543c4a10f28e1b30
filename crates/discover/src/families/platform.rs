//! The platform plugin: domains above the node, each with its provenance. Kubernetes node labels
//! (a downward-API labels file), the GCE metadata server, EC2 IMDS. Network look-ups happen
//! only when [`crate::NetConfig::enabled`] and the DMI vendor names that cloud; a capture carries
//! what they returned under `/accel/` instead, so replaying it needs no network.

use std::collections::BTreeMap;

use accel_model::{Accelerator, Domain, DomainKind, Machine, Warning};

use crate::{Host, Isolation, Report, Vendor};

const SRC: &str = "platform";
/// Where a capture keeps the node's Kubernetes labels (downward-API format).
pub const RECORDED_LABELS: &str = "/accel/k8s/labels";
/// Where a capture keeps GCE metadata answers (`zone`, `tpu-env`).
pub const RECORDED_GCE: &str = "/accel/gce";
/// Where a capture keeps EC2 IMDS answers (`availability-zone`).
pub const RECORDED_IMDS: &str = "/accel/imds";

#[derive(Debug, Clone, Copy, Default)]
pub struct Platform;

/// Runs first: its metadata (a TPU's environment) feeds the families after it.
pub const ORDER: u32 = 0;

pub fn plugin() -> Box<dyn Vendor> {
    Box::new(Platform)
}

/// Parses a downward-API labels file: `key="value"` per line, values Go-quoted.
pub fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once('=') else { continue };
        let v = v.trim();
        let value = match v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(inner) => {
                let mut s = String::new();
                let mut chars = inner.chars();
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        if let Some(n) = chars.next() {
                            s.push(n);
                        }
                    } else {
                        s.push(c);
                    }
                }
                s
            }
            None => v.to_owned(),
        };
        if !k.trim().is_empty() {
            out.insert(k.trim().to_owned(), value);
        }
    }
    out
}

/// The domains that well-known node labels name.
pub fn label_domains(labels: &BTreeMap<String, String>) -> Vec<Domain> {
    const MAP: &[(&str, DomainKind)] = &[
        ("topology.kubernetes.io/region", DomainKind::REGION),
        ("topology.kubernetes.io/zone", DomainKind::ZONE),
        ("failure-domain.beta.kubernetes.io/zone", DomainKind::ZONE),
        ("accel.io/rack", DomainKind::RACK),
        ("topology.kubernetes.io/rack", DomainKind::RACK),
        ("cloud.google.com/gce-topology-subblock", DomainKind::RACK),
        ("accel.io/block", DomainKind::BLOCK),
        ("cloud.google.com/gce-topology-block", DomainKind::BLOCK),
        ("topology.k8s.aws/network-node-layer-1", DomainKind::NETWORK_NODE),
        ("topology.k8s.aws/network-node-layer-2", DomainKind::NETWORK_NODE),
        ("topology.k8s.aws/network-node-layer-3", DomainKind::NETWORK_NODE),
        ("topology.k8s.aws/network-node-layer-4", DomainKind::NETWORK_NODE),
        ("nvidia.com/gpu.clique", crate::families::nvidia::NVLINK_CLIQUE),
    ];
    let mut out: Vec<Domain> = Vec::new();
    for (key, kind) in MAP {
        let Some(value) = labels.get(*key).filter(|v| !v.is_empty()) else { continue };
        // One zone (and one rack, one block) per node: the first label in MAP order wins.
        if *kind != DomainKind::NETWORK_NODE && out.iter().any(|d| d.kind == *kind) {
            continue;
        }
        let name = match key.strip_prefix("topology.k8s.aws/network-node-") {
            Some(layer) => format!("{layer}:{value}"),
            None => value.clone(),
        };
        let scale_up = *kind == crate::families::nvidia::NVLINK_CLIQUE;
        out.push(Domain {
            kind: *kind,
            name,
            source: format!("k8s-label:{key}"),
            accelerators: Vec::new(),
            scale_up,
            nodes: None,
        });
    }
    out
}

/// `projects/123/zones/us-central1-a` → `us-central1-a`.
pub fn gce_zone(text: &str) -> Option<String> {
    let zone = text.trim().rsplit('/').next()?;
    (!zone.is_empty() && zone.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')).then(|| zone.to_owned())
}

fn is_zone_name(text: &str) -> bool {
    !text.is_empty() && text.len() < 64 && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

impl Vendor for Platform {
    fn capture(&self, host: &Host, machine: &Machine) -> Vec<crate::plugin::Keep> {
        let mut keep = Vec::new();
        let record = |path: String, text: &str| crate::plugin::Keep::Record { path, bytes: text.as_bytes().to_vec() };
        if let Some(env) = machine.attributes.get("gce.tpu-env") {
            keep.push(record(format!("{RECORDED_GCE}/tpu-env"), env));
        }
        for d in &machine.domains {
            if d.kind == DomainKind::ZONE && d.source.starts_with("gce-metadata") {
                keep.push(record(format!("{RECORDED_GCE}/zone"), &format!("zones/{}", d.name)));
            }
            if d.kind == DomainKind::ZONE && d.source.starts_with("ec2-imds") {
                keep.push(record(format!("{RECORDED_IMDS}/availability-zone"), d.name.as_str()));
            }
        }
        match host.labels_file() {
            Some(path) => keep.extend(read_outside(path).ok().map(|text| record(RECORDED_LABELS.into(), &text))),
            None => keep.push(crate::plugin::Keep::File(RECORDED_LABELS.into())),
        }
        keep
    }

    fn id(&self) -> &'static str {
        "platform"
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        let mut report = Report::default();
        // Kubernetes labels: the named file, else the capture's copy.
        let labels = match host.labels_file() {
            Some(path) => match read_outside(path) {
                Ok(text) => Some(text),
                Err(e) => {
                    report.warnings.push(Warning {
                        source: SRC.into(),
                        path: Some(path.display().to_string()),
                        message: format!("labels file unreadable: {e}"),
                    });
                    None
                }
            },
            None => host.read_text(&host.path(RECORDED_LABELS), 1 << 20, SRC, &mut report.warnings),
        };
        if let Some(text) = labels {
            report.domains.extend(label_domains(&parse_labels(&text)));
        }
        let vendor = platform.host.sys_vendor.as_deref().unwrap_or("");
        let product = platform.host.product_name.as_deref().unwrap_or("");
        let has = |kind: DomainKind, r: &Report| r.domains.iter().any(|d| d.kind == kind);
        // GCE: zone, and the TPU environment when there are TPUs.
        let on_gce = vendor == "Google" || product.contains("Google Compute Engine");
        let tpus = platform.pci.iter().any(|n| n.vendor == Some(accel_model::PciId(0x1ae0)));
        let gce = |attr: &str, report: &mut Report| -> Option<String> {
            let name = attr.rsplit('/').next().unwrap_or(attr);
            let recorded = host.path(&format!("{RECORDED_GCE}/{name}"));
            if let Some(text) = host.read_text(&recorded, 1 << 20, SRC, &mut report.warnings) {
                return Some(text);
            }
            if !on_gce {
                return None;
            }
            let url = format!("{}/computeMetadata/v1/instance/{attr}", host.net().gce_endpoint.trim_end_matches('/'));
            match host.http("GET", &url, &[("Metadata-Flavor", "Google")]) {
                Ok(text) => Some(text),
                Err(crate::net::NetError::Disabled) => None,
                Err(e) => {
                    report.warnings.push(Warning {
                        source: SRC.into(),
                        path: Some(url),
                        message: format!("GCE metadata: {e}"),
                    });
                    None
                }
            }
        };
        if !has(DomainKind::ZONE, &report) {
            if let Some(zone) = gce("zone", &mut report).as_deref().and_then(gce_zone) {
                report.domains.push(Domain {
                    kind: DomainKind::ZONE,
                    name: zone,
                    source: "gce-metadata:instance/zone".into(),
                    accelerators: Vec::new(),
                    scale_up: false,
                    nodes: None,
                });
            }
        }
        if tpus {
            if let Some(text) = gce("attributes/tpu-env", &mut report) {
                report.attributes.insert("gce.tpu-env".into(), text);
            }
        }
        // EC2: the availability zone (IMDSv2 token first, IMDSv1 if the token call is refused).
        let on_ec2 = vendor.contains("Amazon EC2");
        if !has(DomainKind::ZONE, &report) {
            let recorded = host.path(&format!("{RECORDED_IMDS}/availability-zone"));
            let zone = match host.read_text(&recorded, 4096, SRC, &mut report.warnings) {
                Some(text) => Some(text),
                None if on_ec2 => imds(host, "placement/availability-zone", &mut report.warnings),
                None => None,
            };
            if let Some(zone) = zone.map(|z| z.trim().to_owned()).filter(|z| is_zone_name(z)) {
                report.domains.push(Domain {
                    kind: DomainKind::ZONE,
                    name: zone,
                    source: "ec2-imds:placement/availability-zone".into(),
                    accelerators: Vec::new(),
                    scale_up: false,
                    nodes: None,
                });
            }
        }
        report
    }

    fn isolate(&self, _devices: &[&Accelerator]) -> Isolation {
        Isolation::default()
    }
}

fn imds(host: &Host, path: &str, warnings: &mut Vec<Warning>) -> Option<String> {
    use crate::net::NetError;
    let base = host.net().imds_endpoint.trim_end_matches('/').to_owned();
    let token = match host.http(
        "PUT",
        &format!("{base}/latest/api/token"),
        &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
    ) {
        Ok(t) => Some(t.trim().to_owned()),
        Err(NetError::Disabled) => return None,
        Err(NetError::Status(_)) => None,
        Err(e) => {
            warnings.push(Warning { source: SRC.into(), path: Some(base), message: format!("EC2 IMDS: {e}") });
            return None;
        }
    };
    let url = format!("{base}/latest/meta-data/{path}");
    let headers: Vec<(&str, &str)> =
        token.as_deref().map(|t| vec![("X-aws-ec2-metadata-token", t)]).unwrap_or_default();
    match host.http("GET", &url, &headers) {
        Ok(text) => Some(text),
        Err(e) => {
            warnings.push(Warning { source: SRC.into(), path: Some(url), message: format!("EC2 IMDS: {e}") });
            None
        }
    }
}

/// The labels file is named by the operator (a downward-API mount), not part of the machine's
/// root, so it is the one file read outside [`Host::path`].
pub(crate) fn read_outside(path: &std::path::Path) -> std::io::Result<String> {
    let bytes = crate::fs::read_regular(path, 1 << 20)?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn labels() {
        let l = parse_labels(
            "topology.kubernetes.io/zone=\"us-east-1a\"\naccel.io/rack=\"r\\\"12\"\nbad line\ntopology.k8s.aws/network-node-layer-2=\"nn-2\"\n",
        );
        assert_eq!(l["accel.io/rack"], "r\"12");
        let d = label_domains(&l);
        assert_eq!(d.len(), 3);
        assert_eq!(d[0].kind, DomainKind::ZONE);
        assert_eq!(d[0].source, "k8s-label:topology.kubernetes.io/zone");
        assert_eq!(d[2].name, "layer-2:nn-2");
        assert_eq!(gce_zone("projects/1234/zones/us-central2-b").as_deref(), Some("us-central2-b"));
        assert_eq!(gce_zone("<html>"), None);
    }

    proptest! {
        #[test]
        fn parsers_never_panic(text in ".{0,120}") {
            let _ = label_domains(&parse_labels(&text));
            let _ = gce_zone(&text);
        }
    }
}
