//! `remat.joint` v1: an already-joint graph of opaque ops, for partitioning only.

use super::fields::{self, IdRef};
use super::{at, region_docs, spaced, top_error, Ids, RegionDoc, Regions};
use crate::error::Result;
use crate::graph::{Label, NodeId};
use crate::partition::{value_bytes, DocId, Flags, PGraph, PNode, PRegion, ShapeCache, StorageType};
use crate::policy::{Policy, PolicySource};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::collections::HashMap;

/// The top-level fields of a document.
const TOP: [&str; 7] =
    ["format", "version", "regions", "nodes", "forward_outputs", "released_outputs", "backward_outputs"];
const FORMAT: &str = "remat.joint";

#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Phase {
    Forward,
    Backward,
}

/// The fields of a node, for "did you mean" on unknown ones.
const FIELDS: [&str; 17] = [
    "id",
    "op",
    "inputs",
    "phase",
    "bytes",
    "shape",
    "dtype",
    "flops",
    "flags",
    "region",
    "policy",
    "source",
    "grad_of",
    "name",
    "loc",
    "rng_state_bytes",
    "rng_state",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeIn<'a> {
    #[serde(borrow)]
    id: IdRef<'a>,
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(default, borrow)]
    inputs: SmallVec<[IdRef<'a>; 4]>,
    phase: Phase,
    #[serde(default)]
    bytes: Option<u64>,
    #[serde(default)]
    shape: Option<SmallVec<[u64; 4]>>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    dtype: Option<Cow<'a, str>>,
    #[serde(default)]
    flops: u64,
    #[serde(default, borrow)]
    flags: SmallVec<[Cow<'a, str>; 2]>,
    #[serde(default)]
    region: Option<u64>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    policy: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    source: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    grad_of: Option<IdRef<'a>>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    loc: Option<Cow<'a, str>>,
    #[serde(default)]
    rng_state_bytes: Option<u64>,
    #[serde(default, borrow, deserialize_with = "super::fields::borrowed")]
    rng_state: Option<Cow<'a, str>>,
}

#[derive(Serialize)]
struct NodeOut<'a> {
    id: serde_json::Value,
    op: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<serde_json::Value>,
    phase: Phase,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<&'a [usize]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dtype: Option<&'static str>,
    #[serde(skip_serializing_if = "is_zero")]
    flops: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    flags: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grad_of: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loc: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rng_state_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rng_state: Option<&'a str>,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// The flag names, in the order they are written.
const FLAGS: [&str; 7] = ["view", "random", "compute_intensive", "not_recomputable", "resident", "tangent", "mutated"];

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
        "mutated" => &mut flags.mutated,
        _ => return None,
    })
}

