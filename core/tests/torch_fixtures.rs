//! The joint graphs PyTorch 2.15's min-cut partitioner received, exported as they are
//! (`shared/fixtures/torch/`, see its README), against PyTorch's own recorded decisions: every
//! document reads unchanged, partitions under every strategy within the rules (checked by
//! `partition::check`), and under `MinCut` saves no more activation bytes than PyTorch did,
//! counted as PyTorch counts them. The float8 seed graph — the case remat exists for — never
//! saves an fp8 cast, a scale or an amax unless a budget says it overrode the tag to do so.

use remat_core::{check, partition, PGraph};
use remat_core::{Action, Budget, NodeId, Reason, Strategy};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/torch")
}

/// Every `<case>.json` with its `<case>.torch.json`.
fn cases() -> Vec<(String, String, Value)> {
    let dir = fixtures();
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (the fixtures ship in tests/fixtures/torch)", dir.display()));
    let mut cases: Vec<(String, String, Value)> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && !p.to_string_lossy().ends_with(".torch.json"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            let doc = std::fs::read_to_string(&p).unwrap();
            let record = std::fs::read_to_string(dir.join(format!("{name}.torch.json"))).unwrap();
            (name, doc, serde_json::from_str(&record).unwrap())
        })
        .collect();
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(cases.len() >= 9, "expected the nine fixtures, found {}", cases.len());
    cases
}

/// What PyTorch kept: its saved activations and, where it replays random ops, their generator
/// states (which remat counts as saved values).
fn torch_bytes(record: &Value) -> u64 {
    record["saved_activation_bytes_incl_rng_states"]
        .as_u64()
        .unwrap_or_else(|| record["saved_activation_bytes"].as_u64().unwrap())
}

fn strategies(torch_bytes: u64) -> Vec<Strategy> {
    let mut s = vec![Strategy::Respect, Strategy::MinCut];
    s.extend([0.0, 0.25, 0.5, 1.0].map(|f| Strategy::Budget(Budget::Fraction(f))));
    s.push(Strategy::Budget(Budget::Bytes(torch_bytes)));
    s
}

/// Activation bytes as the fixture README counts them: distinct base storages of saved values
/// (views followed to their base), inputs, parameters and forward outputs left out.
fn activation_bytes(g: &PGraph, saved: &[bool]) -> u64 {
    let mut roots = BTreeSet::new();
    for i in (0..g.len()).filter(|&i| saved[i]) {
        let mut b = i;
        while g.nodes[b].flags.view {
            b = g.nodes[b].inputs[0].index();
        }
        let n = &g.nodes[b];
        if !n.flags.resident && !g.forward_outputs.contains(&NodeId::from_index(b)) {
            roots.insert(b);
        }
    }
    roots.into_iter().map(|b| g.nodes[b].bytes).sum()
}

#[test]
fn every_fixture_reads_as_exported_and_partitions_within_the_rules() {
    for (name, doc, record) in cases() {
        let g = remat_core::read_joint(&doc).unwrap_or_else(|e| panic!("{name}: not read as exported: {e}"));
        // The generator states the reader adds for replayable random ops are not document nodes.
        let doc_nodes = g.nodes.iter().filter(|n| !n.flags.rng_state).count();
        assert_eq!(doc_nodes, record["doc_nodes"].as_u64().unwrap() as usize, "{name}: node count");
        let torch_bytes = torch_bytes(&record);
        for strategy in strategies(torch_bytes) {
            let p = partition(&g, strategy).unwrap_or_else(|e| panic!("{name} {strategy}: {e}"));
            check(&g, &p).unwrap_or_else(|e| panic!("{name} {strategy}: {e}"));
        }
        // PyTorch's own min-cut (a memory budget of 1.0) against remat's; its budgeted runs are
        // compared at equal bytes by `budgets_at_pytorchs_bytes_recompute_no_more`.
        if record["partitioner_config"]["activation_memory_budget"].as_f64().unwrap_or(1.0) < 1.0 {
            continue;
        }
        let mincut = partition(&g, Strategy::MinCut).unwrap();
        let mine = activation_bytes(&g, &mincut.saved);
        println!("{name}: remat min-cut {mine} B, PyTorch {torch_bytes} B");
        assert!(mine <= torch_bytes, "{name}: remat's min-cut saves {mine} activation bytes, PyTorch {torch_bytes}");
    }
}

