"""A report as a list of blocks (headings, paragraphs, bullet lists, tables, figures) and its two
renderings: Markdown, and one self-contained HTML page (figures embedded as data URIs).

One model for the reports of ``fairrag study`` and ``fairrag audit``: each builds its blocks
once and writes both files from them. Text is either plain (``str``: escaped by both renderers,
so a value read from a log cannot inject markup) or :class:`Markup` (trusted text written by
the report itself in the Markdown subset both renderers share: `` `code` `` spans and
``**strong**``). Standard library only.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Block",
    "Bullets",
    "Figure",
    "Heading",
    "Markup",
    "Paragraph",
    "Table",
    "Text",
    "html_page",
    "markdown",
    "markdown_text",
]


@dataclass(frozen=True)
class Markup:
    """Trusted text in the shared Markdown subset: `` `code` `` spans and ``**strong**``.

    Markdown shows it as written; HTML escapes it, then turns those two marks into ``<code>``
    and ``<strong>``. Only for text the report writes itself (and values it quotes in code)."""

    text: str


Text = str | Markup
"""Plain text (escaped by both renderers) or :class:`Markup`."""


@dataclass(frozen=True)
class Heading:
    """``#`` (level 1, the report's title: also the HTML page's title) or ``##`` (level 2)."""

    text: Text
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: Text


@dataclass(frozen=True)
class Bullets:
    """A bullet list, one item per entry (empty: an empty list, rendered as a blank line)."""

    items: Sequence[Text]


@dataclass(frozen=True)
class Table:
    """A table; ``align`` gives one letter per column, ``l`` or ``r`` (numbers), all ``l`` when
    empty; ``total`` is the row count before the report cut it to ``rows`` (a note says so)."""

    header: Sequence[Text]
    rows: Sequence[Sequence[Text]]
    total: int | None = None
    align: str = ""

    def aligned_right(self, column: int) -> bool:
        return self.align[column : column + 1] == "r"


@dataclass(frozen=True)
class Figure:
    """A PNG file written beside the report; Markdown links it (relative to the report's
    folder), HTML embeds its bytes."""

    path: Path
    caption: str


Block = Heading | Paragraph | Bullets | Table | Figure
"""One of the five kinds of block, in the order the report shows them."""

_MD_INLINE = re.compile(r"[\\`*~|]")
_MD_LINK = re.compile(r"\](?=[(\[])")
_MD_BLOCK_START = re.compile(r"^(\s*)([#+\-=*]+|\d{1,9}[.)])(?=\s|$)")


def _escape_block_start(match: re.Match[str]) -> str:
    mark = match.group(2)
    if mark[0].isdigit():  # an ordered list: CommonMark escapes its "." or ")"
        return match.group(1) + mark[:-1] + "\\" + mark[-1]
    return match.group(1) + "\\" + mark


def markdown_text(text: object, *, block: bool = False) -> str:
    """``text`` safe in Markdown: HTML's ``& < >`` as entities (no raw tag survives), the
    characters that make code, emphasis, strike-through, links or table cells escaped, line
    breaks as spaces; with ``block``, also a leading ``#``, ``-``, ``+``, ``=`` or ``1.`` (a
    heading or list where a line starts)."""
    value = html.escape(str(text), quote=False)
    value = value.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    value = _MD_INLINE.sub(lambda m: "\\" + m.group(0), value)
    value = _MD_LINK.sub(lambda m: "]\\", value)
    if block:
        value = _MD_BLOCK_START.sub(_escape_block_start, value)
    return value


def _md(text: Text, *, block: bool = False) -> str:
    return text.text if isinstance(text, Markup) else markdown_text(text, block=block)


_CUT = "({shown} of {total} rows; all in the CSV files)"


def _markdown_table(table: Table) -> list[str]:
    marks = "".join("---:|" if table.aligned_right(i) else "---|" for i in range(len(table.header)))
    lines = ["| " + " | ".join(_md(h) for h in table.header) + " |", "|" + marks]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in table.rows]
    if table.total is not None and table.total > len(table.rows):
        lines.append("\n" + _CUT.format(shown=len(table.rows), total=table.total))
    return lines


def markdown(blocks: Sequence[Block], folder: Path | None = None) -> str:
    """The blocks as Markdown, a blank line after each; figures linked relative to ``folder``
    (where the report is written; as given without it)."""
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            lines.append("#" * block.level + " " + _md(block.text))
        elif isinstance(block, Paragraph):
            lines.append(_md(block.text, block=True))
        elif isinstance(block, Bullets):
            lines += [f"- {_md(item, block=True)}" for item in block.items]
        elif isinstance(block, Table):
            lines += _markdown_table(block)
        else:
            path = block.path if folder is None else block.path.relative_to(folder)
            lines.append(f"![{block.caption}]({path.as_posix()})")
        lines.append("")
    return "\n".join(lines)


_CODE = re.compile(r"(`[^`]*`)")
_STRONG = re.compile(r"\*\*(.+?)\*\*")


def _html(text: Text) -> str:
    if not isinstance(text, Markup):
        return html.escape(text)
    parts = []
    for piece in _CODE.split(text.text):
        if len(piece) >= 2 and piece.startswith("`") and piece.endswith("`"):
            parts.append(f"<code>{html.escape(piece[1:-1])}</code>")
        else:
            parts.append(_STRONG.sub(r"<strong>\1</strong>", html.escape(piece)))
    return "".join(parts)


def _plain(text: Text) -> str:
    """The words of ``text`` without marks (the HTML page's title)."""
    if not isinstance(text, Markup):
        return text
    return _STRONG.sub(r"\1", text.text).replace("`", "")


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; white-space: nowrap; }
th { background: #f2f2f2; } .num { text-align: right; }
code { background: #f4f4f4; padding: 0 0.2em; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
"""


def _html_table(table: Table) -> list[str]:
    def cell(tag: str, i: int, text: Text) -> str:
        kind = ' class="num"' if table.aligned_right(i) else ""
        return f"<{tag}{kind}>{_html(text)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(table.header))
    body = "".join(
        "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>"
        for row in table.rows
    )
    parts = [f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"]
    if table.total is not None and table.total > len(table.rows):
        parts.append("<p>" + _CUT.format(shown=len(table.rows), total=table.total) + "</p>")
    return parts


def _html_figure(figure: Figure) -> str:
    data = base64.b64encode(figure.path.read_bytes()).decode("ascii")
    caption = html.escape(figure.caption)
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{caption}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def html_page(blocks: Sequence[Block]) -> str:
    """The blocks as one HTML page that needs no other file (figures as data URIs, no script);
    its title is the first level-1 heading's text."""
    title = next((_plain(b.text) for b in blocks if isinstance(b, Heading) and b.level == 1), "")
    parts = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>',
        f"<style>{_STYLE}</style></head><body>",
    ]
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{_html(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{_html(block.text)}</p>")
        elif isinstance(block, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_html(i)}</li>" for i in block.items) + "</ul>")
        elif isinstance(block, Table):
            parts += _html_table(block)
        else:
            parts.append(_html_figure(block))
    parts.append("</body></html>")
    return "\n".join(parts)
