//! What the partitioner sees of a joint graph: bytes, FLOPs, flags and tags per node — no
//! kernels. Built from a traced [`JointGraph`] or read from a `remat.joint` document, so graphs
//! exported from other frameworks are partitioned by the same code.
//!
//! Invariants (checked by [`PGraph::validate`], which `partition` runs first):
//! - nodes are in topological order: every input has a smaller index than its user;
//! - a forward node never reads a backward node;
//! - every region index names a region, and a region's parent has a smaller index;
//! - `grad_of` names a forward node;
//! - the bytes and FLOPs of all nodes add up without overflowing `u64`.

use super::doc_id::DocId;
use super::storage_type::StorageType;
use crate::autodiff::JointGraph;
use crate::error::{Error, Result};
use crate::graph::{Inputs, Label, NodeId, RegionId};
use crate::policy::{Policy, PolicySource};
use std::borrow::Cow;
use std::sync::Arc;

/// Properties of a node that constrain how it may be kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// A view: never saved itself; its base (`inputs[0]`, followed through views) is saved and
    /// the view replayed.
    pub view: bool,
    /// Draws random numbers; recomputable only because the generator replays exactly.
    pub random: bool,
    /// Costly to recompute (GEMMs): min-cut does not recompute it unless tagged.
    pub compute_intensive: bool,
    /// Cannot be recomputed at all (a side effect, a random op without replay).
    pub not_recomputable: bool,
    /// A graph input or parameter (or a framework placeholder): held anyway, free to keep,
    /// never counted.
    pub resident: bool,
    /// A backward-only input (a tangent) in imported graphs.
    pub tangent: bool,
    /// The generator state a random op of an imported graph ran from (its `rng_state_bytes`):
    /// a node the reader adds as that op's first input, kept whenever the op is replayed and
    /// never recomputed. Documents write it back as the op's `rng_state_bytes`.
    pub rng_state: bool,
    /// An input or parameter the forward mutates (PyTorch's `copy_` into a primal, BatchNorm's
    /// running statistics): after the forward it no longer holds the value the forward read, so
    /// the backward may not read it, directly or through a recompute. The `remat.joint` reader
    /// marks a view of it too, and flags its other forward readers `not_recomputable`.
    pub mutated: bool,
}

/// One node as the partitioner sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PNode {
    /// The id its document gave it (its position, for traced graphs).
    pub id: DocId,
    /// The op's name (a catalog name for traced graphs, borrowed; any string for imported ones).
    pub op: Cow<'static, str>,
    /// Input nodes (smaller indices); up to four held inline, as nearly every op has (a heap
    /// block per node would cost memory and time).
    pub inputs: Inputs,
    /// Whether the node belongs to the backward pass.
    pub backward: bool,
    /// Bytes of its value.
    pub bytes: u64,
    /// FLOPs to compute it once.
    pub flops: u64,
    /// Constraints.
    pub flags: Flags,
    /// Innermost region instance, if recorded inside one.
    pub region: Option<RegionId>,
    /// The policy of its tag, if any.
    pub policy: Option<Policy>,
    /// Which rule gave the policy.
    pub source: Option<PolicySource>,
    /// For a backward node: the forward node whose gradient it computes part of (autodiff
    /// records it; foreign graphs may omit it, and then it forces nothing by the boundary rule).
    pub grad_of: Option<NodeId>,
    /// Shape, when known; shared with other nodes of the same shape (the readers hand out one
    /// block per run of equal shapes: a shape held inline would be a quarter of every node).
    pub shape: Option<Arc<[usize]>>,
    /// Element type, when known.
    pub dtype: Option<StorageType>,
    /// Its name and source location, when it has either (boxed: most nodes have neither, and
    /// the two held inline would be a fifth of every node).
    pub label: Option<Box<Label<String>>>,
}

impl PNode {
    /// A forward or backward node with the given op, inputs and bytes, everything else default
    /// (for building graphs by hand, as tests and benchmarks do).
    pub fn new(id: u64, op: &str, inputs: &[u32], backward: bool, bytes: u64) -> PNode {
        PNode {
            id: DocId::Index(id),
            op: Cow::Owned(op.to_string()),
            inputs: inputs.iter().map(|&i| NodeId::new(i)).collect(),
            backward,
            bytes,
            flops: 0,
            flags: Flags::default(),
            region: None,
            policy: None,
            source: None,
            grad_of: None,
            shape: None,
            dtype: None,
            label: None,
        }
    }

    /// The value's name (`.name(..)`, or an input's / parameter's name).
    pub fn name(&self) -> Option<&str> {
        self.label.as_ref()?.name.as_deref()
    }

