//! The module-to-module imports of a Python package, read with Python's own parser (`ast`, run
//! by the interpreter the tests use): every `import` and `from ... import`, at the top, inside
//! functions and under `if TYPE_CHECKING`, relative ones resolved as Python does.
//!
//! A package's `__init__` is a face where it re-exports: its top-level imports are no edges. A
//! module that imports a name from a package depends on the package only when its `__init__`
//! defines that name (a function, class or assignment); a name that is a submodule is an edge
//! to that submodule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Prints, for every module under the package directory given, its name, whether it is a
/// package, the names its top level defines, and its imports (absolute module, names, top level
/// or not), as JSON.
const SCRIPT: &str = r#"
import ast, json, pathlib, sys
root = pathlib.Path(sys.argv[1])
out = []
for path in sorted(root.rglob("*.py")):
    if "__pycache__" in path.parts:
        continue
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    defines = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defines.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defines += [t.id for t in targets if isinstance(t, ast.Name)]
    top = set(map(id, tree.body))
    imports = []
    here = parts if package else parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                imports.append([a.name, [], id(node) in top])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                full = ".".join(base + ([node.module] if node.module else []))
            else:
                full = node.module or ""
            imports.append([full, [a.name for a in node.names], id(node) in top])
    out.append({"module": ".".join(parts), "package": package, "defines": defines, "imports": imports})
print(json.dumps(out))
"#;

/// One module as the script reads it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Module {
    pub module: String,
    pub package: bool,
    pub defines: Vec<String>,
    /// (absolute module, names imported from it, at the module's top level)
    pub imports: Vec<(String, Vec<String>, bool)>,
}

/// The interpreter: the repository's virtual environment's, else `python3` on `PATH`.
fn python(repo: &Path) -> String {
    let venv = repo.join(".venv/bin/python");
    if venv.is_file() {
        venv.display().to_string()
    } else {
        "python3".to_owned()
    }
}

/// Reads every module of the package at `dir` (a directory holding `__init__.py`).
pub fn read(repo: &Path, dir: &Path) -> Vec<Module> {
    let out = Command::new(python(repo)).arg("-c").arg(SCRIPT).arg(dir).output().expect("running python3");
    assert!(out.status.success(), "the import reader failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the import reader's JSON")
}

/// The edges (from, to) between the package's modules.
pub fn edges(modules: &[Module]) -> BTreeSet<(String, String)> {
    let by_name: BTreeMap<&str, &Module> = modules.iter().map(|m| (m.module.as_str(), m)).collect();
    let mut out = BTreeSet::new();
    for m in modules {
        for (full, names, top) in &m.imports {
            if m.package && *top {
                continue; // the package's face: re-exports
            }
            let mut targets = Vec::new();
            match by_name.get(full.as_str()) {
                Some(pkg) if pkg.package => {
                    for name in names {
                        let sub = format!("{full}.{name}");
                        if by_name.contains_key(sub.as_str()) {
                            targets.push(sub);
                        } else if pkg.defines.contains(name) {
                            targets.push(full.clone());
                        }
                    }
                    if names.is_empty() && !pkg.defines.is_empty() {
                        targets.push(full.clone()); // `import accel`: the package's own code
                    }
                }
                Some(_) => targets.push(full.clone()),
                None => {}
            }
            for t in targets {
                if t != m.module {
                    out.insert((m.module.clone(), t));
                }
            }
        }
    }
    out
}
