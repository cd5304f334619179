//! A mutation fuzzer over the JSON readers and the partitioner, run as a test.
//!
//! Seeds are the repository's own documents (`docs/examples`, `tests/fixtures`) and documents
//! written from the zoo models. Each case applies one to three mutations — structural ones on the
//! parsed JSON (a field set to an extreme or hostile value, deleted, duplicated; a node that
//! reads itself or a later node; nodes swapped; regions, flags, policies, shapes and attributes
//! changed) or byte-level ones on the text — and runs what the `remat` CLI runs. The oracles:
//!
//! - nothing panics (the partitioner's own debug-build check included);
//! - every error is one line of at most 800 characters with no raw control character (U+0085
//!   included) and no raw U+2028 or U+2029 (lines end there for Python's `str.splitlines`);
//! - every accepted document partitions under every strategy into a partition that passes the
//!   independent checker (`partition::check`), or into an error a user can cause; its reports
//!   render, the JSON report is JSON, and a `remat.graph` writes back to the same document.
//!
//! `REMAT_FUZZ_CASES` (default 1000) sets the count, `REMAT_FUZZ_SECONDS` a time limit instead,
//! `REMAT_FUZZ_SEED` the first seed. A failure prints its case number and saves the document
//! under `target/tmp` (`CARGO_TARGET_TMPDIR`).

#[path = "../../benches/common/xorshift.rs"]
mod xorshift;

