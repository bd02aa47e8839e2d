"""``app.cancel()`` ends a python or terminal call by events, at any load.

The path from ``cancel()`` to the tool's process tree being killed and
``app.run`` returning must not wait on a poll interval, a sleep, a grace
period or a read of the whole process table (which grows with the machine's
load): the kill finds the tree through the tree's own ``/proc`` children
files, and the waits after it wake on the end of the pipes and of the process
(a pidfd). These tests check that by behaviour, not by timing: the poll and
grace constants are made an hour long (a wait on one of them would hang the
run, which the join below reports), and reads of ``/proc`` as a whole and
calls of ``time.sleep`` made while the cancel is handled are recorded.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.runtime import python_process, sandbox
from chatgpt_tool_hub.runtime.sandbox import exit_fd, scrubbed_env, spawn_limited, wait_exit
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.builtin import terminal

from helpers import act, answer, wait_gone, wait_until


def _pidfd_works() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return False
    return True


def _children_files() -> bool:
    return Path(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/children").exists()


pytestmark = pytest.mark.skipif(not (sys.platform.startswith("linux") and _pidfd_works() and _children_files()),
                                reason="needs Linux with pidfd_open and /proc/<pid>/task/<tid>/children")

HOUR = 3600.0
PYTHON_CODE = ("import subprocess, sys, time\n"
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
               "open('child.pid', 'w').write(str(child.pid))\n"
               "time.sleep(60)\n")
SHELL_COMMAND = "sleep 60 & echo $! > child.pid; sleep 60"


class _Recorder:
    """While armed: the whole-table reads of /proc and the sleeps made by the watched threads."""

    def __init__(self, monkeypatch) -> None:
        self.armed = False
        self.threads: set[int] = set()
        self.table_reads: list[str] = []
        self.sleeps: list[float] = []
        listdir, sleep = os.listdir, time.sleep

        def recording_listdir(path=".") -> list[str]:
            if self.armed and os.fspath(path).rstrip("/") == "/proc":
                self.table_reads.append(threading.current_thread().name)
            return listdir(path)

        def recording_sleep(seconds: float) -> None:
            if self.armed and threading.get_ident() in self.threads:
                self.sleeps.append(seconds)
            sleep(seconds)

        monkeypatch.setattr(os, "listdir", recording_listdir)
        monkeypatch.setattr(time, "sleep", recording_sleep)


def _wait_for_pid(path: Path, seconds: float = 30.0) -> int:
    """The pid the tool's code wrote (polled with an Event, not time.sleep: that one is being recorded)."""
    deadline = time.monotonic() + seconds
    pause = threading.Event()
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        pause.wait(0.01)
    raise AssertionError(f"{path} never appeared")


def _cancel_running_call(tmp_path, monkeypatch, tool: str, tool_input: str):
    """Start a run whose tool call starts a grandchild, cancel it from this thread while recording;
    returns (result, grandchild pid, recorder)."""
    recorder = _Recorder(monkeypatch)
    ws = tmp_path / "ws"
    llm = ScriptedLLM([act(tool, tool_input), answer("never sent")])
    app = AppFactory().create_app(tools_list=[tool], llm=llm, no_default=True, workspace_dir=str(ws),
                                  python_timeout=120, terminal_timeout=120, approve=lambda *_: True)
    results: list = []
    runner = threading.Thread(target=lambda: results.append(app.run("start something long")), daemon=True)
    runner.start()
    try:
        pid = _wait_for_pid(ws / "child.pid")
        recorder.threads = {threading.get_ident(), runner.ident or 0}
        recorder.armed = True
        assert app.cancel() == 1
        runner.join(60)  # a hang check only: an hour-long wait on the path shows as a run that never returned
        recorder.armed = False
        assert not runner.is_alive(), "the cancelled run did not return"
    finally:
        recorder.armed = False
        app.cancel()
        runner.join(60)
        app.close()
    assert results and results[0].stopped_by == "cancelled"
    assert wait_gone(pid), "the grandchild the tool started still runs"
    return results[0], pid, recorder


@pytest.mark.parametrize("tool, tool_input", [("python", PYTHON_CODE), ("terminal", SHELL_COMMAND)])
def test_cancel_returns_with_the_poll_and_grace_intervals_an_hour_long(tmp_path, monkeypatch, tool, tool_input):
    for owner, name in ((sandbox, "_POLL_S"), (sandbox, "_DRAIN_GRACE_S"),
                        (python_process, "_EXIT_GRACE_S"), (python_process, "_DRAIN_S")):
        monkeypatch.setattr(owner, name, HOUR)
    result, _, recorder = _cancel_running_call(tmp_path, monkeypatch, tool, tool_input)
    assert "cancelled" in result.steps[0].observation
    assert recorder.sleeps == [], "something slept on the way from cancel() to the run's return"


@pytest.mark.parametrize("tool, tool_input", [("python", PYTHON_CODE), ("terminal", SHELL_COMMAND)])
def test_cancel_kills_the_tree_without_reading_the_whole_process_table(tmp_path, monkeypatch, tool, tool_input):
    _, _, recorder = _cancel_running_call(tmp_path, monkeypatch, tool, tool_input)
    assert recorder.table_reads == [], "the cancel path listed every process of the machine"


def test_a_terminal_call_cancelled_before_its_process_started_kills_it_as_it_starts(tmp_path):
    call = terminal._Call()
    call.kill()  # the run's cancel hook fired while the command was being started
    proc = spawn_limited([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path,
                         env=scrubbed_env(), cpu_seconds=120)
    try:
        call.started(proc)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_wait_exit_wakes_when_the_process_ends_without_sleeping(tmp_path, monkeypatch):
    recorder = _Recorder(monkeypatch)
    proc = spawn_limited([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path,
                         env=scrubbed_env(), cpu_seconds=120)
    pidfd = exit_fd(proc)
    assert pidfd is not None
    codes: list[int] = []

    def wait() -> None:
        recorder.threads.add(threading.get_ident())
        codes.append(wait_exit(proc, HOUR, pidfd))

    waiter = threading.Thread(target=wait, daemon=True)
    try:
        recorder.armed = True
        waiter.start()
        proc.kill()
        waiter.join(60)
        recorder.armed = False
        assert not waiter.is_alive(), "wait_exit did not return when the process ended"
        assert codes == [-signal.SIGKILL]
        assert recorder.sleeps == []
    finally:
        os.close(pidfd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_temporary_folder_of_a_cancelled_worker_is_still_removed(tmp_path, monkeypatch):
    code = "import os\nopen('tmpdir.txt', 'w').write(os.environ['TMPDIR'])\n" + PYTHON_CODE
    _cancel_running_call(tmp_path, monkeypatch, "python", code)
    folder = Path((tmp_path / "ws" / "tmpdir.txt").read_text())
    assert folder.name.startswith("tool-hub-python-")
    assert wait_until(lambda: not folder.exists()), "the cancelled worker's temporary folder was left behind"
