//! The CUDA C sources (embedded), their kernel names, and how arguments are passed.
//!
//! Every source is compiled with [`PRELUDE`] and the catalog's op codes ([`op_codes`]) in front.
//! Kernel arguments are pushed as [`Arg`]s
//! whose variants are the C parameter types (`u64`, `int`, `double`, `Dims`, raw fill patterns):
//! each launch site lists them beside the C signature it must match.

use remat_core::{BinaryOp, DType, Member, OpKind, UnaryGradOp, UnaryOp};
use std::ffi::c_void;

/// A kernel source file of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    /// File name, used in NVRTC logs and caches.
    pub name: &'static str,
    /// CUDA C text.
    pub text: &'static str,
}

/// Types, conversions, index arithmetic, reductions and Philox shared by every source.
pub const PRELUDE: &str = include_str!("../kernels/prelude.cuh");
/// The `U_*` code of `clamp` in the unary kernel: after every [`UnaryOp`].
pub(crate) const U_CLAMP: i32 = UnaryOp::ALL.len() as i32;
/// The `U_*` code of `pow` in the unary kernel.
pub(crate) const U_POW: i32 = U_CLAMP + 1;

/// The `U_*` code of a unary op: its place in the catalog.
pub(crate) fn unary_code(op: UnaryOp) -> i32 {
    op as i32
}

/// The `B_*` code of a binary op: its place in the catalog.
pub(crate) fn binary_code(op: BinaryOp) -> i32 {
    op as i32
}

/// The `G_*` code of a pointwise gradient op: its place in the catalog.
pub(crate) fn grad_code(op: UnaryGradOp) -> i32 {
    op as i32
}

/// The `L_*` code of a logic op (`logical_and`, ..): its place in its catalog family, reached
/// through the kind since `remat_core` does not re-export the family's type. `None` for a kind
/// of another family.
pub(crate) fn logic_code(kind: OpKind) -> Option<i32> {
    match kind.member() {
        Member::LogicOp(l) => Some(l as i32),
        _ => None,
    }
}

/// The `G_*` code of `clamp_grad` in the pointwise-gradient kernel: after every [`UnaryGradOp`].
pub(crate) const G_CLAMP_GRAD: i32 = UnaryGradOp::ALL.len() as i32;

/// `#define U_<NAME> <code>` for every unary op (then `U_CLAMP`, `U_POW`), `B_<NAME>` for every
/// binary op, `G_<NAME>` for every pointwise gradient op (then `G_CLAMP_GRAD`) and `L_<NAME>`
/// for every logic op (`L_LOGICAL_AND`), generated from the catalog, so the kernels' `switch` and the launch sites cannot drift apart: a case
/// label for an op the catalog lacks does not compile.
pub(crate) fn op_codes() -> String {
    let define = |prefix: &str, name: &str, code: i32| format!("#define {prefix}_{} {code}\n", name.to_uppercase());
    let mut out = String::new();
    for &u in UnaryOp::ALL {
        out += &define("U", u.name(), unary_code(u));
    }
    out += &define("U", "clamp", U_CLAMP);
    out += &define("U", "pow", U_POW);
    for &b in BinaryOp::ALL {
        out += &define("B", b.name(), binary_code(b));
    }
    for &g in UnaryGradOp::ALL {
        out += &define("G", g.name(), grad_code(g));
    }
    out += &define("G", "clamp_grad", G_CLAMP_GRAD);
    for kind in OpKind::all() {
        if let Some(code) = logic_code(kind) {
            out += &define("L", kind.name(), code);
        }
    }
    out
}

/// Unary, binary, pointwise-gradient, dropout, fill and scale kernels.
pub const ELEMENTWISE: Source = Source { name: "elementwise.cu", text: include_str!("../kernels/elementwise.cu") };
/// Dtype casts.
pub const CAST: Source = Source { name: "cast.cu", text: include_str!("../kernels/cast.cu") };
/// Sum, mean, amax and the amax gradient.
pub const REDUCE: Source = Source { name: "reduce.cu", text: include_str!("../kernels/reduce.cu") };
/// Softmax, layer norm, cross-entropy, embedding and their gradients.
pub const NN: Source = Source { name: "nn.cu", text: include_str!("../kernels/nn.cu") };
/// Strided copies: transpose, expand, slice, concat.
pub const LAYOUT: Source = Source { name: "layout.cu", text: include_str!("../kernels/layout.cu") };

