"""Process hardening for a server: keep its secrets out of reach of the processes its tools start.

A server's tools start child processes that run code the model wrote (the
``python`` tool's workers, ``terminal`` commands). They run as the server's
user, so without more they could read the server's memory and its initial
environment through ``/proc/<server pid>/environ`` and ``/proc/<server
pid>/mem``: every API key it was started with.

* :func:`make_non_dumpable` (Linux ``prctl(PR_SET_DUMPABLE, 0)``): those
  files of this process are then readable only with ``CAP_SYS_PTRACE``.
  The sandbox's launcher drops every capability from its children's
  bounding set, so a worker started by a server running as root has none.
* :func:`scrub_secret_env` removes the secret settings from ``os.environ``
  after the configuration was read, so that nothing started later inherits
  them. It does not change ``/proc/<pid>/environ``: that shows the copy the
  kernel made when the process started, which is why the first step matters.
* :func:`probe_isolation` says which further isolation this host offers to
  workers (a PID namespace, a user namespace, another uid), for the logs and
  the docs; nothing here uses them.

Standard library and L0 only.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import MutableMapping

from ..config import SETTINGS, is_secret_key

__all__ = ["make_non_dumpable", "is_dumpable", "scrub_secret_env", "secret_env_names", "probe_isolation",
           "Isolation", "harden_server_process"]

log = logging.getLogger("chatgpt_tool_hub.runtime")

_LINUX = sys.platform.startswith("linux")
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
_PROBE_TIMEOUT_S = 5.0


def _prctl(option: int, value: int = 0) -> int | None:
    """``prctl(option, value)``'s result on Linux; None elsewhere or when it cannot be called."""
    if not _LINUX:
        return None
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0))
    except (OSError, AttributeError):
        return None


def make_non_dumpable() -> bool:
    """Make this process non-dumpable (Linux): its ``/proc/<pid>/environ``, ``mem``, ``maps``... are then
    readable only by processes with ``CAP_SYS_PTRACE``, and it cannot be ptrace-attached by its own uid.
    True when it is non-dumpable now; False where that is not offered (not Linux)."""
    return _prctl(PR_SET_DUMPABLE, 0) == 0 and is_dumpable() is False


def is_dumpable() -> bool | None:
    """Whether this process is dumpable (Linux); None where that cannot be asked."""
    result = _prctl(PR_GET_DUMPABLE)
    return None if result is None or result < 0 else bool(result)


def secret_env_names(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """The environment variables in ``environ`` (default ``os.environ``) that hold secret settings: the
    configuration table's secret keys under every name they are read from (``OPENAI_API_KEY`` too), and any
    other variable whose name says it is a key, token, secret or password (a tool's ``BING_SEARCH_API_KEY``)."""
    environ = os.environ if environ is None else environ
    named = {name for setting in SETTINGS.values() if setting.secret for name in setting.env_names}
    return [name for name in environ if name in named or (name.lower() not in SETTINGS and is_secret_key(name))]


def scrub_secret_env(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove :func:`secret_env_names` from ``environ`` (default ``os.environ``); the names removed.

    Call it once the configuration has been read and whatever needs the values holds them: processes
    started afterwards no longer inherit them, and a later read of the environment finds none."""
    environ = os.environ if environ is None else environ
    names = secret_env_names(environ)
    for name in names:
        environ.pop(name, None)
    return names


@dataclass(frozen=True)
class Isolation:
    """What this host lets a worker be put in (measured by starting ``true`` under each)."""

    pid_namespace: bool   # unshare --pid --fork --mount-proc
    user_namespace: bool  # unshare --user
    other_uid: bool       # setpriv --reuid 65534 (only as root)

    def describe(self) -> str:
        found = [name for name, ok in (("PID namespaces", self.pid_namespace), ("user namespaces",
                 self.user_namespace), ("another uid", self.other_uid)) if ok]
        return ", ".join(found) or "none"


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=_PROBE_TIMEOUT_S, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def probe_isolation() -> Isolation:
    """Which of PID namespaces, user namespaces and another uid work here (Linux; all False elsewhere)."""
    if not _LINUX:
        return Isolation(False, False, False)
    root = os.geteuid() == 0
    return Isolation(
        pid_namespace=_works(["unshare", "--pid", "--fork", "--mount-proc", *([] if root else ["--map-root-user"]),
                              "true"]),
        user_namespace=_works(["unshare", "--user", "true"]),
        other_uid=root and _works(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "true"]),
    )


def harden_server_process() -> list[str]:
    """What ``tool-hub serve`` does at start, before it reads its configuration: the process becomes
    non-dumpable (a warning where it cannot). Returns what was done, for the log."""
    done = []
    if make_non_dumpable():
        done.append("non-dumpable")
    elif _LINUX:
        log.warning("could not make the server non-dumpable: the processes its tools start may read its "
                    "environment (API keys) through /proc")
    return done
