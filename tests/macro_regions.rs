//! Region instances opened by `#[checkpoint]` calls: fresh per call, nested, spanning helpers,
//! methods and every kind of signature, and closed only after the body's value is computed.

use remat::prelude::*;
use remat::{DType, Graph, PolicySource, RegionId};
use std::borrow::Borrow;

fn setup() -> (Trace, Tensor, Tensor) {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[3, 3], DType::F32);
    (trace, x, w)
}

/// `(op, region, policy)` of every node.
fn tags(graph: &Graph) -> Vec<(&'static str, Option<(u32, Policy)>)> {
    graph.nodes().iter().map(|n| (n.op.name(), n.tag.map(|t| (t.region.raw(), t.policy)))).collect()
}

#[checkpoint(policy = save(matmul))]
fn layer(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).relu()
}

#[test]
fn each_call_opens_a_fresh_region() {
    let (trace, x, w) = setup();
    let h = layer(&x, &w);
    let y = layer(&h, &w);
    let graph = trace.snapshot();
    assert_eq!(
        tags(&graph)[2..],
        [
            ("matmul", Some((0, Policy::MustSave))),
            ("relu", Some((0, Policy::PreferRecompute))),
            ("matmul", Some((1, Policy::MustSave))),
            ("relu", Some((1, Policy::PreferRecompute))),
        ]
    );
    assert_ne!(h.tag().unwrap().region, y.tag().unwrap().region);
    assert_eq!(graph.regions().len(), 2);
    assert!(graph.regions().iter().all(|r| r.parent.is_none() && r.name == "layer"));
    // Outside any region, ops are untagged again.
    let loss = y.sum_all();
    assert_eq!(loss.tag(), None);
}

#[checkpoint(policy = save_all)]
fn block(x: &Tensor, w: &Tensor) -> Tensor {
    let h = x.exp();
    let h = layer(&h, w);
    h.tanh()
}

#[test]
fn nested_call_opens_a_child_region_with_its_own_policy() {
    let (trace, x, w) = setup();
    block(&x, &w);
    let graph = trace.snapshot();
    assert_eq!(
        tags(&graph)[2..],
        [
            ("exp", Some((0, Policy::PreferSave))),
            ("matmul", Some((1, Policy::MustSave))),
            ("relu", Some((1, Policy::PreferRecompute))),
            ("tanh", Some((0, Policy::PreferSave))),
        ]
    );
    assert_eq!(graph.region(RegionId::new(0)).name, "block");
    assert_eq!(graph.region(RegionId::new(0)).parent, None);
    assert_eq!(graph.region(RegionId::new(1)).name, "layer");
    assert_eq!(graph.region(RegionId::new(1)).parent, Some(RegionId::new(0)));
}

/// Not checkpointed: its ops belong to whichever region calls it.
fn helper(x: &Tensor) -> Tensor {
    (x * 2.0).sigmoid()
}

#[checkpoint(policy = recompute(sigmoid))]
fn uses_helper(x: &Tensor) -> Tensor {
    helper(x).neg()
}

#[test]
fn helper_ops_carry_the_callers_region() {
    let (trace, x, _) = setup();
    uses_helper(&x);
    let graph = trace.snapshot();
    assert_eq!(
        tags(&graph)[2..],
        [
            ("constant", Some((0, Policy::PreferSave))),
            ("mul", Some((0, Policy::PreferSave))),
            ("sigmoid", Some((0, Policy::MustRecompute))),
            ("neg", Some((0, Policy::PreferSave))),
        ]
    );
    // The same helper outside a region records untagged ops.
    helper(&x);
    assert!(trace.snapshot().nodes()[6..].iter().all(|n| n.tag.is_none()));
}

struct Mlp {
    w: Tensor,
    calls: usize,
}

impl Mlp {
    /// Doc comments and other attributes stay on the method.
    #[checkpoint(policy = save(matmul))]
    #[inline]
    fn forward(&self, x: &Tensor) -> Tensor {
        x.matmul(&self.w).gelu()
    }

    #[checkpoint(policy = save_all)]
    fn forward_mut(&mut self, x: &Tensor) -> Tensor {
        self.calls += 1;
        self.forward(x).exp()
    }

    #[checkpoint]
    fn consume(self, x: Tensor) -> Tensor {
        x.matmul(&self.w)
    }
}

#[test]
fn methods_open_regions() {
    let (trace, x, w) = setup();
    let mut mlp = Mlp { w, calls: 0 };
    mlp.forward(&x);
    mlp.forward_mut(&x);
    assert_eq!(mlp.calls, 1);
    mlp.consume(x);
    let graph = trace.snapshot();
    assert_eq!(
        tags(&graph)[2..],
        [
            ("matmul", Some((0, Policy::MustSave))),
            ("gelu", Some((0, Policy::PreferRecompute))),
            ("matmul", Some((2, Policy::MustSave))),
            ("gelu", Some((2, Policy::PreferRecompute))),
            ("exp", Some((1, Policy::PreferSave))),
            ("matmul", Some((3, Policy::PreferRecompute))),
        ]
    );
    assert_eq!(graph.region(RegionId::new(2)).parent, Some(RegionId::new(1)));
    assert_eq!(graph.region(RegionId::new(1)).name, "forward_mut");
}

