"""Shared MCP servers: an ``mcp_servers`` entry with ``"shared": true`` starts one server process for every app of
the process (every user of ``tool-hub serve``), closed at the server's shutdown; other entries start one per app.
A server slower to start than the connect timeout gets an error that names the settings that raise it.

The server is the fixture server (tests/fixtures/mcp_server.py) behind a launcher that first appends its pid to a
file (one line per launch) and may sleep before answering.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")
pytestmark = pytest.mark.filterwarnings("ignore:dangerous tool")  # MCP tools: no approver in these tests

from test_server_support import live  # noqa: E402,F401 - the fixture

from chatgpt_tool_hub.apps import AppFactory  # noqa: E402
from chatgpt_tool_hub.errors import ConfigError  # noqa: E402
from chatgpt_tool_hub.server.users import User  # noqa: E402
from chatgpt_tool_hub.testing import ScriptedLLM  # noqa: E402
from chatgpt_tool_hub.tools.plugins.mcp_tools import SHARED, SharedServers  # noqa: E402

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_server.py")
LAUNCHER = """import os, runpy, sys, time
with open(os.environ["PID_FILE"], "a") as sink:
    sink.write(f"{os.getpid()}\\n")
time.sleep(float(os.environ.get("SLEEP_S") or 0))
fixture = sys.argv[1]
sys.argv = [fixture]
runpy.run_path(fixture, run_name="__main__")
"""


@pytest.fixture
def launcher(tmp_path):
    script = tmp_path / "launch_fixture.py"
    script.write_text(LAUNCHER)
    pids = tmp_path / "pids.txt"

    def entry(shared: bool | None = None, sleep: float = 0, **options) -> dict:
        made = {"server": [sys.executable, str(script), FIXTURE],
                "env": {"PID_FILE": str(pids), "SLEEP_S": str(sleep)}, "connect_timeout": 30, **options}
        if shared is not None:
            made["shared"] = shared
        return made

    entry.pids = lambda: [int(line) for line in pids.read_text().split()] if pids.exists() else []  # type: ignore
    return entry


def _gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _tools(app) -> dict:
    return {tool.name: tool for tool in app.tools}


def test_users_of_a_server_share_one_process_of_a_shared_entry_closed_at_shutdown(live, launcher):
    server = live(llm=ScriptedLLM([]), mcp_servers=[launcher(shared=True)])
    apps = server.state.apps
    ann = apps.acquire(User("local", "ann"), "victorinox")
    bob = apps.acquire(User("local", "bob"), "victorinox")
    assert _tools(ann)["add"].run({"a": 2, "b": 3}) == "5" and _tools(bob)["add"].run({"a": 1, "b": 1}) == "2"
    assert len(launcher.pids()) == 1  # started once, at the server's start or by the first user: never per user
    assert _tools(ann)["pid"].run("") == _tools(bob)["pid"].run("") == str(launcher.pids()[0])
    apps.release(User("local", "ann"), "victorinox")
    apps.drop(User("local", "ann"))  # a user leaving never closes it for the others
    assert _tools(bob)["add"].run({"a": 4, "b": 4}) == "8"
    pid = launcher.pids()[0]
    server.stop()
    assert _gone(pid), "the shared MCP server outlived the server's shutdown"
    assert SHARED.open_count() == 0


def test_a_entry_that_is_not_shared_starts_one_process_per_user(live, launcher):
    server = live(llm=ScriptedLLM([]), mcp_servers=[launcher()])
    apps = server.state.apps
    ann = apps.acquire(User("local", "ann"), "victorinox")
    bob = apps.acquire(User("local", "bob"), "victorinox")
    assert _tools(ann)["pid"].run("") != _tools(bob)["pid"].run("")
    assert len(launcher.pids()) == 2
    pids = launcher.pids()
    server.stop()
    assert all(_gone(pid) for pid in pids)


def test_outside_a_server_the_last_app_closes_the_shared_connection(launcher):
    factory = AppFactory()
    first = factory.create_app(llm=ScriptedLLM([]), no_default=True, mcp_servers=[launcher(shared="true")])
    second = factory.create_app(llm=ScriptedLLM([]), no_default=True, mcp_servers=[launcher(shared=True)])
    assert len(launcher.pids()) == 1
    first.close()
    assert _tools(second)["add"].run({"a": 1, "b": 2}) == "3"
    second.close()
    assert _gone(launcher.pids()[0])


def test_the_server_starts_shared_entries_in_the_background_and_gives_them_back(launcher):
    held = SharedServers({"mcp_servers": [launcher(shared=True), launcher(shared=False, prefix="own")]}).start()
    held.wait(60)
    assert len(held.leases) == 1 and len(launcher.pids()) == 1  # only the shared entry
    held.close()
    assert _gone(launcher.pids()[0]) and SHARED.open_count() == 0


def test_the_shared_option_must_be_true_or_false(launcher):
    with pytest.raises(ConfigError, match="'shared' must be true or false"):
        AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, mcp_servers=[launcher(shared="sometimes")])
    assert launcher.pids() == []


def test_a_server_slower_than_the_connect_timeout_names_the_settings_that_raise_it(launcher):
    slow = launcher(sleep=3)
    del slow["connect_timeout"]
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, mcp_connect_timeout=1, mcp_servers=[slow])
    message = str(info.value)
    assert time.monotonic() - started < 15
    assert "launch_fixture.py" in message and "no answer within 1 s" in message
    assert "mcp_connect_timeout" in message and '"connect_timeout" in its mcp_servers entry' in message
    assert "npx" in message
    app = AppFactory().create_app(llm=ScriptedLLM([]), no_default=True, mcp_connect_timeout=1,
                                  mcp_servers=[{**slow, "connect_timeout": 30}])  # raised as the message says
    try:
        assert _tools(app)["add"].run({"a": 2, "b": 2}) == "4"
    finally:
        app.close()
