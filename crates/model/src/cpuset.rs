//! Sets of CPU ids, parsed from the two Linux spellings: lists (`0-7,16-23`) and hex masks.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A sorted set of logical CPU ids. Serialised as a Linux cpulist string (`"0-7,16-23"`).
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet(Vec<u32>);

/// A cpulist or cpumask that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cpu set {text:?}: {reason}")]
pub struct CpuSetError {
    text: String,
    reason: &'static str,
}

/// Largest CPU id we accept; bounds the memory a hostile cpulist can make us allocate.
const MAX_CPU: u32 = 1 << 20;

impl CpuSet {
    pub fn new(mut cpus: Vec<u32>) -> CpuSet {
        cpus.sort_unstable();
        cpus.dedup();
        CpuSet(cpus)
    }

    /// Parses a Linux cpulist such as `0-7,16-23` (the empty string is the empty set).
    pub fn parse_list(text: &str) -> Result<CpuSet, CpuSetError> {
        let err = |reason| CpuSetError { text: text.to_owned(), reason };
        let mut cpus = Vec::new();
        for part in text.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (lo, hi),
                None => (part, part),
            };
            let lo: u32 = lo.trim().parse().map_err(|_| err("not a number"))?;
            let hi: u32 = hi.trim().parse().map_err(|_| err("not a number"))?;
            if lo > hi {
                return Err(err("range runs backwards"));
            }
            if hi > MAX_CPU {
                return Err(err("cpu id too large"));
            }
            cpus.extend(lo..=hi);
        }
        Ok(CpuSet::new(cpus))
    }

    /// Parses a Linux cpumask such as `0000,00000000,00ff00ff` (32-bit words, most significant first).
    pub fn parse_mask(text: &str) -> Result<CpuSet, CpuSetError> {
        let err = |reason| CpuSetError { text: text.to_owned(), reason };
        let words: Vec<&str> = text.trim().split(',').collect();
        if words.len() as u32 > MAX_CPU / 32 {
            return Err(err("mask too long"));
        }
        let mut cpus = Vec::new();
        for (i, word) in words.iter().rev().enumerate() {
            let word = word.trim().trim_start_matches("0x");
            if word.is_empty() {
                continue;
            }
            let bits = u32::from_str_radix(word, 16).map_err(|_| err("not a hex word"))?;
            for bit in 0..32 {
                if bits & (1 << bit) != 0 {
                    cpus.push(i as u32 * 32 + bit);
                }
            }
        }
        Ok(CpuSet::new(cpus))
    }

    pub fn cpus(&self) -> &[u32] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn intersects(&self, other: &CpuSet) -> bool {
        let (mut i, mut j) = (0, 0);
        while i < self.0.len() && j < other.0.len() {
            match self.0[i].cmp(&other.0[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.iter().copied().filter(|c| other.0.binary_search(c).is_ok()).collect())
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.iter().all(|c| other.0.binary_search(c).is_ok())
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while i < self.0.len() {
            let lo = self.0[i];
            let mut hi = lo;
            while i + 1 < self.0.len() && self.0[i + 1] == hi + 1 {
                i += 1;
                hi = self.0[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CpuSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        CpuSet::parse_list(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lists_and_masks() {
        let list = CpuSet::parse_list("0-7,16-23").unwrap();
        let mask = CpuSet::parse_mask("0000,00000000,00ff00ff").unwrap();
        assert_eq!(list, mask);
        assert_eq!(list.to_string(), "0-7,16-23");
        assert_eq!(CpuSet::parse_mask("000000ff,ff000000,,0x0").unwrap().to_string(), "88-103");
        assert!(CpuSet::parse_list("").unwrap().is_empty());
        assert!(CpuSet::parse_list("3-1").is_err());
        assert!(CpuSet::parse_list("a").is_err());
        assert!(CpuSet::parse_list("0-4294967295").is_err());
        assert!(CpuSet::parse_mask("zz").is_err());
        assert!(list.intersects(&CpuSet::parse_list("7").unwrap()));
        assert!(!list.intersects(&CpuSet::parse_list("8-15").unwrap()));
        assert!(CpuSet::parse_list("1,2").unwrap().is_subset(&list));
    }

    proptest! {
        #[test]
        fn list_roundtrips(cpus in proptest::collection::vec(0u32..4096, 0..64)) {
            let set = CpuSet::new(cpus);
            prop_assert_eq!(CpuSet::parse_list(&set.to_string()).unwrap(), set);
        }

        #[test]
        fn parsers_never_panic(text in ".{0,40}") {
            let _ = CpuSet::parse_list(&text);
            let _ = CpuSet::parse_mask(&text);
        }
    }
}
