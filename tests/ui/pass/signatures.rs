//! Methods, generics, lifetimes, `where` clauses, `impl Trait`, attributes and doc comments.
#![deny(missing_docs, unused, clippy::all)]
use remat::prelude::*;
use std::borrow::Borrow;

/// A layer.
pub struct Layer {
    w: Tensor,
    calls: u32,
}

impl Layer {
    /// Documented, inlined, checkpointed.
    #[checkpoint(policy = save(matmul))]
    #[inline]
    #[must_use]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.matmul(&self.w)
    }

    /// `&mut self`.
    #[checkpoint]
    pub fn forward_mut(&mut self, x: &Tensor) -> Tensor {
        self.calls += 1;
        x.matmul(&self.w)
    }
}

/// Generic everything.
#[checkpoint(policy = save_all)]
pub fn generic<'a, T: Borrow<Tensor> + 'a, const N: usize>(xs: &'a [T; N], scale: impl Into<f64>) -> impl Fn() -> usize + 'a
where
    T: Clone,
{
    #![allow(clippy::needless_range_loop)]
    let s = scale.into();
    let _ = xs[0].borrow().exp() * s;
    move || xs.len()
}

/// Any return type, `unsafe` and an ABI.
#[checkpoint]
pub unsafe extern "C" fn unit() {}

fn main() {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[3, 3], DType::F32);
    let mut layer = Layer { w, calls: 0 };
    let _ = layer.forward(&x);
    let _ = layer.forward_mut(&x);
    assert_eq!(generic(&[x.clone(), x], 2.0f32)(), 2);
    // SAFETY: `unit` does nothing.
    unsafe { unit() };
    assert_eq!(layer.calls, 1);
}
