"""The audit's partial aggregates on a Dask cluster of two worker processes (on loopback)
equal one DuckDB run's over the same logs, and so does the report made from them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fairrag_audit import audit
from fairrag_audit.analysis import report_of
from fairrag_audit.options import AuditOptions
from fairrag_audit.partials import compute_partials
from tests.audit.partials_test import OPTIONS, assert_same_report, assert_same_table, days

distributed = pytest.importorskip("distributed")


def test_partials_per_shard_on_a_local_cluster_equal_the_duckdb_result(tmp_path: Path) -> None:
    from fairrag_audit.distributed import distributed_partials

    logs = days(tmp_path)
    options = AuditOptions.create(logs, **OPTIONS)
    one_run = compute_partials(options)
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids  # two worker processes
        on_cluster = distributed_partials(client, options)
        # shards of several files too: the first two days on one task, the third on another
        grouped = distributed_partials(client, options, [logs[:2], logs[2:]])
    for partials in (on_cluster, grouped):
        for name in ("cells", "groups", "files", "left_out"):
            assert_same_table(getattr(partials, name), getattr(one_run, name), name)
        assert_same_report(report_of(partials, options), audit(logs, **OPTIONS))


@pytest.mark.parametrize(
    ("pick", "words"),
    [
        (lambda logs: [logs[:1]], r"leave out \[.*day1"),
        (lambda logs: [logs, [logs[0].with_name("extra.jsonl")]], r"add files not in .*extra"),
        (lambda logs: [logs, logs[:1]], r"repeat \[.*day0"),
        # an operator's trial: a shard of no file failed on the worker with DuckDB's raw
        # "Table with name raw_records does not exist"
        (lambda logs: [logs, []], r"shard\(s\) \[1\] \(0-based\) name none"),
    ],
    ids=["left-out", "added", "repeated", "empty"],
)
def test_shards_that_do_not_hold_the_options_paths_once_are_refused(tmp_path, pick, words):
    """A user trial: ``shards=[[a]]`` over options holding a and b reported a's records alone,
    and a shard of a file not in the options added its records, without a word. Refused before
    any task is sent (no cluster needed)."""
    from fairrag_audit.distributed import distributed_partials

    logs = days(tmp_path)
    options = AuditOptions.create(logs, **OPTIONS)
    with pytest.raises(ValueError, match=words):
        distributed_partials(None, options, pick(logs))  # type: ignore[arg-type]
