//! `--data-parallel` for the examples: the same training loop on every rank of an MPI job
//! (`mpirun -np 2 target/release/examples/gpt --data-parallel`), each rank on its shard of the
//! batch, gradients averaged in buckets during the backward; rank 0 reports and saves.

#[cfg(feature = "mpi")]
use remat::dist::{state_digest, Collective, DataParallel, Mpi, RankConfig};
#[cfg(feature = "mpi")]
use remat::dist::{OPTIMIZER_ADAMW, OPTIMIZER_ZERO1};
use remat::prelude::*;
#[cfg(feature = "mpi")]
use remat::{load_state, save_state, Progress};
use std::path::PathBuf;
#[cfg(feature = "mpi")]
use std::time::Instant;

/// The examples' data-parallel flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DpArgs {
    /// Train data-parallel over the ranks of an MPI job (`mpirun -np 2 .. --data-parallel`):
    /// --batch is split over the ranks; reports step time, overlap and bytes sent, then exits.
    #[arg(long)]
    pub data_parallel: bool,
    /// With --data-parallel: gradients per all-reduce bucket, in KiB (smaller buckets start
    /// reducing earlier in the backward).
    #[arg(long, default_value_t = 64, requires = "data_parallel", value_parser = clap::value_parser!(u32).range(1..))]
    pub bucket_kib: u32,
    /// With --data-parallel: shard AdamW's moments over the ranks (ZeRO-1).
    #[arg(long, requires = "data_parallel")]
    pub zero: bool,
    /// With --data-parallel: rank 0 saves the training state to this file at the end.
    #[arg(long, requires = "data_parallel")]
    pub save_state: Option<PathBuf>,
    /// With --data-parallel: every rank resumes from this training state.
    #[arg(long, requires = "data_parallel")]
    pub resume: Option<PathBuf>,
}

impl DpArgs {
    /// The loop's options for `steps` steps of a `global_batch` from `seed` at learning rate `lr`.
    pub fn options(&self, steps: u64, seed: u64, global_batch: usize, lr: f64) -> Options {
        Options {
            steps,
            seed,
            global_batch,
            lr,
            zero: self.zero,
            bucket_bytes: self.bucket_kib as usize * 1024,
            save_state: self.save_state.clone(),
            resume: self.resume.clone(),
        }
    }
}

/// How to run the data-parallel loop.
pub struct Options {
    /// Steps to run (from the resumed step on).
    pub steps: u64,
    /// The run's seed (parameters, dropout).
    pub seed: u64,
    /// The whole batch, split evenly over the ranks.
    pub global_batch: usize,
    /// AdamW's learning rate.
    pub lr: f64,
    /// Shard AdamW's moments over the ranks (ZeRO-1).
    pub zero: bool,
    /// Gradient bytes per all-reduce bucket.
    pub bucket_bytes: usize,
    /// Rank 0 saves the training state here at the end.
    pub save_state: Option<PathBuf>,
    /// Every rank resumes from this state (written by `save_state`).
    pub resume: Option<PathBuf>,
}

/// Trains `build(batch per rank)` on `feeds(step)` (the whole batch of a step) with AdamW.
/// A rank that fails prints its error and ends the job at once
/// ([`remat::dist::exit_with_error`]): the other ranks stop at their next collective.
#[cfg(feature = "mpi")]
pub fn train(
    name: &str,
    build: &dyn Fn(usize) -> remat::Result<Model>,
    feeds: &dyn Fn(u64) -> remat::Result<Feeds>,
    opts: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut dp = DataParallel::new(Mpi::init()?).with_bucket_bytes(opts.bucket_bytes);
    match train_rank(&mut dp, name, build, feeds, opts) {
        Ok(()) => Ok(()),
        Err(e) => remat::dist::exit_with_error(dp.comm(), &e),
    }
}