pub(super) fn read<'a>(top: &super::Top<'a>) -> Result<PGraph> {
    top.only(FORMAT, &TOP)?;
    let region_docs: Vec<RegionDoc> = top.get(FORMAT, "regions")?.unwrap_or_default();
    let raw_nodes: &'a str = top.need_raw(FORMAT, "nodes")?;
    let forward: Vec<IdRef<'a>> = top.need(FORMAT, "forward_outputs")?;
    let released: Vec<IdRef<'a>> = top.get(FORMAT, "released_outputs")?.unwrap_or_default();
    let backward: Vec<IdRef<'a>> = top.get(FORMAT, "backward_outputs")?.unwrap_or_default();
    let mut regions = Regions::new(region_docs)?;
    let mut placed = Placed {
        ids: Ids::for_text(raw_nodes.len()),
        raw_nodes,
        index_of: Vec::with_capacity(raw_nodes.len() / 120),
        regions: &mut regions,
    };
    let mut nodes: Vec<PNode> = Vec::with_capacity(raw_nodes.len() / 120);
    let mut shared_states: HashMap<String, NodeId> = HashMap::new();
    let mut shapes = ShapeCache::default();
    // One pass: each node is checked on its own as it is parsed (ahead, on a second thread),
    // then against the nodes before it, and stored.
    fields::each_node_pipelined(
        raw_nodes,
        FORMAT,
        &FIELDS,
        |_, d| describe(d, &mut shapes),
        |k, p: Parsed<'a>| {
            let state = match rng_state(&nodes, placed.regions, &shared_states, &p)? {
                State::None => None,
                State::Shared(s) => Some(s),
                State::New(s) => {
                    nodes.push(*s);
                    let s = NodeId::new(nodes.len() as u32 - 1);
                    if let Some(key) = &p.rng_state {
                        shared_states.insert(key.to_string(), s);
                    }
                    Some(s)
                }
            };
            let node = placed.place(&nodes, k, state, p)?;
            debug_assert!(
                node.inputs.iter().chain(&node.grad_of).all(|i| i.index() < nodes.len()),
                "resolve keeps ids before the node"
            );
            nodes.push(node);
            Ok(())
        },
    )?;
    let outputs = |what: &str, list: &[IdRef<'a>], backward: bool| -> Result<Vec<NodeId>> {
        let mut out = Vec::with_capacity(list.len());
        for o in list {
            let k = placed.resolve(o, usize::MAX).map_err(|m| top_error(format!("{what}: {m}")))?;
            let node = &nodes[k.index()];
            if node.backward != backward {
                let phase = if node.backward { "backward" } else { "forward" };
                return Err(at(&node.id, &node.op, format!("listed in {what} but it is a {phase} node")));
            }
            out.push(k);
        }
        Ok(out)
    };
    let forward_outputs = outputs("forward_outputs", &forward, false)?;
    let released_outputs = outputs("released_outputs", &released, false)?;
    let backward_outputs = outputs("backward_outputs", &backward, true)?;
    let regions = regions
        .parts
        .into_iter()
        .map(|r| PRegion { key: r.key, parent: r.parent, name: r.name, budget: r.budget })
        .collect();
    Ok(PGraph { nodes, regions, forward_outputs, released_outputs, backward_outputs })
}

/// The generator state a random node runs from: none, one the reader adds before it, or one an
/// earlier node with the same `rng_state` key ran from (the outputs of one multi-output draw).
enum State {
    None,
    // Boxed: nearly every node has no state, and the result of each is moved.
    New(Box<PNode>),
    Shared(NodeId),
}

/// The generator state a random node ran from, as the node the reader adds before it (its first
/// input): `rng_state_bytes` on a forward `random` node that is not a view. Nodes naming the
/// same `rng_state` share the state the first of them added (id `<key>:rng_state`).
fn rng_state(
    before: &[PNode],
    regions: &mut Regions,
    shared: &HashMap<String, NodeId>,
    p: &Parsed<'_>,
) -> Result<State> {
    let n = &p.node;
    let err = |m: String| super::at_named(&n.id, &n.op, n.name(), m);
    let Some(bytes) = p.rng_state_bytes else {
        return match &p.rng_state {
            Some(key) => Err(err(format!("field \"rng_state\" ({key:?}) needs \"rng_state_bytes\" beside it"))),
            None => Ok(State::None),
        };
    };
    let field = |m: &str| err(format!("field \"rng_state_bytes\": {m}"));
    if n.backward {
        return Err(field("only a forward node is replayed"));
    }
    if !n.flags.random || n.flags.view {
        return Err(field("only a random node that is not a view runs from a generator state"));
    }
    if let Some(&s) = p.rng_state.as_ref().and_then(|key| shared.get(key.as_ref())) {
        let state = &before[s.index()];
        if state.bytes != bytes {
            let key = p.rng_state.as_deref().unwrap_or_default();
            return Err(field(&format!(
                "{bytes}, but the generator state {key:?} it shares was given {} bytes",
                state.bytes
            )));
        }
        return Ok(State::Shared(s));
    }
    let label = p.rng_state.as_deref().map_or_else(|| n.id.label_raw(), str::to_string);
    let mut state = PNode::new(before.len() as u64, RNG_STATE_OP, &[], false, bytes);
    state.id = DocId::Name(format!("{label}{RNG_STATE_SUFFIX}").into());
    state.flags = Flags { not_recomputable: true, rng_state: true, ..Flags::default() };
    state.region = p.region.map(|r| regions.get(r));
    Ok(State::New(Box::new(state)))
}

