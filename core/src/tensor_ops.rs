//! The ops users call on [`Tensor`]s: methods and operator overloads, one per catalog op.
//!
//! Every method is `#[track_caller]`, so a shape or dtype error names the user's line.

use crate::dtype::DType;
use crate::op::{ArgReduceOp, AttnLayout, BinaryOp, CompareOp, LogicOp, Op, ReduceOp, UnaryOp};
use crate::tensor::Tensor;

/// One method per unary op of the catalog, named and documented by its row.
macro_rules! unary_methods {
    ($( $(#[$doc:meta])* $variant:ident $name:ident; )*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                #[track_caller]
                pub fn $name(&self) -> Tensor {
                    self.unary(UnaryOp::$variant)
                }
            )*
        }
    };
}

remat_catalog::for_each_unary!(unary_methods);

macro_rules! compare_methods {
    ($( $(#[$doc:meta])* $name:ident => $op:ident; )*) => {
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(&self, other: &Tensor) -> Tensor {
                self.apply(Op::Compare(CompareOp::$op), &[other])
            }
        )*
    };
}

impl Tensor {
    /// The unary op `op` elementwise (`x.unary(UnaryOp::Exp)` is `x.exp()`): for code generic
    /// over the [`UnaryOp`] family.
    #[track_caller]
    pub fn unary(&self, op: UnaryOp) -> Tensor {
        self.apply(Op::Unary(op), &[])
    }

    /// Softmax over the last axis.
    #[track_caller]
    pub fn softmax(&self) -> Tensor {
        self.apply(Op::Softmax, &[])
    }

    /// Log-softmax over the last axis.
    #[track_caller]
    pub fn log_softmax(&self) -> Tensor {
        self.apply(Op::LogSoftmax, &[])
    }

    compare_methods! {
        /// `self == other` elementwise, broadcasting: a `bool` tensor.
        eq => Eq;
        /// `self != other` elementwise, broadcasting: a `bool` tensor.
        ne => Ne;
        /// `self < other` elementwise, broadcasting: a `bool` tensor.
        lt => Lt;
        /// `self <= other` elementwise, broadcasting: a `bool` tensor.
        le => Le;
        /// `self > other` elementwise, broadcasting: a `bool` tensor.
        gt => Gt;
        /// `self >= other` elementwise, broadcasting: a `bool` tensor.
        ge => Ge;
    }

    /// `if self { a } else { b }` elementwise for this `bool` tensor, all three broadcast.
    #[track_caller]
    pub fn where_(&self, a: &Tensor, b: &Tensor) -> Tensor {
        self.apply(Op::Where, &[a, b])
    }

    /// `value` where the `bool` `mask` is true, `self` elsewhere (`masked_fill`), broadcasting.
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Tensor {
        mask.apply(Op::Where, &[&self.scalar(value), self])
    }

    /// `self` raised to the constant power `exponent` (small integers exactly, by products).
    #[track_caller]
    pub fn pow(&self, exponent: f64) -> Tensor {
        self.apply(Op::Pow { exponent }, &[])
    }

    /// `len` entries of `axis` from `start` (a view: never saved, its base is).
    #[track_caller]
    pub fn slice(&self, axis: usize, start: usize, len: usize) -> Tensor {
        self.apply(Op::Slice { axis, start, len }, &[])
    }

    /// [`Tensor::slice`] under PyTorch's name.
    #[track_caller]
    pub fn narrow(&self, axis: usize, start: usize, len: usize) -> Tensor {
        self.slice(axis, start, len)
    }

    /// The entries of `axis` at the i64 `indices` `[k]` (in that order, repeats allowed): the
    /// axis becomes `k` long. Out-of-range indices are an error naming the op and the line.
    #[track_caller]
    pub fn index_select(&self, axis: usize, indices: &Tensor) -> Tensor {
        self.apply(Op::IndexSelect { axis }, &[indices])
    }

    /// `torch.gather`: `out[.., j, ..] = self[.., indices[.., j, ..], ..]` along `axis`, for i64
    /// `indices` of this tensor's shape except on `axis`; the result has the indices' shape.
    #[track_caller]
    pub fn gather(&self, axis: usize, indices: &Tensor) -> Tensor {
        self.apply(Op::Gather { axis }, &[indices])
    }

    /// RMS normalisation over the last axis, `x / sqrt(mean(x²) + eps)`, one fused op forward and
    /// backward (multiply by a gain for the affine part).
    #[track_caller]
    pub fn rms_norm(&self, eps: f64) -> Tensor {
        self.apply(Op::RmsNorm { eps }, &[])
    }

    /// Fused attention `softmax(q·kᵀ·scale [+ causal mask])·v` over `q [.., tq, d]`,
    /// `k [.., tk, d]`, `v [.., tk, dv]` (same leading axes), computed block by block without the
    /// `tq × tk` scores (the flash-attention scheme). `causal` masks keys after the query
    /// (`j > i`). The op (`sdpa` in policies; compute-intensive) keeps its output and per-row
    /// log-sum-exp; this returns the output, a view of it.
    #[track_caller]
    pub fn scaled_dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool, scale: f64) -> Tensor {
        Tensor::scaled_dot_product_attention_in(AttnLayout::HeadMajor, q, k, v, causal, scale)
    }

    /// [`Tensor::scaled_dot_product_attention`] with q, k, v and the output laid out as `layout`
    /// says. Token-major operands `[.., t, heads, d]` are what a `[.., t, heads · d]` projection
    /// reshapes to without a transpose, and the output reshapes back the same way: a
    /// transformer's attention then copies no head split.
    ///
    /// ```
    /// # use remat_core::{AttnLayout, DType, Tensor, Trace};
    /// let trace = Trace::new();
    /// let (b, t, heads, dh) = (2, 16, 4, 8);
    /// let x = trace.input("x", &[b, t, heads * dh], DType::F32);
    /// let split = |x: &Tensor| x.reshape(&[b, t, heads, dh]);
    /// let ctx = Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, &split(&x), &split(&x), &split(&x), true, 0.35);
    /// assert_eq!(ctx.reshape(&[b, t, heads * dh]).shape(), vec![b, t, heads * dh]);
    /// ```
    #[track_caller]
    pub fn scaled_dot_product_attention_in(
        layout: AttnLayout,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        causal: bool,
        scale: f64,
    ) -> Tensor {
        let packed = q.apply(Op::Sdpa { causal, scale, layout }, &[k, v]);
        let shape = packed.shape();
        match shape.last() {
            Some(&w) => packed.slice(shape.len() - 1, 0, w - 1),
            None => packed,
        }
    }

    /// Elementwise maximum, broadcasting.
    #[track_caller]
    pub fn maximum(&self, other: &Tensor) -> Tensor {
        self.apply(Op::Binary(BinaryOp::Maximum), &[other])
    }

    /// Elementwise minimum, broadcasting.
    #[track_caller]
    pub fn minimum(&self, other: &Tensor) -> Tensor {
        self.apply(Op::Binary(BinaryOp::Minimum), &[other])
    }

    /// `self && other` for `bool` tensors, broadcasting (also `&a & &b`).
    #[track_caller]
    pub fn logical_and(&self, other: &Tensor) -> Tensor {
        self.apply(Op::Logic(LogicOp::And), &[other])
    }

    /// `self || other` for `bool` tensors, broadcasting (also `&a | &b`).
    #[track_caller]
    pub fn logical_or(&self, other: &Tensor) -> Tensor {
        self.apply(Op::Logic(LogicOp::Or), &[other])
    }

    /// `self != other` for `bool` tensors, broadcasting (also `&a ^ &b`).
    #[track_caller]
    pub fn logical_xor(&self, other: &Tensor) -> Tensor {
        self.apply(Op::Logic(LogicOp::Xor), &[other])
    }

    /// `!self` for a `bool` tensor (also `!&a`).
    #[track_caller]
    pub fn logical_not(&self) -> Tensor {
        self.apply(Op::LogicalNot, &[])
    }

    /// The i64 position of the largest entry along `axis` (the first of ties, or the first NaN).
    /// Routing: kept, never recomputed, unless a tag asks (docs/policies.md).
    #[track_caller]
    pub fn argmax(&self, axis: usize, keepdim: bool) -> Tensor {
        self.apply(Op::ArgReduce { op: ArgReduceOp::Argmax, axis, keepdim }, &[])
    }

    /// The i64 position of the smallest entry along `axis` (the first of ties, or the first
    /// NaN). Routing, like [`Tensor::argmax`].
    #[track_caller]
    pub fn argmin(&self, axis: usize, keepdim: bool) -> Tensor {
        self.apply(Op::ArgReduce { op: ArgReduceOp::Argmin, axis, keepdim }, &[])
    }

    /// The `k` largest entries along `axis`, largest first, and their i64 positions (ties: the
    /// lower position first; NaN ranks above every number). The values are a `gather` of the
    /// positions, so gradients flow to the entries picked; the positions (`topk` in policies) are
    /// routing: kept, never recomputed, unless a tag asks (docs/policies.md).
    ///
    /// ```
    /// # use remat_core::{DType, Trace};
    /// let trace = Trace::new();
    /// let logits = trace.input("router", &[6, 8], DType::F32);
    /// let (weights, experts) = logits.softmax().topk(2, 1);
    /// assert_eq!((weights.shape(), experts.dtype()), (vec![6, 2], DType::I64));
    /// ```
    #[track_caller]
    pub fn topk(&self, k: usize, axis: usize) -> (Tensor, Tensor) {
        let positions = self.apply(Op::Topk { k, axis, largest: true }, &[]);
        (self.gather(axis, &positions), positions)
    }

    /// The `k` smallest entries along `axis`, smallest first, and their positions: [`Tensor::topk`]
    /// from the other end.
    #[track_caller]
    pub fn bottomk(&self, k: usize, axis: usize) -> (Tensor, Tensor) {
        let positions = self.apply(Op::Topk { k, axis, largest: false }, &[]);
        (self.gather(axis, &positions), positions)
    }

    /// The i64 positions that sort `axis` (stable: equal entries keep their order; NaN last
    /// ascending, first descending). Routing, like [`Tensor::topk`].
    #[track_caller]
    pub fn argsort(&self, axis: usize, descending: bool) -> Tensor {
        self.apply(Op::Argsort { axis, descending }, &[])
    }

    /// `axis` sorted, and the positions that sort it ([`Tensor::argsort`] and a `gather`).
    #[track_caller]
    pub fn sort(&self, axis: usize, descending: bool) -> (Tensor, Tensor) {
        let positions = self.argsort(axis, descending);
        (self.gather(axis, &positions), positions)
    }

    /// How many of these i64 ids equal each of `0..bins`: an i64 `[bins]` (an expert's load).
    /// An id outside `0..bins` is an error naming it.
    #[track_caller]
    pub fn bincount(&self, bins: usize) -> Tensor {
        self.apply(Op::Bincount { bins }, &[])
    }

    /// These i64 ids `[..]` as one-hot rows `[.., classes]` of `dtype`. An id outside
    /// `0..classes` is an error naming it.
    #[track_caller]
    pub fn one_hot(&self, classes: usize, dtype: DType) -> Tensor {
        self.apply(Op::OneHot { classes, dtype }, &[])
    }

    /// The running sum along `axis` (floats or i64; i64 wraps like PyTorch's).
    #[track_caller]
    pub fn cumsum(&self, axis: usize) -> Tensor {
        self.apply(Op::Cumsum { axis, reverse: false }, &[])
    }

    /// The running sum along `axis` from its last entry back (`cumsum` of the reversed axis,
    /// reversed): what `cumsum`'s gradient is.
    #[track_caller]
    pub fn reverse_cumsum(&self, axis: usize) -> Tensor {
        self.apply(Op::Cumsum { axis, reverse: true }, &[])
    }

    /// `torch.index_add`: this tensor with `src`'s slices added at the i64 `indices` `[k]` of
    /// `axis` (`src` is this shape with `axis` `k` long; repeated indices add up, in order).
    /// Gradients flow to both: `g` to `self`, `g.index_select(axis, indices)` to `src`.
    #[track_caller]
    pub fn index_add(&self, axis: usize, indices: &Tensor, src: &Tensor) -> Tensor {
        self.apply(Op::IndexAdd { axis }, &[indices, src])
    }

    /// `torch.scatter_add`: this tensor with each element of `src` added at `[.., indices[..], ..]`
    /// along `axis` (i64 `indices` of `src`'s shape, which matches this one on every other axis).
    /// Gradients flow to both: `g` to `self`, `g.gather(axis, indices)` to `src`.
    #[track_caller]
    pub fn scatter_add(&self, axis: usize, indices: &Tensor, src: &Tensor) -> Tensor {
        self.apply(Op::ScatterAdd { axis }, &[indices, src])
    }

    /// `min(max(x, min), max)`.
    #[track_caller]
    pub fn clamp(&self, min: f64, max: f64) -> Tensor {
        self.apply(Op::Clamp { min, max }, &[])
    }

    /// Sum over `axes`.
    #[track_caller]
    pub fn sum(&self, axes: &[usize], keepdim: bool) -> Tensor {
        self.apply(Op::Reduce { op: ReduceOp::Sum, axes: axes.to_vec(), keepdim }, &[])
    }

    /// Sum of all elements, as a scalar.
    #[track_caller]
    pub fn sum_all(&self) -> Tensor {
        self.sum(&(0..self.rank()).collect::<Vec<_>>(), false)
    }

    /// Mean over `axes`.
    #[track_caller]
    pub fn mean(&self, axes: &[usize], keepdim: bool) -> Tensor {
        self.apply(Op::Reduce { op: ReduceOp::Mean, axes: axes.to_vec(), keepdim }, &[])
    }

    /// Mean of all elements, as a scalar.
    #[track_caller]
    pub fn mean_all(&self) -> Tensor {
        self.mean(&(0..self.rank()).collect::<Vec<_>>(), false)
    }

    /// Maximum over `axes`.
    #[track_caller]
    pub fn amax(&self, axes: &[usize], keepdim: bool) -> Tensor {
        self.apply(Op::Reduce { op: ReduceOp::Amax, axes: axes.to_vec(), keepdim }, &[])
    }

    /// Batched matrix product `[.., m, k] · [.., k, n]`, batch dims broadcast.
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        self.apply(Op::Matmul, &[other])
    }

    /// Same elements, new shape (a view).
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        self.apply(Op::Reshape { shape: shape.to_vec() }, &[])
    }

    /// Axes permuted: axis `i` of the result is axis `perm[i]` of `self` (a view).
    #[track_caller]
    pub fn transpose(&self, perm: &[usize]) -> Tensor {
        self.apply(Op::Transpose { perm: perm.to_vec() }, &[])
    }

    /// The last two axes swapped (a view).
    #[track_caller]
    pub fn t(&self) -> Tensor {
        let rank = self.rank();
        let mut perm: Vec<usize> = (0..rank).collect();
        if rank >= 2 {
            perm.swap(rank - 2, rank - 1);
        }
        self.transpose(&perm)
    }

    /// Size-1 (or missing leading) axes broadcast to `shape` (a view).
    #[track_caller]
    pub fn expand(&self, shape: &[usize]) -> Tensor {
        self.apply(Op::Expand { shape: shape.to_vec() }, &[])
    }

    /// `self` and `others` joined along `axis`.
    #[track_caller]
    pub fn concat(&self, others: &[&Tensor], axis: usize) -> Tensor {
        self.apply(Op::Concat { axis }, others)
    }

    /// Layer normalisation over the last axis (no affine part).
    #[track_caller]
    pub fn layer_norm(&self, eps: f64) -> Tensor {
        self.apply(Op::LayerNorm { eps }, &[])
    }

    /// Mean cross-entropy of these logits `[.., C]` against i64 `targets` `[..]`: a scalar.
    #[track_caller]
    pub fn cross_entropy(&self, targets: &Tensor) -> Tensor {
        self.apply(Op::CrossEntropy, &[targets])
    }

    /// Rows of this table `[V, D]` gathered by i64 `ids`: shape `ids.shape + [D]`.
    #[track_caller]
    pub fn embedding(&self, ids: &Tensor) -> Tensor {
        self.apply(Op::Embedding, &[ids])
    }

    /// The values converted to `dtype`: floats round to nearest even (fp8 saturates); to `I64`
    /// truncated toward zero, saturating, NaN to 0; to `Bool`, nonzero is true. No gradient
    /// flows through a cast to `I64` or `Bool`.
    #[track_caller]
    pub fn cast(&self, dtype: DType) -> Tensor {
        self.apply(Op::Cast { dtype }, &[])
    }

    /// Inverted dropout: each element zeroed with probability `p`, the rest scaled by 1/(1-p).
    /// The mask is a pure function of (`seed`, the run's seed, this op, the element), so a
    /// recompute reproduces it.
    #[track_caller]
    pub fn dropout(&self, p: f64, seed: u64) -> Tensor {
        self.apply(Op::Dropout { p, seed, key: 0 }, &[])
    }

    /// `(a · b) * scale_a * scale_b` for fp8 `a`, `b` and one-element f32 scales; f32 result.
    /// The scales are treated as constants by autodiff, as fp8 training recipes do.
    #[track_caller]
    pub fn scaled_matmul(a: &Tensor, b: &Tensor, scale_a: &Tensor, scale_b: &Tensor) -> Tensor {
        a.apply(Op::ScaledMatmul, &[b, scale_a, scale_b])
    }
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:ident) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                self.apply(Op::Binary(BinaryOp::$op), &[rhs])
            }
        }
        impl std::ops::$trait<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                self.apply(Op::Binary(BinaryOp::$op), &[&rhs])
            }
        }
        impl std::ops::$trait<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                self.apply(Op::Binary(BinaryOp::$op), &[rhs])
            }
        }
        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                self.apply(Op::Binary(BinaryOp::$op), &[&rhs])
            }
        }
        impl std::ops::$trait<f64> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: f64) -> Tensor {
                self.apply(Op::Binary(BinaryOp::$op), &[&self.scalar(rhs)])
            }
        }
        impl std::ops::$trait<f64> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: f64) -> Tensor {
                self.apply(Op::Binary(BinaryOp::$op), &[&self.scalar(rhs)])
            }
        }
    };
}

binary_operator!(Add, add, Add);
binary_operator!(Sub, sub, Sub);
binary_operator!(Mul, mul, Mul);
binary_operator!(Div, div, Div);
binary_operator!(Rem, rem, Rem);

macro_rules! logic_operator {
    ($trait:ident, $method:ident, $op:ident) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                self.apply(Op::Logic(LogicOp::$op), &[rhs])
            }
        }
        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                self.apply(Op::Logic(LogicOp::$op), &[&rhs])
            }
        }
    };
}

logic_operator!(BitAnd, bitand, And);
logic_operator!(BitOr, bitor, Or);
logic_operator!(BitXor, bitxor, Xor);

impl std::ops::Not for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn not(self) -> Tensor {
        self.apply(Op::LogicalNot, &[])
    }
}

impl std::ops::Not for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn not(self) -> Tensor {
        self.apply(Op::LogicalNot, &[])
    }
}

impl std::ops::Neg for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        self.apply(Op::Unary(UnaryOp::Neg), &[])
    }
}

impl std::ops::Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        self.apply(Op::Unary(UnaryOp::Neg), &[])
    }
}
