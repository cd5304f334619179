//! `remat partition DOC --strategy mincut --json`, end to end — process start, read, partition,
//! JSON out — on the joint graph of a 512-layer residual MLP shaped like PyTorch 2.15's (18 434
//! nodes, FX-style string ids), and on a 10⁶-node one; with the in-process times of each stage
//! and the ratio to PyTorch's own partition step on its 512-layer graph (10.2 s on these
//! machines, `shared/fixtures/torch/README.md`).
//!
//! `cargo bench --bench end_to_end` (add `-- --quick` to skip the 10⁶-node document).

#[path = "common/deep_mlp_joint.rs"]
mod deep_mlp_joint;

use remat::partition::partition;
use remat::report::Report;
use remat::{json, Strategy};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// PyTorch 2.15's min-cut partition step alone on its 512-layer MLP graph, on these machines.
const TORCH_PARTITION_512: f64 = 10.2;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(f());
                start.elapsed()
            })
            .collect(),
    )
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let layers: &[usize] = if quick { &[512] } else { &[512, 27_778] };
    println!(
        "{:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10}",
        "layers", "nodes", "MB", "read", "partition", "json out", "end to end", "vs torch"
    );
    for &l in layers {
        let text = deep_mlp_joint::deep_mlp_joint(l);
        let path = dir.join(format!("deep_mlp_{l}.joint.json"));
        std::fs::write(&path, &text).unwrap();
        let runs = if l > 1000 { 3 } else { 9 };
        let g = json::read_joint(&text).unwrap();
        let read = time(runs, || json::read_joint(&text).unwrap());
        let p = partition(&g, Strategy::MinCut).unwrap();
        let solve = time(runs, || partition(&g, Strategy::MinCut).unwrap());
        let out = time(runs, || Report::new(&g, &p).json());
        let process = time(runs, || {
            let o = Command::new(env!("CARGO_BIN_EXE_remat"))
                .args(["partition", path.to_str().unwrap(), "--strategy", "mincut", "--json"])
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            o.stdout.len()
        });
        let vs = if l == 512 { format!("{:.0}x", TORCH_PARTITION_512 / process.as_secs_f64()) } else { "-".into() };
        println!(
            "{l:>9} {:>9} {:>10.1} {:>10} {:>10} {:>10} {:>12} {:>10}",
            g.len(),
            text.len() as f64 / 1e6,
            ms(read),
            ms(solve),
            ms(out),
            ms(process),
            vs
        );
        println!("{:>9} end to end / in-process partition = {:.1}x", "", process.as_secs_f64() / solve.as_secs_f64());
    }
}
