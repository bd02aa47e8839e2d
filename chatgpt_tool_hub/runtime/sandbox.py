"""Run a command in a child process with limits: the shared part of transactional tools.

:func:`run_sandboxed` starts ``argv`` in a new session (so it leads its own
process group), with a scrubbed environment, a working directory, an address
space limit (``RLIMIT_AS``), a CPU-time limit (``RLIMIT_CPU``, about the wall
timeout plus one second), optionally a file-size limit (``RLIMIT_FSIZE``), no
core dumps and, when the application runs as root, no capabilities. A wall-clock timeout kills the whole
process tree with ``SIGKILL`` (:func:`kill_tree`: the process group, and on
Linux every descendant, also those that left the group with ``setsid``), and
so does the end of the command: nothing it started in the background outlives
it, also when it kills its supervisor or the application dies. stdout and stderr are merged into one pipe and
read with a selector loop that keeps at most about ``2 * max_output_chars``
characters (head and tail) while draining and discarding the middle, so a child
that prints 100 MB costs the parent time, not memory. Input goes through stdin,
written in the same loop, so neither side can deadlock on a full pipe. The loop
wakes on events only (output, the end of the pipe, the end of the process
through a pidfd on Linux), so a kill from another thread (a cancelled run,
``on_start`` hands out the ``Popen``) ends it at once; a kill finds the tree
through the tree's own ``/proc/<pid>/task/<tid>/children`` files, not by
reading every process of the machine.
:func:`spawn_limited` starts a long-lived child under the same limits (the
``python`` tool's per-session workers); :func:`strip_control` removes ANSI
escape sequences and other control characters from output meant for an LLM.

The limits are applied by a tiny launcher (``python -I -S launcher.py ...``)
instead of a ``preexec_fn``, which is not safe when the parent has threads. On
Linux it stays as the command's supervisor, with a second process (the
keeper) as the command's parent: both are child subreapers (orphans stay in
their tree instead of moving to init) and watch each other, the supervisor
watches a pipe from this process, and whichever way the command, the keeper,
the supervisor or this process ends, what is left of the tree is killed.

**This is not a security boundary.** Process isolation with rlimits stops
accidents: runaway loops, memory bombs, floods of output, code that reads
``os.environ`` looking for keys. It does not stop a determined attacker: the
child runs as the same user, can read and write every file that user can, open
network connections, leave the process tree with some effort (stop or kill
both processes that hold the tree together, ask a daemon outside the tree to
start something: ``at``, ``systemd-run --user``) and so outlive the timeout,
signal the application itself, or fork many processes. See docs/security.md. Run the whole application in a container,
VM or dedicated low-privilege account when the code it runs is untrusted.

POSIX only for the limits. On Windows the command still runs in a separate
process with the scrubbed environment, working directory and wall timeout, but
without rlimits, process-group kill or the streaming output cap (see
:func:`_run_windows`).
"""

from __future__ import annotations

import codecs
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..textutil import strip_control
from .proctree import group_alive, group_tree, kill_group, kill_strays, kill_tree, stop_and_kill

__all__ = ["SandboxResult", "run_sandboxed", "spawn_limited", "rlimits", "kill_group", "kill_tree",
           "kill_child_tree", "kill_strays", "release", "scrubbed_env", "exit_fd", "wait_exit",
           "truncate_middle", "describe_signal", "strip_control", "OutputCollector"]

_POSIX = os.name == "posix"
_READ_CHUNK = 65536
_POLL_S = 0.1  # without pidfd_open (not Linux): how often the loop checks for a child that exited
_DRAIN_GRACE_S = 1.0  # after the child ended: how long to wait for the rest of the output

