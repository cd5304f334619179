//! `remat.joint` v1: an already-joint graph of opaque ops, for partitioning only.

use super::{at, node_doc, region_docs, regions, spaced, top, RegionDoc};
use crate::dtype::DType;
use crate::error::Result;
use crate::partition::{Flags, PGraph, PNode, PRegion};
use crate::policy::PolicySource;
use crate::shape::numel;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JointDoc {
    #[allow(dead_code)]
    format: String,
    #[allow(dead_code)]
    version: u32,
    #[serde(default)]
    regions: Vec<RegionDoc>,
    nodes: Vec<Value>,
    forward_outputs: Vec<u32>,
    #[serde(default)]
    backward_outputs: Vec<u32>,
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Phase {
    Forward,
    Backward,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeDoc {
    id: u32,
    op: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<u32>,
    phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shape: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dtype: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    flops: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    flags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    region: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    loc: Option<String>,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// The flag names, in the order they are written.
const FLAGS: [&str; 6] = ["view", "random", "compute_intensive", "not_recomputable", "resident", "tangent"];

/// Ops that are resident without the `resident` flag (as for traced graphs).
fn resident_op(op: &str) -> bool {
    op == "input" || op == "param"
}

fn flag_of<'a>(flags: &'a mut Flags, name: &str) -> Option<&'a mut bool> {
    Some(match name {
        "view" => &mut flags.view,
        "random" => &mut flags.random,
        "compute_intensive" => &mut flags.compute_intensive,
        "not_recomputable" => &mut flags.not_recomputable,
        "resident" => &mut flags.resident,
        "tangent" => &mut flags.tangent,
        _ => return None,
    })
}

pub(super) fn from_value(value: Value) -> Result<PGraph> {
    let doc: JointDoc = serde_json::from_value(value).map_err(|e| top(format!("remat.joint: {e}")))?;
    let n = doc.nodes.len();
    let mut docs = Vec::with_capacity(n);
    for (k, v) in doc.nodes.into_iter().enumerate() {
        docs.push(node_doc::<NodeDoc>(v, k)?);
    }
    let used = docs.iter().filter_map(|d| d.region.map(|r| (d.id, r, d.op.clone())));
    let regions = regions(doc.regions, used, n)?
        .into_iter()
        .map(|(parent, name, budget)| PRegion { parent, name, budget })
        .collect();
    let mut nodes: Vec<PNode> = Vec::with_capacity(n);
    for (k, d) in docs.into_iter().enumerate() {
        let node = node(&nodes, k, n, d)?;
        nodes.push(node);
    }
    for (what, list) in [("forward_outputs", &doc.forward_outputs), ("backward_outputs", &doc.backward_outputs)] {
        for &o in list.iter() {
            let Some(node) = nodes.get(o as usize) else {
                return Err(top(format!("{what}: {o} is not a node (the graph has {n})")));
            };
            if node.backward == (what == "forward_outputs") {
                let phase = if node.backward { "backward" } else { "forward" };
                return Err(at(o, &node.op, format!("listed in {what} but it is a {phase} node")));
            }
        }
    }
    Ok(PGraph { nodes, regions, forward_outputs: doc.forward_outputs, backward_outputs: doc.backward_outputs })
}

/// Reads node `k` of `n`, checking it against the nodes before it.
fn node(before: &[PNode], k: usize, n: usize, d: NodeDoc) -> Result<PNode> {
    let id = d.id;
    let err = |m: String| at(id, &d.op, m);
    if id as usize != k {
        return Err(err(format!("node ids must be 0, 1, 2, .. in order: expected {k} here")));
    }
    let backward = d.phase == Phase::Backward;
    for &i in &d.inputs {
        if i as usize >= n {
            return Err(err(format!("dangling input {i}: there is no node {i}")));
        }
        if i >= id {
            return Err(err(format!(
                "input {i} does not precede node {id} (nodes are in topological order: a cycle or a forward reference)"
            )));
        }
        if !backward && before[i as usize].backward {
            return Err(err(format!("a forward node cannot read backward node {i}")));
        }
    }
    let mut flags = Flags::default();
    for name in &d.flags {
        let Some(flag) = flag_of(&mut flags, name) else {
            let hint = remat_catalog::closest(name, FLAGS).map_or(String::new(), |c| format!("did you mean `{c}`? "));
            return Err(err(format!("unknown flag `{name}` ({hint}expected one of {})", FLAGS.join(", "))));
        };
        if std::mem::replace(flag, true) {
            return Err(err(format!("flag `{name}` listed twice")));
        }
    }
    flags.resident |= resident_op(&d.op) && !backward;
    if flags.resident && backward {
        return Err(err("a backward node cannot be resident".into()));
    }
    if !backward && d.inputs.is_empty() && !flags.resident && d.op != "constant" {
        return Err(err(
            "a forward node without inputs must be an `input`, a `param` or a `constant`, or carry the `resident` flag"
                .into(),
        ));
    }
    let dtype = d.dtype.as_deref().map(super::parse_dtype).transpose().map_err(&err)?;
    let bytes = match (d.bytes, &d.shape, dtype) {
        (Some(b), Some(s), Some(t)) if (numel(s) * t.size()) as u64 != b => {
            return Err(err(format!("bytes {b} disagree with {s:?} {t} ({} bytes)", numel(s) * t.size())));
        }
        (Some(b), _, _) => b,
        (None, Some(s), Some(t)) => (numel(s) * t.size()) as u64,
        (None, _, _) => return Err(err("needs `bytes`, or `shape` and `dtype`".into())),
    };
    // Unlike traced tags, region and policy are independent here, as in `PNode`.
    let policy = d.policy.as_deref().map(super::parse_policy).transpose().map_err(&err)?;
    let source = match (policy, d.source.as_deref()) {
        (None, None) => None,
        (None, Some(_)) => return Err(err("`source` describes a policy, but the node has none".into())),
        (Some(_), s) => Some(s.map_or(Ok(PolicySource::Explicit), super::parse_source).map_err(&err)?),
    };
    Ok(PNode {
        op: d.op,
        inputs: d.inputs,
        backward,
        bytes,
        flops: d.flops,
        flags,
        region: d.region,
        policy,
        source,
        shape: d.shape,
        dtype,
        name: d.name,
        loc: d.loc,
    })
}

pub(super) fn to_text(g: &PGraph) -> String {
    let regions = region_docs(g.regions.iter().map(|r| (r.parent, r.name.clone(), r.budget)));
    let nodes = g.nodes.iter().enumerate().map(|(i, n)| {
        let implied = n.shape.as_ref().zip(n.dtype).map(|(s, t)| (numel(s) * t.size()) as u64);
        let mut flags = Vec::new();
        let mut f = n.flags;
        f.resident &= !resident_op(&n.op) || n.backward;
        for name in FLAGS {
            if flag_of(&mut f, name).is_some_and(|b| *b) {
                flags.push(name.to_string());
            }
        }
        NodeDoc {
            id: i as u32,
            op: n.op.clone(),
            inputs: n.inputs.clone(),
            phase: if n.backward { Phase::Backward } else { Phase::Forward },
            bytes: (implied != Some(n.bytes)).then_some(n.bytes),
            shape: n.shape.clone(),
            dtype: n.dtype.map(|t| DType::name(t).to_string()),
            flops: n.flops,
            flags,
            region: n.region,
            policy: n.policy.map(|p| p.name().to_string()),
            source: n.policy.and(n.source).filter(|s| *s != PolicySource::Explicit).map(|s| s.name().to_string()),
            name: n.name.clone(),
            loc: n.loc.clone(),
        }
    });
    let mut lists = Vec::new();
    if !regions.is_empty() {
        lists.push(("regions", regions.iter().map(spaced).collect()));
    }
    lists.push(("nodes", nodes.map(|d| spaced(&d)).collect()));
    let tail = [("forward_outputs", spaced(&g.forward_outputs)), ("backward_outputs", spaced(&g.backward_outputs))];
    super::layout(super::JOINT_FORMAT, &lists, &tail)
}
