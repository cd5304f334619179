//! Documents as other frameworks export them: ids of their own, every dtype they use, factory
//! nodes, errors a person can act on, and reports that cannot break on what a document holds.

use remat_core::{check, partition, DocId, PGraph, StorageType};
use remat_core::{dot, Report};
use remat_core::{Action, Budget, Reason, Strategy};
use serde_json::Value;

fn joint(nodes: &[&str], forward_outputs: &str) -> String {
    format!(
        r#"{{"format": "remat.joint", "version": 1, "nodes": [{}], "forward_outputs": {forward_outputs}}}"#,
        nodes.join(",\n")
    )
}

/// x (input), w (param), h = mm(x, w) and its gradient, with string ids.
fn named_nodes() -> Vec<&'static str> {
    vec![
        r#"{"id": "primals_1", "op": "input", "phase": "forward", "shape": [4, 8], "dtype": "f32"}"#,
        r#"{"id": "primals_2", "op": "param", "phase": "forward", "shape": [8, 8], "dtype": "f32"}"#,
        r#"{"id": "mm", "op": "aten.mm.default", "inputs": ["primals_1", "primals_2"], "phase": "forward", "shape": [4, 8], "dtype": "f32", "flops": 512, "flags": ["compute_intensive"]}"#,
        r#"{"id": "relu", "op": "aten.relu.default", "inputs": ["mm"], "phase": "forward", "shape": [4, 8], "dtype": "f32", "flops": 32}"#,
        r#"{"id": "tangents_1", "op": "tangent", "phase": "backward", "shape": [4, 8], "dtype": "f32", "flags": ["tangent"]}"#,
        r#"{"id": "tb", "op": "aten.threshold_backward.default", "inputs": ["tangents_1", "relu"], "phase": "backward", "shape": [4, 8], "dtype": "f32", "flops": 32}"#,
        r#"{"id": "t", "op": "aten.t.default", "inputs": ["primals_1"], "phase": "forward", "shape": [8, 4], "dtype": "f32", "flags": ["view"]}"#,
        r#"{"id": "grad_w", "op": "aten.mm.default", "inputs": ["t", "tb"], "phase": "backward", "shape": [8, 8], "dtype": "f32", "flops": 512, "flags": ["compute_intensive"]}"#,
    ]
}

