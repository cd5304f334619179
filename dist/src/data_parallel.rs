//! Data-parallel steps: each rank runs forward and backward on its shard of the batch, and the
//! gradients are averaged over the ranks in buckets while the backward is still running.

use crate::agreement::{self, fnv, RankConfig};
use crate::collective::{Collective, Pending, Span};
use remat_core::{
    Backend, CollectiveKind, DType, Error, Feeds, HostData, HostTensor, Model, Params, Result, StepOutput,
};
use std::ops::Range;
use std::time::Instant;

/// The bucket size of [`DataParallel::new`]: 1 MiB of f32 gradients per all-reduce.
pub const DEFAULT_BUCKET_BYTES: usize = 1 << 20;

/// Data-parallel training over a [`Collective`].
pub struct DataParallel<C: Collective> {
    pub(crate) comm: C,
    pub(crate) bucket_bytes: usize,
    /// The bucket layout every rank last agreed on ([`Layout`]): a step with another one agrees
    /// again before its first all-reduce.
    agreed_layout: Option<Layout>,
    /// The step the next [`DataParallel::step`] runs (from [`RankConfig::first_step`]).
    next_step: u64,
    /// Whether [`DataParallel::shard_state`] sharded the training state's optimizer: each
    /// [`DataParallel::train_step`] then broadcasts every parameter from the rank that updated it.
    pub(crate) sharded_state: bool,
}

/// What decides the lengths of a step's all-reduces: buckets, values, and which parameters
/// fill which bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    buckets: u64,
    values: u64,
    digest: u64,
}

/// Where one parameter's gradient sits in a bucket.
struct Entry {
    param: usize,
    offset: usize,
    len: usize,
}

/// A bucket being filled, or sent and awaited.
#[derive(Default)]
struct Filling {
    values: Vec<f32>,
    entries: Vec<Entry>,
}

/// What one data-parallel step returns.
#[derive(Debug)]
pub struct DpStep {
    /// The loss averaged over the ranks (each rank's mean over its shard): the loss of the whole
    /// batch when the loss is a mean and the shards are equal.
    pub loss: f64,
    /// The gradients averaged over the ranks, in [`Params`] order (every rank holds the same
    /// bits).
    pub grads: Vec<HostTensor>,
    /// This rank's own step: its loss, its predicted and measured peaks.
    pub local: StepOutput,
    /// The step's communication.
    pub comm: StepComm,
}

/// What the buckets of a step will be, from the plan alone (before running it): the order in
/// which the backward finishes the gradients ([`remat_core::Model::gradient_order`]) and the
/// bucket size decide it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommPlan {
    /// Each bucket's parameters (indices in [`Params`] order), in the order they are reduced.
    pub buckets: Vec<Vec<usize>>,
    /// The most bytes of gradient buckets held at once: the copies of finished gradients, plus
    /// the engine's copy of each bucket sent during the backward.
    pub buffer_peak_bytes: usize,
}

impl CommPlan {
    /// A digest of the buckets' parameters, in order ([`RankConfig::bucket_layout`]): ranks
    /// whose digests are equal reduce buckets of the same lengths.
    pub fn layout_digest(&self) -> u64 {
        fnv(self.buckets.iter().flat_map(|b| b.iter().map(|&p| p as u64).chain([u64::MAX])))
    }
}

/// The one rule by which gradients fill buckets, followed by the step and predicted by
/// [`DataParallel::plan_comm`]: a bucket is sent once it holds at least `capacity` values.
struct Bucketing {
    capacity: usize,
    filled: usize,
}

impl Bucketing {
    fn new(bucket_bytes: usize) -> Self {
        Bucketing { capacity: (bucket_bytes / 4).max(1), filled: 0 }
    }

    /// Adds a gradient of `len` values; `true` when its bucket is full and goes now.
    fn add(&mut self, len: usize) -> bool {
        self.filled += len;
        let full = self.filled >= self.capacity;
        if full {
            self.filled = 0;
        }
        full
    }
}