# Environment variables copied from the parent when set. Nothing else passes:
# no API keys, tokens, proxies with credentials, PYTHONPATH, LD_PRELOAD...
_ALLOWED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin" if _POSIX else ""


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed command produced.

    ``output`` is stdout and stderr merged, decoded as UTF-8 (bad bytes replaced)
    and already cut to ``max_output_chars`` (head + marker + tail) when
    ``truncated``. ``returncode`` is negative when a signal ended the process
    (``-9`` after a timeout kill). ``timed_out`` means the wall timeout fired.
    """

    output: str
    returncode: int | None
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0


def scrubbed_env(extra: Mapping[str, str] | None = None, *, home: str | os.PathLike | None = None,
                 tmpdir: str | os.PathLike | None = None) -> dict[str, str]:
    """A minimal environment for a child process: an allow-list, never secrets.

    Copies ``PATH``, ``LANG``, ``LC_ALL``, ``LC_CTYPE``, ``TZ`` and ``TERM`` from
    the parent when set; sets ``LANG=C.UTF-8`` when missing, ``PYTHONIOENCODING=utf-8``,
    ``HOME`` (``home``, e.g. the workspace) and ``TMPDIR`` (``tmpdir``, or the
    system temp dir). ``extra`` is added last and may override anything.
    """
    env = {key: os.environ[key] for key in _ALLOWED_ENV if os.environ.get(key)}
    env.setdefault("PATH", _DEFAULT_PATH or os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env["PYTHONIOENCODING"] = "utf-8"
    env["HOME"] = os.fspath(home) if home is not None else tempfile.gettempdir()
    env["TMPDIR"] = os.fspath(tmpdir) if tmpdir is not None else tempfile.gettempdir()
    if not _POSIX:  # Windows cannot start processes without these
        for key in ("SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT"):
            if os.environ.get(key):
                env[key] = os.environ[key]
        env["TEMP"] = env["TMP"] = env["TMPDIR"]
        env["USERPROFILE"] = env["HOME"]
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and tail of ``text`` when longer than ``limit`` characters.

    The result holds ``limit`` characters of the original plus a marker
    ``"\\n... [N characters omitted] ...\\n"``. ``limit <= 0`` means no limit.
    """
    if limit <= 0 or len(text) <= limit:
        return text
    head, tail = _split_limit(limit)
    return _join(text[:head], text[len(text) - tail:] if tail else "", len(text) - head - tail)


