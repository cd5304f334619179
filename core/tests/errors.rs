//! Bad inputs through the public API give errors that name the op, the shapes and the caller's
//! line — never a panic.

use remat_core::{AttnLayout, CpuBackend, DType, Feeds, HostTensor, Model, Tensor, Trace};

/// `file:line` of the line after the macro call site's `line!()`, as errors print it.
fn here(line: u32) -> String {
    format!("{}:{line}:", file!())
}

#[test]
fn mismatched_matmul_shapes() {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[4, 8], DType::F32);
    let line = line!() + 1;
    let y = x.matmul(&w);
    let loss = y.relu().sum_all(); // poisoned: records nothing more
    let err = trace.finish(&loss).unwrap_err().to_string();
    assert!(err.starts_with("matmul at "), "{err}");
    assert!(err.contains(&here(line)), "{err}");
    assert!(err.contains("[4, 3] · [4, 8]"), "{err}");
    assert!(!err.contains("more error"), "later ops on a poisoned value add no errors: {err}");
}

/// A value poisoned by a shape error keeps the shape its op would have produced, so model code
/// that reads shapes (`shape()[0]`, `rank()`) runs on and the library reports the first error.
#[test]
fn a_poisoned_value_keeps_a_plausible_shape() {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[4, 8], DType::F32);
    let y = x.matmul(&w);
    assert_eq!((y.shape(), y.dtype(), y.id()), (vec![4, 8], DType::F32, None));
    // The user's code goes on with the shape; downstream values carry it.
    let (rows, cols) = (y.shape()[0], y.shape()[1]);
    let z = y.reshape(&[rows * cols]).sum(&[0], true);
    assert_eq!(z.shape(), vec![1]);
    let mask = y.gt(&x);
    assert_eq!((mask.shape(), mask.dtype()), (vec![4, 8], DType::Bool));
    // Attention with mismatched head dims: the output q's rows by v's head dim.
    let q = trace.input("q", &[2, 4, 8], DType::F32);
    let kv = trace.input("kv", &[2, 6, 5], DType::F32);
    let att = Tensor::scaled_dot_product_attention(&q, &kv, &kv, false, 0.5);
    assert_eq!((att.shape(), att.id()), (vec![2, 4, 5], None));
    let err = trace.finish(&z.sum_all()).unwrap_err().to_string();
    assert!(err.starts_with("matmul at ") && err.contains("[4, 3] · [4, 8]"), "{err}");
    assert!(err.contains("(and 1 more error(s) after it)"), "the attention's, not the poisoned values': {err}");
}

#[test]
fn reshape_to_a_wrong_element_count() {
    let trace = Trace::new();
    let x = trace.param("x", &[2, 3], DType::F32);
    let line = line!() + 1;
    let y = x.reshape(&[4, 2]);
    let err = trace.finish(&y.sum_all()).unwrap_err().to_string();
    assert!(err.starts_with("reshape at "), "{err}");
    assert!(err.contains(&here(line)), "{err}");
    assert!(err.contains("cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)"), "{err}");
}

#[test]
fn several_errors_are_counted() {
    let trace = Trace::new();
    let x = trace.param("x", &[2, 3], DType::F32);
    let a = x.reshape(&[5]);
    let b = x.transpose(&[0, 0]);
    let c = &x + &trace.param("y", &[4], DType::F32);
    let _ = (a, b);
    let err = trace.finish(&c.sum_all()).unwrap_err().to_string();
    assert!(err.starts_with("reshape at "), "the first error comes first: {err}");
    assert!(err.contains("(and 2 more error(s) after it)"), "{err}");
}

#[test]
fn cross_entropy_targets_of_the_wrong_shape() {
    let trace = Trace::new();
    let logits = trace.param("logits", &[4, 10], DType::F32);
    let targets = trace.input("targets", &[4, 1], DType::I64);
    let line = line!() + 1;
    let loss = logits.cross_entropy(&targets);
    let err = trace.finish(&loss).unwrap_err().to_string();
    assert!(err.starts_with("cross_entropy at "), "{err}");
    assert!(err.contains(&here(line)), "{err}");
    assert!(err.contains("targets must have shape [4] for logits [4, 10], got [4, 1]"), "{err}");
}

#[test]
fn cross_entropy_targets_of_the_wrong_dtype() {
    let trace = Trace::new();
    let logits = trace.param("logits", &[4, 10], DType::F32);
    let targets = trace.input("targets", &[4], DType::F32);
    let err = trace.finish(&logits.cross_entropy(&targets)).unwrap_err().to_string();
    assert!(err.contains("ids/targets must be i64, got f32"), "{err}");
}

