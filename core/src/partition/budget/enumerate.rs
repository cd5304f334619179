//! The exact search for a few candidates: every combination of choices.

use super::problem::{Choice, Cost, Found, Infeasible, Placement, Problem};
use crate::graph::NodeId;

impl Problem<'_> {
    /// Every combination of choices: least cost, then least device bytes, then the first in
    /// enumeration order — deterministic, so equal problems give equal answers.
    pub(super) fn solve_exact(&self, vars: &[(NodeId, &[Choice])]) -> Found {
        let mut at_hand = self.base.clone();
        let mut offloaded = self.off.fixed.clone();
        let mut best: Option<((Cost, u64), Vec<u8>)> = None;
        let mut least = Infeasible { least: vec![u64::MAX; self.limits.len()], least_global_within_regions: None };
        let mut scratch = vec![false; self.g.len()];
        let mut bytes = vec![0; self.limits.len()];
        let mut digits = vec![0u8; vars.len()];
        let fixed = &self.off.fixed;
        let apply = |digits: &[u8], at_hand: &mut [bool], offloaded: &mut [bool]| {
            for (&(v, options), &d) in vars.iter().zip(digits) {
                let choice = options[d as usize];
                // An optional offload is kept as its class says (a tied one only where a view
                // keeps it): the choice is where.
                if options.contains(&Choice::Recompute) {
                    at_hand[v.index()] = choice != Choice::Recompute;
                }
                offloaded[v.index()] = choice == Choice::Offload || fixed[v.index()];
            }
        };
        loop {
            apply(&digits, &mut at_hand, &mut offloaded);
            let (flops, exposed) = self.eval_into(&at_hand, &offloaded, &mut scratch, &mut bytes);
            self.note(&bytes, &mut least);
            let total: u64 = bytes.first().copied().unwrap_or(0);
            let key = (self.cost(flops, exposed), total);
            if self.fits(&bytes) && best.as_ref().is_none_or(|(b, _)| key.0.lt(&b.0, key.1, b.1)) {
                best = Some((key, digits.clone()));
            }
            // Mixed-radix increment, least significant first (the first candidate).
            let mut k = 0;
            loop {
                if k == vars.len() {
                    let (_, digits) = best.ok_or(least)?;
                    apply(&digits, &mut at_hand, &mut offloaded);
                    return Ok(Placement { at_hand, offloaded });
                }
                digits[k] += 1;
                if (digits[k] as usize) < vars[k].1.len() {
                    break;
                }
                digits[k] = 0;
                k += 1;
            }
        }
    }
}
