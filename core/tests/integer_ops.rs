//! The integer, boolean and routing ops against brute force: each result is recomputed here by
//! the plainest loop over multi-indices (no code of the kernels), on random shapes — empty axes
//! and broadcasting included — and on values that mix the i64 limits, small numbers (ties) and
//! NaN.

use proptest::prelude::*;
use remat_core::{CpuBackend, DType, Feeds, HostData, HostTensor, Model, Tensor, Trace};

/// The value named `out` that `build` computes from inputs `a` (and `b`), run forward on the CPU.
fn eval(inputs: &[&HostTensor], build: impl FnOnce(&[Tensor]) -> Tensor) -> remat_core::Result<HostTensor> {
    let trace = Trace::new();
    let xs: Vec<Tensor> =
        inputs.iter().enumerate().map(|(i, t)| trace.input(&format!("x{i}"), t.shape(), t.dtype())).collect();
    let out = build(&xs).name("out");
    // A scalar loss that keeps `out` in the graph; only `out` is computed below.
    let w = trace.param("w", &[1], DType::F32);
    let loss = &w.sum_all() + &(&out.cast(DType::F32).sum_all() * 0.0);
    let model = Model::new(trace.finish(&loss)?)?;
    let params = model.init_params(0)?;
    let mut feeds = Feeds::new();
    for (i, t) in inputs.iter().enumerate() {
        feeds = feeds.with(&format!("x{i}"), (*t).clone());
    }
    let run = model.inference(&["out"])?.run(&mut CpuBackend::new(), &params, &feeds)?;
    Ok(run.values[0].clone())
}

fn i64s(t: &HostTensor) -> Vec<i64> {
    match t.data() {
        HostData::I64(v) => v.clone(),
        other => panic!("expected i64, got {:?}", other.dtype()),
    }
}

fn i32s(t: &HostTensor) -> Vec<i32> {
    match t.data() {
        HostData::I32(v) => v.clone(),
        other => panic!("expected i32, got {:?}", other.dtype()),
    }
}

fn bools(t: &HostTensor) -> Vec<bool> {
    match t.data() {
        HostData::Bool(v) => v.clone(),
        other => panic!("expected bool, got {:?}", other.dtype()),
    }
}

/// How a case builds its value from the inputs.
type Build = fn(&[Tensor]) -> Tensor;
/// A case and its elementwise reference.
type Case<T, R> = (Build, fn(T, T) -> R);
/// A named case and its reference (`None`: a zero divisor).
type NamedFn<T> = (&'static str, Build, fn(T, T) -> Option<T>);
/// The same with a capturing reference.
type Named<'a, T> = (&'static str, Build, &'a dyn Fn(T, T) -> Option<T>);

/// The multi-index of flat position `p` in `shape`.
fn unravel(mut p: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = p % shape[a];
        p /= shape[a];
    }
    idx
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// The element of `values` (shape `shape`) that output index `out` (of a broadcast shape) reads.
fn broadcast_read<T: Copy>(values: &[T], shape: &[usize], out: &[usize]) -> T {
    let skip = out.len() - shape.len();
    let idx: Vec<usize> = shape.iter().enumerate().map(|(a, &d)| if d == 1 { 0 } else { out[skip + a] }).collect();
    values[ravel(&idx, shape)]
}

/// Numpy's broadcast of two shapes, if they broadcast.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let x = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            let y = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
            match (x, y) {
                _ if x == y => Some(x),
                (1, _) => Some(y),
                (_, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

/// Values that hit the i64 limits, zero, small numbers (so that ties and zero divisors happen)
/// and the middle.
fn int_value() -> impl Strategy<Value = i64> {
    prop_oneof![
        prop::sample::select(vec![i64::MIN, i64::MIN + 1, -2, -1, 0, 1, 2, i64::MAX - 1, i64::MAX]),
        -4i64..=4,
        any::<i64>(),
    ]
}

/// The same for i32.
fn int32_value() -> impl Strategy<Value = i32> {
    prop_oneof![
        prop::sample::select(vec![i32::MIN, i32::MIN + 1, -2, -1, 0, 1, 2, i32::MAX - 1, i32::MAX]),
        -4i32..=4,
        any::<i32>(),
    ]
}

fn ints32(shape: Vec<usize>) -> impl Strategy<Value = HostTensor> {
    let n: usize = shape.iter().product();
    prop::collection::vec(int32_value(), n).prop_map(move |v| HostTensor::i32(shape.clone(), v).unwrap())
}

/// A float, NaN and infinities included, often repeated.
fn float_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::sample::select(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1.0]),
        (-3i32..=3).prop_map(f64::from),
        -1e300f64..1e300,
    ]
}

