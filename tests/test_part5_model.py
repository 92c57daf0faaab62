"""Part five's model (part5_model.py): the kit's plain-torch Qwen2 equals transformers' Qwen2.

Runs the given cells of part5_model.py from the one source (not the learner-only cells that pick
and download a model). Every checkpoint is made here: random weights of a tiny Qwen2 config saved
with transformers' `save_pretrained` (safetensors) in a temporary folder; nothing is downloaded.
transformers is a test-only dependency (pinned in requirements.txt).

The chat template: the Jinja text of Qwen2.5-0.5B-Instruct's `tokenizer_config.json` is a local
fixture (tests/fixtures/qwen25/chat_template.jinja); transformers' `apply_chat_template` renders it
on a tokenizer this test builds from a word-level vocabulary (no download), and the kit's ChatML
formatter and its own jinja2 rendering must give the same text.
"""

import json
import sys
import types
from pathlib import Path

import pytest
import torch

from grader.kit.authoring.nbsource import nbgrader_meta, read_source

transformers = pytest.importorskip("transformers")

MODEL_CELLS = ("model_imports", "model_qwen2", "model_loader", "model_hub_tokenizer")
TEMPLATE = (Path(__file__).parent / "fixtures" / "qwen25" / "chat_template.jinja").read_text()
ATOL = 1e-4  # the bound for float32 logits


@pytest.fixture(scope="module")
def ns():
    """The given (locked, not learner-only) cells of part5_model.py, executed in one namespace."""
    namespace = {"__name__": "part5_model"}
    cells = {nbgrader_meta(c).get("grade_id"): c for c in read_source().cells if c.cell_type == "code"}
    for grade_id in MODEL_CELLS:
        exec(compile(cells[grade_id].source, grade_id, "exec"), namespace)
    return namespace


def hf_tiny_model(tie=True, seed=0, **overrides):
    """A transformers Qwen2ForCausalLM with random weights large enough to tell a wrong bias or norm apart."""
    values = dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, tie_word_embeddings=tie, rope_theta=10000.0, max_position_embeddings=512)
    values.update(overrides)
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**values)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.randn_like(param) * (0.1 if "norm" in name else 0.3) + (1.0 if "norm" in name else 0.0))
    return model


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.as_tensor(ids)[None]).logits[0].float()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model = hf_tiny_model()
    folder = tmp_path_factory.mktemp("qwen2-tied")
    model.save_pretrained(folder)
    return model, folder


PROMPT = [5, 17, 3, 99, 42, 42, 7, 150, 0, 64, 31, 8, 120, 77, 2, 19, 55]


def test_logits_equal_transformers_for_1d_and_batched_input(ns, checkpoint):
    hf, folder = checkpoint
    model = ns["load_model"](str(folder))
    expected = hf_logits(hf, PROMPT)
    flat = model(torch.tensor(PROMPT))
    batched = model(torch.tensor([PROMPT]))
    assert flat.shape == (len(PROMPT), 160) and batched.shape == (1, len(PROMPT), 160)
    assert (flat - expected).abs().max().item() < ATOL
    assert (batched[0] - expected).abs().max().item() < ATOL
    assert expected.std() > 1.0  # the logits are not near zero: a small error would show


def test_untied_lm_head_and_explicit_head_dim_load(ns, tmp_path):
    hf = hf_tiny_model(tie=False, head_dim=24, seed=1)
    hf.save_pretrained(tmp_path)
    assert "lm_head.weight" in json.dumps(ns["read_safetensors_header"](str(tmp_path / "model.safetensors"))[0])
    model = ns["load_model"](str(tmp_path))
    assert model.config.head_dim == 24 and not model.config.tie_word_embeddings
    assert (model(PROMPT) - hf_logits(hf, PROMPT)).abs().max().item() < ATOL


def test_sharded_checkpoint_loads_through_its_index(ns, tmp_path):
    hf = hf_tiny_model(seed=2)
    hf.save_pretrained(tmp_path, max_shard_size="30KB")
    shards = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert (tmp_path / "model.safetensors.index.json").exists() and len(shards) > 2
    model = ns["load_model"](str(tmp_path))
    assert (model(PROMPT) - hf_logits(hf, PROMPT)).abs().max().item() < ATOL


@pytest.mark.parametrize("file_dtype", [torch.bfloat16, torch.float16])
def test_16_bit_files_load_into_float32_exactly(ns, tmp_path, file_dtype):
    hf = hf_tiny_model(seed=3).to(file_dtype)
    hf.save_pretrained(tmp_path)
    header, _ = ns["read_safetensors_header"](str(tmp_path / "model.safetensors"))
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16" if file_dtype == torch.bfloat16 else "F16"}
    model = ns["load_model"](str(tmp_path))  # dtype=None on the CPU: float32
    assert next(model.parameters()).dtype == torch.float32
    reference = transformers.Qwen2ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    for name, param in reference.named_parameters():  # the 16-bit values, upcast: bit for bit
        assert torch.equal(dict(model.named_parameters())[name], param), name
    assert (model(PROMPT) - hf_logits(reference, PROMPT)).abs().max().item() < ATOL
    kept = ns["load_model"](str(tmp_path), dtype=file_dtype)
    assert next(kept.parameters()).dtype == file_dtype


