//! An independent check of a partition against the rules of `DESIGN.md` §4, restated here from
//! the tags and flags alone — it shares no code with the classification or the strategies, so a
//! bug there cannot hide itself here. `partition` runs it on every result in debug builds; the
//! property tests run it on every strategy over random graphs.
//!
//! [`Facts`] restates what the rules read (what the backward needs, the boundary, the offload
//! wishes); each rule is one function below, run by [`check`] in a fixed order: the offload rules
//! per node, the host bytes, the keeping rules per node, the device bytes and the budget, and the
//! decisions.

use super::{Action, Budget, PGraph, Partition, Reason, Strategy};
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::policy::Policy;

/// Verifies `p` against the rules over `g`; the error lists every violation, one per line.
///
/// The rules: views are never saved (a view that is a forward output is held, as any output); a
/// needed MustSave value is saved (a view through its base, or through a held output it views);
/// a MustRecompute value is never saved unless a region reads it (or a view of it) from outside
/// the producer's instance — the reader keeps it whatever the producer's tag says; a needed boundary value is kept (a view through its
/// base, which may be resident); outputs, residents and not-recomputable values are never
/// recomputed; PreferRecompute values are never saved under `Respect` and `MinCut`; everything
/// the backward or a recompute reads is saved or recomputed, and nothing else is; a byte budget
/// is met; `saved_bytes` is the sum of the saved values other than residents and outputs; each decision matches.
///
/// Offload: offloaded values are kept (they count for every keeping rule above) and never views,
/// inputs, parameters or forward outputs; a needed must_offload value (a view through its base)
/// is offloaded, never saved on the device nor recomputed; a must_save value (or the base of a
/// must_save view) is never offloaded; outside `BudgetOffload` exactly the kept values whose own
/// or whose view's offload tag can be met are offloaded; device bytes (`saved_bytes`, and the
/// budget) exclude offloaded values, `host_bytes` adds them up.
pub fn check(g: &PGraph, p: &Partition) -> Result<()> {
    let bad = broken_rules(g, p)?;
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Error::graph(format!("the partition breaks the rules: {}", bad.join("; "))))
    }
}

/// What [`check`] finds, one line per broken rule (none when `p` keeps every rule); an error
/// only when `p` does not cover `g`.
pub(crate) fn broken_rules(g: &PGraph, p: &Partition) -> Result<Vec<String>> {
    let n = g.len();
    if p.saved.len() != n || p.offloaded.len() != n {
        return Err(Error::graph(format!("partition covers {} nodes, the graph has {n}", p.saved.len())));
    }
    let f = Facts::new(g, p);
    let mut bad: Vec<String> = Vec::new();
    const OFFLOAD_RULES: [NodeRule; 7] = [
        offloaded_is_kept,
        offloaded_leaves_the_device,
        must_save_is_not_offloaded,
        offloaded_only_where_tagged,
        must_offload_is_not_saved_on_the_device,
        offload_tags_are_met,
        must_offload_is_not_recomputed,
    ];
    for i in 0..n {
        bad.extend(OFFLOAD_RULES.iter().filter_map(|rule| rule(&f, i)));
    }
    bad.extend(host_bytes_add_up(&f));
    const KEEPING_RULES: [NodeRule; 8] = [
        not_both_saved_and_recomputed,
        needed_exactly,
        views_are_not_saved,
        must_recompute_is_not_saved,
        held_values_are_not_recomputed,
        random_sources_are_not_recomputed,
        must_keep_is_kept,
        prefer_recompute_is_not_saved,
    ];
    for i in 0..n {
        if g.nodes[i].backward {
            bad.extend(backward_is_untouched(&f, i));
            continue;
        }
        bad.extend(KEEPING_RULES.iter().filter_map(|rule| rule(&f, i)));
    }
    let bytes = f.device_bytes();
    bad.extend(saved_bytes_add_up(&f, bytes));
    bad.extend(budget_is_met(&f, bytes));
    for d in &p.decisions {
        bad.extend(decision_matches(&f, d.node.index(), d.action));
        bad.extend(recompute_reasons_are_recomputed(&f, d.node.index(), d.action, d.reason));
    }
    bad.extend(one_decision_per_needed_value(&f));
    Ok(bad)
}