/// A shape of rank 1 to 3 with axes of 0 to 4 entries.
fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..=4, 1..=3)
}

/// A shape of rank 1 to 3 with no empty axis.
fn full_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=4, 1..=3)
}

fn ints(shape: Vec<usize>) -> impl Strategy<Value = HostTensor> {
    let n: usize = shape.iter().product();
    prop::collection::vec(int_value(), n).prop_map(move |v| HostTensor::i64(shape.clone(), v).unwrap())
}

fn floats(shape: Vec<usize>) -> impl Strategy<Value = HostTensor> {
    let n: usize = shape.iter().product();
    prop::collection::vec(float_value(), n).prop_map(move |v| HostTensor::f64(shape.clone(), v).unwrap())
}

/// A shape and another that broadcasts with it (axes set to 1 or dropped at random).
fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    (shape(), prop::collection::vec(0u8..3, 3)).prop_map(|(a, how)| {
        let mut b: Vec<usize> = a.iter().zip(&how).map(|(&d, &h)| if h == 0 { 1 } else { d }).collect();
        if how[2] == 0 {
            b.remove(0);
        }
        (a, b)
    })
}

/// Python's floor division and remainder, in 128 bits; `None` for a zero divisor.
fn py_divmod(a: i64, b: i64) -> Option<(i64, i64)> {
    if b == 0 {
        return None;
    }
    let (a, b) = (i128::from(a), i128::from(b));
    let r = ((a % b) + b) % b;
    Some((((a - r) / b) as i64, r as i64))
}

/// What an ordering op sees: NaN above every number.
fn above(x: f64, y: f64) -> bool {
    match (x.is_nan(), y.is_nan()) {
        (true, false) => true,
        (_, true) => false,
        _ => x > y,
    }
}

/// The positions of one row in the order a stable sort gives, by repeated selection: the first
/// entry of the row that nothing left ranks strictly before.
fn select_order(row: &[f64], descending: bool) -> Vec<usize> {
    let mut left: Vec<usize> = (0..row.len()).collect();
    let mut order = Vec::new();
    while !left.is_empty() {
        let before = |p: usize, q: usize| if descending { above(row[p], row[q]) } else { above(row[q], row[p]) };
        let pick = left.iter().position(|&p| left.iter().all(|&q| !before(q, p))).expect("a total order has a first");
        order.push(left.remove(pick));
    }
    order
}

