//! The file-to-file imports of one Rust crate, read with `syn`: every `use` tree (top level or
//! inside a function, groups, renames and globs included) and every path in the code (`crate::`,
//! `super::`, `self::` and a child module's name), resolved to the file that defines the module
//! it names. Test modules (`#[cfg(test)]`) are left out: a test's `use super::*` is not an
//! import of the file by itself.
//!
//! A crate root is a face where it only declares modules and re-exports (`pub use`): those
//! lines are no edges, and an item it re-exports resolves to the module that defines it. Where a
//! root defines items, other files that use them depend on the root, and the root's own paths
//! are edges like any file's.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use quote::ToTokens;

/// A file's module path inside its crate: `src/a.rs` is `a`, `src/a/mod.rs` is `a`,
/// `src/a/b.rs` is `a::b`; the crate root (`lib.rs`, `main.rs`) is the empty path.
pub fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.split('/').map(str::to_owned).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_owned());
    }
    parts
}

/// The name a module path is shown by (`families::nvidia`, or `<root>`).
pub fn show(module: &[String]) -> String {
    if module.is_empty() {
        "<root>".to_owned()
    } else {
        module.join("::")
    }
}

/// The edges (from, to) between the files of one crate, each file given as (its path below
/// `src/`, its text). A file that does not parse is an error naming it.
pub fn edges(files: &[(String, String)]) -> Result<BTreeSet<(String, String)>, String> {
    let mut parsed = Vec::new();
    for (rel, text) in files {
        let ast = syn::parse_file(text).map_err(|e| format!("{rel}: {e}"))?;
        parsed.push((module_path(rel), ast));
    }
    let modules: BTreeSet<Vec<String>> = parsed.iter().map(|(m, _)| m.clone()).collect();
    // The root's re-exports: item name -> the path it re-exports (`None`: another crate's).
    let mut reexports: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    if let Some((_, root)) = parsed.iter().find(|(m, _)| m.is_empty()) {
        for item in &root.items {
            if let syn::Item::Use(u) = item {
                if !matches!(u.vis, syn::Visibility::Inherited) && !is_test(&u.attrs) {
                    for (path, alias) in use_paths(&u.tree) {
                        reexports.insert(alias, resolve(&modules, &[], &path));
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    for (module, ast) in &parsed {
        let mut paths = Vec::new();
        collect(&ast.items, module, module.is_empty(), &mut paths);
        for (base, path) in paths {
            let Some(abs) = resolve(&modules, &base, &path) else { continue };
            let Some(target) = target(&modules, &reexports, &abs) else { continue };
            if &target != module {
                out.insert((show(module), show(&target)));
            }
        }
    }
    Ok(out)
}

/// `#[cfg(test)]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.meta.to_token_stream().to_string().replace(' ', "") == "cfg(test)")
}

/// Every path of `items` (in module `base`), with the module it is written in. In a root,
/// `mod` declarations and re-exports are the face, not edges.
fn collect(items: &[syn::Item], base: &[String], root: bool, out: &mut Vec<(Vec<String>, Vec<String>)>) {
    for item in items {
        match item {
            syn::Item::Mod(m) if is_test(&m.attrs) => {}
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    let mut inner_base = base.to_vec();
                    inner_base.push(m.ident.to_string());
                    collect(inner, &inner_base, false, out);
                }
            }
            syn::Item::Use(u) if is_test(&u.attrs) => {}
            syn::Item::Use(u) if root && !matches!(u.vis, syn::Visibility::Inherited) => {}
            syn::Item::Use(u) => out.extend(use_paths(&u.tree).into_iter().map(|(p, _)| (base.to_vec(), p))),
            syn::Item::Fn(f) if is_test(&f.attrs) => {}
            syn::Item::Impl(i) if is_test(&i.attrs) => {}
            other => scan(other.to_token_stream(), base, out),
        }
    }
}

/// The leaf paths of a `use` tree, each with the name it brings in (its alias, or its last
/// segment; `*` for a glob, whose path is the module globbed).
fn use_paths(tree: &syn::UseTree) -> Vec<(Vec<String>, String)> {
    fn walk(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(&p.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => {
                out.push((prefix.clone(), prefix.last().cloned().unwrap_or_default()));
            }
            syn::UseTree::Name(n) => {
                let mut p = prefix.clone();
                p.push(n.ident.to_string());
                out.push((p, n.ident.to_string()));
            }
            syn::UseTree::Rename(r) => {
                let mut p = prefix.clone();
                if r.ident != "self" {
                    p.push(r.ident.to_string());
                }
                out.push((p, r.rename.to_string()));
            }
            syn::UseTree::Glob(_) => out.push((prefix.clone(), "*".to_owned())),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    walk(t, prefix, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(tree, &mut Vec::new(), &mut out);
    out
}

/// The paths in a token stream: `a::b::c` sequences (not after `$`, as in `$crate`, nor
/// starting with `::`), and the trees of `use` statements inside functions.
fn scan(tokens: TokenStream, base: &[String], out: &mut Vec<(Vec<String>, Vec<String>)>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(g) => {
                scan(g.stream(), base, out);
                i += 1;
            }
            TokenTree::Ident(id) if id == "use" => {
                // A `use` statement: up to its `;`, parsed as one.
                let end = (i..tokens.len())
                    .find(|&j| matches!(&tokens[j], TokenTree::Punct(p) if p.as_char() == ';'))
                    .unwrap_or(tokens.len() - 1);
                let stmt: TokenStream = tokens[i..=end].iter().cloned().collect();
                if let Ok(u) = syn::parse2::<syn::ItemUse>(stmt) {
                    out.extend(use_paths(&u.tree).into_iter().map(|(p, _)| (base.to_vec(), p)));
                }
                i = end + 1;
            }
            TokenTree::Ident(id) => {
                let after_dollar = i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '$');
                let after_colons = i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == ':');
                let mut path = vec![id.to_string()];
                let mut j = i + 1;
                while colons(&tokens, j) {
                    match tokens.get(j + 2) {
                        Some(TokenTree::Ident(next)) => {
                            path.push(next.to_string());
                            j += 3;
                        }
                        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
                            // `a::{b, c}` outside a `use` (a macro's input): read as a use tree.
                            let text = format!("use {}::{};", path.join("::"), g);
                            if let Ok(u) = syn::parse_str::<syn::ItemUse>(&text) {
                                out.extend(use_paths(&u.tree).into_iter().map(|(p, _)| (base.to_vec(), p)));
                            }
                            path.clear();
                            j += 3;
                            break;
                        }
                        _ => break,
                    }
                }
                if path.len() > 1 && !after_dollar && !after_colons {
                    out.push((base.to_vec(), path));
                }
                i = j.max(i + 1);
            }
            TokenTree::Punct(_) | TokenTree::Literal(_) => i += 1,
        }
    }
}

