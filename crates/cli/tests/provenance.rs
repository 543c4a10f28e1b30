//! Every sample's provenance.toml against the artifacts it cites: each `[[facts]]` entry names a
//! check here, which compares the sample (through the `accel` binary) with the excerpt copied
//! beside it. A fact whose check is unknown fails; every check is shown failing on a broken
//! excerpt. (test_data/hosts/<name>/provenance.toml; crates/discover/src/provenance.rs.)

use std::path::PathBuf;
use std::process::Command;

use accel_discover::provenance::{Kind, Provenance};

fn hosts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../test_data/hosts")
}

/// The checks a fact may name: each takes the sample and the excerpt's text.
fn run_check(check: &str, sample: &str, excerpt: &str) -> Result<(), String> {
    match check {
        "nvidia-smi-topo-m" => nvidia_smi_topo_m(sample, excerpt),
        "neuron-instance-spec" => neuron_instance_spec(sample, excerpt),
        "neuron-logical-cores" => neuron_logical_cores(sample, excerpt),
        "dgx-network-modules" => dgx_network_modules(sample, excerpt),
        "dgx-system-spec" => dgx_system_spec(sample, excerpt),
        other => Err(format!("no check named {other:?} in crates/cli/tests/provenance.rs")),
    }
}

#[test]
fn every_traced_fact_matches_its_artifact() {
    let mut traced = 0;
    for name in accel_discover::samples::names() {
        let p = accel_discover::samples::provenance(name).unwrap().unwrap();
        for fact in &p.facts {
            let excerpt = std::fs::read_to_string(hosts().join(name).join(&fact.excerpt))
                .unwrap_or_else(|e| panic!("{name}: excerpt {} of {:?}: {e}", fact.excerpt, fact.fact));
            if let Err(e) = run_check(&fact.check, name, &excerpt) {
                panic!("{name}: {:?} ({}) disagrees: {e}", fact.fact, fact.artifact);
            }
            traced += 1;
        }
        // A real sample names where it was published; a derived one traces its facts (the
        // parser refuses either otherwise: crates/discover/src/provenance.rs).
        match p.kind {
            Kind::Real => assert!(!p.sources.is_empty(), "{name}"),
            Kind::Derived => assert!(!p.facts.is_empty(), "{name}"),
            // A synthetic sample says what real machines contradict in it (or that none is known).
            Kind::Synthetic => assert!(!p.contradictions.is_empty(), "{name}: no `contradictions`"),
        }
    }
    assert!(traced > 0, "no sample traces a fact");
}