/// The `rng_state` key to write on `user` for its generator state `state`: none when the state
/// is the user's own (`<user id>:rng_state`).
fn shared_state_key<'g>(state: &'g PNode, user: &PNode) -> Option<&'g str> {
    let DocId::Name(id) = &state.id else { return None };
    let key = id.strip_suffix(RNG_STATE_SUFFIX)?;
    (key != user.id.label_raw()).then_some(key)
}

/// The op and id suffix of the generator-state nodes the reader adds (`rand:rng_state`).
pub const RNG_STATE_OP: &str = "rng_state";
const RNG_STATE_SUFFIX: &str = ":rng_state";

/// A node as the parsing thread leaves it: checked on its own and built, but for the ids it
/// names (its inputs, `grad_of`) and its region, which need the nodes before it.
struct Parsed<'a> {
    node: PNode,
    id: IdRef<'a>,
    inputs: SmallVec<[IdRef<'a>; 4]>,
    grad_of: Option<IdRef<'a>>,
    region: Option<u64>,
    rng_state_bytes: Option<u64>,
    rng_state: Option<Cow<'a, str>>,
}

/// Checks node `d`'s own fields (everything but the nodes it names) and builds it. Needs nothing
/// of the graph so far, so it runs ahead on the parsing thread (its shape shared with recent
/// nodes' through `shapes`).
fn describe<'a>(d: NodeIn<'a>, shapes: &mut ShapeCache) -> Result<Parsed<'a>> {
    let id = d.id.owned();
    let op = d.op.as_ref();
    let err = |m: String| super::at_named(&id, op, d.name.as_deref(), m);
    let backward = d.phase == Phase::Backward;
    match &d.grad_of {
        Some(_) if !backward => return Err(err("field \"grad_of\": only backward nodes belong to a gradient".into())),
        Some(g) if *g == d.id => {
            return Err(err("field \"grad_of\": names the node itself; it names the forward node whose gradient this \
                 backward node computes part of"
                .into()))
        }
        _ => {}
    }
    let mut flags = Flags::default();
    for name in &d.flags {
        let Some(flag) = flag_of(&mut flags, name) else {
            return Err(err(format!("field \"flags\": {}", super::unknown("flag", name, &FLAGS))));
        };
        if std::mem::replace(flag, true) {
            return Err(err(format!("field \"flags\": flag \"{name}\" listed twice")));
        }
    }
    if backward && flags.resident {
        return Err(err("a backward node cannot be resident".into()));
    }
    flags.resident |= resident_op(op) && !backward;
    if flags.view && (flags.resident || flags.not_recomputable) {
        let other = if flags.resident { "resident" } else { "not_recomputable" };
        return Err(err(format!(
            "flags \"view\" and \"{other}\" contradict each other: a view is replayed from its base, never kept itself"
        )));
    }
    if flags.mutated && !flags.resident {
        return Err(err("flag \"mutated\": only an input or a parameter (a resident forward node) is mutated by the \
             forward"
            .into()));
    }
    if flags.view && d.inputs.is_empty() {
        return Err(err("a view needs an input (its base, inputs[0])".into()));
    }
    let dtype = match d.dtype.as_deref() {
        None => None,
        Some(name) => Some(StorageType::from_name(name).ok_or_else(|| {
            err(format!("field \"dtype\": {}", super::unknown("dtype", name, &StorageType::ALL.map(StorageType::name))))
        })?),
    };
    let shape = d.shape.as_deref().map(super::parse_shape).transpose().map_err(&err)?;
    let bytes = match (d.bytes, &shape, dtype) {
        (Some(b), Some(s), Some(t)) if t != StorageType::Bytes => {
            let implied = value_bytes(s, t).map_err(|m| err(format!("field \"shape\": {m}")))?;
            if implied != b {
                return Err(err(format!(
                    "field \"bytes\": {b} disagrees with {} {t} ({implied} bytes)",
                    crate::shape::fmt_shape(s)
                )));
            }
            b
        }
        (Some(b), _, _) => b,
        (None, Some(s), Some(t)) => value_bytes(s, t).map_err(|m| err(format!("field \"shape\": {m}")))?,
        (None, _, _) => return Err(err("needs \"bytes\", or \"shape\" and \"dtype\"".into())),
    };
    let policy =
        d.policy.as_deref().map(super::parse_policy).transpose().map_err(|m| err(format!("field \"policy\": {m}")))?;
    let source = match (policy, d.source.as_deref()) {
        (None, None) => None,
        (None, Some(_)) => return Err(err("field \"source\": describes a policy, but the node has none".into())),
        (Some(_), s) => Some(
            s.map_or(Ok(PolicySource::Explicit), super::parse_source)
                .map_err(|m| err(format!("field \"source\": {m}")))?,
        ),
    };
    if policy == Some(Policy::MustRecompute) && flags.resident {
        return Err(err(
            "must_recompute on a resident value (an input or a parameter): it is held, never recomputed".into()
        ));
    }
    let node = PNode {
        op: Cow::Owned(op.to_string()),
        // Room for the inputs and a generator state (past four, allocated here, on the parsing
        // thread).
        inputs: SmallVec::with_capacity(d.inputs.len() + d.rng_state_bytes.is_some() as usize),
        backward,
        bytes,
        flops: d.flops,
        flags,
        region: None,
        policy,
        source,
        grad_of: None,
        shape: shape.map(|s| shapes.share(&s)),
        dtype,
        label: Label::of(d.name.map(Cow::into_owned), d.loc.map(Cow::into_owned)),
        id,
    };
    Ok(Parsed {
        node,
        id: d.id,
        inputs: d.inputs,
        grad_of: d.grad_of,
        region: d.region,
        rng_state_bytes: d.rng_state_bytes,
        rng_state: d.rng_state,
    })
}

