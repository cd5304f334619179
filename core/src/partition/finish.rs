//! Turning the strategies' choices into a [`Partition`]: the decisions with their reasons, the
//! byte and FLOP sums, and the warnings about unneeded Must values.

use super::classify::{closure_from, Class};
use super::{counts_bytes, offload, Action, Decision, OffloadReason, PGraph, Partition, Reason, Strategy};
use crate::graph::RegionId;
use crate::policy::{Policy, PolicySource};

/// Where a grouped warning's values are: in region `f` (the function's name, shortened), or
/// outside any region.
pub(crate) fn in_region(function: Option<&str>) -> String {
    function.map_or("outside any region".to_string(), |f| {
        format!("in region `{}`", crate::text::shorten(f, crate::text::CELL))
    })
}

/// Unneeded Must values of one region function, op and policy: how many, and in how many
/// instances.
#[derive(Default)]
struct Unneeded {
    values: u32,
    instances: rustc_hash::FxHashSet<RegionId>,
    /// The instance, when there is just one (named in the warning).
    first: Option<RegionId>,
}

/// What groups unneeded Must values: the region function, the op and the policy.
type UnneededKey<'a> = (Option<&'a str>, &'a str, Policy);

/// Groups of unneeded Must values, in order of first sight.
#[derive(Default)]
struct UnneededGroups<'a> {
    index: rustc_hash::FxHashMap<UnneededKey<'a>, usize>,
    groups: Vec<(UnneededKey<'a>, Unneeded)>,
}

impl<'a> UnneededGroups<'a> {
    fn add(&mut self, function: Option<&'a str>, op: &'a str, policy: Policy, region: Option<RegionId>) {
        let key = (function, op, policy);
        let k = *self.index.entry(key).or_insert_with(|| {
            self.groups.push((key, Unneeded::default()));
            self.groups.len() - 1
        });
        let group = &mut self.groups[k].1;
        group.values += 1;
        if let Some(r) = region {
            group.first.get_or_insert(r);
            group.instances.insert(r);
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    g: &PGraph,
    strategy: Strategy,
    class: &[Class],
    reads: &[bool],
    backward: &[bool],
    at_hand: &[bool],
    chosen: &[Option<Reason>],
    off: &[bool],
    wishes: &offload::Wishes,
    exposed: &[f64],
) -> Partition {
    let reached = closure_from(g, reads.to_vec(), at_hand);
    let mut saved = vec![false; g.len()];
    let mut offloaded = vec![false; g.len()];
    let (mut host_bytes, mut exposed_transfer_s) = (0u64, 0f64);
    let mut recomputed = Vec::new();
    let mut decisions = Vec::new();
    // Grouped by region function (not instance: a model calls one function per layer), op and
    // policy.
    let mut unneeded = UnneededGroups::default();
    let (mut saved_bytes, mut held_bytes, mut recompute_flops) = (0u64, 0u64, 0u64);
    // Backward nodes skipped by the phase table, not loaded (most of a joint graph's nodes).
    for i in g.ids().filter(|i| !backward[i.index()]) {
        let n = g.node(i);
        if !reached[i.index()] {
            // Warned about only where the user chose the value itself (a statement attribute,
            // `save_names`, an explicit tag): a kind-wide rule such as `save(matmul)` covers
            // values the backward happens not to read (a projection feeding a residual add),
            // and not keeping those is what the rule means.
            let chosen_one_by_one =
                matches!(n.source, Some(PolicySource::Name | PolicySource::Statement | PolicySource::Explicit) | None);
            if let (Some(p @ (Policy::MustSave | Policy::MustOffload)), true) = (n.policy, chosen_one_by_one) {
                let function = n.region.map(|r| g.regions[r.index()].name.as_str());
                unneeded.add(function, &n.op, p, n.region);
            }
            continue;
        }
        let action = match (at_hand[i.index()], off[i.index()]) {
            (true, true) => Action::Offload,
            (true, false) => Action::Save,
            (false, _) => Action::Recompute,
        };
        let reason = chosen[i.index()].unwrap_or(match class[i.index()] {
            Class::Forced(r) | Class::Forbidden(r) | Class::Soft(r) | Class::Tied(r) => r,
        });
        // Only a soft decision can go against a Prefer tag; forced ones follow the rules, and a
        // reader keeps a value whatever its producer's must_recompute says.
        let overrode = match (class[i.index()], action, n.policy) {
            (Class::Forced(r), Action::Save | Action::Offload, Some(p @ Policy::MustRecompute)) if r.is_boundary() => {
                Some(p)
            }
            (Class::Tied(_), Action::Save | Action::Offload, Some(p @ Policy::MustRecompute)) => Some(p),
            (Class::Soft(_), Action::Save | Action::Offload, Some(p @ Policy::PreferRecompute))
            | (Class::Soft(_), Action::Recompute | Action::Offload, Some(p @ Policy::PreferSave))
            | (Class::Soft(_), Action::Recompute | Action::Save, Some(p @ Policy::PreferOffload)) => Some(p),
            _ => None,
        };
        let offload = (action == Action::Offload).then(|| match (wishes.wish[i.index()], wishes.via_view[i.index()]) {
            (Some(p), Some(v)) => OffloadReason::View(p, v),
            (Some(p), None) if !strategy.chooses_offload() || p == Policy::MustOffload => OffloadReason::Tag(p),
            _ => OffloadReason::Solver,
        });
        // Sums cannot overflow: `PGraph::validate` checked the graph's totals.
        if action == Action::Offload {
            saved[i.index()] = true;
            offloaded[i.index()] = true;
            host_bytes += n.bytes;
            exposed_transfer_s += exposed[i.index()];
        } else if action == Action::Save {
            saved[i.index()] = true;
            if counts_bytes(g, i) {
                saved_bytes += n.bytes;
            } else {
                held_bytes += n.bytes;
            }
        } else {
            recomputed.push(i);
            recompute_flops += n.flops;
        }
        decisions.push(Decision { node: i, action, reason, overrode, offload });
    }
    let warnings = unneeded
        .groups
        .into_iter()
        .map(|((function, op, policy), group)| {
            let count = group.values;
            let region = match (function, group.instances.len(), group.first) {
                (Some(_), 1, Some(one)) => format!("in region `{}`", g.region_label(one)),
                (Some(_), many, _) => format!("{} ({many} instances)", in_region(function)),
                (None, ..) => in_region(None),
            };
            let op = crate::text::shorten(op, crate::text::CELL);
            let (values, them) =
                if count == 1 { ("1 value is".to_string(), "it") } else { (format!("{count} values are"), "them") };
            let not = if policy == Policy::MustSave { "not saved" } else { "not offloaded" };
            format!("{region}: {values} {policy} ({op}) but the backward never needs {them}: {not}")
        })
        .collect();
    Partition {
        strategy,
        saved,
        offloaded,
        recomputed,
        decisions,
        warnings,
        saved_bytes,
        host_bytes,
        exposed_transfer_s,
        held_bytes,
        recompute_flops,
        optimality_gap: None,
    }
}
