"""`peak=` from Python: remat's own pipeline plans the document and bounds the plan's predicted
peak, as `remat partition` does — the same report, byte for byte, for the same document."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remat_torch import _remat

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "examples" / "small.joint.json", ROOT / "docs" / "examples" / "two_regions.graph.json"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_peak_plans_within_the_limit_or_says_it_cannot_be_met(path):
    doc = path.read_text()
    # Any limit every plan meets: the least recompute of all, with its plan's peak.
    loose = json.loads(_remat.partition(doc, "peak=1TiB"))
    assert loose["strategy"] == "peak=1099511627776"
    limit = loose["planned_peak"]
    # That plan's own peak as the limit: met, with no more recompute.
    tight = json.loads(_remat.partition(doc, f"peak={limit}"))
    assert tight["planned_peak"] <= limit
    assert tight["recompute_flops"] == loose["recompute_flops"]
    with pytest.raises(ValueError, match="cannot be met"):
        _remat.partition(doc, "peak=1")


def test_a_joint_document_with_its_forward_nodes_interleaved_is_planned_forward_first():
    doc = (ROOT / "tests" / "fixtures" / "torch" / "chain-inductor__full.json").read_text()
    free = json.loads(_remat.partition(doc, "budget=1.0"))
    limit = free["planned_peak"]
    assert json.loads(_remat.partition(doc, f"peak={limit}"))["planned_peak"] <= limit
    with pytest.raises(ValueError, match="cannot be met"):
        _remat.partition(doc, "peak=1KiB")
    # The public entry takes the document as PyTorch users hold it, a dict.
    from remat_torch import partition_joint

    report = partition_joint(json.loads(doc), f"peak={limit}")
    assert report["planned_peak"] <= limit
    assert report["strategy"] == f"peak={limit}"


@pytest.mark.parametrize("strategy", ["respect", "mincut", "budget=0.5", "budget=256", "budget+offload=0.5", "peak=64KiB", "peak+offload=64KiB"])
@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_python_reports_what_the_command_prints(path, strategy):
    cli = os.environ.get("REMAT_CLI")
    if not cli:
        pytest.skip("REMAT_CLI (the `remat` command built beside the extension) is not set")
    for text, flag in [(False, ["--json"]), (True, [])]:
        printed = subprocess.run(
            [cli, "partition", str(path), "--strategy", strategy, *flag], capture_output=True, text=True, check=True
        ).stdout
        assert _remat.partition(path.read_text(), strategy, text) == printed, (strategy, text)


def test_the_limits_bench_gives_each_answer_or_its_refusal(tmp_path):
    """`python/bench/peak_sweep.py --limits`, which measures docs/performance.md's tables: each
    limit's answer within it, and a limit below every plan's peak refused in its row."""
    cli = os.environ.get("REMAT_CLI")
    if not cli:
        pytest.skip("REMAT_CLI (the `remat` command built beside the extension) is not set")
    out, doc = tmp_path / "l1.limits.json", tmp_path / "l1.joint.json"
    bench = ROOT / "python" / "bench" / "peak_sweep.py"
    args = ["--remat", cli, "--layers", "1", "--limits", "1000000000000,1", "--out", str(out), "--doc", str(doc)]
    table = subprocess.run([sys.executable, str(bench), *args], capture_output=True, text=True, check=True).stdout
    limits = json.loads(out.read_text())
    assert limits["format"] == "remat.limits"
    assert limits["nodes"] == len(json.loads(doc.read_text())["nodes"])
    loose, refused = (row["answer"] for row in limits["limits"])
    assert loose["planned_peak"] <= 10**12 and loose["recompute_flops"] == 0
    assert "cannot be met" in refused["error"]
    rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 2 and rows[0].startswith("| 1 000 000 000 000 | 0 |") and "cannot be met" in rows[1], table


@pytest.mark.parametrize("strategy", ["peak=64KiB", "peak+offload=64KiB"])
@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_a_search_time_reaches_the_search_as_the_commands_flag_does(path, strategy):
    cli = os.environ.get("REMAT_CLI")
    if not cli:
        pytest.skip("REMAT_CLI (the `remat` command built beside the extension) is not set")
    printed = subprocess.run(
        [cli, "partition", str(path), "--strategy", strategy, "--search-seconds", "3", "--json"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert _remat.partition(path.read_text(), strategy, False, 3.0) == printed
    from remat_torch import partition_joint, plan_joint

    doc = json.loads(path.read_text())
    assert partition_joint(doc, strategy, search_seconds=3) == json.loads(printed)
    assert plan_joint(doc, strategy, search_seconds=3)["report"] == json.loads(printed)
