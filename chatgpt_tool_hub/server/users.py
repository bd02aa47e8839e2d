"""Who is asking, and each user's own apps.

A request's user is its API key (only a digest of it is kept) and the OpenAI
``user`` field. Each user has a folder below ``serve_workspace_root`` (their
workspace: files handed over, files the tools write) and their own app per app
type, so their python session, variables and files never meet another user's.
Apps are kept for at most ``max_sessions`` users, least recently used out
first, and closed after ``session_ttl_s`` idle; every user's app shares the
server's LLM client (one connection pool) and thread pool.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

__all__ = ["User", "UserApps", "identify"]

log = logging.getLogger("chatgpt_tool_hub.server")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class User:
    key_id: str   # a digest of the API key ("local" without keys)
    name: str     # the request's ``user`` field ("default" without one)

    @property
    def folder(self) -> str:
        """The user's folder name below the workspace root: readable, and distinct for distinct users."""
        slug = _UNSAFE.sub("_", self.name)[:40].strip("._") or "user"
        digest = hashlib.sha256(f"{self.key_id}\0{self.name}".encode()).hexdigest()[:16]
        return f"{slug}-{digest}"


def identify(authorization: str | None, user: Any, keys: tuple[str, ...]) -> User | None:
    """The user of a request, or None when keys are configured and the request has none of them."""
    name = user.strip() if isinstance(user, str) and user.strip() else "default"
    if not keys:
        return User("local", name)
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    for key in keys:
        if hmac.compare_digest(token.encode(), key.encode()):
            return User(hashlib.sha256(key.encode()).hexdigest()[:12], name)
    return None


@dataclass
class _Entry:
    app: Any
    last_used: float
    busy: int = 0


class UserApps:
    """``get(user, app_type)``: that user's app, built on first use (see the module docstring)."""

    def __init__(self, build: Callable[[User, str, Path], Any], root: Path, *, max_users: int, ttl_s: float,
                 executor: Any = None, clock: Callable[[], float] = time.monotonic):
        self._build = build
        self.root = root
        self.max_users = max_users
        self.ttl_s = ttl_s
        self.executor = executor
        self._clock = clock
        self._apps: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[tuple[str, str], threading.Lock] = {}

    def workspace(self, user: User) -> Path:
        return self.root / user.folder

    def acquire(self, user: User, app_type: str) -> Any:
        """The user's app, marked busy until :meth:`release` (never evicted meanwhile)."""
        key = (user.folder, app_type)
        with self._lock:
            entry = self._apps.get(key)
            if entry is not None:
                entry.busy += 1
                entry.last_used = self._clock()
                self._apps.move_to_end(key)
                return entry.app
            gate = self._building.setdefault(key, threading.Lock())
        with gate:  # one build per user and app type, even when their first requests come together
            with self._lock:
                entry = self._apps.get(key)
            if entry is None:
                workspace = self.workspace(user)
                workspace.mkdir(parents=True, exist_ok=True)
                app = self._build(user, app_type, workspace)
                if self.executor is not None:
                    app.executor = self.executor
                entry = _Entry(app, self._clock())
                with self._lock:
                    self._apps[key] = entry
                    self._building.pop(key, None)
        with self._lock:
            entry.busy += 1
            entry.last_used = self._clock()
            self._apps.move_to_end(key)
        self.prune()
        return entry.app

    def release(self, user: User, app_type: str) -> None:
        with self._lock:
            entry = self._apps.get((user.folder, app_type))
            if entry is not None:
                entry.busy = max(0, entry.busy - 1)
                entry.last_used = self._clock()

    def prune(self) -> int:
        """Close the apps of users idle past the TTL and of those past the cap; returns how many."""
        now = self._clock()
        victims = []
        with self._lock:
            excess = len(self._apps) - self.max_users if self.max_users > 0 else 0
            for key, entry in self._apps.items():
                expired = self.ttl_s > 0 and now - entry.last_used > self.ttl_s
                if not expired and excess <= 0:
                    break
                if not entry.busy:
                    victims.append(key)
                    excess -= 1
            apps = [self._apps.pop(key).app for key in victims]
        for app in apps:
            _close(app)
        return len(apps)

    def drop(self, user: User) -> int:
        """Close the user's apps now (a web page's tab was closed); one with a run in flight is left for
        :meth:`prune`. Returns how many were closed."""
        with self._lock:
            keys = [key for key, entry in self._apps.items() if key[0] == user.folder and not entry.busy]
            apps = [self._apps.pop(key).app for key in keys]
        for app in apps:
            _close(app)
        return len(apps)

    def users(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._apps)

    def running(self) -> int:
        with self._lock:
            return sum(entry.busy for entry in self._apps.values())

    def close(self) -> None:
        with self._lock:
            apps = [entry.app for entry in self._apps.values()]
            self._apps.clear()
        for app in apps:
            _close(app)

    def all_apps(self) -> list[Any]:
        with self._lock:
            return [entry.app for entry in self._apps.values()]

    def sessions_of(self, user: User) -> Mapping[str, Any]:
        with self._lock:
            return {app_type: entry.app for (folder, app_type), entry in self._apps.items() if folder == user.folder}


def _close(app: Any) -> None:
    try:
        app.close()
    except Exception:  # noqa: BLE001 - closing an evicted app
        log.debug("closing an app failed", exc_info=True)
