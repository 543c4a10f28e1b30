//! Topology for Kubernetes schedulers: Kueue's and KAI Scheduler's `Topology` objects, whose
//! levels are node labels, and the labels themselves, from one cluster file.
//!
//! The levels, root first: the fabric's switch tiers (the cluster's `tiers`, highest first, as
//! topograph v1 names them: `fabric.topograph.run/tier-N`, tier 0 closest to the node), then the
//! scale-up domain (`accelerator.topograph.run/domain`) when some node's domain spans nodes, then
//! `kubernetes.io/hostname`. A node with no such domain is a domain of its own (its name). The
//! levels must nest: every value of a level lies inside one value of the level above, as both
//! schedulers and GPUStack's projection assume. A cluster where they do not is refused, naming
//! the two nodes that break it.

use std::collections::BTreeMap;

use accel_plan::fabric::{default_tiers, topograph_domains, TOPOGRAPH_DOMAIN, TOPOGRAPH_TIER_PREFIX};
use accel_plan::{node_domains, Cluster};
use serde_json::{json, Value};

use crate::nfd::topograph_value;
use crate::ExportError;

/// The lowest level of both schedulers' topologies.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// Most levels a Kueue or KAI `Topology` holds (both CRDs' `maxItems`).
pub const MAX_LEVELS: usize = 16;

/// The levels and the labels they name.
#[derive(Debug, Clone, PartialEq)]
pub struct Levels {
    /// Node label keys, root first, `kubernetes.io/hostname` last.
    pub keys: Vec<String>,
    /// Each node's value of every level, by node name.
    pub nodes: BTreeMap<String, BTreeMap<String, String>>,
}

/// Which scheduler's `Topology`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    /// Kueue's topology-aware scheduling, `kueue.x-k8s.io/v1beta2`.
    Kueue,
    /// KAI Scheduler, `kai.scheduler/v1alpha1`.
    Kai,
}

impl Scheduler {
    pub fn api_version(self) -> &'static str {
        match self {
            Scheduler::Kueue => "kueue.x-k8s.io/v1beta2",
            Scheduler::Kai => "kai.scheduler/v1alpha1",
        }
    }
}

/// The levels of `cluster` and every node's value of each, checked to nest.
pub fn levels(cluster: &Cluster) -> Result<Levels, ExportError> {
    let mut labels: Vec<(String, BTreeMap<String, String>, Option<String>)> = Vec::new();
    for node in &cluster.nodes {
        let machine = cluster.machine(node).map_err(|e| ExportError::Input(e.to_string()))?;
        let mut l = node_domains(machine, &node.name);
        l.extend(node.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        topograph_domains(&mut l, machine);
        // The node's scale-up domain that spans nodes, as the planner names it.
        let domain = machine
            .domains
            .iter()
            .find(|d| d.scale_up && !d.node_local())
            .and_then(|d| l.get(d.kind.as_str()).cloned())
            .or_else(|| l.get(TOPOGRAPH_DOMAIN).cloned());
        labels.push((node.name.clone(), l, domain));
    }
    let tiers = if cluster.tiers.is_empty() {
        default_tiers(labels.iter().flat_map(|(_, l, _)| l.keys().map(String::as_str)))
    } else {
        cluster.tiers.clone()
    };
    let with_domain = labels.iter().any(|(_, _, d)| d.is_some());
    let mut keys: Vec<String> = (0..tiers.len()).rev().map(|i| format!("{TOPOGRAPH_TIER_PREFIX}{i}")).collect();
    if with_domain {
        keys.push(TOPOGRAPH_DOMAIN.to_owned());
    }
    keys.push(HOSTNAME.to_owned());
    if keys.len() > MAX_LEVELS {
        return Err(ExportError::Limit(format!("{} levels; a Topology holds at most {MAX_LEVELS}", keys.len())));
    }
    let mut nodes = BTreeMap::new();
    for (name, l, domain) in &labels {
        let mut values = BTreeMap::new();
        for (i, tier) in tiers.iter().enumerate() {
            let value = l.get(tier).ok_or_else(|| {
                ExportError::Input(format!(
                    "node {name} has no value for the fabric tier {tier}: every level must be on every node"
                ))
            })?;
            values.insert(format!("{TOPOGRAPH_TIER_PREFIX}{i}"), topograph_value(value));
        }
        if with_domain {
            values.insert(TOPOGRAPH_DOMAIN.to_owned(), topograph_value(domain.as_deref().unwrap_or(name)));
        }
        values.insert(HOSTNAME.to_owned(), name.clone());
        nodes.insert(name.clone(), values);
    }
    check_nesting(&keys, &nodes)?;
    Ok(Levels { keys, nodes })
}

/// Every value of a level lies inside one value of the level above; else the error names the
/// two nodes that share the lower value under different upper ones.
pub fn check_nesting(keys: &[String], nodes: &BTreeMap<String, BTreeMap<String, String>>) -> Result<(), ExportError> {
    for pair in keys.windows(2) {
        let (upper, lower) = (&pair[0], &pair[1]);
        let mut seen: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
        for (node, values) in nodes {
            let (Some(low), Some(up)) = (values.get(lower), values.get(upper)) else { continue };
            match seen.get(low.as_str()) {
                Some((other, other_up)) if *other_up != up => {
                    return Err(ExportError::Input(format!(
                        "the levels do not nest: nodes {other} and {node} share {lower}={low} but {upper} is {other_up} on {other} and {up} on {node}"
                    )));
                }
                Some(_) => {}
                None => {
                    seen.insert(low, (node, up));
                }
            }
        }
    }
    Ok(())
}

/// The `Topology` object (as JSON) for `scheduler`, named `name`.
pub fn topology(scheduler: Scheduler, name: &str, levels: &Levels) -> Value {
    let levels: Vec<Value> = levels.keys.iter().map(|k| json!({"nodeLabel": k})).collect();
    json!({
        "apiVersion": scheduler.api_version(),
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": levels},
    })
}

/// `kubectl label node` lines that put the levels' labels on the nodes (the hostname label is
/// the kubelet's own and is left out).
pub fn label_commands(levels: &Levels) -> String {
    let mut out = String::new();
    for (node, values) in &levels.nodes {
        let pairs: Vec<String> =
            values.iter().filter(|(k, _)| k.as_str() != HOSTNAME).map(|(k, v)| format!("{k}={v}")).collect();
        if !pairs.is_empty() {
            out += &format!("kubectl label node {node} --overwrite {}\n", pairs.join(" "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(values: &[(&str, &str)]) -> BTreeMap<String, String> {
        values.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn nesting_is_checked_level_by_level_and_names_both_nodes() {
        let keys: Vec<String> = ["spine", "leaf", HOSTNAME].iter().map(|s| (*s).to_owned()).collect();
        let mut nodes = BTreeMap::from([
            ("a".to_owned(), node(&[("spine", "s1"), ("leaf", "l1"), (HOSTNAME, "a")])),
            ("b".to_owned(), node(&[("spine", "s1"), ("leaf", "l1"), (HOSTNAME, "b")])),
            ("c".to_owned(), node(&[("spine", "s2"), ("leaf", "l2"), (HOSTNAME, "c")])),
        ]);
        assert!(check_nesting(&keys, &nodes).is_ok());
        nodes.get_mut("c").unwrap().insert("leaf".into(), "l1".into());
        let e = check_nesting(&keys, &nodes).unwrap_err().to_string();
        assert_eq!(e, "the levels do not nest: nodes a and c share leaf=l1 but spine is s1 on a and s2 on c");
    }
}
