//! The GPU against the CPU reference: every op forward and backward, dropout masks, whole
//! training steps, strategies and memory accounting.
//!
//! Without a usable GPU every test prints `skipped: <reason>` and passes, unless
//! `REMAT_REQUIRE` names `cuda`, which turns a missing GPU into a failure.
//!
//! Tolerances (|gpu − cpu| ≤ atol + rtol·|cpu|): f32 rtol 1e-5 / atol 1e-6 (1e-4 rel for
//! reductions over long rows, matmuls and whole steps, where summation order differs); f64
//! 1e-12; bf16 1e-2; f16 2e-3. Layout ops, embeddings, casts (fp8 included), constants and dropout
//! masks must be bit-identical, and so must fp8 products of small integers with power-of-two
//! scales (random fp8 products are held to their accumulation bound instead).

use remat_core::normal_f64;
use remat_core::{
    AttnLayout, Backend, BinaryOp, Budget, CostModel, CpuBackend, DType, Domain, HostData, HostTensor, KernelCall,
    Member, Model, NodeId, Op, OpKind, OtherKind, ReduceOp, Strategy, UnaryOp,
};
use remat_cuda::CudaBackend;
use remat_zoo as zoo;

mod common;

use common::{gpu, require};

fn tensor(shape: &[usize], dtype: DType, seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n as u64).map(|i| normal_f64(seed, 1, i)).collect();
    HostTensor::new(shape.to_vec(), HostData::from_f64(&v, dtype)).unwrap()
}

fn positive(shape: &[usize], dtype: DType, seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n as u64).map(|i| 0.1 + normal_f64(seed, 2, i).abs()).collect();
    HostTensor::new(shape.to_vec(), HostData::from_f64(&v, dtype)).unwrap()
}

/// Integers in [-8, 8], exact in both fp8 formats.
fn small_ints(shape: &[usize], dtype: DType, seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n as u64).map(|i| (remat_core::uniform_u32(seed, 4, i) % 17) as f64 - 8.0).collect();
    HostTensor::new(shape.to_vec(), HostData::from_f64(&v, dtype)).unwrap()
}

fn ids(shape: &[usize], below: i64, seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n as u64).map(|i| (remat_core::uniform_u32(seed, 3, i) as i64) % below).collect();
    HostTensor::i64(shape.to_vec(), v).unwrap()
}

/// i64 values of every sign and magnitude, up to the limits (sums and products wrap); with
/// `nonzero`, 1 in place of 0 so that they can divide.
fn ints(shape: &[usize], seed: u64, nonzero: bool) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n as u64)
        .map(|i| {
            let (hi, lo) = (remat_core::uniform_u32(seed, 6, i), remat_core::uniform_u32(seed, 7, i));
            let v = ((u64::from(hi) << 32 | u64::from(lo)) as i64) >> (lo % 64);
            if nonzero && v == 0 {
                1
            } else {
                v
            }
        })
        .collect();
    HostTensor::i64(shape.to_vec(), v).unwrap()
}

/// `[11, 1]` and `[10]` i64 operands at and near the limits (no zero among the second), which
/// broadcast to every pair: `i64::MIN / -1`, `MIN % -1`, remainders of either sign.
fn int_edges() -> [HostTensor; 2] {
    let (min, max) = (i64::MIN, i64::MAX);
    [
        HostTensor::i64(vec![11, 1], vec![min, min + 1, -7, -3, -1, 0, 1, 3, 7, max - 1, max]).unwrap(),
        HostTensor::i64(vec![10], vec![min, -7, -3, -2, -1, 1, 2, 3, 7, max]).unwrap(),
    ]
}

/// i32 values of every sign and magnitude (the high half of [`ints`]' draws, shifted), with
/// `nonzero` as there.
fn ints32(shape: &[usize], seed: u64, nonzero: bool) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<i32> = (0..n as u64)
        .map(|i| {
            let (hi, lo) = (remat_core::uniform_u32(seed, 6, i), remat_core::uniform_u32(seed, 7, i));
            let v = (hi as i32) >> (lo % 32);
            if nonzero && v == 0 {
                1
            } else {
                v
            }
        })
        .collect();
    HostTensor::i32(shape.to_vec(), v).unwrap()
}

/// [`int_edges`] in i32: `i32::MIN / -1`, `MIN % -1`, remainders of either sign.
fn int32_edges() -> [HostTensor; 2] {
    let (min, max) = (i32::MIN, i32::MAX);
    [
        HostTensor::i32(vec![11, 1], vec![min, min + 1, -7, -3, -1, 0, 1, 3, 7, max - 1, max]).unwrap(),
        HostTensor::i32(vec![10], vec![min, -7, -3, -2, -1, 1, 2, 3, 7, max]).unwrap(),
    ]
}

/// i64 values at and beyond the i32 range (casts to i32 saturate) and around 2^24 (casts to f32
/// round).
fn i64_around_i32() -> HostTensor {
    let (min, max) = (i64::from(i32::MIN), i64::from(i32::MAX));
    let v = vec![i64::MIN, min - 1, min, min + 1, -1, 0, 1, (1 << 24) + 1, max - 1, max, max + 1, 1 << 40, i64::MAX];
    HostTensor::i64(vec![v.len()], v).unwrap()
}

/// `[4, 70]` rows for the ordering ops in `dt`: ties everywhere (small integers), then row 0
/// without NaN (and -0.0 tied with 0.0 as its maximum), row 1 NaN first, row 2 two NaNs
/// inside, row 3 NaN last.
fn ranked(dt: DType, seed: u64) -> HostTensor {
    let mut v = small_ints(&[4, 70], DType::F64, seed).to_f64_vec();
    for x in &mut v[..70] {
        *x = -x.abs() - 1.0;
    }
    v[5] = -0.0;
    v[6] = 0.0;
    for at in [70, 140 + 37, 140 + 50, 210 + 69] {
        v[at] = f64::NAN;
    }
    HostTensor::f64(vec![4, 70], v).unwrap().to_dtype(dt)
}

/// (rtol, atol) for results of `dtype`; `loose` for long reductions and products.
fn tolerance(dtype: DType, loose: bool) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-12, 1e-12),
        DType::F32 if loose => (1e-4, 1e-5),
        DType::F32 => (1e-5, 1e-6),
        DType::BF16 => (1e-2, 1e-2),
        DType::F16 => (2e-3, 2e-3),
        DType::F8E4M3 | DType::F8E5M2 | DType::I64 | DType::I32 | DType::Bool => (0.0, 0.0),
    }
}

/// `Err` naming the first differing element and how many differ, when `gpu` and `cpu` are not
/// equal (bitwise when `exact`) or within the dtype's tolerance.
fn compare(gpu: &HostTensor, cpu: &HostTensor, exact: bool, loose: bool) -> Result<(), String> {
    if gpu.shape() != cpu.shape() || gpu.dtype() != cpu.dtype() {
        return Err(format!("gpu {:?} {} vs cpu {:?} {}", gpu.shape(), gpu.dtype(), cpu.shape(), cpu.dtype()));
    }
    let (rtol, atol) = tolerance(cpu.dtype(), loose);
    let same = |a: f64, b: f64| {
        let close = if exact { a.to_bits() == b.to_bits() } else { a == b || (a - b).abs() <= atol + rtol * b.abs() };
        close || (a.is_nan() && b.is_nan())
    };
    let bad: Vec<usize> = match (gpu.data(), cpu.data()) {
        // i64 as i64: through f64, values above 2⁵³ that differ in their low bits look equal.
        (HostData::I64(g), HostData::I64(c)) => (0..g.len()).filter(|&i| g[i] != c[i]).collect(),
        _ => {
            let (g, c) = (gpu.to_f64_vec(), cpu.to_f64_vec());
            (0..g.len()).filter(|&i| !same(g[i], c[i])).collect()
        }
    };
    let element = |t: &HostTensor, i: usize| match t.data() {
        HostData::I64(v) => v[i].to_string(),
        _ => t.to_f64_vec()[i].to_string(),
    };
    match bad.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "{} of {} elements differ, first at {i}: gpu {} cpu {} ({})",
            bad.len(),
            cpu.numel(),
            element(gpu, i),
            element(cpu, i),
            if exact { "bitwise".to_string() } else { format!("rtol {rtol}, atol {atol}") }
        )),
    }
}

