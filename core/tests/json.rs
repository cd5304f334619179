//! JSON interchange and reports: import∘export is the identity on traced models (regions, tags,
//! names and locations included), on joint graphs and on the documents in `docs/examples`;
//! every malformed document is an error naming the node.

use remat_core::Document;
use remat_core::Report;
use remat_core::{enter_region, DType, Graph, JointGraph, Op, Policy, PolicyTable, RegionSpec, Strategy};
use remat_core::{partition, PGraph};
use remat_core::{AttnLayout, CpuBackend, Feeds, HostTensor, Model, Tensor, Trace};
use remat_zoo::{self as zoo, GptConfig, MlpConfig, Part};
use serde_json::Value;

static ATTN: RegionSpec = RegionSpec {
    name: "attention",
    module: "json",
    file: file!(),
    line: line!(),
    policy: PolicyTable::RECOMPUTE_ALL,
    budget: None,
};

static FFN: RegionSpec = RegionSpec {
    name: "ffn",
    module: "json",
    file: file!(),
    line: line!(),
    policy: PolicyTable {
        must_save: &[remat_core::OpKind::Matmul],
        prefer_save: &[],
        must_recompute: &[],
        prefer_recompute: &[],
        must_offload: &[],
        prefer_offload: &[],
        save_names: &[],
        offload_names: &[],
        default: Policy::PreferRecompute,
    },
    budget: Some(0.5),
};

static INNER: RegionSpec = RegionSpec {
    name: "gelu_part",
    module: "json",
    file: file!(),
    line: line!(),
    policy: PolicyTable::SAVE_ALL,
    budget: None,
};

fn gpt_cfg(dtype: DType, dropout: f64) -> GptConfig {
    GptConfig { batch: 2, seq: 4, d_model: 8, heads: 2, layers: 2, vocab: 11, dropout, dtype }
}

/// A GPT whose attention runs in a region and whose MLP runs in a region with a nested one.
fn gpt_with_regions() -> Graph {
    zoo::gpt_with(&gpt_cfg(DType::F32, 0.1), &|part, x, p, heads| match part {
        Part::Attention => {
            let _r = enter_region(&ATTN);
            zoo::attention(x, p, heads)
        }
        Part::FeedForward => {
            let _r = enter_region(&FFN);
            let h = &x.matmul(&p.w1) + &p.b1;
            let g = {
                let _inner = enter_region(&INNER);
                h.gelu()
            };
            &g.matmul(&p.w2) + &p.b2
        }
    })
    .unwrap()
}

fn models() -> Vec<(&'static str, Graph)> {
    vec![
        ("mlp", zoo::mlp(&MlpConfig { batch: 4, widths: vec![6, 8, 8, 3] }).unwrap()),
        ("gpt", zoo::gpt(&gpt_cfg(DType::F32, 0.0)).unwrap()),
        ("gpt bf16 dropout", zoo::gpt(&gpt_cfg(DType::BF16, 0.1)).unwrap()),
        ("gpt regions", gpt_with_regions()),
    ]
}

/// Equality of graphs, except the compile-time spec of traced regions (no document carries it).
fn assert_same(name: &str, a: &Graph, b: &Graph) {
    assert_eq!(a.nodes(), b.nodes(), "{name}: nodes");
    assert_eq!(a.outputs(), b.outputs(), "{name}: outputs");
    assert_eq!(a.regions().len(), b.regions().len(), "{name}: regions");
    for (x, y) in a.regions().iter().zip(b.regions()) {
        assert_eq!((x.parent, &x.name, x.budget), (y.parent, &y.name, y.budget), "{name}: region");
    }
}

#[test]
fn traced_models_round_trip() {
    for (name, g) in models() {
        let text = remat_core::write_graph(&g);
        let back = remat_core::read_graph(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_same(name, &g, &back);
        assert_eq!(remat_core::write_graph(&back), text, "{name}: canonical text");
        assert!(matches!(remat_core::read_document(&text).unwrap(), Document::Graph(..)));
    }
}

#[test]
fn regions_and_tags_survive() {
    let g = gpt_with_regions();
    let back = remat_core::read_graph(&remat_core::write_graph(&g)).unwrap();
    let inner = back.regions().iter().position(|r| r.name == "gelu_part").unwrap();
    let parent = back.regions()[inner].parent.unwrap();
    assert_eq!(back.region(parent).name, "ffn");
    assert_eq!(back.region(parent).budget, Some(0.5));
    let tagged = back.nodes().iter().filter(|n| n.tag.is_some()).count();
    assert!(tagged > 10 && tagged == g.nodes().iter().filter(|n| n.tag.is_some()).count());
    assert!(back.nodes().iter().any(|n| n.tag.is_some_and(|t| t.policy == Policy::MustSave)));
    assert!(back.nodes().iter().all(|n| n.loc().is_some()), "source locations travel");
}

#[test]
fn joint_graphs_round_trip() {
    for (name, g) in models() {
        let pg = PGraph::from_joint(&JointGraph::new(&g).unwrap());
        let text = remat_core::write_joint(&pg);
        let back = remat_core::read_joint(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back, pg, "{name}");
        assert_eq!(remat_core::write_joint(&back), text, "{name}: canonical text");
        for strategy in [Strategy::Respect, Strategy::MinCut] {
            assert_eq!(partition(&back, strategy).unwrap(), partition(&pg, strategy).unwrap(), "{name} {strategy}");
        }
    }
}

#[test]
fn imported_graph_partitions_like_the_traced_one() {
    let g = gpt_with_regions();
    let back = remat_core::read_graph(&remat_core::write_graph(&g)).unwrap();
    let a = PGraph::from_joint(&JointGraph::new(&g).unwrap());
    let b = PGraph::from_joint(&JointGraph::new(&back).unwrap());
    for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(remat_core::Budget::Fraction(0.5))] {
        assert_eq!(partition(&a, strategy).unwrap(), partition(&b, strategy).unwrap(), "{strategy}");
    }
}

