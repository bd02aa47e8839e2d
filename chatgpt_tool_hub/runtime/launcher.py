"""Start a command under limits: what a sandboxed child runs first.

``python -I -S launcher.py MODE LIMITS WATCH_FD COMMAND...`` sets the rlimits
in ``LIMITS`` (``RLIMIT_AS=soft:hard,RLIMIT_CPU=soft:hard,...``; ``-`` for
none), empties the capability bounding set when it runs as root (the command
then holds no capability: see :func:`drop_capabilities`) and then, by ``MODE``:

* ``exec``: it makes itself a *child subreaper* (Linux: orphaned descendants
  are re-parented to this process instead of to init) and becomes the command.
  Used where there is no /proc to find a tree in (not Linux);
* ``supervise`` (Linux): it stays, as the *supervisor*, and forks a *keeper*
  that runs the command as its child. Both are child subreapers and each
  watches the other, so the command's tree is held together even when the
  command kills its parent:

  - the command ends (exits, crashes, hits an rlimit): the keeper kills every
    process it left behind (background jobs, ``setsid`` children, double-forked
    daemons: orphans are re-parented to the keeper) and exits with the
    command's status; the supervisor then exits with the same status (a signal
    that ended the command is raised again, so the caller sees it);
  - the keeper dies (``kill -9 $PPID``): the command and its tree are
    re-parented to the supervisor, which kills them and exits;
  - the supervisor dies: the keeper gets ``SIGTERM`` (``PR_SET_PDEATHSIG``),
    kills the tree and exits; ``SIGTERM`` or ``SIGHUP`` sent to either of them
    does the same;
  - the application dies: ``WATCH_FD`` is the read end of a pipe whose only
    write end the application holds; when it closes (the application exited,
    was killed with ``SIGKILL``, or let go of the process), the supervisor
    kills the whole tree and exits. ``-`` for no such pipe.

  Neither keeps the application's pipes: their stdin, stdout and stderr are
  ``/dev/null`` and every other descriptor is closed once the command has
  started, so the end of the command's output and protocol pipes is the end
  of the command's tree.

Standard library only and no package imports: it runs with ``-I -S``. The
parent side (``sandbox.kill_tree``) imports :func:`processes` and
:func:`descendants` from this file.
"""

import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP = 24
CLEANUP_S = 2.0  # how long a supervisor keeps killing what the command left behind
TREE_ROUNDS = 5  # how often to look again for processes forked while the tree was being stopped
_LINUX = sys.platform.startswith("linux")
_ENDING = (signal.SIGTERM, signal.SIGHUP)  # sent to a supervisor or keeper: kill the tree, then die of it


_libc: list = []  # the C library, loaded on first use


def _prctl(option, value):
    """``prctl(option, value)`` on Linux; False where there is none (the process-group kill still works)."""
    if not _LINUX:
        return False
    try:
        if not _libc:
            import ctypes

            _libc.append(ctypes.CDLL(None))
        return _libc[0].prctl(option, value, 0, 0, 0) == 0
    except Exception:
        return False


def become_subreaper():
    """Keep orphaned descendants in this process's tree (Linux); quietly nothing elsewhere."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def drop_capabilities():
    """Empty the capability bounding set (Linux, as root): the command, once it is started, holds no
    capability, so a server running as root and made non-dumpable keeps its ``/proc/<pid>/environ`` and
    ``mem`` from the code it runs (reading them needs ``CAP_SYS_PTRACE``), and the code cannot ptrace this
    supervisor either. Nothing for other users (they hold none); False where it could not be done."""
    if not _LINUX or os.geteuid() != 0:
        return False
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as handle:
            last = int(handle.read().strip())
    except (OSError, ValueError):
        last = 40
    return all([_prctl(PR_CAPBSET_DROP, cap) for cap in range(last + 1)])


def processes():
    """``{pid: (parent pid, process group)}`` of every process visible in /proc (empty without /proc)."""
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
                # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
                fields = fh.read().rsplit(b")", 1)[1].split()
            table[int(name)] = (int(fields[1]), int(fields[2]))
        except (OSError, ValueError, IndexError):
            pass
    return table


def parents():
    """``{pid: parent pid}`` of every process visible in /proc (empty without /proc)."""
    return {pid: parent for pid, (parent, _) in processes().items()}


def descendants(pid, table=None):
    """Every process below ``pid`` (or below each pid in a set) in the process tree (Linux /proc)."""
    children = {}
    for child, (parent, _) in (processes() if table is None else table).items():
        children.setdefault(parent, []).append(child)
    roots = pid if isinstance(pid, (set, frozenset)) else {pid}
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:  # gone already, or runs as another user
        pass


def end_children(seconds=CLEANUP_S):
    """Kill every descendant of this process and reap them (or stop trying after ``seconds``).

    The tree is stopped first (``SIGSTOP``, looked for again until nothing new
    shows up), so that nothing forks away while it is read, then killed. As a
    subreaper, this process inherits the children of every killed process:
    round after round of killing its own children reaches what is left.
    """
    me = os.getpid()
    _reap()
    if not _has_children(me):
        return
    stopped = set()
    try:
        for _ in range(TREE_ROUNDS):
            new = descendants(me) - stopped
            if not new:
                break
            for pid in new:
                _signal(pid, signal.SIGSTOP)
            stopped |= new
    finally:  # never leave anything stopped
        for pid in stopped:
            _signal(pid, signal.SIGKILL)
    if not stopped:  # nothing below: nothing that could fork either
        return
    deadline = time.monotonic() + seconds
    while True:
        _reap()
        kids = [pid for pid, parent in parents().items() if parent == me]
        if not kids or time.monotonic() > deadline:
            return
        for kid in kids:
            _signal(kid, signal.SIGKILL)
        time.sleep(0.01)


def _has_children(me):
    """False when this single-threaded process has no child (cheap); True when it has or cannot tell."""
    try:
        with open("/proc/%d/task/%d/children" % (me, me), "rb") as fh:
            return bool(fh.read().strip())
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: look through /proc
        return True


def _reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _start(argv):
    for sig in (signal.SIGPIPE, signal.SIGXFSZ) + _ENDING:  # as a shell starts programs: Python ignores these
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("cannot start %r: %s\n" % (argv[0], exc))
        sys.stderr.flush()
        os._exit(127)


def _fork():
    try:
        return os.fork()
    except OSError as exc:
        sys.stderr.write("cannot start a process: %s\n" % (exc,))
        sys.stderr.flush()
        os._exit(127)


def _let_go_of_pipes(keep=()):
    """Hold no pipe of the application's: stdin, stdout, stderr on /dev/null, the rest closed."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    keep = set(keep) | {0, 1, 2}
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:  # the descriptor that listed the folder
                pass


