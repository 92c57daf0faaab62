"""The figures of parts one to three: the prefix tree and a hit, the chunked mask, the hash chain."""

from .canvas import (
    HIT,
    HIT_EDGE,
    INK,
    MUTED,
    OTHER,
    OTHER_EDGE,
    WAIT,
    WARN_EDGE,
    WORK,
    WORK_EDGE,
    Canvas,
)


def prefix_tree() -> str:
    """1.2's example: prefixes [1, 2, 3] and [1, 2, 9] cached; the prompt [1, 2, 3, 9] hits 3."""
    c = Canvas(820, 300, "前缀树与一次命中")
    c.text(
        20, 28, "已登记的前缀 [1, 2, 3] 与 [1, 2, 9]（开头相同的部分只画一次）", size=15, bold=True
    )
    nodes = {"root": (60, 150), "1": (160, 150), "2": (260, 150), "3": (370, 95), "9": (370, 205)}
    hit_path = [("root", "1"), ("1", "2"), ("2", "3")]
    for a, b in [*hit_path, ("2", "9")]:
        on_hit = (a, b) in hit_path
        (x1, y1), (x2, y2) = nodes[a], nodes[b]
        c.line(
            x1 + 22,
            y1,
            x2 - 22,
            y2,
            stroke=HIT_EDGE if on_hit else MUTED,
            width=3 if on_hit else 1.5,
        )
    for name, (x, y) in nodes.items():
        hit = name in ("root", "1", "2", "3")
        c.circle(x, y, 22, fill=HIT if hit else "#ffffff", stroke=HIT_EDGE if hit else INK)
        c.text(
            x,
            y + 5,
            "根" if name == "root" else name,
            size=15,
            anchor="middle",
            mono=name != "root",
        )
    c.text(370, 60, "前缀 [1, 2, 3] 的末端", size=13, anchor="middle", fill=MUTED)
    c.text(370, 250, "前缀 [1, 2, 9] 的末端", size=13, anchor="middle", fill=MUTED)
    c.line(392, 95, 452, 95, stroke=WARN_EDGE, dash=True)
    c.text(460, 100, "3 之后没有 9：命中到此为止", size=13, fill=WARN_EDGE)
    c.text(470, 158, "新请求的 prompt", size=14, bold=True)
    for i, token in enumerate([1, 2, 3, 9]):
        hit = i < 3
        c.boxed(470 + 50 * i, 172, 44, 36, str(token), fill=HIT if hit else OTHER,
                stroke=HIT_EDGE if hit else OTHER_EDGE)  # fmt: skip
    c.text(470, 232, "hit_len = 3：reusable_prefix = [1, 2, 3]", size=13, mono=True, fill=HIT_EDGE)
    c.text(470, 254, "suffix = [9]：只有它要做 prefill", size=13, mono=True, fill=OTHER_EDGE)
    c.text(
        20,
        288,
        "只有从 prompt 第一个 token 起连续相同才算命中；最长的那条前缀胜出。",
        size=13,
        fill=MUTED,
    )
    return c.svg()


def chunk_mask() -> str:
    """2.2's chunked prefill: 7 tokens, chunk_size=3, three calls; each mask's offset is P."""
    cell, left, top = 34, 90, 70
    c = Canvas(820, 400, "三块的因果掩码与偏移")
    c.text(
        20,
        26,
        "7 个 token，chunk_size = 3：三次调用，每次的掩码是 T × S 的长方形",
        size=15,
        bold=True,
    )
    c.text(
        left + 7 * cell / 2,
        top - 22,
        "key 的位置（S = P + T）",
        size=13,
        anchor="middle",
        fill=MUTED,
    )
    chunks = [(0, 3, WORK, WORK_EDGE), (3, 3, HIT, HIT_EDGE), (6, 1, OTHER, OTHER_EDGE)]
    for k in range(7):
        c.text(left + k * cell + cell / 2, top - 4, str(k), size=12, anchor="middle", mono=True)
    for q in range(7):
        c.text(left - 10, top + q * cell + cell / 2 + 4, f"q{q}", size=12, anchor="end", mono=True)
        start, _, fill, edge = next(ch for ch in chunks if ch[0] <= q < ch[0] + ch[1])
        for k in range(7):
            x, y = left + k * cell, top + q * cell
            if k > q:
                c.rect(x, y, cell, cell, fill="#ffffff", stroke="#d5dae1", radius=0)
            else:  # keys before the chunk come from past_kv: drawn lighter
                c.rect(
                    x, y, cell, cell, fill=fill if k >= start else "#f4f6f8", stroke=edge, radius=0
                )
                c.text(x + cell / 2, y + cell / 2 + 5, "✓", size=13, anchor="middle", fill=edge)
    for index, (start, size, _, edge) in enumerate(chunks):
        end = start + size  # S of this call
        c.rect(
            left,
            top + start * cell,
            end * cell,
            size * cell,
            fill="none",
            stroke=edge,
            width=3,
            radius=0,
        )
        y = top + start * cell + size * cell / 2
        c.text(
            360,
            y - 4,
            f"块 {index}：P = {start}，T = {size}，S = {end}",
            size=14,
            bold=True,
            fill=edge,
        )
        c.text(360, y + 16, f"torch.ones(T, S).tril(diagonal={end - size})", size=13, mono=True)
    c.rect(20, 330, 16, 16, fill="#f4f6f8", stroke=MUTED, radius=0)
    c.text(44, 343, "来自 past_kv 的 key（前面块算好的 KV）", size=13)
    c.rect(330, 330, 16, 16, fill=WORK, stroke=WORK_EDGE, radius=0)
    c.text(354, 343, "本块新算的 key（颜色随块而变）", size=13)
    c.text(
        20,
        378,
        "对角线的偏移 S − T 就是已有的 token 数 P：past_kv 接力传对了，位置和掩码就都对了。",
        size=13,
        fill=MUTED,
    )
    return c.svg()


