"""The parent's side of one ``python_worker.py`` process: start it under limits, send code, collect output.

:class:`Worker` talks to the worker over three pipes (requests, replies, the
merged stdout and stderr) with a selector loop, so nothing polls: a reply, the
end of output, the end of the process (a pidfd) or a kill from another thread
(a cancelled run) each wake it. Each call's result is an :class:`Outcome`.
The ``python`` tool (``tools.builtin.python_tool``) keeps one worker per session.
"""

from __future__ import annotations

import atexit
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .python_worker import EXIT_PROTOCOL_LOST, decode_frame, encode_frame
from .sandbox import (
    OutputCollector,
    exit_fd,
    kill_child_tree,
    kill_strays,
    read_into,
    scrubbed_env,
    spawn_limited,
    wait_exit,
    write_some,
)

__all__ = ["Worker", "Outcome", "WORKER_SCRIPT", "CHILD_ENV"]

WORKER_SCRIPT = str(Path(__file__).resolve().with_name("python_worker.py"))
_MAX_REPLY = 1 << 20
_DRAIN_S = 0.2  # after a reply or a kill: how long to collect output still in the pipe
_EXIT_GRACE_S = 1.0  # the reply pipe closed: how long to wait for the process to end before calling it a hang-up

# Set in the child on top of the scrubbed environment: keep numeric libraries
# from reserving per-core threads and arenas that the address-space limit would
# refuse, and keep plotting off screen.
CHILD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
    "MPLBACKEND": "Agg",
}


@dataclass(frozen=True)
class Outcome:
    output: str
    status: str  # ok | error | exit | timeout | died | broken | hangup | reset | cancelled
    code: int | None = None  # exit status of sys.exit
    returncode: int | None = None  # of the process, when it died
    strays: int = 0  # processes the call left running that were stopped when it ended


