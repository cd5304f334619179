//! The multi-process checks of `remat-dist`, run by `tests/mpirun.rs` under
//! `mpirun -np 2 remat-dist-check <scenario>`. Each prints `ok <scenario> rank R` when every
//! assertion held on its rank, and exits non-zero with the reason otherwise.
//!
//! Scenarios: `collectives` (every operation against values worked out by hand), `train`
//! (2 ranks × batch b against 1 process × batch 2b: losses to 1e-5 relative over 50 steps,
//! parameters bitwise equal on every rank), `zero` (ZeRO-1 against unsharded AdamW: bitwise
//! equal parameters, half the optimizer state), `shapes` (ranks that built different models are
//! refused at start), `world` (a run that expects 3 ranks under 2), `die` (rank 1 dies before
//! the first all-reduce: rank 0 gives up within the timeout).
//!
//! `run [--batch N] [--steps N] [--bucket-kib N] [--zero] [--resume FILE] [--save-state FILE]
//! [--no-agree]` is the gpt example's `--data-parallel` loop on a small GPT, through the same
//! library calls (parameters broadcast, settings agreed, steps, ZeRO-1, save and resume), with
//! each rank's flags its own (`mpirun -np 1 .. run --batch 8 : -np 1 .. run --batch 4`): a rank
//! that fails ends the job with `remat_dist::exit_with_error`. `lengths` and `ops` call one
//! collective with a different length / a different operation on each rank.

use remat_core::{load_state, save_state, AdamW, CpuBackend, DType, Model, Optimizer, Params, Progress, Result};
use remat_core::{TrainOptions, TrainState};
use remat_dist::{sum_in_rank_order, Collective, DataParallel, Engine, Mpi, RankConfig, ShardedAdamW};
use remat_zoo::{self as zoo, GptConfig};

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let mut comm = match Mpi::init() {
        Ok(c) => c,
        Err(e) => fail("init", 0, &e.to_string()),
    };
    let rank = comm.rank();
    let result = match scenario.as_str() {
        "collectives" => collectives(&mut comm),
        "train" => train(comm, false),
        "zero" => train(comm, true),
        "shapes" => shapes(comm),
        "world" => DataParallel::new(comm).expect_world_size(3),
        "die" => die(comm),
        "hang" => hang(comm),
        "resume" => resume(comm, false),
        "resume-zero" => resume(comm, true),
        "run" => run(comm, &std::env::args().skip(2).collect::<Vec<_>>()),
        "lengths" => {
            let n = if rank == 0 { 7 } else { 4096 };
            comm.all_reduce(vec![1.0; n]).map(|_| ())
        }
        "ops" => {
            if rank == 0 {
                comm.barrier()
            } else {
                comm.all_gather(vec![1; 8]).map(|_| ())
            }
        }
        other => Err(remat_core::Error::config("scenario", format!("unknown scenario {other:?}"))),
    };
    match result {
        Ok(()) => println!("ok {scenario} rank {rank}"),
        Err(e) => fail(&scenario, rank, &e.to_string()),
    }
}

fn fail(scenario: &str, rank: usize, why: &str) -> ! {
    use std::io::Write;
    // One write, so that the lines of two failing ranks do not interleave.
    let _ = std::io::stderr().lock().write_all(format!("FAILED {scenario} rank {rank}: {why}\n").as_bytes());
    remat_dist::exit_now(3)
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(remat_core::Error::internal(what()))
    }
}

