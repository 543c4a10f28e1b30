//! Fabric tiers as data: the switch levels above the node (leaf, spine, core; or Slurm blocks),
//! read from node labels, a Slurm `topology.conf`, or accel's small topology file, and written
//! onto the cluster's nodes as labels that the planner counts tiers with.
//!
//! A [`Fabric`] is a list of tier label keys, lowest first, and each node's value per tier key.
//! Two nodes with the same value for a tier hang under the same switch (or block) of that tier;
//! [`tiers_crossed`] turns that into a distance.
//!
//! # Sources
//!
//! - Node labels ([`Fabric::from_labels`]): NVIDIA topograph v1 writes closest-first
//!   `fabric.topograph.run/tier-0`, `tier-1`, ... ([`TOPOGRAPH_TIER_PREFIX`]) and the accelerator
//!   domain `accelerator.topograph.run/domain` (`/sub-domain`); its v0 wrote
//!   `network.topology.nvidia.com/leaf`, `.../spine`, `.../core` and `.../accelerator`. Both are
//!   read ([`default_tiers`], [`topograph_domains`]).
//! - Slurm's `topology.conf` ([`Fabric::from_slurm_conf`]), `topology/tree` or `topology/block`
//!   (topology.conf(5)). A tree switch's tier is its height: a switch with `Nodes=` (or with no
//!   children) is tier 1, the leaf; a switch with `Switches=` is one above its tallest child. Tiers
//!   1, 2 and 3 get topograph's keys ([`TOPOGRAPH_TIERS`]), taller ones `tier4`, `tier5`... A
//!   node's value at a tier is the switch of that tier above its leaf; a leaf whose chain of
//!   parents is short leaves its nodes without the higher tiers. A switch under several parents
//!   (a fat tree's leaf under every spine, as `slurmibtopology` writes it) gives its nodes, at each
//!   tier, the first name in sorted order among the switches of that tier above them, so nodes
//!   that share a value really share that switch. Blocks give the tier `block` (after the tree's
//!   tiers, as [`default_tiers`] orders them); `BlockSizes=` is checked and not kept.
//! - accel's topology file ([`Fabric::from_json`]), below.
//!
//! # accel's topology file
//!
//! JSON, and what a [`Fabric`] serializes to:
//!
//! ```json
//! {
//!   "tiers": ["network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine"],
//!   "nodes": {
//!     "gpu[01-16]": {"leaf": "leaf1", "spine": "spine1"},
//!     "gpu[17-32]": {"network.topology.nvidia.com/leaf": "leaf2", "spine": "spine1"},
//!     "login1": {"leaf": "leaf3"}
//!   }
//! }
//! ```
//!
//! `tiers` (required) are the label keys, lowest first, used as written. Each key of `nodes` is
//! a Slurm hostlist expression ([`expand_hostlist`]), and a node may appear under one key only.
//! Its map gives a value per tier, naming the tier by its key or by the key's last `/` segment
//! ([`resolve_tier`]); a tier it leaves out, the node lacks. Unknown fields are refused.
//! Serializing writes one entry per node, with full keys.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::{Cluster, PlanError};

/// Topograph's tier label keys, lowest first.
pub const TOPOGRAPH_TIERS: [&str; 3] =
    ["network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine", "network.topology.nvidia.com/core"];

/// Topograph v1's fabric tier label prefix: `tier-0` is the switch closest to the node, numbers
/// grow outward (dsx-ai-factory/topograph `pkg/topology` `KeyFabricTierPrefix`, and
/// `pkg/engines/k8s/labeler.go` `FabricKey(tier)`).
pub const TOPOGRAPH_TIER_PREFIX: &str = "fabric.topograph.run/tier-";

/// Topograph v1's accelerator domain and sub-domain label keys (`KeyTopologyXclrDomain`,
/// `KeyTopologyXclrSubDomain`), and v0's accelerator key.
pub const TOPOGRAPH_DOMAIN: &str = "accelerator.topograph.run/domain";
pub const TOPOGRAPH_SUB_DOMAIN: &str = "accelerator.topograph.run/sub-domain";
pub const TOPOGRAPH_V0_DOMAIN: &str = "network.topology.nvidia.com/accelerator";

