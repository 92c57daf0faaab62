"""Hidden checks of part four (TODO 15-19, the scheduler): one function per grade cell.

Every check drives the learner's code through the public API only (`Request`, `Scheduler`,
`add_request`, `schedule`, `update_from_output`, `num_cached_tokens`) and compares it with an
oracle written here, step by step on seeded random traces, plus fixed vectors and invariants.
Isolation: the TODO under test runs as the learner wrote it; the scheduler's other TODO methods
are replaced by the oracle's on a subclass, and `num_cached_tokens` (TODO 15) by the oracle's
for the duration of the check, so one mistake costs one TODO.
"""

import random
from collections import deque

# What the learner writes for each TODO; the other TODOs' methods are the oracle's.
UNDER_TEST = {15: "num_cached_tokens", 16: "_num_new_tokens", 17: "_schedule_running"}
UNDER_TEST.update({18: "_schedule_waiting", 19: "update_from_output"})
TOTAL_POINTS = {15: 8, 16: 6, 17: 11, 18: 15, 19: 10}  # each TODO's points, shared by its checks


# ---- the oracle: vLLM v1's step, as part four states it ----


def _o_cached(prefix_cache, token_ids, block_size):
    if prefix_cache is None:
        return 0
    return min(prefix_cache.match_prefix(token_ids), len(token_ids) - 1) // block_size * block_size


def _o_new(self, request, num_computed_tokens, token_budget):
    owed = request.num_tokens - num_computed_tokens
    if 0 < self.long_prefill_token_threshold < owed:
        owed = self.long_prefill_token_threshold
    return min(owed, token_budget)


def _o_running(self, out, token_budget):
    for request in self.running:
        if token_budget == 0:
            break
        n = _o_new(self, request, request.num_computed_tokens, token_budget)
        if n:
            out.num_scheduled_tokens[request.request_id] = n
            token_budget -= n
    return token_budget


def _o_waiting(self, out, token_budget):
    while self.waiting and token_budget > 0 and len(self.running) < self.max_num_seqs:
        request = self.waiting.popleft()
        request.num_computed_tokens = _o_cached(
            self.prefix_cache, request.prompt_token_ids, self.block_size
        )
        n = _o_new(self, request, request.num_computed_tokens, token_budget)
        self.running.append(request)
        out.num_scheduled_tokens[request.request_id] = n
        token_budget -= n


def _o_update(self, out, sampled_token_ids):
    for request_id in out.num_scheduled_tokens:
        request = self.requests[request_id]
        if request.num_computed_tokens < request.num_tokens:
            continue
        request.output_token_ids.append(sampled_token_ids[request_id])
        if len(request.output_token_ids) >= request.max_tokens:
            self.running.remove(request)
            del self.requests[request_id]


_ORACLE = {16: _o_new, 17: _o_running, 18: _o_waiting, 19: _o_update}


class _Isolated:
    """`with _Isolated(ns, todo) as cls:` a Scheduler whose TODOs other than `todo` are the oracle's."""

    def __init__(self, ns, todo):
        self.ns, self.todo = ns, todo

    def __enter__(self):
        methods = {UNDER_TEST[t]: f for t, f in _ORACLE.items() if t != self.todo}
        self.saved = self.ns.get("num_cached_tokens", _ABSENT)
        if self.todo != 15:
            self.ns["num_cached_tokens"] = _o_cached
        return type("CheckedScheduler", (self.ns["Scheduler"],), methods)

    def __exit__(self, *exc_info):
        if self.saved is _ABSENT:
            self.ns.pop("num_cached_tokens", None)
        else:
            self.ns["num_cached_tokens"] = self.saved
        return False


_ABSENT = object()


class _OracleScheduler:
    """The whole step, independent of the learner's class: what every trace is compared with."""

    def __init__(self, max_num_batched_tokens, max_num_seqs, block_size=16,
                 long_prefill_token_threshold=0, prefix_cache=None):
        self.max_num_batched_tokens, self.max_num_seqs = max_num_batched_tokens, max_num_seqs
        self.block_size, self.prefix_cache = block_size, prefix_cache
        self.configured_long_prefill_token_threshold = long_prefill_token_threshold
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.waiting, self.running, self.requests = deque(), [], {}

    def add_request(self, request):
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def schedule(self):
        out = _Output()
        # vLLM 0.33: the threshold is not applied when only one request (running + waiting) is eligible
        lone = len(self.running) + len(self.waiting) <= 1
        self.long_prefill_token_threshold = 0 if lone else self.configured_long_prefill_token_threshold
        budget = _o_running(self, out, self.max_num_batched_tokens)
        _o_waiting(self, out, budget)
        for request_id, n in out.num_scheduled_tokens.items():
            self.requests[request_id].num_computed_tokens += n
        return out

    update_from_output = _o_update