/// Each operation against what it must give, written out for ranks 0..world.
fn collectives(comm: &mut Engine) -> Result<()> {
    let (rank, world) = (comm.rank(), comm.world_size());
    check(world == 2, || format!("run under mpirun -np 2, got {world} ranks"))?;
    // All-reduce of rank-dependent values, with a length that does not divide by the world size.
    let mine: Vec<f32> = (0..7).map(|i| (rank * 10 + i) as f32 + 0.25).collect();
    let sums = comm.all_reduce(mine)?;
    let expected: Vec<f32> = (0..7).map(|i| (i as f32 + 0.25) + ((10 + i) as f32 + 0.25)).collect();
    check(sums == expected, || format!("all-reduce gave {sums:?}, expected {expected:?}"))?;
    // Rank order: values whose f32 sum depends on the order of addition.
    let tricky = if rank == 0 { vec![1.0e8f32, 1.0] } else { vec![-1.0e8f32, 1.0e-8] };
    let sums = comm.all_reduce(tricky)?;
    let in_order = sum_in_rank_order(&[1.0e8, 1.0, -1.0e8, 1.0e-8], 2);
    check(sums == in_order, || format!("all-reduce is not the rank-order sum: {sums:?} vs {in_order:?}"))?;
    // Empty.
    check(comm.all_reduce(Vec::new())?.is_empty(), || "all-reduce of nothing".into())?;
    // Broadcast from rank 1.
    let got = comm.broadcast(vec![rank as u8; 5], 1)?;
    check(got == vec![1u8; 5], || format!("broadcast from rank 1 gave {got:?}"))?;
    // All-gather, in rank order.
    let got = comm.all_gather(vec![rank as u8 + 7; 3])?;
    check(got == vec![7, 7, 7, 8, 8, 8], || format!("all-gather gave {got:?}"))?;
    let varied = comm.all_gather_varied(&vec![b'x'; rank + 1])?;
    check(varied == vec![b"x".to_vec(), b"xx".to_vec()], || format!("varied all-gather gave {varied:?}"))?;
    // Reduce-scatter: chunk r of the sum to rank r.
    let values: Vec<f32> = (0..4).map(|i| (i + 100 * rank) as f32).collect();
    let got = comm.reduce_scatter(values)?;
    let expected = if rank == 0 { vec![100.0, 102.0] } else { vec![104.0, 106.0] };
    check(got == expected, || format!("reduce-scatter gave {got:?}, expected {expected:?}"))?;
    comm.barrier()?;
    check(comm.bytes_sent() > 0, || "no bytes counted".into())?;
    // Errors a caller can make.
    let e = comm.broadcast(vec![0], 5).err().map(|e| e.to_string()).unwrap_or_default();
    check(e.contains("rank 5") && e.contains("2 rank"), || format!("broadcast from rank 5: {e:?}"))?;
    let e = comm.reduce_scatter(vec![0.0; 3]).err().map(|e| e.to_string()).unwrap_or_default();
    check(e.contains("divide evenly"), || format!("reduce-scatter of 3 over 2: {e:?}"))
}

fn config(batch: usize, d_model: usize) -> GptConfig {
    GptConfig { batch, seq: 8, d_model, heads: 2, layers: 2, vocab: 32, dropout: 0.0, dtype: DType::F32 }
}

