//! A flow's dependency graph, built once per validation: phase ids as nodes (duplicated ids
//! merged, their dependencies united), edges from a phase to what it depends on, and the
//! strongly connected components in topological order (upstream first), found by one iterative
//! Tarjan pass. Every "before" question the invariants ask is answered over this in time linear
//! in phases plus edges (producibility: times the number of distinct required artifacts / 64,
//! bounded by [`super::limits`]).
//!
//! A flow whose phases carry no `depends_on` is a sequence in list order
//! ([`super::invariants::uses_list_order`]): each distinct id runs after the one before it.

use std::collections::{BTreeMap, BTreeSet};

use super::model::{Flow, Phase};

/// The dependency graph of one flow.
pub(crate) struct Graph<'a> {
    /// Node → phase id, in order of first appearance.
    pub(crate) ids: Vec<&'a str>,
    /// Phase id → node.
    pub(crate) index: BTreeMap<&'a str, usize>,
    /// Node → the nodes it depends on (known ids only; sorted, deduplicated).
    pub(crate) deps: Vec<Vec<usize>>,
    /// Node → the phases (indices into `flow.phases`) carrying its id.
    pub(crate) phases_of: Vec<Vec<usize>>,
    /// Ids used by more than one phase.
    pub(crate) duplicates: BTreeSet<&'a str>,
    /// Node → its component.
    pub(crate) comp: Vec<usize>,
    /// Components in topological order: every component comes after all it depends on.
    pub(crate) components: Vec<Vec<usize>>,
}

impl<'a> Graph<'a> {
    /// Builds the graph and its components (one pass each).
    pub(crate) fn new(flow: &'a Flow) -> Self {
        let mut ids: Vec<&str> = Vec::new();
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        let mut phases_of: Vec<Vec<usize>> = Vec::new();
        let mut duplicates = BTreeSet::new();
        for (at, phase) in flow.phases.iter().enumerate() {
            let id = phase.id.as_str();
            match index.get(id) {
                Some(&node) => {
                    duplicates.insert(id);
                    if let Some(list) = phases_of.get_mut(node) {
                        list.push(at);
                    }
                }
                None => {
                    index.insert(id, ids.len());
                    ids.push(id);
                    phases_of.push(vec![at]);
                }
            }
        }
        let mut deps: Vec<Vec<usize>> = vec![Vec::new(); ids.len()];
        if super::invariants::uses_list_order(flow) {
            for (node, list) in deps.iter_mut().enumerate().skip(1) {
                list.push(node - 1);
            }
        } else {
            for phase in &flow.phases {
                let Some(&node) = index.get(phase.id.as_str()) else {
                    continue;
                };
                let known = phase
                    .depends_on
                    .iter()
                    .filter_map(|d| index.get(d.as_str()).copied());
                if let Some(list) = deps.get_mut(node) {
                    list.extend(known);
                }
            }
            for list in &mut deps {
                list.sort_unstable();
                list.dedup();
            }
        }
        let (comp, components) = components(&deps);
        Self {
            ids,
            index,
            deps,
            phases_of,
            duplicates,
            comp,
            components,
        }
    }

    /// The phases carrying node `node`'s id.
    pub(crate) fn phases<'f>(&self, flow: &'f Flow, node: usize) -> impl Iterator<Item = &'f Phase> {
        self.phases_of
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|&at| flow.phases.get(at))
    }

    /// True when `node` depends on itself, directly or through a cycle.
    pub(crate) fn on_cycle(&self, node: usize) -> bool {
        let size = self
            .comp
            .get(node)
            .and_then(|&c| self.components.get(c))
            .map_or(0, Vec::len);
        size > 1 || self.deps.get(node).is_some_and(|d| d.contains(&node))
    }

    /// The size of `node`'s component.
    pub(crate) fn component_size(&self, node: usize) -> usize {
        self.comp
            .get(node)
            .and_then(|&c| self.components.get(c))
            .map_or(0, Vec::len)
    }

    /// Every id upstream of `id` (transitively); contains `id` only when it is on a cycle. One
    /// walk: for a single question, not for one per phase.
    pub(crate) fn upstream_of(&self, id: &str) -> BTreeSet<&'a str> {
        let mut seen = vec![false; self.ids.len()];
        let mut stack: Vec<usize> = self
            .index
            .get(id)
            .and_then(|&n| self.deps.get(n))
            .cloned()
            .unwrap_or_default();
        let mut out = BTreeSet::new();
        while let Some(node) = stack.pop() {
            if let Some(flag) = seen.get_mut(node)
                && !*flag
            {
                *flag = true;
                if let Some(id) = self.ids.get(node) {
                    out.insert(*id);
                }
                stack.extend(self.deps.get(node).into_iter().flatten().copied());
            }
        }
        out
    }
}

