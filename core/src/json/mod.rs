//! JSON interchange: `remat.graph` (a tagged forward graph of catalog ops, which remat
//! differentiates) and `remat.joint` (an already-joint graph of opaque ops, which remat only
//! partitions), both version 1. The format is documented in `docs/graph-json.md`.
//!
//! Documents are read straight into typed structs (borrowing strings from the text), node by
//! node, so that every error names its node. Reading is strict: unknown fields are errors that
//! suggest the nearest field, unknown op names suggest the nearest catalog name, and every error
//! about a node names it by its document id and op
//! (`node "t_3" (aten.t.default): field "shape": expected an array of integers, got "4x8"`).
//! Node ids are the document's own: any string or non-negative integer, unique, with every input
//! naming a node listed earlier. A UTF-8 byte-order mark is accepted.
//!
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
mod escape;
mod fields;
mod graph;
mod joint;
mod scan;

use crate::error::{Error, Result};
use crate::graph::{Graph, RegionId};
use crate::partition::{DocId, PGraph};
use crate::policy::{Policy, PolicySource};
use fields::IdRef;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The `format` of a forward-graph document.
pub const GRAPH_FORMAT: &str = "remat.graph";
/// The `format` of a joint-graph document.
pub const JOINT_FORMAT: &str = "remat.joint";
/// The document version this remat reads and writes.
pub const VERSION: u32 = 1;

/// A document of either format, as [`read`] found it.
#[derive(Clone, Debug)]
pub enum Document {
    /// A `remat.graph`: a forward graph to differentiate, with the document's id of each node.
    Graph(Graph, Vec<DocId>),
    /// A `remat.joint`: a joint graph to partition.
    Joint(PGraph),
}

/// Reads a document of either format, telling them apart by `format`.
pub fn read(text: &str) -> Result<Document> {
    Top::read(text, |top, format| match format {
        Format::Graph => graph::read(top).map(|(g, ids)| Document::Graph(g, ids)),
        Format::Joint => joint::read(top).map(Document::Joint),
    })
}

/// Reads a `remat.graph` document.
pub fn read_graph(text: &str) -> Result<Graph> {
    Top::read(text, |top, format| match format {
        Format::Graph => graph::read(top).map(|(g, _)| g),
        Format::Joint => Err(top_error(format!("expected a {GRAPH_FORMAT} document, found {JOINT_FORMAT}"))),
    })
}

/// Reads a `remat.joint` document.
pub fn read_joint(text: &str) -> Result<PGraph> {
    Top::read(text, |top, format| match format {
        Format::Joint => joint::read(top),
        Format::Graph => Err(top_error(format!("expected a {JOINT_FORMAT} document, found {GRAPH_FORMAT}"))),
    })
}

/// Writes `g` as a `remat.graph` document (canonical form, one node a line).
pub fn write_graph(g: &Graph) -> String {
    graph::to_text(g)
}

/// Writes `g` as a `remat.joint` document (canonical form, one node a line).
pub fn write_joint(g: &PGraph) -> String {
    joint::to_text(g)
}

fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

enum Format {
    Graph,
    Joint,
}

/// The top level of a document: each field's raw text, parsed on demand.
struct Top<'a> {
    fields: std::collections::BTreeMap<String, &'a str>,
}