/// The rows of `values` along `axis`: (the output index of each row with `axis` at 0, the row).
fn rows<T: Copy>(values: &[T], shape: &[usize], axis: usize) -> Vec<(Vec<usize>, Vec<T>)> {
    let mut outer = shape.to_vec();
    outer[axis] = 1;
    (0..outer.iter().product())
        .map(|p| {
            let base = unravel(p, &outer);
            let row = (0..shape[axis])
                .map(|j| {
                    let mut idx = base.clone();
                    idx[axis] = j;
                    values[ravel(&idx, shape)]
                })
                .collect();
            (base, row)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// i64 arithmetic and comparisons, broadcasting, against wrapping/128-bit arithmetic.
    #[test]
    fn integer_arithmetic_matches_brute_force(
        (a, b) in broadcast_pair().prop_flat_map(|(sa, sb)| (ints(sa), ints(sb))),
        swap in any::<bool>(),
    ) {
        let (a, b) = if swap { (b, a) } else { (a, b) };
        let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
        let out = broadcast(&sa, &sb).expect("a broadcast pair");
        let (av, bv) = (i64s(&a), i64s(&b));
        let n: usize = out.iter().product();
        let pairs: Vec<(i64, i64)> = (0..n)
            .map(|p| {
                let idx = unravel(p, &out);
                (broadcast_read(&av, &sa, &idx), broadcast_read(&bv, &sb, &idx))
            })
            .collect();
        let cases: [NamedFn<i64>; 7] = [
            ("add", |x| &x[0] + &x[1], |p, q| Some(p.wrapping_add(q))),
            ("sub", |x| &x[0] - &x[1], |p, q| Some(p.wrapping_sub(q))),
            ("mul", |x| &x[0] * &x[1], |p, q| Some((i128::from(p) * i128::from(q)) as i64)),
            ("div", |x| &x[0] / &x[1], |p, q| py_divmod(p, q).map(|d| d.0)),
            ("rem", |x| &x[0] % &x[1], |p, q| py_divmod(p, q).map(|d| d.1)),
            ("maximum", |x| x[0].maximum(&x[1]), |p, q| Some(p.max(q))),
            ("minimum", |x| x[0].minimum(&x[1]), |p, q| Some(p.min(q))),
        ];
        for (name, build, f) in cases {
            let want: Option<Vec<i64>> = pairs.iter().map(|&(p, q)| f(p, q)).collect();
            match (eval(&[&a, &b], build), want) {
                (Ok(got), Some(want)) => prop_assert_eq!(i64s(&got), want, "{}", name),
                (Err(e), None) => {
                    let msg = e.to_string();
                    prop_assert!(msg.contains("division by zero") && msg.contains(name), "{}: {}", name, msg);
                }
                (got, want) => prop_assert!(false, "{}: got {:?}, want {:?}", name, got.map(|t| i64s(&t)), want),
            }
        }
        let compares: [Case<i64, bool>; 6] = [
            (|x| x[0].eq(&x[1]), |p, q| p == q),
            (|x| x[0].ne(&x[1]), |p, q| p != q),
            (|x| x[0].lt(&x[1]), |p, q| p < q),
            (|x| x[0].le(&x[1]), |p, q| p <= q),
            (|x| x[0].gt(&x[1]), |p, q| p > q),
            (|x| x[0].ge(&x[1]), |p, q| p >= q),
        ];
        for (build, f) in compares {
            let got = bools(&eval(&[&a, &b], build).unwrap());
            prop_assert_eq!(got, pairs.iter().map(|&(p, q)| f(p, q)).collect::<Vec<_>>());
        }
    }

    /// i32 arithmetic wraps at 32 bits (not at 64: a product computed in i64 and narrowed would
    /// agree, a sum of two i32 limits would not).
    #[test]
    fn i32_arithmetic_matches_brute_force(
        (a, b) in broadcast_pair().prop_flat_map(|(sa, sb)| (ints32(sa), ints32(sb))),
    ) {
        let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
        let out = broadcast(&sa, &sb).unwrap();
        let (av, bv) = (i32s(&a), i32s(&b));
        let n: usize = out.iter().product();
        let pairs: Vec<(i32, i32)> = (0..n)
            .map(|p| {
                let idx = unravel(p, &out);
                (broadcast_read(&av, &sa, &idx), broadcast_read(&bv, &sb, &idx))
            })
            .collect();
        let narrow = |x: i128| x.rem_euclid(1 << 32) as u32 as i32;
        let cases: [Named<'_, i32>; 7] = [
            ("add", |x| &x[0] + &x[1], &|p, q| Some(narrow(i128::from(p) + i128::from(q)))),
            ("sub", |x| &x[0] - &x[1], &|p, q| Some(narrow(i128::from(p) - i128::from(q)))),
            ("mul", |x| &x[0] * &x[1], &|p, q| Some(narrow(i128::from(p) * i128::from(q)))),
            ("div", |x| &x[0] / &x[1], &|p, q| py_divmod(p.into(), q.into()).map(|d| narrow(d.0.into()))),
            ("rem", |x| &x[0] % &x[1], &|p, q| py_divmod(p.into(), q.into()).map(|d| d.1 as i32)),
            ("maximum", |x| x[0].maximum(&x[1]), &|p, q| Some(p.max(q))),
            ("minimum", |x| x[0].minimum(&x[1]), &|p, q| Some(p.min(q))),
        ];
        for (name, build, f) in cases {
            let want: Option<Vec<i32>> = pairs.iter().map(|&(p, q)| f(p, q)).collect();
            match (eval(&[&a, &b], build), want) {
                (Ok(got), Some(want)) => prop_assert_eq!(i32s(&got), want, "{}", name),
                (Err(e), None) => prop_assert!(e.to_string().contains("division by zero"), "{}: {}", name, e),
                (got, want) => prop_assert!(false, "{}: got {:?}, want {:?}", name, got.map(|t| i32s(&t)), want),
            }
        }
        let lt = bools(&eval(&[&a, &b], |x| x[0].lt(&x[1])).unwrap());
        prop_assert_eq!(lt, pairs.iter().map(|&(p, q)| p < q).collect::<Vec<_>>());
        // Sums, orders and casts of i32 as the i64 ones, narrowed.
        let sums = i32s(&eval(&[&a], |x| x[0].cumsum(0)).unwrap());
        let wide = i64s(&eval(&[&a], |x| x[0].cast(DType::I64).cumsum(0)).unwrap());
        prop_assert_eq!(sums, wide.iter().map(|&v| narrow(v.into())).collect::<Vec<_>>());
        if sa[0] > 0 {
            let top = i64s(&eval(&[&a], |x| x[0].argmax(0, false)).unwrap());
            let top_wide = i64s(&eval(&[&a], |x| x[0].cast(DType::I64).argmax(0, false)).unwrap());
            prop_assert_eq!(top, top_wide);
        }
    }

    /// Casts into i32 from every dtype: floats truncated toward zero and saturating, NaN to 0;
    /// i64 saturating; bool 0 or 1; and back out exactly.
    #[test]
    fn casts_to_i32_truncate_and_saturate(f in prop::collection::vec(float_value(), 1..20), i in prop::collection::vec(int_value(), 1..20)) {
        let floats = HostTensor::f64([f.len()], f.clone()).unwrap();
        let got = i32s(&eval(&[&floats], |x| x[0].cast(DType::I32)).unwrap());
        let want: Vec<i32> = f.iter().map(|&v| if v.is_nan() { 0 } else { v.trunc().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32 }).collect();
        prop_assert_eq!(&got, &want);
        let back = eval(&[&floats], |x| x[0].cast(DType::I32).cast(DType::F64)).unwrap().to_f64_vec();
        prop_assert_eq!(back, want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
        let longs = HostTensor::i64([i.len()], i.clone()).unwrap();
        let got = i32s(&eval(&[&longs], |x| x[0].cast(DType::I32)).unwrap());
        prop_assert_eq!(got, i.iter().map(|&v| v.clamp(i32::MIN.into(), i32::MAX.into()) as i32).collect::<Vec<_>>());
        let masks = eval(&[&longs], |x| x[0].cast(DType::I32).cast(DType::Bool).cast(DType::I32)).unwrap();
        prop_assert_eq!(i32s(&masks), i.iter().map(|&v| i32::from(v != 0)).collect::<Vec<_>>());
    }

    /// `bool` logic, broadcasting.
    #[test]
    fn logic_matches_brute_force((sa, sb) in broadcast_pair(), seed in any::<u64>()) {
        let bits = |n: usize, salt: u64| -> Vec<bool> {
            (0..n).map(|i| (seed.rotate_left((i as u32 * 7 + salt as u32) % 64) & 1) == 1).collect()
        };
        let (av, bv) = (bits(sa.iter().product(), 1), bits(sb.iter().product(), 2));
        let a = HostTensor::bool(sa.clone(), av.clone()).unwrap();
        let b = HostTensor::bool(sb.clone(), bv.clone()).unwrap();
        let out = broadcast(&sa, &sb).unwrap();
        let n: usize = out.iter().product();
        let pairs: Vec<(bool, bool)> = (0..n)
            .map(|p| {
                let idx = unravel(p, &out);
                (broadcast_read(&av, &sa, &idx), broadcast_read(&bv, &sb, &idx))
            })
            .collect();
        let cases: [Case<bool, bool>; 4] = [
            (|x| &x[0] & &x[1], |p, q| p && q),
            (|x| &x[0] | &x[1], |p, q| p || q),
            (|x| &x[0] ^ &x[1], |p, q| p != q),
            (|x| (!&x[0]).logical_or(&x[1]), |p, q| !p || q),
        ];
        for (build, f) in cases {
            prop_assert_eq!(bools(&eval(&[&a, &b], build).unwrap()), pairs.iter().map(|&(p, q)| f(p, q)).collect::<Vec<_>>());
        }
    }

    /// argmax, argmin, topk, argsort and sort on floats with NaN, infinities and ties, against
    /// selection by the stated order.
    #[test]
    fn ordering_ops_match_selection(x in full_shape().prop_flat_map(floats), axis_pick in 0usize..3, k_pick in 0usize..5, desc in any::<bool>()) {
        let shape = x.shape().to_vec();
        let axis = axis_pick % shape.len();
        let dim = shape[axis];
        let k = k_pick % (dim + 1);
        let values = x.to_f64_vec();
        let argmax = i64s(&eval(&[&x], |t| t[0].argmax(axis, false)).unwrap());
        let argmin = i64s(&eval(&[&x], |t| t[0].argmin(axis, true)).unwrap());
        let top = i64s(&eval(&[&x], |t| t[0].topk(k, axis).1).unwrap());
        let bottom = i64s(&eval(&[&x], |t| t[0].bottomk(k, axis).1).unwrap());
        let order = i64s(&eval(&[&x], |t| t[0].argsort(axis, desc)).unwrap());
        let sorted = eval(&[&x], |t| t[0].sort(axis, desc).0).unwrap().to_f64_vec();
        let mut k_shape = shape.clone();
        k_shape[axis] = k;
        for (r, (base, row)) in rows(&values, &shape, axis).into_iter().enumerate() {
            // The first NaN if any (NaN propagates through max and min), else the first extreme.
            let first_nan = row.iter().position(|v| v.is_nan());
            let extreme = |better: fn(f64, f64) -> bool| {
                first_nan.unwrap_or_else(|| (0..dim).find(|&j| (0..dim).all(|i| !better(row[i], row[j]))).unwrap())
            };
            prop_assert_eq!(argmax[r] as usize, extreme(|p, q| p > q), "argmax of {:?}", row);
            prop_assert_eq!(argmin[r] as usize, extreme(|p, q| p < q), "argmin of {:?}", row);
            let want_desc = select_order(&row, true);
            let want_asc = select_order(&row, false);
            let want = if desc { &want_desc } else { &want_asc };
            for j in 0..dim {
                let mut idx = base.clone();
                idx[axis] = j;
                let at = ravel(&idx, &shape);
                prop_assert_eq!(order[at] as usize, want[j], "argsort of {:?}", row);
                let (got, expect) = (sorted[at], row[want[j]]);
                prop_assert!(got == expect || (got.is_nan() && expect.is_nan()));
                if j < k {
                    let at_k = ravel(&idx, &k_shape);
                    prop_assert_eq!(top[at_k] as usize, want_desc[j], "topk of {:?}", row);
                    prop_assert_eq!(bottom[at_k] as usize, want_asc[j], "bottomk of {:?}", row);
                }
            }
        }
    }

    /// The same ops on i64 at the limits (compared as integers, not through f64).
    #[test]
    fn ordering_ops_on_i64_match_selection(x in full_shape().prop_flat_map(ints), axis_pick in 0usize..3) {
        let shape = x.shape().to_vec();
        let axis = axis_pick % shape.len();
        let values = i64s(&x);
        let argmax = i64s(&eval(&[&x], |t| t[0].argmax(axis, false)).unwrap());
        let order = i64s(&eval(&[&x], |t| t[0].argsort(axis, true)).unwrap());
        for (r, (base, row)) in rows(&values, &shape, axis).into_iter().enumerate() {
            let best = (0..row.len()).find(|&j| row.iter().all(|&v| v <= row[j])).unwrap();
            prop_assert_eq!(argmax[r] as usize, best);
            let mut want: Vec<usize> = (0..row.len()).collect();
            // Selection, descending, ties in position order.
            for i in 0..want.len() {
                let m = (i..want.len()).fold(i, |m, j| if row[want[j]] > row[want[m]] { j } else { m });
                let picked = want.remove(m);
                want.insert(i, picked);
            }
            for (j, &w) in want.iter().enumerate() {
                let mut idx = base.clone();
                idx[axis] = j;
                prop_assert_eq!(order[ravel(&idx, &shape)] as usize, w);
            }
        }
    }

    /// cumsum (both directions, wrapping), bincount and one_hot on i64.
    #[test]
    fn counting_ops_match_brute_force(x in shape().prop_flat_map(ints), axis_pick in 0usize..3, bins in 1usize..6) {
        let shape = x.shape().to_vec();
        let axis = axis_pick % shape.len();
        let values = i64s(&x);
        let fwd = i64s(&eval(&[&x], |t| t[0].cumsum(axis)).unwrap());
        let back = i64s(&eval(&[&x], |t| t[0].reverse_cumsum(axis)).unwrap());
        for (p, (&f, &b)) in fwd.iter().zip(&back).enumerate() {
            let idx = unravel(p, &shape);
            let at = |j: usize| { let mut i = idx.clone(); i[axis] = j; values[ravel(&i, &shape)] };
            let upto = (0..=idx[axis]).fold(0i64, |s, j| s.wrapping_add(at(j)));
            let from = (idx[axis]..shape[axis]).fold(0i64, |s, j| s.wrapping_add(at(j)));
            prop_assert_eq!((f, b), (upto, from));
        }
        // Ids folded into range, then one out of range.
        let ids = HostTensor::i64(shape.clone(), values.iter().map(|v| v.rem_euclid(bins as i64)).collect()).unwrap();
        let idv = i64s(&ids);
        let counts = i64s(&eval(&[&ids], |t| t[0].bincount(bins)).unwrap());
        prop_assert_eq!(counts, (0..bins as i64).map(|c| idv.iter().filter(|&&v| v == c).count() as i64).collect::<Vec<_>>());
        let hot = eval(&[&ids], |t| t[0].one_hot(bins, DType::F32)).unwrap();
        prop_assert_eq!(hot.shape(), &[&shape[..], &[bins]].concat()[..]);
        let want: Vec<f64> = idv.iter().flat_map(|&v| (0..bins as i64).map(move |c| f64::from(u8::from(c == v)))).collect();
        prop_assert_eq!(hot.to_f64_vec(), want);
        if let Some(bad) = values.iter().position(|&v| v < 0 || v >= bins as i64) {
            let err = eval(&[&x], |t| t[0].bincount(bins)).unwrap_err().to_string();
            prop_assert!(err.contains("bincount") && err.contains(&format!("id {} at position {bad}", values[bad])), "{}", err);
        }
    }

    /// index_add and scatter_add on i64 (wrapping), repeated indices included.
    #[test]
    fn scatter_ops_match_brute_force(x in full_shape().prop_flat_map(ints), axis_pick in 0usize..3, k in 0usize..5, seed in any::<u64>()) {
        let shape = x.shape().to_vec();
        let axis = axis_pick % shape.len();
        let dim = shape[axis];
        let pick = |i: usize| ((seed >> (i % 60)) as usize + i * 7) % dim;
        let xv = i64s(&x);
        // index_add: src is x's shape with `axis` k long.
        let idx = HostTensor::i64([k], (0..k).map(|i| pick(i) as i64).collect()).unwrap();
        let mut src_shape = shape.clone();
        src_shape[axis] = k;
        let n_src: usize = src_shape.iter().product();
        let src = HostTensor::i64(src_shape.clone(), (0..n_src).map(|i| (i as i64 - 3).wrapping_mul(i64::MAX / 3)).collect()).unwrap();
        let got = i64s(&eval(&[&x, &idx, &src], |t| t[0].index_add(axis, &t[1], &t[2])).unwrap());
        let mut want = xv.clone();
        let sv = i64s(&src);
        for (p, &v) in sv.iter().enumerate() {
            let mut at = unravel(p, &src_shape);
            at[axis] = pick(at[axis]);
            let q = ravel(&at, &shape);
            want[q] = want[q].wrapping_add(v);
        }
        prop_assert_eq!(got, want);
        // scatter_add: indices of src's shape.
        let sidx = HostTensor::i64(src_shape.clone(), (0..n_src).map(|i| pick(i + 1) as i64).collect()).unwrap();
        let got = i64s(&eval(&[&x, &sidx, &src], |t| t[0].scatter_add(axis, &t[1], &t[2])).unwrap());
        let mut want = xv.clone();
        let siv = i64s(&sidx);
        for (p, (&v, &i)) in sv.iter().zip(&siv).enumerate() {
            let mut at = unravel(p, &src_shape);
            at[axis] = i as usize;
            let q = ravel(&at, &shape);
            want[q] = want[q].wrapping_add(v);
        }
        prop_assert_eq!(got, want);
    }
}

/// Misuse names the op, the problem and the user's line.
#[test]
fn shape_and_dtype_errors_name_the_op_and_the_line() {
    type Misuse = fn(&Tensor, &Tensor, &Tensor) -> Tensor;
    let cases: [(Misuse, &str, &str); 10] = [
        (|f, _, _| f % f, "rem", "integer remainder (i64, i32)"),
        (|_, _, b| b.maximum(b), "maximum", "operands are bool"),
        (|f, _, b| f.logical_and(b), "logical_and", "must be bool"),
        (|_, i, _| i.topk(5, 1).1, "topk", "k = 5 is more than the 4 entries of axis 1"),
        (|f, _, _| f.argmax(2, false), "argmax", "axis 2 out of range for rank 2"),
        (|f, _, _| f.bincount(3), "bincount", "must be i64"),
        (|_, i, _| i.one_hot(3, DType::F8E4M3), "one_hot", "wider dtype"),
        (|_, _, b| b.cumsum(0), "cumsum", "bool"),
        (|f, i, _| f.index_add(1, i, f), "index_add", "one axis"),
        (|f, i, _| f.scatter_add(0, &i.slice(1, 0, 2), f), "scatter_add", "one shape"),
    ];
    for (misuse, op, what) in cases {
        let trace = Trace::new();
        let f = trace.input("f", &[3, 4], DType::F32);
        let i = trace.input("i", &[3, 4], DType::I64);
        let b = trace.input("b", &[3, 4], DType::Bool);
        let bad = misuse(&f, &i, &b);
        let err = trace.finish(&(&f.sum_all() + &bad.cast(DType::F32).sum_all())).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{op} at ")) && err.contains(what), "{op}: {err}");
        assert!(err.contains("integer_ops.rs:"), "{op}: the line is named: {err}");
    }
}

/// A zero divisor and an out-of-range index at run time name the node.
#[test]
fn run_time_errors_name_the_node() {
    let a = HostTensor::i64([3], vec![5, -7, 9]).unwrap();
    let z = HostTensor::i64([3], vec![2, 0, 1]).unwrap();
    let err = eval(&[&a, &z], |t| &t[0] / &t[1]).unwrap_err().to_string();
    assert!(err.contains("div") && err.contains("division by zero at output element 1"), "{err}");
    let err = eval(&[&a], |t| t[0].one_hot(6, DType::F32)).unwrap_err().to_string();
    assert!(err.contains("one_hot") && err.contains("id -7 at position 1 is out of range for 6 classes"), "{err}");
    let x = HostTensor::f32([2, 3], vec![0.0; 6]).unwrap();
    let idx = HostTensor::i64([2], vec![0, 3]).unwrap();
    let src = HostTensor::f32([2, 2], vec![1.0; 4]).unwrap();
    let err = eval(&[&x, &idx, &src], |t| t[0].index_add(1, &t[1], &t[2])).unwrap_err().to_string();
    assert!(
        err.contains("index_add") && err.contains("index 3 at position 1 is out of range for an axis of 3"),
        "{err}"
    );
}
