"""Attacks on the process tools (``python``, ``terminal``): escaping the kill, the protocol, the parent.

Every process these tests start is ended by pid (never by name).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chatgpt_tool_hub.tools.builtin.python_tool import PythonTool
from chatgpt_tool_hub.tools.builtin.terminal import TerminalTool

from helpers import process_gone, wait_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process-tree checks use /proc")

_SLEEPER = "import time; time.sleep(120)"





@pytest.fixture
def leftovers():
    """Pids that a test expects to be gone; killed afterwards if they are not (by pid)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if not process_gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _pids(text: str) -> list[int]:
    """The pids a command printed on its first line (later lines hold messages like "2 s")."""
    first = text.splitlines()[0] if text else ""
    return [int(word) for word in first.split() if word.isdigit() and int(word) > 1]


@pytest.fixture
def py(tmp_path):
    tool = PythonTool(workspace_dir=tmp_path / "ws", timeout=2)
    yield tool
    tool.close()


@pytest.fixture
def term(tmp_path):
    return TerminalTool(workspace_dir=tmp_path / "ws", timeout=2)


# ---- leaving the process group ----------------------------------------------------------

SETSID_CHILD = ("import subprocess, sys\n"
                f"p = subprocess.Popen([sys.executable, '-c', {_SLEEPER!r}], start_new_session=True)\n"
                "print(p.pid, flush=True)\n")

DOUBLE_FORK = textwrap.dedent(f"""\
    import os, sys
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            os.execv(sys.executable, [sys.executable, '-c', {_SLEEPER!r}])
        os.write(w, str(pid).encode())
        os._exit(0)
    os.close(w)
    print(os.read(r, 100).decode(), flush=True)
    """)


@pytest.mark.parametrize("code", [SETSID_CHILD, DOUBLE_FORK], ids=["setsid", "double-fork"])
def test_python_timeout_also_ends_children_that_left_the_group(py, leftovers, code):
    out = py.run(code + "while True: pass\n")
    assert "python_timeout" in out
    leftovers.extend(_pids(out))
    assert leftovers and all(wait_gone(pid) for pid in leftovers), out


@pytest.fixture
def py_keeping(tmp_path):
    """A python tool whose calls may leave processes running for later calls (python_keep_background)."""
    tool = PythonTool(workspace_dir=tmp_path / "ws", timeout=2, keep_background=True)
    yield tool
    tool.close()


@pytest.mark.parametrize("code", [SETSID_CHILD, DOUBLE_FORK], ids=["setsid", "double-fork"])
def test_python_close_and_reset_end_children_that_left_the_group(py_keeping, leftovers, code):
    leftovers.extend(_pids(py_keeping.run(code)))
    assert leftovers and not any(process_gone(pid) for pid in leftovers)  # alive while the session lives
    py_keeping.reset()
    assert all(wait_gone(pid) for pid in leftovers)


@pytest.mark.parametrize("code", [SETSID_CHILD, DOUBLE_FORK], ids=["setsid", "double-fork"])
def test_python_children_that_left_the_group_end_with_their_call_by_default(py, leftovers, code):
    out = py.run(code)
    leftovers.extend(_pids(out))
    assert leftovers and "stopped when it ended" in out
    assert all(wait_gone(pid) for pid in leftovers)


def test_python_background_children_live_on_between_calls_when_kept(py_keeping, leftovers):
    leftovers.extend(_pids(py_keeping.run(SETSID_CHILD)))
    assert py_keeping.run("print('next call')") == "next call"
    assert not process_gone(leftovers[0])


@pytest.mark.parametrize("command", [
    f"setsid {sys.executable} -c '{_SLEEPER}' >/dev/null 2>&1 & echo $!",
    f"({sys.executable} -c '{_SLEEPER}' >/dev/null 2>&1 & echo $!)",
    f"nohup setsid {sys.executable} -c '{_SLEEPER}' >/dev/null 2>&1 & echo $!",
], ids=["setsid", "subshell", "nohup-setsid"])
def test_terminal_ends_what_the_command_left_behind(term, leftovers, command):
    out = term.run(command)
    leftovers.extend(_pids(out))
    assert leftovers, out
    assert "terminal_timeout" not in out  # the call ended with the shell, it did not wait for what it left
    assert all(wait_gone(pid) for pid in leftovers), out


def test_terminal_timeout_ends_children_that_left_the_group(term, leftovers):
    out = term.run(f"setsid {sys.executable} -c '{_SLEEPER}' >/dev/null 2>&1 & echo $!; sleep 60")
    assert "terminal_timeout" in out
    leftovers.extend(_pids(out))
    assert leftovers and all(wait_gone(pid) for pid in leftovers), out


def test_terminal_exit_status_and_signals_still_reported(term):
    assert term.run("exit 3") == "(exit status 3)"
    assert term.run("kill -TERM $$") == "(killed by SIGTERM)"
    out = term.run("no-such-command-xyz")
    assert "no-such-command-xyz: " in out and "not found" in out and out.endswith("(exit status 127)"), out


