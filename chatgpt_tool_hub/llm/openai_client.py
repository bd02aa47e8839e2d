"""The OpenAI-compatible chat client: OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp…

Built on the ``openai`` package (imported lazily, on first use) with the
package's own retries turned off: the client retries by itself, with
exponential backoff and full jitter, on 408/409/429/5xx, timeouts and
connection errors, honouring ``Retry-After`` / ``retry-after-ms``. Errors come
out as :mod:`chatgpt_tool_hub.errors` types whose messages name the setting to
fix -- and never contain the API key.

Native tool calls: ``complete`` / ``stream`` take ``tools=[...]`` (OpenAI
function schemas) and send them with ``tool_choice="auto"``; the calls come
back in ``LLMResponse.tool_calls`` (streamed deltas are put together by index
and delivered on the last chunk). Messages with ``tool_calls`` and ``tool``
messages are sent as they are.

The async path: ``acomplete`` / ``astream`` use ``openai.AsyncOpenAI`` (one
client per event loop, each with its own connection pool) with the same
retries, error mapping and parsing; no thread waits for the server.

What a request does -- its parameters, the retries, the error mapping, reading
the answer -- is written once, as a plan with no I/O (:mod:`.request_plan`);
this module holds the ``openai`` clients and the two drivers that run a plan:
one with the sync client and ``time.sleep``, one with the async client and
``asyncio.sleep``.

Responses are read raw (``with_raw_response``, ``with_streaming_response``):
the body, or each streamed event, is parsed as JSON into dicts
(:mod:`.openai_stream`), not built into the package's typed objects, with the
package's error behaviour kept.
``with_options(temperature=..., max_tokens=...)`` is a copy for one request
that shares the clients.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from typing import Any, AsyncGenerator, AsyncIterator, Iterator, Sequence

from ..config import proxy_url
from ..errors import ConfigError, UserError
from ..redact import Redactor
from .base import BaseLLM, LLMResponse, Message, StreamChunk
from .http_pools import pooled_async_client, sync_client
from .openai_parts import (
    OPENAI_BASE_URL,
    _aclose,
    _blank_to_none,
    _chain_mentions,  # noqa: F401 - a name callers import from here
    _close,
    _is_openai_url,
    _json_body,
    _request,
    _safe_url,
    _Secret,
    parse_retry_after,
)
from .openai_stream import aiter_payloads, iter_payloads
from .request_plan import CLOSE, MAX_STOP_SEQUENCES, READ, Plan, RequestPlans, Send, Wait
from .servers import PROFILES, ServerProfile, classify, guess_from_url, profile_named

__all__ = ["OpenAICompatibleLLM", "MAX_STOP_SEQUENCES", "parse_retry_after"]

NO_KEY_PLACEHOLDER = "no-key-required"  # sent to servers that need no key (Ollama, vLLM…)

CONSTRAINED_MODES = ("auto", "on", "off")
_PROBE_TIMEOUT_S = 30.0  # GET /models, to tell which server it is (a busy llama.cpp server takes seconds)
logger = logging.getLogger("chatgpt_tool_hub.llm")

_sleep = time.sleep  # patched in tests
_asleep = asyncio.sleep  # the async path's, patched in tests


# --- the client ---------------------------------------------------------------------------


class OpenAICompatibleLLM(RequestPlans, BaseLLM):
    """Chat completions from any OpenAI-compatible endpoint.

    ``max_retries`` is the number of retries after the first attempt. Empty
    strings for ``api_key``, ``base_url``, ``proxy`` and ``deployment_id`` count
    as unset. A base URL that is not OpenAI's needs no key. With
    ``deployment_id`` the Azure OpenAI client is used (``base_url`` is the Azure
    endpoint).
    """

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None,
        base_url: str | None = None,
        temperature: float = 0.0,
        timeout: float = 120,
        max_retries: int = 3,
        proxy: str | None = None,
        deployment_id: str | None = None,
        azure_api_version: str = "2024-06-01",
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        llm_server: str = "auto",
        constrained_decoding: str = "auto",
    ) -> None:
        if not model_name and not _blank_to_none(deployment_id):
            raise ConfigError("model_name / MODEL_NAME is empty: set it to a chat model name", key="model_name")
        if max_retries < 0:
            raise ConfigError("max_retries must be >= 0", key="max_retries")
        if timeout is not None and timeout <= 0:
            raise ConfigError("request_timeout / REQUEST_TIMEOUT must be > 0 seconds", key="request_timeout")
        self.model_name = model_name or str(deployment_id)
        self._api_key = _Secret(_blank_to_none(api_key))
        self._redactor = Redactor([self._api_key.get()])  # the key in every spelling, for error texts
        self.base_url = _blank_to_none(base_url)
        self.temperature = temperature
        self.timeout = timeout
        self.max_retries = int(max_retries)
        self.proxy = proxy_url(proxy)  # host:port means http://host:port; an unusable one fails here
        self.deployment_id = _blank_to_none(deployment_id)
        self.azure_api_version = azure_api_version
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_tokens: int | None = None  # most completion tokens per call (with_options); None: the server's
        self._client: Any = None
        self._aclients: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()  # event loop -> client
        self._client_lock = threading.Lock()
        self._unsupported: set[str] = set()  # request parameters the server rejected
        # what the server is (servers.py), shared with with_options copies: named, told by the URL, or asked
        # for (GET /models) the first time it matters
        self._server: dict[str, ServerProfile | None] = {
            "profile": profile_named(llm_server) or guess_from_url(self.base_url, azure=self.deployment_id is not None)}
        self.constrained_decoding = _constraint_mode(constrained_decoding)
        self.response_schema: dict | None = None  # a JSON schema the reply must follow (with_options)

    def with_options(self, *, temperature: float | None = None, max_tokens: int | None = None,
                     response_schema: dict | None = None, **_ignored: Any) -> "OpenAICompatibleLLM":
        """A copy with other sampling settings (one request's), sharing this one's clients and key.
        ``response_schema``: a JSON schema the server is asked to keep the reply to (constrained decoding,
        sent in the server's own spelling; see :meth:`constrains_replies`)."""
        other = object.__new__(type(self))  # not copy.copy: pickling (which it uses) is refused
        other.__dict__.update(self.__dict__)
        # one sync client (the original's); the async ones are shared already
        other.__dict__["_owner"] = self.__dict__.get("_owner", self)
        if temperature is not None:
            other.temperature = float(temperature)
        if max_tokens is not None:
            other.max_tokens = int(max_tokens)
        if response_schema is not None:
            other.response_schema = dict(response_schema)
        return other

    # -- the server: what it accepts ------------------------------------------------------

    def profile_now(self) -> ServerProfile:
        """The server's profile as far as it is known now (no request made): ``generic`` until found out."""
        return self._server["profile"] or PROFILES["generic"]

    def server_profile(self) -> ServerProfile:
        """The server's profile; when the setting and the URL do not tell, one ``GET /models`` (a few seconds
        at most, once per client) finds out. Never raises: a server that does not answer is ``generic``."""
        known = self._server["profile"]
        if known is not None:
            return known
        try:
            timeout = min(_PROBE_TIMEOUT_S, self.timeout or _PROBE_TIMEOUT_S)
            raw = self._get_client().with_options(timeout=timeout).models.with_raw_response.list()
            found = classify(_json_body(raw), raw.http_response.headers)
        except Exception as exc:  # noqa: BLE001 - any failure: the profile every server accepts
            return self._unknown(exc)
        self._server["profile"] = found
        return found

    def _unknown(self, exc: Exception) -> ServerProfile:
        """The profile after a ``GET /models`` that failed: ``generic``; kept when the server answered (it has
        no model list), asked again next time when it did not answer at all (busy, down, timed out)."""
        import openai

        logger.debug("could not tell which server %s is (%s)", self.endpoint, type(exc).__name__)
        if not isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
            self._server["profile"] = PROFILES["generic"]
        return PROFILES["generic"]

    async def aserver_profile(self) -> ServerProfile:
        """:meth:`server_profile` for asyncio."""
        known = self._server["profile"]
        if known is not None:
            return known
        try:
            client = (await self._get_async_client()).with_options(
                timeout=min(_PROBE_TIMEOUT_S, self.timeout or _PROBE_TIMEOUT_S))
            raw = await client.models.with_raw_response.list()
            found = classify(_json_body(raw), raw.http_response.headers)
        except Exception as exc:  # noqa: BLE001
            return self._unknown(exc)
        self._server["profile"] = found
        return found

    def constrains_replies(self) -> bool:
        """Whether replies are constrained to a JSON schema: ``constrained_decoding`` on, or auto on a server
        known to do it well (llama.cpp, vLLM, Ollama, LM Studio, TGI)."""
        if self.constrained_decoding == "off" or "response_format" in self._unsupported:
            return False
        profile = self.server_profile()
        if profile.constraint is None:
            return False
        return self.constrained_decoding == "on" or profile.constrain_by_default

    async def aconstrains_replies(self) -> bool:
        """:meth:`constrains_replies` for asyncio (the server is asked without blocking the event loop)."""
        if self._server["profile"] is None and self.constrained_decoding != "off":
            await self.aserver_profile()
        return self.constrains_replies()

    # -- presentation: never the key ---------------------------------------------------

    def __repr__(self) -> str:
        extra = f", deployment_id={self.deployment_id!r}" if self.deployment_id else ""
        return (
            f"{type(self).__name__}(model_name={self.model_name!r}, base_url={_safe_url(self.base_url)!r}, "
            f"api_key={'set' if self._api_key else 'unset'}{extra})"
        )

    def __getstate__(self) -> dict:
        raise TypeError(f"{type(self).__name__} cannot be pickled (it holds a client and a secret)")

    # -- the openai client ---------------------------------------------------------

    def _get_client(self) -> Any:
        owner = self.__dict__.get("_owner", self)  # a with_options copy uses the client of its original
        if owner._client is not None:
            return owner._client
        with owner._client_lock:
            if owner._client is None:
                owner._client = owner._build_client(asynchronous=False)
            return owner._client

    async def _get_async_client(self) -> Any:
        """The ``AsyncOpenAI`` client of the running event loop (its connections belong to that loop).

        It is closed while its loop shuts down (``asyncio.run`` closes open async generators, one of
        which holds it), so its connections never outlive the loop they belong to."""
        loop = asyncio.get_running_loop()
        entry = self._aclients.get(loop)
        if entry is not None:
            return entry[0]
        client = self._build_client(asynchronous=True)
        holder = _held_until_shutdown(client)
        await holder.__anext__()
        with self._client_lock:
            entry = self._aclients.setdefault(loop, (client, holder))
        if entry[0] is not client:  # another task made one meanwhile
            await holder.aclose()
        return entry[0]

    def _build_client(self, asynchronous: bool = False) -> Any:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - openai is a dependency
            raise UserError('the "openai" package is missing: pip install chatgpt-tool-hub') from exc

        key = self._api_key.get()
        if not key:
            if self.is_azure or _is_openai_url(self.base_url):
                where = "Azure OpenAI" if self.is_azure else "api.openai.com"
                raise ConfigError(f"llm_api_key / LLM_API_KEY is not set; {where} needs a key", key="llm_api_key")
            key = NO_KEY_PLACEHOLDER
        http_client = None
        if self.proxy:
            # openai 3.x is built on httpx2: DefaultHttpxClient is an httpx2.Client with openai's
            # own defaults (timeouts, connection limits, redirects), which a bare httpx2.Client lacks
            factory = openai.DefaultAsyncHttpxClient if asynchronous else openai.DefaultHttpxClient
            http_client = factory(proxy=self.proxy, timeout=self.timeout)
        elif asynchronous:  # many requests at once from one loop: several small connection pools
            http_client = pooled_async_client(self.timeout)
        else:
            http_client = sync_client(self.timeout)
        common: dict[str, Any] = dict(api_key=key, timeout=self.timeout, max_retries=0)
        if http_client is not None:
            common["http_client"] = http_client
        if self.is_azure:
            if not self.base_url:
                raise ConfigError(
                    "llm_api_base_url / LLM_API_BASE_URL must be the Azure endpoint when a deployment id is set",
                    key="llm_api_base_url",
                )
            azure = openai.AsyncAzureOpenAI if asynchronous else openai.AzureOpenAI
            return azure(azure_endpoint=self.base_url, azure_deployment=self.deployment_id,
                         api_version=self.azure_api_version, **common)
        # pass the base URL explicitly so OPENAI_BASE_URL in the environment is not consulted
        plain = openai.AsyncOpenAI if asynchronous else openai.OpenAI
        return plain(base_url=self.base_url or OPENAI_BASE_URL, **common)

    # -- the protocol: a plan, run by a driver ------------------------------------------

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
                 tools: Sequence[dict] | None = None) -> LLMResponse:
        self.server_profile()  # the request's form depends on it: found out once, before the first request
        plan = self._complete_plan(messages, stop, tools)
        return _Driver(self._get_client(), plan).result()

    async def acomplete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
                        tools: Sequence[dict] | None = None) -> LLMResponse:
        await self.aserver_profile()
        plan = self._complete_plan(messages, stop, tools)
        return await _AsyncDriver(await self._get_async_client(), plan).result()

    def stream(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
               tools: Sequence[dict] | None = None) -> Iterator[StreamChunk]:
        self.server_profile()
        plan = self._stream_plan(messages, stop, tools)
        driver = _Driver(self._get_client(), plan)
        try:
            while (chunk := driver.next_chunk()) is not None:
                yield chunk
        finally:  # also when the caller stops reading: the stream is closed now
            driver.close()

    async def astream(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
                      tools: Sequence[dict] | None = None) -> AsyncIterator[StreamChunk]:
        await self.aserver_profile()
        plan = self._stream_plan(messages, stop, tools)
        driver = _AsyncDriver(await self._get_async_client(), plan)
        try:
            while (chunk := await driver.next_chunk()) is not None:
                yield chunk
        finally:
            await driver.aclose()


