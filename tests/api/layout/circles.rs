//! Import circles: the strongly connected components of more than one
//! module (Tarjan).

use std::collections::{BTreeMap, BTreeSet};

use super::ModPath;

/// The strongly connected components of more than one module (Tarjan).
pub(super) fn circles(
    modules: &BTreeSet<ModPath>,
    edges: &BTreeMap<ModPath, BTreeSet<ModPath>>,
) -> Vec<Vec<ModPath>> {
    let mut tarjan = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for module in modules {
        if !tarjan.index.contains_key(module) {
            tarjan.visit(module);
        }
    }
    tarjan.found
}

struct Tarjan<'a> {
    edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
    index: BTreeMap<ModPath, usize>,
    low: BTreeMap<ModPath, usize>,
    stack: Vec<ModPath>,
    on_stack: BTreeSet<ModPath>,
    found: Vec<Vec<ModPath>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: &ModPath) {
        let n = self.index.len();
        self.index.insert(v.clone(), n);
        self.low.insert(v.clone(), n);
        self.stack.push(v.clone());
        self.on_stack.insert(v.clone());
        let edges = self.edges;
        for w in edges.get(v).into_iter().flatten() {
            if !self.index.contains_key(w) {
                self.visit(w);
                let low = self.low[v].min(self.low[w]);
                self.low.insert(v.clone(), low);
            } else if self.on_stack.contains(w) {
                let low = self.low[v].min(self.index[w]);
                self.low.insert(v.clone(), low);
            }
        }
        if self.low[v] == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(&w);
                let done = &w == v;
                component.push(w);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                self.found.push(component);
            }
        }
    }
}
