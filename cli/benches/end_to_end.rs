//! `remat partition DOC --strategy mincut --json`, end to end — process start, read, partition,
//! JSON out — on the joint graph of a 512-layer residual MLP shaped like PyTorch 2.15's (18 434
//! nodes, FX-style string ids), and on a 10⁶-node one; with the in-process times of each stage
//! and the ratio to PyTorch's own partition step on the 512-layer model's joint graph, measured
//! in the same run where a Python with PyTorch 2.15 is found (`REMAT_TORCH_PYTHON`, else
//! `.venv-torch/bin/python`, which `.ci/run` installs): `python/bench/deep_mlp_partition.py`
//! exports that graph, times PyTorch's partition step on it and `remat partition` on its export.
//! Without PyTorch the ratio is to the 10.2 s recorded on these machines before, and says so.
//!
//! Then documents that once took time quadratic in a count of names — 10⁵ distinct `loc` files,
//! 10⁵ distinct unneeded must_save ops, 10⁵ instances of one region function with an unneeded
//! must_save value each — end to end beside a plain chain of as many nodes measured in the same
//! run (the ratio stays near 1 when the time is linear).
//!
//! Budgets on the 10⁶-node joint document end to end (`budget=0.5`, `budget=20MiB`: the exact
//! program is past its size, so the eviction path answers, graded by a lower bound); every
//! strategy again on the same document indented as a Python exporter writes it (331 MB, near the
//! 343 MB of the issue's 10⁶-node document, against 151 MB compact); and a
//! 10⁶-node `remat.graph` (a 250 000-layer residual tanh MLP: read, differentiated into a
//! 2.75·10⁶-node joint graph, partitioned and planned), with the in-process time of each stage.
//!
//! `cargo bench -p remat-cli --bench end_to_end` (add `-- --quick` to skip the 10⁶-node documents,
//! `-- --graph` for the 10⁶-node `remat.graph`'s stages alone, `-- --alloc NAME=BIN ..
//! [--rounds N]` to compare builds of the command with different allocators on the 10⁶-node
//! documents: `scripts/alloc-ab.sh`).

// The command's allocator, so that the in-process stages are timed as the command runs them
// (its tests are compiled here too, and run by the command's own test target).
#[allow(dead_code)]
#[path = "../src/alloc/mod.rs"]
mod alloc;
#[path = "end_to_end/alloc_ab.rs"]
mod alloc_ab;
#[path = "../../benches/common/deep_mlp_joint.rs"]
mod deep_mlp_joint;
#[path = "../../benches/common/residual_mlp_graph.rs"]
mod residual_mlp_graph;
#[path = "../../benches/common/torch_python.rs"]
mod torch_python;

use remat::{json, Budget, CostModel, Problem, Strategy};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// PyTorch 2.15's min-cut partition step alone on its 512-layer MLP graph, as recorded on these
/// machines before: the ratio's denominator only where PyTorch cannot be run in this one.
const TORCH_PARTITION_512_RECORDED: f64 = 10.2;

/// PyTorch's partition step on the 512-layer model, measured in this run by
/// `python/bench/deep_mlp_partition.py` (which also times `remat partition` on PyTorch's own
/// export of the graph and on `doc`).
struct TorchRun {
    version: String,
    nodes: u64,
    partition_s: f64,
    remat_on_export_s: f64,
}

