"""Why a kernel ended in the middle of a cell, told from how it ended: its exit status, the
submission's memory cgroup, or the grader's own timeout.

`KernelFault` is one such end, recorded by the resuming executor (`resume.py`) against the cell
that was running: the instructor reads `reason` (English, in grades.csv and on the console),
the learner reads `learner_text` (Chinese, under the TODO on the feedback page).

TIMEBOX_EXIT_CODE is the one agreement with the in-kernel time boxes (`checks/_common.py`): a
check whose code swallows every attempt to stop it ends the kernel with `os._exit` of this
code, as a last resort, and the grader then reads the death as "did not return within its
box", not as a crash. The student notebook imports nothing of the kit, so it writes the number
itself: keep the two equal.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

TIMEBOX_EXIT_CODE = 86

# What ended the kernel, by kind: (the instructor's words, the learner's words).
KINDS = {
    "timebox": (
        "did not return within its time box",
        "在时间上限内没有返回（死循环？例如预算从不减少的 while 循环，或吞掉了所有异常的循环），"
        "评分程序只好结束了内核",
    ),
    "hang": (
        "hung past {timeout} s and ignored the interrupt",
        "{timeout} 秒内没有结束，也无法中断（死循环里捕获了 KeyboardInterrupt 或所有异常？），"
        "评分程序只好结束了内核",
    ),
    "interrupted": (
        "did not finish within {timeout} s (interrupted)",
        "{timeout} 秒内没有结束，评分程序中断了它（死循环？例如预算从不减少的 while 循环）",
    ),
    "memory": (
        "ran past the memory limit",
        "运行时内存超过了上限，内核被结束（列表、字典或张量在无限增长？）",
    ),
    "segfault": (
        "crashed the kernel (segfault)",
        "运行时内核崩溃（段错误：例如 ctypes 访问了非法地址）",
    ),
    "signal": (
        "killed the kernel (signal {code})",
        "运行时内核被信号 {code} 结束",
    ),
    "exit": (
        "ended the kernel (exit status {code}: os._exit?)",
        "运行时内核退出（退出码 {code}：os._exit 或原生代码调用了 exit）",
    ),
}
FIND_IT = (
    "在 Jupyter 或 Colab 中“重启并运行全部单元格”，再单独运行这个 TODO 的可见检查，"
    "就能看到是哪一格、哪个输入出的问题。"
)
RESUMED = "其余的检查已在新的内核中继续评分。"


@dataclass
class KernelFault:
    """The kernel ended while cell `index` (`label`: its grade_id, or "#N") ran."""

    index: int
    label: str
    todo: int | None
    kind: str
    code: int | None = None
    timeout: int = 0

    @property
    def reason(self) -> str:
        """One line for the instructor: `TODO 12 (test_todo12_basic) crashed the kernel ...`."""
        what = KINDS[self.kind][0].format(code=self.code, timeout=self.timeout)
        who = f"TODO {self.todo} ({self.label})" if self.todo is not None else self.label
        return f"{who} {what}"

    @property
    def learner_text(self) -> str:
        """What the learner reads under the TODO (Chinese)."""
        what = KINDS[self.kind][1].format(code=self.code, timeout=self.timeout)
        who = f"TODO {self.todo}" if self.todo is not None else f"单元格 {self.label}"
        resumed = "" if self.kind == "interrupted" else RESUMED  # the same kernel went on
        return f"{who}：{what}。{resumed}{FIND_IT}"


def kind_of_death(code: int | None, oom_kills: int) -> tuple[str, int | None]:
    """(kind, code) of a kernel that died with exit status `code` (None: unknown).

    `oom_kills` is how many processes the submission's memory cgroup saw killed for memory
    while the cell ran. A signal arrives as -N (Popen), 128+N (bubblewrap) or 256-N (the
    zygote's monitor reports `waitstatus_to_exitcode & 0xFF`).
    """
    if code == TIMEBOX_EXIT_CODE:
        return "timebox", code
    if oom_kills:
        return "memory", code
    number = signal_of(code)
    if number == signal.SIGSEGV or number == signal.SIGBUS:
        return "segfault", code
    if number == signal.SIGKILL:
        return "memory", code  # nothing else here kills a kernel with SIGKILL
    if number is not None:
        return "signal", number
    return "exit", code


def signal_of(code: int | None) -> int | None:
    """The signal an exit status stands for, or None for an ordinary exit."""
    if code is None:
        return None
    if code < 0:
        return -code
    if 256 - 32 <= code < 256:  # the zygote's monitor: -N & 0xFF
        return 256 - code
    if 128 < code < 128 + 32:  # bubblewrap and shells: 128 + N
        return code - 128
    return None


def oom_kill_count(groups) -> int:
    """How many processes the memory cgroups among `groups` have killed for memory so far."""
    total = 0
    for group in groups:
        for name in ("memory.events", "memory.oom_control"):  # cgroup v2, v1
            path = Path(group) / name
            try:
                lines = path.read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    total += int(value)
    return total


def summary(faults: list[KernelFault]) -> list[str]:
    """The instructor's lines for `faults`, one per TODO (or other cell) and kind of end, the
    TODOs first: `TODO 12 ended the kernel (exit status 3: os._exit?) in 5 checks`."""
    grouped: dict[tuple, list[KernelFault]] = {}
    for fault in faults:
        key = (fault.todo is None, fault.todo or 0, fault.label if fault.todo is None else "")
        grouped.setdefault(key + (fault.kind, fault.code), []).append(fault)
    lines = []
    for _, same in sorted(grouped.items(), key=lambda item: item[0][:3]):
        first = same[0]
        if first.todo is None:
            lines.append(f"cell {first.reason}")
            continue
        what = KINDS[first.kind][0].format(code=first.code, timeout=first.timeout)
        checks = f"{len(same)} checks" if len(same) > 1 else first.label
        lines.append(f"TODO {first.todo} {what} in {checks}")
    return lines
