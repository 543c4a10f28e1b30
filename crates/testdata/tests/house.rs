//! The house rules, checked over the whole repository: no import cycle of any length between
//! files (Rust modules read with `syn`, the Python package with Python's `ast`), every source
//! file opens with a doc comment, `ARCHITECTURE.md` is true (the crates and files it names exist
//! where it says, it names every crate and product file, its dependency table is `cargo
//! metadata`'s), and vendor words (vendors, products, PCI ids, NIC vendors, clouds) appear only
//! in the family modules and data files. Each rule's checker is also run on a broken input, to
//! show that it can fail.

#[path = "house/architecture.rs"]
mod architecture;
#[path = "house/graph.rs"]
mod graph;
#[path = "house/python.rs"]
mod python;
#[path = "house/rust.rs"]
mod rust;
#[path = "house/vendor.rs"]
mod vendor;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

pub(crate) fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files_under(&p, ext, out);
        } else if p.extension().is_some_and(|e| e == ext) {
            out.push(p);
        }
    }
}

/// Every crate directory of the workspace, with its package name.
fn crates(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let toml = e.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&toml) else { continue };
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("name = \"").and_then(|r| r.strip_suffix('"')))
            .expect("a package name")
            .to_owned();
        out.push((name, e.path()));
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// Import cycles

/// A Rust file's text without its `//` comments and its unit-test module (for the word checks).
fn rust_code(text: &str) -> String {
    let cut = text.find("#[cfg(test)]\nmod tests").map_or(text, |i| &text[..i]);
    cut.lines().map(strip_line_comment).collect::<Vec<_>>().join("\n")
}

/// A line without its `//` comment (a `//` inside a string literal is kept).
fn strip_line_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

/// Every `.rs` file under a crate's `src/`, as (path below `src/`, text).
fn rust_files_of(src: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    files_under(src, "rs", &mut files);
    files
        .iter()
        .map(|f| (f.strip_prefix(src).unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(f).unwrap()))
        .collect()
}

