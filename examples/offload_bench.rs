//! Save, offload or recompute: device peak and estimated step time of a GPT at two sizes under
//! save-all, full recompute, save-matmuls, save-matmuls with the rest offloaded, and the budget
//! solver at three device budgets with and without offload. Peaks are measured on the CPU
//! backend (whose host tier is a second metered pool) and checked against the plan's
//! prediction; step times are the cost model's estimate (compute at its FLOP rate plus the
//! transfer time no compute hides), for the H200 by default.
//!
//! ```sh
//! cargo run --release --example offload_bench               # H200 rates
//! cargo run --release --example offload_bench -- --model cpu
//! ```

use remat::partition::PGraph;
use remat::region::{enter_region, PolicyTable, RegionSpec};
use remat::report::reason_code;
use remat::CostModel;
use remat::{Action, Budget, CpuBackend, DType, Graph, Model, OpKind, Policy, Step, Strategy, Tensor};
use remat_zoo::{self as zoo, BlockParams, GptConfig, Part};

static RECOMPUTE_ALL: RegionSpec = RegionSpec::new("block", PolicyTable::RECOMPUTE_ALL);
static SAVE_MATMULS: RegionSpec =
    RegionSpec::new("part", PolicyTable { must_save: &[OpKind::Matmul], ..PolicyTable::RECOMPUTE_ALL });
static SAVE_MATMULS_OFFLOAD_REST: RegionSpec = RegionSpec::new(
    "part",
    PolicyTable { must_save: &[OpKind::Matmul], ..PolicyTable::uniform(Policy::PreferOffload) },
);

fn parts(spec: &'static RegionSpec) -> impl Fn(Part, &Tensor, &BlockParams, usize) -> Tensor {
    move |part, x, p, heads| {
        let _region = enter_region(spec);
        match part {
            Part::Attention => zoo::attention(x, p, heads),
            Part::FeedForward => zoo::feed_forward(x, p),
        }
    }
}

/// The graph of each row: untagged, one recompute-all region per block, or regions per part.
fn graph(cfg: &GptConfig, row: &str) -> remat::Result<Graph> {
    match row {
        "full recompute" => zoo::gpt_blocks(cfg, &|x, p, layer| {
            let _region = enter_region(&RECOMPUTE_ALL);
            zoo::block(x, p, cfg, layer, &parts_plain)
        }),
        "save-matmuls" => zoo::gpt_with(cfg, &parts(&SAVE_MATMULS)),
        "save-matmuls+offload" => zoo::gpt_with(cfg, &parts(&SAVE_MATMULS_OFFLOAD_REST)),
        _ => zoo::gpt(cfg),
    }
}

fn parts_plain(part: Part, x: &Tensor, p: &BlockParams, heads: usize) -> Tensor {
    match part {
        Part::Attention => zoo::attention(x, p, heads),
        Part::FeedForward => zoo::feed_forward(x, p),
    }
}

struct Row {
    name: String,
    device_peak: usize,
    host_peak: usize,
    saved: u64,
    host: u64,
    recompute_flops: u64,
    exposed_s: f64,
    step_s: f64,
}

fn measure(cfg: &GptConfig, name: &str, strategy: Strategy, cost: &CostModel) -> remat::Result<(Row, Model)> {
    let model = Model::with_cost_model(graph(cfg, name)?, strategy, cost)?;
    let params = model.init_params(1)?;
    let feeds = zoo::synthetic_tokens(cfg, 0)?;
    let out = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, 0)?;
    assert_eq!(out.measured_peak, out.predicted_peak, "{name}: measured device peak = predicted");
    assert_eq!(out.measured_host_peak, out.predicted_host_peak, "{name}: measured host peak = predicted");
    let g = model.joint().graph();
    let flops: u64 = model
        .plan()
        .steps()
        .map(|s| match *s {
            Step::Compute(i) | Step::Recompute(i) => g.node_flops(i),
            _ => 0,
        })
        .sum();
    let p = model.partition().expect("partitioned");
    let row = Row {
        name: match strategy {
            Strategy::Budget(Budget::Bytes(b)) => format!("budget {} KiB", b / 1024),
            Strategy::BudgetOffload(Budget::Bytes(b)) => format!("budget {} KiB+offl", b / 1024),
            _ => name.to_string(),
        },
        device_peak: out.measured_peak,
        host_peak: out.measured_host_peak,
        saved: p.saved_bytes,
        host: p.host_bytes,
        recompute_flops: p.recompute_flops,
        exposed_s: p.exposed_transfer_s,
        step_s: cost.compute_s(flops) + p.exposed_transfer_s,
    };
    Ok((row, model))
}

