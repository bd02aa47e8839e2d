"""What one tenant of ``tool-hub serve`` can do to the server and to the other tenants: the server's memory
and environment are out of the workers' reach, several keys with code-running tools need
``serve_shared_trust``, every key has a fair share of users and runs, python workers are capped across all
users, files are capped in size, folders in volume, and the folders of users long gone are removed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import openai
import pytest
from test_server_support import free_port, live, wait_for  # noqa: F401 - the fixture

from chatgpt_tool_hub.config import defaults
from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError
from chatgpt_tool_hub.runtime.hardening import scrub_secret_env, secret_env_names
from chatgpt_tool_hub.runtime.sandbox import rlimits
from chatgpt_tool_hub.runtime.worker_limit import WorkerLimit
from chatgpt_tool_hub.server import create_server
from chatgpt_tool_hub.server.asgi import ApiError
from chatgpt_tool_hub.server.settings import ServeSettings
from chatgpt_tool_hub.server.users import User, UserApps
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.builtin.python_tool import PythonTool
from chatgpt_tool_hub.tools.builtin.terminal import TerminalTool
from tests.chat_server import ChatServer

from helpers import act, answer

ROOT = Path(__file__).resolve().parents[1]
LINUX = sys.platform.startswith("linux")

# ---- the server's secrets -----------------------------------------------------------------------------

_READ_PARENT = textwrap.dedent("""
    import os, sys
    from chatgpt_tool_hub.runtime.hardening import harden_server_process, is_dumpable
    from chatgpt_tool_hub.runtime.sandbox import run_sandboxed
    harden_server_process()
    assert is_dumpable() is False
    probe = (f"import sys\\nfor name in ('environ', 'mem'):\\n"
             f"    try:\\n        open('/proc/{os.getpid()}/' + name, 'rb').read(64)\\n"
             f"        print(name, 'READ')\\n    except OSError as exc:\\n        print(name, 'DENIED', exc.errno)")
    result = run_sandboxed([sys.executable, "-c", probe], cwd=os.getcwd(), timeout=30)
    print(result.output)
