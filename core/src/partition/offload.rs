//! Offloading: the third answer besides save and recompute — a kept value copied to host memory
//! after it is produced and fetched back before its first use in the backward.
//!
//! This module holds what every strategy shares about it: which values the tags ask to offload
//! (a value's own `must_offload` / `prefer_offload` tag, or the tag of a view of it —
//! offloading a view offloads its base), which values may be offloaded at all (not what must stay
//! on the device: inputs, parameters, forward outputs, must_save values), and the [`CostModel`]
//! that estimates what a transfer costs.
//!
//! **Exposed time.** A value `v` of `b` bytes is copied out on the device-to-host engine while the
//! forward goes on, and copied back on the host-to-device engine while the backward computes up
//! to its first use. With `w_f` the compute time of the forward after `v` is produced and `w_b`
//! the compute time of the backward before its first reader, the estimate is
//! `max(0, b / d2h − w_f) + max(0, b / h2d − w_b)`: the part of each transfer no compute hides.
//! Values are estimated one at a time (copies of different values sharing an engine are not
//! queued behind each other), which is exact when transfers do not overlap and optimistic when
//! they do.

use super::PGraph;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::policy::{Policy, PolicySource};

/// Transfer and compute rates, for estimating exposed transfer time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Device-to-host copy bandwidth, bytes per second (one copy engine).
    pub d2h_bytes_per_s: f64,
    /// Host-to-device copy bandwidth, bytes per second (one copy engine).
    pub h2d_bytes_per_s: f64,
    /// The backend's compute rate, FLOPs per second.
    pub flops_per_s: f64,
}

impl CostModel {
    /// The CPU backend: its "host tier" is a second metered pool in the same RAM, so a transfer
    /// is a `memcpy` (~10 GB/s each way on the 2-core machines remat is developed on) against
    /// `matrixmultiply` at ~50 GFLOP/s (STACK notes: 77 GFLOP/s on 512³ single-threaded; the
    /// elementwise ops of a training step run slower).
    pub const CPU: CostModel = CostModel { d2h_bytes_per_s: 10e9, h2d_bytes_per_s: 10e9, flops_per_s: 50e9 };

    /// An H200 over PCIe Gen5 x16 with pinned host buffers: ~55 GB/s each way (documented
    /// figures; measure with the GPU check script), against ~50 TFLOP/s for the f32/TF32 and
    /// elementwise mix of remat's CUDA backend (8192³ bf16 GEMMs alone reach ~790 TFLOP/s).
    pub const H200: CostModel = CostModel { d2h_bytes_per_s: 55e9, h2d_bytes_per_s: 55e9, flops_per_s: 50e12 };

    /// Seconds to compute `flops`.
    pub fn compute_s(&self, flops: u64) -> f64 {
        flops as f64 / self.flops_per_s
    }

    /// Seconds to copy `bytes` device-to-host.
    pub fn d2h_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.d2h_bytes_per_s
    }

    /// Seconds to copy `bytes` host-to-device.
    pub fn h2d_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.h2d_bytes_per_s
    }

    /// Checks the rates are positive and finite.
    pub fn validate(&self) -> Result<()> {
        for (what, r) in [
            ("d2h bandwidth", self.d2h_bytes_per_s),
            ("h2d bandwidth", self.h2d_bytes_per_s),
            ("compute rate", self.flops_per_s),
        ] {
            if !(r.is_finite() && r > 0.0) {
                return Err(Error::config(
                    "cost model",
                    format!("cost model: the {what} must be positive and finite, got {r}"),
                ));
            }
        }
        Ok(())
    }
}

impl Default for CostModel {
    /// [`CostModel::CPU`].
    fn default() -> Self {
        CostModel::CPU
    }
}

