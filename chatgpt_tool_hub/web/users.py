"""The page's users: each browser tab is a user of the server, asking through the server's own apps.

A tab (Gradio's session, with the login name when the server has keys) becomes
a :class:`~chatgpt_tool_hub.server.users.User` of the server's ``UserApps``, like
an API key with a ``user`` field does: its own workspace folder, its own app per
app type, its own python session. Its questions take the server's run slots
(``serve_max_concurrent_runs``) and its time limit (``serve_request_timeout_s``),
and run with ``app.astream`` as the chat API's do. The page's settings act on the
tab's own apps through their public API: tools on and off (``unregister`` /
``add_tool``), the think depth (``set_think_depth``), reset (``reset``).

Nothing here imports Gradio: the page (``page.py``) calls these coroutines.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import threading
import time
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import AbstractSet, Any, AsyncIterator, Callable, Sequence

from ..engine.prompts import detect_language
from ..errors import LLMError, RunError, UserError
from ..server.asgi import ApiError
from ..server.files import find_files
from ..server.users import User
from .transcript import Transcript, error_message, file_message, user_messages

__all__ = ["WebUser", "WebUsers", "AppView", "APP_LABELS"]

log = logging.getLogger("chatgpt_tool_hub.web")
APP_LABELS = {"victorinox": "ReAct", "planner": "planner"}
SESSION_ID = "web"
STREAM_EVERY_S = 0.05  # tokens are shown at most this often (every other event at once)


@dataclass
class WebUser:
    """One browser tab."""

    key: str
    user: User
    transcript: list[dict] = field(default_factory=list)       # what the chat shows
    offered: dict[str, list[str]] = field(default_factory=dict)  # app type -> the tools its app came with
    shelf: dict[str, dict[str, Any]] = field(default_factory=dict)  # app type -> tools turned off
    shown: set[str] = field(default_factory=set)  # app types whose tools the page has shown (toggles apply)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)    # one question at a time
    settings_lock: threading.Lock = field(default_factory=threading.Lock)  # one change of its apps at a time


@dataclass
class AppView:
    """What the page shows of a tab's app: its tools (all it offers, those on) and its think depth."""

    tools: list[str]
    enabled: list[str]
    depth: int | None          # None: the app has no think depth (the planner)
    toggles: bool              # whether its tools can be turned on and off


def _mode(app: Any) -> str:
    if getattr(app, "app_type", "") == "planner":
        return "planner"
    settings = getattr(app, "settings", None)
    return "native" if str(getattr(settings, "tool_calling", "text")).lower() == "native" else "react"


def _run_error(exc: BaseException) -> str:
    if isinstance(exc, ApiError):  # the server's own refusals (a key at its cap, a full quota) say what to do
        return exc.message
    if isinstance(exc, LLMError):
        return f"the LLM behind this server failed: {exc}"
    if isinstance(exc, UserError):
        return str(exc)
    return f"the run failed: {type(exc).__name__}: {exc}"