/// Whether `tokens[j..j + 2]` is `::`.
fn colons(tokens: &[TokenTree], j: usize) -> bool {
    matches!((tokens.get(j), tokens.get(j + 1)), (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
        if a.as_char() == ':' && b.as_char() == ':')
}

/// A path written in module `base`, as a path from the crate root; `None` for a path outside
/// the crate (another crate, std, a name brought in by `use`, which that `use` already counts).
fn resolve(modules: &BTreeSet<Vec<String>>, base: &[String], path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some([base, &path[1..]].concat()),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let keep = base.len().checked_sub(ups)?;
            Some([&base[..keep], &path[ups..]].concat())
        }
        _ => {
            let child: Vec<String> = [base, &path[..1]].concat();
            // A child module of the file (or of the crate root, from the root).
            modules.iter().any(|m| m.starts_with(&child)).then(|| [base, path].concat())
        }
    }
}

/// The file a root-relative path lands in: the longest prefix that is a file's module; an item
/// of the root that the root re-exports resolves to where it comes from (nowhere in this crate
/// for another crate's).
fn target(
    modules: &BTreeSet<Vec<String>>,
    reexports: &BTreeMap<String, Option<Vec<String>>>,
    abs: &[String],
) -> Option<Vec<String>> {
    let longest = |p: &[String]| (0..=p.len()).rev().map(|n| p[..n].to_vec()).find(|q| modules.contains(q));
    let found = longest(abs)?;
    if found.is_empty() {
        if let Some(source) = abs.first().and_then(|item| reexports.get(item)) {
            return source.as_deref().and_then(longest);
        }
    }
    Some(found)
}