/// Runs `op` on `inputs` as node `node` of a run seeded `run_seed` on `backend`: upload,
/// execute, download. Constants, which have no inputs to infer from, produce `[3, 5]` of the
/// first input's dtype (bf16 without one); the input itself is dropped.
fn run_op<B: Backend>(
    backend: &mut B,
    op: &Op,
    inputs: &[HostTensor],
    node: u32,
    run_seed: u64,
) -> remat_core::Result<HostTensor> {
    let arange_dtype = inputs.first().map_or(DType::F32, |t| t.dtype());
    let constant_dtype = inputs.first().map_or(DType::BF16, |t| t.dtype());
    let inputs = if matches!(op, Op::Arange { .. } | Op::Constant { .. }) { &[][..] } else { inputs };
    let metas: Vec<_> = inputs.iter().map(|t| (t.shape(), t.dtype())).collect();
    let (shape, dtype) = match op {
        Op::Constant { .. } => (vec![3, 5], constant_dtype),
        Op::Arange { .. } => (vec![37], arange_dtype),
        Op::ConstantData { value } => (value.shape().to_vec(), value.dtype()),
        _ => op.infer(&metas).map(|(s, d)| (s.into_vec(), d)).map_err(remat_core::Error::internal)?,
    };
    let call = KernelCall::new(NodeId::new(node), op, &metas, &shape, dtype, run_seed);
    let buffers = inputs.iter().map(|t| backend.upload(t)).collect::<remat_core::Result<Vec<_>>>()?;
    let out = backend.execute(&call, &buffers.iter().collect::<Vec<_>>())?;
    backend.download(&out)
}

/// Runs `op` on both backends and compares; `Err` says which case failed and how.
fn check_op(g: &mut CudaBackend, op: &Op, inputs: &[HostTensor], exact: bool, loose: bool) -> Result<(), String> {
    let what = || {
        format!(
            "{} {:?} on {:?}",
            op.name(),
            op.attrs_text(),
            inputs.iter().map(|t| (t.shape(), t.dtype())).collect::<Vec<_>>()
        )
    };
    let want = run_op(&mut CpuBackend::new(), op, inputs, 1, 11).map_err(|e| format!("{} (cpu): {e}", what()))?;
    let got = run_op(g, op, inputs, 1, 11).map_err(|e| format!("{}: {e}", what()))?;
    compare(&got, &want, exact, loose).map_err(|e| format!("{}: {e}", what()))
}

