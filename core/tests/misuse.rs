//! Misuses of the library API that once crashed remat, corrupted memory or results silently, or
//! aborted: each is now an error that names the problem (or cannot be written at all).

use remat_core::RegionPolicy;
use remat_core::{
    load_state, save_state, AdamW, CpuBackend, DType, Error, Feeds, HostData, HostTensor, Model, Optimizer, Params,
    Progress, Sgd,
};
use remat_zoo::{self as zoo, GptConfig, MlpConfig};
use smallvec::smallvec;
use std::path::PathBuf;

fn temp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("misuse-{name}"))
}

fn mlp(widths: Vec<usize>) -> (Model, Params) {
    let cfg = MlpConfig { batch: 2, widths };
    let model = Model::new(zoo::mlp(&cfg).unwrap()).unwrap();
    let params = model.init_params(0).unwrap();
    (model, params)
}

fn grads(model: &Model, params: &Params, widths: Vec<usize>) -> Vec<HostTensor> {
    let feeds = zoo::mlp_feeds(&MlpConfig { batch: 2, widths }, 0).unwrap();
    model.step(&mut CpuBackend::new(), params, &feeds).unwrap().grads
}

/// A tensor's data can change, its element count cannot: the safe API lends slices, and a
/// replacement of another count is refused, so no kernel can read past a buffer.
#[test]
fn a_host_tensor_never_holds_another_count_than_its_shape() {
    let mut t = HostTensor::f32([2, 3], vec![1.0; 6]).unwrap();
    if let remat_core::HostValuesMut::F32(v) = t.values_mut() {
        v[5] = 7.0;
        assert_eq!(v.len(), 6);
    }
    assert_eq!(t.to_f32_vec()[5], 7.0);
    let err = t.set_data(HostData::F32(vec![0.0; 4])).unwrap_err();
    assert!(matches!(&err, Error::Config { setting, .. } if setting == "data"), "{err:?}");
    assert_eq!(err.to_string(), "shape [2, 3] holds 6 elements, the new data has 4");
    assert_eq!(t.numel(), 6, "unchanged");
    t.set_data(HostData::BF16(vec![half::bf16::ONE; 6])).unwrap();
    assert_eq!(t.dtype(), DType::BF16);
    assert!(HostTensor::f32([2, 3], vec![0.0; 5]).is_err());
}

/// A parameter replaced in place by a tensor of another shape is refused by the step, naming it.
#[test]
fn a_parameter_of_another_shape_is_refused_by_the_step() {
    let (model, mut params) = mlp(vec![4, 8, 2]);
    params.values_mut()[0] = HostTensor::f32([3], vec![0.0; 3]).unwrap();
    let feeds = zoo::mlp_feeds(&MlpConfig { batch: 2, widths: vec![4, 8, 2] }, 0).unwrap();
    let err = model.step(&mut CpuBackend::new(), &params, &feeds).unwrap_err().to_string();
    assert!(err.contains(&params.names()[0]) && err.contains("got [3] f32"), "{err}");
}

/// Shapes no machine holds are errors, not panics or aborts.
#[test]
fn huge_shapes_are_errors_not_aborts() {
    let err = HostTensor::full([1 << 32, 1 << 32], 0.0, DType::F32).unwrap_err().to_string();
    assert!(err.contains("more than 2^64 elements"), "{err}");
    let err = HostTensor::full([1 << 40], 1.0, DType::F32).unwrap_err();
    assert!(matches!(err, Error::HostMemory { bytes: Some(b), .. } if b == 4 << 40), "{err:?}");
    assert!(err.to_string().contains("cannot allocate 4398046511104 bytes (4.0 TiB) of host memory"), "{err}");

    let doc = r#"{"format": "remat.graph", "version": 1, "nodes": [
        {"id": 0, "op": "param", "shape": [1000000, 1000000], "dtype": "f64", "name": "huge"},
        {"id": 1, "op": "sum", "inputs": [0], "attrs": {"axes": [0, 1]}}], "outputs": [1]}"#;
    let model = Model::new(remat_core::read_graph(doc).unwrap()).unwrap();
    let err = model.init_params(0).unwrap_err().to_string();
    assert!(err.contains("parameter \"huge\" [1000000, 1000000] f64"), "{err}");
    assert!(err.contains("8000000000000 bytes"), "{err}");

    // Small parameters, a 4 TB product: the kernel's output is reserved before it runs.
    let doc = r#"{"format": "remat.graph", "version": 1, "nodes": [
        {"id": 0, "op": "param", "shape": [1000000, 1], "dtype": "f32", "name": "a"},
        {"id": 1, "op": "param", "shape": [1, 1000000], "dtype": "f32", "name": "b"},
        {"id": 2, "op": "matmul", "inputs": [0, 1]},
        {"id": 3, "op": "sum", "inputs": [2], "attrs": {"axes": [0, 1]}}], "outputs": [3]}"#;
    let model = Model::new(remat_core::read_graph(doc).unwrap()).unwrap();
    let params = model.init_params(0).unwrap();
    let err = model.step(&mut CpuBackend::new(), &params, &Feeds::new()).unwrap_err().to_string();
    assert!(err.contains("the output of node %2 (matmul), [1000000, 1000000] f32"), "{err}");
}

