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
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import threading
import time
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from ..errors import ConfigError, LLMAuthError, LLMConnectionError, LLMError, UserError
from .base import BaseLLM, LLMResponse, Message, StreamChunk, ToolCall, Usage
from ..redact import Redactor
from .stops import StopCutter, clean_stop, cut_at_stop
from . import tokens

__all__ = ["OpenAICompatibleLLM", "MAX_STOP_SEQUENCES", "parse_retry_after"]

logger = logging.getLogger("chatgpt_tool_hub.llm")

OPENAI_BASE_URL = "https://api.openai.com/v1"
NO_KEY_PLACEHOLDER = "no-key-required"  # sent to servers that need no key (Ollama, vLLM…)
MAX_STOP_SEQUENCES = 4  # OpenAI accepts at most 4; the rest are applied client-side
RETRYABLE_STATUS = frozenset({408, 409, 429})
_UNSUPPORTED_WORDS = ("unsupported", "not supported", "unrecognized", "unknown", "extra", "not permitted",
                      "not allowed", "does not support")

KEY_HINT = "check llm_api_key / LLM_API_KEY"
MODEL_HINT = "check model_name / MODEL_NAME and llm_api_base_url / LLM_API_BASE_URL"
URL_HINT = "check llm_api_base_url / LLM_API_BASE_URL, proxy / PROXY and request_timeout / REQUEST_TIMEOUT"

_sleep = time.sleep  # patched in tests


# --- helpers ----------------------------------------------------------------------------