class _Output:
    def __init__(self):
        self.num_scheduled_tokens = {}


class _PrefixCache:
    """A prefix cache: match_prefix gives the longest registered prefix of the prompt."""

    def __init__(self, prefixes=()):
        self.prefixes = [list(p) for p in prefixes]

    def match_prefix(self, token_ids):
        tokens = list(token_ids)
        return max((len(p) for p in self.prefixes if tokens[: len(p)] == p), default=0)


# ---- traces: requests arriving at steps, run through the public API ----


def _random_trace(rng):
    """(scheduler settings, prefixes, [(arrival step, id, prompt, max_tokens)]) for one seeded trace."""
    block = rng.choice([1, 2, 4, 8, 16])
    settings = {
        "max_num_batched_tokens": rng.choice([1, 2, 3, 7, 16, 33, 64, 100]),
        "max_num_seqs": rng.randint(1, 5),
        "block_size": block,
        "long_prefill_token_threshold": rng.choice([0, 0, 1, 5, 24]),
    }
    systems = [[rng.randrange(50) for _ in range(rng.randint(1, 60))] for _ in range(3)]
    prefixes = [s for s in systems if rng.random() < 0.8]
    requests, step = [], 0
    for number in range(rng.randint(1, 9)):
        step += rng.choice([0, 0, 1, 2, 5])
        head = rng.choice(systems) if rng.random() < 0.6 else []
        prompt = head + [rng.randrange(50) for _ in range(rng.randint(0 if head else 1, 40))]
        requests.append((step, f"r{number}", prompt, rng.randint(1, 6)))
    return settings, prefixes, requests


def _drive(ns, cls, settings, prefixes, requests, cache=True, max_steps=400):
    """Run a trace; return (steps, requests by id, scheduler): each step is (scheduled dict,
    [(id, num_computed_tokens, outputs)] of every request added so far), after its update."""
    sched = cls(**settings, prefix_cache=_PrefixCache(prefixes) if cache else None)
    made, steps, pending = {}, [], list(requests)
    for step in range(max_steps):
        while pending and pending[0][0] <= step:
            _, rid, prompt, max_tokens = pending.pop(0)
            made[rid] = ns["Request"](rid, list(prompt), max_tokens)
            sched.add_request(made[rid])
        if not pending and all(len(r.output_token_ids) >= r.max_tokens for r in made.values()):
            break
        out = sched.schedule()
        scheduled = dict(out.num_scheduled_tokens)
        sampled = {rid: (step * 7 + len(rid) * 3 + int(rid[1:])) % 50 for rid in scheduled}
        sched.update_from_output(out, sampled)
        state = [(rid, r.num_computed_tokens, list(r.output_token_ids)) for rid, r in made.items()]
        steps.append((scheduled, state))
    return steps, made, sched


def _describe(settings, prefixes, requests):
    shown = [(step, rid, len(prompt), max_tokens) for step, rid, prompt, max_tokens in requests]
    return (
        f"设置 {settings}，缓存的前缀长度 {[len(p) for p in prefixes]}，"
        f"请求 (到达的步, id, prompt 长度, max_tokens) = {shown}"
    )


def _compare_with_oracle(ns, todo, seed, traces=40, what="调度"):
    """The learner's TODO (others: oracle) against the oracle, step by step, on seeded traces."""
    rng = random.Random(seed)
    for _ in range(traces):
        trace = _random_trace(rng)
        expected, _, _ = _drive(ns, _OracleScheduler, *trace)
        with _Isolated(ns, todo) as cls:
            got, _, _ = _drive(ns, cls, *trace)
        for index, (want, have) in enumerate(zip(expected, got)):
            if want != have:
                raise AssertionError(
                    f"TODO {todo}: {_describe(*trace)}\n第 {index} 步之后{what}不对："
                    f"应调度 {want[0]}，得到 {have[0]}；请求状态 (id, num_computed_tokens, 输出) "
                    f"应为 {want[1]}，得到 {have[1]}"
                )
        assert len(got) == len(expected), (
            f"TODO {todo}: {_describe(*trace)}\n参考实现 {len(expected)} 步跑完全部请求，"
            f"你的实现跑了 {len(got)} 步还没有结束"
        )


def _fresh(cls, ns, settings, prompts, cache=None, max_tokens=3):
    """A scheduler of `cls` with requests `prompts` ({id: prompt}) added in order."""
    sched = cls(**settings, prefix_cache=cache)
    made = {rid: ns["Request"](rid, list(p), max_tokens) for rid, p in prompts.items()}
    for request in made.values():
        sched.add_request(request)
    return sched, made


