"""MCP servers as tools: a FastMCP/MCPServer fixture over stdio and streamable HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError, ToolInputError, UserError  # noqa: E402
from chatgpt_tool_hub.tools.plugins.mcp_tools import load_mcp_tools, parse_server  # noqa: E402

SERVER = str(Path(__file__).parent / "fixtures" / "mcp_server.py")


def _by_name(tools):
    return {t.name: t for t in tools}


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def fixture_tools():
    tools = _by_name(load_mcp_tools([sys.executable, SERVER], env={"FIXTURE_TOKEN": "given"}, timeout=15))
    yield tools
    next(iter(tools.values())).close()


def test_lists_the_server_tools_with_their_schemas(fixture_tools):
    assert {"add", "echo", "fail", "env", "pid", "slow", "crash"} <= set(fixture_tools)
    add = fixture_tools["add"]
    assert add.description == "Add two integers."
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert sorted(add.parameters["required"]) == ["a", "b"]


def test_calls_with_json_text_dicts_and_plain_text(fixture_tools):
    assert fixture_tools["add"].run('{"a": 2, "b": 3}') == "5"
    assert fixture_tools["add"].run({"a": -1, "b": 1}) == "0"
    assert fixture_tools["echo"].run("hello world") == "hello world"       # the one parameter
    assert fixture_tools["echo"].run({"text": "你好"}) == "你好"


def test_invalid_input_is_a_tool_input_error(fixture_tools):
    with pytest.raises(ToolInputError, match="'a'"):
        fixture_tools["add"].run('{"a": "x", "b": 1}')
    with pytest.raises(ToolInputError):
        fixture_tools["add"].run("two and three")


def test_is_error_results_become_error_observations(fixture_tools):
    with pytest.raises(ToolExecutionError, match="fail"):
        fixture_tools["fail"].run("")
    assert fixture_tools["add"].run({"a": 1, "b": 1}) == "2"                # the session is still fine


def test_images_are_described_not_dumped(fixture_tools):
    if "image" not in fixture_tools:
        pytest.skip("this mcp SDK has no Image helper")
    assert fixture_tools["image"].run("") == "[image: image/png, 70 bytes]"


def test_concurrent_calls_from_worker_threads(fixture_tools):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: fixture_tools["add"].run({"a": i, "b": 1}), range(24)))
    assert results == [str(i + 1) for i in range(24)]


def test_engine_prefixes_error_observations(fixture_tools):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        'Thought: Do I need to use a tool? Yes\nAction: add\nAction Input: {"a": 20, "b": 22}',
        "Thought: Do I need to use a tool? Yes\nAction: fail\nAction Input: {}",
        "Thought: Do I need to use a tool? No\nAI: 42",
    ])
    app = AppFactory().create_app(tools_list=[fixture_tools["add"], fixture_tools["fail"]], llm=llm,
                                  no_default=True, think_depth=5, untrusted_egress="allow")  # 2nd call: no approver
    result = app.run("what is 20 + 22?")
    assert [s.observation for s in result.steps][0] == "42"
    assert result.steps[1].observation.startswith("Error:")


def test_child_env_is_scrubbed(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-secret")
    monkeypatch.setenv("SOME_TOKEN", "parent-token")
    tools = _by_name(load_mcp_tools(f"{sys.executable} {SERVER}", env={"FIXTURE_TOKEN": "given"}, timeout=15))
    try:
        assert tools["env"].run("OPENAI_API_KEY") == "<unset>"
        assert tools["env"].run("SOME_TOKEN") == "<unset>"
        assert tools["env"].run("FIXTURE_TOKEN") == "given"
        assert tools["env"].run("PATH") == os.environ["PATH"]
    finally:
        tools["env"].close()


def test_close_stops_the_child_and_is_idempotent():
    tools = _by_name(load_mcp_tools([sys.executable, SERVER], timeout=15, name_prefix="fx"))
    assert "fx-add" in tools
    pid = int(tools["fx-pid"].run(""))
    tools["fx-add"].close()
    assert _gone(pid)
    tools["fx-echo"].close()                                               # twice: no error
    with pytest.raises(ToolExecutionError, match="closed"):
        tools["fx-add"].run({"a": 1, "b": 2})


def test_crash_is_an_observation_and_the_next_call_reconnects():
    tools = _by_name(load_mcp_tools([sys.executable, SERVER], timeout=15))
    try:
        first = int(tools["pid"].run(""))
        with pytest.raises(ToolExecutionError, match="reconnect"):
            tools["crash"].run("")
        assert tools["add"].run({"a": 1, "b": 2}) == "3"
        assert int(tools["pid"].run("")) != first
    finally:
        tools["add"].close()


def test_timeout_is_an_observation_and_the_connection_restarts():
    tools = _by_name(load_mcp_tools([sys.executable, SERVER], timeout=15))
    connection = tools["slow"].connection
    try:
        connection.timeout = 1.5               # short for the call only: start-up may be slow on a busy machine
        with pytest.raises(ToolExecutionError, match="did not answer 'slow' within 1.5 s"):
            tools["slow"].run({"seconds": 30})
        connection.timeout = 15
        assert tools["add"].run({"a": 2, "b": 2}) == "4"
    finally:
        tools["add"].close()


def test_servers_that_cannot_start_are_config_errors():
    with pytest.raises(ConfigError, match="command not found"):
        load_mcp_tools("definitely-not-an-mcp-server-xyz --flag", timeout=5)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="could not connect.*bad config"):
        load_mcp_tools([sys.executable, "-c", "import sys; sys.stderr.write('bad config'); sys.exit(2)"], timeout=60)
    assert time.monotonic() - started < 30  # the exit was noticed: far below the 60 s start-up timeout


def test_server_argument_forms():
    assert parse_server("uvx mcp-server-fetch --x 'a b'").command == ["uvx", "mcp-server-fetch", "--x", "a b"]
    spec = parse_server({"command": ["node", "server.js"], "args": ["--port", 1], "env": {"A": 1}})
    assert spec.command == ["node", "server.js", "--port", "1"] and spec.env == {"A": "1"}
    assert parse_server("https://user:pw@mcp.example.com/mcp?key=k").label == "https://mcp.example.com/mcp"
    assert parse_server({"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "x"}}).headers
    assert parse_server(["node", "--token", "abc.def", "server.js"]).label == "node server.js"
    for bad in ({}, {"command": "x", "url": "http://h/mcp"}, {"cmd": "x"}, "", 42, {"command": "x", "env": 3}):
        with pytest.raises(ConfigError):
            parse_server(bad)


def test_missing_sdk_is_a_user_error_with_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(UserError, match=r'pip install "chatgpt-tool-hub\[mcp\]"'):
        load_mcp_tools("anything")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_transport(tmp_path):
    port = _free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)], stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + 60  # generous: importing the server's libraries is slow on a busy machine
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:  # mcp is installed: a real failure
                    pytest.fail(f"the HTTP MCP fixture server did not start (exit {proc.poll()}):\n"
                                f"{log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.05)
        tools = _by_name(load_mcp_tools(f"http://127.0.0.1:{port}/mcp", timeout=10))
        try:
            assert tools["add"].run({"a": 40, "b": 2}) == "42"
            assert tools["echo"].run("over http") == "over http"
            with pytest.raises(ToolExecutionError):
                tools["fail"].run("")
        finally:
            tools["add"].close()
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- dangerous tools and result size ------------------------------------------------------------


def test_tools_are_dangerous_unless_annotated_read_only(fixture_tools):
    if "peek" not in fixture_tools:
        pytest.skip("this mcp SDK cannot annotate tools")
    assert fixture_tools["peek"].dangerous is False                          # readOnlyHint: true
    assert fixture_tools["wipe"].dangerous is True                           # destructiveHint: true
    assert fixture_tools["add"].dangerous is True and fixture_tools["echo"].dangerous is True  # no hints


def test_dangerous_option_of_a_server():
    trusted = _by_name(load_mcp_tools([sys.executable, SERVER], timeout=15, dangerous=False))
    try:
        assert not any(t.dangerous for t in trusted.values())
    finally:
        trusted["add"].close()
    listed = _by_name(load_mcp_tools([sys.executable, SERVER], timeout=15, name_prefix="fx",
                                     dangerous=["fx-wipe", "echo"]))   # prefixed or server names
    try:
        assert {name for name, t in listed.items() if t.dangerous} == {"fx-wipe", "fx-echo"}
    finally:
        listed["fx-add"].close()


@pytest.mark.parametrize("option", [42, "sometimes", [1]])
def test_bad_dangerous_option_is_a_config_error_before_starting(option, tmp_path):
    marker = tmp_path / "started"
    with pytest.raises(ConfigError, match="dangerous"):
        load_mcp_tools([sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"], timeout=15, dangerous=option)
    assert not marker.exists()  # refused before the server was started


def test_unknown_names_in_the_dangerous_list_are_a_config_error():
    with pytest.raises(ConfigError, match="no-such-tool"):
        load_mcp_tools([sys.executable, SERVER], timeout=15, dangerous=["add", "no-such-tool"])


def test_huge_results_keep_head_and_tail(fixture_tools):
    out = fixture_tools["big"].run({"chars": 1_000_000})
    assert len(out) <= 20_000
    assert out.startswith("BEGINxxx") and out.endswith("xxxEND")
    assert "characters omitted ...]" in out


def test_app_asks_before_unannotated_tools_and_caps_results():
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        'Thought: Do I need to use a tool? Yes\nAction: big\nAction Input: {"chars": 5000}',
        'Thought: Do I need to use a tool? Yes\nAction: echo\nAction Input: {"text": "hi"}',
        "Thought: Do I need to use a tool? No\nAI: done",
    ])
    asked = []
    app = AppFactory().create_app(llm=llm, no_default=True, mcp_max_result_chars="300",
                                  mcp_servers=[{"server": [sys.executable, SERVER], "timeout": 15}],
                                  approve=lambda name, tool_input: asked.append(name) or name == "big")
    try:
        result = app.run("go")
    finally:
        app.close()
    assert asked == ["big", "echo"]
    first, second = (s.observation for s in result.steps)
    assert len(first) <= 300 and first.startswith("BEGIN") and first.endswith("END") and "omitted" in first
    assert "did not approve" in second
