//! A `remat.joint` document shaped like the joint graph PyTorch 2.15's partitioner receives for
//! a deep residual MLP (`x + fc2(gelu(fc1(x)))` per layer, D=64, hidden 256, input [4, 16, 64];
//! `shared/fixtures/torch/deep_mlp_32__none.json` is its 32-layer instance): FX-style string ids,
//! views, transposes of weights computed in the forward, 36 nodes a layer, untagged.

use std::fmt::Write as _;

struct Doc {
    out: String,
    first: bool,
}

impl Doc {
    #[allow(clippy::too_many_arguments)]
    fn node(
        &mut self,
        id: &str,
        op: &str,
        inputs: &[&str],
        backward: bool,
        shape: &[usize],
        flops: u64,
        flags: &[&str],
    ) {
        if !self.first {
            self.out += ",\n";
        }
        self.first = false;
        let inputs: Vec<String> = inputs.iter().map(|i| format!("\"{i}\"")).collect();
        let flags: Vec<String> = flags.iter().map(|f| format!("\"{f}\"")).collect();
        let _ = write!(
            self.out,
            "{{\"id\":\"{id}\",\"op\":\"{op}\",\"inputs\":[{}],\"phase\":\"{}\",\"shape\":{shape:?},\"dtype\":\"f32\",\"flops\":{flops},\"flags\":[{}]}}",
            inputs.join(","),
            if backward { "backward" } else { "forward" },
            flags.join(",")
        );
    }
}