/// The tier number of a topograph v1 tier key (`fabric.topograph.run/tier-2` gives 2).
pub fn topograph_tier(key: &str) -> Option<u32> {
    key.strip_prefix(TOPOGRAPH_TIER_PREFIX).and_then(|n| n.parse().ok()).filter(|_| !key.ends_with('+'))
}

/// A node's scale-up domain from topograph's labels, as the planner reads domains: when the
/// node's labels carry `accelerator.topograph.run/domain` (or v0's `.../accelerator`) and not
/// yet a label of the machine's own scale-up domain kind that spans nodes (`nvlink_clique`), that
/// kind takes the value, so `same: "nvlink_clique"` and bin-packing see topograph's domains.
pub fn topograph_domains(labels: &mut BTreeMap<String, String>, machine: &accel_model::Machine) {
    let Some(value) = labels.get(TOPOGRAPH_DOMAIN).or_else(|| labels.get(TOPOGRAPH_V0_DOMAIN)).cloned() else {
        return;
    };
    if let Some(kind) = machine.domains.iter().find(|d| d.scale_up && !d.node_local()).map(|d| d.kind.as_str()) {
        labels.insert(kind.to_owned(), value);
    }
}

/// The tier key of Slurm's `topology/block` blocks.
pub const BLOCK_TIER: &str = "block";

/// Most names one hostlist expression, or one whole `topology.conf` or topology file, may expand
/// to: hostile input cannot make the expansion exhaust memory.
pub const MAX_HOSTLIST_NAMES: usize = 1_000_000;

/// Longest name a hostlist may produce, in bytes.
pub const MAX_NAME_LEN: usize = 255;

/// Tallest switch tree `topology.conf` may describe (Slurm itself gives up past 20 levels).
pub const MAX_TREE_TIERS: usize = 16;

/// The tiers a cluster's nodes carry, lowest first, when its `tiers` is empty: topograph v1's
/// `fabric.topograph.run/tier-N` keys that some node carries (by N), else (nodes labelled by an
/// older topograph) v0's leaf/spine/core; then `block`. Where both are present (accel's NFD
/// export writes both) they name the same switches, and v1's are taken.
pub fn default_tiers<'a>(label_keys: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let keys: BTreeSet<&str> = label_keys.into_iter().collect();
    let mut v1: Vec<(u32, &str)> = keys.iter().filter_map(|k| Some((topograph_tier(k)?, *k))).collect();
    v1.sort();
    let v0 = TOPOGRAPH_TIERS.iter().filter(|k| keys.contains(*k)).copied();
    let tree: Vec<&str> = if v1.is_empty() { v0.collect() } else { v1.into_iter().map(|(_, k)| k).collect() };
    tree.into_iter().chain([BLOCK_TIER].into_iter().filter(|k| keys.contains(k))).map(str::to_owned).collect()
}

/// How many tiers up two nodes meet: the number (1-based) of the lowest tier for which both
/// carry the same value, or `tiers.len() + 1` when they share none. With topograph's tiers: 1
/// under one leaf, 2 under one spine, 3 under one core, 4 apart. A tier one of them lacks is not
/// shared. (The same node is the caller's 0: labels alone cannot tell.)
pub fn tiers_crossed(tiers: &[String], a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> u32 {
    tiers_spanned(tiers, &[a, b])
}

/// The same for any number of nodes: the lowest tier whose one value every node carries.
pub fn tiers_spanned(tiers: &[String], nodes: &[&BTreeMap<String, String>]) -> u32 {
    let shared = tiers.iter().position(|t| {
        let first = nodes.first().and_then(|n| n.get(t));
        first.is_some() && nodes.iter().all(|n| n.get(t) == first)
    });
    u32::try_from(shared.map_or(tiers.len() + 1, |i| i + 1)).unwrap_or(u32::MAX)
}

/// The tier key a name means: the key equal to it, else the first (lowest) key whose last `/`
/// segment is it (`spine` → `network.topology.nvidia.com/spine`).
pub fn resolve_tier<'a>(tiers: &'a [String], name: &str) -> Option<&'a str> {
    let last = |t: &&String| t.rsplit_once('/').is_some_and(|(_, tail)| tail == name);
    tiers.iter().find(|t| *t == name).or_else(|| tiers.iter().find(last)).map(String::as_str)
}