/// A rule over one node: the violation it finds there, if any.
type NodeRule = fn(&Facts<'_>, usize) -> Option<String>;

/// What the rules read, restated from the graph's tags and flags and the partition's sets.
struct Facts<'a> {
    g: &'a PGraph,
    p: &'a Partition,
    /// Per node: in `p.recomputed`.
    recomputed: Vec<bool>,
    /// Per node: a forward output (held by the caller).
    output: Vec<bool>,
    /// What the backward needs: its reads, and the inputs of everything recomputed.
    needed: Vec<bool>,
    /// Boundary values: read by a region node from outside its instance, or by a gradient node
    /// of `u` from another instance than `u`'s.
    boundary: Vec<bool>,
    /// Bases of views that must be kept (MustSave or boundary views) and that the backward needs.
    kept_base: Vec<bool>,
    /// Those of `kept_base` kept by a region that reads the view (a boundary view).
    read_base: Vec<bool>,
    /// Bases of must_save views.
    must_save_base: Vec<bool>,
    /// Offload wishes: a node's own offload tag or that of a view of it, where the value can
    /// leave the device (not resident, not an output, not the base of a must_save view).
    wish: Vec<Option<Policy>>,
    /// A must_offload the backward asks for: the value's own tag, or that of a view it needs.
    must_offload_needed: Vec<bool>,
    /// The strategy chooses offload itself (`BudgetOffload`).
    choose: bool,
}

impl<'a> Facts<'a> {
    fn new(g: &'a PGraph, p: &'a Partition) -> Self {
        let n = g.len();
        let mut recomputed = vec![false; n];
        for &r in &p.recomputed {
            recomputed[r.index()] = true;
        }
        let output = g.output_mask();
        let mut f = Facts {
            g,
            p,
            recomputed,
            output,
            needed: vec![false; n],
            boundary: vec![false; n],
            kept_base: vec![false; n],
            read_base: vec![false; n],
            must_save_base: vec![false; n],
            wish: vec![None; n],
            must_offload_needed: vec![false; n],
            choose: p.strategy.chooses_offload(),
        };
        f.find_needed();
        f.find_boundary();
        f.find_kept_bases();
        f.find_offload_wishes();
        f
    }

    fn find_needed(&mut self) {
        let g = self.g;
        for node in g.nodes.iter().filter(|x| x.backward) {
            for &x in &node.inputs {
                if !g.node(x).backward {
                    self.needed[x.index()] = true;
                }
            }
        }
        for i in (0..g.len()).rev() {
            if self.needed[i] && self.recomputed[i] {
                for &x in &g.nodes[i].inputs {
                    self.needed[x.index()] = true;
                }
            }
        }
    }

    fn find_boundary(&mut self) {
        let g = self.g;
        for node in &g.nodes {
            let reader = match (node.backward, node.grad_of) {
                (false, _) if node.region.is_some() => Some(node.region),
                (true, Some(u)) => Some(g.node(u).region),
                _ => None,
            };
            if let Some(region) = reader {
                for &x in &node.inputs {
                    if !g.node(x).backward && g.node(x).region != region {
                        self.boundary[x.index()] = true;
                    }
                }
            }
        }
    }

    fn find_kept_bases(&mut self) {
        for i in 0..self.g.len() {
            let v = &self.g.nodes[i];
            if !v.backward
                && v.flags.view
                && self.needed[i]
                && (matches!(v.policy, Some(Policy::MustSave | Policy::MustOffload)) || self.boundary[i])
            {
                let b = self.base(i);
                self.kept_base[b] = true;
                self.read_base[b] |= self.boundary[i];
            }
        }
    }