#[test]
fn string_ids_are_printed_as_the_document_wrote_them() {
    let (_, doc, _) = cases().into_iter().find(|c| c.0.starts_with("chain")).unwrap();
    let g = remat_core::read_joint(&doc).unwrap();
    let p = partition(&g, Strategy::MinCut).unwrap();
    let report = remat_core::Report::new(&g, &p);
    let v: Value = serde_json::from_str(&report.json()).unwrap();
    assert!(v["saved"].as_array().unwrap().iter().all(Value::is_string), "{}", v["saved"]);
    assert!(v["decisions"].as_array().unwrap().iter().all(|d| d["id"].is_string()));
    assert!(report.text().contains("relu"));
    assert!(report.dot().contains("primals_1"));
    // Written back, the document keeps its ids and reads the same.
    assert_eq!(remat_core::read_joint(&remat_core::write_joint(&g)).unwrap(), g);
}

#[test]
fn the_float8_seed_graph_never_saves_an_fp8_cast_a_scale_or_an_amax() {
    let (name, doc, record) = cases().into_iter().find(|c| c.0 == "seed_fp8_scaled_mm-inductor__sac_save_mm").unwrap();
    let g = remat_core::read_joint(&doc).unwrap();
    // The quantisation chain: everything in the region upstream of the scaled matmul (its fp8
    // operands and their scales) that is not resident or a view.
    let mm = g.nodes.iter().position(|n| n.op == "aten._scaled_mm.default").expect("the scaled matmul");
    let mut chain = BTreeSet::new();
    let mut stack: Vec<usize> = g.nodes[mm].inputs.iter().map(|i| i.index()).collect();
    while let Some(i) = stack.pop() {
        if chain.insert(i) {
            stack.extend(g.nodes[i].inputs.iter().map(|x| x.index()));
        }
    }
    chain.retain(|&i| !g.nodes[i].flags.resident && !g.nodes[i].flags.view);
    let fp8: Vec<usize> =
        chain.iter().copied().filter(|&i| g.nodes[i].dtype.is_some_and(|t| t.name() == "f8e4m3")).collect();
    assert_eq!(fp8.len(), 2, "{name}: two fp8 casts");
    assert!(chain.iter().any(|&i| g.nodes[i].op == "aten.amax.default"));
    let torch_bytes = record["saved_activation_bytes"].as_u64().unwrap();
    for strategy in strategies(torch_bytes) {
        let p = partition(&g, strategy).unwrap();
        for d in p.decisions.iter().filter(|d| chain.contains(&d.node.index()) && d.action == Action::Save) {
            // Only a budget may keep one (Prefer tags are soft under a budget), and only by
            // overriding the prefer_recompute tag, saying so.
            let traded = matches!(strategy, Strategy::Budget(_)) && d.reason == Reason::Budget && d.overrode.is_some();
            assert!(traded, "{strategy}: {} saved ({:?})", g.describe(d.node), d.reason);
        }
    }
    for strategy in [Strategy::Respect, Strategy::MinCut] {
        let p = partition(&g, strategy).unwrap();
        assert!(chain.iter().all(|&i| !p.saved[i]), "{strategy}");
    }
}

#[test]
fn every_fixture_writes_back_to_a_document_that_reads_the_same() {
    for (name, doc, _) in cases() {
        let g = remat_core::read_joint(&doc).unwrap();
        let text = remat_core::write_joint(&g);
        assert_eq!(remat_core::read_joint(&text).unwrap(), g, "{name}");
        // Generator states go back to being `rng_state_bytes` of their op.
        assert_eq!(text.matches("rng_state_bytes").count(), doc.matches("rng_state_bytes").count(), "{name}");
        assert!(!text.contains(":rng_state\""), "{name}");
    }
}