/// Comparisons, `where`, `arange`, `index_select` and its gradient.
pub const INDEX: Source = Source { name: "index.cu", text: include_str!("../kernels/index.cu") };
/// Fused scaled dot-product attention and its gradient.
pub const ATTENTION: Source = Source { name: "attention.cu", text: include_str!("../kernels/attention.cu") };
/// i64 and i32 arithmetic and bool logic.
pub const INTEGER: Source = Source { name: "integer.cu", text: include_str!("../kernels/integer.cu") };
/// Argmax/argmin, topk and argsort, bincount, one_hot and the id check.
pub const SELECT: Source = Source { name: "select.cu", text: include_str!("../kernels/select.cu") };
/// Cumsum, index_add and scatter_add.
pub const ACCUMULATE: Source = Source { name: "accumulate.cu", text: include_str!("../kernels/accumulate.cu") };
/// The fused optimizer update and the sum of squares for gradient clipping.
pub const OPTIM: Source = Source { name: "optim.cu", text: include_str!("../kernels/optim.cu") };

/// The gradient buckets of a data-parallel step reduced on the device (`NcclGradients`).
#[cfg_attr(not(feature = "nccl"), allow(dead_code))]
pub const BUCKETS: Source = Source { name: "buckets.cu", text: include_str!("../kernels/buckets.cu") };

/// Every kernel source, in a fixed order (the NVRTC test compiles each).
#[cfg_attr(not(test), allow(dead_code))]
pub const SOURCES: [Source; 12] =
    [ELEMENTWISE, CAST, REDUCE, NN, LAYOUT, INDEX, ATTENTION, INTEGER, SELECT, ACCUMULATE, OPTIM, BUCKETS];

/// Most axes a [`Dims`] view holds (`MAXD` in the prelude).
pub const MAXD: usize = 8;

/// `struct Dims { u64 rank; u64 shape[MAXD]; u64 stride[MAXD]; }`: a strided view.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dims {
    /// Number of axes used.
    pub rank: u64,
    /// Extent of each axis.
    pub shape: [u64; MAXD],
    /// Step in elements along each axis.
    pub stride: [u64; MAXD],
}

impl Dims {
    /// A view of `shape` with `strides` (at most [`MAXD`] axes; `None` beyond).
    pub fn new(shape: &[usize], strides: &[usize]) -> Option<Dims> {
        if shape.len() > MAXD || shape.len() != strides.len() {
            return None;
        }
        let mut d = Dims { rank: shape.len() as u64, ..Dims::default() };
        for (i, (&s, &t)) in shape.iter().zip(strides).enumerate() {
            d.shape[i] = s as u64;
            d.stride[i] = t as u64;
        }
        Some(d)
    }
}

/// One kernel argument, by its C type.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// `u64` (also every device pointer: `const T*` is 8 bytes).
    U64(u64),
    /// `int`.
    I32(i32),
    /// `double`.
    F64(f64),
    /// `Dims` by value.
    Dims(Dims),
    /// `u8` fill pattern.
    U8(u8),
    /// `u16` fill pattern.
    U16(u16),
    /// `u32` fill pattern.
    U32(u32),
}

impl Arg {
    /// A pointer to the value, as `cuLaunchKernel` wants it.
    pub fn as_param(&mut self) -> *mut c_void {
        match self {
            Arg::U64(v) => v as *mut u64 as *mut c_void,
            Arg::I32(v) => v as *mut i32 as *mut c_void,
            Arg::F64(v) => v as *mut f64 as *mut c_void,
            Arg::Dims(v) => v as *mut Dims as *mut c_void,
            Arg::U8(v) => v as *mut u8 as *mut c_void,
            Arg::U16(v) => v as *mut u16 as *mut c_void,
            Arg::U32(v) => v as *mut u32 as *mut c_void,
        }
    }
}

/// The dtype code kernels use (`cast.cu`).
pub fn dtype_code(d: DType) -> i32 {
    match d {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::BF16 => 2,
        DType::F16 => 3,
        DType::F8E4M3 => 4,
        DType::F8E5M2 => 5,
        DType::I64 => 6,
        DType::Bool => 7,
        DType::I32 => 8,
    }
}

/// The suffix of a float kernel instantiated for storage dtype `d` (`FOR_FLOATS`), if any.
pub fn float_suffix(d: DType) -> Option<&'static str> {
    match d {
        DType::F32 => Some("f32"),
        DType::F64 => Some("f64"),
        DType::BF16 => Some("bf16"),
        DType::F16 => Some("f16"),
        DType::F8E4M3 | DType::F8E5M2 | DType::I64 | DType::I32 | DType::Bool => None,
    }
}

/// The suffix of a kernel instantiated for integer storage dtype `d` (`FOR_INTS`), if any.
pub fn int_suffix(d: DType) -> Option<&'static str> {
    match d {
        DType::I64 => Some("i64"),
        DType::I32 => Some("i32"),
        _ => None,
    }
}

