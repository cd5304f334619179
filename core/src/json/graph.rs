//! `remat.graph` v1: a tagged forward graph of catalog ops.

use super::fields::IdRef;
use super::{at, attrs, region_docs, spaced, top_error, Ids, RegionDoc, Regions};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{Graph, Inputs, Label, LeafNames, Node, NodeId, Region, RegionId, Shape, SrcLoc, Tag};
use crate::op::{Meta, Op, OpKind};
use crate::partition::DocId;
use crate::policy::{Policy, PolicySource};
use crate::shape::fmt_shape;
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::sync::Mutex;

/// The top-level fields of a document.
const TOP: [&str; 5] = ["format", "version", "regions", "nodes", "outputs"];
const FORMAT: &str = "remat.graph";

/// The fields of a node, for "did you mean" on unknown ones.
const FIELDS: [&str; 11] =
    ["id", "op", "inputs", "attrs", "shape", "dtype", "region", "policy", "source", "name", "loc"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeIn<'a> {
    #[serde(borrow)]
    id: IdRef<'a>,
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(default, borrow)]
    inputs: SmallVec<[IdRef<'a>; 3]>,
    #[serde(default, deserialize_with = "boxed")]
    attrs: Option<Box<Map<String, Value>>>,
    #[serde(default)]
    shape: Option<SmallVec<[u64; 4]>>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    dtype: Option<Cow<'a, str>>,
    #[serde(default)]
    region: Option<u64>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    policy: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    source: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    loc: Option<Cow<'a, str>>,
}

#[derive(Serialize)]
struct NodeOut<'a> {
    id: u32,
    op: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<u32>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    attrs: Map<String, Value>,
    shape: &'a [usize],
    dtype: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loc: Option<String>,
}

/// Reads a `remat.graph`, returning the graph and each node's document id.
pub(super) fn read<'a>(top: &super::Top<'a>) -> Result<(Graph, Vec<DocId>)> {
    top.only(FORMAT, &TOP)?;
    let region_docs: Vec<RegionDoc> = top.get(FORMAT, "regions")?.unwrap_or_default();
    let raw_nodes: &'a str = top.need_raw(FORMAT, "nodes")?;
    let outputs: Vec<IdRef<'a>> = top.need(FORMAT, "outputs")?;
    let mut ids = Ids::for_text(raw_nodes.len());
    let mut regions = Regions::new(region_docs)?;
    let mut doc_ids = Vec::with_capacity(raw_nodes.len() / 60);
    // Names of inputs and parameters are checked as their nodes are read, on the thread that
    // builds the graph (which waits for the parser anyway), not in a pass after.
    let mut leaf_names = LeafNames::default();
    let mut g = Graph::with_capacity(raw_nodes.len() / 60);
    // One pass: each node is checked and stored as it is parsed; the first error in list order
    // stops it. Ahead, on a second thread, each node is parsed, its ids resolved and what it
    // says read (op, attributes, dtype, shape); shape inference needs the nodes before it, so
    // the rest is done in order on this one. Regions get their graph ids in the order the pass
    // numbers them, so they are added after it.
    super::fields::each_node_pipelined(
        raw_nodes,
        FORMAT,
        &FIELDS,
        |k, d: NodeIn<'a>| {
            let id = d.id.owned();
            ids.define(&d.id, k).map_err(|m| at(&id, &d.op, m))?;
            let inputs = d
                .inputs
                .iter()
                .map(|i| ids.resolve(i, |x| super::listed_in(raw_nodes, x), k).map(NodeId::new))
                .collect::<std::result::Result<Inputs, _>>()
                .map_err(|m| at(&id, &d.op, m))?;
            let region = d.region.map(|r| regions.get(r));
            Prepared::of(k, id, inputs, region, d)
        },
        |k, p: Prepared<'a>| {
            let doc_name = p.rest.name.clone();
            let (node, id) = node(&g, p)?;
            // An input or parameter without a name in the document is named for its id.
            let name = doc_name.or_else(|| node.name().map(|n| Cow::Owned(n.to_string())));
            g.push(node);
            if let Some(name) = name {
                leaf_names.check(&g, NodeId::new(k as u32), name).map_err(|e| match e {
                    Error::Node { op, message, .. } => at(&id, op, message),
                    other => other,
                })?;
            }
            doc_ids.push(id);
            Ok(())
        },
    )?;
    for r in &regions.parts {
        g.add_region(Region { parent: r.parent, name: r.name.clone(), spec: None, budget: r.budget });
    }
    if outputs.is_empty() {
        return Err(top_error("`outputs` is empty: the first output is the scalar loss".into()));
    }
    let outputs = outputs
        .iter()
        .map(|o| ids.resolve(o, |x| super::listed_in(raw_nodes, x), usize::MAX).map(NodeId::new))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|m| top_error(format!("outputs: {m}")))?;
    let loss = g.node(outputs[0]);
    if crate::shape::checked_numel(&loss.shape) != Some(1) || !loss.dtype.is_float() {
        let message = format!(
            "the first output is the loss and must be one floating value, got {} {}",
            fmt_shape(&loss.shape),
            loss.dtype
        );
        return Err(at(&doc_ids[outputs[0].index()], loss.op.name(), message));
    }
    g.set_outputs(outputs);
    // Each node was checked as it was read: what is left is what no single node shows.
    g.mark_valid().map_err(|e| match e {
        Error::Node { node, op, message } => at(&doc_ids[node.index()], op, message),
        other => top_error(other.to_string()),
    })?;
    Ok((g, doc_ids))
}

