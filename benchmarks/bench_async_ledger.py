"""FairRetriever with an amortized ranker on a Redis ledger behind a slow link: async vs threads.

Run: ``.venv/bin/python benchmarks/bench_async_ledger.py [--requests N] [--concurrency C]
[--delay-ms D]``. A redis-server is started on a free loopback port (the tests' helper;
skipped with a note when redis-server is not installed: ``make system-deps``) behind a loopback
TCP proxy that delays every chunk it forwards by ``D`` ms in each direction (default 2.5: a
5 ms round trip). The same N requests run as ``ainvoke`` under ``asyncio.gather`` with C in
flight, then as ``invoke`` on C threads; printed: requests per second of each, and their
ratio (the goal: async at least 0.9x threads, docs/SPEC.md "Adapters" → Async).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test helpers (tests/redis_server.py, the doubles)


class DelayProxy:
    """A loopback TCP proxy forwarding to ``target``, each chunk ``delay`` seconds late (order
    kept), on its own thread and event loop."""

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target, self.delay = target, delay
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    writer.close()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((time.monotonic() + self.delay, data))
                if not data:
                    break
        except ConnectionError:
            queue.put_nowait((0.0, b""))
        await sender

    def stop(self) -> None:
        """Stop accepting; the daemon thread's open pipes end with the process."""
        self.loop.call_soon_threadsafe(lambda: None)


def _retriever(url: str):
    from fairrag_langchain import FairRetriever
    from tests.langchain.doubles import FixedPoolStore, imbalanced_pool

    documents, distances = imbalanced_pool()
    return FairRetriever(
        vectorstore=FixedPoolStore(documents, distances),
        group_key="gender",
        protected="female",
        ranker="amortized",
        ledger=url,
        seed=0,
        k=4,
    )


def run_async(retriever, requests: int, concurrency: int) -> float:
    async def main() -> None:
        limit = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with limit:
                await retriever.ainvoke(f"question {i}")

        await asyncio.gather(*(one(i) for i in range(requests)))

    start = time.perf_counter()
    asyncio.run(main())
    return requests / (time.perf_counter() - start)


def run_threads(retriever, requests: int, concurrency: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda i: retriever.invoke(f"question {i}"), range(requests)))
    return requests / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--delay-ms", type=float, default=2.5)
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        print("skipped: redis-server is not installed (make system-deps)")
        return
    from tests.redis_server import running_redis

    with tempfile.TemporaryDirectory() as folder, running_redis(Path(folder) / "redis") as server:
        proxy = DelayProxy((server.host, server.port), args.delay_ms / 1000)
        try:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=5):
                pass
            url = f"redis://127.0.0.1:{proxy.port}/0"
            retriever = _retriever(url)
            retriever.invoke("warm-up")
            print(
                f"Redis ledger behind a {2 * args.delay_ms:g} ms round trip, "
                f"{args.requests} requests, {args.concurrency} in flight"
            )
            threads = run_threads(retriever, args.requests, args.concurrency)
            asynchronous = run_async(retriever, args.requests, args.concurrency)
            print(f"{'threads':<8}{threads:>10.1f} req/s")
            print(f"{'async':<8}{asynchronous:>10.1f} req/s")
            print(f"async / threads: {asynchronous / threads:.2f}x (goal >= 0.9x)")
        finally:
            proxy.stop()


if __name__ == "__main__":
    main()
