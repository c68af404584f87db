"""What an audit is asked to do: one typed model of its settings, checked once before any file
is read; ``fairrag audit``'s flags are built from its fields (:mod:`fairrag_audit.cli`)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fairrag_core.exposure import ExposureModel

__all__ = [
    "AuditOptions",
    "flag_of",
    "format_duration",
    "is_duration",
    "options_error",
    "parse_duration",
    "parse_since",
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_EXPOSURE = re.compile(r"^(dcg|uniform|rbp|rbp\((0(?:\.\d+)?|1(?:\.0*)?)\))$")
_FIELD = re.compile(r'^[^"\\\x00-\x1f]+$')
RESERVED_FIELDS = ("ranker", "window")
TABLE_COLUMNS = frozenset(
    {
        "window_start", "records", "errors", "metric", "value", "ci_low", "ci_high", "n",
        "n_missing", "group", "share", "weight", "series", "a", "b", "mean_a", "mean_b", "t",
        "df", "p", "critical_t", "significant", "alpha", "certain", "file", "line", "kind",
        "reason",
    }
)  # fmt: skip
"""The other columns of the report's tables: a ``--by`` field of one of these names is the
column ``by:<field>`` there (:attr:`AuditOptions.by_columns`)."""


MAX_DURATION = timedelta(days=36_525)
"""Longest ``--window`` or ``--since`` duration, 100 years: no record is dated before 1970
(``scan.EARLIEST``), and DuckDB's intervals and Python's timedelta overflow far beyond."""


def parse_duration(text: str, name: str = "--window") -> timedelta:
    """``30m``, ``1h``, ``1.5h``, ``7d``, ``2w`` as a timedelta (s, m, h, d, w; > 0, at most
    :data:`MAX_DURATION`)."""
    match = _DURATION.match(str(text))
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(
            f"{name} {text!r} is not a duration; use a positive number and a unit s, m, h, d "
            "or w, e.g. 30m, 1h, 7d"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(
            f"{name} {text!r} is longer than the cap of 100 years ({MAX_DURATION.days}d); "
            "no record is older than 1970"
        )
    return timedelta(seconds=seconds)


def format_duration(duration: timedelta) -> str:
    """The shortest of ``2w``, ``1d``, ``1h``, ``30m``, ``90s`` that states ``duration``."""
    seconds = duration.total_seconds()
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNIT_SECONDS[unit] == 0:
            return f"{int(seconds // _UNIT_SECONDS[unit])}{unit}"
    return f"{seconds:g}s"


def is_duration(text: str) -> bool:
    """Whether ``--since`` text is a duration before now (``7d``), not an ISO 8601 time."""
    return _DURATION.match(str(text)) is not None


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
    return _utc(moment)


def _utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime (UTC when it names no offset)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def _fraction(name: str, value: object, *, closed: bool) -> float:
    """``value`` (a number, or its text from the command line) in [0, 1] (``closed``) or
    (0, 1); else ``ValueError`` naming the flag."""
    number: float | None = None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    ok = number is not None and math.isfinite(number)
    if ok and number is not None:
        ok = 0 <= number <= 1 if closed else 0 < number < 1
    if not ok or number is None:
        interval = "[0, 1]" if closed else "(0, 1)"
        shown = value if number is None else number
        raise ValueError(f"{name} {shown!r} must be a number in {interval}")
    return number


def flag_of(field: str) -> str:
    """The command-line flag of an option's field (``target_share`` → ``--target-share``;
    ``paths`` → ``LOG``)."""
    return "LOG" if field == "paths" else "--" + field.replace("_", "-")


def options_error(error: ValidationError) -> str:
    """A :class:`ValidationError` of the options as one line per setting, each naming its
    flag and what is accepted."""
    lines = []
    for item in error.errors():
        message = str(item["msg"]).removeprefix("Value error, ")
        field = str(item["loc"][0]) if item["loc"] else ""
        flag = flag_of(field) if field else ""
        if flag and flag not in message:
            message = f"{flag}: {message} (got {_shown(item.get('input'))})"
        lines.append(message)
    return "; ".join(lines)


def _shown(value: Any) -> str:
    """A value given, as the command line wrote it: paths as text (an operator's trial read
    ``[PosixPath('x.jsonl')]``), anything else as Python writes it."""
    if isinstance(value, Path):
        return repr(str(value))
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Path) for v in value):
        return ", ".join(repr(str(v)) for v in value)
    return repr(value)


def _saved_partials(path: Path) -> Path | None:
    """The ``partials.json`` of saved partials (``--partials-out``) that ``path`` is, holds
    (a folder), or sits beside (one of their tables), else None."""
    if path.is_dir():
        return next(path.rglob("partials.json"), None)
    beside = path.parent / "partials.json"
    return beside if path.suffix == ".parquet" and beside.is_file() else None


class AuditOptions(BaseModel):
    """The settings of one audit (see :func:`fairrag_audit.audit` for each one's meaning).

    Each field's description is its flag's help in ``fairrag audit``; a bad value raises a
    ``ValidationError`` (a ``ValueError``) naming the flag and what is accepted
    (:meth:`create` raises it as one plain ``ValueError``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=False)

    now: datetime = Field(
        default_factory=lambda: datetime.now(timezone.utc),
        description="When the audit started (UTC): --since 7d counts back from it, and a "
        "record dated after it (beyond the clock skew allowed) is refused as from the future.",
        json_schema_extra={"cli": False},
    )
    paths: tuple[Path, ...] = Field(
        description="JSON-lines log(s), Parquet files or folders",
    )
    by: tuple[str, ...] = Field(
        default=(),
        description="also split by this record field (top level, else in metadata); repeat "
        "it or give several separated by commas",
        json_schema_extra={"action": "append", "metavar": "FIELD"},
    )
    since: datetime | None = Field(
        default=None,
        description="ISO 8601 time (UTC unless it says) or a duration: 7d",
        json_schema_extra={"metavar": "TIME"},
    )
    window: timedelta | None = Field(
        default=None,
        description="time windows of this length: 30m, 1h, 1d, 1w",
        json_schema_extra={"metavar": "DURATION"},
    )
    max_disparity: float | None = Field(
        default=None,
        description="band for the amortized disparity, e.g. 0.05",
        json_schema_extra={"metavar": "BAND"},
    )
    protected: str | None = Field(
        default=None,
        description="protected group of records that name none",
        json_schema_extra={"metavar": "GROUP"},
    )
    target_share: float | None = Field(
        default=None,
        description="its target share (default 0.5, with --protected)",
        json_schema_extra={"metavar": "SHARE"},
    )
    exposure: str = Field(
        default="dcg",
        description="exposure model of records that name none: dcg, uniform, rbp or rbp(p) (dcg)",
        json_schema_extra={"metavar": "MODEL"},
    )
    confidence: float = Field(
        default=0.95, description="interval level (0.95)", json_schema_extra={"metavar": "LEVEL"}
    )
    alpha: float = Field(
        default=0.01, description="t-test level (0.01)", json_schema_extra={"metavar": "LEVEL"}
    )

    @field_validator("now", mode="after")
    @classmethod
    def _now_utc(cls, now: datetime) -> datetime:
        return _utc(now)

    @field_validator("paths", mode="before")
    @classmethod
    def _logs(cls, paths: object, info: ValidationInfo) -> tuple[Path, ...]:
        """One or more log files, Parquet files or folders holding Parquet files."""
        if isinstance(paths, (str, Path)):
            paths = [paths]
        if not isinstance(paths, Sequence):
            raise ValueError(f"paths {paths!r}: give log files (a list of paths)")
        files = tuple(Path(p) for p in paths)
        if not files:
            raise ValueError("paths: give at least one log file (JSON lines, optionally .gz)")
        if (info.context or {}).get("saved"):
            return files  # the files saved partials were computed from: not read again
        for path in files:
            saved = _saved_partials(path)
            if saved is not None:
                raise ValueError(
                    f"log {str(path)!r} holds saved partials ({str(saved)!r}), not records: "
                    "report on them with --from-partials DIR (a folder of Parquet logs holds "
                    "logs only)"
                )
            if path.is_dir() and next(path.rglob("*.parquet"), None) is not None:
                continue  # a (hive-partitioned) folder of Parquet logs
            if not path.is_file():
                why = "is a folder without .parquet files" if path.is_dir() else "does not exist"
                raise ValueError(
                    f"log {str(path)!r} {why}; give JSON-lines files (.jsonl[.gz]), Parquet "
                    "files or folders holding Parquet files"
                )
            compressed = _other_compression(path)
            if compressed is not None:
                raise ValueError(
                    f"log {str(path)!r} is {compressed}-compressed; the audit reads JSON lines "
                    "plain or gzip-compressed, and Parquet (decompress it, or recompress it "
                    "with gzip)"
                )
        return files

    @field_validator("by", mode="before")
    @classmethod
    def _fields(cls, by: object) -> tuple[str, ...]:
        """Record fields, each given once (``--by a,b`` names two); not ranker nor window."""
        values = [by] if isinstance(by, str) else list(by) if isinstance(by, Sequence) else [by]
        fields: list[object] = []
        for value in values:
            fields += (
                [part.strip() for part in value.split(",")] if isinstance(value, str) else [value]
            )
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
            raise ValueError(f"--by names a field twice: {fields}")
        return tuple(str(field) for field in fields)

    @property
    def by_columns(self) -> tuple[str, ...]:
        """The ``--by`` fields as the report's tables name their columns: a field named like
        another of their columns (``group``, ``metric``, ``a``: :data:`TABLE_COLUMNS`) as
        ``by:<field>``, so no column is read for another."""
        return tuple(f"by:{field}" if field in TABLE_COLUMNS else field for field in self.by)

    @field_validator("since", mode="before")
    @classmethod
    def _since(cls, since: object, info: ValidationInfo) -> datetime | None:
        if since is None:
            return None
        if isinstance(since, str):
            return parse_since(since, info.data.get("now"))
        if not isinstance(since, datetime):
            raise ValueError(f"--since {since!r}: give an ISO 8601 string or a datetime")
        return _utc(since)

    @field_validator("window", mode="before")
    @classmethod
    def _window(cls, window: object) -> timedelta | None:
        if window is None:
            return None
        if isinstance(window, str):
            return parse_duration(window)
        if not isinstance(window, timedelta) or window <= timedelta(0):
            raise ValueError(f"--window {window!r}: give a positive duration such as 1h or 7d")
        return window

    @field_validator("max_disparity", "target_share", mode="before")
    @classmethod
    def _share(cls, value: object, info: ValidationInfo) -> float | None:
        return (
            None if value is None else _fraction(flag_of(str(info.field_name)), value, closed=True)
        )

    @field_validator("confidence", "alpha", mode="before")
    @classmethod
    def _level(cls, value: object, info: ValidationInfo) -> float:
        return _fraction(flag_of(str(info.field_name)), value, closed=False)

    @field_validator("protected", mode="before")
    @classmethod
    def _group(cls, protected: object) -> str | None:
        if protected is not None and (not isinstance(protected, str) or not protected.strip()):
            raise ValueError(f"--protected {protected!r}: give a group label such as female")
        return protected

    @field_validator("exposure", mode="before")
    @classmethod
    def _exposure(cls, exposure: object) -> str:
        if not isinstance(exposure, str) or not _EXPOSURE.match(exposure):
            raise ValueError(
                f"--exposure {exposure!r} is unknown; use dcg, uniform, rbp or rbp(p) with p in "
                "(0, 1], e.g. rbp(0.8)"
            )
        if exposure.startswith("rbp("):
            ExposureModel("rbp", float(exposure[4:-1]))  # p = 0 is refused there, with a reason
        return exposure

    @model_validator(mode="after")
    def _target_needs_group(self) -> AuditOptions:
        if self.target_share is not None and self.protected is None:
            raise ValueError(
                f"--target-share {self.target_share!r} needs --protected (the group it is owed to)"
            )
        return self

    @classmethod
    def create(cls, paths: Sequence[str | Path] | str | Path, **settings: Any) -> AuditOptions:
        """The options of an audit of ``paths``, checked once; a bad setting raises
        ``ValueError`` naming its flag and what is accepted (``None`` values: the defaults)."""
        given = {name: value for name, value in settings.items() if value is not None}
        try:
            return cls.model_validate({"paths": paths, **given})
        except ValidationError as error:
            raise ValueError(options_error(error)) from None

    @classmethod
    def from_partials(cls, **settings: Any) -> AuditOptions:
        """The options saved partials were computed with, and a report's levels: checked,
        except that the logs are not looked for (no log is read again)."""
        given = {name: value for name, value in settings.items() if value is not None}
        try:
            return cls.model_validate(given, context={"saved": True})
        except ValidationError as error:
            raise ValueError(options_error(error)) from None

    def with_paths(self, paths: Sequence[Path]) -> AuditOptions:
        """These options for other log files (a shard of the same audit)."""
        return self.model_copy(update={"paths": tuple(paths)})


_MAGIC = {
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
    b"\x04\x22\x4d\x18": "lz4",
}
"""The first bytes of compressed files the audit does not read (it reads gzip)."""


def _other_compression(path: Path) -> str | None:
    """The compression ``path`` is in when it is one the audit does not read, by its first
    bytes (its lines would otherwise be counted as torn)."""
    try:
        with open(path, "rb") as handle:
            start = handle.read(6)
    except OSError as exc:
        raise ValueError(f"log {str(path)!r} cannot be read: {exc}") from None
    return next((name for magic, name in _MAGIC.items() if start.startswith(magic)), None)