/// Per forward node, the estimated exposed transfer seconds if it were offloaded (see the module
/// notes); 0 for backward nodes.
pub fn exposed_times(g: &PGraph, model: &CostModel) -> Vec<f64> {
    let n = g.len();
    // Forward FLOPs after each node (by id), backward FLOPs before each node (by id).
    let mut fwd_after = vec![0u64; n + 1];
    for i in (0..n).rev() {
        let f = if g.nodes[i].backward { 0 } else { g.nodes[i].flops };
        fwd_after[i] = fwd_after[i + 1].saturating_add(f);
    }
    let mut bwd_before = vec![0u64; n + 1];
    for i in 0..n {
        let f = if g.nodes[i].backward { g.nodes[i].flops } else { 0 };
        bwd_before[i + 1] = bwd_before[i].saturating_add(f);
    }
    // The first backward reader of each forward value; a value only recomputes read gets that of
    // its first forward reader that the backward reads.
    let mut first_bwd = vec![usize::MAX; n];
    for (i, node) in g.nodes.iter().enumerate().filter(|(_, x)| x.backward) {
        for &x in &node.inputs {
            first_bwd[x.index()] = first_bwd[x.index()].min(i);
        }
    }
    for i in (0..n).rev() {
        if g.nodes[i].backward || first_bwd[i] == usize::MAX {
            continue;
        }
        for &x in &g.nodes[i].inputs {
            if !g.node(x).backward && first_bwd[x.index()] == usize::MAX {
                first_bwd[x.index()] = first_bwd[i];
            }
        }
    }
    (0..n)
        .map(|i| {
            let node = &g.nodes[i];
            if node.backward {
                return 0.0;
            }
            let w_f = model.compute_s(fwd_after[i + 1]);
            let w_b = if first_bwd[i] == usize::MAX { 0.0 } else { model.compute_s(bwd_before[first_bwd[i]]) };
            (model.d2h_s(node.bytes) - w_f).max(0.0) + (model.h2d_s(node.bytes) - w_b).max(0.0)
        })
        .collect()
}

/// What the tags ask of each node's offloading: the strongest of its own tag and those of its
/// views (a view is offloaded through its base), and the view that asked when it was one.
#[derive(Clone, Debug)]
pub(crate) struct Wishes {
    /// Per node: offload when kept, and whether it is a must.
    pub wish: Vec<Option<Policy>>,
    /// Per node: the view whose tag made the wish, when not the node's own.
    pub via_view: Vec<Option<NodeId>>,
    /// Prefer-offload tags that fell back, one line per region function, op, policy and cause.
    pub warnings: Vec<String>,
}

/// Offload tags that fell back, grouped as the must_save warnings are: a model calls one region
/// function per layer, and one line per layer says nothing the first line did not.
#[derive(Default)]
struct Fallbacks<'g> {
    groups: Vec<Fallback<'g>>,
}

/// The values of one region function and op whose tag fell back for one cause.
struct Fallback<'g> {
    function: Option<&'g str>,
    op: &'g str,
    policy: Policy,
    cause: String,
    /// The first value's description.
    first: String,
    count: usize,
}

impl<'g> Fallbacks<'g> {
    fn add(&mut self, g: &'g PGraph, i: NodeId, policy: Policy, cause: String) {
        let n = g.node(i);
        let function = n.region.map(|r| g.regions[r.index()].name.as_str());
        let same = |e: &Fallback<'_>| e.function == function && e.op == n.op && e.policy == policy && e.cause == cause;
        match self.groups.iter_mut().find(|e| same(e)) {
            Some(e) => e.count += 1,
            None => self.groups.push(Fallback { function, op: &n.op, policy, cause, first: g.describe(i), count: 1 }),
        }
    }

    fn lines(self) -> Vec<String> {
        self.groups
            .into_iter()
            .map(|Fallback { function, op, policy: p, cause, first, count }| match count {
                1 => format!("{first}: {p} falls back: {cause}"),
                _ => {
                    let place = super::in_region(function);
                    let op = crate::text::shorten(op, crate::text::CELL);
                    format!("{place}: {count} values are {p} ({op}) and fall back, each because {cause} (the first: {first})")
                }
            })
            .collect()
    }
}

/// Whether `i` can leave the device: not an input, parameter or forward output.
pub(crate) fn can_leave(g: &PGraph, i: NodeId) -> bool {
    !g.node(i).flags.resident && !g.forward_outputs.contains(&i)
}

