//! Asked to keep freed memory (`keep_freed_memory`), a training step reuses the memory the
//! previous step freed: after the first steps, a step faults in (almost) no fresh pages, until
//! `release_freed_memory` gives the memory back. Its own test binary, so that the process's
//! fault counter sees this test alone.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

use remat_core::{CpuBackend, DType, Model};
use remat_zoo::{self as zoo, GptConfig};

/// Minor page faults of this process so far (`/proc/self/stat`, field 10).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("procfs");
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    after.split(' ').nth(7).and_then(|f| f.parse().ok()).expect("minflt field")
}

#[test]
fn a_steady_training_step_faults_in_no_fresh_pages() {
    if !remat_core::keep_freed_memory() {
        println!("skipped: glibc's thresholds are left alone (malloc settings in the environment)");
        return;
    }
    // Activations of 1–4 MiB (d_model 256, 1024 tokens), where glibc's adaptive thresholds gave
    // memory back every step.
    let cfg =
        GptConfig { batch: 4, seq: 256, d_model: 256, heads: 4, layers: 2, vocab: 64, dropout: 0.1, dtype: DType::F32 };
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let params = model.init_params(0).unwrap();
    let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
    // One backend for every step, as a training loop holds one, on one thread: what is measured
    // is the allocator's, and with several threads a thread that first runs some chunk late
    // faults its pages in then (on a loaded machine, hundreds of pages in steady steps: CI saw
    // [14767, 64, 33, 0, 0, 0, 208, 0, 32, 545, 273, 0, 0, 273]).
    let mut cpu = CpuBackend::with_threads(1);
    let mut faults = Vec::new();
    for _ in 0..14 {
        let before = minor_faults();
        model.step(&mut cpu, &params, &feeds).unwrap();
        faults.push(minor_faults() - before);
    }
    // One 1024 × 256 f32 activation alone spans 256 pages.
    // Without the fixed thresholds this model's steps kept faulting 1,700–8,700 pages each; with
    // them, a few hundred at most from the second step on, and none by the sixth. So: the last ten
    // steps average under 50 a step, and none refaults a step's worth.
    let steady = &faults[4..];
    let mean = steady.iter().sum::<u64>() / steady.len() as u64;
    assert!(mean < 50 && steady.iter().all(|&f| f < 600), "minor faults per step: {faults:?}");
    // Giving the kept memory back works, and the next step faults its pages in again.
    assert!(remat_core::release_freed_memory(), "malloc_trim released nothing");
    let before = minor_faults();
    model.step(&mut cpu, &params, &feeds).unwrap();
    let after_trim = minor_faults() - before;
    println!("minor faults per step: {faults:?}, after release_freed_memory: {after_trim}");
    assert!(after_trim > 500, "a step after release_freed_memory faulted only {after_trim} pages");
}