""")


@pytest.mark.skipif(not LINUX, reason="PR_SET_DUMPABLE and /proc are Linux's")
def test_a_hardened_process_keeps_its_environ_and_memory_from_the_children_it_starts(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_API_KEY": "sk-parent-secret-123"}
    proc = subprocess.run([sys.executable, "-c", _READ_PARENT], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "environ DENIED" in proc.stdout and "mem DENIED" in proc.stdout, proc.stdout
    assert "READ" not in proc.stdout


@pytest.mark.skipif(not LINUX, reason="PR_SET_DUMPABLE and /proc are Linux's")
@pytest.mark.timeout(300)  # a server process: slow to start on a busy machine
def test_through_tool_hub_serve_the_python_tool_cannot_read_the_servers_environ(tmp_path):
    secret = "sk-operator-secret-4242"
    server_pid: list[int] = []
    code = ("import base64\nfor name in ('environ', 'mem'):\n    try:\n"
            "        data = open('/proc/%d/' + name, 'rb').read()\n"
            "        print(name, 'READ', base64.b64encode(data[:4000]).decode())\n"
            "    except OSError as exc:\n        print(name, 'DENIED', exc.errno)")
    with ChatServer() as upstream:
        upstream.replies = [lambda body: act("python", code % server_pid[0]), answer("done")]
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "OPENAI_", "SERVE_", "MODEL_"))}
        env.update(PYTHONPATH=str(ROOT), LLM_API_BASE_URL=upstream.url, LLM_API_KEY=secret, MODEL_NAME="m",
                   NO_DEFAULT="true", MAX_RETRIES="0", SERVE_API_KEYS="tenant-key-1", SERVE_WEB="false",
                   SERVE_WORKSPACE_ROOT=str(tmp_path / "users"))
        proc = subprocess.Popen([sys.executable, "-m", "chatgpt_tool_hub.server.cli", "--port", str(port),
                                 "--tools", "python"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env)
        server_pid.append(proc.pid)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="tenant-key-1", max_retries=0,
                                   timeout=60)
            wait_for(lambda: _answers(client), 180)
        finally:
            proc.terminate()
            proc.wait(30)
        observation = upstream.requests[1]["json"]["messages"][-1]["content"]
    assert "environ DENIED" in observation and "mem DENIED" in observation, observation
    assert "READ" not in observation


def _answers(client: openai.OpenAI) -> bool:
    try:
        reply = client.chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": "go"}])
    except openai.APIConnectionError:
        return False
    return reply.choices[0].message.content == "done"


def test_the_secret_settings_are_scrubbed_from_the_environment():
    environ = {"LLM_API_KEY": "a", "OPENAI_API_KEY": "b", "SERVE_API_KEYS": "c,d", "HF_TOKEN": "e",
               "BING_SEARCH_API_KEY": "f", "PATH": "/usr/bin", "MODEL_NAME": "m", "SERVE_PORT": "8000"}
    assert set(secret_env_names(environ)) == {"LLM_API_KEY", "OPENAI_API_KEY", "SERVE_API_KEYS", "HF_TOKEN",
                                              "BING_SEARCH_API_KEY"}
    removed = scrub_secret_env(environ)
    assert set(removed) == {"LLM_API_KEY", "OPENAI_API_KEY", "SERVE_API_KEYS", "HF_TOKEN", "BING_SEARCH_API_KEY"}
    assert environ == {"PATH": "/usr/bin", "MODEL_NAME": "m", "SERVE_PORT": "8000"}


def test_users_apps_keep_the_secrets_read_at_start_after_the_environment_was_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("BING_SEARCH_API_KEY", "bing-secret")
    app = create_server(llm=ScriptedLLM([]), tools_list=["url-get"], no_default=True,
                        serve_workspace_root=str(tmp_path / "users"))
    monkeypatch.delenv("BING_SEARCH_API_KEY")  # what scrub_secret_env does in tool-hub serve
    state = app.state.tool_hub
    user_app = state.apps.acquire(User("local", "ann"), "victorinox")
    try:
        assert user_app.context.settings.get("bing_search_api_key") == "bing-secret"
    finally:
        state.apps.release(User("local", "ann"), "victorinox")
        state.apps.close()


# ---- several keys and code-running tools -----------------------------------------------------------------


@pytest.mark.parametrize("tools", [["python"], ["terminal"], ["tool-maker"], None])
def test_several_keys_with_code_running_tools_are_refused_at_start(tmp_path, tools):
    extra = {} if tools is None else {"no_default": True}  # None: the default tools, python among them
    with pytest.raises(ConfigError) as err:
        create_server(llm=ScriptedLLM([]), tools_list=tools, serve_api_keys="key-a,key-b",
                      serve_workspace_root=str(tmp_path), **extra)
    assert err.value.key == "serve_shared_trust"
    assert "serve_shared_trust" in str(err.value) and "one key" in str(err.value)


def test_shared_trust_one_key_no_key_or_no_code_tools_start(tmp_path):
    root = str(tmp_path)
    for settings in ({"serve_api_keys": "key-a,key-b", "serve_shared_trust": True}, {"serve_api_keys": "key-a"},
                     {}):
        create_server(llm=ScriptedLLM([]), tools_list=["python"], no_default=True, serve_workspace_root=root,
                      **settings)
    create_server(llm=ScriptedLLM([]), tools_list=["url-get"], no_default=True, serve_workspace_root=root,
                  serve_api_keys="key-a,key-b")


# ---- fair shares ------------------------------------------------------------------------------------------


class _App:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _apps(tmp_path: Path, **settings) -> tuple[UserApps, dict[str, _App]]:
    built: dict[str, _App] = {}

    def build(user: User, app_type: str, workspace: Path) -> _App:
        built[user.name] = _App()
        return built[user.name]

    apps = UserApps(build, tmp_path / "users", max_users=100, ttl_s=0)
    apps.configure_tenancy(ServeSettings(**{"api_keys": ("key-a", "key-b"), **settings}))
    return apps, built


def _refused(call, setting: str, code: str = "rate_limit_exceeded") -> ApiError:
    with pytest.raises(ApiError) as err:
        call()
    assert err.value.status == 429 and err.value.code == code and setting in err.value.message
    return err.value


def test_a_key_past_its_users_pushes_out_its_idle_one_and_is_refused_when_all_are_busy(tmp_path):
    apps, built = _apps(tmp_path, max_users_per_key=2)
    a1, a2, a3, a4 = (User("key-a", f"a{n}") for n in range(1, 5))
    for user in (a1, a2):
        apps.acquire(user, "victorinox")
        apps.release(user, "victorinox")
    apps.acquire(a3, "victorinox")  # a3 stays busy
    assert built["a1"].closed and not built["a2"].closed  # the key's least recently used user made room
    apps.acquire(a2, "victorinox")  # a2 busy too: no idle user of key-a is left
    _refused(lambda: apps.acquire(a4, "victorinox"), "serve_max_users_per_key")
    other = User("key-b", "b1")
    apps.acquire(other, "victorinox")  # another key has its own share
    assert sorted(folder.split("-")[0] for folder, _ in apps.users()) == ["a2", "a3", "b1"]


def test_a_key_past_its_runs_is_refused_until_one_ends(tmp_path):
    apps, _ = _apps(tmp_path, max_runs_per_key=2)
    a1, a2, b1 = User("key-a", "a1"), User("key-a", "a2"), User("key-b", "b1")
    apps.acquire(a1, "victorinox")
    apps.acquire(a2, "victorinox")
    error = _refused(lambda: apps.acquire(a1, "victorinox"), "serve_max_runs_per_key")
    assert error.headers["Retry-After"] == "1"
    apps.acquire(b1, "victorinox")  # the other key still runs
    apps.release(a2, "victorinox")
    apps.acquire(a1, "victorinox")


def test_one_key_or_none_has_no_per_key_caps(tmp_path):
    apps = UserApps(lambda user, app_type, workspace: _App(), tmp_path / "users", max_users=100, ttl_s=0)
    apps.configure_tenancy(ServeSettings(api_keys=("only",), max_runs_per_key=1, max_users_per_key=1))
    for name in ("u1", "u2", "u3"):
        apps.acquire(User("only", name), "victorinox")
    assert len(apps.users()) == 3


def test_the_cap_on_users_defaults_lower_and_follows_max_sessions():
    values = defaults()
    assert ServeSettings.from_config(values).max_users == 100
    assert ServeSettings.from_config({**values, "max_sessions": 5}).max_users == 5
    assert ServeSettings.from_config({**values, "serve_max_users": 0, "max_sessions": 0}).max_users == 0
    tenancy = ServeSettings.from_config(values)
    assert (tenancy.max_users_per_key, tenancy.max_runs_per_key, tenancy.shared_trust) == (16, 8, False)


def test_over_its_quota_a_users_new_runs_get_429_until_files_are_removed(tmp_path):
    apps, _ = _apps(tmp_path, user_quota_mb=1)
    ann = User("key-a", "ann")
    apps.acquire(ann, "victorinox")
    apps.release(ann, "victorinox")
    big = apps.workspace(ann) / "big.bin"
    big.write_bytes(os.urandom(2 << 20))
    _refused(lambda: apps.acquire(ann, "victorinox"), "serve_user_quota_mb", code="insufficient_quota")
    big.unlink()
    apps.acquire(ann, "victorinox")


def test_the_folders_of_users_gone_past_the_retention_are_removed_never_a_live_ones(tmp_path):
    apps, _ = _apps(tmp_path, user_retention_s=3600)
    live, gone, recent = User("key-a", "live"), User("key-a", "gone"), User("key-a", "recent")
    for user in (live, gone, recent):
        apps.acquire(user, "victorinox")
        apps.release(user, "victorinox")
        (apps.workspace(user) / "notes.txt").write_text("x")
    apps.drop(gone)
    apps.drop(recent)
    old = time.time() - 7200
    for user in (live, gone):
        os.utime(apps.workspace(user), (old, old))
    assert apps.prune_folders() == [gone.folder]
    assert not apps.workspace(gone).exists()
    assert (apps.workspace(live) / "notes.txt").is_file() and (apps.workspace(recent) / "notes.txt").is_file()


# ---- python workers and files -------------------------------------------------------------------------------


@pytest.mark.skipif(os.name != "posix", reason="persistent workers are POSIX")
def test_python_workers_of_all_users_share_one_cap(tmp_path):
    limit = WorkerLimit(1)
    first = PythonTool(workspace_dir=tmp_path / "one", worker_limit=limit)
    second = PythonTool(workspace_dir=tmp_path / "two", worker_limit=limit)
    try:
        assert first.run("x = 1\nprint('first')") == "first"
        assert second.run("print('second')") == "second"  # first's idle worker made room
        assert first.worker_pids() == {} and len(second.worker_pids()) == 1 and limit.live == 1
        release = tmp_path / "two" / "go"
        started = tmp_path / "two" / "started"
        busy = threading.Thread(target=second.run, args=(
            "import os, time\nopen('started', 'w').close()\ndeadline = time.monotonic() + 60\n"
            "while not os.path.exists('go') and time.monotonic() < deadline:\n    time.sleep(0.01)",))
        busy.start()
        try:
            wait_for(started.exists, 30)
            with pytest.raises(ToolExecutionError, match="serve_max_python_workers.*busy"):
                first.run("print(1)")
        finally:
            release.touch()
            busy.join(60)
        assert first.run("print('again')") == "again"
    finally:
        first.close()
        second.close()
    assert limit.live == 0


def test_a_server_gives_every_users_python_tool_the_same_worker_cap(tmp_path):
    app = create_server(llm=ScriptedLLM([]), tools_list=["python"], no_default=True, serve_max_python_workers=3,
                        serve_workspace_root=str(tmp_path / "users"))
    apps = app.state.tool_hub.apps
    try:
        tools = [apps.acquire(User("local", name), "victorinox").tools[0] for name in ("ann", "bob")]
        assert tools[0].worker_limit is tools[1].worker_limit and tools[0].worker_limit.limit == 3
    finally:
        apps.close()


def test_the_file_size_limit_is_an_rlimit():
    assert rlimits(10, None, 5)["RLIMIT_FSIZE"] == [5 << 20, 5 << 20]
    assert "RLIMIT_FSIZE" not in rlimits(10, None)


@pytest.mark.skipif(os.name != "posix", reason="rlimits are POSIX")
def test_a_python_write_past_max_file_mb_fails_with_a_clear_error(tmp_path):
    tool = PythonTool(workspace_dir=tmp_path, max_file_mb=1)
    try:
        observation = tool.run("open('big.bin', 'wb').write(b'x' * (3 << 20))")
    finally:
        tool.close()
    assert "File too large" in observation and "max_file_mb" in observation
    assert (tmp_path / "big.bin").stat().st_size <= 1 << 20


@pytest.mark.skipif(os.name != "posix", reason="rlimits are POSIX")
def test_a_terminal_write_past_max_file_mb_is_stopped_with_a_clear_error(tmp_path):
    tool = TerminalTool(workspace_dir=tmp_path, max_file_mb=1)
    observation = tool.run("head -c 3000000 /dev/zero > big.bin; echo after")
    assert "File size limit exceeded" in observation or "max_file_mb" in observation
    assert (tmp_path / "big.bin").stat().st_size <= 1 << 20
    observation = tool.run("head -c 3000000 /dev/zero > big.bin")
    assert "SIGXFSZ" in observation and "max_file_mb" in observation


def test_a_key_past_its_runs_gets_openais_429_over_http_while_another_key_is_served(live):
    gate, started = threading.Event(), threading.Event()

    def slow(messages):
        started.set()
        gate.wait(30)
        return answer("slow")

    llm = ScriptedLLM([slow, answer("b served"), answer("a again")])
    server = live(llm=llm, serve_api_keys="key-a,key-b", serve_max_runs_per_key=1)
    question = [{"role": "user", "content": "hi"}]
    first = threading.Thread(target=lambda: server.client("key-a").chat.completions.create(
        model="tool-hub", messages=question))
    first.start()
    try:
        assert started.wait(30)
        with pytest.raises(openai.RateLimitError) as err:
            server.client("key-a").chat.completions.create(model="tool-hub", messages=question, user="other")
        assert "serve_max_runs_per_key" not in str(err.value)
        assert err.value.body["code"] == "rate_limit_exceeded"
        reply = server.client("key-b").chat.completions.create(model="tool-hub", messages=question)
        assert reply.choices[0].message.content == "b served"
    finally:
        gate.set()
        first.join(30)
    reply = server.client("key-a").chat.completions.create(model="tool-hub", messages=question)
    assert reply.choices[0].message.content == "a again"