def _end_on_signal(sig, _frame):
    """SIGTERM/SIGHUP (also the keeper's parent-death signal): kill the tree, then die of the signal."""
    end_children()
    _exit_like(sig)  # a wait status of N means "ended by signal N"


def _exit_like(status):
    """Exit as the command did (``status`` as from ``waitpid``): with its code, or by the signal that ended it."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP cannot be changed
            pass
        os.kill(os.getpid(), sig)
        time.sleep(1)  # a signal that does not end a process by default: fall through
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _keep(argv, supervisor):
    """The keeper: the command's parent. Returns never."""
    become_subreaper()
    for sig in _ENDING:
        signal.signal(sig, _end_on_signal)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor:  # the supervisor died before the line above
        _end_on_signal(signal.SIGTERM, None)
    me = os.getpid()
    pid = _fork()
    if pid == 0:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the command dies with the keeper (its tree: see above)
        if os.getppid() != me:
            os._exit(1)
        _start(argv)
    _let_go_of_pipes()
    while True:
        try:
            done, status = os.waitpid(-1, 0)  # the command, or an orphan that ended (reaped on the way)
        except ChildProcessError:  # pragma: no cover - the command is our child until reaped
            status = 1 << 8
            break
        if done == pid:
            break
    end_children()
    _exit_like(status)


def _supervise(argv, watch_fd):
    """The supervisor: keeps the keeper, watches the application. Returns never."""
    import select

    become_subreaper()
    me = os.getpid()
    keeper = _fork()
    if keeper == 0:
        if watch_fd is not None:
            os.close(watch_fd)
        _keep(argv, me)
    _let_go_of_pipes(() if watch_fd is None else (watch_fd,))
    for sig in _ENDING:
        signal.signal(sig, _end_on_signal)
    wake_r, wake_w = os.pipe()  # SIGCHLD wakes the select below
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    watched = [wake_r] + ([] if watch_fd is None else [watch_fd])
    while True:
        done, status = os.waitpid(keeper, os.WNOHANG)
        if done:
            break
        ready = select.select(watched, [], [])[0]
        if watch_fd in ready and not _read_quietly(watch_fd):  # end of file: the application is gone
            end_children()
            os._exit(1)
        if wake_r in ready:
            _read_quietly(wake_r)
    end_children()  # the keeper was killed: its tree is ours now
    _exit_like(status)


def _read_quietly(fd):
    try:
        return os.read(fd, 512)
    except BlockingIOError:
        return b"-"
    except OSError:
        return b""


def main():
    import resource  # POSIX only: imported here so that the parent can import this file anywhere

    mode, limits, watch, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    for item in limits.split(",") if limits != "-" else ():  # no json: its import costs more than the rest
        name, _, values = item.partition("=")
        soft, _, hard = values.partition(":")
        resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
    drop_capabilities()
    if mode == "supervise" and _LINUX:
        watch_fd = None if watch == "-" else int(watch)
        if watch_fd is not None:
            os.set_inheritable(watch_fd, False)
        _supervise(argv, watch_fd)
    become_subreaper()
    _start(argv)


if __name__ == "__main__":
    main()