def hash_chain() -> str:
    """Part three: block_size=4, request A finished, B running; chain keys, ref counts, queues."""
    c = Canvas(880, 440, "哈希链、引用计数与可淘汰队列")
    c.text(
        20,
        26,
        "block_size = 4：key_i = hash((key_{i-1}, tokens_i))，首块的父 key 为 None",
        size=15,
        bold=True,
    )
    blocks = [  # (block id, tokens, key, parent key, ref_count, x, y)
        (0, "7 1 4 2", "k0", "None", 1, 20, 50),
        (1, "5 8 3 6", "k1", "k0", 1, 230, 50),
        (2, "9 9 0 4", "k2", "k1", 0, 440, 50),
        (3, "2 2 8 1", "k3", "k1", 1, 440, 175),
    ]
    for block_id, tokens, key, parent, refs, x, y in blocks:
        shared, free = block_id < 2, refs == 0
        fill, edge = (HIT, HIT_EDGE) if shared else (WAIT, MUTED) if free else (OTHER, OTHER_EDGE)
        c.rect(x, y, 180, 104, fill=fill, stroke=edge, width=2)
        c.text(x + 10, y + 21, f"block {block_id}   [{tokens}]", size=13, mono=True, bold=True)
        c.text(x + 10, y + 44, f"key = {key}", size=13, mono=True)
        c.text(x + 10, y + 66, f"parent_key = {parent}", size=13, mono=True)
        c.text(
            x + 10,
            y + 90,
            f"ref_count = {refs}",
            size=13,
            mono=True,
            bold=True,
            fill=WARN_EDGE if free else INK,
        )
    c.line(200, 102, 228, 102, arrow=True)
    c.line(410, 102, 438, 102, arrow=True)
    c.line(320, 154, 438, 226, arrow=True)
    notes = [
        ("A：块表 [0, 1, 2]，已结束", INK),
        ("B：块表 [0, 1, 3]，运行中", INK),
        ("B 命中了 A 登记的 0、1：", MUTED),
        ("两人都在时 ref_count = 2，", MUTED),
        ("A release 之后是 1", MUTED),
        ("ref_count = 0 的块不清空，", MUTED),
        ("留在缓存里等下一次命中", MUTED),
    ]
    for i, (words, ink) in enumerate(notes):
        c.text(
            640,
            70 + 22 * i + (10 if i >= 2 else 0) + (10 if i >= 5 else 0),
            words,
            size=13,
            fill=ink,
        )
    c.text(20, 318, "可淘汰队列 _evictable", size=14, bold=True)
    c.text(20, 348, "队首（最久未用，先淘汰）", size=13, fill=WARN_EDGE)
    for i, (block_id, note) in enumerate([(5, "C 的尾块"), (4, "C 的首块"), (2, "A 的尾块")]):
        c.boxed(200 + 110 * i, 325, 90, 36, f"block {block_id}", fill=WAIT, stroke=MUTED, size=13)
        c.text(245 + 110 * i, 380, note, size=12, anchor="middle", fill=MUTED)
        if i:
            c.line(200 + 110 * i - 18, 343, 200 + 110 * i - 2, 343, arrow=True)
    c.text(530, 348, "队尾（刚 release）", size=13, fill=MUTED)
    c.text(680, 318, "空闲 _free_block_ids", size=14, bold=True)
    c.text(680, 348, "block 6, block 7", size=13, mono=True)
    c.text(
        20,
        420,
        "release 从尾块到首块依次入队：同一条链上尾块先被淘汰，父块永远不比子块先走。",
        size=13,
        fill=MUTED,
    )
    return c.svg()
