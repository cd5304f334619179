//! The claim of [`super::split`]: every thread count gives the same bits. Checked on the kernels
//! a training step runs, with sizes that split into many chunks and leave remainders.

use super::testutil::*;

#[test]
fn every_thread_count_gives_the_same_bits() {
    let kernels = StepKernels::new(601, 8);
    let cases = kernels.cases();
    let bits = |threads: usize| on_threads(threads, || output_bits(&cases));
    let one = bits(1);
    for threads in [2, 3, 7] {
        let many = bits(threads);
        for (i, (op, _)) in cases.iter().enumerate() {
            assert_eq!(one[i], many[i], "{} on {threads} threads", op.name());
        }
    }
}