/// PyTorch's partition step on the `layers`-layer model and remat's on its export, in this run;
/// why not, where PyTorch is missing or the script fails.
fn torch_partition(layers: usize, doc: &std::path::Path) -> Result<TorchRun, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = torch_python::torch_python(&root, "torch")?;
    let script = root.join("python/bench/deep_mlp_partition.py");
    let o = Command::new(&python)
        .arg(&script)
        .args(["--remat", env!("CARGO_BIN_EXE_remat"), "--layers", &layers.to_string(), "--runs", "3", "--doc"])
        .arg(doc)
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let stdout = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() {
        return Err(format!("{} failed: {}", script.display(), String::from_utf8_lossy(&o.stderr).trim()));
    }
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last).map_err(|e| format!("{}: {e}: {last}", script.display()))?;
    let number = |k: &str| v[k].as_f64().ok_or_else(|| format!("{}: no {k} in {last}", script.display()));
    Ok(TorchRun {
        version: v["torch_version"].as_str().unwrap_or("?").to_string(),
        nodes: number("nodes")? as u64,
        partition_s: number("torch_partition_median_s")?,
        remat_on_export_s: number("remat_end_to_end_median_s")?,
    })
}

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
    if std::env::args().any(|a| a == "--graph") {
        return residual_mlp_stages(&dir, 250_000);
    }
    if let Some(builds) = alloc_ab::builds_from_args() {
        return allocators(&dir, &builds);
    }
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
        let problem = Problem::read(&text).unwrap();
        let read = time(runs, || Problem::read(&text).unwrap());
        let cost = CostModel::default();
        let solved = problem.partition(Strategy::MinCut, &cost).unwrap();
        let solve = time(runs, || problem.partition(Strategy::MinCut, &cost).unwrap());
        let out = time(runs, || solved.report().json());
        let process = time(runs, || {
            let o = Command::new(env!("CARGO_BIN_EXE_remat"))
                .args(["partition", path.to_str().unwrap(), "--strategy", "mincut", "--json"])
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            o.stdout.len()
        });
        let torch = (l == 512).then(|| torch_partition(l, &path));
        let torch_s = match &torch {
            Some(Ok(t)) => t.partition_s,
            _ => TORCH_PARTITION_512_RECORDED,
        };
        let vs = if l == 512 { format!("{:.0}x", torch_s / process.as_secs_f64()) } else { "-".into() };
        println!(
            "{l:>9} {:>9} {:>10.1} {:>10} {:>10} {:>10} {:>12} {:>10}",
            problem.graph().len(),
            text.len() as f64 / 1e6,
            ms(read),
            ms(solve),
            ms(out),
            ms(process),
            vs
        );
        println!("{:>9} end to end / in-process partition = {:.1}x", "", process.as_secs_f64() / solve.as_secs_f64());
        match torch {
            Some(Ok(t)) => println!(
                "{:>9} vs torch: PyTorch {}'s partition step on the same model's joint graph ({} nodes), in this run: \
                 {:.2} s (median of 3); remat end to end on PyTorch's export of it: {} ({:.0}x)",
                "",
                t.version,
                t.nodes,
                t.partition_s,
                ms(Duration::from_secs_f64(t.remat_on_export_s)),
                t.partition_s / t.remat_on_export_s
            ),
            Some(Err(why)) => println!(
                "{:>9} vs torch: against the {TORCH_PARTITION_512_RECORDED} s recorded on these machines before, not \
                 measured in this run ({why}; set REMAT_TORCH_PYTHON to a Python with PyTorch 2.15)",
                ""
            ),
            None => {}
        }
        if l > 1000 {
            for strategy in ["budget=0.5", "budget=20MiB"] {
                let t = time(3, || remat_cli(&path, strategy));
                println!("{:>9} --strategy {strategy:<13} end to end {:>10}", "", ms(t));
            }
            let indented = indented(&text, 3);
            let path = dir.join(format!("deep_mlp_{l}.indent3.joint.json"));
            std::fs::write(&path, &indented).unwrap();
            println!(
                "{:>9} the same graph as Python's json.dump(doc, f, indent=3) writes it ({:.1} MB), end to end:",
                "",
                indented.len() as f64 / 1e6
            );
            drop(indented);
            for strategy in ["mincut", "budget=0.5", "budget=20MiB"] {
                let t = time(3, || remat_cli(&path, strategy));
                println!("{:>9} --strategy {strategy:<13} end to end {:>10}", "", ms(t));
            }
        }
    }
    if !quick {
        residual_mlp_stages(&dir, 250_000);
    }
    many_names(&dir);
}

/// The 10⁶-node documents (the joint one compact and indented, the `remat.graph`) through every
/// build in `builds`: `--alloc`.
fn allocators(dir: &std::path::Path, builds: &[(String, PathBuf)]) {
    let args: Vec<String> = std::env::args().collect();
    let rounds = args.iter().position(|a| a == "--rounds").map_or(5, |k| args[k + 1].parse().expect("--rounds N"));
    let joint = deep_mlp_joint::deep_mlp_joint(27_778);
    let indented_text = indented(&joint, 3);
    let graph = residual_mlp_graph::residual_mlp_graph(250_000);
    let mut cases = Vec::new();
    for (label, name, text) in [
        ("joint, 10^6 nodes", "deep_mlp_27778.joint.json", &joint),
        ("joint, 10^6 nodes, indent=3", "deep_mlp_27778.indent3.joint.json", &indented_text),
        ("remat.graph, 10^6 nodes", "residual_mlp_250000.graph.json", &graph),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let strategies: &[&str] = if label.contains("indent") { &["mincut"] } else { &["mincut", "budget=0.5"] };
        cases.extend(strategies.iter().map(|&strategy| alloc_ab::Case {
            label: label.into(),
            path: path.clone(),
            strategy,
        }));
    }
    drop((joint, indented_text, graph));
    println!("this bench's own allocator: {}", alloc::NAME);
    alloc_ab::compare(builds, &cases, rounds);
}