#[test]
fn embedding_ids_out_of_range() {
    let trace = Trace::new();
    let table = trace.param("table", &[10, 4], DType::F32);
    let ids = trace.input("ids", &[2, 3], DType::I64);
    let line = line!() + 1;
    let h = table.embedding(&ids);
    let model = Model::new(trace.finish(&h.sum_all()).unwrap()).unwrap();
    let params = model.init_params(0).unwrap();
    let feeds = Feeds::new().with("ids", HostTensor::i64([2, 3], vec![0, 1, 2, 3, 12, 5]).unwrap());
    let err = model.step(&mut CpuBackend::new(), &params, &feeds).unwrap_err().to_string();
    assert!(err.contains("(embedding)"), "{err}");
    assert!(err.contains("12"), "names the bad id: {err}");
    assert!(err.contains(&here(line)), "{err}");
}

#[test]
fn feeds_are_checked() {
    let trace = Trace::new();
    let x = trace.input("x", &[2, 3], DType::F32);
    let w = trace.param("w", &[3, 1], DType::F32);
    let model = Model::new(trace.finish(&x.matmul(&w).sum_all()).unwrap()).unwrap();
    let params = model.init_params(0).unwrap();
    let mut cpu = CpuBackend::new();
    let wrong_shape = Feeds::new().with("x", HostTensor::f32([3, 2], vec![0.0; 6]).unwrap());
    let err = model.step(&mut cpu, &params, &wrong_shape).unwrap_err().to_string();
    assert_eq!(err, "input `x`: declared [2, 3] f32, got [3, 2] f32");
    let missing = Feeds::new();
    assert_eq!(model.step(&mut cpu, &params, &missing).unwrap_err().to_string(), "input `x`: no value given");
    let unknown = Feeds::new()
        .with("x", HostTensor::f32([2, 3], vec![0.0; 6]).unwrap())
        .with("z", HostTensor::full([1], 0.0, DType::F32).unwrap());
    let err = model.step(&mut cpu, &params, &unknown).unwrap_err().to_string();
    assert_eq!(err, "input `z`: not an input of the graph (inputs: x)");
}

#[test]
fn the_loss_must_be_a_scalar() {
    let trace = Trace::new();
    let x = trace.param("x", &[2, 3], DType::F32);
    let err = trace.finish(&x.relu()).unwrap_err();
    assert!(matches!(&err, remat_core::Error::Config { setting, .. } if setting == "loss"), "{err:?}");
    assert!(err.to_string().starts_with("the loss must be a single floating value, got [2, 3] f32"), "{err}");
}

#[test]
fn dtype_mixups_are_named() {
    let trace = Trace::new();
    let a = trace.param("a", &[2], DType::F32);
    let b = trace.param("b", &[2], DType::BF16);
    let c = a.cast(DType::F8E4M3);
    let s = &a + &b;
    let e = c.exp();
    let err = trace.finish(&s.sum_all()).unwrap_err().to_string();
    assert!(err.contains("dtypes differ: f32 and bf16"), "{err}");
    let _ = e;
}

#[test]
fn fp8_arithmetic_points_to_a_cast() {
    let trace = Trace::new();
    let a = trace.param("a", &[2], DType::F32).cast(DType::F8E4M3);
    let err = trace.finish(&a.exp().sum_all()).unwrap_err().to_string();
    assert!(err.contains("cast fp8 values to a wider dtype first"), "{err}");
}

#[test]
fn duplicate_declarations() {
    let trace = Trace::new();
    let a = trace.param("w", &[2], DType::F32);
    let _b = trace.param("w", &[2], DType::F32);
    let err = trace.finish(&a.sum_all()).unwrap_err().to_string();
    assert!(err.contains("`w` is already declared"), "{err}");
}

#[test]
fn operands_of_two_traces() {
    let t1 = Trace::new();
    let t2 = Trace::new();
    let a = t1.param("a", &[2], DType::F32);
    let b = t2.param("b", &[2], DType::F32);
    let c = &a + &b;
    let err = t1.finish(&c.sum_all()).unwrap_err().to_string();
    assert!(err.contains("operands belong to different traces"), "{err}");
}

/// Records one bad op on a trace: its line and its (poisoned) result.
type Builder = dyn Fn(&Trace) -> (u32, Tensor);