/// The fabric's switch tiers above each node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "FabricFile")]
pub struct Fabric {
    /// Tier label keys, lowest first.
    pub tiers: Vec<String>,
    /// For each node name, its value per tier key.
    pub nodes: BTreeMap<String, BTreeMap<String, String>>,
}

/// accel's topology file as written (module doc); [`Fabric`]'s deserializer goes through it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FabricFile {
    tiers: Vec<String>,
    #[serde(default)]
    nodes: BTreeMap<String, BTreeMap<String, String>>,
}

impl TryFrom<FabricFile> for Fabric {
    type Error = String;

    fn try_from(file: FabricFile) -> Result<Fabric, String> {
        let mut fabric = Fabric { tiers: file.tiers, nodes: BTreeMap::new() };
        check_tiers(&fabric.tiers)?;
        let mut budget = MAX_HOSTLIST_NAMES;
        let mut origin: HashMap<String, &str> = HashMap::new();
        for (expr, given) in &file.nodes {
            let mut values = BTreeMap::new();
            for (name, value) in given {
                let Some(tier) = resolve_tier(&fabric.tiers, name) else {
                    return Err(format!(
                        "nodes {expr:?}: unknown tier {name:?}; the tiers are {}",
                        fabric.tiers.join(", ")
                    ));
                };
                if values.insert(tier.to_owned(), value.clone()).is_some() {
                    return Err(format!("nodes {expr:?}: tier {tier:?} is given twice"));
                }
            }
            for node in expand(expr, &mut budget)? {
                if let Some(first) = origin.insert(node.clone(), expr) {
                    return Err(format!("node {node:?} is listed twice: in {first:?} and in {expr:?}"));
                }
                fabric.nodes.insert(node, values.clone());
            }
        }
        fabric.check()?;
        Ok(fabric)
    }
}

impl Fabric {
    /// Reads accel's topology file (module doc).
    pub fn from_json(text: &str) -> Result<Fabric, PlanError> {
        serde_json::from_str(text).map_err(|e| PlanError::Cluster(format!("topology file: {e}")))
    }

    /// Reads a Slurm `topology.conf` (module doc): `SwitchName=` lines (`topology/tree`),
    /// `BlockName=` and `BlockSizes=` lines (`topology/block`), or both. Keys are
    /// case-insensitive, `#` starts a comment, a line ending in `\` continues on the next, and
    /// other keys (`LinkSpeed=`) are accepted and ignored. Errors name the line.
    pub fn from_slurm_conf(text: &str) -> Result<Fabric, PlanError> {
        slurm_conf(text).map_err(PlanError::Cluster)
    }

    /// The fabric the cluster's nodes carry as labels: the tiers `cluster.tiers` names (or, when
    /// it is empty, those [`default_tiers`] finds), and every node with its non-empty values.
    pub fn from_labels(cluster: &Cluster) -> Fabric {
        let tiers = if cluster.tiers.is_empty() {
            default_tiers(cluster.nodes.iter().flat_map(|n| n.labels.keys().map(String::as_str)))
        } else {
            cluster.tiers.clone()
        };
        let nodes = cluster
            .nodes
            .iter()
            .map(|n| {
                let values = tiers
                    .iter()
                    .filter_map(|t| n.labels.get(t).filter(|v| !v.is_empty()).map(|v| (t.clone(), v.clone())))
                    .collect();
                (n.name.clone(), values)
            })
            .collect();
        Fabric { tiers, nodes }
    }

