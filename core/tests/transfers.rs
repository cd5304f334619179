//! What a training step moves across the backend's boundary, by the backend's own counters
//! (`StepOutput::transfers`), against the bytes of what the step is given and hands back.

use remat_core::{Backend, CpuBackend, DType, Feeds, HostTensor, Model, Trace};

#[test]
fn a_step_moves_its_parameters_batch_and_constants_in_and_its_loss_and_gradients_out() {
    let trace = Trace::new();
    let x = trace.input("x", &[8, 16], DType::F32);
    let y = trace.input("y", &[8], DType::I64);
    let w1 = trace.param("w1", &[16, 32], DType::F32);
    let w2 = trace.param("w2", &[32, 4], DType::F32);
    let bias = trace.constant_from("bias", HostTensor::f32([4], vec![0.5; 4]).unwrap());
    let logits = (&x.matmul(&w1).gelu().matmul(&w2) + &bias).name("logits");
    let model = Model::new(trace.finish_with(&logits.cross_entropy(&y), &[&logits]).unwrap()).unwrap();
    let params = model.init_params(0).unwrap();
    let feeds = Feeds::new()
        .with("x", HostTensor::f32([8, 16], vec![0.25; 128]).unwrap())
        .with("y", HostTensor::i64([8], (0..8).map(|i| i % 4).collect()).unwrap());
    let mut cpu = CpuBackend::new();
    let before = cpu.transfers();
    let out = model.step(&mut cpu, &params, &feeds).unwrap();
    assert_eq!(cpu.transfers().since(before), out.transfers);
    let param_bytes: usize = params.values().iter().map(HostTensor::bytes).sum();
    let batch_bytes = 8 * 16 * 4 + 8 * 8;
    let constant_bytes = 4 * 4;
    assert_eq!(out.transfers.to_device_bytes as usize, param_bytes + batch_bytes + constant_bytes);
    let grad_bytes: usize = out.grads.iter().map(HostTensor::bytes).sum();
    let loss_bytes = 4;
    assert_eq!(out.transfers.to_host_bytes as usize, loss_bytes + out.outputs[0].bytes() + grad_bytes);
    // A second step moves the same again (nothing stays on the device between steps yet: issue 49).
    let again = model.step(&mut cpu, &params, &feeds).unwrap();
    assert_eq!(again.transfers, out.transfers);
}