def _step(sched):
    out = sched.schedule()
    scheduled = dict(out.num_scheduled_tokens)
    sched.update_from_output(out, {rid: 1 for rid in scheduled})
    return scheduled


def _types_ok(scheduled):
    return all(type(k) is str and type(v) is int and v > 0 for k, v in scheduled.items())


def _in_state(ns, request_id, prompt, num_computed_tokens, outputs=(), max_tokens=5):
    """A Request as a step leaves it: `num_computed_tokens` computed, `outputs` generated."""
    request = ns["Request"](request_id, list(prompt), max_tokens)
    request.num_computed_tokens = num_computed_tokens
    request.output_token_ids = list(outputs)
    return request


def _placed(cls, settings, running=(), waiting=()):
    """A scheduler of `cls` whose running, waiting and requests are set directly (no schedule())."""
    sched = cls(**settings)
    sched.running, sched.waiting = list(running), deque(waiting)
    sched.requests = {r.request_id: r for r in [*running, *waiting]}
    return sched


def _snapshot(sched):
    """What a TODO method may not change behind schedule()'s back: (running ids, waiting ids,
    requests ids, [(id, num_computed_tokens, outputs)] of every request)."""
    everyone = {id(r): r for r in [*sched.running, *sched.waiting, *sched.requests.values()]}
    return (
        [r.request_id for r in sched.running],
        [r.request_id for r in sched.waiting],
        list(sched.requests),
        sorted((r.request_id, r.num_computed_tokens, list(r.output_token_ids)) for r in everyone.values()),
    )


# ---- TODO 15: the hit rule ----


@check(points=4, title="按整块命中", says="命中长度向下取整到 block_size 的倍数，短于一块的前缀不命中")
def check_todo15_blocks(ns):
    """Hits round down to whole blocks, a prefix shorter than one block never hits, hits span blocks."""
    f = ns["num_cached_tokens"]
    cases = [(37, 60, 16), (10, 60, 16), (16, 60, 16), (31, 32, 8), (200, 220, 16), (5, 9, 1)]
    rng = random.Random(3415)
    cases += [(rng.randint(0, 90), 100, rng.choice([1, 2, 3, 4, 16, 32])) for _ in range(30)]
    for matched, length, block in cases:
        tokens = list(range(length))
        cache = _PrefixCache([tokens[:matched]] if matched else [])
        got = f(cache, tokens, block)
        want = _o_cached(cache, tokens, block)
        assert type(got) is int and got == want, (
            f"TODO 15: num_cached_tokens(缓存命中 {matched} 个 token, {length} 个 token 的 prompt, "
            f"block_size={block}) 应为 {want}（命中长度向下取整到 block_size 的倍数），得到 {got!r}"
        )


@check(points=3, title="完整命中", says="最多到 num_tokens - 1，再按块取整")
def check_todo15_full_hit(ns):
    """A fully cached prompt is capped at num_tokens - 1, then rounded to blocks."""
    f = ns["num_cached_tokens"]
    for length, block in [(48, 16), (49, 16), (17, 16), (1, 4), (2, 1), (64, 64), (30, 4)]:
        tokens = [(7 * i) % 50 for i in range(length)]
        got = f(_PrefixCache([tokens]), tokens, block)
        want = (length - 1) // block * block
        assert type(got) is int and got == want, (
            f"TODO 15: 整个 {length} 个 token 的 prompt 都已缓存、block_size={block} 时，"
            f"num_cached_tokens 应为 min({length}, {length} - 1) 向下取整到块 = {want}"
            f"（最后一个 token 要算 logits，命中只算整块），得到 {got!r}"
        )


@check(points=1, title="没有缓存", says="没有缓存（None）或没有命中时为 0，只读缓存")
def check_todo15_no_cache(ns):
    """prefix_cache=None means no hit; a cache that matches nothing gives 0; the cache is only read."""
    f = ns["num_cached_tokens"]
    for tokens in ([1, 2, 3], list(range(40))):
        got = f(None, tokens, 4)
        assert type(got) is int and got == 0, (
            f"TODO 15: num_cached_tokens(None, {len(tokens)} 个 token, 4) 应为 0（没有前缀缓存），得到 {got!r}"
        )
    cache = _PrefixCache([[9, 9, 9, 9, 9]])
    got = f(cache, list(range(40)), 4)
    assert type(got) is int and got == 0, (
        f"TODO 15: 缓存里只有 [9, 9, 9, 9, 9]，prompt 是 0..39，num_cached_tokens 应为 0，得到 {got!r}"
    )
    assert cache.prefixes == [[9, 9, 9, 9, 9]], "TODO 15: num_cached_tokens 不应修改前缀缓存"
    hit = f(_PrefixCache([list(range(20))]), list(range(40)), 4)
    assert hit == 20, (
        f"TODO 15: 缓存了 0..19、prompt 是 0..39、block_size=4 时 num_cached_tokens 应为 20，"
        f"得到 {hit!r}：这一格只在函数真正查缓存时给分"
    )


