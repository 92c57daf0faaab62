"""One self-contained HTML page per student, in Chinese, that starts with the verdict.

At the top: the score of each part, then each TODO's points and, for a TODO that lost points,
which of its checks failed and the first message each gave; the teacher's adjustments; the
repairs made before grading. Below, folded (`<details>`): the whole autograded notebook. For a
submission that could not be graded: what happened and what to do, in Chinese.

Rendered from nbgrader's autograded notebook and its gradebook scores. Hidden tests never
appear: grade cells show their source with the hidden regions removed, and their errors show
only the assertion's message (a traceback would quote the hidden test's lines). No machine path
appears either (`scrub_paths`). nbgrader's own `generate_feedback` shows hidden tests unless
configured, and costs about 1.5 s a notebook; this page costs milliseconds.
"""

from __future__ import annotations

import re

import nbformat

from ..authoring.checkcells import check_label, check_titles
from ..authoring.nbsource import PARTS, nbgrader_meta, part_of, strip_hidden_tests, todo_number
from ..faults.causes import cause_by_todo, definition_errors
from .formats import esc, html_page
from .scores import counted_score, max_score

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# An absolute path of two parts or more (/tmp/ch34-grading-x/0001/scratch, /root/.venv/lib/...),
# not a URL's (`https://host/...`) nor a fraction (`1/2`).
MACHINE_PATH = re.compile(r"(?<![\w./:~-])(?:/[^\s/\"'<>()\[\]{},;:]+){2,}/?")
STYLE = """
body { font: 15px/1.5 system-ui, "Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", sans-serif; max-width: 60em; margin: 2em auto; padding: 0 1em; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; white-space: pre-wrap; }
table { border-collapse: collapse; margin: .4em 0 1em; } td, th { border: 1px solid #ccc; padding: .2em .6em; vertical-align: top; text-align: left; }
.pass { color: #1a7f37; } .fail { color: #cf222e; } .adjusted { color: #0550ae; } .skipped { color: #57606a; } .cell { border-left: 4px solid #ccc; padding-left: .8em; margin: 1em 0; }
.cell.fail { border-color: #cf222e; } .cell.pass { border-color: #1a7f37; } .cell.adjusted { border-color: #0550ae; }
.todos { width: 100%; } .todos td:nth-child(-n+2) { white-space: nowrap; } .todos td:nth-child(3) { width: 100%; }
.note { background: #fff8c5; border: 1px solid #d4a72c; padding: .6em 1em; }
ul.checks { margin: 0; padding-left: 1.2em; } code { font-size: 90%; }
details > summary { cursor: pointer; font-size: 1.3em; font-weight: bold; margin: 1em 0; }
"""

# What the student reads per status: what happened, and what to do about it.
TEACHER_WILL_LOOK = "这不是你的问题，不需要重新提交：老师会查看并重新评分。"
STATUS_TEXT = {
    "graded": ("已自动评分。", ""),
    "flagged": (
        "你的 notebook 里有看起来会干扰评分的代码（例如替换内置函数、读取隐藏测试），本次暂记 0 分。",
        "老师会人工复查；如果你认为这是误判，请直接联系老师。",
    ),
    "kernel_died": (
        "运行你的 notebook 时，Python 内核中途退出了（例如调用了 os._exit、程序崩溃或超过内存上限）。",
        "在 Jupyter 或 Colab 中选择“重启并运行全部单元格”，确认能从头跑完，再重新提交。",
    ),
    "timeout": (
        "运行你的 notebook 超过了时间上限：某个单元格一直没有结束（死循环，或忽略了中断？）。",
        "检查循环的结束条件，从头运行一遍，确认几分钟内能跑完，再重新提交。",
    ),
    "empty_file": (
        "提交的文件是空的。",
        "先保存 notebook，再用“文件 → 下载 → 下载 .ipynb”重新下载，然后提交这个文件。",
    ),
    "invalid_json": (
        "提交的文件已损坏，不是可以读取的 notebook（JSON 格式错误或不是 UTF-8 文本）。",
        "不要手动编辑 .ipynb 文件；用“文件 → 下载 → 下载 .ipynb”重新下载，然后提交这个文件。",
    ),
    "not_a_notebook": (
        "提交的文件不是 Jupyter notebook（或是太旧的 notebook 格式）。",
        "在 Jupyter 或 Colab 中打开你做作业的 notebook，保存后下载 .ipynb 文件再提交。",
    ),
    "wrong_assignment": (
        "提交的 notebook 不是本次作业（第 34 章：前缀缓存与分块预填充）。",
        "请提交你为本次作业完成的那个 notebook。",
    ),
    "unreadable": (
        "评分程序读不到你提交的文件。",
        "请重新下载后再提交一次；如果仍然这样，请联系老师。",
    ),
    "grader_crash": ("评分程序在评你的 notebook 时自身出了故障。", TEACHER_WILL_LOOK),
    "grader_error": ("评分程序没能完成对你的 notebook 的评分。", TEACHER_WILL_LOOK),
}