    /// Writes each node's tier values onto the cluster as labels and sets `cluster.tiers`.
    /// Returns warnings: nodes of the fabric the cluster lacks, and cluster nodes the fabric does
    /// not mention (they get no tier labels). A node that already carries a different value for
    /// a tier key is an error, and then nothing is written. A tier the fabric gives a node no
    /// value for leaves that node's label, if any, alone.
    pub fn apply(&self, cluster: &mut Cluster) -> Result<Vec<String>, PlanError> {
        self.check().map_err(PlanError::Cluster)?;
        for node in &cluster.nodes {
            for (tier, value) in self.nodes.get(&node.name).into_iter().flatten() {
                match node.labels.get(tier) {
                    Some(old) if old != value => {
                        return Err(PlanError::Cluster(format!(
                            "node {:?} carries {tier}={old:?}, but the fabric says {value:?}",
                            node.name
                        )))
                    }
                    _ => {}
                }
            }
        }
        let known: BTreeSet<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
        let missing: Vec<&str> = self.nodes.keys().map(String::as_str).filter(|n| !known.contains(n)).collect();
        let unmentioned: Vec<&str> =
            cluster.nodes.iter().map(|n| n.name.as_str()).filter(|n| !self.nodes.contains_key(*n)).collect();
        let mut warnings = Vec::new();
        if !missing.is_empty() {
            warnings.push(format!("the fabric names {} the cluster lacks: {}", count(missing.len()), list(&missing)));
        }
        if !unmentioned.is_empty() {
            warnings.push(format!(
                "no tier labels for {} of the cluster, which the fabric does not mention: {}",
                count(unmentioned.len()),
                list(&unmentioned)
            ));
        }
        for node in &mut cluster.nodes {
            if let Some(values) = self.nodes.get(&node.name) {
                node.labels.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        cluster.tiers = self.tiers.clone();
        Ok(warnings)
    }

    /// Tiers named once each; every node value for one of them and not empty.
    fn check(&self) -> Result<(), String> {
        check_tiers(&self.tiers)?;
        for (node, values) in &self.nodes {
            if node.is_empty() {
                return Err("a node has an empty name".into());
            }
            for (tier, value) in values {
                if !self.tiers.contains(tier) {
                    return Err(format!("node {node:?} has a value for {tier:?}, which is not one of the tiers"));
                }
                if value.is_empty() {
                    return Err(format!("node {node:?} has an empty value for {tier:?}"));
                }
            }
        }
        Ok(())
    }
}

fn check_tiers(tiers: &[String]) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for t in tiers {
        if t.is_empty() {
            return Err("a tier key is empty".into());
        }
        if !seen.insert(t) {
            return Err(format!("tier {t:?} is listed twice"));
        }
    }
    Ok(())
}

fn count(n: usize) -> String {
    format!("{n} node{}", if n == 1 { "" } else { "s" })
}

/// Up to ten names, then how many more.
fn list(names: &[&str]) -> String {
    let shown = names.iter().take(10).copied().collect::<Vec<_>>().join(", ");
    match names.len().saturating_sub(10) {
        0 => shown,
        more => format!("{shown}, ... ({more} more)"),
    }
}

/// Expands a Slurm hostlist expression: comma-separated names, each with any number of bracket
/// groups of comma-separated numbers and ranges (`tux[0-3,7]`, `gpu[01-10]` keeps the low
/// bound's zero padding, `r[1-2]n[1-2]` gives `r1n1 r1n2 r2n1 r2n2`), in the order written.
/// Refuses more than [`MAX_HOSTLIST_NAMES`] names or a name over [`MAX_NAME_LEN`] bytes.
pub fn expand_hostlist(expr: &str) -> Result<Vec<String>, PlanError> {
    let mut budget = MAX_HOSTLIST_NAMES;
    expand(expr, &mut budget).map_err(PlanError::Cluster)
}

/// One bracket group's ranges: (low, high, width).
type Ranges = Vec<(u64, u64, usize)>;

/// [`expand_hostlist`], taking the names it makes out of `budget`.
fn expand(expr: &str, budget: &mut usize) -> Result<Vec<String>, String> {
    let bad = |why: String| format!("invalid hostlist {expr:?}: {why}");
    if expr.is_empty() {
        return Err(bad("it is empty".into()));
    }
    // Split at the commas outside brackets.
    let mut entries = Vec::new();
    let (mut open, mut start) = (false, 0);
    for (i, c) in expr.char_indices() {
        match c {
            '[' if open => return Err(bad("brackets do not nest".into())),
            '[' => open = true,
            ']' if !open => return Err(bad("']' without '['".into())),
            ']' => open = false,
            ',' if !open => {
                entries.push(&expr[start..i]);
                start = i + 1;
            }
            c if c.is_whitespace() || c.is_control() => return Err(bad(format!("unexpected {c:?}"))),
            _ => {}
        }
    }
    if open {
        return Err(bad("'[' without ']'".into()));
    }
    entries.push(&expr[start..]);
    let mut out = Vec::new();
    for entry in entries {
        if entry.is_empty() {
            return Err(bad("an empty name".into()));
        }
        // Literal text and bracket groups, alternating.
        let mut parts: Vec<Result<&str, Ranges>> = Vec::new();
        let (mut names, mut longest) = (1usize, 0usize);
        let mut rest = entry;
        while let Some(i) = rest.find('[') {
            let j = rest.find(']').unwrap_or(rest.len());
            parts.push(Ok(&rest[..i]));
            longest += i;
            let ranges = ranges(&rest[i + 1..j]).map_err(bad)?;
            let size = ranges.iter().fold(0u64, |sum, (lo, hi, _)| sum.saturating_add((hi - lo).saturating_add(1)));
            names = usize::try_from(size).ok().and_then(|s| names.checked_mul(s)).unwrap_or(usize::MAX);
            longest += ranges.iter().map(|(_, hi, w)| (*w).max(hi.to_string().len())).max().unwrap_or(0);
            parts.push(Err(ranges));
            rest = rest.get(j + 1..).unwrap_or("");
        }
        parts.push(Ok(rest));
        longest += rest.len();
        if names > *budget {
            return Err(bad(format!("it makes more than {MAX_HOSTLIST_NAMES} names")));
        }
        if longest > MAX_NAME_LEN {
            return Err(bad(format!("it makes names longer than {MAX_NAME_LEN} bytes")));
        }
        *budget -= names;
        let mut made = vec![String::new()];
        for part in parts {
            match part {
                Ok(text) => made.iter_mut().for_each(|n| n.push_str(text)),
                Err(ranges) => {
                    let mut next = Vec::with_capacity(names);
                    for prefix in &made {
                        for (lo, hi, width) in &ranges {
                            next.extend((*lo..=*hi).map(|v| format!("{prefix}{v:0width$}")));
                        }
                    }
                    made = next;
                }
            }
        }
        out.extend(made);
    }
    Ok(out)
}

/// The inside of one bracket group: `0-3,7,09-11`.
fn ranges(text: &str) -> Result<Ranges, String> {
    let number = |s: &str| -> Result<u64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("[{text}] holds {s:?}, not a number"));
        }
        s.parse().map_err(|_| format!("[{text}] holds {s}, too large a number"))
    };
    text.split(',')
        .map(|item| {
            let (lo, hi) = item.split_once('-').unwrap_or((item, item));
            let (low, high) = (number(lo)?, number(hi)?);
            if high < low {
                return Err(format!("range {item} in [{text}] runs backwards"));
            }
            Ok((low, high, lo.len()))
        })
        .collect()
}