/// 2 ranks × batch 2 against 1 process × batch 4 (computed on every rank), 50 AdamW steps.
fn train(comm: Engine, sharded: bool) -> Result<()> {
    let steps = 50;
    let whole = config(4, 16);
    let reference_model = Model::new(zoo::gpt(&whole)?)?;
    let shard_model = Model::new(zoo::gpt(&config(2, 16))?)?;
    let mut dp = DataParallel::new(comm).with_bucket_bytes(4096);
    let (rank, world) = (dp.rank(), dp.world_size());
    // Each rank starts from its own draw: the broadcast makes them rank 0's.
    let mut params = shard_model.init_params(100 + rank as u64)?;
    dp.broadcast_params(&mut params)?;
    let mut reference_params = reference_model.init_params(100)?;
    check(same_bits(&params, &reference_params), || "broadcast did not give rank 0's parameters".into())?;
    let mut opt = AdamW::new(3e-3);
    let mut sharded_opt = ShardedAdamW::new(AdamW::new(3e-3), &params, rank, world)?;
    let mut reference_opt = AdamW::new(3e-3);
    let mut worst = 0.0f64;
    let (mut buckets, mut hidden) = (0usize, 0.0f64);
    for step in 0..steps {
        let feeds = zoo::synthetic_tokens(&whole, step)?;
        let reference = reference_model.step(&mut CpuBackend::new(), &reference_params, &feeds)?;
        reference_opt.step(&mut reference_params, &reference.grads)?;
        let out = dp.step(&shard_model, &mut CpuBackend::new(), &params, &dp.shard_feeds(&feeds)?, 0)?;
        let plan = dp.plan_comm(&shard_model, &params);
        check(plan.buckets.len() == out.comm.buckets && plan.buffer_peak_bytes == out.comm.buffer_peak_bytes, || {
            format!(
                "step {step}: predicted {} buckets holding {} B, measured {} holding {} B",
                plan.buckets.len(),
                plan.buffer_peak_bytes,
                out.comm.buckets,
                out.comm.buffer_peak_bytes
            )
        })?;
        check(out.local.predicted_peak == out.local.measured_peak, || {
            format!("step {step}: predicted peak {} != measured {}", out.local.predicted_peak, out.local.measured_peak)
        })?;
        buckets += out.comm.buckets;
        hidden += out.comm.hidden_fraction();
        if sharded {
            let mut plain = params.clone();
            opt.step(&mut plain, &out.grads)?;
            sharded_opt.step(dp.comm(), &mut params, &out.grads)?;
            check(same_bits(&plain, &params), || format!("step {step}: ZeRO-1 parameters differ from AdamW's"))?;
        } else {
            opt.step(&mut params, &out.grads)?;
        }
        let rel = (out.loss - reference.loss).abs() / reference.loss.abs();
        worst = worst.max(rel);
        check(rel <= 1e-5, || {
            format!("step {step}: loss {} vs {} on one process (relative {rel:.2e})", out.loss, reference.loss)
        })?;
        // Every rank holds the same bits.
        let digest = digest(&params);
        let all = dp.comm().all_gather(digest.to_le_bytes().to_vec())?;
        check(all.chunks_exact(8).all(|c| c == digest.to_le_bytes()), || {
            format!("step {step}: ranks hold different parameters")
        })?;
    }
    if sharded {
        let full = 2 * 8 * params.values().iter().map(|p| p.numel()).sum::<usize>();
        check(sharded_opt.state_bytes() * world <= full + 16 * world, || {
            format!("sharded state {} B per rank, unsharded {full} B", sharded_opt.state_bytes())
        })?;
        println!("rank {rank}: optimizer state {} B per rank against {full} B unsharded", sharded_opt.state_bytes());
    }
    println!(
        "rank {rank}: {steps} steps, largest relative loss difference {worst:.2e}, {:.1} buckets per step, {:.0}% of the reduction hidden",
        buckets as f64 / steps as f64,
        100.0 * hidden / steps as f64
    );
    Ok(())
}

fn same_bits(a: &Params, b: &Params) -> bool {
    a.values().iter().zip(b.values()).all(|(x, y)| {
        x.shape() == y.shape() && x.to_f64_vec().iter().zip(y.to_f64_vec()).all(|(p, q)| p.to_bits() == q.to_bits())
    })
}

fn digest(params: &Params) -> u64 {
    params
        .values()
        .iter()
        .flat_map(|p| p.to_f64_vec())
        .fold(0xcbf29ce484222325u64, |h, x| (h ^ x.to_bits()).wrapping_mul(0x100000001b3))
}

/// Rank 1 builds a wider model: both ranks are refused at the broadcast, naming the parameter.
fn shapes(comm: Engine) -> Result<()> {
    let d = if comm.rank() == 1 { 24 } else { 16 };
    let model = Model::new(zoo::gpt(&config(2, d))?)?;
    let mut params = model.init_params(1)?;
    DataParallel::new(comm).broadcast_params(&mut params)
}

/// Rank 1 leaves before the first all-reduce; rank 0 must not wait forever.
fn die(comm: Engine) -> Result<()> {
    if comm.rank() == 1 {
        eprintln!("rank 1: leaving without a word");
        std::process::exit(7);
    }
    let mut comm = comm;
    comm.all_reduce(vec![1.0; 4]).map(|_| ())
}

/// Rank 1 stops answering (stuck, not dead); rank 0 gives up after the timeout.
fn hang(comm: Engine) -> Result<()> {
    if comm.rank() == 1 {
        std::thread::sleep(std::time::Duration::from_secs(600));
    }
    let mut comm = comm;
    comm.all_reduce(vec![1.0; 4]).map(|_| ())
}

/// AdamW whole on every rank, or sharded (ZeRO-1).
enum Opt {
    Whole(AdamW),
    Sharded(ShardedAdamW),
}