# ---- TODO 16: how many tokens a request gets ----


@check(points=3, title="欠多少给多少", says="decode 欠 1 个，prefill 欠剩下的 prompt，不超过预算")
def check_todo16_owed(ns):
    """A decode owes 1, a partial prefill the rest of its prompt, both capped by the budget."""
    with _Isolated(ns, 16) as cls:
        sched = cls(max_num_batched_tokens=64, max_num_seqs=4)
        request = ns["Request"]("a", list(range(50)), 4)
        for computed, budget, want in [(0, 64, 50), (0, 20, 20), (30, 64, 20), (30, 7, 7), (49, 64, 1)]:
            got = sched._num_new_tokens(request, computed, budget)
            assert type(got) is int and got == want, (
                f"TODO 16: 50 个 token 的请求已算 {computed} 个、剩余预算 {budget} 时，"
                f"_num_new_tokens 应为 min(50 - {computed}, {budget}) = {want}，得到 {got!r}"
            )
        request.output_token_ids.extend([3, 4])  # num_tokens = 52: the decode owes one token
        got = sched._num_new_tokens(request, 51, 64)
        assert got == 1, (
            f"TODO 16: prompt 50 个 token、已生成 2 个（num_tokens = 52）、已算 51 个时，"
            f"decode 只欠 1 个 token，_num_new_tokens 应为 1，得到 {got!r}：欠的是 num_tokens - num_computed_tokens"
        )


@check(points=3, title="threshold", says="这一步的 long_prefill_token_threshold：大于 0 时封顶，0 表示不限")
def check_todo16_threshold(ns):
    """A threshold above 0 caps a request's tokens in one step; 0 means no cap. The threshold is this
    step's (`self.long_prefill_token_threshold`, which schedule() sets to 0 for a lone request), not
    the configured one."""
    with _Isolated(ns, 16) as cls:
        request = ns["Request"]("a", list(range(50)), 4)
        for threshold, computed, budget, want in [
            (8, 0, 64, 8),
            (8, 45, 64, 5),
            (8, 0, 3, 3),
            (0, 0, 64, 50),
            (100, 0, 64, 50),
            (1, 10, 64, 1),
        ]:
            sched = cls(max_num_batched_tokens=64, max_num_seqs=4, long_prefill_token_threshold=threshold)
            got = sched._num_new_tokens(request, computed, budget)
            assert got == want, (
                f"TODO 16: long_prefill_token_threshold={threshold}，50 个 token 的请求已算 {computed} 个、"
                f"预算 {budget} 时，_num_new_tokens 应为 {want}（threshold > 0 时一步最多给这么多，0 表示不限），"
                f"得到 {got!r}"
            )
        # schedule() sets this step's threshold: 0 when one request is alone (vLLM 0.33), the configured one otherwise
        sched = cls(max_num_batched_tokens=64, max_num_seqs=4, long_prefill_token_threshold=8)
        sched.long_prefill_token_threshold = 0
        got = sched._num_new_tokens(request, 0, 64)
        assert got == 50, (
            "TODO 16: 构造时 long_prefill_token_threshold=8，这一步 schedule() 把 self.long_prefill_token_threshold "
            f"设成了 0（只有一个请求，不封顶），50 个 token 的请求已算 0 个、预算 64 时 _num_new_tokens 应为 50，得到 {got!r}："
            "要用这一步的 self.long_prefill_token_threshold，不是 configured_long_prefill_token_threshold"
        )


# ---- TODO 17: the running requests ----


