"""Renders the real-model suite's figures (``REMAT_REAL_MODELS_TABLE=runs.jsonl`` on
``python/tests/test_real_models.py``) as the markdown table of docs/torch.md.

    REMAT_REAL_MODELS_TABLE=/tmp/runs.jsonl pytest python/tests/test_real_models.py
    python python/bench/real_models_table.py /tmp/runs.jsonl
"""

import json
import sys


def main(path: str) -> None:
    print("| model | checkpointing | compiler | remat keeps (B) | PyTorch keeps (B) | ratio | backward FLOPs remat / PyTorch"
          " | matches PyTorch | compile CPU s remat / PyTorch | step ms remat / PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for line in open(path):
        r = json.loads(line)
        ratio = r["remat_kept"] / r["torch_kept"] if r["torch_kept"] else float("nan")
        # The suite asserts bit for bit under aot_eager, 1e-3 relative under Inductor.
        matches = "bit for bit" if r["bitwise"] else ("within 1e-3" if r["compiler"] == "inductor" else "NO")
        flops = f"{r['remat_backward_flops'] / 1e6:.1f} M / {r['torch_backward_flops'] / 1e6:.1f} M"
        print(f"| {r['model']} | {r['checkpointing']} | {r['compiler']} | {r['remat_kept']} | {r['torch_kept']} | "
              f"{ratio:.2f} | {flops} | {matches} | "
              f"{r['remat_compile_cpu_s']:.1f} / {r['torch_compile_cpu_s']:.1f} | "
              f"{r['remat_step_ms']:.1f} / {r['torch_step_ms']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