/// The offload wishes of the tags; an error naming the node for a must_offload on a value that
/// cannot leave the device (or whose base cannot), or a must_offload view of a must_save base.
/// `offload_tags`: whether any forward node's tag asks for offload ([`PGraph::validated`]).
pub(crate) fn wishes(g: &PGraph, offload_tags: bool) -> Result<Wishes> {
    let n = g.len();
    let mut wish: Vec<Option<Policy>> = vec![None; n];
    let mut via_view = vec![None; n];
    let mut fallbacks = Fallbacks::default();
    if !offload_tags {
        // Nothing asks: the views and bases below matter only to an offload tag (a pass over
        // every node and three more arrays saved, most graphs).
        return Ok(Wishes { wish, via_view, warnings: Vec::new() });
    }
    let output = g.output_mask();
    // The must_save view that keeps each base on the device.
    let mut must_save_view = vec![None; n];
    for v in g.ids() {
        let x = g.node(v);
        if !x.backward && x.flags.view && x.policy == Some(Policy::MustSave) {
            must_save_view[g.view_base(v, &output).index()].get_or_insert(v);
        }
    }
    for i in g.ids() {
        let node = g.node(i);
        let Some(p @ (Policy::MustOffload | Policy::PreferOffload)) = node.policy else { continue };
        if node.backward {
            continue;
        }
        let base = if node.flags.view { g.view_base(i, &output) } else { i };
        let traced_default = node.source == Some(PolicySource::Default);
        let b = g.node(base);
        if base != i && b.inputs.is_empty() && !b.flags.random && !b.flags.resident {
            // The base is a factory: replayed for free, which keeps the view as well as a copy.
            continue;
        }
        if !can_leave(g, base) {
            let what = if g.node(base).flags.resident {
                "an input or a parameter"
            } else {
                "a forward output (the caller holds it)"
            };
            if p == Policy::MustOffload && !traced_default {
                let whose = if base == i { "it is".to_string() } else { format!("its base {} is", g.describe(base)) };
                return Err(Error::Conflict(format!(
                    "{}: must_offload ({}) cannot be met: {whose} {what}, which stays on the device",
                    g.describe(i),
                    super::classify::source_text(g, i)
                )));
            }
            let whose = if base == i { "it is" } else { "its base is" };
            fallbacks.add(g, i, p, format!("{whose} {what}, kept on the device; the other rules decide"));
            continue;
        }
        if let Some(v) = must_save_view[base.index()].filter(|&v| v != i) {
            if p == Policy::MustOffload {
                return Err(Error::Conflict(format!(
                    "{}: must_offload conflicts with must_save ({}) on {}, a view kept through {}",
                    g.describe(i),
                    super::classify::source_text(g, v),
                    g.describe(v),
                    if base == i { "it".to_string() } else { format!("the same base {}", g.describe(base)) }
                )));
            }
            if !traced_default {
                fallbacks.add(g, i, p, "a must_save view of it keeps it on the device".to_string());
            }
            continue;
        }
        if g.node(base).policy == Some(Policy::MustSave) && base != i {
            if p == Policy::MustOffload {
                return Err(Error::Conflict(format!(
                    "{}: must_offload conflicts with must_save ({}) on its base {}: a view is kept through its base",
                    g.describe(i),
                    super::classify::source_text(g, base),
                    g.describe(base)
                )));
            }
            // A view that only the region's default tagged follows its base silently: the
            // default speaks for the rest of the region, and the base is not the rest.
            if !traced_default {
                fallbacks.add(g, i, p, "its base is must_save, kept on the device".to_string());
            }
            continue;
        }
        let b = base.index();
        if wish[b] != Some(Policy::MustOffload) {
            if wish[b].is_none() || p == Policy::MustOffload {
                via_view[b] = (base != i).then_some(i);
            }
            wish[b] = Some(if p == Policy::MustOffload { p } else { wish[b].unwrap_or(p) });
        }
    }
    Ok(Wishes { wish, via_view, warnings: fallbacks.lines() })
}
