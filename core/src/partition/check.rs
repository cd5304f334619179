//! An independent check of a partition against the rules of `DESIGN.md` §4, restated here from
//! the tags and flags alone — it shares no code with the classification or the strategies, so a
//! bug there cannot hide itself here. `partition` runs it on every result in debug builds; the
//! property tests run it on every strategy over random graphs.

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
    let mut bad: Vec<String> = Vec::new();
    let n = g.len();
    if p.saved.len() != n || p.offloaded.len() != n {
        return Err(Error::Invalid(format!("partition covers {} nodes, the graph has {n}", p.saved.len())));
    }
    let mut recomputed = vec![false; n];
    for &r in &p.recomputed {
        recomputed[r.index()] = true;
    }
    let mut output = vec![false; n];
    for &o in &g.forward_outputs {
        output[o.index()] = true;
    }
    let is_output = |i: usize| output[i];
    // What a view is kept through: its first non-view ancestor, or a held output on the way.
    let base = |mut i: usize| {
        while g.nodes[i].flags.view && !is_output(i) && !g.nodes[i].inputs.is_empty() {
            i = g.nodes[i].inputs[0].index();
        }
        i
    };
    // Held, saved, or free of inputs to replay from (a factory that is not random).
    let kept = |i: usize| {
        let n = &g.nodes[i];
        p.saved[i] || n.flags.resident || (n.inputs.is_empty() && !n.flags.random)
    };
    // What the backward needs: its reads, and the inputs of everything recomputed.
    let mut needed = vec![false; n];
    for node in g.nodes.iter().filter(|x| x.backward) {
        for &x in &node.inputs {
            if !g.node(x).backward {
                needed[x.index()] = true;
            }
        }
    }
    for i in (0..n).rev() {
        if needed[i] && recomputed[i] {
            for &x in &g.nodes[i].inputs {
                needed[x.index()] = true;
            }
        }
    }
    // Boundary readers, restated: a region node reading a value from outside its instance, or
    // a gradient node of `u` reading a value from another instance than `u`'s.
    let mut boundary = vec![false; n];
    for node in &g.nodes {
        let reader = match (node.backward, node.grad_of) {
            (false, _) if node.region.is_some() => Some(node.region),
            (true, Some(u)) => Some(g.node(u).region),
            _ => None,
        };
        if let Some(region) = reader {
            for &x in &node.inputs {
                if !g.node(x).backward && g.node(x).region != region {
                    boundary[x.index()] = true;
                }
            }
        }
    }
    // Bases of views that must be kept (MustSave or boundary views) and that the backward needs;
    // `read_base`: those kept by a region that reads the view (a boundary view).
    let mut kept_base = vec![false; n];
    let mut read_base = vec![false; n];
    for i in 0..n {
        let v = &g.nodes[i];
        if !v.backward
            && v.flags.view
            && needed[i]
            && (matches!(v.policy, Some(Policy::MustSave | Policy::MustOffload)) || boundary[i])
        {
            kept_base[base(i)] = true;
            read_base[base(i)] |= boundary[i];
        }
    }
    // Values inside a region with its own budget: their Prefer tags are soft in every strategy.
    let budgeted = |i: usize| {
        let mut r = g.nodes[i].region;
        while let Some(x) = r {
            if g.regions[x.index()].budget.is_some() {
                return true;
            }
            r = g.regions[x.index()].parent;
        }
        false
    };
    let describe = |i: usize| g.describe(NodeId::from_index(i));
    // Offload wishes, restated: a node's own offload tag or that of a view of it, where the value
    // can leave the device (not resident, not an output, not the base of a must_save view).
    let leaves = |i: usize| !g.nodes[i].flags.resident && !is_output(i);
    let mut must_save_base = vec![false; n];
    let mut wish = vec![None; n];
    // A must_offload the backward asks for: the value's own tag, or that of a view it needs.
    let mut must_offload_needed = vec![false; n];
    for i in 0..n {
        let v = &g.nodes[i];
        if !v.backward && v.flags.view && v.policy == Some(Policy::MustSave) {
            must_save_base[base(i)] = true;
        }
    }
    for (i, v) in g.nodes.iter().enumerate() {
        if let (false, Some(pol @ (Policy::MustOffload | Policy::PreferOffload))) = (v.backward, v.policy) {
            let b = base(i);
            let factory = b != i && g.nodes[b].inputs.is_empty() && !g.nodes[b].flags.random;
            let base_must_save = b != i && g.nodes[b].policy == Some(Policy::MustSave);
            let stays = !leaves(b) || factory || must_save_base[b] || base_must_save;
            if !stays && wish[b] != Some(Policy::MustOffload) {
                wish[b] = Some(pol);
            }
            if !stays && pol == Policy::MustOffload && (b == i || needed[i]) {
                must_offload_needed[b] = true;
            }
        }
    }
    let choose = matches!(p.strategy, Strategy::BudgetOffload(_));
    let mut host = 0u128;
    for i in 0..n {
        let node = &g.nodes[i];
        if p.offloaded[i] {
            host += node.bytes as u128;
            if !p.saved[i] {
                bad.push(format!("{}: offloaded but not kept", describe(i)));
            }
            if node.backward || node.flags.view || !leaves(i) {
                bad.push(format!(
                    "{}: offloaded, but it is a backward node, a view, resident or an output",
                    describe(i)
                ));
            }
            if node.policy == Some(Policy::MustSave) || must_save_base[i] {
                bad.push(format!("{}: must_save (or the base of a must_save view) but offloaded", describe(i)));
            }
            if !choose && wish[i].is_none() {
                bad.push(format!("{}: offloaded without an offload tag under {}", describe(i), p.strategy));
            }
        } else if p.saved[i] && wish[i] == Some(Policy::MustOffload) {
            bad.push(format!("{}: must_offload but saved on the device", describe(i)));
        } else if p.saved[i] && wish[i].is_some() && !choose {
            bad.push(format!("{}: offload tag, kept, but not offloaded under {}", describe(i), p.strategy));
        }
        if must_offload_needed[i] && recomputed[i] {
            bad.push(format!("{}: must_offload but recomputed", describe(i)));
        }
    }
    if host != p.host_bytes as u128 {
        bad.push(format!("host_bytes is {} but the offloaded values add up to {host}", p.host_bytes));
    }
    let mut bytes = 0u128;
    for i in 0..n {
        let node = &g.nodes[i];
        if node.backward {
            if p.saved[i] || recomputed[i] {
                bad.push(format!("{}: a backward node is saved or recomputed", describe(i)));
            }
            continue;
        }
        let f = node.flags;
        if p.saved[i] && recomputed[i] {
            bad.push(format!("{}: both saved and recomputed", describe(i)));
        }
        if needed[i] != (p.saved[i] || recomputed[i]) {
            let what = if needed[i] {
                "needed but neither saved nor recomputed"
            } else {
                "kept or recomputed but never needed"
            };
            bad.push(format!("{}: {what}", describe(i)));
        }
        if f.view && p.saved[i] && !is_output(i) {
            bad.push(format!("{}: a view is saved", describe(i)));
        }
        // A producer's must_recompute never cancels its reader's keep.
        let read = boundary[i] || read_base[i];
        if node.policy == Some(Policy::MustRecompute) && p.saved[i] && !f.resident && !is_output(i) && !read {
            bad.push(format!("{}: must_recompute but saved", describe(i)));
        }
        if recomputed[i] && (f.resident || f.not_recomputable || is_output(i)) {
            let why: Vec<&str> = [
                (f.resident, "an input, a parameter or a constant (resident)"),
                (is_output(i), "a forward output"),
                (f.not_recomputable, "flagged not_recomputable"),
            ]
            .into_iter()
            .filter_map(|(holds, what)| holds.then_some(what))
            .collect();
            bad.push(format!("{}: recomputed, but it is {}", describe(i), why.join(" and ")));
        }
        if recomputed[i] && node.inputs.is_empty() && f.random {
            bad.push(format!("{}: a random value without inputs is recomputed", describe(i)));
        }
        let must_keep =
            needed[i] && (matches!(node.policy, Some(Policy::MustSave | Policy::MustOffload)) || boundary[i]);
        if must_keep && !kept(base(i)) {
            bad.push(format!("{}: must_save or a boundary value, needed, but not kept", describe(i)));
        }
        let prefer_recompute = node.policy == Some(Policy::PreferRecompute);
        if prefer_recompute && p.saved[i] && matches!(p.strategy, Strategy::Respect | Strategy::MinCut) {
            let random_source = node.inputs.is_empty() && f.random;
            let forced = f.resident || f.not_recomputable || random_source || is_output(i) || boundary[i];
            if !forced && !kept_base[i] && !budgeted(i) {
                bad.push(format!("{}: prefer_recompute saved under {}", describe(i), p.strategy));
            }
        }
        if p.saved[i] && !p.offloaded[i] && !f.resident && !is_output(i) {
            bytes += node.bytes as u128;
        }
    }
    if bytes != p.saved_bytes as u128 {
        bad.push(format!("saved_bytes is {} but the saved values add up to {bytes}", p.saved_bytes));
    }
    if let Strategy::Budget(Budget::Bytes(limit)) | Strategy::BudgetOffload(Budget::Bytes(limit)) = p.strategy {
        if bytes > limit as u128 {
            bad.push(format!("saved {bytes} bytes, over the budget of {limit}"));
        }
    }
    for d in &p.decisions {
        let i = d.node.index();
        let action = match (p.saved[i], p.offloaded[i]) {
            (true, true) => Action::Offload,
            (true, false) => Action::Save,
            (false, _) => Action::Recompute,
        };
        if d.action != action {
            bad.push(format!("{}: decision says {:?} but the partition says {action:?}", describe(i), d.action));
        }
        let recompute_reason =
            matches!(d.reason, Reason::View | Reason::Factory | Reason::MustRecompute | Reason::PreferRecompute);
        if recompute_reason && d.action != Action::Recompute {
            bad.push(format!("{}: saved with the reason \"{}\"", describe(i), d.reason));
        }
    }
    if p.decisions.len() != needed.iter().enumerate().filter(|&(i, &x)| x && !g.nodes[i].backward).count() {
        bad.push(format!("{} decisions for the values the backward needs", p.decisions.len()));
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(format!("the partition breaks the rules:\n  {}", bad.join("\n  "))))
    }
}
