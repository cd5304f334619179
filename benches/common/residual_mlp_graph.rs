//! A `remat.graph` document of a residual MLP: `layers` layers `h + tanh(h · w)` on a [4, 8]
//! input, four nodes each (the weight, the matmul, the tanh, the add), then the sum — the
//! end-to-end bench's 10⁶-node `remat.graph` (250 000 layers), and a test's small one.

/// The document's text.
pub fn residual_mlp_graph(layers: usize) -> String {
    let mut nodes = vec![r#"{"id": 0, "op": "input", "shape": [4, 8], "dtype": "f32", "name": "x"}"#.to_string()];
    let mut h = 0;
    for l in 0..layers {
        let w = nodes.len();
        nodes.push(format!(r#"{{"id": {w}, "op": "param", "shape": [8, 8], "dtype": "f32", "name": "w{l}"}}"#));
        nodes.push(format!(r#"{{"id": {}, "op": "matmul", "inputs": [{h}, {w}]}}"#, w + 1));
        nodes.push(format!(r#"{{"id": {}, "op": "tanh", "inputs": [{}]}}"#, w + 2, w + 1));
        nodes.push(format!(r#"{{"id": {}, "op": "add", "inputs": [{h}, {}]}}"#, w + 3, w + 2));
        h = w + 3;
    }
    let loss = nodes.len();
    nodes.push(format!(r#"{{"id": {loss}, "op": "sum", "inputs": [{h}], "attrs": {{"axes": [0, 1]}}}}"#));
    format!(
        "{{\"format\": \"remat.graph\", \"version\": 1, \"nodes\": [\n{}\n], \"outputs\": [{loss}]}}\n",
        nodes.join(",\n")
    )
}