/// Checks every case of `kinds` in `dt` and fails once at the end listing every failing case, so
/// one run on a GPU shows them all.
fn check_all(g: &mut CudaBackend, kinds: impl Iterator<Item = OpKind>, dt: DType) -> usize {
    let (mut covered, mut failures) = (0, Vec::new());
    for kind in kinds {
        for (op, inputs, exact, loose) in cases(kind, dt) {
            covered += 1;
            if let Err(e) = check_op(g, &op, &inputs, exact, loose) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{} of {covered} {dt} cases failed:\n{}", failures.len(), failures.join("\n"));
    covered
}

/// One case: (op, inputs, exact, loose).
type Case = (Op, Vec<HostTensor>, bool, bool);

/// Cases for every op kind: (op, inputs, exact, loose). The match is exhaustive so a new kind
/// cannot go untested.
fn cases(kind: OpKind, dt: DType) -> Vec<Case> {
    let t = |s: &[usize], seed| tensor(s, dt, seed);
    let f = |op: Op, inputs: Vec<HostTensor>| (op, inputs, false, false);
    let loose = |op: Op, inputs: Vec<HostTensor>| (op, inputs, false, true);
    let exact = |op: Op, inputs: Vec<HostTensor>| (op, inputs, true, false);
    let unary = |op: Op| vec![f(op.clone(), vec![t(&[3, 1000], 1)]), f(op, vec![t(&[7], 2)])];
    let pos_unary = |op: Op| vec![f(op, vec![positive(&[1001], dt, 3)])];
    let binary = |op: Op| {
        vec![
            f(op.clone(), vec![t(&[4, 33], 1), t(&[4, 33], 2)]),
            f(op.clone(), vec![t(&[2, 3, 40], 1), t(&[40], 2)]),
            f(op.clone(), vec![t(&[2, 1, 5], 3), t(&[4, 1], 4)]),
            f(op, vec![t(&[], 5), t(&[6, 7], 6)]),
        ]
    };
    // Cases whose inputs do not depend on `dt` (i64, bool): checked once, in the f32 run.
    let once = |v: Vec<Case>| if dt == DType::F32 { v } else { vec![] };
    let int_binary = |op: Op| {
        vec![
            exact(op.clone(), int_edges().to_vec()),
            exact(op.clone(), vec![ints(&[4, 33], 1, false), ints(&[4, 33], 2, true)]),
            exact(op.clone(), vec![ints(&[2, 1, 5], 3, false), ints(&[4, 1], 4, true)]),
            exact(op.clone(), vec![ints(&[], 5, false), ints(&[6, 7], 6, true)]),
            exact(op.clone(), int32_edges().to_vec()),
            exact(op.clone(), vec![ints32(&[4, 33], 1, false), ints32(&[4, 33], 2, true)]),
            exact(op.clone(), vec![ints32(&[2, 1, 5], 3, false), ints32(&[4, 1], 4, true)]),
            exact(op, vec![ints32(&[], 5, false), ints32(&[6, 7], 6, true)]),
        ]
    };
    let axes_sets = [vec![], vec![0], vec![1], vec![2], vec![0, 2], vec![1, 2], vec![0, 1, 2]];
    let reduce = |mk: &dyn Fn(Vec<usize>, bool) -> Op| -> Vec<Case> {
        let mut v = Vec::new();
        for axes in &axes_sets {
            v.push(loose(mk(axes.clone(), false), vec![t(&[5, 70, 130], 7)]));
        }
        v.push(loose(mk(vec![0], true), vec![t(&[3000, 4], 8)]));
        v
    };
    let other = match kind.member() {
        Member::UnaryOp(u) => match u.domain() {
            Domain::Real => return unary(Op::Unary(u)),
            Domain::Positive => return pos_unary(Op::Unary(u)),
        },
        Member::UnaryGradOp(k) => return vec![f(Op::UnaryGrad(k), vec![t(&[1000], 1), t(&[1000], 2)])],
        Member::BinaryOp(BinaryOp::MaximumMask) => {
            let a = t(&[64], 1);
            return vec![
                exact(Op::Binary(BinaryOp::MaximumMask), vec![a.clone(), a]),
                f(Op::Binary(BinaryOp::MaximumMask), vec![t(&[8, 8], 1), t(&[8], 2)]),
            ];
        }
        // Integer remainder only: floats are refused by the shape rule.
        Member::BinaryOp(BinaryOp::Rem) => return once(int_binary(Op::Binary(BinaryOp::Rem))),
        Member::BinaryOp(b) => {
            let op = Op::Binary(b);
            let mut v = binary(op.clone());
            if matches!(b, BinaryOp::Maximum | BinaryOp::Minimum) {
                let r = ranked(dt, 1);
                v.push(exact(op.clone(), vec![r.clone(), t(&[4, 70], 2)]));
                v.push(exact(op.clone(), vec![t(&[70], 3), r]));
            }
            v.extend(once(int_binary(op)));
            return v;
        }
        Member::CompareOp(c) => {
            let op = Op::Compare(c);
            let a = t(&[4, 33], 1);
            return vec![
                exact(op.clone(), vec![a.clone(), a.clone()]),
                exact(op.clone(), vec![a, t(&[33], 2)]),
                exact(op.clone(), vec![ids(&[5, 1], 4, 3), ids(&[6], 4, 4)]),
                exact(op.clone(), int_edges().to_vec()),
                exact(op, int32_edges().to_vec()),
            ];
        }
        Member::LogicOp(l) => {
            let op = Op::Logic(l);
            return once(vec![
                exact(op.clone(), vec![mask(&[4, 33], 1), mask(&[4, 33], 2)]),
                exact(op.clone(), vec![mask(&[5, 1], 3), mask(&[6], 4)]),
                exact(op, vec![mask(&[], 5), mask(&[3, 4], 6)]),
            ]);
        }
        Member::ArgReduceOp(op) => {
            let arg = |axis, keepdim| Op::ArgReduce { op, axis, keepdim };
            let mut v = vec![
                exact(arg(1, false), vec![t(&[6, 1000], 1)]),
                exact(arg(0, true), vec![t(&[37, 5], 2)]),
                exact(arg(1, false), vec![small_ints(&[4, 50, 3], dt, 3)]),
                exact(arg(1, true), vec![ranked(dt, 4)]),
                exact(arg(0, false), vec![ranked(dt, 5)]),
            ];
            v.extend(once(vec![
                exact(arg(1, false), vec![ints(&[5, 40], 6, false)]),
                exact(arg(0, false), vec![ids(&[300, 3], 4, 7)]),
                exact(arg(0, true), vec![int_edges()[0].clone()]),
                exact(arg(1, false), vec![ints32(&[5, 40], 6, false)]),
                exact(arg(0, true), vec![int32_edges()[0].clone()]),
            ]));
            return v;
        }
        Member::ReduceOp(op) => return reduce(&|axes, keepdim| Op::Reduce { op, axes, keepdim }),
        Member::Other(other) => other,
    };
    use OtherKind as K;
    match other {
        K::Input | K::Param => vec![],
        K::LogicalNot => once(vec![exact(Op::LogicalNot, vec![mask(&[4, 33], 1)])]),
        K::Topk => {
            let topk = |k, axis, largest| Op::Topk { k, axis, largest };
            let mut v = vec![
                // Routing: 64 tokens, 8 experts, top 2.
                exact(topk(2, 1, true), vec![t(&[64, 8], 1)]),
                exact(topk(5, 0, false), vec![t(&[20, 3], 2)]),
                exact(topk(70, 1, true), vec![ranked(dt, 3)]),
                exact(topk(10, 1, false), vec![ranked(dt, 4)]),
                exact(topk(3, 0, true), vec![ranked(dt, 5)]),
            ];
            v.extend(once(vec![
                exact(topk(4, 1, true), vec![ints(&[8, 16], 6, false)]),
                exact(topk(7, 1, false), vec![ids(&[10, 30], 5, 7)]),
                exact(topk(11, 0, true), vec![int_edges()[0].clone()]),
                exact(topk(4, 1, true), vec![ints32(&[8, 16], 6, false)]),
                exact(topk(11, 0, false), vec![int32_edges()[0].clone()]),
            ]));
            v
        }
        K::Argsort => {
            let argsort = |axis, descending| Op::Argsort { axis, descending };
            let mut v = vec![
                exact(argsort(1, true), vec![t(&[6, 50], 1)]),
                exact(argsort(0, false), vec![t(&[30, 4], 2)]),
                exact(argsort(1, true), vec![ranked(dt, 3)]),
                exact(argsort(1, false), vec![ranked(dt, 4)]),
                exact(argsort(0, true), vec![ranked(dt, 5)]),
            ];
            v.extend(once(vec![
                exact(argsort(1, false), vec![ints(&[8, 16], 6, false)]),
                exact(argsort(1, true), vec![ids(&[10, 30], 5, 7)]),
                exact(argsort(1, false), vec![ints32(&[8, 16], 7, false)]),
            ]));
            v
        }
        K::Bincount => once(vec![
            exact(Op::Bincount { bins: 8 }, vec![ids(&[64, 2], 8, 1)]),
            // Bins no id falls in.
            exact(Op::Bincount { bins: 40 }, vec![ids(&[1000], 37, 2)]),
        ]),
        K::OneHot => {
            let hot = |dtype| Op::OneHot { classes: 10, dtype };
            let mut v = vec![exact(hot(dt), vec![ids(&[3, 7], 10, 1)])];
            v.extend(once(vec![
                exact(hot(DType::I64), vec![ids(&[5], 10, 2)]),
                exact(hot(DType::Bool), vec![ids(&[2, 3], 10, 3)]),
                exact(hot(DType::I32), vec![ids(&[4, 2], 10, 4)]),
            ]));
            v
        }
        // Sums in the CPU's order, in the compute type: bit for bit.
        K::Cumsum => {
            let cumsum = |axis, reverse| Op::Cumsum { axis, reverse };
            let lead = HostTensor::f64(vec![2, 4], vec![-0.0, 1.0, -1.0, 2.5, 3.0, f64::NAN, 1.0, -0.0]).unwrap();
            let mut v = vec![
                exact(cumsum(1, false), vec![t(&[4, 300], 1)]),
                exact(cumsum(1, true), vec![t(&[4, 300], 1)]),
                exact(cumsum(0, false), vec![t(&[50, 3], 2)]),
                exact(cumsum(0, true), vec![t(&[50, 3], 2)]),
                exact(cumsum(1, false), vec![lead.to_dtype(dt)]),
                exact(cumsum(1, true), vec![lead.to_dtype(dt)]),
            ];
            v.extend(once(vec![
                exact(cumsum(1, false), vec![ints(&[5, 40], 3, false)]),
                exact(cumsum(0, true), vec![ints(&[40, 5], 4, false)]),
                exact(cumsum(1, false), vec![ints32(&[5, 40], 3, false)]),
                exact(cumsum(0, true), vec![ints32(&[40, 5], 4, false)]),
            ]));
            v
        }
        // Repeated indices (more indices than entries), summed in index order.
        K::IndexAdd => {
            let mut v = vec![
                exact(Op::IndexAdd { axis: 1 }, vec![t(&[3, 10, 4], 1), ids(&[17], 10, 2), t(&[3, 17, 4], 3)]),
                exact(Op::IndexAdd { axis: 0 }, vec![t(&[6, 5], 4), ids(&[9], 6, 5), t(&[9, 5], 6)]),
            ];
            v.extend(once(vec![
                exact(
                    Op::IndexAdd { axis: 0 },
                    vec![ints(&[6, 5], 7, false), ids(&[9], 6, 8), ints(&[9, 5], 9, false)],
                ),
                exact(
                    Op::IndexAdd { axis: 1 },
                    vec![ints32(&[5, 6], 7, false), ids(&[9], 6, 8), ints32(&[5, 9], 9, false)],
                ),
            ]));
            v
        }
        K::ScatterAdd => {
            let mut v = vec![
                exact(Op::ScatterAdd { axis: 1 }, vec![t(&[3, 10, 4], 1), ids(&[3, 17, 4], 10, 2), t(&[3, 17, 4], 3)]),
                exact(Op::ScatterAdd { axis: 0 }, vec![t(&[6, 5], 4), ids(&[9, 5], 6, 5), t(&[9, 5], 6)]),
                exact(Op::ScatterAdd { axis: 1 }, vec![t(&[6, 5], 7), ids(&[6, 2], 5, 8), t(&[6, 2], 9)]),
            ];
            v.extend(once(vec![
                exact(
                    Op::ScatterAdd { axis: 1 },
                    vec![ints(&[4, 6], 10, false), ids(&[4, 11], 6, 11), ints(&[4, 11], 12, false)],
                ),
                exact(
                    Op::ScatterAdd { axis: 0 },
                    vec![ints32(&[6, 4], 10, false), ids(&[11, 4], 6, 11), ints32(&[11, 4], 12, false)],
                ),
            ]));
            v
        }
        K::Constant => {
            let mut v = vec![exact(Op::Constant { value: 2.7 }, vec![])];
            // Integer fills: truncated and saturated as a cast would.
            let one = HostTensor::full(vec![1], 0.0, DType::I32).unwrap();
            for value in [2.7, -2.7, 1e10, -1e10] {
                v.extend(once(vec![exact(Op::Constant { value }, vec![one.clone()])]));
            }
            v
        }
        K::Clamp => unary(Op::Clamp { min: -0.5, max: 0.75 }),
        K::AmaxGrad => {
            let x = HostTensor::from_f32(vec![2, 3], &[1., 5., 5., 7., 2., 3.], dt).unwrap();
            let y = HostTensor::from_f32(vec![2], &[5., 7.], dt).unwrap();
            let x2 = t(&[4, 50, 6], 9);
            let mut cpu = CpuBackend::new();
            let m = [(x2.shape(), dt)];
            let op = Op::Reduce { op: ReduceOp::Amax, axes: vec![1], keepdim: true };
            let (s, d) = op.infer(&m).unwrap();
            let call = KernelCall::new(NodeId::new(0), &op, &m, &s, d, 0);
            let xb = cpu.upload(&x2).unwrap();
            let yb = cpu.execute(&call, &[&xb]).unwrap();
            let y2 = cpu.download(&yb).unwrap();
            vec![
                exact(Op::AmaxGrad { axes: vec![1], keepdim: false }, vec![x, y, t(&[2], 3)]),
                f(Op::AmaxGrad { axes: vec![1], keepdim: true }, vec![x2, y2, t(&[4, 1, 6], 4)]),
            ]
        }
        K::Matmul => vec![
            loose(Op::Matmul, vec![t(&[33, 70], 1), t(&[70, 17], 2)]),
            loose(Op::Matmul, vec![t(&[2, 3, 5, 8], 1), t(&[1, 3, 8, 4], 2)]),
            loose(Op::Matmul, vec![t(&[2, 1, 5, 8], 1), t(&[3, 8, 4], 2)]),
            loose(Op::Matmul, vec![t(&[4, 16, 64], 3), t(&[64, 32], 4)]),
            exact(Op::Matmul, vec![t(&[2, 0], 1), t(&[0, 3], 2)]),
        ],
        K::MatmulT => {
            let mt = |ta, tb, fold| Op::MatmulT { ta, tb, fold };
            vec![
                loose(mt(false, true, false), vec![t(&[2, 3, 33, 40], 1), t(&[2, 3, 20, 40], 2)]),
                loose(mt(true, false, false), vec![t(&[40, 33], 3), t(&[2, 40, 20], 4)]),
                loose(mt(true, true, false), vec![t(&[3, 40, 33], 5), t(&[1, 20, 40], 6)]),
                loose(mt(true, false, true), vec![t(&[4, 50, 33], 7), t(&[4, 50, 20], 8)]),
            ]
        }
        K::ScaledMatmul => {
            // Small integers and power-of-two scales: every partial sum is exact, so the tensor
            // cores must agree bit for bit. Aligned, padded (5x7·7x3) and broadcast batches.
            let (e4, e5) = (DType::F8E4M3, DType::F8E5M2);
            let sc = |v: f32| HostTensor::f32(vec![], vec![v]).unwrap();
            let mm = |a: HostTensor, b: HostTensor, sa, sb| exact(Op::ScaledMatmul, vec![a, b, sc(sa), sc(sb)]);
            vec![
                mm(small_ints(&[16, 32], e4, 1), small_ints(&[32, 48], e4, 2), 0.5, 4.0),
                mm(small_ints(&[5, 7], e4, 3), small_ints(&[7, 3], e4, 4), 0.25, 2.0),
                mm(small_ints(&[2, 3, 16, 32], e4, 5), small_ints(&[32, 16], e4, 6), 1.0, 0.125),
                mm(small_ints(&[2, 1, 5, 7], e4, 7), small_ints(&[3, 7, 9], e5, 8), 2.0, 1.0),
                mm(small_ints(&[33, 20], e5, 9), small_ints(&[20, 17], e4, 10), 1.0, 1.0),
            ]
        }
        K::Reshape => vec![exact(Op::Reshape { shape: vec![6, 5] }, vec![t(&[2, 15], 1)])],
        K::Transpose => vec![
            exact(Op::Transpose { perm: vec![1, 0] }, vec![t(&[37, 70], 1)]),
            exact(Op::Transpose { perm: vec![0, 2, 1, 3] }, vec![t(&[2, 9, 3, 4], 2)]),
            exact(Op::Transpose { perm: vec![0, 1, 3, 2] }, vec![t(&[2, 3, 40, 33], 3)]),
            exact(Op::Transpose { perm: vec![2, 0, 1] }, vec![t(&[2, 3, 4], 4)]),
        ],
        K::Expand => vec![
            exact(Op::Expand { shape: vec![3, 2, 2] }, vec![t(&[2, 1], 1)]),
            exact(Op::Expand { shape: vec![4, 4] }, vec![t(&[], 2)]),
        ],
        K::Concat => vec![
            exact(Op::Concat { axis: 1 }, vec![t(&[2, 3], 1), t(&[2, 1], 2), t(&[2, 3], 3)]),
            exact(Op::Concat { axis: 0 }, vec![t(&[2, 3], 1), t(&[4, 3], 2)]),
            exact(Op::Concat { axis: 1 }, vec![ints32(&[2, 3], 1, false), ints32(&[2, 5], 2, false)]),
        ],
        K::Slice => vec![
            exact(Op::Slice { axis: 1, start: 1, len: 2 }, vec![t(&[2, 3, 4], 1)]),
            exact(Op::Slice { axis: 0, start: 3, len: 2 }, vec![t(&[8, 5], 2)]),
        ],
        K::Softmax => vec![loose(Op::Softmax, vec![t(&[5, 1000], 1)]), f(Op::Softmax, vec![t(&[3, 7], 2)])],
        K::LogSoftmax => vec![loose(Op::LogSoftmax, vec![t(&[5, 1000], 1)])],
        K::SoftmaxGrad => vec![loose(Op::SoftmaxGrad, vec![t(&[4, 300], 1), t(&[4, 300], 2)])],
        K::LogSoftmaxGrad => vec![loose(Op::LogSoftmaxGrad, vec![t(&[4, 300], 1), t(&[4, 300], 2)])],
        K::LayerNorm => vec![loose(Op::LayerNorm { eps: 1e-5 }, vec![t(&[6, 1024], 1)])],
        K::LayerNormGrad => vec![loose(Op::LayerNormGrad { eps: 1e-5 }, vec![t(&[6, 1000], 1), t(&[6, 1000], 2)])],
        K::CrossEntropy => vec![loose(Op::CrossEntropy, vec![t(&[2, 7, 500], 1), ids(&[2, 7], 500, 2)])],
        K::CrossEntropyGrad => {
            vec![loose(Op::CrossEntropyGrad, vec![t(&[9, 300], 1), ids(&[9], 300, 2), t(&[], 3)])]
        }
        K::Embedding => vec![exact(Op::Embedding, vec![t(&[50, 12], 1), ids(&[3, 7], 50, 2)])],
        K::EmbeddingGrad => {
            vec![loose(Op::EmbeddingGrad { rows: 40 }, vec![ids(&[5, 9], 40, 2), t(&[5, 9, 24], 1)])]
        }
        K::Cast => {
            let mut v = Vec::new();
            for to in DType::ALL {
                if !to.is_int() && to != DType::Bool {
                    // `half` may round f64 -> f16 through f32 (F16C) on the CPU: allow that one ulp.
                    let mk = if dt == DType::F64 && to == DType::F16 { f } else { exact };
                    v.push(mk(Op::Cast { dtype: to }, vec![t(&[300], 4)]));
                    v.push(exact(Op::Cast { dtype: to }, vec![tensor(&[300], DType::F8E4M3, 5)]));
                }
            }
            let big = HostTensor::f32(vec![6], vec![1e6, -1e6, 448.0, 1.0625, 1.1875, f32::NAN]).unwrap();
            v.push(exact(Op::Cast { dtype: DType::F8E4M3 }, vec![big.clone()]));
            v.push(exact(Op::Cast { dtype: DType::F8E5M2 }, vec![big]));
            v.push(exact(Op::Cast { dtype: DType::F32 }, vec![ids(&[20], 1 << 40, 6)]));
            v.push(exact(Op::Cast { dtype: DType::BF16 }, vec![ids(&[20], 1 << 40, 6)]));
            v.push(exact(Op::Cast { dtype: dt }, vec![mask(&[33], 7)]));
            // To integers and bools: truncation, saturation, NaN to 0; nonzero is true.
            let edges = HostTensor::f64(
                vec![9],
                vec![-1.7, 1.7, -0.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e30, -0.0, 3.0],
            )
            .unwrap()
            .to_dtype(dt);
            for to in [DType::I64, DType::I32, DType::Bool] {
                v.push(exact(Op::Cast { dtype: to }, vec![t(&[300], 4)]));
                v.push(exact(Op::Cast { dtype: to }, vec![edges.clone()]));
                v.push(exact(Op::Cast { dtype: to }, vec![ids(&[20], 1 << 40, 6)]));
            }
            // To i32 at its boundaries: ±2^31 and the values beside them, in f64 (exact) and in
            // `dt` (rounded there first).
            let p31 = 2147483648.0;
            let bounds = HostTensor::f64(
                vec![10],
                vec![p31, p31 - 1.0, p31 - 0.5, p31 + 1.0, -p31, -p31 + 0.5, -p31 - 1.0, -p31 - 0.5, 1e10, -1e10],
            )
            .unwrap();
            v.push(exact(Op::Cast { dtype: DType::I32 }, vec![bounds.to_dtype(dt)]));
            v.extend(once(vec![exact(Op::Cast { dtype: DType::I32 }, vec![bounds])]));
            // From i32 to every dtype (rounded once), and between the integers (i64 -> i32
            // saturates).
            for to in DType::ALL {
                v.extend(once(vec![
                    exact(Op::Cast { dtype: to }, vec![ints32(&[300], 8, false)]),
                    exact(Op::Cast { dtype: to }, vec![int32_edges()[0].clone()]),
                ]));
            }
            v.extend(once(vec![
                exact(Op::Cast { dtype: DType::I32 }, vec![i64_around_i32()]),
                exact(Op::Cast { dtype: DType::I32 }, vec![mask(&[33], 7)]),
                exact(Op::Cast { dtype: DType::I32 }, vec![tensor(&[300], DType::F8E4M3, 5)]),
                exact(Op::Cast { dtype: DType::I32 }, vec![tensor(&[300], DType::F8E5M2, 5)]),
            ]));
            v
        }
        K::Dropout => vec![exact(Op::Dropout { p: 0.3, seed: 5, key: 9 }, vec![t(&[10_007], 1)])],
        K::ClampGrad => vec![f(Op::ClampGrad { min: -0.5, max: 0.5 }, vec![t(&[1000], 1), t(&[1000], 2)])],
        K::Pow => vec![
            f(Op::Pow { exponent: 3.0 }, vec![t(&[500], 1)]),
            f(Op::Pow { exponent: -0.5 }, vec![positive(&[500], dt, 2)]),
        ],
        K::ConstantData => vec![exact(Op::ConstantData { value: std::sync::Arc::new(t(&[4, 9], 3)) }, vec![])],
        // The run helper gives arange 37 elements of the first input's dtype (the input itself is dropped).
        K::Arange => {
            let mut v = vec![exact(Op::Arange { start: -3.0, step: 0.5 }, vec![t(&[1], 1)])];
            // Integers round half away from zero (-2.5 to -3), then saturate.
            for int in [DType::I64, DType::I32] {
                let one = HostTensor::full(vec![1], 0.0, int).unwrap();
                v.extend(once(vec![
                    exact(Op::Arange { start: -3.0, step: 0.5 }, vec![one.clone()]),
                    exact(Op::Arange { start: -9.25, step: 0.75 }, vec![one.clone()]),
                    exact(Op::Arange { start: 2147483600.0, step: 3.0 }, vec![one.clone()]),
                    exact(Op::Arange { start: -2147483600.0, step: -3.0 }, vec![one]),
                ]));
            }
            v
        }
        K::Where => {
            let mut v = vec![
                exact(Op::Where, vec![mask(&[4, 33], 1), t(&[4, 33], 2), t(&[4, 33], 3)]),
                exact(Op::Where, vec![mask(&[5, 1], 2), t(&[5, 7], 4), t(&[], 5)]),
            ];
            v.extend(once(vec![exact(
                Op::Where,
                vec![mask(&[5, 1], 3), ints32(&[5, 7], 4, false), ints32(&[], 5, false)],
            )]));
            v
        }
        K::IndexSelect => vec![
            exact(Op::IndexSelect { axis: 1 }, vec![t(&[3, 10, 4], 1), ids(&[17], 10, 2)]),
            exact(Op::IndexSelect { axis: 0 }, vec![ids(&[12, 3], 99, 3), ids(&[5], 12, 4)]),
            exact(Op::IndexSelect { axis: 1 }, vec![ints32(&[3, 12], 3, false), ids(&[5], 12, 4)]),
        ],
        K::IndexSelectGrad => {
            vec![loose(Op::IndexSelectGrad { axis: 1, dim: 10 }, vec![ids(&[17], 10, 2), t(&[3, 17, 4], 1)])]
        }
        K::Gather => vec![
            exact(Op::Gather { axis: 1 }, vec![t(&[3, 10, 4], 1), ids(&[3, 6, 4], 10, 2)]),
            exact(Op::Gather { axis: 0 }, vec![ids(&[12, 3], 99, 3), ids(&[5, 3], 12, 4)]),
            exact(Op::Gather { axis: 0 }, vec![ints32(&[12, 3], 3, false), ids(&[5, 3], 12, 4)]),
        ],
        K::GatherGrad => {
            vec![loose(Op::GatherGrad { axis: 1, dim: 10 }, vec![ids(&[3, 17, 4], 10, 2), t(&[3, 17, 4], 1)])]
        }
        K::SliceGrad => vec![exact(Op::SliceGrad { axis: 1, start: 2, dim: 7 }, vec![t(&[3, 4, 5], 1)])],
        K::RmsNorm => vec![loose(Op::RmsNorm { eps: 1e-5 }, vec![t(&[6, 1024], 1)])],
        K::RmsNormGrad => vec![loose(Op::RmsNormGrad { eps: 1e-5 }, vec![t(&[6, 1000], 1), t(&[6, 1000], 2)])],
        K::Sdpa => {
            let qkv = |tq: usize, tk: usize, d: usize, s| {
                vec![t(&[2, tq, d], s), t(&[2, tk, d], s + 1), t(&[2, tk, d], s + 2)]
            };
            // Token-major: [batch, t, heads, d], heads read in place.
            let tokens = |tq: usize, tk: usize, d: usize, s| {
                vec![t(&[2, tq, 3, d], s), t(&[2, tk, 3, d], s + 1), t(&[2, tk, 3, d], s + 2)]
            };
            let sdpa = |causal, scale, layout| Op::Sdpa { causal, scale, layout };
            vec![
                loose(sdpa(true, 0.25, AttnLayout::HeadMajor), qkv(70, 70, 16, 1)),
                loose(sdpa(false, 0.125, AttnLayout::HeadMajor), qkv(9, 130, 64, 4)),
                loose(sdpa(true, 0.25, AttnLayout::TokenMajor), tokens(70, 70, 16, 7)),
            ]
        }
        K::SdpaGrad => {
            let (tq, d) = (40, 16);
            [(AttnLayout::HeadMajor, vec![2, tq, d]), (AttnLayout::TokenMajor, vec![2, tq, 3, d])]
                .into_iter()
                .map(|(layout, shape)| {
                    let (q, k, v) = (t(&shape, 1), t(&shape, 2), t(&shape, 3));
                    let op = Op::Sdpa { causal: true, scale: 0.25, layout };
                    let saved = run_op(&mut CpuBackend::new(), &op, &[q.clone(), k.clone(), v.clone()], 0, 0).unwrap();
                    let g = t(saved.shape(), 4);
                    loose(Op::SdpaGrad { causal: true, scale: 0.25, layout }, vec![q, k, v, saved, g])
                })
                .collect()
        }
    }
}

/// A bool mask.
fn mask(shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor::bool(
        shape.to_vec(),
        (0..n as u64).map(|i| remat_core::uniform_u32(seed, 5, i).is_multiple_of(2)).collect(),
    )
    .unwrap()
}

#[test]
fn without_a_gpu_new_is_an_error_that_says_why() {
    if let Some(reason) = CudaBackend::unavailable_reason() {
        let err = CudaBackend::new(0).unwrap_err().to_string();
        assert!(err.contains("cuda:0") && err.contains(&reason), "{err}");
        require::skip("cuda", format!("no GPU: {reason}"));
    } else {
        assert!(CudaBackend::new(0).is_ok());
    }
}

#[test]
fn every_op_matches_the_cpu_in_f32() {
    let Some(mut g) = gpu() else { return };
    let fp8 = g.compute_capability() >= 89;
    if !fp8 {
        println!("scaled_matmul skipped: sm_{} has no fp8 tensor cores", g.compute_capability());
    }
    let kinds = OpKind::all().filter(|&k| fp8 || k != OpKind::ScaledMatmul);
    println!("{} f32 cases", check_all(&mut g, kinds, DType::F32));
}

#[test]
fn every_op_matches_the_cpu_in_bf16_f16_and_f64() {
    let Some(mut g) = gpu() else { return };
    for dt in [DType::BF16, DType::F16, DType::F64] {
        // scaled_matmul has fp8 operands whatever the dtype: covered in f32.
        let kinds = OpKind::all().filter(|&k| k != OpKind::ScaledMatmul);
        println!("{} {dt} cases", check_all(&mut g, kinds, dt));
    }
}

/// Runs `scaled_matmul` on the GPU alone.
fn gpu_scaled_matmul(g: &mut CudaBackend, inputs: &[HostTensor]) -> remat_core::Result<HostTensor> {
    run_op(g, &Op::ScaledMatmul, inputs, 4, 0)
}

/// Random fp8 values and arbitrary scales: fp8 tensor cores keep partial sums to fewer bits
/// than f32 before promoting them (Hopper), so each element is held to 2⁻¹² of the sum of the
/// magnitudes of its products — the error bound of that accumulation — rather than to f32.
/// Unsupported combinations are errors that say why.
#[test]
fn scaled_matmul_runs_on_fp8_tensor_cores() {
    let Some(mut g) = gpu() else { return };
    let (e4, e5) = (DType::F8E4M3, DType::F8E5M2);
    let sc = |v: f32| HostTensor::f32(vec![], vec![v]).unwrap();
    let (m, k, n) = (64, 96, 40);
    let (a, b) = (tensor(&[m, k], e4, 21), tensor(&[k, n], e4, 22));
    let inputs = [a.clone(), b.clone(), sc(0.37), sc(1.9)];
    if g.compute_capability() < 89 {
        let err = gpu_scaled_matmul(&mut g, &inputs).unwrap_err().to_string();
        assert!(err.contains("fp8 tensor cores") && err.contains("node 4"), "{err}");
        println!("sm_{}: scaled_matmul is an error, as it should be: {err}", g.compute_capability());
        return;
    }
    let got = gpu_scaled_matmul(&mut g, &inputs).unwrap().to_f64_vec();
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let scale = 0.37f32 as f64 * 1.9f32 as f64;
    for i in 0..m {
        for j in 0..n {
            let terms: Vec<f64> = (0..k).map(|p| av[i * k + p] * bv[p * n + j]).collect();
            let exact: f64 = terms.iter().sum::<f64>() * scale;
            let bound = terms.iter().map(|t| t.abs()).sum::<f64>() * scale / 4096.0 + 1e-6;
            let e = got[i * n + j];
            assert!((e - exact).abs() <= bound, "[{i},{j}]: gpu {e}, exact {exact}, bound {bound}");
        }
    }
    let both_e5 = [tensor(&[16, 16], e5, 1), tensor(&[16, 16], e5, 2), sc(1.0), sc(1.0)];
    let err = gpu_scaled_matmul(&mut g, &both_e5).unwrap_err().to_string();
    assert!(err.contains("f8e5m2 × f8e5m2") && err.contains("f8e4m3") && err.contains("node 4"), "{err}");
    assert_eq!(g.memory().live_bytes, 0, "scratch and buffers are all freed");
}

/// A step whose plan needs more than the device has fails with an out-of-memory error naming
/// the node, the free bytes and the plan's predicted peak, frees what it held, and leaves the
/// backend usable.
#[test]
fn running_out_of_device_memory_is_an_error_with_the_predicted_peak() {
    let Some(mut g) = gpu() else { return };
    let trace = remat_core::Trace::new();
    let w = trace.param("w", &[1], DType::F32);
    let huge = w.expand(&[1 << 19, 1 << 19]); // 2^38 f32: 1 TiB
    let model = Model::new(trace.finish(&huge.mean_all()).unwrap()).unwrap();
    let predicted = model.plan().predicted_peak() as u64;
    let err = model.step(&mut g, &model.init_params(0).unwrap(), &remat_core::Feeds::new()).unwrap_err();
    println!("{err}");
    let remat_core::Error::OutOfMemory { node, free, requested, predicted_peak, .. } = &err else {
        panic!("expected out of memory, got {err}");
    };
    assert_eq!(*predicted_peak, Some(predicted));
    assert!(requested > free && node.is_some_and(|(_, op)| op == "expand"), "{err}");
    assert!(err.to_string().contains("predicted peak"), "{err}");
    assert_eq!(g.memory().live_bytes, 0, "the failed step freed its buffers");
    let cfg = zoo::MlpConfig { batch: 4, widths: vec![3, 5, 2] };
    let small = Model::new(zoo::mlp(&cfg).unwrap()).unwrap();
    let out = small.step(&mut g, &small.init_params(0).unwrap(), &zoo::mlp_feeds(&cfg, 0).unwrap()).unwrap();
    assert_eq!(out.measured_peak, out.predicted_peak, "the backend still works");
}

#[test]
fn dropout_masks_are_bit_identical_to_the_cpu() {
    let Some(mut g) = gpu() else { return };
    for (p, n) in [(0.1, 1), (0.25, 4097), (0.5, 100_003)] {
        let x = HostTensor::f32(vec![n], vec![1.0; n]).unwrap();
        check_op(&mut g, &Op::Dropout { p, seed: 3, key: 77 }, &[x], true, false).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Ops whose inputs are wrong in a way only their values show, and what the error says on
/// either backend: integer division by zero, ids out of range.
fn value_errors() -> Vec<(Op, Vec<HostTensor>, &'static str)> {
    let i = |shape: Vec<usize>, v: Vec<i64>| HostTensor::i64(shape, v).unwrap();
    let bad = i(vec![3], vec![1, 9, 0]);
    let x = tensor(&[4, 3], DType::F32, 1);
    let div = "integer division by zero at output element 1";
    let id = "9 at position 1 ";
    vec![
        (Op::Binary(BinaryOp::Div), vec![i(vec![3], vec![1, 2, 3]), i(vec![3], vec![1, 0, 1])], div),
        (Op::Binary(BinaryOp::Rem), vec![i(vec![1], vec![5]), i(vec![3], vec![1, 0, 1])], div),
        (Op::Bincount { bins: 4 }, vec![bad.clone()], id),
        (Op::OneHot { classes: 4, dtype: DType::F32 }, vec![bad.clone()], id),
        (Op::IndexAdd { axis: 0 }, vec![x.clone(), bad, tensor(&[3, 3], DType::F32, 2)], id),
        (
            Op::ScatterAdd { axis: 1 },
            vec![x, i(vec![4, 2], vec![0, 9, 1, 2, 0, 0, 1, 1]), tensor(&[4, 2], DType::F32, 3)],
            id,
        ),
    ]
}

/// The value errors are errors on the CPU, saying what the GPU's say (checked without a GPU).
#[test]
fn value_errors_name_the_node_on_the_cpu() {
    for (op, inputs, says) in value_errors() {
        let err = run_op(&mut CpuBackend::new(), &op, &inputs, 42, 0).unwrap_err().to_string();
        assert!(err.contains("%42") && err.contains(op.name()) && err.contains(says), "{err}");
    }
}

/// Found on the device, reported at the download naming the node and its op; the backend
/// stays usable.
#[test]
fn value_errors_name_the_node_and_op_on_the_gpu() {
    let Some(mut g) = gpu() else { return };
    for (op, inputs, says) in value_errors() {
        let err = run_op(&mut g, &op, &inputs, 42, 0).unwrap_err().to_string();
        assert!(err.contains("%42") && err.contains(op.name()) && err.contains(says), "{err}");
    }
    let (a, b) = (tensor(&[4], DType::F32, 1), tensor(&[4], DType::F32, 2));
    check_op(&mut g, &Op::Binary(BinaryOp::Add), &[a, b], false, false).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn bad_ids_are_errors_naming_the_node() {
    let Some(mut g) = gpu() else { return };
    let table = tensor(&[4, 3], DType::F32, 1);
    let bad = HostTensor::i64(vec![2], vec![1, 9]).unwrap();
    let metas = [(table.shape(), table.dtype()), (bad.shape(), bad.dtype())];
    let call = KernelCall::new(NodeId::new(42), &Op::Embedding, &metas, &[2, 3], DType::F32, 0);
    let (t, i) = (g.upload(&table).unwrap(), g.upload(&bad).unwrap());
    let out = g.execute(&call, &[&t, &i]).unwrap();
    let err = g.download(&out).unwrap_err().to_string();
    assert!(err.contains("42") && err.contains("id 9"), "{err}");
}

fn small_gpt(dtype: DType, dropout: f64) -> zoo::GptConfig {
    zoo::GptConfig { batch: 2, seq: 16, d_model: 32, heads: 4, layers: 2, vocab: 50, dropout, dtype }
}

#[test]
fn training_steps_match_the_cpu_and_memory_matches_the_plan() {
    let Some(mut g) = gpu() else { return };
    for (dtype, dropout) in [(DType::F32, 0.1), (DType::BF16, 0.0)] {
        let cfg = small_gpt(dtype, dropout);
        let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
        let params = model.init_params(1).unwrap();
        let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
        let want = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, 5).unwrap();
        let got = model.step_seeded(&mut g, &params, &feeds, 5).unwrap();
        let (rtol, _) = tolerance(dtype, true);
        assert!(
            (got.loss - want.loss).abs() <= 10.0 * rtol * want.loss.abs(),
            "{dtype}: loss {} vs {}",
            got.loss,
            want.loss
        );
        for (i, (a, b)) in got.grads.iter().zip(&want.grads).enumerate() {
            let scale = b.to_f64_vec().iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-3);
            for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                assert!((x - y).abs() <= 20.0 * rtol * scale, "{dtype}: grad {i}: {x} vs {y} (scale {scale})");
            }
        }
        assert_eq!(got.measured_peak, got.predicted_peak, "{dtype}: measured peak equals the plan's prediction");
        assert_eq!(got.measured_peak, want.measured_peak, "{dtype}: same peak as the CPU");
    }
}

#[test]
fn decoding_with_caches_on_the_device_matches_the_cpu() {
    let Some(mut g) = gpu() else { return };
    let cfg = small_gpt(DType::F32, 0.0);
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let params = model.init_params(2).unwrap();
    let prompts = vec![vec![1, 2, 3], vec![4, 5, 6]];
    let mut cpu = CpuBackend::new();
    let step = |s: &remat_core::DecodeStep| zoo::gpt_step(&cfg, s);
    let mut on_cpu = remat_core::DecoderBuilder::new(2, cfg.seq).build(&mut cpu, &params, step).unwrap();
    let mut on_gpu = remat_core::DecoderBuilder::new(2, cfg.seq).build(&mut g, &params, step).unwrap();
    for pos in 0..6 {
        let tokens = [(pos * 7 % 50) as i64, (pos * 3 % 50) as i64];
        let (want, got) = (on_cpu.step(&tokens).unwrap(), on_gpu.step(&tokens).unwrap());
        for (x, y) in got.iter().zip(&want) {
            assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "position {pos}: {x} vs {y}");
        }
    }
    let sampling = remat_core::Sampling::greedy();
    let (want, got) =
        (on_cpu.generate(&prompts, 12, &sampling).unwrap(), on_gpu.generate(&prompts, 12, &sampling).unwrap());
    assert_eq!(got.measured_peak, got.predicted_peak, "the device peak is the plan's");
    assert_eq!(got.predicted_peak, want.predicted_peak);
    assert_eq!(got.tokens, want.tokens, "greedy tokens (a near tie could differ; none at these seeds)");
}

#[test]
fn gradients_are_bitwise_identical_across_strategies_on_the_gpu() {
    let Some(mut g) = gpu() else { return };
    let cfg = small_gpt(DType::F32, 0.1);
    let graph = zoo::gpt(&cfg).unwrap();
    let feeds = zoo::synthetic_tokens(&cfg, 1).unwrap();
    let mut reference: Option<Vec<HostTensor>> = None;
    for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.5))] {
        let model = Model::with_strategy(graph.clone(), strategy).unwrap();
        let params = model.init_params(2).unwrap();
        let out = model.step_seeded(&mut g, &params, &feeds, 9).unwrap();
        assert_eq!(out.measured_peak, out.predicted_peak, "{strategy:?}");
        match &reference {
            None => reference = Some(out.grads),
            Some(r) => {
                for (a, b) in out.grads.iter().zip(r) {
                    assert_eq!(a, b, "{strategy:?}: gradients differ bitwise");
                }
            }
        }
    }
    // Nothing leaks: every buffer of the steps was freed.
    assert_eq!(g.memory().live_bytes, 0);
}

