"""Hidden checks of TODO 14, `BlockPrefixCache._record_query`: one function per grade cell, each given the notebook's namespace.

_record_query is called directly, and from a reference acquire over random request sequences,
so a mistake in TODO 11-13 costs TODO 14 nothing.
"""

TODO = "TODO 14"
UNDER_TEST = "_record_query"  # what the learner writes; every other TODO's code is the oracle
TOTAL_POINTS = {14: 7}  # the TODO's points, shared by its checks


def _stats(c):
    return (c.num_requests, c.num_queried_tokens, c.num_hit_tokens)


def _record(c, tokens, hits):
    """Call the learner's _record_query; return the change of (requests, queried tokens, hit tokens)."""
    before = _stats(c)
    label = f"_record_query({tokens}, {hits})，block_size={c.block_size}"
    try:
        result = c._record_query(tokens, hits)
    except NotImplementedError:
        raise
    except Exception as exc:
        raise AssertionError(f"{TODO} [{label}]: 抛出了 {type(exc).__name__}: {exc}") from None
    assert result is None, f"{TODO} [{label}]: _record_query 不返回值，得到 {result!r}"
    after = _stats(c)
    assert all(type(x) is int for x in after), f"{TODO} [{label}]: 统计值应是 int，得到 {after}"
    return label, tuple(a - b for a, b in zip(after, before))


@check(points=3, title="命中 token", says="命中 token 数 = 命中块数 × block_size")
def check_todo14_hit_tokens(ns):
    """num_hit_tokens grows by the tokens the hit blocks hold (blocks x block_size), not by the number of blocks."""
    Cache, _, _ = _classes(ns)
    for size, tokens, hits in ((4, list(range(10)), [0, 1]), (3, list(range(9)), [5, 2, 7]), (4, [1, 2, 3], []), (2, [], [])):
        label, delta = _record(Cache(size, 8), tokens, hits)
        want = len(hits) * size
        cause = "：命中数要按 token 计（命中块数 × block_size），不是块数" if hits and delta[2] == len(hits) else ""
        assert delta[2] == want, f"{TODO} [{label}]: num_hit_tokens 应增加 {want}，实际增加 {delta[2]}{cause}"


@check(points=2, title="查询 token", says="查询 token 数加上整个 prompt 的长度，包括不满一块的尾巴")
def check_todo14_queried_tokens(ns):
    """num_queried_tokens grows by the whole prompt, the partial tail included."""
    Cache, _, _ = _classes(ns)
    for size, tokens, hits in ((4, list(range(10)), [0, 1]), (4, (5, 6, 7), []), (3, list(range(9)), [1]), (2, [], [])):
        label, delta = _record(Cache(size, 8), tokens, hits)
        want = len(tokens)
        if delta[1] == len(tokens) // size * size != want:
            cause = "：查询 token 数要算整个 prompt，包括不满一块的尾巴"
        elif delta[1] == 1 != want:
            cause = "：查询数按 token 计（加上 len(token_ids)），不是按请求计"
        else:
            cause = ""
        assert delta[1] == want, f"{TODO} [{label}]: num_queried_tokens 应增加 {want}，实际增加 {delta[1]}{cause}"


@check(points=2, title="累计", says="请求数每次 +1；随机请求序列中累计值与 hit_rate；不动块")
def check_todo14_accumulate(ns):
    """Requests count one each; totals and hit_rate accumulate over random requests; blocks are not touched."""
    Cache, _, _ = _classes(ns)
    c = Cache(4, 8)
    assert c.hit_rate == 0.0, f"{TODO}: 还没有查询时 hit_rate 应为 0.0，得到 {c.hit_rate!r}"
    before = _snapshot(c)
    label, delta = _record(c, list(range(10)), [0, 1])
    assert delta[0] == 1, f"{TODO} [{label}]: num_requests 应增加 1，实际增加 {delta[0]}"
    assert _snapshot(c)[:4] == before[:4], f"{TODO} [{label}]: _record_query 只改统计，不能动块、队列和索引"
    _record(c, (5, 6, 7), [])
    _record(c, [], [])
    assert _stats(c) == (3, 13, 8), (
        f"{TODO} [依次记 (list(range(10)), [0, 1])、((5, 6, 7), [])、([], [])，block_size=4]: "
        f"(请求数, 查询 token, 命中 token) 应为 (3, 13, 8)，得到 {_stats(c)}"
    )
    assert type(c.hit_rate) is float and abs(c.hit_rate - 8 / 13) < 1e-12, f"{TODO}: hit_rate 应为 8 / 13，得到 {c.hit_rate!r}"
    totals = [0, 0, 0]

    def learner_record(c, tokens, hits):
        c._record_query(tokens, hits)
        totals[0] += 1
        totals[1] += len(tokens)
        totals[2] += len(hits) * c.block_size

    def after_step(c, make):
        assert _stats(c) == tuple(totals), (
            f"{TODO} [随机操作序列，block_size={c.block_size}]: 累计 (请求数, 查询 token, 命中 token) 应为 {tuple(totals)}，"
            f"得到 {_stats(c)}"
        )
        _integrity(c, "_record_query ")

    _drive(Cache(4, 10), 34, 120, lambda c, tokens: _oracle_acquire(c, tokens, learner_record), _oracle_release, after_step)
