"""The fairness record as a typed schema (docs/SPEC.md, "Records"), for schema-driven tools.

:class:`FairnessRecord` types every field of the record :func:`~fairrag_core.kit.shown_record`
builds, so a chain's output schema (LangServe, a JSON-schema client) describes its ``metrics``;
``tests/record_schema_test.py`` holds its fields equal to docs/SPEC.md's table and to the keys of
real records. Imported by the adapters only (pydantic), never by ``import fairrag_core``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["FairnessRecord"]


class FairnessRecord(BaseModel):
    """One answered question's fairness record (docs/SPEC.md, "Records"); unknown keys allowed
    (a newer record read by an older schema)."""

    model_config = ConfigDict(extra="allow")

    schema_: int = Field(alias="schema", description="Record version (2).")
    timestamp: str = Field(description="When the run ended, ISO 8601 UTC.")
    source: str = Field(description="langchain, llamaindex or study.")
    run_id: str | None = Field(default=None, description="The framework's run or query id.")
    query: str | None = Field(default=None, description="The question.")
    ranker: str | None = Field(default=None, description="The fair ranker of the shown list.")
    query_seed: int | None = Field(default=None, description="The ranking's query seed.")
    ledger_state: dict[str, Any] | None = Field(
        default=None, description="The amortized ranker's stream before the draw."
    )
    target: dict[str, float] | None = Field(
        default=None, description="{group: share} the metrics were computed against."
    )
    protected: Any = Field(default=None, description="The protected group, or null.")
    exposure_model: str | None = Field(default=None, description="dcg, rbp(p) or uniform.")
    k: int | None = Field(default=None, description="Length of the fair list (or of the list).")
    pool_size: int | None = Field(default=None, description="Candidates ranked.")
    doc_ids: list[str | None] = Field(default_factory=list, description="Shown ids, in order.")
    titles: list[str | None] = Field(default_factory=list, description="Shown titles.")
    groups: list[Any] = Field(default_factory=list, description="Shown groups (null: unknown).")
    exposure_share: float | None = Field(default=None, description="Protected exposure share.")
    exposure_disparity: float | None = Field(default=None, description="|share - target|.")
    exposure_by_group: dict[str, float] | None = Field(
        default=None, description="Exposure share per group."
    )
    relevance_function: str | None = Field(
        default=None, description="How store scores became relevance."
    )
    reordered_after_ranking: bool | None = Field(
        default=None, description="A later step reordered the fair list."
    )
    dropped_after_ranking: int | None = Field(
        default=None, description="Documents of the fair list a later step left out."
    )
    mixed_after_ranking: bool = Field(
        default=False, description="The list mixes placed and other documents."
    )
    merged_rankings: int | None = Field(
        default=None, description="Rankings of one ranker a merge joined."
    )
    model: str | None = Field(default=None, description="The LLM's name.")
    tags: list[Any] = Field(default_factory=list, description="The run's tags.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="The run's metadata.")
    answer: str | None = Field(default=None, description="The generated answer.")
    follows_citation_format: bool | None = Field(
        default=None, description="A citation in the requested format was parsed."
    )
    n_bullets: int | None = Field(default=None, description="Bullets of the answer.")
    citations: list[Any] | None = Field(default=None, description="The parsed citations.")
    n_citations: int | None = Field(default=None, description="Citations parsed.")
    n_valid_citations: int | None = Field(default=None, description="Citing a shown document.")
    unparsed_lines: list[str] | None = Field(
        default=None, description="Bullets whose citation could not be read."
    )
    generation_parity: float | None = Field(default=None, description="SPEC Metrics.")
    grounded_generation_parity: float | None = Field(default=None, description="SPEC Metrics.")
    fairness_gap: float | None = Field(default=None, description="SPEC Metrics.")
    fairness_gap_magnitude: float | None = Field(default=None, description="SPEC Metrics.")
    groundedness: float | None = Field(default=None, description="SPEC Metrics.")
    citation_styles: Any = Field(default=None, description="SPEC Attribution: styles found.")
    attributed_sources: Any = Field(default=None, description="SPEC Attribution: sources.")
    n_attribution_bullets: int | None = Field(default=None, description="SPEC Attribution.")
    n_attributed_bullets: int | None = Field(default=None, description="SPEC Attribution.")
    attributed_generation_parity: float | None = Field(default=None, description="SPEC Metrics.")
    attributed_fairness_gap: float | None = Field(default=None, description="SPEC Metrics.")
    attributed_groundedness: float | None = Field(default=None, description="SPEC Metrics.")
    attributed_lines: int | None = Field(
        default=None, description="SPEC Attribution: last line read when the record was bounded."
    )
    miscitations: Any = Field(default=None, description="SPEC Attribution: mis-citations.")
    n_miscitations: int | None = Field(default=None, description="SPEC Attribution.")
    n_overcitations: int | None = Field(default=None, description="SPEC Attribution.")
    n_out_of_range: int | None = Field(default=None, description="SPEC Attribution.")
    n_refusals: int | None = Field(default=None, description="SPEC Attribution.")
    n_prompt_echo_lines: int | None = Field(
        default=None, description="SPEC Attribution: prompt lines copied into the answer."
    )
    attributed_generation_parity_explicit: float | None = Field(
        default=None, description="SPEC Metrics: citations alone."
    )
    attributed_fairness_gap_explicit: float | None = Field(
        default=None, description="SPEC Metrics: citations alone."
    )
    attributed_groundedness_explicit: float | None = Field(
        default=None, description="SPEC Metrics: citations alone."
    )
    attributed_citation_precision: float | None = Field(default=None, description="SPEC Metrics.")
    error: str | None = Field(default=None, description="Type: message of a failed run.")
    framework: dict[str, Any] = Field(
        default_factory=dict, description="Fields only one framework has."
    )