impl<'a> Top<'a> {
    /// Reads `text` (after any byte-order mark) with `read`, given its top level and format.
    /// Errors in the JSON itself come before errors in what it says, as if the whole text were
    /// parsed first: a failure from a quick top-level pass ([`scan`]) parses the text again.
    fn read<T>(text: &'a str, read: impl FnOnce(&Top<'a>, Format) -> Result<T>) -> Result<T> {
        Top::read_with(text, true, read)
    }

    /// [`Top::read`], with the quick pass or (`quick` false) serde_json's parse of the whole
    /// text first.
    fn read_with<T>(text: &'a str, quick: bool, read: impl FnOnce(&Top<'a>, Format) -> Result<T>) -> Result<T> {
        let text = without_bom(text);
        // Whether serde_json has parsed the whole text (the quick pass checks only the top
        // level's punctuation; each value is parsed when it is read).
        let (top, checked) = match quick.then(|| scan::fields(text)).flatten() {
            Some(fields) => (Top { fields }, false),
            None => (Top::parse(text)?, true),
        };
        top.format().and_then(|format| read(&top, format)).map_err(|e| match checked {
            true => e,
            false => Top::parse(text).err().unwrap_or(e),
        })
    }

    /// The top level as serde_json parses the whole text.
    fn parse(text: &'a str) -> Result<Top<'a>> {
        let fields: std::collections::BTreeMap<String, &'a RawValue> = serde_json::from_str(text).map_err(|e| {
            if e.classify() == serde_json::error::Category::Data {
                top_error("expected a JSON object at the top level".into())
            } else if let Some(escape) = escape::at_error(text, &e) {
                top_error(format!(
                    "invalid JSON: {} (line {}, column {})",
                    escape::describe(escape),
                    e.line(),
                    e.column()
                ))
            } else {
                top_error(format!("invalid JSON: {e}"))
            }
        })?;
        Ok(Top { fields: fields.into_iter().map(|(k, v)| (k, v.get())).collect() })
    }

    /// Checks `format` and `version`.
    fn format(&self) -> Result<Format> {
        let value = |key: &str| self.fields.get(key).and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok());
        if let Some(raw) = self.fields.get("format") {
            if let Some(escape) = serde_json::from_str::<String>(raw).err().and_then(|e| escape::at_error(raw, &e)) {
                return Err(top_error(format!("field `format`: {}", escape::describe(escape))));
            }
        }
        let format = match value("format") {
            Some(serde_json::Value::String(s)) => s,
            Some(_) => return Err(top_error("`format` must be a string".into())),
            None => return Err(top_error(format!("missing `format` (\"{GRAPH_FORMAT}\" or \"{JOINT_FORMAT}\")"))),
        };
        let kind = match format.as_str() {
            GRAPH_FORMAT => Format::Graph,
            JOINT_FORMAT => Format::Joint,
            other => {
                let other = crate::text::quoted(other);
                return Err(top_error(format!(
                    "unknown format {other} (expected \"{GRAPH_FORMAT}\" or \"{JOINT_FORMAT}\")"
                )));
            }
        };
        match value("version").as_ref().and_then(serde_json::Value::as_u64) {
            Some(v) if v == VERSION as u64 => Ok(kind),
            Some(v) => {
                Err(top_error(format!("{format} version {v} is not supported (this remat reads version {VERSION})")))
            }
            None => Err(top_error(format!("missing or non-integer `version` (this remat reads version {VERSION})"))),
        }
    }

    /// Rejects top-level fields a document of `format` does not have, suggesting the nearest.
    fn only(&self, format: &str, known: &[&'static str]) -> Result<()> {
        match self.fields.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(top_error(format!("{format}: {}", unknown("top-level field", k, known)))),
            None => Ok(()),
        }
    }

    /// Field `key` read as `T`, or `None` when absent; errors name the field and the path in it.
    fn get<T: Deserialize<'a>>(&self, format: &str, key: &str) -> Result<Option<T>> {
        let Some(raw) = self.fields.get(key) else { return Ok(None) };
        if let Ok(t) = serde_json::from_str(raw) {
            return Ok(Some(t));
        }
        let mut de = serde_json::Deserializer::from_str(raw);
        serde_path_to_error::deserialize(&mut de).map(Some).map_err(|e| {
            let path = e.path().to_string();
            let at = match path.as_str() {
                "." | "" => key.to_string(),
                p if p.starts_with('[') => format!("{key}{p}"),
                p => format!("{key}.{p}"),
            };
            let what = match escape::at_error(raw, e.inner()) {
                Some(escape) => escape::describe(escape),
                None => crate::text::shorten(&e.into_inner().to_string(), 200),
            };
            top_error(format!("{format}: field `{at}`: {what}"))
        })
    }

    /// A required field's raw text, as the pass over the top level found it (parsed by the
    /// caller: the `nodes` list is read in a streaming pass of its own, which checks it whole).
    fn need_raw(&self, format: &str, key: &str) -> Result<&'a str> {
        self.fields.get(key).copied().ok_or_else(|| top_error(format!("{format}: missing field `{key}`")))
    }

    /// A required field.
    fn need<T: Deserialize<'a>>(&self, format: &str, key: &str) -> Result<T> {
        self.get(format, key)?.ok_or_else(|| top_error(format!("{format}: missing field `{key}`")))
    }
}

