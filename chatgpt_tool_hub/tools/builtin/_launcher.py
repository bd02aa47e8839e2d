"""Start a command under limits: what a sandboxed child runs first.

``python -I -S _launcher.py MODE LIMITS COMMAND...`` sets the rlimits in
``LIMITS`` (JSON: ``{"RLIMIT_AS": [soft, hard], ...}``), makes itself a *child
subreaper* (Linux): orphaned descendants are re-parented to this process
instead of to init, so a child that left the process group with ``setsid`` or
a double fork stays in this process's tree, where it can be found and killed.
Then, by ``MODE``:

* ``exec``: it becomes the command (the ``python`` tool's long-lived workers;
  the subreaper setting survives ``exec``);
* ``supervise``: it runs the command as its child, and when the command ends
  it kills everything the command left behind (background jobs, daemons), then
  exits with the command's status (a signal that ended the command is raised
  again, so the caller sees it).

Standard library only and no package imports: it runs with ``-I -S``. The
parent side (``_sandbox.kill_tree``) and the ``python`` worker import
:func:`descendants` and :func:`end_children` from this file too.
"""

import json
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
CLEANUP_S = 2.0  # how long a supervisor keeps killing what the command left behind


def become_subreaper():
    """Keep orphaned descendants in this process's tree (Linux); quietly nothing elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:  # no ctypes, no prctl: the process-group kill still works
        pass


def parents():
    """``{pid: parent pid}`` of every process visible in /proc (empty without /proc)."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses
                table[int(name)] = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    return table


def descendants(pid):
    """Every process below ``pid`` in the process tree (Linux /proc; empty elsewhere)."""
    children = {}
    for child, parent in parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def end_children(seconds=CLEANUP_S):
    """SIGKILL this process's children until none is left (or ``seconds`` passed).

    As a subreaper, the children of a killed child become ours, so round after
    round reaches the whole tree. Zombies are reaped on the way.
    """
    me = os.getpid()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        kids = [pid for pid, parent in parents().items() if parent == me]
        if not kids:
            return
        for kid in kids:
            try:
                os.kill(kid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        time.sleep(0.01)


def _reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _start(argv):
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # as a shell starts programs: Python ignores these
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("cannot start %r: %s\n" % (argv[0], exc))
        sys.stderr.flush()
        os._exit(127)


def _supervise(argv):
    pid = os.fork()
    if pid == 0:
        _start(argv)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the command alone reads the input
    os.close(null)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries already
            continue
    end_children()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP cannot be changed
            pass
        os.kill(os.getpid(), sig)
        time.sleep(1)  # a signal that does not end a process by default: fall through
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main():
    import resource  # POSIX only: imported here so that the parent can import this file anywhere

    mode, limits, argv = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
    become_subreaper()
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value[0], value[1]))
    if mode == "supervise":
        _supervise(argv)
    _start(argv)


if __name__ == "__main__":
    main()
