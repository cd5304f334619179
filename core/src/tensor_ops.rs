//! The ops users call on [`Tensor`]s: methods and operator overloads, one per catalog op.
//!
//! Every method is `#[track_caller]`, so a shape or dtype error names the user's line.

use crate::dtype::DType;
use crate::op::Op;
use crate::trace::Tensor;

macro_rules! unary_methods {
    ($( $(#[$doc:meta])* $name:ident => $op:ident; )*) => {
        $( $(#[$doc])* #[track_caller] pub fn $name(&self) -> Tensor { self.apply(Op::$op, &[]) } )*
    };
}

impl Tensor {
    unary_methods! {
        /// `-x`.
        neg => Neg;
        /// `e^x`.
        exp => Exp;
        /// Natural logarithm.
        log => Log;
        /// Sine.
        sin => Sin;
        /// Cosine.
        cos => Cos;
        /// Hyperbolic tangent.
        tanh => Tanh;
        /// Logistic sigmoid.
        sigmoid => Sigmoid;
        /// `max(x, 0)`.
        relu => Relu;
        /// GELU (tanh approximation).
        gelu => Gelu;
        /// `|x|`.
        abs => Abs;
        /// Square root.
        sqrt => Sqrt;
        /// `1 / sqrt(x)`.
        rsqrt => Rsqrt;
        /// `1 / x`.
        reciprocal => Reciprocal;
        /// `x * x`.
        square => Square;
        /// Softmax over the last axis.
        softmax => Softmax;
        /// Log-softmax over the last axis.
        log_softmax => LogSoftmax;
    }

    /// Elementwise maximum, broadcasting.
    #[track_caller]
    pub fn maximum(&self, other: &Tensor) -> Tensor {
        self.apply(Op::Maximum, &[other])
    }

    /// `min(max(x, min), max)`.
    #[track_caller]
    pub fn clamp(&self, min: f64, max: f64) -> Tensor {
        self.apply(Op::Clamp { min, max }, &[])
    }

    /// Sum over `axes`.
    #[track_caller]
    pub fn sum(&self, axes: &[usize], keepdim: bool) -> Tensor {
        self.apply(Op::Sum { axes: axes.to_vec(), keepdim }, &[])
    }

    /// Sum of all elements, as a scalar.
    #[track_caller]
    pub fn sum_all(&self) -> Tensor {
        self.sum(&(0..self.rank()).collect::<Vec<_>>(), false)
    }

    /// Mean over `axes`.
    #[track_caller]
    pub fn mean(&self, axes: &[usize], keepdim: bool) -> Tensor {
        self.apply(Op::Mean { axes: axes.to_vec(), keepdim }, &[])
    }

    /// Mean of all elements, as a scalar.
    #[track_caller]
    pub fn mean_all(&self) -> Tensor {
        self.mean(&(0..self.rank()).collect::<Vec<_>>(), false)
    }

    /// Maximum over `axes`.
    #[track_caller]
    pub fn amax(&self, axes: &[usize], keepdim: bool) -> Tensor {
        self.apply(Op::Amax { axes: axes.to_vec(), keepdim }, &[])
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

    /// The values converted to `dtype` (round to nearest even; fp8 saturates).
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
                self.apply(Op::$op, &[rhs])
            }
        }
        impl std::ops::$trait<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                self.apply(Op::$op, &[&rhs])
            }
        }
        impl std::ops::$trait<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                self.apply(Op::$op, &[rhs])
            }
        }
        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                self.apply(Op::$op, &[&rhs])
            }
        }
        impl std::ops::$trait<f64> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: f64) -> Tensor {
                self.apply(Op::$op, &[&self.scalar(rhs)])
            }
        }
        impl std::ops::$trait<f64> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: f64) -> Tensor {
                self.apply(Op::$op, &[&self.scalar(rhs)])
            }
        }
    };
}

binary_operator!(Add, add, Add);
binary_operator!(Sub, sub, Sub);
binary_operator!(Mul, mul, Mul);
binary_operator!(Div, div, Div);

impl std::ops::Neg for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        self.apply(Op::Neg, &[])
    }
}

impl std::ops::Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        self.apply(Op::Neg, &[])
    }
}