/// A node's attributes, boxed: most nodes have none, and a node is moved several times between
/// the parser and the graph (inline, the map was 72 of its 400 bytes; see [`NodeIn`]).
fn boxed<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<Box<Map<String, Value>>>, D::Error> {
    Map::deserialize(d).map(|map| Some(Box::new(map)))
}

/// The attributes of a node without any.
static NO_ATTRS: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

/// A node as read ahead of the graph ([`Prepared::of`]): its ids resolved, and what it says
/// that needs no other node read.
struct Prepared<'a> {
    id: DocId,
    inputs: Inputs,
    region: Option<RegionId>,
    kind: OpKind,
    op: Op,
    dtype: Option<DType>,
    shape: Option<Shape>,
    rest: Rest<'a>,
}

/// The fields of a node read once the graph before it is known.
struct Rest<'a> {
    op: Cow<'a, str>,
    policy: Option<Cow<'a, str>>,
    source: Option<Cow<'a, str>>,
    name: Option<Cow<'a, str>>,
    loc: Option<Cow<'a, str>>,
}

impl<'a> Prepared<'a> {
    /// Reads node `k` (document id `id`) as far as it can be read alone: its op, attributes,
    /// dtype and shape, checked in that order (the first checks [`node`] makes).
    fn of(k: usize, id: DocId, inputs: Inputs, region: Option<RegionId>, d: NodeIn<'a>) -> Result<Prepared<'a>> {
        let err = |m: String| super::at_named(&id, &d.op, d.name.as_deref(), m);
        let kind = op_kind(&d.op).map_err(&err)?;
        let op = attrs::read(kind, d.attrs.as_deref().unwrap_or(&NO_ATTRS), k as u32).map_err(&err)?;
        let dtype =
            d.dtype.as_deref().map(super::parse_dtype).transpose().map_err(|m| err(format!("field \"dtype\": {m}")))?;
        let shape = d.shape.as_deref().map(super::parse_shape).transpose().map_err(&err)?;
        let rest = Rest { op: d.op, policy: d.policy, source: d.source, name: d.name, loc: d.loc };
        Ok(Prepared { id, inputs, region, kind, op, dtype, shape, rest })
    }
}

/// A node as [`Prepared::of`] read it, checked against the graph so far; and its document id.
fn node(g: &Graph, p: Prepared<'_>) -> Result<(Node, DocId)> {
    let Prepared { id, inputs, region, kind, op, dtype, shape, rest: d } = p;
    let err = |m: String| super::at_named(&id, &d.op, d.name.as_deref(), m);
    let (shape, dtype) = if kind.info().leaf {
        if !inputs.is_empty() {
            return Err(err(format!("{kind} takes no inputs")));
        }
        match (shape, dtype) {
            (Some(s), Some(t)) => (s, t),
            _ => return Err(err(format!("{kind} needs `shape` and `dtype`"))),
        }
    } else {
        let metas: SmallVec<[Meta<'_>; 4]> = inputs.iter().map(|&i| g.node(i).meta()).collect();
        let (inferred, out) = op.infer(&metas).map_err(&err)?;
        if shape.as_ref().is_some_and(|s| s[..] != inferred[..]) || dtype.is_some_and(|t| t != out) {
            let declared: Vec<String> =
                [shape.as_deref().map(fmt_shape), dtype.map(|t| t.to_string())].into_iter().flatten().collect();
            let declared = declared.join(" ");
            return Err(err(format!("declared {declared} but the op produces {} {out}", fmt_shape(&inferred))));
        }
        (inferred, out)
    };
    if crate::shape::checked_bytes(&shape, dtype.size()).is_none() {
        return Err(err(format!("{} {dtype} is more than 2^64 bytes", fmt_shape(&shape))));
    }
    let tag = tag_parts(region, d.policy.as_deref(), d.source.as_deref()).map_err(&err)?;
    let tag = tag.map(|(region, policy, source)| Tag { region, policy, source });
    if kind.info().leaf && tag.is_some_and(|t| t.policy == crate::policy::Policy::MustRecompute) {
        return Err(err(format!(
            "must_recompute on a {kind}: inputs, parameters and constants are resident, not recomputed"
        )));
    }
    let loc = d.loc.as_deref().map(parse_loc).transpose().map_err(&err)?;
    let op = attrs::shape_data(op, &shape, dtype).map_err(&err)?;
    // Inputs and parameters are fed and saved by name: one without is named by its id.
    let name = match (d.name, &op) {
        (Some(name), _) => Some(name.into_owned()),
        (None, Op::Input | Op::Param { .. }) => Some(match &id {
            DocId::Name(s) => s.to_string(),
            DocId::Index(i) => format!("{}_{i}", op.name()),
        }),
        (None, _) => None,
    };
    Ok((Node { op, inputs, shape, dtype, tag, label: Label::of(name, loc) }, id))
}

/// The tag fields of a node: policy (with its source) and region go together.
fn tag_parts(
    region: Option<RegionId>,
    policy: Option<&str>,
    source: Option<&str>,
) -> std::result::Result<Option<(RegionId, Policy, PolicySource)>, String> {
    match (region, policy) {
        (None, None) if source.is_none() => Ok(None),
        (None, None) => Err("`source` describes a policy, but the node has none".into()),
        (Some(r), Some(p)) => {
            let source = source.map_or(Ok(PolicySource::Explicit), super::parse_source)?;
            Ok(Some((r, super::parse_policy(p)?, source)))
        }
        (Some(_), None) => Err("a node with a `region` needs a `policy` (tags carry both)".into()),
        (None, Some(_)) => Err("a node with a `policy` needs a `region` (tags carry both)".into()),
    }
}

/// A public catalog kind, or an error suggesting the nearest name.
fn op_kind(name: &str) -> std::result::Result<OpKind, String> {
    match OpKind::from_name(name) {
        Some(kind) if kind.info().public => Ok(kind),
        Some(_) => {
            Err(format!("`{name}` is an internal op of derived backward graphs; a remat.graph names public ops"))
        }
        None => {
            let shown = crate::text::quoted(name);
            Err(match remat_catalog::suggest(name) {
                Some(s) => format!("unknown op {shown} (did you mean `{s}`?)"),
                None => format!("unknown op {shown}"),
            })
        }
    }
}

/// Files named in `loc` fields, leaked once each ([`SrcLoc`] holds `&'static str`).
static FILES: Mutex<Option<FxHashSet<&'static str>>> = Mutex::new(None);

fn intern(file: &str) -> &'static str {
    let mut files = FILES.lock().unwrap_or_else(|e| e.into_inner());
    let files = files.get_or_insert_with(FxHashSet::default);
    if let Some(f) = files.get(file) {
        return f;
    }
    let leaked: &'static str = Box::leak(file.to_string().into_boxed_str());
    files.insert(leaked);
    leaked
}

/// `file:line:column`.
fn parse_loc(text: &str) -> std::result::Result<SrcLoc, String> {
    let mut parts = text.rsplitn(3, ':');
    let (column, line, file) = (parts.next(), parts.next(), parts.next());
    match (file, line.and_then(|l| l.parse().ok()), column.and_then(|c| c.parse().ok())) {
        (Some(file), Some(line), Some(column)) => Ok(SrcLoc { file: intern(file), line, column }),
        _ => Err(format!("`loc` must be file:line:column, got {}", crate::text::quoted(text))),
    }
}

pub(super) fn to_text(g: &Graph) -> String {
    let regions = region_docs(
        g.regions()
            .iter()
            .enumerate()
            .map(|(k, r)| (k as u64, r.parent.map(|p| p.raw() as u64), r.name.as_str(), r.budget)),
    );
    let nodes = g.ids().map(|id| {
        let n = g.node(id);
        spaced(&NodeOut {
            id: id.raw(),
            op: n.op.name(),
            inputs: n.inputs.iter().map(|i| i.raw()).collect(),
            attrs: attrs::write(&n.op, id.raw()),
            shape: &n.shape,
            dtype: n.dtype.name(),
            region: n.tag.map(|t| t.region.raw()),
            policy: n.tag.map(|t| t.policy.name()),
            source: n.tag.map(|t| t.source).filter(|s| *s != PolicySource::Explicit).map(PolicySource::name),
            name: n.name(),
            loc: n.loc().map(|l| l.to_string()),
        })
    });
    let mut lists = Vec::new();
    if !regions.is_empty() {
        lists.push(("regions", regions.iter().map(spaced).collect()));
    }
    lists.push(("nodes", nodes.collect()));
    let outputs: Vec<u32> = g.outputs().iter().map(|o| o.raw()).collect();
    super::layout(super::GRAPH_FORMAT, lists, vec![("outputs", spaced(&outputs))])
}