impl Opt {
    fn new(sharded: bool, params: &Params, dp: &DataParallel<Engine>) -> Result<Opt> {
        Opt::from_whole(AdamW::new(3e-3), sharded, params, dp)
    }

    fn from_whole(adamw: AdamW, sharded: bool, params: &Params, dp: &DataParallel<Engine>) -> Result<Opt> {
        Ok(if sharded {
            Opt::Sharded(ShardedAdamW::from_adamw(&adamw, params, dp.rank(), dp.world_size())?)
        } else {
            Opt::Whole(adamw)
        })
    }

    fn step(
        &mut self,
        dp: &mut DataParallel<Engine>,
        params: &mut Params,
        grads: &[remat_core::HostTensor],
    ) -> Result<()> {
        match self {
            Opt::Whole(o) => o.step(params, grads),
            Opt::Sharded(o) => o.step(dp.comm(), params, grads),
        }
    }

    /// The whole state (gathered from the shards: every rank calls it).
    fn whole(&self, dp: &mut DataParallel<Engine>, params: &Params) -> Result<AdamW> {
        match self {
            Opt::Whole(o) => Ok(o.clone()),
            Opt::Sharded(o) => o.to_adamw(dp.comm(), params),
        }
    }
}

/// Six steps straight, against three, a save by rank 0, a resume on every rank and three more
/// (`sharded`: the optimizer is ZeRO-1's, gathered whole for the save and cut again on resume).
fn resume(comm: Engine, sharded: bool) -> Result<()> {
    let whole = config(4, 16);
    let model = Model::new(zoo::gpt(&config(2, 16))?)?;
    let mut dp = DataParallel::new(comm);
    let rank = dp.rank();
    let run = |dp: &mut DataParallel<Engine>,
               params: &mut Params,
               opt: &mut Opt,
               steps: std::ops::Range<u64>|
     -> Result<()> {
        for step in steps {
            let feeds = dp.shard_feeds(&zoo::synthetic_tokens(&whole, step)?)?;
            let out = dp.step(&model, &mut CpuBackend::new(), params, &feeds, step)?;
            opt.step(dp, params, &out.grads)?;
        }
        Ok(())
    };
    let start = model.init_params(9)?;
    let mut straight = start.clone();
    let mut straight_opt = Opt::new(sharded, &straight, &dp)?;
    run(&mut dp, &mut straight, &mut straight_opt, 0..6)?;
    let mut first = start.clone();
    let mut first_opt = Opt::new(sharded, &first, &dp)?;
    run(&mut dp, &mut first, &mut first_opt, 0..3)?;
    // Rank 0 names the file (its process id) and saves; every rank reads it.
    let name = format!("remat-dist-resume-{}.safetensors", std::process::id());
    let name = String::from_utf8_lossy(&dp.comm().broadcast(format!("{name:<64}").into_bytes(), 0)?).trim().to_string();
    let path = std::env::temp_dir().join(name);
    let state = first_opt.whole(&mut dp, &first)?;
    if rank == 0 {
        save_state(&path, &first, &state, Progress { step: 3, seed: 0 })?;
    }
    dp.comm().barrier()?;
    let (mut resumed, mut loaded) = (model.init_params(1234)?, AdamW::new(3e-3));
    let progress = load_state(&path, &mut resumed, &mut loaded)?;
    dp.comm().barrier()?;
    if rank == 0 {
        let _ = std::fs::remove_file(&path);
    }
    check(progress.step == 3, || format!("resumed at step {}", progress.step))?;
    dp.broadcast_params(&mut resumed)?;
    let mut resumed_opt = Opt::from_whole(loaded, sharded, &resumed, &dp)?;
    run(&mut dp, &mut resumed, &mut resumed_opt, 3..6)?;
    check(same_bits(&straight, &resumed), || "the resumed run's parameters differ from the uninterrupted run's".into())
}

/// The flags of `run`, as the gpt example reads them.
struct RunFlags {
    batch: usize,
    steps: u64,
    bucket_kib: usize,
    zero: bool,
    resume: Option<std::path::PathBuf>,
    save_state: Option<std::path::PathBuf>,
    agree: bool,
}

