//! Intel Gaudi's metrics: `/sys/class/accel/accel<N>/device/clk_cur_freq_mhz` (the habanalabs
//! sysfs ABI, `Documentation/ABI/testing/sysfs-driver-habanalabs`) and the device's hwmon.

use accel_model::Warning;

use crate::hwmon::{driver_of, pci_of, read_hwmon};
use crate::readings::{DeviceReading, Readings};
use crate::Host;

/// Gaudi devices under `/sys/class/accel` (habanalabs driver).
pub fn read(host: &Host) -> (Readings, Vec<Warning>) {
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

