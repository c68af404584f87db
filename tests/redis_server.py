"""A real redis-server for the ledger tests: on a free loopback port with its own folder, that
can be stopped, killed, frozen and restarted in place (its append-only file keeps the data).

The binary comes from the Debian package ``redis-server`` (``make system-deps`` installs it).
Without it the tests are skipped, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.reliability.chroma_server import HOST, free_port

STARTUP_DEADLINE = 20.0
STOP_DEADLINE = 10.0


def redis_server_binary() -> str:
    """The ``redis-server`` program; skips the test without it (fails it under ``CI=true``)."""
    found = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/sbin:/sbin")
    if found is None:
        message = "redis-server is not installed: run `make system-deps` (Debian redis-server)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; CI=true, so a missing server is a failure")
        pytest.skip(message)
    return found


class RedisServer:
    """``redis-server`` bound to 127.0.0.1 as a child process, with an append-only file in
    ``folder``: every write reaches the file before its reply is sent, so a restart, even after
    SIGKILL, keeps what was acknowledged (``appendfsync no``: the kernel's page cache survives
    a killed process, and fsync on every write would make each update ~5 ms here). Its log goes
    to ``folder/redis.log``, never a pipe."""

    def __init__(self, folder: Path, port: int | None = None, *, appendonly: bool = True) -> None:
        self.folder = Path(folder)
        self.appendonly = appendonly
        """False: no append-only file, only the RDB snapshot ``SAVE`` writes (Redis's default
        persistence), so a restart rolls back to the last snapshot."""
        self.port = free_port() if port is None else port
        self.host = HOST
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, deadline: float = STARTUP_DEADLINE) -> RedisServer:
        if self.process is not None and self.process.poll() is None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [
            redis_server_binary(),
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(self.folder),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "no",
            "--daemonize", "no",
            "--logfile", str(self.folder / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
        )
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self.process.returncode} before answering on "
                    f"{self.url}; its log ends with:\n{self.log_tail()}"
                )
            if self.alive():
                return self
            time.sleep(0.02)
        self.stop(kill=True)
        raise RuntimeError(f"redis-server did not answer on {self.url} within {deadline:.0f} s")

    def alive(self) -> bool:
        """Whether the server answers PING now (within half a second)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, *, kill: bool = False, deadline: float = STOP_DEADLINE) -> None:
        """SIGTERM (a clean shutdown) or, with ``kill``, SIGKILL; wait; SIGKILL after deadline."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGCONT)  # a frozen server cannot handle SIGTERM
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(deadline)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(deadline)

    def restart(self, *, kill: bool = False) -> RedisServer:
        """Stop (SIGTERM, or SIGKILL with ``kill``) and start on the same port and folder."""
        self.stop(kill=kill)
        return self.start()

    def freeze(self) -> None:
        """SIGSTOP: the port stays open but nothing answers, as a stuck server would."""
        assert self.process is not None and self.process.poll() is None, "server not running"
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.folder / "redis.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@contextmanager
def running_redis(folder: Path) -> Iterator[RedisServer]:
    """A started :class:`RedisServer` in ``folder``, always stopped at the end."""
    server = RedisServer(folder)
    try:
        yield server.start()
    finally:
        server.stop()
