"""Study data: finding and verifying the TREC 2022 Fair Ranking gender data, loading any labelled
CSV a :class:`~fairrag_study.dataset.StudyDataset` describes, and building study corpora."""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .dataset import TREC_GENDER, StudyDataset

__all__ = [
    "CSV_FIELD_LIMIT",
    "DATA_ENV",
    "DATA_SHA256",
    "DATA_URL",
    "TOPIC_LIMIT",
    "CorpusDocument",
    "DataNotFoundError",
    "build_corpus",
    "csv_header",
    "default_cache_dir",
    "document_text",
    "load_documents",
    "locate_data",
    "open_csv",
    "sample_documents",
    "sha256_of",
    "study_topics",
]

DATA_ENV = "FAIRRAG_DATA"
DATA_FILENAME = "trec_gender_2022.csv"
DATA_URL = (
    "https://github.com/elviswxy/RAG_fairness/raw/b00af6ab4a5f01fb1e11c192f63f8f5ddbf16471/"
    "data/trec_gender_2022.tar.gz"
)
DATA_SHA256 = "6c599e7d21eeb7eafd32a6402279794a2b7f4b723cb899b85a37ac292747fec7"
"""SHA-256 of the extracted CSV (9,104,458 bytes)."""

CORPUS_KINDS = ("balanced", "natural")
DEFAULT_CORPUS_SEED = 2022


class DataNotFoundError(FileNotFoundError):
    """The TREC gender data could not be found or fetched."""


def default_cache_dir() -> Path:
    """``$FAIRRAG_CACHE`` or ``$XDG_CACHE_HOME/fairrag`` (``~/.cache/fairrag``)."""
    if os.environ.get("FAIRRAG_CACHE"):
        return Path(os.environ["FAIRRAG_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "fairrag"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate_data(
    path: str | os.PathLike[str] | None = None,
    *,
    cache_dir: Path | None = None,
    download: bool = True,
    timeout: float = 60.0,
) -> Path:
    """Find ``trec_gender_2022.csv``: ``path``, else ``$FAIRRAG_DATA``, else the cache, else fetch.

    A given path or environment variable that points nowhere is an error (never silently
    replaced by a download). The download is the public archive (``DATA_URL``); the extracted CSV
    must match ``DATA_SHA256`` before it is placed in the cache.
    """
    if path is not None:
        found = Path(path).expanduser()
        if not found.is_file():
            raise DataNotFoundError(f"data path {str(found)!r} (from --data/path) is not a file")
        return found
    env = os.environ.get(DATA_ENV)
    if env:
        found = Path(env).expanduser()
        if not found.is_file():
            raise DataNotFoundError(f"{DATA_ENV}={env!r} is not a file; unset it or fix the path")
        return found
    cached = (cache_dir or default_cache_dir()) / DATA_FILENAME
    if cached.is_file():
        return cached
    if not download:
        raise DataNotFoundError(_how_to_get_data(cached))
    return _download(cached, timeout)


def _how_to_get_data(cached: Path) -> str:
    return (
        f"TREC gender data not found: pass --data PATH, set {DATA_ENV}=/path/to/{DATA_FILENAME}, "
        f"or place it at {cached}. It is the CSV inside {DATA_URL} (sha256 {DATA_SHA256})."
    )


def _download(cached: Path, timeout: float) -> Path:
    try:
        with urllib.request.urlopen(DATA_URL, timeout=timeout) as response:
            archive = response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DataNotFoundError(
            f"could not download the data ({exc}). {_how_to_get_data(cached)}"
        ) from exc
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith(DATA_FILENAME)), None)
        if member is None or not member.isfile():
            raise DataNotFoundError(f"{DATA_URL} holds no {DATA_FILENAME}")
        extracted = tar.extractfile(member)
        if extracted is None:
            raise DataNotFoundError(f"{DATA_URL}: {member.name} cannot be read")
        payload = extracted.read()
    actual = hashlib.sha256(payload).hexdigest()
    if actual != DATA_SHA256:
        raise DataNotFoundError(
            f"downloaded {DATA_FILENAME} has sha256 {actual}, expected {DATA_SHA256}"
        )
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cached.parent, delete=False) as tmp:
        tmp.write(payload)
    shutil.move(tmp.name, cached)  # atomic within one folder: no half-written cache file
    return cached