#[test]
fn string_ids_are_kept_and_printed_as_written() {
    let text = joint(&named_nodes(), r#"["relu"]"#)
        .replace(r#""forward_outputs""#, r#""backward_outputs": ["grad_w"], "forward_outputs""#);
    let g = remat_core::read_joint(&text).unwrap();
    assert_eq!(g.nodes[2].id, DocId::Name("mm".into()));
    for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.5))] {
        let p = partition(&g, strategy).unwrap();
        check(&g, &p).unwrap();
        let report = Report::new(&g, &p);
        let v: Value = serde_json::from_str(&report.json()).unwrap();
        let held: Vec<&str> = v["held"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        assert!(held.contains(&"primals_1") && held.contains(&"relu"), "{held:?}");
        assert!(v["decisions"].as_array().unwrap().iter().all(|d| d["id"].is_string()));
        assert!(report.text().contains("primals_1"));
        assert!(report.dot().contains("primals_1"));
    }
    // Written back, the ids stay strings and the graph reads the same.
    let back = remat_core::write_joint(&g);
    assert!(back.contains(r#""id": "tangents_1""#));
    assert_eq!(remat_core::read_joint(&back).unwrap(), g);
}

#[test]
fn integer_ids_need_not_be_positions_and_may_mix_with_strings() {
    let text = joint(
        &[
            r#"{"id": 10, "op": "input", "phase": "forward", "bytes": 16}"#,
            r#"{"id": "s", "op": "sin", "inputs": [10], "phase": "forward", "bytes": 16, "flops": 4}"#,
            r#"{"id": 7, "op": "cos", "inputs": ["s", 10], "phase": "backward", "bytes": 16}"#,
        ],
        r#"["s"]"#,
    );
    let g = remat_core::read_joint(&text).unwrap();
    assert_eq!(g.nodes[0].id, DocId::Index(10));
    assert_eq!(g.nodes[2].inputs[1].raw(), 0, "inputs resolve to positions");
    let p = partition(&g, Strategy::Respect).unwrap();
    let v: Value = serde_json::from_str(&Report::new(&g, &p).json()).unwrap();
    assert_eq!(v["held"], serde_json::json!([10, "s"]));
}

#[test]
fn ids_are_unique_and_inputs_name_earlier_nodes() {
    let dup = joint(
        &[
            r#"{"id": "a", "op": "input", "phase": "forward", "bytes": 4}"#,
            r#"{"id": "a", "op": "sin", "inputs": ["a"], "phase": "forward", "bytes": 4}"#,
        ],
        r#"["a"]"#,
    );
    let e = remat_core::read_joint(&dup).unwrap_err().to_string();
    assert_eq!(e, r#"node "a" (sin): id "a" is used twice (nodes 0 and 1 in the list)"#);
    let later = joint(
        &[
            r#"{"id": "a", "op": "sin", "inputs": ["b"], "phase": "forward", "bytes": 4}"#,
            r#"{"id": "b", "op": "input", "phase": "forward", "bytes": 4}"#,
        ],
        r#"["a"]"#,
    );
    let e = remat_core::read_joint(&later).unwrap_err().to_string();
    assert!(e.starts_with(r#"node "a" (sin): input "b" is defined later in the list"#), "{e}");
    let missing = joint(&[r#"{"id": "a", "op": "sin", "inputs": ["zz"], "phase": "forward", "bytes": 4}"#], r#"["a"]"#);
    let e = remat_core::read_joint(&missing).unwrap_err().to_string();
    assert!(e.contains(r#"input "zz" is not a node of the document"#), "{e}");
    let bad_output = joint(&[r#"{"id": "a", "op": "input", "phase": "forward", "bytes": 4}"#], r#"["b"]"#);
    assert!(remat_core::read_joint(&bad_output).unwrap_err().to_string().starts_with("forward_outputs: input \"b\""));
}

#[test]
fn remat_graph_takes_the_same_ids() {
    let text = r#"{"format": "remat.graph", "version": 1, "nodes": [
        {"id": "x", "op": "input", "shape": [2, 3], "dtype": "f32"},
        {"id": "w", "op": "param", "shape": [3, 3], "dtype": "f32"},
        {"id": "h", "op": "matmul", "inputs": ["x", "w"]},
        {"id": "loss", "op": "sum", "inputs": ["h"], "attrs": {"axes": [0, 1]}}
    ], "outputs": ["loss"]}"#;
    let (g, ids) = match remat_core::read_document(text).unwrap() {
        remat_core::Document::Graph(g, ids) => (g, ids),
        other => panic!("{other:?}"),
    };
    assert_eq!(g.len(), 4);
    let pg = PGraph::from_joint(&remat_core::JointGraph::new(&g).unwrap()).with_forward_ids(&ids);
    assert_eq!(pg.nodes[2].id, DocId::Name("h".into()));
    let e = remat_core::read_document(&text.replace(r#""inputs": ["x", "w"]"#, r#""inputs": ["x", "ww"]"#))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with(r#"node "h" (matmul): input "ww" is not a node"#), "{e}");
}

/// Integer ids up to 2^64 - 1: relabelling while converting gives what converting and then
/// relabelling gives, keeps each forward node's id, and (below the limit) leaves every id
/// unique; at the limit nothing overflows.
#[test]
fn integer_ids_up_to_the_limit_relabel_alike_in_one_pass_or_two() {
    for top in [7u64, 1 << 40, u64::MAX - 1, u64::MAX] {
        let text = format!(
            r#"{{"format": "remat.graph", "version": 1, "nodes": [
            {{"id": {top}, "op": "input", "shape": [2, 3], "dtype": "f32"}},
            {{"id": 1, "op": "param", "shape": [3, 3], "dtype": "f32"}},
            {{"id": 2, "op": "matmul", "inputs": [{top}, 1]}},
            {{"id": 3, "op": "sum", "inputs": [2], "attrs": {{"axes": [0, 1]}}}}
        ], "outputs": [3]}}"#
        );
        let (g, ids) = match remat_core::read_document(&text).unwrap() {
            remat_core::Document::Graph(g, ids) => (g, ids),
            other => panic!("{other:?}"),
        };
        let joint = remat_core::JointGraph::new(&g).unwrap();
        let one_pass = PGraph::from_joint_with_ids(&joint, &ids);
        assert_eq!(one_pass, PGraph::from_joint(&joint).with_forward_ids(&ids), "top id {top}");
        assert_eq!(one_pass.nodes[0].id, DocId::Index(top));
        assert_eq!(one_pass.nodes[3].id, DocId::Index(3));
        assert!(one_pass.nodes.len() > 4, "the joint graph has backward nodes");
        if top < 1 << 62 {
            let unique: std::collections::HashSet<&DocId> = one_pass.nodes.iter().map(|n| &n.id).collect();
            assert_eq!(unique.len(), one_pass.nodes.len(), "top id {top}");
        }
    }
}

#[test]
fn every_framework_dtype_is_sized() {
    let sizes = [
        ("f64", 8),
        ("f32", 4),
        ("f16", 2),
        ("bf16", 2),
        ("f8e4m3", 1),
        ("f8e5m2", 1),
        ("i64", 8),
        ("i32", 4),
        ("i16", 2),
        ("i8", 1),
        ("u8", 1),
        ("bool", 1),
    ];
    for (name, size) in sizes {
        let text = joint(
            &[&format!(r#"{{"id": 0, "op": "input", "phase": "forward", "shape": [3, 5], "dtype": "{name}"}}"#)],
            "[0]",
        );
        let g = remat_core::read_joint(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(g.nodes[0].bytes, 15 * size, "{name}");
        assert_eq!(g.nodes[0].dtype.map(StorageType::name), Some(name));
    }
    let opaque =
        joint(&[r#"{"id": 0, "op": "input", "phase": "forward", "shape": [3], "dtype": "bytes", "bytes": 40}"#], "[0]");
    assert_eq!(remat_core::read_joint(&opaque).unwrap().nodes[0].bytes, 40);
    let unsized_ = joint(&[r#"{"id": 0, "op": "input", "phase": "forward", "shape": [3], "dtype": "bytes"}"#], "[0]");
    assert!(remat_core::read_joint(&unsized_)
        .unwrap_err()
        .to_string()
        .contains("dtype `bytes` needs an explicit `bytes`"));
    let unknown =
        joint(&[r#"{"id": 0, "op": "input", "phase": "forward", "shape": [3], "dtype": "complex64"}"#], "[0]");
    let e = remat_core::read_joint(&unknown).unwrap_err().to_string();
    assert!(
        e.contains("unknown dtype \"complex64\"")
            && e.contains("f64, f32, f16, bf16, f8e4m3, f8e5m2, i64, i32, i16, i8, u8, bool, bytes"),
        "{e}"
    );
}

#[test]
fn factory_nodes_are_recomputed_for_their_flops_unless_random_or_a_budget_keeps_them() {
    let nodes = [
        r#"{"id": "x", "op": "input", "phase": "forward", "bytes": 64}"#,
        r#"{"id": "scalar_tensor", "op": "aten.scalar_tensor.default", "phase": "forward", "bytes": 4, "flops": 1}"#,
        r#"{"id": "rand", "op": "aten.rand.default", "phase": "forward", "bytes": 64, "flops": 16, "flags": ["random"]}"#,
        r#"{"id": "full", "op": "aten.full.default", "phase": "forward", "bytes": 64, "flops": 16, "flags": ["not_recomputable"]}"#,
        r#"{"id": "mix", "op": "aten.add.Tensor", "inputs": ["x", "rand"], "phase": "forward", "bytes": 64, "flops": 16}"#,
        r#"{"id": "g", "op": "where", "inputs": ["scalar_tensor", "rand", "full", "x"], "phase": "backward", "bytes": 64}"#,
    ];
    let g = remat_core::read_joint(&joint(&nodes, r#"["mix"]"#)).unwrap();
    for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Bytes(1 << 20))] {
        let p = partition(&g, strategy).unwrap();
        check(&g, &p).unwrap();
        let d = |id: &str| *p.decisions.iter().find(|d| g.node(d.node).id == DocId::Name(id.into())).unwrap();
        let scalar = (d("scalar_tensor").action, d("scalar_tensor").reason);
        if strategy.budget().is_some() {
            // A budget with room keeps it: its one FLOP is worth its four bytes.
            assert_eq!(scalar, (Action::Save, Reason::Budget));
        } else {
            assert_eq!(scalar, (Action::Recompute, Reason::Factory));
            assert!(p.recompute_flops >= 1);
        }
        assert_eq!(d("rand").action, Action::Save, "a random factory cannot be replayed");
        assert_eq!(d("full").action, Action::Save, "not_recomputable");
    }
}

#[test]
fn a_must_recompute_view_of_a_parameter_is_no_conflict() {
    // A transposed weight in a region, must_recompute, read by untagged code and by the region.
    let nodes = [
        r#"{"id": "x", "op": "input", "phase": "forward", "bytes": 64}"#,
        r#"{"id": "w", "op": "param", "phase": "forward", "bytes": 64}"#,
        r#"{"id": "t", "op": "aten.t.default", "inputs": ["w"], "phase": "forward", "bytes": 64, "flags": ["view"], "region": 0, "policy": "must_recompute"}"#,
        r#"{"id": "mm", "op": "aten.mm.default", "inputs": ["x", "t"], "phase": "forward", "bytes": 64, "flops": 128, "region": 1, "policy": "prefer_recompute"}"#,
        r#"{"id": "tan", "op": "tangent", "phase": "backward", "bytes": 64, "flags": ["tangent"]}"#,
        r#"{"id": "gx", "op": "aten.mm.default", "inputs": ["tan", "t"], "phase": "backward", "bytes": 64, "grad_of": "mm"}"#,
    ];
    let g = remat_core::read_joint(&joint(&nodes, r#"["mm"]"#)).unwrap();
    for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.0))] {
        let p = partition(&g, strategy).unwrap_or_else(|e| panic!("{strategy}: {e}"));
        check(&g, &p).unwrap();
        assert_eq!(p.saved_bytes, 0, "{strategy}: replaying a view of a parameter is free");
    }
}

#[test]
fn errors_name_node_field_expectation_and_value_on_one_line() {
    let with = |node: &str| remat_core::read_joint(&joint(&[node], "[]")).unwrap_err().to_string();
    assert_eq!(
        with(r#"{"id": "t_3", "op": "aten.t.default", "phase": "forward", "shape": "4x8", "dtype": "f32"}"#),
        r#"node "t_3" (aten.t.default): field "shape": expected an array of non-negative integers, got "4x8""#
    );
    let e = with(r#"{"id": "t_3", "op": "aten.t.default", "phase": "forward", "bytes": 4, "shap": [4]}"#);
    assert!(e.contains(r#"unknown field "shap" (did you mean "shape"?"#), "{e}");
    let e = with(r#"{"id": "t_3", "op": "aten.t.default", "phase": "forward", "bytes": -4}"#);
    assert!(e.contains(r#"field "bytes": expected a non-negative integer, got -4"#), "{e}");
    let e = with(r#"{"id": "t_3", "op": "aten.t.default", "phase": "forward", "bytes": 4, "inputs": [1.5]}"#);
    assert!(e.contains(r#"field "inputs": expected a node id (a string or a non-negative integer), got 1.5"#), "{e}");
    // Control characters are escaped and long strings shortened: always one short line.
    let long = "n".repeat(5000);
    let e = with(&format!(
        r#"{{"id": "a\nb{long}", "op": "x\u0000y", "phase": "forward", "bytes": 4, "flags": ["v\tw"]}}"#
    ));
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.len() < 400, "{} characters", e.len());
    assert!(e.contains("a\\nb") && e.contains("x\\u{0}y") && e.contains('…'), "{e}");
    // Attribute keys of remat.graph suggest the nearest.
    let graph = r#"{"format": "remat.graph", "version": 1, "nodes": [
        {"id": 0, "op": "input", "shape": [2, 3], "dtype": "f32"},
        {"id": 1, "op": "sum", "inputs": [0], "attrs": {"axis": [0, 1]}}], "outputs": [1]}"#;
    let e = remat_core::read_graph(graph).unwrap_err().to_string();
    assert!(e.contains("did you mean `axes`?"), "{e}");
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let text = format!("\u{feff}{}", joint(&[r#"{"id": 0, "op": "input", "phase": "forward", "bytes": 4}"#], "[0]"));
    assert_eq!(remat_core::read_joint(&text).unwrap().len(), 1);
}

#[test]
fn reports_shorten_long_cells_in_text_keep_them_in_json_and_escape_dot() {
    let long = format!("op_{}", "x".repeat(300));
    let evil = r#"a\"b\\c\nd\u0000e"#;
    let nodes = [
        r#"{"id": 0, "op": "input", "phase": "forward", "bytes": 64}"#.to_string(),
        format!(
            r#"{{"id": "{evil}", "op": "{long}", "inputs": [0], "phase": "forward", "bytes": 64, "flops": 1, "name": "{evil}"}}"#
        ),
        format!(r#"{{"id": 2, "op": "g", "inputs": ["{evil}"], "phase": "backward", "bytes": 64}}"#),
    ];
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let g = remat_core::read_joint(&joint(&refs, "[0]")).unwrap();
    let p = partition(&g, Strategy::Respect).unwrap();
    let report = Report::new(&g, &p);
    let text = report.text();
    assert!(text.lines().all(|l| l.chars().count() < 400), "{text}");
    assert!(!text.contains(&long) && text.contains('…'));
    assert!(!text.contains('\u{0}'));
    let v: Value = serde_json::from_str(&report.json()).unwrap();
    assert_eq!(v["saved"][0], "a\"b\\c\nd\u{0}e", "JSON keeps the id whole");
    let d = report.dot();
    assert!(!d.contains('\u{0}'), "{d}");
    assert_dot_parses(&d);
}

/// [`assert_dot_syntax`], then Graphviz itself where it is installed.
fn assert_dot_parses(d: &str) {
    assert_dot_syntax(d);
    assert_graphviz_reads(d);
}

/// A check of the DOT subset remat writes: every quoted string closes on its line (backslash
/// escapes honoured) and braces balance.
fn assert_dot_syntax(d: &str) {
    let mut depth = 0i64;
    for line in d.lines() {
        let mut quoted = false;
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' if quoted => {
                    chars.next();
                }
                '"' => quoted = !quoted,
                '{' if !quoted => depth += 1,
                '}' if !quoted => depth -= 1,
                c if c.is_control() => panic!("control character in {line:?}"),
                _ => {}
            }
        }
        assert!(!quoted, "unterminated string in {line:?}");
        assert!(depth >= 0);
    }
    assert_eq!(depth, 0, "braces balance");
}

#[path = "../../benches/common/require.rs"]
mod require;

/// Where Graphviz is installed (CI installs it), `dot -Tsvg` must accept the file.
fn assert_graphviz_reads(d: &str) {
    match std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(mut child) => {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(d.as_bytes()).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "dot: {}", String::from_utf8_lossy(&out.stderr));
        }
        Err(e) => require::skip("dot", format!("Graphviz's check of the DOT file: `dot` does not start ({e})")),
    }
}

#[test]
fn deeply_nested_regions_render_in_linear_output() {
    // 10^5 levels render in linear output; Graphviz itself reads 3 000 levels (it gives up on
    // clusters nested a few thousand deep, so remat flattens them past 256).
    for depth in [3_000u32, 100_000] {
        nested_regions(depth);
    }
}

fn nested_regions(depth: u32) {
    let mut g = PGraph::default();
    for r in 0..depth {
        g.regions.push(remat_core::PRegion {
            key: r as u64,
            parent: r.checked_sub(1).map(remat_core::RegionId::new),
            name: "r".into(),
            budget: None,
        });
    }
    let mut x = remat_core::PNode::new(0, "input", &[], false, 4);
    x.flags.resident = true;
    g.nodes.push(x);
    let mut inner = remat_core::PNode::new(1, "sin", &[0], false, 4);
    inner.region = Some(remat_core::RegionId::new(depth - 1));
    g.nodes.push(inner);
    g.forward_outputs.push(remat_core::NodeId::new(1));
    let d = dot(&g, None);
    assert_eq!(d.matches("subgraph cluster_r").count(), depth as usize);
    assert!(d.len() < 300 * depth as usize, "{} bytes for {depth} regions", d.len());
    assert!(d.contains("(in r#2998)"), "deep regions name their parent");
    if depth <= 3_000 {
        assert_dot_parses(&d);
    } else {
        assert_dot_syntax(&d);
    }
}

#[test]
fn region_storage_is_sized_by_the_regions_that_exist() {
    let text = r#"{"format": "remat.joint", "version": 1, "nodes": [
        {"id": 0, "op": "input", "phase": "forward", "bytes": 4},
        {"id": 1, "op": "sin", "inputs": [0], "phase": "forward", "bytes": 4, "region": 4294967295, "policy": "prefer_recompute"},
        {"id": 2, "op": "g", "inputs": [1], "phase": "backward", "bytes": 4}], "forward_outputs": [0]}"#;
    let g = remat_core::read_joint(text).unwrap();
    assert_eq!(g.regions.len(), 1);
    assert_eq!(g.regions[0].key, 4294967295);
    let p = partition(&g, Strategy::Respect).unwrap();
    assert!(Report::new(&g, &p).text().contains("r4294967295#4294967295"));
    // Two 2^63-byte values: the total overflows, and that is an error naming the node.
    let huge = r#"{"format": "remat.joint", "version": 1, "nodes": [
        {"id": "a", "op": "input", "phase": "forward", "bytes": 9223372036854775808},
        {"id": "b", "op": "sin", "inputs": ["a"], "phase": "forward", "bytes": 9223372036854775808},
        {"id": "c", "op": "g", "inputs": ["b"], "phase": "backward", "bytes": 4}], "forward_outputs": ["a"]}"#;
    let g = remat_core::read_joint(huge).unwrap();
    let e = partition(&g, Strategy::Budget(Budget::Bytes(0))).unwrap_err();
    assert!(matches!(e, remat_core::Error::Graph { .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.starts_with("\"b\" (sin): the graph's bytes add up past 2^64"), "{e}");
}

#[test]
fn remat_graph_accepts_bool_masks() {
    let text = r#"{"format": "remat.graph", "version": 1, "nodes": [
        {"id": "x", "op": "input", "shape": [2, 3], "dtype": "f32"},
        {"id": "mask", "op": "input", "shape": [2, 3], "dtype": "bool"},
        {"id": "w", "op": "param", "shape": [2, 3], "dtype": "f32"},
        {"id": "h", "op": "mul", "inputs": ["x", "w"]},
        {"id": "z", "op": "constant", "shape": [], "dtype": "f32", "attrs": {"value": 0.0}},
        {"id": "kept", "op": "where", "inputs": ["mask", "h", "z"]},
        {"id": "loss", "op": "sum", "inputs": ["kept"], "attrs": {"axes": [0, 1]}}
    ], "outputs": ["loss"]}"#;
    let g = remat_core::read_graph(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.node(remat_core::NodeId::new(1)).dtype, remat_core::DType::Bool);
    let pg = PGraph::from_joint(&remat_core::JointGraph::new(&g).unwrap());
    assert_eq!(pg.nodes[1].dtype, Some(StorageType::Bool));
    assert_eq!(pg.nodes[1].bytes, 6);
}

#[test]
fn errors_name_the_value_too() {
    let text = joint(
        &[r#"{"id": "t_3", "op": "aten.t.default", "phase": "forward", "bytes": 4, "name": "w_t", "dtype": "f33"}"#],
        "[]",
    );
    let e = remat_core::read_joint(&text).unwrap_err().to_string();
    assert!(e.starts_with(r#"node "t_3" (aten.t.default "w_t"): field "dtype": unknown dtype "f33""#), "{e}");
}
