//! What ranks compare before they train together: every setting that decides what they will
//! exchange (the world size, the batch, the gradient buckets, the steps, the optimizer and its
//! state, the state resumed from), so that ranks started with different settings stop at once,
//! on every rank, with a line naming the first difference, instead of exchanging buffers of
//! different lengths or drifting apart silently.

use crate::collective::Collective;
use remat_core::{AdamW, CollectiveKind, Error, Params, Progress, Result};

/// The optimizer a rank steps with ([`RankConfig::optimizer`]).
pub const OPTIMIZER_ADAMW: u64 = 1;
/// AdamW with its moments sharded over the ranks ([`crate::ShardedAdamW`]).
pub const OPTIMIZER_ZERO1: u64 = 2;

/// One rank's settings, as the ranks compare them ([`crate::DataParallel::agree`]). Every field
/// is a number, so every rank's description has the same length ([`RankConfig::BYTES`]) and
/// exchanging it is safe whatever the settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RankConfig {
    /// Ranks in the job, as this rank sees it.
    pub world_size: u64,
    /// Rows of the whole batch (split over the ranks).
    pub batch: u64,
    /// Rows of this rank's shard.
    pub shard_rows: u64,
    /// The run's seed.
    pub seed: u64,
    /// Steps this rank will run.
    pub steps: u64,
    /// A digest of the training state resumed from ([`state_digest`]); 0 when not resumed.
    pub resume: u64,
    /// The step the run starts at (0, or the resumed state's).
    pub first_step: u64,
    /// [`OPTIMIZER_ADAMW`] or [`OPTIMIZER_ZERO1`] (0: none given).
    pub optimizer: u64,
    /// The optimizer's own step count (AdamW's `t`).
    pub optimizer_step: u64,
    /// Gradient bytes per all-reduce bucket.
    pub bucket_bytes: u64,
    /// All-reduce buckets per step ([`crate::CommPlan::buckets`]).
    pub buckets: u64,
    /// Gradient values reduced per step (the parameters' elements).
    pub gradient_values: u64,
    /// A digest of the buckets' parameters, in order ([`crate::CommPlan::layout_digest`]).
    pub bucket_layout: u64,
}

/// One field of [`RankConfig`]: its key (the Rust name), what a user reads, and how its values
/// are shown.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// The field's name in [`RankConfig`].
    pub key: &'static str,
    /// What it is, in a message ("the whole batch (rows)").
    pub what: &'static str,
    show: fn(u64) -> String,
}

/// The first setting on which a rank differs from rank 0 ([`first_difference`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disagreement {
    /// The field's key ([`Field::key`]).
    pub field: &'static str,
    /// The first rank that differs from rank 0 on it.
    pub rank: usize,
    /// Rank 0's value.
    pub reference: u64,
    /// That rank's value.
    pub value: u64,
}

fn number(v: u64) -> String {
    v.to_string()
}

fn digest(v: u64) -> String {
    format!("{v:016x}")
}

fn resumed(v: u64) -> String {
    if v == 0 {
        "no resumed state".into()
    } else {
        format!("the state with digest {v:016x}")
    }
}

fn optimizer(v: u64) -> String {
    match v {
        0 => "none given".into(),
        OPTIMIZER_ADAMW => "AdamW".into(),
        OPTIMIZER_ZERO1 => "AdamW sharded (ZeRO-1)".into(),
        other => format!("unknown optimizer {other}"),
    }
}

/// The fields in the order they are compared: the first that differs is the one named.
pub const FIELDS: [Field; 13] = [
    Field { key: "world_size", what: "the world size", show: number },
    Field { key: "batch", what: "the whole batch (rows)", show: number },
    Field { key: "shard_rows", what: "the rows of a rank's shard", show: number },
    Field { key: "seed", what: "the seed", show: number },
    Field { key: "steps", what: "the steps to run", show: number },
    Field { key: "resume", what: "the state resumed from", show: resumed },
    Field { key: "first_step", what: "the first step", show: number },
    Field { key: "optimizer", what: "the optimizer", show: optimizer },
    Field { key: "optimizer_step", what: "the optimizer's step count", show: number },
    Field { key: "bucket_bytes", what: "the all-reduce bucket size (bytes)", show: number },
    Field { key: "buckets", what: "the all-reduce buckets per step", show: number },
    Field { key: "gradient_values", what: "the gradient values per step", show: number },
    Field { key: "bucket_layout", what: "the buckets' parameters (digest)", show: digest },
];

/// Leads every description on the wire (a rank running another program sends something else).
const MAGIC: u64 = u64::from_le_bytes(*b"rematRC1");

