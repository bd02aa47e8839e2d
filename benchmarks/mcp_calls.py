"""MCP tool calls: this package's synchronous tools beside the SDK's own async ``ClientSession``, same server.

For the fixture server (tests/fixtures/mcp_server.py) over stdio and over streamable HTTP on 127.0.0.1,
calls of ``add`` (1 + 2) through:

* ours: ``MCPTool.run`` from ``load_mcp_tools`` (validation, the thread <-> event-loop bridge, rendering);
* the peer: ``mcp.ClientSession.call_tool`` awaited directly on an asyncio loop (no bridge, no checks).

Both sessions stay open for the whole run, and the calls are interleaved: each round runs a batch of calls
on one side, then a batch on the other (the side that goes first alternates), after one warm-up batch each.
Over stdio each side has its own server process (each client starts one); over HTTP both talk to the same
server process. Printed per side: the median and p90 latency of one call, the client's CPU per call
(``time.process_time()`` of this process over the batches: every thread, the bridge's included), the
server's CPU per call (its CPU time from /proc over the same batches), and errors (a call that
raised or did not answer 3).

Then the first call through ``MCPTool.run`` after the HTTP server restarted on the same port (a new session
after the 404, and the call sent again), beside a normal call. The SDK has no peer figure there: its
session stays unusable after a restart ("Session not found" on every call).

The process exits 1 when any call failed.

    python benchmarks/mcp_calls.py [--rounds 10] [--batch 30] [--restarts 5]

Needs ``pip install "chatgpt-tool-hub[mcp]"``. Everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from _scripted_llm import proc_cpu_s

from chatgpt_tool_hub.tools.plugins.mcp_tools import load_mcp_tools

SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "mcp_server.py")
START_S = 60.0  # the fixture imports the SDK, Starlette and uvicorn: seconds on a busy machine
ARGS = {"a": 1, "b": 2}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class HttpServer:
    """The fixture server over streamable HTTP on one port; its output goes to a file shown if it fails."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="mcp-fixture-", suffix=".log", delete=False)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, SERVER, "--http", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        started = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"the fixture server exited with {self.proc.returncode}:\n{self._tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() - started > START_S:
                    raise SystemExit(f"the fixture server did not listen on {self.port} within {START_S:.0f} s:\n"
                                     f"{self._tail()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def _tail(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-2000:]


@dataclass
class Figures:
    latencies: list[float] = field(default_factory=list)
    client_cpu: float = 0.0
    server_cpu: float = 0.0
    calls: int = 0
    errors: int = 0
    first_error: str = ""

    def failed(self, exc: BaseException | str) -> None:
        self.errors += 1
        self.first_error = self.first_error or (exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}")


# ---- the two sides: each runs one batch of calls and records what it saw ---------------------------------


class Ours:
    def __init__(self, server: str | list[str]):
        self.tools = {t.name: t for t in load_mcp_tools(server)}
        self.server_pid = int(self.tools["pid"].run({}))

    def batch(self, n: int, fig: Figures | None) -> None:
        for _ in range(n):
            started = time.perf_counter()
            try:
                out = self.tools["add"].run(ARGS)
            except Exception as exc:  # a failed call is counted
                if fig is not None:
                    fig.failed(exc)
                continue
            elapsed = time.perf_counter() - started
            if fig is not None:
                if out != "3":
                    fig.failed(f"answered {out!r}")
                else:
                    fig.latencies.append(elapsed)

    def close(self) -> None:
        for tool in self.tools.values():
            tool.close()


class SDK:
    """A ``ClientSession`` held open by one task on a loop that runs whenever a batch is asked for."""

    def __init__(self, runner: asyncio.Runner, open_transport: Callable[[], Any]):
        self.runner = runner
        self.requests: asyncio.Queue | None = None
        self.holder: asyncio.Task | None = None
        self.server_pid = runner.run(self._start(open_transport))

    async def _start(self, open_transport) -> int:
        self.requests = asyncio.Queue()
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self.holder = asyncio.create_task(self._hold(open_transport, ready))
        return await ready

    async def _hold(self, open_transport, ready: asyncio.Future) -> None:
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                streams = await stack.enter_async_context(open_transport())
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                await session.initialize()
                pid = await session.call_tool("pid", {})
                ready.set_result(int(pid.content[0].text))
                assert self.requests is not None
                while True:
                    request = await self.requests.get()
                    if request is None:
                        return
                    n, fig, done = request
                    try:
                        await self._calls(session, n, fig)
                    finally:
                        done.set_result(None)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    @staticmethod
    async def _calls(session, n: int, fig: Figures | None) -> None:
        for _ in range(n):
            started = time.perf_counter()
            try:
                result = await session.call_tool("add", ARGS)
            except Exception as exc:  # a failed call is counted
                if fig is not None:
                    fig.failed(exc)
                continue
            elapsed = time.perf_counter() - started
            if fig is not None:
                text = result.content[0].text if result.content else None
                if result.is_error or text != "3":
                    fig.failed(f"answered {text!r} (error: {result.is_error})")
                else:
                    fig.latencies.append(elapsed)

    def batch(self, n: int, fig: Figures | None) -> None:
        async def ask() -> None:
            assert self.requests is not None and self.holder is not None
            done: asyncio.Future = asyncio.get_running_loop().create_future()
            await self.requests.put((n, fig, done))
            finished, _ = await asyncio.wait([done, self.holder], return_when=asyncio.FIRST_COMPLETED)
            if done not in finished:
                self.holder.result()  # raises what ended the session
                raise RuntimeError("the SDK session ended")
        self.runner.run(ask())

    def close(self) -> None:
        async def stop() -> None:
            assert self.requests is not None and self.holder is not None
            await self.requests.put(None)
            await self.holder
        self.runner.run(stop())


def compare(label: str, sides: dict[str, Any], rounds: int, batch: int) -> list[tuple[str, Figures]]:
    figures = {name: Figures() for name in sides}
    for side in sides.values():
        side.batch(batch, None)  # warm-up
    names = list(sides)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            side, fig = sides[name], figures[name]
            server_before, cpu_before = proc_cpu_s(side.server_pid), time.process_time()
            side.batch(batch, fig)
            fig.client_cpu += time.process_time() - cpu_before
            fig.server_cpu += proc_cpu_s(side.server_pid) - server_before
            fig.calls += batch
    return [(f"{label}, {name}", figures[name]) for name in names]


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def report(rows: list[tuple[str, Figures]]) -> int:
    width = max(len(name) for name, _ in rows)
    errors = 0
    for name, fig in rows:
        errors += fig.errors
        if fig.latencies:
            print(f"{name:<{width}}  {statistics.median(fig.latencies) * 1e3:8.3f} {_ms(fig.latencies, 0.9):8.3f} "
                  f"{fig.client_cpu / fig.calls * 1e3:14.3f} {fig.server_cpu / fig.calls * 1e3:14.3f} "
                  f"{fig.errors:>6}", flush=True)
        else:
            print(f"{name:<{width}}  {'-':>8} {'-':>8} {'-':>14} {'-':>14} {fig.errors:>6}", flush=True)
        if fig.first_error:
            print(f"    first error: {fig.first_error[:300]}", flush=True)
    return errors


def main(argv: list[str] | None = None) -> int:
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument("--batch", type=int, default=30, help="calls per side per round (default 30)")
    parser.add_argument("--restarts", type=int, default=5, help="HTTP server restarts measured (default 5)")
    args = parser.parse_args(argv)
    # closing a session whose server was restarted logs a warning per session: expected here
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)

    print(f"call of add over MCP: {args.rounds} interleaved rounds of {args.batch} calls per side; per call:", flush=True)
    header = f"{'median ms':>10} {'p90 ms':>8} {'client CPU ms':>14} {'server CPU ms':>14} {'errors':>6}"
    errors = 0
    with asyncio.Runner() as runner:
        ours = Ours([sys.executable, SERVER])
        sdk = SDK(runner, lambda: stdio_client(StdioServerParameters(command=sys.executable, args=[SERVER])))
        try:
            rows = compare("stdio", {"MCPTool.run": ours, "SDK ClientSession": sdk}, args.rounds, args.batch)
        finally:
            ours.close()
            sdk.close()
        width = max(len(name) for name, _ in rows)
        print(f"{'':<{width}}  {header}", flush=True)
        errors += report(rows)

        http = HttpServer()
        http.start()
        try:
            ours = Ours(http.url)
            try:
                sdk = SDK(runner, lambda: streamable_http_client(http.url))
                try:
                    rows = compare("http", {"MCPTool.run": ours, "SDK ClientSession": sdk}, args.rounds, args.batch)
                finally:
                    sdk.close()
                errors += report(rows)

                restart = Figures()
                for _ in range(args.restarts):
                    http.stop()
                    http.start()
                    started = time.perf_counter()
                    try:
                        out = ours.tools["add"].run(ARGS)
                    except Exception as exc:  # counted
                        restart.failed(exc)
                        continue
                    if out != "3":
                        restart.failed(f"answered {out!r}")
                    else:
                        restart.latencies.append(time.perf_counter() - started)
                errors += restart.errors
                normal = statistics.median(rows[0][1].latencies) * 1e3 if rows[0][1].latencies else float("nan")
                if restart.latencies:
                    print(f"http, MCPTool.run, first call after a restart: median "
                          f"{statistics.median(restart.latencies) * 1e3:.2f} ms over {len(restart.latencies)} "
                          f"restarts (a normal call: {normal:.3f} ms; the SDK session: unusable after a restart), "
                          f"errors {restart.errors}", flush=True)
                if restart.first_error:
                    print(f"    first error: {restart.first_error[:300]}", flush=True)
            finally:
                ours.close()
        finally:
            http.stop()
            Path(http.log.name).unlink(missing_ok=True)
    if errors:
        print(f"{errors} failed calls", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