/// The key of tree tier `height` (1 = leaf).
fn tree_tier(height: usize) -> String {
    TOPOGRAPH_TIERS.get(height - 1).map_or_else(|| format!("tier{height}"), |k| (*k).to_owned())
}

/// One `SwitchName=` line.
struct Switch {
    name: String,
    line: usize,
    /// `Nodes=`, expanded: a leaf switch.
    nodes: Vec<String>,
    /// `Switches=`, expanded.
    children: Vec<String>,
}

fn slurm_conf(text: &str) -> Result<Fabric, String> {
    let mut budget = MAX_HOSTLIST_NAMES;
    let mut switches: Vec<Switch> = Vec::new();
    let mut blocks: Vec<(String, usize, Vec<String>)> = Vec::new();
    // Name to line, of switches and of blocks.
    let mut defined: [HashMap<String, usize>; 2] = Default::default();
    for (line, content) in logical_lines(text) {
        let at = |why: String| format!("topology.conf line {line}: {why}");
        // (lowercase key, key as written, value)
        let mut pairs: Vec<(String, &str, &str)> = Vec::new();
        for token in content.split_whitespace() {
            let (key, value) = token
                .split_once('=')
                .filter(|(_, v)| !v.contains('='))
                .ok_or_else(|| at(format!("expected key=value, found {token:?}")))?;
            let lower = key.to_ascii_lowercase();
            if pairs.iter().any(|(k, _, _)| *k == lower) {
                return Err(at(format!("{key}= is given twice")));
            }
            pairs.push((lower, key, value));
        }
        let find = |key: &str| pairs.iter().find(|(k, _, _)| k == key);
        let get = |key: &str| find(key).map(|(_, _, v)| *v);
        let mut hosts = |key: &str| -> Result<Vec<String>, String> {
            let Some((_, written, value)) = find(key) else { return Ok(Vec::new()) };
            expand(value, &mut budget).map_err(|e| at(format!("{written}=: {e}")))
        };
        let Some(&(ref first, written, name)) = pairs.first() else { continue };
        match first.as_str() {
            "switchname" | "blockname" if name.is_empty() => return Err(at(format!("{written}= has no name"))),
            "switchname" => {
                if get("blockname").is_some() {
                    return Err(at("a line is a switch or a block, not both".into()));
                }
                if get("nodes").is_some() && get("switches").is_some() {
                    return Err(at(format!("switch {name} has both Nodes= and Switches=")));
                }
                let (nodes, children) = (hosts("nodes")?, hosts("switches")?);
                if let Some(first) = defined[0].insert(name.to_owned(), line) {
                    return Err(at(format!("switch {name} is already defined on line {first}")));
                }
                switches.push(Switch { name: name.to_owned(), line, nodes, children });
            }
            "blockname" => {
                if get("nodes").is_none() {
                    return Err(at(format!("block {name} has no Nodes=")));
                }
                if let Some(first) = defined[1].insert(name.to_owned(), line) {
                    return Err(at(format!("block {name} is already defined on line {first}")));
                }
                blocks.push((name.to_owned(), line, hosts("nodes")?));
            }
            "blocksizes" => {
                for size in name.split(',') {
                    if !size.parse::<u32>().is_ok_and(|s| s > 0) {
                        return Err(at(format!("{written}= holds {size:?}, not a positive number")));
                    }
                }
            }
            _ => return Err(at(format!("expected SwitchName=, BlockName= or BlockSizes=, found {written}="))),
        }
    }
    if switches.is_empty() && blocks.is_empty() {
        return Err("topology.conf has no SwitchName= or BlockName= lines".into());
    }
    let mut fabric = tree(&switches)?;
    if !blocks.is_empty() {
        fabric.tiers.push(BLOCK_TIER.to_owned());
    }
    let mut block_of: HashMap<&str, (&str, usize)> = HashMap::new();
    for (block, line, nodes) in &blocks {
        for node in nodes {
            match block_of.insert(node, (block, *line)) {
                Some((other, first)) if other != block => {
                    return Err(format!(
                        "topology.conf line {line}: node {node} is in two blocks: {other} (line {first}) and {block}"
                    ))
                }
                _ => {}
            }
            fabric.nodes.entry(node.clone()).or_default().insert(BLOCK_TIER.to_owned(), block.clone());
        }
    }
    Ok(fabric)
}

