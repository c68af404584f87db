"""Property-based fuzz of the audit's reader, run in a child process under an address-space
limit (``resource.RLIMIT_AS``) by ``audit_hostile_test.py``: a memory blow-up fails the test
(MemoryError, or DuckDB's out-of-memory error), never the machine.

Run: ``python -m tests.reliability.audit_fuzz_child FOLDER EXAMPLES LIMIT_BYTES``; exit 0 when
every example held, else the failing example is printed (hypothesis shrinks it first).
"""

from __future__ import annotations

import json
import math
import resource
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairrag_audit import audit
from fairrag_audit.analysis import RANGES

FIELDS = (
    "timestamp",
    "ranker",
    "protected",
    "target",
    "groups",
    "k",
    "exposure_model",
    "exposure_by_group",
    "exposure_share",
    "generation_parity",
    "grounded_generation_parity",
    "groundedness",
    "fairness_gap",
    "fairness_gap_magnitude",
    "follows_citation_format",
    "citation_styles",
    "attributed_sources",
    "n_attribution_bullets",
    "n_attributed_bullets",
    "attributed_generation_parity",
    "attributed_fairness_gap",
    "attributed_groundedness",
    "error",
    "metadata",
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.5, 1.0, -0.0, 1e300, -1e300, 2_000_000_000, 10_001]),
    st.text(max_size=12),
    st.sampled_from(["female", "male", "=1+1", "<script>", "2026-12-01T00:00:00Z", "9999-12-31"]),
    st.sampled_from(["numbered", "implicit", "doctitle", "bracketed_title", "telepathy"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
records = st.dictionaries(st.sampled_from(FIELDS), values, max_size=8)


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["record", "torn", "bytes", "deep", "blank", "scalar"]))
    if kind == "record":
        return json.dumps(draw(records)).encode()
    if kind == "torn":
        text = json.dumps(draw(records)).encode()
        return text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    if kind == "bytes":
        return draw(st.binary(max_size=64)).replace(b"\n", b" ")
    if kind == "deep":
        depth = draw(st.integers(1, 300_000))
        field = draw(st.sampled_from(["groups", "metadata", "exposure_by_group", "zzz"]))
        opening, closing = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        inner = opening * depth + ("1" if opening != "[" else "") + closing * depth
        return f'{{"ranker": "s", "{field}": {inner}}}'.encode()
    if kind == "blank":
        return draw(st.sampled_from([b"", b"  ", b"\t\r"]))
    return json.dumps(draw(values)).encode()


def check(folder: Path, body: list[bytes]) -> None:
    path = folder / "fuzz.jsonl"
    path.write_bytes(b"\n".join(body) + b"\n")
    physical = path.read_bytes().split(b"\n")[:-1]
    result = audit([path], protected="female", since="3000d")
    row = result.reading.iloc[0]
    parts = ("damaged", "not_records", "refused", "future", "records")
    assert sum(int(row[p]) for p in parts) == row["lines"], row.to_dict()
    assert row["lines"] == sum(1 for line in physical if line.strip())
    left = result.left_out
    assert len(left) == row["lines"] - row["records"]  # fewer than MAX_LISTED here
    assert left["line"].notna().all() and left["line"].is_unique
    for number in left["line"]:
        assert physical[int(number) - 1].strip(), number  # a listed line is never blank
    for table in (result.rankers, result.metrics):
        for metric, value, low, high in table[["metric", "value", "ci_low", "ci_high"]].itertuples(
            index=False
        ):
            lowest, highest = RANGES[metric]
            for x in (value, low, high):
                assert math.isnan(x) or lowest - 1e-9 <= x <= highest + 1e-9, (metric, x)
    shares = result.exposure["share"].dropna()
    assert ((shares >= -1e-9) & (shares <= 1 + 1e-9)).all()
    generation = result.generation
    if not generation.empty:  # what the answers cited: counts within the records audited
        assert generation["records"].sum() == row["used"]
        assert (generation["answers"] <= generation["records"]).all()
        for column in generation.columns:
            if column not in ("ranker", "records", "bullets", "attributed_bullets"):
                assert (generation[column] <= generation["answers"]).all(), column
        assert (generation["bullets"] >= generation["attributed_bullets"]).all()
        assert all(isinstance(line, str) for line in result.generation_why)


def main() -> int:
    folder, examples, limit = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(lines(), min_size=1, max_size=12))
    def reader_holds(body: list[bytes]) -> None:
        check(folder, body)

    reader_holds()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
