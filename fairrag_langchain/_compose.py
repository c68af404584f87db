"""How a LangChain composition reaches the fair component that ranks its documents.

docs/SPEC.md, "Adapters" → Composition. The chain (:func:`make_fair_rag_chain`) and the handler
(:meth:`FairnessCallbackHandler.from_retriever`) read the group key, target and exposure model
from the fair component behind the retriever they are given, and the chain passes a question's
``k`` and ``seed`` to it. LangChain hides that component behind wrappers; this module looks
through them, or refuses naming the fix: it never falls back to a default silently.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.runnables import RunnableBinding, RunnableWithFallbacks
from langchain_core.runnables.base import Runnable
from langchain_core.runnables.configurable import (
    RunnableConfigurableAlternatives,
    RunnableConfigurableFields,
)

from fairrag_core.audit import exposure_name

__all__ = [
    "PER_CALL_FIXED_FIELDS",
    "CompositionError",
    "fair_component_of",
    "per_call_refusal",
]

PER_CALL_FIXED_FIELDS = ("group_key", "exposure")
"""Fields a wrapper may not make configurable per call: the chain and the handler read them
once, when they are built."""

_MAX_DEPTH = 64


class CompositionError(ValueError):
    """A wrapper hides fair components that the chain or the handler cannot follow as one."""


def fair_component_of(runnable: Any) -> Any:
    """The fair component (``FairRetriever`` or ``FairReranker``) that ranks the documents
    ``runnable`` returns, or None when none can be seen.

    Looked through: ``with_config``/``bind`` (``RunnableBinding``, nested any depth);
    ``configurable_fields`` (its default; a configurable ``group_key`` or ``exposure``, or a
    configurable field holding the fair component, is refused); ``configurable_alternatives``
    and ``with_fallbacks`` (every alternative or fallback: the fair ones must agree on
    ``group_key`` and exposure model, and an alternative given as a function, which cannot be
    seen without building it, is refused); a compression retriever (its ``base_compressor``
    when fair, also as a step of a ``DocumentCompressorPipeline``, else its
    ``base_retriever``). Of several fair members the first (the default, the primary) is
    returned: a list ranked by another one is audited against the target its documents'
    ``fair_target`` names (:func:`fairrag_core.kit.ranked_for`).

    Raises :class:`CompositionError` (a ``ValueError``) naming the member and the fix.
    """
    members = [(component, path) for component, path in _rankers(runnable, "retriever", 0)]
    fair = [(component, path) for component, path in members if component is not None]
    if not fair:
        return None
    first, first_path = fair[0]
    for component, path in fair[1:]:
        for what, value, expected in (
            ("group_key", component.group_key, first.group_key),
            (
                "exposure model",
                exposure_name(component.fairness_exposure),
                exposure_name(first.fairness_exposure),
            ),
        ):
            if value != expected:
                raise CompositionError(
                    f"{path} ranks with {what} {value!r} but {first_path} with {expected!r}: "
                    "one chain or handler audits every list with one group key and exposure "
                    f"model; give them the same {what}"
                )
    return first


def per_call_refusal(runnable: Any) -> str | None:
    """Why a call's ``k`` and ``seed`` would not reach the fair ranking of the list
    ``runnable`` returns, or None when they do: when every path through the wrappers ends at
    a ``FairRetriever`` whose call receives the keywords (under bindings, configurable fields
    or alternatives, fallbacks, or as the base retriever of a compression retriever whose
    compressor is not fair)."""
    return _refusal(runnable, "retriever", 0)


def _is_fair(value: Any) -> bool:
    from ._fields import FairRankingFields  # _fields imports this module's users

    return isinstance(value, FairRankingFields)


def _is_fair_retriever(value: Any) -> bool:
    from .retrievers import FairRetriever

    return isinstance(value, FairRetriever)


def _fair_compressor(compressor: Any) -> Any:
    """The fair component of a compressor: itself, or the last fair step of a pipeline."""
    if _is_fair(compressor):
        return compressor
    steps = getattr(compressor, "transformers", None)
    if isinstance(steps, (list, tuple)):
        fair = [step for step in steps if _is_fair(step)]
        return fair[-1] if fair else None
    return None


def _rankers(runnable: Any, path: str, depth: int) -> Iterator[tuple[Any, str]]:
    """``(fair component or None, where)`` for every member that may return the list."""
    if depth > _MAX_DEPTH:
        raise CompositionError(f"{path} nests more than {_MAX_DEPTH} wrappers")
    if _is_fair(runnable):
        yield runnable, path
    elif isinstance(runnable, RunnableBinding):
        yield from _rankers(runnable.bound, path, depth + 1)
    elif isinstance(runnable, RunnableConfigurableFields):
        _check_configurable_fields(runnable, path)
        yield from _rankers(runnable.default, path, depth + 1)
    elif isinstance(runnable, RunnableConfigurableAlternatives):
        yield from _rankers(runnable.default, f"{path} (default)", depth + 1)
        for key, alternative in runnable.alternatives.items():
            where = f"{path} alternative {key!r}"
            if not isinstance(alternative, Runnable):
                raise CompositionError(
                    f"{where} is built by a function, so the fair component that ranks its "
                    "documents cannot be seen: give the alternative as a retriever object"
                )
            yield from _rankers(alternative, where, depth + 1)
    elif isinstance(runnable, RunnableWithFallbacks):
        yield from _rankers(runnable.runnable, path, depth + 1)
        for index, fallback in enumerate(runnable.fallbacks):
            yield from _rankers(fallback, f"{path} fallback {index}", depth + 1)
    elif hasattr(runnable, "base_compressor") and hasattr(runnable, "base_retriever"):
        compressor = _fair_compressor(runnable.base_compressor)
        if compressor is not None:
            yield compressor, f"{path}'s base_compressor"
        else:
            yield from _rankers(runnable.base_retriever, f"{path}'s base_retriever", depth + 1)
    else:
        yield None, path


def _check_configurable_fields(runnable: RunnableConfigurableFields, path: str) -> None:
    """Refuse per-call fields that would change what the chain and handler read once."""
    default = runnable.default
    if _is_fair(default):
        fixed = sorted(set(runnable.fields) & set(PER_CALL_FIXED_FIELDS))
        if fixed:
            raise CompositionError(
                f"{path} makes {fixed} configurable per call, but the chain and the handler "
                "read them once, when they are built: leave them fixed (one retriever per "
                "group key or exposure model)"
            )
        return
    for name in runnable.fields:
        if _is_fair(getattr(default, name, None)):
            raise CompositionError(
                f"{path} makes {name!r}, which holds the fair component, configurable per "
                "call: the chain and the handler cannot know which one ranks a list; make the "
                "fair component's own fields configurable instead"
            )


def _refusal(runnable: Any, path: str, depth: int) -> str | None:
    if depth > _MAX_DEPTH:
        return f"{path} nests more than {_MAX_DEPTH} wrappers"
    if _is_fair_retriever(runnable):
        return None
    if isinstance(runnable, RunnableBinding):
        return _refusal(runnable.bound, path, depth + 1)
    if isinstance(runnable, RunnableConfigurableFields):
        return _refusal(runnable.default, path, depth + 1)
    if isinstance(runnable, RunnableConfigurableAlternatives):
        members: list[tuple[Any, str]] = [(runnable.default, f"{path} (default)")]
        members += [
            (alt, f"{path} alternative {key!r}") for key, alt in runnable.alternatives.items()
        ]
        return _first_refusal(members, depth)
    if isinstance(runnable, RunnableWithFallbacks):
        members = [(runnable.runnable, path)]
        members += [(fb, f"{path} fallback {i}") for i, fb in enumerate(runnable.fallbacks)]
        return _first_refusal(members, depth)
    if hasattr(runnable, "base_compressor") and hasattr(runnable, "base_retriever"):
        if _fair_compressor(runnable.base_compressor) is not None:
            return (
                f"the fair component of {path} is the {type(runnable).__name__}'s compressor "
                f"({type(runnable.base_compressor).__name__}), which takes no per-call "
                f"arguments: the keywords would reach its base retriever "
                f"({type(runnable.base_retriever).__name__}) instead (k shrinks the pool it "
                "re-ranks; seed is not a search argument)"
            )
        return _refusal(runnable.base_retriever, f"{path}'s base_retriever", depth + 1)
    return f"{path} ({type(runnable).__name__}) is not a FairRetriever"


def _first_refusal(members: list[tuple[Any, str]], depth: int) -> str | None:
    for member, where in members:
        if not isinstance(member, Runnable):
            return f"{where} is built by a function (its keywords cannot be checked)"
        reason = _refusal(member, where, depth + 1)
        if reason is not None:
            return reason
    return None