# normalize.py's repair lines (English, for the instructor) as the student reads them.
REPAIR_TEXT = (
    (r"set the missing notebook format version", "补上了缺失的 notebook 格式版本号"),
    (r"(?:upgraded|converted) notebook format (4\.\d+)", r"把 notebook 格式从 \1 转换为 4.5"),
    (r"removed Colab notebook metadata", "删除了 Colab 写入的 notebook 元数据"),
    (r"dropped (\d+) malformed", r"丢弃了 \1 个已损坏的单元格"),
    (r"turned (\d+) .* into raw cells", r"把 \1 个类型不明的单元格改为 raw 单元格"),
    (r"assigned (\d+) missing cell id", r"补上了 \1 个缺失的单元格 id"),
    (r"replaced (\d+) duplicated cell id", r"替换了 \1 个重复的单元格 id"),
    (r"replaced (\d+) invalid cell id", r"替换了 \1 个无效的单元格 id"),
    (r"removed Colab metadata from (\d+) cell", r"删除了 \1 个单元格上 Colab 写入的元数据"),
    (r"kept (\d+) duplicates? of (\S+) as scratch", r"\2 的 \1 个副本保留为草稿单元格（不评分）"),
    (
        r"re-attached (\d+) cells? whose nbgrader metadata was lost: (.*)",
        r"\1 个单元格丢失了评分元数据，已按内容重新对应：\2",
    ),
    (r"put (\d+) moved cells? back", r"把 \1 个被移动的单元格放回原来的位置"),
    (r"restored (\d+) deleted instruction cell", r"恢复了 \1 个被删除的说明单元格"),
    (
        r"restored deleted solution cell (\S+)",
        r"恢复了被删除的答案单元格 \1（恢复后是未作答的初始代码）",
    ),
    (r"restored deleted (?:[\w-]+) cell (\S+)", r"恢复了被删除的单元格 \1"),
    (r"restored (\w+) type of (?:[\w-]+) cell (\S+)", r"把单元格 \2 的类型恢复为 \1"),
    (r"restored edited (?:[\w-]+) cell (\S+)", r"恢复了被改动的只读单元格 \1（测试按原样运行）"),
)


