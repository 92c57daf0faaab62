"""The figures of parts four and five: one scheduler step, the paged pool, a preemption."""

from .canvas import (
    HIT,
    HIT_EDGE,
    MUTED,
    OTHER,
    OTHER_EDGE,
    WAIT,
    WARN_EDGE,
    WORK,
    WORK_EDGE,
    Canvas,
)


def scheduler_step() -> str:
    """4.4's example, step 2: budget 1024; running a (decode) and b (rest of its prompt); c admitted."""
    scale = 0.5  # pixels a token
    c = Canvas(860, 400, "调度器的一步：预算、running 与 waiting")
    c.text(
        20,
        26,
        "第二步：max_num_batched_tokens = 1024，三个请求各有 800 个 prompt token",
        size=15,
        bold=True,
    )
    rows = [  # (request, queue, computed before the step, scheduled now, num_tokens, note)
        ("a", "running", 800, 1, 801, "decode：欠 1 个"),
        ("b", "running", 224, 576, 800, "prefill 做了一半：欠 576 个"),
        ("c", "waiting", 0, 447, 800, "新接纳：拿到剩下的 447 个"),
    ]
    for i, (name, queue, done, now, total, note) in enumerate(rows):
        y = 50 + 58 * i
        c.text(20, y + 22, queue, size=13, mono=True, fill=MUTED)
        c.text(100, y + 22, name, size=16, mono=True, bold=True)
        c.rect(130, y, total * scale, 32, fill="#ffffff", stroke=MUTED, dash=True)
        if done:
            c.rect(130, y, done * scale, 32, fill=WAIT, stroke=MUTED)
        fill, edge = (OTHER, OTHER_EDGE) if queue == "waiting" else (WORK, WORK_EDGE)
        c.rect(130 + done * scale, y, max(now * scale, 5), 32, fill=fill, stroke=edge, width=2)
        c.text(545, y + 14, f"{now:>3} 个：{note}", size=13)
        c.text(
            545,
            y + 32,
            f"num_computed_tokens {done} → {done + now} / {total}",
            size=12,
            mono=True,
            fill=MUTED,
        )
    c.text(20, 240, "这一步的 token 预算（1024 个 token）", size=14, bold=True)
    x = 130
    for name, width, fill, edge in [
        ("a", 1, WORK, WORK_EDGE),
        ("b", 576, WORK, WORK_EDGE),
        ("c", 447, OTHER, OTHER_EDGE),
    ]:
        c.rect(x, 252, max(width * scale, 5), 30, fill=fill, stroke=edge, width=2)
        c.text(
            x + max(width * scale, 5) / 2,
            300,
            f"{name}: {width}",
            size=13,
            anchor="middle",
            mono=True,
        )
        x += max(width * scale, 5)
    c.text(
        130, 326, "① 先按接纳顺序排 running（a、b），② 预算还有才从 waiting 队头接纳（c）", size=13
    )
    c.text(
        130,
        350,
        'num_scheduled_tokens = {"a": 1, "b": 576, "c": 447}，合计 1024',
        size=13,
        mono=True,
    )
    c.text(
        130,
        376,
        "灰色：之前已算好；虚线框：还欠着。a、b 这一步追上了，采样；c 没追上，不采样。",
        size=13,
        fill=MUTED,
    )
    return c.svg()


# The paged pool's example: block_size 4, 8 blocks; each request's block table and length.
POOL_SLOT, POOL_GAP, POOL_TOP = 22, 6, 230
POOL_TABLES = {"r0": ([2, 5, 0], 10, WORK, WORK_EDGE), "r1": ([2, 7], 6, OTHER, OTHER_EDGE)}
POOL_WRITTEN = {1, 28, 29}  # this step: r0 decodes position 9, r1 prefills positions 4 and 5


def paged_pool() -> str:
    """5.5's paged pool: block_size=4, 8 blocks; r0 and r1 share block 2; slot = block_id*4 + offset."""
    c = Canvas(860, 430, "分页 KV 池、块表与 slot mapping")
    title = "block_size = 4，池里 8 个物理块、32 个槽；块表把请求的第 i 块映射到物理块"
    c.text(20, 26, title, size=15, bold=True)
    for row, (name, (table, length, fill, edge)) in enumerate(POOL_TABLES.items()):
        y = 56 + 60 * row
        c.text(20, y + 22, f"{name}（{length} 个 token）block_table =", size=13)
        for i, block_id in enumerate(table):
            x = 250 + 44 * i
            shared = block_id == 2
            c.boxed(x, y, 36, 32, str(block_id), fill=HIT if shared else fill,
                    stroke=HIT_EDGE if shared else edge, bold=True)  # fmt: skip
            end = _pool_block_x(block_id) + 2 * POOL_SLOT
            c.line(x + 18, y + 32, end, POOL_TOP - 4, stroke=edge, width=1.2, arrow=True)
    c.text(440, 78, "两个请求的第 0 块都是物理块 2：", size=13, fill=HIT_EDGE)
    c.text(440, 100, "前缀缓存命中 = 块表指向同一块", size=13, fill=HIT_EDGE)
    _pool_slots(c)
    lines = [
        (98, "格里的数：token 在自己请求里的位置 p；格下的数：槽号 slot。红框：这一步写入的槽。", {"fill": MUTED}),
        (126, "slot = block_id × block_size + offset，block_id = block_table[p // 4]，offset = p % 4", {"mono": True}),
        (152, "例：r0 的 p = 9 → block_table[2] = 0，offset = 1 → slot = 0 × 4 + 1 = 1", {"mono": True}),
        (182, "这一步 r0 解码 p = 9，r1 预填充 p = 4、5：slot_mapping = [1, 28, 29]", {"size": 14, "bold": True}),
    ]  # fmt: skip
    for dy, words, style in lines:
        c.text(20, POOL_TOP + dy, words, **{"size": 13, **style})
    return c.svg()