impl RankConfig {
    /// Bytes of one description on the wire: a leading magic word, then every field.
    pub const BYTES: usize = 8 * (1 + FIELDS.len());

    /// The values in [`FIELDS`] order.
    pub fn values(&self) -> [u64; 13] {
        [
            self.world_size,
            self.batch,
            self.shard_rows,
            self.seed,
            self.steps,
            self.resume,
            self.first_step,
            self.optimizer,
            self.optimizer_step,
            self.bucket_bytes,
            self.buckets,
            self.gradient_values,
            self.bucket_layout,
        ]
    }

    /// A configuration from values in [`FIELDS`] order.
    pub fn from_values(v: [u64; 13]) -> RankConfig {
        let [world_size, batch, shard_rows, seed, steps, resume, first_step, optimizer, optimizer_step, bucket_bytes, buckets, gradient_values, bucket_layout] =
            v;
        RankConfig {
            world_size,
            batch,
            shard_rows,
            seed,
            steps,
            resume,
            first_step,
            optimizer,
            optimizer_step,
            bucket_bytes,
            buckets,
            gradient_values,
            bucket_layout,
        }
    }

    /// [`RankConfig::BYTES`] bytes, little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        std::iter::once(MAGIC).chain(self.values()).flat_map(u64::to_le_bytes).collect()
    }

    /// The configuration [`RankConfig::to_bytes`] wrote; `None` for anything else.
    pub fn from_bytes(bytes: &[u8]) -> Option<RankConfig> {
        if bytes.len() != Self::BYTES {
            return None;
        }
        let mut words = bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
        if words.next() != Some(MAGIC) {
            return None;
        }
        let mut v = [0u64; 13];
        v.iter_mut().zip(words).for_each(|(slot, w)| *slot = w);
        Some(RankConfig::from_values(v))
    }
}

/// The first difference between rank 0's configuration and another rank's: fields in [`FIELDS`]
/// order, and for a field the lowest rank that differs. `None` when all are equal.
pub fn first_difference(configs: &[RankConfig]) -> Option<Disagreement> {
    let reference = configs.first()?.values();
    let all: Vec<[u64; 13]> = configs.iter().map(RankConfig::values).collect();
    FIELDS.iter().enumerate().find_map(|(f, field)| {
        all.iter().enumerate().skip(1).find(|(_, v)| v[f] != reference[f]).map(|(rank, v)| Disagreement {
            field: field.key,
            rank,
            reference: reference[f],
            value: v[f],
        })
    })
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let field = FIELDS.iter().find(|x| x.key == self.field).expect("a field of FIELDS");
        write!(
            f,
            "ranks disagree on {}: rank 0 has {}, rank {} has {} (every rank must be started with the same settings)",
            field.what,
            (field.show)(self.reference),
            self.rank,
            (field.show)(self.value)
        )
    }
}

/// Gathers every rank's `mine` and refuses any difference, naming the first
/// ([`first_difference`]) with the same line on every rank. The description has one length on
/// every rank; one that is not a [`RankConfig`] (another program) is refused too.
pub fn agree<C: Collective + ?Sized>(comm: &mut C, mine: &RankConfig) -> Result<()> {
    let all = comm.all_gather(mine.to_bytes())?;
    let mut configs = Vec::with_capacity(comm.world_size());
    for (rank, bytes) in all.chunks(RankConfig::BYTES).enumerate() {
        configs.push(RankConfig::from_bytes(bytes).ok_or_else(|| {
            Error::collective(
                CollectiveKind::Mismatch,
                format!("rank {rank} sent a run configuration remat cannot read (another program?)"),
            )
        })?);
    }
    match first_difference(&configs) {
        None => Ok(()),
        Some(d) => Err(Error::collective(CollectiveKind::Mismatch, d.to_string())),
    }
}

/// FNV-1a over 64-bit words.
pub(crate) fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325u64, |h, w| {
        w.to_le_bytes().iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    })
}

/// A digest of a training state (parameter names and values, AdamW's step and moments, the
/// progress), for [`RankConfig::resume`]: ranks that loaded the same state have the same digest.
/// Never 0 (which means "not resumed").
pub fn state_digest(params: &Params, opt: &AdamW, progress: Progress) -> u64 {
    let names = params.names().iter().flat_map(|n| n.bytes().map(u64::from).chain([u64::MAX]));
    let values = params.values().iter().flat_map(|v| v.to_f64_vec().into_iter().map(f64::to_bits));
    let (m, v) = opt.moments();
    let moments = m.iter().chain(v).flat_map(|x| x.iter().map(|y| y.to_bits()));
    let h = fnv(names.chain(values).chain([opt.t(), progress.step, progress.seed]).chain(moments));
    h.max(1)
}
