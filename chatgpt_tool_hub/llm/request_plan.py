"""What one chat-completions request does, written once for the sync and the async client: a plan with no I/O.

A plan is a generator. It yields *steps* to its driver and gets each step's
outcome back, sent in (``plan.send(value)``) or, when the step failed, thrown in
(``plan.throw(exc)``):

============================  ================================================================
step                          what the driver does, and sends back
============================  ================================================================
``Send(params, stream)``      makes the request. Not streamed: sends back the body (JSON data).
                              Streamed: opens the response, keeps it open, sends back None.
``READ``                      reads the next payload of the open stream; sends it back (None at
                              its end)
``CLOSE``                     closes the open stream (frees its connection)
``Wait(seconds)``             sleeps before the next attempt
a :class:`StreamChunk`        hands it to its caller (streams only)
============================  ================================================================

The plan decides everything else: the request's parameters, whether a failure
is retried (408/409/429/5xx, timeouts, connection errors, an error event before
a stream's first chunk) and after how long (full jitter, ``Retry-After``), a
parameter the server rejected to drop before sending again, the
:mod:`chatgpt_tool_hub.errors` type and message a failure becomes (naming the
setting to fix, never the key), and what the answer is. A plan's return value
is its result (the ``LLMResponse`` of a completion; None for a stream).

:class:`RequestPlans` holds the plans; ``OpenAICompatibleLLM`` inherits them and
adds the drivers (``complete``/``stream`` with the ``openai`` package's sync
client, ``acomplete``/``astream`` with its async one), the way the engine's
ReAct loop has one loop and two drivers.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generator, Mapping, NoReturn, Sequence, Union

from ..errors import LLMAuthError, LLMConnectionError, LLMError, UserError
from ..textutil import has_surrogates, repair_surrogates
from . import tokens
from .base import LLMResponse, Message, StreamChunk, ToolCall, Usage
from .openai_parts import (
    StreamState,
    _as_dict,
    _Attempt,
    _chain_mentions,
    _safe_url,
    _tool_calls_from,
    _usage_from,
    parse_retry_after,
)
from .servers import ServerProfile, constraint_params, encode_messages
from .stops import clean_stop, cut_at_stop

if TYPE_CHECKING:
    from ..redact import Redactor
    from .openai_parts import _Secret

__all__ = ["RequestPlans", "Send", "Wait", "READ", "CLOSE", "Plan", "Step", "MAX_STOP_SEQUENCES"]

logger = logging.getLogger("chatgpt_tool_hub.llm")

MAX_STOP_SEQUENCES = 4  # OpenAI accepts at most 4; the rest are applied client-side
RETRYABLE_STATUS = frozenset({408, 409, 429})
_UNSUPPORTED_WORDS = ("unsupported", "not supported", "unrecognized", "unknown", "extra", "not permitted",
                      "not allowed", "does not support", "validation error", "input should be")

KEY_HINT = "check llm_api_key / LLM_API_KEY"
MODEL_HINT = "check model_name / MODEL_NAME and llm_api_base_url / LLM_API_BASE_URL"
SERVER_HINT = ("the server's own message says what it could not do; its log has the details. If it is about "
               "the request's form, set llm_server / LLM_SERVER to the kind of server it is")
URL_HINT = "check llm_api_base_url / LLM_API_BASE_URL, proxy / PROXY and request_timeout / REQUEST_TIMEOUT"

ABANDON = (json.JSONDecodeError, UnicodeDecodeError)  # a 200 whose body is not JSON: an empty answer, no retry


# --- the steps --------------------------------------------------------------------------------


class Send:
    """Make the request: ``params`` is its JSON body as this attempt sends it (``model``, ``messages``…)."""

    __slots__ = ("params", "stream")

    def __init__(self, params: dict, stream: bool = False) -> None:
        self.params, self.stream = params, stream

    def __repr__(self) -> str:
        return f"Send(stream={self.stream}, params={sorted(self.params)})"


@dataclass(frozen=True)
class Wait:
    """Sleep ``seconds`` before the next attempt."""

    seconds: float


class _Named:
    """A step that carries nothing: ``READ`` or ``CLOSE``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


