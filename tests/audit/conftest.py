"""A report written once per session by the real command, for the CLI and browser tests."""

from __future__ import annotations

from pathlib import Path

import matplotlib.figure
import numpy as np
import pytest

from fairrag_study.cli import main
from tests.audit.logs import record, write_log

RANKER_FEMALE_RATE = {"standard": 0.2, "representative_stochastic": 0.5}


def deployment_records(
    hours: int = 4, per_hour: int = 12, seed: int = 0, day: str = "2026-12-01"
) -> list[dict]:
    """Two rankers, two tenants (one at top level, one in metadata), ``hours`` of records."""
    rng = np.random.default_rng(seed)
    records = []
    for hour in range(hours):
        for i in range(per_hour):
            ranker = "standard" if i % 2 else "representative_stochastic"
            groups = ["female" if x else "male" for x in rng.random(5) < RANKER_FEMALE_RATE[ranker]]
            cited = groups[:3]
            stamp = f"{day}T{hour:02d}:{i * 4:02d}:00Z"
            records.append(
                record(
                    groups,
                    ranker=ranker,
                    timestamp=stamp,
                    generation_parity=cited.count("female") / len(cited),
                    groundedness=1.0,
                    metadata={"tenant": "acme" if i % 3 else "globex"},
                )
            )
    return records


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("audit")
    log = write_log(folder / "fairness.jsonl", deployment_records(), [b"{torn\n"])
    out = folder / "report"
    code = main(
        [
            "audit",
            str(log),
            "--out",
            str(out),
            "--by",
            "tenant",
            "--window",
            "1h",
            "--max-disparity",
            "0.05",
            "--protected",
            "female",
        ]
    )
    assert code == 0
    return out


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, matplotlib.figure.Figure]:
    """Every figure saved, by file name, kept open for inspection."""
    figures: dict[str, matplotlib.figure.Figure] = {}
    save = matplotlib.figure.Figure.savefig

    def keep(self: matplotlib.figure.Figure, path: object, *args: object, **kwargs: object):
        figures[Path(str(path)).name] = self
        return save(self, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return figures
