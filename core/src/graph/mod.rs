//! The tagged graph: an arena of nodes, each with its op, inputs, shape, dtype and tag.
//!
//! Invariants (checked by [`Graph::validate`] in debug builds and on import):
//! - a node's inputs all have smaller ids (the arena is in topological order);
//! - a node's shape and dtype are what its op infers from its inputs';
//! - a tag's region exists, and a region's parent has a smaller id.

use crate::dtype::DType;
use crate::error::{Error, Result};
pub(crate) use crate::id::{NodeId, RegionId};
use crate::op::{Meta, Op};
use crate::region::RegionSpec;
use crate::shape::fmt_shape;
use smallvec::SmallVec;
use std::fmt::Write as _;

mod node;

pub use node::{Inputs, Label, Node, Region, SrcLoc, Tag};

pub use crate::shape::Shape;

/// A graph: nodes in topological order, regions, and outputs (the first is the scalar loss).
#[derive(Clone, Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    regions: Vec<Region>,
    outputs: Vec<NodeId>,
    /// Whether the graph is known to hold [`Graph::validate`]'s invariants: set by a reader that
    /// checked each node as it was added ([`Graph::mark_valid`]), cleared by every method that
    /// takes `&mut self`, so that differentiating a graph just read does not check its nodes
    /// again. Not part of the graph's value: equality ignores it.
    valid: bool,
}