/// An optimizer's state belongs to the parameters it first stepped: another model's parameters,
/// as many but smaller, are refused by name instead of being updated in part.
#[test]
fn optimizer_state_from_another_model_is_refused() {
    let (big, mut big_params) = mlp(vec![4, 8, 2]);
    let (small, mut small_params) = mlp(vec![4, 6, 2]);
    let g_big = grads(&big, &big_params, vec![4, 8, 2]);
    let g_small = grads(&small, &small_params, vec![4, 6, 2]);
    let before = small_params.clone();

    let mut adam = AdamW::new(1e-2);
    adam.step(&mut big_params, &g_big).unwrap();
    let err = adam.step(&mut small_params, &g_small).unwrap_err().to_string();
    assert!(err.contains("belongs to other parameters") && err.contains("[4, 6]") && err.contains("[4, 8]"), "{err}");
    assert_eq!(small_params, before, "nothing was updated");

    let mut sgd = Sgd::new(0.1).with_momentum(0.9);
    sgd.step(&mut big_params, &g_big).unwrap();
    let err = sgd.step(&mut small_params, &g_small).unwrap_err().to_string();
    assert!(err.contains("the SGD state belongs to other parameters"), "{err}");
    assert_eq!(small_params, before);
}

/// Hyperparameters no update can use are errors naming the setting.
#[test]
fn unusable_hyperparameters_are_refused() {
    let (model, mut params) = mlp(vec![4, 8, 2]);
    let g = grads(&model, &params, vec![4, 8, 2]);
    for (setting, set) in [
        ("lr", Box::new(|o: &mut AdamW| o.lr = f64::NAN) as Box<dyn Fn(&mut AdamW)>),
        ("beta1", Box::new(|o: &mut AdamW| o.beta1 = 1.0)),
        ("beta2", Box::new(|o: &mut AdamW| o.beta2 = -0.1)),
        ("eps", Box::new(|o: &mut AdamW| o.eps = 0.0)),
        ("weight_decay", Box::new(|o: &mut AdamW| o.weight_decay = f64::INFINITY)),
    ] {
        let mut opt = AdamW::new(1e-3);
        set(&mut opt);
        let err = opt.step(&mut params, &g).unwrap_err();
        assert!(matches!(&err, Error::Config { setting: s, .. } if s == setting), "{setting}: {err:?}");
        assert!(err.to_string().starts_with(&format!("optimizer setting `{setting}` is ")), "{setting}: {err}");
    }
    let mut sgd = Sgd::new(f64::NAN);
    let err = sgd.step(&mut params, &g).unwrap_err();
    assert!(matches!(&err, Error::Config { setting, .. } if setting == "lr"), "{err:?}");
}

/// Rewrites the metadata of a safetensors file.
fn edit_metadata(path: &PathBuf, key: &str, value: &str) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header["__metadata__"][key] = serde_json::Value::String(value.to_string());
    let mut text = serde_json::to_vec(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(&bytes[8 + n..]);
    std::fs::write(path, out).unwrap();
}