/// Dropout under Inductor: PyTorch replays each `aten.rand` from a saved generator state
/// (5 056 B); so does remat, and under `mincut` it keeps what PyTorch keeps, states included.
#[test]
fn random_ops_with_a_generator_state_are_replayed() {
    let (name, doc, record) = cases().into_iter().find(|c| c.0 == "gpt_dropout-inductor__full").unwrap();
    let g = remat_core::read_joint(&doc).unwrap();
    let p = partition(&g, Strategy::MinCut).unwrap();
    let rands: Vec<usize> = (0..g.len()).filter(|&i| g.nodes[i].op == "aten.rand.default").collect();
    assert_eq!(rands.len(), record["saved_rng_states"].as_array().unwrap().len(), "{name}");
    for &r in &rands {
        assert!(
            p.recomputed.contains(&NodeId::from_index(r)),
            "{name}: {} is replayed",
            g.describe(NodeId::from_index(r))
        );
        let state = g.nodes[r].inputs[0];
        let d = p.decisions.iter().find(|d| d.node == state).unwrap();
        assert_eq!((d.action, d.reason), (Action::Save, Reason::RngState(NodeId::from_index(r))));
    }
    let states: u64 = rands.iter().map(|&r| g.nodes[g.nodes[r].inputs[0].index()].bytes).sum();
    assert_eq!(states, record["saved_rng_state_bytes"].as_u64().unwrap());
    assert!(p.saved_bytes <= torch_bytes(&record), "{} > {}", p.saved_bytes, torch_bytes(&record));
}

/// PyTorch's own decision (its saved activations, and the generator states it keeps), completed
/// and scored under remat's rules and cost model.
fn pytorchs_decision(g: &PGraph, record: &Value) -> remat_core::Evaluation {
    let mut ids: Vec<String> =
        record["saved_activations"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    if record["saved_rng_states"].is_array() {
        ids.extend(g.nodes.iter().filter(|n| n.flags.rng_state).map(|n| n.id.label_raw()));
    }
    let saved = g.find_ids(ids.iter().map(String::as_str)).unwrap();
    remat_core::evaluate(g, &saved).unwrap()
}

/// Scored on one scale — remat's rules and cost model — PyTorch's decision keeps every rule,
/// and remat's exact budget at PyTorch's bytes recomputes no more, on every fixture.
#[test]
fn budgets_at_pytorchs_bytes_recompute_no_more() {
    for (name, doc, record) in cases() {
        let g = remat_core::read_joint(&doc).unwrap();
        let torch = pytorchs_decision(&g, &record);
        assert!(torch.broken.is_empty(), "{name}: PyTorch's decision breaks {:?}", torch.broken);
        let bytes = torch.partition.saved_bytes;
        let p = partition(&g, Strategy::Budget(Budget::Bytes(bytes))).unwrap();
        check(&g, &p).unwrap();
        println!(
            "{name}: PyTorch {bytes} B {} FLOPs; remat budget={bytes}: {} B {} FLOPs (gap {:?})",
            torch.partition.recompute_flops, p.saved_bytes, p.recompute_flops, p.optimality_gap
        );
        assert!(p.saved_bytes <= bytes, "{name}");
        assert!(
            p.recompute_flops <= torch.partition.recompute_flops,
            "{name}: remat recomputes more at PyTorch's bytes"
        );
        assert_eq!(p.optimality_gap, Some(0.0), "{name}: proven optimal");
    }
}

/// Saved bytes never rise as the budget shrinks (the exact search, on PyTorch's graphs).
#[test]
fn saved_bytes_never_rise_as_the_budget_shrinks() {
    for (name, doc, record) in cases() {
        let g = remat_core::read_joint(&doc).unwrap();
        let top = pytorchs_decision(&g, &record).partition.saved_bytes.max(1);
        let mut last: Option<(u64, u64)> = None;
        for k in (0..=8).rev() {
            let limit = top / 8 * k;
            let Ok(p) = partition(&g, Strategy::Budget(Budget::Bytes(limit))) else { break };
            if let Some((bytes, flops)) = last {
                assert!(p.saved_bytes <= bytes, "{name}: budget={limit} saves {} B, more than {bytes}", p.saved_bytes);
                assert!(p.recompute_flops >= flops, "{name}: a smaller budget recomputes less");
            }
            last = Some((p.saved_bytes, p.recompute_flops));
        }
    }
}

/// The document PyTorch's partitioner chose on: the exported joint graph with the nodes its CSE
/// pass merged (`cse_removed` in the record: node → the node it became) replaced by what they
/// became. The fixtures hold the graph before CSE, and a document carries no scalar arguments,
/// so remat cannot find these merges itself (`mul(x, 0.5)` and `mul(x, 0.7071)` look alike);
/// remat_torch's `partition_fn` runs PyTorch's own CSE before exporting.
fn after_torchs_cse(doc: &str, record: &Value) -> String {
    let merged: std::collections::HashMap<&str, &str> = record["cse_removed"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v.as_str().unwrap())).collect())
        .unwrap_or_default();
    let survivor = |id: &Value| {
        let mut id = id.as_str().unwrap();
        while let Some(next) = merged.get(id) {
            id = next;
        }
        Value::from(id)
    };
    let mut doc: Value = serde_json::from_str(doc).unwrap();
    let nodes = doc["nodes"].as_array_mut().unwrap();
    nodes.retain(|n| !merged.contains_key(n["id"].as_str().unwrap()));
    for n in nodes.iter_mut() {
        if let Some(inputs) = n.get_mut("inputs").and_then(Value::as_array_mut) {
            inputs.iter_mut().for_each(|i| *i = survivor(i));
        }
    }
    for outputs in ["forward_outputs", "backward_outputs"] {
        doc[outputs].as_array_mut().unwrap().iter_mut().for_each(|o| *o = survivor(o));
    }
    doc.to_string()
}