READ = _Named("READ")    # the next payload of the open stream, None at its end
CLOSE = _Named("CLOSE")  # close the open stream

Step = Union[Send, Wait, _Named, StreamChunk]
Plan = Generator[Step, Any, Any]


# --- the plans ----------------------------------------------------------------------------------


class RequestPlans:
    """The plans of the OpenAI-compatible client: request building, retries, error mapping and reading the
    answer. They do no I/O; a driver makes the requests (see the module's doc).

    The settings are the client's attributes, read when a plan runs (a ``with_options`` copy has its own)."""

    model_name: str
    base_url: str | None
    deployment_id: str | None
    temperature: float
    timeout: float | None
    max_retries: int
    backoff_base: float
    backoff_max: float
    max_tokens: int | None
    response_schema: dict | None
    _api_key: "_Secret"
    _redactor: "Redactor"
    _unsupported: set[str]

    def profile_now(self) -> ServerProfile:  # the client's: what its server is known to be (no I/O)
        raise NotImplementedError

    @property
    def is_azure(self) -> bool:
        return self.deployment_id is not None

    @property
    def endpoint(self) -> str:
        """The endpoint URL, safe to show (no credentials)."""
        return _safe_url(self.base_url)

    def _scrub(self, text: Any) -> str:
        return self._redactor.redact(str(text))

    # -- a completion and a stream ---------------------------------------------------------

    def _complete_plan(self, messages: Sequence[Message], stop: Sequence[str] | None,
                       tools: Sequence[dict] | None) -> Plan:
        """The plan of ``complete``: its result is the :class:`LLMResponse`. The request's parameters are
        made now, the first step when the plan is started."""
        stops = clean_stop(stop)
        return self._completion(messages, stops, self._params(messages, stops, stream=False, tools=tools))

    def _completion(self, messages: Sequence[Message], stops: list[str], params: dict[str, Any]) -> Plan:
        try:
            body = yield from self._attempts(params)
        except ABANDON as err:
            return self._unreadable(messages, err)
        return self._response(body, messages, stops)

    def _stream_plan(self, messages: Sequence[Message], stop: Sequence[str] | None,
                     tools: Sequence[dict] | None) -> Plan:
        """The plan of ``stream``: it yields the chunks, the last with the finish reason, usage and tool
        calls. Text is cut at the stop sequences; a stream that breaks after its first payload is not retried
        (its text was handed out already)."""
        stops = clean_stop(stop)
        return self._streamed(messages, stops, self._params(messages, stops, stream=True, tools=tools))

    def _streamed(self, messages: Sequence[Message], stops: list[str], params: dict[str, Any]) -> Plan:
        try:
            payload = yield from self._attempts(params)
        except ABANDON as err:
            yield self._unreadable_stream(messages, err)
            return None
        state = StreamState(stops)
        try:
            while payload is not None:
                for piece in state.feed(payload):
                    yield piece
                if state.stopped:
                    break
                payload = yield READ
        except Exception as err:  # noqa: BLE001 - mid-stream failure: no retry after the first chunk
            self._stream_broke(err)
        yield CLOSE
        yield state.last(self.endpoint, lambda text, calls: self._estimate(messages, text, calls))
        return None

    # -- the retry loop -------------------------------------------------------------------

    def _attempts(self, params: dict[str, Any]) -> Plan:
        """Send ``params`` until an attempt succeeds: returns the completion's body, or for a stream its first
        payload (the stream is left open; reading it is part of the attempt, so a stream that fails before
        it is retried, its connection closed first). Raises the final error."""
        stream = bool(params.get("stream"))
        attempts, attempt = self.max_retries + 1, 0
        last, last_err, answered = "no attempt", None, False
        while attempt < attempts:
            attempt += 1
            started = self._log_request(attempt, attempts, params)
            opened = False
            try:
                body = yield Send(params, stream)
                if not stream:
                    return body
                opened = True
                return (yield READ)
            except Exception as err:  # noqa: BLE001 - decided by _failed
                if opened:
                    yield CLOSE  # free the connection before a retry
                outcome = self._failed(err, params, attempt, started)
            if outcome is None:
                attempt -= 1
                continue
            last, last_err, answered = outcome.what, outcome.error, outcome.server_said is not None
            if attempt < attempts and (delay := self._next_delay(outcome, attempt)) > 0:
                yield Wait(delay)
        self._give_up(attempts, last, last_err, answered)

    def _failed(self, err: Exception, params: dict[str, Any], attempt: int, started: float) -> Any:
        """What to do after attempt ``attempt`` raised ``err``: ``None`` (try again at once: a parameter was
        dropped), an :class:`_Attempt` to retry after a backoff, or raise the final error."""
        import openai

        latency = time.monotonic() - started
        if isinstance(err, (LLMError, UserError)):
            raise err
        outcome = self._classify(err, openai) if isinstance(err, openai.OpenAIError) else None
        if outcome is None:
            if isinstance(err, ABANDON):
                raise err  # a malformed 200 body: handled by the plan
            outcome = LLMError(f"LLM request failed: {type(err).__name__}: {self._scrub(err)[:300]}")
        status = getattr(err, "status_code", None)
        logger.debug("LLM response model=%s attempt=%d status=%s latency=%.3fs error=%s",
                     self.model_name, attempt, status if status is not None else "-", latency, type(err).__name__)
        # a parameter the server refuses (llama-cpp-python answers its validation errors with a 500): drop it
        if status in (400, 422, 500) and self._drop_unsupported(params, self._server_message(err)):
            return None  # not the server's fault; does not count
        if not isinstance(outcome, _Attempt):
            self._raise(outcome, err)
        outcome.error = err
        return outcome

    def _give_up(self, attempts: int, last: str, last_err: Exception | None, answered: bool = False) -> NoReturn:
        """The final error after the last attempt. When the server answered (a 5xx with its own message), the
        message is the cause, not the URL, proxy or timeout: it is kept, with a hint about what to look at."""
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if answered:
            self._raise(LLMConnectionError(
                f"LLM server at {self.endpoint} refused the request after {tries} ({last}) -- {SERVER_HINT} "
                f"({self.profile_now().label})"), last_err)
        self._raise(LLMConnectionError(f"LLM request to {self.endpoint} failed after {tries} (last: {last}) -- "
                                       f"{URL_HINT}"), last_err)

    def _log_request(self, attempt: int, attempts: int, params: dict) -> float:
        if logger.isEnabledFor(logging.DEBUG):  # the endpoint is worked out only for a log that is written
            logger.debug("LLM request model=%s endpoint=%s attempt=%d/%d stream=%s",
                         self.model_name, self.endpoint, attempt, attempts, bool(params.get("stream")))
        return time.monotonic()

    def _next_delay(self, outcome: _Attempt, attempt: int) -> float:
        delay = self._backoff(attempt - 1, outcome.retry_after)
        logger.info("LLM request to %s failed (%s); retry %d/%d in %.2fs",
                    self.endpoint, outcome.what, attempt, self.max_retries, delay)
        return delay

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """The wait before retry ``attempt`` (0-based): the server's ``Retry-After``, else full jitter;
        at most ``backoff_max``."""
        if retry_after is not None:
            return min(retry_after, self.backoff_max)
        return random.uniform(0.0, min(self.backoff_max, self.backoff_base * (2 ** attempt)))

    # -- request building --------------------------------------------------------------

    def _params(self, messages: Sequence[Message], stop: list[str], stream: bool,
                tools: Sequence[dict] | None = None) -> dict[str, Any]:
        profile = self.profile_now()
        params: dict[str, Any] = {"model": self.model_name,
                                  "messages": encode_messages(_encodable(messages), profile)}
        if tools:
            params["tools"] = list(tools)
            if "tool_choice" not in self._unsupported and profile.tool_choice:
                params["tool_choice"] = "auto"
        if self.response_schema is not None and "response_format" not in self._unsupported:
            params.update(constraint_params(self.response_schema, profile))
        if "temperature" not in self._unsupported and self.temperature is not None:
            params["temperature"] = self.temperature
        limit = self.max_tokens if self.max_tokens is not None else profile.max_tokens
        if limit is not None and "max_tokens" not in self._unsupported:
            params["max_tokens"] = limit
        if stop and "stop" not in self._unsupported:
            params["stop"] = stop[:MAX_STOP_SEQUENCES]
        if stream:
            params["stream"] = True
            if "stream_options" not in self._unsupported and profile.stream_options:
                params["stream_options"] = {"include_usage": True}
        return params

    def _drop_unsupported(self, params: dict, message: str) -> bool:
        """On a 400 saying a parameter we can do without is unsupported, drop it and say True."""
        lowered = message.lower()
        if not any(w in lowered for w in _UNSUPPORTED_WORDS):
            return False
        for name in ("stream_options", "temperature", "stop", "tool_choice", "max_tokens", "response_format"):
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
                # the server's own error (500, 501) is the cause; behind a gateway (502-504) the way there may be
                return _Attempt(f"HTTP {status}: {message}", parse_retry_after(headers),
                                server_said=message if status in (500, 501) else None)
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

    def _raise(self, final: Exception, cause: Exception | None) -> NoReturn:
        # keep the cause for debugging, unless any exception in its chain could carry the key
        key = self._api_key.get()
        if cause is not None and key and _chain_mentions(cause, key):
            cause = None
        raise final from cause

    def _stream_broke(self, err: Exception) -> NoReturn:
        import openai

        if isinstance(err, (LLMError, UserError)):
            raise err
        what = type(err).__name__
        if isinstance(err, openai.OpenAIError):
            outcome = self._classify(err, openai)
            what = outcome.what if isinstance(outcome, _Attempt) else str(outcome)
        self._raise(LLMConnectionError(f"LLM stream from {self.endpoint} broke after it started "
                                       f"({self._scrub(what)}); not retried -- {URL_HINT}"), err)

    # -- reading the answer ------------------------------------------------------------

    def _response(self, result: Any, messages: Sequence[Message], stops: list[str]) -> LLMResponse:
        data = _as_dict(result)
        if not isinstance(data, Mapping):
            logger.warning("LLM endpoint %s returned a body that is not a chat completion", self.endpoint)
            return LLMResponse(text="", finish_reason="error", usage=self._estimate(messages, ""),
                               model=self.model_name)
        model = data.get("model") or self.model_name
        choices = data.get("choices")
        choice: Any = choices[0] if isinstance(choices, list) and choices else None
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

    def _unreadable(self, messages: Sequence[Message], err: Exception) -> LLMResponse:
        """A 200 with a body that is not JSON."""
        logger.warning("LLM endpoint %s returned an unreadable body (%s)", self.endpoint, type(err).__name__)
        return LLMResponse(text="", finish_reason="error", usage=self._estimate(messages, ""), model=self.model_name)

    def _unreadable_stream(self, messages: Sequence[Message], err: Exception) -> StreamChunk:
        logger.warning("LLM endpoint %s streamed an unreadable body (%s)", self.endpoint, type(err).__name__)
        return StreamChunk(text="", finish_reason="error", usage=self._estimate(messages, ""))

    def _estimate(self, messages: Sequence[Message], text: str, calls: Sequence[ToolCall] = ()) -> Usage:
        try:
            completion = text + "".join(c.name + c.to_message()["function"]["arguments"] for c in calls)
            return Usage(tokens.count_message_tokens(messages, self.model_name),
                         tokens.count_tokens(completion, self.model_name), True)
        except Exception:  # pragma: no cover - tokens never raises, but never let usage break a run
            return Usage(0, 0, True)


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
