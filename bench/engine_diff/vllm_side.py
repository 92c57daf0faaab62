"""vLLM's side of the engine diff: the same traces through vLLM's v1 `Scheduler` on the CPU.

Run with the throwaway venv's Python (vLLM pinned there), from the repository root:

    build/engine-diff/venv/bin/python -m bench.engine_diff.vllm_side TRACES.json LOGS.json

What is real: vLLM's `Scheduler`, `KVCacheManager`, `BlockPool` and block hashing, configured
as an engine would be (`VllmConfig` from a local config.json, no tokenizer). What is not: the
model. After each step a `ModelRunnerOutput` gives one sampled token to every request whose
`num_computed_tokens` reached `num_tokens` and none to a partial prefill, which is what the GPU
model runner hands back; the token is the fake sampler of `traces.py`. Hits are what
`KVCacheManager.get_computed_blocks` returned, recorded by a wrapper that calls it unchanged.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

from .traces import MAX_MODEL_LEN, SAMPLED_BASE, Trace, from_json, read, sampled_token, step_record

MAX_STEPS = 50_000
# A one-layer Llama shape: the scheduler reads the model's config, never its weights.
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 2 * SAMPLED_BASE,
    "max_position_embeddings": MAX_MODEL_LEN,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "float32",
}


def model_folder(root: str) -> str:
    """A folder with only a config.json: all `ModelConfig` needs with skip_tokenizer_init."""
    folder = os.path.join(root, "model")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(MODEL_CONFIG, f)
    return folder


class VllmDriver:
    """One vLLM `Scheduler` built for one trace, with the request hasher an engine would use."""

    def __init__(self, trace: Trace, model_dir: str):
        import torch
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.structured_output import StructuredOutputManager

        block = trace.block_size
        model = ModelConfig(
            model=model_dir, skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN, dtype="float32"
        )
        scheduler = SchedulerConfig(
            max_num_batched_tokens=trace.max_num_batched_tokens,
            max_num_seqs=trace.max_num_seqs,
            max_model_len=MAX_MODEL_LEN,
            enable_chunked_prefill=True,
            long_prefill_token_threshold=trace.long_prefill_token_threshold,
            is_encoder_decoder=False,
        )
        cache = CacheConfig(block_size=block, enable_prefix_caching=True)
        cache.num_gpu_blocks = trace.num_kv_blocks
        config = VllmConfig(model_config=model, scheduler_config=scheduler, cache_config=cache)
        spec = FullAttentionSpec(
            block_size=block, num_kv_heads=2, head_size=16, dtype=torch.float32
        )
        kv_config = KVCacheConfig(
            num_blocks=trace.num_kv_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
        )
        self.scheduler = Scheduler(config, kv_config, StructuredOutputManager(config), block)
        init_none_hash(sha256)
        self.hasher = get_request_block_hasher(block, sha256)
        self.lookups: dict[str, int] = {}
        manager = self.scheduler.kv_cache_manager
        lookup = manager.get_computed_blocks

        def recorded_lookup(request, *args, **kwargs):
            result = lookup(request, *args, **kwargs)
            self.lookups[request.request_id] = result[1]  # (blocks, num_computed_tokens, ...)
            return result

        manager.get_computed_blocks = recorded_lookup

    def add(self, request_id: str, prompt: list, max_tokens: int) -> None:
        from vllm import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        self.scheduler.add_request(
            Request(request_id, list(prompt), params, None, block_hasher=self.hasher)
        )

    def step(self, step: int) -> dict:
        """schedule(), then the fake runner's output to update_from_output; the step's record."""
        from vllm.v1.outputs import ModelRunnerOutput

        self.lookups.clear()
        out = self.scheduler.schedule()
        scheduled = list(out.num_scheduled_tokens.items())
        ids = [rid for rid, _ in scheduled]
        requests = self.scheduler.requests
        caught_up = {
            rid for rid in ids if requests[rid].num_computed_tokens >= requests[rid].num_tokens
        }
        sampled = [[sampled_token(step, rid)] if rid in caught_up else [] for rid in ids]
        hits = {rid: n for rid, n in self.lookups.items() if rid in out.num_scheduled_tokens}
        self._check_new_request_data(out, hits)
        preempted = list(out.preempted_req_ids or ())
        runner_output = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        self.scheduler.update_from_output(out, runner_output)
        finished = [rid for rid in ids if rid not in requests]
        return step_record(scheduled, hits, finished, preempted)

    @staticmethod
    def _check_new_request_data(out, hits: dict) -> None:
        """The hit the wrapper saw is the one vLLM sends the model runner for a new request."""
        for new in out.scheduled_new_reqs:
            if hits.get(new.req_id, 0) != new.num_computed_tokens:
                raise AssertionError(
                    f"{new.req_id}: get_computed_blocks gave {hits.get(new.req_id)}, "
                    f"NewRequestData says {new.num_computed_tokens}"
                )

    def warm(self, prefixes: list) -> None:
        """Each prefix as a request of one output token, run alone to the end: its full blocks
        stay in the pool's cache, free and evictable, as after real traffic."""
        for number, prefix in enumerate(prefixes):
            self.add(f"warm{number}", prefix, 1)
            for _ in range(MAX_STEPS):
                if not self.scheduler.has_unfinished_requests():
                    break
                self.step(-1)


def run_trace(trace: Trace, model_dir: str) -> list[dict]:
    """The trace through vLLM with the loop of the kit's side (`kit_side.run_trace`)."""
    driver = VllmDriver(trace, model_dir)
    driver.warm(trace.warm_prefixes)
    pending, log = list(trace.requests), []
    for step in range(MAX_STEPS):
        while pending and pending[0][0] <= step:
            _, rid, prompt, max_tokens = pending.pop(0)
            driver.add(rid, prompt, max_tokens)
        if not pending and not driver.scheduler.has_unfinished_requests():
            return log
        log.append(driver.step(step))
    raise RuntimeError(f"vLLM did not finish in {MAX_STEPS} steps: {trace.describe()}")


def main(argv: list[str]) -> int:
    import vllm

    traces_path, logs_path = argv
    payload = read(traces_path)
    with tempfile.TemporaryDirectory() as root:
        model_dir = model_folder(root)
        logs = [run_trace(trace, model_dir) for trace in from_json(payload["traces"])]
    with open(logs_path, "w", encoding="utf-8") as f:
        json.dump({"vllm_version": vllm.__version__, "logs": logs}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