def render(
    student_id: str,
    nb,
    scores: dict,
    *,
    status: str = "graded",
    reason: str = "",
    repairs=(),
    overrides=(),
    final: dict | None = None,
    files: tuple[str, list[str], str] | None = None,
    name: str = "",
) -> str:
    """The feedback page. `scores` maps grade_id to (score, max_score); `nb` is the autograded notebook.

    `reason` is the instructor's (English) and is not shown; the student reads `STATUS_TEXT`.
    `overrides` are the teacher's adjustments: dicts with `column`, `value` and `note`; `final`
    is the grades.csv row after them (score, parts, TODOs), shown with the as-graded numbers
    beside. `files` is (the file graded, the student's files not graded, the rule that chose);
    `name` the roster's name of the student. A flagged page lists no check: its scores were
    zeroed before anyone looked (`flagged_section`).
    """
    errors = definition_errors(nb)
    messages = with_causes(failure_messages(nb), scores, errors)
    titles = check_titles(nb)
    total = counted_score(scores)  # as grades.csv's `score`: the counted parts only
    maximum = max_score([(g, p) for g, (_, p) in scores.items()])
    score = (final or {}).get("score")
    parts = [
        f"<h1>{who(student_id, name)}：{shown(score, total)} / {maximum:g}"
        f"{beside(score, total)}</h1>"
    ]
    if status != "graded":
        what, todo = STATUS_TEXT.get(status, STATUS_TEXT["grader_error"])
        parts.append(f"<p class='note fail'>{esc(what)}{esc(todo)}（状态：{esc(status)}）</p>")
    parts.append(files_section(files))
    parts.append(overrides_section(overrides, titles))
    if status == "flagged":
        parts.append(flagged_section(scores, final or {}))
    else:
        parts.append(causes_section(errors))
        parts.append(verdict(scores, messages, final or {}, titles))
    parts.append(repairs_section(repairs))
    shown_scores = {} if status == "flagged" else scores
    cells = "\n".join(
        code_cell(cell, shown_scores, final or {}) for cell in nb.cells if cell.cell_type == "code"
    )
    parts.append(
        f"<details><summary>完整的 notebook（逐格结果，点击展开）</summary>\n{cells}\n</details>"
    )
    return page(student_id, "\n".join(p for p in parts if p))


def failure_page(
    student_id: str,
    status: str,
    reason: str,
    repairs=(),
    overrides=(),
    final=None,
    files=None,
    name: str = "",
) -> str:
    """The page for a submission nbgrader could not grade: what happened and what to do, in Chinese.

    `reason` is the instructor's (English, may hold machine paths) and is not shown; `final`
    and `files` as for `render`.
    """
    what, todo = STATUS_TEXT.get(status, STATUS_TEXT["grader_error"])
    score = (final or {}).get("score")
    counted = "在重新评分之前，这次提交记 0 分。"
    if score not in (None, "", "0"):
        counted = f"老师调整后的得分：{esc(score)}（自动评分 0）。"
    parts = [
        f"<h1>{who(student_id, name)}：未能自动评分</h1>",
        f"<p class='note'>{esc(what)}</p>",
        f"<p><b>怎么办：</b>{esc(todo)}</p>",
        f"<p>状态：<code>{esc(status)}</code>。{counted}</p>",
        files_section(files),
        overrides_section(overrides),
        repairs_section(repairs),
    ]
    return page(f"{student_id}: {status}", "\n".join(p for p in parts if p))


def who(student_id: str, name: str = "") -> str:
    """The page's heading names the student: `name（student_id）`, or the id alone."""
    return f"{esc(name)}（{esc(student_id)}）" if name else esc(student_id)


def shown(final, graded: float) -> str:
    """The number a student reads: the teacher's `final` value where there is one."""
    return f"{graded:g}" if final in (None, "") else f"{float(final):g}"


def beside(final, graded: float) -> str:
    """The as-graded number, put beside a `final` value that differs from it; else ''."""
    if final in (None, "") or float(final) == graded:
        return ""
    return f"（自动评分 {graded:g}）"


def files_section(files) -> str:
    """Which of the student's files was graded, and which were not (and by what rule)."""
    if not files:
        return ""
    graded, others, rule = files
    text = f"<p>评分的文件：<code>{esc(graded)}</code>"
    if others:
        names = "、".join(f"<code>{esc(o)}</code>" for o in others)
        text += f"。<b>没有评分的文件：</b>{names}（你交了不止一个 notebook，评分的是{esc(rule_for_learner(rule))}）"
    return text + "</p>"


def rule_for_learner(rule: str) -> str:
    """The intake's rule (`identify.choose`, or the teacher's choices.csv) as the learner reads it:
    the teacher's file and line left out."""
    return "老师指定的那个" if rule.startswith("老师") else rule


