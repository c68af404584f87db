"""What each phase of the study reads of its configuration: one small frozen record per phase,
built by :class:`~fairrag_study.config.StudyConfig` (:meth:`~fairrag_study.config.StudyConfig.
phase_settings`), so the configuration is read in one place and a phase receives only its
fields (docs/SPEC.md, "The study")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .dataset import StudyDataset

__all__ = [
    "CorpusSettings",
    "GenerationSettings",
    "IndexSettings",
    "ManySettings",
    "ReportSettings",
    "StudySettings",
    "TrialSettings",
]


@dataclass(frozen=True)
class CorpusSettings:
    """The data phase's: where the data is, the corpus and the trials to plan, each document's
    text (``per_group``: resolved, the data set's when not given)."""

    dataset: StudyDataset
    data: Path | None
    cache_dir: Path | None
    corpus: str
    corpus_seed: int
    topics: tuple[str, ...] | None
    per_group: int
    trials: int
    seed: int
    text: str
    wikipedia_api: str
    progress: bool


@dataclass(frozen=True)
class IndexSettings:
    """The index phase's: the embedding model, and where the corpus's index is (the cache
    folder's, or a Chroma server's)."""

    dataset: StudyDataset
    corpus: str
    model: str
    embedding_backend: str
    text: str
    cache_dir: Path | None
    chroma_host: str | None
    chroma_port: int
    progress: bool


@dataclass(frozen=True)
class GenerationSettings:
    """The generation phase's: the chat model asked, its bounds and its answer store."""

    llm: str
    seed: int
    max_tokens: int | None
    threads: int | None
    llm_format: Literal["free", "paper"]
    base_url: str | None
    llm_timeout: float | None
    llm_retries: int | None
    answers: Path | None
    answer_cache: bool
    cache_dir: Path | None


@dataclass(frozen=True)
class TrialSettings:
    """The trials phase's: the rankers (resolved) and how they rank, how many answers are in
    flight, and the generator's settings (its failures' messages)."""

    dataset: StudyDataset
    rankers: tuple[str, ...]
    exposure: str | None
    pool_size: int
    k: int
    alpha: float
    seed: int
    concurrency: int
    progress: bool
    generation: GenerationSettings


@dataclass(frozen=True)
class ManySettings:
    """The many-rankings phase's: the rankers (resolved) as the trials ran them, and the
    rankings sampled per question."""

    dataset: StudyDataset
    rankers: tuple[str, ...]
    exposure: str | None
    pool_size: int
    k: int
    alpha: float
    samples: int
    seed: int


@dataclass(frozen=True)
class ReportSettings:
    """The report phase's: the run's settings as the report states them."""

    dataset: StudyDataset
    rankers: tuple[str, ...]
    corpus: str
    topics: tuple[str, ...] | None
    per_group: int
    pool_size: int
    k: int
    alpha: float
    samples: int
    seed: int
    model: str
    llm: str
    llm_format: Literal["free", "paper"]
    exposure: str | None


@dataclass(frozen=True)
class StudySettings:
    """Every phase's settings, and the run's own: its output folder, its Chroma server, the
    position curve's questions (0: no phase)."""

    corpus: CorpusSettings
    index: IndexSettings
    generation: GenerationSettings
    trials: TrialSettings
    many: ManySettings
    report: ReportSettings
    out: Path
    chroma_timeout: float
    position_curve: int