/// `text` (a JSON document) written one field or array element a line, indented by `width`
/// spaces a level, byte for byte as Python's `json.dump(doc, f, indent=width)` writes it: what a
/// document written by a Python exporter looks like (remat_torch's `export_joint` indents by 1),
/// at two to three times the bytes of the compact one. Token by token, so that the bench's own
/// memory (its stages report their RSS) is not taken by a parsed copy.
fn indented(text: &str, width: usize) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() * 9 / 4);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', depth * width));
    };
    let (mut depth, mut i) = (0, 0);
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i;
                i += 1;
                while b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                out.push_str(&text[start..=i]);
            }
            open @ (b'{' | b'[') => {
                let next = i + 1 + b[i + 1..].iter().take_while(|c| c.is_ascii_whitespace()).count();
                out.push(open as char);
                if matches!(b[next], b'}' | b']') {
                    out.push(b[next] as char);
                    i = next;
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            close @ (b'}' | b']') => {
                depth -= 1;
                newline(&mut out, depth);
                out.push(close as char);
            }
            b',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            b':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            // Outside strings, JSON is ASCII: digits, signs, `true`, `false`, `null`.
            c => out.push(c as char),
        }
        i += 1;
    }
    out
}

/// `remat partition PATH --strategy STRATEGY --json`, checked to succeed; the bytes it printed,
/// counted as they come (as `| wc -c` would: holding a 70 MB report in this process would time
/// its allocations too).
fn remat_cli(path: &std::path::Path, strategy: &str) -> usize {
    let mut child = Command::new(env!("CARGO_BIN_EXE_remat"))
        .args(["partition", path.to_str().unwrap(), "--strategy", strategy, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let printed = std::io::copy(&mut child.stdout.take().unwrap(), &mut std::io::sink()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    printed as usize
}

/// A `remat.graph` of `layers` residual layers `h + tanh(h · w)`, four nodes each (the weight,
/// the matmul, the tanh, the add), then the sum: the stages of `remat partition` on it, in
/// process and end to end.
fn residual_mlp_stages(dir: &std::path::Path, layers: usize) {
    let text = residual_mlp_graph::residual_mlp_graph(layers);
    let path = dir.join(format!("residual_mlp_{layers}.graph.json"));
    std::fs::write(&path, &text).unwrap();
    let stage = |what: &str, start: Instant| {
        println!("  {what:<32} {:>10}   {}", ms(start.elapsed()), resident_memory());
    };
    println!(
        "\nremat.graph, {layers} residual tanh layers ({} nodes, {:.1} MB), one run:",
        4 * layers + 2,
        text.len() as f64 / 1e6
    );
    let start = Instant::now();
    let document = json::read(&text).unwrap();
    assert!(matches!(document, json::Document::Graph(..)), "a remat.graph");
    stage("read", start);
    let start = Instant::now();
    let problem = Problem::from_document(document).unwrap();
    let pg = problem.graph();
    stage(&format!("differentiated ({} nodes)", pg.len()), start);
    for strategy in [Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.5))] {
        let start = Instant::now();
        let solved = problem.partition(strategy, &CostModel::default()).unwrap();
        stage(&format!("partition and plan ({strategy})"), start);
        let start = Instant::now();
        let out = solved.report().json();
        stage("JSON out", start);
        drop((out, solved));
    }
    drop(problem);
    for strategy in ["mincut", "budget=0.5"] {
        let t = time(3, || remat_cli(&path, strategy));
        println!("  {:<32} {:>10}  (median of 3)", format!("remat partition, end to end, {strategy}"), ms(t));
    }
    // Indented as a Python exporter writes it: more text per node than the reader's estimate of
    // the node count assumes.
    let indented = indented(&text, 3);
    let path = dir.join(format!("residual_mlp_{layers}.indent3.graph.json"));
    std::fs::write(&path, &indented).unwrap();
    drop((text, indented));
    for strategy in ["mincut", "budget=0.5"] {
        let t = time(3, || remat_cli(&path, strategy));
        let what = format!("the same, indented (json.dump(doc, f, indent=3)), {strategy}");
        println!("  {what:<32} {:>10}  (median of 3)", ms(t));
    }
}

/// The process's resident memory now and at its peak, as Linux reports it (empty elsewhere).
fn resident_memory() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb / 1e3)
    };
    match (field("VmRSS:"), field("VmHWM:")) {
        (Some(now), Some(peak)) => format!("RSS {now:>6.0} MB, peak {peak:>6.0} MB"),
        _ => String::new(),
    }
}