/// An error outside any node.
fn top_error(message: String) -> Error {
    Error::Json { node: None, op: None, message: crate::text::one_line(&message) }
}

/// An error about the node with document id `id`.
fn at(id: &DocId, op: &str, message: impl Into<String>) -> Error {
    at_named(id, op, None, message)
}

/// An error about the node with document id `id`, op `op` and value name `name`:
/// `node "t_3" (aten.t.default "w_t"): ...`.
fn at_named(id: &DocId, op: &str, name: Option<&str>, message: impl Into<String>) -> Error {
    let mut op = crate::text::shorten(op, crate::text::CELL);
    if let Some(name) = name {
        op += &format!(" {}", crate::text::quoted(name));
    }
    Error::Json { node: Some(id.in_error()), op: Some(op), message: crate::text::one_line(&message.into()) }
}

/// The document ids of the nodes read so far, for resolving inputs: each id's position in the
/// document's list. (Readers map positions to graph indices where the two differ, as where the
/// joint reader adds a random op's generator state.)
struct Ids<'a> {
    index: FxHashMap<IdRef<'a>, u32>,
    /// Integer ids below `dense_limit`, by value (`UNDEFINED` where none): positional documents
    /// number their nodes 0, 1, 2, ..., and a table lookup beats hashing 10⁶ of them.
    dense: Vec<u32>,
    dense_limit: u64,
}

/// No node has this integer id (in [`Ids::dense`]).
const UNDEFINED: u32 = u32::MAX;

impl<'a> Ids<'a> {
    /// Room for the ids of a `nodes` list of `text_len` bytes (nodes take 60 bytes or more), so
    /// that reading 10⁶ nodes does not rehash the table twenty times over. Integer ids up to
    /// about the number of nodes the text can hold are kept in a table (4 bytes each).
    fn for_text(text_len: usize) -> Self {
        Ids {
            index: FxHashMap::with_capacity_and_hasher(text_len / 120, Default::default()),
            dense: Vec::new(),
            dense_limit: (text_len / 8).max(1024) as u64,
        }
    }

    /// Registers the id of the node listed at `position`; a duplicate is an error naming both
    /// positions.
    fn define(&mut self, id: &IdRef<'a>, position: usize) -> std::result::Result<(), String> {
        let entry = position as u32;
        let first = match id {
            IdRef::Int(i) if *i < self.dense_limit => {
                let i = *i as usize;
                if i >= self.dense.len() {
                    self.dense.resize((i + 1).max(self.dense.len() * 2).min(self.dense_limit as usize), UNDEFINED);
                }
                Some(std::mem::replace(&mut self.dense[i], entry)).filter(|&e| e != UNDEFINED)
            }
            _ => self.index.insert(id.clone(), entry),
        };
        match first {
            None => Ok(()),
            Some(first) => {
                Err(format!("id {} is used twice (nodes {first} and {position} in the list)", id.owned().in_error()))
            }
        }
    }

    /// The list position of the node with id `id`, if any.
    fn get(&self, id: &IdRef<'a>) -> Option<u32> {
        match id {
            IdRef::Int(i) if *i < self.dense_limit => self.dense.get(*i as usize).copied().filter(|&e| e != UNDEFINED),
            _ => self.index.get(id).copied(),
        }
    }