/// The comparison on PyTorch's own counts: on every fixture PyTorch partitioned under an
/// activation memory budget, remat's exact budget at the bytes PyTorch kept runs no more FLOPs
/// again than PyTorch's backward runs of forward nodes (the doc FLOPs of `recomputed_nonview`
/// and `forward_nodes_only_in_backward`), both choosing on the graph after PyTorch's CSE.
#[test]
fn at_pytorchs_bytes_remat_recomputes_no_more_than_pytorch_runs_again() {
    let mut compared = 0;
    for (name, doc, record) in cases() {
        if record["partitioner_config"]["activation_memory_budget"].as_f64().unwrap_or(1.0) >= 1.0 {
            continue;
        }
        let flops: std::collections::HashMap<String, u64> = serde_json::from_str::<Value>(&doc).unwrap()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (n["id"].as_str().unwrap().to_string(), n["flops"].as_u64().unwrap_or(0)))
            .collect();
        let torch_flops: u64 = ["recomputed_nonview", "forward_nodes_only_in_backward"]
            .iter()
            .flat_map(|list| record[list].as_array().unwrap())
            .map(|id| flops[id.as_str().unwrap()])
            .sum();
        let bytes = record["saved_activation_bytes"].as_u64().unwrap();
        let g = remat_core::read_joint(&after_torchs_cse(&doc, &record)).unwrap();
        let p = partition(&g, Strategy::Budget(Budget::Bytes(bytes))).unwrap();
        println!(
            "{name}: PyTorch {bytes} B, {torch_flops} FLOPs run again; remat {} B, {} FLOPs ({:.4}x), gap {:?}",
            p.saved_bytes,
            p.recompute_flops,
            p.recompute_flops as f64 / torch_flops as f64,
            p.optimality_gap
        );
        assert!(p.saved_bytes <= bytes, "{name}: {} B", p.saved_bytes);
        assert!(
            p.recompute_flops <= torch_flops,
            "{name}: {} FLOPs against PyTorch's {torch_flops}",
            p.recompute_flops
        );
        compared += 1;
    }
    assert!(compared >= 2, "expected the two budget_0.5 fixtures, compared {compared}");
}
