"""A real Chroma server for tests and benchmarks: ``chroma run`` from this venv, on a free
loopback port with its own ``--path``, that can be stopped, frozen and restarted in place."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

HOST = "127.0.0.1"
STARTUP_DEADLINE = 90.0
"""Seconds the server may take to answer its heartbeat (about 4 s on the 2-core machine)."""
STOP_DEADLINE = 15.0


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's choice, on the loopback interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def chroma_executable() -> str:
    """The ``chroma`` command installed next to this Python (the venv's, never another)."""
    found = shutil.which("chroma", path=os.path.dirname(sys.executable))
    if found is None:
        raise RuntimeError(f"no `chroma` command next to {sys.executable}; pip install chromadb")
    return found


class ChromaServer:
    """``chroma run --path <path> --host 127.0.0.1 --port <port>`` as a child process.

    :meth:`start` waits for the heartbeat (with a deadline) and :meth:`stop` terminates it
    (then kills it after a deadline); :meth:`restart` reuses the port and the path, so the data
    persists; :meth:`freeze`/:meth:`thaw` stop and continue the process (SIGSTOP/SIGCONT): it
    keeps its port but answers nothing, as a stuck server would. The server's own log goes to
    ``<path>.log`` (never a pipe: a full pipe would block the server). Used as a context
    manager it always ends stopped.
    """

    def __init__(self, path: str | os.PathLike[str], port: int | None = None) -> None:
        self.path = Path(path)
        self.port = free_port() if port is None else port
        self.host = HOST
        self.log_path = self.path.with_name(self.path.name + ".log")
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, deadline: float = STARTUP_DEADLINE) -> ChromaServer:
        if self.process is not None and self.process.poll() is None:
            return self
        self.path.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        command = [chroma_executable(), "run", "--path", str(self.path)]
        command += ["--host", self.host, "--port", str(self.port)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # a Ctrl-C in the terminal reaches pytest, not the server
            )
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"chroma run exited with {self.process.returncode} before answering on "
                    f"{self.url}; its log ends with:\n{self.log_tail()}"
                )
            if self.alive():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"chroma run did not answer on {self.url} within {deadline:.0f} s")

    def alive(self) -> bool:
        """Whether the heartbeat answers now (within one second)."""
        try:
            return httpx.get(f"{self.url}/api/v2/heartbeat", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, *, kill: bool = False, deadline: float = STOP_DEADLINE) -> None:
        """Terminate (SIGTERM; ``kill``: SIGKILL at once) and wait; SIGKILL after ``deadline``."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        self._continue(process)  # a frozen process cannot handle SIGTERM
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(deadline)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(deadline)

    def restart(self) -> ChromaServer:
        """Stop (if running) and start again on the same port and path: the data persists."""
        self.stop()
        return self.start()

    def freeze(self) -> None:
        """SIGSTOP the server and wait (at most 10 s) until every thread of it is stopped: the
        signal takes effect on a thread only when the kernel next schedules it, and a request
        sent at once was answered once in a loaded CI run."""
        assert self.process is not None and self.process.poll() is None, "server not running"
        os.kill(self.process.pid, signal.SIGSTOP)
        tasks = Path(f"/proc/{self.process.pid}/task")
        end = time.monotonic() + 10
        while time.monotonic() < end and not _all_stopped(tasks):
            time.sleep(0.01)

    def thaw(self) -> None:
        if self.process is not None:
            self._continue(self.process)

    @staticmethod
    def _continue(process: subprocess.Popen) -> None:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> ChromaServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _all_stopped(tasks: Path) -> bool:
    """Whether every thread under ``/proc/<pid>/task`` is stopped (state ``T``), or there is no
    such folder to read (not Linux: nothing to wait for)."""
    if not tasks.is_dir():
        return True
    for task in tasks.iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # a thread that ended
            continue
        if stat.rsplit(")", 1)[-1].split()[0] not in ("T", "t"):
            return False
    return True