#[checkpoint(policy = save(add))]
#[allow(clippy::needless_lifetimes)] // explicit on purpose: the macro keeps them
fn generic<'a, T, const N: usize>(xs: [&'a Tensor; N], extra: impl Borrow<Tensor>, _marker: T) -> (Tensor, &'a Tensor)
where
    T: Copy + std::fmt::Debug,
{
    let mut sum = xs[0].clone();
    for x in &xs[1..] {
        sum = &sum + *x;
    }
    (sum.matmul(extra.borrow()), xs[0])
}

#[test]
fn generics_lifetimes_where_clauses_and_impl_trait() {
    let (trace, x, w) = setup();
    let (y, first) = generic([&x, &x, &x], w.matmul(&w), 7u8);
    assert_eq!(first.id(), x.id());
    let graph = trace.snapshot();
    assert_eq!(
        tags(&graph)[2..],
        [
            ("matmul", None),
            ("add", Some((0, Policy::MustSave))),
            ("add", Some((0, Policy::MustSave))),
            ("matmul", Some((0, Policy::PreferRecompute))),
        ]
    );
    assert_eq!(y.shape(), vec![4, 3]);
}

#[derive(Debug, PartialEq)]
struct TooSmall;

#[checkpoint(policy = save(exp))]
fn early(x: &Tensor, bail: bool) -> Result<Tensor, TooSmall> {
    let h = x.exp();
    if bail {
        return Ok(h.neg());
    }
    let checked: Result<Tensor, TooSmall> = if x.rank() > 5 { Err(TooSmall) } else { Ok(h.tanh()) };
    let t = checked?;
    Ok(t.abs())
}

#[checkpoint]
fn fails(x: &Tensor) -> Result<Tensor, TooSmall> {
    let _ = x.sqrt();
    Err(TooSmall)?;
    Ok(x.clone())
}

#[test]
fn return_and_question_mark_compute_inside_the_region() {
    let (trace, x, _) = setup();
    early(&x, true).unwrap();
    early(&x, false).unwrap();
    assert_eq!(fails(&x).unwrap_err(), TooSmall);
    // The region closed on every path: this op is untagged.
    assert_eq!(x.log().tag(), None);
    let graph = trace.snapshot();
    assert_eq!(
        tags(&graph)[2..],
        [
            ("exp", Some((0, Policy::MustSave))),
            ("neg", Some((0, Policy::PreferRecompute))),
            ("exp", Some((1, Policy::MustSave))),
            ("tanh", Some((1, Policy::PreferRecompute))),
            ("abs", Some((1, Policy::PreferRecompute))),
            ("sqrt", Some((2, Policy::PreferRecompute))),
            ("log", None),
        ]
    );
}

#[checkpoint(policy = save(matmul))]
fn deep(x: &Tensor, w: &Tensor, depth: usize) -> Tensor {
    let h = x.matmul(w);
    if depth == 0 {
        h
    } else {
        deep(&h.relu(), w, depth - 1)
    }
}

#[test]
fn traced_graph_has_no_untagged_op_inside_a_region() {
    let (trace, x, w) = setup();
    let h = block(&x, &w);
    let h = deep(&h, &w, 3);
    let h = layer(&h, &w) + &x;
    let loss = h.sum_all();
    let graph = trace.finish(&loss).unwrap();
    let regions = graph.regions();
    assert_eq!(regions.len(), 7);
    // Recursion nests: each `deep` is the child of the previous one.
    for (i, r) in regions.iter().enumerate().skip(3).take(3) {
        assert_eq!((r.name.as_str(), r.parent), ("deep", Some(RegionId::new(i as u32 - 1))));
    }
    // Every op recorded by the checkpointed functions is tagged; only the test's own `+` and
    // `sum_all`, recorded after the last region closed, are not.
    let nodes = graph.nodes();
    let (inside, outside) = nodes.split_at(nodes.len() - 2);
    for node in inside.iter().filter(|n| !n.op.info().leaf) {
        let tag = node.tag.unwrap_or_else(|| panic!("untagged {} at {:?}", node.op.name(), node.loc()));
        assert_ne!(tag.source, PolicySource::Explicit);
        assert!(tag.region.raw() < 7);
    }
    assert!(inside.iter().filter(|n| n.op.info().leaf).all(|n| n.tag.is_none()));
    assert_eq!(outside.iter().map(|n| (n.op.name(), n.tag)).collect::<Vec<_>>(), [("add", None), ("sum", None)]);
}

/// A helper called from several blocks: the error names the helper's line and which block
/// instance called it.
fn project(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w)
}

#[checkpoint(policy = save(matmul))]
fn wide_block(x: &Tensor, w: &Tensor, wide: &Tensor) -> Tensor {
    let h = project(x, w).relu();
    // The second call slices more columns than there are.
    project(&h.slice(1, 0, wide.shape()[0]), wide)
}

#[test]
fn a_shape_error_names_the_region_instance() {
    let (trace, x, w) = setup();
    let fine = trace.param("fine", &[3, 3], DType::F32);
    let h = wide_block(&x, &w, &fine);
    let bad = trace.param("bad", &[5, 2], DType::F32);
    let y = wide_block(&h, &w, &bad);
    let err = trace.finish(&y.sum_all()).unwrap_err().to_string();
    assert!(err.starts_with("slice at ") || err.starts_with("matmul at "), "{err}");
    assert!(err.contains("in region wide_block #1:"), "{err}");
}
