"""REPORT/summary.html: the class at a glance, for the instructor.

A table of every student (name, score, status, the parts, a link to the feedback page), pass
rates per TODO and per check (named by the check's title, `checkcells.check_titles`), a histogram of scores,
the ungradable files by status, and the warnings of the run. One self-contained file: the plot is inline SVG, nothing is
fetched from the network. Built from grades.csv's rows (overrides applied), every student in it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from urllib.parse import quote

from .. import paths
from ..authoring.checkcells import check_label
from ..authoring.nbsource import PARTS, part_of, todo_number
from ..faults import lines as faultlines
from ..intake.inventory import UNDECIDED
from .formats import esc, html_page
from .scores import MISSING, is_grade, num, todo_columns

STYLE = """
body { font: 15px/1.5 system-ui, "PingFang SC", "Microsoft YaHei", sans-serif; max-width: 66em; margin: 2em auto; padding: 0 1em; }
table { border-collapse: collapse; margin: .5em 0 1.5em; } td, th { border: 1px solid #ccc; padding: .2em .6em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } td.part { white-space: nowrap; }
.bar { display: inline-block; height: .8em; background: #1a7f37; vertical-align: middle; }
.bar.low { background: #cf222e; } td.nograde { color: #9a6700; font-weight: bold; } td.fail { color: #cf222e; } .says { color: #57606a; font-size: 90%; } pre.notes { white-space: pre-wrap; background: #f6f8fa; padding: .6em; } .warning { border: 2px solid #cf222e; background: #fff1f0; padding: .6em 1em; white-space: pre-wrap; }
"""


def write_summary(
    path: Path,
    rows: list[dict],
    columns: list[tuple[str, float]],
    warnings=(),
    intake=None,
    titles=None,
    overrides=None,
) -> None:
    """Write the class view of `rows` (grades.csv) to `path`; `columns` are (grade_id, points).

    `intake` (this run's `Intake`, or None) adds the files not graded by reason, the roster's
    students with no submission and the roster notes; `titles` (`checkcells.check_titles` of the
    release) name the checks; `overrides` (overrides.csv's lines by student) mark the scores the
    instructor set.
    """
    titles = titles or {}
    graded = [row for row in rows if row.get("status") == "graded"]
    absent = sum(1 for row in rows if row.get("status") == MISSING)
    ungradable = Counter(
        row.get("status", "") for row in rows if row.get("status") not in ("graded", MISSING)
    )
    maximum = next((row.get("max_score") for row in rows), "")
    late = sum(1 for row in rows if row.get("late") == "yes")
    parts = [
        f"<h1>ch34 班级概览 / class summary</h1><p>{len(rows)} 名学生；{len(graded)} 份正常评分；"
        f"{sum(ungradable.values())} 份未能评分；{absent} 名没有提交；{late} 份迟交 / late。满分 {esc(maximum)}"
        f"（{esc('、'.join(p.title for p in PARTS if not p.counted))} 另计）。</p>"
    ]
    for warning in warnings:
        parts.append(f'<div class="warning">{esc(warning)}</div>')
    parts.append("<h2>学生 / students</h2>")
    parts.append(student_table(rows, path.parent, overrides or {}))
    if intake is not None:  # what this run did not grade comes before how the graded did
        parts.append(intake_sections(intake, rows))
    parts.append(faultlines.summary_section(rows))  # which TODO hung or crashed (issue 30)
    parts.append("<h2>分数分布 / scores (graded submissions)</h2>")
    parts.append(histogram_svg([num(row.get("score")) for row in graded], num(maximum)))
    parts.append("<h2>各 TODO 通过率 / pass rate per TODO</h2>")
    parts.append(
        pass_table(
            graded,
            [
                (name, points, todo_part_title(int(name[4:])))
                for name, points in todo_columns(columns)
            ],
        )
    )
    parts.append("<h2>各检查通过率 / pass rate per check</h2>")
    parts.append(
        pass_table(graded, [(g, p, part_label(g)) for g, p in columns], titles, head="检查 / check")
    )
    parts.append("<h2>未能评分 / ungradable, by status</h2>")
    if ungradable:
        rows_html = "".join(
            f"<tr><td>{esc(status)}</td><td class=n>{count}</td><td>{esc(', '.join(who(rows, status)))}</td></tr>"
            for status, count in ungradable.most_common()
        )
        parts.append(
            f"<table><tr><th>status</th><th>files</th><th>students</th></tr>{rows_html}</table>"
        )
    else:
        parts.append("<p>无 / none.</p>")
    path.write_text(page("\n".join(parts)), encoding="utf-8")


def intake_sections(intake, rows: list[dict]) -> str:
    """This run's files not graded (by reason), the roster's students with none, the notes."""
    by_reason: dict[str, list[str]] = {}
    for skipped in intake.skipped:
        by_reason.setdefault(reason_of(skipped), []).append(skipped.source)
    parts = ["<h2>未评分的文件 / files not graded, by reason</h2>"]
    if by_reason:
        lines = "".join(
            f"<tr><td>{esc(reason)}</td><td class=n>{len(files)}</td>"
            f"<td>{esc('; '.join(files[:12]) + (' ...' if len(files) > 12 else ''))}</td></tr>"
            for reason, files in sorted(by_reason.items(), key=lambda item: -len(item[1]))
        )
        parts.append(f"<table><tr><th>reason</th><th>files</th><th>which</th></tr>{lines}</table>")
    else:
        parts.append("<p>无 / none.</p>")
    parts.append(unknown_section(intake))
    status = {row["student_id"]: row.get("status") for row in rows}
    missing = [r for r in intake.missing() if status.get(r["student_id"], MISSING) == MISSING]
    if intake.roster is not None:
        parts.append(
            f"<h2>名单上没有提交的学生 / roster students with no submission: {len(missing)}</h2>"
        )
        names = [f"{r['student_id']} {r.get('name', '')}".strip() for r in missing]
        parts.append(f"<p>{esc('、'.join(names)) or '无 / none.'}</p>")
    notes = intake.warnings()
    if notes:
        parts.append("<h2>名单与文件的备注 / roster and file notes</h2>")
        parts.append(f'<pre class="notes">{esc(notes.removeprefix("note:").strip())}</pre>')
    return "\n".join(parts)


def unknown_section(intake) -> str:
    """Each file whose student could not be told, with why and what to do (a name two roster
    students share names both rows and the column that tells them apart)."""
    items = "".join(
        f"<tr><td>{esc(s.source)}</td><td>{esc(s.why)}</td></tr>" for s in intake.unknown()
    )
    if not items:
        return ""
    return (
        "<h3>认不出是谁的文件 / student unknown: why, and what to do</h3>"
        f"<table><tr><th>file</th><th>why</th></tr>{items}</table>"
    )


def reason_of(skipped) -> str:
    """The reason a file was not graded, without its file-specific details."""
    if skipped.outcome != "not graded":
        return skipped.outcome  # "student unknown"
    if skipped.debris:
        return "operating-system debris or bookkeeping"
    if skipped.graded_instead:
        return "同一学生的另一个 notebook（评的是哪个、为什么，见下面的备注）/ another notebook of a graded student"
    if UNDECIDED in skipped.why:
        return f"同一学生的几个 notebook 分不出先后，{UNDECIDED} / several notebooks of a student, none chosen"
    return skipped.why.split(" (")[0].split(": ")[0]


def student_table(rows: list[dict], report_dir: Path, overrides: dict) -> str:
    """Every student of grades.csv: id, name, score (marked where the instructor overrode the
    row), status (marked where it is not a grade), the parts, late, and the feedback page."""
    named = any(row.get("name") for row in rows)
    head = ["student_id", *(["姓名 / name"] * named), "score", "status"]
    head += [part.key for part in PARTS] + ["late", "反馈 / feedback"]
    lines = []
    for row in sorted(rows, key=lambda r: r["student_id"]):
        student_id = row["student_id"]
        page = paths.feedback_page(report_dir, student_id)
        link = (
            f'<a href="{paths.FEEDBACK}/{quote(page.name)}">{esc(page.name)}</a>'
            if page.exists() else ""
        )  # fmt: skip
        cells = [f"<td>{esc(student_id)}</td>", *([f"<td>{esc(row.get('name', ''))}</td>"] * named)]
        graded = row.get("status") == "graded"
        adjusted = "<br><span class=says>老师调整</span>" if overrides.get(student_id) else ""
        cells.append(f"<td class=n>{esc(row.get('score', '')) or '—'}{adjusted}</td>")
        css = "" if graded else " class=nograde" if not is_grade(row) else " class=fail"
        cells.append(f"<td{css}>{esc(row.get('status', ''))}</td>")
        cells += [f"<td class=n>{esc(row.get(part.key, ''))}</td>" for part in PARTS]
        cells.append(f"<td>{'迟交' if row.get('late') == 'yes' else ''}</td><td>{link}</td>")
        lines.append(f"<tr>{''.join(cells)}</tr>")
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f"<table><tr>{header}</tr>{''.join(lines)}</table>"


def pass_table(rows: list[dict], items, titles=None, head: str = "column") -> str:
    """A row per (column, points, label): how many earned full points, as a share and a bar.

    A column that is a check with a title (`titles`) is named by it and what it checks."""
    lines = []
    for column, points, part in items:
        full = sum(1 for row in rows if points > 0 and num(row.get(column)) >= points)
        rate = full / len(rows) if rows else 0.0
        low = " low" if rate < 0.5 else ""
        name = esc(column)
        if titles and column in titles:
            says = titles[column][1]
            name = (
                f'<span title="{esc(column)}">{esc(check_label(column, titles))}</span>'
                f"<br><span class=says>{esc(says)}</span>"
            )
            part = part.split(" · ", 1)[-1]
        lines.append(
            f"<tr><td>{name}</td><td class=part>{esc(part)}</td><td class=n>{points:g}</td>"
            f"<td class=n>{full}/{len(rows)}</td><td class=n>{rate:.0%}</td>"
            f'<td><span class="bar{low}" style="width:{rate * 12:.2f}em"></span></td></tr>'
        )
    return (
        f"<table><tr><th>{esc(head)}</th><th></th><th>points</th><th>full marks</th><th>rate</th>"
        "<th></th></tr>" + "".join(lines) + "</table>"
    )


def histogram_svg(scores: list[float], maximum: float, *, bins: int = 20) -> str:
    """A histogram of `scores` from 0 to `maximum` as inline SVG: bars, axes, ticks, labels.

    Drawn here rather than by matplotlib, which costs about 3 s to import and 1 s a plot: the
    summary is written at the end of every grading run.
    """
    top = maximum if maximum > 0 else max(scores, default=1) or 1
    counts = [0] * bins
    for score in scores:
        counts[min(bins - 1, max(0, int(score / top * bins)))] += 1
    tallest = max(counts + [1])
    width, height, left, bottom, pad = 720, 260, 48, 40, 24  # px; plot area inside the margins
    plot_w, plot_h = width - left - pad, height - bottom - pad
    step = plot_w / bins
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<text x="{left + plot_w / 2}" y="14" text-anchor="middle">{len(scores)} graded'
        + (f", median {median(scores):g}" if scores else "")
        + "</text>",
    ]
    for index, count in enumerate(counts):
        bar = plot_h * count / tallest
        x, y = left + index * step, pad + plot_h - bar
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{step - 2:.1f}" height="{bar:.1f}" '
            f'fill="#1a7f37"><title>{index * top / bins:g}-{(index + 1) * top / bins:g}: '
            f"{count}</title></rect>"
        )
    base = pad + plot_h
    parts.append(f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#333"/>')
    parts.append(f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{base}" stroke="#333"/>')
    for tick in range(0, 6):
        value = top * tick / 5
        x = left + plot_w * tick / 5
        parts.append(
            f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" stroke="#333"/>'
            f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle">{value:g}</text>'
        )
    for count in sorted({0, tallest // 2, tallest}):
        y = base - plot_h * count / tallest
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{count}</text>'
            f'<line x1="{left - 3}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#333"/>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">score (of {top:g})</text>'
        f'<text x="12" y="{pad + plot_h / 2}" transform="rotate(-90 12 {pad + plot_h / 2})" '
        'text-anchor="middle">students</text></svg>'
    )
    return "".join(parts)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def part_label(grade_id: str) -> str:
    part = part_of(grade_id)
    return f"TODO {todo_number(grade_id)} · {part.title if part else ''}"


def todo_part_title(number: int) -> str:
    return next((part.title for part in PARTS if number in part.todos), "")


def who(rows: list[dict], status: str) -> list[str]:
    ids = [row["student_id"] for row in rows if row.get("status") == status]
    return ids[:12] + (["..."] if len(ids) > 12 else [])


def page(body: str) -> str:
    """The whole summary.html (`formats.html_page`)."""
    return html_page("ch34 class summary", STYLE, body, lang="zh")
