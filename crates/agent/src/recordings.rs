//! Recorded readings for the embedded samples, so `accel agent --sample NAME` serves metrics
//! that came from real hardware. Each recording names its public source in
//! `crates/agent/recordings/README.md`; the values are real, the sample machines they are
//! placed on are the samples' own (some synthetic, see their READMEs).

/// Files to add to a sample's tree (absolute in-machine path, content).
pub fn for_sample(name: &str) -> Vec<(&'static str, &'static [u8])> {
    match name {
        "gb200-nvl72-tray" => vec![(
            crate::readers::RECORDED_NVML_METRICS,
            include_bytes!("../recordings/gb200-nvl72-tray.nvml-metrics.json").as_slice(),
        )],
        _ => Vec::new(),
    }
}
