"""What every hidden check uses, written once: the declaration of a check and the safe calls.

The build runs this file, the part's helpers (`_<part>.py`, where the part has one) and one
check file as one code string in a scope of its own, then calls the check with the notebook's
namespace: a learner's cell cannot replace a helper. The check file defines `TODO` (or, for a
part's file, one check per TODO), `UNDER_TEST` (what the learner writes) and `TOTAL_POINTS`.

    @check(points=4, title="基本", says="随机 list 输入，内容、顺序与重复 token 都与参考实现相同")
    def check_todo1_basic(ns): ...

is the whole declaration of grade cell `test_todo1_basic`: the build reads it (without running
it) and writes the cell's first line, `# TODO 1 · 基本（4 分）：随机 list 输入，…`. Each check runs
in a time box (`_timebox.py`, joined ahead of this file): `BOX_SECONDS`, or `seconds=` in the
declaration for a check whose reference is slow (`bench/bench_timeboxes.py` measures each).
"""

import builtins

_BUILTINS = ("type", "len", "list", "tuple", "range", "repr", "isinstance", "zip", "all")


def check(points, title, says, seconds=BOX_SECONDS):
    """Declare `check_todo<N>_<name>` as a grade cell worth `points`, its first line from `title`
    and `says`. When it runs, its messages read "TODO N · title: ..." and an unfinished TODO is
    named as such; the builtins it relies on are checked first; past `seconds` it fails with a
    message naming the call that did not return (`run_boxed`)."""

    def wrap(function):
        number = int(function.__name__.split("_")[1].removeprefix("todo"))
        todo = f"TODO {number}"
        method = UNDER_TEST if isinstance(UNDER_TEST, str) else UNDER_TEST[number]

        def timed_out(timeout):
            return _timed_out(f"{todo} · {title}", method, timeout)

        def run(ns):
            _guard(todo)
            try:
                return run_boxed(lambda: function(ns), seconds, timed_out)
            except CheckTimeout as timeout:
                raise AssertionError(timed_out(timeout)) from None
            except NotImplementedError:
                raise NotImplementedError(
                    f"{todo} · {title}：请先完成 {todo}（{method} 仍在 raise NotImplementedError）"
                ) from None
            except AssertionError as error:
                raise AssertionError(_titled(str(error), todo, title)) from None

        run.__name__, run.__doc__ = function.__name__, function.__doc__
        run.points, run.title, run.says, run.seconds = points, title, says, seconds
        return run

    return wrap


def _timed_out(heading, method, timeout):
    """The message of a check whose box ended: the input `_call` was given, where there is one,
    else the learner's call as it was; then where it stopped and the likely cause."""
    calls = [f for f, _ in timeout.stop if f.f_code is _call.__code__]
    where = calls[0].f_locals.get("where") if calls else None
    text = timeout_text(timeout, lambda frame: frame.f_code.co_name == method, show_call=not where)
    return f"{where or heading}：{text}"


def _titled(text, todo, title):
    """A message that starts "TODO N: ..." or "TODO N [input]: ..." gets the check's title after
    "TODO N"; one that already has a title, or names another TODO, stays as it is."""
    rest = text[len(todo) :]
    if not text.startswith(todo) or rest[:1].isdigit() or rest.startswith(" · "):
        return text
    return f"{todo} · {title}{rest}"


def _guard(todo):
    for name in _BUILTINS:
        kind = type(getattr(builtins, name)).__name__
        assert kind in ("builtin_function_or_method", "type"), (
            f"{todo}：内置函数 {name} 被替换，本格无法评分"
        )


def _call(where, method, *args):
    """Call the learner's method; an exception becomes a message naming the input (type and text
    kept). A NotImplementedError passes on: `check` names the unfinished TODO."""
    try:
        return method(*args)
    except NotImplementedError:
        raise
    except Exception as error:
        raise AssertionError(f"{where} 抛出 {type(error).__name__}: {error}") from None


def _plain(value):
    """A comparable copy that no __eq__ can fool: exact list / tuple (or subclass) / scalars."""
    if type(value) is list:
        return ("list", tuple(_plain(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_plain(v) for v in value))
    if type(value) is dict:
        return ("dict", tuple(sorted((repr(k), _plain(v)) for k, v in value.items())))
    if type(value) in (int, float, str, bool, type(None)):
        return (type(value).__name__, value)
    return ("other", id(value))


def _varies(where, results, expected):
    """A property check (types, no mutation, an edge case) pays only for code that computes:
    some answer must be right, and where the right answers differ, the answers must too."""
    results, expected = [_plain(r) for r in results], [_plain(e) for e in expected]
    if not any(r == e for r, e in zip(results, expected)):
        raise AssertionError(
            f"{where}：这些输入没有一个得到正确结果，这一格只在方法至少算对一部分输入时给分"
        )
    if len(set(expected)) > 1 and len(set(results)) == 1:
        raise AssertionError(
            f"{where}：这几个输入应得到不同的结果，却都返回同一个值："
            "这一格只在方法真正按输入计算时给分"
        )
