"""The time box: each check runs the learner's code for at most a few seconds, then fails, and the
next check runs.

Written once, used twice: the build puts this file ahead of `_common.py` in every grade cell (the
hidden checks, `check` boxes each one) and into the notebook's cell `check_time_box`, ahead of the
first visible check (each runner boxes each check). Standard library only; Python 3.10+.

How a box ends code that does not return (SIGALRM, so Linux and macOS, in the main thread; where
there is no SIGALRM, or off the main thread, the code runs without a box and nothing is said):
1. After `seconds` that the code ran or slept (time spent waiting for a CPU on a busy machine
   does not count, where Linux says how much that was; at most `_WALL_CAP` times `seconds` of
   wall time), the alarm raises `CheckTimeout` where the code is (in a `time.sleep` too). It is
   a BaseException, so an `except Exception` in the learner's code lets it through.
2. Swallowed (`except:` / `except BaseException:` around a loop's body): the alarm comes back
   every `_TICK_SECONDS` and, from then on, every line run below the box raises it again (a
   frame trace): an exception raised in an except clause's body leaves that `try`.
3. Still inside `_GRACE_SECONDS` after the box (nested catch-alls; C code that never checks for
   signals cannot be reached at all): the last words go to stdout and the kernel ends with exit
   status `EXIT_STATUS`, which the grader reads as "this cell's box ended the kernel".
A box inside a box runs its code plainly (the outer box stays in charge). Afterwards the previous
SIGALRM handler, timer and trace function are back as they were.
"""

import linecache
import os
import signal
import sys
import sysconfig
import threading
import time

BOX_SECONDS = 4  # every check's box, unless its @check says seconds=; the references take < 0.05 s
EXIT_STATUS = 86  # the kernel's exit status when a box had to end it (step 3)
_TICK_SECONDS = 0.1  # after the box: how often the alarm comes back while it is swallowed
_GRACE_SECONDS = 3  # swallowed for this long after the box: end the kernel
_WALL_CAP = 5  # a box ends after this many times its seconds of wall time, however busy the CPUs
_SHOWN_CHARS = 60  # how much of each argument a message shows


class CheckTimeout(BaseException):
    """The box of a check ended. `seconds`: the box; `swallowed`: the code caught it at least
    once; `stop`: (frame, line number) pairs from where the code was, innermost first."""

    def __init__(self, seconds, swallowed=False, stop=()):
        super().__init__(f"{seconds} s")
        self.seconds, self.swallowed, self.stop = seconds, swallowed, list(stop)


def run_boxed(body, seconds=BOX_SECONDS, last_words=None):
    """body() under a box of `seconds`: its result, or CheckTimeout once the box ends (also when
    the code swallowed the alarm and then returned or raised something else). `last_words(timeout)`
    is the line printed before the kernel is ended (step 3)."""
    boxable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not boxable or getattr(signal.getsignal(signal.SIGALRM), "time_box", False):
        return body()
    box_frame, state = sys._getframe(), {"alarms": 0, "stop": ()}

    def line_raises(frame, event, arg):
        if frame.f_code in _OWN_CODE:
            return None
        if event == "line":
            raise CheckTimeout(seconds, True, state["stop"])
        return line_raises

    def on_alarm(signum, frame):
        stack = _frames_below(frame, box_frame)
        if stack is None:  # the body has returned (or not started): nothing to stop
            return
        if not state["alarms"]:  # the box counts time run or slept, not time spent waiting for a CPU
            ran = time.monotonic() - state["armed"] - (_waited() - state["waited"])
            importing = any(f.f_code.co_filename.startswith("<frozen importlib") for f, _ in stack)
            if (ran < seconds or importing) and time.monotonic() - state["armed"] < _WALL_CAP * seconds:
                # not yet, or inside an import (ended there, a module such as torch stays half made)
                signal.setitimer(signal.ITIMER_REAL, max(seconds - ran, _TICK_SECONDS), _TICK_SECONDS)
                return
        state["alarms"] += 1
        if state["alarms"] == 1:
            state["began"], state["stop"] = time.monotonic(), stack
            raise CheckTimeout(seconds, False, stack)
        if time.monotonic() - state["began"] > _GRACE_SECONDS:
            _end_kernel(last_words, CheckTimeout(seconds, True, state["stop"]))
        sys.settrace(line_raises)
        for below, _ in stack:
            below.f_trace = line_raises
        raise CheckTimeout(seconds, True, state["stop"])

    on_alarm.time_box = True
    previous = (signal.getsignal(signal.SIGALRM), sys.gettrace())
    signal.signal(signal.SIGALRM, on_alarm)
    state["armed"], state["waited"] = time.monotonic(), _waited()
    previous_timer = signal.setitimer(signal.ITIMER_REAL, seconds, _TICK_SECONDS)
    try:
        result, error = body(), None
    except BaseException as raised:
        result, error = None, raised
    _restore(*previous, previous_timer)
    if state["alarms"]:  # also when the code caught the alarm, then returned or raised
        swallowed = state["alarms"] > 1 or not isinstance(error, CheckTimeout)
        raise CheckTimeout(seconds, swallowed, state["stop"]) from error
    if error is not None:
        raise error
    return result


