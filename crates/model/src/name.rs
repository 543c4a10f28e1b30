//! Short names held inline (`Copy`, no allocation): the open set of link kinds that plugins
//! declare (`nvlink`, `xgmi`, `hccs`) and the short tags the path matrix prints (`NV`, `XGMI`).

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

/// A scale-up link kind: lowercase ASCII letters, digits, `_` and `-`, at most [`Name::MAX`]
/// bytes. The set is open: each plugin names the kinds of the links it reports and describes them
/// with a [`LinkKindInfo`](crate::LinkKindInfo); nothing in accel keeps a list of them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkKind(Name);

impl LinkKind {
    /// The kind `text`, for constants in plugin modules; panics (at compile time in a `const`) on
    /// an invalid kind.
    pub const fn new(text: &str) -> LinkKind {
        match LinkKind::parse(text) {
            Some(k) => k,
            None => panic!("a link kind is 1 to 23 bytes of [a-z0-9_-]"),
        }
    }

    /// `text` as a kind, or `None` when it breaks the rule above.
    pub const fn parse(text: &str) -> Option<LinkKind> {
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-') {
                return None;
            }
            i += 1;
        }
        match Name::new(text) {
            Some(n) => Some(LinkKind(n)),
            None => None,
        }
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The tag a matrix prints for a kind no plugin described: the kind in capitals, at most 8
    /// characters (`hccs` gives `HCCS`).
    pub fn default_short(&self) -> Name {
        let upper: String = self.as_str().chars().take(8).map(|c| c.to_ascii_uppercase()).collect();
        Name::new(&upper).unwrap_or(self.0)
    }
}

impl fmt::Debug for LinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for LinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for LinkKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LinkKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LinkKind, D::Error> {
        let text = String::deserialize(d)?;
        LinkKind::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("link kind {text:?} is not 1 to 23 bytes of [a-z0-9_-]")))
    }
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
    }
}