class _Secret:
    """Holds the API key; its repr and str never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def get(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "'***'" if self._value else "None"

    __str__ = __repr__


def _blank_to_none(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        return None
    return value


def _safe_url(url: str | None) -> str:
    """``url`` without user-info or query (which may carry credentials)."""
    if not url:
        return OPENAI_BASE_URL
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else url.split("?")[0]
    except ValueError:
        return "<invalid url>"


def _is_openai_url(url: str | None) -> bool:
    if not url:
        return True
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    return host == "openai.com" or host.endswith(".openai.com")


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    if not headers:
        return None
    try:
        value = headers.get("retry-after-ms")
        if value is not None:
            return max(0.0, float(value) / 1000.0)
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _as_dict(obj: Any) -> Any:
    """A parsed openai object (pydantic model, str, dict…) as plain JSON data."""
    if obj is None or isinstance(obj, (dict, list, int, float, bool)):
        return obj
    if isinstance(obj, (str, bytes)):
        try:
            return json.loads(obj)
        except ValueError:
            return None
    for method in ("to_dict", "model_dump"):
        fn = getattr(obj, method, None)
        if callable(fn):
            try:
                return fn()
            except Exception:
                continue
    return None


def _usage_from(data: Any) -> Usage | None:
    if not isinstance(data, Mapping):
        return None
    usage = data.get("usage")
    if not isinstance(usage, Mapping):
        return None
    try:
        return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), False)
    except (TypeError, ValueError):
        return None


def _tool_calls_from(message: Any) -> list[ToolCall]:
    """The tool calls of a completion's ``message`` (OpenAI's format); malformed entries are skipped."""
    raw = message.get("tool_calls") if isinstance(message, Mapping) else None
    calls: list[ToolCall] = []
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        function = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(function, Mapping) or not function.get("name"):
            continue
        arguments = function.get("arguments")
        if not isinstance(arguments, (str, dict)):
            arguments = "" if arguments is None else json.dumps(arguments)
        calls.append(ToolCall(id=str(item.get("id") or f"call_{i}"), name=str(function["name"]),
                              arguments=arguments))
    return calls


class _ToolCallDeltas:
    """Puts streamed tool-call deltas together by their ``index``."""

    def __init__(self) -> None:
        self._parts: dict[int, dict[str, str]] = {}

    def feed(self, deltas: Any) -> None:
        for position, delta in enumerate(deltas if isinstance(deltas, list) else []):
            if not isinstance(delta, Mapping):
                continue
            index = delta.get("index")
            part = self._parts.setdefault(index if isinstance(index, int) else position,
                                          {"id": "", "name": "", "arguments": ""})
            if delta.get("id"):
                part["id"] = str(delta["id"])
            function = delta.get("function")
            if not isinstance(function, Mapping):
                continue
            name = function.get("name")
            if isinstance(name, str) and name and name != part["name"]:
                part["name"] += name  # servers send the name once; a repeat of the same name is not news
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                part["arguments"] += arguments
            elif isinstance(arguments, dict):
                part["arguments"] += json.dumps(arguments)

    def calls(self) -> list[ToolCall]:
        return [ToolCall(id=part["id"] or f"call_{index}", name=part["name"], arguments=part["arguments"])
                for index, part in sorted(self._parts.items()) if part["name"]]


class _Attempt(Exception):
    """Internal: a failed attempt that may be retried."""

    def __init__(self, what: str, retry_after: float | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.retry_after = retry_after


# --- the client ---------------------------------------------------------------------------


def _chain_mentions(exc: BaseException, secret: str) -> bool:
    """True when ``secret`` appears in any exception of the ``__cause__``/``__context__`` chain."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts = (str(current), repr(current.args), repr(getattr(current, "body", "")))
        if any(secret in text for text in texts):
            return True
        stack.extend((current.__cause__, current.__context__))
    return False


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
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._unsupported: set[str] = set()  # request parameters the server rejected

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
        if self._client is not None:
            return self._client
        with self._client_lock:
            if self._client is None:
                self._client = self._build_client()
            return self._client

    def _build_client(self) -> Any:
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
            http_client = openai.DefaultHttpxClient(proxy=self.proxy, timeout=self.timeout)
        common: dict[str, Any] = dict(api_key=key, timeout=self.timeout, max_retries=0)
        if http_client is not None:
            common["http_client"] = http_client
        if self.is_azure:
            if not self.base_url:
                raise ConfigError(
                    "llm_api_base_url / LLM_API_BASE_URL must be the Azure endpoint when a deployment id is set",
                    key="llm_api_base_url",
                )
            return openai.AzureOpenAI(
                azure_endpoint=self.base_url,
                azure_deployment=self.deployment_id,
                api_version=self.azure_api_version,
                **common,
            )
        # pass the base URL explicitly so OPENAI_BASE_URL in the environment is not consulted
        return openai.OpenAI(base_url=self.base_url or OPENAI_BASE_URL, **common)

    # -- request building --------------------------------------------------------------

    def _params(self, messages: Sequence[Message], stop: list[str], stream: bool,
                tools: Sequence[dict] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model_name, "messages": list(messages)}
        if tools:
            params["tools"] = list(tools)
            if "tool_choice" not in self._unsupported:
                params["tool_choice"] = "auto"
        if "temperature" not in self._unsupported and self.temperature is not None:
            params["temperature"] = self.temperature
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
        for name in ("stream_options", "temperature", "stop", "tool_choice"):
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

    # -- the retry loop ------------------------------------------------------------------

    def _call(self, params: dict[str, Any], first_read: Any = None) -> Any:
        """Run ``create(**params)`` with retries. ``first_read(result)`` runs inside the
        retry scope (used by streams to read up to the first chunk)."""
        import openai

        client = self._get_client()
        attempts = self.max_retries + 1
        attempt = 0
        last = "no attempt"
        last_err: Exception | None = None
        while True:
            attempt += 1
            started = time.monotonic()
            logger.debug("LLM request model=%s endpoint=%s attempt=%d/%d stream=%s",
                         self.model_name, self.endpoint, attempt, attempts, bool(params.get("stream")))
            try:
                result = client.chat.completions.create(**params)
                if first_read is not None:
                    result = first_read(result)
                logger.debug("LLM response model=%s attempt=%d status=200 latency=%.3fs",
                             self.model_name, attempt, time.monotonic() - started)
                return result
            except Exception as err:  # noqa: BLE001 - mapped below
                latency = time.monotonic() - started
                if isinstance(err, (LLMError, UserError)):
                    raise
                outcome = self._classify(err, openai) if isinstance(err, openai.OpenAIError) else None
                if outcome is None:
                    if isinstance(err, (json.JSONDecodeError, UnicodeDecodeError)):
                        raise  # a malformed 200 body: handled by the caller
                    outcome = LLMError(f"LLM request failed: {type(err).__name__}: {self._scrub(err)[:300]}")
                status = getattr(err, "status_code", None)
                logger.debug("LLM response model=%s attempt=%d status=%s latency=%.3fs error=%s",
                             self.model_name, attempt, status if status is not None else "-", latency,
                             type(err).__name__)
                if isinstance(outcome, LLMError):
                    if status == 400 and self._drop_unsupported(params, self._server_message(err)):
                        attempt -= 1  # not the server's fault; does not count
                        continue
                    self._raise(outcome, err)
                assert isinstance(outcome, _Attempt)
                last, last_err = outcome.what, err
                if attempt >= attempts:
                    break
                delay = self._backoff(attempt - 1, outcome.retry_after)
                logger.info("LLM request to %s failed (%s); retry %d/%d in %.2fs",
                            self.endpoint, outcome.what, attempt, self.max_retries, delay)
                if delay > 0:
                    _sleep(delay)
        self._raise(
            LLMConnectionError(
                f"LLM request to {self.endpoint} failed after {attempts} attempt{'s' if attempts != 1 else ''} "
                f"(last: {last}) -- {URL_HINT}"
            ),
            last_err,
        )
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the protocol ------------------------------------------------------------------

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
                 tools: Sequence[dict] | None = None) -> LLMResponse:
        stops = clean_stop(stop)
        params = self._params(messages, stops, stream=False, tools=tools)
        try:
            result = self._call(params)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:  # 200 with a body that is not JSON
            logger.warning("LLM endpoint %s returned an unreadable body (%s)", self.endpoint, type(err).__name__)
            return LLMResponse(text="", finish_reason="error", usage=self._estimate(messages, ""),
                               model=self.model_name)
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
            iterator = iter(stream_obj)
            try:
                first = next(iterator)
            except StopIteration:
                first = None
            except BaseException:
                try:  # free the connection before a retry
                    stream_obj.close()
                except Exception:
                    pass
                raise
            return stream_obj, iterator, first

        try:
            stream_obj, iterator, first = self._call(params, first_read)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            logger.warning("LLM endpoint %s streamed an unreadable body (%s)", self.endpoint, type(err).__name__)
            yield StreamChunk(text="", finish_reason="error", usage=self._estimate(messages, ""))
            return

        cutter = StopCutter(stops)
        deltas = _ToolCallDeltas()
        parts: list[str] = []
        finish: str | None = None
        usage: Usage | None = None
        try:
            chunk = first
            while chunk is not None:
                data = _as_dict(chunk)
                if isinstance(data, Mapping):
                    usage = _usage_from(data) or usage
                    for choice in data.get("choices") or []:
                        if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                            continue
                        delta = choice.get("delta") or {}
                        piece = delta.get("content") if isinstance(delta, Mapping) else None
                        if isinstance(piece, str) and piece:
                            out = cutter.feed(piece)
                            if out:
                                parts.append(out)
                                yield StreamChunk(text=out)
                        if isinstance(delta, Mapping) and delta.get("tool_calls"):
                            deltas.feed(delta["tool_calls"])
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
                if cutter.stopped:
                    finish = "stop"
                    break
                try:
                    chunk = next(iterator)
                except StopIteration:
                    chunk = None
        except Exception as err:  # noqa: BLE001 - mid-stream failure: no retry after the first chunk
            import openai

            if isinstance(err, (LLMError, UserError)):
                raise
            what = type(err).__name__
            if isinstance(err, openai.OpenAIError):
                outcome = self._classify(err, openai)
                what = outcome.what if isinstance(outcome, _Attempt) else str(outcome)
            self._raise(LLMConnectionError(f"LLM stream from {self.endpoint} broke after it started "
                                           f"({self._scrub(what)}); not retried -- {URL_HINT}"), err)
        finally:
            close = getattr(stream_obj, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    pass
        tail = cutter.flush()
        text = "".join(parts) + tail
        calls = deltas.calls()
        if calls:
            finish = finish or "tool_calls"
        elif not text and finish not in ("content_filter", "length"):
            logger.warning("LLM endpoint %s streamed no text (finish_reason=%s)", self.endpoint, finish)
            finish = "empty"
        elif finish is None:
            logger.warning("LLM stream from %s ended without a finish reason", self.endpoint)
            finish = "stop"
        if usage is None:
            usage = self._estimate(messages, text, calls)
        yield StreamChunk(text=tail, finish_reason=finish, usage=usage, tool_calls=calls)

    # -- usage estimation --------------------------------------------------------------

    def _estimate(self, messages: Sequence[Message], text: str, calls: Sequence[ToolCall] = ()) -> Usage:
        try:
            completion = text + "".join(c.name + c.to_message()["function"]["arguments"] for c in calls)
            return Usage(tokens.count_message_tokens(messages, self.model_name),
                         tokens.count_tokens(completion, self.model_name), True)
        except Exception:  # pragma: no cover - tokens never raises, but never let usage break a run
            return Usage(0, 0, True)