/// The communication of one step.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepComm {
    /// Gradient buckets reduced.
    pub buckets: usize,
    /// Bytes this rank sent during the step.
    pub bytes_sent: u64,
    /// Seconds the engine spent reducing gradients.
    pub reduce_seconds: f64,
    /// Of those, seconds that passed while the backward was still running (hidden behind it).
    pub hidden_seconds: f64,
    /// Seconds from the end of the backward to the last bucket's arrival (exposed).
    pub exposed_seconds: f64,
    /// The most bytes of gradient buckets held at once (the communication buffers: copies of
    /// finished gradients waiting for, or back from, the engine).
    pub buffer_peak_bytes: usize,
}

impl StepComm {
    /// The fraction of the reduction time hidden behind the backward (1 when there was none).
    pub fn hidden_fraction(&self) -> f64 {
        if self.reduce_seconds > 0.0 {
            self.hidden_seconds / self.reduce_seconds
        } else {
            1.0
        }
    }
}

impl<C: Collective> DataParallel<C> {
    /// Data parallelism over `comm`, reducing gradients in buckets of [`DEFAULT_BUCKET_BYTES`].
    pub fn new(comm: C) -> Self {
        DataParallel {
            comm,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            agreed_layout: None,
            next_step: 0,
            sharded_state: false,
        }
    }