    /// Source location of the user's code, when known.
    pub fn loc(&self) -> Option<&str> {
        self.label.as_ref()?.loc.as_deref()
    }
}

/// A region instance as the partitioner sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PRegion {
    /// The id its document gave it (its index, for traced graphs).
    pub key: u64,
    /// Enclosing instance.
    pub parent: Option<RegionId>,
    /// Function (or imported) name.
    pub name: String,
    /// Its own budget fraction (`#[checkpoint(.., budget = f)]`).
    pub budget: Option<f64>,
}

/// The shapes a reader gave its last few nodes, to share with the next: equal shapes come in
/// runs (a layer's activations, its weights, their gradients), so a handful catches nearly every
/// node, and a node of a shape not among them gets a block of its own.
#[derive(Default)]
pub(crate) struct ShapeCache {
    recent: [Option<Arc<[usize]>>; 4],
    /// The entry the next new shape replaces.
    next: usize,
}

impl ShapeCache {
    /// `dims`, shared with an earlier node of this shape where one is recent.
    pub(crate) fn share(&mut self, dims: &[usize]) -> Arc<[usize]> {
        if let Some(shape) = self.recent.iter().flatten().find(|s| ***s == *dims) {
            return shape.clone();
        }
        let shape: Arc<[usize]> = dims.into();
        self.recent[self.next] = Some(shape.clone());
        self.next = (self.next + 1) % self.recent.len();
        shape
    }
}

/// What [`PGraph::validated`] saw besides the graph being valid.
pub(crate) struct Validated {
    /// Whether a forward node's tag asks for offload (must_offload or prefer_offload).
    pub offload_tags: bool,
    /// Whether a forward node is tagged must_recompute.
    pub must_recompute_tags: bool,
    /// Per node, whether it is a backward node: a table the sweeps read instead of the nodes
    /// (a node of 136 bytes is loaded for one flag otherwise).
    pub backward: Vec<bool>,
    /// The bytes of every node together (at most `u64::MAX`: a valid graph's sum fits).
    pub bytes: u64,
}

/// A joint graph for partitioning: nodes in topological order, forward and backward.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PGraph {
    /// Nodes, inputs before users.
    pub nodes: Vec<PNode>,
    /// Region instances, parents before children.
    pub regions: Vec<PRegion>,
    /// Forward outputs (the caller holds them): never recomputed.
    pub forward_outputs: Vec<NodeId>,
    /// Forward outputs the caller may free once the forward returns (PyTorch's logits, which
    /// the caller drops after the loss): the forward computes them and holds them to its end;
    /// past it they are forward values like any other, kept at their bytes or recomputed.
    /// Forward nodes, neither resident nor among `forward_outputs` ([`PGraph::validate`]).
    pub released_outputs: Vec<NodeId>,
    /// Backward outputs (gradients).
    pub backward_outputs: Vec<NodeId>,
}

/// The ids [`PGraph::with_forward_ids`] gives.
struct Relabel<'a> {
    /// The forward nodes' document ids.
    ids: &'a [DocId],
    /// What positional ids are moved by: past every integer id of `ids`.
    offset: u64,
}

impl<'a> Relabel<'a> {
    fn new(ids: &'a [DocId]) -> Self {
        // An id of 2^64 - 1 has nothing past it: it is left out (positional ids then wrap past
        // it rather than overflow; only ids that near the limit can meet them).
        let past = ids.iter().filter_map(|d| if let DocId::Index(i) = d { i.checked_add(1) } else { None }).max();
        Relabel { ids, offset: past.unwrap_or(0).saturating_sub(ids.len() as u64) }
    }

    /// The id of node `k`.
    fn id(&self, k: usize, backward: bool) -> DocId {
        match self.ids.get(k) {
            Some(id) if !backward => id.clone(),
            _ => DocId::Index((k as u64).wrapping_add(self.offset)),
        }
    }
}

impl PGraph {
    /// The partition view of a traced joint graph.
    pub fn from_joint(joint: &JointGraph) -> PGraph {
        Self::from_joint_with_ids(joint, &[])
    }

