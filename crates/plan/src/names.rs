//! Names a request uses that nothing knows. A typo in a vendor, family, SKU, domain kind or
//! request field is an invalid request that names the nearest known name, never an infeasible
//! one: "no node has 4 nvidai devices" would send the user looking for hardware.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use accel_model::DomainKind;

use crate::{PlanError, Request};

/// The built-in SKU registry's vendors, families and SKU ids, parsed once.
fn registry_names() -> &'static [BTreeSet<String>; 3] {
    static NAMES: OnceLock<[BTreeSet<String>; 3]> = OnceLock::new();
    NAMES.get_or_init(|| {
        let registry = accel_model::SkuRegistry::builtin();
        let mut out: [BTreeSet<String>; 3] = Default::default();
        for sku in registry.all() {
            out[0].insert(sku.vendor.clone());
            out[1].insert(sku.family.clone());
            out[2].insert(sku.id.clone());
        }
        out
    })
}

/// Every name a request may use on one planner's cluster: the registry's vendors, families and
/// SKUs plus the cluster's own devices', and the domain and label keys of its nodes plus the
/// generic kinds. Kept up to date as nodes are added, so a check costs no scan of the cluster.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    vendor: BTreeSet<String>,
    family: BTreeSet<String>,
    sku: BTreeSet<String>,
    kind: BTreeSet<String>,
}

impl Known {
    pub fn new() -> Known {
        let [vendor, family, sku] = registry_names().clone();
        let mut kind: BTreeSet<String> = BTreeSet::from(["node".to_owned()]);
        for generic in [DomainKind::ZONE, DomainKind::REGION, DomainKind::RACK, DomainKind::BLOCK] {
            kind.insert(generic.as_str().into());
        }
        Known { vendor, family, sku, kind }
    }

    pub fn add_devices<'a>(&mut self, devices: impl IntoIterator<Item = &'a crate::cluster::Device>) {
        for d in devices {
            self.vendor.insert(d.vendor.clone());
            self.family.extend(d.family.clone());
            self.sku.extend(d.sku.clone());
        }
    }

    pub fn add_keys<'a>(&mut self, keys: impl IntoIterator<Item = &'a String>) {
        self.kind.extend(keys.into_iter().cloned());
    }

    /// `Err(Unknown)` for a vendor, family or SKU nothing knows, or a domain or selector key
    /// close to a known one (a key far from all is left to the planner: it may simply be absent).
    pub fn check(&self, request: &Request) -> Result<(), PlanError> {
        for b in &request.bundles {
            for (field, values, known) in
                [("vendor", &b.vendor, &self.vendor), ("family", &b.family, &self.family), ("sku", &b.sku, &self.sku)]
            {
                if let Some(value) = values.iter().find(|v| !known.contains(*v)) {
                    return Err(unknown(field, value, suggest(value, known.iter().map(String::as_str)), known));
                }
            }
        }
        let named = request
            .same
            .iter()
            .map(|k| ("domain", k))
            .chain(request.select.keys().map(|k| ("label", k)))
            .chain(request.groups.iter().map(|g| ("domain", &g.same)));
        for (field, key) in named.filter(|(_, k)| !self.kind.contains(*k)) {
            if let Some(s) = suggest(key, self.kind.iter().map(String::as_str)) {
                return Err(unknown(field, key, Some(s), &self.kind));
            }
        }
        Ok(())
    }
}

fn unknown(field: &str, value: &str, suggestion: Option<String>, known: &BTreeSet<String>) -> PlanError {
    PlanError::Unknown { field: field.into(), value: value.into(), suggestion, known: known.iter().cloned().collect() }
}

pub use accel_model::suggest;

/// For a serde message about an unknown field or variant (`unknown field `conectivity`,
/// expected one of `count`, ...`), the name and its suggestion.
pub fn unknown_in_message(message: &str) -> Option<(String, Option<String>)> {
    let rest = message.split_once("unknown field `").or_else(|| message.split_once("unknown variant `"))?.1;
    let (word, rest) = rest.split_once('`')?;
    let known: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    Some((word.to_owned(), suggest(word, known)))
}

/// A request parse error's message with the suggestion for a misspelt field, when there is one.
pub fn with_hint(message: String) -> String {
    match unknown_in_message(&message) {
        Some((word, Some(s))) => format!("{message}; did you mean `{s}` for `{word}`?"),
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_get_the_nearest_name_and_strangers_none() {
        assert_eq!(suggest("nvidai", ["nvidia", "amd", "google"]), Some("nvidia".into()));
        assert_eq!(suggest("Hopper", ["hopper", "blackwell"]), Some("hopper".into()));
        assert_eq!(suggest("nvlink_cliqe", ["nvlink_clique", "rack"]), Some("nvlink_clique".into()));
        assert_eq!(suggest("amd", ["nvidia", "google"]), None);
        assert_eq!(suggest("xyz", ["rack"]), None);
        assert_eq!(suggest("rakc", ["rack", "zone"]), Some("rack".into()));
    }

    #[test]
    fn serde_messages_name_the_field_and_its_fix() {
        let m = "unknown field `conectivity`, expected one of `count`, `vendor`, `connectivity` at line 1 column 30";
        assert_eq!(unknown_in_message(m), Some(("conectivity".into(), Some("connectivity".into()))));
        assert!(with_hint(m.into()).ends_with("did you mean `connectivity` for `conectivity`?"));
        assert_eq!(with_hint("expected a number".into()), "expected a number");
    }
}