/// The case table itself is checked here, GPU or not: every case is a valid call the CPU runs.
#[test]
fn every_case_is_a_valid_cpu_call() {
    let mut n = 0;
    for dt in [DType::F32, DType::BF16, DType::F16, DType::F64] {
        for kind in OpKind::all() {
            for (op, inputs, _, _) in cases(kind, dt) {
                run_op(&mut CpuBackend::new(), &op, &inputs, 1, 1).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
                n += 1;
            }
        }
    }
    assert!(n > 200, "{n} cases");
}

/// The comparison the GPU tests rely on, checked here without a GPU: equal tensors pass, and a
/// difference names how many elements differ and the first one.
#[test]
fn compare_reports_differences() {
    let a = HostTensor::f32(vec![4], vec![1.0, 2.0, 3.0, f32::NAN]).unwrap();
    let near = HostTensor::f32(vec![4], vec![1.0, 2.0 + 1e-6, 3.0, f32::NAN]).unwrap();
    let far = HostTensor::f32(vec![4], vec![1.0, 2.5, 3.0, 0.0]).unwrap();
    assert!(compare(&a, &a, true, false).is_ok());
    assert!(compare(&near, &a, false, false).is_ok());
    assert!(compare(&near, &a, true, false).unwrap_err().contains("1 of 4 elements differ, first at 1"));
    let err = compare(&far, &a, false, true).unwrap_err();
    assert!(err.contains("2 of 4 elements differ, first at 1: gpu 2.5 cpu 2"), "{err}");
    let other = HostTensor::f32(vec![2, 2], vec![1.0; 4]).unwrap();
    assert!(compare(&other, &a, false, false).unwrap_err().contains("[2, 2]"));
    // i64 exactly, even where f64 cannot tell the values apart.
    let big = HostTensor::i64(vec![2], vec![7, i64::MAX]).unwrap();
    let below = HostTensor::i64(vec![2], vec![7, i64::MAX - 1]).unwrap();
    assert!(compare(&big, &big, true, false).is_ok());
    let err = compare(&below, &big, true, false).unwrap_err();
    assert!(
        err.contains(&format!("1 of 2 elements differ, first at 1: gpu {} cpu {}", i64::MAX - 1, i64::MAX)),
        "{err}"
    );
}

