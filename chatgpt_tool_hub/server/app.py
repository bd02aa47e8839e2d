"""``create_server``: the FastAPI app of ``tool-hub serve``.

Routes: ``POST /v1/chat/completions`` (OpenAI's chat API, stream or not), ``POST /v1/responses`` (OpenAI's
Responses API over the same run, see ``responses.py``),
``GET /v1/models``, ``GET /healthz``, ``GET /files/<user>/<path>`` (signed
links to files the tools wrote), and JARVIS's ``POST /hugginggpt``, ``/tasks``
and ``/results`` for the planner. The web page (``web=True``; ``tool-hub serve``
follows ``serve_web``) is mounted at ``/`` by ``chatgpt_tool_hub.web.mount(app, state)``;
it finds everything it needs in ``app.state.tool_hub`` (a :class:`ServerState`).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse

from ..apps.factory import AppFactory
from ..errors import ConfigError
from ..llm.base import LLM
from ..runtime.contained import Cancellation
from ..tools.base import Tool
from .asgi import ApiError, RunResponse, Slots, error_response, read_json, send_json, timeout_error, with_deadline
from .chat import Renderer, RunContext, announce, parse_request, prepare_images, run_chat
from .client_tools import Pauses
from .files import resolve_download, served_as
from .guard import Boundary, BoundaryPolicy
from .links import link_base
from .passthrough import direct_job, direct_request
from .responses import NOT_KEPT, parse_responses_request
from .responses_render import ResponsesRenderer
from .routing import add_fallback_routes, http_error
from .settings import ServeSettings, parse_web
from .tenancy import app_settings, check_shared_trust, served_code_tools
from .users import User, UserApps, end_user, identify

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
    pauses: Pauses = field(default_factory=Pauses)  # runs paused on a client's tools, until their results come

    def user_of(self, authorization: str | None, user: Any = None) -> User:
        token = self.settings.local_token
        if token is not None and not self.settings.api_keys:  # a keyless server: its token is the only key
            scheme, _, given = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
                raise ApiError(401, "this server wants its local token as the API key: send Authorization: "
                                    "Bearer <token> (tool-hub serve printed it when it started)",
                               code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
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
    check_shared_trust(serve.api_keys, served_code_tools(factory.registry, tools_list, config), serve.shared_trust)
    if llm is None and llm_factory is None:
        llm = factory.create_llm(config)  # one client, one connection pool, for every user
    executor = ThreadPoolExecutor(max(8, serve.max_concurrent_runs + 4), thread_name_prefix="tool-hub-serve")
    passed = {k: v for k, v in settings.items() if not k.startswith("serve_")}
    passed = {**app_settings(config.values, serve.max_python_workers), **passed}  # shared by every user's app

    def build(user: User, app_type: str, workspace: Path) -> Any:
        # a user's code can write the schedules file in its workspace: it never starts runs of its own here
        return factory.create_app(app_type, tools_list, llm=llm if llm_factory is None else llm_factory(),
                                  **{**passed, "workspace_dir": str(workspace), "schedules_resume": False})

    apps = UserApps(build, serve.workspace_root, max_users=serve.max_users, ttl_s=serve.user_ttl_s,
                    executor=executor)
    apps.configure_tenancy(serve)
    state = ServerState(serve, apps, Slots(serve.max_concurrent_runs), executor, dict(config.values))

    @asynccontextmanager
    async def lifespan(_app: Any):
        pruner = asyncio.ensure_future(_prune_forever(state))
        from ..tools.plugins.mcp_tools import SharedServers

        shared_mcp = SharedServers(config.values).start()  # "shared" MCP servers: one per process, from now
        try:
            yield
        finally:
            pruner.cancel()
            await asyncio.get_running_loop().run_in_executor(None, apps.close)  # python workers end here
            await asyncio.get_running_loop().run_in_executor(None, shared_mcp.close)  # after the users' apps
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

    app.add_exception_handler(HTTPException, http_error)  # the router's 404 and 405, in OpenAI's shape

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "runs": state.slots.used, "users": len(apps.users())}

    @app.get("/v1/models")
    async def models(request: Request):
        state.user_of(request.headers.get("authorization"))
        return {"object": "list", "data": [_model(name, app_type) for name, app_type in serve.listed_models().items()]}

    @app.get("/v1/models/{model:path}")
    async def model(request: Request, model: str):
        state.user_of(request.headers.get("authorization"))
        listed = serve.listed_models()  # the same objects as the list
        if model not in listed:
            raise ApiError(404, f"the model {model[:100]!r} does not exist; GET /v1/models lists the models of "
                                f"this server (serve_models)", code="model_not_found")
        return _model(model, listed[model])

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        authorization = request.headers.get("authorization")
        state.user_of(authorization)  # 401 before the body is read
        body = await read_json(request, serve.max_body_bytes)
        direct = direct_request(body, serve)  # the direct model, or a chat UI's own task prompt: no tools
        if direct is not None:
            state.take_slot()
            return RunResponse(*direct_job(state, direct, llm if llm_factory is None else llm_factory()))
        chat = parse_request(body, serve.models)
        user = state.user_of(authorization, chat.user)
        user = end_user(user, request.headers, serve.user_header, serve.session_header,
                        bool(serve.api_keys or serve.local_token))  # a trusted chat UI's end user and chat
        state.take_slot()
        return RunResponse(*_chat_job(state, chat, user, link_base(request.scope, serve.public_url,
                                                                   serve.trust_proxy)))

    @app.post("/v1/responses")
    async def responses(request: Request):
        authorization = request.headers.get("authorization")
        state.user_of(authorization)  # 401 before the body is read
        body = await read_json(request, serve.max_body_bytes)
        asked = parse_responses_request(body, serve.models)  # the same run as a chat request: see responses.py
        user = state.user_of(authorization, asked.chat.user)
        user = end_user(user, request.headers, serve.user_header, serve.session_header,
                        bool(serve.api_keys or serve.local_token))
        state.take_slot()
        return RunResponse(*_chat_job(state, asked.chat, user, link_base(request.scope, serve.public_url,
                                                                         serve.trust_proxy),
                                      ResponsesRenderer(asked)))

    @app.api_route("/v1/responses/{response_id:path}", methods=["GET", "DELETE"])
    async def stored_response(request: Request, response_id: str):
        state.user_of(request.headers.get("authorization"))
        raise ApiError(404, f"no response {response_id[:100]!r}: {NOT_KEPT}", code="not_found")

    @app.api_route("/files/{folder}/{name:path}", methods=["GET", "HEAD"])  # HEAD: clients probe before embedding
    async def files(folder: str, name: str, sig: str | None = None, exp: str | None = None):
        path = resolve_download(serve.workspace_root, serve.link_secret, folder, name, sig, exp)
        if path is None:
            raise ApiError(404, "no such file, or the link is not valid", code="not_found")
        media_type, headers = served_as(path)
        return FileResponse(path, media_type=media_type, headers=headers)

    from .jarvis import add_jarvis_routes

    add_jarvis_routes(app, state)
    add_fallback_routes(app)  # after the API's routes, before the page that takes every other path
    mode = serve.web if web is None else parse_web(web)
    if mode != "off":
        from ..web import MISSING, available, mount

        if available():
            mount(app, state)
        elif mode == "on":
            raise ConfigError(MISSING, key="serve_web")
        else:
            log.info("no web page: %s", MISSING)
    # outermost: the host, the origin and (keyless) the local token are checked before anything else runs
    app.add_middleware(Boundary, policy=BoundaryPolicy.of(
        bind_host=serve.host, allowed_hosts=serve.allowed_hosts, allowed_origins=serve.allowed_origins,
        token=serve.local_token, jarvis_origins=serve.jarvis_origins))
    return app


def _model(name: str, app_type: str) -> dict[str, Any]:
    """A model of ``serve_models`` as OpenAI's model object."""
    return {"id": name, "object": "model", "created": 0, "owned_by": "tool-hub", "app_type": app_type}


