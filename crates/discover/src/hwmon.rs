//! Readings of a PCI device's kernel files, for the families' metric readers: the PCI function
//! a class device stands for, its driver, and its hwmon directory (power in µW, `temp*_input`
//! in m°C with `temp*_label`, `freq*_input` in Hz with `freq*_label`), all through [`Host`] so
//! a captured tree replays exactly like the live `/`.

use std::path::{Path, PathBuf};

use accel_model::Warning;

use crate::readings::DeviceReading;
use crate::Host;

/// The PCI address a class device's `device` link points at (its last path component).
pub fn pci_of(host: &Host, dev: &Path) -> Option<String> {
    let target = host.resolve_link(dev)?;
    let name = target.file_name()?.to_str()?.to_ascii_lowercase();
    name.parse::<accel_model::PciAddr>().ok().map(|a| a.to_string())
}

pub fn driver_of(host: &Host, dev: &Path, warnings: &mut Vec<Warning>) -> Option<String> {
    if let Some(target) = host.resolve_link(&dev.join("driver")) {
        return target.file_name().and_then(|n| n.to_str()).map(str::to_owned);
    }
    let uevent = host.read_attr(&dev.join("uevent"), "sysfs", warnings)?;
    uevent.lines().find_map(|l| l.strip_prefix("DRIVER=")).map(str::to_owned)
}

/// Power, temperature and clocks from the device's hwmon directory (standard hwmon units). The
/// temperature is the hottest-spot sensor when labelled (`junction`), else `edge`, else the
/// first; clocks labelled `sclk` and `mclk` are the `sm` and `memory` domains.
pub fn read_hwmon(host: &Host, dev: &Path, r: &mut DeviceReading, warnings: &mut Vec<Warning>) {
    let base = dev.join("hwmon");
    let Some(hw) = host.list_dir(&base, "hwmon", warnings).into_iter().find(|n| n.starts_with("hwmon")) else {
        return;
    };
    let hw: PathBuf = base.join(hw);
    let num = |file: &str, w: &mut Vec<Warning>| -> Option<i64> {
        host.read_attr(&hw.join(file), "hwmon", w).and_then(|s| s.trim().parse().ok())
    };
    let power_uw = num("power1_average", warnings).or_else(|| num("power1_input", warnings));
    r.power_watts = power_uw.filter(|p| *p >= 0).map(|p| p as f64 / 1e6);
    let files = host.list_dir(&hw, "hwmon", warnings);
    // Temperature: the hottest-spot sensor when labelled (amdgpu `junction`), else the first.
    let mut temps: Vec<(String, i64)> = Vec::new();
    for f in files.iter().filter(|f| f.starts_with("temp") && f.ends_with("_input")) {
        let stem = &f[..f.len() - "_input".len()];
        if let Some(v) = num(f, warnings) {
            let label = host.read_attr(&hw.join(format!("{stem}_label")), "hwmon", warnings).unwrap_or_default();
            temps.push((label, v));
        }
    }
    let pick = temps
        .iter()
        .find(|(l, _)| l == "junction")
        .or_else(|| temps.iter().find(|(l, _)| l == "edge"))
        .or(temps.first());
    r.temperature_celsius = pick.map(|(_, v)| *v as f64 / 1000.0);
    for f in files.iter().filter(|f| f.starts_with("freq") && f.ends_with("_input")) {
        let stem = &f[..f.len() - "_input".len()];
        let Some(hz) = num(f, warnings).filter(|v| *v >= 0) else { continue };
        let label = host.read_attr(&hw.join(format!("{stem}_label")), "hwmon", warnings).unwrap_or_default();
        let domain = match label.as_str() {
            "sclk" => "sm",
            "mclk" => "memory",
            _ => continue,
        };
        r.clock_hz.insert(domain.into(), hz as u64);
    }
}
