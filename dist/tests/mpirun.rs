//! The multi-process checks, as a user starts a job: `mpirun -np 2 remat-dist-check <scenario>`
//! (`src/bin/check.rs` holds the assertions each rank makes). Without `mpirun` on the PATH the
//! tests print why and pass, unless `REMAT_REQUIRE` names `mpi` (`.ci/run`, which installs
//! Open MPI, sets it) and makes that a failure.

#[path = "../../benches/common/require.rs"]
mod require;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn mpirun() -> Option<&'static str> {
    let found = Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        require::skip(
            "mpi",
            "no `mpirun` on the PATH (apt-get install openmpi-bin libopenmpi-dev, or run .ci/run's set-up)",
        );
    }
    found.then_some("mpirun")
}

/// `mpirun -np 2 remat-dist-check scenario`, its output, and how long it took.
fn job(scenario: &str, env: &[(&str, &str)]) -> Option<(Output, String, Duration)> {
    let mpirun = mpirun()?;
    let start = Instant::now();
    let mut cmd = Command::new(mpirun);
    // CI runs as root on two cores: allow both.
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(env!("CARGO_BIN_EXE_remat-dist-check"))
        .arg(scenario)
        .env("REMAT_NUM_THREADS", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("mpirun runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    Some((out, text, start.elapsed()))
}

/// `mpirun -np 1 remat-dist-check run A.. : -np 1 remat-dist-check run B..`: each rank its own
/// flags, as the reproducers start the gpt example.
fn mpmd(rank0: &[&str], rank1: &[&str], env: &[(&str, &str)]) -> Option<(Output, String, Duration)> {
    let mpirun = mpirun()?;
    let start = Instant::now();
    let exe = env!("CARGO_BIN_EXE_remat-dist-check");
    let mut cmd = Command::new(mpirun);
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "1", exe, "run"])
        .args(rank0)
        .args([":", "-np", "1", exe, "run"])
        .args(rank1)
        .env("REMAT_NUM_THREADS", "1")
        // The job must end long before this: a rank that fails tells the others at once.
        .env("REMAT_DIST_TIMEOUT", "300");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("mpirun runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    Some((out, text, start.elapsed()))
}

/// The job failed, within seconds rather than after the timeout, remat's own words on every rank
/// (`line` on both), and nothing from MPI's internals or a panic.
fn assert_refused_on_every_rank(result: Option<(Output, String, Duration)>, line: &str) {
    let Some((out, text, took)) = result else { return };
    assert!(!out.status.success(), "{text}");
    for rank in 0..2 {
        assert!(text.contains(&format!("error: rank {rank}: {line}")), "rank {rank} does not say {line:?}:\n{text}");
    }
    for internal in ["panicked", "corrupted", "errno", "MPI Error", "Data unpack", "did not finish within"] {
        assert!(!text.contains(internal), "{internal:?} in:\n{text}");
    }
    assert!(took < Duration::from_secs(120), "the job took {took:?} to end");
}

fn assert_ok(scenario: &str) -> Option<String> {
    let (out, text, _) = job(scenario, &[])?;
    assert!(out.status.success(), "{scenario} failed:\n{text}");
    for rank in 0..2 {
        assert!(text.contains(&format!("ok {scenario} rank {rank}")), "rank {rank} did not finish {scenario}:\n{text}");
    }
    Some(text)
}

#[test]
fn every_collective_gives_the_values_worked_out_by_hand() {
    assert_ok("collectives");
}

#[test]
fn two_ranks_train_like_one_process_with_the_whole_batch() {
    let Some(text) = assert_ok("train") else { return };
    assert!(text.contains("largest relative loss difference"), "{text}");
}

#[test]
fn zero_1_gives_adamws_parameters_with_half_the_state() {
    let Some(text) = assert_ok("zero") else { return };
    assert!(text.contains("optimizer state"), "{text}");
}

#[test]
fn a_run_saved_by_rank_0_resumes_bit_exactly_on_every_rank() {
    assert_ok("resume");
}

#[test]
fn a_sharded_run_saved_by_rank_0_resumes_bit_exactly_on_every_rank() {
    assert_ok("resume-zero");
}

#[test]
fn ranks_that_built_different_models_are_refused_on_every_rank() {
    let Some((out, text, _)) = job("shapes", &[]) else { return };
    assert!(!out.status.success(), "{text}");
    // Both ranks see the mismatch and name the parameter; the first to exit ends the job, so
    // at least one says so (usually both).
    assert!(
        text.contains(
            "param `wte`: ranks disagree on parameter 0: rank 0 has wte [32, 16] f32, rank 1 has wte [32, 24] f32"
        ),
        "{text}"
    );
}

#[test]
fn a_job_with_the_wrong_world_size_is_refused() {
    let Some((out, text, _)) = job("world", &[]) else { return };
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("this job has 2 rank(s), the run expects 3 (start it with mpirun -np 3)"), "{text}");
}

