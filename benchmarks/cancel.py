"""How fast ``app.cancel()`` stops a question, beside killing the same process tree by hand, under load.

Each library round starts a question (``app.run``, a ``ScriptedLLM``) whose tool
call (``python`` or ``terminal``) starts a grandchild process that would run for
a minute, waits until the grandchild is running, then calls ``app.cancel()``
from another thread and measures:

* ``return``: from ``cancel()`` to ``app.run`` returning ``stopped_by="cancelled"``;
* ``gone``: from ``cancel()`` until the grandchild has ended (woken by its pidfd
  on Linux, else polled every millisecond);
* ``cpu``: CPU time of this whole process (all threads) from ``cancel()`` to ``return``.

The peer does the same work without the library: ``subprocess.Popen`` of the
same program (the python code, or the shell line) in its own process group,
then ``os.killpg(SIGKILL)`` + ``wait`` (the floor: what a kill of the tree costs
on this machine); ``return`` is when ``wait`` returns. Library and peer rounds
are interleaved (python, peer, terminal, peer, ...).

``--load N`` keeps N busy-loop processes running while measuring (CPU
contention), ``--procs M`` M idle processes (a large process table, as during a
parallel build). A round fails when the run does not end ``cancelled``, the
grandchild is still alive 30 s after the cancel, or anything raises; the script
prints the count and exits 1 when there is any.

    python benchmarks/cancel.py [--rounds 20] [--load 4] [--procs 0]
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM

PYTHON_CODE = ("import subprocess, sys, time\n"
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
               "open('child.pid', 'w').write(str(child.pid))\n"
               "time.sleep(60)\n")
SHELL = "sleep 60 & echo $! > child.pid; sleep 60"
GONE_WITHIN_S = 30.0

Sample = tuple[float, float, float]  # return, gone, cpu (seconds)


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


def gone_watch(pid: int) -> Callable[[], float | None]:
    """Open a watch on ``pid`` now; the returned function blocks until it has ended and returns when
    (None: still alive after GONE_WITHIN_S). A pidfd wait sleeps in the kernel (it takes no CPU or GIL
    from the threads being measured); without one, poll every millisecond."""
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None

    def wait() -> float | None:
        deadline = time.monotonic() + GONE_WITHIN_S
        try:
            if pidfd is not None:  # readable once the process has ended
                if select.select([pidfd], [], [], GONE_WITHIN_S)[0]:
                    return time.monotonic()
                return None
            while alive(pid):
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.001)
            return time.monotonic()
        finally:
            if pidfd is not None:
                os.close(pidfd)

    return wait


def library_round(tool: str, folder: Path) -> Sample:
    ws = folder / "ws"
    pid_file = ws / "child.pid"
    pid_file.unlink(missing_ok=True)
    action = ("```\n" + PYTHON_CODE + "\n```") if tool == "python" else SHELL
    llm = ScriptedLLM([f"Thought: Do I need to use a tool? Yes\nAction: {tool}\nAction Input: {action}", "AI: no"])
    app = AppFactory().create_app(tools_list=[tool], llm=llm, no_default=True, workspace_dir=str(ws),
                                  python_timeout=120, terminal_timeout=120, approve=lambda *_: True)
    times: dict[str, float | None] = {}
    failure: list[BaseException] = []

    def cancel_when_started() -> None:
        try:
            pid = wait_for_pid(pid_file)
            watch = gone_watch(pid)
            times["cpu"] = time.process_time()
            times["cancel"] = time.monotonic()
            app.cancel()
            times["gone"] = watch()
            if times["gone"] is None:
                os.kill(pid, signal.SIGKILL)
        except BaseException as exc:  # noqa: BLE001 - counted as a failed round
            failure.append(exc)
            app.cancel()

    helper = threading.Thread(target=cancel_when_started)
    helper.start()
    try:
        result = app.run("start something long")
        returned, cpu = time.monotonic(), time.process_time()
    finally:
        helper.join()
        app.close()
    if failure:
        raise failure[0]
    if result.stopped_by != "cancelled":
        raise RuntimeError(f"the run ended {result.stopped_by!r}, not cancelled")
    if times["gone"] is None:
        raise RuntimeError(f"the grandchild was alive {GONE_WITHIN_S:g} s after the cancel")
    start = times["cancel"]
    assert start is not None and times["cpu"] is not None
    return returned - start, times["gone"] - start, cpu - times["cpu"]


def peer_round(tool: str, folder: Path) -> Sample:
    pid_file = folder / "child.pid"
    pid_file.unlink(missing_ok=True)
    argv = [sys.executable, "-c", PYTHON_CODE] if tool == "python" else ["/bin/sh", "-c", SHELL]
    proc = subprocess.Popen(argv, cwd=folder, start_new_session=True)
    try:
        pid = wait_for_pid(pid_file)
        watch = gone_watch(pid)
        cpu = time.process_time()
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        returned, cpu = time.monotonic(), time.process_time() - cpu
        gone = watch()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if gone is None:
        raise RuntimeError(f"the grandchild was alive {GONE_WITHIN_S:g} s after killpg")
    return returned - start, gone - start, cpu


def start_load(busy: int, idle: int) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(busy)]
    procs += [subprocess.Popen(["sleep", "3600"], start_new_session=True) for _ in range(idle)]
    return procs


def stop_load(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def show(label: str, samples: list[Sample]) -> None:
    if not samples:
        print(f"{label:<26} no successful round")
        return
    ret = [r * 1000 for r, _, _ in samples]
    gone = [g * 1000 for _, g, _ in samples]
    cpu = [c * 1000 for _, _, c in samples]
    over = sum(1 for r in ret if r > 1000)
    print(f"{label:<26} {statistics.median(ret):7.1f} {pct(ret, 0.9):7.1f} {max(ret):7.1f}   "
          f"{statistics.median(gone):7.1f} {pct(gone, 0.9):7.1f} {max(gone):7.1f}   "
          f"{statistics.median(cpu):6.1f} {max(cpu):6.1f}   {over}/{len(ret)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--load", type=int, default=0, help="busy-loop processes running while measuring")
    parser.add_argument("--procs", type=int, default=0, help="idle processes running while measuring")
    args = parser.parse_args(argv)
    sides = [("app.cancel() python", library_round, "python"), ("peer: killpg python tree", peer_round, "python"),
             ("app.cancel() terminal", library_round, "terminal"), ("peer: killpg shell tree", peer_round, "shell")]
    samples: dict[str, list[Sample]] = {label: [] for label, _, _ in sides}
    errors: list[str] = []
    load = start_load(args.load, args.procs)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            print(f"{args.rounds} rounds per side, interleaved; load: {args.load} busy + {args.procs} idle "
                  f"processes; {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
            for _ in range(args.rounds):
                for label, run_round, tool in sides:
                    try:
                        samples[label].append(run_round(tool, folder))
                    except Exception as exc:  # noqa: BLE001 - counted, the script exits 1
                        errors.append(f"{label}: {type(exc).__name__}: {exc}")
    finally:
        stop_load(load)
    print(f"{'':<26} {'return ms p50 / p90 / max':^25}   {'gone ms p50 / p90 / max':^25}   "
          f"{'cpu ms p50/max':^13}   >1 s")
    for label, _, _ in sides:
        show(label, samples[label])
    print(f"failed rounds: {len(errors)}")
    for line in errors:
        print("  " + line)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
