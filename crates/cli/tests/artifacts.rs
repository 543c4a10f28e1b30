//! Synthetic captures against the public artifacts they reproduce: `accel topo --json` on the
//! dgx-h100 sample compared with the `nvidia-smi topo -m` listing its README names
//! (test_data/hosts/dgx-h100/nvidia-smi-topo-m.txt).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

struct Row {
    gpus: Vec<String>,
    nics: Vec<String>,
    cpus: String,
    numa: String,
}

/// The GPU rows of an `nvidia-smi topo -m` listing (one space between cells).
fn listing(text: &str) -> Vec<Row> {
    let mut lines = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty());
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let n_gpu = header.iter().filter(|h| h.starts_with("GPU")).count();
    let n_nic = header.iter().filter(|h| h.starts_with("NIC")).count();
    lines
        .map(|l| {
            let cells: Vec<String> = l.split_whitespace().skip(1).map(str::to_owned).collect();
            Row {
                gpus: cells[..n_gpu].to_vec(),
                nics: cells[n_gpu..n_gpu + n_nic].to_vec(),
                cpus: cells[n_gpu + n_nic].clone(),
                numa: cells[n_gpu + n_nic + 1].clone(),
            }
        })
        .collect()
}

#[test]
fn dgx_h100_matches_its_nvidia_smi_listing() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../test_data/hosts/dgx-h100");
    let artifact = listing(&std::fs::read_to_string(dir.join("nvidia-smi-topo-m.txt")).unwrap());
    let out =
        Command::new(env!("CARGO_BIN_EXE_accel")).args(["topo", "--sample", "dgx-h100", "--json"]).output().unwrap();
    assert!(out.status.success());
    let topo: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let endpoints = topo["endpoints"].as_array().unwrap();
    let matrix = topo["matrix"].as_array().unwrap();
    let gpus: Vec<usize> =
        (0..endpoints.len()).filter(|&i| endpoints[i]["label"].as_str().unwrap().starts_with("GPU")).collect();
    let nics: Vec<usize> =
        (0..endpoints.len()).filter(|&i| endpoints[i]["label"].as_str().unwrap().starts_with("NIC")).collect();
    assert_eq!(gpus.len(), artifact.len());
    let cell = |i: usize, j: usize| matrix[i][j].as_str().unwrap().to_owned();
    for (g, row) in gpus.iter().zip(&artifact) {
        let accel_gpus: Vec<String> = gpus.iter().map(|&h| cell(*g, h)).collect();
        assert_eq!(accel_gpus, row.gpus, "GPU block, row {g}");
        assert_eq!(endpoints[*g]["cpu_affinity"], row.cpus.as_str());
        assert_eq!(endpoints[*g]["numa_affinity"].to_string(), row.numa);
        // The NIC pattern: the artifact's classes per socket, and one PXB NIC per GPU.
        let numa_of_nic = |n: usize| endpoints[n]["numa_affinity"].to_string();
        let same: BTreeSet<String> =
            nics.iter().filter(|&&n| numa_of_nic(n) == row.numa).map(|&n| cell(*g, n)).collect();
        let other: BTreeSet<String> =
            nics.iter().filter(|&&n| numa_of_nic(n) != row.numa).map(|&n| cell(*g, n)).collect();
        let half = row.nics.len() / 2;
        let (own, far) = if row.numa == "0" {
            row.nics.split_at(half)
        } else {
            let (a, b) = row.nics.split_at(half);
            (b, a)
        };
        assert_eq!(same, own.iter().cloned().collect::<BTreeSet<_>>(), "same-socket NIC classes of GPU row {g}");
        assert_eq!(other, far.iter().cloned().collect::<BTreeSet<_>>(), "cross-socket NIC classes of GPU row {g}");
        let pxb = |cells: &mut dyn Iterator<Item = String>| cells.filter(|c| c == "PXB").count();
        assert_eq!(pxb(&mut nics.iter().map(|&n| cell(*g, n))), pxb(&mut row.nics.iter().cloned()));
    }
}
