//! The house rules, checked over the whole repository: no two source files import each other
//! (Rust modules and the Python package), every source file opens with a doc comment, and
//! `ARCHITECTURE.md` names only crates and files that exist and names every crate. Each rule's
//! checker is also run on a small broken input, to show that it can fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
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
// Import loops

/// The text of a Rust file without its `#[cfg(test)]` module (a test module's `use super::*`
/// is not an import of the file by itself) and without comments.
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

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The `crate::` paths a Rust file refers to, each as its segments (`crate::a::b::C` gives
/// `[a, b, C]`, `use crate::{a, b::c}` gives `[a]` and `[b, c]`).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    fn expand(prefix: &[String], rest: &str, out: &mut Vec<Vec<String>>) {
        let rest = rest.trim_start();
        if let Some(inner) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            let mut end = inner.len();
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = i;
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(prefix, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand(prefix, &inner[start..end], out);
            return;
        }
        let id = ident_at(rest);
        if id.is_empty() || id == "self" {
            if !prefix.is_empty() {
                out.push(prefix.to_vec());
            }
            return;
        }
        let mut path = prefix.to_vec();
        path.push(id.to_owned());
        match rest[id.len()..].strip_prefix("::") {
            Some(more) => expand(&path, more, out),
            None => out.push(path),
        }
    }
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find("crate::") {
        let start = at + i;
        let before = code[..start].chars().next_back();
        at = start + "crate::".len();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        expand(&[], &code[at..], &mut out);
    }
    out
}

/// A file's module path inside its crate: `src/a.rs` is `a`, `src/a/mod.rs` is `a`,
/// `src/a/b.rs` is `a::b`; the crate root is the empty path.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_owned());
    }
    parts
}

/// The module-to-module imports of one crate: (from, to) module paths, the root excluded (the
/// crate root is a face: it declares and re-exports, and every module may use its items).
/// An item re-exported by the root (`pub use m::Item`) counts as an import of `m`.
fn rust_imports(files: &[(Vec<String>, String)]) -> BTreeSet<(String, String)> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut reexports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some((_, root)) = files.iter().find(|(m, _)| m.is_empty()) {
        for line in root.lines() {
            let Some(rest) = line.trim().strip_prefix("pub use ") else { continue };
            let rest = rest.trim_end_matches(';');
            for path in crate_paths(&format!("crate::{rest}")) {
                if let Some(item) = path.last() {
                    reexports.insert(item.clone(), path[..path.len() - 1].to_vec());
                }
            }
        }
    }
    let mut edges = BTreeSet::new();
    for (from, text) in files.iter().filter(|(m, _)| !m.is_empty()) {
        for path in crate_paths(&rust_code(text)) {
            // The longest prefix that is a module; an item of the root resolves through its
            // re-export.
            let mut target: Vec<String> =
                (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains(p)).unwrap_or_default();
            if target.is_empty() {
                if let Some(m) = path.first().and_then(|item| reexports.get(item)) {
                    target =
                        (1..=m.len()).rev().map(|n| m[..n].to_vec()).find(|p| modules.contains(p)).unwrap_or_default();
                }
            }
            if !target.is_empty() && &target != from {
                edges.insert((from.join("::"), target.join("::")));
            }
        }
    }
    edges
}

