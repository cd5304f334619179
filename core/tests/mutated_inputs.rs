//! Inputs the forward mutates (flag `mutated` in a `remat.joint` document: BatchNorm's running
//! statistics, a `copy_` into a primal). After the forward such an input no longer holds the
//! value the forward read, so no plan may read it in the backward: what a recompute would read
//! from it is kept instead, under every strategy. The document is the round-3 reproducer's
//! (`tests/fixtures/torch_mutated/batchnorm_train.joint.json`, exported from PyTorch before the
//! flag existed), flagged here as `remat_torch` now flags it.

use remat_core::Document;
use remat_core::Strategy;
use remat_core::{check, partition, PGraph};
use serde_json::Value;
use std::collections::BTreeSet;

const MUTATED: [&str; 3] = ["primals_4", "primals_5", "primals_6"];

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/torch_mutated/batchnorm_train.joint.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn flagged(mut doc: Value, ids: &[&str]) -> Value {
    for n in doc["nodes"].as_array_mut().unwrap() {
        if ids.contains(&n["id"].as_str().unwrap()) {
            n["flags"] = serde_json::json!(["mutated"]);
        }
    }
    doc
}

fn read(doc: &Value) -> Result<PGraph, String> {
    match remat_core::read_document(&doc.to_string()).map_err(|e| e.to_string())? {
        Document::Joint(g) => Ok(g),
        Document::Graph(..) => panic!("a joint document"),
    }
}

/// The ids the values `strategy` recomputes read, from the document's own input lists.
fn read_by_recomputes(doc: &Value, strategy: &str) -> BTreeSet<String> {
    let g = read(doc).unwrap();
    let p = partition(&g, strategy.parse::<Strategy>().unwrap()).unwrap();
    check(&g, &p).unwrap();
    let recomputed: BTreeSet<String> = p.recomputed.iter().map(|&r| g.node(r).id.label_raw()).collect();
    doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| recomputed.contains(n["id"].as_str().unwrap()))
        .flat_map(|n| n["inputs"].as_array().unwrap().iter().map(|i| i.as_str().unwrap().to_string()))
        .collect()
}

const STRATEGIES: [&str; 6] = ["respect", "mincut", "budget=0.0", "budget=0.5", "budget=1.0", "budget+offload=0"];

#[test]
fn without_the_flag_mincut_recomputes_from_the_running_statistics() {
    // What went wrong: nothing said primals_5/6 change, so the batch norm was recomputed from them.
    let reads = read_by_recomputes(&fixture(), "mincut");
    assert!(reads.contains("primals_5") && reads.contains("primals_6"), "{reads:?}");
}

#[test]
fn no_strategy_recomputes_from_a_mutated_input() {
    let doc = flagged(fixture(), &MUTATED);
    for strategy in STRATEGIES {
        let reads = read_by_recomputes(&doc, strategy);
        let bad: Vec<_> = MUTATED.iter().filter(|m| reads.contains(**m)).collect();
        assert!(bad.is_empty(), "{strategy}: a recompute reads {bad:?}");
        // The batch norm's saved mean and inverse deviation are what the backward reads.
        let g = read(&doc).unwrap();
        let p = partition(&g, strategy.parse::<Strategy>().unwrap()).unwrap();
        for id in ["getitem_1", "getitem_2"] {
            let i = g.find_ids([id]).unwrap()[0];
            assert!(p.saved[i.index()], "{strategy}: {id} is not kept");
        }
    }
}

#[test]
fn the_flag_survives_writing_the_document_back() {
    let g = read(&flagged(fixture(), &MUTATED)).unwrap();
    let text = remat_core::write_joint(&g);
    let again: Value = serde_json::from_str(&text).unwrap();
    let mutated: Vec<&str> = again["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "mutated")))
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(mutated, MUTATED);
    assert_eq!(remat_core::write_joint(&read(&again).unwrap()), text);
}

fn small(nodes: Value) -> Value {
    serde_json::json!({"format": "remat.joint", "version": 1, "nodes": nodes, "forward_outputs": ["y"]})
}

#[test]
fn a_view_of_a_mutated_input_is_read_through_it() {
    // x is mutated; v views it; e = exp(v) is what the backward reads. Even the budget that keeps
    // the fewest bytes keeps e rather than recompute it from x.
    let doc = small(serde_json::json!([
        {"id": "x", "op": "input", "phase": "forward", "shape": [4], "dtype": "f32", "flags": ["mutated"]},
        {"id": "v", "op": "view", "inputs": ["x"], "phase": "forward", "shape": [4], "dtype": "f32", "flags": ["view"]},
        {"id": "e", "op": "exp", "inputs": ["v"], "phase": "forward", "shape": [4], "dtype": "f32", "flops": 4},
        {"id": "y", "op": "sum", "inputs": ["e"], "phase": "forward", "shape": [], "dtype": "f32"},
        {"id": "t", "op": "tangent", "phase": "backward", "shape": [], "dtype": "f32", "flags": ["tangent"]},
        {"id": "g", "op": "mul", "inputs": ["t", "e"], "phase": "backward", "shape": [4], "dtype": "f32"}
    ]));
    for strategy in STRATEGIES {
        assert!(!read_by_recomputes(&doc, strategy).contains("v"), "{strategy}");
    }
}

#[test]
fn contradictions_are_one_line_errors_naming_the_node() {
    let bad = |nodes: Value, want: &[&str]| {
        let Err(e) = read(&small(nodes)) else { panic!("refused") };
        assert!(!e.contains('\n') && want.iter().all(|w| e.contains(w)), "{e}");
    };
    // Only an input or a parameter is mutated by the forward.
    bad(
        serde_json::json!([
            {"id": "x", "op": "input", "phase": "forward", "bytes": 4},
            {"id": "y", "op": "exp", "inputs": ["x"], "phase": "forward", "bytes": 4, "flags": ["mutated"]}
        ]),
        &["\"y\"", "flag \"mutated\"", "input or a parameter"],
    );
    // A backward node reading the mutated value would see it after the mutation.
    bad(
        serde_json::json!([
            {"id": "x", "op": "input", "phase": "forward", "bytes": 4, "flags": ["mutated"]},
            {"id": "y", "op": "exp", "inputs": ["x"], "phase": "forward", "bytes": 4},
            {"id": "t", "op": "tangent", "phase": "backward", "bytes": 4, "flags": ["tangent"]},
            {"id": "g", "op": "mul", "inputs": ["t", "x"], "phase": "backward", "bytes": 4}
        ]),
        &["\"g\"", "reads \"x\"", "forward mutates"],
    );
}

#[test]
fn must_recompute_on_a_reader_of_a_mutated_input_names_the_input() {
    let doc = small(serde_json::json!([
        {"id": "x", "op": "input", "phase": "forward", "bytes": 4, "flags": ["mutated"]},
        {"id": "e", "op": "exp", "inputs": ["x"], "phase": "forward", "bytes": 4, "policy": "must_recompute"},
        {"id": "y", "op": "sum", "inputs": ["e"], "phase": "forward", "bytes": 4},
        {"id": "t", "op": "tangent", "phase": "backward", "bytes": 4, "flags": ["tangent"]},
        {"id": "g", "op": "mul", "inputs": ["t", "e"], "phase": "backward", "bytes": 4}
    ]));
    let g = read(&doc).unwrap();
    let Err(e) = partition(&g, Strategy::MinCut) else { panic!("refused") };
    let e = e.to_string();
    assert!(e.contains("must_recompute") && e.contains("\"x\"") && e.contains("mutates"), "{e}");
}