    /// [`PGraph::from_joint`] then [`PGraph::with_forward_ids`], in one pass over the nodes.
    pub fn from_joint_with_ids(joint: &JointGraph, ids: &[DocId]) -> PGraph {
        let g = joint.graph();
        let label = Relabel::new(ids);
        let routing = super::routing::routing_values(joint);
        let node = |shapes: &mut ShapeCache, id: NodeId| {
            let n = g.node(id);
            let info = n.op.info();
            let backward = !joint.is_forward(id);
            PNode {
                id: label.id(id.index(), backward),
                op: Cow::Borrowed(n.op.name()),
                inputs: n.inputs.clone(),
                backward,
                bytes: n.bytes() as u64,
                flops: g.node_flops(id),
                flags: Flags {
                    view: info.view,
                    random: info.random,
                    compute_intensive: info.compute_intensive,
                    not_recomputable: routing[id.index()],
                    resident: !backward && n.op.is_resident(),
                    tangent: false,
                    rng_state: false,
                    mutated: false,
                },
                region: n.tag.map(|t| t.region),
                policy: n.tag.map(|t| t.policy),
                source: n.tag.map(|t| t.source),
                grad_of: joint.grad_of(id),
                shape: Some(shapes.share(&n.shape)),
                dtype: Some(StorageType::of(n.dtype)),
                label: Label::of(n.name().map(str::to_string), n.loc().map(|l| l.to_string())),
            }
        };
        // Large graphs are converted in two halves at once where there is a second CPU
        // (docs/performance.md, "Partition graph").
        let nodes = if g.len() >= 100_000 {
            crate::concurrent::collect_halves(g.len(), ShapeCache::default, |shapes, k| {
                node(shapes, NodeId::new(k as u32))
            })
        } else {
            let mut shapes = ShapeCache::default();
            g.ids().map(|id| node(&mut shapes, id)).collect()
        };
        let regions = g
            .regions()
            .iter()
            .enumerate()
            .map(|(k, r)| PRegion { key: k as u64, parent: r.parent, name: r.name.clone(), budget: r.budget })
            .collect();
        PGraph {
            nodes,
            regions,
            forward_outputs: joint.forward_outputs().to_vec(),
            released_outputs: Vec::new(),
            backward_outputs: joint.grads().iter().map(|&(_, g)| g).collect(),
        }
    }

