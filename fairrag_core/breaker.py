"""A circuit breaker: fail fast while a remote service is known to be down.

Closed: calls go through. A call that fails reaching the service (a timeout, a refused or
broken connection) opens it for ``cooldown`` seconds: calls then fail at once, without
reaching the service. After the cool-down one call goes through as a probe (half-open; the
others still fail fast); its success closes the circuit, its failure opens it again.
Thread-safe: one breaker serves every thread using the client. Used by the Redis ledger
(:class:`~fairrag_core.ledger.RedisLedger`, one breaker per server and cool-down shared by
every client of it in the process, so a client rebuilt for each call fails fast too) and the
study's Chroma client, so a request never waits out a deadline that an earlier request
already found passing (docs/SPEC.md, "Beyond the paper" → reliability).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

__all__ = ["CircuitBreaker", "check_cooldown"]


def check_cooldown(cooldown: object) -> float:
    """A breaker's cool-down: a finite number of seconds >= 0 (not a bool), as a float."""
    if (
        isinstance(cooldown, bool)
        or not isinstance(cooldown, (int, float))
        or not 0 <= cooldown < math.inf
    ):
        raise ValueError(f"cooldown must be a finite number of seconds >= 0, got {cooldown!r}")
    return float(cooldown)


class CircuitBreaker:
    """Closed -> open (``cooldown`` seconds, calls fail fast) -> half-open (one probe) -> closed.

    ``name`` names the service in the errors (``Redis ledger at redis://host:6379/0``);
    ``error`` makes the error a refused call raises from its message (the last failure is its
    ``__cause__``). ``cooldown`` 0: the call after a failure is the probe at once.
    """

    def __init__(self, name: str, cooldown: float, error: Callable[[str], BaseException]) -> None:
        self.name = name
        self.cooldown = check_cooldown(cooldown)
        self._error = error
        self._lock = threading.Lock()
        self._open_until: float | None = None
        self._probing = False
        self._last_error: BaseException | None = None
        self._last_failure = ""
        self.fast_failures = 0
        """Calls refused without reaching the service (a count, for tests and logs)."""

    def remaining(self) -> float:
        """Seconds left in the cool-down (0 when closed or ready for a probe)."""
        with self._lock:
            if self._open_until is None:
                return 0.0
            return max(0.0, self._open_until - time.monotonic())

    def check(self, what: str) -> None:
        """Let the call ``what`` through, or raise the error at once while the circuit is open."""
        with self._lock:
            if self._open_until is None:
                return
            left = self._open_until - time.monotonic()
            if left <= 0 and not self._probing:
                self._probing = True  # this call is the probe
                return
            self.fast_failures += 1
            cause = self._last_error
            wait = f"a probe in {left:.1f} s" if left > 0 else "a probe is running"
            message = (
                f"{self.name} is unavailable: {what} failed fast, without a request, since an "
                f"earlier request failed ({self._last_failure}); {wait}"
            )
        raise self._error(message) from cause

    def succeeded(self) -> None:
        """The service answered (an error of its own included): the circuit closes."""
        with self._lock:
            self._open_until, self._probing = None, False

    def abandoned(self) -> None:
        """A call stopped before the service answered or failed (``KeyboardInterrupt``, a
        cancelled task): nothing learnt; a probe it was leaves the next call to probe."""
        with self._lock:
            self._probing = False

    def failed(self, error: BaseException, description: str) -> None:
        """A call did not reach the service or got no answer in time: the circuit opens."""
        with self._lock:
            self._open_until = time.monotonic() + self.cooldown
            self._probing = False
            self._last_error, self._last_failure = error, description
