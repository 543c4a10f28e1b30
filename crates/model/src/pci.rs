//! PCI addresses, ids, classes and link speeds, with the parsers for their sysfs spellings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A PCI function address, `domain:bus:device.function`. Domains may exceed 16 bits
/// (VMD and Hyper-V use `10000:` and above).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddr {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pci address {0:?}")]
pub struct PciAddrError(String);

impl PciAddr {
    /// The host bridge's sysfs name for this address's root bus, as in `pci0000:17`.
    pub fn root_bus_name(&self) -> String {
        format!("pci{:04x}:{:02x}", self.domain, self.bus)
    }
}

impl FromStr for PciAddr {
    type Err = PciAddrError;

    fn from_str(text: &str) -> Result<PciAddr, PciAddrError> {
        let err = || PciAddrError(text.to_owned());
        let t = text.trim();
        // The domain is optional in some tools' output (`17:00.0`).
        let (domain, rest) = match t.matches(':').count() {
            2 => t.split_once(':').ok_or_else(err)?,
            1 => ("0", t),
            _ => return Err(err()),
        };
        let (bus, rest) = rest.split_once(':').ok_or_else(err)?;
        let (device, function) = rest.split_once('.').ok_or_else(err)?;
        let hex = |s: &str, max_len: usize| {
            if s.is_empty() || s.len() > max_len {
                return Err(err());
            }
            u32::from_str_radix(s, 16).map_err(|_| err())
        };
        let (domain, bus, device, function) = (hex(domain, 8)?, hex(bus, 2)?, hex(device, 2)?, hex(function, 1)?);
        if device > 0x1f || function > 7 {
            return Err(err());
        }
        Ok(PciAddr { domain, bus: bus as u8, device: device as u8, function: function as u8 })
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

impl fmt::Debug for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PciAddr({self})")
    }
}

impl Serialize for PciAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PciAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// A 16-bit PCI vendor or device id. Serialised as `"0x10de"`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciId(pub u16);

impl PciId {
    /// Parses the sysfs spelling `0x10de` (the `0x` is optional).
    pub fn parse(text: &str) -> Option<PciId> {
        let t = text.trim();
        let t = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
        if t.is_empty() || t.len() > 4 {
            return None;
        }
        u16::from_str_radix(t, 16).ok().map(PciId)
    }
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}", self.0)
    }
}

impl fmt::Debug for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:04x}", self.0)
    }
}

impl Serialize for PciId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("0x{:04x}", self.0))
    }
}

impl<'de> Deserialize<'de> for PciId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        PciId::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("invalid pci id {text:?}")))
    }
}

/// A 24-bit PCI class code (base class, subclass, programming interface). Serialised as `"0x030200"`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciClass(pub u32);

impl PciClass {
    pub fn parse(text: &str) -> Option<PciClass> {
        let t = text.trim();
        let t = t.strip_prefix("0x").unwrap_or(t);
        if t.is_empty() || t.len() > 6 {
            return None;
        }
        u32::from_str_radix(t, 16).ok().map(PciClass)
    }

    /// Base class and subclass, as in `0x0604` for a PCI-to-PCI bridge.
    pub fn base_sub(self) -> u16 {
        (self.0 >> 8) as u16
    }

    pub fn base(self) -> u8 {
        (self.0 >> 16) as u8
    }

    pub fn is_bridge(self) -> bool {
        matches!(self.base_sub(), 0x0604 | 0x0609)
    }

    pub fn is_network(self) -> bool {
        self.base() == 0x02
    }

    /// The class of an InfiniBand controller.
    pub fn is_infiniband(self) -> bool {
        self.base_sub() == 0x0207
    }