# --- the drivers: a plan's steps done with the openai package's clients -----------------------------


class _Driver:
    """Runs a plan with the sync client: makes its requests, reads and closes its stream, sleeps its waits.
    A step that fails is thrown into the plan, which decides.

    ``next_chunk()`` runs the plan up to its next chunk (None once it is done; its result is then
    ``result()``'s). The stream the plan opened is closed when the plan ends, however it ends, or at
    ``close()``."""

    __slots__ = ("client", "plan", "opened", "value")

    def __init__(self, client: Any, plan: Plan) -> None:
        self.client, self.plan = client, plan
        self.opened: Any = None  # (response, payloads) of the open stream
        self.value: Any = None  # the plan's result, once it is done

    def result(self) -> Any:
        while self.next_chunk() is not None:
            pass
        return self.value

    def next_chunk(self) -> StreamChunk | None:
        plan, value, error = self.plan, None, None
        try:
            while True:
                try:
                    step = plan.throw(error) if error is not None else plan.send(value)
                except StopIteration as stop:
                    self.value = stop.value
                    if self.opened is not None:
                        self._shut()
                    return None
                value = error = None
                if type(step) is StreamChunk:
                    return step
                try:
                    if step is READ:
                        value = next(self.opened[1], None)
                    elif type(step) is Send:
                        value = self._send(step)
                    elif step is CLOSE:
                        self._shut()
                    elif isinstance(step, Wait):
                        _sleep(step.seconds)
                except Exception as exc:  # noqa: BLE001 - a step that failed: the plan decides
                    error = exc
        except BaseException:
            self.close()
            raise

    def _send(self, step: Send) -> Any:
        completions = self.client.chat.completions
        if not step.stream:
            return _json_body(completions.with_raw_response.create(**_request(step.params)))
        response = completions.with_streaming_response.create(**_request(step.params)).__enter__()
        self.opened = (response, iter_payloads(response))
        return None

    def _shut(self) -> None:
        """Close the open stream: its payload reader, then the response (its connection goes back or away)."""
        opened, self.opened = self.opened, None
        if opened is not None:
            opened[1].close()
            _close(opened[0])

    def close(self) -> None:
        self.plan.close()
        self._shut()