def test_attention_hook_with_positions_equals_one_pass(ns, checkpoint):
    """Prefill in three pieces through a dense KV cache (the engine's path) gives the one-pass logits."""
    model = ns["load_model"](str(checkpoint[1]))
    full = model(PROMPT)
    cache = ns["DenseKVCache"](model.config.num_hidden_layers)
    pieces, start = [], 0
    for end in (5, 6, len(PROMPT)):
        pieces.append(model(PROMPT[start:end], positions=torch.arange(start, end), attention=cache))
        start = end
    assert (torch.cat(pieces) - full).abs().max().item() < ATOL
    last = model(PROMPT, logits_indices=torch.tensor([len(PROMPT) - 1, 0]))
    assert torch.allclose(last, full[[len(PROMPT) - 1, 0]], atol=1e-6)


def test_greedy_generation_equals_transformers_generate(ns, checkpoint):
    hf, folder = checkpoint
    model = ns["load_model"](str(folder))
    ours = ns["generate_greedy"](model, PROMPT, max_tokens=12)
    with torch.no_grad():
        prompt = torch.tensor([PROMPT])  # the mask given: PROMPT holds token 0, which generate would take for padding
        theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert ours == theirs[0, len(PROMPT):].tolist()
    assert len(set(ours)) > 3  # varied tokens, so the comparison means something


def test_explicit_attention_fallback_equals_sdpa(ns, monkeypatch):
    """torch < 2.0 has no scaled_dot_product_attention: the explicit path must give the same result."""
    torch.manual_seed(0)
    q, k, v = torch.randn(5, 4, 8), torch.randn(9, 2, 8), torch.randn(9, 2, 8)
    with_sdpa = [ns["causal_attention"](q[:t], k[: 4 + t], v[: 4 + t]) for t in (1, 5)] + [ns["causal_attention"](q, k[:5], v[:5])]
    monkeypatch.setitem(ns, "_SDPA", None)
    explicit = [ns["causal_attention"](q[:t], k[: 4 + t], v[: 4 + t]) for t in (1, 5)] + [ns["causal_attention"](q, k[:5], v[:5])]
    for a, b in zip(with_sdpa, explicit):
        assert a.shape == b.shape and (a - b).abs().max().item() < 1e-5


def test_random_model_saved_by_the_kit_loads_in_transformers(ns, tmp_path):
    """save_model writes what transformers reads: the kit's writer against the reference reader."""
    model = ns["random_model"](ns["tiny_qwen2_config"](vocab_size=300, num_hidden_layers=2), seed=4)
    ns["save_model"](model, str(tmp_path))
    reference = transformers.Qwen2ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids = [i * 7 % 300 for i in range(20)]
    assert (model(ids) - hf_logits(reference, ids)).abs().max().item() < ATOL
    assert torch.equal(ns["load_model"](str(tmp_path))(ids), model(ids))


def test_real_qwen25_config_gives_its_shape(ns):
    released = {  # Qwen/Qwen2.5-0.5B-Instruct's config.json (the fields that matter)
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
        "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-06, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_sliding_window": False,
        "sliding_window": 32768, "max_window_layers": 21, "vocab_size": 151936, "max_position_embeddings": 32768,
        "bos_token_id": 151643, "eos_token_id": 151645, "rope_scaling": None,
    }
    config = ns["Qwen2Config"].from_json(released)
    assert config == ns["Qwen2Config"](eos_token_ids=[151645])  # the defaults are this model
    assert (config.head_dim, config.rope_theta) == (64, 1e6)
    with torch.device("meta"):
        params = ns["count_parameters"](ns["Qwen2ForCausalLM"](config))
    assert params == 494_032_768  # the model card's 0.49B


@pytest.mark.parametrize(
    "change, words",
    [({"model_type": "qwen3"}, "model_type"), ({"use_sliding_window": True}, "use_sliding_window"),
     ({"rope_scaling": {"type": "yarn", "factor": 4.0}}, "yarn"), ({"num_key_value_heads": 3}, "整数倍")],
)
def test_unsupported_config_is_a_clear_error(ns, change, words):
    data = dict(ns["Qwen2Config"]().to_json(), **change)
    with pytest.raises(ValueError, match=words):
        ns["Qwen2Config"].from_json(data)


def test_broken_checkpoints_are_clear_errors(ns, checkpoint, tmp_path):
    _, folder = checkpoint
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="safetensors"):
        ns["load_model"](str(tmp_path))
    data = (folder / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])  # a download cut in half
    with pytest.raises(ValueError, match="偏移|下载不完整"):
        ns["load_model"](str(tmp_path))
    tensors = dict(ns["iter_safetensors"](str(folder / "model.safetensors")))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    ns["write_safetensors"](tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="model.layers.1.mlp.up_proj.weight"):
        ns["load_model"](str(tmp_path))
    with pytest.raises(FileNotFoundError, match="config.json"):
        ns["load_model"](str(tmp_path / "nowhere"))