/// The ids the reader has seen, and where their nodes are in the graph.
struct Placed<'a, 'r> {
    ids: Ids<'a>,
    raw_nodes: &'a str,
    /// The graph index of the node at each list position (they differ after a generator state
    /// the reader adds).
    index_of: Vec<u32>,
    regions: &'r mut Regions,
}

impl<'a> Placed<'a, '_> {
    /// The graph index of the node `id` names, listed before position `here`.
    fn resolve(&self, id: &IdRef<'a>, here: usize) -> std::result::Result<NodeId, String> {
        let position = self.ids.resolve(id, |x| super::listed_in(self.raw_nodes, x), here)?;
        Ok(NodeId::new(self.index_of[position as usize]))
    }

    /// Places parsed node `k` in the graph after `before`: its id registered, its inputs (the
    /// generator state `state` first, where it has one) and `grad_of` resolved and checked
    /// against the nodes they name, its region numbered.
    fn place(&mut self, before: &[PNode], k: usize, state: Option<NodeId>, p: Parsed<'a>) -> Result<PNode> {
        let mut node = p.node;
        self.ids.define(&p.id, k).map_err(|m| at(&node.id, &node.op, m))?;
        self.index_of.push(before.len() as u32);
        let err = |n: &PNode, m: String| super::at_named(&n.id, &n.op, n.name(), m);
        node.inputs.extend(state);
        for id in &p.inputs {
            let input = self.resolve(id, k).map_err(|m| err(&node, m))?;
            if !node.backward && before[input.index()].backward {
                let other = before[input.index()].id.in_error();
                return Err(err(&node, format!("a forward node cannot read backward node {other}")));
            }
            node.inputs.push(input);
        }
        reads_mutated(before, &mut node)?;
        if let Some(id) = &p.grad_of {
            let g = self.resolve(id, k).map_err(|m| err(&node, format!("field \"grad_of\": {m}")))?;
            if before[g.index()].backward {
                let other = before[g.index()].id.in_error();
                return Err(err(&node, format!("field \"grad_of\": {other} is a backward node")));
            }
            node.grad_of = Some(g);
        }
        node.region = p.region.map(|r| self.regions.get(r));
        Ok(node)
    }
}