/// The Python modules each module imports: `from . import x`, `from .x import y`,
/// `from ..x import y`, `import accel.x`, `from accel.x import y`. A module is named by its
/// dotted path (a package by its own name, not `__init__`); `files` holds (name, is a package,
/// text).
fn python_imports(files: &[(String, bool, String)]) -> BTreeSet<(String, String)> {
    let names: BTreeSet<&str> = files.iter().map(|(m, _, _)| m.as_str()).collect();
    let mut edges = BTreeSet::new();
    for (module, is_package, text) in files {
        let mut package: Vec<&str> = module.split('.').collect();
        if !is_package {
            package.pop();
        }
        for line in text.lines().map(str::trim) {
            let mut targets: Vec<String> = Vec::new();
            if let Some(rest) = line.strip_prefix("from ") {
                let Some((src, what)) = rest.split_once(" import ") else { continue };
                let dots = src.chars().take_while(|&c| c == '.').count();
                let full = if dots > 0 {
                    let mut full: Vec<&str> = package[..package.len().saturating_sub(dots - 1)].to_vec();
                    full.extend(src[dots..].split('.').filter(|s| !s.is_empty()));
                    full.join(".")
                } else {
                    src.to_owned()
                };
                if names.contains(full.as_str()) {
                    targets.push(full.clone());
                }
                for w in what.trim_matches(|c| c == '(' || c == ')').split(',') {
                    let w = w.split(" as ").next().unwrap_or("").trim();
                    let sub = format!("{full}.{w}");
                    if names.contains(sub.as_str()) {
                        targets.push(sub);
                    }
                }
            } else if let Some(rest) = line.strip_prefix("import ") {
                let m = rest.split(" as ").next().unwrap_or("").trim();
                if names.contains(m) {
                    targets.push(m.to_owned());
                }
            }
            for t in targets {
                // A module importing its own package, or a package its own module, is the
                // package's face at work, like a crate root.
                if t != *module && !module.starts_with(&format!("{t}.")) && !t.starts_with(&format!("{module}.")) {
                    edges.insert((module.clone(), t));
                }
            }
        }
    }
    edges
}

fn mutual(edges: &BTreeSet<(String, String)>) -> Vec<String> {
    edges
        .iter()
        .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect()
}

fn rust_files_of(src: &Path) -> Vec<(Vec<String>, String)> {
    let mut files = Vec::new();
    files_under(src, "rs", &mut files);
    files.iter().map(|f| (module_path(src, f), std::fs::read_to_string(f).unwrap())).collect()
}

fn python_files_of(pkg: &Path) -> Vec<(String, bool, String)> {
    let mut files = Vec::new();
    files_under(pkg, "py", &mut files);
    let parent = pkg.parent().unwrap();
    files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(parent).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            let is_package = parts.last().is_some_and(|p| p == "__init__");
            if is_package {
                parts.pop();
            }
            (parts.join("."), is_package, std::fs::read_to_string(f).unwrap())
        })
        .collect()
}

#[test]
fn no_two_files_import_each_other() {
    let root = repo();
    let mut loops = Vec::new();
    for (name, dir) in crates(&root) {
        let src = dir.join("src");
        for l in mutual(&rust_imports(&rust_files_of(&src))) {
            loops.push(format!("{name}: {l}"));
        }
    }
    for l in mutual(&python_imports(&python_files_of(&root.join("python/accel")))) {
        loops.push(format!("python: {l}"));
    }
    assert!(loops.is_empty(), "files that import each other:\n{}", loops.join("\n"));
}