fn main() -> remat::Result<()> {
    let cpu = std::env::args().any(|a| a == "cpu");
    let cost = if cpu { CostModel::CPU } else { CostModel::H200 };
    println!(
        "cost model: d2h {:.0} GB/s, h2d {:.0} GB/s, compute {:.0} GFLOP/s ({})",
        cost.d2h_bytes_per_s / 1e9,
        cost.h2d_bytes_per_s / 1e9,
        cost.flops_per_s / 1e9,
        if cpu { "CPU" } else { "H200" }
    );
    let sizes = [
        GptConfig { batch: 4, seq: 64, d_model: 64, heads: 4, layers: 4, vocab: 64, dropout: 0.1, dtype: DType::F32 },
        GptConfig { batch: 4, seq: 128, d_model: 128, heads: 4, layers: 4, vocab: 64, dropout: 0.1, dtype: DType::F32 },
    ];
    for (k, cfg) in sizes.iter().enumerate() {
        println!(
            "\ngpt: batch {}, seq {}, d_model {}, {} layers (device peak measured on the CPU backend = predicted)",
            cfg.batch, cfg.seq, cfg.d_model, cfg.layers
        );
        let mut rows = Vec::new();
        let (save_all, _) = measure(cfg, "save-all", Strategy::Respect, &cost)?;
        let base = save_all.saved;
        rows.push(save_all);
        for name in ["full recompute", "save-matmuls", "save-matmuls+offload"] {
            rows.push(measure(cfg, name, Strategy::Respect, &cost)?.0);
        }
        let budgets = [base / 2, base / 4, base / 10];
        let mut explained = None;
        for (j, b) in budgets.into_iter().enumerate() {
            rows.push(measure(cfg, "solver", Strategy::Budget(Budget::Bytes(b)), &cost)?.0);
            let (row, model) = measure(cfg, "solver", Strategy::BudgetOffload(Budget::Bytes(b)), &cost)?;
            rows.push(row);
            if k == 0 && j == 1 {
                explained = Some((b, model));
            }
        }
        print_table(&rows);
        if let Some((b, model)) = explained {
            explain(b, &model);
        }
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    let base = &rows[0];
    println!(
        "{:<22} {:>11} {:>9} {:>10} {:>9} {:>10} {:>11} {:>10} {:>6}",
        "plan", "dev peak", "host pk", "dev saved", "host", "recompute", "exposed ms", "step ms", "time"
    );
    let kib = |b: f64| format!("{:.0}K", b / 1024.0);
    for r in rows {
        println!(
            "{:<22} {:>11} {:>9} {:>10} {:>9} {:>7.2}MFL {:>11.4} {:>10.4} {:>5.2}x",
            r.name,
            kib(r.device_peak as f64),
            kib(r.host_peak as f64),
            kib(r.saved as f64),
            kib(r.host as f64),
            r.recompute_flops as f64 / 1e6,
            r.exposed_s * 1e3,
            r.step_s * 1e3,
            r.step_s / base.step_s
        );
    }
}

/// The solver's choices at one budget, counted by action and reason, with every offloaded value.
fn explain(budget: u64, model: &Model) {
    let p = model.partition().expect("partitioned");
    let pg = PGraph::from_joint(model.joint());
    println!("\nsolver choices at a device budget of {budget} B (budget+offload):");
    let mut counts: Vec<((Action, &str), usize)> = Vec::new();
    for d in &p.decisions {
        let key = (d.action, reason_code(d.reason));
        match counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, c)) => *c += 1,
            None => counts.push((key, 1)),
        }
    }
    for ((action, reason), c) in counts {
        println!("  {action:?} because {reason}: {c}");
    }
    for d in p.decisions.iter().filter(|d| d.action == Action::Offload) {
        let n = pg.node(d.node);
        println!(
            "  offloaded {} {} ({} B): {}",
            n.id,
            n.op,
            n.bytes,
            d.offload.map_or_else(String::new, |o| o.describe(&pg))
        );
    }
}