    /// The list position of the node an input of the node at position `here` names: defined
    /// before `here`, or an error saying why not (the node itself, a later node, or none).
    /// Outputs, read after every node, pass `usize::MAX`.
    fn resolve(
        &self,
        input: &IdRef<'a>,
        listed: impl FnOnce(&IdRef<'a>) -> bool,
        here: usize,
    ) -> std::result::Result<u32, String> {
        let found = self.get(input);
        if let Some(k) = found.filter(|&k| (k as usize) < here) {
            return Ok(k);
        }
        let name = input.owned().in_error();
        if found.is_some() {
            return Err(format!("input {name} is the node itself (a cycle: a node cannot read its own value)"));
        }
        // Only a failure looks further: every other id is defined later or nowhere.
        Err(match listed(input) {
            true => format!(
                "input {name} is defined later in the list (nodes are in topological order: a cycle or a forward reference)"
            ),
            false => format!("input {name} is not a node of the document (a dangling input)"),
        })
    }
}

/// Whether any node of the `nodes` array has id `id` (the slow path of an error only: it reads
/// the whole array again).
fn listed_in<'a>(raw_nodes: &'a str, id: &IdRef<'_>) -> bool {
    #[derive(Deserialize)]
    struct IdOnly<'b> {
        #[serde(borrow)]
        id: IdRef<'b>,
    }
    serde_json::from_str::<Vec<IdOnly<'a>>>(raw_nodes).is_ok_and(|all| all.iter().any(|n| n.id == *id))
}

/// A region entry, shared by both formats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegionDoc {
    id: u64,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent_region: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    budget: Option<f64>,
}

/// A region as both graph kinds store it.
struct RegionParts {
    key: u64,
    parent: Option<RegionId>,
    name: String,
    budget: Option<f64>,
}

/// The regions of a document, densely numbered: listed ones in list order, then those only a
/// node names (implied: top level, named `r<id>`, no budget), in order of first use. Storage is
/// sized by the regions that exist, whatever their ids.
struct Regions {
    parts: Vec<RegionParts>,
    by_key: FxHashMap<u64, RegionId>,
}

impl Regions {
    fn new(docs: Vec<RegionDoc>) -> Result<Regions> {
        let mut regions = Regions { parts: Vec::with_capacity(docs.len()), by_key: FxHashMap::default() };
        for r in docs {
            let here = |m: String| top_error(format!("region {}: {m}", r.id));
            if regions.by_key.contains_key(&r.id) {
                return Err(here("listed twice".into()));
            }
            let parent =
                match r.parent_region {
                    None => None,
                    Some(p) => Some(*regions.by_key.get(&p).ok_or_else(|| {
                        here(format!("parent_region {p} must be listed before it (parents come first)"))
                    })?),
                };
            if let Some(b) = r.budget {
                if !(0.0..=1.0).contains(&b) {
                    return Err(here(format!("budget must be a fraction in [0, 1], got {b}")));
                }
            }
            regions.add(RegionParts { key: r.id, parent, name: r.name, budget: r.budget });
        }
        Ok(regions)
    }

    fn add(&mut self, parts: RegionParts) -> RegionId {
        let id = RegionId::from_index(self.parts.len());
        self.by_key.insert(parts.key, id);
        self.parts.push(parts);
        id
    }

    /// The dense id of document region `key`, implying it if it is not listed.
    fn get(&mut self, key: u64) -> RegionId {
        match self.by_key.get(&key) {
            Some(&r) => r,
            None => self.add(RegionParts { key, parent: None, name: format!("r{key}"), budget: None }),
        }
    }
}

/// Region entries for writing: every region, in order.
fn region_docs<'a>(regions: impl Iterator<Item = (u64, Option<u64>, &'a str, Option<f64>)>) -> Vec<RegionDoc> {
    regions
        .map(|(id, parent_region, name, budget)| RegionDoc { id, name: name.to_string(), parent_region, budget })
        .collect()
}

fn unknown(what: &str, name: &str, names: &[&'static str]) -> String {
    let hint = remat_catalog::closest(name, names.iter().copied())
        .map_or(String::new(), |c| format!("did you mean \"{c}\"? "));
    format!("unknown {what} {} ({hint}expected one of {})", crate::text::quoted(name), names.join(", "))
}

/// A node's `shape` field as this machine's sizes.
fn parse_shape(dims: &[u64]) -> std::result::Result<crate::graph::Shape, String> {
    dims.iter()
        .map(|&x| usize::try_from(x))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| "field \"shape\": a dimension does not fit this machine's usize".into())
}

