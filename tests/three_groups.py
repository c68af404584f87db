"""A user's own labelled CSV for the study and the sweep: the TREC rows of three topics,
relabelled ``region`` a/b/c by a hash of the document id, the gender column dropped."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

from tests.chroma_pool import data_path_or_skip

TOPICS = ("Computer science", "Medicine", "Tennis")
TARGET = {"a": 0.4, "b": 0.3, "c": 0.3}


def region(doc_id: str) -> str:
    """A synthetic group, fixed by the document's id (the same on every machine)."""
    return "abc"[hashlib.sha256(doc_id.encode()).digest()[0] % 3]


def write_three_group_csv(path: Path) -> Path:
    """Write the file (columns q_text, doc_id, region, doc_title, first sentence) at ``path``."""
    with open(data_path_or_skip(), newline="", encoding="utf-8") as source:
        rows = [row for row in csv.DictReader(source) if row["q_text"] in TOPICS]
    with open(path, "w", newline="", encoding="utf-8") as target:
        columns = ["q_text", "doc_id", "region", "doc_title", "first sentence"]
        writer = csv.DictWriter(target, columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "region": region(row["doc_id"])})
    return path
