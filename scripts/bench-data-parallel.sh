#!/usr/bin/env bash
# Data-parallel training of the d256 gpt (examples/gpt.rs --data-parallel), measured in one run:
# 1 process (1 thread, and 2 threads) against 2 processes of 1 thread each under mpirun, the
# same global batch. Prints each run's median step time, the fraction of the gradient
# all-reduce hidden behind the backward, and the bytes each rank sent per step. Rounds
# alternate the three set-ups so that a noisy machine weighs on each alike.
#
#   scripts/bench-data-parallel.sh [rounds] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
steps=${2:-40}
cargo build --release --quiet --example gpt
gpt=(target/release/examples/gpt --data-parallel --steps "$steps" --d-model 256 --batch 8)
mpi=(mpirun --allow-run-as-root --oversubscribe)
for round in $(seq "$rounds"); do
    for setup in "1 1" "1 2" "2 1"; do
        set -- $setup
        line=$("${mpi[@]}" -np "$1" -x REMAT_NUM_THREADS="$2" "${gpt[@]}" | grep '^rank 0:')
        echo "round $round  processes $1  threads/process $2  $line"
    done
done