CONVERSATIONS = [
    [{"role": "user", "content": "你好"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is a KV cache?"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "a\nb"}, {"role": "assistant", "content": "c"},
     {"role": "user", "content": "d"}],
]


def local_tokenizer_folder(folder):
    """A word-level tokenizer.json with Qwen's special tokens and the fixture template: made here, nothing downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "system", "user", "assistant", "\n", "[UNK]", "hello", "world"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(words[:3])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"chat_template": TEMPLATE, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_chat_template_equals_transformers_apply_chat_template(ns, tmp_path, generation_prompt):
    folder = local_tokenizer_folder(tmp_path)
    reference = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), chat_template=TEMPLATE,
                                                     eos_token="<|im_end|>")
    ours = ns["ChatTokenizer"](str(folder))
    for messages in CONVERSATIONS:
        expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
        assert ours.apply_chat_template(messages, add_generation_prompt=generation_prompt) == expected
        assert ns["chatml_prompt"](messages, add_generation_prompt=generation_prompt) == expected
    assert ours.encode("<|im_start|>user hello<|im_end|>") == [1, 4, 8, 2]
    assert ours.decode([1, 4, 8, 2]) == "user hello"


def test_chat_template_without_jinja2_falls_back_to_chatml(ns, tmp_path, monkeypatch):
    folder = local_tokenizer_folder(tmp_path)
    monkeypatch.setitem(sys.modules, "jinja2.sandbox", None)  # import jinja2.sandbox now raises ImportError
    assert ns["render_chat_template"](TEMPLATE, CONVERSATIONS[1]) is None
    assert ns["ChatTokenizer"](str(folder)).apply_chat_template(CONVERSATIONS[1]) == ns["chatml_prompt"](CONVERSATIONS[1])


def test_tokenizer_missing_is_one_line_and_none(ns, tmp_path, monkeypatch, capsys):
    assert ns["load_tokenizer"](str(tmp_path)) is None
    folder = local_tokenizer_folder(tmp_path)
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    assert ns["load_tokenizer"](str(folder)) is None
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and "tokenizer.json" in lines[0] and "tokenizers" in lines[1]


def fake_hub(name, snapshot_download):
    module = types.ModuleType(name)
    module.snapshot_download = snapshot_download
    return module


def test_download_tries_modelscope_then_huggingface(ns, checkpoint, monkeypatch):
    """The hub clients are stand-ins (no network in tests); what is tested is download_model's choice."""
    calls = []

    def modelscope_old(model_id, allow_file_pattern=None):  # an old modelscope: allow_file_pattern, offline
        calls.append(("modelscope", allow_file_pattern))
        raise ConnectionError("Max retries exceeded\nsecond line")

    def huggingface(repo_id, allow_patterns=None):
        calls.append(("huggingface_hub", allow_patterns))
        return str(checkpoint[1])

    monkeypatch.setitem(sys.modules, "modelscope", fake_hub("modelscope", modelscope_old))
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake_hub("huggingface_hub", huggingface))
    assert ns["download_model"]("Qwen/Qwen2.5-0.5B-Instruct") == str(checkpoint[1])
    assert [hub for hub, _ in calls] == ["modelscope", "huggingface_hub"]
    assert all("*.safetensors" in patterns and "tokenizer.json" in patterns for _, patterns in calls)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(RuntimeError) as error:
        ns["download_model"]("Qwen/Qwen2.5-0.5B-Instruct")
    message = str(error.value)
    assert "\n" not in message and "ConnectionError: Max retries exceeded" in message and "huggingface_hub 没有安装" in message


@pytest.mark.parametrize(
    "device, capability, expected",
    [("cuda", (7, 5), torch.float16), ("cuda", (8, 0), torch.bfloat16), ("cuda", (9, 0), torch.bfloat16), ("cpu", None, torch.float32)],
    ids=["t4-has-no-native-bf16", "a100-keeps-bf16", "h100-keeps-bf16", "cpu-computes-in-float32"],
)
def test_default_dtype_gives_bf16_only_to_gpus_with_native_bf16(ns, device, capability, expected):
    """Decided from the compute capability: torch.cuda.is_bf16_supported() answers True on a T4 (emulation)."""
    assert ns["default_dtype"](device, torch.bfloat16, capability=capability) == expected


def test_default_dtype_keeps_16_and_32_bit_checkpoints_on_any_gpu(ns):
    assert ns["default_dtype"]("cuda", torch.float16, capability=(7, 5)) == torch.float16
    assert ns["default_dtype"]("cuda", torch.float32, capability=(7, 5)) == torch.float32
    assert ns["default_dtype"]("cuda:0", torch.float64, capability=(8, 0)) == torch.float16
