"""The server's limits as clients meet them: 401, 413, 429 with Retry-After, the per-request time limit,
a client that goes away (its run cancelled, its tools killed), a shutdown that drains the runs in flight,
the refusal to serve a non-loopback address without a key, and the cap on users' apps."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from test_server_support import free_port, live, user_workspace, wait_for  # noqa: F401 - the fixture

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.server.settings import ServeSettings
from chatgpt_tool_hub.testing import ScriptedLLM
from tests.chat_server import ChatServer

from helpers import act, answer, wait_gone

ROOT = Path(__file__).resolve().parents[1]
QUESTION = [{"role": "user", "content": "hi"}]


def _blocking_llm(gate: threading.Event, started: threading.Event | None = None) -> ScriptedLLM:
    def wait(messages):
        if started is not None:
            started.set()
        gate.wait(30)
        return answer("finally")
    return ScriptedLLM([wait] * 4)


def test_wrong_or_missing_keys_are_refused_with_401(live):
    server = live(llm=ScriptedLLM([answer("hello")]), serve_api_keys="k1, k2")
    with pytest.raises(openai.AuthenticationError) as err:
        server.client("wrong").chat.completions.create(model="tool-hub", messages=QUESTION)
    assert "API key" in str(err.value) and "serve_api_keys" not in str(err.value)
    with pytest.raises(openai.AuthenticationError):
        server.client("wrong").models.list()
    assert httpx.post(server.root + "/tasks", json={"messages": QUESTION}).status_code == 401
    reply = server.client("k2").chat.completions.create(model="tool-hub", messages=QUESTION)
    assert reply.choices[0].message.content == "hello"


def test_a_body_past_the_limit_is_413(live):
    llm = ScriptedLLM([answer("small")])
    server = live(llm=llm, serve_max_body_bytes=5000)
    with pytest.raises(openai.APIStatusError) as err:
        server.client().chat.completions.create(model="tool-hub",
                                                messages=[{"role": "user", "content": "x" * 10_000}])
    assert err.value.status_code == 413 and "at most 5000" in str(err.value)
    chunked = httpx.post(server.url + "/chat/completions", content=iter([b"{" + b" " * 6000, b"}"]),
                         headers={"content-type": "application/json", **server.auth})
    assert chunked.status_code == 413  # no Content-Length: counted as it comes
    assert llm.calls == 0
    assert server.client().chat.completions.create(model="tool-hub", messages=QUESTION).choices[0].message.content \
        == "small"


def test_past_the_concurrent_runs_429_with_retry_after(live):
    gate, started = threading.Event(), threading.Event()
    server = live(llm=_blocking_llm(gate, started), serve_max_concurrent_runs=1)
    client = server.client()
    first = threading.Thread(target=lambda: client.chat.completions.create(model="tool-hub", messages=QUESTION))
    first.start()
    try:
        assert started.wait(20)
        with pytest.raises(openai.RateLimitError) as err:
            client.chat.completions.create(model="tool-hub", messages=QUESTION)
        assert err.value.response.headers["retry-after"] == "1"
        assert "try again" in str(err.value) and "serve_max_concurrent_runs" not in str(err.value)
    finally:
        gate.set()
        first.join(20)
    assert client.chat.completions.create(model="tool-hub", messages=QUESTION).choices[0].message.content == "finally"


def test_a_run_past_the_time_limit_is_stopped_504_or_an_error_event(live):
    gate = threading.Event()
    server = live(llm=_blocking_llm(gate), serve_request_timeout_s=0.5)
    try:
        with pytest.raises(openai.APIStatusError) as err:
            server.client().chat.completions.create(model="tool-hub", messages=QUESTION)
        assert err.value.status_code == 504 and "took longer than" in str(err.value)
        with pytest.raises(openai.APIError) as err:
            for _ in server.client().chat.completions.create(model="tool-hub", messages=QUESTION, stream=True):
                pass
        assert "took longer than" in str(err.value)
    finally:
        gate.set()
    wait_for(lambda: server.state.slots.used == 0)


LATE_S = 30  # the grandchild writes late.txt this long after it starts, unless it was killed
SLOW_CODE = ("import subprocess, sys, time\n"
             f"child = subprocess.Popen([sys.executable, '-c', 'import time, pathlib; time.sleep({LATE_S}); "
             "pathlib.Path(\"late.txt\").write_text(\"x\")'])\n"
             "open('child.pid', 'w').write(str(child.pid))\n"
             "time.sleep(60)\n")


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_goes_away_cancels_the_run_and_kills_its_tools(live, stream):
    llm = ScriptedLLM([act("python", SLOW_CODE), answer("never sent")])
    server = live(llm=llm, tools_list=["python"], python_timeout=60)
    workspace = user_workspace(server)
    body = json.dumps({"model": "tool-hub", "messages": QUESTION, "stream": stream}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:  # a client that hangs up
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s"
                     % (server.token.encode(), len(body), body))
        wait_for(lambda: (workspace / "child.pid").exists() and (workspace / "child.pid").read_text())
        time.sleep(0.1)
    child = int((workspace / "child.pid").read_text())
    assert wait_gone(child), "the process the tool started still runs"
    wait_for(lambda: server.state.slots.used == 0)
    # the child is the only writer of late.txt: gone without the file, it was killed before its time
    assert not (workspace / "late.txt").exists(), "something the tool started kept running"
    assert llm.calls == 1


def test_a_non_loopback_address_without_a_key_is_refused():
    with pytest.raises(ConfigError) as err:
        ServeSettings(host="0.0.0.0").check_bind()
    assert err.value.key == "serve_api_keys" and "SERVE_API_KEYS" in str(err.value)
    ServeSettings(host="0.0.0.0", api_keys=("k",)).check_bind()
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        ServeSettings(host=host).check_bind()


def _serve_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "OPENAI_", "SERVE_", "MODEL_"))}
    env.update(PYTHONPATH=str(ROOT), **extra)
    return env


def test_tool_hub_serve_refuses_a_public_address_without_a_key(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "chatgpt_tool_hub.server.cli", "--host", "0.0.0.0", "--port",
                           str(free_port())], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=_serve_env(LLM_API_BASE_URL="http://127.0.0.1:9/v1"))
    assert proc.returncode == 2 and "serve_api_keys" in proc.stderr


@pytest.mark.timeout(300)  # a server process that imports gradio: slow to start on a busy machine
def test_a_shutdown_drains_the_runs_in_flight(tmp_path):
    with ChatServer([answer("drained")]) as upstream:
        upstream.faults.append(("sleep", 2.0))  # the first LLM reply comes late
        upstream.replies = [answer("drained")]
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "chatgpt_tool_hub.server.cli", "--port", str(port)],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=_serve_env(LLM_API_BASE_URL=upstream.url, MODEL_NAME="m", NO_DEFAULT="true",
                                               MAX_RETRIES="0", SERVE_WORKSPACE_ROOT=str(tmp_path / "users"),
                                               SERVE_API_KEYS="x"))
        try:
            wait_for(lambda: _up(port), 180)
            result = {}
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60)
            thread = threading.Thread(target=lambda: result.update(
                reply=client.chat.completions.create(model="tool-hub", messages=QUESTION)))
            thread.start()
            wait_for(lambda: len(upstream.requests) == 1)
            proc.send_signal(signal.SIGTERM)
            thread.join(30)
            # uvicorn ends by raising the signal again once it has drained, so the status says SIGTERM
            assert proc.wait(30) in (0, -signal.SIGTERM)
        finally:
            if proc.poll() is None:
                proc.kill()
        # the answer of the run in flight was the scripted late reply ("(late)"), delivered before the exit
        assert result["reply"].choices[0].message.content.startswith("(late)")
        assert not _up(port)


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_users_apps_past_the_cap_are_closed_with_their_python_workers(live):
    llm = ScriptedLLM([act("python", "x = 1"), answer("a"), act("python", "x = 2"), answer("b")])
    server = live(llm=llm, tools_list=["python"], max_sessions=1)
    client = server.client()
    client.chat.completions.create(model="tool-hub", messages=QUESTION, user="alice")
    (alice_app,) = server.state.apps.all_apps()
    pid = next(iter(alice_app.tools[0].worker_pids().values()))
    client.chat.completions.create(model="tool-hub", messages=QUESTION, user="bob")
    assert [folder.split("-")[0] for folder, _ in server.state.apps.users()] == ["bob"]
    assert wait_gone(pid, 10.0)


def test_dropping_a_user_closes_their_idle_apps_and_leaves_a_busy_one(tmp_path):
    from chatgpt_tool_hub.server.users import User, UserApps

    closed = []

    class FakeApp:
        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    apps = UserApps(lambda user, app_type, ws: FakeApp(f"{user.name}:{app_type}"), tmp_path, max_users=0, ttl_s=0)
    alice, bob = User("local", "alice"), User("local", "bob")
    for user in (alice, bob):
        for app_type in ("victorinox", "planner"):
            apps.acquire(user, app_type)
            apps.release(user, app_type)
    apps.acquire(alice, "planner")  # a run in flight
    assert apps.drop(alice) == 1 and closed == ["alice:victorinox"]
    assert set(apps.sessions_of(alice)) == {"planner"} and set(apps.sessions_of(bob)) == {"victorinox", "planner"}
