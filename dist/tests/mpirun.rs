//! The multi-process checks, as a user starts a job: `mpirun -np 2 remat-dist-check <scenario>`
//! (`src/bin/check.rs` holds the assertions each rank makes). Without `mpirun` on the PATH the
//! tests print why and pass, unless `REMAT_REQUIRE_MPI=1` (set by `.ci/run`, which installs
//! Open MPI) makes that a failure.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn mpirun() -> Option<&'static str> {
    let found = Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found && std::env::var("REMAT_REQUIRE_MPI").is_ok_and(|v| v == "1") {
        panic!("REMAT_REQUIRE_MPI=1 but `mpirun` is not on the PATH (apt-get install openmpi-bin libopenmpi-dev)");
    }
    if !found {
        println!("skipped: no `mpirun` on the PATH (install Open MPI, or run .ci/run's set-up)");
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
