"""A run's answer as OpenAI's Responses API tells it: a ``response`` object, or its server-sent events.

The output items: a ``reasoning`` item whose ``summary_text`` is the inner
monologue (what chat sends as ``reasoning_content``), then a ``message`` item
whose ``output_text`` is the answer with the links to the files the run named;
or, when the run paused on the client's tools, one ``function_call`` item per
call (its ``call_id`` is what a ``function_call_output`` answers). A run out
of its budget is ``status: "incomplete"`` (chat's ``finish_reason: "length"``).

Streamed, the events are OpenAI's, each with its ``event:`` line and an
increasing ``sequence_number``: ``response.created``, ``response.in_progress``;
an item is added (``response.output_item.added``, then its summary or content
part) when its first text comes, and its deltas
(``response.reasoning_summary_text.delta``, ``response.output_text.delta``)
follow as the run goes; at the end every open item is done, the calls are
added whole (``response.function_call_arguments.delta`` / ``.done``) and
``response.completed`` (or ``response.incomplete``) carries the whole
response. A run that fails or runs out of time ends the stream with
``response.failed``. With ``text.format`` the answer is held to the end (it is
checked against the schema first) and comes as one delta.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Sequence

from .asgi import ApiError
from .chat import Outcome
from .responses import ResponsesRequest

__all__ = ["ResponsesRenderer", "response_usage"]

# the codes OpenAI's response.error may carry; anything else is reported as a server error
_ERROR_CODES = frozenset({"server_error", "rate_limit_exceeded", "invalid_prompt", "invalid_image"})


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def response_usage(result: Any) -> dict:
    """The run's token usage as the Responses API counts it."""
    total = result.usage.total
    return {"input_tokens": total.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": total.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": total.total_tokens}


def _reasoning_item(item_id: str, text: str, status: str = "completed") -> dict:
    summary = [{"type": "summary_text", "text": text}] if text or status == "completed" else []
    return {"id": item_id, "type": "reasoning", "summary": summary, "status": status}


def _text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str | None, status: str = "completed") -> dict:
    content = [_text_part(text)] if text is not None else []
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def _call_items(outcome: Outcome) -> list[dict]:
    items = []
    for call in outcome.paused.calls if outcome.paused is not None else ():
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments,
                                                                                      ensure_ascii=False)
        items.append({"id": _id("fc"), "type": "function_call", "call_id": call.id, "name": call.tool,
                      "arguments": arguments, "status": "completed"})
    return items