class Worker:
    """The parent's side of one ``python_worker.py`` process."""

    def __init__(self, proc: subprocess.Popen, req_w: int, resp_r: int, out_r: int, tmpdir: str):
        self.proc, self.req_w, self.resp_r, self.out_r, self.tmpdir = proc, req_w, resp_r, out_r, tmpdir
        self.exit_fd = exit_fd(proc)  # readable once the process has ended: waits for it wake, never poll
        self._closed = False
        self.on_close: Callable[[], None] | None = None  # called once, when the process has ended

    @classmethod
    def start(cls, workspace: Path, max_memory_mb: int, cpu_seconds: float, max_file_mb: int = 0) -> "Worker":
        tmpdir = tempfile.mkdtemp(prefix="tool-hub-python-")
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            proc = spawn_limited([sys.executable, "-I", WORKER_SCRIPT, str(req_r), str(resp_w)], cwd=workspace,
                                 env=scrubbed_env(CHILD_ENV, home=workspace, tmpdir=tmpdir),
                                 cpu_seconds=cpu_seconds, max_memory_mb=max_memory_mb, supervise=True,
                                 max_file_mb=max_file_mb,
                                 stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, pass_fds=(req_r, resp_w))
        except BaseException:
            _close_fds(req_w, resp_r, out_r)
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise
        finally:
            _close_fds(req_r, resp_w, out_w)  # the child's ends
        for fd in (req_w, resp_r, out_r):
            os.set_blocking(fd, False)
        return cls(proc, req_w, resp_r, out_r, tmpdir)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return not self._closed and self.proc.poll() is None

    def execute(self, code: str, timeout: float, max_output_chars: int, keep_background: bool = False) -> Outcome:
        collector = OutputCollector(max_output_chars)
        request = memoryview(encode_frame({"code": code}))
        reply = self._exchange(request, collector, time.monotonic() + timeout)
        if isinstance(reply, dict):
            strays = 0 if keep_background else self._stop_strays(reply)
            self._drain(collector, time.monotonic() + _DRAIN_S, stop_when_empty=True)
            output, _ = collector.result()
            return Outcome(output, str(reply.get("status")), reply.get("code"), strays=strays)
        if reply == "died" and (not self._exits_soon() or self.proc.returncode == EXIT_PROTOCOL_LOST):
            reply = "hangup"  # the reply pipe closed while the process lived on: the code closed it
        kill_child_tree(self.proc)
        returncode = self.proc.wait()
        self._drain(collector, time.monotonic() + _DRAIN_S, stop_when_empty=False)
        output, _ = collector.result()
        return Outcome(output, reply, returncode=returncode)

    def _stop_strays(self, reply: dict) -> int:
        """Kill what the call left running below the supervisor (children it did not wait for, double-forked
        daemons, ``setsid`` ones), all but the worker and its keeper; how many were killed."""
        pid, keeper = reply.get("pid"), reply.get("keeper")
        if not (isinstance(pid, int) and pid > 1 and isinstance(keeper, int) and keeper > 1):
            return 0
        return kill_strays(self.proc.pid, {pid, keeper})

    def _exits_soon(self) -> bool:
        """After end of file on the reply pipe: did the process end (its pipes close just before it does)?"""
        try:
            wait_exit(self.proc, _EXIT_GRACE_S, self.exit_fd)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _exchange(self, pending: memoryview | None, collector: OutputCollector, deadline: float) -> dict | str:
        """Send the request, collect output; the reply, or "timeout" / "died" / "broken"."""
        reply = bytearray()
        with selectors.DefaultSelector() as sel:
            sel.register(self.out_r, selectors.EVENT_READ, "out")
            sel.register(self.resp_r, selectors.EVENT_READ, "resp")
            sel.register(self.req_w, selectors.EVENT_WRITE, "req")
            while (remaining := deadline - time.monotonic()) > 0:
                for key, _ in sel.select(remaining):
                    if key.data == "out":
                        if not read_into(key.fd, collector):
                            sel.unregister(key.fd)
                    elif key.data == "req":
                        pending = write_some(key.fd, pending)
                        if not pending:
                            sel.unregister(key.fd)
                    else:
                        result = _read_reply(key.fd, reply)
                        if result is not None:
                            return result
        return "timeout"

    def _drain(self, collector: OutputCollector, until: float, *, stop_when_empty: bool) -> None:
        """Collect output still in the pipe: what is there now, or until end of file."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.out_r, selectors.EVENT_READ)
            while (remaining := until - time.monotonic()) > 0:
                if not sel.select(0 if stop_when_empty else remaining):
                    if stop_when_empty:
                        return
                    continue
                if not read_into(self.out_r, collector):
                    return

    def terminate(self) -> None:
        """Kill the process tree now (safe from any thread); ``close`` cleans up."""
        if not self._closed:
            kill_child_tree(self.proc)

    def close(self, *, later: bool = False) -> None:
        """End the process tree and free what the worker held; ``later``: its temporary folder is
        removed in the background (a cancel does not wait for a busy disk)."""
        if self._closed:
            return
        kill_child_tree(self.proc)
        try:
            wait_exit(self.proc, 5, self.exit_fd)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass
        self._closed = True
        _close_fds(self.req_w, self.resp_r, self.out_r, *(() if self.exit_fd is None else (self.exit_fd,)))
        if later:
            _remove_later(self.tmpdir)
        else:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        if self.on_close is not None:
            self.on_close()


def _read_reply(fd: int, buffer: bytearray) -> dict | str | None:
    """Add what is readable to ``buffer``; the reply when complete, "died" at EOF, "broken" if garbled."""
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:
        return "died"
    if not chunk:
        return "died"
    buffer += chunk
    try:
        message = decode_frame(buffer, _MAX_REPLY)
    except ValueError:
        return "broken"
    if message is None:
        return None
    return message if isinstance(message, dict) and "status" in message else "broken"


_pending_folders: set[str] = set()  # removed in the background; what is left at exit is removed then
_pending_lock = threading.Lock()


def _remove_later(folder: str) -> None:
    with _pending_lock:
        _pending_folders.add(folder)

    def remove() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        with _pending_lock:
            _pending_folders.discard(folder)

    threading.Thread(target=remove, name="tool-hub-python-cleanup", daemon=True).start()


@atexit.register
def _remove_pending_folders() -> None:
    with _pending_lock:
        folders = list(_pending_folders)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _close_fds(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