/// Copies that cost next to nothing: at `Budget::Fraction(0.0)` the solver offloads every value
/// it may rather than recompute it, so the offload tests move many values each way.
const CHEAP_COPIES: CostModel = CostModel { d2h_bytes_per_s: 1e15, h2d_bytes_per_s: 1e15, flops_per_s: 50e12 };

/// The offload strategies of the GPU tests: the GPU's own cost model at two budgets, and cheap
/// copies at budget 0 (every value that may leave the device does).
fn offload_models(graph: &remat_core::Graph, gpu_cost: &CostModel) -> Vec<(String, Model)> {
    [
        (Strategy::BudgetOffload(Budget::Fraction(0.0)), *gpu_cost, "gpu cost model"),
        (Strategy::BudgetOffload(Budget::Fraction(0.5)), *gpu_cost, "gpu cost model"),
        (Strategy::BudgetOffload(Budget::Fraction(0.0)), CHEAP_COPIES, "cheap copies"),
    ]
    .into_iter()
    .map(|(s, c, what)| (format!("{s} ({what})"), Model::with_cost_model(graph.clone(), s, &c).unwrap()))
    .collect()
}

#[test]
fn the_offload_tests_plans_move_values_and_keep_gradients_bitwise_on_the_cpu() {
    let cfg = small_gpt(DType::F32, 0.1);
    let graph = zoo::gpt(&cfg).unwrap();
    let feeds = zoo::synthetic_tokens(&cfg, 1).unwrap();
    let save = Model::new(graph.clone()).unwrap();
    let params = save.init_params(2).unwrap();
    let want = save.step_seeded(&mut CpuBackend::new(), &params, &feeds, 9).unwrap();
    let models = offload_models(&graph, &CostModel::H200);
    let (name, cheap) = models.last().unwrap();
    assert!(cheap.plan().offloaded().len() >= 4, "{name}: {} offloaded", cheap.plan().offloaded().len());
    for (name, model) in &models {
        let out = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, 9).unwrap();
        assert_eq!(out.grads, want.grads, "{name}");
        assert_eq!(out.measured_host_peak, out.predicted_host_peak, "{name}");
    }
}