    /// A short human name, in the words `lspci` and hwloc use.
    pub fn name(self) -> &'static str {
        match self.base_sub() {
            0x0100 => "SCSI",
            0x0101 => "IDE",
            0x0104 => "RAID",
            0x0106 => "SATA",
            0x0108 => "NVMe",
            0x0200 => "Ethernet",
            0x0207 => "InfiniBand",
            0x0280 => "Network",
            0x0300 => "VGA",
            0x0302 => "3D",
            0x0380 => "Display",
            0x0600 => "HostBridge",
            0x0604 | 0x0609 => "PCIBridge",
            0x0680 => "Bridge",
            0x0b40 => "Co-Processor",
            0x0c03 => "USB",
            0x1200 => "ProcessingAccelerator",
            _ => match self.base() {
                0x01 => "Storage",
                0x02 => "Network",
                0x03 => "Display",
                0x06 => "Bridge",
                0x12 => "ProcessingAccelerator",
                _ => "Other",
            },
        }
    }
}

impl fmt::Debug for PciClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:06x}", self.0)
    }
}

impl Serialize for PciClass {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("0x{:06x}", self.0))
    }
}

impl<'de> Deserialize<'de> for PciClass {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        PciClass::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("invalid pci class {text:?}")))
    }
}

/// A PCIe link's speed and width.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PciLink {
    /// Transfer rate per lane in GT/s (2.5, 5, 8, 16, 32, 64).
    pub gts: f64,
    pub width: u32,
}

impl PciLink {
    /// Parses sysfs link speeds: `8 GT/s`, `8.0 GT/s PCIe`, `32 GT/s PCIe/s`, `2.5 GT/s`.
    /// `Unknown` and garbage give `None`.
    pub fn parse_speed(text: &str) -> Option<f64> {
        let number = text.split_whitespace().next()?;
        let gts: f64 = number.parse().ok()?;
        (gts.is_finite() && gts > 0.0 && gts <= 1024.0).then_some(gts)
    }

    /// Usable bandwidth in GB/s per direction after line encoding, as hwloc computes it.
    pub fn gbps(&self) -> f64 {
        // 8b/10b below 8 GT/s, 128b/130b from Gen3; Gen6 (64 GT/s) uses FLIT mode, ~242/256.
        let encoding = if self.gts < 8.0 {
            0.8
        } else if self.gts < 64.0 {
            128.0 / 130.0
        } else {
            242.0 / 256.0
        };
        self.gts * encoding * f64::from(self.width) / 8.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn addresses() {
        let a: PciAddr = "0000:1b:00.0".parse().unwrap();
        assert_eq!(a.to_string(), "0000:1b:00.0");
        let b: PciAddr = "10000:00:04.0".parse().unwrap();
        assert_eq!(b.domain, 0x10000);
        assert_eq!(b.to_string(), "10000:00:04.0");
        assert_eq!(b.root_bus_name(), "pci10000:00");
        assert_eq!("1b:00.1".parse::<PciAddr>().unwrap().to_string(), "0000:1b:00.1");
        for bad in ["", "0000:1b:00", "0000:1b:20.0", "0000:1b:00.8", "zz:00.0", "0000:123:00.0", "pci0000:17"] {
            assert!(bad.parse::<PciAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_classes_links() {
        assert_eq!(PciId::parse("0x10de"), Some(PciId(0x10de)));
        assert_eq!(PciId::parse("0x10de0"), None);
        assert_eq!(PciClass::parse("0x060400").map(PciClass::is_bridge), Some(true));
        assert_eq!(PciLink::parse_speed("32 GT/s PCIe/s"), Some(32.0));
        assert_eq!(PciLink::parse_speed("8.0 GT/s PCIe"), Some(8.0));
        assert_eq!(PciLink::parse_speed("Unknown"), None);
        let link = PciLink { gts: 8.0, width: 16 };
        assert!((link.gbps() - 15.753846).abs() < 1e-5);
    }

    proptest! {
        #[test]
        fn address_roundtrips(domain in 0u32..0x100000, bus: u8, device in 0u8..32, function in 0u8..8) {
            let a = PciAddr { domain, bus, device, function };
            prop_assert_eq!(a.to_string().parse::<PciAddr>().unwrap(), a);
        }

        #[test]
        fn parsers_never_panic(text in ".{0,24}") {
            let _ = text.parse::<PciAddr>();
            let _ = PciId::parse(&text);
            let _ = PciClass::parse(&text);
            let _ = PciLink::parse_speed(&text);
        }
    }
}
