"""MCP tool calls: this package's synchronous tools beside the SDK's own async ``ClientSession``, same server.

For the fixture server (tests/fixtures/mcp_server.py) over stdio and streamable HTTP on 127.0.0.1:

* median latency of ``add`` through ``MCPTool.run`` (validation, the event-loop bridge, rendering);
* the same call through ``mcp.ClientSession.call_tool`` awaited directly (the peer: no bridge, no checks);
* the first call after the HTTP server restarted on the same port (a new session after the 404, and the
  call sent again), beside a normal call. The SDK alone has no peer number here: its session stays
  unusable after a restart ("Session not found" on every call).

    python benchmarks/mcp_calls.py
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from chatgpt_tool_hub.tools.plugins.mcp_tools import load_mcp_tools

SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "mcp_server.py")
N = 300


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_http(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the fixture server did not start")


def _median_ms(fn, n: int = N) -> float:
    fn()
    runs = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - started) * 1e3)
    return statistics.median(runs)


async def _sdk_median_ms(open_transport, n: int = N) -> float:
    from mcp import ClientSession

    async with open_transport() as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        await session.call_tool("add", {"a": 1, "b": 2})
        runs = []
        for _ in range(n):
            started = time.perf_counter()
            await session.call_tool("add", {"a": 1, "b": 2})
            runs.append((time.perf_counter() - started) * 1e3)
    return statistics.median(runs)


def main() -> int:
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    rows = []
    tools = {t.name: t for t in load_mcp_tools([sys.executable, SERVER])}
    try:
        rows.append(("stdio, MCPTool.run", _median_ms(lambda: tools["add"].run({"a": 1, "b": 2}))))
    finally:
        tools["add"].close()
    params = StdioServerParameters(command=sys.executable, args=[SERVER])
    rows.append(("stdio, SDK ClientSession", asyncio.run(_sdk_median_ms(lambda: stdio_client(params)))))

    port = _free_port()
    proc = _start_http(port)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        tools = {t.name: t for t in load_mcp_tools(url)}
        try:
            rows.append(("http, MCPTool.run", _median_ms(lambda: tools["add"].run({"a": 1, "b": 2}))))
            rows.append(("http, SDK ClientSession", asyncio.run(_sdk_median_ms(lambda: streamable_http_client(url)))))
            restarts = []
            for _ in range(5):
                proc.kill()
                proc.wait()
                proc = _start_http(port)
                started = time.perf_counter()
                assert tools["add"].run({"a": 1, "b": 2}) == "3"
                restarts.append((time.perf_counter() - started) * 1e3)
            rows.append(("http, first call after a restart", statistics.median(restarts)))
        finally:
            tools["add"].close()
    finally:
        proc.kill()
        proc.wait()

    width = max(len(name) for name, _ in rows)
    print(f"{'call of add (median)':<{width}}  ms")
    for name, ms in rows:
        print(f"{name:<{width}}  {ms:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