/// The document for `layers` layers (2 + 36 × layers nodes).
pub fn deep_mlp_joint(layers: usize) -> String {
    let (b, t, d, h) = (4usize, 16usize, 64usize, 256usize);
    let rows = b * t;
    let mut doc = Doc { out: String::from("{\"format\":\"remat.joint\",\"version\":1,\"nodes\":[\n"), first: true };
    doc.node("x", "input", &[], false, &[b, t, d], 0, &[]);
    for l in 0..layers {
        for (k, shape) in [vec![h, d], vec![h], vec![d, h], vec![d]].into_iter().enumerate() {
            doc.node(&format!("w{l}_{k}"), "param", &[], false, &shape, 0, &[]);
        }
    }
    let mm = |m: usize, k: usize, n: usize| (2 * m * k * n) as u64;
    let mut x = "x".to_string();
    for l in 0..layers {
        let v = |s: &str| format!("{s}_{l}");
        doc.node(&v("view"), "aten.view.default", &[&x], false, &[rows, d], 0, &["view"]);
        doc.node(&v("t1"), "aten.t.default", &[&format!("w{l}_0")], false, &[d, h], 0, &["view"]);
        doc.node(
            &v("addmm"),
            "aten.addmm.default",
            &[&format!("w{l}_1"), &v("view"), &v("t1")],
            false,
            &[rows, h],
            mm(rows, d, h),
            &["compute_intensive"],
        );
        doc.node(&v("view_h"), "aten.view.default", &[&v("addmm")], false, &[b, t, h], 0, &["view"]);
        doc.node(&v("gelu"), "aten.gelu.default", &[&v("view_h")], false, &[b, t, h], (rows * h) as u64, &[]);
        doc.node(&v("view_g"), "aten.view.default", &[&v("gelu")], false, &[rows, h], 0, &["view"]);
        doc.node(&v("t2"), "aten.t.default", &[&format!("w{l}_2")], false, &[h, d], 0, &["view"]);
        doc.node(
            &v("addmm_1"),
            "aten.addmm.default",
            &[&format!("w{l}_3"), &v("view_g"), &v("t2")],
            false,
            &[rows, d],
            mm(rows, h, d),
            &["compute_intensive"],
        );
        doc.node(&v("view_o"), "aten.view.default", &[&v("addmm_1")], false, &[b, t, d], 0, &["view"]);
        doc.node(&v("add"), "aten.add.Tensor", &[&x, &v("view_o")], false, &[b, t, d], (rows * d) as u64, &[]);
        // Tangent-independent pieces of the gradient, computed in the forward.
        doc.node(&v("t2t"), "aten.t.default", &[&v("t2")], false, &[d, h], 0, &["view"]);
        doc.node(&v("t1t"), "aten.t.default", &[&v("t1")], false, &[h, d], 0, &["view"]);
        x = v("add");
    }
    doc.node("tangents_1", "tangent", &[], true, &[b, t, d], 0, &["tangent"]);
    let mut g = "tangents_1".to_string();
    let mut grads = Vec::new();
    for l in (0..layers).rev() {
        let v = |s: &str| format!("{s}_{l}");
        let input_view = if l == 0 { "view_0".to_string() } else { format!("view_{l}") };
        doc.node(&v("g_view"), "aten.view.default", &[&g], true, &[rows, d], 0, &["view"]);
        doc.node(
            &v("g_mm"),
            "aten.mm.default",
            &[&v("g_view"), &v("t2t")],
            true,
            &[rows, h],
            mm(rows, d, h),
            &["compute_intensive"],
        );
        doc.node(&v("g_t"), "aten.t.default", &[&v("g_view")], true, &[d, rows], 0, &["view"]);
        doc.node(
            &v("g_mm1"),
            "aten.mm.default",
            &[&v("g_t"), &v("view_g")],
            true,
            &[d, h],
            mm(d, rows, h),
            &["compute_intensive"],
        );
        doc.node(&v("g_w3"), "aten.t.default", &[&v("g_mm1")], true, &[h, d], 0, &["view"]);
        doc.node(&v("g_sum"), "aten.sum.dim_IntList", &[&v("g_view")], true, &[1, d], (rows * d) as u64, &[]);
        doc.node(&v("g_b3"), "aten.view.default", &[&v("g_sum")], true, &[d], 0, &["view"]);
        doc.node(&v("g_w3t"), "aten.t.default", &[&v("g_w3")], true, &[d, h], 0, &["view"]);
        doc.node(&v("g_vh"), "aten.view.default", &[&v("g_mm")], true, &[b, t, h], 0, &["view"]);
        doc.node(
            &v("g_gelu"),
            "aten.gelu_backward.default",
            &[&v("g_vh"), &v("view_h")],
            true,
            &[b, t, h],
            (rows * h) as u64,
            &[],
        );
        doc.node(&v("g_view2"), "aten.view.default", &[&v("g_gelu")], true, &[rows, h], 0, &["view"]);
        doc.node(
            &v("g_mm2"),
            "aten.mm.default",
            &[&v("g_view2"), &v("t1t")],
            true,
            &[rows, d],
            mm(rows, h, d),
            &["compute_intensive"],
        );
        doc.node(&v("g_t2"), "aten.t.default", &[&v("g_view2")], true, &[h, rows], 0, &["view"]);
        doc.node(
            &v("g_mm3"),
            "aten.mm.default",
            &[&v("g_t2"), &input_view],
            true,
            &[h, d],
            mm(h, rows, d),
            &["compute_intensive"],
        );
        doc.node(&v("g_w1"), "aten.t.default", &[&v("g_mm3")], true, &[d, h], 0, &["view"]);
        doc.node(&v("g_sum2"), "aten.sum.dim_IntList", &[&v("g_view2")], true, &[1, h], (rows * h) as u64, &[]);
        doc.node(&v("g_b1"), "aten.view.default", &[&v("g_sum2")], true, &[h], 0, &["view"]);
        doc.node(&v("g_w1t"), "aten.t.default", &[&v("g_w1")], true, &[h, d], 0, &["view"]);
        doc.node(&v("g_vx"), "aten.view.default", &[&v("g_mm2")], true, &[b, t, d], 0, &["view"]);
        doc.node(&v("g_add"), "aten.add.Tensor", &[&g, &v("g_vx")], true, &[b, t, d], (rows * d) as u64, &[]);
        grads.extend([v("g_w1t"), v("g_b1"), v("g_w3t"), v("g_b3")]);
        g = v("g_add");
    }
    let outputs: Vec<String> = grads.iter().map(|g| format!("\"{g}\"")).collect();
    let _ = write!(doc.out, "\n],\n\"forward_outputs\":[\"{x}\"],\n\"backward_outputs\":[{}]}}\n", outputs.join(","));
    doc.out
}
