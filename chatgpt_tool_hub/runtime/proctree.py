"""Killing a process tree: the process group and, on Linux, every descendant, found through ``/proc``.

:func:`kill_tree` stops everything it finds (``SIGSTOP``) before killing it, so
nothing forks while the tree is read; the tree is read from the processes' own
``/proc/<pid>/task/<tid>/children`` files (a few reads), and from the whole
process table only where the kernel does not offer them. Quiet for processes
already gone. Used by :mod:`.sandbox`.
"""

from __future__ import annotations

import os
import signal
import sys

from .launcher import descendants, processes

__all__ = ["kill_group", "kill_tree", "kill_strays", "group_alive", "group_tree", "stop_and_kill"]

_LINUX = sys.platform.startswith("linux")
_TREE_ROUNDS = 5  # kill_tree: how often to look again for children forked while looking


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
    launcher keeps orphans below ``pid`` (child subreapers), so double-forked
    daemons are still there. Everything found is stopped first (``SIGSTOP``),
    so that nothing forks while the tree is read, then killed. Quiet for
    processes already gone. ``pid`` must not have been reaped yet (see
    :func:`kill_child_tree`).
    """
    if _LINUX:
        stop_and_kill(pid, lambda: _tree_below(pid))
    else:
        kill_group(pid)


def _tree_below(pid: int) -> set[int]:
    """Every process below ``pid``: read from the tree's own ``children`` files (a few reads), or from
    the whole process table where the kernel does not offer them."""
    below = _subtree(pid)
    return descendants(pid) if below is None else below


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_tree(pgid: int) -> set[int]:
    """The members of process group ``pgid`` and every process below them (Linux /proc)."""
    table = processes()
    members = {pid for pid, (_, group) in table.items() if group == pgid}
    return members | descendants(members, table) if members else set()


def stop_and_kill(pgid: int | None, find) -> set[int]:
    """``SIGSTOP`` group ``pgid`` (None: no group) and what ``find()`` returns (again until nothing new), then
    ``SIGKILL`` all; the pids found."""
    found = find()  # look once before stopping anything: if looking fails, nothing stays stopped
    stopped: set[int] = set()
    try:
        if pgid is not None:
            kill_group(pgid, signal.SIGSTOP)
        for _ in range(_TREE_ROUNDS):
            for child in found - stopped:
                _signal(child, signal.SIGSTOP)
            stopped |= found
            found = find()
            if found <= stopped:
                break
    finally:  # whatever happened while looking: never leave anything stopped
        if pgid is not None:
            kill_group(pgid)
        for child in stopped | found:  # found: new ones of the last look too
            _signal(child, signal.SIGKILL)
    return stopped


def kill_strays(root: int, keep: set[int]) -> int:
    """``SIGKILL`` every process below ``root`` but ``keep`` (Linux; stopped first, as :func:`kill_tree`
    does): what a call of a long-lived worker left running. The number of processes killed."""
    def running() -> set[int]:  # zombies (ended, not yet reaped by their parent) need no killing
        below = _subtree(root)
        return {pid for pid in (descendants(root) if below is None else below) - keep if not _zombie(pid)}

    if not _LINUX or not running():  # the usual case: one look at /proc
        return 0
    return len(stop_and_kill(None, running))


def _subtree(root: int) -> set[int] | None:
    """The processes below ``root`` from ``/proc/<pid>/task/<tid>/children`` (only the tree is read, not
    every process's stat); None where the kernel does not offer those files."""
    found: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                    children = [int(c) for c in handle.read().split()]
            except FileNotFoundError:
                if pid == root and not found:
                    return None  # no children files (CONFIG_PROC_CHILDREN off): read the whole table
                continue
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True  # gone


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
