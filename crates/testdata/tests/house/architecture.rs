//! What `ARCHITECTURE.md` claims, checked: the crates and files it names exist (a file named in
//! a code-map entry exists under that entry's path), its diagram and code map name every crate
//! and every product source file, and its dependency table is what `cargo metadata` says.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The backticked spans of a text.
fn ticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).map(str::trim).collect()
}

/// The code map's entries: each top-level bullet that opens with a bold path (`- **`crates/x`**`),
/// as (path, text of the bullet and what is nested under it).
pub fn entries(doc: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in doc.lines() {
        let path = line.strip_prefix("- **`").and_then(|rest| rest.split('`').next()).filter(|p| {
            ["crates/", "python/", "scripts/", "examples/", "test_data/"].iter().any(|root| p.starts_with(root))
        });
        if let Some(path) = path {
            out.extend(current.take());
            current = Some((path.trim_end_matches('/').to_owned(), format!("{line}\n")));
        } else if line.starts_with("- ") || line.starts_with('#') {
            out.extend(current.take());
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    out.extend(current);
    out
}

/// Whether `name` (a file name, a tail of a path, or a directory ending in `/`) is under `dir`.
fn under(root: &Path, dir: &Path, name: &str, files: &[PathBuf]) -> bool {
    let name = name.trim_end_matches('/');
    root.join(dir).join(name).exists()
        || files.iter().any(|f| {
            f.starts_with(dir)
                && (f.to_string_lossy().ends_with(&format!("/{name}"))
                    || f.parent().is_some_and(|p| p.to_string_lossy().ends_with(&format!("/{name}"))))
        })
}

/// A backticked span that names a source file or a path in the tree.
fn names_a_path(t: &str) -> bool {
    let shaped = t.ends_with(".rs") || t.ends_with(".py") || t.starts_with("crates/") || t.starts_with("python/");
    shaped && !t.contains(char::is_whitespace) && !t.contains('*') && !t.contains('<')
}

/// What the document gets wrong about names: a crate (`accel-x`) or path that does not exist
/// (a bare file name in a code-map entry must exist under that entry's path; elsewhere,
/// anywhere under `crates/`, `python/` or `scripts/`), a crate the diagram or the document never
/// names, and a product source file (`files`: paths from the root) no entry names.
pub fn name_errors(doc: &str, root: &Path, crates: &[(String, PathBuf)], files: &[PathBuf]) -> Vec<String> {
    let mut errors = Vec::new();
    let names: BTreeSet<&str> = crates.iter().map(|(n, _)| n.as_str()).collect();
    let all_ticked = ticked(doc);
    let mut tree = Vec::new();
    for dir in ["crates", "python", "scripts"] {
        crate::files_under(&root.join(dir), "rs", &mut tree);
        crate::files_under(&root.join(dir), "py", &mut tree);
    }
    let rel: Vec<PathBuf> = tree.iter().filter_map(|p| p.strip_prefix(root).ok().map(Path::to_path_buf)).collect();
    for t in &all_ticked {
        if t.starts_with("accel-") && t.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !names.contains(t) {
            errors.push(format!("names crate `{t}`, which is not in the workspace"));
        }
    }
    let entries = entries(doc);
    let in_entries: BTreeSet<&str> = entries.iter().flat_map(|(_, text)| ticked(text)).collect();
    for (path, text) in &entries {
        for t in ticked(text).into_iter().filter(|t| names_a_path(t)) {
            let full = root.join(t.trim_end_matches('/')).exists();
            if !full && !under(root, Path::new(path), t, &rel) {
                errors.push(format!("the entry for `{path}` names `{t}`, which is not under it"));
            }
        }
    }
    for t in all_ticked.iter().filter(|t| names_a_path(t) && !in_entries.contains(*t)) {
        if !root.join(t.trim_end_matches('/')).exists() && !under(root, Path::new(""), t, &rel) {
            errors.push(format!("names `{t}`, which does not exist"));
        }
    }
    let diagram = doc.split("```").nth(1).unwrap_or("");
    for n in &names {
        if !all_ticked.contains(n) {
            errors.push(format!("never names crate `{n}`"));
        }
        if !diagram.contains(n.trim_start_matches("accel-")) {
            errors.push(format!("the crate diagram never shows `{n}`"));
        }
    }
    for f in files {
        // A file is named by its path, or inside an entry above it by its file name or its
        // module's name (`plan.rs` or `plan`; `nvidia/` or `nvidia` for `nvidia/mod.rs`).
        let (name, module) = match f.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs") => {
                let dir = f.parent().and_then(Path::file_name).unwrap_or_default().to_string_lossy().into_owned();
                (format!("{dir}/"), dir)
            }
            Some(n) => (n.to_owned(), n.trim_end_matches(".rs").trim_end_matches(".py").to_owned()),
            None => continue,
        };
        let named = entries.iter().any(|(path, text)| {
            let spans = ticked(text);
            spans.iter().any(|t| Path::new(t) == f)
                || (f.starts_with(path) && spans.iter().any(|t| *t == name || *t == module || f.ends_with(t)))
        });
        if !named {
            errors.push(format!("no code-map entry names `{}`", f.display()));
        }
    }
    errors
}