/// A joint document: `x`, then `body` (one node a line), the loss and a gradient reading `x`.
fn joint_doc(regions: &str, body: impl Iterator<Item = String>) -> String {
    let nodes: Vec<String> =
        std::iter::once(r#"{"id": "x", "op": "input", "phase": "forward", "bytes": 4}"#.to_string())
            .chain(body)
            .chain([
                r#"{"id": "loss", "op": "sum", "inputs": ["x"], "phase": "forward", "bytes": 4}"#.to_string(),
                r#"{"id": "t", "op": "tangent", "phase": "backward", "bytes": 4, "flags": ["tangent"]}"#.to_string(),
                r#"{"id": "g", "op": "g", "inputs": ["t", "x"], "phase": "backward", "bytes": 4}"#.to_string(),
            ])
            .collect();
    format!(
        r#"{{"format": "remat.joint", "version": 1, "regions": [{regions}], "nodes": [{}], "forward_outputs": ["loss"], "backward_outputs": ["g"]}}"#,
        nodes.join(",\n")
    )
}

/// 10⁵ names of each kind, end to end, against a plain chain of as many nodes.
fn many_names(dir: &std::path::Path) {
    const N: usize = 100_000;
    let chain = joint_doc(
        "",
        (0..N).map(|i| format!(r#"{{"id": "c{i}", "op": "mul", "inputs": ["x"], "phase": "forward", "bytes": 4}}"#)),
    );
    let ops = joint_doc(
        "",
        (0..N).map(|i| format!(r#"{{"id": "m{i}", "op": "op{i}", "inputs": ["x"], "phase": "forward", "bytes": 4, "policy": "must_save"}}"#)),
    );
    let regions: Vec<String> = (0..N).map(|i| format!(r#"{{"id": {i}, "name": "block"}}"#)).collect();
    let instances = joint_doc(
        &regions.join(", "),
        (0..N).map(|i| {
            format!(r#"{{"id": "u{i}", "op": "mul", "inputs": ["x"], "phase": "forward", "bytes": 4, "region": {i}, "policy": "must_save"}}"#)
        }),
    );
    let mut graph_nodes = vec![r#"{"id": 0, "op": "input", "shape": [4], "dtype": "f32", "name": "x"}"#.to_string()];
    graph_nodes.extend(
        (1..N).map(|i| format!(r#"{{"id": {i}, "op": "tanh", "inputs": [{}], "loc": "src/f{i}.rs:1:1"}}"#, i - 1)),
    );
    graph_nodes.push(format!(r#"{{"id": {N}, "op": "sum", "inputs": [{}], "attrs": {{"axes": [0]}}}}"#, N - 1));
    let locs = format!(
        r#"{{"format": "remat.graph", "version": 1, "nodes": [{}], "outputs": [{N}]}}"#,
        graph_nodes.join(",\n")
    );
    let run = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        time(3, || {
            let o =
                Command::new(env!("CARGO_BIN_EXE_remat")).args(["partition", path.to_str().unwrap()]).output().unwrap();
            assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        })
    };
    let base = run("chain_1e5.joint.json", &chain);
    println!(
        "\n10^5 names, `remat partition` end to end (median of 3), against a plain chain of 10^5 nodes: {}",
        ms(base)
    );
    for (what, name, text) in [
        ("distinct unneeded must_save ops", "ops_1e5.joint.json", &ops),
        ("instances of one region function", "instances_1e5.joint.json", &instances),
        ("distinct loc files (remat.graph)", "locs_1e5.graph.json", &locs),
    ] {
        let t = run(name, text);
        println!("  {what:<36} {:>10}  {:.2}x the chain", ms(t), t.as_secs_f64() / base.as_secs_f64());
    }
}