class FileSet(set[str]):
    """A set of file paths that threads may add to while another thread goes through it: Gradio's cache
    sweep iterates its sets of files in a worker thread; here it iterates a snapshot."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add(self, item: str) -> None:
        with self._lock:
            super().add(item)

    def __iter__(self):
        with self._lock:
            return iter(list(set.__iter__(self)))

    def __isub__(self, other: AbstractSet[object]) -> "FileSet":
        with self._lock:
            set.difference_update(self, other)
        return self


def _tab_key(session_hash: str, username: str | None, browser: str) -> str:
    return f"{browser}\0{username or ''}\0{session_hash}"


class WebUsers:
    """The tabs of one server (``state``: its :class:`~chatgpt_tool_hub.server.app.ServerState`)."""

    def __init__(self, state: Any, *, upload_root: Path | None = None, outbox: Path | None = None,
                 max_tabs: int | None = None):
        self.state = state
        self.upload_root = upload_root.resolve() if upload_root is not None else None
        self.outbox = outbox  # where files to show are copied (the page's file cache); None: shown in place
        self.copies = FileSet()  # the copies in the outbox (the page's cache sweep deletes the old ones)
        self.max_tabs = max_tabs if max_tabs is not None else max(1, 2 * state.settings.max_users)
        self._tabs: OrderedDict[str, WebUser] = OrderedDict()
        self._lock = threading.Lock()
        self._secret = hashlib.sha256(state.settings.link_secret + b"web").digest()
        # the key id of a login name (set by the page when the server has keys; "" when unknown)
        self.principal_of: Callable[[str | None], str] = lambda _username: ""

    # ---- tabs ---------------------------------------------------------------------------------

    def tab(self, session_hash: str, username: str | None = None, browser: str = "") -> WebUser:
        """The tab of a Gradio session (made on first use). A tab belongs to the browser that opened it
        (``browser``: the random id in its HttpOnly cookie, see ``server.guard``) and its login: a client
        that sends another tab's session id (both the id and the login name are the client's to choose)
        gets a tab of its own."""
        key = _tab_key(session_hash, username, browser)
        with self._lock:
            found = self._tabs.get(key)
            if found is not None:
                self._tabs.move_to_end(key)
                return found
            # the user's name is a digest: the folder name never shows the session's id; its key id is the
            # login's key (a server with keys), so the tab counts against that key's shares like its API users
            digest = hashlib.sha256(self._secret + key.encode()).hexdigest()[:16]
            found = self._tabs[key] = WebUser(key, User(self.principal_of(username) or "web", f"web-{digest}"))
            while len(self._tabs) > self.max_tabs:
                self._tabs.popitem(last=False)
            return found

    def tabs(self) -> list[WebUser]:
        with self._lock:
            return list(self._tabs.values())

    async def close_tab(self, session_hash: str, username: str | None = None, browser: str = "") -> None:
        """The tab was closed: forget it and close its apps (their python workers end); an app with a run
        still in flight is closed when the server prunes idle users, its tool sessions reset now."""
        with self._lock:
            tab = self._tabs.pop(_tab_key(session_hash, username, browser), None)
        if tab is not None:
            await self.state.blocking(self.state.apps.drop, tab.user)
            for app in self.state.apps.sessions_of(tab.user).values():
                await self.state.blocking(app.reset, SESSION_ID)

    # ---- the server's models ---------------------------------------------------------------

    @property
    def models(self) -> dict[str, str]:
        return dict(self.state.settings.models)

    def app_type_of(self, model: str | None) -> str:
        models = self.models
        if model not in models:
            raise UserError(f"no app named {model!r}; this server has: {', '.join(models)} (serve_models)")
        return models[model]

    @asynccontextmanager
    async def _app(self, tab: WebUser, app_type: str) -> AsyncIterator[Any]:
        apps = self.state.apps
        app = await self.state.blocking(apps.acquire, tab.user, app_type)
        try:
            tab.offered.setdefault(app_type, list(app.tool_names))
            yield app
        finally:
            apps.release(tab.user, app_type)

    # ---- settings ----------------------------------------------------------------------------

    def _view(self, tab: WebUser, app_type: str, app: Any) -> AppView:
        current = list(app.tool_names)
        offered = tab.offered.get(app_type, current)
        names = offered + [n for n in current if n not in offered]
        depth = getattr(getattr(app, "settings", None), "think_depth", None) if hasattr(app, "set_think_depth") \
            else None
        tab.shown.add(app_type)
        return AppView(names, [n for n in names if n in current], depth,
                       hasattr(app, "add_tool") and hasattr(app, "unregister"))

    def _configure(self, tab: WebUser, app_type: str, app: Any, depth: int | None,
                   tools: Sequence[str] | None) -> list[str]:
        """Apply the page's settings to the tab's app (blocking); returns what could not be applied."""
        with tab.settings_lock:
            return self._apply(tab, app_type, app, depth, tools)

    def _apply(self, tab: WebUser, app_type: str, app: Any, depth: int | None,
               tools: Sequence[str] | None) -> list[str]:
        notes: list[str] = []
        if depth is not None and hasattr(app, "set_think_depth"):
            app.set_think_depth(int(depth))
        toggles = hasattr(app, "add_tool") and hasattr(app, "unregister")
        if tools is None or app_type not in tab.shown or not toggles:
            return notes  # toggles the page has not shown yet (it is still loading) change nothing
        wanted = set(tools)
        shelf = tab.shelf.setdefault(app_type, {})
        for tool in app.tools:
            if tool.name not in wanted:
                app.unregister(tool.name)  # closed: its workers end
                shelf[tool.name] = tool
        current = set(app.tool_names)
        for name in tools:
            if name in current:
                continue
            tool = shelf.pop(name, None)
            if tool is None:
                notes.append(f"{name}: not a tool of this app")
                continue
            app.add_tool(self._fresh(app, tool))
        return notes

    @staticmethod
    def _fresh(app: Any, tool: Any) -> Any:
        """A tool turned on again: built anew from the app's registry when it is one of its tools (a
        closed tool need not work again), else the tool that was turned off."""
        context = getattr(app, "context", None)
        registry = getattr(context, "registry", None)
        if context is None or registry is None or registry.resolve_name(tool.name) is None:
            return tool
        try:
            return context.build_tool(tool.name)
        except Exception:  # noqa: BLE001 - a plugin's tool: the object itself comes back
            log.debug("rebuilding %s failed; the tool turned off comes back", tool.name, exc_info=True)
            return tool

    async def view(self, tab: WebUser, model: str) -> AppView:
        app_type = self.app_type_of(model)
        async with self._app(tab, app_type) as app:
            return self._view(tab, app_type, app)

    async def configure(self, tab: WebUser, model: str, *, depth: int | None = None,
                        tools: Sequence[str] | None = None) -> tuple[AppView, list[str]]:
        app_type = self.app_type_of(model)
        async with self._app(tab, app_type) as app:
            notes = await self.state.blocking(self._configure, tab, app_type, app, depth, tools)
            return self._view(tab, app_type, app), notes

    async def settled(self, tab: WebUser, seconds: float = 10.0) -> None:
        """Wait (up to ``seconds``) until the tab has no question running."""
        try:
            await asyncio.wait_for(tab.lock.acquire(), seconds)
        except asyncio.TimeoutError:
            return
        tab.lock.release()

    async def reset(self, tab: WebUser) -> None:
        """Forget the tab's conversation and its tools' state, in every app it has."""
        tab.transcript.clear()
        for app in self.state.apps.sessions_of(tab.user).values():
            await self.state.blocking(app.reset, SESSION_ID)

    # ---- asking --------------------------------------------------------------------------------

    def check_upload(self, path: str) -> str:
        """A file handed in through the page: it must be one the page received (Gradio's upload folder),
        never a path a client made up."""
        resolved = Path(path).resolve()
        if self.upload_root is not None:
            try:
                resolved.relative_to(self.upload_root)
            except ValueError:
                raise UserError(f"{Path(path).name}: only files uploaded through this page can be handed over") from None
        if not resolved.is_file():
            raise UserError(f"{Path(path).name}: the uploaded file is gone; upload it again")
        return str(resolved)

    def _shown(self, path: Path) -> Path:
        """The copy of a workspace file the page shows (blocking): in the outbox, named by its content, so
        it is copied once however often the chat is drawn again, and the workspace is never served."""
        if self.outbox is None:
            return path
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        target = self.outbox / digest.hexdigest()[:32] / path.name
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = target.with_name(f".{target.name}.{threading.get_ident()}")
            shutil.copyfile(path, staging)
            os.replace(staging, target)
        self.copies.add(str(target))
        return target

    async def ask(self, tab: WebUser, model: str, text: str, files: Sequence[str] = (), *,
                  depth: int | None = None, tools: Sequence[str] | None = None) -> AsyncIterator[list[dict]]:
        """Run a question in the tab's app; yields what the chat shows, as it changes."""
        text = (text or "").strip()
        files = list(files or ())
        if not text and not files:
            return
        async with tab.lock:
            shown = user_messages(text, files)
            tab.transcript.extend(shown)
            yield list(tab.transcript)
            try:
                app_type = self.app_type_of(model)
                uploads = [self.check_upload(p) for p in files]
            except UserError as exc:
                tab.transcript.append(error_message(str(exc)))
                yield list(tab.transcript)
                return
            state = self.state
            if not state.slots.take():
                tab.transcript.append(error_message(
                    f"the server is running {state.slots.limit} questions (serve_max_concurrent_runs); "
                    f"ask again in a moment"))
                yield list(tab.transcript)
                return
            try:
                async for messages in self._run(tab, app_type, text or "What is in this file?", uploads,
                                                depth, tools):
                    yield tab.transcript + messages
            finally:
                state.slots.give()
            yield list(tab.transcript)

    async def _run(self, tab: WebUser, app_type: str, question: str, uploads: list[str], depth: int | None,
                   tools: Sequence[str] | None) -> AsyncIterator[list[dict]]:
        state = self.state
        transcript: Transcript | None = None
        try:
            async with self._app(tab, app_type) as app:
                notes = await state.blocking(self._configure, tab, app_type, app, depth, tools)
                handed = []
                language = detect_language(question, getattr(app, "prompt_language", "auto"))
                for path in uploads:  # announced to the session like files= does; the names tell them apart
                    handed.append(await state.blocking(
                        lambda p=path: app.add_file(p, session_id=SESSION_ID, language=language)))
                transcript = Transcript(_mode(app))
                if notes:
                    transcript.messages.append(error_message("; ".join(notes)))
                started = time.time()
                run = app.astream(question, session_id=SESSION_ID)
                shown_at = 0.0
                try:
                    async for event in _limited(run, state.settings.request_timeout_s):
                        transcript.feed(event)
                        now = time.monotonic()
                        if event.kind != "token" or now - shown_at >= STREAM_EVERY_S:
                            shown_at = now
                            yield list(transcript.messages)
                finally:
                    await run.aclose()
                result = run.result
                if result is None:
                    transcript.finish("the run ended without an answer")
                else:
                    workspace = state.apps.workspace(tab.user)
                    made = await state.blocking(_made_files, result.output, transcript.observations, workspace,
                                                started, set(handed))
                    shown = [await state.blocking(self._shown, workspace / name) for name in made]
                    transcript.messages.extend(file_message(path) for path in shown)
        except asyncio.TimeoutError:
            transcript = transcript or Transcript()
            transcript.finish(f"the run took longer than {state.settings.request_timeout_s:g} s and was stopped "
                              f"(serve_request_timeout_s)")
        except (asyncio.CancelledError, GeneratorExit):  # the page's Stop, or the tab went away
            if transcript is not None:
                transcript.finish("stopped")
                tab.transcript.extend(transcript.messages)
            raise
        except Exception as exc:  # noqa: BLE001 - shown in the chat, never a traceback
            log.warning("a run from the page failed: %s", exc, exc_info=not isinstance(exc, (RunError, UserError)))
            transcript = transcript or Transcript()
            transcript.finish(_run_error(exc))
        tab.transcript.extend(transcript.messages)


async def _limited(run: Any, seconds: float) -> AsyncIterator[Any]:
    """The run's events; past ``seconds`` (0: no limit) ``asyncio.TimeoutError`` (the run is cancelled)."""
    if seconds <= 0:
        async for event in run:
            yield event
        return
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while True:
        left = end - loop.time()
        if left <= 0:
            raise asyncio.TimeoutError
        try:
            event = await asyncio.wait_for(run.__anext__(), left)
        except StopAsyncIteration:
            return
        yield event


def _made_files(output: str, observations: list[str], workspace: Path, started: float,
                handed: set[str]) -> list[str]:
    """The workspace files the run named: in its answer, or in an observation when the run wrote them; never
    the files handed in with the question."""
    named = find_files([output], workspace)
    made = find_files(observations, workspace, since=started)
    return [n for n in dict.fromkeys(named + made) if n not in handed]
