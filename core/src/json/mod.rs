//! JSON interchange: `remat.graph` (a tagged forward graph of catalog ops, which remat
//! differentiates) and `remat.joint` (an already-joint graph of opaque ops, which remat only
//! partitions), both version 1. The format is documented in `docs/graph-json.md`.
//!
//! Reading is strict: unknown fields are errors, unknown op names suggest the nearest catalog
//! name, and every error about a node names it (`node 3 (matmul): inner dimensions differ ..`).
//! Writing produces the canonical form (defaults omitted, one node a line), and reading what was
//! written gives the graph back: `read_graph(&write_graph(g))` equals `g` up to the compile-time
//! [`RegionSpec`](crate::RegionSpec) of traced regions, which no document can carry.
//!
//! ```
//! use remat_core::{json, zoo};
//!
//! let g = zoo::mlp(&zoo::MlpConfig { batch: 2, widths: vec![3, 4, 2] }).unwrap();
//! let text = json::write_graph(&g);
//! let back = json::read_graph(&text).unwrap();
//! assert_eq!(json::write_graph(&back), text);
//! ```

mod attrs;
mod graph;
mod joint;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::partition::PGraph;
use crate::policy::{Policy, PolicySource};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `format` of a forward-graph document.
pub const GRAPH_FORMAT: &str = "remat.graph";
/// The `format` of a joint-graph document.
pub const JOINT_FORMAT: &str = "remat.joint";
/// The document version this remat reads and writes.
pub const VERSION: u32 = 1;

/// A document of either format, as [`read`] found it.
#[derive(Clone, Debug)]
pub enum Document {
    /// A `remat.graph`: a forward graph to differentiate.
    Graph(Graph),
    /// A `remat.joint`: a joint graph to partition.
    Joint(PGraph),
}

/// Reads a document of either format, telling them apart by `format`.
pub fn read(text: &str) -> Result<Document> {
    let value = parse(text)?;
    match header(&value)? {
        Format::Graph => graph::from_value(value).map(Document::Graph),
        Format::Joint => joint::from_value(value).map(Document::Joint),
    }
}

/// Reads a `remat.graph` document.
pub fn read_graph(text: &str) -> Result<Graph> {
    let value = parse(text)?;
    match header(&value)? {
        Format::Graph => graph::from_value(value),
        Format::Joint => Err(top(format!("expected a {GRAPH_FORMAT} document, found {JOINT_FORMAT}"))),
    }
}

/// Reads a `remat.joint` document.
pub fn read_joint(text: &str) -> Result<PGraph> {
    let value = parse(text)?;
    match header(&value)? {
        Format::Joint => joint::from_value(value),
        Format::Graph => Err(top(format!("expected a {JOINT_FORMAT} document, found {GRAPH_FORMAT}"))),
    }
}

/// Writes `g` as a `remat.graph` document (canonical form, one node a line).
pub fn write_graph(g: &Graph) -> String {
    graph::to_text(g)
}

/// Writes `g` as a `remat.joint` document (canonical form, one node a line).
pub fn write_joint(g: &PGraph) -> String {
    joint::to_text(g)
}

enum Format {
    Graph,
    Joint,
}

fn parse(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| top(format!("invalid JSON: {e}")))
}

/// Checks `format` and `version`.
fn header(value: &Value) -> Result<Format> {
    let obj = value.as_object().ok_or_else(|| top("expected a JSON object at the top level".into()))?;
    let format = match obj.get("format") {
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(top("`format` must be a string".into())),
        None => return Err(top(format!("missing `format` (\"{GRAPH_FORMAT}\" or \"{JOINT_FORMAT}\")"))),
    };
    let kind = match format {
        GRAPH_FORMAT => Format::Graph,
        JOINT_FORMAT => Format::Joint,
        other => {
            return Err(top(format!("unknown format `{other}` (expected \"{GRAPH_FORMAT}\" or \"{JOINT_FORMAT}\")")))
        }
    };
    match obj.get("version").and_then(Value::as_u64) {
        Some(v) if v == VERSION as u64 => Ok(kind),
        Some(v) => Err(top(format!("{format} version {v} is not supported (this remat reads version {VERSION})"))),
        None => Err(top(format!("missing or non-integer `version` (this remat reads version {VERSION})"))),
    }
}

/// An error outside any node.
fn top(message: String) -> Error {
    Error::Json { node: None, op: None, message }
}

/// An error about node `id`.
fn at(id: u32, op: &str, message: impl Into<String>) -> Error {
    Error::Json { node: Some(id), op: Some(op.to_string()), message: message.into() }
}

/// The id and op of a raw node object, for errors raised before it deserializes.
fn raw_node(value: &Value, index: usize) -> (u32, Option<String>) {
    let id = value.get("id").and_then(Value::as_u64).and_then(|i| u32::try_from(i).ok()).unwrap_or(index as u32);
    (id, value.get("op").and_then(Value::as_str).map(str::to_string))
}

/// Deserializes node `index` of a document, naming it in errors (unknown fields included).
fn node_doc<T: for<'de> Deserialize<'de>>(value: Value, index: usize) -> Result<T> {
    let (id, op) = raw_node(&value, index);
    serde_json::from_value(value).map_err(|e| Error::Json { node: Some(id), op, message: e.to_string() })
}

