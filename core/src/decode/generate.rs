//! The generation loop: prompts fed through the caches, tokens picked and fed back, and fresh
//! passes when the caches are full.

use super::{sampling, Decoder, Generation, Sampling};
use crate::backend::Backend;
use crate::error::{Error, Result};

impl<'b, B: Backend> Decoder<'b, B> {
    /// Generates `n` tokens after each sequence's prompt (all of one length), picking each as
    /// `sampling` says. The prompts run through the caches one token at a time from position 0
    /// ([`Decoder::reset`]); prompt and generated text must fit the caches: a prompt of `len`
    /// tokens and `n ≥ 1` generated ones take `len + n - 1` positions (the last token generated
    /// is never fed back). `n = 0` runs nothing and returns no tokens. See
    /// [`Decoder::generate_sliding`] for longer text.
    pub fn generate(&mut self, prompts: &[Vec<i64>], n: usize, sampling: &Sampling) -> Result<Generation> {
        let len = prompts.first().map_or(0, Vec::len);
        // In u128, where `len + n - 1` cannot wrap: a wrapped sum once passed the check and
        // generated forever.
        let needed = (len as u128 + n as u128).saturating_sub(1);
        if n > 0 && needed > self.max_len as u128 {
            return Err(Error::decoder(format!(
                "a prompt of {len} tokens and {n} generated need {needed} positions ({len} + {n} - 1: the last \
                 generated token is not fed back); the caches hold {} (generate_sliding goes on past them)",
                self.max_len
            )));
        }
        self.generate_sliding(prompts, n, sampling, self.max_len)
    }

    /// [`Decoder::generate`] for text longer than the caches: whenever they are full, the last
    /// `keep` tokens of each sequence become the prompt of a fresh pass from position 0 (what a
    /// model with a fixed context window sees of them). Draws continue, not repeat, across passes.
    ///
    /// Every row of logits a token is picked from must be finite: a NaN or infinite logit is an
    /// error naming the generated token, its position and the sequence.
    pub fn generate_sliding(
        &mut self,
        prompts: &[Vec<i64>],
        n: usize,
        sampling: &Sampling,
        keep: usize,
    ) -> Result<Generation> {
        sampling.validate()?;
        let len = prompts.first().map_or(0, Vec::len);
        if prompts.len() != self.batch || len == 0 || prompts.iter().any(|p| p.len() != len) {
            let mut lens: Vec<String> = prompts.iter().take(8).map(|p| p.len().to_string()).collect();
            if prompts.len() > 8 {
                lens.push(format!("... ({} prompts)", prompts.len()));
            }
            return Err(Error::decoder(format!(
                "generate takes {} prompts (one per sequence) of one length, at least 1: got lengths [{}]",
                self.batch,
                lens.join(", ")
            )));
        }
        if n == 0 {
            self.measured_peak = 0;
            let tokens = vec![Vec::new(); self.batch];
            return Ok(Generation { tokens, steps: 0, predicted_peak: self.step_predicted_peak(), measured_peak: 0 });
        }
        if keep == 0 || keep > self.max_len || len > self.max_len {
            return Err(Error::decoder(format!(
                "the caches hold {} positions: the prompt ({len} tokens) and the tokens kept per pass ({keep}) must be 1 to {0}",
                self.max_len
            )));
        }
        let mut text = self.text_for(prompts, n)?;
        self.measured_peak = 0;
        let mut context = len;
        let mut steps = 0;
        while text[0].len() - len < n {
            self.reset()?;
            let mut logits = Vec::new();
            for i in text[0].len() - context..text[0].len() {
                let column: Vec<i64> = text.iter().map(|t| t[i]).collect();
                logits = self.step(&column)?;
            }
            loop {
                let index = text[0].len() - len;
                let next = self.pick(&logits, sampling, index)?;
                for (row, &t) in next.iter().enumerate() {
                    text[row].push(t);
                }
                if text[0].len() - len == n || self.position == self.max_len {
                    break;
                }
                logits = self.step(&next)?;
            }
            steps += self.position;
            context = keep;
        }
        Ok(Generation {
            tokens: text.into_iter().map(|t| t[len..].to_vec()).collect(),
            steps,
            predicted_peak: self.step_predicted_peak(),
            measured_peak: self.measured_peak,
        })
    }

    /// The prompts, with room reserved for `n` more tokens each: a length no memory holds is an
    /// error now, not an abort after hours of steps.
    fn text_for(&self, prompts: &[Vec<i64>], n: usize) -> Result<Vec<Vec<i64>>> {
        let mut text = Vec::with_capacity(prompts.len());
        for prompt in prompts {
            let mut row = Vec::new();
            let total = prompt.len().checked_add(n);
            if total.is_none_or(|t| row.try_reserve_exact(t).is_err()) {
                return Err(Error::HostMemory {
                    what: format!("{n} generated tokens after a prompt of {} (per sequence)", prompt.len()),
                    bytes: total.and_then(|t| u64::try_from(t).ok()?.checked_mul(8)),
                });
            }
            row.extend_from_slice(prompt);
            text.push(row);
        }
        Ok(text)
    }

    /// The next token of each sequence, picked from its row of `logits` (generated token
    /// `index`, read at the position before [`Decoder::position`]).
    fn pick(&self, logits: &[f32], sampling: &Sampling, index: usize) -> Result<Vec<i64>> {
        let mut next = Vec::with_capacity(self.batch);
        for (row, values) in logits.chunks_exact(self.vocab).enumerate() {
            if let Some((token, value)) = sampling::first_non_finite(values) {
                return Err(Error::decoder(format!(
                    "generated token {index} (the step at position {}), sequence {row}: the logit of token {token} \
                     is {value}; a non-finite logit cannot be picked from (are the parameters finite?)",
                    self.position.saturating_sub(1)
                )));
            }
            next.push(sampling.pick(values, index as u64, row as u64));
        }
        Ok(next)
    }
}
