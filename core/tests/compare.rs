//! `remat_core::compare`: each policy's row is what its model measures on its own, and the table
//! shows every row against the first.

use remat_core::compare::{compare, Row, Table};
use remat_core::{Budget, CpuBackend, DType, Error, Feeds, HostTensor, Model, Strategy, Trace};

fn graph() -> remat_core::Graph {
    let trace = Trace::new();
    let x = trace.input("x", &[8, 16], DType::F32);
    let w1 = trace.param("w1", &[16, 32], DType::F32);
    let w2 = trace.param("w2", &[32, 16], DType::F32);
    let h = x.matmul(&w1).tanh().sin();
    let loss = h.matmul(&w2).tanh().square().sum_all();
    trace.finish(&loss).unwrap()
}

fn feeds() -> Feeds {
    Feeds::new().with("x", HostTensor::f32([8, 16], (0..128).map(|i| (i as f32 * 0.3).cos()).collect()).unwrap())
}

const STRATEGIES: [Strategy; 3] = [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Bytes(0))];

#[test]
fn each_row_is_what_its_model_measures_alone() {
    let build = |s: &Strategy| Model::with_strategy(graph(), *s);
    let params = build(&Strategy::Respect).unwrap().init_params(0).unwrap();
    let rows = compare(STRATEGIES, build, &mut || Ok(CpuBackend::new()), &params, &feeds(), 3).unwrap();
    assert_eq!(rows.len(), 3);
    for (row, strategy) in rows.iter().zip(STRATEGIES) {
        let model = build(&strategy).unwrap();
        let out = model.step_seeded(&mut CpuBackend::new(), &params, &feeds(), 2).unwrap();
        let p = model.partition().unwrap();
        assert_eq!(row.policy, strategy.to_string());
        assert_eq!((row.saved_bytes, row.recompute_flops), (p.saved_bytes, p.recompute_flops));
        assert_eq!((row.predicted_peak, row.measured_peak), (out.predicted_peak, out.measured_peak));
        assert_eq!(row.activation_peak, out.measured_peak - model.plan().resident_bytes());
        assert!(row.step_seconds > 0.0);
    }
    assert!(rows[2].recompute_flops > rows[0].recompute_flops, "budget=0 recomputes what respect keeps");
}

#[test]
fn the_table_sets_every_row_against_the_first() {
    let row = |policy: &str, peak: usize, seconds: f64| Row {
        policy: policy.into(),
        saved_bytes: 2048,
        predicted_peak: peak + 1024,
        measured_peak: peak + 1024,
        activation_peak: peak,
        recompute_flops: 3_000_000,
        step_seconds: seconds,
        host_peak: 512,
    };
    let legend = ["(a note)"];
    let table = Table { policy_width: 8, host_peak: true, legend: &legend };
    let text = table.render(&[row("none", 4096, 0.002), row("full", 1024, 0.003)]);
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("policy") && lines[0].contains("host peak"), "{text}");
    assert!(lines[1].starts_with("none") && lines[1].contains("1.00x"), "{text}");
    assert!(lines[2].contains("0.25x") && lines[2].contains("1.50x") && lines[2].contains("3.00MFL"), "{text}");
    assert_eq!(lines[3], "(a note)");
    // No rows, or a first row with nothing to divide by: a header, and `-` for the ratios.
    assert_eq!(Table::default().render(&[]).lines().filter(|l| !l.is_empty()).count(), 1);
    let zero = Table::default().render(&[row("none", 0, 0.0), row("full", 1024, 0.003)]);
    assert!(zero.lines().last().unwrap().trim_end().ends_with('-'), "{zero}");
}

#[test]
fn a_comparison_times_at_least_one_step() {
    let build = |s: &Strategy| Model::with_strategy(graph(), *s);
    let params = build(&Strategy::Respect).unwrap().init_params(0).unwrap();
    let err = compare(STRATEGIES, build, &mut || Ok(CpuBackend::new()), &params, &feeds(), 0).unwrap_err();
    assert!(matches!(&err, Error::Config { setting, .. } if setting == "timed_steps"), "{err:?}");
    assert_eq!(err.to_string(), "a comparison times at least one step per policy");
}