    fn find_offload_wishes(&mut self) {
        let g = self.g;
        for i in 0..g.len() {
            let v = &g.nodes[i];
            if !v.backward && v.flags.view && v.policy == Some(Policy::MustSave) {
                let b = self.base(i);
                self.must_save_base[b] = true;
            }
        }
        for (i, v) in g.nodes.iter().enumerate() {
            if let (false, Some(pol @ (Policy::MustOffload | Policy::PreferOffload))) = (v.backward, v.policy) {
                let b = self.base(i);
                let factory = b != i && g.nodes[b].inputs.is_empty() && !g.nodes[b].flags.random;
                let base_must_save = b != i && g.nodes[b].policy == Some(Policy::MustSave);
                let stays = !self.leaves(b) || factory || self.must_save_base[b] || base_must_save;
                if !stays && self.wish[b] != Some(Policy::MustOffload) {
                    self.wish[b] = Some(pol);
                }
                if !stays && pol == Policy::MustOffload && (b == i || self.needed[i]) {
                    self.must_offload_needed[b] = true;
                }
            }
        }
    }

    fn is_output(&self, i: usize) -> bool {
        self.output[i]
    }

    /// What a view is kept through: its first non-view ancestor, or a held output on the way.
    fn base(&self, mut i: usize) -> usize {
        let g = self.g;
        while g.nodes[i].flags.view && !self.is_output(i) && !g.nodes[i].inputs.is_empty() {
            i = g.nodes[i].inputs[0].index();
        }
        i
    }

    /// Held, saved, or free of inputs to replay from (a factory that is not random).
    fn kept(&self, i: usize) -> bool {
        let n = &self.g.nodes[i];
        self.p.saved[i] || n.flags.resident || (n.inputs.is_empty() && !n.flags.random)
    }

    /// Inside a region with its own budget: its Prefer tags are soft in every strategy.
    fn budgeted(&self, i: usize) -> bool {
        let g = self.g;
        let mut r = g.nodes[i].region;
        while let Some(x) = r {
            if g.regions[x.index()].budget.is_some() {
                return true;
            }
            r = g.regions[x.index()].parent;
        }
        false
    }

    /// Can leave the device: not resident, not a forward output.
    fn leaves(&self, i: usize) -> bool {
        !self.g.nodes[i].flags.resident && !self.is_output(i)
    }

    fn describe(&self, i: usize) -> String {
        self.g.describe(NodeId::from_index(i))
    }

    /// The bytes of the saved forward values on the device: neither offloaded, resident nor
    /// forward outputs.
    fn device_bytes(&self) -> u128 {
        let (g, p) = (self.g, self.p);
        (0..g.len())
            .filter(|&i| {
                let node = &g.nodes[i];
                !node.backward && p.saved[i] && !p.offloaded[i] && !node.flags.resident && !self.is_output(i)
            })
            .map(|i| g.nodes[i].bytes as u128)
            .sum()
    }
}

/// Offloaded values are kept: an offloaded value is also saved.
fn offloaded_is_kept(f: &Facts<'_>, i: usize) -> Option<String> {
    (f.p.offloaded[i] && !f.p.saved[i]).then(|| format!("{}: offloaded but not kept", f.describe(i)))
}

/// Offloaded values are never backward nodes, views, inputs, parameters (residents) or forward
/// outputs.
fn offloaded_leaves_the_device(f: &Facts<'_>, i: usize) -> Option<String> {
    let node = &f.g.nodes[i];
    (f.p.offloaded[i] && (node.backward || node.flags.view || !f.leaves(i)))
        .then(|| format!("{}: offloaded, but it is a backward node, a view, resident or an output", f.describe(i)))
}

/// A must_save value (or the base of a must_save view) is never offloaded.
fn must_save_is_not_offloaded(f: &Facts<'_>, i: usize) -> Option<String> {
    let must_save = f.g.nodes[i].policy == Some(Policy::MustSave) || f.must_save_base[i];
    (f.p.offloaded[i] && must_save)
        .then(|| format!("{}: must_save (or the base of a must_save view) but offloaded", f.describe(i)))
}

/// Outside `BudgetOffload` only the values whose own or whose view's offload tag can be met are
/// offloaded.
fn offloaded_only_where_tagged(f: &Facts<'_>, i: usize) -> Option<String> {
    (f.p.offloaded[i] && !f.choose && f.wish[i].is_none())
        .then(|| format!("{}: offloaded without an offload tag under {}", f.describe(i), f.p.strategy))
}

