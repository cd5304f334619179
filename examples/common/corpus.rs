//! The byte corpus of the examples that train on text: a file given by `--text`, or a built-in
//! one, split into training text and held-out text, cut into batches of windows.

use remat::prelude::*;
use std::path::Path;

/// A byte corpus split into training (the first 90 %) and held-out text.
pub struct Corpus {
    pub train: Vec<u8>,
    pub held_out: Vec<u8>,
    /// Where the bytes came from (the file, or the built-in corpus), for the examples' banner.
    pub source: String,
}

impl Corpus {
    /// The bytes of `text` (`--text`), or `builtin()`'s without one, split for sequences of
    /// `seq` bytes; an unreadable file or a text too short for them is an error saying which.
    pub fn read(text: Option<&Path>, builtin: fn() -> Vec<u8>, seq: usize) -> Result<Corpus, String> {
        let (bytes, source) = match text {
            Some(path) => (
                std::fs::read(path).map_err(|e| format!("--text {}: {e}", path.display()))?,
                path.display().to_string(),
            ),
            None => (builtin(), "built-in synthetic corpus".to_string()),
        };
        let split = bytes.len() * 9 / 10;
        if split <= seq + 1 || bytes.len() - split <= seq + 1 {
            return Err(format!("the text has {} bytes: too short for sequences of {seq}", bytes.len()));
        }
        Ok(Corpus { held_out: bytes[split..].to_vec(), train: bytes[..split].to_vec(), source })
    }

    /// Batch `step` of `text`: `batch` windows of `seq` bytes at pseudo-random offsets (stream
    /// `salt` of remat's counter-based generator); targets are the inputs shifted by one byte.
    pub fn batch(text: &[u8], (batch, seq): (usize, usize), salt: u64, step: u64) -> Result<Feeds, remat::Error> {
        let (mut tokens, mut targets) = (Vec::with_capacity(batch * seq), Vec::with_capacity(batch * seq));
        for row in 0..batch as u64 {
            // remat's counter-based generator (a sibling crate's helper, not the facade's API).
            let start = remat_core::uniform_u32(salt, step, row) as usize % (text.len() - seq - 1);
            tokens.extend(text[start..start + seq].iter().map(|&c| c as i64));
            targets.extend(text[start + 1..start + seq + 1].iter().map(|&c| c as i64));
        }
        Ok(Feeds::new()
            .with("tokens", HostTensor::i64([batch, seq], tokens)?)
            .with("targets", HostTensor::i64([batch, seq], targets)?))
    }
}
