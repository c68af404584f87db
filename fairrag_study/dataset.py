"""The study's one seam for its data: a labelled corpus, its groups and target, its questions.

A :class:`StudyDataset` says where the study finds everything about the data (the CSV's columns,
the group key and groups, the fairness target, the topics and question templates, how the
balanced corpus is sampled, and the paper's numbers when there are any). :data:`TREC_GENDER` is
the paper's data set; :func:`custom_dataset` describes a user's own CSV.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fairrag_core import make_target
from fairrag_core.prompts import SCENARIOS

__all__ = ["PAPER_NUMBERS", "PAPER_RANKERS", "TREC_GENDER", "StudyDataset", "custom_dataset"]

PAPER_NUMBERS: dict[str, dict[str, float]] = {
    "exposure_disparity": {
        "standard": 0.4188,
        "stochastic": 0.4077,
        "forced_exposure": 0.2517,
        "representative_stochastic": 0.0430,
    },
    "exposure_share": {
        "standard": 0.1250,
        "stochastic": 0.0941,
        "forced_exposure": 0.2921,
        "representative_stochastic": 0.5229,
    },
    "generation_parity": {
        "standard": 0.1344,
        "stochastic": 0.1101,
        "forced_exposure": 0.3508,
        "representative_stochastic": 0.6302,
    },
    "groundedness": {
        "standard": 0.8650,
        "stochastic": 0.7792,
        "forced_exposure": 0.8750,
        "representative_stochastic": 0.6100,
    },
}
"""The paper's reported means on the TREC gender data (docs/SPEC.md, "The study"), as fractions."""

PAPER_RANKERS: tuple[str, ...] = tuple(PAPER_NUMBERS["exposure_disparity"])
"""The four rankers the paper compares (those its numbers cover); ``--rankers paper``."""


@dataclass(frozen=True)
class StudyDataset:
    """One labelled corpus the study runs on, and everything the study reads about it.

    The fairness target is either binary (``protected`` with ``target_share``, the other groups
    together taking the rest: the paper's form) or a full ``target`` mapping ``{group: share}``
    (several groups; ``protected``, if given, names the group the one-group metrics are about).
    """

    name: str
    """A short name (report title, index folder of a non-paper data set)."""
    groups: tuple[str, ...]
    """The group labels the study expects in ``group_column``; the balanced corpus samples each."""
    group_key: str = "gender"
    """The metadata field the rankers and auditor read the group from."""
    group_column: str = "gender"
    """The CSV column holding each document's group."""
    protected: str | None = None
    """The group the one-group metrics (exposure share, generation parity) are about, if any."""
    protected_noun: str | None = None
    """How the report's prose names the protected group's members (TREC: ``women``)."""
    target_share: float | None = None
    """Binary form: the protected group's target share (the rest to the other groups)."""
    target: Mapping[str, float] | None = None
    """Several groups: every group's target share, summing to 1."""
    doc_id_column: str = "doc_id"
    title_column: str = "doc_title"
    text_column: str = "first sentence"
    topic_column: str = "q_text"
    """The CSV column naming a row's topic; a document may appear under several topics."""
    extra_columns: tuple[str, ...] = ()
    """Further columns the CSV must have (checked on load, not read)."""
    question_templates: tuple[str, ...] = SCENARIOS
    """The scenario questions, each with ``{topic}``; every topic is asked each of them."""
    per_group: int = 50
    """Balanced corpus: documents of each group per topic (at most; the smallest group's count)."""
    paper: Mapping[str, Mapping[str, float]] | None = None
    """The paper's means per metric and ranker, or ``None`` (no comparison column)."""
    fingerprint_labels: bool = True
    """Whether the index folder's name carries a digest of the documents' groups (a data set
    whose labels are fixed by a checksum, the paper's, keeps its folder name)."""

    def __post_init__(self) -> None:
        if not self.groups or len(set(self.groups)) != len(self.groups):
            raise ValueError(f"groups must name each group once, got {self.groups!r}")
        if self.protected is not None and self.protected not in self.groups:
            raise ValueError(
                f"protected={self.protected!r} is not one of the groups {list(self.groups)}"
            )
        if self.target is not None:
            unknown = sorted(set(self.target) - set(self.groups))
            if unknown:
                raise ValueError(
                    f"target names groups {unknown} that are not among {list(self.groups)}"
                )
        for template in self.question_templates:
            if "{topic}" not in template:
                raise ValueError(f"question template {template!r} has no {{topic}} placeholder")
        make_target(**self.target_arguments())  # the core's own checks of the target

    @property
    def columns(self) -> tuple[str, ...]:
        """Every CSV column the data set reads or requires."""
        read = (
            self.topic_column,
            self.doc_id_column,
            self.group_column,
            self.title_column,
            self.text_column,
        )
        return tuple(dict.fromkeys((*self.extra_columns, *read)))

    def target_arguments(self) -> dict[str, Any]:
        """``protected``/``target_share``/``target`` as the rankers and the auditor take them."""
        if self.target is not None:
            return {"protected": self.protected, "target": dict(self.target)}
        return {"protected": self.protected, "target_share": self.target_share}

    def target_label(self) -> str:
        """The target in words, for reports (``female 0.5`` or ``a 0.4, b 0.3, c 0.3``)."""
        if self.target is not None:
            return ", ".join(f"{g} {s:g}" for g, s in self.target.items())
        return f"{self.protected} {self.target_share:g} (the other groups together the rest)"

    def index_kind(self, corpus_kind: str, labels: Iterable[tuple[str, str]]) -> str:
        """The index folder's corpus name: ``corpus_kind`` for the paper's data, else the data
        set's name and a digest of its ``(doc_id, group)`` pairs, so relabelled documents never
        reuse an index whose metadata holds other groups."""
        if not self.fingerprint_labels:
            return corpus_kind
        digest = hashlib.sha256(self.group_key.encode())
        for doc_id, group in labels:
            digest.update(b"\0" + doc_id.encode() + b"\0" + group.encode())
        return f"{corpus_kind}-{self.name}-{digest.hexdigest()[:8]}"


TREC_GENDER = StudyDataset(
    name="trec_gender",
    groups=("female", "male"),
    group_key="gender",
    group_column="gender",
    protected="female",
    protected_noun="women",
    target_share=0.5,
    extra_columns=("q_id",),
    per_group=50,
    paper=PAPER_NUMBERS,
    fingerprint_labels=False,
)
"""The TREC 2022 Fair Ranking gender data the paper used: parity for women (target 0.5)."""


def custom_dataset(
    target: Mapping[str, float],
    *,
    group_key: str = "gender",
    protected: str | None = None,
    name: str = "custom",
    **columns: str,
) -> StudyDataset:
    """A user's own CSV: the groups are the target's, the group column is ``group_key``, the
    other columns default to the TREC file's names (``doc_id_column=...`` etc. override them)."""
    return StudyDataset(
        name=name,
        groups=tuple(target),
        group_key=group_key,
        group_column=group_key,
        protected=protected,
        target=dict(target),
        **columns,  # type: ignore[arg-type]
    )