/// A kept must_offload value (a view through its base) is offloaded, never saved on the device.
fn must_offload_is_not_saved_on_the_device(f: &Facts<'_>, i: usize) -> Option<String> {
    (!f.p.offloaded[i] && f.p.saved[i] && f.wish[i] == Some(Policy::MustOffload))
        .then(|| format!("{}: must_offload but saved on the device", f.describe(i)))
}

/// Outside `BudgetOffload` every kept value whose own or whose view's offload tag can be met is
/// offloaded.
fn offload_tags_are_met(f: &Facts<'_>, i: usize) -> Option<String> {
    let prefer = f.wish[i].is_some() && f.wish[i] != Some(Policy::MustOffload);
    (!f.p.offloaded[i] && f.p.saved[i] && prefer && !f.choose)
        .then(|| format!("{}: offload tag, kept, but not offloaded under {}", f.describe(i), f.p.strategy))
}

/// A needed must_offload value (a view through its base) is never recomputed.
fn must_offload_is_not_recomputed(f: &Facts<'_>, i: usize) -> Option<String> {
    (f.must_offload_needed[i] && f.recomputed[i]).then(|| format!("{}: must_offload but recomputed", f.describe(i)))
}

/// `host_bytes` adds up the offloaded values.
fn host_bytes_add_up(f: &Facts<'_>) -> Option<String> {
    let host: u128 = (0..f.g.len()).filter(|&i| f.p.offloaded[i]).map(|i| f.g.nodes[i].bytes as u128).sum();
    (host != f.p.host_bytes as u128)
        .then(|| format!("host_bytes is {} but the offloaded values add up to {host}", f.p.host_bytes))
}

/// The backward's own nodes are neither saved nor recomputed.
fn backward_is_untouched(f: &Facts<'_>, i: usize) -> Option<String> {
    (f.p.saved[i] || f.recomputed[i]).then(|| format!("{}: a backward node is saved or recomputed", f.describe(i)))
}

/// A value is saved or recomputed, not both.
fn not_both_saved_and_recomputed(f: &Facts<'_>, i: usize) -> Option<String> {
    (f.p.saved[i] && f.recomputed[i]).then(|| format!("{}: both saved and recomputed", f.describe(i)))
}

/// Everything the backward or a recompute reads is saved or recomputed, and nothing else is.
fn needed_exactly(f: &Facts<'_>, i: usize) -> Option<String> {
    (f.needed[i] != (f.p.saved[i] || f.recomputed[i])).then(|| {
        let what =
            if f.needed[i] { "needed but neither saved nor recomputed" } else { "kept or recomputed but never needed" };
        format!("{}: {what}", f.describe(i))
    })
}

/// Views are never saved (a view that is a forward output is held, as any output).
fn views_are_not_saved(f: &Facts<'_>, i: usize) -> Option<String> {
    (f.g.nodes[i].flags.view && f.p.saved[i] && !f.is_output(i)).then(|| format!("{}: a view is saved", f.describe(i)))
}

/// A MustRecompute value is never saved unless a region reads it (or a view of it) from outside
/// the producer's instance: a producer's must_recompute never cancels its reader's keep.
fn must_recompute_is_not_saved(f: &Facts<'_>, i: usize) -> Option<String> {
    let node = &f.g.nodes[i];
    let read = f.boundary[i] || f.read_base[i];
    (node.policy == Some(Policy::MustRecompute) && f.p.saved[i] && !node.flags.resident && !f.is_output(i) && !read)
        .then(|| format!("{}: must_recompute but saved", f.describe(i)))
}

/// Outputs, residents and not-recomputable values are never recomputed.
fn held_values_are_not_recomputed(f: &Facts<'_>, i: usize) -> Option<String> {
    let flags = f.g.nodes[i].flags;
    if !(f.recomputed[i] && (flags.resident || flags.not_recomputable || f.is_output(i))) {
        return None;
    }
    let why: Vec<&str> = [
        (flags.resident, "an input, a parameter or a constant (resident)"),
        (f.is_output(i), "a forward output"),
        (flags.not_recomputable, "flagged not_recomputable"),
    ]
    .into_iter()
    .filter_map(|(holds, what)| holds.then_some(what))
    .collect();
    Some(format!("{}: recomputed, but it is {}", f.describe(i), why.join(" and ")))
}

