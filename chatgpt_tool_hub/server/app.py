"""``create_server``: the FastAPI app of ``tool-hub serve``.

Routes: ``POST /v1/chat/completions`` (OpenAI's chat API, stream or not),
``GET /v1/models``, ``GET /healthz``, ``GET /files/<user>/<path>`` (signed
links to files the tools wrote), and JARVIS's ``POST /hugginggpt``, ``/tasks``
and ``/results`` for the planner. The web page (``web=True``; ``tool-hub serve``
follows ``serve_web``) is mounted at ``/`` by ``chatgpt_tool_hub.web.mount(app, state)``;
it finds everything it needs in ``app.state.tool_hub`` (a :class:`ServerState`).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import FileResponse

from ..apps.factory import AppFactory
from ..errors import ConfigError
from ..llm.base import LLM
from ..tools.base import Tool
from .asgi import ApiError, RunResponse, Slots, error_response, read_json
from .chat import RunContext, announce, parse_request, prepare_images, run_chat
from .files import resolve_download, served_as
from .settings import ServeSettings, parse_web
from .users import User, UserApps, identify

__all__ = ["create_server", "ServerState"]

log = logging.getLogger("chatgpt_tool_hub.server")
PRUNE_EVERY_S = 30.0


@dataclass
class ServerState:
    """What the server holds; a web page mounted on the app uses the same (``app.state.tool_hub``)."""

    settings: ServeSettings
    apps: UserApps
    slots: Slots
    executor: ThreadPoolExecutor
    config: dict

    def user_of(self, authorization: str | None, user: Any = None) -> User:
        found = identify(authorization, user, self.settings.api_keys)
        if found is None:
            raise ApiError(401, "a valid API key is needed: send Authorization: Bearer <key> (serve_api_keys)",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        return found

    def take_slot(self) -> None:
        if not self.slots.take():
            raise ApiError(429, f"the server is running {self.slots.limit} requests (serve_max_concurrent_runs); "
                                f"try again in a moment", kind="rate_limit_exceeded", code="rate_limit_exceeded",
                           headers={"Retry-After": "1"})

    async def blocking(self, func: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, func, *args)


def create_server(*, llm: LLM | None = None, llm_factory: Callable[[], LLM] | None = None,
                  tools_list: Sequence[str | Tool] | None = None, web: bool | str | None = False,
                  **settings: Any) -> Any:
    """The FastAPI app. ``settings`` are any ``create_app`` keywords and ``serve_*`` settings (with the
    usual precedence: these keywords > environment > .env > config.json > defaults). ``llm`` is shared by
    every user's apps (default: the configured LLM, built once); ``llm_factory()`` gives each app its own
    (tests). ``tools_list``: the apps' tools (default: config.json's, else the default tools). ``web``: the
    web page at ``/`` (``True``, ``False``, ``"auto"``: when Gradio is installed; ``None``: the ``serve_web``
    setting, as ``tool-hub serve`` does)."""
    factory = AppFactory()
    config = factory.resolve_settings(**settings)
    serve = ServeSettings.from_config(config.values)
    if llm is None and llm_factory is None:
        llm = factory.create_llm(config)  # one client, one connection pool, for every user
    executor = ThreadPoolExecutor(max(8, serve.max_concurrent_runs + 4), thread_name_prefix="tool-hub-serve")
    passed = {k: v for k, v in settings.items() if not k.startswith("serve_")}

    def build(user: User, app_type: str, workspace: Path) -> Any:
        # a user's code can write the schedules file in its workspace: it never starts runs of its own here
        return factory.create_app(app_type, tools_list, llm=llm if llm_factory is None else llm_factory(),
                                  **{**passed, "workspace_dir": str(workspace), "schedules_resume": False})

    apps = UserApps(build, serve.workspace_root, max_users=serve.max_users, ttl_s=serve.user_ttl_s,
                    executor=executor)
    state = ServerState(serve, apps, Slots(serve.max_concurrent_runs), executor, dict(config.values))

    @asynccontextmanager
    async def lifespan(_app: Any):
        pruner = asyncio.ensure_future(_prune_forever(state))
        try:
            yield
        finally:
            pruner.cancel()
            await asyncio.get_running_loop().run_in_executor(None, apps.close)  # python workers end here
            executor.shutdown(wait=False)

    app = FastAPI(title="tool-hub", description="chatgpt_tool_hub over HTTP: OpenAI's chat API and "
                  "JARVIS's planner API", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.tool_hub = state

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError):
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_request: Request, exc: RequestValidationError):
        return error_response(ApiError(400, f"the request is not valid: {exc.errors()[:1]}"))

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "runs": state.slots.used, "users": len(apps.users())}

    @app.get("/v1/models")
    async def models(request: Request):
        state.user_of(request.headers.get("authorization"))
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "tool-hub",
                                            "app_type": app_type} for name, app_type in serve.models.items()]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        authorization = request.headers.get("authorization")
        state.user_of(authorization)  # 401 before the body is read
        body = await read_json(request, serve.max_body_bytes)
        chat = parse_request(body, serve.models)
        user = state.user_of(authorization, chat.user)
        state.take_slot()
        workspace = apps.workspace(user)

        def prepare() -> tuple[list[str], Any]:  # the blocking part, in one trip to a thread
            workspace.mkdir(parents=True, exist_ok=True)
            names = prepare_images(chat, workspace, max_bytes=serve.max_body_bytes,
                                   allow_private=serve.allow_private_images)
            return names, apps.acquire(user, chat.app_type)

        try:
            names, user_app = await state.blocking(prepare)
        except BaseException:
            state.slots.give()
            raise

        def done() -> None:
            apps.release(user, chat.app_type)
            state.slots.give()

        try:
            history = list(chat.history)
            if names:
                history += await state.blocking(announce, user_app, names, chat.question)
        except BaseException:
            done()
            raise
        context = RunContext(user_app, chat, history, f"user-{user.folder}", workspace, user.folder,
                             str(request.base_url), serve.link_secret, serve.request_timeout_s)
        return RunResponse(lambda send: run_chat(context, send), done)

    @app.get("/files/{folder}/{name:path}")
    async def files(folder: str, name: str, sig: str | None = None):
        path = resolve_download(serve.workspace_root, serve.link_secret, folder, name, sig)
        if path is None:
            raise ApiError(404, "no such file, or the link is not valid", code="not_found")
        media_type, headers = served_as(path)
        return FileResponse(path, media_type=media_type, headers=headers)

    from .jarvis import add_jarvis_routes

    add_jarvis_routes(app, state)
    mode = serve.web if web is None else parse_web(web)
    if mode != "off":
        from ..web import MISSING, available, mount

        if available():
            mount(app, state)
        elif mode == "on":
            raise ConfigError(MISSING, key="serve_web")
        else:
            log.info("no web page: %s", MISSING)
    return app


async def _prune_forever(state: ServerState) -> None:
    """Close idle users' apps and evict idle sessions now and then (also when no request comes)."""
    while True:
        await asyncio.sleep(PRUNE_EVERY_S)
        try:
            await state.blocking(state.apps.prune)
            for app in state.apps.all_apps():
                await state.blocking(app.prune_sessions)
        except Exception:  # noqa: BLE001 - never let the pruner die
            log.debug("pruning failed", exc_info=True)