impl PartialEq for Graph {
    fn eq(&self, other: &Graph) -> bool {
        self.nodes == other.nodes && self.regions == other.regions && self.outputs == other.outputs
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty graph with room for `nodes` nodes.
    pub fn with_capacity(nodes: usize) -> Self {
        Graph { nodes: Vec::with_capacity(nodes), ..Self::default() }
    }

    /// A copy with room for `extra` more nodes.
    pub(crate) fn clone_with_room(&self, extra: usize) -> Graph {
        let mut nodes = Vec::with_capacity(self.nodes.len() + extra);
        nodes.extend_from_slice(&self.nodes);
        Graph { nodes, regions: self.regions.clone(), outputs: self.outputs.clone(), valid: self.valid }
    }

    /// The node list itself, for its capacity.
    #[cfg(test)]
    pub(crate) fn node_list(&self) -> &Vec<Node> {
        &self.nodes
    }

    /// Makes room for exactly `extra` more nodes: the room past the last node is then what
    /// the caller fills, and neither the doubling `reserve` may give nor the room left by a
    /// reader's estimate of the node count (one node per 60 bytes of text: far too many for an
    /// indented document) stays with the graph (docs/performance.md, "Autodiff").
    pub(crate) fn reserve_nodes(&mut self, extra: usize) {
        // Room changes nothing the invariants speak of: `valid` stays.
        let wanted = self.nodes.len().saturating_add(extra);
        if self.nodes.capacity() > wanted {
            self.nodes.shrink_to(wanted);
        } else {
            self.nodes.reserve_exact(extra);
        }
    }

    /// Keeps the nodes `keep` says (by index), in order, moved in place, with their inputs
    /// renumbered; returns each old index's new id (`u32::MAX` for a node dropped). A kept
    /// node's inputs must be kept too. Outputs are left as they are: the caller sets them.
    pub(crate) fn retain_nodes(&mut self, keep: impl Fn(usize) -> bool) -> Vec<NodeId> {
        self.valid = false;
        let mut remap = vec![NodeId::new(u32::MAX); self.nodes.len()];
        // Up to the first node dropped, every node stays where it is and reads nodes that do.
        let first_dropped = (0..self.nodes.len()).find(|&i| !keep(i)).unwrap_or(self.nodes.len());
        for (i, new) in remap[..first_dropped].iter_mut().enumerate() {
            *new = NodeId::from_index(i);
        }
        let mut kept = first_dropped;
        for i in first_dropped..self.nodes.len() {
            if keep(i) {
                self.nodes.swap(i, kept);
                let node = &mut self.nodes[kept];
                node.inputs.iter_mut().for_each(|x| *x = remap[x.index()]);
                debug_assert!(node.inputs.iter().all(|x| x.raw() != u32::MAX), "a kept node reads a dropped one");
                remap[i] = NodeId::from_index(kept);
                kept += 1;
            }
        }
        self.nodes.truncate(kept);
        remap
    }

    /// Appends a node whose shape and dtype are already known; returns its id.
    pub fn push(&mut self, node: Node) -> NodeId {
        self.valid = false;
        debug_assert!(node.inputs.iter().all(|i| i.index() < self.nodes.len()), "inputs must precede");
        self.nodes.push(node);
        NodeId::new(self.nodes.len() as u32 - 1)
    }

    /// Appends an op applied to `inputs`, inferring shape and dtype; errors name the op.
    pub fn push_op(&mut self, op: Op, inputs: impl Into<Inputs>) -> Result<NodeId> {
        let inputs = inputs.into();
        let (shape, dtype) = self.infer(&op, &inputs).map_err(|message| Error::Node {
            node: NodeId::from_index(self.nodes.len()),
            op: op.name(),
            message,
        })?;
        Ok(self.push(Node { op, inputs, shape, dtype, tag: None, label: None }))
    }

    /// What `op` would produce from `inputs`.
    pub fn infer(&self, op: &Op, inputs: &[NodeId]) -> std::result::Result<(Shape, DType), String> {
        let metas: SmallVec<[Meta<'_>; 4]> = inputs.iter().map(|&i| self.node(i).meta()).collect();
        op.infer(&metas)
    }

    /// Adds a region; returns its id.
    pub fn add_region(&mut self, region: Region) -> RegionId {
        self.valid = false;
        self.regions.push(region);
        RegionId::new(self.regions.len() as u32 - 1)
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// The node `id`, mutably.
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.valid = false;
        &mut self.nodes[id.index()]
    }

    /// All nodes, by id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Ids of all nodes.
    pub fn ids(&self) -> impl DoubleEndedIterator<Item = NodeId> + ExactSizeIterator {
        (0..self.nodes.len() as u32).map(NodeId::new)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The region `id`.
    pub fn region(&self, id: RegionId) -> &Region {
        &self.regions[id.index()]
    }

    /// Whether region instance `inner` is `outer` or nested in it (through its parents).
    pub fn region_is_within(&self, inner: RegionId, outer: RegionId) -> bool {
        let mut at = Some(inner);
        while let Some(r) = at {
            if r == outer {
                return true;
            }
            at = self.regions[r.index()].parent;
        }
        false
    }

    /// All regions, by id.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Names a region's `save_names` (or `offload_names`) lists that no value computed in it
    /// carries — a typo such as `save_names("ffn_akt")` for a value named `"ffn_act"` would
    /// otherwise save nothing and say nothing. One line per region function and name (its
    /// instances counted together), with the names the region's values do carry. Values of nested regions follow their own
    /// region's policy, so only values whose innermost region is the listing one count.
    pub fn unknown_save_names(&self) -> Vec<String> {
        // One entry per distinct spec: the spec, and the names its instances' values carry.
        let mut specs: Vec<(&'static RegionSpec, Vec<&str>)> = Vec::new();
        let entry = |specs: &mut Vec<(&'static RegionSpec, Vec<&str>)>, spec: &'static RegionSpec| match specs
            .iter()
            .position(|(s, _)| std::ptr::eq(*s, spec))
        {
            Some(i) => i,
            None => {
                specs.push((spec, Vec::new()));
                specs.len() - 1
            }
        };
        for region in &self.regions {
            if let Some(spec) = region.spec.filter(|s| s.policy.names().next().is_some()) {
                entry(&mut specs, spec);
            }
        }
        if specs.is_empty() {
            return Vec::new();
        }
        for node in &self.nodes {
            let (Some(tag), Some(name)) = (node.tag, node.name()) else { continue };
            let Some(spec) = self.region(tag.region).spec.filter(|s| s.policy.names().next().is_some()) else {
                continue;
            };
            let i = entry(&mut specs, spec);
            if !specs[i].1.contains(&name) {
                specs[i].1.push(name);
            }
        }
        let mut warnings = Vec::new();
        for (spec, seen) in &specs {
            for (form, listed) in spec.policy.names().filter(|(_, n)| !seen.contains(n)) {
                let verb = if form == remat_catalog::forms::kw::SAVE_NAMES { "saves" } else { "offloads" };
                let hint = remat_catalog::closest(listed, seen.iter().copied())
                    .map_or(String::new(), |close| format!("; did you mean \"{close}\"?"));
                let known = if seen.is_empty() {
                    "no value in it is named".to_string()
                } else {
                    format!("its values are named {}", crate::text::short_list(seen.iter().copied(), 8))
                };
                warnings.push(format!(
                    "region `{}` ({}:{}): `{form}(\"{listed}\")` matches no value of the region, so it {verb} nothing{hint} ({known})",
                    spec.name, spec.file, spec.line
                ));
            }
        }
        warnings
    }

    /// Whether region `inner` is `outer` or nested inside it.
    pub fn region_within(&self, inner: RegionId, outer: RegionId) -> bool {
        let mut r = Some(inner);
        while let Some(id) = r {
            if id == outer {
                return true;
            }
            r = self.region(id).parent;
        }
        false
    }

    /// Graph outputs; the first is the loss.
    pub fn outputs(&self) -> &[NodeId] {
        &self.outputs
    }

    /// Sets the outputs.
    pub fn set_outputs(&mut self, outputs: Vec<NodeId>) {
        self.valid = false;
        self.outputs = outputs;
    }

    /// The parameters (nodes of op `param`), in id order.
    pub fn params(&self) -> Vec<NodeId> {
        self.ids().filter(|&i| matches!(self.node(i).op, Op::Param { .. })).collect()
    }

    /// The name an input or parameter is fed, saved and reported by: its declared name, or its
    /// op and id (`input_3`, `param_3`) when it has none.
    pub fn leaf_name(&self, id: NodeId) -> String {
        let node = self.node(id);
        node.name().map(str::to_string).unwrap_or_else(|| format!("{}_{}", node.op.name(), id.raw()))
    }

    /// The inputs (nodes of op `input`), in id order.
    pub fn inputs(&self) -> Vec<NodeId> {
        self.ids().filter(|&i| self.node(i).op == Op::Input).collect()
    }

    /// For each node, the nodes that read it.
    pub fn users(&self) -> Vec<Vec<NodeId>> {
        let mut users = vec![Vec::new(); self.nodes.len()];
        for id in self.ids() {
            for &i in &self.node(id).inputs {
                users[i.index()].push(id);
            }
        }
        users
    }

    /// FLOPs to compute node `id` once (the op's count for its input and output shapes).
    pub fn node_flops(&self, id: NodeId) -> u64 {
        let node = self.node(id);
        let metas: SmallVec<[Meta<'_>; 4]> = node.inputs.iter().map(|&i| self.node(i).meta()).collect();
        node.op.flops(&metas, &node.shape)
    }

    /// Checks the invariants listed in the module docs, and that every value's bytes can be
    /// counted without overflow.
    pub fn validate(&self) -> Result<()> {
        self.validate_names()?;
        for id in self.ids() {
            self.validate_node(id)?;
        }
        self.validate_regions_and_outputs()
    }

    /// [`Graph::validate`], skipped where the graph is known to be valid ([`Graph::mark_valid`]
    /// and no change since).
    pub(crate) fn validate_unless_known(&self) -> Result<()> {
        debug_assert!(!self.valid || self.validate().is_ok(), "a graph marked valid is not");
        if self.valid {
            return Ok(());
        }
        self.validate()
    }

    /// Whether the graph is known to hold [`Graph::validate`]'s invariants without checking them
    /// again (a reader checked each node, or the graph was built so: a joint graph).
    pub fn is_known_valid(&self) -> bool {
        self.valid
    }

    /// Marks a graph built to hold the invariants (every node added by [`Graph::push_op`] or
    /// copied from a valid graph) as known to; debug builds check.
    pub(crate) fn assume_valid(&mut self) {
        debug_assert!(self.validate().is_ok(), "a graph assumed valid is not");
        self.valid = true;
    }

    /// Records that every node was checked as [`Graph::validate`] checks it when it was added
    /// (inputs before it, region known, bytes countable, shape and dtype those its op infers)
    /// and the names of inputs and parameters with [`LeafNames`], then checks what no single
    /// node shows: regions' parents, outputs. A reader that checks each node as it reads it
    /// calls this instead of `validate`, which would check them all again; debug builds check
    /// every node anyway.
    pub(crate) fn mark_valid(&mut self) -> Result<()> {
        self.validate_regions_and_outputs()?;
        debug_assert!(self.validate().is_ok(), "a reader marked an invalid graph valid");
        self.valid = true;
        Ok(())
    }

    /// Inputs and parameters are fed and saved by name: one name, one value.
    fn validate_names(&self) -> Result<()> {
        let mut names = LeafNames::default();
        for id in self.ids() {
            if let Some(name) = self.node(id).name() {
                names.check(self, id, name.into())?;
            }
        }
        Ok(())
    }

    /// The invariants of one node: its inputs precede it, its region exists, its bytes can be
    /// counted, and its shape and dtype are those its op infers.
    fn validate_node(&self, id: NodeId) -> Result<()> {
        let node = self.node(id);
        let err = |message: String| Error::Node { node: id, op: node.op.name(), message };
        if let Some(bad) = node.inputs.iter().find(|i| i.index() >= id.index()) {
            return Err(err(format!("input {bad} does not precede the node (cycle or dangling input)")));
        }
        if let Some(tag) = node.tag {
            if tag.region.index() >= self.regions.len() {
                return Err(err(format!("region {} does not exist", tag.region)));
            }
        }
        if crate::shape::checked_bytes(&node.shape, node.dtype.size()).is_none() {
            return Err(err(format!("{} {} is more than 2^64 bytes", fmt_shape(&node.shape), node.dtype)));
        }
        if node.op.info().leaf {
            return Ok(());
        }
        let (shape, dtype) = self.infer(&node.op, &node.inputs).map_err(err)?;
        if shape[..] != node.shape[..] || dtype != node.dtype {
            return Err(err(format!(
                "declared {} {} but the op produces {} {}",
                fmt_shape(&node.shape),
                node.dtype,
                fmt_shape(&shape),
                dtype
            )));
        }
        Ok(())
    }

    /// Regions' parents precede them, and every output is a node.
    fn validate_regions_and_outputs(&self) -> Result<()> {
        for (i, r) in self.regions.iter().enumerate() {
            if r.parent.is_some_and(|p| p.index() >= i) {
                return Err(Error::graph(format!("region r{i}: parent must precede it")));
            }
        }
        if let Some(bad) = self.outputs.iter().find(|o| o.index() >= self.nodes.len()) {
            return Err(Error::graph(format!("output {bad} does not exist")));
        }
        Ok(())
    }

    /// Nodes recorded while a region instance was open that do not carry it (or a region nested
    /// in it): for each instance, every node between the first and the last node tagged with it
    /// or its descendants must be tagged so, since recording is sequential. Empty for any graph
    /// traced through regions; tests check it on every example model.
    pub fn untagged_inside_regions(&self) -> Vec<NodeId> {
        let mut bad = Vec::new();
        for r in 0..self.regions.len() as u32 {
            let region = RegionId::new(r);
            let inside = |n: &Node| n.tag.is_some_and(|t| self.region_within(t.region, region));
            let first = self.nodes.iter().position(inside);
            let last = self.nodes.iter().rposition(inside);
            if let (Some(first), Some(last)) = (first, last) {
                bad.extend((first..=last).filter(|&i| !inside(&self.nodes[i])).map(NodeId::from_index));
            }
        }
        bad.sort();
        bad.dedup();
        bad
    }

    /// A plain-text listing, one node a line, with tags:
    /// `%5 = matmul(%3, %1) [4, 8] f32 {r0 ffn must_save op_kind} name=h @ src/model.rs:12:9`.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for (i, r) in self.regions.iter().enumerate() {
            let parent = r.parent.map_or(String::new(), |p| format!(" parent={p}"));
            let _ = writeln!(out, "region r{i} {}{parent}", r.name);
        }
        for id in self.ids() {
            let _ = writeln!(out, "{}", self.describe(id));
        }
        let outs: Vec<String> = self.outputs.iter().map(|o| o.to_string()).collect();
        let _ = writeln!(out, "outputs {}", outs.join(", "));
        out
    }

    /// One line describing a node (the format of [`Graph::dump`]).
    pub fn describe(&self, id: NodeId) -> String {
        let n = self.node(id);
        let inputs: Vec<String> = n.inputs.iter().map(|i| i.to_string()).collect();
        let attrs = n.op.attrs_text();
        let attrs = if attrs.is_empty() { attrs } else { format!("<{attrs}>") };
        let mut line = format!("{id} = {}{attrs}({}) {:?} {}", n.op.name(), inputs.join(", "), n.shape, n.dtype);
        if let Some(t) = n.tag {
            let _ = write!(line, " {{{} {} {} {}}}", t.region, self.region(t.region).name, t.policy, t.source.name());
        }
        if let Some(name) = n.name() {
            let _ = write!(line, " name={name}");
        }
        if let Some(loc) = n.loc() {
            let _ = write!(line, " @ {loc}");
        }
        line
    }
}

/// The names of a graph's inputs and parameters so far, node by node as the graph is built:
/// they are fed and saved by name, so no two may share one. (A reader checks each name as it
/// adds the node, where its other checks are made; [`Graph::validate`] checks them all at once.)
#[derive(Default)]
pub(crate) struct LeafNames<'a>(rustc_hash::FxHashMap<std::borrow::Cow<'a, str>, NodeId>);

impl<'a> LeafNames<'a> {
    /// Records `name` as node `id`'s where `id` (a node of `g`) is an input or a parameter, or
    /// says which one took it first.
    pub(crate) fn check(&mut self, g: &Graph, id: NodeId, name: std::borrow::Cow<'a, str>) -> Result<()> {
        let op = &g.node(id).op;
        if !matches!(op, Op::Input | Op::Param { .. }) {
            return Ok(());
        }
        match self.0.entry(name) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(id);
                Ok(())
            }
            std::collections::hash_map::Entry::Occupied(taken) => Err(Error::Node {
                node: id,
                op: op.name(),
                message: format!(
                    "the name {} is already that of {} ({}): inputs and parameters are fed and saved by name",
                    crate::text::quoted(taken.key()),
                    taken.get(),
                    g.node(*taken.get()).op.name()
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::UnaryOp;
    use crate::policy::{Policy, PolicySource};
    use smallvec::smallvec;

    #[test]
    fn an_untagged_node_between_tagged_ones_is_found() {
        let mut g = Graph::new();
        let r = g.add_region(Region { parent: None, name: "f".into(), spec: None, budget: None });
        let tag = Some(Tag { region: r, policy: Policy::PreferRecompute, source: PolicySource::Default });
        let leaf =
            Node { op: Op::Input, inputs: smallvec![], shape: smallvec![2], dtype: DType::F32, tag: None, label: None };
        let x = g.push(leaf);
        let a = g.push(Node { op: Op::Unary(UnaryOp::Exp), inputs: smallvec![x], tag, ..g.node(x).clone() });
        let stray = g.push(Node { op: Op::Unary(UnaryOp::Sin), inputs: smallvec![a], tag: None, ..g.node(x).clone() });
        g.push(Node { op: Op::Unary(UnaryOp::Cos), inputs: smallvec![stray], tag, ..g.node(x).clone() });
        let after = g.push(Node { op: Op::Unary(UnaryOp::Neg), inputs: smallvec![x], tag: None, ..g.node(x).clone() });
        assert_eq!(g.untagged_inside_regions(), vec![stray]);
        assert_ne!(after, stray);
    }

    /// The room differentiation fills is exactly the room it asked for, whether the
    /// reader's estimate left more (an indented document) or less.
    #[test]
    fn reserved_room_is_what_was_asked_for() {
        let leaf =
            Node { op: Op::Input, inputs: smallvec![], shape: smallvec![2], dtype: DType::F32, tag: None, label: None };
        for estimate in [0, 3, 1000] {
            let mut g = Graph::with_capacity(estimate);
            for _ in 0..10 {
                g.push(leaf.clone());
            }
            g.reserve_nodes(20);
            assert_eq!(g.node_list().capacity(), 30, "estimate {estimate}");
            assert_eq!(g.len(), 10);
        }
    }
}