/// A random value without inputs (a draw) is never recomputed.
fn random_sources_are_not_recomputed(f: &Facts<'_>, i: usize) -> Option<String> {
    let node = &f.g.nodes[i];
    (f.recomputed[i] && node.inputs.is_empty() && node.flags.random)
        .then(|| format!("{}: a random value without inputs is recomputed", f.describe(i)))
}

/// A needed MustSave (or MustOffload) value and a needed boundary value are kept — a view through
/// its base, which may be resident or a held output it views.
fn must_keep_is_kept(f: &Facts<'_>, i: usize) -> Option<String> {
    let node = &f.g.nodes[i];
    let must_keep =
        f.needed[i] && (matches!(node.policy, Some(Policy::MustSave | Policy::MustOffload)) || f.boundary[i]);
    (must_keep && !f.kept(f.base(i)))
        .then(|| format!("{}: must_save or a boundary value, needed, but not kept", f.describe(i)))
}

/// PreferRecompute values are never saved under `Respect` and `MinCut`, unless something else
/// forces the keep (resident, not recomputable, a random source, an output, a boundary value, the
/// base of a view that must be kept) or a region budget makes the tag soft.
fn prefer_recompute_is_not_saved(f: &Facts<'_>, i: usize) -> Option<String> {
    let node = &f.g.nodes[i];
    let flags = node.flags;
    let prefer_recompute = node.policy == Some(Policy::PreferRecompute);
    if !(prefer_recompute && f.p.saved[i] && matches!(f.p.strategy, Strategy::Respect | Strategy::MinCut)) {
        return None;
    }
    let random_source = node.inputs.is_empty() && flags.random;
    let forced = flags.resident || flags.not_recomputable || random_source || f.is_output(i) || f.boundary[i];
    (!forced && !f.kept_base[i] && !f.budgeted(i))
        .then(|| format!("{}: prefer_recompute saved under {}", f.describe(i), f.p.strategy))
}

/// `saved_bytes` is the sum of the saved values other than residents, outputs and offloaded
/// values.
fn saved_bytes_add_up(f: &Facts<'_>, bytes: u128) -> Option<String> {
    (bytes != f.p.saved_bytes as u128)
        .then(|| format!("saved_bytes is {} but the saved values add up to {bytes}", f.p.saved_bytes))
}

/// A byte budget is met by the device bytes (offloaded values excluded).
fn budget_is_met(f: &Facts<'_>, bytes: u128) -> Option<String> {
    match f.p.strategy {
        Strategy::Budget(Budget::Bytes(limit)) | Strategy::BudgetOffload(Budget::Bytes(limit))
            if bytes > limit as u128 =>
        {
            Some(format!("saved {bytes} bytes, over the budget of {limit}"))
        }
        _ => None,
    }
}

/// Each decision's action matches the partition: offload, save or recompute.
fn decision_matches(f: &Facts<'_>, i: usize, said: Action) -> Option<String> {
    let action = match (f.p.saved[i], f.p.offloaded[i]) {
        (true, true) => Action::Offload,
        (true, false) => Action::Save,
        (false, _) => Action::Recompute,
    };
    (said != action).then(|| format!("{}: decision says {said:?} but the partition says {action:?}", f.describe(i)))
}

/// A decision whose reason is one to recompute (a view, a factory, MustRecompute,
/// PreferRecompute) recomputes.
fn recompute_reasons_are_recomputed(f: &Facts<'_>, i: usize, said: Action, reason: Reason) -> Option<String> {
    let recompute_reason =
        matches!(reason, Reason::View | Reason::Factory | Reason::MustRecompute | Reason::PreferRecompute);
    (recompute_reason && said != Action::Recompute)
        .then(|| format!("{}: saved with the reason \"{reason}\"", f.describe(i)))
}

/// One decision per forward value the backward needs.
fn one_decision_per_needed_value(f: &Facts<'_>) -> Option<String> {
    let needed = f.needed.iter().enumerate().filter(|&(i, &x)| x && !f.g.nodes[i].backward).count();
    (f.p.decisions.len() != needed)
        .then(|| format!("{} decisions for the values the backward needs", f.p.decisions.len()))
}