@check(points=3, title="先 decode", says="先排 running：decode 各扣 1 个预算，做了一半的 prefill 接着做，按接纳顺序")
def check_todo17_decodes_first(ns):
    """Running requests are served before new ones, in admission order, a decode charged one token."""
    with _Isolated(ns, 17) as cls:
        settings = {"max_num_batched_tokens": 10, "max_num_seqs": 8}
        sched, _ = _fresh(cls, ns, settings, {"a": [1, 2, 3], "b": [4, 5, 6, 7]}, max_tokens=5)
        first = _step(sched)
        assert first == {"a": 3, "b": 4}, f"TODO 17: 第一步只有新请求，应调度 {{'a': 3, 'b': 4}}，得到 {first}"
        sched.add_request(ns["Request"]("c", list(range(30)), 5))
        second = _step(sched)
        assert second == {"a": 1, "b": 1, "c": 8}, (
            "TODO 17: a、b 各在 decode（各欠 1 个 token），新请求 c 有 30 个 token，预算 10："
            f"应调度 {{'a': 1, 'b': 1, 'c': 8}}（先排 running，每个 decode 扣 1 个预算），得到 {second}"
        )
        third = _step(sched)
        assert third == {"a": 1, "b": 1, "c": 8}, (
            "TODO 17: 下一步 a、b 仍在 decode，c 做了一半的 prefill 在 running 里排在它们后面："
            f"应调度 {{'a': 1, 'b': 1, 'c': 8}}，得到 {third}"
        )
        sched, _ = _fresh(cls, ns, {"max_num_batched_tokens": 4, "max_num_seqs": 8}, {"x": list(range(9)), "y": [1]})
        steps = [_step(sched) for _ in range(3)]
        assert steps == [{"x": 4}, {"x": 4}, {"x": 1, "y": 1}], (
            "TODO 17: 预算 4，x 有 9 个 token、y 有 1 个：做了一半的 x 每步先拿预算，"
            f"三步应为 [{{'x': 4}}, {{'x': 4}}, {{'x': 1, 'y': 1}}]，得到 {steps}"
        )


@check(points=2, title="预算", says="总数不超过预算，每个数都是正整数，预算用完就停")
def check_todo17_budget(ns):
    """The running requests never take more than the budget, stop at zero, and skip those owed nothing."""
    with _Isolated(ns, 17) as cls:
        rng = random.Random(3417)
        for _ in range(30):
            settings, prefixes, requests = _random_trace(rng)
            steps, _, _ = _drive(ns, cls, settings, prefixes, requests)
            budget = settings["max_num_batched_tokens"]
            for index, (scheduled, _) in enumerate(steps):
                total = sum(v for v in scheduled.values() if type(v) is int)
                assert _types_ok(scheduled) and total <= budget, (
                    f"TODO 17: {_describe(settings, prefixes, requests)}\n第 {index} 步调度了 {scheduled}："
                    f"每个数都应是正整数（欠 0 个的请求不记），总数不超过预算 {budget}"
                )
        sched = cls(max_num_batched_tokens=8, max_num_seqs=4)
        out = ns["SchedulerOutput"]()
        left = sched._schedule_running(out, 8)
        assert left == 8 and out.num_scheduled_tokens == {}, (
            f"TODO 17: running 为空时 _schedule_running(out, 8) 应返回 8 且什么也不调度，得到 {left!r}、{out.num_scheduled_tokens}"
        )


@check(points=2, title="随机轨迹", says="逐步与参考实现比较")
def check_todo17_random(ns):
    """Seeded random traces, step by step against the oracle."""
    _compare_with_oracle(ns, 17, seed=3470)



def _running_called(ns, cls, running, token_budget, max_num_batched_tokens=100):
    """_schedule_running(out, token_budget) on `running` placed by hand: ([(id, n)] in the order
    recorded, what it returned); asserts it changed no request and no queue."""
    sched = _placed(cls, {"max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": 8}, running=running)
    before = _snapshot(sched)
    out = ns["SchedulerOutput"]()
    left = sched._schedule_running(out, token_budget)
    assert _snapshot(sched) == before, (
        f"TODO 17: _schedule_running 只在 out 里记账、返回剩下的预算，不改请求和队列"
        f"（num_computed_tokens 由给定的 schedule() 统一前进）：调用前 {before}，调用后 {_snapshot(sched)}"
    )
    return list(out.num_scheduled_tokens.items()), left


@check(points=3, title="单独调用：顺序", says="按 running 的顺序记账，欠 0 个的跳过（continue）且不记 0，不把 decode 挪到前面")
def check_todo17_in_order(ns):
    """_schedule_running on hand-built states: admission order kept (a partial prefill admitted
    before the decodes is served first), a request owed nothing skipped without ending the loop
    and without a 0 entry, and the insertion order of num_scheduled_tokens."""
    with _Isolated(ns, 17) as cls:
        def state(names):
            made = {
                "d1": _in_state(ns, "d1", [1, 2, 3], 3, outputs=[9]),  # decode: owes 1
                "d2": _in_state(ns, "d2", [4, 5], 2, outputs=[9]),  # decode: owes 1
                "p": _in_state(ns, "p", list(range(40)), 10),  # partial prefill: owes 30
                "z": _in_state(ns, "z", [1, 2], 3, outputs=[5]),  # caught up: owes 0
            }
            return [made[name] for name in names]

        cases = [
            (["p", "d1", "d2"], 12, [("p", 12)], 0),
            (["p", "d1", "d2"], 40, [("p", 30), ("d1", 1), ("d2", 1)], 8),
            (["d1", "p", "d2"], 20, [("d1", 1), ("p", 19)], 0),
            (["z", "d1", "p"], 5, [("d1", 1), ("p", 4)], 0),
            (["d1", "z", "d2"], 9, [("d1", 1), ("d2", 1)], 7),
            (["z"], 9, [], 9),
        ]
        for names, budget, want, want_left in cases:
            got, left = _running_called(ns, cls, state(names), budget, max_num_batched_tokens=max(budget, 1))
            assert (got, left) == (want, want_left), (
                f"TODO 17: running 依次是 {names}（d1、d2 是 decode 各欠 1 个，p 是做了一半的 prefill 欠 30 个，"
                f"z 已追上欠 0 个），预算 {budget}：_schedule_running 应记 {want}、返回 {want_left}，得到 {got}、"
                f"返回 {left!r}。按 running 的顺序（先接纳的先拿，不把 decode 挪到前面）；欠 0 个的跳过：不记 0，"
                f"也不停下，接着排后面的"
            )


