//! The claim of [`super::split`]: every thread count gives the same bits. Checked on the kernels
//! a training step runs, with sizes that split into many chunks and leave remainders.

use super::testutil::*;
use crate::host::HostTensor;
use crate::op::{AttnLayout, BinaryOp, Op, ReduceOp, UnaryGradOp, UnaryOp};

#[test]
fn every_thread_count_gives_the_same_bits() {
    let (rows, d) = (601, 67);
    let x = f32s(&[rows, d], 1);
    let g = f32s(&[rows, d], 2);
    let bias = f32s(&[d], 3);
    let w = f32s(&[d, 96], 4);
    let (q, k, v) = (f32s(&[8, 70, 16], 5), f32s(&[8, 70, 16], 6), f32s(&[8, 70, 16], 7));
    let sdpa = Op::Sdpa { causal: true, scale: 0.25, layout: AttnLayout::HeadMajor };
    let saved = run(&sdpa, &[&q, &k, &v]).unwrap();
    let dsaved = f32s(saved.shape(), 8);
    let cases: Vec<(Op, Vec<&HostTensor>)> = vec![
        (Op::Unary(UnaryOp::Gelu), vec![&x]),
        (Op::UnaryGrad(UnaryGradOp::GeluGrad), vec![&x, &g]),
        (Op::Binary(BinaryOp::Add), vec![&x, &bias]),
        (Op::Binary(BinaryOp::Mul), vec![&x, &g]),
        (Op::Softmax, vec![&x]),
        (Op::SoftmaxGrad, vec![&x, &g]),
        (Op::LayerNorm { eps: 1e-5 }, vec![&x]),
        (Op::LayerNormGrad { eps: 1e-5 }, vec![&x, &g]),
        (Op::Dropout { p: 0.1, seed: 3, key: 4 }, vec![&x]),
        (Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdim: false }, vec![&x]),
        (Op::Reduce { op: ReduceOp::Amax, axes: vec![1], keepdim: true }, vec![&x]),
        (Op::Transpose { perm: vec![1, 0] }, vec![&x]),
        (Op::Matmul, vec![&x, &w]),
        (Op::MatmulT { ta: true, tb: false, fold: false }, vec![&x, &g]),
        (sdpa.clone(), vec![&q, &k, &v]),
        (Op::SdpaGrad { causal: true, scale: 0.25, layout: AttnLayout::HeadMajor }, vec![&q, &k, &v, &saved, &dsaved]),
    ];
    let bits = |threads: usize| -> Vec<Vec<u32>> {
        on_threads(threads, || {
            cases
                .iter()
                .map(|(op, xs)| run_seeded(op, xs, 9).unwrap().to_f32_vec().iter().map(|v| v.to_bits()).collect())
                .collect()
        })
    };
    let one = bits(1);
    for threads in [2, 3, 7] {
        let many = bits(threads);
        for (i, (op, _)) in cases.iter().enumerate() {
            assert_eq!(one[i], many[i], "{} on {threads} threads", op.name());
        }
    }
}
