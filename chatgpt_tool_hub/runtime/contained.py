"""Parse or decode untrusted bytes in a child process that can be killed, under limits.

:func:`run_contained` calls a top-level function (``"package.module:function"``)
in a fresh Python child (``python -I``, started by the sandbox's launcher, see
:func:`~chatgpt_tool_hub.runtime.sandbox.spawn_limited`): a scrubbed
environment (no keys, no tokens), a private temporary folder, an address-space
limit (``RLIMIT_AS``), a CPU-time limit (``RLIMIT_CPU``) and a wall-clock
limit. The payload goes to the child and the result comes back pickled over
pipes. Whatever happens -- the wall limit passes, the CPU or memory limit is
hit, the caller's :class:`Cancellation` (or a run's budget, through its
``on_cancel`` hook) fires -- the whole process tree is killed, and
:class:`ContainedError` says which limit stopped the work and which setting
raises it. Documents (``read-document``, ``document-qa``), images and audio
handed to an app or sent to the server go through here: a PDF that takes hours
or a PNG that decodes to gigabytes costs one killable child, never the
application's own process or its threads.

The reply is read by an unpickler that builds only the types the caller names
(``result_types``), plain built-in values, and the package's own errors: a
child that went wrong cannot make the parent build anything else.

The child imports only the target's module and what it imports (see
:mod:`.contained_child`); its start costs about the interpreter's start plus
those imports (the parser library's import dominates).
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..errors import ToolExecutionError
from .sandbox import describe_signal, kill_child_tree, scrubbed_env, spawn_limited, write_some

__all__ = ["run_contained", "Cancellation", "ContainedError", "CHILD"]

CHILD = str(Path(__file__).with_name("contained_child.py"))
_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds the chatgpt_tool_hub package
_POSIX = os.name == "posix"
_POLL_S = 0.1  # how often the exchange looks at the clock and the cancel flag when the pipes are quiet
_CHUNK = 1 << 16
_STDERR_TAIL = 4000
_PLAIN = {("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"), ("builtins", "complex"),
          ("builtins", "slice"), ("builtins", "range")}


class ContainedError(ToolExecutionError):
    """Work in a contained child was stopped. ``limit`` says why: ``"wall"``, ``"cpu"``, ``"memory"``,
    ``"cancelled"``, ``"result"`` (too large a reply) or ``"crashed"``; ``setting`` names what raises it."""

    def __init__(self, message: str, *, limit: str = "crashed", setting: str | None = None):
        super().__init__(message)
        self.limit = limit
        self.setting = setting


class Cancellation:
    """A cancel signal for work that runs in other threads and processes: thread-safe and one-way.

    ``register(callback)`` runs ``callback()`` when :meth:`cancel` is called
    (at once when it was already) and returns a function that removes it;
    ``on_cancel`` is the same, under the name a run's budget uses, so either
    can be handed to :func:`run_contained`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._hooks: dict[object, Callable[[], Any]] = {}

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> bool:
        """Cancel; runs the callbacks from this thread. False when it was cancelled already."""
        with self._lock:
            if self._event.is_set():
                return False
            self._event.set()
            hooks, self._hooks = list(self._hooks.values()), {}
        for hook in hooks:
            try:
                hook()
            except Exception:  # one failing callback must not keep the others from running
                pass
        return True

    def register(self, callback: Callable[[], Any]) -> Callable[[], None]:
        key = object()
        with self._lock:
            if not self._event.is_set():
                self._hooks[key] = callback
                return lambda: self._hooks.pop(key, None) and None
        callback()
        return lambda: None

    on_cancel = register

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout`` passed; whether it was cancelled."""
        return self._event.wait(timeout)


def run_contained(target: str, payload: Any, *, wall_s: float, cpu_s: float | None = None,
                  memory_mb: int | None = None, cancel: Any = None, what: str = "the parser",
                  settings: Mapping[str, str] | None = None, result_types: Iterable[type] = (),
                  max_result_bytes: int = 512_000_000, sys_path: Iterable[str] = ()) -> Any:
    """``function(payload)`` of ``target`` (``"package.module:function"``) in a killable child; its result.

    Args:
        target: a top-level function of an importable module; it gets the
            payload and returns the result (both picklable).
        wall_s: wall-clock seconds before the child's tree is killed.
        cpu_s: ``RLIMIT_CPU`` seconds (default: ``wall_s + 1``).
        memory_mb: ``RLIMIT_AS`` in MiB; ``None`` or ``<= 0`` for none.
        cancel: a :class:`Cancellation`, a run's budget (``on_cancel``), or None.
        what: how messages name the work (``"parsing 'report.pdf'"``).
        settings: the setting that raises each limit, by ``"wall"`` and
            ``"memory"``, for the messages (``{"wall": "read_document_timeout"}``).
        result_types: the classes the result may hold besides plain values.
        max_result_bytes: the largest reply taken.
        sys_path: more folders the child imports from (the package's own is always there).

    Raises :class:`ContainedError` when a limit stopped the child or it
    crashed; re-raises the package's own errors the function raised
    (``ToolInputError`` ...); any other exception of the function becomes a
    :class:`~chatgpt_tool_hub.errors.ToolExecutionError` with its type and message.
    """
    module, _, function = target.partition(":")
    if not module or not function:
        raise ValueError(f"run_contained needs 'package.module:function', not {target!r}")
    names = dict(settings or {})
    if _is_cancelled(cancel):
        raise _stopped("cancelled", what, wall_s, memory_mb, names)
    cpu_s = wall_s + 1 if cpu_s is None else cpu_s
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    roots = os.pathsep.join([_ROOT, *map(str, sys_path)])
    folder = tempfile.mkdtemp(prefix="tool-hub-contained-")
    try:
        kind, reply, errors, code = _exchange([sys.executable, "-I", CHILD, roots, module, function], data, folder,
                                              wall_s, cpu_s, memory_mb, cancel, max_result_bytes)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if kind == "done" and not reply:  # ended without a word: a signal (the CPU limit), or a crash
        kind = "cpu" if describe_signal(code) in ("SIGXCPU", "SIGKILL") else "crashed"
    if kind != "done":
        raise _stopped(kind, what, wall_s, memory_mb, names, errors, code, cpu_s)
    return _unpack(reply, result_types, what, wall_s, memory_mb, names)


# ---- the exchange --------------------------------------------------------------------------------


class _Child:
    """The child process and its cancel flag; ``stop()`` and ``on_cancel()`` may be called from any thread."""

    def __init__(self, argv: list[str], folder: str, cpu_s: float, memory_mb: int | None):
        env = scrubbed_env(home=folder, tmpdir=folder)
        pipe = subprocess.PIPE
        if _POSIX:
            self.proc = spawn_limited(argv, cwd=folder, env=env, cpu_seconds=cpu_s, max_memory_mb=memory_mb,
                                      supervise=True, stdin=pipe, stdout=pipe, stderr=pipe)
        else:  # no rlimits on Windows: the wall limit and the kill remain
            self.proc = subprocess.Popen(argv, cwd=folder, env=env, stdin=pipe, stdout=pipe, stderr=pipe)
        self.cancelled = threading.Event()

    def stop(self) -> None:
        if _POSIX:
            kill_child_tree(self.proc)
        else:
            try:
                self.proc.kill()
            except OSError:
                pass

    def on_cancel(self) -> None:
        self.cancelled.set()
        self.stop()


def _exchange(argv: list[str], data: bytes, folder: str, wall_s: float, cpu_s: float, memory_mb: int | None,
              cancel: Any, max_result_bytes: int) -> tuple[str, bytes, str, int | None]:
    """Run the child to its end: ``(how it ended, its stdout, the tail of its stderr, its exit status)``;
    "done" when it exited by itself, else the limit that stopped it ("wall", "cancelled", "result")."""
    deadline = time.monotonic() + wall_s
    try:
        child = _Child(argv, folder, cpu_s, memory_mb)
    except OSError as exc:
        raise ToolExecutionError(f"could not start a process to parse in: {exc}") from None
    remove = _register(cancel, child.on_cancel)
    try:
        if not _POSIX:
            return _exchange_windows(child, data, deadline)
        return _exchange_posix(child, data, deadline, max_result_bytes)
    finally:
        if remove is not None:
            remove()
        child.stop()
        child.proc.wait()
        for stream in (child.proc.stdin, child.proc.stdout, child.proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


def _exchange_posix(child: _Child, data: bytes, deadline: float,
                    max_result_bytes: int) -> tuple[str, bytes, str, int | None]:
    import selectors

    proc = child.proc
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    pending: memoryview | None = memoryview(data)
    with selectors.DefaultSelector() as sel:
        for stream, event, name in ((proc.stdout, selectors.EVENT_READ, "out"), (proc.stderr, selectors.EVENT_READ,
                                    "err"), (proc.stdin, selectors.EVENT_WRITE, "in")):
            os.set_blocking(stream.fileno(), False)
            sel.register(stream.fileno(), event, name)
        while sel.get_map():
            if child.cancelled.is_set():
                return "cancelled", b"", "", None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "wall", b"", bytes(err).decode("utf-8", "replace"), None
            for key, _ in sel.select(min(remaining, _POLL_S)):
                if key.data == "in":
                    pending = write_some(key.fd, pending)
                    if pending is None:
                        sel.unregister(key.fd)
                        proc.stdin.close()
                    continue
                chunk = _read(key.fd)
                if chunk is None:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                elif key.data == "out":
                    out += chunk
                    if len(out) > max_result_bytes:
                        return "result", b"", "", None
                else:
                    err = (err + chunk)[-_STDERR_TAIL:]
    while proc.poll() is None:  # the pipes closed: the child is ending
        if child.cancelled.is_set():
            return "cancelled", b"", "", None
        if time.monotonic() >= deadline:
            return "wall", b"", bytes(err).decode("utf-8", "replace"), None
        time.sleep(0.005)
    kind = "cancelled" if child.cancelled.is_set() else "done"
    return kind, bytes(out), bytes(err).decode("utf-8", "replace"), proc.returncode


def _exchange_windows(child: _Child, data: bytes, deadline: float) -> tuple[str, bytes, str, int | None]:
    try:
        out, err = child.proc.communicate(data, timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return "wall", b"", "", None
    kind = "cancelled" if child.cancelled.is_set() else "done"
    return kind, out or b"", (err or b"")[-_STDERR_TAIL:].decode("utf-8", "replace"), child.proc.returncode


def _read(fd: int) -> bytes | None:
    """What the pipe holds; b"" at its end, None when nothing is there yet."""
    try:
        return os.read(fd, _CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _register(cancel: Any, callback: Callable[[], None]) -> Callable[[], None] | None:
    hook = getattr(cancel, "register", None) or getattr(cancel, "on_cancel", None)
    return hook(callback) if callable(hook) else None


def _is_cancelled(cancel: Any) -> bool:
    return bool(getattr(cancel, "cancelled", False))


# ---- the reply -------------------------------------------------------------------------------------


class _Unpickler(pickle.Unpickler):
    """Builds plain values, the package's errors and the ``allowed`` classes; nothing else."""

    def __init__(self, data: bytes, allowed: set[tuple[str, str]]):
        super().__init__(io.BytesIO(data))
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.allowed or (module, name) in _PLAIN:
            return super().find_class(module, name)
        if module == "chatgpt_tool_hub.errors":
            found = super().find_class(module, name)
            if isinstance(found, type) and issubclass(found, Exception):
                return found
        raise pickle.UnpicklingError(f"the reply holds a {module}.{name}, which is not expected")


def _unpack(reply: bytes, result_types: Iterable[type], what: str, wall_s: float, memory_mb: int | None,
            names: Mapping[str, str]) -> Any:
    allowed = {(cls.__module__, cls.__qualname__) for cls in result_types}
    try:
        message = _Unpickler(reply, allowed).load()
        kind = message[0]
    except Exception as exc:
        raise ContainedError(f"{what} ended without a usable reply ({type(exc).__name__}: {str(exc)[:200]})",
                             limit="crashed") from None
    if kind == "ok":
        return message[1]
    if kind == "memory":
        raise _stopped("memory", what, wall_s, memory_mb, names)
    _, error, type_name, text = message
    if isinstance(error, Exception):
        raise error
    raise ToolExecutionError(f"{what} failed ({type_name}: {text[:300]})")


def _stopped(kind: str, what: str, wall_s: float, memory_mb: int | None, names: Mapping[str, str],
             errors: str = "", code: int | None = None, cpu_s: float | None = None) -> ContainedError:
    """The error for a child that a limit (or a cancel) stopped, or that ended without a reply."""
    wall, memory = names.get("wall"), names.get("memory")
    if kind == "cancelled":
        return ContainedError(f"{what} was stopped: the run was cancelled", limit="cancelled")
    if kind == "wall":
        return ContainedError(f"{what} took longer than {wall_s:g} s and was stopped"
                              + (f" (raise {wall} for more)" if wall else ""), limit="wall", setting=wall)
    if kind == "cpu":
        return ContainedError(f"{what} used more than {cpu_s or wall_s:g} s of CPU time and was stopped"
                              + (f" (raise {wall} for more)" if wall else ""), limit="cpu", setting=wall)
    if kind == "result":
        return ContainedError(f"{what} produced too large a result and was stopped", limit="result")
    if kind == "memory" or "MemoryError" in errors or "Cannot allocate memory" in errors:
        return ContainedError(f"{what} needed more than {memory_mb} MB of memory and was stopped"
                              + (f" (raise {memory} for more)" if memory else ""), limit="memory", setting=memory)
    return ContainedError(f"{what} ended unexpectedly{_how_it_ended(errors, code)}", limit="crashed")


def _how_it_ended(errors: str, code: int | None) -> str:
    last = errors.strip().splitlines()[-1:] if errors.strip() else []
    if last:
        return f" ({last[0][:200]})"
    signal = describe_signal(code)
    return f" ({signal})" if signal else (f" (exit status {code})" if code else "")
