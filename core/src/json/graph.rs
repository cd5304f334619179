//! `remat.graph` v1: a tagged forward graph of catalog ops.

use super::{at, attrs, node_doc, region_docs, regions, spaced, tag_parts, top, RegionDoc};
use crate::error::{Error, Result};
use crate::graph::{Graph, Node, NodeId, Region, RegionId, SrcLoc, Tag};
use crate::op::{Meta, OpKind};
use crate::shape::{fmt_shape, numel};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Mutex;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphDoc {
    #[allow(dead_code)]
    format: String,
    #[allow(dead_code)]
    version: u32,
    #[serde(default)]
    regions: Vec<RegionDoc>,
    nodes: Vec<Value>,
    outputs: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeDoc {
    id: u32,
    op: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<u32>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    attrs: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shape: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dtype: Option<String>,
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

pub(super) fn from_value(value: Value) -> Result<Graph> {
    let doc: GraphDoc = serde_json::from_value(value).map_err(|e| top(format!("remat.graph: {e}")))?;
    let n = doc.nodes.len();
    let mut nodes = Vec::with_capacity(n);
    for (k, v) in doc.nodes.into_iter().enumerate() {
        nodes.push(node_doc::<NodeDoc>(v, k)?);
    }
    let used = nodes.iter().filter_map(|d| d.region.map(|r| (d.id, r, d.op.clone())));
    let regions = regions(doc.regions, used, n)?;
    let mut g = Graph::new();
    for (parent, name, budget) in regions {
        g.add_region(Region { parent: parent.map(RegionId), name, spec: None, budget });
    }
    for (k, d) in nodes.into_iter().enumerate() {
        let node = node(&g, k, n, d)?;
        g.push(node);
    }
    if doc.outputs.is_empty() {
        return Err(top("`outputs` is empty: the first output is the scalar loss".into()));
    }
    for &o in &doc.outputs {
        if o as usize >= n {
            return Err(top(format!("output {o} is not a node (the graph has {n})")));
        }
    }
    let loss = g.node(NodeId(doc.outputs[0]));
    if numel(&loss.shape) != 1 || !loss.dtype.is_float() {
        let message = format!(
            "the first output is the loss and must be one floating value, got {} {}",
            fmt_shape(&loss.shape),
            loss.dtype
        );
        return Err(at(doc.outputs[0], loss.op.name(), message));
    }
    g.set_outputs(doc.outputs.into_iter().map(NodeId).collect());
    g.validate().map_err(|e| match e {
        Error::Node { node, op, message } => at(node.0, op, message),
        other => top(other.to_string()),
    })?;
    Ok(g)
}

/// Reads node `k` of `n`, checking it against the graph so far.
fn node(g: &Graph, k: usize, n: usize, d: NodeDoc) -> Result<Node> {
    let id = d.id;
    let err = |m: String| at(id, &d.op, m);
    if id as usize != k {
        return Err(err(format!("node ids must be 0, 1, 2, .. in order: expected {k} here")));
    }
    let kind = op_kind(&d.op).map_err(&err)?;
    for &i in &d.inputs {
        if i as usize >= n {
            return Err(err(format!("dangling input {i}: there is no node {i}")));
        }
        if i >= id {
            return Err(err(format!(
                "input {i} does not precede node {id} (nodes are in topological order: a cycle or a forward reference)"
            )));
        }
    }
    let op = attrs::read(kind, &d.attrs, id).map_err(&err)?;
    let dtype = d.dtype.as_deref().map(super::parse_dtype).transpose().map_err(&err)?;
    let (shape, dtype) = if kind.info().leaf {
        if !d.inputs.is_empty() {
            return Err(err(format!("{kind} takes no inputs")));
        }
        match (d.shape, dtype) {
            (Some(s), Some(t)) => (s, t),
            _ => return Err(err(format!("{kind} needs `shape` and `dtype`"))),
        }
    } else {
        let metas: Vec<Meta<'_>> = d.inputs.iter().map(|&i| g.node(NodeId(i)).meta()).collect();
        let (shape, out) = op.infer(&metas).map_err(&err)?;
        if d.shape.as_ref().is_some_and(|s| *s != shape) || dtype.is_some_and(|t| t != out) {
            let declared: Vec<String> =
                [d.shape.as_deref().map(fmt_shape), dtype.map(|t| t.to_string())].into_iter().flatten().collect();
            let declared = declared.join(" ");
            return Err(err(format!("declared {declared} but the op produces {} {out}", fmt_shape(&shape))));
        }
        (shape, out)
    };
    let tag = tag_parts(d.region, d.policy.as_deref(), d.source.as_deref()).map_err(&err)?;
    let tag = tag.map(|(region, policy, source)| Tag { region: RegionId(region), policy, source });
    if kind.info().leaf
        && kind != OpKind::Constant
        && tag.is_some_and(|t| t.policy == crate::policy::Policy::MustRecompute)
    {
        return Err(err(format!("must_recompute on a {kind}: inputs and parameters are resident, not recomputed")));
    }
    let loc = d.loc.as_deref().map(parse_loc).transpose().map_err(&err)?;
    let op = attrs::shape_data(op, &shape, dtype).map_err(&err)?;
    Ok(Node { op, inputs: d.inputs.into_iter().map(NodeId).collect(), shape, dtype, tag, name: d.name, loc })
}

/// A public catalog kind, or an error suggesting the nearest name.
fn op_kind(name: &str) -> std::result::Result<OpKind, String> {
    match OpKind::from_name(name) {
        Some(kind) if kind.info().public => Ok(kind),
        Some(_) => {
            Err(format!("`{name}` is an internal op of derived backward graphs; a remat.graph names public ops"))
        }
        None => Err(match remat_catalog::suggest(name) {
            Some(s) => format!("unknown op `{name}` (did you mean `{s}`?)"),
            None => format!("unknown op `{name}`"),
        }),
    }
}

/// Files named in `loc` fields, leaked once each ([`SrcLoc`] holds `&'static str`).
static FILES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

fn intern(file: &str) -> &'static str {
    let mut files = FILES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = files.iter().find(|f| **f == file) {
        return f;
    }
    let leaked: &'static str = Box::leak(file.to_string().into_boxed_str());
    files.push(leaked);
    leaked
}

/// `file:line:column`.
fn parse_loc(text: &str) -> std::result::Result<SrcLoc, String> {
    let mut parts = text.rsplitn(3, ':');
    let (column, line, file) = (parts.next(), parts.next(), parts.next());
    match (file, line.and_then(|l| l.parse().ok()), column.and_then(|c| c.parse().ok())) {
        (Some(file), Some(line), Some(column)) => Ok(SrcLoc { file: intern(file), line, column }),
        _ => Err(format!("`loc` must be file:line:column, got `{text}`")),
    }
}

pub(super) fn to_text(g: &Graph) -> String {
    let regions = region_docs(g.regions().iter().map(|r| (r.parent.map(|p| p.0), r.name.clone(), r.budget)));
    let nodes = g.ids().map(|id| {
        let n = g.node(id);
        NodeDoc {
            id: id.0,
            op: n.op.name().to_string(),
            inputs: n.inputs.iter().map(|i| i.0).collect(),
            attrs: attrs::write(&n.op, id.0),
            shape: Some(n.shape.clone()),
            dtype: Some(n.dtype.name().to_string()),
            region: n.tag.map(|t| t.region.0),
            policy: n.tag.map(|t| t.policy.name().to_string()),
            source: n
                .tag
                .map(|t| t.source)
                .filter(|s| *s != crate::policy::PolicySource::Explicit)
                .map(|s| s.name().to_string()),
            name: n.name.clone(),
            loc: n.loc.map(|l| l.to_string()),
        }
    });
    let mut lists = Vec::new();
    if !regions.is_empty() {
        lists.push(("regions", regions.iter().map(spaced).collect()));
    }
    lists.push(("nodes", nodes.map(|d| spaced(&d)).collect()));
    let outputs: Vec<u32> = g.outputs().iter().map(|o| o.0).collect();
    super::layout(super::GRAPH_FORMAT, &lists, &[("outputs", spaced(&outputs))])
}