#[test]
fn checks_fail_on_broken_artifacts() {
    let text = std::fs::read_to_string(hosts().join("dgx-h100/nvidia-smi-topo-m.txt")).unwrap();
    assert_eq!(nvidia_smi_topo_m("dgx-h100", &text), Ok(()));
    // One GPU pair's class, one GPU's NUMA node, one NIC class changed: each must fail.
    let pair = text.replacen("GPU0 X NV18", "GPU0 X PIX", 1);
    assert!(nvidia_smi_topo_m("dgx-h100", &pair).is_err());
    let numa = text.replacen("0-55,112-167 0", "0-55,112-167 1", 1);
    assert!(nvidia_smi_topo_m("dgx-h100", &numa).is_err());
    let nic = text.replacen("NV18 PXB NODE", "NV18 NODE NODE", 1);
    assert!(nvidia_smi_topo_m("dgx-h100", &nic).is_err());
    // The storage ports: NIC1 as PXB to GPU0 would put a compute port there.
    let storage = text.replacen("NV18 PXB NODE NODE", "NV18 PXB PXB NODE", 1);
    assert!(nvidia_smi_topo_m("dgx-h100", &storage).is_err());
    let modules = std::fs::read_to_string(hosts().join("dgx-h100/dgx-h100-network-modules.txt")).unwrap();
    assert_eq!(dgx_network_modules("dgx-h100", &modules), Ok(()));
    assert!(
        dgx_network_modules("dgx-h100", &modules.replace("CX1 0 0 ibp24s0 mlx5_0", "CX1 0 0 ibp24s0 mlx5_1")).is_err()
    );
    assert!(dgx_network_modules("dgx-h100", &modules.replace("CX0 1 7", "CX0 0 7")).is_err());
    let spec = std::fs::read_to_string(hosts().join("dgx-h100/dgx-basepod-spec.txt")).unwrap();
    assert_eq!(dgx_system_spec("dgx-h100", &spec), Ok(()));
    assert!(dgx_system_spec("dgx-h100", &spec.replace("Four NVIDIA NVSwitch", "Six NVIDIA NVSwitch")).is_err());
    assert!(dgx_system_spec("dgx-h100", &spec.replace("2x dual-port", "4x dual-port")).is_err());
    assert!(dgx_system_spec("dgx-h100", &spec.replace("640 GB total", "320 GB total")).is_err());
    let spec = std::fs::read_to_string(hosts().join("trn2/aws-trn2-arch.txt")).unwrap();
    assert_eq!(neuron_instance_spec("trn2", &spec), Ok(()));
    assert!(neuron_instance_spec("trn2", &spec.replace("| 16 | 64 |", "| 32 | 64 |")).is_err());
    assert!(neuron_instance_spec("trn2", &spec.replace("| 1,536 |", "| 1,024 |")).is_err());
    assert!(neuron_instance_spec("trn2", &spec.replace("| 192 |", "| 96 |")).is_err());
    assert!(neuron_instance_spec("trn2", &spec.replace("4x4, 2D Torus", "4x4, 2D mesh")).is_err());
    assert!(neuron_instance_spec("gaudi3", &spec).is_err());
    let lnc = std::fs::read_to_string(hosts().join("trn2/aws-neuron-lnc.txt")).unwrap();
    assert_eq!(neuron_logical_cores("trn2", &lnc), Ok(()));
    assert!(neuron_logical_cores("trn2", &lnc.replace("into 4 Logical", "into 8 Logical")).is_err());
    assert!(neuron_logical_cores("trn2", &lnc.replace("presents 64 available", "presents 128 available")).is_err());
    // The same listing is not the mi300x machine.
    assert!(nvidia_smi_topo_m("mi300x", &text).is_err());
    assert!(run_check("made-up", "dgx-h100", &text).is_err());
}

#[test]
fn provenance_refuses_what_it_cannot_stand_behind() {
    // The kinds `accel samples` prints come from these files; a file that says "captured" or a
    // real capture without a source is refused.
    assert!(Provenance::parse("kind = \"captured\"\nsummary = \"x\"\n").is_err());
    assert!(Provenance::parse("kind = \"real\"\nsummary = \"x\"\n").is_err());
}

struct Row {
    gpus: Vec<String>,
    nics: Vec<String>,
    cpus: String,
    numa: String,
}

/// The GPU rows of an `nvidia-smi topo -m` listing (one space between cells; `#` comments).
fn listing(text: &str) -> Result<Vec<Row>, String> {
    let mut lines = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty());
    let header: Vec<&str> = lines.next().ok_or("an empty listing")?.split_whitespace().collect();
    let n_gpu = header.iter().filter(|h| h.starts_with("GPU")).count();
    let n_nic = header.iter().filter(|h| h.starts_with("NIC")).count();
    lines
        .map(|l| {
            let cells: Vec<String> = l.split_whitespace().skip(1).map(str::to_owned).collect();
            if cells.len() < n_gpu + n_nic + 2 {
                return Err(format!("a short row: {l:?}"));
            }
            Ok(Row {
                gpus: cells[..n_gpu].to_vec(),
                nics: cells[n_gpu..n_gpu + n_nic].to_vec(),
                cpus: cells[n_gpu + n_nic].clone(),
                numa: cells[n_gpu + n_nic + 1].clone(),
            })
        })
        .collect()
}