#[cfg(feature = "mpi")]
fn train_rank(
    dp: &mut DataParallel<remat::dist::Engine>,
    name: &str,
    build: &dyn Fn(usize) -> remat::Result<Model>,
    feeds: &dyn Fn(u64) -> remat::Result<Feeds>,
    opts: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    let (rank, world) = (dp.rank(), dp.world_size());
    let shard = dp.shard(opts.global_batch)?;
    let model = build(shard.len())?;
    let mut params = model.init_params(opts.seed)?;
    let mut opt = AdamW::new(opts.lr);
    let (mut first_step, mut resumed) = (0, 0);
    if let Some(path) = &opts.resume {
        // Every rank reads the same file: the same parameters and moments everywhere.
        let progress = load_state(path, &mut params, &mut opt)?;
        first_step = progress.step;
        resumed = state_digest(&params, &opt, progress);
    }
    dp.broadcast_params(&mut params)?;
    // Ranks started with different settings (batch, steps, buckets, optimizer, resumed state)
    // stop here, each naming the first difference.
    let config = RankConfig {
        batch: opts.global_batch as u64,
        shard_rows: shard.len() as u64,
        seed: opts.seed,
        steps: opts.steps,
        resume: resumed,
        first_step,
        optimizer: if opts.zero { OPTIMIZER_ZERO1 } else { OPTIMIZER_ADAMW },
        optimizer_step: opt.t(),
        ..dp.rank_config(&model, &params)
    };
    dp.agree(&config)?;
    // The parameters, moments (f64) and gradients stay in the backend's buffers, the gradients
    // reduced from there; ZeRO-1 keeps the moments of this rank's share of the parameters only.
    let mut cpu = CpuBackend::new();
    let options = TrainOptions::from(&opt).state_dtype(DType::F64);
    let mut state = TrainState::resume(&mut cpu, &model, &params, &opt, options)?;
    if opts.zero {
        dp.shard_state(&mut state)?;
    }
    if rank == 0 {
        println!(
            "{name}: data parallel over {world} rank(s), batch {} = {world} × {}, optimizer {}{}",
            opts.global_batch,
            shard.len(),
            if opts.zero { "AdamW sharded (ZeRO-1)" } else { "AdamW" },
            if first_step > 0 { format!(", resumed at step {first_step}") } else { String::new() }
        );
    }
    let comm_plan = dp.plan_comm(&model, &params);
    let mut comm_measured = 0usize;
    let (mut millis, mut hidden, mut sent, mut buckets) = (Vec::new(), 0.0, 0u64, 0usize);
    let mut last = (f64::NAN, 0usize, 0usize);
    for step in first_step..first_step + opts.steps {
        let shard = dp.shard_feeds(&feeds(step)?)?;
        let (start, seed) = (Instant::now(), opts.seed.wrapping_add(step));
        let out = dp.train_step(&model, &mut cpu, &mut state, &shard, seed)?;
        let (loss, comm, peaks) = (out.loss, out.comm, (out.local.predicted_peak, out.local.measured_peak));
        millis.push(start.elapsed().as_secs_f64() * 1e3);
        hidden += comm.hidden_fraction();
        sent += comm.bytes_sent;
        buckets += comm.buckets;
        comm_measured = comm_measured.max(comm.buffer_peak_bytes);
        last = (loss, peaks.0, peaks.1);
        if rank == 0 && (step % 10 == 0 || step + 1 == first_step + opts.steps) {
            println!("step {step:4}  loss {loss:.6}  {:.1} ms", millis.last().copied().unwrap_or(0.0));
        }
    }
    let n = opts.steps.max(1) as f64;
    millis.sort_by(f64::total_cmp);
    let median = millis.get(millis.len() / 2).copied().unwrap_or(0.0);
    let state_bytes = state.state_bytes();
    println!(
        "rank {rank}: median step {median:.1} ms, {:.1} buckets/step, {:.0}% of the all-reduce hidden behind the backward, \
         {:.1} KiB sent/step, optimizer state {:.1} KiB, peak {} B predicted / {} B measured, \
         gradient buckets {} B predicted / {} B measured",
        buckets as f64 / n,
        100.0 * hidden / n,
        sent as f64 / n / 1024.0,
        state_bytes as f64 / 1024.0,
        last.1,
        last.2,
        comm_plan.buffer_peak_bytes,
        comm_measured
    );
    if let Some(path) = &opts.save_state {
        // Every rank takes part in gathering sharded moments; rank 0 writes.
        let whole = dp.gather_adamw(&mut cpu, &state)?;
        params = state.params(&mut cpu)?;
        if rank == 0 {
            save_state(path, &params, &whole, Progress { step: first_step + opts.steps, seed: opts.seed })?;
            println!("saved the training state to {}", path.display());
        }
    }
    if rank == 0 {
        println!("final loss {:.6}", last.0);
    }
    dp.comm().barrier()?;
    Ok(())
}

/// Without the `mpi` feature there is no data parallelism to run.
#[cfg(not(feature = "mpi"))]
pub fn train(
    _: &str,
    _: &dyn Fn(usize) -> remat::Result<Model>,
    _: &dyn Fn(u64) -> remat::Result<Feeds>,
    _: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    Err("--data-parallel: remat was built without its `mpi` feature (Open MPI)".into())
}