@check(points=1, title="单独调用：预算参数", says="用参数 token_budget，不用 max_num_batched_tokens；不改 num_computed_tokens")
def check_todo17_budget_argument(ns):
    """_schedule_running spends the token_budget it is given, whatever max_num_batched_tokens is,
    and leaves every request's num_computed_tokens to schedule()."""
    with _Isolated(ns, 17) as cls:
        for budget, want, want_left in [(3, [("a", 1), ("b", 2)], 0), (7, [("a", 1), ("b", 5)], 1), (0, [], 0)]:
            running = [_in_state(ns, "a", [1, 2], 2, outputs=[4]), _in_state(ns, "b", list(range(9)), 4)]
            got, left = _running_called(ns, cls, running, budget, max_num_batched_tokens=64)
            assert (got, left) == (want, want_left), (
                f"TODO 17: max_num_batched_tokens=64，但这次调用的参数 token_budget={budget}；running 是 decode 的 a "
                f"和欠 5 个的 b：应记 {want}、返回 {want_left}（用参数 token_budget），得到 {got}、返回 {left!r}"
            )


# ---- TODO 18: admitting waiting requests ----


@check(points=3, title="先来先服务", says="按到达顺序接纳，运行中的请求不超过 max_num_seqs")
def check_todo18_fcfs(ns):
    """Waiting requests are admitted in arrival order, never beyond max_num_seqs running."""
    with _Isolated(ns, 18) as cls:
        prompts = {f"q{i}": [i] * (2 + i) for i in range(6)}
        sched, _ = _fresh(cls, ns, {"max_num_batched_tokens": 100, "max_num_seqs": 2}, prompts, max_tokens=2)
        steps = [_step(sched) for _ in range(4)]
        want = [{"q0": 2, "q1": 3}, {"q0": 1, "q1": 1}, {"q2": 4, "q3": 5}, {"q2": 1, "q3": 1}]
        assert steps == want, (
            "TODO 18: max_num_seqs=2，6 个请求依次到达（各生成 2 个 token）："
            f"前四步应为 {want}（先满 2 个，结束一个才能接纳下一个，按到达顺序），得到 {steps}"
        )
        sched, _ = _fresh(cls, ns, {"max_num_batched_tokens": 5, "max_num_seqs": 8}, {"big": list(range(9)), "small": [1]})
        first = _step(sched)
        assert first == {"big": 5}, (
            "TODO 18: 预算 5，先到的 big 有 9 个 token、后到的 small 只有 1 个："
            f"先来先服务，第一步应为 {{'big': 5}}（不能跳过 big 先接纳 small），得到 {first}"
        )


@check(points=4, title="命中的前缀不调度", says="命中的 token 不调度，也不扣预算；完整命中重算最后一块")
def check_todo18_prefix_hit(ns):
    """A new request starts at its block-aligned hit; cached tokens are never scheduled, even when
    the hit is longer than one step's budget."""
    with _Isolated(ns, 18) as cls:
        system = [(3 * i) % 47 for i in range(200)]
        cache = _PrefixCache([system])
        prompt = system + [5] * 20
        for budget, want_first in [(64, 28), (16, 16), (1024, 28)]:
            settings = {"max_num_batched_tokens": budget, "max_num_seqs": 4, "block_size": 16}
            sched, made = _fresh(cls, ns, settings, {"a": prompt}, cache=cache)
            first = _step(sched)
            computed = made["a"].num_computed_tokens
            assert first == {"a": want_first} and computed == 192 + want_first, (
                f"TODO 18: 缓存了 200 个 token 的 system prompt，新请求 220 个 token、block_size=16、预算 {budget}："
                f"命中 192 个（整块），第一步应调度 {{'a': {want_first}}}、之后 num_computed_tokens = {192 + want_first}；"
                f"得到 {first}、{computed}。命中的 token 不扣预算，也不只在第一块里找前缀"
            )
        sched, made = _fresh(cls, ns, {"max_num_batched_tokens": 64, "max_num_seqs": 4, "block_size": 16}, {"b": system}, cache=cache)
        first = _step(sched)
        assert first == {"b": 8}, (
            "TODO 18: 整个 200 个 token 的 prompt 都已缓存、block_size=16：命中 min(200, 199) → 192，"
            f"第一步应调度 {{'b': 8}}（完整命中也要重算最后不满的块，不是 0 个），得到 {first}"
        )


