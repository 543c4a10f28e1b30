//! Short names held inline (`Copy`, no allocation): the open sets of link kinds and domain kinds
//! that plugins declare (`nvlink`, `hccs`; `rack`, `nvlink_clique`) and the short tags the path
//! matrix prints (`NV`, `XGMI`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Up to [`Name::MAX`] printable ASCII bytes without spaces, stored inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name {
    len: u8,
    bytes: [u8; Name::MAX],
}

impl Name {
    /// The longest name, in bytes.
    pub const MAX: usize = 23;

    /// `text` as a name; `None` when it is empty, longer than [`Name::MAX`] or holds anything but
    /// printable ASCII without spaces.
    pub const fn new(text: &str) -> Option<Name> {
        let b = text.as_bytes();
        if b.is_empty() || b.len() > Name::MAX {
            return None;
        }
        let mut bytes = [0u8; Name::MAX];
        let mut i = 0;
        while i < b.len() {
            if !b[i].is_ascii_graphic() {
                return None;
            }
            bytes[i] = b[i];
            i += 1;
        }
        Some(Name { len: b.len() as u8, bytes })
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored (checked in `new`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// An open set of kinds named by plugins: lowercase ASCII letters, digits, `_` and `-`, at most
/// [`Name::MAX`] bytes, held inline.
macro_rules! kind {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Name);

        impl $name {
            #[doc = concat!("The ", $what, " `text`, for constants; panics (at compile time in a `const`) on an invalid one.")]
            pub const fn new(text: &str) -> $name {
                match $name::parse(text) {
                    Some(k) => k,
                    None => panic!(concat!("a ", $what, " is 1 to 23 bytes of [a-z0-9_-]")),
                }
            }

            #[doc = concat!("`text` as a ", $what, ", or `None` when it is not 1 to 23 bytes of `[a-z0-9_-]`.")]
            pub const fn parse(text: &str) -> Option<$name> {
                match kind_name(text) {
                    Some(n) => Some($name(n)),
                    None => None,
                }
            }

            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self.as_str(), f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let text = String::deserialize(d)?;
                $name::parse(&text).ok_or_else(|| {
                    serde::de::Error::custom(format!(concat!($what, " {:?} is not 1 to 23 bytes of [a-z0-9_-]"), text))
                })
            }
        }
    };
}

/// `text` as a name of `[a-z0-9_-]` only.
const fn kind_name(text: &str) -> Option<Name> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-') {
            return None;
        }
        i += 1;
    }
    Name::new(text)
}

kind!(
    /// A scale-up link kind (`nvlink`, `xgmi`, `hccs`). The set is open: each plugin names the
    /// kinds of the links it reports and describes them with a
    /// [`LinkKindInfo`](crate::LinkKindInfo); nothing in accel keeps a list of them.
    LinkKind,
    "link kind"
);

kind!(
    /// A kind of domain above or across the node. The generic ones are constants here
    /// ([`DomainKind::ZONE`]...); a plugin names its own (a scale-up fabric's domain, such as an
    /// NVLink clique or a TPU slice), and nothing in accel keeps a list of them.
    DomainKind,
    "domain kind"
);

impl LinkKind {
    /// The tag a matrix prints for a kind no plugin described: the kind in capitals, at most 8
    /// characters (`hccs` gives `HCCS`).
    pub fn default_short(&self) -> Name {
        let upper: String = self.as_str().chars().take(8).map(|c| c.to_ascii_uppercase()).collect();
        Name::new(&upper).unwrap_or(self.0)
    }
}

impl DomainKind {
    /// A cloud availability zone.
    pub const ZONE: DomainKind = DomainKind::new("zone");
    /// A cloud region.
    pub const REGION: DomainKind = DomainKind::new("region");
    /// A rack (or a cloud's sub-block of nodes sharing one switch).
    pub const RACK: DomainKind = DomainKind::new("rack");
    /// A block of racks (Slurm's block topology, a cloud's topology block).
    pub const BLOCK: DomainKind = DomainKind::new("block");
    /// A cloud placement or network-node set (EC2 instance topology), named `<layer>:<id>`.
    pub const NETWORK_NODE: DomainKind = DomainKind::new("network_node");
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        let text = String::deserialize(d)?;
        Name::new(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is not 1 to 23 printable ASCII bytes without spaces"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(LinkKind::new("nvlink").as_str(), "nvlink");
        assert_eq!(LinkKind::parse("hccs").unwrap().default_short().as_str(), "HCCS");
        assert_eq!(LinkKind::parse("ultra_ethernet").unwrap().default_short().as_str(), "ULTRA_ET");
        for bad in ["", "NVLink", "nv link", "a\u{1b}[31m", "x".repeat(24).as_str(), "é"] {
            assert!(LinkKind::parse(bad).is_none(), "{bad:?} accepted");
        }
        let k: LinkKind = serde_json::from_str("\"xgmi\"").unwrap();
        assert_eq!(serde_json::to_string(&k).unwrap(), "\"xgmi\"");
        assert!(serde_json::from_str::<LinkKind>("\"X GMI\"").is_err());
        assert!(Name::new("NV").is_some() && Name::new("N V").is_none() && Name::new("").is_none());
        assert_eq!(serde_json::to_string(&DomainKind::NETWORK_NODE).unwrap(), "\"network_node\"");
        assert!(serde_json::from_str::<DomainKind>("\"Rack\"").is_err());
    }
}