class ResponsesRenderer:
    """The Responses API's wire format for one request (see the module's docstring)."""

    def __init__(self, request: ResponsesRequest):
        self.request = request
        self.rid, self.created = _id("resp"), int(time.time())
        self._sequence = 0
        self._output: list[dict] = []  # the stream's items, in their output_index order
        self._reasoning: dict | None = None  # the open reasoning item and its text so far
        self._message: dict | None = None  # the open message item and its text so far
        self._texts: dict[str, str] = {}
        self._hold = request.chat.client.answer_schema is not None  # a schema'd answer comes whole, at the end

    # ---- the response object ---------------------------------------------------------------

    def response(self, status: str, output: list[dict], outcome: Outcome | None = None,
                 error: dict | None = None) -> dict:
        echo = self.request.echo
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        body = {"id": self.rid, "object": "response", "created_at": self.created, "status": status,
                "background": False, "error": error, "incomplete_details": incomplete,
                "instructions": echo.get("instructions"), "max_output_tokens": echo.get("max_output_tokens"),
                "model": self.request.chat.model, "output": output,
                "parallel_tool_calls": echo.get("parallel_tool_calls", True), "previous_response_id": None,
                "reasoning": {"effort": None, "summary": None}, "store": False,
                "temperature": echo.get("temperature"), "text": echo.get("text") or {"format": {"type": "text"}},
                "tool_choice": echo.get("tool_choice", "auto"), "tools": echo.get("tools", []),
                "top_p": echo.get("top_p"), "truncation": "disabled",
                "usage": response_usage(outcome.result) if outcome is not None else None,
                "user": echo.get("user"), "metadata": echo.get("metadata") or {}}
        if outcome is not None:
            result = outcome.result
            body["completed_at"] = int(time.time())
            body["tool_hub"] = {"stopped_by": result.stopped_by, "steps": len(getattr(result, "steps", []) or []),
                                "files": outcome.files}
        return body

    @staticmethod
    def _status(outcome: Outcome) -> str:
        return "incomplete" if outcome.finish == "length" else "completed"

    def reply(self, outcome: Outcome) -> dict:
        output = [_reasoning_item(_id("rs"), outcome.reasoning)] if outcome.reasoning else []
        if outcome.paused is not None:
            output += _call_items(outcome)
        else:
            output.append(_message_item(_id("msg"), outcome.answer))
        return self.response(self._status(outcome), output, outcome)

    # ---- the stream ------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        return f"event: {kind}\ndata: {data}\n\n".encode()

    def opening(self) -> bytes:
        started = self.response("in_progress", [])
        return self._event("response.created", response=started) + self._event("response.in_progress",
                                                                                 response=started)

    def deltas(self, deltas: Sequence[tuple[str, str]]) -> bytes:
        out = []
        for where, text in deltas:
            if where == "reasoning":
                out.append(self._reasoning_delta(text))
            elif not self._hold:
                out.append(self._text_delta(text))
        return b"".join(out)

    def _add(self, item: dict) -> tuple[int, bytes]:
        index = len(self._output)
        self._output.append(item)
        self._texts[item["id"]] = ""
        return index, self._event("response.output_item.added", output_index=index, item=item)

    def _reasoning_delta(self, text: str) -> bytes:
        out = b""
        if self._reasoning is None:
            self._reasoning = _reasoning_item(_id("rs"), "", "in_progress")
            index, out = self._add(self._reasoning)
            out += self._event("response.reasoning_summary_part.added", item_id=self._reasoning["id"],
                               output_index=index, summary_index=0, part={"type": "summary_text", "text": ""})
        item = self._reasoning
        self._texts[item["id"]] += text
        return out + self._event("response.reasoning_summary_text.delta", item_id=item["id"],
                                 output_index=self._output.index(item), summary_index=0, delta=text)

    def _text_delta(self, text: str) -> bytes:
        out = b""
        if self._message is None:
            self._message = _message_item(_id("msg"), None, "in_progress")
            index, out = self._add(self._message)
            out += self._event("response.content_part.added", item_id=self._message["id"], output_index=index,
                               content_index=0, part=_text_part(""))
        item = self._message
        self._texts[item["id"]] += text
        return out + self._event("response.output_text.delta", item_id=item["id"],
                                 output_index=self._output.index(item), content_index=0, delta=text, logprobs=[])

    def _end_reasoning(self) -> bytes:
        item = self._reasoning
        if item is None:
            return b""
        index, text = self._output.index(item), self._texts[item["id"]]
        part = {"type": "summary_text", "text": text}
        done = _reasoning_item(item["id"], text)
        self._output[index] = done
        return (self._event("response.reasoning_summary_text.done", item_id=item["id"], output_index=index,
                            summary_index=0, text=text)
                + self._event("response.reasoning_summary_part.done", item_id=item["id"], output_index=index,
                              summary_index=0, part=part)
                + self._event("response.output_item.done", output_index=index, item=done))

    def _end_message(self, answer: str | None) -> bytes:
        """Close the message: the part of ``answer`` not streamed yet goes as a last delta (an answer that
        differs from what streamed replaces it in the done events); None: what streamed stands."""
        out = b""
        streamed = self._texts[self._message["id"]] if self._message is not None else ""
        if answer is not None and (self._message is None or (answer.startswith(streamed) and answer != streamed)):
            out += self._text_delta(answer[len(streamed):])  # an answer always has its message
        item = self._message
        if item is None:
            return out
        text = answer if answer is not None else self._texts[item["id"]]
        index = self._output.index(item)
        done = _message_item(item["id"], text)
        self._output[index] = done
        return out + (self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                  content_index=0, text=text, logprobs=[])
                      + self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                    content_index=0, part=_text_part(text))
                      + self._event("response.output_item.done", output_index=index, item=done))

    def _calls(self, outcome: Outcome) -> bytes:
        out = []
        for call in _call_items(outcome):
            index, added = self._add({**call, "arguments": "", "status": "in_progress"})
            self._output[index] = call
            out += [added,
                    self._event("response.function_call_arguments.delta", item_id=call["id"], output_index=index,
                                delta=call["arguments"]),
                    self._event("response.function_call_arguments.done", item_id=call["id"], output_index=index,
                                arguments=call["arguments"], name=call["name"]),
                    self._event("response.output_item.done", output_index=index, item=call)]
        return b"".join(out)

    def closing(self, outcome: Outcome) -> bytes:
        out = self._end_reasoning()
        if outcome.paused is not None:
            out += self._end_message(None) + self._calls(outcome)
        else:
            out += self._end_message(outcome.answer)
        status = self._status(outcome)
        return out + self._event(f"response.{status}", response=self.response(status, list(self._output), outcome))

    def failure(self, error: ApiError) -> bytes:
        code = error.code if error.code in _ERROR_CODES else "server_error"
        failed = self.response("failed", [], error={"code": code, "message": error.message})
        return self._event("response.failed", response=failed)