/// What reading a mutated input (flag `mutated`) makes of `node`: a view of it is mutated too
/// (replayed from it); another forward reader is `not_recomputable` (a recompute in the backward
/// would read the value after the mutation), so it is kept whenever the backward needs it; a
/// backward reader is refused (it would read the mutated value; PyTorch's eager autograd refuses
/// the same model).
fn reads_mutated(before: &[PNode], node: &mut PNode) -> Result<()> {
    let Some(&m) = node.inputs.iter().find(|&&i| before[i.index()].flags.mutated) else {
        return Ok(());
    };
    if node.backward {
        let other = before[m.index()].id.in_error();
        return Err(super::at_named(
            &node.id,
            &node.op,
            node.name(),
            format!(
                "reads {other}, which the forward mutates (flag \"mutated\"): the backward would see the value \
                 after the mutation"
            ),
        ));
    }
    if node.flags.view {
        node.flags.mutated |= node.inputs.first() == Some(&m);
    } else if !node.flags.resident {
        node.flags.not_recomputable = true;
    }
    Ok(())
}

pub(super) fn to_text(g: &PGraph) -> String {
    let regions = region_docs(
        g.regions.iter().map(|r| (r.key, r.parent.map(|p| g.regions[p.index()].key), r.name.as_str(), r.budget)),
    );
    let nodes = g.nodes.iter().filter(|n| !n.flags.rng_state).map(|n| {
        // A generator state the reader added goes back to being its op's `rng_state_bytes`.
        let state = n.inputs.first().map(|&s| g.node(s)).filter(|s| s.flags.rng_state);
        let inputs = &n.inputs[state.is_some() as usize..];
        let implied = n.shape.as_ref().zip(n.dtype).and_then(|(s, t)| value_bytes(s, t).ok());
        let mut flags = Vec::new();
        let mut f = n.flags;
        f.resident &= !resident_op(&n.op) || n.backward;
        // A view of a mutated input is mutated by the reader again.
        f.mutated &= !f.view;
        for name in FLAGS {
            if flag_of(&mut f, name).is_some_and(|b| *b) {
                flags.push(name);
            }
        }
        let node = NodeOut {
            id: n.id.to_json(),
            op: &n.op,
            inputs: inputs.iter().map(|&i| g.node(i).id.to_json()).collect(),
            phase: if n.backward { Phase::Backward } else { Phase::Forward },
            bytes: (implied != Some(n.bytes)).then_some(n.bytes),
            shape: n.shape.as_deref(),
            dtype: n.dtype.map(StorageType::name),
            flops: n.flops,
            flags,
            region: n.region.map(|r| g.regions[r.index()].key),
            policy: n.policy.map(Policy::name),
            source: n.policy.and(n.source).filter(|s| *s != PolicySource::Explicit).map(PolicySource::name),
            grad_of: n.grad_of.map(|u| g.node(u).id.to_json()),
            name: n.name(),
            loc: n.loc(),
            rng_state_bytes: state.map(|s| s.bytes),
            rng_state: state.and_then(|s| shared_state_key(s, n)),
        };
        spaced(&node)
    });
    let mut lists = Vec::new();
    if !regions.is_empty() {
        lists.push(("regions", regions.iter().map(spaced).collect()));
    }
    lists.push(("nodes", nodes.collect()));
    let ids = |list: &[NodeId]| spaced(&list.iter().map(|&i| g.node(i).id.to_json()).collect::<Vec<_>>());
    let mut tail = vec![("forward_outputs", ids(&g.forward_outputs))];
    if !g.released_outputs.is_empty() {
        tail.push(("released_outputs", ids(&g.released_outputs)));
    }
    tail.push(("backward_outputs", ids(&g.backward_outputs)));
    super::layout(super::JOINT_FORMAT, lists, tail)
}
