//! `Model::step_streaming`: every gradient handed over once, as soon as the backward finishes
//! it, equal to the step's own; the step itself unchanged.

use remat_core::{CpuBackend, DType, Model, Strategy};
use remat_zoo::{self as zoo, GptConfig};

#[test]
fn each_gradient_is_handed_over_once_and_equals_the_steps() {
    let cfg =
        GptConfig { batch: 2, seq: 8, d_model: 16, heads: 2, layers: 3, vocab: 32, dropout: 0.1, dtype: DType::F32 };
    for strategy in [Strategy::Respect, Strategy::MinCut] {
        let model = Model::with_strategy(zoo::gpt(&cfg).unwrap(), strategy).unwrap();
        let params = model.init_params(2).unwrap();
        let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
        let plain = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, 7).unwrap();
        let mut seen = vec![0usize; params.len()];
        let mut order = Vec::new();
        let mut copies = vec![None; params.len()];
        let out = model
            .step_streaming(&mut CpuBackend::new(), &params, &feeds, 7, &mut |i, g| {
                seen[i] += 1;
                order.push(i);
                copies[i] = Some(g);
                Ok(())
            })
            .unwrap();
        assert!(seen.iter().all(|&n| n == 1), "{strategy}: {seen:?}");
        assert_eq!(out.loss.to_bits(), plain.loss.to_bits());
        for (i, g) in copies.into_iter().enumerate() {
            assert_eq!(g.as_ref(), Some(&plain.grads[i]), "{strategy}: gradient {i}");
            assert_eq!(&out.grads[i], &plain.grads[i]);
        }
        // The backward runs from the head to the embedding: the last block's weights are final
        // before the first block's, so a bucket of them can travel while the rest is computed.
        let first_block = params.names().iter().position(|n| n.contains("0.")).unwrap();
        let last_block = params.names().iter().rposition(|n| n.contains("2.")).unwrap();
        let at = |p| order.iter().position(|&i| i == p).unwrap();
        assert!(at(last_block) < at(first_block), "{strategy}: {:?}", params.names());
        assert_eq!(out.predicted_peak, out.measured_peak);
    }
    // An error from the hook ends the step with it.
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let params = model.init_params(2).unwrap();
    let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
    let e = model
        .step_streaming(&mut CpuBackend::new(), &params, &feeds, 0, &mut |_, _| {
            Err(remat_core::Error::Backend {
                backend: "network".into(),
                message: "the network is down".into(),
                source: None,
            })
        })
        .unwrap_err();
    // The hook's own error, as it was (a network failure, not remat's).
    assert!(matches!(&e, remat_core::Error::Backend { backend, .. } if backend == "network"), "{e:?}");
    assert_eq!(e.to_string(), "network backend: the network is down");
}
