"""Fairness records of one RAG run, computed the same way for every framework adapter.

A retrieval record holds the groups shown (in rank order) and their exposure; a generation
record adds what the answer cited: generation parity, fairness gap, gap magnitude and
groundedness (docs/SPEC.md, "Metrics"). Records are plain JSON-ready dicts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from .attribution import AttributedAnswer, AttributedBullet, Attribution, attribute_answer
from .citations import ContextDocument, cited_groups, ground_citations, parse_citations
from .exposure import ExposureModel, fitted_name, make_exposure_model
from .metrics import (
    attributed_citation_precision,
    attributed_generation_parity,
    attributed_groundedness,
    exposure_disparity,
    exposure_shares,
    fairness_gap,
    fairness_gap_magnitude,
    generation_parity,
    grounded_generation_parity,
    groundedness,
)
from .target import OTHERS, Target, make_target, plain_label, record_key

__all__ = ["FairnessAuditor", "exposure_name", "json_label", "summarize_records", "target_dict"]

RETRIEVAL_FIELDS = ("exposure_share", "exposure_disparity")
GENERATION_FIELDS = (
    "generation_parity",
    "grounded_generation_parity",
    "fairness_gap",
    "fairness_gap_magnitude",
    "groundedness",
    "attributed_generation_parity",
    "attributed_fairness_gap",
    "attributed_groundedness",
    "attributed_generation_parity_explicit",
    "attributed_fairness_gap_explicit",
    "attributed_groundedness_explicit",
    "attributed_citation_precision",
)
MAX_RECORDED_ATTRIBUTIONS = 10_000
"""Most attributions (and bullets) a record lists: ``fairrag audit``'s caps are these."""
MAX_RECORDED_SOURCES_BYTES = 2**20
"""Longest ``attributed_sources`` JSON text a record holds (``fairrag audit``'s cap)."""
MAX_RECORDED_LIST = 10_000
"""Longest shown list (``k``, ``groups``) and most groups a record ``fairrag audit`` reads may
hold; a handler warns when it keeps a record past it (docs/SPEC.md "Records")."""
MAX_RECORDED_LABEL_CHARS = 256
"""Longest ranker name, group label or protected group a record ``fairrag audit`` reads may
hold; a handler warns when it keeps a record past it."""
_RECORDED_NAME = 200
"""Characters of a bullet's head (``person``) or a title a record keeps per attribution."""