/// The file's logical lines, numbered by their first physical line: comments cut, lines ending
/// in `\` joined to the next, blank ones dropped.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim_end();
        let (line, continues) = line.strip_suffix('\\').map_or((line, false), |l| (l, true));
        let entry = current.get_or_insert_with(|| (i + 1, String::new()));
        entry.1.push_str(line);
        if !continues {
            out.extend(current.take());
        }
    }
    out.extend(current);
    out.retain(|(_, l)| !l.trim().is_empty());
    out
}

/// The tree tiers of `SwitchName=` lines.
fn tree(switches: &[Switch]) -> Result<Fabric, String> {
    let index: HashMap<&str, usize> = switches.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
    let n = switches.len();
    let mut children: Vec<Vec<usize>> = Vec::with_capacity(n);
    let mut parents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, s) in switches.iter().enumerate() {
        let mut kids = Vec::new();
        for child in &s.children {
            let &c = index.get(child.as_str()).ok_or_else(|| {
                format!(
                    "topology.conf line {}: switch {} names switch {child}, which no SwitchName= line defines",
                    s.line, s.name
                )
            })?;
            kids.push(c);
        }
        kids.sort_unstable();
        kids.dedup();
        kids.iter().for_each(|&c| parents[c].push(i));
        children.push(kids);
    }
    // Heights, children first (Kahn's order); whatever stays unplaced is on or above a cycle.
    let mut height = vec![1usize; n];
    let mut waiting: Vec<usize> = children.iter().map(Vec::len).collect();
    let mut ready: Vec<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(s) = ready.pop() {
        order.push(s);
        for &p in &parents[s] {
            height[p] = height[p].max(height[s] + 1);
            waiting[p] -= 1;
            if waiting[p] == 0 {
                ready.push(p);
            }
        }
    }
    if order.len() < n {
        return Err(cycle(switches, &children, &waiting));
    }
    let tallest = height.iter().copied().max().unwrap_or(0);
    if tallest > MAX_TREE_TIERS {
        return Err(format!("topology.conf: the switch tree is {tallest} tiers tall, more than {MAX_TREE_TIERS}"));
    }
    // Per switch and tier, the first-named switch of that tier above it; parents before children.
    let mut above: Vec<Vec<Option<usize>>> = vec![vec![None; tallest]; n];
    for &s in order.iter().rev() {
        let mut mine = vec![None; tallest];
        for &p in &parents[s] {
            let theirs = above[p].iter().enumerate().map(|(t, a)| (t, *a)).chain([(height[p] - 1, Some(p))]);
            for (t, a) in theirs {
                if let Some(a) = a {
                    if mine[t].is_none_or(|m: usize| switches[a].name < switches[m].name) {
                        mine[t] = Some(a);
                    }
                }
            }
        }
        above[s] = mine;
    }
    let mut fabric = Fabric { tiers: (1..=tallest).map(tree_tier).collect(), nodes: BTreeMap::new() };
    let mut leaf_of: HashMap<&str, usize> = HashMap::new();
    for (i, s) in switches.iter().enumerate().filter(|(_, s)| !s.nodes.is_empty()) {
        let mut values = BTreeMap::from([(tree_tier(1), s.name.clone())]);
        values.extend(
            above[i].iter().enumerate().filter_map(|(t, a)| a.map(|a| (tree_tier(t + 1), switches[a].name.clone()))),
        );
        for node in &s.nodes {
            match leaf_of.insert(node, i) {
                Some(other) if other != i => {
                    let other = &switches[other];
                    return Err(format!(
                        "topology.conf line {}: node {node} is under two leaf switches: {} (line {}) and {}",
                        s.line, other.name, other.line, s.name
                    ));
                }
                _ => {}
            }
            fabric.nodes.insert(node.clone(), values.clone());
        }
    }
    Ok(fabric)
}