@check(points=2, title="固定例子", says="预算 1024、三个 800 token 的请求 → 800、224、0")
def check_todo18_fixed_vector(ns):
    """A budget of 1024 and three new 800-token prompts schedule 800, 224 and nothing."""
    with _Isolated(ns, 18) as cls:
        prompts = {rid: list(range(800)) for rid in "abc"}
        sched, _ = _fresh(cls, ns, {"max_num_batched_tokens": 1024, "max_num_seqs": 8}, prompts)
        first = _step(sched)
        assert first == {"a": 800, "b": 224}, (
            f"TODO 18: 预算 1024、三个 800 token 的新请求，第一步应调度 {{'a': 800, 'b': 224}}"
            f"（c 这一步拿不到预算），得到 {first}"
        )
        second = _step(sched)
        assert second == {"a": 1, "b": 576, "c": 447}, (
            f"TODO 18: 第二步应调度 {{'a': 1, 'b': 576, 'c': 447}}，得到 {second}"
        )


@check(points=2, title="随机轨迹", says="随机轨迹（共享前缀）：逐步与参考实现比较")
def check_todo18_random(ns):
    """Seeded random traces with shared prefixes, step by step against the oracle."""
    _compare_with_oracle(ns, 18, seed=3480)



@check(points=4, title="单独调用：出队", says="接纳的请求从 waiting 队头取出、按顺序放进 running 末尾，只花参数 token_budget")
def check_todo18_hand_built(ns):
    """_schedule_waiting on hand-built states: admitted requests leave the waiting queue (popleft)
    and join the end of running in order; the token_budget argument is what it spends; the
    order of num_scheduled_tokens; requests and the running requests already there untouched."""
    with _Isolated(ns, 18) as cls:
        for budget, seqs, want, want_waiting in [
            (7, 8, [("q0", 5), ("q1", 2)], ["q2", "q3"]),
            (100, 3, [("q0", 5), ("q1", 5)], ["q2", "q3"]),
            (100, 8, [("q0", 5), ("q1", 5), ("q2", 5), ("q3", 5)], []),
            (0, 8, [], ["q0", "q1", "q2", "q3"]),
        ]:
            busy = _in_state(ns, "old", [1, 2], 2, outputs=[3])
            queued = [_in_state(ns, f"q{i}", [i] * 5, 0) for i in range(4)]
            sched = _placed(cls, {"max_num_batched_tokens": 100, "max_num_seqs": seqs}, running=[busy], waiting=queued)
            out = ns["SchedulerOutput"]()
            sched._schedule_waiting(out, budget)
            got = list(out.num_scheduled_tokens.items())
            running, waiting, requests, _ = _snapshot(sched)
            want_running = ["old"] + [rid for rid, _ in want]
            assert (got, running, waiting) == (want, want_running, want_waiting), (
                f"TODO 18: running 里已有 old，等待队列 q0–q3 各 5 个 token，max_num_seqs={seqs}、"
                f"max_num_batched_tokens=100、参数 token_budget={budget}：应记 {want}，running 变成 {want_running}，"
                f"self.waiting 只剩 {want_waiting}（接纳时用 popleft() 取出）；得到 {got}、running {running}、waiting {waiting}"
            )
            assert requests == ["old", "q0", "q1", "q2", "q3"] and busy.num_computed_tokens == 2, (
                f"TODO 18: _schedule_waiting 不改 self.requests 和已在 running 里的请求：得到 requests {requests}、"
                f"old 的 num_computed_tokens {busy.num_computed_tokens}"
            )


# ---- TODO 19: after the step ----


