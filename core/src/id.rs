//! Typed arena indices: a node of a graph, a region instance. A leaf module (it imports
//! nothing of the crate), so that errors, graphs and plans can all name ids without importing
//! each other. The index is private: ids are made by the arenas that own the slots.

/// A node of a graph: an index into its arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The node in arena slot `index`.
    pub const fn new(index: u32) -> NodeId {
        NodeId(index)
    }

    /// The node in arena slot `index`; arenas hold at most `u32::MAX` entries (their builders
    /// refuse more), so a larger index is a bug.
    pub fn from_index(index: usize) -> NodeId {
        NodeId(u32::try_from(index).expect("an arena holds at most u32::MAX nodes"))
    }

    /// The arena index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The index as stored (what JSON documents and DOT names print).
    pub const fn raw(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// A region instance: one call of a checkpointed function (or a region of an imported graph).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(u32);

impl RegionId {
    /// The region in arena slot `index`.
    pub const fn new(index: u32) -> RegionId {
        RegionId(index)
    }

    /// The region in arena slot `index`; a larger index than `u32::MAX` is a bug.
    pub fn from_index(index: usize) -> RegionId {
        RegionId(u32::try_from(index).expect("an arena holds at most u32::MAX regions"))
    }

    /// The arena index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The index as stored.
    pub const fn raw(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for RegionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// Per node of `nodes`, whether `ids` lists it.
pub(crate) fn marked<'a>(nodes: usize, ids: impl IntoIterator<Item = &'a NodeId>) -> Vec<bool> {
    let mut mark = vec![false; nodes];
    for &i in ids {
        mark[i.index()] = true;
    }
    mark
}
