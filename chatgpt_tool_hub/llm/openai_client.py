"""The OpenAI-compatible chat client: OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp…

Built on the ``openai`` package (imported lazily, on first use) with the
package's own retries turned off: this module retries by itself, with
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

Responses are read raw (``with_raw_response``, ``with_streaming_response``):
the body, or each streamed event, is parsed as JSON into dicts
(:mod:`.openai_stream`), not built into the package's typed objects, with the
package's error behaviour kept.
``with_options(temperature=..., max_tokens=...)`` is a copy for one request
that shares the clients.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
import weakref
from typing import Any, AsyncIterator, Iterator, Mapping, Sequence

from ..errors import ConfigError, LLMAuthError, LLMConnectionError, LLMError, UserError
from ..redact import Redactor
from ..textutil import has_surrogates, repair_surrogates
from . import tokens
from .base import BaseLLM, LLMResponse, Message, StreamChunk, ToolCall, Usage
from .http_pools import pooled_async_client
from .openai_parts import (
    OPENAI_BASE_URL,
    StreamState,
    _aclose,
    _as_dict,
    _Attempt,
    _blank_to_none,
    _chain_mentions,
    _close,
    _is_openai_url,
    _json_body,
    _request,
    _safe_url,
    _Secret,
    _tool_calls_from,
    _usage_from,
    parse_retry_after,
)
from .openai_stream import aiter_payloads, iter_payloads
from .stops import clean_stop, cut_at_stop

__all__ = ["OpenAICompatibleLLM", "MAX_STOP_SEQUENCES", "parse_retry_after"]

logger = logging.getLogger("chatgpt_tool_hub.llm")

NO_KEY_PLACEHOLDER = "no-key-required"  # sent to servers that need no key (Ollama, vLLM…)
MAX_STOP_SEQUENCES = 4  # OpenAI accepts at most 4; the rest are applied client-side
RETRYABLE_STATUS = frozenset({408, 409, 429})
_UNSUPPORTED_WORDS = ("unsupported", "not supported", "unrecognized", "unknown", "extra", "not permitted",
                      "not allowed", "does not support")

KEY_HINT = "check llm_api_key / LLM_API_KEY"
MODEL_HINT = "check model_name / MODEL_NAME and llm_api_base_url / LLM_API_BASE_URL"
URL_HINT = "check llm_api_base_url / LLM_API_BASE_URL, proxy / PROXY and request_timeout / REQUEST_TIMEOUT"

_sleep = time.sleep  # patched in tests
_asleep = asyncio.sleep  # the async path's, patched in tests
_ABANDON = (json.JSONDecodeError, UnicodeDecodeError)  # a 200 whose body is not JSON: handled by the caller


# --- the client ---------------------------------------------------------------------------


class OpenAICompatibleLLM(BaseLLM):
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
        self.proxy = _blank_to_none(proxy)
        self.deployment_id = _blank_to_none(deployment_id)
        self.azure_api_version = azure_api_version
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_tokens: int | None = None  # most completion tokens per call (with_options); None: the server's
        self._client: Any = None
        self._aclients: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()  # event loop -> client
        self._client_lock = threading.Lock()
        self._unsupported: set[str] = set()  # request parameters the server rejected

    def with_options(self, *, temperature: float | None = None, max_tokens: int | None = None,
                     **_ignored: Any) -> "OpenAICompatibleLLM":
        """A copy with other sampling settings (one request's), sharing this one's clients and key."""
        other = object.__new__(type(self))  # not copy.copy: pickling (which it uses) is refused
        other.__dict__.update(self.__dict__)
        other._owner = self.__dict__.get("_owner", self)  # one sync client; the async ones are shared already
        if temperature is not None:
            other.temperature = float(temperature)
        if max_tokens is not None:
            other.max_tokens = int(max_tokens)
        return other

    # -- presentation: never the key ---------------------------------------------------

    def __repr__(self) -> str:
        extra = f", deployment_id={self.deployment_id!r}" if self.deployment_id else ""
        return (
            f"{type(self).__name__}(model_name={self.model_name!r}, base_url={_safe_url(self.base_url)!r}, "
            f"api_key={'set' if self._api_key else 'unset'}{extra})"
        )

    def __getstate__(self) -> dict:
        raise TypeError(f"{type(self).__name__} cannot be pickled (it holds a client and a secret)")

    @property
    def is_azure(self) -> bool:
        return self.deployment_id is not None

    @property
    def endpoint(self) -> str:
        """The endpoint URL, safe to show (no credentials)."""
        return _safe_url(self.base_url)

    def _scrub(self, text: Any) -> str:
        return self._redactor.redact(str(text))

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

    # -- request building --------------------------------------------------------------

    def _params(self, messages: Sequence[Message], stop: list[str], stream: bool,
                tools: Sequence[dict] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model_name, "messages": _encodable(messages)}
        if tools:
            params["tools"] = list(tools)
            if "tool_choice" not in self._unsupported:
                params["tool_choice"] = "auto"
        if "temperature" not in self._unsupported and self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None and "max_tokens" not in self._unsupported:
            params["max_tokens"] = self.max_tokens
        if stop and "stop" not in self._unsupported:
            params["stop"] = stop[:MAX_STOP_SEQUENCES]
        if stream:
            params["stream"] = True
            if "stream_options" not in self._unsupported:
                params["stream_options"] = {"include_usage": True}
        return params

    def _drop_unsupported(self, params: dict, message: str) -> bool:
        """On a 400 saying a parameter we can do without is unsupported, drop it and say True."""
        lowered = message.lower()
        if not any(w in lowered for w in _UNSUPPORTED_WORDS):
            return False
        for name in ("stream_options", "temperature", "stop", "tool_choice", "max_tokens"):
            named = any(q in lowered for q in (f"'{name}'", f'"{name}"', f"`{name}`", f"{name}:"))
            if name in params and (named or (name == "stream_options" and name in lowered)):
                self._unsupported.add(name)
                params.pop(name, None)
                logger.warning("LLM server rejected parameter %r for model %s; retrying without it",
                               name, self.model_name)
                return True
        return False

    # -- error mapping -------------------------------------------------------------

    def _server_message(self, err: Any) -> str:
        body = getattr(err, "body", None)
        message = None
        if isinstance(body, Mapping):
            inner = body.get("error")
            message = inner.get("message") if isinstance(inner, Mapping) else body.get("message")
        elif isinstance(body, str):
            message = body
        if not message:
            message = getattr(err, "message", None) or type(err).__name__
        return self._scrub(str(message))[:500]

    def _classify(self, err: Exception, openai: Any) -> Exception:
        """Map an openai exception to an _Attempt (retryable) or a final LLMError."""
        status = getattr(err, "status_code", None)
        if isinstance(err, openai.APITimeoutError):
            return _Attempt(f"timeout after {self.timeout}s")
        if isinstance(err, openai.APIConnectionError):
            return _Attempt("connection error")
        if isinstance(err, openai.APIStatusError) and status is not None:
            message = self._server_message(err)
            headers = getattr(getattr(err, "response", None), "headers", None)
            if status in RETRYABLE_STATUS or status >= 500:
                return _Attempt(f"HTTP {status}", parse_retry_after(headers))
            where = f"model {self.model_name!r} at {self.endpoint}"
            if self.is_azure:
                where = f"Azure deployment {self.deployment_id!r} at {self.endpoint}"
            if status in (401, 403):
                return LLMAuthError(f"LLM endpoint refused the request (HTTP {status}) for {where}: "
                                    f"{message} -- {KEY_HINT}")
            if status == 404:
                hint = MODEL_HINT + (" (and the Azure deployment id)" if self.is_azure else "")
                return LLMAuthError(f"LLM endpoint answered HTTP 404 for {where}: {message} -- {hint}")
            return LLMError(f"LLM request rejected (HTTP {status}) for {where}: {message}")
        if isinstance(err, openai.APIError):  # e.g. an error event inside a stream
            return _Attempt(f"API error: {self._server_message(err)}")
        return LLMError(f"LLM request failed: {type(err).__name__}: {self._scrub(err)[:300]}")

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max)
        return random.uniform(0.0, min(self.backoff_max, self.backoff_base * (2 ** attempt)))

    def _raise(self, final: Exception, cause: Exception | None) -> None:
        # keep the cause for debugging, unless any exception in its chain could carry the key
        key = self._api_key.get()
        if cause is not None and key and _chain_mentions(cause, key):
            cause = None
        raise final from cause

    # -- the retry loop (one decision function, a sync and an async loop) -----------------------

    def _failed(self, err: Exception, params: dict[str, Any], attempt: int, started: float) -> Any:
        """What to do after attempt ``attempt`` raised ``err``: ``None`` (try again at once: a parameter was
        dropped), an :class:`_Attempt` to retry after a backoff, or raise the final error."""
        import openai

        latency = time.monotonic() - started
        if isinstance(err, (LLMError, UserError)):
            raise err
        outcome = self._classify(err, openai) if isinstance(err, openai.OpenAIError) else None
        if outcome is None:
            if isinstance(err, _ABANDON):
                raise err  # a malformed 200 body: handled by the caller
            outcome = LLMError(f"LLM request failed: {type(err).__name__}: {self._scrub(err)[:300]}")
        status = getattr(err, "status_code", None)
        logger.debug("LLM response model=%s attempt=%d status=%s latency=%.3fs error=%s",
                     self.model_name, attempt, status if status is not None else "-", latency, type(err).__name__)
        if isinstance(outcome, LLMError):
            if status == 400 and self._drop_unsupported(params, self._server_message(err)):
                return None  # not the server's fault; does not count
            self._raise(outcome, err)
        outcome.error = err
        return outcome

    def _give_up(self, attempts: int, last: str, last_err: Exception | None) -> None:
        self._raise(LLMConnectionError(
            f"LLM request to {self.endpoint} failed after {attempts} attempt{'s' if attempts != 1 else ''} "
            f"(last: {last}) -- {URL_HINT}"), last_err)

    def _log_request(self, attempt: int, attempts: int, params: dict) -> float:
        logger.debug("LLM request model=%s endpoint=%s attempt=%d/%d stream=%s",
                     self.model_name, self.endpoint, attempt, attempts, bool(params.get("stream")))
        return time.monotonic()

    def _next_delay(self, outcome: _Attempt, attempt: int) -> float:
        delay = self._backoff(attempt - 1, outcome.retry_after)
        logger.info("LLM request to %s failed (%s); retry %d/%d in %.2fs",
                    self.endpoint, outcome.what, attempt, self.max_retries, delay)
        return delay

    def _call(self, params: dict[str, Any], first_read: Any = None) -> Any:
        """Run ``create(**params)`` with retries. ``first_read(result)`` runs inside the
        retry scope (used by streams to read up to the first chunk); with it, the result is the
        raw streamed response (``with_streaming_response``)."""
        client = self._get_client()
        attempts, attempt = self.max_retries + 1, 0
        last, last_err = "no attempt", None
        while attempt < attempts:
            attempt += 1
            started = self._log_request(attempt, attempts, params)
            try:
                if first_read is None:
                    return _json_body(client.chat.completions.with_raw_response.create(**_request(params)))
                return first_read(client.chat.completions.with_streaming_response.create(**_request(params))
                                  .__enter__())
            except Exception as err:  # noqa: BLE001 - decided by _failed
                outcome = self._failed(err, params, attempt, started)
            if outcome is None:
                attempt -= 1
                continue
            last, last_err = outcome.what, outcome.error
            if attempt < attempts and (delay := self._next_delay(outcome, attempt)) > 0:
                _sleep(delay)
        self._give_up(attempts, last, last_err)

    async def _acall(self, params: dict[str, Any], first_read: Any = None) -> Any:
        """``_call`` for asyncio: the ``AsyncOpenAI`` client, ``first_read`` a coroutine function."""
        client = await self._get_async_client()
        attempts, attempt = self.max_retries + 1, 0
        last, last_err = "no attempt", None
        while attempt < attempts:
            attempt += 1
            started = self._log_request(attempt, attempts, params)
            try:
                if first_read is None:
                    return _json_body(await client.chat.completions.with_raw_response.create(**_request(params)))
                return await first_read(await client.chat.completions.with_streaming_response.create(
                    **_request(params)).__aenter__())
            except Exception as err:  # noqa: BLE001 - decided by _failed
                outcome = self._failed(err, params, attempt, started)
            if outcome is None:
                attempt -= 1
                continue
            last, last_err = outcome.what, outcome.error
            if attempt < attempts and (delay := self._next_delay(outcome, attempt)) > 0:
                await _asleep(delay)
        self._give_up(attempts, last, last_err)

    # -- the protocol ------------------------------------------------------------------

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
                 tools: Sequence[dict] | None = None) -> LLMResponse:
        stops = clean_stop(stop)
        params = self._params(messages, stops, stream=False, tools=tools)
        try:
            result = self._call(params)
        except _ABANDON as err:
            return self._unreadable(messages, err)
        return self._response(result, messages, stops)

    async def acomplete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
                        tools: Sequence[dict] | None = None) -> LLMResponse:
        stops = clean_stop(stop)
        params = self._params(messages, stops, stream=False, tools=tools)
        try:
            result = await self._acall(params)
        except _ABANDON as err:
            return self._unreadable(messages, err)
        return self._response(result, messages, stops)

    def _unreadable(self, messages: Sequence[Message], err: Exception) -> LLMResponse:
        """A 200 with a body that is not JSON."""
        logger.warning("LLM endpoint %s returned an unreadable body (%s)", self.endpoint, type(err).__name__)
        return LLMResponse(text="", finish_reason="error", usage=self._estimate(messages, ""), model=self.model_name)

    def _response(self, result: Any, messages: Sequence[Message], stops: list[str]) -> LLMResponse:
        data = _as_dict(result)
        if not isinstance(data, Mapping):
            logger.warning("LLM endpoint %s returned a body that is not a chat completion", self.endpoint)
            return LLMResponse(text="", finish_reason="error", usage=self._estimate(messages, ""),
                               model=self.model_name)
        model = data.get("model") or self.model_name
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else None
        usage = _usage_from(data)
        calls = _tool_calls_from(message)
        if calls:
            text = cut_at_stop(content, stops)[0] if isinstance(content, str) else ""
            return LLMResponse(text=text, finish_reason=choice.get("finish_reason") or "tool_calls",
                               usage=usage or self._estimate(messages, text, calls), model=model,
                               tool_calls=calls)
        if not isinstance(content, str) or content == "":
            server_reason = choice.get("finish_reason") if isinstance(choice, Mapping) else None
            reason = server_reason if server_reason in ("content_filter", "length") else "empty"
            logger.warning("LLM endpoint %s returned no text (%s)", self.endpoint,
                           "no choices" if choice is None else f"finish_reason={server_reason}")
            return LLMResponse(text="", finish_reason=reason, usage=usage or self._estimate(messages, ""),
                               model=model)
        text, cut = cut_at_stop(content, stops)
        finish = "stop" if cut else choice.get("finish_reason")
        return LLMResponse(text=text, finish_reason=finish, usage=usage or self._estimate(messages, text),
                           model=model)

    def stream(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
               tools: Sequence[dict] | None = None) -> Iterator[StreamChunk]:
        stops = clean_stop(stop)
        params = self._params(messages, stops, stream=True, tools=tools)

        def first_read(stream_obj: Any) -> tuple[Any, Any, Any]:
            iterator = iter_payloads(stream_obj)
            try:
                first = next(iterator, None)
            except BaseException:
                _close(stream_obj)  # free the connection before a retry
                raise
            return stream_obj, iterator, first

        try:
            stream_obj, iterator, first = self._call(params, first_read)
        except _ABANDON as err:
            yield self._unreadable_stream(messages, err)
            return
        state = StreamState(stops)
        try:
            chunk = first
            while chunk is not None:
                yield from state.feed(chunk)
                if state.stopped:
                    break
                chunk = next(iterator, None)
        except Exception as err:  # noqa: BLE001 - mid-stream failure: no retry after the first chunk
            self._stream_broke(err)
        finally:
            iterator.close()
            _close(stream_obj)
        yield state.last(self.endpoint, lambda text, calls: self._estimate(messages, text, calls))

    async def astream(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
                      tools: Sequence[dict] | None = None) -> AsyncIterator[StreamChunk]:
        stops = clean_stop(stop)
        params = self._params(messages, stops, stream=True, tools=tools)

        async def first_read(stream_obj: Any) -> tuple[Any, Any, Any]:
            iterator = aiter_payloads(stream_obj)
            try:
                first = await anext(iterator, None)
            except BaseException:
                await iterator.aclose()
                await _aclose(stream_obj)  # free the connection before a retry
                raise
            return stream_obj, iterator, first

        try:
            stream_obj, iterator, first = await self._acall(params, first_read)
        except _ABANDON as err:
            yield self._unreadable_stream(messages, err)
            return
        state = StreamState(stops)
        try:
            chunk = first
            while chunk is not None:
                for piece in state.feed(chunk):
                    yield piece
                if state.stopped:
                    break
                chunk = await anext(iterator, None)
        except Exception as err:  # noqa: BLE001 - mid-stream failure: no retry after the first chunk
            self._stream_broke(err)
        finally:
            await iterator.aclose()
            await _aclose(stream_obj)
        yield state.last(self.endpoint, lambda text, calls: self._estimate(messages, text, calls))

    def _unreadable_stream(self, messages: Sequence[Message], err: Exception) -> StreamChunk:
        logger.warning("LLM endpoint %s streamed an unreadable body (%s)", self.endpoint, type(err).__name__)
        return StreamChunk(text="", finish_reason="error", usage=self._estimate(messages, ""))

    def _stream_broke(self, err: Exception) -> None:
        import openai

        if isinstance(err, (LLMError, UserError)):
            raise err
        what = type(err).__name__
        if isinstance(err, openai.OpenAIError):
            outcome = self._classify(err, openai)
            what = outcome.what if isinstance(outcome, _Attempt) else str(outcome)
        self._raise(LLMConnectionError(f"LLM stream from {self.endpoint} broke after it started "
                                       f"({self._scrub(what)}); not retried -- {URL_HINT}"), err)

    # -- usage estimation --------------------------------------------------------------

    def _estimate(self, messages: Sequence[Message], text: str, calls: Sequence[ToolCall] = ()) -> Usage:
        try:
            completion = text + "".join(c.name + c.to_message()["function"]["arguments"] for c in calls)
            return Usage(tokens.count_message_tokens(messages, self.model_name),
                         tokens.count_tokens(completion, self.model_name), True)
        except Exception:  # pragma: no cover - tokens never raises, but never let usage break a run
            return Usage(0, 0, True)


async def _held_until_shutdown(client: Any) -> AsyncIterator[None]:
    """Holds an async client: closing this generator (the loop's shutdown does) closes the client."""
    try:
        yield
    finally:
        try:
            await client.close()
        except Exception:  # noqa: BLE001 - closing at shutdown
            pass


def _encodable(messages: Sequence[Message]) -> list[Message]:
    """The messages as sent: text with a lone surrogate (a question or an observation read from bytes
    that were not UTF-8) repaired to U+FFFD, since the request body is UTF-8 and would not encode."""
    out = list(messages)
    for i, message in enumerate(out):
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str) and has_surrogates(content):
            out[i] = {**message, "content": repair_surrogates(content)}
        elif isinstance(content, list) and any(isinstance(p, Mapping) and isinstance(p.get("text"), str)
                                               and has_surrogates(p["text"]) for p in content):
            parts = [{**p, "text": repair_surrogates(p["text"])} if isinstance(p, Mapping)
                     and isinstance(p.get("text"), str) else p for p in content]
            out[i] = {**message, "content": parts}
    return out
