#!/usr/bin/env bash
# GPU check for remat-cuda, in two halves:
#
#   scripts/gpu-check.sh --build   (here, with Rust; x86-64 Linux)
#       builds the release test binaries of remat-cuda and the gpu_bench example and copies them,
#       with this script as run.sh, into gpu-bundle/ (ignored by git).
#
#   gpu-bundle/run.sh              (on the GPU machine: no Rust, no network, CUDA 13.0 toolkit)
#       finds the CUDA libraries, runs the GPU tests with REMAT_REQUIRE=cuda,nvrtc and the benchmark,
#       each under a timeout; the whole run stays under 8 minutes (one 7-minute deadline).
#
# Exit status: 0 when every test binary passed and the benchmark ran; non-zero otherwise.
set -euo pipefail

die() { echo "gpu-check: $*" >&2; exit 1; }

build() {
    local root bundle
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    bundle="$root/gpu-bundle"
    cd "$root"
    command -v cargo >/dev/null || die "cargo not found: --build runs where Rust is installed"
    echo "== building release test binaries of remat-cuda"
    # The JSON goes to a file, not an argument: one argument may not exceed 128 KiB.
    local json
    json="$(mktemp)"
    # With `nccl`: tests/nccl.rs joins a one-rank NCCL job where libnccl is found (and says why
    # not where it is not).
    cargo test --release --no-run -p remat-cuda --features nccl --message-format=json >"$json" \
        || die "cargo test --no-run failed"
    echo "== building the gpu_bench example"
    cargo build --release -p remat-cuda --example gpu_bench || die "building gpu_bench failed"
    rm -rf "$bundle"
    mkdir -p "$bundle/tests"
    # Test executables: compiler-artifact lines of remat-cuda with an "executable".
    python3 - "$json" "$bundle/tests" <<'PY' || die "could not collect the test binaries"
import json, shutil, sys, os
out = sys.argv[2]
n = 0
for line in open(sys.argv[1]).read().splitlines():
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    if msg["target"]["kind"] == ["example"]:
        continue
    if not msg["package_id"].split("#")[0].endswith("/cuda") and "remat-cuda" not in msg["package_id"]:
        continue
    name = msg["target"]["name"] + ("-lib" if msg["target"]["kind"] == ["lib"] else "")
    shutil.copy2(msg["executable"], os.path.join(out, name))
    n += 1
if n == 0:
    sys.exit("no test executables found")
print(f"collected {n} test binaries")
PY
    rm -f "$json"
    cp target/release/examples/gpu_bench "$bundle/gpu_bench"
    cp "$root/scripts/gpu-check.sh" "$bundle/run.sh"
    chmod +x "$bundle/run.sh" "$bundle/gpu_bench" "$bundle"/tests/*
    # Debug info makes the bundle ~90 MB, more than a device run may carry (64 MiB); symbols
    # (function names in backtraces) stay.
    if command -v strip >/dev/null; then
        strip --strip-debug "$bundle/gpu_bench" "$bundle"/tests/* || die "strip failed"
    else
        echo "gpu-check: strip not found: the bundle keeps its debug info" >&2
    fi
    local kib
    kib="$(du -sk "$bundle" | cut -f1)"
    [ "$kib" -le $((60 * 1024)) ] || echo "gpu-check: WARNING: the bundle is $((kib / 1024)) MiB (a device run carries at most 64 MiB)" >&2
    echo "== bundle ready: $bundle ($(du -sh "$bundle" | cut -f1)); copy it to the GPU machine and run ./run.sh"
    ls -l "$bundle" "$bundle/tests"
}

find_cuda_libs() {
    local dirs=() d
    for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             /usr/lib/x86_64-linux-gnu /usr/lib64; do
        [ -d "$d" ] && dirs+=("$d")
    done
    # pip wheels (PyTorch ships nvidia-* packages): site-packages/nvidia/*/lib
    local py
    for py in python3 python; do
        if command -v "$py" >/dev/null; then
            while IFS= read -r d; do [ -d "$d" ] && dirs+=("$d"); done < <("$py" - <<'PY' 2>/dev/null || true
import glob, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p])
for r in sorted(roots):
    for d in sorted(glob.glob(r + "/nvidia/*/lib")):
        print(d)
PY
)
            break
        fi
    done
    local joined=""
    for d in "${dirs[@]}"; do joined="${joined:+$joined:}$d"; done
    export LD_LIBRARY_PATH="${joined}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    local lib found
    for lib in libcuda.so.1 libnvrtc.so.13 libnvrtc-builtins.so.13.0 libcublas.so.13 libcublasLt.so.13; do
        found=""
        for d in "${dirs[@]}"; do
            if [ -e "$d/$lib" ]; then found="$d/$lib"; break; fi
        done
        # Not `grep -q`: it exits at the first match, ldconfig dies of SIGPIPE and pipefail
        # turns the match into a failure.
        if [ -z "$found" ] && ldconfig -p 2>/dev/null | grep -F "$lib" >/dev/null; then found="(ldconfig)"; fi
        echo "  $lib: ${found:-NOT FOUND}"
    done
}

run_bundle() {
    local here status=0 t
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    cd "$here"
    [ -d tests ] || die "no tests/ folder next to run.sh: build the bundle with scripts/gpu-check.sh --build"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    find_cuda_libs
    export REMAT_REQUIRE=cuda,nvrtc RUST_BACKTRACE=1
    # One deadline for everything (7 min, kills included, so the run stays under 8): each test
    # binary gets at most 150 s and leaves the benchmark at least 120 s; the benchmark gets
    # what is left, at most 240 s.
    local start=$SECONDS limit
    local deadline=$((start + 420))
    for t in tests/*; do
        limit=$((deadline - 120 - SECONDS))
        [ "$limit" -gt 150 ] && limit=150
        if [ "$limit" -lt 10 ]; then
            echo "!! $t SKIPPED: out of time"
            status=1
            continue
        fi
        echo "== $t (at most $limit s)"
        if ! timeout --kill-after=5 "$limit" "$t" --test-threads=1; then
            echo "!! $t FAILED (or timed out)"
            status=1
        fi
    done
    limit=$((deadline - SECONDS))
    [ "$limit" -gt 240 ] && limit=240
    echo "== gpu_bench (tests took $((SECONDS - start)) s; at most $limit s)"
    if [ "$limit" -lt 10 ] || ! timeout --kill-after=5 "$limit" ./gpu_bench; then
        echo "!! gpu_bench FAILED (or timed out)"
        status=1
    fi
    echo "== done in $((SECONDS - start)) s: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
    return $status
}

case "${1:-}" in
    --build) build ;;
    ""|--run) run_bundle ;;
    -h|--help) sed -n '2,14p' "$0" ;;
    *) die "unknown argument $1 (use --build, or no argument to run the bundle)" ;;
esac
