"""A run's events as what chat clients show: the inner monologue as ``reasoning_content``, the answer as
``content``.

In the text protocol (the ReAct app) the model's reply streams live: what comes
before a final-answer marker (``AI:``, ``Final Answer:``) at the start of a line
is reasoning, what follows it is the answer, as it is written. Observations,
nested engines' steps and native tool calls are added to the reasoning as
lines (``Observation: ...``). With native tool calls a reply is held until it is
known to be a thought (a tool call follows) or the answer; in planner mode the
response call streams live as the answer. At the end the answer the run
returned is what counts: the part of it not streamed yet is sent then.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["Monologue"]

_ANSWER = re.compile(r"^[ \t>*_#]*(?:\*\*|__)?(?:AI|Final[ _]?Answer)(?:\*\*|__)?\s*[:：](?:\*\*|__)?[ \t]*",
                     re.IGNORECASE | re.MULTILINE)
_ACTION = re.compile(r"^[ \t>*_#]*(?:\*\*|__)?Action(?:\*\*|__)?\s*[:：]", re.IGNORECASE | re.MULTILINE)


def _input_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class Monologue:
    """Feed a run's events; get ``(field, text)`` deltas, ``field`` being ``"reasoning"`` or ``"content"``.

    ``mode``: ``"react"`` (the text protocol), ``"native"`` (native tool calls) or ``"planner"``.
    """

    def __init__(self, mode: str = "react"):
        self.mode = mode
        self.reasoning: list[str] = []
        self.content = ""          # the answer sent so far
        self._reply = ""           # the reply streaming now (depth 0)
        self._sent = 0             # how much of it went out
        self._answering = False    # past its final-answer marker
        self._in_reply = False
        self._reply_had_tokens = False

    # ---- events in, deltas out --------------------------------------------------------

    def feed(self, event: Any) -> list[tuple[str, str]]:
        kind = getattr(event, "kind", "")
        depth = getattr(event, "depth", 0)
        if kind == "token" and depth == 0:
            return self._token(event.text)
        out = self._end_reply() if kind != "answer" else []
        if kind == "answer":
            if depth == 0:
                out += self._answer(event.text)
            return out
        text = self._line(event, kind, depth)
        if text:
            out.append(self._reason(text))
        return out

    def _line(self, event: Any, kind: str, depth: int) -> str:
        pad = "  " * depth
        streamed = depth == 0 and self._reply_had_tokens and self.mode == "react"
        if kind == "thought":
            return "" if streamed else f"{pad}Thought: {event.text}\n"
        if kind == "action":
            if streamed:  # the reply said it already
                return ""
            return f"{pad}Action: {event.tool}\n{pad}Action Input: {_input_text(event.tool_input)}\n"
        if kind == "observation":
            self._reply_had_tokens = False if depth == 0 else self._reply_had_tokens
            lead = "" if self.reasoning and self.reasoning[-1].endswith("\n") else "\n"
            return f"{lead}{pad}Observation: {event.observation}\n"
        if kind == "error":
            return f"{pad}(the reply could not be read: {event.message})\n"
        return ""

    def _reason(self, text: str) -> tuple[str, str]:
        self.reasoning.append(text)
        return "reasoning", text

    def _token(self, text: str) -> list[tuple[str, str]]:
        if not self._in_reply:
            self._in_reply, self._reply, self._sent, self._answering = True, "", 0, False
            self._reply_had_tokens = True
        self._reply += text
        if self.mode == "planner":
            return self._say(text)
        if self.mode == "native":
            return []  # held: a thought or the answer, known when the reply ends
        if self._answering:
            return self._say(text)
        marker = _ANSWER.search(self._reply)
        if marker is not None and not _ACTION.search(self._reply, 0, marker.start()):
            out = []
            if marker.start() > self._sent:
                out.append(self._reason(self._reply[self._sent:marker.start()]))
            self._answering = True
            self._sent = len(self._reply)
            rest = self._reply[marker.end():]
            return out + (self._say(rest) if rest else [])
        safe = self._reply.rfind("\n") + 1  # hold the line being written: it may be the marker
        if safe > self._sent:
            piece, self._sent = self._reply[self._sent:safe], safe
            return [self._reason(piece)]
        return []

    def _say(self, text: str) -> list[tuple[str, str]]:
        if not self.content:
            text = text.lstrip()
        if not text:
            return []
        self.content += text
        return [("content", text)]

    def _end_reply(self) -> list[tuple[str, str]]:
        if not self._in_reply:
            return []
        self._in_reply = False
        if self.mode == "react" and not self._answering and self._sent < len(self._reply):
            piece, self._sent = self._reply[self._sent:], len(self._reply)
            return [self._reason(piece)]
        if self.mode == "native" and self._reply.strip():
            return [self._reason(self._reply.strip() + "\n")]
        return []

    def _answer(self, answer: str) -> list[tuple[str, str]]:
        """The run's answer: what was not streamed of it yet (the held reply of native mode, a fallback)."""
        out: list[tuple[str, str]] = []
        if self._in_reply and self.mode == "react" and not self._answering and self._sent < len(self._reply):
            out.append(self._reason(self._reply[self._sent:]))
        self._in_reply = False
        answer = (answer or "").strip()
        sent = self.content.strip()
        if not sent:
            return out + self._say(answer)
        if answer.startswith(sent):
            rest = answer[len(sent):]
            if self.content != self.content.rstrip():
                rest = rest.lstrip()
            return out + self._say(rest)
        return out + self._say("\n\n" + answer)  # the run answered otherwise than the reply that streamed

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning).strip()