/// The dependency table (`| `accel-x` | ours | others |` rows under "## Dependencies") as
/// crate -> (our crates, other crates), each sorted; `none` is empty.
pub fn table(doc: &str) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let section = doc.split("\n## Dependencies").nth(1).unwrap_or("");
    let section = section.split("\n## ").next().unwrap_or("");
    let mut out = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 3 {
            continue;
        }
        let list = |cell: &str| -> Vec<String> {
            let mut v: Vec<String> = ticked(cell).into_iter().map(str::to_owned).collect();
            v.sort();
            v
        };
        out.insert(cells[0].trim_matches('`').to_owned(), (list(cells[1]), list(cells[2])));
    }
    out
}

/// The same, from `cargo metadata`'s JSON: every package's normal dependencies (an optional
/// one with a `?`), ours (`accel-*`) and others.
pub fn from_metadata(json: &serde_json::Value) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let mut out = BTreeMap::new();
    for p in json["packages"].as_array().into_iter().flatten() {
        let mut ours = BTreeSet::new();
        let mut others = BTreeSet::new();
        for d in p["dependencies"].as_array().into_iter().flatten().filter(|d| d["kind"].is_null()) {
            let name = d["name"].as_str().unwrap_or_default().to_owned();
            let shown = if d["optional"].as_bool() == Some(true) { format!("{name}?") } else { name.clone() };
            if name.starts_with("accel-") {
                ours.insert(shown);
            } else {
                others.insert(shown);
            }
        }
        let name = p["name"].as_str().unwrap_or_default().to_owned();
        out.insert(name, (ours.into_iter().collect(), others.into_iter().collect()));
    }
    out
}

/// Where the table and `cargo metadata` differ.
pub fn dependency_errors(
    claimed: &BTreeMap<String, (Vec<String>, Vec<String>)>,
    actual: &BTreeMap<String, (Vec<String>, Vec<String>)>,
) -> Vec<String> {
    let mut errors = Vec::new();
    for (name, deps) in actual {
        match claimed.get(name) {
            None => errors.push(format!("the dependency table has no row for `{name}`")),
            Some(c) if c != deps => errors.push(format!(
                "`{name}` depends on {:?} (ours) and {:?} (others), the table says {:?} and {:?}",
                deps.0, deps.1, c.0, c.1
            )),
            Some(_) => {}
        }
    }
    for name in claimed.keys().filter(|n| !actual.contains_key(*n)) {
        errors.push(format!("the dependency table names `{name}`, which is not in the workspace"));
    }
    errors
}
