"""One self-contained HTML page per student: scores per TODO, what failed and why, what was repaired;
or, for a submission that could not be graded, what happened and what to fix.

Rendered from nbgrader's autograded notebook and its gradebook scores. Hidden tests never
appear: grade cells show their source with the hidden regions removed, and their errors show
only the assertion's message (a traceback would quote the hidden test's lines). nbgrader's own
`generate_feedback` shows hidden tests unless configured, and costs about 1.5 s a notebook
(HTML re-parsed with BeautifulSoup); this page costs milliseconds.
"""

from __future__ import annotations

import html
import re

from .nbsource import PARTS, nbgrader_meta, strip_hidden_tests

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STYLE = """
body { font: 15px/1.5 system-ui, "PingFang SC", "Microsoft YaHei", sans-serif; max-width: 60em; margin: 2em auto; padding: 0 1em; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; white-space: pre-wrap; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: .2em .6em; }
.pass { color: #1a7f37; } .fail { color: #cf222e; } .cell { border-left: 4px solid #ccc; padding-left: .8em; margin: 1em 0; }
.cell.fail { border-color: #cf222e; } .cell.pass { border-color: #1a7f37; }
"""


def render(
    student_id: str,
    nb,
    scores: dict,
    *,
    status: str = "graded",
    reason: str = "",
    repairs=(),
    overrides=(),
) -> str:
    """The feedback page. `scores` maps grade_id to (score, max_score); `nb` is the autograded notebook."""
    total = sum(score for score, _ in scores.values())
    maximum = sum(points for _, points in scores.values())
    parts = [f"<h1>{esc(student_id)}：{total:g} / {maximum:g}</h1>", overrides_section(overrides)]
    if status != "graded":
        parts.append(f"<p class=fail><b>{esc(status)}</b>：{esc(reason)}</p>")
    parts.append(summary_table(scores))
    if repairs:
        parts.append(
            f"<h2>评分前的修复</h2><p>你的 notebook 在评分前被整理过（不影响得分）：</p>{bullets(repairs)}"
        )
    parts.append("<h2>逐格结果</h2>")
    for cell in nb.cells:
        if cell.cell_type == "code":
            parts.append(code_cell(cell, scores))
    return page(student_id, "\n".join(parts))


def failure_page(student_id: str, status: str, reason: str, repairs=(), *, overrides=()) -> str:
    """The page for a submission nbgrader could not grade: what happened and what to fix."""
    parts = [
        f"<h1>{esc(student_id)}：未能自动评分（{esc(status)}）</h1>",
        f"<p>得分 0。原因：{esc(reason)}</p>",
        overrides_section(overrides),
    ]
    if repairs:
        parts.append(f"<p>评分前做过的修复：</p>{bullets(repairs)}")
    parts.append("<p>请按原因修改后重新下载 notebook（文件 → 下载 → .ipynb）再提交。</p>")
    return page(f"{student_id}: {status}", "\n".join(parts))


def overrides_section(overrides) -> str:
    """The instructor's adjustments (dicts with column, value, note), or '' when there are none."""
    if not overrides:
        return ""
    names = {"score": "总分"} | {part.key: part.title for part in PARTS}
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
    """A complete, self-contained HTML document."""
    return (
        '<!DOCTYPE html>\n<html lang="zh"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


def bullets(lines) -> str:
    return "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


def summary_table(scores: dict) -> str:
    rows = "".join(
        f"<tr><td>{esc(grade_id)}</td><td class={'pass' if score == points else 'fail'}>{score:g} / {points:g}</td></tr>"
        for grade_id, (score, points) in scores.items()
    )
    return f"<table><tr><th>评分单元格</th><th>得分</th></tr>{rows}</table>"


def code_cell(cell, scores: dict) -> str:
    meta = nbgrader_meta(cell)
    grade_id = meta.get("grade_id", "")
    is_grade = bool(meta.get("grade"))
    source = strip_hidden_tests(cell.source).rstrip() if is_grade else cell.source
    verdict, css = "", ""
    if grade_id in scores:
        score, points = scores[grade_id]
        css = "pass" if score == points else "fail"
        verdict = f"<p class={css}><b>{esc(grade_id)}</b>：{score:g} / {points:g}</p>"
    outputs = "".join(output_html(output, is_grade) for output in cell.get("outputs", []))
    return f'<div class="cell {css}">{verdict}<pre>{esc(source)}</pre>{outputs}</div>'


def output_html(output, is_grade: bool) -> str:
    if output.output_type == "stream":
        return f"<pre>{esc(output.text)}</pre>"
    if output.output_type == "error":
        if is_grade:  # the message says what is wrong; the traceback would show hidden lines
            return f"<pre class=fail>{esc(output.ename)}: {esc(output.evalue)}</pre>"
        return f"<pre class=fail>{esc(ANSI.sub('', chr(10).join(output.traceback)))}</pre>"
    text = output.get("data", {}).get("text/plain")
    return f"<pre>{esc(text)}</pre>" if text else ""


def esc(text) -> str:
    return html.escape(str(text))
