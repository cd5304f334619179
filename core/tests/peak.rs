//! `Strategy::Peak`: the plan's predicted peak — equal to the measured one on the CPU — within a
//! limit, with the least recompute the search finds; gradients equal every other strategy's.

use remat_core::peak_lower_bound;
use remat_core::{Budget, CostModel, CpuBackend, DType, Error, JointGraph, Limit, Model, NodeId, Plan, Strategy};
use remat_zoo::{self as zoo, GptConfig};

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
    // Below the parameters alone: refused from the lower bound, before any search, which is
    // all that is known (no least peak).
    let bound = peak_lower_bound(&JointGraph::new(&graph).unwrap()).unwrap().bytes;
    let err = Model::with_strategy(graph.clone(), Strategy::Peak(1024)).unwrap_err();
    assert!(matches!(err, Error::Infeasible { what: Limit::Peak, asked: 1024, least: None, .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("peak=1024 (1.0 KiB) cannot be met: no plan peaks below {bound} bytes")), "{text}");
    // At the bound the search runs: it finds a plan at the bound, or names the smallest peak
    // it reached, at or above the bound, which is met.
    match Model::with_strategy(graph.clone(), Strategy::Peak(bound)) {
        Ok(model) => assert_eq!(model.plan().predicted_peak() as u64, bound),
        Err(Error::Infeasible { what: Limit::Peak, asked, least: Some(reached), message }) => {
            assert_eq!(asked, bound);
            assert!(reached > bound, "{message}");
            assert!(message.contains(&format!("is {reached} bytes")), "{message}");
            let model = Model::with_strategy(graph, Strategy::Peak(reached)).unwrap();
            assert!(model.plan().predicted_peak() as u64 <= reached);
        }
        Err(e) => panic!("peak={bound}: {e:?}"),
    }
    // A joint graph alone has no schedule to measure peaks on: a setting that does not apply.
    let joint = remat_core::read_joint(include_str!("../../docs/examples/small.joint.json")).unwrap();
    let err = remat_core::partition(&joint, Strategy::Peak(1 << 20)).unwrap_err();
    assert!(matches!(&err, Error::Config { setting, .. } if setting == "strategy"), "{err:?}");
    assert!(err.to_string().contains("needs a plan to measure peaks on"), "{err}");
    assert_eq!("peak=3MiB".parse::<Strategy>().unwrap(), Strategy::Peak(3 << 20));
    let err = "peak=0.5".parse::<Strategy>().unwrap_err();
    assert!(matches!(&err, Error::Config { setting, .. } if setting == "strategy"), "{err:?}");
    assert!(err.to_string().starts_with("`peak=0.5`: a peak is bytes"), "{err}");
}

/// A peak just below the least any byte budget's plan reaches (a sweep of 41 budgets, and the
/// min-cut: the family the walk searches) is met by the exact search with a plan no budget finds,
/// or refused with a least peak at or below the sweep's that a limit at it meets; a peak below
/// that least, where it is proven least, is refused again.
#[test]
fn an_infeasible_peak_gives_the_least_peak_the_budgets_reach() {
    let graph = zoo::gpt(&cfg()).unwrap();
    let peak = |strategy| Model::with_strategy(graph.clone(), strategy).unwrap().plan().predicted_peak() as u64;
    let fractions = (0..=40).map(|k| Strategy::Budget(Budget::Fraction(k as f64 / 40.0)));
    let swept = fractions.chain([Strategy::MinCut]).map(peak).min().unwrap();
    let bound = peak_lower_bound(&JointGraph::new(&graph).unwrap()).unwrap().bytes;
    assert!(swept > bound, "the search runs: {swept} is above the bound {bound}");
    let least = match Model::with_strategy(graph.clone(), Strategy::Peak(swept - 1)) {
        Ok(model) => {
            assert!((model.plan().predicted_peak() as u64) < swept);
            return;
        }
        Err(Error::Infeasible { what: Limit::Peak, asked, least: Some(least), message }) => {
            assert_eq!(asked, swept - 1);
            assert!(least <= swept, "{message}");
            if message.contains("the least predicted peak of any plan") {
                let again = Model::with_strategy(graph.clone(), Strategy::Peak(least - 1)).unwrap_err();
                assert!(matches!(again, Error::Infeasible { least: Some(l), .. } if l == least), "{again:?}");
            }
            least
        }
        Err(e) => panic!("{e:?}"),
    };
    assert!(peak(Strategy::Peak(least)) <= least);
}

/// The lower bound against every plan of small graphs (each saved set of the values the rules
/// leave open, brute force; each again with its saved values offloaded): none peaks below it,
/// and it is at least the inputs and parameters.
#[test]
fn no_plan_peaks_below_the_lower_bound() {
    let mlp = |widths: Vec<usize>| zoo::mlp(&zoo::MlpConfig { batch: 2, widths }).unwrap();
    // Whether the bound is the least peak itself (found so by the brute force, and kept so).
    let graphs = [
        ("mlp 3-4-2", true, mlp(vec![3, 4, 2])),
        ("mlp 3-5-4-2", true, mlp(vec![3, 5, 4, 2])),
        (
            "two_regions",
            false,
            remat_core::read_graph(include_str!("../../docs/examples/two_regions.graph.json")).unwrap(),
        ),
    ];
    for (what, exact, graph) in graphs {
        let joint = JointGraph::new(&graph).unwrap();
        let n = joint.n_forward();
        let resident = |i: usize| joint.graph().node(NodeId::from_index(i)).op.is_resident();
        let open: Vec<usize> =
            (0..n).filter(|&i| !resident(i) && !joint.forward_outputs().contains(&NodeId::from_index(i))).collect();
        assert!(open.len() <= 16, "{what}: {} open values", open.len());
        let bound = peak_lower_bound(&joint).unwrap();
        let resident_bytes: u64 =
            (0..n).filter(|&i| resident(i)).map(|i| joint.graph().node(NodeId::from_index(i)).bytes() as u64).sum();
        assert_eq!(bound.resident, resident_bytes, "{what}");
        assert!(bound.bytes >= resident_bytes, "{what}");
        let mut least = u64::MAX;
        for mask in 0u32..1 << open.len() {
            let mut saved = vec![false; n];
            for (k, &i) in open.iter().enumerate() {
                saved[i] = mask & (1 << k) != 0;
            }
            let plain = Plan::new(&joint, &saved).unwrap().predicted_peak() as u64;
            let offloaded = Plan::with_offload(&joint, &saved, &saved, &CostModel::default()).unwrap();
            let offloaded = offloaded.predicted_peak() as u64;
            assert!(
                plain >= bound.bytes && offloaded >= bound.bytes,
                "{what}: mask {mask:b}: {plain}/{offloaded} < {bound:?}"
            );
            least = least.min(plain).min(offloaded);
        }
        println!("{what}: bound {} bytes, least peak of {} plans {least}", bound.bytes, 2u64 << open.len());
        if exact {
            assert_eq!(bound.bytes, least, "{what}");
        }
    }
}