def verdict(scores: dict, messages: dict, final: dict | None = None, titles=None) -> str:
    """Per part: its subtotal, then one row per TODO with its points and its failed checks.

    `final` holds the teacher's adjusted numbers (grades.csv's row: cells, TODOs, parts), shown
    beside the graded and never as a failure. A part that does not count, left unfinished (no
    point, every failed check unfinished), is one line; `titles` (`checkcells.check_titles`) name
    the checks.
    """
    final, titles = final or {}, titles or {}
    groups: dict = {}
    for grade_id, score in scores.items():
        part = part_of(grade_id)
        todo = todo_number(grade_id)
        groups.setdefault(part, {}).setdefault(todo, []).append((grade_id, *score))
    html_parts = []
    for part in [*PARTS, None]:
        if part not in groups:
            continue
        todos = groups[part]
        earned = sum(s for checks in todos.values() for _, s, _ in checks)
        points = sum(p for checks in todos.values() for _, _, p in checks)
        title = part.title if part else "其他评分单元格"
        note = "" if part is None or part.counted else "（不计入总分）"
        value = final.get(part.key) if part else None
        checks = [c for todo_checks in todos.values() for c in todo_checks]
        if part is not None and not part.counted and skipped(checks, messages, value):
            html_parts.append(
                f"<h2>{esc(title)}：{earned:g} / {points:g}{note}</h2><p class=skipped>选做，"
                f"没有完成：TODO {'、'.join(str(t) for t in sorted(t for t in todos if t))} 的 "
                f"{len(checks)} 个检查都停在“请先完成”。不影响总分。</p>"
            )
            continue
        css = standing(value, earned, points)
        rows = "".join(
            todo_row(todo, checks, messages, final, titles)
            for todo, checks in sorted(todos.items(), key=lambda t: (t[0] is None, t[0] or 0))
        )
        html_parts.append(
            f"<h2>{esc(title)}：<span class={css}>{shown(value, earned)} / {points:g}</span>"
            f"{beside(value, earned)}{note}</h2>"
            f"<table class=todos><tr><th>TODO</th><th>得分</th><th>结果</th></tr>{rows}</table>"
        )
    return "\n".join(html_parts)


def skipped(checks: list, messages: dict, final=None) -> bool:
    """Whether a part's checks (grade_id, score, points) all scored 0 as unfinished TODOs."""
    return (
        final in (None, "", "0")
        and all(s == 0 for _, s, _ in checks)
        and all(unfinished(messages.get(grade_id, "")) for grade_id, _, _ in checks)
    )


def unfinished(message: str) -> bool:
    """Whether a check's message says its TODO still raises NotImplementedError."""
    return message.startswith("NotImplementedError")


def standing(final, earned: float, points: float) -> str:
    """The css class of a number: pass (full points), adjusted (the teacher's), else fail."""
    if shown(final, earned) == f"{points:g}":
        return "pass"
    return "adjusted" if beside(final, earned) else "fail"


def todo_row(todo, checks: list, messages: dict, final: dict, titles: dict) -> str:
    """A TODO's points (final beside graded) and its failed checks: an overridden check shows
    the teacher's value, unfinished checks are one line."""
    earned = sum(s for _, s, _ in checks)
    points = sum(p for _, _, p in checks)
    value = final.get(f"todo{todo}")
    failed = [(grade_id, s, p) for grade_id, s, p in checks if s < p]
    items = []
    waiting = [c for c in failed if unfinished(messages.get(c[0], "")) and c[0] not in final]
    if len(waiting) > 1:
        items.append(
            f"<li>{len(waiting)} 个检查没有运行：请先完成 TODO {todo}"
            f"（仍在 raise NotImplementedError）</li>"
        )
    plain = []  # failed checks the teacher did not adjust
    for grade_id, s, p in failed:
        if len(waiting) > 1 and (grade_id, s, p) in waiting:
            continue
        cell = final.get(grade_id)
        if beside(cell, s):
            css = standing(cell, s, p)
            items.append(
                f"<li class={css}>{check_name(grade_id, titles)}"
                f"（{shown(cell, s)} / {p:g}，老师调整；自动评分 {s:g}）</li>"
            )
            continue
        plain.append((grade_id, s, p))
    adjusted = " class=adjusted" if beside(value, earned) else ""  # the TODO was overridden
    items += failed_checks(plain, messages, titles, adjusted)
    result = (
        f"<ul class=checks>{''.join(items)}</ul>" if items else "<span class=pass>全部通过</span>"
    )
    label = f"TODO {todo}" if todo is not None else esc(checks[0][0])
    css = standing(value, earned, points)
    points_text = f"{shown(value, earned)} / {points:g}{beside(value, earned)}"
    return f"<tr><td>{label}</td><td class={css}>{points_text}</td><td>{result}</td></tr>"