@check(points=4, title="追上才采样", says="prefill 中途不产生 token")
def check_todo19_catch_up(ns):
    """A request still in prefill samples nothing; one that caught up takes its token."""
    with _Isolated(ns, 19) as cls:
        sched, made = _fresh(cls, ns, {"max_num_batched_tokens": 4, "max_num_seqs": 4}, {"a": list(range(10))}, max_tokens=3)
        for step, sampled in enumerate([11, 12]):
            out = sched.schedule()
            sched.update_from_output(out, {"a": sampled})
            assert made["a"].output_token_ids == [], (
                f"TODO 19: 10 个 token 的 prompt、预算 4，第 {step} 步之后只算了 {made['a'].num_computed_tokens} 个："
                f"prefill 还没做完，不应采样，output_token_ids 应为 []，得到 {made['a'].output_token_ids}"
            )
        out = sched.schedule()
        sched.update_from_output(out, {"a": 13})
        assert made["a"].output_token_ids == [13], (
            f"TODO 19: 第 2 步算完了整个 prompt，这一步采样的 13 应成为第一个输出：output_token_ids 应为 [13]，"
            f"得到 {made['a'].output_token_ids}"
        )
        out = sched.schedule()
        assert dict(out.num_scheduled_tokens) == {"a": 1}, (
            f"TODO 19: 收下第一个 token 后 a 欠 1 个 decode token，下一步应调度 {{'a': 1}}，得到 {dict(out.num_scheduled_tokens)}"
        )
        sched.update_from_output(out, {"a": 14})
        assert made["a"].output_token_ids == [13, 14], (
            f"TODO 19: decode 之后 output_token_ids 应为 [13, 14]，得到 {made['a'].output_token_ids}"
        )


@check(points=2, title="结束", says="生成够 max_tokens 个就结束，让出 max_num_seqs 的名额")
def check_todo19_finish(ns):
    """A request with max_tokens outputs leaves the scheduler and frees its max_num_seqs slot."""
    with _Isolated(ns, 19) as cls:
        settings = {"max_num_batched_tokens": 50, "max_num_seqs": 1}
        sched, made = _fresh(cls, ns, settings, {"a": [1, 2], "b": [3, 4, 5]}, max_tokens=2)
        steps = [_step(sched) for _ in range(4)]
        assert steps == [{"a": 2}, {"a": 1}, {"b": 3}, {"b": 1}], (
            "TODO 19: max_num_seqs=1，a、b 各生成 2 个 token：a 生成够 2 个后应离开 running，b 才能进来；"
            f"四步应为 [{{'a': 2}}, {{'a': 1}}, {{'b': 3}}, {{'b': 1}}]，得到 {steps}"
        )
        assert made["a"].output_token_ids == [1, 1] and made["b"].output_token_ids == [1, 1], (
            f"TODO 19: 每个请求应恰好生成 max_tokens=2 个 token，得到 a {made['a'].output_token_ids}、b {made['b'].output_token_ids}"
        )
        assert _step(sched) == {}, "TODO 19: 结束的请求不应再被调度"


@check(points=2, title="随机轨迹", says="输出与状态逐步与参考实现比较")
def check_todo19_random(ns):
    """Seeded random traces, outputs and states step by step against the oracle."""
    _compare_with_oracle(ns, 19, seed=3490, what="采样或结束")



@check(points=2, title="单独调用：移出", says="结束的请求离开 running 和 requests，其余不动；不改 num_computed_tokens")
def check_todo19_hand_built(ns):
    """update_from_output on a hand-built state: the finished request leaves self.running and
    self.requests, the others stay in order, and no num_computed_tokens changes."""
    with _Isolated(ns, 19) as cls:
        a = _in_state(ns, "a", [1, 2], 3, outputs=[7], max_tokens=2)  # caught up: its 2nd token ends it
        b = _in_state(ns, "b", list(range(9)), 4)  # partial prefill
        c = _in_state(ns, "c", [5], 2, outputs=[6], max_tokens=4)  # caught up, not finishing
        w = _in_state(ns, "w", [3, 3], 0)  # still waiting
        sched = _placed(cls, {"max_num_batched_tokens": 16, "max_num_seqs": 8}, running=[a, b, c], waiting=[w])
        sched.update_from_output(ns["SchedulerOutput"]({"a": 1, "b": 4, "c": 1}), {"a": 8, "b": 9, "c": 10})
        running, waiting, requests, _ = _snapshot(sched)
        want = (["b", "c"], ["w"], ["b", "c", "w"])
        assert (running, waiting, requests) == want, (
            "TODO 19: a 追上并生成了第 max_tokens=2 个 token，b 在 prefill 中途，c 追上了还没生成够，w 还在等："
            f"之后 running 应为 {want[0]}、waiting {want[1]}、requests 的键 {want[2]}（结束的 a 从 running 和 "
            f"requests 里都移除），得到 {running}、{waiting}、{requests}"
        )
        computed = {r.request_id: r.num_computed_tokens for r in (a, b, c, w)}
        assert computed == {"a": 3, "b": 4, "c": 2, "w": 0}, (
            f"TODO 19: update_from_output 不改 num_computed_tokens（新采样的 token 下一步才算 KV）：应为 "
            f"{{'a': 3, 'b': 4, 'c': 2, 'w': 0}}，得到 {computed}"
        )
