//! The op catalog of remat: the one list of op kinds.
//!
//! Every op kind remat knows is declared once, in the table below, with the name users write in
//! policies (`save(matmul)`), its arity and its flags. The runtime (`remat-core`) gives each kind its
//! shape rule, kernels and gradient through exhaustive `match`es on [`OpKind`] (no catch-all
//! arms), so a kind added here cannot be forgotten there; the `#[checkpoint]` macro validates
//! policy op names against [`lookup`] at compile time. There is no second list to drift.
//!
//! Kinds that share an arity, a shape rule and a kernel shape are declared in a *family*
//! ([`UnaryOp`], [`UnaryGradOp`], [`BinaryOp`], [`CompareOp`], [`LogicOp`], [`ArgReduceOp`],
//! [`ReduceOp`]), like candle's
//! `UnaryOpT` families: the runtime's `Op` has one variant per family holding the member. A unary
//! op is four places: its row here (name, FLOPs per element, what its gradient reads, its domain),
//! one CPU expression, one CUDA expression and one gradient rule. Its `Tensor` method is generated
//! from the row (`for_each_unary!`), its JSON form is its name, and the CUDA op codes are
//! generated from the family's order.
//!
//! This crate has no dependencies so that the proc-macro crate can use it at compile time.

#![warn(missing_docs)]

pub mod forms;
mod policy;

pub use forms::PolicyError;
pub use policy::{Policy, PolicySource};

/// How many inputs an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// Exactly this many inputs.
    Fixed(usize),
    /// At least one input (`concat`).
    Variadic,
}

impl Arity {
    /// Whether `n` inputs are acceptable.
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Fixed(k) => n == k,
            Arity::Variadic => n >= 1,
        }
    }
}

/// What kind of values an op produces and how a partitioner may treat them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// The kind.
    pub kind: OpKind,
    /// The snake_case name users write in policies and JSON.
    pub name: &'static str,
    /// Number of inputs.
    pub arity: Arity,
    /// A view: its value is a re-indexing of its first input. Views are never saved; their base is.
    pub view: bool,
    /// Draws random numbers (from a counter-based generator, so it can be replayed exactly).
    pub random: bool,
    /// Dominated by arithmetic rather than memory traffic (GEMMs): costly to recompute.
    pub compute_intensive: bool,
    /// Recorded at trace time only (`input`, `param`, `constant`): has no inputs and is resident.
    pub leaf: bool,
    /// Its value selects data (routing): top-k indices, an argmax, a sort's order, a histogram.
    /// Never recomputed unless a tag asks for it: recomputed under other numerics or with ties
    /// broken another way, routing sends tokens elsewhere than the saved activations say.
    pub selects: bool,
    /// Part of the user-facing DSL. Internal kinds only appear in derived backward graphs and
    /// cannot be named in a policy.
    pub public: bool,
}

/// What the gradient of an elementwise op reads besides the incoming gradient: the forward
/// values a plan must keep (or recompute) for it. The gradient rule in `remat-core` builds
/// exactly this (a test holds every rule to its row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradReads {
    /// Only the incoming gradient (`neg`).
    Nothing,
    /// The op's input `x` (`log`, `silu`).
    Input,
    /// The op's output `y`, where that is cheaper than the input (`exp`, `tanh`, `relu`).
    Output,
}

/// Where a unary op is defined and smooth: what gradient checks and kernel comparisons feed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    /// Every real number.
    Real,
    /// Positive numbers (`log`, `sqrt`).
    Positive,
}

