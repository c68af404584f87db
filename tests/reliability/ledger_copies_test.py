"""A Redis ledger client rebuilt for each call (a FairRetriever reached through LangChain's
``configurable_fields`` with a value, or ``model_copy``; a new ``RedisLedger`` of the same URL)
behaves as the first client of that server in the process: it notices a stream an earlier
client saw rolled back, fails fast while the circuit breaker is open, and settles an add an
earlier client gave up on (docs/SPEC.md item 6, "Lost streams", "Deadlines"). Against real
redis-servers; counts and messages, no wall-clock assertion."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from langchain_core.runnables import ConfigurableField

from fairrag_core import LedgerUnavailableError
from fairrag_core.ledger import LedgerResetError, RedisLedger
from fairrag_core.ledger.base import forget_shared_memory
from fairrag_langchain import FairRetriever
from tests.langchain.doubles import amortized_retriever
from tests.redis_server import free_port

KEY = "tenant-a"
CONFIGURED = {"configurable": {"k": 4}}
FAST = "failed fast, without a request"


def _per_call(base: FairRetriever, how: str):
    """A call of ``base`` that rebuilds its ranker, and so its ledger client, every time."""
    if how == "configurable_fields":
        configurable = base.configurable_fields(k=ConfigurableField(id="k"))
        return lambda: configurable.invoke("computing", config=CONFIGURED)
    return lambda: base.model_copy().invoke("computing")


@pytest.mark.parametrize("how", ["configurable_fields", "model_copy"])
def test_a_retriever_rebuilt_for_each_call_notices_redis_restarted_from_a_snapshot(rdb_server, how):
    """Before: the plain retriever raised LedgerResetError after the restart, the per-call copy
    served on silently from the rolled-back stream (20 rankings where 50 were served)."""
    call = _per_call(amortized_retriever(rdb_server.url), how)
    for _ in range(20):
        call()
    RedisLedger(rdb_server.url).client.save()  # the snapshot: 20 rankings
    for _ in range(30):
        call()
    rdb_server.restart(kill=True)  # the 30 rankings after the snapshot are gone

    errors = []
    for _ in range(3):  # every call refused (the first may meet the broken connection)
        with pytest.raises(LedgerUnavailableError) as caught:
            call()
        errors.append(caught.value)
    resets = [e for e in errors if isinstance(e, LedgerResetError)]
    assert len(resets) >= 2 and "went back in time" in str(resets[-1])
    assert (resets[-1].seen_rankings, resets[-1].found_rankings) == (50, 20)

    forget_shared_memory()  # as another process, which cannot tell (the documented limit)
    assert RedisLedger(rdb_server.url).state(KEY).rankings == 20  # nothing was added


def test_a_new_process_cannot_tell_the_rollback_a_client_of_this_one_saw(rdb_server):
    first = RedisLedger(rdb_server.url)
    for _ in range(3):
        first.add(KEY, {"female": 1.0})
    first.client.save()
    first.add(KEY, {"female": 1.0})
    rdb_server.restart(kill=True)
    code = (
        "import sys; from fairrag_core.ledger import RedisLedger; "
        "print(RedisLedger(sys.argv[1]).state('tenant-a').rankings)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, rdb_server.url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "3"
    for _ in range(2):
        try:
            RedisLedger(rdb_server.url).state(KEY)  # a new client of this process can
        except LedgerResetError as exc:
            assert (exc.seen_rankings, exc.found_rankings) == (4, 3)
            break
        except LedgerUnavailableError:
            continue
    else:
        pytest.fail("a new client of this process served from the rolled-back stream")


@pytest.mark.parametrize("how", ["configurable_fields", "model_copy"])
def test_a_retriever_rebuilt_for_each_call_fails_fast_behind_a_frozen_server(redis_server, how):
    """Before: each per-call copy built a new client and breaker, so every call waited out its
    own deadline on the frozen server; now the first call waits, the next fail at once."""
    url = redis_server.url + "?deadline=1&cooldown=60"
    call = _per_call(amortized_retriever(url, key="frozen"), how)
    call()
    redis_server.freeze()
    try:
        messages = []
        for _ in range(3):
            with pytest.raises(LedgerUnavailableError) as caught:
                call()
            messages.append(str(caught.value))
    finally:
        redis_server.thaw()
    assert FAST not in messages[0] and "failed with" in messages[0]  # it waited
    assert all(FAST in m for m in messages[1:]), messages
    assert RedisLedger(url)._breaker.fast_failures >= 2  # one breaker for the server


def test_a_breaker_is_shared_per_server_and_cooldown_and_a_forked_child_starts_closed():
    url = f"redis://127.0.0.1:{free_port()}/0?cooldown=60"  # nothing listens
    first = RedisLedger(url)
    with pytest.raises(LedgerUnavailableError, match="failed with"):
        first.state(KEY)
    with pytest.raises(LedgerUnavailableError, match=FAST):
        RedisLedger(url).state(KEY)  # a new client of the same server: fails fast
    with pytest.raises(LedgerUnavailableError, match="failed with"):
        RedisLedger(url.replace("cooldown=60", "cooldown=0")).state(KEY)  # no breaker
    if not hasattr(os, "fork"):
        return
    pid = os.fork()
    if pid == 0:  # the child: its own breakers, closed (the call reaches for the server)
        code = 1
        try:
            RedisLedger(url).state(KEY)
        except LedgerUnavailableError as exc:
            code = 0 if FAST not in str(exc) else 2
        finally:
            os._exit(code)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child did not end")
    assert os.waitstatus_to_exitcode(status) == 0
    with pytest.raises(LedgerUnavailableError, match=FAST):
        first.state(KEY)  # the parent's breaker is still open


def test_an_add_a_client_gave_up_on_is_settled_by_the_next_client_of_the_server(
    redis_server, proxy
):
    """Before: the adds left to settle were the client's own, so one rebuilt for each call
    never settled the add its predecessor gave up on: the stream kept a ranking never served."""
    first = RedisLedger(proxy.url, timeout=1.0, deadline=1.0, cooldown=0)
    first.add("k", {"female": 1.0})
    proxy.reply_gap = 0.1
    with pytest.raises(LedgerUnavailableError, match=r"deadline of 1 s passed"):
        first.add("k", {"female": 2.0, "male": 4.0})  # ran on the server, not served
    proxy.reply_gap = 0.0
    del first  # a per-call client, gone
    direct = RedisLedger(redis_server.url)  # another address: a server of its own here
    stored = direct.state("k")
    assert stored.totals == {"female": 3.0, "male": 4.0}

    rebuilt = RedisLedger(proxy.url, timeout=1.0, deadline=1.0, cooldown=0)
    assert rebuilt.state("k").totals == {"female": 1.0, "male": 0.0}  # settled first
    assert rebuilt.updates_undone == 1 and rebuilt.updates_unsettled == 0
    assert direct.state("k").totals == {"female": 1.0, "male": 0.0}
    assert RedisLedger(proxy.url, cooldown=0).updates_undone == 1  # the server's count
    direct.close()
    rebuilt.close()