/// The compute dtype of storage dtype `d`: f64 for f64, f32 otherwise.
pub fn compute_dtype(d: DType) -> DType {
    if d == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// The suffix of a raw-element kernel (`gather_2`, `fill_8`) for elements of `bytes`.
pub fn elem_suffix(bytes: usize) -> &'static str {
    match bytes {
        1 => "1",
        2 => "2",
        4 => "4",
        _ => "8",
    }
}

#[cfg(test)]
mod op_code_tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    fn defines() -> HashMap<String, i32> {
        op_codes()
            .lines()
            .map(|l| {
                let mut w = l.strip_prefix("#define ").expect("a #define").split(' ');
                (w.next().unwrap().to_string(), w.next().unwrap().parse().unwrap())
            })
            .collect()
    }

    /// The logic kinds, in catalog order.
    fn logic_kinds() -> Vec<OpKind> {
        OpKind::all().filter(|&k| logic_code(k).is_some()).collect()
    }

    #[test]
    fn every_catalog_op_has_one_distinct_code() {
        let d = defines();
        let logic = logic_kinds();
        assert_eq!(logic.len(), 3, "logical_and, logical_or, logical_xor");
        assert_eq!(d.len(), UnaryOp::ALL.len() + 2 + BinaryOp::ALL.len() + UnaryGradOp::ALL.len() + 1 + logic.len());
        let unary: HashSet<i32> = d.iter().filter(|(k, _)| k.starts_with("U_")).map(|(_, &v)| v).collect();
        assert_eq!(unary.len(), UnaryOp::ALL.len() + 2, "unary codes are distinct");
        for &u in UnaryOp::ALL {
            assert_eq!(d[&format!("U_{}", u.name().to_uppercase())], unary_code(u), "{}", u.name());
        }
        for &b in BinaryOp::ALL {
            assert_eq!(d[&format!("B_{}", b.name().to_uppercase())], binary_code(b), "{}", b.name());
        }
        for &g in UnaryGradOp::ALL {
            assert_eq!(d[&format!("G_{}", g.name().to_uppercase())], grad_code(g), "{}", g.name());
        }
        for (i, &l) in logic.iter().enumerate() {
            assert_eq!(d[&format!("L_{}", l.name().to_uppercase())], i as i32, "{}", l.name());
        }
        assert_eq!((d["U_CLAMP"], d["U_POW"], d["G_CLAMP_GRAD"]), (U_CLAMP, U_POW, G_CLAMP_GRAD));
    }

    /// The generated codes `source`'s `case` labels name, each checked to be a generated code
    /// and to label one case only.
    fn case_labels<'a>(source: &'a Source, d: &HashMap<String, i32>) -> HashSet<&'a str> {
        let mut labels = HashSet::new();
        for line in source.text.lines().map(str::trim) {
            let Some(rest) = line.strip_prefix("case ") else { continue };
            let label = rest.split(':').next().unwrap();
            if ["U_", "B_", "G_", "L_"].iter().any(|p| label.starts_with(p)) {
                assert!(d.contains_key(label), "{}: `case {label}` has no generated code", source.name);
                assert!(labels.insert(label), "{}: `case {label}` twice", source.name);
            }
        }
        labels
    }

    /// The generated codes starting with one of `prefixes` (but `except`) that `source` has no
    /// case for, sorted.
    fn missing(source: &Source, prefixes: &[&str], except: &[&str]) -> Vec<String> {
        let d = defines();
        let labels = case_labels(source, &d);
        let mut missing: Vec<String> = d
            .into_keys()
            .filter(|k| prefixes.iter().any(|p| k.starts_with(p)) && !except.contains(&k.as_str()))
            .filter(|k| !labels.contains(k.as_str()))
            .collect();
        missing.sort();
        missing
    }

    #[test]
    fn every_case_label_of_the_elementwise_kernels_is_a_generated_code() {
        // Every unary op, clamp and pow, every binary op, every pointwise gradient and clamp's
        // has its case.
        let missing = missing(&ELEMENTWISE, &["U_", "B_", "G_"], &[]);
        assert!(missing.is_empty(), "elementwise.cu has no case for {missing:?} (add one to its switch)");
    }

    #[test]
    fn every_case_label_of_the_integer_kernels_is_a_generated_code() {
        // Every logic op, and every binary op but the float gradient mask, has its i64 case.
        let missing = missing(&INTEGER, &["B_", "L_"], &["B_MAXIMUM_MASK"]);
        assert!(missing.is_empty(), "integer.cu has no case for {missing:?} (add one to its switch)");
    }
}
