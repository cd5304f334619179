//! Scoring a decision made elsewhere — PyTorch's, a user's hand-picked one, another strategy's
//! — under remat's rules and cost model, so that decisions can be compared on one scale.

use super::check::broken_rules;
use super::{Action, Budget, Decision, PGraph, Partition, Reason, Strategy};
use crate::error::{Error, Result};
use crate::graph::NodeId;

/// A saved set, completed and scored by [`evaluate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// The completed decision: the given values saved (a view through its base), what is held
    /// anyway (inputs, parameters, forward outputs) kept, and everything else the backward
    /// reaches recomputed — with its saved bytes and recompute FLOPs.
    pub partition: Partition,
    /// Every rule it breaks, one line each ([`check`](super::check())'s lines); empty when it keeps them all.
    pub broken: Vec<String>,
    /// Given values the backward never reaches, each once, in the order given: they would be
    /// kept for nothing.
    pub unneeded: Vec<NodeId>,
}

/// Completes the decision "keep `saved` (and what is held anyway), recompute the rest" over
/// `g`, and scores it: saved bytes, recompute FLOPs, and the rules it breaks. The rules are the
/// ones every strategy keeps (Prefer tags are soft, as under a budget, and offloading is a
/// choice): a must_save or boundary value that is not kept, a must_recompute value that is
/// saved, a value recomputed that cannot be. A view in `saved` stands for its base.
pub fn evaluate(g: &PGraph, saved: &[NodeId]) -> Result<Evaluation> {
    g.validate()?;
    let output = g.output_mask();
    let mut at_hand = vec![false; g.len()];
    for &i in saved {
        let n =
            g.nodes.get(i.index()).ok_or_else(|| Error::config("saved", format!("{i} is not a node of the graph")))?;
        if n.backward {
            return Err(Error::config(
                "saved",
                format!("{}: a backward node cannot be saved for the backward", g.describe(i)),
            ));
        }
        at_hand[g.view_base(i, &output).index()] = true;
    }
    for i in g.ids() {
        let n = g.node(i);
        if !n.backward && (n.flags.resident || output[i.index()]) {
            at_hand[i.index()] = true;
        }
    }
    let reached = super::classify::closure(g, &at_hand);
    // A value given twice is one decision, listed once.
    let mut listed = vec![false; g.len()];
    let unneeded: Vec<NodeId> = saved
        .iter()
        .copied()
        .filter(|&i| !reached[g.view_base(i, &output).index()] && !std::mem::replace(&mut listed[i.index()], true))
        .collect();
    let mut p = Partition {
        // No strategy made this decision; the least constraining one stands in for the
        // checker, which reads it. Reports of an evaluation name the given decision instead
        // (`Report::with_heading`).
        strategy: Strategy::BudgetOffload(Budget::Bytes(u64::MAX)),
        saved: vec![false; g.len()],
        offloaded: vec![false; g.len()],
        recomputed: Vec::new(),
        decisions: Vec::new(),
        warnings: Vec::new(),
        saved_bytes: 0,
        host_bytes: 0,
        exposed_transfer_s: 0.0,
        held_bytes: 0,
        recompute_flops: 0,
        optimality_gap: None,
    };
    for i in g.ids().filter(|&i| !g.node(i).backward && reached[i.index()]) {
        let n = g.node(i);
        let action = if at_hand[i.index()] {
            p.saved[i.index()] = true;
            if super::counts_bytes(g, i) {
                p.saved_bytes = p.saved_bytes.saturating_add(n.bytes);
            } else {
                p.held_bytes = p.held_bytes.saturating_add(n.bytes);
            }
            Action::Save
        } else {
            p.recomputed.push(i);
            p.recompute_flops = p.recompute_flops.saturating_add(n.flops);
            Action::Recompute
        };
        let reason = match (n.flags.resident, output[i.index()], n.flags.view) {
            (true, ..) => Reason::Resident,
            (_, true, _) => Reason::Output,
            (_, _, true) => Reason::View,
            _ => Reason::Given,
        };
        p.decisions.push(Decision { node: i, action, reason, overrode: None, offload: None });
    }
    let broken = broken_rules(g, &p)?;
    Ok(Evaluation { partition: p, broken, unneeded })
}

/// `p` (an [`evaluate`]d decision) with the saved values of `offloaded` kept in host memory
/// instead: their bytes move from `saved_bytes` to `host_bytes`, their exposed seconds
/// (`exposed`, per node: [`super::exposed_times`]) are added, their decisions become offloads
/// chosen by the solver. Values not saved are left alone; whether each may leave the device is
/// the checker's to say ([`super::check()`]).
#[cfg_attr(not(feature = "exact"), allow(dead_code))]
pub(crate) fn offloading(g: &PGraph, mut p: Partition, offloaded: &[bool], exposed: &[f64]) -> Partition {
    for d in p.decisions.iter_mut().filter(|d| d.action == Action::Save && offloaded[d.node.index()]) {
        let i = d.node;
        p.offloaded[i.index()] = true;
        if super::counts_bytes(g, i) {
            p.saved_bytes -= g.node(i).bytes;
        } else {
            p.held_bytes -= g.node(i).bytes;
        }
        p.host_bytes += g.node(i).bytes;
        p.exposed_transfer_s += exposed[i.index()];
        d.action = Action::Offload;
        d.offload = Some(super::OffloadReason::Solver);
    }
    p
}