/// A region entry, shared by both formats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegionDoc {
    id: u32,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent_region: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    budget: Option<f64>,
}

/// A region as both graph kinds store it: (parent, name, budget).
type RegionParts = (Option<u32>, String, Option<f64>);

/// The regions of a document: listed ones, plus any implied by a node's `region` (named `r{id}`,
/// top level). Parents must be listed with smaller ids.
fn regions(
    docs: Vec<RegionDoc>,
    used: impl Iterator<Item = (u32, u32, String)>,
    n_nodes: usize,
) -> Result<Vec<RegionParts>> {
    let listed_max = docs.iter().map(|r| r.id as usize + 1).max().unwrap_or(0);
    let limit = listed_max + n_nodes;
    let mut out: Vec<Option<RegionParts>> = vec![None; listed_max];
    for r in docs {
        let here = |m: String| top(format!("region {}: {m}", r.id));
        if out[r.id as usize].is_some() {
            return Err(here("listed twice".into()));
        }
        if let Some(p) = r.parent_region {
            if p >= r.id {
                return Err(here(format!("parent_region {p} must have a smaller id (parents come first)")));
            }
        }
        if let Some(b) = r.budget {
            if !(0.0..=1.0).contains(&b) {
                return Err(here(format!("budget must be a fraction in [0, 1], got {b}")));
            }
        }
        out[r.id as usize] = Some((r.parent_region, r.name, r.budget));
    }
    for (i, r) in out.iter().enumerate() {
        if let Some(p) = r.as_ref().and_then(|r| r.0) {
            if out[p as usize].is_none() {
                return Err(top(format!("region {i}: parent_region {p} is not listed")));
            }
        }
    }
    for (node, region, op) in used {
        if region as usize >= limit {
            return Err(at(node, &op, format!("region {region} is not listed and too large to be implied")));
        }
        if region as usize >= out.len() {
            out.resize(region as usize + 1, None);
        }
    }
    Ok(out.into_iter().enumerate().map(|(i, r)| r.unwrap_or_else(|| (None, format!("r{i}"), None))).collect())
}

/// Region entries for writing: every region, in id order.
fn region_docs(regions: impl Iterator<Item = RegionParts>) -> Vec<RegionDoc> {
    regions
        .enumerate()
        .map(|(i, (parent_region, name, budget))| RegionDoc { id: i as u32, name, parent_region, budget })
        .collect()
}

fn parse_dtype(name: &str) -> std::result::Result<DType, String> {
    DType::from_name(name).ok_or_else(|| {
        let names = DType::ALL.map(DType::name);
        let hint = remat_catalog::closest(name, names).map_or(String::new(), |c| format!("did you mean `{c}`? "));
        format!("unknown dtype `{name}` ({hint}expected one of {})", names.join(", "))
    })
}

fn parse_policy(name: &str) -> std::result::Result<Policy, String> {
    Policy::from_name(name).ok_or_else(|| {
        let names = Policy::ALL.map(Policy::name);
        let hint = remat_catalog::closest(name, names).map_or(String::new(), |c| format!("did you mean `{c}`? "));
        format!("unknown policy `{name}` ({hint}expected one of {})", names.join(", "))
    })
}

fn parse_source(name: &str) -> std::result::Result<PolicySource, String> {
    PolicySource::from_name(name).ok_or_else(|| {
        let names = PolicySource::ALL.map(PolicySource::name);
        format!("unknown policy source `{name}` (expected one of {})", names.join(", "))
    })
}

/// The tag fields of a node: policy (with its source) and region go together.
fn tag_parts(
    region: Option<u32>,
    policy: Option<&str>,
    source: Option<&str>,
) -> std::result::Result<Option<(u32, Policy, PolicySource)>, String> {
    match (region, policy) {
        (None, None) if source.is_none() => Ok(None),
        (None, None) => Err("`source` describes a policy, but the node has none".into()),
        (Some(r), Some(p)) => {
            let source = source.map_or(Ok(PolicySource::Explicit), parse_source)?;
            Ok(Some((r, parse_policy(p)?, source)))
        }
        (Some(_), None) => Err("a node with a `region` needs a `policy` (tags carry both)".into()),
        (None, Some(_)) => Err("a node with a `policy` needs a `region` (tags carry both)".into()),
    }
}

/// serde_json with a space after `:` and `,`: compact but readable, one node a line.
struct Spaced;

impl serde_json::ser::Formatter for Spaced {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

pub(crate) fn spaced<T: Serialize>(value: &T) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Spaced);
    value.serialize(&mut ser).expect("documents serialize to memory");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Lays out a document: header fields, then each list with one item a line.
fn layout(format: &str, lists: &[(&str, Vec<String>)], tail: &[(&str, String)]) -> String {
    let mut out = format!("{{\n  \"format\": \"{format}\",\n  \"version\": {VERSION}");
    for (key, items) in lists {
        if items.is_empty() {
            out += &format!(",\n  \"{key}\": []");
        } else {
            out += &format!(",\n  \"{key}\": [\n    {}\n  ]", items.join(",\n    "));
        }
    }
    for (key, value) in tail {
        out += &format!(",\n  \"{key}\": {value}");
    }
    out + "\n}\n"
}
