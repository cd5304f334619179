//! `REMAT_REQUIRE`: the one switch that turns a test's skip into a failure. A test that finds
//! something it needs missing calls [`skip`], which says so on standard error (past the test
//! harness's capture, so `cargo test` shows it) and lets the test pass — unless `REMAT_REQUIRE`,
//! a comma-separated list of the [`NAMES`] (`REMAT_REQUIRE=nvrtc,mpi,torch`), names it, when the
//! test fails saying why. `.ci/run` sets what CI has; `scripts/gpu-check.sh` adds `cuda`.
//!
//! The older `REMAT_REQUIRE_<NAME>=1` (`REMAT_REQUIRE_TORCH=1`) is still read.
//!
//! A file included by path where needed: `#[path = ".../benches/common/require.rs"] mod
//! require;` (test code cannot share a crate without the library exposing test hooks).
#![allow(dead_code)]

use std::io::Write;

/// What a test may skip without, as `REMAT_REQUIRE` names it.
pub const NAMES: [&str; 7] = [
    "cuda",  // a usable GPU (remat-cuda's GPU tests, the gpu_bench example)
    "nvrtc", // NVRTC, to compile the kernel sources (remat-cuda; no GPU needed)
    "nccl",  // NCCL and a GPU (remat-cuda's `nccl` feature)
    "mpi",   // `mpirun` (remat-dist's multi-process tests)
    "torch", // a Python that imports PyTorch 2.15 and pytest (the Python package's tests)
    "dot",   // Graphviz's `dot`, which must read every DOT file remat writes
    "ui",    // the toolchain the compile-fail snapshots were reviewed with (tests/ui)
];

/// Whether `REMAT_REQUIRE` (or the older `REMAT_REQUIRE_<NAME>=1`) names `what`. Panics on a
/// name not in [`NAMES`], there or here, so that a misspelt name requires nothing silently.
pub fn required(what: &str) -> bool {
    assert!(NAMES.contains(&what), "`{what}` is not one of REMAT_REQUIRE's names ({})", NAMES.join(","));
    let list = std::env::var("REMAT_REQUIRE").unwrap_or_default();
    let names: Vec<&str> = list.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    if let Some(bad) = names.iter().find(|n| !NAMES.contains(n)) {
        panic!("REMAT_REQUIRE={list}: `{bad}` is not one of its names ({})", NAMES.join(","));
    }
    names.contains(&what) || std::env::var(format!("REMAT_REQUIRE_{}", what.to_uppercase())).is_ok_and(|v| v == "1")
}

/// `what` is missing, for reason `why`: a failure where [`required`], else `skipped: why` on
/// standard error, named after the running test.
pub fn skip(what: &str, why: impl std::fmt::Display) {
    if required(what) {
        panic!("REMAT_REQUIRE names `{what}`, but {why}");
    }
    let test = std::thread::current().name().unwrap_or("main").to_string();
    // Written to the stream itself: `eprintln!` would be captured with the passing test's output.
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {why} (REMAT_REQUIRE={what} makes this a failure)");
}