def _pool_block_x(block_id: int) -> float:
    return 20 + block_id * (4 * POOL_SLOT + POOL_GAP)


def _pool_slots(c: Canvas) -> None:
    """The pool's 32 slots: whose token each holds (its position), its slot number, its block."""
    owner = {}  # slot -> (request, position)
    for name, (table, length, _, _) in POOL_TABLES.items():
        for p in range(length):
            owner.setdefault(table[p // 4] * 4 + p % 4, (name, p))
    for block_id in range(8):
        x0 = _pool_block_x(block_id)
        c.text(
            x0 + 2 * POOL_SLOT,
            POOL_TOP + 70,
            f"块 {block_id}",
            size=12,
            anchor="middle",
            fill=MUTED,
        )
        for offset in range(4):
            s, x = block_id * 4 + offset, x0 + offset * POOL_SLOT
            name, p = owner.get(s, (None, None))
            if block_id == 2:
                fill, edge = HIT, HIT_EDGE
            elif name:
                fill, edge = POOL_TABLES[name][2], POOL_TABLES[name][3]
            else:
                fill, edge = "#ffffff", "#c3cad3"
            mark = s in POOL_WRITTEN
            c.rect(x, POOL_TOP, POOL_SLOT, 34, fill=fill, stroke=WARN_EDGE if mark else edge,
                   width=3 if mark else 1, radius=0)  # fmt: skip
            middle = x + POOL_SLOT / 2
            if name:
                c.text(middle, POOL_TOP + 22, str(p), size=11, anchor="middle", mono=True)
            c.text(middle, POOL_TOP + 50, str(s), size=10, anchor="middle", mono=True, fill=MUTED)


def preemption() -> str:
    """5.6's rule (vLLM 0.33 FCFS): the pool is empty, A needs a block: C, last admitted, goes."""
    c = Canvas(860, 400, "抢占：最后接纳的请求让出它的块")
    c.text(
        20,
        26,
        "A 这一步的 decode 要一个新块，池里没有空闲块：allocate_slots(A) 返回 None",
        size=15,
        bold=True,
    )

    def queues(y, running, waiting, free, label):
        c.text(20, y + 22, label, size=14, bold=True)
        c.text(110, y + 22, "running", size=13, mono=True, fill=MUTED)
        for i, name in enumerate(running):
            c.boxed(180 + 52 * i, y, 44, 34, name, fill=WORK, stroke=WORK_EDGE, bold=True)
        c.text(350, y + 22, "waiting", size=13, mono=True, fill=MUTED)
        for i, name in enumerate(waiting):
            preempted = name == "C"
            c.boxed(420 + 52 * i, y, 44, 34, name, fill=OTHER if preempted else WAIT,
                    stroke=OTHER_EDGE if preempted else MUTED, bold=True)  # fmt: skip
        c.text(560, y + 22, "free_block_queue", size=13, mono=True, fill=MUTED)
        c.text(700, y + 22, free, size=13, mono=True)

    queues(56, ["A", "B", "C"], ["D"], "（空）", "之前")
    c.text(180, 112, "按接纳的先后：C 最后进来", size=12, fill=MUTED)
    steps = [
        "① preempted = self.running.pop()：取走最后接纳的 C（FCFS 策略）",
        "② kv_cache_manager.free(C)：C 的块 [6, 7] 回到空闲队列（7 未满、未登记，放队首；6 登记过，放队尾）",
        "③ C.num_computed_tokens = 0；self.waiting.prepend_request(C)：放回 waiting 的队头",
        "④ 再试 allocate_slots(A)：从队首拿走块 7，成功",
    ]
    for i, words in enumerate(steps):
        c.text(20, 236 + 24 * i, words, size=13)
    c.line(306, 92, 436, 148, stroke=OTHER_EDGE, dash=True, arrow=True)
    queues(150, ["A", "B"], ["C", "D"], "[6]（7 给了 A）", "之后")
    c.text(420, 204, "C 以后从头重算；块 6 还在缓存里，可以再次命中", size=12, fill=MUTED)
    c.text(
        20,
        350,
        "这一步有过抢占，就不再接纳 waiting 里的请求：C 和 D 都等下一步。",
        size=14,
        bold=True,
    )
    c.text(
        20,
        376,
        "被抢占的是当前请求自己时（running 只剩它），它这一步排不上，停止排 running。",
        size=13,
        fill=MUTED,
    )
    return c.svg()
