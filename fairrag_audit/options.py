"""What an audit is asked to do: the settings, checked before any file is read."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from fairrag_core.exposure import ExposureModel

__all__ = ["AuditOptions", "format_duration", "parse_duration", "parse_since"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_EXPOSURE = re.compile(r"^(dcg|uniform|rbp|rbp\((0(?:\.\d+)?|1(?:\.0*)?)\))$")
_FIELD = re.compile(r'^[^"\\\x00-\x1f]+$')
RESERVED_FIELDS = ("ranker", "window")


def parse_duration(text: str, name: str = "--window") -> timedelta:
    """``30m``, ``1h``, ``1.5h``, ``7d``, ``2w`` as a timedelta (s, m, h, d, w; > 0)."""
    match = _DURATION.match(str(text))
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(
            f"{name} {text!r} is not a duration; use a positive number and a unit s, m, h, d "
            "or w, e.g. 30m, 1h, 7d"
        )
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def format_duration(duration: timedelta) -> str:
    """The shortest of ``2w``, ``1d``, ``1h``, ``30m``, ``90s`` that states ``duration``."""
    seconds = duration.total_seconds()
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNIT_SECONDS[unit] == 0:
            return f"{int(seconds // _UNIT_SECONDS[unit])}{unit}"
    return f"{seconds:g}s"


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 date or time (UTC when it names no offset), or a duration before ``now``
    (``24h``, ``7d``: the last day, the last week), as an aware UTC datetime."""
    text = str(text).strip()
    if _DURATION.match(text):
        now = now or datetime.now(timezone.utc)
        return now - parse_duration(text, "--since")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r} is neither an ISO 8601 date or time (2026-12-01, "
            "2026-12-01T02:00:00Z) nor a duration before now (24h, 7d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


@dataclass(frozen=True)
class AuditOptions:
    """The settings of one audit (see :func:`fairrag_audit.audit` for each one's meaning)."""

    paths: tuple[Path, ...]
    by: tuple[str, ...] = ()
    since: datetime | None = None
    window: timedelta | None = None
    max_disparity: float | None = None
    protected: str | None = None
    target_share: float | None = None
    exposure: str = "dcg"
    confidence: float = 0.95
    alpha: float = 0.01
    now: datetime = dataclass_field(default_factory=lambda: datetime.now(timezone.utc))
    """When the audit started (UTC): ``--since 7d`` counts back from it, and a record dated
    after it (beyond the clock skew allowed) is refused as from the future."""

    def with_paths(self, paths: Sequence[Path]) -> AuditOptions:
        """These options for other log files (a shard of the same audit)."""
        return dataclasses.replace(self, paths=tuple(paths))

    @classmethod
    def from_partials(cls, **settings: object) -> AuditOptions:
        """The options saved partials were computed with (checked when they were)."""
        return cls(**settings)  # type: ignore[arg-type]

    @classmethod
    def create(
        cls,
        paths: Sequence[str | Path] | str | Path,
        *,
        by: Sequence[str] | str = (),
        since: str | datetime | None = None,
        window: str | timedelta | None = None,
        max_disparity: float | None = None,
        protected: str | None = None,
        target_share: float | None = None,
        exposure: str = "dcg",
        confidence: float = 0.95,
        alpha: float = 0.01,
        now: datetime | None = None,
    ) -> AuditOptions:
        """Check every setting; a bad one raises ``ValueError`` naming it and what is accepted."""
        now = datetime.now(timezone.utc) if now is None else now.astimezone(timezone.utc)
        if isinstance(paths, (str, Path)):
            paths = [paths]
        files = tuple(Path(p) for p in paths)
        if not files:
            raise ValueError("paths: give at least one log file (JSON lines, optionally .gz)")
        for path in files:
            if path.is_dir() and next(path.rglob("*.parquet"), None) is not None:
                continue  # a (hive-partitioned) folder of Parquet logs
            if not path.is_file():
                why = "is a folder without .parquet files" if path.is_dir() else "does not exist"
                raise ValueError(
                    f"log {str(path)!r} {why}; give JSON-lines files (.jsonl[.gz]), Parquet "
                    "files or folders of them"
                )
        fields = (by,) if isinstance(by, str) else tuple(by)
        for field in fields:
            if not isinstance(field, str) or not _FIELD.match(field):
                raise ValueError(
                    f"--by {field!r} is not a field name; give a record field such as tenant or "
                    "topic (no quotes, backslashes or control characters)"
                )
            if field in RESERVED_FIELDS:
                raise ValueError(
                    f"--by {field!r}: results are always split by ranker and window; name "
                    "another record field (e.g. tenant, topic)"
                )
        if len(set(fields)) != len(fields):
            raise ValueError(f"--by names a field twice: {list(fields)}")
        if isinstance(since, str):
            since = parse_since(since, now)
        elif since is not None:
            if not isinstance(since, datetime):
                raise ValueError(f"--since {since!r}: give an ISO 8601 string or a datetime")
            since = since.replace(tzinfo=timezone.utc) if since.tzinfo is None else since
            since = since.astimezone(timezone.utc)
        if isinstance(window, str):
            window = parse_duration(window)
        elif window is not None and (not isinstance(window, timedelta) or window <= timedelta(0)):
            raise ValueError(f"--window {window!r}: give a positive duration such as 1h or 7d")
        _check_fraction("--max-disparity", max_disparity, allow_none=True, closed=True)
        _check_fraction("--target-share", target_share, allow_none=True, closed=True)
        _check_fraction("--confidence", confidence, allow_none=False, closed=False)
        _check_fraction("--alpha", alpha, allow_none=False, closed=False)
        if target_share is not None and protected is None:
            raise ValueError(
                f"--target-share {target_share!r} needs --protected (the group it is owed to)"
            )
        if protected is not None and (not isinstance(protected, str) or not protected.strip()):
            raise ValueError(f"--protected {protected!r}: give a group label such as female")
        if not isinstance(exposure, str) or not _EXPOSURE.match(exposure):
            raise ValueError(
                f"--exposure {exposure!r} is unknown; use dcg, uniform, rbp or rbp(p) with p in "
                "(0, 1], e.g. rbp(0.8)"
            )
        if exposure.startswith("rbp("):
            ExposureModel("rbp", float(exposure[4:-1]))  # p = 0 is refused there, with a reason
        return cls(
            paths=files,
            by=fields,
            since=since,
            window=window,
            max_disparity=None if max_disparity is None else float(max_disparity),
            protected=protected,
            target_share=target_share,
            exposure=exposure,
            confidence=float(confidence),
            alpha=float(alpha),
            now=now,
        )


def _check_fraction(name: str, value: object, *, allow_none: bool, closed: bool) -> None:
    if value is None and allow_none:
        return
    ok = False
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        ok = 0 <= value <= 1 if closed else 0 < value < 1
    if not ok:
        interval = "[0, 1]" if closed else "(0, 1)"
        raise ValueError(f"{name} {value!r} must be a number in {interval}")
