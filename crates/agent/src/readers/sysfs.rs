//! Readers of the kernel's own files, through discovery's [`Host`] (so a captured or recorded
//! tree replays exactly like the live `/`):
//!
//! - AMD: the amdgpu attributes of each `/sys/class/drm/card<N>/device` (`gpu_busy_percent`,
//!   `mem_info_vram_{used,total}`, `ras/*_err_count`) and its hwmon (`power1_average` or
//!   `power1_input` in µW, `temp*_input` in m°C with `temp*_label`, `freq*_input` in Hz with
//!   `freq*_label` sclk/mclk). Documented in the kernel's `Documentation/gpu/amdgpu/thermal.rst`
//!   and `amdgpu_pm.c`.
//! - Intel Gaudi: `/sys/class/accel/accel<N>/device/clk_cur_freq_mhz` (the habanalabs sysfs ABI,
//!   `Documentation/ABI/testing/sysfs-driver-habanalabs`) and the device's hwmon.
//!
//! xGMI per-link byte counters exist only inside amdgpu's binary `gpu_metrics` table (v1.4+),
//! not as text attributes; this reader does not decode that table, so AMD links carry no
//! series (docs/metrics.md says so).

use std::path::{Path, PathBuf};

use accel_discover::Host;
use accel_model::Warning;

use crate::readings::{DeviceReading, Readings};

/// amdgpu devices under `/sys/class/drm`.
pub fn read_amd(host: &Host) -> (Readings, Vec<Warning>) {
    let mut warnings = Vec::new();
    let mut out = Readings::default();
    let class = host.path("/sys/class/drm");
    for name in host.list_dir(&class, "amdgpu", &mut warnings) {
        // `card0`, not the connectors (`card0-DP-1`) or render nodes.
        if !name.strip_prefix("card").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let dev = class.join(&name).join("device");
        let Some(pci) = pci_of(host, &dev) else { continue };
        if driver_of(host, &dev, &mut warnings).as_deref() != Some("amdgpu") {
            continue;
        }
        let attr = |file: &str, w: &mut Vec<Warning>| -> Option<u64> {
            host.read_attr(&dev.join(file), "amdgpu", w).and_then(|s| s.trim().parse().ok())
        };
        let mut r = DeviceReading { pci, ..Default::default() };
        r.utilization_ratio = attr("gpu_busy_percent", &mut warnings).map(|p| p.min(100) as f64 / 100.0);
        r.memory_used_bytes = attr("mem_info_vram_used", &mut warnings);
        r.memory_total_bytes = attr("mem_info_vram_total", &mut warnings);
        read_hwmon(host, &dev, &mut r, &mut warnings);
        // RAS: `ue: N` / `ce: N` per IP block; UMC (the memory controller) is the ECC of HBM.
        let ras = dev.join("ras");
        for file in host.list_dir(&ras, "amdgpu", &mut warnings) {
            let Some(block) = file.strip_suffix("_err_count") else { continue };
            let Some(text) = host.read_attr(&ras.join(&file), "amdgpu", &mut warnings) else { continue };
            let prefix = if block == "umc" { "ecc".to_owned() } else { format!("ras_{block}") };
            for line in text.lines() {
                let Some((kind, n)) = line.split_once(':') else { continue };
                let Ok(n) = n.trim().parse::<u64>() else { continue };
                match kind.trim() {
                    "ue" => r.errors.insert(format!("{prefix}_uncorrected_total"), n),
                    "ce" => r.errors.insert(format!("{prefix}_corrected_total"), n),
                    _ => None,
                };
            }
        }
        out.devices.push(r);
    }
    (out, warnings)
}

/// Gaudi devices under `/sys/class/accel` (habanalabs driver).
pub fn read_gaudi(host: &Host) -> (Readings, Vec<Warning>) {
    let mut warnings = Vec::new();
    let mut out = Readings::default();
    let class = host.path("/sys/class/accel");
    for name in host.list_dir(&class, "habanalabs", &mut warnings) {
        if !name.strip_prefix("accel").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let dev = class.join(&name).join("device");
        let Some(pci) = pci_of(host, &dev) else { continue };
        if driver_of(host, &dev, &mut warnings).as_deref() != Some("habanalabs") {
            continue;
        }
        let mut r = DeviceReading { pci, ..Default::default() };
        if let Some(mhz) = host
            .read_attr(&dev.join("clk_cur_freq_mhz"), "habanalabs", &mut warnings)
            .and_then(|s| s.parse::<u64>().ok())
        {
            r.clock_hz.insert("soc".into(), mhz * 1_000_000);
        }
        read_hwmon(host, &dev, &mut r, &mut warnings);
        out.devices.push(r);
    }
    (out, warnings)
}

/// The PCI address a class device's `device` link points at (its last path component).
fn pci_of(host: &Host, dev: &Path) -> Option<String> {
    let target = host.resolve_link(dev)?;
    let name = target.file_name()?.to_str()?.to_ascii_lowercase();
    name.parse::<accel_model::PciAddr>().ok().map(|a| a.to_string())
}

fn driver_of(host: &Host, dev: &Path, warnings: &mut Vec<Warning>) -> Option<String> {
    if let Some(target) = host.resolve_link(&dev.join("driver")) {
        return target.file_name().and_then(|n| n.to_str()).map(str::to_owned);
    }
    let uevent = host.read_attr(&dev.join("uevent"), "sysfs", warnings)?;
    uevent.lines().find_map(|l| l.strip_prefix("DRIVER=")).map(str::to_owned)
}

/// Power, temperature and clocks from the device's hwmon directory (standard hwmon units).
fn read_hwmon(host: &Host, dev: &Path, r: &mut DeviceReading, warnings: &mut Vec<Warning>) {
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