use remat_core::Document;
use remat_core::Report;
use remat_core::{check, partition, PGraph};
use remat_core::{Budget, DType, Error, JointGraph, Plan, Strategy};
use remat_zoo::{self as zoo, GptConfig, MlpConfig};
use serde_json::{json, Map, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use xorshift::Rng;

const STRATEGIES: [Strategy; 8] = [
    Strategy::Respect,
    Strategy::MinCut,
    Strategy::Budget(Budget::Fraction(0.0)),
    Strategy::Budget(Budget::Fraction(0.5)),
    Strategy::Budget(Budget::Bytes(0)),
    Strategy::Budget(Budget::Bytes(4096)),
    Strategy::BudgetOffload(Budget::Fraction(0.3)),
    Strategy::BudgetOffload(Budget::Bytes(4096)),
];

fn env<T: std::str::FromStr>(key: &str) -> Option<T> {
    std::env::var(key).ok().and_then(|v| v.parse().ok())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.json` document under `dir`, recursively (PyTorch's `.torch.json` records excluded:
/// they are not documents).
fn documents_under(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            documents_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") && !p.to_string_lossy().ends_with(".torch.json") {
            out.push(std::fs::read_to_string(&p).unwrap());
        }
    }
}

/// The seeds: the repository's documents and documents of the zoo models, both formats.
fn seeds() -> Vec<String> {
    let mut docs = Vec::new();
    documents_under(&root().join("docs/examples"), &mut docs);
    documents_under(&root().join("tests/fixtures"), &mut docs);
    let mlp = zoo::mlp(&MlpConfig { batch: 2, widths: vec![3, 5, 2] }).unwrap();
    let gpt = zoo::gpt(&GptConfig {
        batch: 1,
        seq: 4,
        d_model: 8,
        heads: 2,
        layers: 1,
        vocab: 7,
        dropout: 0.1,
        dtype: DType::F32,
    })
    .unwrap();
    for g in [mlp, gpt] {
        docs.push(remat_core::write_graph(&g));
        docs.push(remat_core::write_joint(&PGraph::from_joint(&JointGraph::new(&g).unwrap())));
    }
    assert!(docs.len() >= 20, "{} seeds", docs.len());
    docs
}

/// Values that have broken readers before: extremes, wrong types, hostile strings.
fn hostile_value(rng: &mut Rng, doc: &Value) -> Value {
    let ids: Vec<Value> =
        nodes(doc).map(|n| n.iter().filter_map(|x| x.get("id").cloned()).collect()).unwrap_or_default();
    match rng.below(14) {
        0 => json!(*rng.pick(&[0u64, 1, 2, 3, 7, 255, 1 << 31, 1 << 32, 1 << 53, 1 << 63, u64::MAX])),
        1 => json!(*rng.pick(&[-1i64, i64::MIN, -4096])),
        2 => json!(*rng.pick(&[0.5f64, -0.0, 1e308, -1e308, 1.0000001, 2.5e-300])),
        3 => json!(*rng.pick(&[
            "",
            "%1",
            "1",
            "input",
            "param",
            "tangent",
            "view",
            "random",
            "resident",
            "must_recompute",
            "prefer_offload",
            "backward",
            "forward",
            "f32",
            "bytes",
            "i32",
            "matmul",
            "aten.view.default",
        ])),
        4 if rng.chance(2) => json!(format!("sep\u{2028}\u{2029}\u{85}{}", rng.next())),
        4 => json!(format!("ctl\u{1b}[2J\r\t\u{0}{}", rng.next())),
        5 => json!("x".repeat(rng.below(20_000))),
        6 => ids.get(rng.below(ids.len())).cloned().unwrap_or(Value::Null),
        7 => json!([]),
        8 => Value::Array(
            (0..rng.below(6)).map(|_| ids.get(rng.below(ids.len())).cloned().unwrap_or(json!(0))).collect(),
        ),
        9 => Value::Array(
            (0..1 + rng.below(4)).map(|_| json!(*rng.pick(&[0u64, 1, 2, 1 << 20, 1 << 40, u64::MAX]))).collect(),
        ),
        10 => Value::Array(vec![json!(1); rng.below(2000)]),
        11 => Value::Null,
        12 => json!({"k": 1, "axes": [0, 99], "start": u64::MAX, "len": 2, "shape": [0, 3]}),
        _ => json!(true),
    }
}

fn nodes(doc: &Value) -> Option<&Vec<Value>> {
    doc.get("nodes")?.as_array()
}

fn nodes_mut(doc: &mut Value) -> Option<&mut Vec<Value>> {
    doc.get_mut("nodes")?.as_array_mut()
}

const NODE_FIELDS: [&str; 17] = [
    "id", "op", "inputs", "phase", "bytes", "shape", "dtype", "flops", "flags", "region", "policy", "source",
    "grad_of", "name", "loc", "attrs", "bogus",
];

/// One structural mutation of a parsed document.
fn mutate_value(rng: &mut Rng, doc: &mut Value) {
    let n = nodes(doc).map_or(0, Vec::len);
    let k = rng.below(n);
    match rng.below(12) {
        // A field of a node set to a hostile value (or a new field).
        0..=3 if n > 0 => {
            let value = hostile_value(rng, doc);
            let field = *rng.pick(&NODE_FIELDS);
            if let Some(obj) = nodes_mut(doc).and_then(|v| v[k].as_object_mut()) {
                obj.insert(field.to_string(), value);
            }
        }
        // A field removed.
        4 if n > 0 => {
            let field = *rng.pick(&NODE_FIELDS);
            if let Some(obj) = nodes_mut(doc).and_then(|v| v[k].as_object_mut()) {
                obj.remove(field);
            }
        }
        // A node reads itself, a later node, or names itself as grad_of.
        5 if n > 0 => {
            let later = rng.below(n);
            let field = if rng.chance(3) { "grad_of" } else { "inputs" };
            let all = nodes_mut(doc).unwrap();
            let target = if rng.chance(2) { all[k].get("id").cloned() } else { all[later].get("id").cloned() };
            if let (Some(obj), Some(t)) = (all[k].as_object_mut(), target) {
                let value = if field == "inputs" { json!([t]) } else { t };
                obj.insert(field.into(), value);
            }
        }
        // A node duplicated, removed or moved.
        6 if n > 0 => {
            let all = nodes_mut(doc).unwrap();
            match rng.below(3) {
                0 => {
                    let copy = all[k].clone();
                    all.insert(rng.below(n + 1), copy);
                }
                1 => {
                    all.remove(k);
                }
                _ => all.swap(k, rng.below(n)),
            }
        }
        // Flags and policies, valid and not.
        7 if n > 0 => {
            let flags =
                ["view", "random", "compute_intensive", "not_recomputable", "resident", "tangent", "mutated", "viewx"];
            let policies = [
                "must_save",
                "prefer_save",
                "must_recompute",
                "prefer_recompute",
                "must_offload",
                "prefer_offload",
                "keep",
            ];
            let set: Vec<Value> = (0..rng.below(3)).map(|_| json!(*rng.pick(&flags))).collect();
            let policy = *rng.pick(&policies);
            let region = rng.below(4);
            if let Some(obj) = nodes_mut(doc).and_then(|v| v[k].as_object_mut()) {
                match rng.below(3) {
                    0 => {
                        obj.insert("flags".into(), Value::Array(set));
                    }
                    1 => {
                        obj.insert("policy".into(), json!(policy));
                    }
                    _ => {
                        obj.insert("region".into(), json!(region));
                        obj.insert("policy".into(), json!(policy));
                    }
                }
            }
        }
        // Regions: duplicates, parents, budgets.
        8 => {
            let entry = json!({
                "id": rng.below(4),
                "name": *rng.pick(&["f", "", "g\u{1b}", "%1", "s\u{2028}", "n\u{85}"]),
                "parent_region": if rng.chance(2) { json!(rng.below(4)) } else { Value::Null },
                "budget": *rng.pick(&[json!(0.0), json!(1.0), json!(0.5), json!(2.0), json!(-1), Value::Null]),
            });
            let mut entry = entry.as_object().unwrap().clone();
            entry.retain(|_, v| !v.is_null());
            if let Some(obj) = doc.as_object_mut() {
                let regions = obj.entry("regions").or_insert_with(|| json!([]));
                if let Some(list) = regions.as_array_mut() {
                    list.push(Value::Object(entry));
                }
            }
        }
        // Top-level fields.
        9 => {
            let field = *rng.pick(&[
                "format",
                "version",
                "outputs",
                "forward_outputs",
                "released_outputs",
                "backward_outputs",
                "nodes",
                "extra",
            ]);
            let value = hostile_value(rng, doc);
            if let Some(obj) = doc.as_object_mut() {
                if rng.chance(4) {
                    obj.remove(field);
                } else {
                    obj.insert(field.into(), value);
                }
            }
        }
        // Shapes and attributes of catalog ops.
        10 if n > 0 => {
            let shape: Vec<u64> =
                (0..rng.below(5)).map(|_| *rng.pick(&[0u64, 1, 2, 3, 4, 8, 1 << 16, 1 << 32, u64::MAX])).collect();
            let attrs = json!({
                *rng.pick(&["axes", "axis", "start", "len", "shape", "perm", "p", "eps", "value", "dtype", "causal", "rows", "dim"]):
                    hostile_value(rng, &Value::Null)
            });
            if let Some(obj) = nodes_mut(doc).and_then(|v| v[k].as_object_mut()) {
                if rng.chance(2) {
                    obj.insert("shape".into(), json!(shape));
                } else {
                    obj.insert("attrs".into(), attrs);
                }
            }
        }
        // A new node, appended with inputs among the others.
        _ => {
            let ids: Vec<Value> =
                nodes(doc).map(|v| v.iter().filter_map(|x| x.get("id").cloned()).collect()).unwrap_or_default();
            let inputs: Vec<Value> = (0..rng.below(3)).filter_map(|_| ids.get(rng.below(ids.len())).cloned()).collect();
            let mut node = Map::new();
            node.insert("id".into(), json!(format!("fuzz{}", rng.next() % 1000)));
            node.insert("op".into(), json!(*rng.pick(&["tanh", "add", "matmul", "sum", "exp", "op", "view"])));
            node.insert("inputs".into(), Value::Array(inputs));
            node.insert("phase".into(), json!(*rng.pick(&["forward", "backward"])));
            node.insert("bytes".into(), json!(*rng.pick(&[0u64, 4, 64, 4096])));
            if let Some(all) = nodes_mut(doc) {
                all.push(Value::Object(node));
            }
        }
    }
}

/// One byte-level mutation of a document's text (kept UTF-8).
fn mutate_text(rng: &mut Rng, text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    let at = rng.below(bytes.len() + 1);
    match rng.below(5) {
        0 => bytes.truncate(at),
        1 if at < bytes.len() => bytes[at] = *rng.pick(b"{}[],:\"0-9e.\\ x\x00\x1b"),
        2 => {
            let junk = *rng.pick(&[
                "[",
                "{",
                "\"",
                "\\u0000",
                "1e999",
                "[[[[[[[[[[",
                ",,",
                "null",
                "\u{feff}",
                "\\ud800",
                "\\udfff\\ud800",
                "\u{2028}",
                "\u{2029}",
                "\u{85}",
            ]);
            bytes.splice(at..at, junk.bytes());
        }
        3 => {
            let end = (at + rng.below(200)).min(bytes.len());
            let slice = bytes[at..end].to_vec();
            bytes.splice(at..at, slice);
        }
        _ => {
            let end = (at + rng.below(200)).min(bytes.len());
            bytes.drain(at..end);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A mutation that keeps a document valid more often than not: tags, flags, regions and sizes
/// changed to values the format allows, so that the partitioner sees many new graphs.
fn mutate_gently(rng: &mut Rng, doc: &mut Value) {
    let joint = doc.get("format").and_then(Value::as_str) == Some("remat.joint");
    let regions = doc.get("regions").and_then(Value::as_array).map_or(0, Vec::len);
    let n = nodes(doc).map_or(0, Vec::len);
    if n == 0 {
        return;
    }
    let k = rng.below(n);
    let policies = ["must_save", "prefer_save", "must_recompute", "prefer_recompute", "must_offload", "prefer_offload"];
    let policy = *rng.pick(&policies);
    let region = if regions > 0 && rng.chance(2) { rng.below(regions) } else { rng.below(3) };
    let choice = rng.below(5);
    let bytes = *rng.pick(&[0u64, 1, 4, 64, 1000, 4096, 1 << 20]);
    let flag = *rng.pick(&["random", "compute_intensive", "not_recomputable", "view", "mutated"]);
    let Some(obj) = nodes_mut(doc).and_then(|v| v[k].as_object_mut()) else { return };
    let forward = obj.get("phase").and_then(Value::as_str) != Some("backward");
    match choice {
        0 | 1 => {
            obj.insert("policy".into(), json!(policy));
            if !joint || rng.chance(2) {
                obj.insert("region".into(), json!(region));
            }
        }
        2 => {
            obj.remove("policy");
            obj.remove("region");
            obj.remove("source");
        }
        3 if joint && forward => {
            obj.remove("shape");
            obj.remove("dtype");
            obj.insert("bytes".into(), json!(bytes));
        }
        _ if joint && forward => {
            let flags = obj.entry("flags").or_insert_with(|| json!([]));
            if let Some(list) = flags.as_array_mut() {
                if !list.contains(&json!(flag)) {
                    list.push(json!(flag));
                }
            }
        }
        _ => {}
    }
}

/// A mutated document: one to three mutations of a seed, gentle ones in half the cases.
fn case(rng: &mut Rng, seeds: &[String]) -> String {
    let seed = rng.pick(seeds);
    let mut doc: Value = serde_json::from_str(seed).expect("seeds are JSON");
    if rng.chance(2) {
        for _ in 0..1 + rng.below(4) {
            mutate_gently(rng, &mut doc);
        }
        return serde_json::to_string(&doc).unwrap();
    }
    let mutations = 1 + rng.below(3);
    let mut text = None;
    for _ in 0..mutations {
        if rng.chance(8) {
            let current = text.take().unwrap_or_else(|| serde_json::to_string(&doc).unwrap());
            text = Some(mutate_text(rng, &current));
        } else if text.is_none() {
            mutate_value(rng, &mut doc);
        }
    }
    text.unwrap_or_else(|| serde_json::to_string(&doc).unwrap())
}

/// Characters after which Python's `str.splitlines` starts a new line: every control character
/// (Unicode category Cc, U+0085 included) and the line and paragraph separators.
fn breaks_a_line(c: char) -> bool {
    c.is_control() || c == '\u{85}' || c == '\u{2028}' || c == '\u{2029}'
}

/// Errors that echoed a line or paragraph separator or U+0085 (escaped): the mutations reach
/// the escaping, which the oracle checks.
static ECHOED_SEPARATORS: AtomicU64 = AtomicU64::new(0);

/// One line, short, no raw character that breaks a line.
fn clean_message(e: &Error) -> Result<(), String> {
    let m = e.to_string();
    if [r"\u{2028}", r"\u{2029}", r"\u{85}"].iter().any(|escaped| m.contains(escaped)) {
        ECHOED_SEPARATORS.fetch_add(1, Ordering::Relaxed);
    }
    if m.contains('\n') || m.chars().any(breaks_a_line) || m.chars().count() > 800 {
        return Err(format!("an error that is not one clean line ({} chars): {:?}", m.chars().count(), short(&m)));
    }
    Ok(())
}

fn short(s: &str) -> String {
    s.chars().take(600).collect()
}

/// What the CLI does with a document, with every oracle.
fn run(text: &str) -> Result<(), String> {
    let doc = match remat_core::read_document(text) {
        Ok(doc) => doc,
        Err(e) => return clean_message(&e),
    };
    let (pg, joint) = match doc {
        Document::Graph(g, ids) => {
            let written = remat_core::write_graph(&g);
            let back =
                remat_core::read_graph(&written).map_err(|e| format!("a written graph does not read back: {e}"))?;
            if remat_core::write_graph(&back) != written {
                return Err("a graph does not write back to the same document".into());
            }
            match JointGraph::new(&g) {
                Ok(joint) => (PGraph::from_joint(&joint).with_forward_ids(&ids), Some(joint)),
                Err(e) => return clean_message(&e),
            }
        }
        Document::Joint(pg) => (pg, None),
    };
    for strategy in STRATEGIES {
        match partition(&pg, strategy) {
            Ok(p) => {
                check(&pg, &p).map_err(|e| format!("{strategy}: {e}"))?;
                let report = Report::new(&pg, &p);
                let _ = report.text();
                let _ = report.dot();
                serde_json::from_str::<Value>(&report.json()).map_err(|e| format!("{strategy}: JSON report: {e}"))?;
                if let Some(joint) = &joint {
                    let n = joint.n_forward();
                    match Plan::with_offload(joint, &p.saved[..n], &p.offloaded[..n], &Default::default()) {
                        Ok(plan) => {
                            let _ = plan.predicted_peak();
                        }
                        Err(e) => clean_message(&e).map_err(|m| format!("{strategy}: plan: {m}"))?,
                    }
                }
            }
            Err(e) => clean_message(&e).map_err(|m| format!("{strategy}: {m}"))?,
        }
    }
    Ok(())
}

#[test]
fn mutated_documents_never_panic_and_accepted_ones_keep_the_rules() {
    let seeds = seeds();
    let cases: u64 = env("REMAT_FUZZ_CASES").unwrap_or(1000);
    let limit = env::<u64>("REMAT_FUZZ_SECONDS").map(Duration::from_secs);
    let first: u64 = env("REMAT_FUZZ_SEED").unwrap_or(1);
    let start = Instant::now();
    let (mut accepted, mut ran) = (0u64, 0u64);
    // Panics are failures this harness reports itself, with the case that caused them.
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    for k in first.. {
        let done = match limit {
            Some(limit) => start.elapsed() >= limit,
            None => ran >= cases,
        };
        if done {
            break;
        }
        let mut rng = Rng(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let text = case(&mut rng, &seeds);
        ran += 1;
        accepted += remat_core::read_document(&text).is_ok() as u64;
        let outcome = catch_unwind(AssertUnwindSafe(|| run(&text)));
        let failure = match outcome {
            Ok(Ok(())) => continue,
            Ok(Err(m)) => m,
            Err(panic) => format!(
                "panic: {}",
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or(panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ),
        };
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-case-{k}.json"));
        std::fs::write(&path, &text).unwrap();
        failures.push(format!("case {k} ({}): {}", path.display(), short(&failure)));
        if failures.len() >= 10 {
            break;
        }
    }
    let _ = std::panic::take_hook();
    let separators = ECHOED_SEPARATORS.load(Ordering::Relaxed);
    println!(
        "{ran} mutated documents from {} seeds in {:.1} s: {accepted} accepted, the rest refused with one clean line \
         ({separators} echoing a line separator or U+0085, escaped)",
        seeds.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{} failing cases:\n{}", failures.len(), failures.join("\n"));
    assert!(accepted * 4 > ran, "the mutations leave too few documents valid ({accepted} of {ran})");
    assert!(ran < 1000 || separators > 0, "no error of {ran} echoed a line separator: the mutations miss them");
}
