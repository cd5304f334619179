//! What a graph holds: its nodes (op, inputs, shape, dtype, tag, label) and region instances.

use super::NodeId;
use super::RegionId;
use crate::dtype::DType;
use crate::op::{Meta, Op};
use crate::policy::{Policy, PolicySource};
use crate::region::RegionSpec;
use crate::shape::{numel, Shape};
use smallvec::SmallVec;

/// The tag every op recorded inside a region carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// The innermost region instance the op was recorded in.
    pub region: RegionId,
    /// The policy resolved for this op.
    pub policy: Policy,
    /// Which rule produced the policy.
    pub source: PolicySource,
}

/// A source location (`file:line:column`) of the user's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SrcLoc {
    /// File path as the compiler saw it.
    pub file: &'static str,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl SrcLoc {
    /// The location of a `#[track_caller]` caller.
    pub fn from_caller(loc: &'static std::panic::Location<'static>) -> Self {
        SrcLoc { file: loc.file(), line: loc.line(), column: loc.column() }
    }
}

impl std::fmt::Display for SrcLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A region instance of a graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    /// The enclosing region instance, if nested.
    pub parent: Option<RegionId>,
    /// The function (or imported region) name.
    pub name: String,
    /// The static spec the `#[checkpoint]` macro emitted, for traced regions.
    pub spec: Option<&'static RegionSpec>,
    /// A byte budget fraction for this region alone (`#[checkpoint(.., budget = f)]`).
    pub budget: Option<f64>,
}

/// A node's inputs: up to four held inline, as nearly every op has (a heap block per node would
/// cost memory and time: docs/performance.md, "Reading").
pub type Inputs = SmallVec<[NodeId; 4]>;

/// One node: an op applied to earlier nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The op.
    pub op: Op,
    /// Input nodes, all with smaller ids.
    pub inputs: Inputs,
    /// Result shape.
    pub shape: Shape,
    /// Result dtype.
    pub dtype: DType,
    /// Region and policy, for ops recorded inside a region.
    pub tag: Option<Tag>,
    /// Its name and source location, when it has either (boxed: most nodes of a differentiated
    /// graph have neither, and the two held inline would be a third of every node).
    pub label: Option<Box<Label<SrcLoc>>>,
}

/// A node's name and where the user's code recorded it: a [`SrcLoc`] in traced graphs, the
/// document's text in a partition graph ([`crate::partition::PNode`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Label<Loc> {
    /// The value's name: `.name("attn")`, or an input's / parameter's declared name.
    pub name: Option<String>,
    /// Where the user's code recorded it.
    pub loc: Option<Loc>,
}

impl<Loc> Label<Loc> {
    /// The label of a node with this name and location: none when it has neither.
    pub fn of(name: Option<String>, loc: Option<Loc>) -> Option<Box<Label<Loc>>> {
        (name.is_some() || loc.is_some()).then(|| Box::new(Label { name, loc }))
    }
}

impl Node {
    /// The value's name: `.name("attn")`, or an input's / parameter's declared name.
    pub fn name(&self) -> Option<&str> {
        self.label.as_ref()?.name.as_deref()
    }

    /// Where the user's code recorded it.
    pub fn loc(&self) -> Option<SrcLoc> {
        self.label.as_ref()?.loc
    }

    /// Names the value (keeping its location).
    pub fn set_name(&mut self, name: String) {
        match &mut self.label {
            Some(label) => label.name = Some(name),
            None => self.label = Label::of(Some(name), None),
        }
    }

    /// Bytes of the node's value.
    pub fn bytes(&self) -> usize {
        numel(&self.shape).saturating_mul(self.dtype.size())
    }

    /// Shape and dtype.
    pub fn meta(&self) -> Meta<'_> {
        (&self.shape, self.dtype)
    }
}