def check_name(grade_id: str, titles: dict) -> str:
    """A check as the learner reads it: its title, else its grade id."""
    return esc(titles[grade_id][0]) if grade_id in titles else f"<code>{esc(grade_id)}</code>"


def failed_checks(failed: list, messages: dict, titles: dict, css: str = "") -> list:
    """<li> items: a TODO's failed checks with the first message of each; checks that failed
    with the same message (a cause they share: an answer cell that did not run, a dead kernel)
    share a line. `css` is the items' class attribute (the TODO was adjusted)."""
    by_message: dict = {}
    for grade_id, s, p in failed:
        message = messages.get(grade_id) or "没有错误信息：这个检查没有通过"
        by_message.setdefault(message, []).append((grade_id, s, p))
    items = []
    for message, checks in by_message.items():
        if len(checks) == 1:
            ((grade_id, s, p),) = checks
            items.append(
                f"<li{css}>{check_name(grade_id, titles)}（{s:g} / {p:g}）：{esc(message)}</li>"
            )
            continue
        earned, points = sum(c[1] for c in checks), sum(c[2] for c in checks)
        names = "、".join(check_name(c[0], titles) for c in checks)
        items.append(
            f"<li{css}>{len(checks)} 项检查（{earned:g} / {points:g}）：{esc(message)}"
            f"<br><small>{names}</small></li>"
        )
    return items


def with_causes(messages: dict, scores: dict, errors) -> dict:
    """`messages` with the cause put first for each failed check of a TODO whose answer cell did
    not run (`faults/causes.py`): the learner reads the cause, not its consequence."""
    causes = cause_by_todo(errors)
    changed = dict(messages)
    for grade_id, (score, points) in scores.items():
        cause = causes.get(todo_number(grade_id))
        if cause is not None and score < points:
            changed[grade_id] = "答案单元格没能运行（见上），这个检查因此失败：" + cause.error
    return changed


def causes_section(errors) -> str:
    """One line per answer cell that did not run, above the table, or '' when all ran."""
    if not errors:
        return ""
    return (
        "<div class='note fail'><b>先看这里：</b>"
        + bullets(e.learner_text for e in errors)
        + "</div>"
    )


def flagged_section(scores: dict, final: dict) -> str:
    """A flagged page's parts, without checks: each was zeroed before anyone looked."""
    rows = []
    for part in PARTS:
        points = sum(p for g, (_, p) in scores.items() if part_of(g) is part)
        if points:
            value = final.get(part.key)
            rows.append(
                f"<tr><td>{esc(part.title)}</td><td>{shown(value, 0.0)} / {points:g}"
                f"{beside(value, 0.0)}</td></tr>"
            )
    return (
        "<p>在老师复查之前，各个检查的结果不显示：复查之后，老师会给出得分或请你说明。</p>"
        f"<table class=todos><tr><th>部分</th><th>得分</th></tr>{''.join(rows)}</table>"
    )


def failure_messages(nb) -> dict:
    """grade_id -> the first thing that went wrong in that grade cell (error message or stderr)."""
    messages = {}
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                text = f"{output.ename}: {output.evalue}" if output.evalue else output.ename
            elif output.output_type == "stream" and output.name == "stderr":
                text = "测试写出了错误输出（stderr）：" + output.text.strip()[:300]
            else:
                continue
            messages[meta.get("grade_id", "")] = scrub_paths(ANSI.sub("", text))
            break
    return messages


