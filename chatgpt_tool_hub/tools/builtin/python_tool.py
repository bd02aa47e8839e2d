"""The ``python`` tool: a persistent Python process per session, like a REPL.

Each session (``ToolContext.session_id``; ``"default"`` in pure mode) gets one
worker process (``python_worker.py``) that keeps its variables between calls.
Calls in one session run one at a time; different sessions run in parallel.
At most ``max_workers`` workers are kept (idle ones are evicted least recently
used first); ``reset(session)``, ``close()`` and interpreter exit stop them.
Several tools may share a :class:`~chatgpt_tool_hub.runtime.worker_limit.WorkerLimit`
(``python_worker_limit``: a server's cap on all its users' workers), which
stops the least recently used idle worker of any of them to make room.

Workers run under :func:`._sandbox.spawn_limited` (own process group,
``RLIMIT_AS``, a lifetime ``RLIMIT_CPU`` backstop, ``RLIMIT_FSIZE``
(``max_file_mb``: a bigger file fails with "File too large"), no core dumps, scrubbed
environment, the workspace as working directory and ``HOME``, a private
``TMPDIR``), on Linux below a supervisor that ends every process the code
started when the worker ends (``os._exit``, an rlimit, a crash), when the code
kills the worker's parent, and when the application dies. The wall timeout
kills the whole process tree with ``SIGKILL`` (the group and, on Linux,
children that left it with ``setsid``); the next call starts a fresh worker. A run that is
cancelled (``app.cancel``, a server client that went away: the run's
``RunBudget`` in ``ToolContext.budget``) kills the worker of the call in
flight the same way, at once; so does ``KeyboardInterrupt`` while the code
runs. Requests and replies are length-prefixed JSON frames on
private pipes; printed output travels on a separate pipe read with a cap, so
neither ``os.write(1, ...)`` nor a 100 MB print can corrupt the protocol or
fill the parent's memory. See docs/tools/python.md.

**Not a security boundary.** The code runs as the application's user: it can
read and write that user's files (``/proc/<parent>/environ`` included), use the
network, signal the application, leave the process tree with some effort, talk
the worker protocol itself and fork many processes. The limits stop accidents,
not a determined attacker; isolate the application (container, VM, low-privilege
account) when the model is not trusted.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import textwrap
import threading
import time
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ...runtime.python_process import CHILD_ENV, WORKER_SCRIPT, Outcome, Worker
from ...runtime.python_worker import MAX_REQUEST
from ...runtime.sandbox import (
    describe_signal,
    run_sandboxed,
    scrubbed_env,
    strip_control,
)
from ...runtime.worker_limit import WorkerLimit
from ...runtime.workspace import make_folder
from ..base import DEFAULT_CONTEXT, Tool, ToolContext

__all__ = ["PythonTool", "extract_code"]

_POSIX = os.name == "posix"
_MAX_CODE_CHARS = MAX_REQUEST // 8  # the worker refuses requests over MAX_REQUEST bytes


_LOST = "Variables and imports from earlier calls are lost; the next call starts a fresh Python process."

_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:python3?|py|python-repl|pycon)?[ \t]*\r?\n(.*?)^[ \t]*```[ \t]*$",
                    re.S | re.M | re.I)


class PythonTool(Tool):
    """Run Python code in a persistent, limited child process per session."""

    name = "python"
    egress = "code"  # its code can open sockets (see untrusted_egress_code)
    description = (
        "Run Python code for calculations, data processing and file work. Input: Python code. "
        "Variables, functions and imports persist between calls in this conversation, like a REPL; "
        "use print() to show results; the value of a last expression is shown too. "
        "Read and write files in the current working directory."
    )
    parameters = None
    needs_context = True

    def __init__(self, *, timeout: float = 30.0, max_memory_mb: int = 1024, max_output_chars: int = 8000,
                 workspace_dir: str | os.PathLike = "./workspace", max_workers: int = 8,
                 max_cpu_seconds: float | None = None, keep_background: bool = False, max_file_mb: int = 256,
                 worker_limit: WorkerLimit | None = None):
        if timeout <= 0:
            raise ConfigError("setting 'python_timeout' must be > 0 seconds", key="python_timeout")
        if max_output_chars <= 0:
            raise ConfigError("setting 'python_max_output_chars' must be > 0", key="python_max_output_chars")
        if max_workers < 1:
            raise ConfigError("setting 'python_max_workers' must be >= 1", key="python_max_workers")
        self.timeout = float(timeout)
        self.max_memory_mb = int(max_memory_mb)  # <= 0: no address-space limit
        self.max_output_chars = int(max_output_chars)
        self.max_workers = int(max_workers)
        self.keep_background = bool(keep_background)  # False: what a call starts ends with the call
        self.max_file_mb = int(max_file_mb)  # RLIMIT_FSIZE of a worker; <= 0: none
        self.worker_limit = worker_limit
        # CPU seconds over a worker's whole life: generous, the wall timeout does the real work
        self.max_cpu_seconds = float(max_cpu_seconds) if max_cpu_seconds else max(600.0, 20 * self.timeout)
        self.workspace = Path(workspace_dir).expanduser().resolve()
        make_folder(self.workspace)  # for an app: on first use
        self._pool = WorkerPool(self.max_workers)
        if worker_limit is not None:
            worker_limit.register(self._pool)
        weakref.finalize(self, self._pool.retire, None)  # also at interpreter exit

    @classmethod
    def from_context(cls, context: Any) -> "PythonTool":
        """Build from configuration kwargs; unrelated keys and empty strings are ignored."""
        settings = context.settings
        return cls(
            timeout=settings.get("python_timeout", 30.0),
            max_memory_mb=settings.get("python_max_memory_mb", 1024),
            max_output_chars=settings.get("python_max_output_chars", 8000),
            workspace_dir=context.workspace,
            max_workers=settings.get("python_max_workers", 8),
            max_cpu_seconds=settings.get("python_max_cpu_seconds", 0.0) or None,
            keep_background=settings.get("python_keep_background", False),
            max_file_mb=settings.get("max_file_mb", 256),
            worker_limit=_limit_of(settings.get("python_worker_limit")),
        )

    def run(self, tool_input: str | Mapping[str, Any] = "", context: ToolContext | None = None) -> str:
        # {"code": ..., "anything": ...} from native tool calls: take the code
        if isinstance(tool_input, Mapping) and len(tool_input) > 1:
            code = tool_input.get("code", tool_input.get("input"))
            if isinstance(code, str):
                tool_input = code
        return super().run(tool_input, context)

    def reset(self, session_id: str | None = None) -> None:
        """Stop the worker of ``session_id`` (every worker when ``None``): its variables are gone."""
        self._pool.retire(session_id)

    def close(self) -> None:
        """Stop every worker. The tool stays usable: the next call starts a fresh one."""
        self._pool.retire(None)

    def worker_pids(self) -> dict[str, int]:
        """``{session_id: pid}`` of the process that holds each running worker (for tests and diagnostics).

        On Linux that is the worker's supervisor (the worker is its grandchild);
        killing it ends the worker and every process the worker started.
        """
        return self._pool.pids()

    # ---- running ---------------------------------------------------------------------

    def _run(self, text: str, context: ToolContext = DEFAULT_CONTEXT) -> str:
        code = extract_code(text)
        if not code.strip():
            raise ToolInputError("the python tool needs Python code as its input, e.g. print(2 ** 10)")
        if len(code) > _MAX_CODE_CHARS:
            raise ToolInputError(f"the code is {len(code)} characters long; the python tool takes at most "
                                 f"{_MAX_CODE_CHARS}. Write large data to a file instead of into the code.")
        if not sys.executable:
            raise ToolExecutionError("no Python interpreter found to run the code (sys.executable is empty)")
        self.workspace.mkdir(parents=True, exist_ok=True)
        if not _POSIX:
            return self._render(self._run_once(code), None)
        session_id = str(getattr(context, "session_id", None) or "default")
        budget = getattr(context, "budget", None)
        on_cancel = getattr(budget, "on_cancel", None)
        with self._pool.session(session_id) as session:
            if getattr(budget, "cancelled", False):
                raise ToolExecutionError("the run was cancelled; the code was not run")
            remove = on_cancel(lambda: self._pool.interrupt(session)) if callable(on_cancel) else None
            try:
                outcome, note = self._execute(session, code)
            finally:
                if remove is not None:
                    remove()
        return self._render(outcome, note)

    def _execute(self, session: "_Session", code: str) -> tuple["Outcome", str | None]:
        note = None
        if session.worker is not None and not session.worker.alive():
            note = "(note: the previous Python process had ended; variables from earlier calls are gone)"
            session.discard()
        if session.worker is None:
            session.worker = self._spawn()
        if session.interrupted:  # cancelled while the worker started: it never runs the code
            session.discard()
            return Outcome("", "cancelled"), note
        try:
            outcome = session.worker.execute(code, self.timeout, self.max_output_chars, self.keep_background)
        except BaseException:  # KeyboardInterrupt while the code runs: never leave it running
            session.discard()
            raise
        if outcome.status == "died" and session.retired:
            outcome = replace(outcome, status="cancelled" if session.interrupted else "reset")
        if outcome.status in ("timeout", "died", "broken", "hangup", "reset", "cancelled"):
            session.discard(later=outcome.status == "cancelled")  # a cancelled run returns without waiting
        return outcome, note

    def _spawn(self) -> "Worker":
        limit = self.worker_limit
        if limit is not None and not limit.take():
            raise ToolExecutionError(limit.message())
        try:
            worker = Worker.start(self.workspace, self.max_memory_mb, self.max_cpu_seconds, self.max_file_mb)
        except OSError as exc:
            if limit is not None:
                limit.give()
            raise ToolExecutionError(f"could not start a Python process: {exc}") from None
        if limit is not None:
            worker.on_close = limit.give
        return worker

    def _run_once(self, code: str) -> "Outcome":
        """Without POSIX fd passing (Windows): a fresh process per call, nothing kept."""
        result = run_sandboxed([sys.executable, "-I", WORKER_SCRIPT], stdin=code, cwd=self.workspace,
                               timeout=self.timeout, max_memory_mb=self.max_memory_mb,
                               max_output_chars=self.max_output_chars, max_file_mb=self.max_file_mb,
                               env=scrubbed_env(CHILD_ENV, home=self.workspace))
        if result.timed_out:
            return Outcome(result.output, "timeout")
        if result.returncode in (0, 1):
            return Outcome(result.output, "ok")
        return Outcome(result.output, "exit", result.returncode)

    def _render(self, outcome: "Outcome", note: str | None) -> str:
        output = strip_control(outcome.output).rstrip("\n")
        problem = self._problem(outcome)
        body = "\n".join(part for part in (output if output.strip() else "", problem or "") if part)
        text = body or "(no output)"
        if "File too large" in output and self.max_file_mb > 0:
            text += (f"\n(note: a file may hold at most {self.max_file_mb} MiB here (max_file_mb); "
                     f"the write past it failed)")
        if outcome.strays:
            text += (f"\n(note: {outcome.strays} process{'es' if outcome.strays != 1 else ''} this code left running "
                     f"{'were' if outcome.strays != 1 else 'was'} stopped when it ended; "
                     f"python_keep_background=true keeps them for later calls)")
        return f"{note}\n{text}" if note else text

    def _problem(self, outcome: "Outcome") -> str | None:
        """A line saying why the call ended abnormally, or None."""
        if outcome.status == "timeout":
            return f"Error: the code ran longer than {self.timeout:g} s and was stopped (python_timeout). {_LOST}"
        if outcome.status == "reset":
            return f"Error: the session was reset (or the tool closed) while the code ran; it was stopped. {_LOST}"
        if outcome.status == "cancelled":
            return f"Error: the run was cancelled while the code ran; the code was stopped. {_LOST}"
        if outcome.status == "broken":
            return f"Error: the Python process sent a garbled reply and was stopped. {_LOST}"
        if outcome.status == "hangup":
            return (f"Error: the code closed the Python process's connection to the tool (its protocol pipes); "
                    f"the process was stopped. {_LOST}")
        if outcome.status == "exit":
            return f"(exit status {outcome.code})" if outcome.code not in (0, None) else None
        if outcome.status != "died":
            return None
        sig = describe_signal(outcome.returncode)
        if sig == "SIGXCPU":
            why = f"used up its CPU time ({self.max_cpu_seconds:g} s over its life) and was stopped"
        elif sig == "SIGKILL":
            why = (f"was killed (SIGKILL): it may have used too much memory "
                   f"(python_max_memory_mb={self.max_memory_mb}), or the code killed it or its parent process")
        elif sig:
            why = f"crashed ({sig})"
        else:
            why = f"exited (status {outcome.returncode})"
        return f"Error: the Python process {why}. {_LOST}"


# ---- one worker per session ---------------------------------------------------------


class _Session:
    __slots__ = ("key", "lock", "worker", "retired", "interrupted", "used")

    def __init__(self, key: str) -> None:
        self.key = key
        self.used = time.monotonic()  # when its last call ended
        self.lock = threading.Lock()
        self.worker: Worker | None = None
        self.retired = False  # reset or evicted: whoever holds the lock cleans up
        self.interrupted = False  # the run of the call in flight was cancelled

    def discard(self, *, later: bool = False) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.close(later=later)


class WorkerPool:
    """Sessions in least-recently-used order, each with its lock and worker."""

    def __init__(self, max_workers: int):
        self.max_workers = max_workers
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    @contextmanager
    def session(self, session_id: str) -> Iterator[_Session]:
        """The session's state, locked for the caller; evicts idle workers afterwards."""
        while True:
            with self._lock:
                session = self._sessions.get(session_id)
                if session is None:
                    session = self._sessions[session_id] = _Session(session_id)
                self._sessions.move_to_end(session_id)
            session.lock.acquire()
            if not session.retired:
                break
            session.lock.release()  # reset while we waited: take the new one
        try:
            yield session
        finally:
            self._release(session)
        self._evict()

    def _release(self, session: _Session) -> None:
        with self._lock:  # decide and release under the pool lock: a concurrent retire sees one or the other
            session.used = time.monotonic()
            retired = session.retired
            if not retired and session.worker is None:  # nothing to keep: forget the session (waiters retry)
                session.retired = True
                if self._sessions.get(session.key) is session:
                    del self._sessions[session.key]
            if not retired:
                session.lock.release()
        if retired:
            try:
                session.discard()
            finally:
                session.lock.release()

    def retire(self, session_id: str | None) -> None:
        """Stop the workers of one session (all when ``None``); busy ones end their call as 'died'."""
        with self._lock:
            if session_id is None:
                victims = list(self._sessions.values())
                self._sessions.clear()
            else:
                victims = [s for s in (self._sessions.pop(session_id, None),) if s is not None]
            free = []
            for session in victims:
                session.retired = True
                if session.lock.acquire(blocking=False):
                    free.append(session)
                elif session.worker is not None:
                    session.worker.terminate()  # its caller cleans up when the call returns
        self._discard_all(free)

    def interrupt(self, session: _Session) -> None:
        """The run whose call holds ``session`` was cancelled: kill its worker now (from any thread);
        the call ends as "cancelled" and the session starts afresh next time."""
        with self._lock:
            session.interrupted = session.retired = True
            if self._sessions.get(session.key) is session:
                del self._sessions[session.key]
            worker = session.worker
        if worker is not None:
            worker.terminate()

    def _evict(self) -> None:
        with self._lock:
            live = [(sid, s) for sid, s in self._sessions.items() if s.worker is not None]
            excess = len(live) - self.max_workers
            free = []
            for sid, session in live:  # oldest first; busy ones are skipped
                if excess <= 0:
                    break
                if session.lock.acquire(blocking=False):
                    session.retired = True
                    del self._sessions[sid]
                    free.append(session)
                    excess -= 1
        self._discard_all(free)

    def oldest_idle(self) -> float | None:
        """When the least recently used idle worker was last used; None when no worker is idle."""
        with self._lock:
            idle = [s.used for s in self._sessions.values() if s.worker is not None and not s.lock.locked()]
        return min(idle, default=None)

    def stop_oldest_idle(self) -> bool:
        """Stop the least recently used idle worker (a shared :class:`WorkerLimit` needs room)."""
        with self._lock:
            idle = sorted((s.used, sid) for sid, s in self._sessions.items() if s.worker is not None)
            chosen = None
            for _, sid in idle:
                session = self._sessions[sid]
                if session.lock.acquire(blocking=False):
                    session.retired = True
                    del self._sessions[sid]
                    chosen = session
                    break
        if chosen is None:
            return False
        self._discard_all([chosen])
        return True

    @staticmethod
    def _discard_all(sessions: list[_Session]) -> None:
        for session in sessions:
            try:
                session.discard()
            finally:
                session.lock.release()

    def pids(self) -> dict[str, int]:
        with self._lock:
            return {sid: s.worker.pid for sid, s in self._sessions.items() if s.worker is not None and s.worker.alive()}


