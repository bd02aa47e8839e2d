"""The Gradio page: a chat with the inner monologue, uploads, the tool list, the think depth, the app type.

Built by :func:`build_page` and mounted at ``/`` of the server's FastAPI app by
:func:`mount` (``chatgpt_tool_hub.web.mount``). The page makes no request to
another host: no analytics, no share link, no run history, no server-side
rendering; the theme's fonts are served by the page itself.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import threading
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import gradio as gr

from ..server.asgi import BodyLimit, SecurityHeaders
from ..server.guard import browser_id
from .users import APP_LABELS, WebUsers

__all__ = ["build_page", "mount"]

API_PATHS = ("/v1/", "/files/", "/hugginggpt", "/tasks", "/results", "/healthz")  # they check their own bodies
# what a chat message can make the browser do: nothing with another host. Model answers and tool output are
# markdown the page renders (Gradio sanitises scripts away, not images or forms): an image from another host
# would leak what its URL holds without a click, a form could post a key elsewhere
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
                               "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
                               "media-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
                               "form-action 'self'; frame-ancestors 'self'; base-uri 'self'; object-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

CSS = """
#tool-hub-chat .message-wrap { font-size: 0.95rem; }
footer { display: none !important; }
"""
PLACEHOLDER = ("**tool-hub**: ask anything; the model thinks aloud, uses the tools on the right and answers. "
               "Attach an image or a WAV file with the clip.")


def _who(request: gr.Request) -> tuple[str, str | None, str]:
    """``(session id, login name, browser id)`` of a page request: what a tab is keyed by."""
    return request.session_hash or "anonymous", getattr(request, "username", None), browser_id(
        getattr(request, "cookies", None))


def _tab(users: WebUsers, request: gr.Request) -> Any:
    return users.tab(*_who(request))


def _view_updates(view: Any) -> tuple[Any, Any]:
    tools = gr.CheckboxGroup(choices=view.tools, value=view.enabled, interactive=view.toggles,
                             info=None if view.toggles else "this app picks its tools itself")
    if view.depth is None:
        depth = gr.Slider(interactive=False, info="the planner plans its own steps")
    else:
        depth = gr.Slider(value=view.depth, maximum=max(30, view.depth), interactive=True,
                          info="tool calls per question at most")
    return tools, depth


def _message_of(message: Any) -> tuple[str, list[str]]:
    """The text and the file paths of a MultimodalTextbox value (paths, or file dicts with a ``path``)."""
    if not isinstance(message, dict):
        return "", []
    files = []
    for item in message.get("files") or []:
        path = item.get("path") if isinstance(item, dict) else item
        if isinstance(path, str) and path:
            files.append(path)
    text = message.get("text")
    return (text if isinstance(text, str) else ""), files


def _depth_of(value: Any) -> int | None:
    try:
        depth = int(float(value))
    except (TypeError, ValueError):
        return None
    return depth if 0 <= depth <= 1000 else None


def _names_of(value: Any) -> list[str] | None:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else None


def build_page(users: WebUsers) -> gr.Blocks:
    """The page's Blocks over ``users`` (the server's tabs)."""
    models = users.models
    choices = [(f"{name} ({APP_LABELS.get(app_type, app_type)})", name) for name, app_type in models.items()]
    first = next(iter(models))
    runs = max(1, users.state.settings.max_concurrent_runs)

    idle = gr.MultimodalTextbox(submit_btn=True, stop_btn=False)  # the box's update once a question ended

    with gr.Blocks(title="tool-hub", analytics_enabled=False, fill_height=True,
                   delete_cache=cache_lifetime(users.state.settings.user_ttl_s)) as page:
        with gr.Row(equal_height=False):
            with gr.Column(scale=4):
                chat = gr.Chatbot(elem_id="tool-hub-chat", label="tool-hub", height="70vh", buttons=["copy_all"],
                                  placeholder=PLACEHOLDER, feedback_options=None, group_consecutive_messages=False)
                box = gr.MultimodalTextbox(elem_id="tool-hub-ask", show_label=False, file_count="multiple",
                                           file_types=["image", ".wav"], sources=["upload"], stop_btn=False,
                                           placeholder="Ask a question (attach an image or a WAV file)")
            with gr.Column(scale=1, min_width=240):
                model = gr.Radio(choices=choices, value=first, label="App", elem_id="tool-hub-app")
                depth = gr.Slider(0, 30, step=1, value=10, label="Think depth", elem_id="tool-hub-depth")
                tools = gr.CheckboxGroup(choices=[], value=[], label="Tools", elem_id="tool-hub-tools")
                reset = gr.Button("Reset", variant="secondary", elem_id="tool-hub-reset")
                note = gr.Markdown("", elem_id="tool-hub-note")

        async def on_load(model_name: str, request: gr.Request):
            tab = _tab(users, request)
            view = await users.view(tab, model_name)
            return (*_view_updates(view), list(tab.transcript))

        async def on_model(model_name: str, request: gr.Request):
            view = await users.view(_tab(users, request), model_name)
            return (*_view_updates(view), "")

        async def on_settings(model_name: str, depth_value: Any, enabled: Any, request: gr.Request):
            view, notes = await users.configure(_tab(users, request), model_name, depth=_depth_of(depth_value),
                                                tools=_names_of(enabled))
            return (*_view_updates(view), "; ".join(notes))

        async def on_reset(request: gr.Request):
            await users.reset(_tab(users, request))
            return [], "the conversation and the tools' state were reset"

        async def on_ask(message: Any, model_name: Any, depth_value: Any, enabled: Any, request: gr.Request):
            tab = _tab(users, request)
            text, files = _message_of(message)
            running = gr.MultimodalTextbox(value=None, submit_btn=False, stop_btn=True)  # Stop while it runs
            yield list(tab.transcript), running
            async for shown in users.ask(tab, str(model_name), text, files, depth=_depth_of(depth_value),
                                         tools=_names_of(enabled)):
                yield shown, running
            yield list(tab.transcript), idle

        async def on_stop(request: gr.Request):
            tab = _tab(users, request)
            await users.settled(tab)  # the cancelled run has written what it showed, "stopped" last
            return list(tab.transcript), idle

        async def on_unload(request: gr.Request):
            await users.close_tab(*_who(request))

        page.load(on_load, inputs=[model], outputs=[tools, depth, chat], api_visibility="private")
        model.change(on_model, inputs=[model], outputs=[tools, depth, note], api_visibility="private")
        for control in (depth.release, tools.input):
            control(on_settings, inputs=[model, depth, tools], outputs=[tools, depth, note],
                    api_visibility="private")
        reset.click(on_reset, outputs=[chat, note], api_visibility="private")
        chat.clear(on_reset, outputs=[chat, note], api_visibility="private")  # the chat's own bin button
        asking = box.submit(on_ask, inputs=[box, model, depth, tools], outputs=[chat, box],
                            concurrency_limit=runs, api_visibility="private")
        box.stop(None, cancels=[asking])  # first the cancel, then the chat as the cancelled run left it
        box.stop(on_stop, outputs=[chat, box], api_visibility="private")
        page.unload(on_unload)
    page.queue(default_concurrency_limit=runs)
    return page


def cache_lifetime(ttl_s: float) -> tuple[int, int]:
    """Gradio's ``delete_cache`` (every ``frequency`` seconds, files older than ``age`` go): uploads and the
    copies of shown files live as long as an idle user's app (``session_ttl_s``; a day when that is 0),
    swept every hour at most; all of them go when the server stops."""
    age = int(ttl_s) if ttl_s and ttl_s > 0 else 86400
    age = max(age, 60)
    return min(age, 3600), age


class Logins:
    """The page's login with a server that has keys: a name and one of the keys as the password.

    A login name belongs to the key that first logged in with it (for the server's lifetime): another key's
    login with the same name is refused, so a name always means one key, and a tab's user is that key's
    (its digest: the same key id the API's users of that key have, so the per-key caps count both)."""

    def __init__(self, keys: tuple[str, ...]):
        self._keys = tuple(keys)
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()

    def check(self, username: str, password: str) -> bool:
        given = str(password).encode("utf-8", "surrogatepass")
        for key in self._keys:
            if hmac.compare_digest(given, key.encode()):
                digest = hashlib.sha256(key.encode()).hexdigest()[:12]
                with self._lock:
                    return self._owners.setdefault(str(username), digest) == digest
        return False

    def key_of(self, username: str | None) -> str:
        """The key id of a logged-in name ("" for a name nobody logged in with)."""
        with self._lock:
            return self._owners.get(str(username), "") if username is not None else ""


def mount(app: Any, state: Any) -> Any:
    """Mount the page at ``/`` of ``app`` (the server's FastAPI app; ``state`` its ServerState)."""
    from gradio.utils import get_upload_folder

    upload_root = Path(get_upload_folder())
    outbox = upload_root / "tool-hub-web" / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"  # this process's copies
    users = WebUsers(state, upload_root=upload_root, outbox=outbox)
    page = build_page(users)
    page.temp_file_sets.append(users.copies)
    keys = state.settings.api_keys
    logins = Logins(keys) if keys else None
    auth = logins.check if logins is not None else None
    if logins is not None:
        users.principal_of = logins.key_of
    gr.mount_gradio_app(app, page, path="/", auth=auth, footer_links=[], run_history=False, ssr_mode=False,
                        mcp_server=False, show_error=True, max_file_size=state.settings.max_body_bytes,
                        server_name=state.settings.host, server_port=state.settings.port,
                        auth_message="Log in with a name and one of the server's API keys (serve_api_keys) "
                                     "as the password; a name belongs to the key that first logged in with it."
                        if keys else None,
                        css=CSS)
    # Gradio checks the files an event takes in (only uploads) and hands out (no path outside the working
    # folder, the temp folder and its cache) once it was launched; mount_gradio_app never sets that flag, so
    # a client could name any file on the server as an "upload". The page is served: the checks are on.
    page.has_launched = True
    # the page's requests (a question's text is an event's data) get the API's body limit; uploads have
    # Gradio's own, the same number (a little slack for the multipart framing)
    app.add_middleware(BodyLimit, limit=state.settings.max_body_bytes + 65_536, skip=API_PATHS)
    app.add_middleware(SecurityHeaders, headers=PAGE_HEADERS, skip=API_PATHS)
    _remove_on_stop(app, outbox)
    app.state.tool_hub_web = users
    return app


def _remove_on_stop(app: Any, folder: Path) -> None:
    """When ``app`` stops (after Gradio deleted the files it made), ``folder`` goes too."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(target: Any):
        try:
            async with inner(target) as state:
                yield state
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    app.router.lifespan_context = lifespan
