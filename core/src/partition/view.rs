//! What the partitioner sees of a joint graph: bytes, FLOPs, flags and tags per node — no
//! kernels. Built from a traced [`JointGraph`] or read from a `remat.joint` document, so graphs
//! exported from other frameworks are partitioned by the same code.

use crate::autodiff::JointGraph;
use crate::dtype::DType;
use crate::op::Op;
use crate::plan::node_flops;
use crate::policy::{Policy, PolicySource};

/// Properties of a node that constrain how it may be kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// A view: never saved itself; its base is saved and the view replayed.
    pub view: bool,
    /// Draws random numbers; recomputable only because the generator replays exactly.
    pub random: bool,
    /// Costly to recompute (GEMMs): min-cut does not recompute it unless tagged.
    pub compute_intensive: bool,
    /// Cannot be recomputed at all (a side effect, a random op without replay).
    pub not_recomputable: bool,
    /// A graph input or parameter: resident anyway, free to keep.
    pub resident: bool,
    /// A backward-only input (a tangent) in imported graphs.
    pub tangent: bool,
}

/// One node as the partitioner sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PNode {
    /// The op's name (a catalog name for traced graphs, any string for imported ones).
    pub op: String,
    /// Input nodes (smaller indices).
    pub inputs: Vec<u32>,
    /// Whether the node belongs to the backward pass.
    pub backward: bool,
    /// Bytes of its value.
    pub bytes: u64,
    /// FLOPs to compute it once.
    pub flops: u64,
    /// Constraints.
    pub flags: Flags,
    /// Innermost region instance, if recorded inside one.
    pub region: Option<u32>,
    /// The policy of its tag, if any.
    pub policy: Option<Policy>,
    /// Which rule gave the policy.
    pub source: Option<PolicySource>,
    /// Shape, when known.
    pub shape: Option<Vec<usize>>,
    /// Dtype, when known.
    pub dtype: Option<DType>,
    /// The value's name (`.name(..)`, or an input's / parameter's name).
    pub name: Option<String>,
    /// Source location of the user's code, when known.
    pub loc: Option<String>,
}

/// A region instance as the partitioner sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PRegion {
    /// Enclosing instance.
    pub parent: Option<u32>,
    /// Function (or imported) name.
    pub name: String,
    /// Its own budget fraction (`#[checkpoint(.., budget = f)]`).
    pub budget: Option<f64>,
}

/// A joint graph for partitioning: nodes in topological order, forward and backward.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PGraph {
    /// Nodes, inputs before users.
    pub nodes: Vec<PNode>,
    /// Region instances, parents before children.
    pub regions: Vec<PRegion>,
    /// Forward outputs (the caller holds them): never recomputed.
    pub forward_outputs: Vec<u32>,
    /// Backward outputs (gradients).
    pub backward_outputs: Vec<u32>,
}

impl PGraph {
    /// The partition view of a traced joint graph.
    pub fn from_joint(joint: &JointGraph) -> PGraph {
        let g = joint.graph();
        let nodes = g
            .ids()
            .map(|id| {
                let n = g.node(id);
                let info = n.op.info();
                PNode {
                    op: n.op.name().to_string(),
                    inputs: n.inputs.iter().map(|i| i.0).collect(),
                    backward: !joint.is_forward(id),
                    bytes: n.bytes() as u64,
                    flops: node_flops(g, id),
                    flags: Flags {
                        view: info.view,
                        random: info.random,
                        compute_intensive: info.compute_intensive,
                        not_recomputable: false,
                        resident: matches!(n.op, Op::Input | Op::Param { .. }),
                        tangent: false,
                    },
                    region: n.tag.map(|t| t.region.0),
                    policy: n.tag.map(|t| t.policy),
                    source: n.tag.map(|t| t.source),
                    shape: Some(n.shape.clone()),
                    dtype: Some(n.dtype),
                    name: n.name.clone(),
                    loc: n.loc.map(|l| l.to_string()),
                }
            })
            .collect();
        let regions = g
            .regions()
            .iter()
            .map(|r| PRegion { parent: r.parent.map(|p| p.0), name: r.name.clone(), budget: r.budget })
            .collect();
        PGraph {
            nodes,
            regions,
            forward_outputs: joint.forward_outputs().iter().map(|i| i.0).collect(),
            backward_outputs: joint.grads().iter().map(|&(_, g)| g.0).collect(),
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// For each node, whether a backward node reads it while it is a forward node.
    pub fn backward_reads(&self) -> Vec<bool> {
        let mut reads = vec![false; self.nodes.len()];
        for n in self.nodes.iter().filter(|n| n.backward) {
            for &i in &n.inputs {
                if !self.nodes[i as usize].backward {
                    reads[i as usize] = true;
                }
            }
        }
        reads
    }

    /// For each forward node, the region boundary it crosses, if any: a forward user sits in a
    /// different innermost region instance (or outside any). Returns the region crossed (the
    /// producer's, or else the user's).
    pub fn boundaries(&self) -> Vec<Option<u32>> {
        let mut crossing = vec![None; self.nodes.len()];
        for n in self.nodes.iter().filter(|n| !n.backward) {
            for &i in &n.inputs {
                let producer = &self.nodes[i as usize];
                if producer.region != n.region && !producer.flags.resident {
                    crossing[i as usize] = crossing[i as usize].or(producer.region).or(n.region);
                }
            }
        }
        crossing
    }

    /// A short description of node `i` for reports and errors: `%12 (matmul "h" at src/x.rs:3:5)`.
    pub fn describe(&self, i: u32) -> String {
        let n = &self.nodes[i as usize];
        let mut s = format!("%{i} ({}", n.op);
        if let Some(name) = &n.name {
            s += &format!(" \"{name}\"");
        }
        if let Some(r) = n.region {
            s += &format!(" in {}", self.region_label(r));
        }
        if let Some(loc) = &n.loc {
            s += &format!(" at {loc}");
        }
        s + ")"
    }

    /// `ffn#3`: a region's function name and instance.
    pub fn region_label(&self, r: u32) -> String {
        match self.regions.get(r as usize) {
            Some(region) => format!("{}#{r}", region.name),
            None => format!("region#{r}"),
        }
    }
}
