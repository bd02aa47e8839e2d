"""Run a command in a child process with limits: the shared part of transactional tools.

:func:`run_sandboxed` starts ``argv`` in a new session (so it leads its own
process group), with a scrubbed environment, a working directory, an address
space limit (``RLIMIT_AS``), a CPU-time limit (``RLIMIT_CPU``, about the wall
timeout plus one second) and no core dumps. A wall-clock timeout kills the whole
process tree with ``SIGKILL`` (:func:`kill_tree`: the process group, and on
Linux every descendant, also those that left the group with ``setsid``), and
so does the end of the command: nothing it started in the background outlives
it. stdout and stderr are merged into one pipe and
read with a selector loop that keeps at most about ``2 * max_output_chars``
characters (head and tail) while draining and discarding the middle, so a child
that prints 100 MB costs the parent time, not memory. Input goes through stdin,
written in the same loop, so neither side can deadlock on a full pipe.
:func:`spawn_limited` starts a long-lived child under the same limits (the
``python`` tool's per-session workers); :func:`strip_control` removes ANSI
escape sequences and other control characters from output meant for an LLM.

The limits are applied by a tiny launcher (``python -I -S _launcher.py ...``)
that sets them, makes itself a child subreaper (Linux: orphans stay in its
tree instead of moving to init) and then runs the command, instead of a
``preexec_fn``, which is not safe when the parent has threads.

**This is not a security boundary.** Process isolation with rlimits stops
accidents: runaway loops, memory bombs, floods of output, code that reads
``os.environ`` looking for keys. It does not stop a determined attacker: the
child runs as the same user, can read and write every file that user can, open
network connections, leave the process tree with some effort (undo the
subreaper setting, or kill the launcher that holds the tree together, then
daemonize) and so outlive the timeout, signal the application itself, or fork
many processes. Run the whole application in a container,
VM or dedicated low-privilege account when the code it runs is untrusted.

POSIX only for the limits. On Windows the command still runs in a separate
process with the scrubbed environment, working directory and wall timeout, but
without rlimits, process-group kill or the streaming output cap (see
:func:`_run_windows`).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ...textutil import strip_control
from ._launcher import descendants

__all__ = ["SandboxResult", "run_sandboxed", "spawn_limited", "rlimits", "kill_group", "kill_tree",
           "kill_child_tree", "scrubbed_env",
           "truncate_middle", "describe_signal", "strip_control", "OutputCollector"]

_POSIX = os.name == "posix"
_READ_CHUNK = 65536
_POLL_S = 0.1  # how often the loop checks for a child that exited while its pipe stays open
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
                          merge_stderr)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# ---- POSIX ---------------------------------------------------------------------

# The first thing a sandboxed child runs: sets the limits, makes itself a child
# subreaper, then becomes the command ("exec") or runs it and ends what it left
# behind ("supervise"). See _launcher.py.
_LAUNCHER = str(Path(__file__).with_name("_launcher.py"))
_LINUX = sys.platform.startswith("linux")
_TREE_ROUNDS = 5  # kill_tree: how often to look again for children forked while looking


def rlimits(cpu_seconds: float, max_memory_mb: int | None) -> dict[str, list[int]]:
    """The limits the launcher sets: ``RLIMIT_AS``, ``RLIMIT_CPU`` (soft, hard + 1), no core."""
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
    cpu = max(1, int(math.ceil(cpu_seconds)))  # SIGXCPU at the soft limit, SIGKILL at the hard one
    capped("RLIMIT_CPU", cpu, cpu + 1)
    return limits


def spawn_limited(argv: Sequence[str], *, cwd: str | os.PathLike, env: Mapping[str, str], cpu_seconds: float,
                  max_memory_mb: int | None = None, supervise: bool = False, **popen_kwargs) -> subprocess.Popen:
    """Start ``argv`` (POSIX) in a new session under :func:`rlimits`; the caller owns the process.

    The process is a child subreaper (Linux), so what it starts stays in its
    tree even after ``setsid``. ``supervise`` runs ``argv`` as a child of the
    launcher, which kills whatever ``argv`` left behind when it ends;
    otherwise the launcher becomes ``argv``. ``popen_kwargs`` go to
    :class:`subprocess.Popen` (``stdin``, ``stdout``, ``stderr``,
    ``pass_fds``...). End it with :func:`kill_child_tree` and ``wait()``.
    """
    mode = "supervise" if supervise and _LINUX else "exec"
    launcher = [sys.executable, "-I", "-S", _LAUNCHER, mode, json.dumps(rlimits(cpu_seconds, max_memory_mb))]
    return subprocess.Popen(launcher + list(argv), cwd=os.fspath(cwd), env=dict(env),
                            start_new_session=True,  # own session and process group: killpg reaches children
                            close_fds=True, **popen_kwargs)


def _run_posix(argv: list[str], data: bytes | None, cwd, timeout: float, max_memory_mb: int | None,
               max_output_chars: int, env: dict[str, str], merge_stderr: bool) -> SandboxResult:
    import selectors

    collector = OutputCollector(max_output_chars)
    started = time.monotonic()
    proc = spawn_limited(argv, cwd=cwd, env=env, cpu_seconds=timeout + 1, max_memory_mb=max_memory_mb,
                         supervise=True, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL)
    timed_out = False
    sel = selectors.DefaultSelector()
    try:
        out_fd = proc.stdout.fileno()
        os.set_blocking(out_fd, False)
        sel.register(out_fd, selectors.EVENT_READ, "out")
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
            for key, _ in sel.select(min(remaining, _POLL_S)):
                if key.data == "out":
                    if not _read_into(out_fd, collector):
                        sel.unregister(out_fd)
                        out_open = False
                else:
                    pending = _write_some(key.fd, pending)
                    if not pending:
                        sel.unregister(key.fd)
                        _close_quietly(proc.stdin)
        if not timed_out and not out_open:
            try:  # the pipe closed: give the process the rest of the time to exit
                proc.wait(max(0.0, deadline - time.monotonic()))
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
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                _close_quietly(stream)
    output, truncated = collector.result()
    return SandboxResult(output, proc.returncode, timed_out, truncated, time.monotonic() - started)


def _read_into(fd: int, collector: "OutputCollector") -> bool:
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


def _write_some(fd: int, pending: memoryview | None) -> memoryview | None:
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
            if sel.select(remaining) and not _read_into(fd, collector):
                return


def kill_group(pid: int, sig: int | None = None) -> None:
    """``SIGKILL`` (or ``sig``) the process group ``pid`` leads; quiet when it is already gone."""
    try:
        os.killpg(pid, sig or signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int) -> None:
    """``SIGKILL`` the process group ``pid`` leads and, on Linux, every descendant of ``pid``.

    Descendants are found through the parent links in /proc, so processes that
    left the group (``setsid``, ``start_new_session``) are found too, and the
    launcher made ``pid`` a subreaper, so double-forked daemons are still below
    it. Everything found is stopped first (``SIGSTOP``), so that nothing forks
    while the tree is read, then killed. Quiet for processes already gone.
    ``pid`` must not have been reaped yet (see :func:`kill_child_tree`).
    """
    if not _LINUX:
        kill_group(pid)
        return
    found = descendants(pid)  # look once before stopping anything: if looking fails, nothing stays stopped
    stopped: set[int] = set()
    try:
        kill_group(pid, signal.SIGSTOP)
        for _ in range(_TREE_ROUNDS):
            for child in found - stopped:
                _signal(child, signal.SIGSTOP)
            stopped |= found
            found = descendants(pid)
            if found <= stopped:
                break
    finally:  # whatever happened while looking: never leave anything stopped
        kill_group(pid)
        for child in stopped:
            _signal(child, signal.SIGKILL)


def kill_child_tree(proc: subprocess.Popen) -> None:
    """:func:`kill_tree` for a child process, or only its group once it has been reaped.

    After ``wait()`` its pid may belong to an unrelated process, whose tree must
    not be touched; the group id stays reserved while the group has members.
    """
    if proc.returncode is None:
        kill_tree(proc.pid)
    else:
        kill_group(proc.pid)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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