    /// With buckets of `bytes` (at least one gradient per bucket whatever its size).
    pub fn with_bucket_bytes(mut self, bytes: usize) -> Self {
        self.bucket_bytes = bytes.max(4);
        self
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// The collective underneath.
    pub fn comm(&mut self) -> &mut C {
        &mut self.comm
    }

    /// Gives every rank rank 0's parameter values, after checking that every rank has the same
    /// parameters (names, shapes, dtypes, in order): a mismatch is an error on every rank,
    /// naming the parameter and the ranks that differ.
    pub fn broadcast_params(&mut self, params: &mut Params) -> Result<()> {
        self.check_same_params(params)?;
        for (i, name) in params.names().to_vec().iter().enumerate() {
            let value = &params.values()[i];
            let bytes = self.comm.broadcast(value_bytes(value), 0)?;
            let data = from_bytes(&bytes, value.dtype(), value.numel())?;
            params.set(name, HostTensor::new(value.shape().to_vec(), data)?)?;
        }
        Ok(())
    }

    /// Refuses parameters that differ across ranks, naming the first that does.
    pub fn check_same_params(&mut self, params: &Params) -> Result<()> {
        let mine = describe(params);
        let all = self.comm.all_gather_varied(mine.join("\n").as_bytes())?;
        let all: Vec<Vec<String>> =
            all.iter().map(|b| String::from_utf8_lossy(b).lines().map(str::to_string).collect()).collect();
        let reference = &all[0];
        for (rank, theirs) in all.iter().enumerate().skip(1) {
            for k in 0..reference.len().max(theirs.len()) {
                let (a, b) = (reference.get(k), theirs.get(k));
                if a != b {
                    let show = |d: Option<&String>| d.map_or("nothing".to_string(), |d| d.replace('\t', " "));
                    let name = a.or(b).and_then(|d| d.split('\t').next()).unwrap_or("?");
                    return Err(Error::Feed {
                        what: "param",
                        name: name.to_string(),
                        message: format!(
                            "ranks disagree on parameter {k}: rank 0 has {}, rank {rank} has {} (every rank must build the same model)",
                            show(a),
                            show(b)
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// This rank's rows of a batch of `rows`: equal contiguous shards, rank 0 first. An error
    /// when `rows` does not divide evenly (the averaged gradient would weigh rows unequally).
    pub fn shard(&self, rows: usize) -> Result<Range<usize>> {
        let world = self.world_size();
        if !rows.is_multiple_of(world) {
            return Err(Error::config(
                "batch",
                format!("a batch of {rows} rows cannot be split evenly over {world} ranks; use a multiple of {world}"),
            ));
        }
        let per = rows / world;
        let r = self.rank();
        Ok(r * per..(r + 1) * per)
    }

    /// This rank's shard of a whole batch: every feed's rows [`DataParallel::shard`] along its
    /// first axis (a feed whose first axis does not divide evenly is an error naming it).
    pub fn shard_feeds(&self, feeds: &Feeds) -> Result<Feeds> {
        let mut shard = Feeds::new();
        for name in feeds.names() {
            let value = feeds.get(name).ok_or_else(|| Error::internal(format!("feed `{name}` vanished")))?;
            let rows = *value.shape().first().ok_or_else(|| Error::Feed {
                what: "input",
                name: name.to_string(),
                message: "a scalar cannot be split over ranks".into(),
            })?;
            let range = self.shard(rows).map_err(|e| Error::Feed {
                what: "input",
                name: name.to_string(),
                message: e.to_string(),
            })?;
            let per_row = value.numel() / rows.max(1);
            let mut shape = value.shape().to_vec();
            shape[0] = range.len();
            let part = HostTensor::new(shape, slice_data(value.data(), range.start * per_row..range.end * per_row))?;
            shard.insert(name, part);
        }
        Ok(shard)
    }

    /// An error on every rank when the job does not have `expected` ranks (a run resumed with
    /// another world size, a sharded state from another job).
    pub fn expect_world_size(&self, expected: usize) -> Result<()> {
        let world = self.world_size();
        if world == expected {
            Ok(())
        } else {
            Err(Error::config("world size", format!(
                "rank {}: this job has {world} rank(s), the run expects {expected} (start it with mpirun -np {expected})",
                self.rank()
            )))
        }
    }

    /// The buckets a step of `model` will reduce and the bytes they will hold, predicted from its
    /// plan ([`StepComm::buckets`] and [`StepComm::buffer_peak_bytes`] measure them).
    pub fn plan_comm(&self, model: &Model, params: &Params) -> CommPlan {
        self.plan_comm_of(model, &params.values().iter().map(HostTensor::numel).collect::<Vec<_>>())
    }

    /// [`DataParallel::plan_comm`] for parameters of `numels` elements each.
    fn plan_comm_of(&self, model: &Model, numels: &[usize]) -> CommPlan {
        let mut bucketing = Bucketing::new(self.bucket_bytes);
        let (mut buckets, mut current) = (Vec::new(), Vec::new());
        let (mut held, mut peak) = (0usize, 0usize);
        for p in model.gradient_order() {
            let len = numels.get(p).copied().unwrap_or(0);
            current.push(p);
            held += len * 4;
            peak = peak.max(held);
            if bucketing.add(len) {
                let bytes: usize = current.iter().map(|&q| numels[q] * 4).sum();
                held += bytes;
                peak = peak.max(held);
                buckets.push(std::mem::take(&mut current));
            }
        }
        if !current.is_empty() {
            buckets.push(current);
        }
        CommPlan { buckets, buffer_peak_bytes: peak }
    }

    /// This rank's configuration with what the data parallelism knows filled in: the world size,
    /// the bucket size, and the buckets `model`'s steps will reduce ([`DataParallel::plan_comm`]).
    /// The program fills in the rest (batch, steps, seed, optimizer, resumed state) with
    /// `RankConfig { batch: .., ..dp.rank_config(&model, &params) }`.
    pub fn rank_config(&self, model: &Model, params: &Params) -> RankConfig {
        let layout = self.layout(model, params);
        RankConfig {
            world_size: self.world_size() as u64,
            bucket_bytes: self.bucket_bytes as u64,
            buckets: layout.buckets,
            gradient_values: layout.values,
            bucket_layout: layout.digest,
            ..RankConfig::default()
        }
    }

    /// Compares `config` with every other rank's before the first step: any difference is an
    /// error on every rank naming the first ([`crate::first_difference`]), e.g. `ranks disagree
    /// on the whole batch (rows): rank 0 has 8, rank 1 has 4 (every rank must be started with
    /// the same settings)`. Steps then count from `config.first_step`.
    pub fn agree(&mut self, config: &RankConfig) -> Result<()> {
        agreement::agree(&mut self.comm, config)?;
        self.agreed_layout =
            Some(Layout { buckets: config.buckets, values: config.gradient_values, digest: config.bucket_layout });
        self.next_step = config.first_step;
        Ok(())
    }

    fn layout(&self, model: &Model, params: &Params) -> Layout {
        self.layout_of(model, &params.values().iter().map(HostTensor::numel).collect::<Vec<_>>())
    }

    pub(crate) fn layout_of(&self, model: &Model, numels: &[usize]) -> Layout {
        let plan = self.plan_comm_of(model, numels);
        let values = numels.iter().map(|&n| n as u64).sum();
        Layout { buckets: plan.buckets.len() as u64, values, digest: plan.layout_digest() }
    }

    /// Makes sure every rank will reduce buckets of the same lengths before any is sent: the
    /// layout agreed last is reused, another one is compared first (a fixed-size exchange).
    pub(crate) fn agree_on_layout(&mut self, mine: Layout) -> Result<()> {
        if self.agreed_layout == Some(mine) {
            return Ok(());
        }
        let words = [mine.buckets, mine.values, mine.digest];
        let all = self.comm.all_gather(words.iter().flat_map(|w| w.to_le_bytes()).collect())?;
        let layouts: Vec<Vec<u64>> = all
            .chunks(24)
            .map(|c| c.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8"))).collect())
            .collect();
        if let Some((rank, theirs)) = layouts.iter().enumerate().find(|(_, l)| **l != layouts[0]) {
            let show = |l: &[u64]| format!("{} bucket(s) of {} values in all (layout {:016x})", l[0], l[1], l[2]);
            return Err(Error::collective(CollectiveKind::Mismatch, format!(
                "ranks disagree on the gradient buckets: rank 0 reduces {}, rank {rank} reduces {} (every rank must build the same model with the same bucket size)",
                show(&layouts[0]),
                show(theirs)
            )));
        }
        self.agreed_layout = Some(mine);
        Ok(())
    }

    /// One step: forward and backward on this rank's `feeds` (its shard), each gradient copied
    /// into a bucket the moment the backward finishes it and a full bucket handed to the engine
    /// at once, so reducing overlaps the rest of the backward. The gradients come back averaged
    /// over the ranks, identical on every rank. Random ops on rank `r` draw from
    /// `seed · world_size + r` (different masks for different rows; on one rank, `seed`).
    pub fn step<B: Backend>(
        &mut self,
        model: &Model,
        backend: &mut B,
        params: &Params,
        feeds: &Feeds,
        seed: u64,
    ) -> Result<DpStep> {
        // Ranks draw different dropout masks for their different rows; one rank draws what
        // `Model::step_seeded(.., seed)` does.
        let rank_seed = self.rank_seed(seed);
        self.agree_on_layout(self.layout(model, params))?;
        let sent_before = self.comm.bytes_sent();
        let mut reduction = Reduction::new(&mut self.comm, self.bucket_bytes, params.len());
        let mut on_grad = |param: usize, grad: HostTensor| reduction.add(param, grad_values(&grad, params, param)?);
        let local = model.step_streaming(backend, params, feeds, rank_seed, &mut on_grad)?;
        let (means, mut comm) = reduction.finish(Instant::now())?;
        let grads = means
            .into_iter()
            .zip(params.names().iter().zip(params.values()))
            .map(|(mean, (name, p))| {
                let mean = mean.ok_or_else(|| no_gradient(name))?;
                HostTensor::new(p.shape().to_vec(), HostData::from_f32(&mean, p.dtype()))
            })
            .collect::<Result<Vec<_>>>()?;
        let loss = self.agree_on_step(local.loss, seed)?;
        comm.bytes_sent = self.comm.bytes_sent() - sent_before;
        Ok(DpStep { loss, grads, local, comm })
    }

    /// The seed of this rank's random ops for a step seeded `seed`: ranks draw different
    /// dropout masks for their different rows; one rank draws what `Model::step_seeded(.., seed)`
    /// does.
    pub(crate) fn rank_seed(&self, seed: u64) -> u64 {
        seed.wrapping_mul(self.world_size() as u64).wrapping_add(self.rank() as u64)
    }

    /// The loss averaged over the ranks (in f64, summed in rank order), after checking that
    /// every rank ran the same step with the same seed: ranks at different steps stop here.
    pub(crate) fn agree_on_step(&mut self, loss: f64, seed: u64) -> Result<f64> {
        let step = self.next_step;
        let mine = [loss.to_bits(), step, seed];
        let gathered = self.comm.all_gather(mine.iter().flat_map(|w| w.to_le_bytes()).collect())?;
        let words: Vec<u64> =
            gathered.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
        check_same_step(&words)?;
        let world = self.world_size() as f64;
        self.next_step = step.wrapping_add(1);
        Ok(words.chunks_exact(3).map(|w| f64::from_bits(w[0])).sum::<f64>() / world)
    }
}

/// The all-reduce of one step's gradients: each copied into a bucket as the backward finishes
/// it, a bucket sent as soon as it is full ([`Bucketing`]).
pub(crate) struct Reduction<'c, C: Collective> {
    comm: &'c mut C,
    bucketing: Bucketing,
    filling: Filling,
    in_flight: Vec<(Filling, Pending<Vec<f32>>)>,
    /// Which parameters have been added.
    added: Vec<bool>,
    held: usize,
    buffer_peak: usize,
}

impl<'c, C: Collective> Reduction<'c, C> {
    pub(crate) fn new(comm: &'c mut C, bucket_bytes: usize, params: usize) -> Self {
        Reduction {
            comm,
            bucketing: Bucketing::new(bucket_bytes),
            filling: Filling::default(),
            in_flight: Vec::new(),
            added: vec![false; params],
            held: 0,
            buffer_peak: 0,
        }
    }

    /// Parameter `param`'s gradient, as f32 `values`, joins the bucket being filled.
    pub(crate) fn add(&mut self, param: usize, values: Vec<f32>) -> Result<()> {
        if let Some(added) = self.added.get_mut(param) {
            *added = true;
        }
        self.filling.entries.push(Entry { param, offset: self.filling.values.len(), len: values.len() });
        self.filling.values.extend_from_slice(&values);
        self.held += values.len() * 4;
        self.buffer_peak = self.buffer_peak.max(self.held);
        if self.bucketing.add(values.len()) {
            let full = std::mem::take(&mut self.filling);
            let pending = self.comm.start_all_reduce(full.values.clone())?;
            self.held += full.values.len() * 4; // the engine's copy
            self.buffer_peak = self.buffer_peak.max(self.held);
            self.in_flight.push((Filling { values: Vec::new(), entries: full.entries }, pending));
        }
        Ok(())
    }

    /// Whether parameter `param`'s gradient has been added.
    pub(crate) fn has(&self, param: usize) -> bool {
        self.added.get(param).copied().unwrap_or(false)
    }

    /// Sends the last bucket and waits for every one: each parameter's gradient averaged over
    /// the ranks (the rank-order sum divided in f32), and the step's communication timed against
    /// `backward_end`.
    pub(crate) fn finish(mut self, backward_end: Instant) -> Result<(Vec<Option<Vec<f32>>>, StepComm)> {
        let world = self.comm.world_size() as f32;
        if !self.filling.values.is_empty() {
            let pending = self.comm.start_all_reduce(std::mem::take(&mut self.filling.values))?;
            self.in_flight.push((Filling { values: Vec::new(), entries: self.filling.entries }, pending));
        }
        let mut means: Vec<Option<Vec<f32>>> = (0..self.added.len()).map(|_| None).collect();
        let mut stats = StepComm { buckets: self.in_flight.len(), ..StepComm::default() };
        let mut last_end = backward_end;
        for (bucket, pending) in self.in_flight {
            let (values, Span { start, end }) = pending.wait_timed()?;
            stats.reduce_seconds += (end - start).as_secs_f64();
            stats.hidden_seconds += (end.min(backward_end).saturating_duration_since(start)).as_secs_f64();
            last_end = last_end.max(end);
            for e in bucket.entries {
                if let Some(slot) = means.get_mut(e.param) {
                    *slot = Some(values[e.offset..e.offset + e.len].iter().map(|&s| s / world).collect());
                }
            }
        }
        stats.exposed_seconds = (last_end.saturating_duration_since(backward_end)).as_secs_f64();
        stats.buffer_peak_bytes = self.buffer_peak;
        Ok((means, stats))
    }
}

/// Refuses ranks whose `[loss, step, seed]` words (in rank order) name another step or seed
/// than rank 0's.
fn check_same_step(words: &[u64]) -> Result<()> {
    let ranks: Vec<&[u64]> = words.chunks_exact(3).collect();
    match ranks.iter().enumerate().find(|(_, w)| w[1..] != ranks[0][1..]) {
        None => Ok(()),
        Some((rank, w)) => Err(Error::collective(CollectiveKind::Mismatch, format!(
            "ranks disagree on the step: rank 0 ran step {} with seed {}, rank {rank} step {} with seed {} (every rank must run the same steps)",
            ranks[0][1], ranks[0][2], w[1], w[2]
        ))),
    }
}

/// The elements `range` of `data`, in their own dtype (an i64 above 2^53 stays exact).
fn slice_data(data: &HostData, range: Range<usize>) -> HostData {
    match data {
        HostData::F32(v) => HostData::F32(v[range].to_vec()),
        HostData::F64(v) => HostData::F64(v[range].to_vec()),
        HostData::BF16(v) => HostData::BF16(v[range].to_vec()),
        HostData::F16(v) => HostData::F16(v[range].to_vec()),
        HostData::F8E4M3(v) => HostData::F8E4M3(v[range].to_vec()),
        HostData::F8E5M2(v) => HostData::F8E5M2(v[range].to_vec()),
        HostData::I64(v) => HostData::I64(v[range].to_vec()),
        HostData::I32(v) => HostData::I32(v[range].to_vec()),
        HostData::Bool(v) => HostData::Bool(v[range].to_vec()),
    }
}

/// `name\tshape\tdtype` per parameter.
fn describe(params: &Params) -> Vec<String> {
    params.names().iter().zip(params.values()).map(|(n, v)| format!("{n}\t{:?}\t{}", v.shape(), v.dtype())).collect()
}

/// A gradient's values as f32 (what the engine reduces), checked against its parameter.
fn grad_values(grad: &HostTensor, params: &Params, param: usize) -> Result<Vec<f32>> {
    let p = params
        .values()
        .get(param)
        .ok_or_else(|| Error::internal(format!("gradient for parameter {param}, the model has {}", params.len())))?;
    if grad.shape() != p.shape() {
        return Err(Error::Feed {
            what: "param",
            name: params.names()[param].clone(),
            message: format!("gradient of shape {:?} for a parameter of shape {:?}", grad.shape(), p.shape()),
        });
    }
    reducible(grad, &params.names()[param])
}

/// Parameter `name`'s gradient as f32, the values the engine reduces: f32, f16 and bf16
/// gradients only.
pub(crate) fn reducible(grad: &HostTensor, name: &str) -> Result<Vec<f32>> {
    match grad.dtype() {
        DType::F32 | DType::F16 | DType::BF16 => Ok(grad.to_f32_vec()),
        other => Err(Error::Feed {
            what: "param",
            name: name.to_string(),
            message: format!("data-parallel steps reduce f32, f16 and bf16 gradients; this one is {other}"),
        }),
    }
}

/// The error for a parameter whose gradient a step never produced (a planner bug).
pub(crate) fn no_gradient(name: &str) -> Error {
    Error::internal(format!("the step gave no gradient for parameter `{name}`"))
}

/// A tensor's elements as little-endian f64 bytes (f64 holds every float dtype's values exactly).
pub(crate) fn value_bytes(value: &HostTensor) -> Vec<u8> {
    value.to_f64_vec().iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// [`value_bytes`] back to data of `dtype` (f64 carries every dtype's values exactly).
pub(crate) fn from_bytes(bytes: &[u8], dtype: DType, n: usize) -> Result<remat_core::HostData> {
    if bytes.len() != n * 8 {
        return Err(Error::internal(format!("expected {} bytes for {n} values, got {}", n * 8, bytes.len())));
    }
    let values: Vec<f64> = bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    Ok(remat_core::HostData::from_f64(&values, dtype))
}
