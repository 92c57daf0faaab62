"""Part one's helpers (TODO 1-8, `PrefixCacheManager`): the oracle and the probe, written once.

The build runs `_common.py`, this file and one `todo<N>.py` as one code string in a scope of its
own; `_probe` reads that file's `UNDER_TEST` and `TODO`.
"""


def _chunks(tokens, size):
    tokens = list(tokens)
    return [tuple(tokens[i : i + size]) for i in range(0, len(tokens), size)]


def _match(prefixes, prompt):
    prompt = list(prompt)
    hits = [len(p) for p in prefixes if len(p) <= len(prompt) and list(p) == prompt[: len(p)]]
    return max(hits, default=0)


def _oracle_methods():
    """The reference of every TODO method; each works from the cache alone, never via self."""

    def _normalize(self, tokens):
        return list(tokens)

    def _chunk_tokens(self, tokens):
        return _chunks(tokens, self.block_size)

    def add_prefix(self, prefix_tokens):
        prefix = tuple(prefix_tokens)
        if prefix not in self.cached_prefixes:
            self.cached_prefixes.append(prefix)
            self.chunked_prefixes.append(_chunks(prefix, self.block_size))

    def match_prefix(self, prompt_tokens):
        return _match(self.cached_prefixes, prompt_tokens)

    def split_prompt(self, prompt_tokens):
        prompt = list(prompt_tokens)
        hit = _match(self.cached_prefixes, prompt)
        return prompt[:hit], prompt[hit:], hit

    def chunked_prefill_plan(self, prompt_tokens):
        return _chunks(prompt_tokens, self.block_size)

    def cache_stats(self, prompt_tokens):
        prompt = list(prompt_tokens)
        hit = _match(self.cached_prefixes, prompt)
        ratio = round(hit / len(prompt), 4) if prompt else 0.0
        return {"hit_tokens": hit, "uncached_tokens": len(prompt) - hit, "reuse_ratio": ratio}

    def chunked_suffix_prefill_plan(self, prompt_tokens):
        prompt = list(prompt_tokens)
        return _chunks(prompt[_match(self.cached_prefixes, prompt) :], self.block_size)

    return dict(locals())


def _probe(ns, block_size=4, cached=()):
    """The learner's class, every other TODO's method replaced by the oracle, cache filled."""
    cls = ns.get("PrefixCacheManager")
    assert isinstance(cls, type), f"{TODO}：找不到 PrefixCacheManager 类，请先运行定义它的单元格"
    methods = {name: f for name, f in _oracle_methods().items() if name != UNDER_TEST}
    manager = type("Probe", (cls,), methods)(block_size=block_size)
    manager.cached_prefixes = [tuple(p) for p in cached]
    manager.chunked_prefixes = [_chunks(p, block_size) for p in cached]
    return manager


def _snapshot(manager):
    """A copy of the cache to compare before and after a call (whatever the learner stored)."""

    def frozen(value):
        try:
            return (
                tuple(frozen(item) for item in value)
                if not isinstance(value, (int, str, bytes))
                else value
            )
        except TypeError:
            return value

    return frozen(manager.cached_prefixes), frozen(manager.chunked_prefixes)


def _as_chunks(got):
    """The contents of a list of chunks as tuples, or None when it is not one."""
    if type(got) not in (list, tuple):
        return None
    try:
        return [tuple(chunk) for chunk in got]
    except TypeError:
        return None


def _assert_plan_types(where, got, prompt, as_list):
    """A chunk plan (TODO 6, 8) is a plain list of plain tuples, and a tuple or range prompt gets
    the plan its list gets (`as_list`)."""
    kinds = [type(chunk).__name__ for chunk in got]
    assert type(got) is list and all(kind == "tuple" for kind in kinds), (
        f"{where} 应返回由 tuple 组成的 list，得到 {type(got).__name__} {got!r}"
    )
    assert got == as_list, f"{where} 应与 list 输入 {prompt!r} 的结果 {as_list!r} 相同，得到 {got!r}"