/// A training state is validated on load: a NaN learning rate or a step counter at its limit
/// is refused, one step short of it trains on with finite weights.
#[test]
fn training_states_are_validated_on_load() {
    let cfg =
        GptConfig { batch: 1, seq: 4, d_model: 8, heads: 2, layers: 1, vocab: 7, dropout: 0.0, dtype: DType::F32 };
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let params = model.init_params(1).unwrap();
    let path = temp("state.safetensors");
    save_state(&path, &params, &AdamW::new(1e-3), Progress { step: 0, seed: 1 }).unwrap();

    let mut target = model.init_params(2).unwrap();
    let mut opt = AdamW::new(1e-3);
    edit_metadata(&path, "adamw.lr", &f64::NAN.to_bits().to_string());
    let err = load_state(&path, &mut target, &mut opt).unwrap_err();
    assert!(matches!(err, Error::OptimizerState { .. }), "{err:?}");
    assert!(
        err.to_string().ends_with("state.safetensors: optimizer setting `lr` is NaN; it must be finite and >= 0"),
        "{err}"
    );

    save_state(&path, &params, &AdamW::new(1e-3), Progress { step: 0, seed: 1 }).unwrap();
    edit_metadata(&path, "adamw.t", &u64::MAX.to_string());
    let err = load_state(&path, &mut target, &mut opt).unwrap_err();
    assert!(matches!(err, Error::OptimizerState { .. }), "{err:?}");
    assert!(err.to_string().contains("no step can follow it"), "{err}");

    edit_metadata(&path, "adamw.t", &(u64::MAX - 1).to_string());
    load_state(&path, &mut target, &mut opt).unwrap();
    let out = model.step(&mut CpuBackend::new(), &target, &zoo::synthetic_tokens(&cfg, 0).unwrap()).unwrap();
    opt.step(&mut target, &out.grads).unwrap();
    assert!(target.values().iter().all(|v| v.to_f64_vec().iter().all(|x| x.is_finite())), "weights stay finite");
    let err = opt.step(&mut target, &out.grads).unwrap_err();
    assert!(matches!(err, Error::OptimizerState { .. }), "{err:?}");
    assert!(err.to_string().contains("the most it counts"), "{err}");
}