#[test]
fn the_loop_check_finds_a_loop() {
    let files = vec![
        (Vec::new(), "mod a;\nmod b;\npub use b::Thing;\n".to_owned()),
        (vec!["a".to_owned()], "use crate::Thing;\n".to_owned()),
        (vec!["b".to_owned()], "use crate::{a::{self, X}, Other};\n".to_owned()),
        (vec!["c".to_owned()], "fn f() { crate::a::g() }\n#[cfg(test)]\nmod tests { use crate::d; }\n".to_owned()),
        (vec!["d".to_owned()], "// crate::c in a comment\n".to_owned()),
    ];
    let edges = rust_imports(&files);
    assert!(edges.contains(&("a".into(), "b".into())), "{edges:?}");
    assert!(edges.contains(&("c".into(), "a".into())), "{edges:?}");
    assert!(!edges.iter().any(|(from, _)| from == "d"), "{edges:?}");
    assert_eq!(mutual(&edges), vec!["a <-> b".to_owned()]);

    let py = vec![
        ("accel".to_owned(), true, "from . import x\n".to_owned()),
        ("accel.x".to_owned(), false, "from ._y import Y\n".to_owned()),
        ("accel._y".to_owned(), false, "if TYPE_CHECKING:\n    from .x import X\n".to_owned()),
        ("accel.ray".to_owned(), true, "from ._z import Z\n".to_owned()),
        ("accel.ray._z".to_owned(), false, "from .. import x\nimport accel._y\n".to_owned()),
    ];
    let edges = python_imports(&py);
    assert!(edges.contains(&("accel.ray._z".into(), "accel.x".into())), "{edges:?}");
    assert!(edges.contains(&("accel.ray._z".into(), "accel._y".into())), "{edges:?}");
    assert_eq!(mutual(&edges), vec!["accel._y <-> accel.x".to_owned()]);
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

/// What `ARCHITECTURE.md` gets wrong: a named crate (`accel-x`) or source path (a backticked
/// name ending in `.rs` or `.py`, or a `crates/...` path) that does not exist, and a crate of
/// the workspace it never names.
fn architecture_errors(doc: &str, root: &Path, crates: &[(String, PathBuf)]) -> Vec<String> {
    let mut errors = Vec::new();
    let names: BTreeSet<&str> = crates.iter().map(|(n, _)| n.as_str()).collect();
    let ticked: Vec<&str> = doc.split('`').skip(1).step_by(2).collect();
    for t in &ticked {
        let t = t.trim();
        if t.starts_with("accel-") && t.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !names.contains(t) {
            errors.push(format!("names crate `{t}`, which is not in the workspace"));
        }
        let is_path = t.ends_with(".rs") || t.ends_with(".py") || t.starts_with("crates/") || t.starts_with("python/");
        if is_path && !t.contains(char::is_whitespace) && !t.contains('*') && !t.contains('<') && !path_exists(root, t)
        {
            errors.push(format!("names `{t}`, which does not exist"));
        }
    }
    for n in &names {
        if !ticked.iter().any(|t| t.trim() == *n) {
            errors.push(format!("never names crate `{n}`"));
        }
    }
    errors
}

/// A path as the document writes it: from the repository root, or a file name (or tail of a
/// path) found somewhere under `crates/`, `python/` or `scripts/`.
fn path_exists(root: &Path, t: &str) -> bool {
    let t = t.trim_end_matches('/');
    if root.join(t).exists() {
        return true;
    }
    let mut all = Vec::new();
    for (dir, ext) in [("crates", "rs"), ("python", "py"), ("scripts", "py")] {
        files_under(&root.join(dir), ext, &mut all);
    }
    all.iter().any(|p| p.to_string_lossy().ends_with(&format!("/{t}")))
        || all.iter().any(|p| p.parent().is_some_and(|d| d.to_string_lossy().ends_with(&format!("/{t}"))))
}

#[test]
fn architecture_md_is_true() {
    let root = repo();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let crates = crates(&root);
    let errors = architecture_errors(&doc, &root, &crates);
    assert!(errors.is_empty(), "ARCHITECTURE.md:\n{}", errors.join("\n"));
    // And the check can fail: a made-up crate and file, and a document that forgets a crate.
    let broken = format!("{doc}\n`accel-nonesuch` lives in `crates/nonesuch/src/gone.rs` and `vanished.py`.\n");
    let errors = architecture_errors(&broken, &root, &crates);
    assert_eq!(errors.len(), 3, "{errors:?}");
    let forgetful = doc.replace(&format!("`{}`", crates[0].0), "it");
    assert!(architecture_errors(&forgetful, &root, &crates).iter().any(|e| e.contains("never names")));
}

// ---------------------------------------------------------------------------------------------
// Vendor vocabulary

/// Words that name a vendor, a vendor's runtime or its links.
const VENDOR_WORDS: &[&str] = &[
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
];

/// Where vendor words may appear outside the plugin modules (`crates/discover/src/families/`)
/// and the data files (SKU files, captures), and why. Keep it short: a new entry needs a reason
/// that no plugin hook could serve.
const VENDOR_EXCEPTIONS: &[(&str, &str)] = &[
    // The transport's device paths are named by their mechanism (README, "Direct tensor transport"):
    // CUDA IPC is a path (a backend of the transport), not an accelerator family.
    ("crates/transport/src/", "the CUDA IPC path"),
    ("crates/py/src/transport.rs", "the CUDA IPC path"),
    ("python/accel/_buffers.py", "device arrays through DLPack and __cuda_array_interface__"),
    // Cargo feature names.
    ("crates/discover/src/lib.rs", "the `nvml` feature in the build's feature list"),
    // topograph's label namespace is that tool's name for its labels (network.topology.nvidia.com).
    ("crates/export/src/nfd.rs", "topograph's label namespace"),
    ("crates/plan/src/fabric.rs", "topograph's tier label keys"),
    // The maturity page's command names the example external plugin.
    ("crates/discover/src/conformance.rs", "the maturity page's command"),
];

/// (file, line, word) for every vendor word in code (comments and docstrings left out) of
/// `files` outside the exceptions.
fn vendor_words(files: &[(PathBuf, String)], exceptions: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        let p = path.to_string_lossy();
        if p.contains("/families/") || exceptions.iter().any(|(e, _)| p.starts_with(e)) {
            continue;
        }
        let python = p.ends_with(".py");
        let mut in_docstring = false;
        let code = if python { text.clone() } else { rust_code(text) };
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
            let lower = line.to_ascii_lowercase();
            for word in VENDOR_WORDS {
                let mut at = 0;
                while let Some(i) = lower[at..].find(word) {
                    let start = at + i;
                    let end = start + word.len();
                    let before = lower[..start].chars().next_back();
                    let after = lower[end..].chars().next();
                    if !before.is_some_and(|c| c.is_ascii_alphanumeric())
                        && !after.is_some_and(|c| c.is_ascii_alphabetic())
                    {
                        out.push(format!("{p}:{}: {word}", n + 1));
                    }
                    at = end;
                }
            }
        }
    }
    out
}

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
    let found = vendor_words(&product_sources(&root), VENDOR_EXCEPTIONS);
    assert!(
        found.is_empty(),
        "vendor words outside the plugin modules (move the knowledge into the family's module, or \
         add a commented exception in house.rs):\n{}",
        found.join("\n")
    );
    // Every exception is still needed: an exception that matches nothing is stale.
    for (prefix, why) in VENDOR_EXCEPTIONS {
        let files: Vec<(PathBuf, String)> =
            product_sources(&root).into_iter().filter(|(p, _)| p.to_string_lossy().starts_with(prefix)).collect();
        assert!(!vendor_words(&files, &[]).is_empty(), "stale exception {prefix} ({why})");
    }
    // And the check can fail: a core file that names a vendor, in code but not in a comment.
    let broken = vec![
        (
            PathBuf::from("crates/plan/src/x.rs"),
            "//! About NVIDIA.\nfn f() { let v = \"nvidia\"; } // amd\n".to_owned(),
        ),
        (PathBuf::from("python/accel/y.py"), "\"\"\"About TPUs.\"\"\"\nX = 'tpu'  # gaudi\n".to_owned()),
        (PathBuf::from("crates/discover/src/families/z.rs"), "const A: &str = \"amd\";\n".to_owned()),
        (PathBuf::from("crates/plan/src/w.rs"), "fn amdahl() { let migrate = 1; }\n".to_owned()),
    ];
    assert_eq!(
        vendor_words(&broken, &[]),
        vec!["crates/plan/src/x.rs:2: nvidia".to_owned(), "python/accel/y.py:2: tpu".to_owned()]
    );
}
