"""The report's two file formats, each written once: the self-contained HTML page (summary.html
and the feedback pages share its shell) and the CSV that Excel opens and saves (UTF-8 with a BOM
out; UTF-8, a BOM or not, or GBK in)."""

from __future__ import annotations

import codecs
import csv
import html
import io
from pathlib import Path

from ..errors import UnreadableCsv


def html_page(title: str, style: str, body: str, *, lang: str) -> str:
    """A complete, self-contained HTML document; `title` is HTML already (see `esc`)."""
    return (
        f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{style}</style></head><body>\n{body}\n</body></html>\n"
    )


def esc(text) -> str:
    """`text` as HTML text."""
    return html.escape(str(text))


def open_csv(path: Path) -> io.StringIO:
    """A CSV file the instructor may have saved from Excel: UTF-8 (a BOM or not), else GBK.

    Excel on a Chinese-locale Windows saves "CSV (逗号分隔)" in GBK; GB 18030 reads it. Its
    "Unicode 文本" is UTF-16 with a BOM (tab-separated), read as such. An Excel workbook (.xlsx,
    a zip) is no CSV: the error says how to save one.
    """
    data = path.read_bytes()
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return io.StringIO(data.decode("utf-16"), newline="")
    if data.startswith(b"PK\x03\x04") or data.startswith(b"\xd0\xcf\x11\xe0"):
        raise UnreadableCsv(
            f"error: {path} is an Excel workbook, not a CSV file: in Excel, 文件 → 另存为 → "
            '"CSV UTF-8（逗号分隔）", and pass that file (nothing was graded)'
        )
    try:
        return io.StringIO(data.decode("utf-8-sig"), newline="")
    except UnicodeDecodeError:
        pass
    try:
        return io.StringIO(data.decode("gb18030"), newline="")
    except UnicodeDecodeError as error:
        raise UnreadableCsv(
            f"error: {path} is neither UTF-8 nor GBK (byte {error.start}); save it as "
            '"CSV UTF-8" and run again (nothing was graded)'
        ) from None


# What makes Excel or LibreOffice read a cell as a formula (OWASP's "CSV injection"): a student
# decides his file's name, and a name like `=HYPERLINK(...)` would run when the instructor opens
# grades.csv or intake.csv.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def as_cell_text(value):
    """`value` as a CSV cell a spreadsheet shows as text: one that starts like a formula gets a
    leading `'` (Excel shows the rest, unquoted); numbers (`-1`, `+0.5`) and the rest unchanged.
    `from_cell_text` undoes it, so a file the kit reads back gives the value it wrote."""
    if not isinstance(value, str) or not value.startswith(FORMULA_START):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


def from_cell_text(value):
    """The value `as_cell_text` was given (a cell the kit wrote, read back)."""
    if isinstance(value, str) and value.startswith("'") and value[1:].startswith(FORMULA_START):
        return value[1:]
    return value


def write_csv(path: Path, names: list[str], rows, *, extra_rows=()) -> None:
    """Write atomically, UTF-8 with a BOM; `extra_rows` (lists) go right after the header.
    Every cell goes through `as_cell_text`."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8-sig") as handle:
        writer = csv.DictWriter(handle, fieldnames=names, extrasaction="ignore", restval="")
        writer.writeheader()
        for extra in extra_rows:
            csv.writer(handle).writerow([as_cell_text(cell) for cell in extra])
        writer.writerows({k: as_cell_text(v) for k, v in row.items()} for row in rows)
    tmp.replace(path)