#[test]
fn new_ops_name_the_op_and_the_line() {
    let cases: Vec<(&str, &str, Box<Builder>)> = vec![
        (
            "index_select",
            "must be i64",
            Box::new(|t: &Trace| {
                let x = t.param("x", &[3, 4], DType::F32);
                let bad = t.param("i", &[2], DType::F32);
                (line!(), x.index_select(1, &bad))
            }),
        ),
        (
            "index_select",
            "axis 2 out of range for rank 2",
            Box::new(|t: &Trace| {
                let x = t.param("x", &[3, 4], DType::F32);
                let i = t.arange(0.0, 1.0, 2, DType::I64);
                (line!(), x.index_select(2, &i))
            }),
        ),
        (
            "where",
            "the condition must be bool",
            Box::new(|t: &Trace| {
                let x = t.param("x", &[3], DType::F32);
                (line!(), x.where_(&x, &x))
            }),
        ),
        (
            "slice",
            "range 2..5 exceeds dim 4",
            Box::new(|t: &Trace| {
                let x = t.param("x", &[3, 4], DType::F32);
                (line!(), x.slice(1, 2, 3))
            }),
        ),
        (
            "sdpa",
            "q and k need the same last axis",
            Box::new(|t: &Trace| {
                let q = t.param("q", &[2, 5, 4], DType::F32);
                let k = t.param("k", &[2, 5, 3], DType::F32);
                (line!(), Tensor::scaled_dot_product_attention(&q, &k, &k, true, 0.5))
            }),
        ),
        (
            "sdpa",
            "q, k and v need the same number of heads (axis 2), got [2, 5, 4, 8], [2, 5, 3, 8] and [2, 5, 3, 8]",
            Box::new(|t: &Trace| {
                let q = t.param("q", &[2, 5, 4, 8], DType::F32);
                let kv = t.param("kv", &[2, 5, 3, 8], DType::F32);
                (line!(), Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, &q, &kv, &kv, true, 0.5))
            }),
        ),
        (
            "sdpa",
            "q, k and v need the same rank >= 3 ([.., t, heads, d] (token-major)), got [5, 8]",
            Box::new(|t: &Trace| {
                let q = t.param("q", &[5, 8], DType::F32);
                (line!(), Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, &q, &q, &q, false, 0.5))
            }),
        ),
        (
            "exp",
            "bool: arithmetic needs numbers",
            Box::new(|t: &Trace| {
                let x = t.param("x", &[3], DType::F32);
                (line!(), x.gt(&x).exp())
            }),
        ),
        ("arange", "not bool", Box::new(|t: &Trace| (line!(), t.arange(0.0, 1.0, 3, DType::Bool)))),
    ];
    for (op, message, build) in cases {
        let trace = Trace::new();
        let (line, y) = build(&trace);
        let loss = trace.param("anchor", &[], DType::F32);
        let _ = y;
        let err = trace.finish(&loss).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{op} at ")), "{err}");
        assert!(err.contains(&here(line)), "{op}: {err}");
        assert!(err.contains(message), "{op}: {err}");
    }
}

#[test]
fn out_of_range_indices_at_run_time_name_the_line() {
    let trace = Trace::new();
    let x = trace.param("x", &[3, 4], DType::F32);
    let ids = trace.input("ids", &[2], DType::I64);
    let line = line!() + 1;
    let y = x.index_select(0, &ids);
    let model = Model::new(trace.finish(&y.sum_all()).unwrap()).unwrap();
    let feeds = Feeds::new().with("ids", HostTensor::i64([2], vec![1, 7]).unwrap());
    let err = model.step(&mut CpuBackend::new(), &model.init_params(0).unwrap(), &feeds).unwrap_err().to_string();
    assert!(err.contains("index 7 at position 1 is out of range for an axis of 3"), "{err}");
    assert!(err.contains(&here(line)), "{err}");
}

/// `?` in `main` prints an error's `Debug`: it reads as the message, with causes the message does
/// not already quote, and never as the struct.
#[test]
fn debug_prints_the_message_and_its_causes() {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let err = trace.finish(&x.matmul(&x).sum_all()).unwrap_err();
    assert_eq!(format!("{err:?}"), err.to_string());

    let policy = remat_core::RegionPolicy::parse("save(matmull").unwrap_err();
    assert_eq!(format!("{policy:?}"), policy.to_string());
    assert!(!format!("{policy:?}").contains("Diagnostic"), "{policy:?}");

    let driver = std::io::Error::other("CUDA_ERROR_OUT_OF_MEMORY");
    let err = remat_core::Error::Backend {
        backend: "cuda:0".into(),
        message: "alloc failed".into(),
        source: Some(Box::new(driver)),
    };
    let debug = format!("{err:?}");
    assert!(debug.starts_with(&err.to_string()), "{debug}");
    assert!(debug.ends_with("\n  caused by: CUDA_ERROR_OUT_OF_MEMORY"), "{debug}");
}

/// An unknown inference output: the closest name, then a short deduplicated list of the names
/// there are — not every value of the model.
#[test]
fn an_unknown_inference_output_names_a_few_candidates() {
    let trace = Trace::new();
    let mut h = trace.param("x", &[2, 3], DType::F32);
    for i in 0..30 {
        // Thirty layers, each naming its values alike (the common case of a block function).
        h = h.tanh().name("act").exp().name(&format!("layer{i}"));
    }
    let logits = h.name("logits");
    let model = Model::new(trace.finish(&logits.sum_all()).unwrap()).unwrap();
    let Err(err) = model.inference(&["logitz"]) else { panic!("no value is named logitz") };
    assert!(matches!(&err, remat_core::Error::Config { setting, .. } if setting == "names"), "{err:?}");
    let err = err.to_string();
    assert!(err.contains("did you mean `logits`?"), "{err}");
    assert_eq!(err.matches("`act`").count(), 1, "each name once: {err}");
    assert!(err.contains("and 24 more"), "{err}");
    assert!(err.len() < 400, "{} bytes: {err}", err.len());
}