fn parse_dtype(name: &str) -> std::result::Result<crate::DType, String> {
    crate::DType::from_name(name).ok_or_else(|| unknown("dtype", name, &crate::DType::ALL.map(crate::DType::name)))
}

fn parse_policy(name: &str) -> std::result::Result<Policy, String> {
    Policy::from_name(name).ok_or_else(|| unknown("policy", name, &Policy::ALL.map(Policy::name)))
}

fn parse_source(name: &str) -> std::result::Result<PolicySource, String> {
    PolicySource::from_name(name)
        .ok_or_else(|| unknown("policy source", name, &PolicySource::ALL.map(PolicySource::name)))
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

pub(crate) fn spaced<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    spaced_into(&mut out, value);
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// [`spaced`], appended to `out`.
fn spaced_into<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let mut ser = serde_json::Serializer::with_formatter(out, Spaced);
    value.serialize(&mut ser).expect("documents serialize to memory");
}

/// A field of a laid-out JSON object: one serialized value, a list with one item a line, or
/// such a list already written out ([`rows`]: in parts, each a run of whole items).
pub(crate) enum Field {
    Value(String),
    Lines(Vec<String>),
    Rows(Vec<String>),
}

/// Between two items of a list laid out one item a line.
const ROW_SEPARATOR: &str = ",\n    ";

/// A list laid out one item a line, `item_of` of each of `items` serialized straight into one
/// buffer (a report of 10⁶ decisions would otherwise make 10⁶ strings, then join them). A long
/// list is written in two halves at once where there is a second CPU (two parts, written out one
/// after the other: joined, the halves would be copied once more).
pub(crate) fn rows<S: Sync, T: Serialize>(items: &[S], item_of: impl Fn(&S) -> T + Sync) -> Field {
    let write = |part: &[S]| {
        let mut out = Vec::new();
        for (k, item) in part.iter().enumerate() {
            if k > 0 {
                out.extend_from_slice(ROW_SEPARATOR.as_bytes());
            }
            spaced_into(&mut out, &item_of(item));
        }
        String::from_utf8(out).expect("serde_json writes UTF-8")
    };
    Field::Rows(if items.len() >= PARALLEL_ROWS {
        let (first, second) = items.split_at(items.len() / 2);
        let (first, second) = crate::concurrent::join(|| write(first), || write(second));
        vec![first, second]
    } else if items.is_empty() {
        Vec::new()
    } else {
        vec![write(items)]
    })
}

/// Lists at least this long are written by [`rows`] in two halves at once.
const PARALLEL_ROWS: usize = 50_000;

/// A JSON object with one field a line, and each list with one item a line (every value and
/// item already serialized by serde).
pub(crate) fn object(fields: Vec<(&str, Field)>) -> String {
    let size: usize = fields
        .iter()
        .map(|(key, field)| {
            key.len()
                + 16
                + match field {
                    Field::Value(v) => v.len(),
                    Field::Lines(items) | Field::Rows(items) => {
                        items.iter().map(|i| i.len() + ROW_SEPARATOR.len()).sum()
                    }
                }
        })
        .sum();
    let mut out = Vec::with_capacity(size + 4);
    write_object(&mut out, fields).expect("writing to memory does not fail");
    String::from_utf8(out).expect("every field is UTF-8")
}

/// [`object`], written to `out` as it is laid out rather than built first (a 10⁶-node report
/// is 70 MB).
pub(crate) fn write_object(out: &mut impl std::io::Write, fields: Vec<(&str, Field)>) -> std::io::Result<()> {
    out.write_all(b"{")?;
    write_fields(out, fields, true)?;
    out.write_all(b"\n}\n")
}