# ---- the worker protocol ------------------------------------------------------------------


def test_closing_the_protocol_pipes_is_reported_as_such(py):
    out = py.run("import os\nfor fd in range(3, 64):\n    try: os.close(fd)\n    except OSError: pass\n"
                 "import time; time.sleep(0.5)")
    assert "memory" not in out
    assert "connection" in out and "earlier calls are lost" in out
    assert py.run("print('fresh')") == "fresh"


def test_writing_garbage_on_the_protocol_pipes_stops_the_worker(py):
    out = py.run("import os\nfor fd in range(3, 64):\n"
                 "    try: os.write(fd, b'\\x00\\x00\\x00\\x05hello')\n    except OSError: pass\n"
                 "import time; time.sleep(0.5)")
    assert "Error:" in out and "earlier calls are lost" in out
    assert py.run("print('fresh')") == "fresh"


def test_a_forged_reply_does_not_outlive_the_next_call(tmp_path):
    """Code can speak the protocol itself (it runs in the worker): documented; the next call still ends it."""
    py = PythonTool(workspace_dir=tmp_path / "ws", timeout=1)
    try:
        forged = ("import json, os, struct\n"
                  "msg = json.dumps({'status': 'ok', 'code': None}).encode()\n"
                  "for fd in range(3, 64):\n"
                  "    try: os.write(fd, struct.pack('>I', len(msg)) + msg)\n"
                  "    except OSError: pass\n"
                  "while True: pass\n")
        out = py.run(forged)  # returns at once with the forged reply, not at the 1 s timeout
        assert "python_timeout" not in out and not out.startswith("Error"), out
        pid = py.worker_pids()["default"]
        assert "python_timeout" in py.run("print('served')")  # the worker is still looping: stopped now
        assert wait_gone(pid)
        assert py.run("print('served')") == "served"
    finally:
        py.close()


# ---- the parent ---------------------------------------------------------------------------

_PARENT = textwrap.dedent("""\
    import os, sys, time
    from chatgpt_tool_hub.tools.builtin.python_tool import PythonTool
    py = PythonTool(workspace_dir=sys.argv[1], timeout=5)
    print(py.run(sys.argv[2].replace("APP_PID", str(os.getpid()))), flush=True)
    print("parent survived", flush=True)
    py.close()
    """)


def test_a_dead_parent_leaves_no_worker_or_background_child(tmp_path, leftovers):
    """Same-user code can kill the application (documented); what it started must not linger."""
    marker = tmp_path / "pids.txt"
    code = ("import os, subprocess, sys\n"
            f"p = subprocess.Popen([sys.executable, '-c', {_SLEEPER!r}], start_new_session=True)\n"
            f"open({str(marker)!r}, 'w').write('%d %d' % (os.getpid(), p.pid))\n"
            "os.kill(APP_PID, 9)\n")
    proc = subprocess.run([sys.executable, "-c", _PARENT, str(tmp_path / "ws"), code], capture_output=True,
                          text=True, timeout=60, cwd=str(Path(__file__).resolve().parents[1]))
    assert proc.returncode == -signal.SIGKILL
    leftovers.extend(int(p) for p in marker.read_text().split())
    assert len(leftovers) == 2
    assert all(wait_gone(pid) for pid in leftovers)


def test_kill_tree_never_leaves_a_process_stopped(tmp_path, leftovers, monkeypatch):
    """If looking for descendants fails half-way, the group is still killed, not left frozen by SIGSTOP."""
    from chatgpt_tool_hub.runtime import sandbox as _sandbox

    proc = _sandbox.spawn_limited([sys.executable, "-c", _SLEEPER], cwd=tmp_path, env=_sandbox.scrubbed_env(),
                                  cpu_seconds=60)
    leftovers.append(proc.pid)
    calls = []

    def flaky(pid):
        calls.append(pid)
        if len(calls) > 1:
            raise RuntimeError("/proc went away")
        return set()

    from chatgpt_tool_hub.runtime import proctree

    monkeypatch.setattr(proctree, "_subtree", lambda pid: None)  # no children files: the table is read
    monkeypatch.setattr(proctree, "descendants", flaky)
    with pytest.raises(RuntimeError):
        _sandbox.kill_tree(proc.pid)
    assert proc.wait(timeout=5) == -signal.SIGKILL


def test_a_reaped_child_is_killed_by_group_only(tmp_path, monkeypatch):
    """After wait() the pid may be someone else's: its tree is never looked for."""
    from chatgpt_tool_hub.runtime import sandbox as _sandbox

    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    from chatgpt_tool_hub.runtime import proctree

    monkeypatch.setattr(proctree, "descendants", lambda pid: pytest.fail("looked for the tree of a reaped pid"))
    _sandbox.kill_child_tree(proc)
