"""`make engine-diff`: part four's reference scheduler against vLLM's own `Scheduler`, step by step.

Two processes, one JSON file between them, so the kit's side never imports vLLM and vLLM's side
never imports the kit:

- `traces.py` (standard library only): seeded traces, their JSON form, the fake sampler both
  sides use.
- `kit_side.py` (the repository's venv): each trace through the chapter's reference code, taken
  from the source with `solution_namespace()`, exactly what the solutions notebook runs.
- `vllm_side.py` (a throwaway venv under build/engine-diff/ with vLLM pinned): the same traces
  through vLLM's v1 `Scheduler` and `KVCacheManager` on the CPU, with a fake model runner output.
- `compare.py`: the first step where two step logs differ, in words.
- `run.py`: the command line; `COMPARISONS` names what is compared (part four without
  preemption; a paged pool with preemption plugs in as a second entry).

docs/engine-diff.md records the last run.
"""
