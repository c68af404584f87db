"""The adapter kit: everything a framework adapter needs besides translating its own objects.

docs/SPEC.md, "Adapters: one behaviour in every framework". Both the LangChain and the
LlamaIndex adapters build from these pieces, so the two can never disagree on a rule:

- :mod:`.config`: the ranker configuration a component's fields describe, rebuilt whenever a
  field changes, and the per-query seeds that make every logged ranking re-drawable;
- :mod:`.relevance`: the named conversions from a store's scores to relevance, with the check
  that the converted scores do not rise along the store's best-first order;
- :mod:`.context`: a document's title, and the context text every framework shows the LLM;
- :mod:`.placement`: the metadata every shown document carries;
- :mod:`.place`: the main step, a pool in and its ranking, placed metadata and shown list out;
- :mod:`.records`: the fairness record of one answered question (docs/SPEC.md, "Records"),
  its one builder and its retention;
- :mod:`.held`: the list a model was handed, read from its prompt (a later step's reorder or
  cut);
- :mod:`.verdicts`: a model output that is a grade, not an answer (a grader's text "no");
- :mod:`.component`: the component contract, the fields every fair component shares (pydantic;
  imported by the adapters only, never by ``import fairrag_core.kit``).
"""

from .config import (
    LEDGER_FIELDS,
    ComponentLedger,
    RankerConfig,
    RankerState,
    check_group_key,
    check_query_seed,
    describe_ranker,
    draw_query_seed,
    ledger_location,
    ranker_from_description,
    refuse_bools,
)
from .context import (
    context_entry,
    context_header,
    document_title,
    entries_by_label,
    hidden_metadata_keys,
    render_context_prompt,
    shown_once,
)
from .held import PARTLY, collapsed, held_order, located, place_in, search_start
from .place import Placed, place, pool_relevance, shown_documents
from .placement import (
    LEDGER_PLACEMENT_KEYS,
    PLACEMENT_KEYS,
    drop_stale_placement,
    is_placed,
    placement_metadata,
    placements_metadata,
    ranked_for,
    ranking_metadata,
    shown_provenance,
    target_pairs,
)
from .pools import TOP_UPS, distinct_pool, first_occurrences, lacking, searched
from .records import (
    DEFAULT_MAX_RECORDS,
    PROVENANCE_FIELDS,
    RECORD_SCHEMA,
    SEARCH_FIELDS,
    KeptSinks,
    RecordKeeper,
    ShownDocument,
    check_max_records,
    flush_sinks,
    run_record,
    search_entry,
    shown_record,
    unaudited_record,
    utc_timestamp,
)
from .relevance import RELEVANCE_CONVERSIONS, check_monotone, check_store_order, to_relevance
from .verdicts import VERDICT_WORDS, is_verdict

__all__ = [
    "DEFAULT_MAX_RECORDS",
    "LEDGER_FIELDS",
    "LEDGER_PLACEMENT_KEYS",
    "PARTLY",
    "PLACEMENT_KEYS",
    "PROVENANCE_FIELDS",
    "RECORD_SCHEMA",
    "RELEVANCE_CONVERSIONS",
    "SEARCH_FIELDS",
    "TOP_UPS",
    "VERDICT_WORDS",
    "ComponentLedger",
    "KeptSinks",
    "Placed",
    "RankerConfig",
    "RankerState",
    "RecordKeeper",
    "ShownDocument",
    "check_group_key",
    "check_max_records",
    "check_monotone",
    "check_query_seed",
    "check_store_order",
    "collapsed",
    "context_entry",
    "context_header",
    "describe_ranker",
    "distinct_pool",
    "document_title",
    "draw_query_seed",
    "drop_stale_placement",
    "entries_by_label",
    "first_occurrences",
    "flush_sinks",
    "held_order",
    "hidden_metadata_keys",
    "is_placed",
    "is_verdict",
    "lacking",
    "ledger_location",
    "located",
    "place",
    "place_in",
    "placement_metadata",
    "placements_metadata",
    "pool_relevance",
    "ranked_for",
    "ranker_from_description",
    "ranking_metadata",
    "refuse_bools",
    "render_context_prompt",
    "run_record",
    "search_entry",
    "search_start",
    "searched",
    "shown_documents",
    "shown_once",
    "shown_provenance",
    "shown_record",
    "target_pairs",
    "to_relevance",
    "unaudited_record",
    "utc_timestamp",
]
