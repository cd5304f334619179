//! The CPU backend's thread count on an idle and on a busy machine: the gpt example's training
//! step (4 layers, d_model 64, seq 32, batch 8; and the d256 model) on 1 and 2 threads, first
//! alone, then with a competing process spinning on one core (pinned to CPU 0 with `taskset`
//! where it exists). The two thread counts alternate in six rounds under each load, so that
//! whatever else the machine does weighs on both alike. Prints the four medians (of 60 steps at
//! d64, 30 at d256: fewer left a run at the mercy of one probe of the CPU backend's guard) and
//! each against 1 thread idle.
//!
//! ```sh
//! cargo bench --bench threads            # both models
//! cargo bench --bench threads -- d64     # one
//! ```
//!
//! On a machine with one CPU there is nothing to compare; the bench says so.

use remat::{CpuBackend, DType, Model};
use remat_zoo::{self as zoo, GptConfig};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// Rounds each measurement alternates the two thread counts over.
const ROUNDS: usize = 6;

/// Set in the child process that only spins.
const SPIN_VAR: &str = "REMAT_BENCH_SPIN";

fn main() {
    if std::env::var_os(SPIN_VAR).is_some() {
        spin();
    }
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        println!("threads: this process may use {cpus} CPU: nothing to compare");
        return;
    }
    let models = [("d64", 64, 4, 60), ("d256", 256, 4, 30)];
    for (name, d_model, layers, steps) in models {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let cfg =
            GptConfig { batch: 8, seq: 32, d_model, heads: 4, layers, vocab: 32, dropout: 0.1, dtype: DType::F32 };
        measure(name, &cfg, steps);
    }
}

/// A busy loop until killed: the competing process.
fn spin() -> ! {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// The competing process, pinned to CPU 0 where `taskset` exists.
fn competitor() -> std::io::Result<Child> {
    let exe = std::env::current_exe()?;
    let pinned = Command::new("taskset").arg("-c").arg("0").arg(&exe).env(SPIN_VAR, "1").stdout(Stdio::null()).spawn();
    match pinned {
        Ok(child) => Ok(child),
        Err(_) => Command::new(exe).env(SPIN_VAR, "1").stdout(Stdio::null()).spawn(),
    }
}

fn measure(name: &str, cfg: &GptConfig, steps: usize) {
    let model = Model::new(zoo::gpt(cfg).expect("the gpt traces")).expect("the gpt plans");
    let params = model.init_params(0).expect("parameters fit");
    let feeds = zoo::synthetic_tokens(cfg, 0).expect("tokens");
    // Both thread counts in alternating rounds, so that whatever else the machine does drifts
    // over both alike; each backend's medians over all its rounds.
    let medians_ms = || -> [f64; 2] {
        let mut cpus = [CpuBackend::with_threads(1), CpuBackend::with_threads(2)];
        // Warm-up: helper threads started, allocator arenas and pages touched.
        for cpu in &mut cpus {
            for s in 0..3 {
                model.step_seeded(cpu, &params, &feeds, s).expect("a step");
            }
        }
        let mut times = [Vec::with_capacity(steps), Vec::with_capacity(steps)];
        for round in 0..ROUNDS {
            for (cpu, times) in cpus.iter_mut().zip(&mut times) {
                for s in 0..(steps / ROUNDS) as u64 {
                    let start = Instant::now();
                    model.step_seeded(cpu, &params, &feeds, round as u64 * 1000 + s).expect("a step");
                    times.push(start.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        times.map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
    };
    let idle = medians_ms();
    let busy = match competitor() {
        Ok(mut child) => {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let busy = medians_ms();
            let _ = child.kill();
            let _ = child.wait();
            Some(busy)
        }
        Err(e) => {
            println!("threads/{name}: no competing process ({e})");
            None
        }
    };
    let base = idle[0];
    let row = |label: &str, t: [f64; 2]| {
        println!(
            "threads/{name} {label:<5} 1 thread {:>8.2} ms ({:.2}x)   2 threads {:>8.2} ms ({:.2}x)",
            t[0],
            t[0] / base,
            t[1],
            t[1] / base
        )
    };
    row("idle", idle);
    if let Some(busy) = busy {
        row("busy", busy);
        // What a user on the loaded machine chooses between: the default or one thread, both
        // under the same load.
        println!("threads/{name} busy  2 threads / 1 thread, both busy: {:.2}x", busy[1] / busy[0]);
    }
}