CSV_FIELD_LIMIT = 131_072
"""The longest field (characters) a data CSV may hold: the ``csv`` module's default limit,
kept. A title or text that long is no biography (the embedding model reads 256 tokens); the
row is refused by line number instead of ``_csv.Error: field larger than field limit``."""


TOPIC_LIMIT = 1_000
"""The longest topic (characters) a data CSV may hold. A topic is the subject of the study's
questions ("Tell me about famous people in <topic>."), written into every record of its
trials; a 20 MB one wrote 20 MB records that ``fairrag audit`` then refused (it reads lines
up to 16 MiB). A real topic is a few words (TREC's longest: 44 characters)."""


@contextmanager
def open_csv(path: str | os.PathLike[str]) -> Iterator[csv.DictReader[str]]:
    """A data CSV's rows, read as UTF-8 with or without a byte-order mark (Excel's "CSV
    UTF-8" writes one; it is not part of the first column's name).

    A file in another encoding (Windows-1252, Excel's plain "CSV"; UTF-16, Excel's "Unicode
    text") and a field over :data:`CSV_FIELD_LIMIT` characters raise ``ValueError`` naming the
    file, where, and how to fix it, whenever the rows are read.
    """
    with open(path, "rb") as raw:
        head = raw.read(4)
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise ValueError(
            f"{path}: the file is UTF-16 (it starts with a UTF-16 byte-order mark, as Excel's "
            "'Unicode text' does); the study reads comma-separated UTF-8: save it as 'CSV "
            "UTF-8', or convert it with: iconv -f UTF-16 -t UTF-8"
        )
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        try:
            yield reader
        except UnicodeDecodeError:
            raise ValueError(
                f"{path}: not UTF-8 ({_first_non_utf8(path)}; Windows-1252, Excel's plain "
                "'CSV', is the usual cause); the study reads UTF-8: save it as 'CSV UTF-8', or "
                f"convert it with: iconv -f CP1252 -t UTF-8 {path} > converted.csv"
            ) from None
        except csv.Error as exc:
            if "field limit" not in str(exc):
                raise ValueError(
                    f"{path}, line {reader.line_num}: not a readable CSV ({exc})"
                ) from None
            raise ValueError(  # the line being read, not yet counted
                f"{path}, line {reader.line_num + 1}: a field longer than {CSV_FIELD_LIMIT:,} "
                "characters (the limit of a data CSV's field); a title or a first sentence "
                "that long is no biography: shorten it or drop the row"
            ) from None


