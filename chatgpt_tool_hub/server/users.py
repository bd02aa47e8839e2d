"""Who is asking, and each user's own apps.

A request's user is its API key (only a digest of it is kept) and the OpenAI
``user`` field, or, behind a chat UI the operator trusts, the end user it names
in a header (``serve_user_header``, :func:`end_user`); a second header
(``serve_session_header``) names the conversation, which then gets a session
of its own in the user's app. Each user has a folder below ``serve_workspace_root`` (their
workspace: files handed over, files the tools write) and their own app per app
type, so their python session, variables and files never meet another user's.
Apps are kept for at most ``serve_max_users`` users (and ``max_sessions``),
least recently used out first, and closed after ``session_ttl_s`` idle; every
user's app shares the server's LLM client (one connection pool) and thread pool.

With two or more keys each key has a fair share (:meth:`UserApps.configure_tenancy`):
at most ``serve_max_users_per_key`` users (a new one pushes out that key's
least recently used idle user; HTTP 429 when all are busy) and
``serve_max_runs_per_key`` runs at once (HTTP 429 past it). Every user's new
runs get HTTP 429 ``insufficient_quota`` while their folder holds more than
``serve_user_quota_mb``, and :meth:`UserApps.prune_folders` removes the
folders of users not seen for ``serve_user_retention_s`` (a folder's
modification time is its user's last visit; a live user's is never removed).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import shutil
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .asgi import ApiError
from .tenancy import check_quota, too_many

__all__ = ["User", "UserApps", "identify", "end_user", "header_value", "MAX_HEADER_CHARS"]

log = logging.getLogger("chatgpt_tool_hub.server")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
MAX_HEADER_CHARS = 256  # the longest end-user or conversation id a header may carry


def _safe_name(text: str, salt: str) -> str:
    """A readable file-system-safe name for ``text``, distinct for distinct ``(salt, text)``."""
    slug = _UNSAFE.sub("_", text)[:40].strip("._") or "user"
    digest = hashlib.sha256(f"{salt}\0{text}".encode()).hexdigest()[:16]
    return f"{slug}-{digest}"


@dataclass(frozen=True)
class User:
    key_id: str   # a digest of the API key ("local" without keys)
    name: str     # the request's ``user`` field, or the end user a trusted header names ("default" without one)
    session: str = field(default="", compare=False)  # the conversation a trusted header names ("": none)

    @property
    def folder(self) -> str:
        """The user's folder name below the workspace root: readable, and distinct for distinct users."""
        return _safe_name(self.name, self.key_id)

    @property
    def session_id(self) -> str:
        """The session of the user's app a request runs in (python variables, memory): one per user, or one
        per conversation when a trusted header names it."""
        base = f"user-{self.folder}"
        return f"{base}-chat-{_safe_name(self.session, self.folder)}" if self.session else base


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


def header_value(headers: Mapping[str, str], name: str, setting: str) -> str:
    """The value of the header ``name`` ("" when ``name`` is empty or the header absent or blank); HTTP 400
    when it is longer than :data:`MAX_HEADER_CHARS` or not printable text."""
    if not name:
        return ""
    value = (headers.get(name) or "").strip()
    if len(value) > MAX_HEADER_CHARS or not value.isprintable():
        raise ApiError(400, f"the {name} header must be printable text of at most {MAX_HEADER_CHARS} characters "
                            f"({setting}); the chat UI in front of this server sent something else")
    return value


def end_user(user: User, headers: Mapping[str, str], user_header: str, session_header: str,
             credentialed: bool) -> User:
    """The end user and conversation a trusted chat UI names in ``user_header`` / ``session_header``, within
    ``user``'s key: the same header value under two keys is two users. Headers count only for a request that
    carried a valid API key or the local token (``credentialed``); otherwise, or when absent, ``user``."""
    if not credentialed or not (user_header or session_header):
        return user
    name = header_value(headers, user_header, "serve_user_header")
    session = header_value(headers, session_header, "serve_session_header")
    if not name and not session:
        return user
    return User(user.key_id, name or user.name, session)


