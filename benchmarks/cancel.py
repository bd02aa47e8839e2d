"""How fast ``app.cancel()`` stops a question, beside killing the same process tree by hand.

Each round starts a question whose tool call (``python`` or ``terminal``) starts
a grandchild process that would run for a minute, waits until the grandchild is
running, then calls ``app.cancel()`` and measures:

* ``return``: from ``cancel()`` to ``app.run`` returning ``stopped_by="cancelled"``;
* ``gone``: from ``cancel()`` until the grandchild no longer exists.

The peer does the same work without the library: ``subprocess.Popen`` of the
same shell command in its own process group, then ``os.killpg`` + ``wait``
(the floor: what a kill of the tree costs on this machine).

    python benchmarks/cancel.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM

PYTHON_CODE = ("import subprocess, sys, time\n"
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
               "open('child.pid', 'w').write(str(child.pid))\n"
               "time.sleep(60)\n")
SHELL = "sleep 60 & echo $! > child.pid; sleep 60"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def wait_for_pid(path: Path, seconds: float = 30.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.005)
    raise RuntimeError(f"{path} never appeared")


def wait_gone(pid: int, seconds: float = 30.0) -> float:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    return time.monotonic()


def one_round(tool: str, folder: Path) -> tuple[float, float]:
    ws = folder / "ws"
    pid_file = ws / "child.pid"
    pid_file.unlink(missing_ok=True)
    action = ("```\n" + PYTHON_CODE + "\n```") if tool == "python" else SHELL
    llm = ScriptedLLM([f"Thought: Do I need to use a tool? Yes\nAction: {tool}\nAction Input: {action}", "AI: no"])
    app = AppFactory().create_app(tools_list=[tool], llm=llm, no_default=True, workspace_dir=str(ws),
                                  python_timeout=120, terminal_timeout=120, approve=lambda *_: True)
    times: dict[str, float] = {}

    def cancel_when_started() -> None:
        pid = wait_for_pid(pid_file)
        times["cancel"] = time.monotonic()
        app.cancel()
        times["gone"] = wait_gone(pid)

    helper = threading.Thread(target=cancel_when_started)
    helper.start()
    result = app.run("start something long")
    times["return"] = time.monotonic()
    helper.join()
    app.close()
    assert result.stopped_by == "cancelled", result.stopped_by
    return times["return"] - times["cancel"], times["gone"] - times["cancel"]


def peer_round(folder: Path) -> tuple[float, float]:
    pid_file = folder / "child.pid"
    pid_file.unlink(missing_ok=True)
    proc = subprocess.Popen(["/bin/sh", "-c", SHELL], cwd=folder, start_new_session=True)
    pid = wait_for_pid(pid_file)
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    returned = time.monotonic()
    return returned - start, wait_gone(pid) - start


def show(label: str, samples: list[tuple[float, float]]) -> None:
    ret = [r * 1000 for r, _ in samples]
    gone = [g * 1000 for _, g in samples]
    print(f"{label:<22} return p50 {statistics.median(ret):7.1f} ms  max {max(ret):7.1f} ms   "
          f"grandchild gone p50 {statistics.median(gone):7.1f} ms  max {max(gone):7.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"{args.rounds} rounds each; {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
        show("app.cancel() python", [one_round("python", folder) for _ in range(args.rounds)])
        show("app.cancel() terminal", [one_round("terminal", folder) for _ in range(args.rounds)])
        show("peer: killpg + wait", [peer_round(folder) for _ in range(args.rounds)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
