"""The adapter kit: everything a framework adapter needs besides translating its own objects.

docs/SPEC.md, "Adapters: one behaviour in every framework". Both the LangChain and the
LlamaIndex adapters build from these pieces, so the two can never disagree on a rule:

- :mod:`.config`: the ranker configuration a component's fields describe, rebuilt whenever a
  field changes, and the per-query seeds that make every logged ranking re-drawable;
- :mod:`.relevance`: the named conversions from a store's scores to relevance, with the check
  that the converted scores do not rise along the store's best-first order;
- :mod:`.context`: a document's title, and the context text every framework shows the LLM;
- :mod:`.placement`: the metadata every shown document carries;
- :mod:`.records`: the fairness record of one answered question (docs/SPEC.md, "Records").
"""

from .config import (
    LEDGER_FIELDS,
    ComponentLedger,
    RankerConfig,
    RankerState,
    describe_ranker,
    draw_query_seed,
    ledger_location,
    refuse_bools,
)
from .context import (
    context_entry,
    context_header,
    document_title,
    hidden_metadata_keys,
    render_context_prompt,
)
from .placement import (
    LEDGER_PLACEMENT_KEYS,
    PLACEMENT_KEYS,
    drop_stale_placement,
    is_placed,
    placement_metadata,
    ranked_for,
    shown_provenance,
    target_pairs,
)
from .records import RECORD_SCHEMA, ShownDocument, run_record, utc_timestamp
from .relevance import RELEVANCE_CONVERSIONS, check_store_order, to_relevance

__all__ = [
    "LEDGER_FIELDS",
    "LEDGER_PLACEMENT_KEYS",
    "PLACEMENT_KEYS",
    "RECORD_SCHEMA",
    "RELEVANCE_CONVERSIONS",
    "ComponentLedger",
    "RankerConfig",
    "RankerState",
    "ShownDocument",
    "check_store_order",
    "context_entry",
    "context_header",
    "describe_ranker",
    "document_title",
    "draw_query_seed",
    "drop_stale_placement",
    "hidden_metadata_keys",
    "is_placed",
    "ledger_location",
    "placement_metadata",
    "ranked_for",
    "refuse_bools",
    "render_context_prompt",
    "run_record",
    "shown_provenance",
    "target_pairs",
    "to_relevance",
    "utc_timestamp",
]