def _restore(handler, trace, timer):
    """The SIGALRM handler, trace function and timer as they were before the box."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    sys.settrace(trace)
    signal.signal(signal.SIGALRM, signal.SIG_DFL if handler is None else handler)
    if timer[0]:
        signal.setitimer(signal.ITIMER_REAL, *timer)


def _waited():
    """Seconds this thread has spent runnable but waiting for a CPU (Linux's schedstat); 0.0 where
    that is not known, and the box is then wall-clock time."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _frames_below(frame, box_frame):
    """[(frame, line)] from `frame` up to the box's own frame (excluded), innermost first; None
    when `frame` is not running inside the box."""
    stack = []
    while frame is not None and frame is not box_frame:
        if frame.f_code not in _OWN_CODE:
            stack.append((frame, frame.f_lineno))
        frame = frame.f_back
    return stack if frame is box_frame and stack else None


def _end_kernel(last_words, timeout):
    """Step 3: say why on stdout, give the kernel's output thread a moment, end the process."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    sys.settrace(None)
    try:
        if last_words is not None:
            print(last_words(timeout), flush=True)
        time.sleep(0.5)
    finally:
        os._exit(EXIT_STATUS)


def stopped_at(timeout, prefer=None):
    """Where the learner's code was when the box ended: (frame, line), innermost first, of the
    first frame that `prefer(frame)` picks (the TODO's method), else of the first that is neither
    the box's nor a library's (torch, the standard library); None if none."""
    libraries = tuple({sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib")})
    ours = [
        (frame, line)
        for frame, line in timeout.stop
        if not frame.f_code.co_filename.startswith((*libraries, "<frozen"))
    ]
    picked = [(frame, line) for frame, line in ours if prefer and prefer(frame)]
    return (picked or ours or [None])[0]


def timeout_text(timeout, prefer=None, show_call=True):
    """What a message says after "TODO N ...：": the call that did not return (with its
    arguments as they were then, and `prefer(frame)` where that is a name such as "TODO 17"),
    the line it was on, and the likely cause."""
    where = stopped_at(timeout, prefer)
    text = f"在 {timeout.seconds} 秒内没有返回（时限是参考实现用时的几十倍）"
    source = ""
    if where is not None:
        frame, line = where
        owner = prefer(frame) if prefer else None
        owner = f"（{owner}）" if isinstance(owner, str) else " "
        text = f"{_call_text(frame)}{owner}{text}" if show_call else text
        source = linecache.getline(frame.f_code.co_filename, line).strip()
        if source:
            text += f"，停在 {frame.f_code.co_name} 的第 {line - frame.f_code.co_firstlineno + 1} 行：{source}"
    if "sleep" in source and not timeout.swallowed:
        cause = "time.sleep 等得太久？"
    else:
        cause = "死循环？比如条件永远成立的 while：预算或计数没有减少，或循环变量没有前进。"
    if timeout.swallowed:
        cause += (
            "超时还被你的代码吞掉了（except: 或 except BaseException: 包住了循环体）："
            "只捕获你预期的那种异常。"
        )
    return f"{text}。{cause}"


def _call_text(frame):
    """`name(arg=value, ...)` of a frame, each value shown briefly (self left out)."""
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    shown = [f"{n}={_shown(frame.f_locals.get(n))}" for n in names if n != "self"]
    return f"{code.co_name}({', '.join(shown)})"


def _shown(value, depth=0):
    """A short text for a value: plain data written out, anything else by its type's name (a
    learner's __repr__ is never called: it could loop too)."""
    kind = type(value)
    if kind in (int, float, bool, type(None)):
        text = repr(value)
    elif kind is str:
        text = repr(value[:_SHOWN_CHARS])
    elif kind in (list, tuple, dict) and depth < 2:
        if kind is dict:
            items = [f"{_shown(k, 2)}: {_shown(v, depth + 1)}" for k, v in list(value.items())[:8]]
        else:
            items = [_shown(v, depth + 1) for v in value[:8]]
        inner = ", ".join(items) + (", ..." if len(value) > 8 else "")
        text = {list: "[{}]", tuple: "({})", dict: "{{{}}}"}[kind].format(inner)
    else:
        text = f"<{kind.__name__}>"
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 4] + " ..."


def _codes(*functions):
    """The code objects of `functions` and of the functions defined inside them."""
    found = set()
    for code in (f.__code__ for f in functions):
        found |= {code, *(c for c in code.co_consts if type(c) is type(code))}
    return frozenset(found)


_OWN_CODE = _codes(run_boxed, _restore, _waited, _frames_below, _end_kernel, CheckTimeout.__init__)