@dataclass
class _Entry:
    app: Any
    last_used: float
    busy: int = 0
    key_id: str = ""


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
        self.max_users_per_key = 0  # 0: no per-key caps (see configure_tenancy)
        self.max_runs_per_key = 0
        self.quota_mb = 0
        self.retention_s = 0.0
        self._runs: dict[str, int] = {}  # key_id -> runs in flight

    def configure_tenancy(self, settings: Any) -> None:
        """Take the fair-share settings of a :class:`~chatgpt_tool_hub.server.settings.ServeSettings`. The
        per-key caps hold with two or more keys only: without keys or with one there is one tenant."""
        several = len(settings.api_keys) >= 2
        self.max_users_per_key = settings.max_users_per_key if several else 0
        self.max_runs_per_key = settings.max_runs_per_key if several else 0
        self.quota_mb = settings.user_quota_mb
        self.retention_s = settings.user_retention_s

    def workspace(self, user: User) -> Path:
        return self.root / user.folder

    def acquire(self, user: User, app_type: str) -> Any:
        """The user's app, marked busy until :meth:`release` (never evicted meanwhile). An ``ApiError`` 429
        when the user's folder is over its quota or their key is at one of its caps."""
        key = (user.folder, app_type)
        check_quota(self.workspace(user), self.quota_mb)
        with self._lock:
            pushed_out = self._admit(user)
            self._runs[user.key_id] = self._runs.get(user.key_id, 0) + 1
            entry = self._apps.get(key)
            if entry is not None:
                entry.busy += 1
                entry.last_used = self._clock()
                self._apps.move_to_end(key)
            else:
                gate = self._building.setdefault(key, threading.Lock())
        for app in pushed_out:
            _close(app)
        if entry is not None:
            _touch(self.workspace(user))
            return entry.app
        try:
            app = self._build_entry(user, app_type, key, gate)
        except BaseException:
            self._end_run(user.key_id)
            raise
        _touch(self.workspace(user))
        return app

    def _admit(self, user: User) -> list[Any]:
        """Under the lock: refuse a run past the key's caps; for a new user of a key at its user cap, take
        out that key's least recently used idle user. The apps taken out, to be closed."""
        if self.max_runs_per_key > 0 and self._runs.get(user.key_id, 0) >= self.max_runs_per_key:
            raise too_many("runs in flight", self.max_runs_per_key, "serve_max_runs_per_key")
        if self.max_users_per_key <= 0 or any(folder == user.folder for folder, _ in self._apps):
            return []
        folders: OrderedDict[str, bool] = OrderedDict()  # the key's users, least recently used first: idle?
        for (folder, _), entry in self._apps.items():
            if entry.key_id == user.key_id:
                folders[folder] = folders.get(folder, True) and not entry.busy
                folders.move_to_end(folder)
        if len(folders) < self.max_users_per_key:
            return []
        idle = next((folder for folder, free in folders.items() if free), None)
        if idle is None:
            raise too_many("users with runs in flight", self.max_users_per_key, "serve_max_users_per_key")
        return [self._apps.pop(key).app for key in [key for key in self._apps if key[0] == idle]]

    def _end_run(self, key_id: str) -> None:
        with self._lock:
            left = self._runs.get(key_id, 0) - 1
            if left > 0:
                self._runs[key_id] = left
            else:
                self._runs.pop(key_id, None)

    def _build_entry(self, user: User, app_type: str, key: tuple[str, str], gate: threading.Lock) -> Any:
        with gate:  # one build per user and app type, even when their first requests come together
            with self._lock:
                entry = self._apps.get(key)
            if entry is None:
                workspace = self.workspace(user)
                workspace.mkdir(parents=True, exist_ok=True)
                app = self._build(user, app_type, workspace)
                if self.executor is not None:
                    app.executor = self.executor
                entry = _Entry(app, self._clock(), key_id=user.key_id)
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
        self._end_run(user.key_id)
        _touch(self.workspace(user))

    def prune_folders(self, now: float | None = None) -> list[str]:
        """Remove the folders of users not seen for ``retention_s`` (by the folder's modification time,
        ``time.time()`` clock; never one whose user has an app here). The names removed."""
        if self.retention_s <= 0:
            return []
        now = time.time() if now is None else now
        try:
            candidates = [entry for entry in os.scandir(self.root) if entry.is_dir(follow_symlinks=False)]
        except OSError:
            return []
        removed = []
        for entry in candidates:
            if entry.name.startswith(".removing-"):  # left by an earlier removal that did not finish
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            with self._lock:  # checked and moved aside at once: a user arriving now gets a fresh folder
                if entry.name.startswith(".") or any(folder == entry.name for folder, _ in self._apps):
                    continue
                try:
                    if now - entry.stat(follow_symlinks=False).st_mtime <= self.retention_s:
                        continue
                    doomed = self.root / f".removing-{entry.name}"
                    os.rename(entry.path, doomed)
                except OSError:
                    continue
            shutil.rmtree(doomed, ignore_errors=True)
            removed.append(entry.name)
        if removed:
            log.info("removed the folders of %d users not seen for %g s", len(removed), self.retention_s)
        return removed

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


def _touch(folder: Path) -> None:
    """Mark the user's visit: :meth:`UserApps.prune_folders` reads it as the folder's modification time."""
    try:
        os.utime(folder)
    except OSError:
        pass


def _close(app: Any) -> None:
    try:
        app.close()
    except Exception:  # noqa: BLE001 - closing an evicted app
        log.debug("closing an app failed", exc_info=True)