fn run_flags(args: &[String]) -> Result<RunFlags> {
    let mut flags =
        RunFlags { batch: 4, steps: 3, bucket_kib: 4, zero: false, resume: None, save_state: None, agree: true };
    let mut args = args.iter();
    let bad = |what: &str| remat_core::Error::config("run", format!("run: {what}"));
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| bad(&format!("{flag} needs a value")));
        let number = |v: &String| v.parse::<u64>().map_err(|_| bad(&format!("{flag} {v:?} is not a number")));
        match flag.as_str() {
            "--batch" => flags.batch = number(value()?)? as usize,
            "--steps" => flags.steps = number(value()?)?,
            "--bucket-kib" => flags.bucket_kib = number(value()?)? as usize,
            "--resume" => flags.resume = Some(value()?.into()),
            "--save-state" => flags.save_state = Some(value()?.into()),
            "--zero" => flags.zero = true,
            "--no-agree" => flags.agree = false,
            other => return Err(bad(&format!("unknown flag {other:?}"))),
        }
    }
    Ok(flags)
}

/// The example's data-parallel loop; a failure on this rank ends the job as the example does.
fn run(comm: Engine, args: &[String]) -> Result<()> {
    let flags = run_flags(args)?;
    let mut dp = DataParallel::new(comm).with_bucket_bytes(flags.bucket_kib * 1024);
    match run_rank(&mut dp, &flags) {
        Ok(()) => Ok(()),
        Err(e) => remat_dist::exit_with_error(dp.comm(), &e),
    }
}

fn run_rank(dp: &mut DataParallel<Engine>, flags: &RunFlags) -> Result<()> {
    let (rank, world) = (dp.rank(), dp.world_size());
    let whole = config(flags.batch, 16);
    let shard = dp.shard(flags.batch)?;
    let model = Model::new(zoo::gpt(&config(shard.len(), 16))?)?;
    let mut params = model.init_params(0)?;
    let mut opt = AdamW::new(3e-3);
    let (mut first_step, mut resumed) = (0, 0);
    if let Some(path) = &flags.resume {
        let progress = load_state(path, &mut params, &mut opt)?;
        first_step = progress.step;
        resumed = remat_dist::state_digest(&params, &opt, progress);
    }
    dp.broadcast_params(&mut params)?;
    if flags.agree {
        let config = RankConfig {
            batch: flags.batch as u64,
            shard_rows: shard.len() as u64,
            steps: flags.steps,
            resume: resumed,
            first_step,
            optimizer: if flags.zero { remat_dist::OPTIMIZER_ZERO1 } else { remat_dist::OPTIMIZER_ADAMW },
            optimizer_step: opt.t(),
            ..dp.rank_config(&model, &params)
        };
        dp.agree(&config)?;
    }
    // As the example: the parameters, moments (f64) and gradients stay in the backend's
    // buffers; ZeRO-1 shards the moments over the ranks.
    let mut cpu = CpuBackend::new();
    let options = TrainOptions::from(&opt).state_dtype(DType::F64);
    let mut state = TrainState::resume(&mut cpu, &model, &params, &opt, options)?;
    if flags.zero {
        dp.shard_state(&mut state)?;
    }
    let mut loss = f64::NAN;
    for step in first_step..first_step + flags.steps {
        let feeds = dp.shard_feeds(&zoo::synthetic_tokens(&whole, step)?)?;
        loss = dp.train_step(&model, &mut cpu, &mut state, &feeds, step)?.loss;
    }
    let whole_opt = dp.gather_adamw(&mut cpu, &state)?;
    let params = state.params(&mut cpu)?;
    if let Some(path) = &flags.save_state {
        if rank == 0 {
            save_state(path, &params, &whole_opt, Progress { step: first_step + flags.steps, seed: 0 })?;
        }
    }
    // Every rank holds the same parameters (the digest is gathered: one length on every rank).
    let digest = digest(&params);
    let all = dp.comm().all_gather(digest.to_le_bytes().to_vec())?;
    check(all.chunks_exact(8).all(|c| c == digest.to_le_bytes()), || "ranks hold different parameters".into())?;
    println!("rank {rank} of {world}: final loss {loss:.6}, parameters {digest:016x}");
    Ok(())
}
