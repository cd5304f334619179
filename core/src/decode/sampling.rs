//! Picking the next token from a row of logits: greedy, or drawn at a temperature from the top
//! `k`, reproducibly from a seed.

use crate::error::{Error, Result};
use crate::rng;

/// How [`super::Decoder::generate`] picks each token.
///
/// ```
/// use remat_core::Sampling;
/// let greedy = Sampling::greedy();
/// let creative = Sampling::temperature(0.8, 42).top_k(20);
/// assert_eq!(greedy.temperature, 0.0);
/// assert_eq!(creative.top_k, Some(20));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 for greedy (the largest logit, the first on ties); otherwise the logits are divided by
    /// it before the softmax (below 1 sharpens, above 1 flattens).
    pub temperature: f64,
    /// Draw only among the `k` largest logits (ties broken by the lower token id).
    pub top_k: Option<usize>,
    /// The draws' seed: the same seed, prompt and model give the same text.
    pub seed: u64,
}

impl Sampling {
    /// The largest logit each time.
    pub fn greedy() -> Sampling {
        Sampling { temperature: 0.0, top_k: None, seed: 0 }
    }

    /// Drawn from `softmax(logits / temperature)` with the draws seeded by `seed`.
    pub fn temperature(temperature: f64, seed: u64) -> Sampling {
        Sampling { temperature, top_k: None, seed }
    }

    /// This sampling restricted to the `k` largest logits.
    pub fn top_k(self, k: usize) -> Sampling {
        Sampling { top_k: Some(k), ..self }
    }

    /// An error naming what is wrong with these settings.
    pub fn validate(&self) -> Result<()> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(Error::decoder(format!(
                "sampling temperature {} must be finite and at least 0 (0 is greedy)",
                self.temperature
            )));
        }
        if self.top_k == Some(0) {
            return Err(Error::decoder("sampling top_k must be at least 1"));
        }
        Ok(())
    }

    /// The token picked from `logits` for sequence `row` at generated token `index`.
    pub(crate) fn pick(&self, logits: &[f32], index: u64, row: u64) -> i64 {
        if self.temperature == 0.0 {
            let best = (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)));
            return best.unwrap_or(0) as i64;
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        // Largest first; ties keep the lower id first (a stable sort).
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        order.truncate(self.top_k.unwrap_or(order.len()).min(order.len()));
        let Some(&first) = order.first() else { return 0 };
        let top = logits[first] as f64;
        let weights: Vec<f64> = order.iter().map(|&i| ((logits[i] as f64 - top) / self.temperature).exp()).collect();
        let total: f64 = weights.iter().sum();
        let mut target = rng::uniform_f64(self.seed, index, row) * total;
        for (&id, &w) in order.iter().zip(&weights) {
            if target < w {
                return id as i64;
            }
            target -= w;
        }
        // Rounding left a sliver past the last weight.
        order.last().copied().unwrap_or(0) as i64
    }
}

/// The first logit that is NaN or infinite, with its token: no distribution (and no largest
/// value, for a NaN) can be read from a row holding one.
pub(crate) fn first_non_finite(logits: &[f32]) -> Option<(usize, f32)> {
    logits.iter().position(|x| !x.is_finite()).map(|i| (i, logits[i]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest() {
        assert_eq!(Sampling::greedy().pick(&[1.0, 3.0, 3.0, -2.0], 0, 0), 1);
    }

    #[test]
    fn top_one_is_greedy_and_draws_follow_the_softmax() {
        let logits = [0.5f32, 2.0, 1.0, -1.0];
        for i in 0..50 {
            assert_eq!(Sampling::temperature(1.0, 9).top_k(1).pick(&logits, i, 0), 1);
        }
        // Counted over many draws, each token's share is its softmax probability (at
        // temperature 2: the logits halved), within sampling error.
        let s = Sampling::temperature(2.0, 5);
        let n = 40_000;
        let mut counts = [0usize; 4];
        for i in 0..n {
            counts[s.pick(&logits, i, 3) as usize] += 1;
        }
        let z: f64 = logits.iter().map(|&l| (l as f64 / 2.0).exp()).sum();
        for (k, &c) in counts.iter().enumerate() {
            let p = (logits[k] as f64 / 2.0).exp() / z;
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            assert!((c as f64 / n as f64 - p).abs() < 5.0 * sd, "token {k}: {c} of {n}, p = {p}");
        }
    }

    #[test]
    fn top_k_never_draws_outside_the_k_largest() {
        let logits = [0.0f32, 5.0, 4.0, 3.0, 4.5];
        let s = Sampling::temperature(10.0, 1).top_k(2);
        for i in 0..500 {
            assert!(matches!(s.pick(&logits, i, 0), 1 | 4));
        }
    }

    #[test]
    fn bad_settings_are_named() {
        let misuse = |s: Sampling| match s.validate() {
            Err(crate::Error::Decoder { message }) => message,
            other => panic!("{other:?}"),
        };
        assert!(misuse(Sampling::temperature(-1.0, 0)).contains("temperature -1"));
        assert!(misuse(Sampling::temperature(f64::NAN, 0)).contains("temperature NaN"));
        assert!(misuse(Sampling::greedy().top_k(0)).contains("top_k"));
    }
}