@dataclass(frozen=True)
class FairnessAuditor:
    """Computes retrieval and generation records against one fairness target.

    ``target`` comes from ``protected``/``target_share`` or a full ``target`` mapping (see
    :func:`fairrag_core.make_target`); ``exposure`` is the position-weight model (default DCG).
    With several groups and no ``protected``, ``exposure_share`` and the generation parity
    metrics (which are about one protected group) are left out of the records.
    """

    target: Target
    exposure: ExposureModel

    @classmethod
    def create(
        cls,
        *,
        protected: Hashable | None = None,
        target_share: float | None = None,
        target: Mapping[Hashable, float] | Target | None = None,
        exposure: str | ExposureModel | None = None,
    ) -> FairnessAuditor:
        return cls(
            make_target(protected=protected, target_share=target_share, target=target),
            make_exposure_model(exposure),
        )

    @property
    def protected(self) -> Hashable | None:
        return self.target.protected

    def describe(self) -> dict[str, object]:
        """``target``, ``protected`` and ``exposure_model`` as a record states them."""
        return {
            "target": target_dict(self.target),
            "protected": json_label(self.protected),
            "exposure_model": exposure_name(self.exposure),
        }

    def retrieval(self, groups: Sequence[Hashable | None]) -> dict[str, object]:
        """Exposure of the shown list (``groups`` in rank order)."""
        groups = list(groups)
        record: dict[str, object] = {
            "groups": [json_label(g) for g in groups],
            "exposure_disparity": exposure_disparity(
                groups, target=self.target, exposure=self.exposure
            ),
        }
        shares = exposure_shares(groups, exposure=self.exposure)
        # exposure_share's value, from the same shares; null for a target of several groups,
        # which has no protected group (a field that does not apply is null, never left out:
        # a user trial found it missing)
        record["exposure_share"] = (
            None
            if self.protected is None
            else (shares.get(self.protected, 0.0) if groups else math.nan)
        )
        by_group: dict[str, float] = {}
        for group, share in shares.items():  # labels written alike (None, "None") share a key
            key = record_key(group)
            by_group[key] = by_group.get(key, 0.0) + share
        record["exposure_by_group"] = by_group
        return record

    def generation(
        self,
        answer: str,
        context: Sequence[ContextDocument],
        retrieval_share: float | None = None,
        *,
        require_format: bool = False,
    ) -> dict[str, object]:
        """Parse and ground ``answer`` against ``context``; the generation metrics, the paper's
        (its cited sources) and the attributed ones (docs/SPEC.md, "Attribution").

        ``retrieval_share`` is the protected exposure share of the same run's retrieval (for
        the gap metrics); when None they are NaN. NaN generation parity (no valid citation) is
        recorded as such and counted, never dropped. ``follows_citation_format`` says whether
        a citation in the requested format (``(DocTitle: X)``) was parsed; with
        ``require_format`` an answer without one gets no metrics at all (for answers that are
        not meant to follow the paper's format), else it scores docs/SPEC.md's values
        (groundedness 0, generation parity NaN) and the attributed metrics of whatever style
        it answered in. ``citation_styles`` names the styles found (``implicit``: people named,
        not cited); ``attributed_sources`` lists every attribution.
        """
        parsed = parse_citations(answer)
        follows = len(parsed.citations) > 0
        if require_format and not follows:
            return {"follows_citation_format": False, "unparsed_lines": []}
        grounded = ground_citations(parsed, context)
        attributed, attributed_lines = bounded_attribution(attribute_answer(answer, context))
        record: dict[str, object] = {
            "follows_citation_format": follows,
            "citation_styles": list(attributed.styles),
            "n_bullets": parsed.bullet_count,
            "n_citations": len(parsed.citations),
            "n_valid_citations": sum(item.valid for item in grounded),
            "unparsed_lines": [line.line for line in parsed.unparsed],
            "citations": [
                {
                    "person": item.citation.person,
                    "title": item.citation.title,
                    "valid": item.valid,
                    "names_person": item.names_person,
                    "group": json_label(item.group),
                }
                for item in grounded
            ],
            "groundedness": groundedness(grounded, parsed.bullet_count),
            "n_attributed_bullets": attributed.attributed_count,
            "n_attribution_bullets": attributed.bullet_count,
            "attributed_sources": [
                _source(bullet, item)
                for bullet in attributed.bullets
                for item in bullet.attributions
            ],
            "attributed_lines": attributed_lines,
            "miscitations": [
                _source(bullet, item) for bullet in attributed.bullets for item in bullet.miscited
            ],
            "n_miscitations": len(attributed.miscitations),
            "n_overcitations": attributed.overcited_count,
            "n_out_of_range": attributed.out_of_range_count,
            "n_refusals": attributed.refusal_count,
            "n_prompt_echo_lines": len(attributed.prompt_echo),
            "attributed_groundedness": attributed_groundedness(attributed),
            "attributed_groundedness_explicit": attributed_groundedness(
                attributed, provenance="explicit"
            ),
            "attributed_citation_precision": attributed_citation_precision(attributed),
        }
        if self.protected is not None:
            gdp = generation_parity(cited_groups(grounded), self.protected)
            share = math.nan if retrieval_share is None else float(retrieval_share)
            record["generation_parity"] = gdp
            record["grounded_generation_parity"] = grounded_generation_parity(
                grounded, self.protected
            )
            record["fairness_gap"] = fairness_gap(gdp, share)
            record["fairness_gap_magnitude"] = fairness_gap_magnitude(
                gdp, share, self.target.protected_share
            )
            agdp = attributed_generation_parity(attributed, self.protected)
            record["attributed_generation_parity"] = agdp
            record["attributed_fairness_gap"] = fairness_gap(agdp, share)
            explicit = attributed_generation_parity(
                attributed, self.protected, provenance="explicit"
            )
            record["attributed_generation_parity_explicit"] = explicit
            record["attributed_fairness_gap_explicit"] = fairness_gap(explicit, share)
        return record