/// `Err(what)` unless `a == b`.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, accel: T, artifact: T) -> Result<(), String> {
    if accel == artifact {
        Ok(())
    } else {
        Err(format!("{what}: accel {accel:?}, artifact {artifact:?}"))
    }
}

/// `accel topo --json` of the sample against the GPU rows of an `nvidia-smi topo -m` listing:
/// the GPU-GPU block, each GPU's CPU and NUMA affinity, and every GPU-NIC class, column `NIC<k>`
/// against the sample's RDMA device `mlx5_<k>` (nvidia-smi's NIC Legend numbering).
fn nvidia_smi_topo_m(sample: &str, text: &str) -> Result<(), String> {
    let artifact = listing(text)?;
    let out = Command::new(env!("CARGO_BIN_EXE_accel")).args(["topo", "--sample", sample, "--json"]).output().unwrap();
    if !out.status.success() {
        return Err(format!("accel topo failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let topo: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let endpoints = topo["endpoints"].as_array().unwrap();
    let matrix = topo["matrix"].as_array().unwrap();
    let gpus: Vec<usize> =
        (0..endpoints.len()).filter(|&i| endpoints[i]["label"].as_str().unwrap().starts_with("GPU")).collect();
    let nics: Vec<usize> =
        (0..endpoints.len()).filter(|&i| endpoints[i]["label"].as_str().unwrap().starts_with("NIC")).collect();
    same("GPU count", gpus.len(), artifact.len())?;
    let cell = |i: usize, j: usize| matrix[i][j].as_str().unwrap().to_owned();
    for (g, row) in gpus.iter().zip(&artifact) {
        let accel_gpus: Vec<String> = gpus.iter().map(|&h| cell(*g, h)).collect();
        same(&format!("GPU block, row {g}"), &accel_gpus, &row.gpus)?;
        same(&format!("CPU affinity of GPU {g}"), endpoints[*g]["cpu_affinity"].as_str(), Some(row.cpus.as_str()))?;
        same(&format!("NUMA affinity of GPU {g}"), endpoints[*g]["numa_affinity"].to_string(), row.numa.clone())?;
        same("NIC count", nics.len(), row.nics.len())?;
        for (k, class) in row.nics.iter().enumerate() {
            let name = format!("mlx5_{k}");
            let n = nics
                .iter()
                .find(|&&n| endpoints[n]["id"].as_str() == Some(name.as_str()))
                .ok_or(format!("no NIC named {name}"))?;
            same(&format!("GPU {g} to NIC{k} ({name})"), &cell(*g, *n), class)?;
        }
    }
    Ok(())
}

/// The rows of a transcribed table: whitespace-separated cells, `#` comments left out.
fn rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// The DGX network-module table: each GPU's PXB NIC is the RDMA device of its port, on the
/// module's CPU (NUMA node).
fn dgx_network_modules(sample: &str, text: &str) -> Result<(), String> {
    let out = Command::new(env!("CARGO_BIN_EXE_accel")).args(["topo", "--sample", sample, "--json"]).output().unwrap();
    let topo: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    let endpoints = topo["endpoints"].as_array().unwrap();
    let matrix = topo["matrix"].as_array().unwrap();
    let table = rows(text);
    same("ports", table.len(), 8)?;
    for row in table {
        let [_, _, cpu, gpu, _, rdma] = row[..] else { return Err(format!("a short row: {row:?}")) };
        let g = endpoints.iter().position(|e| e["label"] == format!("GPU{gpu}")).ok_or(format!("no GPU{gpu}"))?;
        let pxb: Vec<&str> = (0..endpoints.len())
            .filter(|&n| endpoints[n]["label"].as_str().unwrap().starts_with("NIC") && matrix[g][n] == "PXB")
            .map(|n| endpoints[n]["id"].as_str().unwrap())
            .collect();
        same(&format!("the compute port of GPU{gpu}"), pxb, vec![rdma])?;
        same(&format!("the CPU of GPU{gpu}"), endpoints[g]["numa_affinity"].to_string(), cpu.to_owned())?;
    }
    Ok(())
}

/// The Neuron runtime's logical cores (LNC): per device, and on the whole instance, the
/// NeuronCores a sample presents to Ray and NEURON_RT_VISIBLE_CORES at the default setting.
fn neuron_logical_cores(sample: &str, text: &str) -> Result<(), String> {
    let m = discover_json(sample)?;
    let devices: Vec<&serde_json::Value> =
        m["accelerators"].as_array().unwrap().iter().filter(|a| a["plugin"] == "neuron").collect();
    let per_device = stated(text, "Logical NeuronCores")?;
    let physical = stated(text, "physical NeuronCores")?;
    for d in &devices {
        same(&format!("logical cores of {}", d["id"]), d["vocabulary"]["ray_units"].as_f64(), Some(per_device as f64))?;
    }
    let total: f64 = devices.iter().map(|d| d["vocabulary"]["ray_units"].as_f64().unwrap_or(0.0)).sum();
    same("NeuronCores the instance presents", total as u64, stated(text, "available NeuronCores")?)?;
    same(
        "physical cores",
        m["attributes"]["aws.neuron_physical_cores"].as_str().map(str::to_owned),
        Some((physical * devices.len() as u64).to_string()),
    )?;
    // The last device's cores end at the instance's count: logical ids, not physical ones.
    let last = devices
        .iter()
        .filter_map(|d| d["vocabulary"]["isolation"][0].as_str())
        .max_by_key(|r| r.split('-').next().and_then(|a| a.parse::<u64>().ok()).unwrap_or(0));
    same(
        "the last NeuronCore id",
        last.and_then(|r| r.split('-').nth(1)).map(str::to_owned),
        Some((total as u64 - 1).to_string()),
    )?;
    Ok(())
}

/// A number written as a word or digits (`Four`, `eight`, `2x`).
fn number(word: &str) -> Option<u64> {
    let w = word.trim_end_matches('x').to_ascii_lowercase();
    let words =
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"];
    words.iter().position(|n| *n == w).map(|n| n as u64).or_else(|| w.parse().ok())
}

/// The number just before `what` on the line that says it (`Four NVIDIA NVSwitch`).
fn stated(text: &str, what: &str) -> Result<u64, String> {
    let line = text.lines().filter(|l| !l.starts_with('#')).find(|l| l.contains(what)).ok_or(format!("no {what:?}"))?;
    let before = &line[..line.find(what).unwrap()];
    let words: Vec<&str> = before.split_whitespace().collect();
    words.iter().rev().find_map(|w| number(w)).ok_or(format!("no count before {what:?}"))
}

/// A DGX's published specification: GPU count and memory, NVSwitch chips, single- and dual-port
/// ConnectX-7 (every port an RDMA device; a dual-port card one PCI device with two functions).
fn dgx_system_spec(sample: &str, text: &str) -> Result<(), String> {
    let m = discover_json(sample)?;
    let gpus: Vec<&serde_json::Value> =
        m["accelerators"].as_array().unwrap().iter().filter(|a| a["vocabulary"]["kind"] == "gpu").collect();
    same("GPUs", gpus.len() as u64, stated(text, "NVIDIA Hopper GPUs")?)?;
    let total: u64 = gpus.iter().map(|a| a["memory_bytes"].as_u64().unwrap_or(0)).sum::<u64>() >> 30;
    let stated_gb = stated(text, "GB total GPU memory for H100").or_else(|_| {
        let line = text.lines().find(|l| l.contains("GB total GPU memory for H100")).ok_or("no GPU memory")?;
        line.split_whitespace().next().and_then(|w| w.parse().ok()).ok_or("no GPU memory".to_owned())
    })?;
    // 8x 80 GB read as binary GiB, as nvidia-smi shows a little less of each: within 10%.
    if total * 10 < stated_gb * 9 || total > stated_gb {
        return Err(format!("GPU memory: accel {total} GiB, artifact {stated_gb} GB"));
    }
    let pci = m["pci"].as_array().unwrap();
    let switches = pci.iter().filter(|n| n["vendor"] == "0x10de" && n["class"] == "0x068000").count() as u64;
    same("NVSwitch chips", switches, stated(text, "NVIDIA NVSwitch")?)?;
    let nics = m["nics"].as_array().unwrap();
    let single = stated(text, "single-port NVIDIA ConnectX-7")?;
    let dual = stated(text, "dual-port QSFP112 NVIDIA ConnectX-7")?;
    same("RDMA ports", nics.iter().filter(|n| n["rdma"] == true).count() as u64, single + 2 * dual)?;
    let mut devices: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for n in nics {
        let pci = n["pci"].as_str().unwrap_or("");
        *devices.entry(pci.rsplit_once('.').map_or(pci, |(d, _)| d).to_owned()).or_default() += 1;
    }
    same("dual-port cards", devices.values().filter(|&&c| c == 2).count() as u64, dual)?;
    same("single-port cards", devices.values().filter(|&&c| c == 1).count() as u64, single)?;
    Ok(())
}

/// The `accel discover --json` document of a sample.
fn discover_json(sample: &str) -> Result<serde_json::Value, String> {
    let out =
        Command::new(env!("CARGO_BIN_EXE_accel")).args(["discover", "--sample", sample, "--json"]).output().unwrap();
    if !out.status.success() {
        return Err(format!("accel discover failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// The number in the first column of a `| name | value | ... |` table row.
fn table_value(text: &str, name: &str) -> Result<u64, String> {
    let row = text.lines().find(|l| l.starts_with(&format!("| {name} |"))).ok_or(format!("no row {name:?}"))?;
    let cell = row.split('|').nth(2).ok_or(format!("row {name:?} has no value"))?;
    cell.trim().replace(',', "").parse().map_err(|e| format!("row {name:?}: {e}"))
}

/// A Neuron instance against its specification: device count, device memory in all, host CPUs,
/// and the 2D torus as its degree (as many devices as the stated shape, every one with four
/// NeuronLink neighbours; the degree does not tell a torus from another 4-regular graph).
fn neuron_instance_spec(sample: &str, text: &str) -> Result<(), String> {
    let m = discover_json(sample)?;
    let devices: Vec<&serde_json::Value> =
        m["accelerators"].as_array().unwrap().iter().filter(|a| a["plugin"] == "neuron").collect();
    same("devices", devices.len() as u64, table_value(text, "# of Trainium2 chips")?)?;
    let memory: u64 = devices.iter().map(|a| a["memory_bytes"].as_u64().unwrap_or(0)).sum();
    same("device memory, GiB", memory >> 30, table_value(text, "Device Memory (GiB)")?)?;
    let cpus: u64 = m["numa_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["cpus"].as_str().unwrap_or("").split(','))
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1,
            None => 1,
        })
        .sum();
    same("CPUs", cpus, table_value(text, "vCPUs")?)?;
    let shape = text.split_once(", 2D Torus").ok_or("no 2D torus stated")?.0;
    let (x, y) = shape.rsplit_once(' ').map(|(_, s)| s).and_then(|s| s.split_once('x')).ok_or("no torus shape")?;
    let (x, y): (usize, usize) = (x.parse().map_err(|_| "bad shape")?, y.parse().map_err(|_| "bad shape")?);
    same("torus size", devices.len(), x * y)?;
    let mut degree = std::collections::BTreeMap::new();
    for l in m["links"].as_array().unwrap().iter().filter(|l| l["kind"] == "neuronlink") {
        *degree.entry(l["a"].as_str().unwrap()).or_insert(0) += 1;
        *degree.entry(l["b"].as_str().unwrap()).or_insert(0) += 1;
    }
    for d in &devices {
        same(
            &format!("NeuronLink neighbours of {}", d["id"]),
            degree.get(d["id"].as_str().unwrap()).copied(),
            Some(4),
        )?;
    }
    Ok(())
}
