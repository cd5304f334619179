#!/usr/bin/env bash
# remat's GPT step against PyTorch's (../shared/bench/torch_gpt_step.py), in one run, on the
# same pinned cores: both sizes of issue 13, 1 and 2 threads, every policy, eager and
# torch.compile, and remat's respect (eager semantics) and mincut (compiler semantics).
#
#   ROUNDS=3 scripts/bench-vs-torch.sh PYTHON TORCH_SCRIPT OUT_DIR [BASELINE_GPT]
#
# PYTHON has torch 2.15 installed; BASELINE_GPT, if given, is an older build of the gpt example
# measured alongside (before/after). Every configuration is measured once per round, rounds one
# after another (ROUNDS, default 3), so that a slow spell of a shared machine hits every column
# of a round; the table (scripts/bench-table.py) gives each cell's median over the rounds.
set -euo pipefail
py=$1; script=$2; out=$3; base=${4:-}; rounds=${ROUNDS:-3}
gpt=target/release/examples/gpt
mkdir -p "$out"
: > "$out/torch.jsonl"; : > "$out/remat.txt"
sizes=("small:--layers 4 --d-model 64 --heads 4 --seq 32 --batch 8"
       "large:--layers 4 --d-model 256 --heads 4 --seq 128 --batch 8")
for round in $(seq 1 "$rounds"); do
  for t in 1 2; do
    cpus=$([ "$t" = 1 ] && echo 0 || echo 0,1)
    for entry in "${sizes[@]}"; do
      name=${entry%%:*}; size=${entry#*:}
      # remat: `rs` training steps, then `rt` timed steps per policy (torch: warmup, then timed).
      if [ "$name" = small ]; then ew="--warmup 5 --steps 30"; cw="--warmup 3 --steps 30"; rs=5; rt=30; else ew="--warmup 3 --steps 10"; cw="--warmup 2 --steps 10"; rs=3; rt=10; fi
      for pol in none full save-matmuls; do
        echo "round $round: torch eager $name t$t $pol" >&2
        OMP_NUM_THREADS=$t taskset -c "$cpus" "$py" "$script" --threads "$t" $size --policy "$pol" $ew --no-memory >> "$out/torch.jsonl"
        if [ "$pol" != none ]; then
          echo "round $round: torch compile $name t$t $pol" >&2
          OMP_NUM_THREADS=$t taskset -c "$cpus" "$py" "$script" --threads "$t" $size --policy "$pol" --compile $cw --no-memory >> "$out/torch.jsonl"
        fi
      done
      for strategy in respect mincut; do
        echo "round $round: remat $name t$t $strategy" >&2
        { echo "== remat size=$name threads=$t strategy=$strategy"
          MATMUL_NUM_THREADS=$t taskset -c "$cpus" "$gpt" $size --steps $rs --timed-steps $rt --strategy $strategy --generate 0; } >> "$out/remat.txt" 2>&1
      done
      if [ -n "$base" ]; then
        echo "round $round: baseline $name t$t" >&2
        { echo "== baseline size=$name threads=$t strategy=respect"
          MATMUL_NUM_THREADS=$t taskset -c "$cpus" "$base" $size --steps $rs --strategy respect; } >> "$out/remat.txt" 2>&1
      fi
    done
  done
done
python3 "$(dirname "$0")/bench-table.py" "$out"
