"""No process started by a tool outlives its call or the application.

The ways out that these tests close: the python worker exits (``os._exit``, the
CPU-time limit) right after starting a child in a new session or a
double-forked daemon; the application is killed with ``SIGKILL`` during a call;
a command or the code kills the supervisor that holds its tree together.

Every process these tests start is ended by pid (never by name) in a
``finally``, so a failing test leaves nothing behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chatgpt_tool_hub.tools.builtin.python_tool import PythonTool
from chatgpt_tool_hub.tools.builtin.terminal import TerminalTool

from helpers import process_gone, wait_gone, wait_until

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process-tree checks use /proc"),
              pytest.mark.timeout(60)]

_REPO = Path(__file__).resolve().parents[1]



def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _kill(pids) -> None:
    for pid in pids:
        if pid > 1 and not process_gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def leftovers():
    """Pids that a test expects to be gone; killed afterwards if they are not (by pid)."""
    pids: list[int] = []
    try:
        yield pids
    finally:
        _kill(pids)


@pytest.fixture
def py(tmp_path):
    tool = PythonTool(workspace_dir=tmp_path / "ws", timeout=10)
    yield tool
    tool.close()


def _read_pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()] if path.exists() else []


def _setsid_sleeper(pidfile: Path) -> str:
    """Python code: start ``sleep 60`` in a new session and write its pid to ``pidfile``."""
    return ("import os, subprocess\n"
            "child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
            f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n")


# ---- the python worker exits -------------------------------------------------------------


def test_worker_exit_ends_a_child_in_a_new_session(py, tmp_path, leftovers):
    pidfile = tmp_path / "child.pid"
    out = py.run(_setsid_sleeper(pidfile) + "os._exit(0)\n")
    leftovers.extend(_read_pids(pidfile))
    assert leftovers, out
    assert "exited (status 0)" in out and "earlier calls are lost" in out
    assert wait_gone(leftovers[0]), f"the setsid child {leftovers[0]} outlived the worker"
    assert py.run("print('fresh')") == "fresh"


def test_worker_exit_ends_a_double_forked_daemon(py, tmp_path, leftovers):
    pidfile = tmp_path / "daemon.pid"
    code = textwrap.dedent(f"""\
        import os
        if os.fork() == 0:
            os.setsid()
            pid = os.fork()
            if pid == 0:
                os.execvp('sleep', ['sleep', '60'])
            open({str(pidfile)!r}, 'w').write(str(pid))
            os._exit(0)
        os.wait()
        os._exit(0)
        """)
    out = py.run(code)
    leftovers.extend(_read_pids(pidfile))
    assert leftovers, out
    assert wait_gone(leftovers[0]), f"the daemon {leftovers[0]} outlived the worker"


def test_cpu_limit_ends_the_worker_and_its_children(tmp_path, leftovers):
    tool = PythonTool(workspace_dir=tmp_path / "ws", timeout=30, max_cpu_seconds=1)
    pidfile = tmp_path / "child.pid"
    try:
        out = tool.run(_setsid_sleeper(pidfile) + "while True: pass\n")
        leftovers.extend(_read_pids(pidfile))
        assert leftovers, out
        assert "CPU time" in out, out
        assert wait_gone(leftovers[0]), f"the setsid child {leftovers[0]} outlived the worker"
    finally:
        tool.close()


# ---- the call ends ----------------------------------------------------------------------------

_BACKGROUND = textwrap.dedent("""\
    import os, subprocess
    plain = subprocess.Popen(['sleep', '61'])                          # never waited for
    session = subprocess.Popen(['sleep', '62'], start_new_session=True)
    if os.fork() == 0:                                                  # a double-forked daemon
        os.setsid()
        pid = os.fork()
        if pid == 0:
            os.execvp('sleep', ['sleep', '63'])
        open(PIDFILE + '.daemon', 'w').write(str(pid))
        os._exit(0)
    os.wait()
    open(PIDFILE, 'w').write(f"{plain.pid} {session.pid}")
    kept = 'still here'
    print('started')
    """)


def _background(tool: PythonTool, pidfile: Path) -> tuple[str, list[int]]:
    out = tool.run(f"PIDFILE = {str(pidfile)!r}\n" + _BACKGROUND)
    wait_until(Path(str(pidfile) + ".daemon").exists)
    return out, _read_pids(pidfile) + _read_pids(Path(str(pidfile) + ".daemon"))


def test_what_a_call_leaves_running_ends_with_the_call_and_the_session_stays(py, tmp_path, leftovers):
    out, pids = _background(py, tmp_path / "bg.pid")
    leftovers.extend(pids)
    assert len(pids) == 3, out
    assert out.startswith("started") and "this code left running were stopped when it ended" in out
    for pid in pids:
        assert wait_gone(pid), f"{pid} outlived its call"
    assert py.run("print(kept)") == "still here"  # the worker and its variables are kept


def test_python_keep_background_keeps_them_while_the_worker_lives(tmp_path, leftovers):
    tool = PythonTool(workspace_dir=tmp_path / "ws", timeout=10, keep_background=True)
    try:
        out, pids = _background(tool, tmp_path / "bg.pid")
        leftovers.extend(pids)
        assert out == "started" and len(pids) == 3
        assert tool.run("print(kept)") == "still here"
        assert not any(process_gone(pid) for pid in pids)  # a server started in one call serves the next
    finally:
        tool.close()
    for pid in pids:
        assert wait_gone(pid), f"{pid} outlived the worker"


# ---- the code kills its supervisor --------------------------------------------------------

# Python code: the nearest ancestor (or the outermost one) below the application, given as APP.
_FIND_TARGET = textwrap.dedent("""\
    def parent(pid):
        return int(open('/proc/%d/stat' % pid).read().rsplit(')', 1)[1].split()[1])
    target = os.getpid()
    if OUTERMOST:
        while parent(target) not in (APP, 0, 1):
            target = parent(target)
    elif parent(target) != APP:
        target = parent(target)
    os.kill(target, 9)
    """)


@pytest.mark.parametrize("outermost", [False, True], ids=["parent", "outermost"])
def test_code_that_kills_its_supervisor_leaves_nothing(py, tmp_path, leftovers, outermost):
    pidfile = tmp_path / "child.pid"
    code = (_setsid_sleeper(pidfile) + f"APP, OUTERMOST = {os.getpid()}, {outermost}\n" + _FIND_TARGET
            + "import time; time.sleep(5)\n")
    out = py.run(code)
    leftovers.extend(_read_pids(pidfile))
    assert leftovers, out
    assert "Error:" in out and "earlier calls are lost" in out
    assert wait_gone(leftovers[0]), f"the setsid child {leftovers[0]} outlived its supervisor"
    assert py.run("print('fresh')") == "fresh"


def _term_command(target: str) -> str:
    return f"setsid sleep 60 >/dev/null 2>&1 & echo $!; {target}; sleep 5"


# A shell snippet that kills the outermost process below the application (the test itself).
_OUTERMOST = ("p=$$; q=$PPID; while [ \"$q\" != {app} ] && [ \"$q\" -gt 1 ]; do p=$q; "
              "q=$(cut -d' ' -f4 /proc/$q/stat); done; kill -9 $p")


@pytest.mark.parametrize("target", ["kill -9 $PPID", _OUTERMOST], ids=["ppid", "outermost"])
def test_terminal_command_that_kills_its_supervisor_leaves_nothing(tmp_path, leftovers, target):
    term = TerminalTool(workspace_dir=tmp_path / "ws", timeout=10, nsfc_filter=False)
    out = term.run(_term_command(target.format(app=os.getpid())))
    first = out.splitlines()[0] if out else ""
    leftovers.extend(int(word) for word in first.split() if word.isdigit())
    assert leftovers, out
    assert wait_gone(leftovers[0]), f"the setsid child {leftovers[0]} outlived its supervisor: {out!r}"


# ---- the application dies -----------------------------------------------------------------

_APP = textwrap.dedent("""\
    import sys
    from chatgpt_tool_hub.tools.builtin.python_tool import PythonTool
    PythonTool(workspace_dir=sys.argv[1], timeout=60).run(sys.argv[2])
    """)


def test_app_killed_mid_call_leaves_no_worker_supervisor_or_child(tmp_path, leftovers):
    pidfile = tmp_path / "pids.txt"
    code = ("import os, subprocess, time\n"
            "child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
            f"open({str(pidfile) + '.tmp'!r}, 'w').write('%d %d' % (os.getpid(), child.pid))\n"
            f"os.rename({str(pidfile) + '.tmp'!r}, {str(pidfile)!r})\n"
            "time.sleep(60)\n")
    app = subprocess.Popen([sys.executable, "-c", _APP, str(tmp_path / "ws"), code], cwd=str(_REPO),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < deadline and app.poll() is None:
            time.sleep(0.05)
        worker, child = _read_pids(pidfile)
        leftovers.extend((worker, child))
        ancestor = _parent(worker)
        while ancestor not in (app.pid, 0, 1):  # the supervisor(s) between the app and the worker
            leftovers.append(ancestor)
            ancestor = _parent(ancestor)
        assert ancestor == app.pid
        app.kill()
        assert app.wait(timeout=10) == -signal.SIGKILL
        stayed = [pid for pid in leftovers if not wait_gone(pid)]
        assert not stayed, f"still running after the app was killed: {stayed} of {leftovers}"
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