def _chat_job(state: ServerState, chat: Any, user: User, base_url: str,
              renderer: Renderer | None = None) -> tuple[Callable[..., Any], Callable[[], None]]:
    """The job of one chat request and its ``done``. Everything after the request was read runs inside the
    job, so the client going away and the request's time limit stop it too: copying and decoding the images
    it carries (in a killable child, see ``prepare_images``), getting the user's app, the run. ``renderer``:
    the answer's wire format (default: chat completions; the Responses API's for ``/v1/responses``)."""
    serve, apps = state.settings, state.apps
    workspace = apps.workspace(user)
    cancellation = Cancellation() if chat.images else None  # only images are decoded before the run
    lock = threading.Lock()
    held = [False, False]  # [the app is acquired, the request has ended]

    handed: set[str] = set()  # the files of the request's own question, once in the workspace

    def prepare(deadline: float | None) -> tuple[Any, list[dict]]:  # the blocking part, in one trip to a thread
        workspace.mkdir(parents=True, exist_ok=True)
        names = prepare_images(chat, workspace, max_bytes=serve.max_body_bytes,
                               allow_private=serve.allow_private_images, max_pixels=serve.max_image_pixels,
                               cancellation=cancellation, deadline=deadline) if chat.images else []
        user_app = apps.acquire(user, chat.app_type)
        with lock:
            if held[1]:  # the request ended while this thread was busy: give the app back at once
                apps.release(user, chat.app_type)
                raise ApiError(499, "the client went away", code="cancelled")
            held[0] = True
        history = list(chat.history)
        if names:
            history += announce(user_app, names, chat.question)
            handed.update(name for _, name in names)
        return user_app, history

    def done() -> None:
        if cancellation is not None:
            cancellation.cancel()  # children still decoding for this request are killed
        with lock:
            held[1] = True
            acquired, held[0] = held[0], False
        if acquired:
            apps.release(user, chat.app_type)
        state.slots.give()

    async def job(send: Any) -> None:
        limit = serve.request_timeout_s
        deadline = time.monotonic() + limit if limit > 0 else None
        try:
            if cancellation is None:  # nothing to decode: getting the user's app is quick
                timed_out, prepared = False, await state.blocking(prepare, deadline)
            else:
                timed_out, prepared = await with_deadline(state.blocking(prepare, deadline), limit)
        except ApiError as exc:
            return await send_json(send, exc.status, exc.payload())
        if timed_out:
            if cancellation is not None:
                cancellation.cancel()
            error = timeout_error(limit)
            return await send_json(send, error.status, error.payload())
        user_app, history = prepared
        left = max(0.001, deadline - time.monotonic()) if deadline is not None else 0.0
        context = RunContext(user_app, chat, history, user.session_id, workspace, user.folder,
                             base_url, serve.link_secret, left, serve.link_ttl_s, handed=frozenset(handed))
        if not chat.client.empty:  # the client's own tools; its tool results resume the run they paused
            kept = f"{user.session_id}/{chat.model}"
            context.external = chat.client.turn(state.pauses.take(kept, chat.client.rounds))
            context.keep_pause = lambda paused: state.pauses.keep(kept, paused)
        await run_chat(context, send, renderer)

    return job, done


async def _prune_forever(state: ServerState) -> None:
    """Close idle users' apps and evict idle sessions now and then (also when no request comes)."""
    while True:
        await asyncio.sleep(PRUNE_EVERY_S)
        try:
            await state.blocking(state.apps.prune)
            await state.blocking(state.apps.prune_folders)
            for app in state.apps.all_apps():
                await state.blocking(app.prune_sessions)
        except Exception:  # noqa: BLE001 - never let the pruner die
            log.debug("pruning failed", exc_info=True)
