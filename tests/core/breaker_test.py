"""The circuit breaker (fairrag_core.breaker): closed -> open -> one probe -> closed, driven
by hand (no service, no clock assertion: the cool-down is 0 or long)."""

from __future__ import annotations

import math

import pytest

from fairrag_core.breaker import CircuitBreaker


class Down(ConnectionError):
    pass


def test_a_failure_opens_it_and_calls_fail_fast_naming_the_failure():
    breaker = CircuitBreaker("Service at x", cooldown=3600, error=Down)
    breaker.check("GET /a")  # closed: through
    cause = TimeoutError("no answer")
    breaker.failed(cause, "GET /a: TimeoutError")
    with pytest.raises(Down, match=r"GET /b failed fast, .*GET /a: TimeoutError.*a probe in") as e:
        breaker.check("GET /b")
    assert e.value.__cause__ is cause and breaker.fast_failures == 1
    breaker.succeeded()
    breaker.check("GET /c")  # closed again


def test_cooldown_0_lets_the_next_call_probe_at_once_and_the_others_fail_fast():
    breaker = CircuitBreaker("Service at x", cooldown=0, error=Down)
    breaker.failed(OSError(), "GET /a: OSError")
    breaker.check("GET /probe")  # the probe
    with pytest.raises(Down, match="a probe is running"):
        breaker.check("GET /during")


def test_a_probe_abandoned_leaves_it_open_and_the_next_call_probes():
    """A probe stopped before the service answered (KeyboardInterrupt) says nothing of it:
    the circuit stays open (it closed, and the next call waited on a frozen server)."""
    breaker = CircuitBreaker("Service at x", cooldown=0, error=Down)
    breaker.failed(OSError(), "GET /a: OSError")
    breaker.check("GET /probe")
    breaker.abandoned()
    assert breaker._open_until is not None  # still open
    breaker.check("GET /next probe")  # a probe again, not a call through a closed circuit
    with pytest.raises(Down):
        breaker.check("GET /during")


@pytest.mark.parametrize("cooldown", [-1, math.inf, math.nan, True, "1"])
def test_a_cooldown_that_is_not_finite_seconds_is_refused(cooldown):
    with pytest.raises(ValueError, match="cooldown must be a finite number of seconds >= 0"):
        CircuitBreaker("Service at x", cooldown=cooldown, error=Down)
