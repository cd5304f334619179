//! ZeRO-1: AdamW whose moments are sharded over the ranks.

use crate::collective::Collective;
use crate::data_parallel::{from_bytes, value_bytes};
use remat_core::{AdamW, CollectiveKind, DType, Error, HostData, HostTensor, Params, Result};
use std::ops::Range;

/// AdamW with its moments split over the ranks (ZeRO stage 1): the parameters' elements, laid
/// end to end in [`Params`] order, are cut into `world` equal runs; rank `r` keeps the moments
/// of run `r` only, updates those elements with [`AdamW::update_elements`] (the arithmetic of
/// the unsharded optimizer, element for element) and the updated runs are gathered on every
/// rank. Per-rank optimizer memory is `1 / world` of AdamW's; the parameters after any number
/// of steps are bitwise those of an unsharded AdamW given the same gradients.
#[derive(Clone, Debug)]
pub struct ShardedAdamW {
    /// The hyperparameters (its own moments stay empty).
    pub adamw: AdamW,
    t: u64,
    range: Range<usize>,
    total: usize,
    m: Vec<f64>,
    v: Vec<f64>,
}

impl ShardedAdamW {
    /// Shard `rank` of `world` of an AdamW over `params`.
    pub fn new(adamw: AdamW, params: &Params, rank: usize, world: usize) -> Result<Self> {
        if world == 0 || rank >= world {
            return Err(Error::config("rank", format!("rank {rank} of a {world}-rank job")));
        }
        let total: usize = params.values().iter().map(HostTensor::numel).sum();
        let per = total.div_ceil(world);
        let range = (rank * per).min(total)..((rank + 1) * per).min(total);
        let n = range.len();
        Ok(ShardedAdamW { adamw: hyperparameters(&adamw), t: 0, range, total, m: vec![0.0; n], v: vec![0.0; n] })
    }

    /// Shard `rank` of `world` of a whole AdamW state (one loaded from a training state, or the
    /// state of an unsharded run): its hyperparameters, step count and this rank's slice of its
    /// moments (zeros when it has taken no step).
    pub fn from_adamw(adamw: &AdamW, params: &Params, rank: usize, world: usize) -> Result<Self> {
        let mut shard = ShardedAdamW::new(hyperparameters(adamw), params, rank, world)?;
        let (m, v) = adamw.moments();
        if !m.is_empty() {
            let flat = |x: &[Vec<f64>]| x.concat();
            let (m, v) = (flat(m), flat(v));
            if m.len() != shard.total || v.len() != shard.total {
                return Err(Error::optimizer_state(format!(
                    "the AdamW state holds {} moments, the parameters have {} elements",
                    m.len(),
                    shard.total
                )));
            }
            shard.m = m[shard.range.clone()].to_vec();
            shard.v = v[shard.range.clone()].to_vec();
        }
        shard.t = adamw.t();
        Ok(shard)
    }

    /// The whole state as an unsharded AdamW (every rank calls it: the moments are gathered),
    /// e.g. for rank 0 to save a training state.
    pub fn to_adamw<C: Collective>(&self, comm: &mut C, params: &Params) -> Result<AdamW> {
        let (m, v) = self.gather_moments(comm)?;
        let split = |flat: Vec<f64>| {
            let mut start = 0;
            params
                .values()
                .iter()
                .map(|p| {
                    let part = flat[start..start + p.numel()].to_vec();
                    start += p.numel();
                    part
                })
                .collect::<Vec<_>>()
        };
        self.adamw.clone().with_state(params, self.t, split(m), split(v))
    }

    /// The elements (in the parameters laid end to end) whose moments this rank keeps.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// Bytes of optimizer state this rank holds (two f64 moments per element of its shard).
    pub fn state_bytes(&self) -> usize {
        (self.m.len() + self.v.len()) * 8
    }

    /// Steps taken.
    pub fn t(&self) -> u64 {
        self.t
    }