/// Inputs and parameters are fed and saved by name: two of one name are refused when a graph is
/// read, and an input without a name gets one a feed can use.
#[test]
fn leaf_names_are_unique_and_never_missing() {
    let doc = |second: &str| {
        format!(
            r#"{{"format": "remat.graph", "version": 1, "nodes": [
            {{"id": 0, "op": "param", "shape": [2], "dtype": "f32", "name": "w"}},
            {second},
            {{"id": 2, "op": "mul", "inputs": [0, 1]}},
            {{"id": 3, "op": "sum", "inputs": [2], "attrs": {{"axes": [0]}}}}], "outputs": [3]}}"#
        )
    };
    let err = remat_core::read_graph(&doc(r#"{"id": 1, "op": "param", "shape": [2], "dtype": "f32", "name": "w"}"#))
        .unwrap_err()
        .to_string();
    assert!(err.contains("node 1 (param): the name \"w\" is already that of %0 (param)"), "{err}");
    // The reader stops at the first fault in list order: a taken name comes before a later
    // node's own fault, and a name made from an id is taken like a written one.
    let later_fault = doc(r#"{"id": 1, "op": "param", "shape": [2], "dtype": "f32", "name": "w"}"#)
        .replace(r#""axes": [0]"#, r#""axes": "x""#);
    let err = remat_core::read_graph(&later_fault).unwrap_err().to_string();
    assert!(err.contains("node 1 (param): the name \"w\" is already that of %0 (param)"), "{err}");
    let made = doc(r#"{"id": 1, "op": "param", "shape": [2], "dtype": "f32"}"#)
        .replace(r#""name": "w""#, r#""name": "param_1""#);
    let err = remat_core::read_graph(&made).unwrap_err().to_string();
    assert!(err.contains("node 1 (param): the name \"param_1\" is already that of %0 (param)"), "{err}");

    let g = remat_core::read_graph(&doc(r#"{"id": 1, "op": "input", "shape": [2], "dtype": "f32"}"#)).unwrap();
    let model = Model::new(g).unwrap();
    let feeds = Feeds::new().with("input_1", HostTensor::f32([2], vec![1.0, 2.0]).unwrap());
    let out = model.step(&mut CpuBackend::new(), &model.init_params(0).unwrap(), &feeds).unwrap();
    assert!(out.loss.is_finite());
    let named = remat_core::read_graph(
        &doc(r#"{"id": "x", "op": "input", "shape": [2], "dtype": "f32"}"#)
            .replace(r#""inputs": [0, 1]"#, r#""inputs": [0, "x"]"#),
    )
    .unwrap();
    assert_eq!(named.node(named.inputs()[0]).name(), Some("x"), "a string id names its input");
}

/// A graph built by hand with two parameters of one name cannot save a training state that
/// would mix them up: an error, not a panic inside safetensors.
#[test]
fn a_state_of_parameters_sharing_a_name_is_refused() {
    use remat_core::{Graph, Init, Label, Node, Op};
    let mut g = Graph::new();
    for _ in 0..2 {
        g.push(Node {
            op: Op::Param { init: Init::Ones },
            inputs: smallvec![],
            shape: smallvec![2],
            dtype: DType::F32,
            tag: None,
            label: Label::of(Some("w".into()), None),
        });
    }
    let params = Params::init(&g, 0).unwrap();
    let err = save_state(&temp("twice.safetensors"), &params, &AdamW::new(1e-3), Progress { step: 0, seed: 0 })
        .unwrap_err()
        .to_string();
    assert!(err.contains("param `w`: two parameters have this name"), "{err}");
    assert!(g.validate().unwrap_err().to_string().contains("the name \"w\" is already that of %0"));
}

/// A budget given as a value is checked as the parser checks `budget = f`.
#[test]
fn budgets_given_as_values_are_checked() {
    let p = RegionPolicy::parse("save(matmul)").unwrap();
    assert_eq!(p.with_budget(Some(0.25)).unwrap().budget(), Some(0.25));
    assert_eq!(p.with_budget(None).unwrap().budget(), None);
    for bad in [2.0, -0.5, f64::NAN, f64::INFINITY] {
        let err = p.with_budget(Some(bad)).unwrap_err().to_string();
        assert!(err.contains("`budget` must be in [0, 1]") || err.contains("must be a number"), "{bad}: {err}");
    }
}

/// Deep nesting is a clean error at any depth, never a stack overflow.
#[test]
fn deeply_nested_policies_are_clean_errors() {
    for open in ["[", "save(", "rules(must_save = "] {
        let text = open.repeat(50_000);
        let err = RegionPolicy::parse(&text).unwrap_err().to_string();
        assert!(err.contains("nested more than 64 levels deep"), "{open}: {}", &err[..err.len().min(200)]);
    }
}

/// A partition graph plans as its joint graph does (the `remat` command plans `remat.graph`
/// documents from it alone); one that is not a joint graph's — built by hand or read from a
/// `remat.joint` document — is checked first, and what the planner cannot read is an error naming
/// the node, never a panic or a wrong peak.
#[test]
fn partition_graphs_that_cannot_be_planned_are_refused_naming_the_node() {
    use remat_core::{NodeId, Plan};
    use remat_core::{PGraph, PNode};
    let plan = |pg: &PGraph, n: usize| Plan::with_offload(pg, &vec![true; n], &vec![false; n], &Default::default());
    // x (an input), y = f(x), the loss, then its gradient.
    let mut nodes = vec![
        PNode::new(0, "input", &[], false, 8),
        PNode::new(1, "sin", &[0], false, 8),
        PNode::new(2, "sum", &[1], false, 4),
        PNode::new(3, "cos", &[0, 2], true, 8),
    ];
    nodes[0].flags.resident = true;
    let good = PGraph {
        nodes,
        regions: Vec::new(),
        forward_outputs: vec![NodeId::new(2)],
        backward_outputs: vec![NodeId::new(3)],
        ..PGraph::default()
    };
    let p = plan(&good, 3).unwrap();
    assert_eq!(p.resident(), &[NodeId::new(0)]);
    // x, sin and the loss live at once; sin (read by no gradient) is freed before cos.
    assert_eq!(p.predicted_peak(), 8 + 8 + 4);

    // A forward node after a backward one.
    let mut late = good.clone();
    late.nodes.push(PNode::new(4, "exp", &[1], false, 8));
    let e = plan(&late, 3).unwrap_err();
    assert!(matches!(e, Error::Graph { .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("%4 (exp)") && e.contains("a forward node after a backward one"), "{e}");

    // An input that does not precede its reader, and a saved set of the wrong length.
    let mut cycle = good.clone();
    cycle.nodes[1].inputs[0] = NodeId::new(2);
    let e = plan(&cycle, 3).unwrap_err();
    assert!(matches!(e, Error::Graph { .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("%1 (sin)") && e.contains("does not precede it"), "{e}");
    let e = plan(&good, 4).unwrap_err();
    assert!(matches!(&e, Error::Config { setting, .. } if setting == "saved"), "{e:?}");
    assert!(e.to_string().contains("the forward has 3"), "{e}");

    // Offloading the input: the node named as the partition graph names it.
    let mut offloaded = vec![false; 3];
    offloaded[0] = true;
    let e = Plan::with_offload(&good, &[true; 3], &offloaded, &Default::default()).unwrap_err().to_string();
    assert!(e.contains("%0 (input)") && e.contains("cannot be offloaded"), "{e}");
}

/// The message of a panic `f` raises (none: the test fails).
fn panic_message(f: impl FnOnce()) -> String {
    let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("it panics");
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => payload.downcast_ref::<&str>().map_or_else(|| "<not text>".into(), |s| s.to_string()),
    }
}

/// A tensor used after its trace finished panics saying so, for every kind of use (it once
/// indexed the taken graph: "index out of bounds: the len is 0"); `{:?}` never panics.
#[test]
fn a_tensor_used_after_finish_says_its_trace_is_finished() {
    use remat_core::Trace;
    let finished = |fail: bool| {
        let trace = Trace::new();
        let x = trace.input("x", &[4, 8], DType::F32);
        let h = x.tanh();
        let out = if fail { h.matmul(&x) } else { h.sum_all() };
        assert_eq!(trace.finish(&out).is_ok(), !fail);
        (x, h)
    };
    for fail in [false, true] {
        let (x, h) = finished(fail);
        type Use<'a> = (&'a str, Box<dyn FnOnce() + 'a>);
        let uses: Vec<Use<'_>> = vec![
            ("shape()", Box::new(|| drop(h.shape()))),
            (
                "dtype()",
                Box::new(|| {
                    let _ = h.dtype();
                }),
            ),
            (
                "rank()",
                Box::new(|| {
                    let _ = h.rank();
                }),
            ),
            (
                "tag()",
                Box::new(|| {
                    let _ = h.tag();
                }),
            ),
            ("name()", Box::new(|| drop(h.name("late")))),
            ("tanh()", Box::new(|| drop(h.tanh()))),
            ("add", Box::new(|| drop(&h + &x))),
            ("times a scalar", Box::new(|| drop(&h * 2.0))),
            ("reshape", Box::new(|| drop(h.reshape(&[32])))),
            ("arange_like", Box::new(|| drop(h.arange_like(0.0, 1.0, 3, DType::I64)))),
        ];
        for (what, use_it) in uses {
            let message = panic_message(use_it);
            assert!(
                message.starts_with("this tensor's trace is finished"),
                "{what} (failed finish: {fail}): {message}"
            );
            assert!(!message.contains("index out of bounds"), "{message}");
        }
        assert_eq!(format!("{h:?}"), "<tensor %1 of a finished trace>");
    }
}

/// The graph from the issue: `x` is read, `unused` is declared and read by nothing.
fn model_with_an_unused_input() -> (Model, Params) {
    use remat_core::Trace;
    let trace = Trace::new();
    let x = trace.input("x", &[2, 3], DType::F32);
    let _unused = trace.input("unused", &[2], DType::F32);
    let w = trace.param("w", &[3, 4], DType::F32);
    let logits = x.matmul(&w).name("logits");
    let model = Model::new(trace.finish(&logits.sum_all()).unwrap()).unwrap();
    let params = model.init_params(0).unwrap();
    (model, params)
}

/// Every feed is checked against the declared inputs, read by the plan or not; an unknown name
/// is an error naming it.
#[test]
fn an_unused_input_fed_a_wrong_value_is_refused() {
    let (model, params) = model_with_an_unused_input();
    let infer = model.inference(&["logits"]).unwrap();
    let mut cpu = CpuBackend::new();
    let x = || HostTensor::f32([2, 3], vec![0.5; 6]).unwrap();
    let with = |name: &str, value: HostTensor| Feeds::new().with("x", x()).with(name, value);

    // Before the check, these ran and returned the logits.
    let cases = [
        (with("unused", HostTensor::i64([2], vec![1, 2]).unwrap()), "input `unused`: declared [2] f32, got [2] i64"),
        (with("unused", HostTensor::f32([3], vec![0.0; 3]).unwrap()), "input `unused`: declared [2] f32, got [3] f32"),
        (with("unsued", HostTensor::f32([2], vec![0.0; 2]).unwrap()), "input `unsued`: not an input of the graph"),
    ];
    for (feeds, expected) in &cases {
        let err = infer.run(&mut cpu, &params, feeds).unwrap_err().to_string();
        assert!(err.starts_with(expected), "{err}");
        let err = model.step(&mut cpu, &params, feeds).unwrap_err().to_string();
        assert!(err.starts_with(expected), "Model::step: {err}");
    }
    // A right value for it, or none, is fine; the logits are x·w either way.
    let w = params.get("w").unwrap().to_f32_vec();
    let expected: Vec<f32> = (0..8).map(|k| (0..3).map(|i| 0.5 * w[i * 4 + k % 4]).sum()).collect();
    for feeds in [Feeds::new().with("x", x()), with("unused", HostTensor::f32([2], vec![7.0; 2]).unwrap())] {
        let out = infer.run(&mut cpu, &params, &feeds).unwrap();
        let got = out.values[0].to_f32_vec();
        assert!(got.iter().zip(&expected).all(|(a, b)| (a - b).abs() < 1e-6), "{got:?} vs {expected:?}");
    }
}