macro_rules! catalog {
    (
        ($d:tt)
        unary $ufam:ident {
            $( $(#[$udoc:meta])* $uv:ident = $uname:ident, flops $uflops:literal, reads $ureads:ident,
               domain $udomain:ident; )*
        }
        $( family $fam:ident($farity:expr) {
            $( $(#[$fdoc:meta])* $fv:ident = $fname:literal, flops $fflops:literal, [$($fflag:ident),*]; )*
        } )*
        other {
            $( $(#[$doc:meta])* $variant:ident = $name:literal, $arity:expr, [$($flag:ident),*]; )*
        }
    ) => {
        /// Every op kind, user-facing and internal. See [`CATALOG`] for their properties.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum OpKind {
            $( $(#[$udoc])* $uv, )*
            $( $( $(#[$fdoc])* $fv, )* )*
            $( $(#[$doc])* $variant, )*
        }

        /// The catalog, one entry per [`OpKind`], in declaration order (`CATALOG[k as usize].kind == k`).
        pub const CATALOG: &[OpInfo] = &[
            $( OpInfo {
                kind: OpKind::$uv,
                name: stringify!($uname),
                arity: Fixed(1),
                view: false,
                random: false,
                compute_intensive: false,
                leaf: false,
                selects: false,
                public: true,
            }, )*
            $( $( OpInfo {
                kind: OpKind::$fv,
                name: $fname,
                arity: $farity,
                view: false,
                random: false,
                compute_intensive: false,
                leaf: false,
                selects: catalog!(@has selects $($fflag)*),
                public: !catalog!(@has internal $($fflag)*),
            }, )* )*
            $( OpInfo {
                kind: OpKind::$variant,
                name: $name,
                arity: $arity,
                view: catalog!(@has view $($flag)*),
                random: catalog!(@has random $($flag)*),
                compute_intensive: catalog!(@has compute $($flag)*),
                leaf: catalog!(@has leaf $($flag)*),
                selects: catalog!(@has selects $($flag)*),
                public: !catalog!(@has internal $($flag)*),
            }, )*
        ];

        /// The kinds outside every family: each has an `Op` variant of its own.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OtherKind {
            $( $(#[$doc])* $variant, )*
        }

        /// An [`OpKind`] split by family, so that a match over a kind's family and member is
        /// exhaustive without a catch-all arm.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(missing_docs)] // one variant per family, named for it
        pub enum Member {
            $ufam($ufam),
            $( $fam($fam), )*
            Other(OtherKind),
        }

        impl OpKind {
            /// This kind's family and member.
            pub fn member(self) -> Member {
                match self {
                    $( OpKind::$uv => Member::$ufam($ufam::$uv), )*
                    $( $( OpKind::$fv => Member::$fam($fam::$fv), )* )*
                    $( OpKind::$variant => Member::Other(OtherKind::$variant), )*
                }
            }
        }

        catalog!(@family $ufam { $( $(#[$udoc])* $uv flops $uflops; )* });

        impl $ufam {
            /// What the gradient reads besides the incoming gradient.
            pub fn reads(self) -> GradReads {
                match self {
                    $( $ufam::$uv => GradReads::$ureads, )*
                }
            }

            /// Where the op is defined and smooth.
            pub fn domain(self) -> Domain {
                match self {
                    $( $ufam::$uv => Domain::$udomain, )*
                }
            }
        }

        /// Calls `callback! { $(#[doc] Variant method;)* }` with every unary op of the catalog
        /// (the [`UnaryOp`] variant, then the DSL name as a method name), so that `remat-core`
        /// generates one `Tensor` method per op from this table.
        #[macro_export]
        #[doc(hidden)]
        macro_rules! for_each_unary {
            ($d callback:ident) => { $d callback! { $( $(#[$udoc])* $uv $uname; )* } };
        }

        $( catalog!(@family $fam { $( $(#[$fdoc])* $fv flops $fflops; )* }); )*
    };
    (@family $fam:ident { $( $(#[$fdoc:meta])* $fv:ident flops $fflops:literal; )* }) => {
        /// A family of op kinds that share arity, shape rule and kernel shape: the `Op` of each
        /// member is one variant holding this enum, so a new member is one row in the catalog,
        /// one kernel expression per backend and one gradient rule.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $fam {
            $( $(#[$fdoc])* $fv, )*
        }

        impl $fam {
            /// Every member, in catalog order.
            pub const ALL: &'static [$fam] = &[$( $fam::$fv, )*];

            /// The catalog kind of this member.
            pub fn kind(self) -> OpKind {
                match self {
                    $( $fam::$fv => OpKind::$fv, )*
                }
            }

            /// The member of this family with kind `kind`, if it is one.
            pub fn from_kind(kind: OpKind) -> Option<$fam> {
                $fam::ALL.iter().copied().find(|m| m.kind() == kind)
            }

            /// The DSL name (`"exp"`).
            pub fn name(self) -> &'static str {
                self.kind().name()
            }

            /// Floating-point operations per element (of the output; of the input for a
            /// reduction).
            pub fn flops_per_element(self) -> u64 {
                match self {
                    $( $fam::$fv => $fflops, )*
                }
            }
        }
    };
    (@has $want:ident) => { false };
    (@has view view $($rest:ident)*) => { true };
    (@has random random $($rest:ident)*) => { true };
    (@has compute compute $($rest:ident)*) => { true };
    (@has leaf leaf $($rest:ident)*) => { true };
    (@has internal internal $($rest:ident)*) => { true };
    (@has selects selects $($rest:ident)*) => { true };
    (@has $want:ident $other:ident $($rest:ident)*) => { catalog!(@has $want $($rest)*) };
}

use Arity::{Fixed, Variadic};

catalog! {
    ($)
    // One row per unary op: the variant, the DSL (and `Tensor` method) name, FLOPs per element,
    // what its gradient reads, where it is defined. Its CPU expression (`unary` in the CPU
    // backend's `elementwise.rs`), CUDA expression (`unary_op` in `elementwise.cu`) and gradient
    // rule (`autodiff/rules.rs`) are found by exhaustive matches and a test of every case label.
    unary UnaryOp {
        /// `-x`.
        Neg = neg, flops 1, reads Nothing, domain Real;
        /// `e^x`.
        Exp = exp, flops 4, reads Output, domain Real;
        /// Natural logarithm.
        Log = log, flops 4, reads Input, domain Positive;
        /// Sine.
        Sin = sin, flops 4, reads Input, domain Real;
        /// Cosine.
        Cos = cos, flops 4, reads Input, domain Real;
        /// Hyperbolic tangent.
        Tanh = tanh, flops 4, reads Output, domain Real;
        /// Logistic sigmoid.
        Sigmoid = sigmoid, flops 4, reads Output, domain Real;
        /// `max(x, 0)`.
        Relu = relu, flops 1, reads Output, domain Real;
        /// GELU, tanh approximation.
        Gelu = gelu, flops 10, reads Input, domain Real;
        /// SiLU (swish): `x * sigmoid(x)`.
        Silu = silu, flops 6, reads Input, domain Real;
        /// `|x|`.
        Abs = abs, flops 1, reads Input, domain Real;
        /// Square root.
        Sqrt = sqrt, flops 1, reads Output, domain Positive;
        /// `1 / sqrt(x)`.
        Rsqrt = rsqrt, flops 1, reads Output, domain Positive;
        /// `1 / x`.
        Reciprocal = reciprocal, flops 1, reads Output, domain Positive;
        /// `x * x`.
        Square = square, flops 1, reads Input, domain Real;
        /// Softplus, `ln(1 + e^x)` (computed as `max(x, 0) + ln(1 + e^-|x|)`: no overflow).
        Softplus = softplus, flops 5, reads Input, domain Real;
    }
    // The gradients of unary ops that need a kernel of their own: `(v, g) -> g · f'(v)`, where
    // `v` is the forward input or output as the op's `reads` says.
    family UnaryGradOp(Fixed(2)) {
        /// Internal: `g` where `y > 0`, else 0 (gradient of `relu` from its output).
        ReluGrad = "relu_grad", flops 1, [internal];
        /// Internal: gradient of `gelu` from its input.
        GeluGrad = "gelu_grad", flops 10, [internal];
        /// Internal: gradient of `silu` from its input.
        SiluGrad = "silu_grad", flops 6, [internal];
        /// Internal: `g · sign(x)` (gradient of `abs`; 0 at 0, NaN stays NaN).
        AbsGrad = "abs_grad", flops 2, [internal];
    }
    family BinaryOp(Fixed(2)) {
        /// `a + b`, broadcasting.
        Add = "add", flops 1, [];
        /// `a - b`, broadcasting.
        Sub = "sub", flops 1, [];
        /// `a * b`, broadcasting.
        Mul = "mul", flops 1, [];
        /// `a / b`, broadcasting.
        Div = "div", flops 1, [];
        /// Elementwise maximum, broadcasting (NaN wins).
        Maximum = "maximum", flops 1, [];
        /// Elementwise minimum, broadcasting (NaN wins).
        Minimum = "minimum", flops 1, [];
        /// Integer remainder with the sign of the divisor (Python's `%`, `torch.remainder`),
        /// broadcasting; i64 only.
        Rem = "rem", flops 1, [];
        /// Internal: 1 where `a > b`, 1/2 where equal, 0 elsewhere (gradient of `maximum`).
        MaximumMask = "maximum_mask", flops 1, [internal];
    }
    family CompareOp(Fixed(2)) {
        /// `a == b`, broadcasting; a `bool` result.
        Eq = "eq", flops 1, [];
        /// `a != b`, broadcasting; a `bool` result.
        Ne = "ne", flops 1, [];
        /// `a < b`, broadcasting; a `bool` result.
        Lt = "lt", flops 1, [];
        /// `a <= b`, broadcasting; a `bool` result.
        Le = "le", flops 1, [];
        /// `a > b`, broadcasting; a `bool` result.
        Gt = "gt", flops 1, [];
        /// `a >= b`, broadcasting; a `bool` result.
        Ge = "ge", flops 1, [];
    }
    family LogicOp(Fixed(2)) {
        /// `a && b` on `bool` tensors, broadcasting.
        And = "logical_and", flops 1, [];
        /// `a || b` on `bool` tensors, broadcasting.
        Or = "logical_or", flops 1, [];
        /// `a != b` on `bool` tensors, broadcasting.
        Xor = "logical_xor", flops 1, [];
    }
    family ArgReduceOp(Fixed(1)) {
        /// The i64 index of the largest entry along one axis (the first of ties; NaN is largest).
        Argmax = "argmax", flops 1, [selects];
        /// The i64 index of the smallest entry along one axis (the first of ties; NaN is
        /// smallest).
        Argmin = "argmin", flops 1, [selects];
    }
    family ReduceOp(Fixed(1)) {
        /// Sum over axes.
        Sum = "sum", flops 1, [];
        /// Mean over axes.
        Mean = "mean", flops 1, [];
        /// Maximum over axes.
        Amax = "amax", flops 1, [];
    }
    other {
        /// A graph input (data, ids, targets): resident, never differentiated.
        Input = "input", Fixed(0), [leaf];
        /// A trainable parameter: resident, gradients are computed for it.
        Param = "param", Fixed(0), [leaf];
        /// A tensor full of one value.
        Constant = "constant", Fixed(0), [leaf];
        /// A tensor of given values (host data recorded in the trace): resident like a parameter,
        /// never differentiated.
        ConstantData = "constant_data", Fixed(0), [leaf];
        /// `start, start + step, ...` along one axis.
        Arange = "arange", Fixed(0), [leaf];
        /// `x` raised to a constant power.
        Pow = "pow", Fixed(1), [];
        /// `min(max(x, lo), hi)`.
        Clamp = "clamp", Fixed(1), [];
        /// Batched matrix product, batch dims broadcast.
        Matmul = "matmul", Fixed(2), [compute];
        /// Same elements, new shape.
        Reshape = "reshape", Fixed(1), [view];
        /// Axes permuted.
        Transpose = "transpose", Fixed(1), [view];
        /// Size-1 axes broadcast to a larger shape.
        Expand = "expand", Fixed(1), [view];
        /// Join along one axis.
        Concat = "concat", Variadic, [];
        /// Softmax over the last axis.
        Softmax = "softmax", Fixed(1), [];
        /// Log-softmax over the last axis.
        LogSoftmax = "log_softmax", Fixed(1), [];
        /// Layer normalisation over the last axis (no affine part: multiply and add for that).
        LayerNorm = "layer_norm", Fixed(1), [];
        /// Mean cross-entropy of logits `[.., C]` against integer targets `[..]`.
        CrossEntropy = "cross_entropy", Fixed(2), [];
        /// Rows of a table `[V, D]` gathered by integer ids.
        Embedding = "embedding", Fixed(2), [];
        /// Conversion to another dtype (round to nearest even, saturating for fp8).
        Cast = "cast", Fixed(1), [];
        /// Inverted dropout with a counter-based mask.
        Dropout = "dropout", Fixed(1), [random];
        /// `(a · b) * scale_a * scale_b` for fp8 `a`, `b` and f32 scalar scales; f32 result.
        ScaledMatmul = "scaled_matmul", Fixed(4), [compute];
        /// A contiguous range along one axis (a view).
        Slice = "slice", Fixed(1), [view];
        /// Entries along one axis picked by integer indices (`index_select`).
        IndexSelect = "index_select", Fixed(2), [];
        /// Entries along one axis picked per position by an integer index tensor of the same rank
        /// (`torch.gather`).
        Gather = "gather", Fixed(2), [];
        /// `cond ? a : b` elementwise for a `bool` condition, broadcasting.
        Where = "where", Fixed(3), [];
        /// `!x` on a `bool` tensor.
        LogicalNot = "logical_not", Fixed(1), [];
        /// The i64 indices of the `k` largest (or smallest) entries along one axis, in order
        /// (ties: the lower index first; NaN is largest). The values are a `gather` of them.
        Topk = "topk", Fixed(1), [selects];
        /// The i64 indices that sort one axis, ascending or descending, stable.
        Argsort = "argsort", Fixed(1), [selects];
        /// Counts of each value `0..bins` among i64 ids: an i64 histogram (expert load).
        Bincount = "bincount", Fixed(1), [selects];
        /// i64 ids `[..]` to one-hot rows `[.., classes]` of a given dtype.
        OneHot = "one_hot", Fixed(1), [];
        /// Running sum along one axis (from either end), floats or i64.
        Cumsum = "cumsum", Fixed(1), [];
        /// `x` plus `src`'s slices added at i64 indices `[k]` along one axis (`index_add`).
        IndexAdd = "index_add", Fixed(3), [];
        /// `x` plus `src` added per position at i64 indices of `src`'s shape along one axis
        /// (`scatter_add`).
        ScatterAdd = "scatter_add", Fixed(3), [];
        /// RMS normalisation over the last axis (no gain: multiply by one), forward and backward
        /// fused.
        RmsNorm = "rms_norm", Fixed(1), [];
        /// Fused scaled dot-product attention `softmax(q·kᵀ·scale [+ causal mask])·v` computed
        /// block by block (online softmax) without materialising the scores. Its value is the
        /// output with the per-row log-sum-exp appended as a last column (`[.., t, dv + 1]`), which
        /// is all its backward needs. q, k, v are head-major (`[.., heads, t, d]`) or token-major
        /// (`[.., t, heads, d]`, read in place), as its `layout` attribute says.
        Sdpa = "sdpa", Fixed(3), [compute];
        /// Internal: the gradient of `slice` (the gradient placed in a zero tensor of the input's
        /// shape).
        SliceGrad = "slice_grad", Fixed(1), [internal];
        /// Internal: gradient of `index_select` (scatter-add along the axis).
        IndexSelectGrad = "index_select_grad", Fixed(2), [internal];
        /// Internal: gradient of `gather` (scatter-add along the axis).
        GatherGrad = "gather_grad", Fixed(2), [internal];
        /// Internal: gradient of `rms_norm` from its input.
        RmsNormGrad = "rms_norm_grad", Fixed(2), [internal];
        /// Internal: gradients of `sdpa` (dq, dk, dv flattened and joined along the last axis),
        /// recomputing the score blocks.
        SdpaGrad = "sdpa_grad", Fixed(5), [compute, internal];
        /// Internal: `g` where `lo <= x <= hi`, else 0 (gradient of `clamp`).
        ClampGrad = "clamp_grad", Fixed(2), [internal];
        /// Internal: gradient of `softmax` from its output.
        SoftmaxGrad = "softmax_grad", Fixed(2), [internal];
        /// Internal: gradient of `log_softmax` from its output.
        LogSoftmaxGrad = "log_softmax_grad", Fixed(2), [internal];
        /// Internal: gradient of `layer_norm` from its input.
        LayerNormGrad = "layer_norm_grad", Fixed(2), [internal];
        /// Internal: gradient of `cross_entropy` w.r.t. the logits.
        CrossEntropyGrad = "cross_entropy_grad", Fixed(3), [internal];
        /// Internal: gradient of `embedding` w.r.t. the table (scatter-add of rows).
        EmbeddingGrad = "embedding_grad", Fixed(2), [internal];
        /// Internal: gradient of `amax`, shared evenly between tied maxima.
        AmaxGrad = "amax_grad", Fixed(3), [internal];
        /// Internal: a matrix product reading either operand transposed (gradients of `matmul`),
        /// optionally contracting the batch axes too (the gradient of a shared weight).
        MatmulT = "matmul_t", Fixed(2), [compute, internal];
    }
}

impl OpKind {
    /// The catalog entry of this kind.
    pub fn info(self) -> &'static OpInfo {
        &CATALOG[self as usize]
    }

    /// The DSL name (`"matmul"`).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The kind named `name`, internal kinds included.
    pub fn from_name(name: &str) -> Option<OpKind> {
        // A table built once: the readers look a name up for every node they read, and a walk
        // down the catalog compares with dozens of names first (a tenth of a second at 10⁶).
        static BY_NAME: std::sync::OnceLock<std::collections::HashMap<&'static str, OpKind>> =
            std::sync::OnceLock::new();
        BY_NAME.get_or_init(|| CATALOG.iter().map(|i| (i.name, i.kind)).collect()).get(name).copied()
    }

    /// All kinds, in catalog order.
    pub fn all() -> impl Iterator<Item = OpKind> {
        CATALOG.iter().map(|i| i.kind)
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The user-facing op named `name` (internal kinds excluded), as a policy would name it.
pub fn lookup(name: &str) -> Option<&'static OpInfo> {
    CATALOG.iter().find(|i| i.public && i.name == name)
}

/// The user-facing op name closest to `name`, if one is close enough to be a likely typo.
pub fn suggest(name: &str) -> Option<&'static str> {
    closest(name, CATALOG.iter().filter(|i| i.public).map(|i| i.name))
}

/// The candidate closest to `word` by edit distance, if within a third of its length (at least 1).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = word.chars().count();
    let limit = (len / 3).max(1);
    candidates
        .into_iter()
        // The distance is at least the difference in length: a 10 MB word costs one count.
        .filter(|c| c.chars().count().abs_diff(len) <= limit)
        .map(|c| (edit_distance(word, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over chars.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(diag + usize::from(ca != cb));
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_indexed_by_kind() {
        for (i, info) in CATALOG.iter().enumerate() {
            assert_eq!(info.kind as usize, i, "{} out of place", info.name);
            assert_eq!(OpKind::from_name(info.name), Some(info.kind));
        }
    }

    #[test]
    fn flags_come_from_the_table() {
        assert!(OpKind::Reshape.info().view && OpKind::Transpose.info().view);
        assert!(OpKind::Expand.info().view && !OpKind::Add.info().view);
        assert!(OpKind::Dropout.info().random);
        assert!(OpKind::Matmul.info().compute_intensive);
        assert!(OpKind::ScaledMatmul.info().compute_intensive);
        assert!(OpKind::Param.info().leaf && !OpKind::Param.info().view);
        assert!(!OpKind::ReluGrad.info().public);
        assert!(OpKind::Slice.info().view && OpKind::Slice.info().public);
        assert!(OpKind::Sdpa.info().compute_intensive && !OpKind::Silu.info().view);
        let selects: Vec<&str> = CATALOG.iter().filter(|i| i.selects).map(|i| i.name).collect();
        assert_eq!(selects, ["argmax", "argmin", "topk", "argsort", "bincount"]);
        assert_eq!(UnaryOp::from_kind(OpKind::Silu), Some(UnaryOp::Silu));
        assert_eq!(UnaryOp::Silu.kind().info().arity, Arity::Fixed(1));
        assert_eq!(CompareOp::from_kind(OpKind::Add), None);
        assert_eq!(OpKind::Concat.info().arity, Arity::Variadic);
    }

    #[test]
    fn lookup_hides_internal_kinds_and_suggests() {
        assert_eq!(lookup("matmul").map(|i| i.kind), Some(OpKind::Matmul));
        assert!(lookup("relu_grad").is_none());
        assert_eq!(suggest("matmull"), Some("matmul"));
        assert_eq!(suggest("sofmax"), Some("softmax"));
        assert_eq!(suggest("xyzzyplugh"), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