/// Median wall time of `reps` steps of `model` (after the caller's warm-up).
fn step_time(
    g: &mut CudaBackend,
    model: &Model,
    params: &remat_core::Params,
    feeds: &remat_core::Feeds,
    reps: usize,
) -> std::time::Duration {
    let mut times: Vec<_> = (0..reps)
        .map(|_| {
            let start = std::time::Instant::now();
            model.step_seeded(g, params, feeds, 9).unwrap();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[reps / 2]
}

#[test]
fn offload_keeps_gradients_bitwise_and_both_peaks_exact_on_the_gpu() {
    let Some(mut g) = gpu() else { return };
    let cfg = small_gpt(DType::F32, 0.1);
    let graph = zoo::gpt(&cfg).unwrap();
    let feeds = zoo::synthetic_tokens(&cfg, 1).unwrap();
    let cost = g.cost_model();
    let save = Model::with_cost_model(graph.clone(), Strategy::Respect, &cost).unwrap();
    let params = save.init_params(2).unwrap();
    let want = save.step_seeded(&mut g, &params, &feeds, 9).unwrap();
    println!(
        "save (no offload): device peak {} B, step {:?}",
        want.measured_peak,
        step_time(&mut g, &save, &params, &feeds, 5)
    );
    let mut largest_host_peak = 0;
    for (name, model) in offload_models(&graph, &cost) {
        // Twice: the first step pins fresh host blocks, the second reuses them from the cache.
        for round in 0..2 {
            let out = model.step_seeded(&mut g, &params, &feeds, 9).unwrap();
            assert_eq!(out.measured_peak, out.predicted_peak, "{name} (step {round}): device peak");
            assert_eq!(out.measured_host_peak, out.predicted_host_peak, "{name} (step {round}): host peak");
            assert_eq!(out.grads, want.grads, "{name} (step {round}): gradients bitwise identical to saving");
            assert_eq!(g.host_memory().live_bytes, 0, "{name}: every host copy was fetched");
        }
        let host_peak = model.plan().predicted_host_peak();
        // The cache keeps at most the most pinned bytes ever in use at once, which is the
        // largest host peak so far (no copy back is pending once a step has synchronised).
        largest_host_peak = largest_host_peak.max(host_peak);
        assert!(
            g.pinned_host_bytes() <= 2 * largest_host_peak,
            "{name}: {} B pinned for host peaks of at most {largest_host_peak} B",
            g.pinned_host_bytes()
        );
        println!(
            "{name}: device peak {} B (save {} B), host peak {host_peak} B, {} offloaded, step {:?}",
            model.plan().predicted_peak(),
            want.measured_peak,
            model.plan().offloaded().len(),
            step_time(&mut g, &model, &params, &feeds, 5)
        );
    }
    assert_eq!(g.memory().live_bytes, 0);
    assert_eq!(g.host_memory().live_bytes, 0);
    g.synchronize().unwrap();
    g.release_pinned_cache().unwrap();
    assert_eq!(g.pinned_host_bytes(), 0, "every copy back has completed after a synchronisation");
}

/// Fills `[n]` f32 on the device with `value` (a kernel on the compute stream).
fn filled(g: &mut CudaBackend, n: usize, value: f64) -> remat_cuda::CudaBuffer {
    let op = Op::Constant { value };
    let shape = [n];
    let call = KernelCall::new(NodeId::new(0), &op, &[], &shape, DType::F32, 0);
    g.execute(&call, &[]).unwrap()
}

#[test]
fn asynchronous_copies_survive_early_frees_memory_reuse_and_unused_fetches() {
    let Some(mut g) = gpu() else { return };
    let n = 1 << 22; // 16 MiB: long enough a copy to still run while the host goes on
    let want = tensor(&[n], DType::F32, 3);
    let a = g.upload(&want).unwrap();
    // Offload, then drop the device copy at once and overwrite memory of the same size many
    // times: the pool may not hand the block out before the copy out has read it.
    let host = g.offload(&a).unwrap();
    drop(a);
    let junk: Vec<_> = (0..8).map(|i| filled(&mut g, n, i as f64)).collect();
    assert_eq!(g.host_memory().live_bytes, 4 * n);
    // Fetch, then at once read it with a kernel (the compute stream waits for the copy back).
    let b = g.fetch(host).unwrap();
    assert_eq!(g.host_memory().live_bytes, 0, "the host copy leaves the meter at fetch, as on the CPU");
    let neg = Op::Unary(UnaryOp::Neg);
    let metas = [(&[n][..], DType::F32)];
    let shape = [n];
    let call = KernelCall::new(NodeId::new(1), &neg, &metas, &shape, DType::F32, 0);
    let c = g.execute(&call, &[&b]).unwrap();
    let negated: Vec<f64> = want.to_f64_vec().iter().map(|v| -v).collect();
    assert_eq!(g.download(&c).unwrap().to_f64_vec(), negated, "a kernel reads the fetched bytes");
    assert_eq!(g.download(&b).unwrap(), want, "fetched bytes are the offloaded ones");
    // A second round trip of a fetched buffer, downloaded without a kernel in between.
    let again = g.offload(&b).unwrap();
    drop((b, c, junk));
    let d = g.fetch(again).unwrap();
    assert_eq!(g.download(&d).unwrap(), want);
    // A fetched buffer dropped unread, and a host copy dropped unfetched.
    let copy = g.offload(&d).unwrap();
    let e = g.fetch(copy).unwrap();
    drop(e);
    let lost = g.offload(&d).unwrap();
    drop((lost, d));
    assert_eq!((g.memory().live_bytes, g.host_memory().live_bytes), (0, 0));
    g.synchronize().unwrap();
    // The unfetched copy's block waits only for the copy-out stream, which nothing synchronised.
    let start = std::time::Instant::now();
    while g.pinned_host_bytes() > 0 && start.elapsed() < std::time::Duration::from_secs(5) {
        g.release_pinned_cache().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(g.pinned_host_bytes(), 0, "every pinned block is reclaimed once its copies end");
}