#[test]
fn a_rank_that_dies_ends_the_job() {
    let Some((out, text, took)) = job("die", &[("REMAT_DIST_TIMEOUT", "20")]) else { return };
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("rank 1: leaving without a word") && text.contains("Exit code:    7"), "{text}");
    assert!(took < Duration::from_secs(60), "the job took {took:?} to end");
}

#[test]
fn a_rank_that_stops_answering_ends_the_job_after_the_timeout() {
    let Some((out, text, took)) = job("hang", &[("REMAT_DIST_TIMEOUT", "3")]) else { return };
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("FAILED hang rank 0: rank 0: all-reduce of 4 values (collective #1) did not finish within 3 s"),
        "{text}"
    );
    assert!(took < Duration::from_secs(60), "the job took {took:?} to end");
}

#[test]
fn ranks_with_equal_flags_train_to_the_same_parameters() {
    let Some((out, text, _)) = mpmd(&["--zero", "--steps", "4"], &["--zero", "--steps", "4"], &[]) else { return };
    assert!(out.status.success(), "{text}");
    assert!(text.contains("rank 0 of 2: final loss") && text.contains("rank 1 of 2: final loss"), "{text}");
}

#[test]
fn ranks_with_different_buckets_are_refused_not_corrupted() {
    // mpi_diff_bucket_heap_corruption.sh: `malloc(): corrupted top size`, SIGABRT.
    assert_refused_on_every_rank(
        mpmd(&["--bucket-kib", "1"], &["--bucket-kib", "64"], &[]),
        "ranks disagree on the all-reduce bucket size (bytes): rank 0 has 1024, rank 1 has 65536",
    );
}

#[test]
fn different_buckets_without_the_settings_check_are_refused_before_any_all_reduce() {
    assert_refused_on_every_rank(
        mpmd(&["--bucket-kib", "1", "--no-agree"], &["--bucket-kib", "64", "--no-agree"], &[]),
        "ranks disagree on the gradient buckets: rank 0 reduces ",
    );
}

#[test]
fn all_reduces_of_different_lengths_are_refused_by_the_engine() {
    let Some((out, text, _)) = job("lengths", &[]) else { return };
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("ranks disagree: rank 0 calls all-reduce of 7 values (its collective #1), rank 1 calls all-reduce of 4096 values (its collective #1)"), "{text}");
    assert!(!text.contains("corrupted") && !text.contains("errno"), "{text}");
}

#[test]
fn different_operations_are_refused_by_the_engine() {
    let Some((out, text, _)) = job("ops", &[]) else { return };
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("ranks disagree: rank 0 calls barrier (its collective #1), rank 1 calls all-gather of 8 bytes (its collective #1)"),
        "{text}"
    );
}

#[test]
fn ranks_running_different_steps_are_refused() {
    // mpi_diff_steps_mpi_internal_error.sh: Open MPI's internals (errno = 14, Data unpack ..).
    assert_refused_on_every_rank(
        mpmd(&["--steps", "3"], &["--steps", "5"], &[]),
        "ranks disagree on the steps to run: rank 0 has 3, rank 1 has 5",
    );
}

#[test]
fn ranks_running_different_steps_without_the_settings_check_stop_at_the_first_extra_collective() {
    assert_refused_on_every_rank(
        mpmd(&["--steps", "3", "--no-agree"], &["--steps", "5", "--no-agree"], &[]),
        "ranks disagree: rank 0 calls all-gather of 8 bytes",
    );
}

#[test]
fn zero_1_on_one_rank_only_is_refused() {
    assert_refused_on_every_rank(
        mpmd(&["--zero"], &[], &[]),
        "ranks disagree on the optimizer: rank 0 has AdamW sharded (ZeRO-1), rank 1 has AdamW",
    );
}

#[test]
fn ranks_with_different_batches_are_refused() {
    // mpi_diff_batch_silent.sh: exit 0, rank 1 trained on 2 rows of another batch.
    assert_refused_on_every_rank(
        mpmd(&["--batch", "8"], &["--batch", "4"], &[]),
        "ranks disagree on the whole batch (rows): rank 0 has 8, rank 1 has 4",
    );
}

/// A state saved by a 2-rank job after 3 steps, in a fresh folder.
fn saved_state(name: &str) -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.st");
    let path_text = path.to_str().unwrap();
    let (out, text, _) = mpmd(&["--save-state", path_text], &["--save-state", path_text], &[])?;
    assert!(out.status.success() && path.is_file(), "{text}");
    Some(path)
}

