//! Trains a small GPT-style transformer on a synthetic language, on the CPU, with activation
//! checkpointing: only matrix-product outputs are kept for the backward pass, everything else is
//! recomputed. Prints the loss falling and the memory the plan predicted and the CPU measured.
//!
//! `cargo run --release --example train [-- --steps N]`

use remat::zoo::{self, GptConfig};
use remat::{AdamW, CpuBackend, DType, Model, Op, Optimizer};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps = parse_steps()?;
    let cfg =
        GptConfig { batch: 8, seq: 32, d_model: 64, heads: 4, layers: 2, vocab: 32, dropout: 0.0, dtype: DType::F32 };
    let graph = zoo::gpt(&cfg)?;
    let full = Model::new(graph.clone())?;
    // Keep matmul outputs, recompute the rest just before the backward needs it.
    let model = Model::with_saved(graph, |joint| {
        let forward = &joint.graph().nodes()[..joint.n_forward()];
        forward.iter().map(|node| matches!(node.op, Op::Matmul)).collect()
    })?;
    println!(
        "gpt: {} layers, d_model {}, {} forward nodes, {} joint nodes",
        cfg.layers,
        cfg.d_model,
        model.joint().n_forward(),
        model.joint().graph().len()
    );
    println!(
        "saved activations: {} KiB with checkpointing vs {} KiB without; {} ops recomputed",
        model.plan().saved_bytes() / 1024,
        full.plan().saved_bytes() / 1024,
        model.plan().recomputed().len()
    );
    let mut cpu = CpuBackend::new();
    let mut params = model.init_params(0);
    let mut opt = AdamW::new(3e-3);
    let start = Instant::now();
    let mut first = None;
    for step in 0..steps {
        let feeds = zoo::synthetic_tokens(&cfg, step)?;
        let out = model.step_seeded(&mut cpu, &params, &feeds, step)?;
        opt.step(&mut params, &out.grads)?;
        first.get_or_insert(out.loss);
        if step % 20 == 0 || step + 1 == steps {
            println!(
                "step {step:4}  loss {:.4}  peak {} KiB (predicted {} KiB)  {:.1} s",
                out.loss,
                out.measured_peak / 1024,
                out.predicted_peak / 1024,
                start.elapsed().as_secs_f64()
            );
        }
        if step + 1 == steps {
            println!("loss {:.4} -> {:.4}", first.unwrap_or(out.loss), out.loss);
        }
    }
    Ok(())
}

fn parse_steps() -> Result<u64, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(200),
        [flag, n] if flag == "--steps" => n.parse().map_err(|_| format!("--steps takes a whole number, got `{n}`")),
        other => Err(format!("unknown arguments {other:?}; usage: train [--steps N]")),
    }
}
