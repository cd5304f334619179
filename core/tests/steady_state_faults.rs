//! A training step reuses the memory the previous step freed: after the first steps, a step
//! faults in (almost) no fresh pages. Its own test binary, so that the process's fault counter
//! sees this test alone.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

use remat_core::zoo::{self, GptConfig};
use remat_core::{CpuBackend, DType, Model};

/// Minor page faults of this process so far (`/proc/self/stat`, field 10).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("procfs");
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    after.split(' ').nth(7).and_then(|f| f.parse().ok()).expect("minflt field")
}

#[test]
fn a_steady_training_step_faults_in_no_fresh_pages() {
    if std::env::var(remat_core::KEEP_FREED_MEMORY_VAR).is_ok_and(|v| v.trim() == "0") {
        println!("skipped: {}=0 leaves glibc's thresholds alone", remat_core::KEEP_FREED_MEMORY_VAR);
        return;
    }
    // Activations of 1–4 MiB (d_model 256, 1024 tokens), where glibc's adaptive thresholds gave
    // memory back every step.
    let cfg =
        GptConfig { batch: 4, seq: 256, d_model: 256, heads: 4, layers: 2, vocab: 64, dropout: 0.1, dtype: DType::F32 };
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let params = model.init_params(0);
    let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
    let mut faults = Vec::new();
    for _ in 0..8 {
        let before = minor_faults();
        model.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
        faults.push(minor_faults() - before);
    }
    // One 1024 × 256 f32 activation alone spans 256 pages.
    // Without the fixed thresholds this model's steps kept faulting 1,700–3,600 pages each; with
    // them, the fourth step on faults none.
    let steady = faults[5..].iter().max().copied().unwrap();
    assert!(steady < 100, "minor faults per step: {faults:?}");
}