/// The cycles between the files of every crate and of the Python package, of any length.
fn all_cycles(root: &Path) -> Vec<String> {
    let mut loops = Vec::new();
    for (name, dir) in crates(root) {
        let edges = rust::edges(&rust_files_of(&dir.join("src"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        loops.extend(graph::cycles(&edges).into_iter().map(|l| format!("{name}: {l}")));
    }
    let py = python::edges(&python::read(root, &root.join("python/accel")));
    loops.extend(graph::cycles(&py).into_iter().map(|l| format!("python: {l}")));
    loops
}

#[test]
fn no_files_import_each_other_in_a_cycle() {
    let loops = all_cycles(&repo());
    assert!(loops.is_empty(), "import cycles between files:\n{}", loops.join("\n"));
}

/// Whether every step of `path` (a loop, first = last) is an edge.
fn has_loop(edges: &BTreeSet<(String, String)>, path: &[&str]) -> bool {
    path.windows(2).all(|w| edges.contains(&(w[0].to_owned(), w[1].to_owned())))
}

#[test]
fn the_cycle_check_finds_the_cycles_of_the_tree_before_issue_38() {
    // Import skeletons of crates/discover/src at 9bf77bf (README.md beside them); the modules
    // lib.rs declares that are not there are empty.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/house-before-38/src");
    let mut files = rust_files_of(&src);
    let lib = files.iter().find(|(p, _)| p == "lib.rs").map(|(_, t)| t.clone()).unwrap();
    for line in lib.lines() {
        let Some(m) = line.trim_start_matches("pub ").strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) else {
            continue;
        };
        if !files.iter().any(|(p, _)| p == &format!("{m}.rs")) {
            files.push((format!("{m}.rs"), "//! Empty.\n".to_owned()));
        }
    }
    let edges = rust::edges(&files).unwrap();
    let (nv, metrics, nvml, live) =
        ("families::nvidia", "families::nvidia::metrics", "families::nvidia::nvml", "families::nvidia::nvml_live");
    assert!(has_loop(&edges, &[nv, metrics, nv]), "{edges:?}");
    assert!(has_loop(&edges, &["exec", "fingerprint", "assemble", "exec"]), "{edges:?}");
    assert!(has_loop(&edges, &[nv, live, nvml, metrics, nv]), "{edges:?}");
    let found: Vec<Vec<String>> = graph::components(&edges).into_iter().map(|c| c.into_iter().collect()).collect();
    assert_eq!(
        found,
        vec![
            vec!["assemble".to_owned(), "exec".into(), "fingerprint".into()],
            vec![nv.into(), metrics.into(), nvml.into(), live.into()]
        ],
    );
    assert_eq!(graph::cycles(&edges).len(), 2);
}

#[test]
fn the_rust_reader_sees_every_kind_of_path() {
    let file = |p: &str, t: &str| (p.to_owned(), t.to_owned());
    let files = vec![
        file("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\npub use b::Thing;\npub fn root_logic() { a::f(); }\n"),
        // A root item through its re-export, and `super::` from a child module.
        file("a/mod.rs", "mod inner;\nuse crate::Thing;\npub fn f() {}\n"),
        file("a/inner.rs", "fn g() { super::super::c::h(); }\n"),
        // Groups, self and renames; a `use` inside a function; a test module left out.
        file("b.rs", "use crate::{a::{self, f as ff}, d};\npub struct Thing;\nfn x() { use crate::e::Y; }\n#[cfg(test)]\nmod tests { use crate::c; }\n"),
        // A path in a macro's input; `$crate` and comments are not paths.
        file("c.rs", "pub fn h() { format!(\"{}\", crate::root_logic()); }\nmacro_rules! m { () => { $crate::d::z() } }\n// crate::e\n"),
        file("d.rs", "pub fn z() {}\n"),
        file("e.rs", "pub struct Y;\n"),
    ];
    let edges = rust::edges(&files).unwrap();
    let want: BTreeSet<(String, String)> =
        [("<root>", "a"), ("a", "b"), ("a::inner", "c"), ("b", "a"), ("b", "d"), ("b", "e"), ("c", "<root>")]
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect();
    assert_eq!(edges, want);
    // a -> b -> a, and root -> a -> inner? no: a::inner -> c -> root -> a (a 4-file loop).
    assert_eq!(graph::components(&edges).len(), 1);
    assert!(has_loop(&edges, &["a", "b", "a"]));
    assert!(rust::edges(&[file("lib.rs", "fn broken( {")]).is_err());
}

#[test]
fn the_python_reader_sees_every_kind_of_import() {
    let dir = accel_testdata::TempDir::new("house-python");
    let pkg = dir.join("pkg");
    let write = |p: &str, t: &str| {
        let path = pkg.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, t).unwrap();
    };
    write("__init__.py", "from .a import A\nfrom . import sub\ndef helper():\n    from . import b\n");
    write("a.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nA = 1\n");
    write("b.py", "def f():\n    from .sub import c\n");
    write("sub/__init__.py", "");
    write("sub/c.py", "from .. import (\n    helper,\n    a,\n)\nimport pkg.b\n");
    let modules = python::read(&repo(), &pkg);
    let edges = python::edges(&modules);
    let want: BTreeSet<(String, String)> = [
        ("pkg", "pkg.b"),
        ("pkg.a", "pkg.b"),
        ("pkg.b", "pkg.sub.c"),
        ("pkg.sub.c", "pkg"),
        ("pkg.sub.c", "pkg.a"),
        ("pkg.sub.c", "pkg.b"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(edges, want);
    // The package's own logic is in the loop (through `helper`), and pkg.a with it: pkg.a ->
    // pkg.b -> pkg.sub.c -> pkg.a.
    assert_eq!(
        graph::cycles(&edges),
        vec!["pkg -> pkg.b -> pkg.sub.c -> pkg (and in the same knot: pkg.a)".to_owned()]
    );
    assert!(has_loop(&edges, &["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]));
}

// ---------------------------------------------------------------------------------------------
// Doc comments

/// Source files that do not open with a doc comment (`//!` for Rust, a docstring for Python).
fn undocumented(files: &[(PathBuf, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(path, text)| {
            let first = text.lines().find(|l| !l.trim().is_empty() && !l.starts_with("#!")).unwrap_or("");
            let first = first.trim_start();
            if path.extension().is_some_and(|e| e == "py") {
                !(first.starts_with("\"\"\"") || first.starts_with("r\"\"\"") || first.starts_with("'''"))
            } else {
                !first.starts_with("//!")
            }
        })
        .map(|(p, _)| p.display().to_string())
        .collect()
}

fn source_files(root: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for (_, dir) in crates(root) {
        for sub in ["src", "tests", "benches", "examples"] {
            files_under(&dir.join(sub), "rs", &mut files);
        }
        let build = dir.join("build.rs");
        if build.is_file() {
            files.push(build);
        }
    }
    files_under(&root.join("fuzz/fuzz_targets"), "rs", &mut files);
    files_under(&root.join("python"), "py", &mut files);
    files_under(&root.join("scripts"), "py", &mut files);
    files_under(&root.join("examples"), "py", &mut files);
    files
        .into_iter()
        .filter(|p| !p.components().any(|c| c.as_os_str() == "__pycache__"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            (p.strip_prefix(root).unwrap_or(&p).to_path_buf(), text)
        })
        .collect()
}

#[test]
fn every_source_file_opens_with_a_doc_comment() {
    let root = repo();
    let files = source_files(&root);
    assert!(files.len() > 100, "found only {} source files", files.len());
    let missing = undocumented(&files);
    assert!(missing.is_empty(), "files without an opening doc comment:\n{}", missing.join("\n"));
    // And the check can fail.
    let broken = vec![
        (PathBuf::from("a.rs"), "use std::io;\n".to_owned()),
        (PathBuf::from("b.py"), "import os\n".to_owned()),
        (PathBuf::from("c.rs"), "//! Fine.\n".to_owned()),
        (PathBuf::from("d.py"), "#!/usr/bin/env python3\n\"\"\"Fine.\"\"\"\n".to_owned()),
    ];
    assert_eq!(undocumented(&broken), vec!["a.rs".to_owned(), "b.py".to_owned()]);
}

// ---------------------------------------------------------------------------------------------
// ARCHITECTURE.md

/// The product's source files, from the root: every crate's `src/` and `build.rs`, and the
/// Python package.
fn product_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for (_, dir) in crates(root) {
        files_under(&dir.join("src"), "rs", &mut files);
        if dir.join("build.rs").is_file() {
            files.push(dir.join("build.rs"));
        }
    }
    files_under(&root.join("python/accel"), "py", &mut files);
    files
        .into_iter()
        .filter(|p| !p.components().any(|c| c.as_os_str() == "__pycache__"))
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect()
}

fn metadata(root: &Path) -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root)
        .output()
        .expect("running cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn architecture_md_is_true() {
    let root = repo();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let crates = crates(&root);
    let files = product_files(&root);
    assert!(files.len() > 100, "found only {} product files", files.len());
    let mut errors = architecture::name_errors(&doc, &root, &crates, &files);
    let actual = architecture::from_metadata(&metadata(&root));
    errors.extend(architecture::dependency_errors(&architecture::table(&doc), &actual));
    assert!(errors.is_empty(), "ARCHITECTURE.md:\n{}", errors.join("\n"));
}

#[test]
fn the_architecture_checks_fail_on_a_false_document() {
    let root = repo();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let crates = crates(&root);
    let files = product_files(&root);
    // A made-up crate and file, a file named under the wrong entry, a crate never named.
    let broken = format!(
        "{doc}\n`accel-nonesuch` lives in `crates/nonesuch/src/gone.rs` and `vanished.py`.\n\
         - **`crates/reshard`** holds `planner.rs`.\n"
    );
    let errors = architecture::name_errors(&broken, &root, &crates, &files);
    assert!(errors.iter().any(|e| e.contains("`accel-nonesuch`")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("`crates/nonesuch/src/gone.rs`")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("`vanished.py`")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("`crates/reshard` names `planner.rs`")), "{errors:?}");
    let forgetful = doc.replace(&format!("`{}`", crates[0].0), "it");
    assert!(architecture::name_errors(&forgetful, &root, &crates, &files).iter().any(|e| e.contains("never names")));
    // A product file no entry names.
    let extra = vec![PathBuf::from("crates/plan/src/unmentioned.rs")];
    let errors = architecture::name_errors(&doc, &root, &crates, &extra);
    assert_eq!(errors, vec!["no code-map entry names `crates/plan/src/unmentioned.rs`".to_owned()]);
    // A dependency claim that cargo metadata contradicts, a row missing, a row too many.
    let actual = architecture::from_metadata(&metadata(&root));
    let mut claimed = architecture::table(&doc);
    claimed.get_mut("accel-plan").unwrap().0.push("accel-discover".into());
    claimed.remove("accel-model");
    claimed.insert("accel-nonesuch".into(), Default::default());
    let errors = architecture::dependency_errors(&claimed, &actual);
    assert_eq!(errors.len(), 3, "{errors:?}");
}

// ---------------------------------------------------------------------------------------------
// Vendor vocabulary

/// Where vendor words may appear outside the plugin modules (`crates/discover/src/families/`)
/// and the data files (SKU files, captures), as (path, word, why); a path ending in `/` covers
/// a directory. Keep it short: a new entry needs a reason that no plugin hook could serve.
const VENDOR_EXCEPTIONS: &[(&str, &str, &str)] = &[
    // The transport's device paths are named by their mechanism (README, "Direct tensor
    // transport"): CUDA IPC is a path (a backend of the transport), not an accelerator family.
    ("crates/transport/src/", "cuda", "the CUDA IPC path"),
    ("crates/py/src/refs.rs", "cuda", "the CUDA IPC path of a reference's route"),
    ("python/accel/_buffers.py", "cuda", "route(): whether the CUDA IPC path works here"),
    // The weight sync's device path (issue 36): DLPack's device types by their names, the CUDA
    // driver's copies and IPC handles, and each piece's route by its mechanism.
    ("crates/py/src/device.rs", "cuda", "the CUDA IPC path of a piece's route"),
    ("python/accel/_device.py", "cuda", "the CUDA driver's copies and IPC handles"),
    ("python/accel/_device.py", "rocm", "DLPack's device type names (dlpack.h)"),
    ("python/accel/weights.py", "cuda", "the CUDA IPC path of a buffer packed on a GPU"),
    ("python/accel/ray/_device_transport.py", "cuda", "the CUDA IPC path of Ray's RDT transport"),
    // Cargo feature names.
    ("crates/discover/src/lib.rs", "nvml", "the `nvml` feature in the build's feature list"),
    // topograph's label namespace is that tool's name for its labels (network.topology.nvidia.com).
    ("crates/export/src/nfd.rs", "nvidia", "topograph's label namespace"),
    ("crates/plan/src/fabric.rs", "nvidia", "topograph's tier label keys"),
    // The maturity page's command names the example external plugin.
    ("crates/discover/src/conformance.rs", "ascend", "the maturity page's command"),
    // The generic PCI plugin (a plugin, outside families/ because it runs after all of them)
    // skips display-only functions of BMC and emulated-display vendors.
    ("crates/discover/src/generic.rs", "0x8086", "display-only vendors: integrated graphics"),
    ("crates/discover/src/generic.rs", "0x1d0f", "display-only vendors: EC2's emulated VGA"),
    // The cloud metadata endpoints and their attribute namespace: they move into the platform
    // family when discovery is cut into its crates (issue 38, item 5).
    ("crates/discover/src/host.rs", "gce", "the metadata endpoints (to the platform family)"),
    ("crates/discover/src/host.rs", "imds", "the metadata endpoints (to the platform family)"),
    ("crates/discover/src/source.rs", "gce", "the metadata endpoints (to the platform family)"),
    ("crates/discover/src/source.rs", "imds", "the metadata endpoints (to the platform family)"),
    ("crates/discover/src/fingerprint.rs", "gce", "the endpoint variables on the allow-list"),
    ("crates/discover/src/fingerprint.rs", "imds", "the endpoint variables on the allow-list"),
    ("crates/cli/src/topo.rs", "gce", "the platform plugin's metadata attributes, not shown"),
    // Sample machines by name: examples in --help, the planner benchmark's cluster mix.
    ("crates/cli/src/agent.rs", "gb200", "a sample in --help"),
    ("crates/cli/src/cluster.rs", "h100", "a sample in --help"),
    ("crates/cli/src/cluster.rs", "mi300x", "a sample in --help"),
    ("crates/cli/src/export.rs", "gb200", "a sample in --help"),
    ("crates/cli/src/export.rs", "h100", "a sample in --help"),
    ("crates/cli/src/plan.rs", "h100", "the benchmark's cluster mix of samples"),
    ("crates/cli/src/plan.rs", "b200", "the benchmark's cluster mix of samples"),
    ("crates/cli/src/plan.rs", "gb200", "the benchmark's cluster mix of samples"),
    ("crates/cli/src/plan.rs", "mi300x", "the benchmark's cluster mix of samples"),
    ("crates/cli/src/plan.rs", "mi210", "the benchmark's cluster mix of samples"),
    ("crates/plan-quality/src/clusters.rs", "h100", "the quality benchmark's clusters of samples"),
    ("crates/plan-quality/src/clusters.rs", "b200", "the quality benchmark's clusters of samples"),
    ("crates/plan-quality/src/clusters.rs", "gb200", "the quality benchmark's clusters of samples"),
    ("crates/plan-quality/src/clusters.rs", "mi300x", "the quality benchmark's clusters of samples"),
    ("crates/plan-quality/src/clusters.rs", "mi210", "the quality benchmark's clusters of samples"),
];

/// The non-test source: every crate's `src/` and the Python package.
fn product_sources(root: &Path) -> Vec<(PathBuf, String)> {
    source_files(root)
        .into_iter()
        .filter(|(p, _)| {
            let p = p.to_string_lossy();
            (p.starts_with("crates/") && p.contains("/src/")) || p.starts_with("python/accel/")
        })
        .collect()
}

#[test]
fn vendor_vocabulary_lives_in_the_plugins() {
    let root = repo();
    let files = product_sources(&root);
    let found = vendor::found(&files, VENDOR_EXCEPTIONS, rust_code);
    assert!(
        found.is_empty(),
        "vendor words outside the plugin modules (move the knowledge into the family's module, or \
         add a commented (path, word) exception in house.rs):\n{}",
        found.join("\n")
    );
    // Every exception is still needed: an exception that matches nothing is stale.
    let stale = vendor::stale(&files, VENDOR_EXCEPTIONS, rust_code);
    assert!(stale.is_empty(), "stale exceptions: {stale:?}");
}

#[test]
fn the_vendor_check_fails_on_vendor_words_in_core_code() {
    // A core file that names a vendor, a product, a PCI id, a NIC and a cloud in code (not in a
    // comment or a docstring); a family module may; look-alike words are not vendor words.
    let broken = vec![
        (
            PathBuf::from("crates/plan/src/x.rs"),
            "//! About NVIDIA.\nfn f() { let v = \"nvidia\"; } // amd\nconst P: u16 = 0x10DE;\nfn g() { pick(\"H100-80GB\", \"mlx5_0\", \"imds\"); }\n".to_owned(),
        ),
        (PathBuf::from("python/accel/y.py"), "\"\"\"About TPUs.\"\"\"\nX = 'tpu'  # gaudi\nCLOUD = 'gce'\n".to_owned()),
        (PathBuf::from("crates/discover/src/families/z.rs"), "const A: &str = \"amd\";\n".to_owned()),
        (PathBuf::from("crates/plan/src/w.rs"), "fn amdahl() { let migrate = 1; let default = 2; let ah100 = 3; }\n".to_owned()),
    ];
    let hits = vendor::found(&broken, &[], rust_code);
    assert_eq!(
        hits,
        [
            "crates/plan/src/x.rs:2: nvidia",
            "crates/plan/src/x.rs:3: 0x10de",
            "crates/plan/src/x.rs:4: h100",
            "crates/plan/src/x.rs:4: mlx5",
            "crates/plan/src/x.rs:4: imds",
            "python/accel/y.py:2: tpu",
            "python/accel/y.py:3: gce",
        ]
    );
    // An exception is a (path, word) pair: it lets that word in that file, nothing else.
    let hits = vendor::found(&broken, &[("crates/plan/src/x.rs", "h100", "test")], rust_code);
    assert!(!hits.iter().any(|h| h.ends_with("h100")) && hits.iter().any(|h| h.ends_with("mlx5")), "{hits:?}");
    assert_eq!(vendor::stale(&broken, &[("crates/plan/src/w.rs", "amd", "test")], rust_code).len(), 1);
}