    /// One step: this rank updates its shard from `grads` (the averaged gradients, the same on
    /// every rank), then every rank gathers the whole updated parameters.
    pub fn step<C: Collective>(&mut self, comm: &mut C, params: &mut Params, grads: &[HostTensor]) -> Result<()> {
        let total: usize = params.values().iter().map(HostTensor::numel).sum();
        if total != self.total || grads.len() != params.len() {
            return Err(Error::optimizer_state(format!(
                "the sharded AdamW state belongs to {} parameter elements; these parameters have {total} ({} gradients for {} parameters)",
                self.total,
                grads.len(),
                params.len()
            )));
        }
        let t = self.t + 1;
        let mut w = gather_range(params.values(), &self.range);
        let g = gather_range(grads, &self.range);
        self.adamw.update_elements(t, &mut w, &g, &mut self.m, &mut self.v)?;
        self.t = t;
        // Round to each parameter's dtype before sending, as the unsharded optimizer stores it.
        let rounded = round_range(params.values(), &self.range, &w);
        let per = self.total.div_ceil(comm.world_size());
        let mut mine = rounded;
        mine.resize(per, 0.0);
        // The step count travels with the values: ranks whose optimizers are at different steps
        // (one resumed, one not) stop here rather than drift apart.
        let mut bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
        bytes.extend_from_slice(&t.to_le_bytes());
        let gathered = comm.all_gather(bytes)?;
        let all = split_steps(&gathered, per)?;
        let mut start = 0;
        for (name, p) in params.names().to_vec().iter().zip(0..) {
            let value = &params.values()[p];
            let n = value.numel();
            let data = HostData::from_f64(&all[start..start + n], value.dtype());
            start += n;
            params.set(name, HostTensor::new(value.shape().to_vec(), data)?)?;
        }
        Ok(())
    }

    /// The whole moments (`m` then `v`, every element) gathered on every rank, e.g. for rank 0
    /// to save an unsharded training state.
    pub fn gather_moments<C: Collective>(&self, comm: &mut C) -> Result<(Vec<f64>, Vec<f64>)> {
        let per = self.total.div_ceil(comm.world_size());
        let mut whole = Vec::with_capacity(2);
        for moment in [&self.m, &self.v] {
            let mut mine = moment.clone();
            mine.resize(per, 0.0);
            let t = HostTensor::f64(vec![per], mine)?;
            let bytes = comm.all_gather(value_bytes(&t))?;
            let HostData::F64(mut all) = from_bytes(&bytes, DType::F64, bytes.len() / 8)? else {
                return Err(Error::internal("moments gathered as another dtype"));
            };
            all.truncate(self.total);
            whole.push(all);
        }
        let v = whole.pop().unwrap_or_default();
        let m = whole.pop().unwrap_or_default();
        Ok((m, v))
    }
}

/// The values of every rank's `per` values followed by its step count, refused when the step
/// counts differ.
fn split_steps(gathered: &[u8], per: usize) -> Result<Vec<f64>> {
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().expect("8 bytes"));
    let ranks: Vec<&[u8]> = gathered.chunks(per * 8 + 8).collect();
    let steps: Vec<u64> = ranks.iter().map(|r| word(&r[per * 8..])).collect();
    if let Some(rank) = steps.iter().position(|&t| t != steps[0]) {
        return Err(Error::collective(CollectiveKind::Mismatch, format!(
            "ranks disagree on the optimizer's step count (ZeRO-1): rank 0 took step {}, rank {rank} step {} (every rank must resume from the same state)",
            steps[0], steps[rank]
        )));
    }
    Ok(ranks.iter().flat_map(|r| r[..per * 8].chunks_exact(8).map(|c| f64::from_bits(word(c)))).collect())
}

/// `adamw`'s hyperparameters, without its state (a shard keeps its own slice of the moments).
fn hyperparameters(adamw: &AdamW) -> AdamW {
    let mut h = AdamW::new(adamw.lr);
    (h.beta1, h.beta2, h.eps, h.weight_decay) = (adamw.beta1, adamw.beta2, adamw.eps, adamw.weight_decay);
    h
}

/// Each tensor that overlaps `range` (of the tensors' elements laid end to end), with the
/// overlap as offsets within the tensor and within `range`.
fn overlaps<'t>(tensors: &'t [HostTensor], range: &Range<usize>) -> Vec<(&'t HostTensor, Range<usize>, Range<usize>)> {
    let mut out = Vec::new();
    let mut start = 0;
    for t in tensors {
        let (lo, hi) = (range.start.max(start), range.end.min(start + t.numel()));
        if lo < hi {
            out.push((t, lo - start..hi - start, lo - range.start..hi - range.start));
        }
        start += t.numel();
    }
    out
}

/// The elements `range` of `tensors` laid end to end, in f64.
fn gather_range(tensors: &[HostTensor], range: &Range<usize>) -> Vec<f64> {
    let mut out = Vec::with_capacity(range.len());
    for (t, within, _) in overlaps(tensors, range) {
        out.extend_from_slice(&t.to_f64_vec()[within]);
    }
    out
}

/// `values` (the elements `range`) rounded to the dtypes of the tensors they belong to.
fn round_range(tensors: &[HostTensor], range: &Range<usize>, values: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(values.len());
    for (t, _, in_range) in overlaps(tensors, range) {
        let part = &values[in_range];
        let rounded = HostTensor::new(vec![part.len()], HostData::from_f64(part, t.dtype()));
        out.extend(rounded.map(|r| r.to_f64_vec()).unwrap_or_else(|_| part.to_vec()));
    }
    out
}
