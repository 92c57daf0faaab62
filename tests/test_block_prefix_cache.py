"""BlockPrefixCache (TODO 11-14, the challenge section) against a brute-force oracle.

The reference class comes from the one source through `solution_namespace()`. The oracle
knows nothing of hashes: each of its blocks holds the whole token prefix it caches, lookups
scan every block. Every test calls `check_integrity()` after every step.
"""

import random
from functools import lru_cache

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from grader.kit.authoring.nbsource import solution_namespace


@lru_cache(maxsize=1)
def _namespace() -> dict:
    return solution_namespace()


NS = _namespace()
BlockPrefixCache = NS["BlockPrefixCache"]
CacheFullError = NS["CacheFullError"]


# ---------------------------------------------------------------- oracle and helpers
class Oracle:
    """Brute-force model: a block's content is the full prefix it caches (None: not cached)."""

    def __init__(self, block_size: int, num_blocks: int):
        self.block_size = block_size
        self.refs = [0] * num_blocks
        self.prefix = [None] * num_blocks
        self.free = list(range(num_blocks))  # taken from the front
        self.lru = []  # evictable blocks, least recently used first
        self.stats = [0, 0, 0]  # requests, queried tokens, hit tokens

    def match(self, tokens) -> list:
        found = []
        for n in range(1, len(tokens) // self.block_size + 1):
            owners = [
                b for b, p in enumerate(self.prefix) if p == tuple(tokens[: n * self.block_size])
            ]
            if not owners:
                break
            assert len(owners) == 1
            found.append(owners[0])
        return found

    def acquire(self, tokens):
        """The block ids acquire must return, or None where it must raise CacheFullError."""
        hits = self.match(tokens)
        need = len(tokens) // self.block_size - len(hits)
        if need > len(self.free) + len([b for b in self.lru if b not in hits]):
            return None
        for b in hits:
            if self.refs[b] == 0:
                self.lru.remove(b)
            self.refs[b] += 1
        ids = list(hits)
        for _ in range(need):
            if not self.free:
                victim = self.lru.pop(0)
                self.prefix[victim] = None
                self.free.append(victim)
            b = self.free.pop(0)
            self.refs[b] = 1
            self.prefix[b] = tuple(tokens[: (len(ids) + 1) * self.block_size])
            ids.append(b)
        self.stats = [
            self.stats[0] + 1,
            self.stats[1] + len(tokens),
            self.stats[2] + len(hits) * self.block_size,
        ]
        return ids

    def release(self, ids) -> None:
        for b in reversed(ids):
            self.refs[b] -= 1
            if self.refs[b] == 0:
                (self.lru if self.prefix[b] is not None else self.free).append(b)


def snapshot(cache):
    return (
        [(b.block_id, b.ref_count, b.key, b.parent_key, b.token_ids) for b in cache.blocks],
        list(cache._free_block_ids),
        list(cache._evictable),
        dict(cache._cached),
        (cache.num_requests, cache.num_queried_tokens, cache.num_hit_tokens, cache.num_evictions),
    )


def block_contents(cache) -> list:
    """The full prefix each block caches, recovered by walking parent keys (None: not cached)."""
    by_key = {b.key: b for b in cache.blocks if b.key is not None}
    contents = []
    for block in cache.blocks:
        if block.key is None:
            contents.append(None)
            continue
        parts, cur = [], block
        while cur is not None:
            parts.append(cur.token_ids)
            cur = None if cur.parent_key is None else by_key[cur.parent_key]
        contents.append(tuple(t for part in reversed(parts) for t in part))
    return contents


def assert_agrees(cache, oracle) -> None:
    cache.check_integrity()
    assert [b.ref_count for b in cache.blocks] == oracle.refs
    assert block_contents(cache) == oracle.prefix
    assert list(cache._evictable) == oracle.lru
    assert list(cache._free_block_ids) == oracle.free
    assert [cache.num_requests, cache.num_queried_tokens, cache.num_hit_tokens] == oracle.stats


def assert_match_is_right(cache, tokens) -> list:
    """match returns blocks whose content is the query's prefix, as many as are cached, and changes nothing."""
    before = snapshot(cache)
    got = cache.match(tokens)
    assert type(got) is list and all(type(b) is int for b in got)
    contents = block_contents(cache)
    bs = cache.block_size
    for i, b in enumerate(got):
        assert contents[b] == tuple(tokens[: (i + 1) * bs]), (
            "match returned a block holding other tokens"
        )
    if len(got) < len(tokens) // bs:
        assert tuple(tokens[: (len(got) + 1) * bs]) not in contents, (
            "match stopped short of a cached block"
        )
    assert snapshot(cache) == before, "match changed the cache"
    return got


class Collide(BlockPrefixCache):
    """Three hash values only: collisions everywhere."""

    def _hash_block(self, parent_key, token_ids):
        return hash((parent_key, token_ids)) % 3


class Constant(BlockPrefixCache):
    """Every block hashes to 7."""

    def _hash_block(self, parent_key, token_ids):
        return 7


def random_prompts(rng, block_size, vocab=3):
    roots = [[rng.randrange(vocab) for _ in range(4 * block_size)] for _ in range(3)]

    def make():
        root = rng.choice(roots)
        tail = [rng.randrange(vocab) for _ in range(rng.randrange(2 * block_size + 1))]
        return root[: rng.randrange(len(root) + 1)] + tail

    return make


# ---------------------------------------------------------------- scenarios
def test_shared_system_prompt_is_stored_once_and_refcounted():
    cache = BlockPrefixCache(block_size=4, num_blocks=8)
    system = list(range(100, 108))
    a = cache.acquire(system + [1, 2, 3, 4])
    b = cache.acquire(system + [5, 6, 7, 8, 9])
    cache.check_integrity()
    assert a[:2] == b[:2] and a[2] != b[2]
    assert [cache.blocks[i].ref_count for i in a[:2]] == [2, 2]
    assert cache.num_cached_blocks == 4 and cache.num_free_blocks == 4


def test_partial_last_block_is_never_cached():
    cache = BlockPrefixCache(block_size=4, num_blocks=8)
    ids = cache.acquire(list(range(11)))
    cache.check_integrity()
    assert len(ids) == 2 and cache.num_cached_blocks == 2
    assert all(len(b.token_ids) == 4 for b in cache.blocks if b.key is not None)
    assert cache.acquire([1, 2, 3]) == [] and cache.num_cached_blocks == 2
    cache.check_integrity()


def test_released_blocks_stay_cached_until_evicted():
    cache = BlockPrefixCache(block_size=2, num_blocks=4)
    ids = cache.acquire([1, 2, 3, 4])
    cache.release(ids)
    cache.check_integrity()
    assert cache.num_evictable_blocks == 2 and cache.match([1, 2, 3, 4, 5]) == ids
    assert cache.acquire([1, 2, 3, 4]) == ids and cache.num_evictable_blocks == 0
    cache.check_integrity()


def test_lru_evicts_least_recently_released_first():
    cache = BlockPrefixCache(block_size=2, num_blocks=6)
    prompts = {"A": [1, 2, 3, 4], "B": [5, 6, 7, 8], "C": [9, 9, 9, 9]}
    for tokens in prompts.values():
        cache.release(cache.acquire(tokens))
        cache.check_integrity()
    cache.release(cache.acquire(prompts["A"]))  # A becomes the most recently used
    cache.acquire([1, 1, 1, 1])  # two new blocks: B goes
    cache.check_integrity()
    assert cache.match(prompts["B"]) == []
    assert len(cache.match(prompts["A"])) == 2 and len(cache.match(prompts["C"])) == 2
    assert cache.num_evictions == 2


def test_tail_blocks_are_evicted_before_their_parents():
    cache = BlockPrefixCache(block_size=2, num_blocks=3)
    ids = cache.acquire([1, 2, 3, 4, 5, 6])
    cache.release(ids)
    assert list(cache._evictable) == ids[::-1]
    cache.acquire([7, 7])  # one block: the tail goes, the chain's head stays matchable
    cache.check_integrity()
    assert cache.match([1, 2, 3, 4, 5, 6]) == ids[:2]


def test_referenced_blocks_are_never_evicted():
    cache = BlockPrefixCache(block_size=2, num_blocks=4)
    held = cache.acquire([1, 2, 3, 4])
    cache.release(cache.acquire([5, 6, 7, 8]))
    cache.acquire([9, 9, 9, 9])  # must evict the released blocks, not the held ones
    cache.check_integrity()
    assert cache.match([1, 2, 3, 4]) == held and cache.match([5, 6]) == []


def test_acquire_over_capacity_raises_and_changes_nothing():
    cache = BlockPrefixCache(block_size=2, num_blocks=4)
    cache.release(cache.acquire([1, 2, 3, 4]))  # two evictable blocks, two free
    before = snapshot(cache)
    with pytest.raises(CacheFullError):
        cache.acquire(list(range(1, 11)))  # hits 2, needs 3 more, only 2 can be freed
    assert snapshot(cache) == before
    assert isinstance(CacheFullError("x"), RuntimeError)
    assert len(cache.acquire(list(range(1, 9)))) == 4
    cache.check_integrity()


def test_match_is_a_pure_query():
    cache = BlockPrefixCache(block_size=2, num_blocks=6)
    cache.release(cache.acquire([1, 2, 3, 4]))
    cache.acquire([5, 6])
    for tokens in ([1, 2, 3, 4], [1, 2], [5, 6, 7], [], [9]):
        assert_match_is_right(cache, tokens)
    cache.check_integrity()


def test_double_release_is_rejected_without_change():
    cache = BlockPrefixCache(block_size=2, num_blocks=4)
    ids = cache.acquire([1, 2, 3, 4])
    cache.release(ids)
    before = snapshot(cache)
    with pytest.raises(ValueError):
        cache.release(ids)
    with pytest.raises(ValueError):
        cache.release([99])
    assert snapshot(cache) == before


def test_hit_rate_counts_tokens_like_vllm():
    cache = BlockPrefixCache(block_size=4, num_blocks=8)
    assert cache.hit_rate == 0.0
    cache.acquire(list(range(10)))  # 10 queried, 0 hit
    cache.acquire(list(range(9)))  # 9 queried, 8 hit (two full blocks)
    assert (cache.num_requests, cache.num_queried_tokens, cache.num_hit_tokens) == (2, 19, 8)
    assert cache.hit_rate == pytest.approx(8 / 19)
    with pytest.raises(CacheFullError):
        cache.acquire(list(range(50, 80)))
    assert cache.num_requests == 2, "a failed acquire records nothing"


def test_forced_hash_collisions_never_return_wrong_blocks():
    cache = Constant(block_size=4, num_blocks=8)
    ids = cache.acquire([1, 2, 3, 4, 5, 6, 7, 8])
    cache.check_integrity()
    assert cache.num_cached_blocks == 1  # the second block collides and stays private
    assert cache.match([9, 9, 9, 9]) == []
    assert cache.match([1, 2, 3, 4, 1, 2, 3, 4]) == ids[:1]
    cache.release(ids)
    cache.check_integrity()
    assert cache.num_free_blocks == 7 and cache.num_evictable_blocks == 1

    for seed, cls in ((1, Collide), (2, Constant), (3, Collide)):
        rng = random.Random(seed)
        cache = cls(block_size=3, num_blocks=9)
        make, running = random_prompts(rng, 3), []
        for _ in range(300):
            if running and rng.random() < 0.4:
                cache.release(running.pop(rng.randrange(len(running))))
            else:
                try:
                    running.append(cache.acquire(make()))
                except CacheFullError:
                    pass
            cache.check_integrity()
            assert_match_is_right(cache, make())


def test_random_operation_sequences_agree_with_oracle():
    for seed in range(6):
        rng = random.Random(seed)
        block_size, num_blocks = rng.choice([(1, 5), (2, 7), (3, 10), (4, 12)])
        cache, oracle = BlockPrefixCache(block_size, num_blocks), Oracle(block_size, num_blocks)
        make, running = random_prompts(rng, block_size), []
        for _ in range(250):
            roll = rng.random()
            if running and roll < 0.35:
                ids = running.pop(rng.randrange(len(running)))
                oracle.release(ids)
                cache.release(ids)
            elif roll < 0.5:
                tokens = make()
                assert assert_match_is_right(cache, tokens) == oracle.match(tokens)
            else:
                tokens = make()
                expected = oracle.acquire(tokens)
                if expected is None:
                    before = snapshot(cache)
                    with pytest.raises(CacheFullError):
                        cache.acquire(tokens)
                    assert snapshot(cache) == before
                else:
                    got = cache.acquire(tokens)
                    assert type(got) is list and got == expected
                    running.append(got)
            assert_agrees(cache, oracle)


class BlockCacheMachine(RuleBasedStateMachine):
    """Hypothesis drives acquire / release / match; the oracle says what must happen."""

    @initialize(block_size=st.integers(1, 4), num_blocks=st.integers(1, 10))
    def start(self, block_size, num_blocks):
        self.cache = BlockPrefixCache(block_size, num_blocks)
        self.oracle = Oracle(block_size, num_blocks)
        self.running = []

    @rule(tokens=st.lists(st.integers(0, 2), max_size=14))
    def acquire(self, tokens):
        expected = self.oracle.acquire(tokens)
        if expected is None:
            before = snapshot(self.cache)
            with pytest.raises(CacheFullError):
                self.cache.acquire(tokens)
            assert snapshot(self.cache) == before
        else:
            got = self.cache.acquire(tokens)
            assert got == expected
            self.running.append(got)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def release(self, data):
        ids = self.running.pop(data.draw(st.integers(0, len(self.running) - 1)))
        self.oracle.release(ids)
        self.cache.release(ids)

    @rule(tokens=st.lists(st.integers(0, 2), max_size=14))
    def match(self, tokens):
        assert assert_match_is_right(self.cache, tokens) == self.oracle.match(tokens)

    @invariant()
    def agrees_with_oracle(self):
        assert_agrees(self.cache, self.oracle)


TestBlockCacheStateMachine = BlockCacheMachine.TestCase
TestBlockCacheStateMachine.settings = settings(
    max_examples=120, stateful_step_count=30, deadline=None
)


# ---------------------------------------------------------------- simulator and baselines
def test_eviction_policy_baselines_keep_every_invariant():
    trace = NS["multi_turn_trace"](random.Random(5), num_sessions=6, num_turns=4)
    for cls in (BlockPrefixCache, NS["FIFOBlockPrefixCache"], NS["RandomBlockPrefixCache"]):
        cache = cls(16, 80)
        rate = NS["simulate"](cache, trace)
        cache.check_integrity()
        assert 0.0 < rate < 1.0 and cache.num_evictions > 0
        assert cache.num_evictable_blocks + cache.num_free_blocks == cache.num_blocks


def test_policies_agree_when_nothing_is_evicted():
    trace = NS["few_shot_trace"](random.Random(6), num_requests=60)
    big = NS["num_distinct_full_blocks"](trace, 16)
    rates = set()
    for cls in (BlockPrefixCache, NS["FIFOBlockPrefixCache"], NS["RandomBlockPrefixCache"]):
        cache = cls(16, big)
        rates.add(NS["simulate"](cache, trace))
        assert cache.num_evictions == 0
    assert len(rates) == 1


def test_simulate_rejects_a_prompt_larger_than_the_pool():
    with pytest.raises(ValueError):
        NS["simulate"](BlockPrefixCache(4, 2), [list(range(12))])