impl<'a> Graph<'a> {
    /// Phase ids in dependency order, ties broken by first appearance (Kahn's algorithm over a
    /// sorted ready set). `None` on a cycle or a duplicated id.
    pub(crate) fn execution_order(&self) -> Option<Vec<&'a str>> {
        if !self.duplicates.is_empty() {
            return None;
        }
        let mut waiting: Vec<usize> = self.deps.iter().map(Vec::len).collect();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); self.ids.len()];
        for (node, deps) in self.deps.iter().enumerate() {
            for &dep in deps {
                if let Some(list) = dependents.get_mut(dep) {
                    list.push(node);
                }
            }
        }
        let mut ready: BTreeSet<usize> = waiting
            .iter()
            .enumerate()
            .filter(|(_, n)| **n == 0)
            .map(|(node, _)| node)
            .collect();
        let mut order = Vec::with_capacity(self.ids.len());
        while let Some(node) = ready.pop_first() {
            order.push(*self.ids.get(node)?);
            for &next in dependents.get(node)? {
                let count = waiting.get_mut(next)?;
                *count = count.saturating_sub(1);
                if *count == 0 {
                    ready.insert(next);
                }
            }
        }
        (order.len() == self.ids.len()).then_some(order)
    }
}

const UNSEEN: usize = usize::MAX;

/// Tarjan's bookkeeping, with an explicit call stack instead of recursion.
struct Tarjan {
    order: Vec<usize>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    /// (node, next edge to follow)
    calls: Vec<(usize, usize)>,
    counter: usize,
}

impl Tarjan {
    fn visit(&mut self, v: usize) {
        if let (Some(o), Some(l), Some(s)) = (
            self.order.get_mut(v),
            self.low.get_mut(v),
            self.on_stack.get_mut(v),
        ) {
            *o = self.counter;
            *l = self.counter;
            *s = true;
        }
        self.counter += 1;
        self.stack.push(v);
        self.calls.push((v, 0));
    }

    fn lower(&mut self, v: usize, to: usize) {
        if let Some(l) = self.low.get_mut(v) {
            *l = (*l).min(to);
        }
    }
}

/// Strongly connected components of `deps` (edges node → dependency) by an iterative Tarjan
/// pass (no recursion, so a 100,000-phase chain cannot overflow the stack). Tarjan emits a
/// component only after every component it reaches, i.e. upstream first: a topological order.
fn components(deps: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let n = deps.len();
    let mut t = Tarjan {
        order: vec![UNSEEN; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        calls: Vec::new(),
        counter: 0,
    };
    let mut comp = vec![UNSEEN; n];
    let mut components: Vec<Vec<usize>> = Vec::new();
    for root in 0..n {
        if t.order.get(root) != Some(&UNSEEN) {
            continue;
        }
        t.visit(root);
        while let Some(&(v, edge)) = t.calls.last() {
            if let Some(w) = deps.get(v).and_then(|d| d.get(edge)).copied() {
                if let Some(top) = t.calls.last_mut() {
                    top.1 += 1;
                }
                let w_order = t.order.get(w).copied().unwrap_or(UNSEEN);
                if w_order == UNSEEN {
                    t.visit(w);
                } else if t.on_stack.get(w).copied().unwrap_or(false) {
                    t.lower(v, w_order);
                }
                continue;
            }
            t.calls.pop();
            let v_low = t.low.get(v).copied().unwrap_or(0);
            if let Some(&(parent, _)) = t.calls.last() {
                t.lower(parent, v_low);
            }
            if Some(&v_low) == t.order.get(v) {
                let c = components.len();
                let mut members = Vec::new();
                while let Some(w) = t.stack.pop() {
                    if let Some(s) = t.on_stack.get_mut(w) {
                        *s = false;
                    }
                    if let Some(slot) = comp.get_mut(w) {
                        *slot = c;
                    }
                    members.push(w);
                    if w == v {
                        break;
                    }
                }
                components.push(members);
            }
        }
    }
    (comp, components)
}

/// A fixed-size set of small integers, one bit each: the memoised "which required artifacts are
/// produced upstream" of a component, OR-ed along the topological order.
#[derive(Clone)]
pub(crate) struct BitSet(Vec<u64>);

impl BitSet {
    /// An empty set able to hold `0..size`.
    pub(crate) fn new(size: usize) -> Self {
        Self(vec![0; size.div_ceil(64)])
    }

    /// Adds `bit`.
    pub(crate) fn insert(&mut self, bit: usize) {
        if let Some(word) = self.0.get_mut(bit / 64) {
            *word |= 1 << (bit % 64);
        }
    }

    /// Whether `bit` is in the set.
    pub(crate) fn contains(&self, bit: usize) -> bool {
        self.0.get(bit / 64).is_some_and(|w| w & (1 << (bit % 64)) != 0)
    }

    /// Adds every member of `other`.
    pub(crate) fn union_with(&mut self, other: &Self) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= *b;
        }
    }
}
