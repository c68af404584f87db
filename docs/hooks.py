"""MkDocs hook: the docstrings' Sphinx roles become links in the API reference.

The docstrings cross-reference as Sphinx does (``:func:`run_record```, ``:class:`~a.B```);
mkdocstrings renders them as the role's text before a code span. This hook turns each into an
optional mkdocs-autorefs reference: a link when the name is an object of the reference, else the
code span alone (``~`` keeps the last part of the name, as in Sphinx).
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(
    r":(?:func|class|meth|attr|data|mod|exc|obj|const):<code>(~?)([\w.\s]+?)"
    r"(?:\s*&lt;([\w.]+)&gt;)?</code>"
)


def _reference(match: re.Match[str]) -> str:
    short, name, target = match.group(1), re.sub(r"\s+", "", match.group(2)), match.group(3)
    if target:  # :attr:`title <target>`
        return f'<autoref identifier="{target}" optional><code>{match.group(2)}</code></autoref>'
    shown = name.rsplit(".", 1)[-1] if short else name
    return f'<autoref identifier="{name}" optional><code>{shown}</code></autoref>'


def on_page_content(html: str, **kwargs: Any) -> str:
    """Each ``:role:<code>name</code>`` of the page, as an optional reference to ``name``."""
    return ROLE.sub(_reference, html)
