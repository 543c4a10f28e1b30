//! AMD's metrics: the amdgpu attributes of each `/sys/class/drm/card<N>/device`
//! (`gpu_busy_percent`, `mem_info_vram_{used,total}`, `ras/*_err_count`) and its hwmon, as the
//! kernel's `Documentation/gpu/amdgpu/thermal.rst` and `amdgpu_pm.c` document them.
//!
//! xGMI per-link byte counters exist only inside amdgpu's binary `gpu_metrics` table (v1.4+),
//! not as text attributes; this reader does not decode that table, so AMD links carry no
//! series (docs/metrics.md says so).

use accel_model::Warning;

use crate::hwmon::{driver_of, pci_of, read_hwmon};
use crate::readings::{DeviceReading, Readings};
use crate::Host;

/// amdgpu devices under `/sys/class/drm`.
pub fn read(host: &Host) -> (Readings, Vec<Warning>) {
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