/// The fields of an object [`write_object`] writes, without its braces; `first` when none is
/// written before them.
pub(crate) fn write_fields(
    out: &mut impl std::io::Write,
    fields: Vec<(&str, Field)>,
    first: bool,
) -> std::io::Result<()> {
    for (k, (key, field)) in fields.into_iter().enumerate() {
        out.write_all(if first && k == 0 { b"\n  " } else { b",\n  " })?;
        out.write_all(spaced(key).as_bytes())?;
        out.write_all(b": ")?;
        match field {
            Field::Value(v) => out.write_all(v.as_bytes())?,
            Field::Lines(items) | Field::Rows(items) if items.is_empty() => out.write_all(b"[]")?,
            Field::Lines(items) | Field::Rows(items) => {
                out.write_all(b"[\n    ")?;
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        out.write_all(ROW_SEPARATOR.as_bytes())?;
                    }
                    out.write_all(item.as_bytes())?;
                }
                out.write_all(b"\n  ]")?;
            }
        }
    }
    Ok(())
}

/// Lays out a document: header fields, then each list with one item a line.
fn layout(format: &str, lists: Vec<(&str, Vec<String>)>, tail: Vec<(&str, String)>) -> String {
    let mut fields = vec![("format", Field::Value(spaced(format))), ("version", Field::Value(VERSION.to_string()))];
    fields.extend(lists.into_iter().map(|(key, items)| (key, Field::Lines(items))));
    fields.extend(tail.into_iter().map(|(key, value)| (key, Field::Value(value))));
    object(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outcome of reading `text` as a report would show it: the error, or the graph.
    fn outcome(text: &str, quick: bool) -> String {
        let read = |top: &Top<'_>, format| match format {
            Format::Graph => graph::read(top).map(|(g, ids)| format!("{g:?} {ids:?}")),
            Format::Joint => joint::read(top).map(|g| format!("{g:?}")),
        };
        match Top::read_with(text, quick, read) {
            Ok(graph) => graph,
            Err(e) => format!("error: {e}"),
        }
    }

    /// A list long enough to be written in two halves reads as one written item by item.
    #[test]
    fn long_rows_are_the_items_in_order() {
        let items: Vec<(u32, String)> = (0..PARALLEL_ROWS as u32 * 2 + 3).map(|i| (i, format!("v{i}"))).collect();
        let Field::Rows(parts) = rows(&items, |(i, v)| serde_json::json!({"i": i, "v": v})) else { panic!("rows") };
        assert_eq!(parts.len(), 2);
        let expected: Vec<String> = items.iter().map(|(i, v)| spaced(&serde_json::json!({"i": i, "v": v}))).collect();
        assert_eq!(parts.join(ROW_SEPARATOR), expected.join(ROW_SEPARATOR));
    }

    /// Every document of the repository's fixtures, and each cut in many places (a byte
    /// dropped, a bracket or quote doubled, the text truncated): the quick top-level pass gives
    /// what parsing the whole text first gives, graph or error, every time.
    #[test]
    fn the_quick_pass_reads_and_errors_as_a_whole_parse_does() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        let mut docs = Vec::new();
        for dir in ["adversarial", "torch"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                if name.ends_with(".json") && !name.ends_with(".torch.json") {
                    docs.push(std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        assert!(docs.len() >= 20, "fixtures found: {}", docs.len());
        let mut compared = 0;
        for text in &docs {
            let bytes = text.as_bytes();
            // Places where a cut matters most: punctuation, spread through the text.
            let marks: Vec<usize> = (0..bytes.len()).filter(|&i| b"{}[]\":,\\".contains(&bytes[i])).collect();
            let step = (marks.len() / 40).max(1);
            let mut cuts = vec![text.clone()];
            for &i in marks.iter().step_by(step) {
                cuts.push(format!("{}{}", &text[..i], &text[i + 1..]));
                cuts.push(format!("{}{}", &text[..i + 1], &text[i..]));
                cuts.push(text[..i].to_string());
            }
            for cut in &cuts {
                assert_eq!(outcome(cut, true), outcome(cut, false), "{cut}");
                compared += 1;
            }
        }
        assert!(compared > 1000, "{compared}");
    }
}