def bounded_attribution(attributed: AttributedAnswer) -> tuple[AttributedAnswer, int | None]:
    """``attributed`` cut to its first bullets whose record fits ``fairrag audit``'s caps
    (:data:`MAX_RECORDED_ATTRIBUTIONS` bullets and attributions,
    :data:`MAX_RECORDED_SOURCES_BYTES` of ``attributed_sources`` JSON, measured with every
    non-ASCII character escaped, its longest form), and the last answer line it reads (None: the
    whole answer). The metrics are then those of the bullets kept, so a record the library
    writes is always one the audit reads (docs/SPEC.md, "Attribution")."""
    size = 2
    count = 0
    for index, bullet in enumerate(attributed.bullets):
        for item in bullet.attributions:
            size += len(json.dumps(_source(bullet, item))) + 2
            count += 1
        if size > MAX_RECORDED_SOURCES_BYTES or max(count, index + 1) > MAX_RECORDED_ATTRIBUTIONS:
            kept = attributed.bullets[:index]
            last = kept[-1].line_number if kept else 0
            beyond = tuple(x for x in attributed.out_of_range_elsewhere if x[0] <= last)
            refused = tuple(n for n in attributed.refusals_elsewhere if n <= last)
            bounded = AttributedAnswer(kept, attributed.prompt_echo, beyond, refused)
            return bounded, last
    return attributed, None


def _source(bullet: AttributedBullet, item: Attribution) -> dict[str, object]:
    """One attribution as a record lists it, with its provenance (docs/SPEC.md, "Attribution")."""
    return {
        "line_number": bullet.line_number,
        "person": bullet.person[:_RECORDED_NAME],
        "title": item.title[:_RECORDED_NAME],
        "style": item.style,
        "provenance": "explicit" if item.explicit else "implicit",
        "name_form": item.name_form,
        "names_person": item.names_person,
        "group": json_label(item.group),
    }


def target_dict(target: Target) -> dict[str, float]:
    """``{group: share}`` with JSON keys (the others bucket as ``"OTHERS"``)."""
    return {record_key(group): float(share) for group, share in target.as_dict().items()}


def exposure_name(model: ExposureModel) -> str:
    """``dcg``, ``uniform``, ``rbp(p)`` or ``fitted(v1,...,vk)``: an exposure model as records
    name it (a form :func:`~fairrag_core.exposure.make_exposure_model` reads back)."""
    if model.curve is not None:
        return fitted_name(model.curve)
    return f"rbp({float(model.patience)!r})" if model.name == "rbp" else model.name


def json_label(label: Hashable | None) -> object:
    """A group label as a JSON value (the others bucket as ``"OTHERS"``, a numpy number or
    string as Python's: ``np.int64(1)`` is ``1``, as JSON and YAML can write it; others by
    ``str``)."""
    label = plain_label(label)  # numpy's as Python's, 1.0 as 1 (one group, one label)
    if label is None or isinstance(label, (str, int, float, bool)):
        return label
    if label is OTHERS:
        return "OTHERS"
    return str(label)


def summarize_records(
    records: Sequence[Mapping[str, object]], by: str = "ranker"
) -> dict[str, dict[str, object]]:
    """Mean of each metric per ``by`` value (e.g. per ranker), with counts.

    For each metric: ``mean`` over the finite values, ``n`` the finite values averaged and
    ``n_nan`` the records where it was NaN or missing (counted, never silently dropped).
    """
    groups: dict[str, list[Mapping[str, object]]] = {}
    for record in records:
        groups.setdefault(str(record.get(by)), []).append(record)
    summary: dict[str, dict[str, object]] = {}
    for key, members in groups.items():
        row: dict[str, object] = {"runs": len(members)}
        for name in RETRIEVAL_FIELDS + GENERATION_FIELDS:
            values = [m.get(name) for m in members]
            finite = [  # a boolean is no metric value (True is not 1.0)
                float(v)
                for v in values
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            ]
            if not any(name in m for m in members):
                continue
            row[name] = {
                "mean": math.fsum(finite) / len(finite) if finite else math.nan,
                "n": len(finite),
                "n_nan": len(values) - len(finite),
            }
        summary[key] = row
    return summary