def repairs_section(repairs) -> str:
    if not repairs:
        return ""
    return (
        "<h2>评分前的整理</h2><p>你的 notebook 在评分前被自动整理过（不影响得分）：</p>"
        + bullets(repair_text(line) for line in repairs)
    )


def repair_text(line: str) -> str:
    """One repair line of normalize.py, in Chinese."""
    for pattern, chinese in REPAIR_TEXT:
        match = re.match(pattern, line)
        if match:
            return scrub_paths(match.expand(chinese))
    return "对 notebook 的格式做了一处整理"


def scrub_paths(text: str) -> str:
    """`text` with every absolute machine path cut to its last part (`…/kernel.py`)."""
    return MACHINE_PATH.sub(lambda m: "…/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], str(text))


def overrides_section(overrides, titles=None) -> str:
    """The instructor's adjustments (dicts with column, value, note), or '' when there are none;
    a check is named by its title (`titles`)."""
    if not overrides:
        return ""
    names = {"score": "总分"} | {part.key: part.title for part in PARTS}
    names |= {grade_id: check_label(grade_id, titles) for grade_id in titles or {}}
    todos = [o["column"] for o in overrides if re.fullmatch(r"todo\d+", o["column"])]
    names |= {column: f"TODO {column[4:]}" for column in todos}
    rows = "".join(
        f"<tr><td>{esc(names.get(o['column'], o['column']))}</td>"
        f"<td>{esc(o['value'])}</td><td>{esc(o.get('note', ''))}</td></tr>"
        for o in overrides
    )
    return (
        "<h2>老师的调整</h2><p>以下分数由老师手动设定，以此为准：</p>"
        '<table style="margin-bottom:1em"><tr><th>项目</th><th>分数</th><th>说明</th></tr>'
        f"{rows}</table>"
    )


def page(title: str, body: str) -> str:
    """A complete, self-contained HTML document (`formats.html_page`)."""
    return html_page(esc(title), STYLE, body, lang="zh-CN")


def bullets(lines) -> str:
    return "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


def code_cell(cell, scores: dict, final: dict | None = None) -> str:
    meta = nbgrader_meta(cell)
    grade_id = meta.get("grade_id", "")
    is_grade = bool(meta.get("grade"))
    source = strip_hidden_tests(cell.source).rstrip() if is_grade else cell.source
    verdict_line, css = "", ""
    if grade_id in scores:
        score, points = scores[grade_id]
        value = (final or {}).get(grade_id)
        css = standing(value, score, points)
        verdict_line = (
            f"<p class={css}><b>{esc(grade_id)}</b>：{shown(value, score)} / {points:g}"
            f"{beside(value, score)}</p>"
        )
    outputs = "".join(output_html(o, is_grade) for o in joined_streams(cell.get("outputs", [])))
    return f'<div class="cell {css}">{verdict_line}<pre>{esc(source)}</pre>{outputs}</div>'


def joined_streams(outputs) -> list:
    """`outputs` with each run of stream outputs of one stream made one: how the kernel split
    a text into messages depends on timing, and the page must not (as Jupyter shows it)."""
    joined = []
    for output in outputs:
        last = joined[-1] if joined else None
        if (
            output.output_type == "stream"
            and last is not None
            and last.output_type == "stream"
            and last.name == output.name
        ):
            joined[-1] = nbformat.from_dict({**last, "text": last.text + output.text})
        else:
            joined.append(output)
    return joined


def output_html(output, is_grade: bool) -> str:
    if output.output_type == "stream":
        return f"<pre>{esc(scrub_paths(output.text))}</pre>"
    if output.output_type == "error":
        if is_grade:  # the message says what is wrong; the traceback would show hidden lines
            text = f"{output.ename}: {output.evalue}"
        else:
            text = ANSI.sub("", chr(10).join(output.traceback))
        return f"<pre class=fail>{esc(scrub_paths(text))}</pre>"
    text = output.get("data", {}).get("text/plain")
    return f"<pre>{esc(scrub_paths(text))}</pre>" if text else ""