def describe_signal(returncode: int | None) -> str | None:
    """``"SIGKILL"`` for ``-9`` and so on; ``None`` when no signal ended the process."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def run_sandboxed(
    argv: Sequence[str],
    *,
    stdin: str | bytes | None = None,
    cwd: str | os.PathLike,
    timeout: float,
    max_memory_mb: int | None = None,
    max_output_chars: int = 8000,
    env: Mapping[str, str] | None = None,
    private_tmp: bool = True,
    merge_stderr: bool = True,
    max_file_mb: int | None = None,
    on_start: Callable[[subprocess.Popen], object] | None = None,
) -> SandboxResult:
    """Run ``argv`` in a limited child process and return its merged output.

    Args:
        argv: the command; ``argv[0]`` is looked up on the child's ``PATH``.
        stdin: text (sent as UTF-8) or bytes written to the child's stdin, which
            is then closed; ``None`` gives the child ``/dev/null``.
        cwd: working directory of the child.
        timeout: wall-clock seconds before the whole process group is killed.
        max_memory_mb: ``RLIMIT_AS`` in MiB; ``None`` or ``<= 0`` for no limit.
        max_output_chars: characters of output kept (head + tail); ``<= 0`` keeps all.
        env: the child's whole environment; ``None`` uses :func:`scrubbed_env`.
        private_tmp: give the child a fresh ``TMPDIR``, removed afterwards.
        merge_stderr: ``False`` sends the child's stderr to ``/dev/null``.
        max_file_mb: ``RLIMIT_FSIZE`` in MiB (largest file the child may write); ``None`` or ``<= 0``: none.
        on_start: called with the child's ``Popen`` as soon as it runs (POSIX), in this thread; another
            thread may then end it early with :func:`kill_child_tree` (a cancelled run): the loop wakes
            on the end of its output and of the process, without polling.
    """
    if not argv:
        raise ValueError("run_sandboxed needs a command")
    child_env = dict(env) if env is not None else scrubbed_env(home=cwd)
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    tmp = tempfile.mkdtemp(prefix="tool-hub-") if private_tmp else None
    if tmp:
        child_env["TMPDIR"] = tmp
        if not _POSIX:
            child_env["TEMP"] = child_env["TMP"] = tmp
    try:
        if not _POSIX:
            return _run_windows(list(argv), data, cwd, timeout, max_output_chars, child_env, merge_stderr)
        return _run_posix(list(argv), data, cwd, timeout, max_memory_mb, max_output_chars, child_env,
                          merge_stderr, max_file_mb, on_start)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# ---- POSIX ---------------------------------------------------------------------

# The first thing a sandboxed child runs: sets the limits, then becomes the
# command ("exec", a child subreaper), or stays as its supervisor and ends what
# it left behind, also when the command or the application dies ("supervise",
# Linux). See launcher.py.
_LAUNCHER = str(Path(__file__).with_name("launcher.py"))
_LINUX = sys.platform.startswith("linux")


def rlimits(cpu_seconds: float, max_memory_mb: int | None, max_file_mb: int | None = None) -> dict[str, list[int]]:
    """The limits the launcher sets: ``RLIMIT_AS``, ``RLIMIT_CPU`` (soft, hard + 1), no core, and with
    ``max_file_mb`` (> 0) ``RLIMIT_FSIZE``, so that one command cannot fill the disk with one file: a write
    past that size ends a program with ``SIGXFSZ``, or fails with ``EFBIG`` ("File too large") in one that
    ignores the signal, as Python does."""
    import math
    import resource

    limits: dict[str, list[int]] = {"RLIMIT_CORE": [0, 0]}

    def capped(name: str, soft: int, hard: int) -> None:
        # never ask for more than the parent's hard limit (that would fail)
        _, parent_hard = resource.getrlimit(getattr(resource, name))
        if parent_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, parent_hard), min(hard, parent_hard)
        limits[name] = [soft, hard]

    if max_memory_mb and max_memory_mb > 0:
        size = int(max_memory_mb) * 1024 * 1024
        capped("RLIMIT_AS", size, size)
    if max_file_mb and max_file_mb > 0:
        size = int(max_file_mb) * 1024 * 1024
        capped("RLIMIT_FSIZE", size, size)
    cpu = max(1, int(math.ceil(cpu_seconds)))  # SIGXCPU at the soft limit, SIGKILL at the hard one
    capped("RLIMIT_CPU", cpu, cpu + 1)
    return limits


def spawn_limited(argv: Sequence[str], *, cwd: str | os.PathLike, env: Mapping[str, str], cpu_seconds: float,
                  max_memory_mb: int | None = None, supervise: bool = False, max_file_mb: int | None = None,
                  **popen_kwargs) -> subprocess.Popen:
    """Start ``argv`` (POSIX) in a new session under :func:`rlimits`; the caller owns the process.

    With ``supervise`` (Linux) the returned process is a supervisor that runs
    ``argv`` below a second one (the *keeper*); both are child subreapers and
    watch each other, and the supervisor watches a pipe whose write end only
    this process holds. Whatever ends the command (it exits, an rlimit, it
    kills its parent) or this process (its exit, ``SIGKILL``,
    :func:`release`), every process the command started is killed: also
    those that left the group with ``setsid`` and double-forked daemons, which
    stay in the tree because orphans are re-parented to the keeper. The
    supervisor exits with the command's status. Without ``supervise`` (or not
    on Linux) the launcher becomes ``argv`` (a child subreaper on Linux).
    ``popen_kwargs`` go to :class:`subprocess.Popen` (``stdin``, ``stdout``,
    ``stderr``, ``pass_fds``...). End it with :func:`kill_child_tree` and
    ``wait()``.
    """
    mode = "supervise" if supervise and _LINUX else "exec"
    pass_fds = tuple(popen_kwargs.pop("pass_fds", ()))
    watch_r = watch_w = None
    if mode == "supervise":  # the supervisor sees end of file on watch_r when this process is gone
        watch_r, watch_w = os.pipe()
        pass_fds += (watch_r,)
    limits = ",".join(f"{name}={soft}:{hard}"
                      for name, (soft, hard) in rlimits(cpu_seconds, max_memory_mb, max_file_mb).items())
    launcher = [sys.executable, "-I", "-S", _LAUNCHER, mode, limits or "-", "-" if watch_r is None else str(watch_r)]
    try:
        proc = subprocess.Popen(launcher + list(argv), cwd=os.fspath(cwd), env=dict(env),
                                start_new_session=True,  # own session and process group: killpg reaches children
                                close_fds=True, pass_fds=pass_fds, **popen_kwargs)
    except BaseException:
        if watch_w is not None:
            os.close(watch_w)
        raise
    finally:
        if watch_r is not None:
            os.close(watch_r)
    if watch_w is not None:  # closed by release(), kill_child_tree(), garbage collection or exit
        proc._tool_hub_watch = weakref.finalize(proc, os.close, watch_w)  # type: ignore[attr-defined]
    proc._tool_hub_kill = threading.Lock()  # type: ignore[attr-defined]  # kill_child_tree: one at a time
    return proc


def exit_fd(proc: subprocess.Popen) -> int | None:
    """A descriptor that becomes readable when ``proc`` ends (Linux ``pidfd_open``), for a selector or
    :func:`wait_exit`; None where there is none (then :func:`wait_exit` falls back to ``Popen.wait``).
    Open it before the process can have been reaped; the caller closes it."""
    if proc.returncode is not None or not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(proc.pid)
    except OSError:  # a kernel before 5.3, or a seccomp profile that refuses it
        return None


def wait_exit(proc: subprocess.Popen, timeout: float | None, pidfd: int | None = None) -> int:
    """``proc.wait(timeout)`` that wakes when the process ends (on ``pidfd``, from :func:`exit_fd`)
    instead of sleeping and polling as ``Popen.wait`` with a timeout does; raises
    ``subprocess.TimeoutExpired`` the same way."""
    if pidfd is None or timeout is None or proc.returncode is not None:
        return proc.wait(timeout)
    import select

    if select.select([pidfd], [], [], max(0.0, timeout))[0]:
        return proc.wait()  # it has ended: reaping it does not block
    code = proc.poll()
    if code is None:
        raise subprocess.TimeoutExpired(proc.args, timeout)
    return code


def release(proc: subprocess.Popen) -> None:
    """Close this side of a supervised process's watch pipe: its supervisor kills the tree and exits.

    Safe to call more than once and from any thread; nothing for processes
    started without ``supervise``.
    """
    watch = getattr(proc, "_tool_hub_watch", None)
    if watch is not None:
        watch()


def _run_posix(argv: list[str], data: bytes | None, cwd, timeout: float, max_memory_mb: int | None,
               max_output_chars: int, env: dict[str, str], merge_stderr: bool,
               max_file_mb: int | None = None,
               on_start: Callable[[subprocess.Popen], object] | None = None) -> SandboxResult:
    import selectors

    collector = OutputCollector(max_output_chars)
    started = time.monotonic()
    proc = spawn_limited(argv, cwd=cwd, env=env, cpu_seconds=timeout + 1, max_memory_mb=max_memory_mb,
                         supervise=True, max_file_mb=max_file_mb, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL)
    pidfd = exit_fd(proc)  # the loop wakes when the process ends, also while its pipe stays open
    timed_out = False
    sel = selectors.DefaultSelector()
    try:
        if on_start is not None:
            on_start(proc)
        assert proc.stdout is not None  # stdout is a pipe
        out_fd = proc.stdout.fileno()
        os.set_blocking(out_fd, False)
        sel.register(out_fd, selectors.EVENT_READ, "out")
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        pending = memoryview(data) if data is not None else None
        if proc.stdin is not None:
            if pending:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "in")
            else:
                _close_quietly(proc.stdin)
        deadline = started + timeout
        out_open = True
        while out_open:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if proc.poll() is not None:
                break  # exited; leftovers (and children holding the pipe) are handled below
            for key, _ in sel.select(remaining if pidfd is not None else min(remaining, _POLL_S)):
                if key.data == "out":
                    if not read_into(out_fd, collector):
                        sel.unregister(out_fd)
                        out_open = False
                elif key.data == "in":
                    pending = write_some(key.fd, pending)
                    if not pending:
                        sel.unregister(key.fd)
                        _close_quietly(proc.stdin)
        if not timed_out and not out_open:
            try:  # the pipe closed: give the process the rest of the time to exit
                wait_exit(proc, max(0.0, deadline - time.monotonic()), pidfd)
            except subprocess.TimeoutExpired:
                timed_out = True
        # Kill the tree in every case: after a timeout, and to end background
        # children the command left behind (they would hold the pipe open).
        kill_child_tree(proc)
        proc.wait()
        if out_open:
            _drain(out_fd, collector, time.monotonic() + _DRAIN_GRACE_S)
    finally:
        sel.close()
        if proc.poll() is None:  # an exception above: never leave the child running
            kill_child_tree(proc)
            proc.wait()
        release(proc)
        if pidfd is not None:
            os.close(pidfd)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                _close_quietly(stream)
    output, truncated = collector.result()
    return SandboxResult(output, proc.returncode, timed_out, truncated, time.monotonic() - started)


def read_into(fd: int, collector: "OutputCollector") -> bool:
    """Read what is there; False at end of file."""
    try:
        chunk = os.read(fd, _READ_CHUNK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    if not chunk:
        return False
    collector.feed(chunk)
    return True


def write_some(fd: int, pending: memoryview | None) -> memoryview | None:
    if not pending:
        return None
    try:
        written = os.write(fd, pending[:_READ_CHUNK])
    except BlockingIOError:
        return pending
    except (BrokenPipeError, OSError):
        return None  # the child stopped reading: drop the rest
    return pending[written:] or None


def _drain(fd: int, collector: "OutputCollector", until: float) -> None:
    """Read what is left in the pipe (the writers are dead or escaped the group)."""
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while (remaining := until - time.monotonic()) > 0:
            if sel.select(remaining) and not read_into(fd, collector):
                return


def kill_child_tree(proc: subprocess.Popen) -> None:
    """:func:`kill_tree` for a child process, then :func:`release` it.

    Once it has been reaped (``wait()``), its pid may belong to an unrelated
    process, whose tree must not be touched: what is killed then is its
    process group (the id stays reserved while the group has members) and, on
    Linux, everything below the group's members. That ends the tree of a
    supervisor that was killed: its keeper and the command are in its group,
    and the keeper holds the rest.

    Calls for one process from several threads (a cancel, the caller's own
    clean-up) run one at a time; once the whole tree was killed before the
    process was reaped, a later call only kills the group again (nothing below
    it can be left: every process found was stopped, then killed), without
    reading the process table.
    """
    lock = getattr(proc, "_tool_hub_kill", None)
    try:
        with lock if lock is not None else contextlib.nullcontext():
            if proc.returncode is None:
                kill_tree(proc.pid)
                proc._tool_hub_killed = True  # type: ignore[attr-defined]
            elif getattr(proc, "_tool_hub_killed", False):
                kill_group(proc.pid)
            elif _LINUX and group_alive(proc.pid):  # usually not: the supervisor ended its tree
                stop_and_kill(proc.pid, lambda: group_tree(proc.pid))
            else:
                kill_group(proc.pid)
    finally:
        release(proc)


def _close_quietly(stream) -> None:
    try:
        stream.close()
    except OSError:
        pass


# ---- Windows -------------------------------------------------------------------


def _run_windows(argv: list[str], data: bytes | None, cwd, timeout: float, max_output_chars: int,
                 env: dict[str, str], merge_stderr: bool = True) -> SandboxResult:
    """Fallback without rlimits (Windows has none; a Job Object would be the equivalent).

    Output is collected whole by ``communicate`` and cut afterwards, so a child
    printing without end holds memory until the timeout. Only the direct child
    is killed on timeout.
    """
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
                            cwd=os.fspath(cwd), env=env,
                            creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))
    timed_out = False
    try:
        raw, _ = proc.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        raw, _ = proc.communicate()
    collector = OutputCollector(max_output_chars)
    collector.feed(raw or b"")
    output, truncated = collector.result()
    return SandboxResult(output, proc.returncode, timed_out, truncated, time.monotonic() - started)


# ---- output ----------------------------------------------------------------------


class OutputCollector:
    """Decode a byte stream and keep its first and last characters within a limit.

    Memory stays about ``2 * limit`` characters however much is fed: the
    middle is counted and dropped.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.head_cap, self.tail_cap = _split_limit(limit) if limit > 0 else (0, 0)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.total = 0

    def feed(self, chunk: bytes, final: bool = False) -> None:
        text = self._decoder.decode(chunk, final)
        if not text:
            return
        self.total += len(text)
        if self.limit <= 0:
            self._head.append(text)
            return
        room = self.limit - self._head_len  # keep up to ``limit`` in the head: enough if nothing more comes
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if text:
            self._tail.append(text)
            self._tail_len += len(text)
            while self._tail and self._tail_len - len(self._tail[0]) >= self.tail_cap:
                self._tail_len -= len(self._tail.popleft())

    def result(self) -> tuple[str, bool]:
        self.feed(b"", final=True)
        head = "".join(self._head)
        if self.limit <= 0 or self.total <= self.limit:
            return head + "".join(self._tail), False
        tail = "".join(self._tail)
        tail = tail[len(tail) - self.tail_cap:] if self.tail_cap else ""
        kept_head = head[: self.head_cap]
        return _join(kept_head, tail, self.total - len(kept_head) - len(tail)), True


def _split_limit(limit: int) -> tuple[int, int]:
    head = (limit + 1) // 2
    return head, limit - head


def _join(head: str, tail: str, omitted: int) -> str:
    return f"{head}\n... [{omitted} characters omitted] ...\n{tail}"



