//! Partitioner speed: partition time of deep MLP and transformer joint graphs from 10³ to 10⁶
//! nodes, per strategy, with the scaling exponent; and the whole plan (autodiff + partition +
//! schedule) of an ~18 000-node joint graph.
//!
//! `cargo bench --bench partition` (add `-- --quick` to stop at 10⁵ nodes).

use remat::partition::{partition, PGraph};
use remat::{Budget, DType, Graph, JointGraph, Plan, Strategy};
use remat_zoo::{self as zoo, GptConfig, MlpConfig};
use std::time::{Duration, Instant};

/// A model family: its name, a builder by layer count, and the layer counts to try.
type Family = (&'static str, fn(usize) -> Graph, &'static [usize]);

fn median_time(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn mlp(layers: usize) -> Graph {
    zoo::mlp(&MlpConfig { batch: 32, widths: std::iter::repeat_n(64, layers + 1).collect() }).unwrap()
}

fn gpt(layers: usize) -> Graph {
    let cfg =
        GptConfig { batch: 4, seq: 128, d_model: 256, heads: 4, layers, vocab: 512, dropout: 0.1, dtype: DType::BF16 };
    zoo::gpt(&cfg).unwrap()
}

/// Least-squares slope of log(time) against log(nodes).
fn exponent(points: &[(usize, f64)]) -> f64 {
    let xs: Vec<f64> = points.iter().map(|p| (p.0 as f64).ln()).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.1.max(1e-9).ln()).collect();
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let cov: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    cov / var
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let strategies = [
        ("respect", Strategy::Respect),
        ("mincut", Strategy::MinCut),
        ("budget=0.5", Strategy::Budget(Budget::Fraction(0.5))),
    ];
    let families: [Family; 2] = [("mlp", mlp, &[80, 800, 8_000, 80_000]), ("gpt", gpt, &[8, 80, 800, 8_000])];
    println!("{:<6} {:>10} {:>12} {:>12} {:>12}", "model", "nodes", "respect", "mincut", "budget=0.5");
    for (family, build, sizes) in families {
        let mut series: Vec<Vec<(usize, f64)>> = vec![Vec::new(); strategies.len()];
        for &size in sizes {
            let graph = build(size);
            let joint = JointGraph::new(&graph).unwrap();
            let pg = PGraph::from_joint(&joint);
            if quick && pg.len() > 200_000 {
                continue;
            }
            let runs = if pg.len() > 200_000 { 1 } else { 3 };
            let mut row = format!("{family:<6} {:>10}", pg.len());
            for (k, (_, strategy)) in strategies.iter().enumerate() {
                let t = median_time(runs, || {
                    partition(&pg, *strategy).unwrap();
                });
                series[k].push((pg.len(), t.as_secs_f64()));
                row += &format!(" {:>10.1}ms", t.as_secs_f64() * 1e3);
            }
            println!("{row}");
        }
        let exps: Vec<String> =
            strategies.iter().zip(&series).map(|((name, _), s)| format!("{name} {:.2}", exponent(s))).collect();
        println!("{family}: scaling exponent (time ~ nodes^k): {}", exps.join(", "));
    }

    // The whole plan of an ~18 000-node joint graph: autodiff + partition + schedule.
    let graph = gpt(150);
    let mut nodes = 0;
    let t = median_time(5, || {
        let joint = JointGraph::new(&graph).unwrap();
        let p = partition(&PGraph::from_joint(&joint), Strategy::MinCut).unwrap();
        let plan = Plan::new(&joint, &p.saved[..joint.n_forward()]).unwrap();
        nodes = joint.graph().len();
        std::hint::black_box(plan);
    });
    println!("whole plan (autodiff + mincut + schedule), gpt {nodes} joint nodes: {:.1} ms", t.as_secs_f64() * 1e3);
}