    /// Relabels the forward nodes with the ids of the document they were read from (a
    /// `remat.graph`); backward nodes keep positional ids, moved past every integer id the
    /// document used so that ids stay unique.
    pub fn with_forward_ids(mut self, ids: &[DocId]) -> PGraph {
        let label = Relabel::new(ids);
        for (k, n) in self.nodes.iter_mut().enumerate() {
            n.id = label.id(k, n.backward);
        }
        self
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> &PNode {
        &self.nodes[id.index()]
    }

    /// All node ids, in order.
    pub fn ids(&self) -> impl DoubleEndedIterator<Item = NodeId> + ExactSizeIterator {
        (0..self.nodes.len() as u32).map(NodeId::new)
    }

    /// Checks the invariants of the module docs; the error names the first node at fault.
    pub fn validate(&self) -> Result<()> {
        self.validated().map(|_| ())
    }

    /// [`PGraph::validate`], with what its sweep saw that the partition would otherwise sweep
    /// every node again for (a sweep over nodes of this size reads all of their memory).
    pub(crate) fn validated(&self) -> Result<Validated> {
        let (mut offload_tags, mut must_recompute_tags) = (false, false);
        let mut backward = Vec::with_capacity(self.len());
        let (mut bytes, mut flops) = (0u64, 0u64);
        for (i, n) in self.nodes.iter().enumerate() {
            let at = |m: String| Error::graph(format!("{}: {m}", self.describe(NodeId::from_index(i))));
            if let Some(&bad) = n.inputs.iter().find(|x| x.index() >= i) {
                return Err(at(format!("input {bad} does not precede it (a cycle or a dangling input)")));
            }
            // Phases of earlier nodes come from the table this sweep fills, not from the nodes
            // (in large graphs, a lookup per input would miss the cache each time).
            backward.push(n.backward);
            if !n.backward && n.inputs.iter().any(|x| backward[x.index()]) {
                return Err(at("a forward node reads a backward node".into()));
            }
            if let Some(r) = n.region.filter(|r| r.index() >= self.regions.len()) {
                return Err(at(format!("region index {} does not exist", r.raw())));
            }
            let grad_of_backward = |u: NodeId| {
                backward.get(u.index()).copied().unwrap_or_else(|| self.nodes.get(u.index()).is_none_or(|m| m.backward))
            };
            if let Some(u) = n.grad_of.filter(|&u| grad_of_backward(u)) {
                return Err(at(format!("grad_of {u} is not a forward node")));
            }
            offload_tags |= !n.backward && matches!(n.policy, Some(Policy::MustOffload | Policy::PreferOffload));
            must_recompute_tags |= !n.backward && n.policy == Some(Policy::MustRecompute);
            bytes = bytes.checked_add(n.bytes).ok_or_else(|| at("the graph's bytes add up past 2^64".into()))?;
            flops = flops.checked_add(n.flops).ok_or_else(|| at("the graph's FLOPs add up past 2^64".into()))?;
        }
        for (r, region) in self.regions.iter().enumerate() {
            if region.parent.is_some_and(|p| p.index() >= r) {
                return Err(Error::graph(format!(
                    "region {}: its parent must come before it",
                    self.region_label(RegionId::from_index(r))
                )));
            }
        }
        for &o in self.forward_outputs.iter().chain(&self.released_outputs).chain(&self.backward_outputs) {
            if o.index() >= self.len() {
                return Err(Error::graph(format!("output {o} is not a node")));
            }
        }
        self.check_released(&backward)?;
        Ok(Validated { offload_tags, must_recompute_tags, backward, bytes })
    }

    /// A released output is a forward node the caller could free: not an input or a parameter
    /// (held anyway), not also a held output.
    fn check_released(&self, backward: &[bool]) -> Result<()> {
        for &o in &self.released_outputs {
            let why = if backward[o.index()] {
                "it is a backward node; released outputs are forward outputs"
            } else if self.node(o).flags.resident {
                "it is an input or a parameter, which the caller holds anyway (list it in forward_outputs)"
            } else if self.forward_outputs.contains(&o) {
                "it is also in forward_outputs: an output is either held by the caller or released"
            } else {
                continue;
            };
            return Err(Error::graph(format!("{}: listed in released_outputs, but {why}", self.describe(o))));
        }
        Ok(())
    }

    /// For each node, whether a backward node reads it while it is a forward node.
    pub fn backward_reads(&self) -> Vec<bool> {
        // Each input's phase is looked up in a compact table, not in the node itself (nodes are
        // 136 bytes: in large graphs, each lookup would miss the cache).
        self.backward_reads_from(&self.nodes.iter().map(|n| n.backward).collect::<Vec<_>>())
    }

    /// [`PGraph::backward_reads`], given each node's phase (`backward[i]`: node `i` is a backward
    /// node).
    pub(crate) fn backward_reads_from(&self, backward: &[bool]) -> Vec<bool> {
        let mut reads = vec![false; self.nodes.len()];
        for (n, _) in self.nodes.iter().zip(backward).filter(|(_, &b)| b) {
            for &i in &n.inputs {
                if !backward[i.index()] {
                    reads[i.index()] = true;
                }
            }
        }
        reads
    }

    /// Whether region `inner` is `outer` or nested inside it.
    pub fn within(&self, mut inner: RegionId, outer: RegionId) -> bool {
        loop {
            if inner == outer {
                return true;
            }
            match self.regions.get(inner.index()).and_then(|r| r.parent) {
                Some(p) => inner = p,
                None => return false,
            }
        }
    }

    /// The nodes with these document ids, in order: a string id as written, else an integer id
    /// (`"12"` finds the string id `12` first, then the integer id 12). The error names the
    /// first id that names no node.
    pub fn find_ids<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> Result<Vec<NodeId>> {
        let mut by_id: rustc_hash::FxHashMap<&DocId, NodeId> = Default::default();
        for (k, n) in self.nodes.iter().enumerate() {
            by_id.entry(&n.id).or_insert(NodeId::from_index(k));
        }
        ids.into_iter()
            .map(|text| {
                let as_name = DocId::Name(text.into());
                let as_index = text.parse().ok().map(DocId::Index);
                by_id
                    .get(&as_name)
                    .or_else(|| as_index.as_ref().and_then(|i| by_id.get(i)))
                    .copied()
                    .ok_or_else(|| Error::config("id", format!("no node has the id {}", crate::text::quoted(text))))
            })
            .collect()
    }

    /// Which nodes are forward outputs (see [`PGraph::view_base`]).
    pub fn output_mask(&self) -> Vec<bool> {
        crate::id::marked(self.nodes.len(), &self.forward_outputs)
    }

    /// What node `i` is kept through: itself, or for a view the first ancestor along first
    /// inputs that is not a view or is a forward output (`output`: [`PGraph::output_mask`]) —
    /// the caller holds an output, views of it included.
    pub fn view_base(&self, i: NodeId, output: &[bool]) -> NodeId {
        let mut base = i;
        while self.node(base).flags.view && !output[base.index()] {
            match self.node(base).inputs.first() {
                Some(&b) => base = b,
                None => break,
            }
        }
        base
    }

    /// A short description of node `i` for reports and errors:
    /// `%12 (matmul "h" in ffn#0 at src/x.rs:3:5)`, or `"addmm_1" (aten.addmm.default ..)`.
    pub fn describe(&self, i: NodeId) -> String {
        let n = self.node(i);
        let mut s = format!("{} ({}", n.id, crate::text::shorten(&n.op, crate::text::CELL));
        if let Some(name) = n.name() {
            s += &format!(" {}", crate::text::quoted(name));
        }
        if let Some(r) = n.region {
            s += &format!(" in {}", self.region_label(r));
        }
        if let Some(loc) = n.loc() {
            s += &format!(" at {}", crate::text::shorten(loc, crate::text::CELL));
        }
        s + ")"
    }

    /// `ffn#3`: a region's function name and its document id.
    pub fn region_label(&self, r: RegionId) -> String {
        match self.regions.get(r.index()) {
            Some(region) => format!("{}#{}", crate::text::shorten(&region.name, crate::text::CELL), region.key),
            None => format!("region#{}", r.raw()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_shared_within_a_run_and_always_equal_what_was_asked() {
        let mut cache = ShapeCache::default();
        // Runs of equal shapes, a scalar among them, then more distinct shapes than the cache
        // holds, then the first again.
        let asked: Vec<Vec<usize>> = [vec![4, 8], vec![4, 8], vec![], vec![8, 8], vec![4, 8], vec![]]
            .into_iter()
            .chain((1..=6).map(|k| vec![k, usize::MAX - k]))
            .chain([vec![4, 8], vec![4, 8]])
            .collect();
        let given: Vec<Arc<[usize]>> = asked.iter().map(|s| cache.share(s)).collect();
        for (a, g) in asked.iter().zip(&given) {
            assert_eq!(&g[..], &a[..]);
        }
        // Recent equal shapes are one block; the first shape, pushed out by six others, is a new
        // one when it comes back (and then shared again).
        assert!(Arc::ptr_eq(&given[0], &given[1]) && Arc::ptr_eq(&given[0], &given[4]));
        assert!(Arc::ptr_eq(&given[2], &given[5]));
        assert!(!Arc::ptr_eq(&given[0], &given[12]) && Arc::ptr_eq(&given[12], &given[13]));
    }

    /// `validate` looks a node's phase up only past the forward prefix it has seen: each check
    /// must still catch a backward node wherever it sits — after a forward node that reads it or
    /// names it as `grad_of`, before one, or the node itself.
    #[test]
    fn backward_nodes_are_found_wherever_they_sit() {
        // Nodes by phase (true: backward), inputs, grad_of.
        type Spec<'a> = &'a [(bool, &'a [u32], Option<u32>)];
        let graph = |spec: Spec| PGraph {
            nodes: spec
                .iter()
                .enumerate()
                .map(|(k, &(backward, inputs, grad_of))| PNode {
                    grad_of: grad_of.map(NodeId::new),
                    ..PNode::new(k as u64, "op", inputs, backward, 4)
                })
                .collect(),
            ..PGraph::default()
        };
        let error = |spec: Spec| graph(spec).validate().err().map(|e| e.to_string()).unwrap_or_default();
        let reads = "a forward node reads a backward node";
        // Fine: backward nodes after the forward ones, or between them, read and named by none.
        assert_eq!(error(&[(false, &[], None), (true, &[0], Some(0)), (true, &[1], Some(0))]), "");
        assert_eq!(error(&[(false, &[], None), (true, &[0], Some(0)), (false, &[0], None)]), "");
        // A forward node reading a backward node: right after it, and far past the first one.
        assert!(error(&[(false, &[], None), (true, &[0], None), (false, &[1], None)]).contains(reads));
        let far: Spec =
            &[(false, &[], None), (true, &[0], None), (false, &[0], None), (true, &[2], None), (false, &[3], None)];
        assert!(error(far).contains(reads));
        // grad_of naming a backward node: an earlier one, a later one (from a forward node or
        // from a backward one), or the node itself.
        let not_forward = "is not a forward node";
        assert!(error(&[(false, &[], None), (true, &[0], None), (true, &[1], Some(1))]).contains(not_forward));
        assert!(error(&[(false, &[], Some(1)), (true, &[0], None)]).contains(not_forward));
        assert!(error(&[(false, &[], None), (true, &[0], Some(2)), (true, &[1], None)]).contains(not_forward));
        assert!(error(&[(false, &[], None), (true, &[0], Some(1))]).contains(not_forward));
        assert!(error(&[(false, &[], None), (true, &[0], Some(9))]).contains(not_forward));
    }
}
