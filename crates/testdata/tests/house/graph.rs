//! Cycles of any length in a directed graph of named nodes (files): Tarjan's strongly connected
//! components, each reported with one concrete loop through it.

use std::collections::{BTreeMap, BTreeSet};

/// Every strongly connected component of more than one node (or a node with an edge to
/// itself), each shown as the shortest loop through its first node (`a -> b -> a`), and the
/// rest of its nodes when the loop does not pass them all.
pub fn cycles(edges: &BTreeSet<(String, String)>) -> Vec<String> {
    components(edges)
        .into_iter()
        .map(|scc| {
            let path = a_loop(edges, &scc);
            let rest: Vec<&str> = scc.iter().filter(|n| !path.contains(n)).map(String::as_str).collect();
            let shown = path.join(" -> ");
            if rest.is_empty() {
                shown
            } else {
                format!("{shown} (and in the same knot: {})", rest.join(", "))
            }
        })
        .collect()
}

/// The strongly connected components with a loop in them, each as its sorted set of nodes.
pub fn components(edges: &BTreeSet<(String, String)>) -> Vec<BTreeSet<String>> {
    let mut out: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    // Tarjan, iteratively (no recursion depth limit on a large graph).
    let nodes: Vec<&str> = next.keys().copied().collect();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    let mut low: BTreeMap<&str, usize> = BTreeMap::new();
    let mut on_stack: BTreeSet<&str> = BTreeSet::new();
    let mut stack: Vec<&str> = Vec::new();
    let mut counter = 0;
    for &start in &nodes {
        if index.contains_key(start) {
            continue;
        }
        let mut work: Vec<(&str, usize)> = vec![(start, 0)];
        while let Some(&mut (v, ref mut i)) = work.last_mut() {
            if *i == 0 {
                index.insert(v, counter);
                low.insert(v, counter);
                counter += 1;
                stack.push(v);
                on_stack.insert(v);
            }
            let succ = &next[v];
            if *i < succ.len() {
                let w = succ[*i];
                *i += 1;
                if !index.contains_key(w) {
                    work.push((w, 0));
                } else if on_stack.contains(w) {
                    let l = low[v].min(index[w]);
                    low.insert(v, l);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                let l = low[parent].min(low[v]);
                low.insert(parent, l);
            }
            if low[v] == index[v] {
                let mut scc = BTreeSet::new();
                while let Some(w) = stack.pop() {
                    on_stack.remove(w);
                    scc.insert(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                let looped = scc.len() > 1 || edges.contains(&(v.to_owned(), v.to_owned()));
                if looped {
                    out.insert(index[v], scc);
                }
            }
        }
    }
    let mut sccs: Vec<BTreeSet<String>> = out.into_values().collect();
    sccs.sort();
    sccs
}

/// A loop from the component's first node through edges inside it, back to that node (the
/// shortest, by breadth-first search).
fn a_loop(edges: &BTreeSet<(String, String)>, scc: &BTreeSet<String>) -> Vec<String> {
    let start = scc.iter().next().expect("a component has a node").clone();
    let mut came: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(v) = queue.pop_front() {
        for (_, w) in edges.range((v.clone(), String::new())..).take_while(|(a, _)| *a == v) {
            if !scc.contains(w) {
                continue;
            }
            if *w == start {
                let mut path = vec![start.clone()];
                let mut at = v.clone();
                while at != start {
                    path.push(at.clone());
                    at = came[&at].clone();
                }
                path.push(start.clone());
                let last = path.len() - 1;
                path[1..last].reverse();
                return path;
            }
            if !came.contains_key(w) {
                came.insert(w.clone(), v.clone());
                queue.push_back(w.clone());
            }
        }
    }
    scc.iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    #[test]
    fn finds_loops_of_any_length_and_only_loops() {
        let e =
            edges(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("x", "y"), ("y", "x"), ("s", "s")]);
        assert_eq!(cycles(&e), vec!["a -> b -> c -> a", "s -> s", "x -> y -> x"]);
        assert!(cycles(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    }
}
