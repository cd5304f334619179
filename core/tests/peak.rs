//! `Strategy::Peak`: the plan's predicted peak — equal to the measured one on the CPU — within a
//! limit, with the least recompute the search finds; gradients equal every other strategy's.

use remat_core::zoo::{self, GptConfig};
use remat_core::{Budget, CpuBackend, DType, Model, Strategy};

fn cfg() -> GptConfig {
    GptConfig { batch: 2, seq: 16, d_model: 32, heads: 2, layers: 2, vocab: 13, dropout: 0.1, dtype: DType::F32 }
}

fn bits(grads: &[remat_core::HostTensor]) -> Vec<Vec<u32>> {
    grads.iter().map(|g| g.to_f32_vec().iter().map(|v| v.to_bits()).collect()).collect()
}

#[test]
fn a_peak_limit_is_met_with_the_least_recompute_of_the_budget_sweep() {
    let graph = zoo::gpt(&cfg()).unwrap();
    let feeds = zoo::synthetic_tokens(&cfg(), 0).unwrap();
    let reference = Model::new(graph.clone()).unwrap();
    let params = reference.init_params(1).unwrap();
    let expected = reference.step_seeded(&mut CpuBackend::new(), &params, &feeds, 3).unwrap();
    // The sweep every limit is held against: 41 byte budgets from the fewest bytes to all,
    // twice as fine as the search's own.
    let sweep: Vec<(u64, u64)> = (0..=40)
        .map(|k| {
            let m = Model::with_strategy(graph.clone(), Strategy::Budget(Budget::Fraction(k as f64 / 40.0))).unwrap();
            (m.plan().predicted_peak() as u64, m.partition().unwrap().recompute_flops)
        })
        .collect();
    let (lowest, highest) = (sweep.iter().map(|s| s.0).min().unwrap(), sweep.iter().map(|s| s.0).max().unwrap());
    assert!(lowest < highest, "the sweep spans peaks");
    for k in 0..=4 {
        let limit = lowest + (highest - lowest) * k / 4;
        let model = Model::with_strategy(graph.clone(), Strategy::Peak(limit)).unwrap();
        let p = model.partition().unwrap();
        assert_eq!(p.strategy, Strategy::Peak(limit));
        assert!(model.plan().predicted_peak() as u64 <= limit, "peak={limit}");
        let best_swept = sweep.iter().filter(|s| s.0 <= limit).map(|s| s.1).min().unwrap();
        assert!(
            p.recompute_flops <= best_swept,
            "peak={limit}: {} FLOPs, the sweep found {best_swept}",
            p.recompute_flops
        );
        let out = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, 3).unwrap();
        assert_eq!(out.measured_peak, out.predicted_peak, "peak={limit}");
        assert_eq!(bits(&out.grads), bits(&expected.grads), "peak={limit}: gradients equal every strategy's");
    }
}

#[test]
fn an_unreachable_peak_names_the_smallest_one() {
    let graph = zoo::gpt(&cfg()).unwrap();
    let err = Model::with_strategy(graph, Strategy::Peak(1024)).unwrap_err().to_string();
    assert!(
        err.contains("peak=1024") && err.contains("cannot be met: the smallest predicted peak reached is"),
        "{err}"
    );
    let joint = remat_core::json::read_joint(include_str!("../../docs/examples/small.joint.json")).unwrap();
    let err = remat_core::partition::partition(&joint, Strategy::Peak(1 << 20)).unwrap_err().to_string();
    assert!(err.contains("needs a plan to measure peaks on"), "{err}");
    assert_eq!("peak=3MiB".parse::<Strategy>(), Ok(Strategy::Peak(3 << 20)));
    assert!("peak=0.5".parse::<Strategy>().unwrap_err().contains("not a fraction"));
}