fn example(name: &str) -> String {
    let path = format!("{}/../docs/examples/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn documented_examples_round_trip() {
    for name in ["two_regions.graph.json", "small.joint.json"] {
        let text = example(name);
        let written = match remat_core::read_document(&text).unwrap_or_else(|e| panic!("{name}: {e}")) {
            Document::Graph(g, _) => remat_core::write_graph(&g),
            Document::Joint(pg) => remat_core::write_joint(&pg),
        };
        let a: Value = serde_json::from_str(&text).unwrap();
        let b: Value = serde_json::from_str(&written).unwrap();
        assert_eq!(a, b, "{name}");
    }
}

#[test]
fn two_regions_save_the_boundary() {
    let g = remat_core::read_graph(&example("two_regions.graph.json")).unwrap();
    let pg = PGraph::from_joint(&JointGraph::new(&g).unwrap());
    let p = partition(&pg, Strategy::Respect).unwrap();
    // h = exp(..) is produced in f and consumed in g: saved; f's inner values are recomputed.
    assert!(p.saved[5]);
    // g recomputes from h; the sum's gradient reads nothing, so g's own ops are recomputed too.
    assert_eq!(p.recomputed, [3, 4, 6, 7].map(remat_core::NodeId::new).to_vec());
    let text = Report::new(&pg, &p).text();
    assert!(text.contains("read by region `g#1`, which recomputes from it"), "{text}");
    assert!(text.contains("prefer_recompute tag"), "{text}");
}

/// The issue's plain `remat.graph` case: two consecutive regions whose every op is
/// must_recompute. The tensor between them is kept by the region that reads it (DESIGN.md §4)
/// under every strategy, said so in the decision and the report; must_recompute on a forward
/// output is no conflict either (the caller holds it); the plan runs, with the same gradients
/// bit for bit as the prefer_recompute document's.
#[test]
fn two_must_recompute_regions_keep_the_tensor_between_them() {
    use remat_core::Reason;
    use remat_core::{Action, Budget, NodeId};
    let prefer = example("two_regions.graph.json");
    let must = prefer.replace("prefer_recompute", "must_recompute");
    // g's tanh (%7, must_recompute) as a forward output besides the loss.
    let with_output = must.replace(r#""outputs": [8]"#, r#""outputs": [8, 7]"#);
    assert!(must != prefer && with_output != must, "the example changed: {prefer}");
    for text in [&must, &with_output] {
        let g = remat_core::read_graph(text).unwrap();
        let pg = PGraph::from_joint(&JointGraph::new(&g).unwrap());
        for strategy in [
            Strategy::Respect,
            Strategy::MinCut,
            Strategy::Budget(Budget::Fraction(0.0)),
            Strategy::Budget(Budget::Fraction(1.0)),
        ] {
            let p = partition(&pg, strategy).unwrap_or_else(|e| panic!("{strategy}: {e}"));
            let h = p.decisions.iter().find(|d| d.node == NodeId::new(5)).expect("a decision on h");
            assert_eq!(h.action, Action::Save, "{strategy}");
            assert_eq!(h.reason, Reason::ReadByRegion(remat_core::RegionId::new(1)), "{strategy}");
            assert_eq!(h.overrode, Some(Policy::MustRecompute), "{strategy}");
            let report = Report::new(&pg, &p).text();
            assert!(report.contains("must_recompute applies inside `f#0`"), "{strategy}: {report}");
            let json: Value = serde_json::from_str(&Report::new(&pg, &p).json()).unwrap();
            let decision = json["decisions"].as_array().unwrap().iter().find(|d| d["id"] == 5).unwrap();
            assert_eq!(decision["overrode"], "must_recompute", "{strategy}: {decision}");
        }
    }
    let x = HostTensor::f32([4, 8], (0..32).map(|i| (i as f32 * 0.37).sin()).collect()).unwrap();
    let grads = |text: &str| {
        let model = Model::with_strategy(remat_core::read_graph(text).unwrap(), Strategy::MinCut).unwrap();
        let params = model.init_params(3).unwrap();
        let out = model.step(&mut CpuBackend::new(), &params, &Feeds::new().with("x", x.clone())).unwrap();
        let bits: Vec<Vec<u32>> =
            out.grads.iter().map(|t| t.to_f32_vec().iter().map(|v| v.to_bits()).collect()).collect();
        assert!(bits.iter().flatten().any(|&b| b != 0), "zero gradients");
        bits
    };
    assert_eq!(grads(&must), grads(&prefer));
}

/// A remat.graph with `x: [2, 3]`, `w: [4, 5]` and the given further nodes.
fn doc(nodes: &[&str], outputs: &str) -> String {
    let mut all = vec![
        r#"{"id": 0, "op": "input", "shape": [2, 3], "dtype": "f32", "name": "x"}"#.to_string(),
        r#"{"id": 1, "op": "param", "shape": [3, 4], "dtype": "f32", "name": "w"}"#.to_string(),
        r#"{"id": 2, "op": "param", "shape": [4, 5], "dtype": "f32", "name": "v"}"#.to_string(),
    ];
    all.extend(nodes.iter().map(|s| s.to_string()));
    format!(r#"{{"format": "remat.graph", "version": 1, "nodes": [{}], "outputs": {outputs}}}"#, all.join(", "))
}

fn graph_error(nodes: &[&str], outputs: &str) -> String {
    remat_core::read_graph(&doc(nodes, outputs)).unwrap_err().to_string()
}

#[test]
fn a_valid_small_document_reads() {
    let g = remat_core::read_graph(&doc(
        &[
            r#"{"id": 3, "op": "matmul", "inputs": [0, 1]}"#,
            r#"{"id": 4, "op": "clamp", "inputs": [3], "attrs": {"min": null, "max": 1.5}}"#,
            r#"{"id": 5, "op": "dropout", "inputs": [4], "attrs": {"p": 0.25, "seed": 7}}"#,
            r#"{"id": 6, "op": "mean", "inputs": [5], "attrs": {"axes": [0, 1]}, "shape": [], "dtype": "f32"}"#,
        ],
        "[6]",
    ))
    .unwrap();
    assert_eq!(g.node(remat_core::NodeId::new(3)).shape[..], [2, 4]);
    assert_eq!(g.node(remat_core::NodeId::new(4)).op, Op::Clamp { min: f64::NEG_INFINITY, max: 1.5 });
    assert_eq!(g.node(remat_core::NodeId::new(5)).op, Op::Dropout { p: 0.25, seed: 7, key: 5 });
}

#[test]
fn errors_name_the_node() {
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &[r#"{"id": 3, "op": "matmul", "inputs": [0, 2]}"#],
            "[3]",
            "node 3 (matmul): inner dimensions differ: [2, 3] · [4, 5] (3 vs 4)",
        ),
        (
            &[r#"{"id": 3, "op": "matmull", "inputs": [0, 1]}"#],
            "[3]",
            "node 3 (matmull): unknown op \"matmull\" (did you mean `matmul`?)",
        ),
        (
            &[r#"{"id": 3, "op": "relu_grad", "inputs": [0, 1]}"#],
            "[3]",
            "node 3 (relu_grad): `relu_grad` is an internal op",
        ),
        (
            &[r#"{"id": 3, "op": "relu", "inputs": [0], "shap": [2, 3]}"#],
            "[3]",
            "node 3 (relu): unknown field \"shap\" (did you mean \"shape\"?",
        ),
        (
            &[r#"{"id": 3, "op": "relu", "inputs": [9]}"#],
            "[3]",
            "node 3 (relu): input 9 is not a node of the document (a dangling input)",
        ),
        (
            &[r#"{"id": 3, "op": "relu", "inputs": [4]}"#, r#"{"id": 4, "op": "relu", "inputs": [3]}"#],
            "[4]",
            "node 3 (relu): input 4 is defined later in the list",
        ),
        (
            &[r#"{"id": 3, "op": "relu", "inputs": [0], "shape": [3, 2]}"#],
            "[3]",
            "node 3 (relu): declared [3, 2] but the op produces [2, 3] f32",
        ),
        (
            &[r#"{"id": 3, "op": "sum", "inputs": [0], "attrs": {"axis": [0]}}"#],
            "[3]",
            "node 3 (sum): missing attribute `axes`",
        ),
        (
            &[r#"{"id": 3, "op": "sum", "inputs": [0], "attrs": {"axes": [0, 1], "keep": true}}"#],
            "[3]",
            "node 3 (sum): unknown attribute `keep`",
        ),
        (&[r#"{"id": 3, "op": "cast", "inputs": [0], "attrs": {"dtype": "f33"}}"#], "[3]", "did you mean \"f32\"?"),
        (
            &[r#"{"id": 3, "op": "relu", "inputs": [0], "region": 0}"#],
            "[3]",
            "node 3 (relu): a node with a `region` needs a `policy`",
        ),
        (
            &[r#"{"id": 3, "op": "relu", "inputs": [0], "region": 0, "policy": "must_sav"}"#],
            "[3]",
            "did you mean \"must_save\"?",
        ),
        (
            &[r#"{"id": 1, "op": "relu", "inputs": [0]}"#],
            "[1]",
            "node 1 (relu): id 1 is used twice (nodes 1 and 3 in the list)",
        ),
        (
            &[r#"{"id": 3, "op": "relu", "inputs": [0], "shape": "2x3"}"#],
            "[3]",
            "node 3 (relu): field \"shape\": expected an array of non-negative integers, got \"2x3\"",
        ),
        (
            &[r#"{"id": 3, "op": "input", "shape": [3, 12297829382473034411], "dtype": "f32"}"#],
            "[3]",
            "node 3 (input): [3, 12297829382473034411] f32 is more than 2^64 bytes",
        ),
        (&[r#"{"id": 3, "op": "input", "dtype": "f32"}"#], "[3]", "node 3 (input): input needs `shape` and `dtype`"),
        (&[r#"{"id": 3, "op": "relu", "inputs": [0]}"#], "[3]", "node 3 (relu): the first output is the loss"),
        (&[r#"{"id": 3, "op": "relu", "inputs": [0]}"#], "[]", "`outputs` is empty"),
    ];
    for (nodes, outputs, expected) in cases {
        let e = graph_error(nodes, outputs);
        assert!(e.contains(expected), "expected `{expected}` in `{e}`");
    }
}

#[test]
fn header_errors() {
    let e = |text: &str| remat_core::read_document(text).unwrap_err().to_string();
    assert!(e("{").contains("invalid JSON"));
    assert!(e(r#"{"format": "remat.grph", "version": 1}"#).contains("unknown format \"remat.grph\""));
    assert!(e(r#"{"format": "remat.graph", "version": 2}"#).contains("version 2 is not supported"));
    let extra = r#"{"format": "remat.graph", "version": 1, "nodes": [], "outputs": [0], "extra": 1}"#;
    assert!(e(extra).contains("unknown top-level field \"extra\""), "{}", e(extra));
    let joint_as_graph = remat_core::read_graph(&example("small.joint.json")).unwrap_err().to_string();
    assert!(joint_as_graph.contains("expected a remat.graph document"));
}

fn joint_error(node: &str) -> String {
    let text = format!(
        r#"{{"format": "remat.joint", "version": 1, "nodes": [
            {{"id": 0, "op": "input", "phase": "forward", "bytes": 16}},
            {{"id": 1, "op": "grad", "inputs": [0], "phase": "backward", "bytes": 16}},
            {node}
        ], "forward_outputs": [0]}}"#
    );
    remat_core::read_joint(&text).unwrap_err().to_string()
}

#[test]
fn joint_errors_name_the_node() {
    let cases = [
        (
            r#"{"id": 2, "op": "mul", "inputs": [1], "phase": "forward", "bytes": 4}"#,
            "node 2 (mul): a forward node cannot read backward node 1",
        ),
        (
            r#"{"id": 2, "op": "mul", "inputs": [0], "phase": "forward", "bytes": 4, "flags": ["viw"]}"#,
            "did you mean \"view\"?",
        ),
        (
            r#"{"id": 2, "op": "mul", "inputs": [0], "phase": "forward"}"#,
            "node 2 (mul): needs \"bytes\", or \"shape\" and \"dtype\"",
        ),
        (
            r#"{"id": 2, "op": "t", "inputs": [0], "phase": "forward", "bytes": 4, "flags": ["view", "resident"]}"#,
            "node 2 (t): flags \"view\" and \"resident\" contradict each other",
        ),
        (
            r#"{"id": 2, "op": "t", "inputs": [0], "phase": "forward", "shape": "4x8", "dtype": "f32"}"#,
            "node 2 (t): field \"shape\": expected an array of non-negative integers, got \"4x8\"",
        ),
        (
            r#"{"id": 2, "op": "t", "inputs": [0], "phase": "forward", "shape": [4, 8], "dtype": "f31"}"#,
            "node 2 (t): field \"dtype\": unknown dtype \"f31\" (did you mean \"f32\"?",
        ),
        (
            r#"{"id": 2, "op": "t", "inputs": [0], "phase": "forward", "bytes": 4, "axis": 1}"#,
            "node 2 (t): unknown field \"axis\"",
        ),
        (
            r#"{"id": 2, "op": "t", "inputs": [0], "phase": "forward", "bytes": 4, "policy": "must_recompute", "region": 0, "flags": ["resident"]}"#,
            "node 2 (t): must_recompute on a resident value",
        ),
        (
            r#"{"id": 2, "op": "mul", "inputs": [0], "phase": "sideways", "bytes": 4}"#,
            "node 2 (mul): field \"phase\": expected \"forward\" or \"backward\", got \"sideways\"",
        ),
        (
            r#"{"id": 2, "op": "mul", "inputs": [0], "phase": "forward", "bytes": 5, "shape": [2], "dtype": "f32"}"#,
            "node 2 (mul): field \"bytes\": 5 disagrees",
        ),
        (
            r#"{"id": 2, "op": "mul", "inputs": [3], "phase": "forward", "bytes": 4}"#,
            "node 2 (mul): input 3 is not a node of the document",
        ),
    ];
    for (node, expected) in cases {
        let e = joint_error(node);
        assert!(e.contains(expected), "expected `{expected}` in `{e}`");
    }
}

#[test]
fn joint_residency_and_flags() {
    let pg = remat_core::read_joint(&example("small.joint.json")).unwrap();
    assert!(pg.nodes[0].flags.resident && pg.nodes[1].flags.resident);
    assert!(pg.nodes[4].flags.not_recomputable && pg.nodes[4].flags.random);
    assert!(pg.nodes[6].flags.tangent && pg.nodes[6].backward);
    assert_eq!(pg.nodes[2].bytes, 128);
    assert_eq!(pg.regions[0].budget, Some(0.75));
    let text = r#"{"format": "remat.joint", "version": 1, "nodes": [
        {"id": 0, "op": "primals_1", "phase": "forward", "bytes": 16, "flags": ["resident"]},
        {"id": 1, "op": "sin", "inputs": [0], "phase": "forward", "bytes": 16},
        {"id": 2, "op": "cos", "inputs": [1], "phase": "backward", "bytes": 16}
    ], "forward_outputs": [], "backward_outputs": [2]}"#;
    let pg = remat_core::read_joint(text).unwrap();
    assert!(pg.nodes[0].flags.resident);
    assert_eq!(remat_core::read_joint(&remat_core::write_joint(&pg)).unwrap(), pg);
}

/// A multi-output draw (`native_dropout`'s result and mask) as two nodes naming one
/// `rng_state`: one generator state, counted once however many of its outputs are replayed.
fn dropout_doc(mask_bytes: u64, mask_key: &str) -> String {
    format!(
        r#"{{"format": "remat.joint", "version": 1, "nodes": [
        {{"id": "x", "op": "input", "phase": "forward", "bytes": 4096}},
        {{"id": "h", "op": "relu", "inputs": ["x"], "phase": "forward", "bytes": 4096, "region": 0, "policy": "prefer_recompute"}},
        {{"id": "out", "op": "native_dropout[0]", "inputs": ["h"], "phase": "forward", "bytes": 4096, "flags": ["random"],
          "region": 0, "policy": "prefer_recompute", "rng_state_bytes": 16, "rng_state": "drop"}},
        {{"id": "mask", "op": "native_dropout[1]", "inputs": ["h"], "phase": "forward", "bytes": 1024, "flags": ["random"],
          "region": 0, "policy": "prefer_recompute", "rng_state_bytes": {mask_bytes}, "rng_state": "{mask_key}"}},
        {{"id": "y", "op": "sin", "inputs": ["out"], "phase": "forward", "bytes": 4096}},
        {{"id": "dy", "op": "tangent", "phase": "backward", "bytes": 4096, "flags": ["tangent"]}},
        {{"id": "dout", "op": "cos_mul", "inputs": ["out", "dy"], "phase": "backward", "bytes": 4096}},
        {{"id": "dh", "op": "mul", "inputs": ["dout", "mask"], "phase": "backward", "bytes": 4096}},
        {{"id": "dx", "op": "relu_grad", "inputs": ["dh", "h"], "phase": "backward", "bytes": 4096}}
    ], "forward_outputs": ["y"], "backward_outputs": ["dx"]}}"#
    )
}

#[test]
fn the_outputs_of_one_draw_share_one_generator_state() {
    let g = remat_core::read_joint(&dropout_doc(16, "drop")).unwrap();
    let states: Vec<_> = g.ids().filter(|&i| g.node(i).flags.rng_state).collect();
    assert_eq!(states.len(), 1, "one state for the draw");
    assert_eq!(g.node(states[0]).id.label_raw(), "drop:rng_state");
    let readers: Vec<_> = g.ids().filter(|&i| g.node(i).inputs.first() == Some(&states[0])).collect();
    assert_eq!(readers.len(), 2, "both outputs run from it");
    // Replaying the draw from 16 bytes of state is cheaper than keeping its 4 KiB output.
    for strategy in [Strategy::MinCut, Strategy::Respect] {
        let p = partition(&g, strategy).unwrap();
        remat_core::check(&g, &p).unwrap();
        let replayed = |id: &str| p.recomputed.iter().any(|&r| g.node(r).id.label_raw() == id);
        assert!(replayed("out") && replayed("mask"), "{strategy}: both outputs are replayed");
        assert!(p.saved[states[0].index()], "{strategy}: a replayed draw keeps its state");
        assert_eq!(p.saved_bytes, 16, "{strategy}: the state, counted once, is all that is kept");
    }
    // Written back, both outputs name the shared state again.
    let text = remat_core::write_joint(&g);
    assert_eq!(text.matches("\"rng_state\": \"drop\"").count(), 2, "{text}");
    assert_eq!(remat_core::read_joint(&text).unwrap(), g);
    // The state's size is the draw's, given alike by every output.
    let e = remat_core::read_joint(&dropout_doc(32, "drop")).unwrap_err().to_string();
    assert!(e.contains("\"mask\"") && e.contains("shares was given 16 bytes"), "{e}");
    // A key names the state of a draw that has one.
    let e = remat_core::read_joint(
        &dropout_doc(16, "drop").replace(r#""rng_state_bytes": 16, "rng_state": "drop"}"#, r#""rng_state": "drop"}"#),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("\"rng_state\" (\"drop\") needs \"rng_state_bytes\""), "{e}");
    // Different keys are different states.
    let g = remat_core::read_joint(&dropout_doc(16, "other")).unwrap();
    assert_eq!(g.ids().filter(|&i| g.node(i).flags.rng_state).count(), 2);
}

#[test]
fn reports() {
    let g = gpt_with_regions();
    let pg = PGraph::from_joint(&JointGraph::new(&g).unwrap());
    let p = partition(&pg, Strategy::Respect).unwrap();
    let report = Report::new(&pg, &p).with_planned_peak(1000).with_measured_peak(1000);
    let text = report.text();
    for needle in [
        "saved for the backward",
        "recomputed in the backward",
        "read by region `",
        "ffn#",
        "json.rs:",
        "peak memory: planned",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from\n{text}");
    }
    let v: Value = serde_json::from_str(&report.json()).unwrap();
    assert_eq!(v["strategy"], "respect");
    assert_eq!(v["saved_bytes"], p.saved_bytes);
    assert_eq!(v["recompute_flops"], p.recompute_flops);
    let saved: Vec<u64> = v["held"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let reads = pg.backward_reads();
    let read_params: Vec<_> = g.params().into_iter().filter(|p| reads[p.index()]).collect();
    assert!(!read_params.is_empty());
    for param in read_params {
        assert!(saved.contains(&(param.raw() as u64)), "parameters the backward reads are listed as held");
    }
    assert_eq!(v["recomputed"].as_array().unwrap().len(), p.recomputed.len());
    assert_eq!(v["decisions"].as_array().unwrap().len(), p.decisions.len());
    assert!(v["decisions"].as_array().unwrap().iter().any(|d| d["reason"] == "boundary" && d["region"].is_u64()));
    assert_eq!(v["planned_peak"], 1000);
    // A report without the peaks has none, and the same decisions. (Written while the plan is
    // made, the pipeline's JSON is the same bytes: tests/pipeline.rs.)
    let bare: Value = serde_json::from_str(&Report::new(&pg, &p).json()).unwrap();
    assert!(bare.get("planned_peak").is_none() && bare["decisions"] == v["decisions"]);
    let json = report.json();
    assert!(json.find("\"warnings\"") < json.find("\"planned_peak\""), "the peaks come last");
    let dot = report.dot();
    assert!(dot.starts_with("digraph remat {"));
    assert!(dot.contains("subgraph cluster_r0 {"));
    // The nested region's cluster sits inside its parent's.
    let inner = g.regions().iter().position(|r| r.name == "gelu_part").unwrap();
    let parent = g.regions()[inner].parent.unwrap().raw();
    let open_parent = dot.find(&format!("subgraph cluster_r{parent} {{")).unwrap();
    let open_inner = dot.find(&format!("subgraph cluster_r{inner} {{")).unwrap();
    assert!(open_parent < open_inner);
    assert!(dot.contains("fillcolor=\"#8fd18f\"") && dot.contains("fillcolor=\"#f7c06b\""));
    assert!(dot.contains("shape=ellipse"), "backward nodes are drawn differently");
}

/// Every op added for Llama-style models: resident constants, arange, comparisons and `where`,
/// `pow`, `slice`, `index_select`, `rms_norm`, `silu` and the fused attention.
fn llama_ops_graph() -> Graph {
    let trace = Trace::new();
    let x = trace.param("x", &[2, 4, 6], DType::F32);
    let table =
        trace.constant_from("table", HostTensor::f32([4, 3], (0..12).map(|i| i as f32 * 0.25).collect()).unwrap());
    let ids = trace.arange(2.0, -1.0, 3, DType::I64);
    let picked = x.index_select(1, &ids); // [2, 3, 6]
    let h = picked.rms_norm(1e-5).silu().pow(2.0);
    let halves = &h.slice(2, 0, 3) * &table.slice(0, 0, 3);
    let limit = trace.constant(0.5, &[], DType::F32);
    let masked = halves.gt(&limit).where_(&halves, &limit);
    let q = masked.reshape(&[2, 1, 3, 3]);
    let y = Tensor::scaled_dot_product_attention(&q, &q, &q, true, 0.5);
    // And token-major: [batch, t, heads, d].
    let qt = masked.reshape(&[2, 3, 1, 3]);
    let yt = Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, &qt, &qt, &qt, false, 0.25);
    trace.finish(&(&y.sum_all() + &yt.sum_all())).unwrap()
}

#[test]
fn new_ops_round_trip_and_differentiate_after_reading() {
    let g = llama_ops_graph();
    let text = remat_core::write_graph(&g);
    assert!(text.contains("\"constant_data\"") && text.contains("\"sdpa\"") && text.contains("\"where\""), "{text}");
    let back = remat_core::read_graph(&text).unwrap();
    assert_same("llama ops", &g, &back);
    assert_eq!(remat_core::write_graph(&back), text, "canonical text");
    let (a, b) = (Model::new(g).unwrap(), Model::new(back).unwrap());
    let mut cpu = CpuBackend::new();
    let ga = a.step(&mut cpu, &a.init_params(3).unwrap(), &Feeds::new()).unwrap();
    let gb = b.step(&mut cpu, &b.init_params(3).unwrap(), &Feeds::new()).unwrap();
    assert_eq!(ga.grads, gb.grads);
    let bad = text.replacen("\"values\"", "\"valuez\"", 1);
    let err = remat_core::read_graph(&bad).unwrap_err().to_string();
    assert!(err.contains("constant_data") && err.contains("missing attribute `values`"), "{err}");
    assert!(text.contains("\"layout\": \"token_major\""), "{text}");
    let bad = text.replacen("\"token_major\"", "\"tokens_first\"", 1);
    let err = remat_core::read_graph(&bad).unwrap_err().to_string();
    assert!(err.contains("attribute `layout`") && err.contains("head_major") && err.contains("token_major"), "{err}");
}

/// A joint chain of `n` nodes (large documents are parsed on a second thread while the first
/// checks what is parsed): `node(k)` may replace node `k`'s text.
fn long_chain(n: usize, node: impl Fn(usize) -> Option<String>) -> String {
    let mut nodes =
        vec![r#"{"id": "x", "op": "placeholder", "phase": "forward", "bytes": 64, "flags": ["resident"]}"#.to_string()];
    for k in 1..n {
        let text = node(k).unwrap_or_else(|| {
            format!(r#"{{"id": "relu_{k}", "op": "aten.relu.default", "inputs": ["{}"], "phase": "forward", "shape": [4, 4], "dtype": "f32", "flops": 16}}"#,
                if k == 1 { "x".to_string() } else { format!("relu_{}", k - 1) })
        });
        nodes.push(text);
    }
    format!(
        r#"{{"format": "remat.joint", "version": 1, "nodes": [{}], "forward_outputs": ["relu_{}"]}}"#,
        nodes.join(",\n"),
        n - 1
    )
}

#[test]
fn a_large_document_reads_and_errors_like_a_small_one() {
    let n = 60_000;
    let good = long_chain(n, |_| None);
    assert!(good.len() > 4 << 20, "large enough to be parsed on a second thread");
    let g = remat_core::read_joint(&good).unwrap();
    assert_eq!(g.nodes.len(), n);
    assert_eq!(g.nodes[n - 1].inputs[..], [remat_core::NodeId::new(n as u32 - 2)]);

    // An input defined nowhere (found by the checking thread), a node that does not parse (found
    // by the parsing thread), and both: the error of the earlier node is the one returned, with
    // the same text a small document gives.
    // Node `k` of the chain, reading `input`, with `extra` fields after its own.
    let relu = |k: usize, input: &str, extra: &str| {
        format!(
            r#"{{"id": "relu_{k}", "op": "aten.relu.default", "inputs": ["{input}"], "phase": "forward", "bytes": 64{extra}}}"#
        )
    };
    let unknown = |k: usize| relu(k, "nope", "");
    let unparsable =
        |k: usize| format!(r#"{{"id": "relu_{k}", "op": "aten.relu.default", "phase": "sideways", "bytes": 64}}"#);
    // The error with `bad` as the last node of a 3-node document, and as node 50 000 of a long one.
    let small_and_large = |bad: &dyn Fn(usize) -> String| {
        let small = remat_core::read_joint(&long_chain(3, |k| (k == 2).then(|| bad(2)))).unwrap_err().to_string();
        let large = remat_core::read_joint(&long_chain(n, |k| (k == 50_000).then(|| bad(k)))).unwrap_err().to_string();
        (small, large)
    };
    let (small, large) = small_and_large(&unknown);
    assert_eq!(large, small.replace("relu_2", "relu_50000").replace("relu_1", "relu_49999"));
    let err = remat_core::read_joint(&long_chain(n, |k| (k == 40_000).then(|| unparsable(k)))).unwrap_err().to_string();
    assert!(err.contains("relu_40000") && err.contains("sideways"), "{err}");
    let both = |first: usize, second: usize, a: &dyn Fn(usize) -> String, b: &dyn Fn(usize) -> String| {
        long_chain(n, |k| (k == first).then(|| a(k)).or_else(|| (k == second).then(|| b(k))))
    };
    let err = remat_core::read_joint(&both(30_000, 50_000, &unknown, &unparsable)).unwrap_err().to_string();
    assert!(err.contains("relu_30000") && err.contains("nope"), "{err}");
    let err = remat_core::read_joint(&both(20_000, 45_000, &unparsable, &unknown)).unwrap_err().to_string();
    assert!(err.contains("relu_20000") && err.contains("sideways"), "{err}");

    // A node that parses but is wrong on its own (checked on the parsing thread, ahead of the
    // checking one), before and after an input defined nowhere; and one node with both errors,
    // whose own error comes first in a small document and a large one alike.
    let misspelt_flag = r#", "flags": ["veiw"]"#;
    let unknown_flag = |k: usize| relu(k, &format!("relu_{}", k - 1), misspelt_flag);
    let err = remat_core::read_joint(&both(10_000, 50_000, &unknown_flag, &unknown)).unwrap_err().to_string();
    assert!(err.contains("relu_10000") && err.contains("unknown flag \"veiw\""), "{err}");
    let err = remat_core::read_joint(&both(10_000, 50_000, &unknown, &unknown_flag)).unwrap_err().to_string();
    assert!(err.contains("relu_10000") && err.contains("nope"), "{err}");
    let (small, large) = small_and_large(&|k| relu(k, "nope", misspelt_flag));
    assert!(small.contains("veiw"), "{small}");
    assert_eq!(large, small.replace("relu_2", "relu_50000"));
}

/// A chain whose forward output `y` the backward reads: held by the caller (`forward_outputs`)
/// it is kept for free; released (`released_outputs`) it is a value like any other.
fn released_doc(lists: &str) -> String {
    format!(
        r#"{{"format": "remat.joint", "version": 1, "nodes": [
        {{"id": "x", "op": "input", "phase": "forward", "bytes": 4096}},
        {{"id": "h", "op": "sin", "inputs": ["x"], "phase": "forward", "bytes": 4096, "flops": 1024}},
        {{"id": "y", "op": "exp", "inputs": ["h"], "phase": "forward", "bytes": 4096, "flops": 1024}},
        {{"id": "dy", "op": "tangent", "phase": "backward", "bytes": 4096, "flags": ["tangent"]}},
        {{"id": "dh", "op": "mul", "inputs": ["dy", "y"], "phase": "backward", "bytes": 4096}},
        {{"id": "dx", "op": "cos_mul", "inputs": ["dh", "x"], "phase": "backward", "bytes": 4096}}
    ], {lists}, "backward_outputs": ["dx"]}}"#
    )
}

#[test]
fn a_released_output_is_kept_at_its_bytes_or_recomputed() {
    let held = remat_core::read_joint(&released_doc(r#""forward_outputs": ["y"]"#)).unwrap();
    let released =
        remat_core::read_joint(&released_doc(r#""forward_outputs": [], "released_outputs": ["y"]"#)).unwrap();
    assert_eq!(released.released_outputs.len(), 1);
    assert_eq!(remat_core::read_joint(&remat_core::write_joint(&released)).unwrap(), released);
    let p = partition(&held, Strategy::MinCut).unwrap();
    assert_eq!((p.saved_bytes, p.recompute_flops), (0, 0), "held: y is the caller's");
    let p = partition(&released, Strategy::MinCut).unwrap();
    assert_eq!((p.saved_bytes, p.recompute_flops), (0, 2048), "released: y is recomputed (h, then y) from x");
    let p = partition(&released, Strategy::Budget(remat_core::Budget::Bytes(4096))).unwrap();
    assert_eq!((p.saved_bytes, p.recompute_flops), (4096, 0), "released: keeping y costs its bytes");
    // The forward holds a released output to its end, and frees it there unless it is saved.
    let problem =
        remat_core::Problem::read(&released_doc(r#""forward_outputs": [], "released_outputs": ["y"]"#)).unwrap();
    let solved = problem.partition(Strategy::Budget(remat_core::Budget::Bytes(0)), &Default::default()).unwrap();
    let forward = solved.plan().forward();
    let y = released.released_outputs[0];
    assert_eq!(forward.last(), Some(&remat_core::Step::Free(y)), "{forward:?}");
}

#[test]
fn released_outputs_that_cannot_be_released_are_refused_by_name() {
    let error =
        |lists: &str| remat_core::read_joint(&released_doc(lists)).and_then(|g| g.validate()).unwrap_err().to_string();
    assert_eq!(
        error(r#""forward_outputs": [], "released_outputs": ["x"]"#),
        r#""x" (input): listed in released_outputs, but it is an input or a parameter, which the caller holds anyway (list it in forward_outputs)"#
    );
    assert_eq!(
        error(r#""forward_outputs": ["y"], "released_outputs": ["y"]"#),
        r#""y" (exp): listed in released_outputs, but it is also in forward_outputs: an output is either held by the caller or released"#
    );
    assert!(error(r#""forward_outputs": [], "released_outputs": ["dh"]"#)
        .contains("listed in released_outputs but it is a backward node"));
    assert!(error(r#""forward_outputs": [], "released_outputs": ["zz"]"#).starts_with("released_outputs: "));
}