#[test]
fn resuming_on_one_rank_only_is_refused() {
    // mpi_resume_one_rank_silent.sh: exit 0, rank 0 at step 3, rank 1 at step 0.
    let Some(path) = saved_state("resume-one") else { return };
    assert_refused_on_every_rank(
        mpmd(&["--resume", path.to_str().unwrap()], &[], &[]),
        "ranks disagree on the state resumed from: rank 0 has the state with digest ",
    );
    // Both resumed: the same state, accepted.
    let p = path.to_str().unwrap();
    let Some((out, text, _)) = mpmd(&["--resume", p], &["--resume", p], &[]) else { return };
    assert!(out.status.success(), "{text}");
}

#[test]
fn a_rank_that_cannot_read_its_resume_file_ends_the_job_at_once_with_its_error() {
    // mpi_failed_save_error_lost.sh, second case: only rank 0's all-gather timeout was printed.
    let Some(path) = saved_state("truncated") else { return };
    let bytes = std::fs::read(&path).unwrap();
    let truncated = path.with_file_name("truncated.st");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let Some((out, text, took)) =
        mpmd(&["--resume", path.to_str().unwrap()], &["--resume", truncated.to_str().unwrap()], &[])
    else {
        return;
    };
    assert!(!out.status.success(), "{text}");
    assert!(text.contains(&format!("error: rank 1: {}", truncated.display())), "rank 1's own error:\n{text}");
    assert!(text.contains("rank 1 has left the job"), "rank 0 names rank 1:\n{text}");
    assert!(!text.contains("did not finish within"), "{text}");
    assert!(took < Duration::from_secs(120), "the job took {took:?} to end");
}

#[test]
fn a_rank_that_cannot_save_ends_the_job_at_once_with_its_error() {
    // mpi_failed_save_error_lost.sh: rank 0's error was never printed; the job ended after
    // REMAT_DIST_TIMEOUT with rank 1's barrier timeout.
    let path = "/nonexistent/dir/s.st";
    let Some((out, text, took)) = mpmd(&["--save-state", path], &["--save-state", path], &[]) else { return };
    assert!(!out.status.success(), "{text}");
    assert!(text.contains(&format!("error: rank 0: {path}")), "rank 0's own error:\n{text}");
    assert!(text.contains("rank 0 has left the job"), "rank 1 names rank 0:\n{text}");
    assert!(!text.contains("did not finish within"), "{text}");
    assert!(took < Duration::from_secs(120), "the job took {took:?} to end");
}

#[test]
fn a_timeout_too_long_to_represent_is_a_one_line_error_on_every_rank() {
    // mpi_timeout_env_panic.sh: 1e30 and 1e20 panicked on every rank.
    for value in ["1e30", "1e20", "inf", "0", "abc"] {
        let Some((out, text, _)) = job("collectives", &[("REMAT_DIST_TIMEOUT", value)]) else { return };
        assert!(!out.status.success(), "{text}");
        let line = format!("REMAT_DIST_TIMEOUT={value:?}: expected a positive number of seconds");
        assert_eq!(text.matches(&line).count(), 2, "{value}: one line per rank:\n{text}");
        assert!(!text.contains("panicked"), "{text}");
    }
}

/// The parameter digest rank 0 prints at the end of a `run` job.
fn final_digest(text: &str) -> String {
    let line = text.lines().find(|l| l.starts_with("rank 0 of 2: final loss")).unwrap_or_else(|| panic!("{text}"));
    line.rsplit(' ').next().unwrap().to_string()
}

#[test]
fn the_resident_loop_resumes_bit_exactly_and_matches_its_zero_1() {
    // The example's loop trains the resident state (gradients reduced from the backend's
    // buffers, f64 moments); with --zero each rank keeps the moments of its own parameters and
    // broadcasts them updated: the same updates, so the same bits. A run saved after 3 steps
    // (the sharded moments gathered) and resumed for 3 more is a run of 6.
    let Some((out, straight, _)) = mpmd(&["--steps", "6"], &["--steps", "6"], &[]) else { return };
    assert!(out.status.success(), "{straight}");
    let Some((out, zero, _)) = mpmd(&["--zero", "--steps", "6"], &["--zero", "--steps", "6"], &[]) else { return };
    assert!(out.status.success(), "{zero}");
    assert_eq!(final_digest(&straight), final_digest(&zero));
    let Some(path) = saved_state("resident-resume") else { return };
    let p = path.to_str().unwrap();
    let Some((out, resumed, _)) = mpmd(&["--resume", p, "--steps", "3"], &["--resume", p, "--steps", "3"], &[]) else {
        return;
    };
    assert!(out.status.success(), "{resumed}");
    assert_eq!(final_digest(&resumed), final_digest(&straight));
}
