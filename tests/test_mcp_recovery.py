"""MCP servers that go away: a restarted HTTP server (new session after 404), a server that stays down (bounded,
logged retries, tried again later), the legacy SSE transport, and separate connect / call timeouts.

Every server here is the fixture server (tests/fixtures/mcp_server.py) started by the test on 127.0.0.1.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError  # noqa: E402
from chatgpt_tool_hub.tools.plugins.mcp_tools import load_mcp_tools, parse_server  # noqa: E402

SERVER = str(Path(__file__).parent / "fixtures" / "mcp_server.py")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FixtureServer:
    """The fixture server over HTTP (``--http``) or SSE (``--sse``) on one port, stopped and started at will."""

    def __init__(self, mode: str, log: Path):
        self.mode, self.log, self.port = mode, log, _free_port()
        self.proc: subprocess.Popen | None = None
        path = "/sse" if mode == "--sse" else "/mcp"
        self.url = f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> "FixtureServer":
        with open(self.log, "ab") as sink:
            self.proc = subprocess.Popen([sys.executable, SERVER, self.mode, str(self.port)], stdout=sink, stderr=sink)
        deadline = time.monotonic() + 60  # generous: importing the server's libraries is slow on a busy machine
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    pytest.fail(f"the MCP fixture server did not start (exit {self.proc.poll()}):\n"
                                f"{self.log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture
def http_server(tmp_path):
    server = FixtureServer("--http", tmp_path / "server.log").start()
    yield server
    server.stop()


@pytest.fixture
def sse_server(tmp_path):
    server = FixtureServer("--sse", tmp_path / "server.log").start()
    yield server
    server.stop()


def _by_name(tools):
    return {t.name: t for t in tools}


# ---- a restarted server ---------------------------------------------------------------------------


def test_a_restarted_http_server_is_used_again_on_the_next_call(http_server, caplog):
    tools = _by_name(load_mcp_tools(http_server.url, connect_timeout=15, call_timeout=15))
    try:
        assert tools["add"].run({"a": 1, "b": 2}) == "3"
        before = int(tools["pid"].run(""))
        http_server.stop()
        http_server.start()                                  # same port, new process: the old session is unknown
        with caplog.at_level(logging.INFO, logger="chatgpt_tool_hub.tools.mcp"):
            assert tools["add"].run({"a": 40, "b": 2}) == "42"   # before: "refused 'add': Session not found", forever
        assert int(tools["pid"].run("")) != before
        assert any("no longer knows the session" in r.getMessage() for r in caplog.records)
    finally:
        tools["add"].close()


def test_concurrent_calls_after_a_restart_open_one_new_session(http_server):
    from concurrent.futures import ThreadPoolExecutor

    tools = _by_name(load_mcp_tools(http_server.url, connect_timeout=15, call_timeout=15))
    connection = tools["add"].connection
    try:
        assert tools["add"].run({"a": 0, "b": 0}) == "0"
        http_server.stop()
        http_server.start()
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda i: tools["add"].run({"a": i, "b": 1}), range(12)))
        assert results == [str(i + 1) for i in range(12)]
        assert connection._generation == 2                 # the first session, and exactly one new one
    finally:
        tools["add"].close()


def test_a_server_that_stays_down_is_reported_and_tried_again_later(http_server, caplog):
    tools = _by_name(load_mcp_tools(http_server.url, connect_timeout=15, call_timeout=15))
    connection = tools["add"].connection
    connection.reconnect_delays = (0.05, 0.1)            # the default pauses are 0.5, 1 and 2 s
    try:
        assert tools["add"].run({"a": 1, "b": 1}) == "2"
        http_server.stop()
        with caplog.at_level(logging.INFO, logger="chatgpt_tool_hub.tools.mcp"):
            with pytest.raises(ToolExecutionError) as failed:
                tools["add"].run({"a": 1, "b": 1})
        message = str(failed.value)
        assert f"127.0.0.1:{http_server.port}/mcp" in message and "'fixture'" in message    # names the server
        assert "3 connection attempts" in message and "tried again on the next call" in message
        attempts = [r for r in caplog.records if "reconnect attempt" in r.getMessage()]
        assert [r.getMessage().split("attempt ")[1].split(" failed")[0] for r in attempts] == \
            ["1 of 3", "2 of 3", "3 of 3"]
        assert all(r.levelno == logging.WARNING for r in attempts)
        with pytest.raises(ToolExecutionError, match="unavailable"):
            tools["echo"].run("still down")               # tried again (and failed again), not given up
        http_server.start()
        assert tools["add"].run({"a": 2, "b": 2}) == "4"  # before: "unavailable" for the app's lifetime
    finally:
        tools["add"].close()


def test_a_stdio_server_that_died_while_idle_is_restarted_before_the_next_call():
    import os
    import signal

    tools = _by_name(load_mcp_tools([sys.executable, SERVER], connect_timeout=15))
    try:
        pid = int(tools["pid"].run(""))
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while tools["add"].connection._usable() and time.monotonic() < deadline:
            time.sleep(0.05)                              # wait until the end of its output is noticed
        assert tools["add"].run({"a": 2, "b": 3}) == "5"  # no failed call first
        assert int(tools["pid"].run("")) != pid
    finally:
        tools["add"].close()


# ---- the legacy HTTP+SSE transport ------------------------------------------------------------------


def test_sse_transport_by_url_and_after_a_restart(sse_server):
    tools = _by_name(load_mcp_tools(sse_server.url, connect_timeout=15, call_timeout=15))
    try:
        assert tools["add"].connection.spec.transport == "sse"        # the URL ends in /sse
        assert tools["add"].run({"a": 40, "b": 2}) == "42"
        assert tools["echo"].run("over sse") == "over sse"
        with pytest.raises(ToolExecutionError, match="fail"):
            tools["fail"].run("")
        sse_server.stop()
        sse_server.start()
        assert tools["add"].run({"a": 1, "b": 2}) == "3"
    finally:
        tools["add"].close()


def test_sse_transport_by_option(sse_server):
    base = sse_server.url.rsplit("/", 1)[0]
    tools = _by_name(load_mcp_tools({"url": sse_server.url}, transport="sse", connect_timeout=15))
    try:
        assert tools["add"].run({"a": 1, "b": 1}) == "2"
    finally:
        tools["add"].close()
    with pytest.raises(ConfigError) as refused:               # streamable HTTP at an SSE server: say what to do
        load_mcp_tools(sse_server.url, transport="streamable-http", connect_timeout=15)
    assert '"transport": "sse"' in str(refused.value) and "HTTP 405" in str(refused.value)
    assert parse_server(f"{base}/events", transport="SSE").transport == "sse"


def test_transport_parsing():
    assert parse_server("http://h.test/mcp").transport == "streamable-http"
    assert parse_server("http://h.test/sse").transport == "sse"
    assert parse_server("http://h.test/sse/").transport == "sse"
    assert parse_server({"url": "http://h.test/events", "transport": "sse"}).transport == "sse"
    assert parse_server("http://h.test/sse", transport="http").transport == "streamable-http"
    assert parse_server(["node", "s.js"]).transport == "stdio"
    for server, transport in ((["node", "s.js"], "sse"), ("http://h.test/mcp", "stdio"), ("http://h.test/mcp", "ws"),
                              ({"url": "http://h.test/mcp", "transport": "sse"}, "http")):
        with pytest.raises(ConfigError, match="transport"):
            parse_server(server, transport=transport)


# ---- connect and call timeouts -----------------------------------------------------------------------


def test_call_timeout_is_separate_from_the_connect_timeout():
    tools = _by_name(load_mcp_tools([sys.executable, SERVER], connect_timeout=20, call_timeout=1.5))
    connection = tools["slow"].connection
    try:
        assert (connection.connect_timeout, connection.call_timeout) == (20, 1.5)
        with pytest.raises(ToolExecutionError, match="did not answer 'slow' within 1.5 s"):
            tools["slow"].run({"seconds": 30})
        assert tools["add"].run({"a": 2, "b": 2}) == "4"
    finally:
        tools["add"].close()


def test_connect_timeout_bounds_a_server_that_never_answers():
    silent = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(ConfigError, match="no answer within 1 s"):
        load_mcp_tools(silent, connect_timeout=1, call_timeout=120)


def test_older_timeout_option_is_the_call_timeout():
    from chatgpt_tool_hub.tools.plugins.mcp_tools import _timeouts

    assert _timeouts(7, None, None, 30, 60) == (30, 7)        # call 7 s; connecting keeps its default
    assert _timeouts(90, None, None, 30, 60) == (90, 90)      # ... but never less than an older timeout
    assert _timeouts(90, 5, None, 30, 60) == (5, 90)
    assert _timeouts(90, None, 10, 30, 60) == (90, 10)        # call_timeout wins over timeout
    assert _timeouts(None, None, None, 12, 34) == (12, 34)    # the app's mcp_connect_timeout / mcp_call_timeout
    for bad in ((0, None, None), ("soon", None, None), (None, -1, None), (None, None, "inf")):
        with pytest.raises(ConfigError, match="positive number of seconds"):
            _timeouts(*bad, 30, 60)


def test_app_wide_timeout_settings():
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    app = AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, mcp_connect_timeout="25",
                                  mcp_call_timeout="7",
                                  mcp_servers=[[sys.executable, SERVER],
                                               {"server": [sys.executable, SERVER], "prefix": "b", "timeout": 3}])
    try:
        first = next(t for t in app.tools if t.name == "add").connection
        second = next(t for t in app.tools if t.name == "b-add").connection
        assert (first.connect_timeout, first.call_timeout) == (25, 7)
        assert (second.connect_timeout, second.call_timeout) == (25, 3)
    finally:
        app.close()
    with pytest.raises(ConfigError, match="mcp_call_timeout"):
        AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, mcp_call_timeout="-2",
                                mcp_servers=[[sys.executable, SERVER]])
