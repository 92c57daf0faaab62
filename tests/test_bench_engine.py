"""bench/bench_engine.py's GPU path, proven end to end on the CPU: a tiny random checkpoint it makes
itself (no download), the solutions notebook's part five on it, then the benchmark on it.

What is asserted is that every stage ran and reported its figures with their spread, never how
fast anything was: no assertion reads a clock.
"""

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "bench"))


def test_part_five_cells_are_part_five_and_what_it_builds_on_without_earlier_measurements():
    import bench_engine

    cells = bench_engine.part_five_cells(None)
    titles = [title for title, _ in cells]
    part_five = [t for t in titles if t.startswith("5: ")]
    assert titles[-len(part_five):] == part_five  # part five comes last, nothing after it (not the GPU probe)
    assert any(t.startswith("5: MODEL_SOURCE = ") for t in part_five)
    assert any("实测" in t for t in part_five)  # part five's own measurements run
    sources = [source for _, source in cells]
    assert not any("RUN_MODE" in source for source in sources)


def test_tiny_and_checkpoint_are_exclusive_and_notebook_needs_weights(tmp_path):
    import bench_engine

    with pytest.raises(SystemExit):
        bench_engine.parse_args(["--tiny", "--checkpoint", str(tmp_path)])
    with pytest.raises(SystemExit):
        bench_engine.parse_args(["--notebook"])
    with pytest.raises(SystemExit):
        bench_engine.parse_args(["--checkpoint", str(tmp_path)])  # no config.json there


@pytest.mark.slow  # the notebook's part five and the benchmark on the CPU: a few minutes on 2 busy cores
@pytest.mark.heavy  # about 50 s of both cores; run before a GPU session (make test-heavy)
def test_gpu_command_runs_end_to_end_on_cpu_with_a_tiny_checkpoint(tmp_path):
    out = tmp_path / "part5-cpu.md"
    command = [sys.executable, str(REPO_ROOT / "bench" / "bench_engine.py"), "--device", "cpu", "--tiny", "--notebook",
               "--repeats", "1", "--out", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = out.read_text(encoding="utf-8")
    assert "## The solutions notebook's part five" in report and "0 cell(s) raised or wrote to stderr" in report
    assert "tiny-qwen2" in report  # the model cell loaded the checkpoint made for the run
    assert "✅ TODO 24 的可见检查通过" in report
    assert "TTFT p50：「缓存开」" in report and "TBT p99：「缓存开」" in report  # the verdicts, with their spreads
    for section in ("### Output throughput, engine vs one request at a time", "### TTFT p50 with prefix caching vs without",
                    "### Decode step against its floors", "### KV pool memory against its analytic size"):
        assert section in report
    assert "## cpu: checkpoint " in report
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert sorted(p.name for p in tmp_path.glob("part5-figure-*.png"))[:1] == ["part5-figure-1.png"]
