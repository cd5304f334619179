#!/usr/bin/env bash
# Builds the `remat` command once per global allocator (the cli crate's `alloc-*` features;
# "system" is none of them) and compares them on the 10⁶-node documents in one bench run,
# interleaved (cli/benches/end_to_end/alloc_ab.rs). Without `exact`: at 10⁶ nodes the budget
# is met by the eviction path either way, and HiGHS need not be built in release.
#   scripts/alloc-ab.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-5}"
target="${CARGO_TARGET_DIR:-target}"
out="$target/alloc-ab"
mkdir -p "$out"
builds=()
for variant in large-blocks system jemalloc mimalloc; do
    features=()
    [ "$variant" = system ] || features=(--features "alloc-$variant")
    cargo build --release -p remat-cli --no-default-features "${features[@]}" --bin remat
    cp "$target/release/remat" "$out/remat-$variant"
    builds+=("$variant=$out/remat-$variant")
done
cargo bench -p remat-cli --no-default-features --bench end_to_end -- --alloc "${builds[@]}" --rounds "$rounds"