def _first_non_utf8(path: str | os.PathLike[str]) -> str:
    """Where ``path`` first stops being UTF-8: its line and the byte."""
    with open(path, "rb") as raw:
        for number, line in enumerate(raw, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"line {number}, byte 0x{line[exc.start : exc.start + 1].hex()}"
    return "a character split across lines"


def csv_header(path: str | os.PathLike[str]) -> list[str]:
    """The column names of a data CSV (read as :func:`open_csv` reads it)."""
    with open_csv(path) as reader:
        return list(reader.fieldnames or ())


@dataclass(frozen=True)
class CorpusDocument:
    """One person's biography, indexed once whatever the number of topics it belongs to."""

    doc_id: str
    title: str
    text: str
    group: str
    """The document's group label (the data set's group column: ``female``/``male`` in TREC)."""
    topics: tuple[str, ...]
    """Every topic (``q_text``) the document appears under, sorted."""
    group_key: str = "gender"
    """The metadata field the group is stored under (the data set's ``group_key``)."""

    @property
    def gender(self) -> str:
        """The group under its TREC name (the notebooks and fixtures of the gender data)."""
        return self.group

    @property
    def page_content(self) -> str:
        return document_text(self.title, self.text)

    def metadata(self) -> dict[str, str]:
        """Flat metadata for a vector store (topics joined by ``|``)."""
        return {
            "doc_id": self.doc_id,
            "title": self.title,
            self.group_key: self.group,
            "topics": "|".join(self.topics),
        }


def document_text(title: str, text: str) -> str:
    """The indexed text of a document (docs/SPEC.md): ``Title: <doc_title>\\n<first sentence>``."""
    return f"Title: {title}\n{text}"


def load_documents(
    path: str | os.PathLike[str], dataset: StudyDataset = TREC_GENDER
) -> list[CorpusDocument]:
    """Every document with text, once, with all its topics, in first-appearance order.

    Columns come from ``dataset``. Rows whose text is empty are dropped (docs/SPEC.md). A
    ``doc_id`` appearing with two different groups or titles is an error: the data would be
    inconsistent; so is a group label that is not one of ``dataset.groups``, a file with no
    row of text, and one lacking a group of ``dataset.groups`` altogether (each error names
    the file, the column and what was found).
    """
    d = dataset
    first: dict[str, dict[str, str]] = {}
    topics: dict[str, set[str]] = defaultdict(set)
    rows = 0
    with open_csv(path) as reader:
        missing = [c for c in d.columns if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(
                f"{path}: missing columns {missing}; expected {list(d.columns)} "
                f"(found {list(reader.fieldnames or ())})"
            )
        for row in reader:
            rows += 1
            short = [column for column in d.columns if row.get(column) is None]
            if short:
                raise ValueError(
                    f"{path}, line {reader.line_num}: the row ends before columns {short}; "
                    "every row needs a field for each column of the header"
                )
            text = (row[d.text_column] or "").strip()
            if not text:
                continue
            doc_id = row[d.doc_id_column].strip()
            seen = first.setdefault(doc_id, row)
            if (
                seen[d.group_column] != row[d.group_column]
                or seen[d.title_column] != row[d.title_column]
            ):
                raise ValueError(
                    f"{path}: {d.doc_id_column} {doc_id} has conflicting "
                    f"{d.group_column} or {d.title_column}"
                )
            topic = row[d.topic_column].strip()
            if len(topic) > TOPIC_LIMIT:
                raise ValueError(
                    f"{path}, line {reader.line_num}: column {d.topic_column!r} holds a topic of "
                    f"{len(topic):,} characters; a topic is the subject of the study's "
                    f"questions and may have at most {TOPIC_LIMIT:,} (its records must stay "
                    "readable by fairrag audit): shorten it or drop the row"
                )
            topics[doc_id].add(topic)
    documents = [
        CorpusDocument(
            doc_id=doc_id,
            title=row[d.title_column].strip(),
            text=row[d.text_column].strip(),
            group=row[d.group_column].strip(),
            topics=tuple(sorted(topics[doc_id])),
            group_key=d.group_key,
        )
        for doc_id, row in first.items()
    ]
    _check_documents(path, documents, rows, d)
    return documents


def _check_documents(
    path: str | os.PathLike[str], documents: list[CorpusDocument], rows: int, d: StudyDataset
) -> None:
    """Refuse a file with no document of text, a group the data set does not name, or one
    lacking a group of ``d.groups`` altogether (each error names the file and the column)."""
    if not documents:
        what = (
            f"every one of its {rows} rows has empty text in column {d.text_column!r} (rows "
            "with empty text are dropped)"
            if rows
            else "it holds no rows, only its header"
        )
        raise ValueError(f"{path}: {what}; the study needs documents with text")
    present = {doc.group for doc in documents}
    unknown = sorted(present - set(d.groups))
    if unknown:
        raise ValueError(
            f"{path}: column {d.group_column!r} holds groups {unknown} that the data set does "
            f"not name; expected only {list(d.groups)} (name every group in the target)"
        )
    lacking = [group for group in d.groups if group not in present]
    if lacking:
        raise ValueError(
            f"{path}: column {d.group_column!r} holds only {sorted(present)} among the rows "
            f"with text, none of {lacking}; the study compares the groups {list(d.groups)} "
            "and needs documents of each"
        )


def _by_topic(documents: Sequence[CorpusDocument]) -> dict[str, list[CorpusDocument]]:
    by_topic: dict[str, list[CorpusDocument]] = defaultdict(list)
    for doc in documents:
        for topic in doc.topics:
            by_topic[topic].append(doc)
    return by_topic


def study_topics(
    documents: Sequence[CorpusDocument],
    topics: Iterable[str] | None = None,
    groups: Sequence[str] = TREC_GENDER.groups,
) -> list[str]:
    """The topics the study uses, sorted: those holding documents of every one of ``groups``.

    On the full TREC data that is 48 of the 50 topics (``Dams`` is male-only, ``Women``
    female-only). ``topics`` restricts the choice; an unknown topic there, or one missing a
    group, is an error naming it.
    """
    present: dict[str, set[str]] = defaultdict(set)
    for doc in documents:
        for topic in doc.topics:
            present[topic].add(doc.group)
    every = sorted(t for t, g in present.items() if set(groups) <= g)
    if topics is None:
        if not every and present:
            shown = ", ".join(f"{t!r}: {sorted(g)}" for t, g in sorted(present.items())[:5])
            more = f" and {len(present) - 5} more" if len(present) > 5 else ""
            raise ValueError(
                f"no topic holds documents of every group {list(groups)}: the study compares "
                f"the groups within each topic's pool, and the topics hold only {shown}{more}"
            )
        return every
    wanted = sorted(set(topics))
    unknown = [t for t in wanted if t not in present]
    if unknown:
        raise ValueError(f"unknown topics {unknown}; known topics: {sorted(present)}")
    lacking = [t for t in wanted if t not in every]
    if lacking:
        raise ValueError(
            f"topics {lacking} do not hold every group {list(groups)}; the study needs all"
        )
    return wanted


def build_corpus(
    documents: Sequence[CorpusDocument],
    kind: str = "balanced",
    *,
    seed: int = DEFAULT_CORPUS_SEED,
    topics: Iterable[str] | None = None,
    per_group: int = 50,
    groups: Sequence[str] = TREC_GENDER.groups,
) -> list[CorpusDocument]:
    """The study corpus (docs/SPEC.md, "The study").

    - ``balanced``: the topics holding every one of ``groups``, in sorted order; from each,
      among its documents not already taken, ``min(per_group, #smallest group)`` of each group
      (in ``groups`` order), sampled without replacement with ``seed``. Equal group sizes
      (TREC: exactly half female).
    - ``natural``: every document once (the real, imbalanced distribution).

    ``topics`` restricts either kind to those topics (for small test corpora); see
    :func:`study_topics`.
    """
    if kind not in CORPUS_KINDS:
        raise ValueError(f"corpus kind {kind!r} is unknown; known kinds: {list(CORPUS_KINDS)}")
    if isinstance(per_group, bool) or not isinstance(per_group, int) or per_group < 1:
        raise ValueError(f"per_group must be an integer >= 1, got {per_group!r}")
    if kind == "natural":
        if topics is None:
            return list(documents)
        keep = set(study_topics(documents, topics, groups))
        return [doc for doc in documents if keep.intersection(doc.topics)]
    chosen_topics = study_topics(documents, topics, groups)
    by_topic = _by_topic(documents)
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    corpus: list[CorpusDocument] = []
    for topic in chosen_topics:
        available = [doc for doc in by_topic[topic] if doc.doc_id not in taken]
        pools = [
            sorted((d for d in available if d.group == group), key=lambda d: d.doc_id)
            for group in groups
        ]
        size = min(per_group, *(len(pool) for pool in pools))
        if size == 0:
            continue
        for pool in pools:
            for i in sorted(rng.choice(len(pool), size=size, replace=False).tolist()):
                corpus.append(pool[i])
                taken.add(pool[i].doc_id)
    return corpus


def sample_documents(
    documents: Sequence[CorpusDocument],
    sample: Mapping[str, Mapping[str, int]],
    seed: int = DEFAULT_CORPUS_SEED,
) -> list[CorpusDocument]:
    """A small real subset: ``sample[topic][group]`` documents of each, each document once.

    Topics are taken in the mapping's order, documents drawn without replacement with ``seed``
    among those not taken yet. Asking for more than a topic holds is an error naming it. For
    demos and tests; the study's corpora come from :func:`build_corpus`.
    """
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    subset: list[CorpusDocument] = []
    for topic, per_group in sample.items():
        for group, count in per_group.items():
            pool = sorted(
                (d for d in documents if topic in d.topics and d.group == group),
                key=lambda d: d.doc_id,
            )
            pool = [d for d in pool if d.doc_id not in taken]
            if count > len(pool):
                raise ValueError(
                    f"sample asks for {count} {group} documents of {topic!r}; it holds {len(pool)}"
                )
            for i in sorted(rng.choice(len(pool), size=count, replace=False).tolist()):
                subset.append(pool[i])
                taken.add(pool[i].doc_id)
    return subset