class _AsyncDriver:
    """:class:`_Driver` for asyncio: the event loop's ``AsyncOpenAI`` client, ``asyncio.sleep``."""

    __slots__ = ("client", "plan", "opened", "value")

    def __init__(self, client: Any, plan: Plan) -> None:
        self.client, self.plan = client, plan
        self.opened: Any = None
        self.value: Any = None

    async def result(self) -> Any:
        while await self.next_chunk() is not None:
            pass
        return self.value

    async def next_chunk(self) -> StreamChunk | None:
        plan, value, error = self.plan, None, None
        try:
            while True:
                try:
                    step = plan.throw(error) if error is not None else plan.send(value)
                except StopIteration as stop:
                    self.value = stop.value
                    if self.opened is not None:
                        await self._shut()
                    return None
                value = error = None
                if type(step) is StreamChunk:
                    return step
                try:
                    if step is READ:
                        value = await anext(self.opened[1], None)
                    elif type(step) is Send:
                        value = await self._send(step)
                    elif step is CLOSE:
                        await self._shut()
                    elif isinstance(step, Wait):
                        await _asleep(step.seconds)
                except Exception as exc:  # noqa: BLE001 - a step that failed: the plan decides
                    error = exc
        except BaseException:
            await self.aclose()
            raise

    async def _send(self, step: Send) -> Any:
        completions = self.client.chat.completions
        if not step.stream:
            return _json_body(await completions.with_raw_response.create(**_request(step.params)))
        response = await completions.with_streaming_response.create(**_request(step.params)).__aenter__()
        self.opened = (response, aiter_payloads(response))
        return None

    async def _shut(self) -> None:
        opened, self.opened = self.opened, None
        if opened is not None:
            await opened[1].aclose()
            await _aclose(opened[0])

    async def aclose(self) -> None:
        self.plan.close()
        await self._shut()


async def _held_until_shutdown(client: Any) -> AsyncGenerator[None, None]:
    """Holds an async client: closing this generator (the loop's shutdown does) closes the client."""
    try:
        yield
    finally:
        try:
            await client.close()
        except Exception:  # noqa: BLE001 - closing at shutdown
            pass


def _constraint_mode(value: Any) -> str:
    mode = ("on" if value else "off") if isinstance(value, bool) else str(value or "auto").strip().lower()
    if mode not in CONSTRAINED_MODES:
        raise ConfigError(f"constrained_decoding / CONSTRAINED_DECODING must be one of {', '.join(CONSTRAINED_MODES)},"
                          f" not {value!r}", key="constrained_decoding")
    return mode
