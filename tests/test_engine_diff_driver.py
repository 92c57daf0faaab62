"""`make engine-diff`'s driver (bench/engine_diff/) without vLLM: the kit's side runs seeded
traces to the end through the chapter's reference scheduler, and the comparator tells two
schedulers, or two traces, apart. vLLM's side is imported and run on one trace only where its
throwaway venv exists (build/engine-diff/venv, built by `make engine-diff`); skipped otherwise.
"""

import json
import subprocess
from dataclasses import replace

import pytest

from bench.engine_diff.compare import first_difference, summary
from bench.engine_diff.kit_side import part4_scheduler, run_part4, run_trace
from bench.engine_diff.run import COMPARISONS, REPO_ROOT, WORK
from bench.engine_diff.traces import from_json, random_trace, to_json
from grader.kit.authoring.nbsource import solution_namespace

SEEDS = range(12)


@pytest.fixture(scope="module")
def ns():
    return solution_namespace()


@pytest.fixture(scope="module")
def traces():
    return [random_trace(seed) for seed in SEEDS]


def test_a_seed_gives_the_same_trace_and_its_json_round_trips(traces):
    assert [random_trace(seed) for seed in SEEDS] == traces
    assert from_json(json.loads(json.dumps(to_json(traces)))) == traces
    assert len({t.max_num_batched_tokens for t in traces}) > 2, "the seeds vary the budget"


def test_the_kit_side_runs_every_request_to_its_last_token(ns, traces):
    for trace, log in zip(traces, run_part4(ns, traces), strict=True):
        total = {rid: 0 for _, rid, _, _ in trace.requests}
        hits = {}
        for step in log:
            assert sum(n for _, n in step["scheduled"]) <= trace.max_num_batched_tokens
            for rid, n in step["scheduled"]:
                total[rid] += n
            hits.update(step["new_hits"])
        for _, rid, prompt, max_tokens in trace.requests:
            # the uncached part of the prompt once, then one token a decode step
            assert total[rid] == len(prompt) - hits[rid] + max_tokens - 1, trace.describe()


def test_the_comparator_agrees_with_itself_and_finds_a_different_trace(ns, traces):
    logs = run_part4(ns, traces)
    assert summary(traces, logs, logs)["agree"] == len(traces)
    trace = next(t for t in traces if t.max_num_batched_tokens > 1 and len(t.requests) > 1)
    halved = replace(trace, max_num_batched_tokens=trace.max_num_batched_tokens // 2)
    other = run_trace(ns, part4_scheduler(ns, halved), halved)
    difference = first_difference(logs[traces.index(trace)], other)
    assert difference and difference.startswith("step "), difference


def test_the_comparator_names_the_step_where_a_scheduler_without_the_lone_request_rule_differs(ns):
    class CapsALoneRequest(ns["Scheduler"]):  # the rule before vLLM 0.33: always capped
        def schedule(self):
            budget = self._schedule_running(
                out := ns["SchedulerOutput"](), self.max_num_batched_tokens
            )
            self._schedule_waiting(out, budget)
            for request_id, n in out.num_scheduled_tokens.items():
                self.requests[request_id].num_computed_tokens += n
            return out

    trace = replace(random_trace(0), long_prefill_token_threshold=5, warm_prefixes=[])
    trace = replace(trace, requests=[(0, "alone", list(range(40)), 2)])
    reference = run_trace(ns, part4_scheduler(ns, trace), trace)
    capped = run_trace(ns, CapsALoneRequest(**trace.scheduler_settings()), trace)
    assert reference[0]["scheduled"] == [["alone", 40]]
    assert first_difference(reference, capped, names=("kit", "capped")) == (
        "step 0: scheduled (id, tokens) in order: kit [['alone', 40]], capped [['alone', 5]]"
    )


def test_every_comparison_makes_traces_and_runs_its_kit_side(ns):
    for name, comparison in COMPARISONS.items():
        traces = [comparison.make_trace(seed) for seed in range(3)]
        assert all(len(log) > 0 for log in comparison.run_kit(ns, traces)), name


VLLM_PYTHON = WORK / "venv" / "bin" / "python"


@pytest.mark.skipif(
    not VLLM_PYTHON.exists(),
    reason="vLLM's throwaway venv (build/engine-diff/venv) is not built: `make engine-diff` builds it",
)
def test_the_vllm_side_imports_and_agrees_on_one_trace_where_vllm_is_installed(ns, tmp_path):
    trace = random_trace(9)
    (tmp_path / "traces.json").write_text(json.dumps({"traces": to_json([trace])}))
    done = subprocess.run(
        [str(VLLM_PYTHON), "-m", "bench.engine_diff.vllm_side", "traces.json", "logs.json"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO_ROOT), "VLLM_TARGET_DEVICE": "cpu", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    vllm_log = json.loads((tmp_path / "logs.json").read_text())["logs"][0]
    assert first_difference(run_trace(ns, part4_scheduler(ns, trace), trace), vllm_log) is None