# ---- input clean-up --------------------------------------------------------------------


def _limit_of(value: Any) -> WorkerLimit | None:
    """``python_worker_limit``: a :class:`WorkerLimit` object (a server passes one to all its apps)."""
    if value is None or isinstance(value, WorkerLimit):
        return value
    raise ConfigError("setting 'python_worker_limit' must be a WorkerLimit object (tool-hub serve passes one)",
                      key="python_worker_limit")


def extract_code(text: str) -> str:
    """The Python code in ``text``: without Markdown fences or wrapping backticks, dedented."""
    code = text.strip("\r\n")
    stripped = code.strip()
    if stripped.startswith("```"):
        body = stripped[3:]
        first, _, rest = body.partition("\n")
        if re.fullmatch(r"[ \t]*(?:python3?|py|python-repl|pycon)?[ \t]*", first, re.I):
            body = rest  # else: ```print(1)``` on one line
        code = re.sub(r"\n?[ \t]*```[ \t]*$", "", body)
    elif len(stripped) > 1 and stripped[0] == stripped[-1] == "`" and "\n" not in stripped:
        code = stripped.strip("`")
    elif "```" in code and not _parses(code):  # prose around a fenced block
        blocks = _FENCE.findall(code)
        if blocks:
            code = "\n".join(blocks)
    if not _parses(code):
        dedented = textwrap.dedent(code)
        if dedented != code and _parses(dedented):
            code = dedented
    return code


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except Exception:  # SyntaxError, ValueError (null bytes), MemoryError, RecursionError
        return False
    return True