/// The error for switches left unplaced: every one of them has an unplaced child, so following
/// those from the first one must come back round.
fn cycle(switches: &[Switch], children: &[Vec<usize>], waiting: &[usize]) -> String {
    let stuck = |s: usize| waiting[s] > 0;
    let mut path: Vec<usize> = Vec::new();
    let mut s = (0..switches.len()).find(|&s| stuck(s)).unwrap_or(0);
    while !path.contains(&s) {
        path.push(s);
        s = children[s].iter().copied().find(|&c| stuck(c)).unwrap_or(s);
    }
    let start = path.iter().position(|&p| p == s).unwrap_or(0);
    let names: Vec<&str> = path[start..].iter().chain([&s]).map(|&i| switches[i].name.as_str()).collect();
    format!("topology.conf line {}: switches form a cycle: {}", switches[s].line, names.join(" -> "))
}

#[cfg(test)]
mod topograph_tests {
    use super::*;

    #[test]
    fn v1_tiers_come_first_closest_first_and_the_domain_names_the_machines_clique() {
        let keys =
            ["fabric.topograph.run/tier-1", "block", "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-x"];
        assert_eq!(default_tiers(keys), ["fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1", "block"]);
        let mut tray = accel_model::Machine::new(accel_model::HostInfo::default());
        tray.domains.push(accel_model::Domain {
            kind: accel_model::DomainKind::new("fabric_clique"),
            name: "c".into(),
            source: "test".into(),
            accelerators: Vec::new(),
            scale_up: true,
            nodes: None,
        });
        let mut labels = BTreeMap::from([(TOPOGRAPH_DOMAIN.to_owned(), "cluster-uuid.3".to_owned())]);
        topograph_domains(&mut labels, &tray);
        assert_eq!(labels["fabric_clique"], "cluster-uuid.3");
        // A machine without a domain that spans nodes takes no alias; the label stays usable.
        let mut alone = BTreeMap::from([(TOPOGRAPH_V0_DOMAIN.to_owned(), "x".to_owned())]);
        topograph_domains(&mut alone, &accel_model::Machine::new(accel_model::HostInfo::default()));
        assert_eq!(alone.len(), 1);
    }
}
