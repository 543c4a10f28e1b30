//! Vendor vocabulary outside the plugins: words that name a vendor, its runtime, links,
//! products, PCI vendor ids, NIC vendors and clouds, found in code (comments and docstrings
//! left out) outside the family modules and the data files. Exceptions are (path, word) pairs,
//! each with its reason.

use std::path::PathBuf;

/// Words that name a vendor, a vendor's runtime, links or products, a PCI vendor id, a NIC
/// vendor or a cloud.
pub const WORDS: &[&str] = &[
    // Accelerator vendors, their runtimes and links.
    "nvidia",
    "nvml",
    "cuda",
    "nvlink",
    "nvswitch",
    "amd",
    "amdgpu",
    "rocm",
    "rsmi",
    "xgmi",
    "kfd",
    "tpu",
    "neuron",
    "neuroncore",
    "trainium",
    "inferentia",
    "gaudi",
    "habana",
    "habanalabs",
    "hlml",
    "groq",
    "ascend",
    "huawei",
    "mig",
    "intel",
    "xpu",
    // Products.
    "a100",
    "h100",
    "h200",
    "b200",
    "b300",
    "gb200",
    "gb300",
    "mi210",
    "mi250",
    "mi300",
    "mi300x",
    "mi325x",
    "mi355x",
    "v5e",
    "v5p",
    "v6e",
    "trn1",
    "trn2",
    "inf2",
    "hl225",
    // PCI vendor ids (NVIDIA, AMD/ATI, Intel, AWS, Habana, Huawei, Mellanox, Groq).
    "0x10de",
    "0x1002",
    "0x1022",
    "0x8086",
    "0x1d0f",
    "0x1da3",
    "0x19e5",
    "0x15b3",
    "0x1e52",
    // NIC vendors and drivers.
    "mlx5",
    "mellanox",
    "efa",
    "bnxt",
    "broadcom",
    // Clouds and their metadata services.
    "aws",
    "ec2",
    "imds",
    "gce",
    "gcp",
    "gke",
    "azure",
];

/// Whether `word` occurs in `lower` as a word: no letter or digit before it, no letter after it
/// (`h100` matches `h100_sxm` and `h100-80gb`, not `ah100`; `amd` matches `amd64`).
fn occurs(lower: &str, word: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = lower[at..].find(word) {
        let start = at + i;
        let end = start + word.len();
        let before = lower[..start].chars().next_back();
        let after = lower[end..].chars().next();
        if !before.is_some_and(|c| c.is_ascii_alphanumeric()) && !after.is_some_and(|c| c.is_ascii_alphabetic()) {
            out.push(start);
        }
        at = end;
    }
    out
}

/// Code lines of a file: comments and docstrings left out (Rust: `//` comments and the test
/// module; Python: `#` comments and triple-quoted strings).
fn code_lines(path: &str, text: &str, rust_code: impl Fn(&str) -> String) -> Vec<(usize, String)> {
    let python = path.ends_with(".py");
    let code = if python { text.to_owned() } else { rust_code(text) };
    let mut out = Vec::new();
    let mut in_docstring = false;
    for (n, line) in code.lines().enumerate() {
        let mut line = line.to_owned();
        if python {
            let quotes = line.matches("\"\"\"").count();
            if in_docstring || quotes > 0 {
                if quotes % 2 == 1 {
                    in_docstring = !in_docstring;
                }
                continue;
            }
            if let Some(i) = line.find('#') {
                line.truncate(i);
            }
        }
        out.push((n + 1, line));
    }
    out
}

/// (file, line, word) for every vendor word in code of `files` outside the family modules and
/// the `exceptions` ((path, word, reason): the word may appear in that file, or under that
/// directory when the path ends in `/`).
pub fn found(
    files: &[(PathBuf, String)],
    exceptions: &[(&str, &str, &str)],
    rust_code: impl Fn(&str) -> String + Copy,
) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        let p = path.to_string_lossy();
        if p.contains("/families/") {
            continue;
        }
        for (n, line) in code_lines(&p, text, rust_code) {
            let lower = line.to_ascii_lowercase();
            for word in WORDS {
                if occurs(&lower, word).is_empty() {
                    continue;
                }
                let allowed =
                    exceptions.iter().any(|(e, w, _)| w == word && (p == *e || (e.ends_with('/') && p.starts_with(e))));
                if !allowed {
                    out.push(format!("{p}:{n}: {word}"));
                }
            }
        }
    }
    out
}

/// The exceptions that match nothing in `files`: stale.
pub fn stale<'a>(
    files: &[(PathBuf, String)],
    exceptions: &'a [(&'a str, &'a str, &'a str)],
    rust_code: impl Fn(&str) -> String + Copy,
) -> Vec<&'a (&'a str, &'a str, &'a str)> {
    let hits = found(files, &[], rust_code);
    exceptions
        .iter()
        .filter(|(e, w, _)| {
            !hits.iter().any(|h| {
                let (file, word) = h.split_once(": ").map(|(f, w)| (f.rsplit_once(':').map_or(f, |x| x.0), w)).unwrap();
                word == *w && (file == *e || (e.ends_with('/') && file.starts_with(e)))
            })
        })
        .collect()
}
